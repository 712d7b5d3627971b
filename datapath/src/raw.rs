//! The narrow raw API below the software NIC, for tools that measure or
//! forward frames without the datapath's tables: the bench ceilings and
//! the RX-rate harness drive an AF_XDP port directly ([`XskPort`]), the
//! impairment hop forwards through a packet socket ([`PacketSocket`]), and
//! tests and the host create, enter and delete namespaces and look up
//! interfaces ([`NetnsGuard`], [`create_netns`], [`ifindex`]), start
//! programs inside a namespace ([`command_in_netns`]) and set offloads
//! ([`set_offload`]); the control crate opens files under the runtime
//! directory relative to a directory handle ([`openat`], [`mkdirat`],
//! [`unlinkat`], [`euid`]). Everything else in the unsafe `sys`
//! layer stays private to this crate.

pub use crate::sys::dirfd::{euid, mkdirat, openat, unlinkat};
pub use crate::sys::ethtool::{offload, set_offload, Offload};
pub use crate::sys::netns::{
    command_in_named_netns, command_in_netns, create_named as create_netns,
    delete_named as delete_netns, ifindex, open_named as open_netns, NetnsGuard, NETNS_RUN_DIR,
};
pub use crate::sys::packet::{PacketError, PacketSocket, RecvMeta, MAX_BATCH};
pub use crate::xsk::{
    FlowSocket, PortCounters, RxFrameCount, RxPacket, XskError, XskPort, XskStats,
};
