//! What a [`Nic`](super::Nic) is opened with: socket and UMEM
//! configuration, table sizes, demultiplexing and TX strategy.

use super::NicError;
use crate::coalesce::{DEFAULT_COALESCE_BYTES, MAX_COALESCE_BYTES};
use crate::steer::XdpMode;
use crate::xsk::XskConfig;

/// Largest `max_flows`: the steering program's flows map holds this many
/// exact entries ([`crate::steer::FLOWS_MAX`]). The flow table and the
/// per-flow socket slots are allocated whole at open, so the bound also
/// keeps a typo from asking for more memory than a machine has.
pub const MAX_FLOWS: usize = crate::steer::FLOWS_MAX as usize;
/// Largest `max_flow_sockets`: the XSKMAP slots for per-flow sockets
/// (`FIRST_FLOW_SLOT..XSKS_MAX`), shared by the queues of an interface.
pub const MAX_FLOW_SOCKETS: usize =
    (crate::steer::XSKS_MAX - crate::steer::FIRST_FLOW_SLOT) as usize;
/// Largest `max_regions` per queue.
pub const MAX_REGIONS: usize = 1 << 16;
/// Largest `max_recv_segments` and `max_send_segments` per flow.
pub const MAX_SEGMENTS: usize = 1 << 16;
/// Largest `max_placed_ranges` per flow.
pub const MAX_PLACED_RANGES: usize = 1 << 16;

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
    /// Largest payload, in bytes, of one record coalesced from consecutive
    /// in-order segments of a flow (software GRO, [`crate::coalesce`]);
    /// 0 turns coalescing off. At most [`MAX_COALESCE_BYTES`].
    pub rx_coalesce_bytes: u32,
    /// Most flows with a socket of their own on this queue; later flows
    /// are demultiplexed in software from the catch-all socket. Every poll
    /// looks at each open flow socket's RX ring, so this bounds that
    /// sweep: with hundreds of flow sockets it cost more per packet than
    /// the packet itself (see the bench's flows section).
    pub max_flow_sockets: usize,
}

impl NicConfig {
    /// The table sizes as `(name, value, upper bound)`: each sizes memory
    /// allocated per queue or per flow.
    pub fn table_sizes(&self) -> [(&'static str, usize, usize); 5] {
        [
            ("max_flows", self.max_flows, MAX_FLOWS),
            ("max_regions", self.max_regions, MAX_REGIONS),
            ("max_recv_segments", self.max_recv_segments, MAX_SEGMENTS),
            ("max_send_segments", self.max_send_segments, MAX_SEGMENTS),
            (
                "max_placed_ranges",
                self.max_placed_ranges,
                MAX_PLACED_RANGES,
            ),
        ]
    }

    /// Refuses table sizes of 0 or above their bounds before anything is
    /// allocated, and the socket settings [`XskConfig`] refuses.
    ///
    /// # Errors
    /// [`NicError::Config`] naming the field, its value and the bound.
    pub fn validate(&self) -> Result<(), NicError> {
        for (name, value, max) in self.table_sizes() {
            if !(1..=max).contains(&value) {
                return Err(NicError::Config(format!(
                    "{name} ({value}) must be between 1 and {max}"
                )));
            }
        }
        if self.rx_coalesce_bytes > MAX_COALESCE_BYTES {
            return Err(NicError::Config(format!(
                "rx_coalesce_bytes ({}) must be at most {MAX_COALESCE_BYTES}",
                self.rx_coalesce_bytes
            )));
        }
        if self.max_flow_sockets > MAX_FLOW_SOCKETS {
            return Err(NicError::Config(format!(
                "max_flow_sockets ({}) must be at most {MAX_FLOW_SOCKETS} (the XSKMAP's per-flow slots)",
                self.max_flow_sockets
            )));
        }
        self.xsk.validate().map_err(NicError::from)
    }
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
            rx_coalesce_bytes: DEFAULT_COALESCE_BYTES,
            max_flow_sockets: 16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_table_sizes_are_refused_with_the_field_and_the_bound() {
        NicConfig::default().validate().expect("defaults are valid");
        let fields: [fn(&mut NicConfig) -> &mut usize; 5] = [
            |c| &mut c.max_flows,
            |c| &mut c.max_regions,
            |c| &mut c.max_recv_segments,
            |c| &mut c.max_send_segments,
            |c| &mut c.max_placed_ranges,
        ];
        for (field, (name, _, max)) in fields.iter().zip(NicConfig::default().table_sizes()) {
            for value in [usize::MAX, max + 1, 0] {
                let mut c = NicConfig::default();
                *field(&mut c) = value;
                let e = c.validate().unwrap_err().to_string();
                assert!(e.contains(&format!("{name} ({value})")), "{e}");
                assert!(e.contains(&max.to_string()), "{e}");
            }
            let mut c = NicConfig::default();
            *field(&mut c) = max;
            c.validate().expect("the bound itself is allowed");
        }
    }

    #[test]
    fn huge_ring_and_frame_counts_are_refused_with_the_field_and_the_bound() {
        let mut c = NicConfig::default();
        c.xsk.umem.frame_count = u32::MAX;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("frame_count (4294967295)"), "{e}");
        let mut c = NicConfig::default();
        c.xsk.fill_ring = 1 << 31;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("fill_ring (2147483648)"), "{e}");
    }

    #[test]
    fn max_flow_sockets_is_bounded_by_the_xskmap() {
        let mut c = NicConfig {
            max_flow_sockets: MAX_FLOW_SOCKETS,
            ..NicConfig::default()
        };
        c.validate().expect("the bound itself is allowed");
        c.max_flow_sockets = 0;
        c.validate().expect("0: every flow on the catch-all socket");
        c.max_flow_sockets = MAX_FLOW_SOCKETS + 1;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("max_flow_sockets (961)"), "{e}");
    }
}
