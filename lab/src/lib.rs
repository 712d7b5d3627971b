//! zerosplit's network lab: what tests, benchmarks and the CLI's demo
//! build for themselves and tear down on drop, with no outside program.
//!
//! - [`NetNs`]: a named network namespace (deleted on drop), with the
//!   link, address, neighbour and offload changes made inside it, and
//!   programs started inside it ([`NetNs::exec`], [`command_in`]);
//!   [`in_netns`] and [`run_in`] run a closure on a thread that entered it.
//! - [`VethPair`]: a veth pair between two namespaces, addressed from
//!   198.18.0.0/15, with the offloads asked for ([`Offloads`]).
//! - [`LinkSetup`]: veth pairs, bridges, addresses and neighbours over
//!   rtnetlink, on the datapath's read-only [`datapath::rtnl::Rtnl`].
//! - [`PacketSocket`]: raw `AF_PACKET` sockets for the impairment hop and
//!   path watchers; [`set_offload`]/[`offload`]: `ethtool -K` by ioctl;
//!   [`ping`]: one ICMP echo from inside a namespace.
//! - [`programs`]: the outside programs tests and benchmarks run, with
//!   their Debian packages (`cargo xtask test` installs them);
//!   [`require_tool`]: a missing program named with its package.
//!
//! Why this crate has `unsafe`: creating and entering network namespaces
//! (`unshare`, `mount`, `setns`, and `setns` again between `fork` and
//! `exec` in a child), binding and batching packet sockets (`sockaddr_ll`,
//! `recvmmsg`/`sendmmsg`) and the `SIOCETHTOOL` ioctl are kernel calls
//! that neither std nor socket2 wraps, and the lab cannot do its job
//! without them. They live in the private `sys` module alone, which opts
//! back in to `unsafe_code` with a reason; every block there has a
//! `// SAFETY:` comment, and everything above it is safe code. None of it
//! is on the runtime's path: the datapath and the host never link this
//! crate.

mod error;
mod exec;
mod icmp;
mod netns;
pub mod programs;
mod rtnl;
#[allow(
    unsafe_code,
    reason = "sys/ is the lab's one place for namespace, packet-socket and ethtool syscalls; every unsafe block there has a SAFETY comment"
)]
mod sys;
mod veth;

pub use error::HarnessError;
pub use exec::{require_tool, EXEC_TIMEOUT};
pub use icmp::{ping, ping_sized, PingError};
pub use netns::{command_in, in_netns, run_in, NetNs};
pub use rtnl::{LinkSetup, VethSpec};
pub use sys::ethtool::{offload, set_offload, Offload};
pub use sys::netns::{
    command_in_named_netns, command_in_netns, create_named as create_netns,
    delete_named as delete_netns, open_named as open_netns, NetnsGuard, NETNS_RUN_DIR,
};
pub use sys::packet::{PacketError, PacketSocket, RecvMeta, MAX_BATCH};
pub use sys::sockopt::{getsockopt, setsockopt};
pub use veth::{Offloads, VethEnd, VethPair, IPV6_A, IPV6_B};
