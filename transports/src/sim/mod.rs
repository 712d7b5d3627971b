//! A deterministic network simulator for transports.
//!
//! Everything runs on a virtual clock and a seeded generator: no real time,
//! no I/O, no sleeping, so a run is a pure function of its inputs and seed.
//! The pieces:
//!
//! - [`Packet`]: a [`SegmentOut`](crate::SegmentOut) in flight (header and
//!   send-stream range, never bytes) with its ECN field and an id.
//! - [`node`]: path stages — [`Delay`](node::Delay),
//!   [`Bottleneck`](node::Bottleneck) (rate, byte-limited FIFO, tail drop,
//!   ECN marking above K), [`Loss`](node::Loss), [`Reorder`](node::Reorder),
//!   [`Duplicate`](node::Duplicate), [`Mtu`](node::Mtu) — chained per
//!   direction into a [`Path`] from a [`PathConfig`].
//! - [`Endpoint`]: a transport plus a model of the application (posts its
//!   send stream, keeps receive buffers posted and re-posts them as they
//!   complete, closes) and of the datapath (places payload by sequence
//!   number into posted space, holds paced segments until `not_before`).
//! - [`Scoreboard`]: checks that in-order delivery is exact — every stream
//!   offset delivered once, in order, from the right send-stream offsets,
//!   ending at exactly the bytes sent.
//! - [`Simulation`]: the event loop over any number of flows sharing one
//!   path, bounded in simulated time and in events.
//! - [`transfer`] and [`fairness`]: one-call harnesses returning a
//!   [`TransferReport`] or [`FairnessReport`] (Jain's index per window).
//! - [`rng`], [`Link`] and [`ReleaseQueue`]: the impairment engine's
//!   parts shared with the impairment hop (`bench::impair`), which drives
//!   them on a real clock: the seeded generator, the rate limit's
//!   serialisation clock, and the timed hold behind delay and reordering.
//! - [`Trace`]: per-flow time series (probe value such as cwnd, delivered,
//!   acknowledged) as CSV.

mod driver;
mod endpoint;
mod error;
mod harness;
mod link;
pub mod node;
mod packet;
mod path;
mod placement;
mod release;
mod report;
pub mod rng;
mod scoreboard;
mod trace;

pub use driver::{Flow, FlowSpec, Outcome, SimConfig, Simulation};
pub use endpoint::{AppConfig, CloseWhen, Endpoint, SendStats};
pub use error::{Side, SimError};
pub use harness::{fairness, transfer, transfer_with, FairnessConfig, TransferOptions};
pub use link::Link;
pub use packet::{Direction, Packet, IPV4_HEADER_LEN, TCP_HEADER_LEN};
pub use path::{ConfigError, NodeConfig, Path, PathConfig, MIN_LINK_QUEUE};
pub use placement::{Placement, PlacementStats};
pub use release::ReleaseQueue;
pub use report::{jain_index, FairnessReport, FlowReport, TransferReport};
pub use scoreboard::{Scoreboard, ScoreboardError};
pub use trace::{Trace, TraceSample, CSV_HEADER};
