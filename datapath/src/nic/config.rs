//! What a [`Nic`](super::Nic) is opened with: socket and UMEM
//! configuration, table sizes, demultiplexing and TX strategy.

use crate::steer::XdpMode;
use crate::xsk::XskConfig;

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
