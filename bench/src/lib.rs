//! Benchmark harness, on the network lab of `zerosplit-lab` (namespaces
//! and veth pairs that tests and benchmarks build for themselves and tear
//! down on drop): the RX rate measurement of the datapath against the raw AF_XDP ceiling
//! ([`rx_rate`]), and the seeded impairment hop that stands in for netem
//! ([`impair`]), and `zerosplit bench`'s orchestration: the scenario
//! matrix, statistics, table, JSON, plots and regression gate ([`suite`]).

pub mod cclab;
pub mod hostile;
pub mod impair;
pub mod rx_rate;
pub mod suite;
