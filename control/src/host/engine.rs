//! The seam between the [`Host`](super::Host) and a transport: the
//! [`Engine`] trait, and the [`Core`] the host lends an engine on every
//! call (the datapath, the connection table, the listeners' accept queues
//! and the completion queue).
//!
//! What is the same for every transport lives in the core and is written
//! once: which connections exist and their mirrored state (received,
//! acknowledged, TCP state), accept queues, completions. What differs is
//! the engine's: opening a connection, feeding it received frames or
//! records, running its timers, sending what it produces, and its
//! counters.

use std::collections::{HashMap, VecDeque};

use datapath::flow_table::FlowId;
use datapath::nic::Nic;
use datapath::wire::FlowKey;
use transports::segment::CloseReason;
use transports::tcp::State;
use transports::Instant;

use super::iface::Iface;
use super::{ConnInfo, HostError};
use crate::idmap::{ConnId, ConnMap};
use crate::provider::{Completion, CompletionKind, WorkRequest};

/// A transport the [`Host`](super::Host) drives. Implemented by the
/// header-only TCP ([`crate::engine::tcp::TcpEngine`]) and by smoltcp
/// ([`crate::engine::smol::SmolEngine`]); every method gets the host's [`Core`].
pub trait Engine: Sized {
    /// The engine's own state of one connection (next to the host's).
    type Conn;
    /// The error of fallible operations; host errors convert into it.
    type Error: std::error::Error + Send + Sync + 'static + From<HostError>;
    /// The engine's counters.
    type Counters;
    /// Short name of the transport (`"tcp"`, `"smoltcp"`).
    const NAME: &'static str;
    /// Whether the engine carries IPv6 (the host then listens on the
    /// interface's IPv6 address too, and connects to IPv6 peers).
    const IPV6: bool;

    /// The host starts listening on `port` (steering is set up); by
    /// default the engine has nothing to prepare.
    ///
    /// # Errors
    /// The engine cannot listen there.
    fn listen(&mut self, core: &mut Core<Self::Conn>, port: u16) -> Result<(), Self::Error> {
        let _ = (core, port);
        Ok(())
    }
    /// Stops listening on `port` (the host has removed its accept queue
    /// and resets the connections that were waiting in it).
    fn unlisten(&mut self, core: &mut Core<Self::Conn>, port: u16) {
        let _ = (core, port);
    }
    /// Opens a connection to `peer` (the host picked the local port and
    /// resolved the next hop); adds it to `core.conns`.
    ///
    /// # Errors
    /// The flow table is full, or the transport refuses.
    fn connect(&mut self, core: &mut Core<Self::Conn>, peer: Peer) -> Result<ConnId, Self::Error>;
    /// Posts a work request on an open connection.
    ///
    /// # Errors
    /// Unknown region, bounds, access; too many posted.
    fn post(&mut self, core: &mut Core<Self::Conn>, wr: WorkRequest) -> Result<(), Self::Error>;
    /// FIN after everything posted (`abort`: RST now) on an open connection.
    fn close(&mut self, core: &mut Core<Self::Conn>, id: ConnId, abort: bool);
    /// One iteration: receive, run timers, send; how much work it did.
    fn poll(&mut self, core: &mut Core<Self::Conn>, now: Instant) -> usize;
    /// The engine's counters.
    fn counters(&self) -> Self::Counters;
    /// Packets dropped by reason (non-zero only).
    fn drops(&self, core: &Core<Self::Conn>) -> Vec<(&'static str, u64)>;
    /// Retransmissions and RTOs, where the transport counts them.
    fn retransmissions(&self, core: &Core<Self::Conn>) -> Option<(u64, u64)>;
    /// Payload bytes the transport itself touched.
    fn payload_bytes_touched(&self) -> u64;
    /// Tail loss probes over every connection this engine had.
    fn tail_loss_probes(&self, core: &Core<Self::Conn>) -> u64 {
        let _ = core;
        0
    }
    /// The transport's own view of connection `id`, where it reports one.
    fn conn_info(&self, core: &Core<Self::Conn>, id: ConnId) -> Option<ConnInfo> {
        let _ = (core, id);
        None
    }
    /// The receive-stream offset of the urgent byte the peer of `id`
    /// marked last, where the transport reports one.
    fn urgent_mark(&self, core: &Core<Self::Conn>, id: ConnId) -> Option<u64> {
        let _ = (core, id);
        None
    }
    /// The RX counters of flows already removed, summed.
    fn closed_flow_counters(&self) -> datapath::counters::RxCounters {
        datapath::counters::RxCounters::default()
    }
    /// Every reason [`Engine::drops`] may name beyond the datapath's, so
    /// each has a series before its first drop.
    fn drop_reasons(&self) -> Vec<&'static str> {
        Vec::new()
    }
    /// Nanoseconds the loop slept since the engine started.
    fn slept_ns(&self) -> u64;
}

/// Where a new connection goes, as the host resolved it.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The peer's address.
    pub remote: std::net::SocketAddr,
    /// The flow (the local port is allocated).
    pub key: FlowKey,
    /// The next hop's MAC.
    pub mac: [u8; 6],
    /// The next hop (the peer itself when on-link).
    pub hop: std::net::IpAddr,
}

/// A connection as the host sees it; `engine` is the engine's own part.
#[derive(Debug)]
pub struct Conn<C> {
    pub(crate) flow: FlowId,
    pub(crate) local_port: u16,
    /// The listener that accepted it, for the accept queue.
    pub(crate) listener: Option<u16>,
    pub(crate) received: u64,
    pub(crate) acked: u64,
    pub(crate) closed: bool,
    /// The application heard `Closed` already (at TIME-WAIT): the end
    /// completes nothing more.
    pub(crate) released: bool,
    pub(crate) state: State,
    pub(crate) engine: C,
}

impl<C> Conn<C> {
    pub(crate) fn new(
        flow: FlowId,
        local_port: u16,
        listener: Option<u16>,
        state: State,
        engine: C,
    ) -> Self {
        Conn {
            flow,
            local_port,
            listener,
            received: 0,
            acked: 0,
            closed: false,
            released: false,
            state,
            engine,
        }
    }
}

/// What the host lends its engine: the datapath, the interface, the
/// connection table, the accept queues and the completion queue.
#[derive(Debug)]
pub struct Core<C> {
    pub(crate) nic: Nic,
    pub(crate) iface: Iface,
    pub(crate) conns: ConnMap<Conn<C>>,
    /// Established connections not yet accepted, per listening port.
    pub(crate) listeners: HashMap<u16, VecDeque<ConnId>>,
    /// Most connections waiting in one listener's accept queue (the
    /// header-only TCP refuses SYNs beyond it).
    pub(crate) backlog: usize,
    /// Handshakes under way, per listening port, oldest first.
    pub(crate) half_open: HashMap<u16, VecDeque<ConnId>>,
    /// Most handshakes under way per listener; a SYN beyond it evicts the
    /// oldest (a flood of SYNs from spoofed sources never completes, so the
    /// oldest is the likeliest to be one of them).
    pub(crate) max_half_open: usize,
    pub(crate) cq: VecDeque<Completion>,
    /// Entries of `cq` at which posting and receiving stop (see
    /// `completion.rs`).
    pub(crate) cq_capacity: usize,
    pub(crate) epoch: std::time::Instant,
    /// The clock's reading while a test drives time (the Pair harness):
    /// [`Core::now`] returns it instead of the wall clock.
    #[cfg(feature = "testing")]
    pub(crate) manual_clock: Option<Instant>,
}

impl<C> Core<C> {
    /// The host's clock: nanoseconds since it started.
    pub(crate) fn now(&self) -> Instant {
        #[cfg(feature = "testing")]
        if let Some(now) = self.manual_clock {
            return now;
        }
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The moment of the host's clock reading `now`.
    pub(crate) fn clock(&self, now: Instant) -> std::time::Instant {
        self.epoch + std::time::Duration::from_nanos(now.as_nanos())
    }

    /// Whether the completion queue has room: engines read received
    /// packets only then (each may complete work requests).
    pub(crate) fn cq_has_room(&self) -> bool {
        self.cq.len() < self.cq_capacity
    }

    /// An open connection (not closed).
    pub(crate) fn open_conn(&mut self, id: ConnId) -> Result<&mut Conn<C>, HostError> {
        self.conns
            .get_mut(&id)
            .filter(|c| !c.closed)
            .ok_or(HostError::UnknownConnection(id))
    }

    /// Whether the listener on `port` may take one more connection: its
    /// accept queue is below the backlog. `None` when nothing listens on
    /// `port`. Constant time: a SYN flood must not cost a scan per SYN.
    pub(crate) fn listener_has_room(&self, port: u16) -> Option<bool> {
        let queued = self.listeners.get(&port)?.len();
        Some(queued < self.backlog)
    }

    /// The handshake to give up for a new one on `port`: the oldest, when
    /// the listener already has `max_half_open` under way.
    pub(crate) fn half_open_victim(&self, port: u16) -> Option<ConnId> {
        let q = self.half_open.get(&port)?;
        (q.len() >= self.max_half_open)
            .then(|| q.front().copied())
            .flatten()
    }

    /// A handshake on `port` started.
    pub(crate) fn half_opened(&mut self, port: u16, id: ConnId) {
        self.half_open.entry(port).or_default().push_back(id);
    }

    /// `local -> peer` of connection `id`, for log lines.
    pub(crate) fn describe(&self, id: ConnId) -> String {
        self.conns
            .get(&id)
            .and_then(|c| self.nic.flow(c.flow))
            .map_or_else(
                || format!("{id:?}"),
                |f| {
                    let k = f.key;
                    format!("{} <-> {}", k.local(), k.remote())
                },
            )
    }

    /// `id` is no longer a handshake under way (it completed or ended).
    fn half_closed(&mut self, id: ConnId) {
        let Some(port) = self.conns.get(&id).and_then(|c| c.listener) else {
            return;
        };
        if let Some(q) = self.half_open.get_mut(&port) {
            if let Some(i) = q.iter().position(|x| *x == id) {
                q.remove(i);
            }
            if q.is_empty() {
                self.half_open.remove(&port);
            }
        }
    }

    /// Queues a completion.
    pub(crate) fn complete(&mut self, conn: ConnId, kind: CompletionKind, wr_id: u64, len: u64) {
        self.cq.push_back(Completion {
            conn,
            kind,
            wr_id,
            len,
        });
    }

    /// The handshake of `id` completed: into its listener's accept queue,
    /// and a `Connected` completion.
    pub(crate) fn connected(&mut self, id: ConnId) {
        self.half_closed(id);
        let listener = self.conns.get(&id).and_then(|c| c.listener);
        log::info!(
            "connection {} established ({})",
            self.describe(id),
            listener.map_or_else(
                || "connected".to_owned(),
                |p| format!("accepted on port {p}")
            )
        );
        if let Some(q) = listener.and_then(|p| self.listeners.get_mut(&p)) {
            q.push_back(id);
        }
        self.complete(id, CompletionKind::Connected, 0, 0);
    }

    /// `id` ended: marked closed, out of its listener's accept queue, and
    /// a `Closed` completion. The engine removes it from the table.
    pub(crate) fn ended(&mut self, id: ConnId, reason: CloseReason) {
        self.half_closed(id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        // Handshakes that never completed (a SYN flood's) are not worth a
        // line each at the default level.
        let level = if c.state == State::SynReceived {
            log::Level::Debug
        } else {
            log::Level::Info
        };
        let (received, acked) = (c.received, c.acked);
        log::log!(
            level,
            "connection {} closed: {reason:?} ({received} bytes in, {acked} bytes acknowledged)",
            self.describe(id)
        );
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.closed = true;
        c.state = State::Closed;
        let released = c.released;
        if let Some(q) = c.listener.and_then(|p| self.listeners.get_mut(&p)) {
            q.retain(|x| *x != id);
        }
        if !released {
            self.complete(id, CompletionKind::Closed(reason), 0, 0);
        }
    }

    /// Connection `id` entered TIME-WAIT: both streams are over, so the
    /// application hears `Closed(Graceful)` now and its receive memory is
    /// no longer referenced, as Linux frees a socket's buffers there; the
    /// TCP lingers (`tcp.time_wait`) on nothing of the application's.
    /// Under connection churn (a web server closing first) the memory,
    /// status entries and posted work of every connection closed in that
    /// time would otherwise stay taken.
    pub(crate) fn lingering(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.released || c.closed {
            return;
        }
        c.released = true;
        let flow = c.flow;
        let _ = self.nic.release_recv(flow);
        self.complete(id, CompletionKind::Closed(CloseReason::Graceful), 0, 0);
    }
}
