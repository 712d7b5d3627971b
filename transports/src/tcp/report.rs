//! What a [`TcpConnection`] reports about itself: its sequence numbers
//! and stream progress, the handshake's outcome, counters, the RTT
//! estimator and congestion state, and the congestion-control trace
//! ([`super::trace`]) it records when asked.

use core::time::Duration;

use super::connection::{Negotiated, TcpConnection};

use super::state::State;
use super::stats::TcpStats;
use super::trace::{CcSample, TraceConfig, Tracer};
use crate::cc::{Controller, ControllerMetrics};
use crate::rtt::RttEstimator;
use crate::time::Instant;
use proto::SeqNum;

impl TcpConnection {
    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The peer's initial sequence number (zero before it is known).
    pub fn irs(&self) -> u32 {
        self.irs.0
    }

    /// Our initial sequence number.
    pub fn iss(&self) -> u32 {
        self.iss.0
    }

    /// Next receive sequence number expected (RCV.NXT) on the wire.
    pub fn rcv_nxt(&self) -> u32 {
        SeqNum::from_offset(self.irs, self.rcv_nxt).0
    }

    /// Oldest unacknowledged sequence number (SND.UNA) on the wire.
    pub fn snd_una(&self) -> u32 {
        SeqNum::from_offset(self.iss, self.snd_una).0
    }

    /// Next sequence number to send (SND.NXT) on the wire.
    pub fn snd_nxt(&self) -> u32 {
        SeqNum::from_offset(self.iss, self.snd_nxt).0
    }

    /// Receive-stream bytes that arrived in order.
    pub fn received(&self) -> u64 {
        self.rcv_nxt.saturating_sub(1).min(self.peer_fin_stream())
    }

    /// The receive-stream offset of the urgent byte the peer marked last
    /// (it may not have arrived yet). The transport only reports it: the
    /// byte stays in the stream, and the socket layer decides whether an
    /// in-band read sees it (`SO_OOBINLINE`) or only `MSG_OOB` does.
    pub fn urgent_mark(&self) -> Option<u64> {
        self.urgent
    }

    /// Send-stream bytes acknowledged.
    pub fn acked(&self) -> u64 {
        self.snd_una.saturating_sub(1).min(self.send_len)
    }

    /// The peer's window in bytes (scaled).
    pub fn send_window(&self) -> u64 {
        self.snd_wnd
    }

    /// What the handshake settled.
    pub fn negotiated(&self) -> Negotiated {
        self.neg
    }

    /// Counters.
    pub fn stats(&self) -> &TcpStats {
        &self.stats
    }

    /// The congestion controller's values.
    pub fn cc_metrics(&self) -> ControllerMetrics {
        self.cc.metrics()
    }

    /// Starts (`Some`) or stops recording a congestion-control trace
    /// ([`super::trace`]); starting again keeps nothing of an earlier one.
    pub fn set_trace(&mut self, config: Option<TraceConfig>) {
        self.trace = config.map(|c| Box::new(Tracer::new(c)));
    }

    /// Moves the trace's samples into `out`, oldest first; returns how many
    /// gave way to newer ones since the last drain (drain more often, or
    /// raise `capacity`). Nothing when tracing is off.
    pub fn drain_trace(&mut self, out: &mut Vec<CcSample>) -> u64 {
        self.trace.as_mut().map_or(0, |t| t.drain(out))
    }

    /// Records a trace sample if one is due.
    pub(super) fn trace_tick(&mut self, now: Instant) {
        if self.trace.is_none() {
            return;
        }
        let cc = self.cc.metrics();
        let (in_recovery, rtos) = (self.in_recovery, self.stats.rtos);
        let (srtt, min_rtt) = (self.rtt.smoothed(), self.rtt.min());
        let (flight, rate, acked) = (self.flight(), self.last_delivery_rate, self.acked());
        let Some(trace) = self.trace.as_mut() else {
            return;
        };
        trace.tick(now, cc.phase, in_recovery, rtos, |cause| CcSample {
            at: now,
            cause,
            cwnd: cc.window,
            ssthresh: cc.ssthresh,
            pacing_rate: cc.pacing_rate,
            srtt,
            min_rtt,
            bytes_in_flight: flight,
            delivery_rate: rate,
            acked,
            phase: cc.phase,
            in_recovery,
        });
    }

    /// SACK holes in what is in flight ([`Scoreboard::holes`](super::scoreboard::Scoreboard::holes)).
    pub fn sack_holes(&self) -> u64 {
        self.sent.holes()
    }

    /// The RTT estimator.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// Bytes in flight (RFC 6675 pipe).
    pub fn bytes_in_flight(&self) -> u64 {
        self.sent.pipe()
    }

    /// Whether loss recovery (fast recovery or RTO recovery) is under way.
    pub fn in_recovery(&self) -> bool {
        self.in_recovery
    }

    /// The congestion controller this connection was opened with.
    pub fn algorithm(&self) -> crate::cc::Algorithm {
        self.config.algorithm
    }

    /// The current retransmission timeout, backoff included.
    pub fn current_rto(&self) -> Duration {
        let base = self.rtt.rto();
        let factor = 1u32.checked_shl(self.backoff.min(31)).unwrap_or(u32::MAX);
        base.saturating_mul(factor).min(self.config.max_rto)
    }
}
