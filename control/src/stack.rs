//! The control stack: the datapath ([`Nic`]), the application's memory and
//! work requests on the calling thread, and every connection's header-only
//! TCP ([`TcpConnection`]) either in the same loop (run-to-completion) or
//! on a transport thread of its own, pinned to another core and fed over
//! bounded SPSC queues (dedicated; see [`Threads`]). Payload memory never
//! leaves the calling thread: only headers, events and state cross.
//!
//! The provider API follows RDMA verbs loosely: the application registers
//! memory ([`Stack::register_memory`]), posts receive space and payload to
//! send as work requests ([`Stack::post_recv`], [`Stack::post_send`]) and
//! learns their fate from a completion queue ([`Stack::poll_completion`],
//! [`Stack::wait_completion`]). A receive work request completes when every
//! byte of it arrived in order; bytes below [`Stack::received`] are final
//! even before their buffer completes (nothing writes below the placement
//! floor), so a stream reader may consume them early. A send work request
//! completes when the peer acknowledged all of it.
//!
//! Per iteration ([`Stack::poll`]): receive a batch (payload placed by the
//! datapath, header records out), feed each record to its connection or to
//! a listener, run due timers, send what the connections want sent (holding
//! paced segments until their departure time), and turn connection events
//! into datapath retirements and completions.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use datapath::flow_table::FlowId;
use datapath::group::QueueGroup;
use datapath::mr::{Access, MrId};
use datapath::ms;
use datapath::nic::{Nic, NicConfig, NicCounters, NicError, RxRecord};
use datapath::tx::TxSegment;
use datapath::wire::FlowKey;
use proto::Flags;
use transports::segment::{CloseReason, Event, SegmentIn, SegmentOut};
use transports::tcp::{State, TcpConfig, TcpConnection};
use transports::Instant;

use crate::engine::{Engine, EngineThread, Input, Output};
use crate::idle::Backoff;
use crate::idmap::ConnMap;
use crate::in_order::{Applied, InOrder};
use crate::netinfo::{self, NetInfoError, ReservedPorts};

/// Most packets one [`Stack::poll`] takes off the receive rings. It must
/// outrun what one poll sends: a sender whose window releases hundreds of
/// segments per poll gets an ACK for every second one back, and ACKs left
/// on a full ring are dropped by the kernel.
const RX_BATCH: u32 = 1024;

/// Everything a [`Stack`] is built from.
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// The datapath.
    pub nic: NicConfig,
    /// Every connection's TCP.
    pub tcp: TcpConfig,
    /// Local ports for outgoing connections.
    pub ephemeral_ports: RangeInclusive<u16>,
    /// Tell the kernel not to use the ephemeral range
    /// (`net.ipv4.ip_local_reserved_ports`), restored on drop.
    pub reserve_ports: bool,
    /// Most connections waiting in one listener's accept queue.
    pub backlog: usize,
    /// How long to wait for ARP when connecting.
    pub arp_timeout: Duration,
    /// Where the transport runs.
    pub threads: Threads,
}

/// Where the header-only TCP runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Threads {
    /// In the datapath's loop, on the calling thread.
    #[default]
    RunToCompletion,
    /// On a transport thread of its own, busy-polling two bounded SPSC
    /// queues (`queue` entries each way), pinned to `transport_core` when
    /// given; the calling thread runs the datapath and the application.
    Dedicated {
        /// Core to pin the calling thread (the datapath and the
        /// application) to.
        datapath_core: Option<usize>,
        /// Core to pin the transport thread to.
        transport_core: Option<usize>,
        /// Capacity of each queue.
        queue: usize,
    },
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            nic: NicConfig::default(),
            tcp: TcpConfig::default(),
            ephemeral_ports: 40000..=40999,
            reserve_ports: true,
            backlog: 128,
            arp_timeout: Duration::from_secs(2),
            threads: Threads::RunToCompletion,
        }
    }
}

/// Errors of stack operations.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The datapath refused.
    #[error(transparent)]
    Nic(#[from] NicError),
    /// Reading the kernel's tables failed.
    #[error(transparent)]
    NetInfo(#[from] NetInfoError),
    /// The TCP configuration is invalid.
    #[error("TCP configuration: {0}")]
    Tcp(String),
    /// No connection with that id (closed, or never opened).
    #[error("no connection {0:?}")]
    UnknownConnection(ConnId),
    /// Every ephemeral port is in use.
    #[error("all ephemeral ports {0:?} are in use")]
    PortsExhausted(RangeInclusive<u16>),
    /// The kernel already serves this port.
    #[error("port {0} is already owned by a kernel socket in this namespace")]
    PortOwned(u16),
    /// Reserving the ephemeral ports from the kernel failed.
    #[error("reserving ports {range:?} from the kernel: {source}")]
    ReservePorts {
        /// The range.
        range: RangeInclusive<u16>,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Not listening on that port.
    #[error("not listening on port {0}")]
    NotListening(u16),
    /// The transport thread could not be started.
    #[error("starting the transport thread: {source}")]
    Thread {
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// No interface of that name in this network namespace.
    #[error("no network interface named {0:?} in this network namespace")]
    NoSuchInterface(String),
    /// The set of queues to serve is impossible.
    #[error("serving queues: {0}")]
    Queues(String),
    /// Starting the stack of one queue of several failed.
    #[error("queue {queue}: {source}")]
    OnQueue {
        /// The queue.
        queue: u32,
        /// What failed.
        source: Box<StackError>,
    },
}

pub use crate::idmap::ConnId;

/// What completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionKind {
    /// A receive work request is full of in-order bytes.
    Recv,
    /// A send work request is acknowledged.
    Send,
    /// The handshake completed (active or passive open).
    Connected,
    /// The peer sent FIN after `len` stream bytes.
    PeerClosed {
        /// Receive-stream length.
        len: u64,
    },
    /// The connection ended; its id is no longer valid after this.
    Closed(CloseReason),
}

/// An entry of the completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The connection.
    pub conn: ConnId,
    /// What completed.
    pub kind: CompletionKind,
    /// The work request's id (`Recv`/`Send`), else 0.
    pub wr_id: u64,
    /// Bytes of the work request (`Recv`/`Send`), else 0.
    pub len: u64,
}

/// Stack-level counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackCounters {
    /// Connections accepted from a listener.
    pub accepted: u64,
    /// Connections opened actively.
    pub connected: u64,
    /// SYNs refused: malformed, backlog full, or the flow table full.
    pub syn_refused: u64,
    /// Segments for no connection and no listener (dropped).
    pub stray_segments: u64,
    /// Segments the datapath refused to build (a transport bug; dropped).
    pub tx_refused: u64,
    /// Retirements the datapath refused (a transport bug; logged).
    pub retire_refused: u64,
    /// Segments handed to a transport (each a fixed-size [`SegmentIn`]:
    /// header fields and a stream range, no payload bytes).
    pub segments_to_transport: u64,
    /// Bytes of those records: what actually crossed from the datapath to
    /// the transport. Compare with the payload bytes the datapath placed.
    pub bytes_to_transport: u64,
    /// Retransmitted segments of connections that have closed.
    pub closed_retransmits: u64,
    /// Retransmission timeouts of connections that have closed.
    pub closed_rtos: u64,
}

/// What the datapath side knows of a connection; the TCP itself lives in
/// the engine (inline or on its thread) and mirrors its state here.
#[derive(Debug)]
struct Conn {
    flow: FlowId,
    local_port: u16,
    /// The listener that accepted it, for the accept queue.
    listener: Option<u16>,
    received: u64,
    acked: u64,
    closed: bool,
    state: State,
    retransmits: u64,
    rtos: u64,
}

impl Conn {
    fn new(flow: FlowId, local_port: u16, listener: Option<u16>, state: State) -> Conn {
        Conn {
            flow,
            local_port,
            listener,
            received: 0,
            acked: 0,
            closed: false,
            state,
            retransmits: 0,
            rtos: 0,
        }
    }
}

/// The transport, inline or on its own thread.
#[derive(Debug)]
enum EngineMode {
    Inline(Engine),
    Thread(EngineThread),
}

/// The run-to-completion control stack on one interface queue.
#[derive(Debug)]
pub struct Stack {
    conns: ConnMap<Conn>,
    nic: Nic,
    listeners: HashMap<u16, VecDeque<ConnId>>,
    cq: VecDeque<Completion>,
    epoch: std::time::Instant,
    ifname: String,
    local_ip: Ipv4Addr,
    prefix: u8,
    local_mac: [u8; 6],
    next_port: u16,
    rng: u64,
    records: Vec<RxRecord>,
    retired: Vec<ms::Completion>,
    closed: Vec<ConnId>,
    engine: EngineMode,
    /// Per-reason RX drop counts of flows that have been removed.
    closed_drops: std::collections::BTreeMap<&'static str, u64>,
    /// Outputs of the inline engine, handled after it ran.
    outputs: Vec<Output>,
    /// Outputs waiting behind a segment that found the TX ring full.
    waiting: InOrder<Output>,
    counters: StackCounters,
    config: StackConfig,
    /// Yields the core after a run of idle polls.
    backoff: Backoff,
    _reserved: Option<ReservedPorts>,
}

impl Stack {
    /// Starts a stack on `ifname` (in the calling thread's namespace):
    /// attaches the steering program, opens the queue's socket, learns the
    /// interface's address and MAC, and reserves the ephemeral ports.
    ///
    /// # Errors
    /// Bad configuration, no such interface, attach or socket failures.
    pub fn new(ifname: &str, config: StackConfig) -> Result<Stack, StackError> {
        Stack::build(ifname, config, |nic| Nic::open(ifname, nic))
    }

    /// Starts a stack on one queue (`config.nic.queue`) of a group whose
    /// other queues run stacks of their own, on other threads (see
    /// [`crate::shards`]). Flows stay on the queue that opened them;
    /// packets of theirs arriving elsewhere are handed over by the group.
    ///
    /// # Errors
    /// As [`Stack::new`].
    pub fn new_in(group: &Arc<QueueGroup>, config: StackConfig) -> Result<Stack, StackError> {
        let ifname = group.steering().ifname().to_owned();
        Stack::build(&ifname, config, |nic| Nic::open_in(group, nic))
    }

    fn build(
        ifname: &str,
        config: StackConfig,
        open: impl FnOnce(NicConfig) -> Result<Nic, NicError>,
    ) -> Result<Stack, StackError> {
        config
            .tcp
            .validate()
            .map_err(|e| StackError::Tcp(e.to_string()))?;
        datapath::raw::ifindex(ifname)
            .map_err(|_| StackError::NoSuchInterface(ifname.to_string()))?;
        let (local_ip, prefix) = netinfo::ipv4_address(ifname)?;
        let local_mac = netinfo::mac_address(ifname)?;
        let nic = open(config.nic.clone())?;
        let reserved = if config.reserve_ports {
            Some(
                ReservedPorts::reserve(&config.ephemeral_ports).map_err(|source| {
                    StackError::ReservePorts {
                        range: config.ephemeral_ports.clone(),
                        source,
                    }
                })?,
            )
        } else {
            None
        };
        let epoch = std::time::Instant::now();
        let engine = match config.threads {
            Threads::RunToCompletion => EngineMode::Inline(Engine::default()),
            Threads::Dedicated {
                datapath_core,
                transport_core,
                queue,
            } => {
                if let Some(id) = datapath_core {
                    if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                        log::warn!("could not pin the datapath thread to core {id}");
                    }
                }
                EngineMode::Thread(
                    EngineThread::spawn(transport_core, queue.max(16), epoch)
                        .map_err(|source| StackError::Thread { source })?,
                )
            }
        };
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32;
        Ok(Stack {
            conns: ConnMap::default(),
            nic,
            listeners: HashMap::new(),
            cq: VecDeque::new(),
            epoch,
            ifname: ifname.to_string(),
            local_ip,
            prefix,
            local_mac,
            next_port: *config.ephemeral_ports.start(),
            rng: seed | 1,
            records: Vec::with_capacity(512),
            retired: Vec::new(),
            closed: Vec::new(),
            engine,
            closed_drops: Default::default(),
            outputs: Vec::new(),
            waiting: InOrder::default(),
            counters: StackCounters::default(),
            config,
            backoff: Backoff::default(),
            _reserved: reserved,
        })
    }

    /// The stack's clock: nanoseconds since it started.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The interface's IPv4 address.
    pub fn local_ip(&self) -> Ipv4Addr {
        self.local_ip
    }

    /// Stack counters.
    pub fn counters(&self) -> StackCounters {
        self.counters
    }

    /// TCP retransmissions and retransmission timeouts of every connection
    /// this stack has had, open or closed.
    pub fn retransmissions(&self) -> (u64, u64) {
        let open = self
            .conns
            .values()
            .fold((0, 0), |(r, t), c| (r + c.retransmits, t + c.rtos));
        (
            self.counters.closed_retransmits + open.0,
            self.counters.closed_rtos + open.1,
        )
    }

    /// Packets the datapath dropped (or kept only in part), by reason, over
    /// every flow this stack has had and the poll loop itself; only
    /// non-zero reasons.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let mut all = self.closed_drops.clone();
        for c in self.conns.values() {
            if let Some(f) = self.nic.flow(c.flow) {
                for (name, n) in f.counters.iter().filter(|(name, _)| is_drop(name)) {
                    *all.entry(name).or_default() += n;
                }
            }
        }
        for (name, n) in self
            .nic
            .counters()
            .rx
            .iter()
            .filter(|(name, _)| is_drop(name))
        {
            *all.entry(name).or_default() += n;
        }
        *all.entry("stray_segment").or_default() += self.counters.stray_segments;
        *all.entry("syn_refused").or_default() += self.counters.syn_refused;
        all.into_iter().filter(|(_, n)| *n > 0).collect()
    }

    /// Payload bytes the datapath placed into posted memory, over every
    /// open connection.
    pub fn payload_bytes_placed(&self) -> u64 {
        self.conns
            .values()
            .filter_map(|c| self.nic.flow(c.flow))
            .map(|f| f.counters.bytes_placed)
            .sum()
    }

    /// Datapath counters.
    pub fn nic_counters(&self) -> NicCounters {
        self.nic.counters()
    }

    /// The datapath, for inspection.
    pub fn nic(&self) -> &Nic {
        &self.nic
    }

    fn random_u32(&mut self) -> u32 {
        // xorshift64*: ISNs need to be unpredictable to off-path attackers
        // (RFC 6528); a keyed hash of the 4-tuple would be better.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    /// Registers `len` bytes of application memory inside the UMEM.
    ///
    /// # Errors
    /// No space left in the MR area, or the region table is full.
    pub fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, StackError> {
        Ok(self.nic.register_memory(len, access)?)
    }

    /// Deregisters a region no posted work request references any more.
    ///
    /// # Errors
    /// Unknown region, or work requests still reference it.
    pub fn deregister_memory(&mut self, mr: MrId) -> Result<(), StackError> {
        Ok(self.nic.deregister_memory(mr)?)
    }

    /// A registered region's bytes.
    ///
    /// # Errors
    /// Unknown region.
    pub fn memory(&self, mr: MrId) -> Result<&[u8], StackError> {
        Ok(self.nic.memory(mr)?)
    }

    /// A registered region's bytes, writable.
    ///
    /// # Errors
    /// Unknown region.
    pub fn memory_mut(&mut self, mr: MrId) -> Result<&mut [u8], StackError> {
        Ok(self.nic.memory_mut(mr)?)
    }

    /// Accepts TCP connections to `port` on the interface's address.
    ///
    /// # Errors
    /// The kernel already listens there, or the steering map update failed.
    pub fn listen(&mut self, port: u16) -> Result<(), StackError> {
        if netinfo::kernel_listens_on(port)? {
            return Err(StackError::PortOwned(port));
        }
        self.nic.listen(self.local_ip, port)?;
        self.listeners.entry(port).or_default();
        Ok(())
    }

    /// The next established connection of the listener on `port`.
    ///
    /// # Errors
    /// Not listening on `port`.
    pub fn accept(&mut self, port: u16) -> Result<Option<ConnId>, StackError> {
        Ok(self
            .listeners
            .get_mut(&port)
            .ok_or(StackError::NotListening(port))?
            .pop_front())
    }

    /// Opens a connection to `remote`; a [`CompletionKind::Connected`] (or
    /// `Closed(Refused)`) completion follows.
    ///
    /// # Errors
    /// No route or ARP answer, no free port, the flow table is full.
    pub fn connect(&mut self, remote: SocketAddrV4) -> Result<ConnId, StackError> {
        let hop = netinfo::next_hop(&self.ifname, self.local_ip, self.prefix, *remote.ip())?;
        let remote_mac =
            netinfo::resolve_neighbour(&self.ifname, self.local_ip, hop, self.config.arp_timeout)?;
        let range = self.config.ephemeral_ports.clone();
        let span = u32::from(*range.end() - *range.start()) + 1;
        let mut port = None;
        for _ in 0..span {
            let p = self.next_port;
            self.next_port = if p >= *range.end() {
                *range.start()
            } else {
                p + 1
            };
            if !self.conns.values().any(|c| c.local_port == p) {
                port = Some(p);
                break;
            }
        }
        let local_port = port.ok_or(StackError::PortsExhausted(range))?;
        let key = FlowKey {
            remote_ip: remote.ip().octets(),
            local_ip: self.local_ip.octets(),
            remote_port: remote.port(),
            local_port,
        };
        let iss = self.random_u32();
        let now = self.now();
        let tcp =
            TcpConnection::connect(now, self.config.tcp.clone(), local_port, remote.port(), iss)
                .map_err(|e| StackError::Tcp(e.to_string()))?;
        let flow = self.nic.add_flow(key, self.local_mac, remote_mac, 0, iss)?;
        let id = ConnId(flow);
        self.conns
            .insert(id, Conn::new(flow, local_port, None, tcp.state()));
        self.feed_engine(Input::Open {
            conn: id,
            tcp: Box::new(tcp),
        });
        self.counters.connected += 1;
        Ok(id)
    }

    fn conn(&mut self, id: ConnId) -> Result<&mut Conn, StackError> {
        self.conns
            .get_mut(&id)
            .filter(|c| !c.closed)
            .ok_or(StackError::UnknownConnection(id))
    }

    /// Hands an input to the transport. A full queue to the transport
    /// thread is waited out while handling its outputs, so the two sides
    /// cannot block each other.
    fn feed_engine(&mut self, input: Input) {
        let now = self.now();
        let mut input = input;
        loop {
            match &mut self.engine {
                EngineMode::Inline(engine) => {
                    engine.input(now, input);
                    return;
                }
                EngineMode::Thread(t) => match t.to_engine.push(input) {
                    Ok(()) => return,
                    Err(rtrb::PushError::Full(back)) => input = back,
                },
            }
            self.run_engine(now);
        }
    }

    /// Posts receive space: `len` bytes at `offset` of `mr` become the next
    /// part of the connection's receive stream; the advertised window grows.
    ///
    /// # Errors
    /// Unknown connection, region, bounds or access; too many posted.
    pub fn post_recv(
        &mut self,
        id: ConnId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), StackError> {
        let flow = self.conn(id)?.flow;
        self.nic.post_recv(flow, mr, offset, len, wr_id)?;
        self.feed_engine(Input::RecvPosted {
            conn: id,
            bytes: len as u64,
        });
        Ok(())
    }

    /// Posts payload: `len` bytes at `offset` of `mr` become the next part of
    /// the connection's send stream.
    ///
    /// # Errors
    /// Unknown connection, region, bounds or access; too many posted.
    pub fn post_send(
        &mut self,
        id: ConnId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), StackError> {
        let flow = self.conn(id)?.flow;
        self.nic.post_send(flow, mr, offset, len, wr_id)?;
        self.feed_engine(Input::SendPosted {
            conn: id,
            bytes: len as u64,
        });
        Ok(())
    }

    /// Sends FIN once everything posted is sent.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn close(&mut self, id: ConnId) -> Result<(), StackError> {
        self.conn(id)?;
        self.feed_engine(Input::Close { conn: id });
        Ok(())
    }

    /// Resets the connection.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn abort(&mut self, id: ConnId) -> Result<(), StackError> {
        self.conn(id)?;
        self.feed_engine(Input::Abort { conn: id });
        Ok(())
    }

    /// Receive-stream bytes below this offset have arrived in order and are
    /// final in posted memory.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn received(&self, id: ConnId) -> Result<u64, StackError> {
        self.conns
            .get(&id)
            .map(|c| c.received)
            .ok_or(StackError::UnknownConnection(id))
    }

    /// Send-stream bytes below this offset are acknowledged.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn acked(&self, id: ConnId) -> Result<u64, StackError> {
        self.conns
            .get(&id)
            .map(|c| c.acked)
            .ok_or(StackError::UnknownConnection(id))
    }

    /// The connection's TCP state (mirrored from the transport; in
    /// dedicated mode it may trail the transport thread by one turn).
    ///
    /// # Errors
    /// Unknown connection.
    pub fn state(&self, id: ConnId) -> Result<State, StackError> {
        self.conns
            .get(&id)
            .map(|c| c.state)
            .ok_or(StackError::UnknownConnection(id))
    }

    /// Number of open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The next completion, if any (does not poll).
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }

    /// Polls until a completion is available or `timeout` passes.
    pub fn wait_completion(&mut self, timeout: Duration) -> Option<Completion> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(c) = self.cq.pop_front() {
                return Some(c);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            if self.poll() == 0 {
                std::hint::spin_loop();
            }
        }
    }

    /// One iteration of the loop; returns how much work it did (packets
    /// received, segments sent, events handled).
    pub fn poll(&mut self) -> usize {
        let now = self.now();
        let mut work = 0;
        let mut records = std::mem::take(&mut self.records);
        records.clear();
        work += self.nic.poll_rx(RX_BATCH, &mut records) as usize;
        for rec in &records {
            self.handle_record(now, rec);
        }
        self.records = records;
        work += self.retry_waiting();
        work += self.run_engine(now);
        self.nic.flush();
        for id in self.closed.drain(..) {
            if let Some(conn) = self.conns.remove(&id) {
                self.counters.closed_retransmits += conn.retransmits;
                self.counters.closed_rtos += conn.rtos;
                if let Some(f) = self.nic.flow(conn.flow) {
                    for (name, n) in f.counters.iter().filter(|(name, _)| is_drop(name)) {
                        *self.closed_drops.entry(name).or_default() += n;
                    }
                }
                let _ = self.nic.remove_flow(conn.flow);
            }
        }
        self.backoff.after(work);
        work
    }

    /// Runs the inline engine, or takes the transport thread's outputs, and
    /// handles what came out.
    fn run_engine(&mut self, now: Instant) -> usize {
        let mut outputs = std::mem::take(&mut self.outputs);
        outputs.clear();
        match &mut self.engine {
            EngineMode::Inline(engine) => {
                engine.drive(now, &mut |o| {
                    outputs.push(o);
                    Ok(())
                });
            }
            EngineMode::Thread(t) => {
                while let Ok(o) = t.from_engine.pop() {
                    outputs.push(o);
                }
            }
        }
        let work = outputs.len();
        for o in outputs.drain(..) {
            self.handle_output(o);
        }
        self.outputs = outputs;
        work
    }

    /// Carries out the outputs waiting since the TX ring was full, in order,
    /// until one has to wait again.
    fn retry_waiting(&mut self) -> usize {
        let mut waiting = std::mem::take(&mut self.waiting);
        let done = waiting.retry(|o| self.apply_output(o));
        self.waiting = waiting;
        done
    }

    fn handle_record(&mut self, now: Instant, rec: &RxRecord) {
        let seg = segment_in(rec, now);
        self.counters.segments_to_transport += 1;
        self.counters.bytes_to_transport += std::mem::size_of::<SegmentIn>() as u64;
        if let Some(conn) = rec.flow.map(ConnId).filter(|c| self.conns.contains_key(c)) {
            self.feed_engine(Input::Segment { conn, seg });
            return;
        }
        let syn =
            rec.header.has(Flags::SYN) && !rec.header.flags.intersects(Flags::ACK | Flags::RST);
        let Some(queue_len) = self.listeners.get(&rec.key.local_port).map(VecDeque::len) else {
            self.counters.stray_segments += 1;
            return;
        };
        if !syn {
            self.counters.stray_segments += 1;
            return;
        }
        let pending = self
            .conns
            .values()
            .filter(|c| c.listener == Some(rec.key.local_port) && c.state == State::SynReceived)
            .count();
        if queue_len + pending >= self.config.backlog {
            self.counters.syn_refused += 1;
            return;
        }
        let iss = self.random_u32();
        let tcp = match TcpConnection::accept(now, self.config.tcp.clone(), &seg, iss) {
            Ok(t) => t,
            Err(e) => {
                log::debug!("SYN from {:?} refused: {e}", rec.key);
                self.counters.syn_refused += 1;
                return;
            }
        };
        match self
            .nic
            .add_flow(rec.key, self.local_mac, rec.src_mac, rec.header.seq, iss)
        {
            Ok(flow) => {
                let id = ConnId(flow);
                self.conns.insert(
                    id,
                    Conn::new(
                        flow,
                        rec.key.local_port,
                        Some(rec.key.local_port),
                        tcp.state(),
                    ),
                );
                self.feed_engine(Input::Open {
                    conn: id,
                    tcp: Box::new(tcp),
                });
                self.counters.accepted += 1;
            }
            Err(e) => {
                log::warn!("SYN from {:?}: {e}", rec.key);
                self.counters.syn_refused += 1;
            }
        }
    }

    /// Carries out what the transport asked, in the order it asked (see
    /// [`crate::in_order`]).
    fn handle_output(&mut self, output: Output) {
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.push(output, |o| self.apply_output(o));
        self.waiting = waiting;
    }

    /// Sends a segment, retires and completes work requests, records
    /// state. A segment that finds the TX ring full is handed back to wait.
    fn apply_output(&mut self, output: Output) -> Applied<Output> {
        match output {
            Output::Transmit { conn, seg } => {
                let Some(flow) = self.conns.get(&conn).map(|c| c.flow) else {
                    return Applied::Done;
                };
                match self.nic.send(flow, &tx_segment(&seg)) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.nic.flush();
                        return Applied::Wait(Output::Transmit { conn, seg });
                    }
                    Err(e) => {
                        log::warn!("connection {conn:?}: segment not sent: {e}");
                        self.counters.tx_refused += 1;
                    }
                }
            }
            Output::Mirror {
                conn,
                state,
                retransmits,
                rtos,
            } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.state = state;
                    c.retransmits = retransmits;
                    c.rtos = rtos;
                }
            }
            Output::Event {
                conn: id,
                event,
                irs,
            } => {
                let Some(conn) = self.conns.get_mut(&id) else {
                    return Applied::Done;
                };
                match event {
                    Event::Connected => {
                        if conn.listener.is_none() {
                            // Active open: the peer's ISN is known only now.
                            if let Err(e) = self.nic.set_irs(conn.flow, irs) {
                                log::warn!("connection {id:?}: {e}");
                            }
                        }
                        if let Some(q) = conn.listener.and_then(|p| self.listeners.get_mut(&p)) {
                            q.push_back(id);
                        }
                        self.cq.push_back(Completion {
                            conn: id,
                            kind: CompletionKind::Connected,
                            wr_id: 0,
                            len: 0,
                        });
                    }
                    Event::Received { upto } => {
                        self.retired.clear();
                        let result = self.nic.complete_recv(conn.flow, upto, &mut self.retired);
                        if post_retired(
                            &mut self.cq,
                            &mut self.counters,
                            id,
                            CompletionKind::Recv,
                            result,
                            &self.retired,
                        ) {
                            conn.received = conn.received.max(upto);
                        }
                    }
                    Event::Acked { upto } => {
                        self.retired.clear();
                        let result = self.nic.complete_send(conn.flow, upto, &mut self.retired);
                        if post_retired(
                            &mut self.cq,
                            &mut self.counters,
                            id,
                            CompletionKind::Send,
                            result,
                            &self.retired,
                        ) {
                            conn.acked = conn.acked.max(upto);
                        }
                    }
                    Event::PeerClosed { len } => {
                        self.cq.push_back(Completion {
                            conn: id,
                            kind: CompletionKind::PeerClosed { len },
                            wr_id: 0,
                            len: 0,
                        });
                    }
                    Event::Closed { reason } => {
                        conn.closed = true;
                        conn.state = State::Closed;
                        self.closed.push(id);
                        if let Some(q) = conn.listener.and_then(|p| self.listeners.get_mut(&p)) {
                            q.retain(|c| *c != id);
                        }
                        self.cq.push_back(Completion {
                            conn: id,
                            kind: CompletionKind::Closed(reason),
                            wr_id: 0,
                            len: 0,
                        });
                    }
                }
            }
        }
        Applied::Done
    }
}

/// Whether an RX counter counts a drop (or partial keep), as opposed to a
/// success.
fn is_drop(name: &str) -> bool {
    // `unknown_flow` records (a listener's SYNs) go on to the stack, which
    // counts the ones it drops as stray segments.
    !matches!(
        name,
        "placed" | "bytes_placed" | "no_payload" | "unknown_flow"
    )
}

/// Queues the completions of work requests the datapath just retired;
/// counts and logs a refused retirement (a transport bug). Returns whether
/// the retirement succeeded.
fn post_retired(
    cq: &mut VecDeque<Completion>,
    counters: &mut StackCounters,
    id: ConnId,
    kind: CompletionKind,
    result: Result<(), NicError>,
    retired: &[ms::Completion],
) -> bool {
    if let Err(e) = result {
        log::warn!("connection {id:?}: {kind:?} retirement refused: {e}");
        counters.retire_refused += 1;
        return false;
    }
    cq.extend(retired.iter().map(|c| Completion {
        conn: id,
        kind,
        wr_id: c.wr_id,
        len: c.len,
    }));
    true
}

/// A datapath record as the transport sees it: the header as parsed, the
/// placed stream range, no payload.
fn segment_in(rec: &RxRecord, now: Instant) -> SegmentIn {
    SegmentIn {
        header: rec.header,
        payload_len: rec.payload_len,
        accepted: rec.placement.map_or(0..0, |p| p.placed.range()),
        ecn: rec.ecn,
        received: now,
    }
}

/// A transport segment as the datapath builds it: the same header, the
/// payload as a send-stream range.
fn tx_segment(seg: &SegmentOut) -> TxSegment {
    TxSegment {
        header: seg.header,
        payload: seg.payload.clone(),
        ecn: seg.ecn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::{Ecn, TcpHeader, TcpOptions};

    #[test]
    fn segment_conversions_keep_every_header_field() {
        let out = SegmentOut {
            header: TcpHeader {
                src_port: 40000,
                dst_port: 80,
                seq: 0xffff_fff0,
                ack: 7,
                flags: Flags::ACK | Flags::PSH,
                window: 1234,
                options: TcpOptions::new(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]).unwrap(),
            },
            payload: Some(100..1560),
            ecn: Ecn::Ect0,
            not_before: None,
        };
        let tx = tx_segment(&out);
        assert_eq!(
            (
                tx.header.seq,
                tx.header.ack,
                tx.header.flags.0,
                tx.header.window
            ),
            (0xffff_fff0, 7, 0x18, 1234)
        );
        assert_eq!(tx.header.options.as_slice(), out.header.options.as_slice());
        assert_eq!(tx.payload, Some(100..1560));
        assert_eq!(tx.ecn, Ecn::Ect0);
    }
}
