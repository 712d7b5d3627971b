//! The smoltcp engine: the same host (datapath queue, memory, completion
//! queue, listeners, ports) and the same provider API as
//! [`crate::stack::Stack`], with smoltcp 0.14's `Interface` and TCP
//! sockets as the transport ([`SmolEngine`]; [`crate::stack::SmolStack`]
//! is the host driving it). It is the full-packet baseline the header-only TCP is
//! measured against: smoltcp parses and builds whole packets, and payload
//! moves through its socket buffers — the engine copies posted send
//! segments into smoltcp's send buffer and smoltcp's receive buffer into
//! posted receive segments, and counts every byte it copies
//! ([`crate::provider::Provider::payload_bytes_touched_by_transport`]).
//!
//! What smoltcp does not do here: SACK-based sending (it has no SACK
//! scoreboard; loss recovery is fast retransmit of one segment and the
//! retransmission timer), a minimum RTO below 1 s (smoltcp's `RTTE_MIN_RTO`,
//! not configurable), TCP timestamps, pacing, ECN; congestion control is
//! none, Reno or CUBIC only. It runs run-to-completion only.

mod config;
mod device;
mod engine;
mod socket;
mod zero_window;

pub use config::{SmolConfig, SmolCongestion, SmolCounters, SmolError};
pub use engine::{SConn, SmolEngine};
