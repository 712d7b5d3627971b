//! Per-flow time series for researchers: congestion window (from a probe
//! closure), delivered and acknowledged bytes, sampled on a fixed grid of
//! simulated time, written as CSV.

use std::fmt::Write as _;
use std::io;

use crate::time::Instant;

/// One sample of one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceSample {
    /// Simulated time.
    pub time: Instant,
    /// Flow index.
    pub flow: usize,
    /// What the probe returned for the client (typically cwnd in bytes).
    pub cwnd: Option<u64>,
    /// In-order bytes the server had received.
    pub delivered: u64,
    /// Send-stream bytes the client had seen acknowledged.
    pub acked: u64,
}

/// A recorded trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    samples: Vec<TraceSample>,
}

/// The CSV header line [`Trace::to_csv`] writes.
pub const CSV_HEADER: &str = "time_ns,flow,cwnd_bytes,delivered_bytes,acked_bytes";

impl Trace {
    pub(crate) fn push(&mut self, sample: TraceSample) {
        self.samples.push(sample);
    }

    /// The samples, in time order.
    pub fn samples(&self) -> &[TraceSample] {
        &self.samples
    }

    /// The samples of one flow.
    pub fn flow(&self, flow: usize) -> impl Iterator<Item = &TraceSample> {
        self.samples.iter().filter(move |s| s.flow == flow)
    }

    /// The trace as CSV: [`CSV_HEADER`], then one line per sample; an
    /// unknown cwnd is an empty field.
    pub fn to_csv(&self) -> String {
        let mut out = String::with_capacity(32 * (self.samples.len() + 1));
        out.push_str(CSV_HEADER);
        out.push('\n');
        for s in &self.samples {
            let cwnd = s.cwnd.map(|c| c.to_string()).unwrap_or_default();
            // Writing to a String cannot fail.
            let _ = writeln!(
                out,
                "{},{},{},{},{}",
                s.time.as_nanos(),
                s.flow,
                cwnd,
                s.delivered,
                s.acked
            );
        }
        out
    }

    /// Writes [`Trace::to_csv`] to `writer`.
    ///
    /// # Errors
    /// Whatever the writer returns.
    pub fn write_csv(&self, mut writer: impl io::Write) -> io::Result<()> {
        writer.write_all(self.to_csv().as_bytes())
    }
}
