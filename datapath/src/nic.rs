//! The poll loop: one AF_XDP queue of one interface, its steering program,
//! and the NIC tables (memory regions, per-flow segment lists, flow table).
//!
//! RX, per packet: parse → look the flow up → place the payload at its
//! stream offset (the one copy, fused with the checksum verification) →
//! hand a fixed-size [`RxRecord`] (header + placement, no payload) to an
//! [`RxSink`] — a bounded SPSC queue to a transport thread, or a `Vec` in
//! run-to-completion mode → recycle the frame. When the sink is full the
//! loop stops taking packets off the rings (they wait there; nothing is
//! dropped by us).
//!
//! TX: the transport's header descriptor ([`TxSegment`]) plus the flow's
//! send segment list become one frame (payload copied next to the header)
//! or a multi-buffer chain (header frame + fragments pointing into the MR
//! area), as [`TxStrategy`] says.
//!
//! Flows get their own AF_XDP socket (shared UMEM) and an exact steering
//! entry. Where the kernel or driver refuses shared sockets, the port falls
//! back to steering every flow to the catch-all socket and demultiplexing
//! in software by 5-tuple; [`Nic::demux_mode`] says which is in force.
//!
//! Several queues of one interface: one `Nic` per queue, opened into one
//! [`QueueGroup`] (shared steering program, XSKMAP slots, flow owners).
//! A packet of a flow another queue owns is copied to that queue's inbox
//! and processed there (see [`crate::group`]).

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::{Arc, MutexGuard};

use crate::counters::RxCounters;
use crate::flow_table::{FlowId, FlowParams, FlowTable, FlowTableError};
use crate::group::{GroupError, QueueGroup};
use crate::mr::{Access, MrError, MrId, MrTable};
use crate::ms::{Completion, MsError};
use crate::payload::Payload;
use crate::placement::{self, FloorError, Placement, Verdict};
use crate::steer::{self, Proto, SteerError, Steering, XdpMode};
use crate::tx::{self, TxError, TxSegment};
use crate::wire::{self, Ecn, FlowKey, Parsed};
use crate::xsk::{BoundMode, FlowSocket, PortCounters, XskConfig, XskError, XskPort};
use proto::TcpHeader;

/// How payload goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStrategy {
    /// Copy the payload next to the header in one frame. Cheapest on
    /// copy-mode devices (veth), where the kernel copies anyway.
    Copy,
    /// Header frame plus fragments pointing into the MR area: zero-copy on
    /// devices bound in zero-copy mode. Needs `multi_buffer`.
    Chain,
}

/// Whether flows have sockets of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemuxMode {
    /// Each flow has its own AF_XDP socket and steering entry.
    PerFlowSockets,
    /// All flows arrive on the catch-all socket; demultiplexed by 5-tuple.
    SoftwareDemux,
}

/// Everything a [`Nic`] is opened with.
#[derive(Debug, Clone)]
pub struct NicConfig {
    /// AF_XDP sockets and UMEM.
    pub xsk: XskConfig,
    /// Native or generic XDP.
    pub xdp_mode: XdpMode,
    /// The receive queue to bind.
    pub queue: u32,
    /// Flow table capacity.
    pub max_flows: usize,
    /// Memory regions the application may register.
    pub max_regions: usize,
    /// Posted receive segments per flow.
    pub max_recv_segments: usize,
    /// Posted send segments per flow.
    pub max_send_segments: usize,
    /// Out-of-order ranges tracked per flow.
    pub max_placed_ranges: usize,
    /// Give each flow its own socket (else software demux from the start).
    pub flow_sockets: bool,
    /// TX strategy; `None` picks by bind mode: [`TxStrategy::Chain`] in
    /// zero-copy mode with multi-buffer on, else [`TxStrategy::Copy`].
    /// Packets larger than a frame always go as chains.
    pub tx_strategy: Option<TxStrategy>,
    /// Largest IP datagram to send.
    pub mtu: usize,
    /// RX packets taken from one flow socket per turn, for fairness.
    pub flow_rx_budget: u32,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            xsk: XskConfig::default(),
            xdp_mode: XdpMode::Native,
            queue: 0,
            max_flows: 1024,
            max_regions: 256,
            max_recv_segments: 256,
            max_send_segments: 256,
            max_placed_ranges: 64,
            flow_sockets: true,
            tx_strategy: None,
            mtu: 1500,
            flow_rx_budget: 32,
        }
    }
}

/// Errors of [`Nic`] operations.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    /// Loading, attaching or editing the steering program failed.
    #[error(transparent)]
    Steer(#[from] Box<SteerError>),
    /// An AF_XDP socket operation failed.
    #[error(transparent)]
    Xsk(#[from] XskError),
    /// The flow table refused.
    #[error(transparent)]
    Flow(#[from] FlowTableError),
    /// A memory region operation failed.
    #[error(transparent)]
    Mr(#[from] MrError),
    /// Posting or retiring a segment failed.
    #[error(transparent)]
    Ms(#[from] MsError),
    /// Advancing the placement floor failed.
    #[error(transparent)]
    Floor(#[from] FloorError),
    /// Building a packet failed.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// The flow id is stale or was never issued.
    #[error("no flow with id {0:?}")]
    UnknownFlow(FlowId),
    /// A configuration value is impossible.
    #[error("invalid datapath configuration: {0}")]
    Config(String),
}

impl From<GroupError> for NicError {
    fn from(e: GroupError) -> Self {
        match e {
            GroupError::Steer(e) => e.into(),
            e @ GroupError::Queues { .. } => NicError::Config(e.to_string()),
        }
    }
}

impl From<SteerError> for NicError {
    fn from(e: SteerError) -> Self {
        NicError::Steer(Box::new(e))
    }
}

/// One received TCP segment as the transport side sees it: header fields,
/// where the payload went, no payload. Fixed size and `Copy`, so it can
/// cross a bounded SPSC queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxRecord {
    /// The flow, if one is installed for this 5-tuple (else: a SYN for a
    /// listener, or a stray segment the transport answers with RST).
    pub flow: Option<FlowId>,
    /// 5-tuple from our side.
    pub key: FlowKey,
    /// Source MAC (the peer or its router).
    pub src_mac: [u8; 6],
    /// The TCP header, options included.
    pub header: TcpHeader,
    /// Payload length on the wire.
    pub payload_len: u32,
    /// What happened to the payload; `None` for segments of unknown flows
    /// (their payload was not placed anywhere).
    pub placement: Option<Placement>,
    /// ECN codepoint.
    pub ecn: Ecn,
}

/// Where received records go.
pub trait RxSink {
    /// How many more records fit now.
    fn room(&self) -> usize;
    /// Adds a record; only called while `room() > 0`.
    fn push(&mut self, record: RxRecord);
}

impl RxSink for Vec<RxRecord> {
    fn room(&self) -> usize {
        usize::MAX
    }
    fn push(&mut self, record: RxRecord) {
        Vec::push(self, record);
    }
}

impl RxSink for rtrb::Producer<RxRecord> {
    fn room(&self) -> usize {
        self.slots()
    }
    fn push(&mut self, record: RxRecord) {
        if rtrb::Producer::push(self, record).is_err() {
            // room() said there was a slot and only this thread produces.
            unreachable!("SPSC queue full after room() reported space");
        }
    }
}

/// A bounded SPSC queue for [`RxRecord`]s between a datapath thread and a
/// transport thread.
pub fn rx_queue(capacity: usize) -> (rtrb::Producer<RxRecord>, rtrb::Consumer<RxRecord>) {
    rtrb::RingBuffer::new(capacity)
}

/// Counters of the poll loop beyond the per-flow ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NicCounters {
    /// Parse errors, unknown flows and verdicts of packets that matched no
    /// flow (per-flow verdicts live in each flow's counters).
    pub rx: RxCounters,
    /// Records handed to the sink.
    pub records: u64,
    /// Multi-buffer packets (more than one fragment) parsed from their
    /// first fragment and placed straight from the fragments.
    pub rx_multi_buffer: u64,
    /// UDP datagrams that reached the TCP datapath (dropped).
    pub udp_dropped: u64,
    /// Flows that got their own socket.
    pub flow_sockets_opened: u64,
    /// Flows put on the catch-all socket because a socket of their own was
    /// refused or no slot was left.
    pub flow_sockets_refused: u64,
    /// Packets of flows another queue owns, copied to that queue's inbox.
    pub forwarded_out: u64,
    /// Packets other queues forwarded here, processed from the inbox.
    pub forwarded_in: u64,
}

/// The software NIC of one interface queue.
#[derive(Debug)]
pub struct Nic {
    // Field order matters for drop: sockets close before the program
    // detaches (when the last queue of the group goes).
    /// Per flow-table index: the flow's own socket and its XSKMAP slot.
    flow_sockets: Vec<Option<(u32, FlowSocket)>>,
    /// Indices of the open entries of `flow_sockets`: the poll loop visits
    /// these, not every entry (walking all of them cost 30 % of a zs↔zs
    /// transfer's CPU).
    open_sockets: Vec<usize>,
    pub(crate) port: XskPort,
    group: Arc<QueueGroup>,
    /// Frames other queues forwarded, not yet processed.
    inbox: VecDeque<Box<[u8]>>,
    /// Listen claims this queue holds in the group.
    listening: Vec<(Ipv4Addr, u16)>,
    flows: FlowTable,
    pub(crate) mrs: MrTable,
    pub(crate) config: NicConfig,
    demux: DemuxMode,
    strategy: TxStrategy,
    pub(crate) counters: NicCounters,
    rr: usize,
}

impl Nic {
    /// Attaches the steering program to `ifname`, opens the queue's socket
    /// and UMEM, and puts the socket in the queue's catch-all slot. The
    /// only datapath of the interface: packets arriving on other queues are
    /// not served (see [`Nic::open_in`]).
    ///
    /// # Errors
    /// Bad configuration, attach or socket failures (each names the
    /// interface and operation).
    pub fn open(ifname: &str, config: NicConfig) -> Result<Nic, NicError> {
        if config.queue >= steer::MAX_QUEUES {
            return Err(NicError::Config(format!(
                "queue {} is above the {} queues the steering program serves",
                config.queue,
                steer::MAX_QUEUES
            )));
        }
        let group = QueueGroup::attach(ifname, config.xdp_mode, config.queue + 1)?;
        Nic::open_in(&group, config)
    }

    /// Opens queue `config.queue` of the group's interface: its socket and
    /// UMEM, put in the queue's catch-all slot. One `Nic` per queue, each
    /// polled by its own thread.
    ///
    /// # Errors
    /// Bad configuration (the queue is outside the group, the MTU does
    /// not fit), or socket failures (each names the interface).
    pub fn open_in(group: &Arc<QueueGroup>, config: NicConfig) -> Result<Nic, NicError> {
        if config.queue >= group.queues() {
            return Err(NicError::Config(format!(
                "queue {} is outside the group's queues 0..{}",
                config.queue,
                group.queues()
            )));
        }
        if config.tx_strategy == Some(TxStrategy::Chain) && !config.xsk.multi_buffer {
            return Err(NicError::Config(
                "tx_strategy = chain needs multi_buffer = true".into(),
            ));
        }
        if config.mtu + wire::ETH_HEADER_LEN > config.xsk.umem.frame_size as usize
            && !config.xsk.multi_buffer
        {
            return Err(NicError::Config(format!(
                "mtu {} does not fit a {}-byte frame: enable multi_buffer",
                config.mtu, config.xsk.umem.frame_size
            )));
        }
        let ifname = group.steering().ifname().to_owned();
        let port = XskPort::open(&ifname, config.queue, &config.xsk)?;
        group.steering().set_socket(config.queue, port.fd())?;
        let strategy = config.tx_strategy.unwrap_or(
            if port.mode() == BoundMode::ZeroCopy && config.xsk.multi_buffer {
                TxStrategy::Chain
            } else {
                TxStrategy::Copy
            },
        );
        let demux = if config.flow_sockets {
            DemuxMode::PerFlowSockets
        } else {
            DemuxMode::SoftwareDemux
        };
        let flows = FlowTable::new(config.max_flows);
        let mrs = MrTable::new(port.umem().mr_len(), config.max_regions);
        Ok(Nic {
            flow_sockets: (0..config.max_flows).map(|_| None).collect(),
            open_sockets: Vec::new(),
            port,
            group: Arc::clone(group),
            inbox: VecDeque::new(),
            listening: Vec::new(),
            flows,
            mrs,
            config,
            demux,
            strategy,
            counters: NicCounters::default(),
            rr: 0,
        })
    }

    /// Per-flow sockets or software demux.
    pub fn demux_mode(&self) -> DemuxMode {
        self.demux
    }

    /// Copy or zero-copy bind.
    pub fn bind_mode(&self) -> BoundMode {
        self.port.mode()
    }

    /// The TX strategy in force for packets that fit one frame.
    pub fn tx_strategy(&self) -> TxStrategy {
        self.strategy
    }

    /// Poll-loop counters.
    pub fn counters(&self) -> NicCounters {
        self.counters
    }

    /// Socket-level counters of the port.
    pub fn port_counters(&self) -> PortCounters {
        self.port.counters()
    }

    /// The steering program (listen entries, counters), locked: other
    /// queues of the group wait while the guard lives.
    pub fn steering(&self) -> MutexGuard<'_, Steering> {
        self.group.steering()
    }

    /// The group of queues this datapath belongs to.
    pub fn group(&self) -> &Arc<QueueGroup> {
        &self.group
    }

    /// The receive queue this datapath serves.
    pub fn queue(&self) -> u32 {
        self.config.queue
    }

    /// Claims `(addr, port)` for TCP: SYNs and segments of flows without an
    /// entry of their own go to the catch-all socket instead of the kernel.
    ///
    /// # Errors
    /// The map update failed.
    pub fn listen(&mut self, addr: Ipv4Addr, port: u16) -> Result<(), NicError> {
        self.group.listen(addr, port)?;
        self.listening.push((addr, port));
        Ok(())
    }

    /// Gives `(addr, port)` back to the kernel.
    ///
    /// # Errors
    /// The map update failed.
    pub fn unlisten(&mut self, addr: Ipv4Addr, port: u16) -> Result<(), NicError> {
        let Some(i) = self.listening.iter().position(|&l| l == (addr, port)) else {
            return Ok(());
        };
        self.listening.swap_remove(i);
        self.group.unlisten(addr, port)?;
        Ok(())
    }

    /// Installs a flow: flow-table entry, its own socket where possible,
    /// and an exact steering entry.
    ///
    /// # Errors
    /// The flow table is full or has the key, or a map update failed.
    pub fn add_flow(
        &mut self,
        key: FlowKey,
        local_mac: [u8; 6],
        remote_mac: [u8; 6],
        irs: u32,
        iss: u32,
    ) -> Result<FlowId, NicError> {
        let mut params = FlowParams {
            key,
            local_mac,
            remote_mac,
            irs,
            iss,
            socket: self.config.queue,
            max_recv_segments: self.config.max_recv_segments,
            max_send_segments: self.config.max_send_segments,
            max_placed_ranges: self.config.max_placed_ranges,
        };
        // Reserve the flow's slot first: the flow table index decides it.
        let id = self.flows.insert(&params)?;
        let index = id.index() as usize;
        let slot = if self.demux == DemuxMode::PerFlowSockets && index < self.flow_sockets.len() {
            self.group.take_slot()
        } else {
            None
        };
        if let Some(slot) = slot {
            match self.port.open_flow_socket() {
                Ok(sock) => {
                    if let Err(e) = self.group.steering().set_socket(slot, sock.fd()) {
                        self.group.put_slot(slot);
                        self.flows.remove(id);
                        return Err(e.into());
                    }
                    params.socket = slot;
                    self.flow_sockets[index] = Some((slot, sock));
                    self.open_sockets.push(index);
                    self.counters.flow_sockets_opened += 1;
                }
                Err(e) => {
                    self.group.put_slot(slot);
                    log::warn!(
                        "{}: per-flow socket refused ({e}); switching to software demux",
                        self.port.ifname()
                    );
                    self.demux = DemuxMode::SoftwareDemux;
                    self.counters.flow_sockets_refused += 1;
                }
            }
        } else {
            self.counters.flow_sockets_refused +=
                u64::from(self.demux == DemuxMode::PerFlowSockets);
        }
        if let Some(flow) = self.flows.get_mut(id) {
            flow.socket = params.socket;
        }
        self.group.set_owner(key, self.config.queue);
        let inserted =
            self.group
                .steering()
                .insert_flow(&steer_key(&key), params.socket, self.config.queue);
        if let Err(e) = inserted {
            self.remove_flow(id).ok();
            return Err(e.into());
        }
        Ok(id)
    }

    /// Removes a flow: steering entry, socket, table entry; releases the
    /// references its posted segments held on memory regions. Posted work
    /// requests are dropped without completion.
    ///
    /// # Errors
    /// Unknown flow, or a map update failed (the flow is removed anyway).
    pub fn remove_flow(&mut self, id: FlowId) -> Result<(), NicError> {
        let flow = self.flows.remove(id).ok_or(NicError::UnknownFlow(id))?;
        for seg in flow.recv.segments().chain(flow.send.segments()) {
            self.mrs.release(seg.mr).ok();
        }
        let index = id.index() as usize;
        let socket = self.flow_sockets.get_mut(index).and_then(Option::take);
        if socket.is_some() {
            self.open_sockets.retain(|&i| i != index);
        }
        self.group.clear_owner(&flow.key, self.config.queue);
        let mut steering = self.group.steering();
        let mut result = steering
            .remove_flow(&steer_key(&flow.key))
            .map_err(NicError::from);
        if let Some((slot, sock)) = socket {
            let cleared = steering.clear_socket(slot).map_err(NicError::from);
            drop(sock);
            self.group.put_slot(slot);
            result = result.and(cleared);
        }
        result
    }

    /// Sets the peer's initial sequence number of a flow installed before
    /// it was known (active open: the flow is installed with the SYN, the
    /// peer's ISN arrives with the SYN-ACK). Only valid before any payload
    /// was placed.
    ///
    /// # Errors
    /// Unknown flow, or payload was already placed with the old mapping.
    pub fn set_irs(&mut self, id: FlowId, irs: u32) -> Result<(), NicError> {
        let f = self.flows.get_mut(id).ok_or(NicError::UnknownFlow(id))?;
        if f.floor() > 0 || !f.placed.is_empty() {
            return Err(NicError::Config(format!(
                "flow {id:?}: cannot change the receive ISN after payload was placed"
            )));
        }
        f.irs = irs;
        Ok(())
    }

    /// Looks up a flow by 5-tuple.
    pub fn flow_id(&self, key: &FlowKey) -> Option<FlowId> {
        self.flows.lookup(key)
    }

    /// A flow's state (counters, floor, posted segments).
    pub fn flow(&self, id: FlowId) -> Option<&crate::flow_table::FlowState> {
        self.flows.get(id)
    }

    /// Registers `len` bytes of the MR area (first fit, 64-byte aligned).
    ///
    /// # Errors
    /// No space left, or the region table is full.
    pub fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, NicError> {
        let offset = self.mrs.allocate(len, 64)?;
        Ok(self.mrs.register(offset, len, access)?)
    }

    /// Deregisters a region no posted segment references.
    ///
    /// # Errors
    /// Unknown region, or segments still reference it.
    pub fn deregister_memory(&mut self, mr: MrId) -> Result<(), NicError> {
        Ok(self.mrs.deregister(mr)?)
    }

    /// A registered region's bytes.
    ///
    /// # Errors
    /// Unknown region.
    pub fn memory(&self, mr: MrId) -> Result<&[u8], NicError> {
        let (off, len) = self.mrs.extent(mr)?;
        Ok(&self.port.umem().mr()[off..off + len])
    }

    /// A registered region's bytes, writable (to fill send buffers).
    ///
    /// # Errors
    /// Unknown region.
    pub fn memory_mut(&mut self, mr: MrId) -> Result<&mut [u8], NicError> {
        let (off, len) = self.mrs.extent(mr)?;
        Ok(&mut self.port.umem_mut().mr_mut()[off..off + len])
    }

    /// Posts receive space: `len` bytes at `offset` of `mr` become the next
    /// part of the flow's receive stream. Returns the stream range.
    ///
    /// # Errors
    /// Unknown flow, region, bounds or access; the list is full.
    pub fn post_recv(
        &mut self,
        flow: FlowId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<std::ops::Range<u64>, NicError> {
        let f = self
            .flows
            .get_mut(flow)
            .ok_or(NicError::UnknownFlow(flow))?;
        Ok(f.recv.post(&mut self.mrs, mr, offset, len, wr_id)?)
    }

    /// Posts payload to send: `len` bytes at `offset` of `mr` become the
    /// next part of the flow's send stream. Returns the stream range.
    ///
    /// # Errors
    /// Unknown flow, region, bounds or access; the list is full.
    pub fn post_send(
        &mut self,
        flow: FlowId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<std::ops::Range<u64>, NicError> {
        let f = self
            .flows
            .get_mut(flow)
            .ok_or(NicError::UnknownFlow(flow))?;
        Ok(f.send.post(&mut self.mrs, mr, offset, len, wr_id)?)
    }

    /// The transport's in-order point reached `upto`: retire receive
    /// segments ending at or before it (no further writes) and then append
    /// their completions to `out`.
    ///
    /// # Errors
    /// Unknown flow; `upto` beyond the posted end or over bytes never placed.
    pub fn complete_recv(
        &mut self,
        flow: FlowId,
        upto: u64,
        out: &mut Vec<Completion>,
    ) -> Result<(), NicError> {
        let f = self
            .flows
            .get_mut(flow)
            .ok_or(NicError::UnknownFlow(flow))?;
        out.extend(placement::advance_floor(f, &mut self.mrs, upto)?);
        Ok(())
    }

    /// The peer acknowledged the send stream up to `upto`: complete send
    /// segments ending at or before it.
    ///
    /// # Errors
    /// Unknown flow, or `upto` beyond what was posted.
    pub fn complete_send(
        &mut self,
        flow: FlowId,
        upto: u64,
        out: &mut Vec<Completion>,
    ) -> Result<(), NicError> {
        let f = self
            .flows
            .get_mut(flow)
            .ok_or(NicError::UnknownFlow(flow))?;
        out.extend(f.send.retire_through(&mut self.mrs, upto)?);
        Ok(())
    }

    /// Receives up to `budget` packets — frames other queues forwarded
    /// first, then per-flow sockets in turn, then the catch-all — placing
    /// payloads and handing records to `sink`. Takes no more packets than
    /// `sink` has room for. Returns the number of packets taken.
    pub fn poll_rx<S: RxSink>(&mut self, budget: u32, sink: &mut S) -> u32 {
        let Nic {
            flow_sockets,
            open_sockets,
            port,
            group,
            inbox,
            flows,
            counters,
            rr,
            config,
            ..
        } = self;
        let mut rx = RxContext {
            flows,
            counters,
            sink,
            group: (group.queues() > 1).then_some((&**group, config.queue)),
        };
        let mut taken = 0;
        if let Some((group, queue)) = rx.group {
            group.drain_inbox(queue, inbox);
            let area = port.umem_mut().mr_mut();
            while room(rx.sink, budget - taken) > 0 {
                let Some(frame) = inbox.pop_front() else {
                    break;
                };
                rx.counters.forwarded_in += 1;
                rx.handle(&[&frame], area);
                taken += 1;
            }
        }
        let n = open_sockets.len();
        if n > 0 {
            for step in 0..n {
                let i = open_sockets[(*rr + step) % n];
                let Some((_, sock)) = flow_sockets.get_mut(i).and_then(Option::as_mut) else {
                    continue;
                };
                let room = room(rx.sink, budget - taken);
                if room == 0 {
                    break;
                }
                taken += port.receive_flow(sock, room.min(config.flow_rx_budget), |pkt, area| {
                    rx.handle(pkt.fragments(), area)
                });
            }
            *rr = (*rr + 1) % n;
        }
        let room = room(rx.sink, budget - taken);
        if room > 0 {
            taken += port.receive(room, |pkt, area| rx.handle(pkt.fragments(), area));
        }
        taken
    }

    /// Builds and queues one segment of `flow`. Returns `false` when no TX
    /// frame or ring slot was free (call [`Nic::flush`] and retry).
    ///
    /// # Errors
    /// Unknown flow, or the builder refused the segment (payload not
    /// posted, too large for the MTU, options too long).
    pub fn send(&mut self, flow: FlowId, seg: &TxSegment) -> Result<bool, NicError> {
        let f = self
            .flows
            .get_mut(flow)
            .ok_or(NicError::UnknownFlow(flow))?;
        let mtu = self.config.mtu;
        let payload = seg.payload.as_ref().map_or(0, |r| r.end - r.start) as usize;
        let frame_room = self.port.umem().frame_size() as usize;
        let chain = self.strategy == TxStrategy::Chain
            || wire::ETH_HEADER_LEN + 60 + 40 + payload > frame_room;
        let mut err = None;
        let queued = if chain {
            self.port.transmit_chain(|frame, area, parts| {
                match tx::build_chain(f, seg, area, mtu, frame) {
                    Ok(c) => {
                        parts.extend_from_slice(c.fragments());
                        c.header_len
                    }
                    Err(e) => {
                        err = Some(e);
                        0
                    }
                }
            })?
        } else {
            self.port.transmit(
                |frame, area| match tx::build_copy(f, seg, area, mtu, frame) {
                    Ok(len) => len,
                    Err(e) => {
                        err = Some(e);
                        0
                    }
                },
            )?
        };
        match err {
            Some(e) => Err(e.into()),
            None => Ok(queued),
        }
    }

    /// Puts queued packets on the TX ring, kicks the kernel, and reclaims
    /// completed frames. Returns descriptors submitted.
    pub fn flush(&mut self) -> u32 {
        self.port.flush()
    }

    /// Packets queued or in flight on the TX path.
    pub fn tx_in_flight(&self) -> usize {
        self.port.tx_in_flight()
    }
}

impl Drop for Nic {
    /// Gives back what this queue holds in the group — listen claims,
    /// flows' steering entries, owners and slots, the catch-all slot — so
    /// the other queues (and the kernel) carry on without it. The program
    /// itself detaches with the group's last queue.
    fn drop(&mut self) {
        for (addr, port) in std::mem::take(&mut self.listening) {
            self.group.unlisten(addr, port).ok();
        }
        let ids: Vec<FlowId> = self.flows.ids().collect();
        for id in ids {
            self.remove_flow(id).ok();
        }
        self.group.steering().clear_socket(self.config.queue).ok();
    }
}

fn room<S: RxSink>(sink: &S, budget: u32) -> u32 {
    sink.room().min(budget as usize) as u32
}

fn steer_key(key: &FlowKey) -> steer::SteerKey {
    steer::SteerKey {
        flow: *key,
        proto: Proto::Tcp,
    }
}

/// What the receive path of one poll needs.
struct RxContext<'a, S> {
    flows: &'a mut FlowTable,
    counters: &'a mut NicCounters,
    sink: &'a mut S,
    /// The group and this queue, when other queues exist to forward to.
    group: Option<(&'a QueueGroup, u32)>,
}

impl<S: RxSink> RxContext<'_, S> {
    fn handle(&mut self, fragments: &[&[u8]], area: &mut [u8]) {
        handle_packet(self, fragments, area);
    }
}

/// Parses, verifies and places one packet and hands its record to `sink`.
/// A multi-buffer packet is parsed from its first fragment (the headers
/// always lie there) and its payload placed straight from the fragments:
/// the placement copy is the only one, for jumbo frames too. A packet of
/// a flow another queue of the group owns is copied to that queue.
fn handle_packet<S: RxSink>(rx: &mut RxContext<'_, S>, fragments: &[&[u8]], area: &mut [u8]) {
    let RxContext {
        flows,
        counters,
        sink,
        group,
    } = rx;
    let len = fragments.iter().map(|f| f.len()).sum();
    let head = fragments.first().copied().unwrap_or_default();
    counters.rx_multi_buffer += u64::from(fragments.len() > 1);
    let seg = match wire::parse_head(head, len) {
        Ok(Parsed::Tcp(seg)) => seg,
        Ok(Parsed::Udp(_)) => {
            counters.udp_dropped += 1;
            return;
        }
        Err(e) => {
            counters.rx.count_parse_error(&e);
            return;
        }
    };
    let flow = flows.lookup(&seg.key);
    let placement = match flow.and_then(|id| flows.get_mut(id)) {
        Some(state) => {
            let p = placement::place_parts(state, &seg, fragments, area);
            if p.verdict == Verdict::BadChecksum {
                return;
            }
            Some(p)
        }
        None => {
            if let Some((group, queue)) = *group {
                match group.owner(&seg.key) {
                    Some(owner) if owner != queue => {
                        if group.forward(owner, fragments) {
                            counters.forwarded_out += 1;
                        }
                        return;
                    }
                    _ => {}
                }
            }
            // Unknown flow: verify the checksum without placing anything.
            let verifies = Payload::in_fragments(fragments, seg.payload_range())
                .is_some_and(|p| seg.header_sum.then(p.sum(0..p.len())).verifies());
            if !verifies {
                counters.rx.count_verdict(Verdict::BadChecksum);
                return;
            }
            counters.rx.unknown_flow += 1;
            None
        }
    };
    counters.records += 1;
    sink.push(RxRecord {
        flow,
        key: seg.key,
        src_mac: seg.src_mac,
        header: seg.header,
        payload_len: seg.payload_len,
        placement,
        ecn: seg.ecn,
    });
}
