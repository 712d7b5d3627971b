//! The narrow raw API below the software NIC, for tools that measure or
//! forward frames without the datapath's tables: the bench ceilings and
//! the RX-rate harness drive an AF_XDP port directly ([`XskPort`]), the
//! impairment hop forwards through a packet socket ([`PacketSocket`]), and
//! tests and the host enter namespaces and look up interfaces
//! ([`NetnsGuard`], [`ifindex`]). Everything else in the unsafe `sys`
//! layer stays private to this crate.

pub use crate::sys::netns::{ifindex, NetnsGuard};
pub use crate::sys::packet::{PacketError, PacketSocket, RecvMeta, MAX_BATCH};
pub use crate::xsk::{
    FlowSocket, PortCounters, RxFrameCount, RxPacket, XskError, XskPort, XskStats,
};
