//! The narrow raw API below the software NIC, for tools that measure
//! frames without the datapath's tables: the bench ceilings and the
//! RX-rate harness drive an AF_XDP port directly ([`XskPort`]). A failed
//! kernel call reads as a [`SyscallError`] naming the call, here and in
//! the lab crate's packet sockets. Everything else in the unsafe `sys`
//! layer stays private to this crate.

pub use crate::sys::syscall::SyscallError;
pub use crate::xsk::{
    FlowSocket, PortCounters, RxFrameCount, RxPacket, XskError, XskPort, XskStats,
};
