//! Benchmark harness: network namespaces and veth pairs ([`netns`]) that
//! tests and benchmarks build for themselves and tear down on drop.

pub mod netns;

pub use netns::{HarnessError, NetNs, VethEnd, VethPair};
