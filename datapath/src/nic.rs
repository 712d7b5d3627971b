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
//! TX: the transport's header descriptor ([`TxSegment`](crate::tx::TxSegment)) plus the flow's
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

mod config;
mod drops;
mod error;
mod flows;
mod memory;
mod rehome;
mod send;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;
mod wait;

pub use config::{
    DemuxMode, NicConfig, TxStrategy, MAX_FLOWS, MAX_FLOW_SOCKETS, MAX_PLACED_RANGES, MAX_REGIONS,
    MAX_SEGMENTS,
};
pub use error::NicError;
pub use wait::{wait_readable, EventFd, GROUP_WAIT_CAP};

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, MutexGuard};

pub use crate::rx::RxRecord;

use crate::checksum::ChecksumPolicy;
use crate::coalesce;
use crate::counters::RxCounters;
use crate::flow_table::{FlowId, FlowTable};
use crate::group::QueueGroup;
use crate::mr::MrTable;
use crate::rx::{self, RxStep};
use crate::steer::{self, Steering};
use crate::wire::{self, FlowKey};
use crate::xsk::{BoundMode, FlowSocket, PortCounters, RxFrameCount, XskPort};

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
    /// Flows put on the catch-all socket because `max_flow_sockets` flows
    /// of this queue already had their own.
    pub flow_sockets_capped: u64,
    /// Packets of flows another queue owns, copied to that queue's inbox.
    pub forwarded_out: u64,
    /// Packets other queues forwarded here, processed from the inbox.
    pub forwarded_in: u64,
    /// ACKs that covered a whole send work request whose memory TX
    /// descriptors still pointed at: its completion waited for them to
    /// come back on the completion ring (an optimistic or fast peer).
    pub tx_ack_before_completion: u64,
    /// Send completions handed out while a TX descriptor still pointed at
    /// their memory: checked where completions leave the datapath,
    /// independently of the retirement rule, so always 0 unless that rule
    /// breaks (the hostile suite requires 0).
    pub tx_completed_in_flight: u64,
    /// Send segments of removed flows whose memory TX descriptors still
    /// pointed at: the region stayed referenced (not deregistrable) until
    /// those descriptors completed.
    pub tx_held_on_close: u64,
    /// Records merged into the record before them by software GRO
    /// ([`Nic::poll_rx_batch`], [`crate::coalesce`]): `records` minus this
    /// is what the transport was handed.
    pub rx_coalesced: u64,
    /// Payload bytes copied from registered memory into TX frames (the
    /// copy strategy, and packets small enough to go out whole): the TX
    /// side's payload copies, retransmissions included.
    pub tx_payload_copied: u64,
    /// Payload bytes sent as fragments pointing into registered memory
    /// (the chain strategy): sent without a copy.
    pub tx_payload_chained: u64,
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
    listening: Vec<(IpAddr, u16)>,
    flows: FlowTable,
    pub(crate) mrs: MrTable,
    pub(crate) config: NicConfig,
    demux: DemuxMode,
    strategy: TxStrategy,
    pub(crate) counters: NicCounters,
    /// Send memory of removed flows still read by TX descriptors.
    held: memory::HeldSends,
    /// Work requests about to be retired whose memory was still read
    /// (reused by [`Nic::complete_send`]; at most a flow's segments).
    read_scratch: Vec<u64>,
    rr: usize,
    /// Packet capture, when on.
    pub(crate) tap: Option<Box<dyn crate::capture::FrameTap>>,
    /// How received TCP checksums are judged: partial ones are taken on a
    /// veth only ([`checksum_policy_of`]).
    checksum_policy: ChecksumPolicy,
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
        config.validate()?;
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
        Nic::check_open(group, &config)?;
        let ifname = group.steering().ifname().to_owned();
        let port = XskPort::open(&ifname, config.queue, &config.xsk)?;
        let checksum_policy = checksum_policy_of(&ifname);
        Nic::over_port(group, port, config, checksum_policy)
    }

    /// The checks of [`Nic::open_in`] that need no socket.
    fn check_open(group: &Arc<QueueGroup>, config: &NicConfig) -> Result<(), NicError> {
        config.validate()?;
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
        Ok(())
    }

    /// The datapath of queue `config.queue` over an opened `port`: the
    /// port goes into the queue's catch-all slot.
    fn over_port(
        group: &Arc<QueueGroup>,
        port: XskPort,
        config: NicConfig,
        checksum_policy: ChecksumPolicy,
    ) -> Result<Nic, NicError> {
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
            held: memory::HeldSends::default(),
            read_scratch: Vec::new(),
            rr: 0,
            tap: None,
            checksum_policy,
        })
    }

    /// How received TCP checksums are judged on this interface.
    pub fn checksum_policy(&self) -> ChecksumPolicy {
        self.checksum_policy
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

    /// Starts (`Some`) or stops packet capture: every frame received and
    /// sent goes to `tap` ([`crate::capture`]).
    pub fn set_tap(&mut self, tap: Option<Box<dyn crate::capture::FrameTap>>) {
        self.tap = tap;
    }

    /// Poll-loop counters.
    pub fn counters(&self) -> NicCounters {
        let mut counters = self.counters;
        // The flow table counts its refusals; they are the RX bucket.
        counters.rx.flow_table_full = self.flows.refused_full();
        counters
    }

    /// Socket-level counters of the port.
    pub fn port_counters(&self) -> PortCounters {
        self.port.counters()
    }

    /// Where this queue's RX frames are now: free, on the fill ring, or
    /// unread on the catch-all's or an open flow socket's RX ring. The
    /// total stays the same as flows come and go, except for frames the
    /// kernel is holding at that moment.
    pub fn rx_frame_count(&mut self) -> RxFrameCount {
        let mut count = self.port.rx_frame_count();
        for &i in &self.open_sockets {
            if let Some((_, sock)) = self.flow_sockets.get_mut(i).and_then(Option::as_mut) {
                count.rx += sock.rx_pending();
            }
        }
        count
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
            tap,
            checksum_policy,
            ..
        } = self;
        let mut rx = RxContext {
            flows,
            counters,
            sink,
            checksum_policy: *checksum_policy,
            tap: tap.as_deref_mut(),
            group: (group.queues() > 1).then_some((&**group, config.queue)),
        };
        let mut taken = 0;
        if let Some((group, queue)) = rx.group {
            // Take no more than this poll can process: frames beyond it
            // stay in the group's bounded inbox, not in an unbounded
            // backlog here.
            let allowed = room(rx.sink, budget) as usize;
            group.drain_inbox(queue, allowed.saturating_sub(inbox.len()), inbox);
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
                taken += port.drain_flow(sock, room.min(config.flow_rx_budget), |pkt, area| {
                    rx.handle(pkt.fragments(), area)
                });
            }
            *rr = (*rr + 1) % n;
        }
        // One refill (and wakeup) per poll, not one per flow socket: with
        // a thousand flows that was a thousand fill-ring checks (and
        // possible syscalls) per poll.
        let room = room(rx.sink, budget - taken);
        if room > 0 {
            taken += port.receive(room, |pkt, area| rx.handle(pkt.fragments(), area));
        } else {
            port.refill_and_wake();
        }
        taken
    }
}

impl Nic {
    /// [`poll_rx`](Self::poll_rx) into `records`, then software GRO over
    /// the records this poll appended ([`crate::coalesce`], bounded by
    /// [`NicConfig::rx_coalesce_bytes`], counted `rx_coalesced`). Returns
    /// the number of packets taken.
    pub fn poll_rx_batch(&mut self, budget: u32, records: &mut Vec<RxRecord>) -> u32 {
        let from = records.len();
        let taken = self.poll_rx(budget, records);
        self.counters.rx_coalesced +=
            coalesce::coalesce(records, from, self.config.rx_coalesce_bytes);
        taken
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

/// What the receive path of one poll needs.
struct RxContext<'a, S> {
    flows: &'a mut FlowTable,
    counters: &'a mut NicCounters,
    sink: &'a mut S,
    checksum_policy: ChecksumPolicy,
    tap: Option<&'a mut (dyn crate::capture::FrameTap + 'static)>,
    /// The group and this queue, when other queues exist to forward to.
    group: Option<(&'a QueueGroup, u32)>,
}

impl<S: RxSink> RxContext<'_, S> {
    fn handle(&mut self, fragments: &[&[u8]], area: &mut [u8]) {
        if let Some(tap) = self.tap.as_deref_mut() {
            tap.frame(crate::capture::Direction::Rx, fragments);
        }
        handle_packet(self, fragments, area);
    }
}

/// Parses, verifies and places one packet ([`rx::rx_step`]) and hands
/// its record to `sink`. A multi-buffer packet is parsed from its first
/// fragment (the headers always lie there) and its payload placed
/// straight from the fragments: the placement copy is the only one, for
/// jumbo frames too. A packet of a flow another queue of the group owns
/// is copied to that queue.
fn handle_packet<S: RxSink>(rx: &mut RxContext<'_, S>, fragments: &[&[u8]], area: &mut [u8]) {
    let RxContext {
        flows,
        counters,
        sink,
        checksum_policy,
        group,
        tap: _,
    } = rx;
    counters.rx_multi_buffer += u64::from(fragments.len() > 1);
    let group = *group;
    let owner_elsewhere = |key: &FlowKey| {
        let (group, queue) = group?;
        group.owner(key).filter(|&owner| owner != queue)
    };
    let step = rx::rx_step(
        flows,
        &mut counters.rx,
        fragments,
        area,
        *checksum_policy,
        owner_elsewhere,
    );
    match step {
        RxStep::Record(record) => {
            counters.records += 1;
            sink.push(record);
        }
        RxStep::Udp => counters.udp_dropped += 1,
        RxStep::Foreign { owner } => {
            if let Some((group, _)) = group {
                if group.forward(owner, fragments) {
                    counters.forwarded_out += 1;
                }
            }
        }
        RxStep::ParseError | RxStep::BadChecksum { .. } => {}
    }
}

/// [`ChecksumPolicy::AcceptPartial`] on a veth, whose frames never cross a
/// wire (a Linux sender's offloaded checksum arrives unfinished, and the
/// kernel's own receivers trust it), [`ChecksumPolicy::Verify`] on every
/// other device, and when the link type cannot be read.
fn checksum_policy_of(ifname: &str) -> ChecksumPolicy {
    let kind = crate::rtnl::Rtnl::open()
        .and_then(|mut r| r.link(ifname))
        .map(|l| l.kind);
    match kind {
        Ok(Some(k)) if k == "veth" => ChecksumPolicy::AcceptPartial,
        Ok(_) => ChecksumPolicy::Verify,
        Err(e) => {
            log::warn!("{ifname}: link type unknown ({e}); verifying every TCP checksum");
            ChecksumPolicy::Verify
        }
    }
}
