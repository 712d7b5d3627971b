//! The header-only TCP's host, [`Stack`]: a [`Host`] driving the
//! [`TcpEngine`] (see [`crate::host`] for what the host owns and
//! [`crate::tcp`] for the engine), with its configuration, errors and
//! counters. The errors are the host's too: the smoltcp stack wraps them.
//!
//! The provider API ([`crate::provider::Provider`], implemented by the
//! host) follows RDMA verbs loosely: the application registers memory,
//! posts receive space and payload to send as work requests and learns
//! their fate from a completion queue. A receive work request completes
//! when every byte of it arrived in order; bytes below
//! [`Provider::received`](crate::provider::Provider::received) are final
//! even before their buffer completes (nothing writes below the placement
//! floor), so a stream reader may consume them early. A send work request
//! completes when the peer acknowledged all of it.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use datapath::group::QueueGroup;
use datapath::nic::{Nic, NicConfig, NicError};
use transports::tcp::{TcpConfig, DEFAULT_TSO_SEGMENTS};

pub use crate::host::{Completion, CompletionKind, Host};
pub use crate::idle::{IdleCounters, PollConfig, PollMode};
pub use crate::idmap::ConnId;
use crate::netinfo::NetInfoError;
use crate::tcp::TcpEngine;

/// The run-to-completion (or dedicated) header-only TCP stack on one
/// interface queue.
pub type Stack = Host<TcpEngine>;

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
    /// Most connections waiting in one listener's accept queue; SYNs
    /// beyond it are refused (counted `syn_refused`).
    pub backlog: usize,
    /// Most handshakes under way per listener; a SYN beyond it evicts the
    /// oldest (counted `half_open_evicted`). A handshake holds a flow-table
    /// entry only: its own socket and steering entry come once it completes.
    pub max_half_open: usize,
    /// How long to wait for ARP when connecting.
    pub arp_timeout: Duration,
    /// Completions the queue holds before posting is refused and received
    /// packets wait (see [`crate::host::COMPLETION_QUEUE_CAPACITY`]).
    pub completion_queue: usize,
    /// Where the transport runs.
    pub threads: Threads,
    /// When the loops sleep instead of spinning (both the loop the
    /// application's `poll()` runs and, in dedicated mode, the transport
    /// thread).
    pub poll: PollConfig,
}

/// Where the header-only TCP runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Threads {
    /// In the datapath's loop, on the calling thread.
    #[default]
    RunToCompletion,
    /// On a transport thread of its own, polling two bounded SPSC
    /// queues (and sleeping as [`StackConfig::poll`] says) (`queue` entries each way), pinned to `transport_core` when
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
            tcp: TcpConfig {
                tso_segments: DEFAULT_TSO_SEGMENTS,
                ..TcpConfig::default()
            },
            ephemeral_ports: 40000..=40999,
            reserve_ports: true,
            backlog: 128,
            max_half_open: 256,
            arp_timeout: Duration::from_secs(2),
            completion_queue: crate::host::COMPLETION_QUEUE_CAPACITY,
            threads: Threads::RunToCompletion,
            poll: PollConfig::default(),
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
    /// The completion queue is full: take completions before posting more.
    #[error("the completion queue holds {capacity} completions: take some before posting more")]
    CompletionQueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
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
    /// The OS random number generator failed (the host's secret, RFC 6528).
    #[error("drawing the host's secret from the OS random number generator: {0}")]
    Random(String),
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
    /// Handshakes given up for a newer SYN because the listener had
    /// `max_half_open` under way.
    pub half_open_evicted: u64,
    /// Segments the datapath refused to build (a transport bug; dropped).
    pub tx_refused: u64,
    /// Retirements the datapath refused (a transport bug; logged).
    pub retire_refused: u64,
    /// Segments handed to a transport (each a fixed-size
    /// [`proto::RxSegment`]: header fields and a stream range, no payload
    /// bytes).
    pub segments_to_transport: u64,
    /// Bytes of those records: what actually crossed from the datapath to
    /// the transport. Compare with the payload bytes the datapath placed.
    pub bytes_to_transport: u64,
    /// Retransmitted segments of connections that have closed.
    pub closed_retransmits: u64,
    /// Retransmission timeouts of connections that have closed.
    pub closed_rtos: u64,
    /// Tail loss probes of connections that have closed.
    pub closed_tail_loss_probes: u64,
    /// Polls that read no received packets because outputs were waiting
    /// for the TX ring or the completion queue was full (back-pressure).
    pub rx_paused: u64,
    /// How often and how long the loop the application's `poll()` runs
    /// slept (see [`crate::idle`]).
    pub loop_idle: IdleCounters,
    /// The same for the transport thread (dedicated mode; zero otherwise).
    pub transport_idle: IdleCounters,
}

impl Host<TcpEngine> {
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
        Host::open(ifname, &config, open, |core| {
            let mut tcp = config.tcp.clone();
            // A super-segment is queued whole or not at all: never more
            // wire segments than the TX ring and frames can ever hold.
            tcp.tso_segments = tcp.tso_segments.min(core.nic.max_tx_burst());
            TcpEngine::new(tcp, config.threads, config.poll, core.epoch)
        })
    }
}
