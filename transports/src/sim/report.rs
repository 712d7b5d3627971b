//! What a run measured: per flow, per path node, and fairness.

use core::time::Duration;

use super::driver::Flow;
use super::endpoint::SendStats;
use super::node::NodeStats;
use super::placement::PlacementStats;
use crate::segment::{CloseReason, Transport};
use crate::time::Instant;

/// Jain's fairness index of `xs`, `(Σx)² / (n · Σx²)` (Jain, Chiu and Hawe,
/// 1984): 1 when all are equal, `1/n` when one gets everything. `None` for
/// an empty slice or when every value is zero.
pub fn jain_index(xs: &[f64]) -> Option<f64> {
    let n = xs.len() as f64;
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || squares <= 0.0 {
        return None;
    }
    Some(sum * sum / (n * squares))
}

/// What one flow did.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowReport {
    /// Flow index.
    pub flow: usize,
    /// When the client was created.
    pub start: Instant,
    /// Bytes the client sent to the server.
    pub bytes: u64,
    /// In-order bytes the server received (scoreboard-checked).
    pub delivered: u64,
    /// Time of the server's last `Received` event, once every byte arrived.
    pub completed_at: Option<Instant>,
    /// Delivered bytes × 8 over the time from start to the last `Received`
    /// event, in bit/s.
    pub goodput_bps: Option<f64>,
    /// What the client sent (segments, retransmissions as the path saw them).
    pub client_sent: SendStats,
    /// What the server sent.
    pub server_sent: SendStats,
    /// What the server's placement did with payload.
    pub placement: PlacementStats,
    /// Server's in-order bytes per throughput window.
    pub delivered_per_window: Vec<u64>,
    /// Segments that reached the server before it accepted a SYN.
    pub unaccepted_segments: u64,
    /// How the client's connection ended, if it did.
    pub client_closed: Option<CloseReason>,
    /// How the server's connection ended, if it did.
    pub server_closed: Option<CloseReason>,
}

impl FlowReport {
    pub(crate) fn of<A: Transport, B: Transport>(index: usize, flow: &Flow<A, B>) -> Self {
        let board = flow.server.scoreboard();
        let last = board.last_received_at();
        let goodput_bps = last.and_then(|at| {
            let secs = (at - flow.start()).as_secs_f64();
            (secs > 0.0).then(|| board.upto() as f64 * 8.0 / secs)
        });
        FlowReport {
            flow: index,
            start: flow.start(),
            bytes: board.expected(),
            delivered: board.upto(),
            completed_at: if board.is_complete() { last } else { None },
            goodput_bps,
            client_sent: flow.client.send_stats().clone(),
            server_sent: flow.server.send_stats().clone(),
            placement: flow.server.placement_stats().clone(),
            delivered_per_window: flow.server.delivered_per_window().to_vec(),
            unaccepted_segments: flow.unaccepted_segments,
            client_closed: flow.client.closed().map(|(_, r)| r),
            server_closed: flow.server.closed().map(|(_, r)| r),
        }
    }

    /// Time from start to the last byte, once complete.
    pub fn completion(&self) -> Option<Duration> {
        self.completed_at.map(|at| at - self.start)
    }
}

/// Result of [`transfer`](super::transfer).
#[derive(Debug, Clone, PartialEq)]
pub struct TransferReport {
    /// The seed the path drew from.
    pub seed: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Time from connect to the last byte delivered in order.
    pub completion: Duration,
    /// `bytes × 8 / completion`, bit/s.
    pub goodput_bps: f64,
    /// Details of the flow.
    pub flow: FlowReport,
    /// Counters of the forward path's nodes.
    pub forward: Vec<NodeStats>,
    /// Counters of the reverse path's nodes.
    pub reverse: Vec<NodeStats>,
    /// Events the loop processed.
    pub events: u64,
    /// Simulated time when the run ended.
    pub end: Instant,
}

impl TransferReport {
    /// Packets dropped by forward nodes (loss, tail drop, MTU).
    pub fn forward_drops(&self) -> u64 {
        self.forward.iter().map(|n| n.dropped).sum()
    }

    /// Goodput in Gbit/s, for tables.
    pub fn goodput_gbps(&self) -> f64 {
        self.goodput_bps / 1e9
    }
}

/// Result of [`fairness`](super::fairness).
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessReport {
    /// The seed the path drew from.
    pub seed: u64,
    /// Every flow.
    pub flows: Vec<FlowReport>,
    /// Width of the throughput windows.
    pub window: Duration,
    /// Jain's index of the flows' delivered bytes in each window.
    pub jain_per_window: Vec<Option<f64>>,
    /// Jain's index of the bytes each flow delivered in the measurement
    /// interval.
    pub jain: Option<f64>,
    /// Start of the measurement interval, from the first flow's start.
    pub measured_from: Duration,
    /// End of the measurement interval.
    pub measured_to: Duration,
    /// Counters of the forward path's nodes.
    pub forward: Vec<NodeStats>,
    /// Counters of the reverse path's nodes.
    pub reverse: Vec<NodeStats>,
    /// Events the loop processed.
    pub events: u64,
}

impl FairnessReport {
    /// Bytes each flow delivered in windows `[from, to)` (times from the
    /// first flow's start, rounded down to window boundaries).
    pub fn delivered_between(&self, from: Duration, to: Duration) -> Vec<u64> {
        let width = self.window.as_nanos().max(1);
        let lo = usize::try_from(from.as_nanos() / width).unwrap_or(usize::MAX);
        let hi = usize::try_from(to.as_nanos() / width).unwrap_or(usize::MAX);
        self.flows
            .iter()
            .map(|f| {
                f.delivered_per_window
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| (lo..hi).contains(i))
                    .map(|(_, b)| *b)
                    .sum()
            })
            .collect()
    }

    /// Jain's index over `[from, to)`.
    pub fn jain_between(&self, from: Duration, to: Duration) -> Option<f64> {
        let xs: Vec<f64> = self
            .delivered_between(from, to)
            .into_iter()
            .map(|b| b as f64)
            .collect();
        jain_index(&xs)
    }

    pub(crate) fn per_window(flows: &[FlowReport]) -> Vec<Option<f64>> {
        let windows = flows
            .iter()
            .map(|f| f.delivered_per_window.len())
            .max()
            .unwrap_or(0);
        (0..windows)
            .map(|w| {
                let xs: Vec<f64> = flows
                    .iter()
                    .map(|f| f.delivered_per_window.get(w).copied().unwrap_or(0) as f64)
                    .collect();
                jain_index(&xs)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_bounds() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0]), Some(1.0));
        assert_eq!(jain_index(&[1.0, 0.0, 0.0, 0.0]), Some(0.25));
        assert_eq!(jain_index(&[]), None);
        assert_eq!(jain_index(&[0.0, 0.0]), None);
        let j = jain_index(&[3.0, 1.0]).unwrap();
        assert!((j - 16.0 / 20.0).abs() < 1e-12);
    }
}
