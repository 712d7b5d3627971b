//! Congestion-control traces, sans-IO: a connection with a trace on
//! ([`TcpConnection::set_trace`](super::TcpConnection::set_trace)) records
//! what its controller did as [`CcSample`]s — every `period` of the time
//! the caller passes in, and at once when something changes (the
//! controller's phase, entering or leaving loss recovery, a
//! retransmission timeout). The caller drains them
//! ([`TcpConnection::drain_trace`](super::TcpConnection::drain_trace));
//! memory is bounded by `capacity` (the oldest samples give way, counted).
//! Off, a connection pays one branch per call.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Instant;

/// How a connection traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceConfig {
    /// A periodic sample at most this often (events are recorded as they
    /// happen regardless).
    pub period: Duration,
    /// Samples kept until drained; above it the oldest go.
    pub capacity: usize,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            period: Duration::from_millis(1),
            capacity: 65_536,
        }
    }
}

/// Why a sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceCause {
    /// The period elapsed.
    Periodic,
    /// The controller's phase changed (`slow_start` → `congestion_avoidance`,
    /// BBR's `startup` → `drain`, …).
    Phase,
    /// Loss recovery began.
    Recovery,
    /// Loss recovery ended.
    RecoveryEnd,
    /// A retransmission timeout fired.
    Rto,
}

impl TraceCause {
    /// The name in CSV and JSON output.
    pub fn name(self) -> &'static str {
        match self {
            TraceCause::Periodic => "periodic",
            TraceCause::Phase => "phase",
            TraceCause::Recovery => "recovery",
            TraceCause::RecoveryEnd => "recovery_end",
            TraceCause::Rto => "rto",
        }
    }
}

/// The controller's and the path's state at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CcSample {
    /// When (the caller's clock).
    pub at: Instant,
    /// Why it was taken.
    pub cause: TraceCause,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes, if the controller has one.
    pub ssthresh: Option<u64>,
    /// Pacing rate, bytes per second, if the controller paces.
    pub pacing_rate: Option<u64>,
    /// Smoothed RTT.
    pub srtt: Option<Duration>,
    /// Smallest RTT seen.
    pub min_rtt: Option<Duration>,
    /// Bytes sent and not acknowledged.
    pub bytes_in_flight: u64,
    /// The latest delivery-rate sample, bytes per second.
    pub delivery_rate: Option<u64>,
    /// Send-stream bytes acknowledged so far.
    pub acked: u64,
    /// The controller's phase.
    pub phase: &'static str,
    /// In loss recovery.
    pub in_recovery: bool,
}

/// A connection's trace: the samples and what decides the next one.
#[derive(Debug)]
pub(crate) struct Tracer {
    config: TraceConfig,
    samples: VecDeque<CcSample>,
    next: Instant,
    phase: &'static str,
    in_recovery: bool,
    rtos: u64,
    /// Samples that gave way to newer ones since the last drain.
    overwritten: u64,
}

impl Tracer {
    pub(crate) fn new(config: TraceConfig) -> Self {
        Tracer {
            config: TraceConfig {
                capacity: config.capacity.max(1),
                ..config
            },
            samples: VecDeque::new(),
            next: Instant::ZERO,
            phase: "",
            in_recovery: false,
            rtos: 0,
            overwritten: 0,
        }
    }

    /// Records a sample if one is due: an event (phase, recovery, RTO
    /// count changed) or the period. `take` builds it with the cause.
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        phase: &'static str,
        in_recovery: bool,
        rtos: u64,
        take: impl FnOnce(TraceCause) -> CcSample,
    ) {
        let cause = if rtos > self.rtos {
            Some(TraceCause::Rto)
        } else if in_recovery != self.in_recovery {
            Some(if in_recovery {
                TraceCause::Recovery
            } else {
                TraceCause::RecoveryEnd
            })
        } else if phase != self.phase {
            Some(TraceCause::Phase)
        } else if now >= self.next {
            Some(TraceCause::Periodic)
        } else {
            None
        };
        let Some(cause) = cause else {
            return;
        };
        (self.phase, self.in_recovery, self.rtos) = (phase, in_recovery, rtos);
        if self.samples.len() >= self.config.capacity {
            self.samples.pop_front();
            self.overwritten += 1;
        }
        self.samples.push_back(take(cause));
        self.next = now + self.config.period;
    }

    /// Moves the samples into `out`; returns how many were overwritten
    /// since the last drain.
    pub(crate) fn drain(&mut self, out: &mut Vec<CcSample>) -> u64 {
        out.extend(self.samples.drain(..));
        std::mem::take(&mut self.overwritten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, cause: TraceCause) -> CcSample {
        CcSample {
            at,
            cause,
            cwnd: 10,
            ssthresh: None,
            pacing_rate: None,
            srtt: None,
            min_rtt: None,
            bytes_in_flight: 0,
            delivery_rate: None,
            acked: 0,
            phase: "",
            in_recovery: false,
        }
    }

    #[test]
    fn periodic_samples_and_events_in_between() {
        let mut t = Tracer::new(TraceConfig {
            period: Duration::from_millis(10),
            capacity: 100,
        });
        let ms = Instant::from_millis;
        for i in 0..=30 {
            let (phase, rec, rtos) = match i {
                0..=14 => ("slow_start", false, 0),
                15..=19 => ("congestion_avoidance", false, 0),
                20..=24 => ("congestion_avoidance", true, 0),
                25 => ("congestion_avoidance", true, 1),
                _ => ("congestion_avoidance", false, 1),
            };
            t.tick(ms(i), phase, rec, rtos, |c| sample(ms(i), c));
        }
        let mut out = Vec::new();
        assert_eq!(t.drain(&mut out), 0);
        let got: Vec<(u64, TraceCause)> = out
            .iter()
            .map(|s| (s.at.as_nanos() / 1_000_000, s.cause))
            .collect();
        use TraceCause::*;
        assert_eq!(
            got,
            vec![
                (0, Phase),
                (10, Periodic),
                (15, Phase),
                (20, Recovery),
                (25, Rto),
                (26, RecoveryEnd),
            ]
        );
        assert!(
            t.drain(&mut out) == 0 && out.len() == 6,
            "a drain empties it"
        );
    }

    #[test]
    fn memory_is_bounded_and_losses_counted() {
        let mut t = Tracer::new(TraceConfig {
            period: Duration::ZERO,
            capacity: 4,
        });
        for i in 0..10 {
            let at = Instant::from_millis(i);
            t.tick(at, "", false, 0, |c| sample(at, c));
        }
        let mut out = Vec::new();
        assert_eq!(t.drain(&mut out), 6);
        let kept: Vec<u64> = out.iter().map(|s| s.at.as_nanos() / 1_000_000).collect();
        assert_eq!(kept, vec![6, 7, 8, 9], "the newest stay");
    }
}
