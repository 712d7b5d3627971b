//! Benchmark harness: network namespaces and veth pairs ([`netns`]) that
//! tests and benchmarks build for themselves and tear down on drop, and the
//! RX rate measurement of the datapath against the raw AF_XDP ceiling
//! ([`rx_rate`]), and the seeded impairment hop that stands in for netem
//! ([`impair`]), and `zerosplit bench`'s orchestration: the scenario
//! matrix, statistics, table, JSON, plots and regression gate ([`suite`]).

pub mod cclab;
pub mod hostile;
pub mod icmp;
pub mod impair;
pub mod netns;
pub mod rx_rate;
pub mod suite;

pub use datapath::raw::Offload;
pub use datapath::rtnl::{Link, VethSpec};
pub use icmp::{ping, ping_sized, PingError};
pub use netns::{in_netns, require_tool, HarnessError, NetNs, Offloads, VethEnd, VethPair};
