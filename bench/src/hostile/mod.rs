//! The hostile-packet suite (issue 12): during a live Linux → receiver
//! transfer, an attacker on the path (raw `AF_PACKET` sockets in the
//! sender's namespace) sniffs the connection and injects frames of some
//! fifty kinds — bad checksums, lying lengths, IP options, fragments, data
//! offset and TCP option lies, SACK blocks outside the window, out-of-window
//! and wrapped sequence numbers, blind RST/SYN/data per RFC 5961, forged
//! in-window data with a wrong ACK, no ACK, RST or a stale timestamp, data
//! beyond the window, ACKs for unsent data, zero windows, floods of SYNs,
//! of new flows beyond the table and at closed ports.
//!
//! For every kind and receiver (zerosplit, and Linux as the reference) the
//! suite checks: the receiver stays up, the legitimate stream arrives
//! byte-exact, the process's memory stays bounded, and (zerosplit) a
//! dropped kind is counted: under its reason in `drops()`, or for what the
//! steering program passes to the kernel, by the kernel's counter in the
//! receiving namespace. Kinds that may be accepted, and the one the kernel
//! drops without a counter, are checked byte-exact only.
//!
//! - [`kinds`]: the kinds as data, [`KINDS`], one frame builder each;
//! - [`frame`]: forging a frame field by field, and the lies;
//! - [`sniff`]: learning the live connection's numbers;
//! - [`lab`]: the lab, the suite's configuration, the injector;
//! - [`runner`]: one transfer per kind and receiver (the sending
//!   direction's in `sends.rs`);
//! - [`report`]: verdicts and the table;
//! - [`kernel_counters`]: the kernel's counters of a namespace.
//!
//! Run: the integration test `tests/tests/hostile.rs` (CI form, every kind
//! with small counts), or `zerosplit hostile` (CI form by default,
//! `--full` for 8 MiB streams, 100 rounds and a 100 000-SYN flood,
//! `--kind NAME` to pick kinds). Needs root.

pub mod frame;
pub mod kernel_counters;
pub mod kinds;
pub mod lab;
pub mod report;
pub mod runner;
mod sends;
pub mod sniff;

pub use kinds::{Expect, Kind, KINDS};
pub use lab::{Lab, SuiteConfig};
pub use report::{table, Outcome, Receiver, Row, Verdict};
pub use runner::{run_kind, run_suite};
