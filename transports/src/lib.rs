//! Sans-IO transports for zerosplit.
//!
//! Nothing in this crate performs I/O, reads a clock or sees payload bytes:
//! segments come in as parsed headers plus a record of where the datapath
//! placed their payload ([`segment::RxSegment`]), segments go out as header
//! descriptors that refer to stream offsets ([`segment::SegmentOut`]), and
//! time is always a parameter. That keeps every protocol behaviour
//! reproducible in a deterministic simulation.
//!
//! [`tcp`] is the header-only TCP connection; [`cc`] its congestion
//! controllers. The deterministic simulator (`sim`: virtual clock, seeded
//! loss, delay, reordering, bottlenecks) is behind the `sim` feature, so the
//! stack that links this crate does not carry it; this crate's own tests
//! turn it on.

pub mod cc;
pub mod rtt;
pub mod segment;
#[cfg(feature = "sim")]
pub mod sim;
pub mod tcp;
pub mod time;

pub use segment::{Event, RxSegment, SegmentOut, Transport};
pub use time::Instant;
