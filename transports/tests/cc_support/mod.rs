//! A "fluid" path for congestion-controller tests, without a network: each
//! round the sender sends one window at once, and its ACKs come back one
//! RTT later. The RTT grows with the standing queue (window beyond the
//! bandwidth-delay product, drained at the bottleneck rate); packets in the
//! queue beyond a threshold can be CE-marked; one segment per round can be
//! declared lost. Delivery-rate samples are window / RTT, capped at the
//! bottleneck.

#![allow(dead_code, reason = "each test file uses a different subset")]

use core::time::Duration;

use transports::cc::{AckEvent, Algorithm, Cc, CcConfig, CongestionEvent, Controller, EcnEvent};
use transports::rtt::RttEstimator;
use transports::Instant;

/// The path the fluid sender runs over.
#[derive(Debug, Clone, Copy)]
pub struct Path {
    /// Propagation RTT.
    pub base_rtt: Duration,
    /// Bottleneck rate in bytes per second.
    pub bottleneck: u64,
    /// CE-mark packets that find more than this many bytes queued.
    pub mark_above: Option<u64>,
}

impl Path {
    /// Bandwidth-delay product in bytes.
    pub fn bdp(&self) -> u64 {
        (self.bottleneck as f64 * self.base_rtt.as_secs_f64()) as u64
    }
}

/// What happened in one round.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    /// Window when the round's data was sent.
    pub window: u64,
    /// Window after the round's ACKs.
    pub window_after: u64,
    /// The round's RTT (base plus queueing).
    pub rtt: Duration,
    /// Bytes acknowledged.
    pub delivered: u64,
    /// Segments CE-marked.
    pub marked: u64,
    /// When the round ended.
    pub end: Instant,
}

/// One controller on one [`Path`].
#[derive(Debug)]
pub struct Fluid {
    /// The controller under test.
    pub cc: Cc,
    /// Virtual time.
    pub now: Instant,
    /// The path.
    pub path: Path,
    rtt: RttEstimator,
    mss: u64,
}

impl Fluid {
    /// A fresh controller of `algorithm` at time 1 ms.
    pub fn new(algorithm: Algorithm, config: &CcConfig, path: Path) -> Self {
        Self {
            cc: algorithm.build(config),
            now: Instant::from_millis(1),
            path,
            rtt: RttEstimator::new(
                Duration::from_secs(1),
                Duration::from_millis(1),
                Duration::from_secs(60),
            ),
            mss: u64::from(config.mss),
        }
    }

    /// Runs one round; with `lose_one`, the round's first segment is lost
    /// (reported when the first ACK arrives) instead of acknowledged.
    pub fn round(&mut self, lose_one: bool) -> Round {
        let window = self.cc.window();
        let segments = (window / self.mss).max(1);
        let bytes = segments * self.mss;
        let start = self.now;
        for i in 0..segments {
            self.cc.on_sent(start, self.mss, (i + 1) * self.mss);
        }
        let bdp = self.path.bdp();
        let queue = bytes.saturating_sub(bdp);
        let queue_delay = Duration::from_secs_f64(queue as f64 / self.path.bottleneck as f64);
        let rtt = self.path.base_rtt + queue_delay;
        let rate = ((bytes as f64 / rtt.as_secs_f64()) as u64).min(self.path.bottleneck);
        let marked = match self.path.mark_above {
            Some(k) => segments.saturating_sub((bdp + k) / self.mss),
            None => 0,
        };
        let mut delivered = 0;
        for i in 0..segments {
            self.rtt.update(rtt);
            let t = start + rtt + Duration::from_micros(i);
            let in_flight = bytes - (i + 1) * self.mss;
            if lose_one && i == 0 {
                self.cc.on_congestion_event(&CongestionEvent {
                    now: t,
                    sent: start,
                    lost_bytes: self.mss,
                    bytes_in_flight: in_flight,
                    timeout: false,
                });
                continue;
            }
            // The segments sent last found the longest queue.
            let ce = i >= segments - marked;
            self.cc.on_ecn(&EcnEvent {
                now: t,
                acked_bytes: self.mss,
                ce_bytes: if ce { self.mss } else { 0 },
            });
            self.cc.on_ack(&AckEvent {
                now: t,
                sent: start,
                bytes_acked: self.mss,
                bytes_in_flight: in_flight,
                app_limited: false,
                delivery_rate: Some(rate),
                in_recovery: false,
                rtt: &self.rtt,
            });
            delivered += self.mss;
        }
        self.now = start + rtt + Duration::from_micros(segments);
        Round {
            window,
            window_after: self.cc.window(),
            rtt,
            delivered,
            marked,
            end: self.now,
        }
    }
}

/// A path with no bottleneck to speak of: the RTT stays at `base_rtt`.
pub fn unlimited(base_rtt: Duration) -> Path {
    Path {
        base_rtt,
        bottleneck: 1 << 50,
        mark_above: None,
    }
}

/// Config with a 1000-byte MSS so windows read as segments × 1000.
pub fn config(hystart: bool) -> CcConfig {
    let mut config = CcConfig {
        mss: 1000,
        ..CcConfig::default()
    };
    config.params.cubic.hystart = hystart;
    config
}
