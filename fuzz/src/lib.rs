//! Fuzzing on stable Rust: every target is a function of a byte string,
//! read through [`arbitrary::Unstructured`], that returns `Err` (or panics)
//! when an invariant breaks. The [`runner`] feeds each target seeded random
//! byte strings for a bounded time or count; an input is fixed by its
//! *input seed*, so any failure is reproduced from the seed it prints.
//!
//! The targets are structure-aware: they build well-formed frames, segments
//! or configuration files and then mutate them, so random bytes reach deep
//! into the code instead of stopping at the first length check.
//!
//! - `place`: Ethernet frames (mostly mutated TCP/IPv4 frames of one flow)
//!   through `datapath::wire::parse_head`, `datapath::placement::place_parts`
//!   and a `TcpConnection`, against arbitrary posted receive segments.
//! - `forged_delivery`: an honest byte stream interleaved with hostile
//!   frames; the application must receive a prefix of the honest stream.
//! - `tcp_engine`: a `TcpConnection` fed arbitrary segments and timer ticks.
//! - `config`: arbitrary TOML through the control crate's config loading.
//! - `daemon`: a hostile application against the daemon (control
//!   messages, posts, ring indices) beside a good one.
//!
//! The XDP steering program has no Rust mirror of its decision
//! (`datapath/src/steer*` holds only the map layouts), so it has no target.

pub mod frames;
pub mod rig;
pub mod runner;
pub mod targets;

pub use runner::{run, Budget, Failure, Report};
pub use targets::{find, Reached, Target, TARGETS};
