//! [`Host`]: one interface queue with its datapath ([`Nic`]), the
//! application's registered memory, the completion queue, the listeners
//! and their accept queues, the ephemeral ports and the interface's
//! addresses, written once and driving one of two transports through the
//! small [`Engine`] trait: the header-only TCP ([`crate::engine::tcp`],
//! [`crate::stack::Stack`]) or smoltcp ([`crate::engine::smol`],
//! [`crate::stack::SmolStack`]). The host implements the provider API
//! ([`crate::provider::Provider`]) once for both (see `calls.rs`). Its
//! configuration ([`HostConfig`]), errors ([`HostError`]) and the view of
//! a connection an engine reports ([`ConnInfo`]) are the host's, so
//! imports point one way: the host, then the engines, then the fronts.

mod calls;
mod completion;
mod config;
mod conn_info;
mod engine;
mod error;
mod iface;
mod ports;
mod secret;
mod snapshot;
#[cfg(feature = "testing")]
mod testing;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use datapath::mr::MrId;
use datapath::ms::MrMove;
use datapath::nic::{Nic, NicConfig, NicCounters, NicError};
use transports::Instant;

pub use completion::COMPLETION_QUEUE_CAPACITY;
pub use config::{HostConfig, Threads};
pub use conn_info::ConnInfo;
pub use engine::{Conn, Core, Engine, Peer};
pub use error::HostError;
pub(crate) use iface::{ifindex, Iface, Kernel};
pub(crate) use ports::{reserve_ports, Ports};
pub(crate) use secret::{os_random_u64, Secret};
pub use snapshot::PayloadCopies;

use crate::idmap::{ConnId, ConnMap};

/// One interface queue driven by the transport `E`.
#[derive(Debug)]
pub struct Host<E: Engine> {
    core: Core<E::Conn>,
    ports: Ports,
    /// How long to wait for ARP when connecting.
    arp_timeout: std::time::Duration,
    engine: E,
    /// Where the next hop's MAC and the kernel's listeners come from.
    kernel: Kernel,
    /// Where [`Host::set_metrics`] asked the loop to publish snapshots.
    metrics: Option<std::sync::Arc<crate::metrics::Board>>,
    /// When the next snapshot is due.
    next_publish: Instant,
}

impl<E: Engine> Host<E> {
    /// Looks the interface up, opens the datapath with `open`, takes the
    /// ephemeral ports of `config`, then builds the engine over the core.
    ///
    /// # Errors
    /// No such interface, datapath or port reservation failures, or the
    /// engine's own.
    pub(crate) fn open(
        ifname: &str,
        config: &HostConfig,
        open: impl FnOnce(NicConfig) -> Result<Nic, NicError>,
        engine: impl FnOnce(&mut Core<E::Conn>) -> Result<E, E::Error>,
    ) -> Result<Self, E::Error> {
        let mut iface = Iface::lookup(ifname)?;
        if !config.ipv6 {
            iface.ip6 = None;
        }
        let nic = open(config.nic.clone()).map_err(HostError::from)?;
        Host::assemble(iface, nic, Kernel::Netinfo, config, engine)
    }

    /// The host over an interface and a datapath already open, asking
    /// `kernel` what the kernel knows.
    ///
    /// # Errors
    /// Port reservation failures, or the engine's own.
    pub(crate) fn assemble(
        iface: Iface,
        nic: Nic,
        kernel: Kernel,
        config: &HostConfig,
        engine: impl FnOnce(&mut Core<E::Conn>) -> Result<E, E::Error>,
    ) -> Result<Self, E::Error> {
        let ports = Ports::new(
            config.ephemeral_ports.clone(),
            config.reserve_ports,
            Secret::host()?,
        )?;
        let mut core = Core {
            nic,
            iface,
            conns: ConnMap::default(),
            listeners: HashMap::new(),
            backlog: config.backlog,
            half_open: HashMap::new(),
            max_half_open: config.max_half_open,
            cq: VecDeque::new(),
            cq_capacity: config.completion_queue.max(1),
            epoch: std::time::Instant::now(),
            #[cfg(feature = "testing")]
            manual_clock: None,
        };
        let engine = engine(&mut core)?;
        Ok(Host {
            core,
            ports,
            arp_timeout: config.arp_timeout,
            engine,
            kernel,
            metrics: None,
            next_publish: Instant::ZERO,
        })
    }

    /// The host's clock: nanoseconds since it started.
    pub fn now(&self) -> Instant {
        self.core.now()
    }

    /// The engine's counters.
    pub fn counters(&self) -> E::Counters {
        self.engine.counters()
    }

    /// Completions queued and not taken yet.
    pub fn completions_queued(&self) -> usize {
        self.core.cq.len()
    }

    /// Number of open connections.
    pub fn connections(&self) -> usize {
        self.core.conns.len()
    }

    /// Payload bytes the datapath placed into posted memory, over every
    /// open connection.
    pub fn payload_bytes_placed(&self) -> u64 {
        self.core
            .conns
            .values()
            .filter_map(|c| self.core.nic.flow(c.flow))
            .map(|f| f.counters.bytes_placed)
            .sum()
    }

    /// Whether a TX descriptor still points into bytes `[offset,
    /// offset+len)` of region `mr`: memory whose send completed never is
    /// (a send completes only once its descriptors came back). `None` for
    /// an unknown region or a range outside it.
    pub fn send_memory_in_flight(&self, mr: MrId, offset: usize, len: usize) -> Option<bool> {
        self.core.nic.send_memory_in_flight(mr, offset, len).ok()
    }

    /// Datapath counters.
    pub fn nic_counters(&self) -> NicCounters {
        self.core.nic.counters()
    }

    /// Starts (`Some`) or stops packet capture of this queue: every frame
    /// it receives and sends goes to `tap` ([`crate::capture::PcapTap::tap`]).
    pub fn set_capture(&mut self, tap: Option<Box<dyn datapath::capture::FrameTap>>) {
        self.core.nic.set_tap(tap);
    }

    /// Publishes this queue's [`Host::snapshot`] to `board` from now on,
    /// every [`crate::metrics::PUBLISH_EVERY`], from inside
    /// [`Provider::poll`](crate::provider::Provider::poll) (no thread, no
    /// lock but the board's, taken a few times a second); `None` stops.
    pub fn set_metrics(&mut self, board: Option<std::sync::Arc<crate::metrics::Board>>) {
        self.metrics = board;
        self.next_publish = Instant::ZERO;
    }

    /// Publishes a snapshot if the metrics are on and one is due.
    #[inline]
    pub(crate) fn publish_if_due(&mut self, now: Instant) {
        if self.metrics.is_none() || now < self.next_publish {
            return;
        }
        let snapshot = self.snapshot();
        if let Some(board) = &self.metrics {
            board.publish(snapshot);
        }
        self.next_publish = now + crate::metrics::PUBLISH_EVERY;
    }

    /// Connections established on `port` and not accepted yet.
    pub fn accept_queue_len(&self, port: u16) -> usize {
        self.core.listeners.get(&port).map_or(0, |q| q.len())
    }

    /// Connection `id`'s local and remote addresses (the host opens IPv4
    /// connections only).
    pub fn endpoints(&self, id: ConnId) -> Option<(SocketAddr, SocketAddr)> {
        let conn = self.core.conns.get(&id)?;
        let key = self.core.nic.flow(conn.flow)?.key;
        Some((key.local(), key.remote()))
    }

    /// Registers `len` bytes inside `range` of the region area (an
    /// attachment's memory slot; first fit, 64-byte aligned).
    ///
    /// # Errors
    /// No room in `range`, or the region table is full.
    pub fn register_memory_in(
        &mut self,
        range: std::ops::Range<usize>,
        len: usize,
        access: datapath::mr::Access,
    ) -> Result<MrId, HostError> {
        Ok(self.core.nic.register_memory_in(range, len, access)?)
    }

    /// Zeroes `range` of the region area (a memory slot before it goes to
    /// its next application: the last one's bytes are not the next one's
    /// to read), which no region may overlap and no TX descriptor read.
    ///
    /// # Errors
    /// The range is outside the area, registered or still read.
    pub fn zero_memory(&mut self, range: std::ops::Range<usize>) -> Result<(), HostError> {
        Ok(self.core.nic.zero_mr(range)?)
    }

    /// Moves connection `id`'s memory into other regions, each move's
    /// bytes copied and its posted work requests re-pointed at the same
    /// places ([`Nic::rehome_flow`]): a connection handed to a program
    /// with memory of its own goes on there. Returns the posted ends,
    /// receive then send.
    ///
    /// # Errors
    /// Unknown connection; the datapath refused the moves (nothing changed).
    pub fn rehome(&mut self, id: ConnId, moves: &[MrMove]) -> Result<(u64, u64), HostError> {
        let conn = self
            .core
            .conns
            .get(&id)
            .ok_or(HostError::UnknownConnection(id))?;
        Ok(self.core.nic.rehome_flow(conn.flow, moves)?)
    }

    /// Whether [`crate::provider::Provider::connect`] to `remote` would
    /// open at once: the next hop's MAC is known. When it is not, asks the
    /// kernel to resolve it if `probe`; connect waits for that up to
    /// [`Self::arp_timeout`]. For a loop that must not block on ARP (the
    /// daemon's), which connects once this says yes.
    ///
    /// # Errors
    /// No route towards `remote`, or the kernel's tables cannot be read.
    pub fn next_hop_known(&self, remote: std::net::IpAddr, probe: bool) -> Result<bool, HostError> {
        self.kernel.next_hop_known(&self.core.iface, remote, probe)
    }

    /// How long a connect waits for the next hop's ARP answer.
    pub fn arp_timeout(&self) -> std::time::Duration {
        self.arp_timeout
    }

    /// Where region `mr` starts in the region area.
    pub fn memory_offset(&self, mr: MrId) -> Option<usize> {
        self.core.nic.mr_extent(mr).ok().map(|(offset, _)| offset)
    }

    /// Sleeps until one of the queue's sockets or of `extra` is readable,
    /// or `timeout` passes (a loop that serves more than this stack: the
    /// daemon's).
    ///
    /// # Errors
    /// `ppoll` failed.
    pub fn wait_also(
        &mut self,
        extra: &[std::os::fd::BorrowedFd<'_>],
        timeout: std::time::Duration,
    ) -> std::io::Result<bool> {
        self.core.nic.wait_also(extra, timeout)
    }

    /// The datapath, for inspection.
    pub fn nic(&self) -> &Nic {
        &self.core.nic
    }

    pub(crate) fn engine(&self) -> &E {
        &self.engine
    }

    pub(crate) fn core(&self) -> &Core<E::Conn> {
        &self.core
    }

    pub(crate) fn parts(&mut self) -> (&mut Core<E::Conn>, &mut E) {
        (&mut self.core, &mut self.engine)
    }
}
