//! `zerosplit impair`: a seeded impairment hop for kernels without netem.
//!
//! These kernels have no `sch_netem` (FACTS.md), and AF_XDP TX bypasses the
//! qdisc layer anyway, so loss, duplication, reordering, corruption, delay
//! and rate limits come from a forwarding hop in user space: a two-port
//! layer-2 bridge between two interfaces that applies an [`ImpairConfig`]
//! per direction, reproducibly for a given seed.
//!
//! - [`spec`]: [`ImpairConfig`] and its text form
//!   (`loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%,delay=50us,rate=2gbit,queue=256k,seed=7`);
//! - [`engine`]: the impairment without I/O ([`Impairer`]), on a caller's
//!   clock, with its [`ImpairCounters`];
//! - [`forwarder`]: two threads moving frames between two interfaces
//!   through `AF_PACKET` sockets ([`Forwarder`]);
//! - [`path`]: namespaces A — R — B with the forwarder in R
//!   ([`ImpairedPath`]), for tests.
//! - [`frame`] and [`rng`]: where a frame's payload starts; SplitMix64.

pub mod engine;
pub mod forwarder;
pub mod frame;
pub mod path;
pub mod rng;
pub mod spec;

pub use engine::{ImpairCounters, Impairer};
pub use forwarder::{ForwardError, Forwarder, ForwarderConfig, PathCounters};
pub use path::{ImpairedPath, PathError};
pub use spec::{ImpairConfig, SpecError};
