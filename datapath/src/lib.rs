//! zerosplit's datapath: the software NIC.
//!
//! Pure-logic layers (no `unsafe`, no syscalls), each testable on a plain
//! byte buffer standing in for the UMEM:
//!
//! - [`checksum`]: RFC 1071 sums and the one RX payload copy, fused with the
//!   checksum ([`checksum::copy_and_sum`]).
//! - [`wire`]: Ethernet/IPv4/TCP/UDP parsing through `smoltcp::wire` views
//!   into a small `Copy` record.
//! - [`mr`]: the memory-region table (registered parts of the payload area).
//! - [`ms`]: memory-segment lists (posted work requests in stream order).
//! - [`flow_table`]: 5-tuple → flow state, bounded, generation-checked ids
//!   (with the stream ranges placed by verified segments,
//!   [`proto::placement::PlacedSet`]).
//! - [`payload`]: a payload view over one slice or the fragments of a
//!   multi-buffer frame, summed and copied piece by piece.
//! - [`placement`]: the RX engine that writes payload at its stream offset,
//!   never outside posted memory and never over verified data.
//! - [`tx`]: builds Ethernet/IPv4/TCP frames from header descriptors and the
//!   send segment list (copy or zero-copy chain).
//! - [`counters`]: per-reason RX counters.
//! - [`rx`]: the per-packet receive step (parse → flow lookup → placement
//!   → [`rx::RxRecord`]) as a pure function over those tables.
//!
//! I/O layers:
//!
//! - `sys` (crate-private): the only `unsafe` code — mappings, the four
//!   AF_XDP rings, UMEM frame access, owned frame addresses, the syscall
//!   entry, the socket wait, and the shared memory (sealed memfds) the
//!   UMEM's memory slots and the daemon's attachment rings live in.
//! - [`shm`]: that shared memory published for the daemon and the
//!   applications attached to it.
//! - [`iface`] and [`rtnl`]: what the runtime reads about an interface
//!   (its index; link, addresses and kind over rtnetlink), in safe code.
//! - `xsk` (crate-private, published through [`raw`] and [`config`]):
//!   AF_XDP sockets in safe code — opening in steps, frame ownership,
//!   receive with multi-buffer gathering, transmit and reclaim.
//! - [`steer`]: loads and attaches the XDP steering program (aya, bpf_link)
//!   and edits its maps.
//! - [`nic`]: the poll loop that joins them: receive, place, hand headers
//!   on; build and send.
//! - [`nic_raw`]: whole frames in and out of the same queue, for a
//!   full-packet transport (smoltcp) that parses and builds packets itself.
//! - `testing` (feature `testing`): the same [`nic::Nic`] over a fake
//!   kernel — in-memory rings and steering tables, the kernel's side in
//!   the test's hands — for tests without root.
//!
//! Why this crate has `unsafe`: AF_XDP is memory shared with the kernel,
//! and the daemon shares memory with the applications attached to it.
//! The UMEM and the four rings are `mmap`ed regions the kernel reads and
//! writes concurrently, their producer and consumer indices are atomics
//! in that memory, and the socket options and `bind` that set them up
//! take C structs; an application's memory slot and its request and
//! completion rings are memfds mapped by two processes, the other one
//! untrusted; no safe library wraps them at this level without
//! giving up the ownership rules this crate enforces (one owner per
//! frame, no bare frame address outside `sys`). All of it lives in the
//! private `sys` module, which opts back in to `unsafe_code` with a
//! reason; every block there has a `// SAFETY:` comment, and everything
//! above it — placement, the tables, the poll loop — is safe code.

pub mod capture;
pub mod checksum;
pub mod coalesce;
pub mod config;
pub mod counters;
pub mod flow_table;
pub mod group;
pub mod iface;
pub mod mr;
pub mod ms;
pub mod nic;
pub mod nic_raw;
pub mod payload;
pub mod placement;
pub mod raw;
pub mod rtnl;
pub mod rx;
pub mod shm;
pub mod steer;
#[allow(
    unsafe_code,
    reason = "sys/ is the one place for syscalls; every unsafe block there has a SAFETY comment"
)]
mod sys;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tx;
pub mod wire;
mod xsk;
