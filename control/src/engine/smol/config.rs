//! The smoltcp provider's settings, errors and counters.

use std::time::Duration;

use datapath::nic::NicError;
use smoltcp::socket::tcp::CongestionControl;

use crate::host::{HostConfig, HostError};
use crate::netinfo::NetInfoError;

/// smoltcp's congestion controllers (its closed set; 0.14 has no others).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SmolCongestion {
    /// No congestion control: the window is the peer's receive window.
    None,
    /// Reno (RFC 5681).
    Reno,
    /// CUBIC (RFC 9438).
    #[default]
    Cubic,
}

impl std::str::FromStr for SmolCongestion {
    type Err = SmolError;
    fn from_str(s: &str) -> Result<Self, SmolError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(SmolCongestion::None),
            "reno" | "newreno" => Ok(SmolCongestion::Reno),
            "cubic" => Ok(SmolCongestion::Cubic),
            other => Err(SmolError::Congestion(other.to_string())),
        }
    }
}

impl SmolCongestion {
    pub(super) fn to_smoltcp(self) -> CongestionControl {
        match self {
            SmolCongestion::None => CongestionControl::None,
            SmolCongestion::Reno => CongestionControl::Reno,
            SmolCongestion::Cubic => CongestionControl::Cubic,
        }
    }
}

/// Everything a [`SmolStack`](crate::stack::SmolStack) is built from.
#[derive(Debug, Clone)]
pub struct SmolConfig {
    /// Datapath, ports, backlog and ARP timeout as for the header-only stack
    /// (`tcp` is not used; `threads` must be run-to-completion).
    pub stack: HostConfig,
    /// Congestion controller.
    pub congestion: SmolCongestion,
    /// Bytes of each socket's receive buffer (the advertised window) and
    /// send buffer (see [`SmolConfig::ring_window`]).
    pub socket_buffer: usize,
    /// Delayed-ACK time, or `None` to ACK every segment at once.
    pub ack_delay: Option<Duration>,
    /// Give up a connection after this long without an answer.
    pub timeout: Option<Duration>,
}

impl Default for SmolConfig {
    fn default() -> Self {
        SmolConfig {
            stack: HostConfig {
                reserve_ports: true,
                ..HostConfig::default()
            },
            congestion: SmolCongestion::Cubic,
            socket_buffer: 4 << 20,
            ack_delay: Some(Duration::from_millis(1)),
            timeout: Some(Duration::from_secs(60)),
        }
    }
}

impl SmolConfig {
    /// Half the receive ring's worth of full segments on `nic` (at least
    /// 64 KiB): a window the ring can always absorb. smoltcp has no SACK
    /// and a 1 s minimum RTO, so a window larger than the ring turns a
    /// receiver that falls behind for a moment into a burst of ring-full
    /// drops and often a second's stall; a bulk receiver that must not
    /// stall (the bench's) sets its `socket_buffer` to this. Not the
    /// default, which stays smoltcp's usual large buffer: a small window
    /// closes more often, and a closed window is where smoltcp 0.14 drops
    /// the peer's ACKs (an echo service stalled in 5 of 12 runs with this
    /// window until the engine fed those ACKs again, see `zero_window`).
    pub fn ring_window(nic: &datapath::nic::NicConfig) -> usize {
        let mss = nic.mtu.saturating_sub(40).max(536);
        (nic.xsk.rx_ring as usize / 2 * mss).max(64 << 10)
    }
}

/// Errors of [`SmolStack`](crate::stack::SmolStack) operations.
#[derive(Debug, thiserror::Error)]
pub enum SmolError {
    /// The operation failed as it would on the header-only stack.
    #[error(transparent)]
    Stack(#[from] HostError),
    /// A congestion controller smoltcp does not have.
    #[error("transport.congestion: smoltcp supports none, reno (newreno) and cubic, not {0:?}; use the header-only tcp transport for other controllers")]
    Congestion(String),
    /// Dedicated threads were asked for.
    #[error("threads.mode: the smoltcp transport runs run-to-completion only; set mode = \"run-to-completion\"")]
    Threads,
    /// A socket buffer size that cannot work.
    #[error("smoltcp socket buffer of {0} bytes: must be between 64 KiB and 1 GiB")]
    Buffer(usize),
    /// smoltcp refused to listen.
    #[error("smoltcp cannot listen on port {port}: {message}")]
    Listen {
        /// The port.
        port: u16,
        /// smoltcp's error.
        message: String,
    },
    /// smoltcp refused to connect.
    #[error("smoltcp cannot connect to {remote}: {message}")]
    Connect {
        /// The peer.
        remote: std::net::SocketAddr,
        /// smoltcp's error.
        message: String,
    },
}

impl From<NicError> for SmolError {
    fn from(e: NicError) -> Self {
        SmolError::Stack(HostError::Nic(e))
    }
}

impl From<NetInfoError> for SmolError {
    fn from(e: NetInfoError) -> Self {
        SmolError::Stack(HostError::NetInfo(e))
    }
}

/// Counters of a [`SmolStack`](crate::stack::SmolStack).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmolCounters {
    /// How often and how long the loop slept (see [`crate::idle`]).
    pub loop_idle: crate::idle::IdleCounters,
    /// Frames received and lent to smoltcp.
    pub frames_in: u64,
    /// Frames smoltcp sent.
    pub frames_out: u64,
    /// Replies smoltcp built during ingress, staged and sent after it.
    pub frames_staged: u64,
    /// Frames the datapath refused to send (dropped; TCP recovers them).
    pub frames_refused: u64,
    /// Frames larger than a UMEM frame (MTU 9000), built in a scratch
    /// buffer and copied across a multi-buffer chain.
    pub frames_out_chained: u64,
    /// ARP requests smoltcp sent (its cache is filled by the stack).
    pub arp_requests: u64,
    /// Synthetic ARP replies fed to smoltcp from learnt or resolved MACs.
    pub neighbours_filled: u64,
    /// Payload bytes copied from posted send segments into smoltcp's send
    /// buffers.
    pub payload_copied_in: u64,
    /// Payload bytes copied from smoltcp's receive buffers into posted
    /// receive segments.
    pub payload_copied_out: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections opened actively.
    pub connected: u64,
    /// SYNs not lent to smoltcp because the listener had `max_half_open`
    /// handshakes under way or a full accept queue (`backlog`).
    pub syn_refused: u64,
    /// Sender MACs not learnt because the neighbour table was full of
    /// fresh entries.
    pub neighbours_refused: u64,
    /// Peer ACKs smoltcp would have dropped at its closed receive window
    /// (their sequence number past the byte it expects), fed to it again
    /// at the expected sequence number (see `zero_window`).
    pub zero_window_acks: u64,
    /// Zero windows smoltcp announced on more connections at once than
    /// the engine tracks (their peers' ACKs are left to smoltcp).
    pub zero_window_untracked: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn congestion_names_map_to_smoltcps_set_and_others_are_refused_by_key() {
        assert_eq!(
            "none".parse::<SmolCongestion>().unwrap(),
            SmolCongestion::None
        );
        assert_eq!(
            "Reno".parse::<SmolCongestion>().unwrap(),
            SmolCongestion::Reno
        );
        assert_eq!(
            "newreno".parse::<SmolCongestion>().unwrap(),
            SmolCongestion::Reno
        );
        assert_eq!(
            "cubic".parse::<SmolCongestion>().unwrap(),
            SmolCongestion::Cubic
        );
        for bad in ["dctcp", "bbr", "vegas"] {
            let e = bad.parse::<SmolCongestion>().unwrap_err().to_string();
            assert!(e.contains("transport.congestion"), "{e}");
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn the_ring_window_is_half_the_receive_ring_of_full_segments() {
        let mut nic = datapath::nic::NicConfig {
            mtu: 1500,
            ..Default::default()
        };
        nic.xsk.rx_ring = 2048;
        assert_eq!(SmolConfig::ring_window(&nic), 1024 * 1460);
        nic.mtu = 9000;
        assert_eq!(SmolConfig::ring_window(&nic), 1024 * 8960);
        nic.xsk.rx_ring = 8;
        assert_eq!(
            SmolConfig::ring_window(&nic),
            64 << 10,
            "never below 64 KiB"
        );
    }
}
