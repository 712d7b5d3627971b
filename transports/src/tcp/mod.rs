//! Header-only TCP (RFC 9293) as a sans-IO state machine.
//!
//! The datapath has already written each segment's payload into
//! application memory and tells the connection only which receive-stream
//! range it placed ([`RxSegment::accepted`](crate::RxSegment)); the
//! connection never sees a byte. Reassembly is a scoreboard of ranges
//! ([`reassembly`]), the send side a scoreboard of segments in flight
//! ([`scoreboard`]), and outgoing segments name send-stream ranges that the
//! datapath fills from the application's posted buffers.
//!
//! What is implemented, with the RFC sections cited where the rules live:
//! three-way handshake (active, passive, simultaneous open), teardown
//! through every close state and TIME-WAIT, RST generation and processing,
//! sequence acceptability, RFC 5961 challenge ACKs with a rate limit,
//! window scaling and timestamps with RTTM and PAWS (RFC 7323), SACK
//! generation (RFC 2018) and SACK-based loss recovery (RFC 6675: pipe,
//! NextSeg, IsLost with DupThresh 3) plus the tail loss probe of RFC 8985 7
//! (but not RACK's time-based loss detection), NewReno fast retransmit
//! without SACK (RFC 6582), the RTO with backoff and give-up (RFC 6298),
//! delayed ACK with quick-ack, zero-window probing and window-update ACKs,
//! keepalive, ECN (RFC 3168, and RFC 8257 3.2's per-packet echo for DCTCP),
//! pacing, and a delivery-rate estimate for the controller.
//!
//! Choices worth knowing: the timestamp clock ticks in microseconds; PAWS
//! tolerates 1000 ticks of reordering; RTT samples follow Linux (no sample
//! from an ACK that covers a retransmission, no timestamp echo older than
//! the latest transmission); the advertised window rounds down to the scale
//! unit except that less than one unit of posted space is offered as one
//! unit (see `output.rs`); a connection that gives up after retransmission
//! timeouts sends no RST; a RST in TIME-WAIT (the peer forgot the
//! connection and answered our re-ACK of its FIN) ends TIME-WAIT early and
//! reports a graceful close, since both FINs and every byte were exchanged.
//!
//! Layout: [`connection`] holds the state and the [`Transport`](crate::Transport)
//! implementation; `input.rs` processes arriving segments, `ack.rs` does
//! ACK processing and loss recovery, `output.rs` builds segments and
//! `timers.rs` runs the timers; `report.rs` is what a connection reports
//! about itself (sequence numbers, progress, counters, RTT, the CC trace).

mod ack;
pub mod config;
pub mod connection;
mod input;
pub mod options;
mod output;
mod prr;
pub mod rate;
pub mod reassembly;
mod report;
pub mod scoreboard;
pub mod state;
pub mod stats;
mod timers;
pub mod trace;

pub use config::{
    ConfigError, EcnEcho, Keepalive, TcpConfig, DEFAULT_TSO_SEGMENTS, MAX_TSO_SEGMENTS,
};
pub use connection::{AcceptError, Negotiated, TcpConnection};
pub use proto::SeqNum;
pub use state::State;
pub use stats::{Drops, TcpStats};
pub use trace::{CcSample, TraceCause, TraceConfig};
