//! Why a simulation did not produce a report.

use core::fmt;

use super::path::ConfigError;
use super::scoreboard::ScoreboardError;
use crate::segment::CloseReason;
use crate::time::Instant;

/// Which endpoint of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The connecting side.
    Client,
    /// The accepting side.
    Server,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Client => "client",
            Side::Server => "server",
        })
    }
}

/// A simulation that could not finish, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// The path configuration cannot work.
    #[error("path configuration: {0}")]
    Config(#[from] ConfigError),
    /// A simulation with no flows was asked to run.
    #[error("the simulation has no flows")]
    NoFlows,
    /// A receiver broke scoreboard exactness.
    #[error("flow {flow} {side} at {at:?}: {source}")]
    Scoreboard {
        /// Flow index.
        flow: usize,
        /// Which receiver.
        side: Side,
        /// Simulated time of the violation.
        at: Instant,
        /// What was wrong.
        source: ScoreboardError,
    },
    /// Nothing was scheduled any more (no packet in flight, no timer, no
    /// paced segment) but some flow had not finished.
    #[error("stalled at {at:?}: nothing scheduled; bytes delivered per flow: {delivered:?}")]
    Stalled {
        /// Simulated time when it stalled.
        at: Instant,
        /// In-order bytes each flow's server had received.
        delivered: Vec<u64>,
    },
    /// The simulated time limit passed before every flow finished.
    #[error("timed out at {at:?}; bytes delivered per flow: {delivered:?}")]
    TimedOut {
        /// The limit.
        at: Instant,
        /// In-order bytes each flow's server had received.
        delivered: Vec<u64>,
    },
    /// The event limit was reached (a transport that keeps asking for a
    /// timeout in the past ends here too).
    #[error("gave up after {events} events at {at:?}; bytes delivered per flow: {delivered:?}")]
    EventLimit {
        /// Events processed.
        events: u64,
        /// Simulated time then.
        at: Instant,
        /// In-order bytes each flow's server had received.
        delivered: Vec<u64>,
    },
    /// A transport returned more segments from one round of
    /// `poll_transmit` calls, or more events from one round of `poll_event`
    /// calls, than the configured burst limit.
    #[error("flow {flow} {side} at {at:?}: more than {limit} {what} in one round")]
    Burst {
        /// Flow index.
        flow: usize,
        /// Which endpoint.
        side: Side,
        /// Simulated time.
        at: Instant,
        /// What kept coming.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A transport emitted a segment no datapath could build.
    #[error("flow {flow} {side} at {at:?}: bad segment: {reason}")]
    BadSegment {
        /// Flow index.
        flow: usize,
        /// Which endpoint.
        side: Side,
        /// Simulated time.
        at: Instant,
        /// What was wrong with it.
        reason: String,
    },
    /// A connection closed before its transfer finished.
    #[error("flow {flow} {side} closed ({reason:?}) at {at:?} before the transfer finished; delivered {delivered} bytes")]
    Closed {
        /// Flow index.
        flow: usize,
        /// Which endpoint reported it.
        side: Side,
        /// Why it closed.
        reason: CloseReason,
        /// Simulated time.
        at: Instant,
        /// The server's in-order point for this flow.
        delivered: u64,
    },
}
