//! The datapath sections: `[interface]` (which device and queues, how XDP
//! and the AF_XDP sockets attach), `[umem]` (frame memory, rings, MTU) and
//! `[flows]` (NIC table capacities). They map onto
//! [`datapath::nic::NicConfig`] through [`Config::nic_config`](super::Config::nic_config).

use serde::{Deserialize, Serialize};

use super::units::{ByteSize, Switch};

/// Where the steering program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XdpModeName {
    /// In the driver; veth, mlx5, ice, i40e support it.
    #[default]
    Native,
    /// In the generic stack after skb allocation; any device, slower.
    Generic,
}

/// How the AF_XDP sockets bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BindModeName {
    /// `XDP_COPY`: every driver with XDP.
    Copy,
    /// `XDP_ZEROCOPY`: fails where the driver lacks support (veth).
    ZeroCopy,
    /// Try zero-copy, fall back to copy.
    #[default]
    Auto,
}

/// How TX payload reaches the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxStrategyName {
    /// Chain in zero-copy mode with multi-buffer on, copy otherwise.
    #[default]
    Auto,
    /// Payload copied next to the header in one frame.
    Copy,
    /// Header frame plus fragments pointing into the MR area; needs
    /// `multi_buffer`.
    Chain,
}

/// Busy-poll socket options (`SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`,
/// `SO_PREFER_BUSY_POLL`; kernel 5.11+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusyPollConfig {
    /// `SO_BUSY_POLL`, microseconds.
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET`, packets per poll (1..=65535).
    pub budget: u32,
}

/// `[interface]`: the device, its queues, and how we attach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InterfaceConfig {
    /// Network interface name (at most 15 bytes). The CLI may override it.
    pub name: String,
    /// Receive queue ids to serve, one datapath loop each.
    pub queues: Vec<u32>,
    /// Native or generic XDP.
    pub xdp_mode: XdpModeName,
    /// Copy, zero-copy or auto bind.
    pub bind_mode: BindModeName,
    /// Bind with `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// Busy-poll options, or off.
    pub busy_poll: Switch<BusyPollConfig>,
    /// `XDP_MAX_TX_SKB_BUDGET`: descriptors one `sendto` may send in copy
    /// mode, or off for the kernel default (32).
    pub tx_budget: Switch<u32>,
    /// Serve the interface's (first global) IPv6 address beside its IPv4
    /// one, where the transport carries IPv6; off, IPv6 stays the
    /// kernel's.
    pub ipv6: bool,
}

impl Default for InterfaceConfig {
    fn default() -> Self {
        InterfaceConfig {
            name: "veth0".into(),
            queues: vec![0],
            xdp_mode: XdpModeName::Native,
            bind_mode: BindModeName::Auto,
            need_wakeup: true,
            busy_poll: Switch::Off,
            tx_budget: Switch::On(256),
            ipv6: true,
        }
    }
}

/// `[umem]`: frame memory and rings of each queue's socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UmemConfig {
    /// Bytes per frame: a power of two in 2048..=4096.
    pub frame_size: u32,
    /// Packet frames per queue (RX and TX together).
    pub frame_count: u32,
    /// Frames kept for TX; the rest circulate through the fill ring.
    pub tx_frames: u32,
    /// Memory-region area per queue, after the frames.
    pub mr_bytes: ByteSize,
    /// Back the UMEM with huge pages (reserve them first).
    pub hugepages: bool,
    /// Bind with `XDP_USE_SG`: packets larger than a frame (kernel 6.6+).
    pub multi_buffer: bool,
    /// RX ring entries of the queue's socket.
    pub rx_ring: u32,
    /// TX ring entries.
    pub tx_ring: u32,
    /// Fill ring entries.
    pub fill_ring: u32,
    /// Completion ring entries.
    pub comp_ring: u32,
    /// RX ring entries of each per-flow socket.
    pub flow_rx_ring: u32,
    /// TX payload strategy.
    pub tx_strategy: TxStrategyName,
    /// Largest IP datagram sent or received, bytes.
    pub mtu: u32,
}

impl Default for UmemConfig {
    fn default() -> Self {
        UmemConfig {
            frame_size: 4096,
            frame_count: 8192,
            tx_frames: 1024,
            mr_bytes: ByteSize(64 << 20),
            hugepages: false,
            multi_buffer: false,
            rx_ring: 2048,
            tx_ring: 2048,
            fill_ring: 8192,
            comp_ring: 2048,
            flow_rx_ring: 2048,
            tx_strategy: TxStrategyName::Auto,
            mtu: 1500,
        }
    }
}

/// `[flows]`: capacities of the NIC tables, per queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowsConfig {
    /// Flow table capacity.
    pub max_flows: usize,
    /// Give each flow its own AF_XDP socket (else demultiplex in software).
    pub per_flow_sockets: bool,
    /// Posted receive segments per flow.
    pub max_recv_segments: usize,
    /// Posted send segments per flow.
    pub max_send_segments: usize,
    /// Out-of-order placed ranges tracked per flow.
    pub max_placed_ranges: usize,
    /// Memory regions the application may register.
    pub max_regions: usize,
    /// RX packets taken from one flow socket per turn (fairness).
    pub flow_rx_budget: u32,
    /// Largest payload of one record coalesced from consecutive in-order
    /// segments of a flow in one poll (software GRO); 0 = off.
    pub rx_coalesce_bytes: u32,
    /// Most flows per queue with a socket of their own; later flows are
    /// demultiplexed in software (bounds the per-poll sweep of sockets).
    pub max_flow_sockets: usize,
    /// Most established connections waiting in one listener's accept
    /// queue; SYNs beyond it are refused.
    pub backlog: usize,
    /// Most handshakes under way per listener; a SYN beyond it evicts the
    /// oldest.
    pub max_half_open: usize,
}

impl Default for FlowsConfig {
    fn default() -> Self {
        FlowsConfig {
            max_flows: 1024,
            per_flow_sockets: true,
            max_recv_segments: 256,
            max_send_segments: 256,
            max_placed_ranges: 64,
            max_regions: 256,
            flow_rx_budget: 32,
            rx_coalesce_bytes: ::datapath::coalesce::DEFAULT_COALESCE_BYTES,
            max_flow_sockets: 16,
            backlog: 128,
            max_half_open: 256,
        }
    }
}
