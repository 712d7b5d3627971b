//! What a [`Host`](super::Host) is built from: the datapath, the ports,
//! the listeners' limits, the completion queue, where the transport runs
//! and when the loops sleep.

use std::ops::RangeInclusive;
use std::time::Duration;

use datapath::nic::NicConfig;
use transports::tcp::{TcpConfig, DEFAULT_TSO_SEGMENTS};

use crate::idle::PollConfig;

/// Everything a [`Host`](super::Host) is built from, whichever engine it
/// drives (the smoltcp engine ignores `tcp` and needs `threads`
/// run-to-completion).
#[derive(Debug, Clone)]
pub struct HostConfig {
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
    /// packets wait (see [`super::COMPLETION_QUEUE_CAPACITY`]).
    pub completion_queue: usize,
    /// Where the transport runs.
    pub threads: Threads,
    /// When the loops sleep instead of spinning (both the loop the
    /// application's `poll()` runs and, in dedicated mode, the transport
    /// thread).
    pub poll: PollConfig,
    /// Serve IPv6 beside IPv4 (the engine permitting): listeners take the
    /// interface's IPv6 address too, connects to IPv6 peers go out. Off
    /// for the users that carry IPv4 addresses only so far (the daemon's
    /// protocol, the socket shim), so no IPv6 peer reaches a connection
    /// they could not name.
    pub ipv6: bool,
}

/// Where the header-only TCP runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Threads {
    /// In the datapath's loop, on the calling thread.
    #[default]
    RunToCompletion,
    /// On a transport thread of its own, polling two bounded SPSC
    /// queues (and sleeping as [`HostConfig::poll`] says) (`queue` entries each way), pinned to `transport_core` when
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

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
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
            completion_queue: super::COMPLETION_QUEUE_CAPACITY,
            threads: Threads::RunToCompletion,
            poll: PollConfig::default(),
            ipv6: true,
        }
    }
}
