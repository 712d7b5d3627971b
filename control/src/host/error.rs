//! [`HostError`]: what the host's operations (opening the datapath,
//! ports, listeners, posting, the completion queue) can fail with.

use std::ops::RangeInclusive;

use datapath::nic::NicError;

use crate::idmap::ConnId;
use crate::netinfo::NetInfoError;

/// Errors of the host's operations, whichever engine it drives (each
/// engine's error converts from it).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
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
    /// An IPv6 peer, and the interface has no IPv6 address (beyond
    /// link-local) to reach it from.
    #[error(
        "interface {0} has no IPv6 address (other than link-local) to reach an IPv6 peer from"
    )]
    NoIpv6Address(String),
    /// The set of queues to serve is impossible.
    #[error("serving queues: {0}")]
    Queues(String),
    /// Starting the stack of one queue of several failed.
    #[error("queue {queue}: {source}")]
    OnQueue {
        /// The queue.
        queue: u32,
        /// What failed.
        source: Box<HostError>,
    },
}
