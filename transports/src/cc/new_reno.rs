//! NewReno: slow start, congestion avoidance and multiplicative decrease as
//! in RFC 5681; the recovery period (RFC 6582) is tracked by send time so a
//! window of losses reduces the window once.

use super::{AckEvent, CcConfig, CongestionEvent, Controller, ControllerMetrics, MAX_WINDOW};
use crate::time::Instant;

/// RFC 5681 congestion control.
#[derive(Debug, Clone)]
pub struct NewReno {
    mss: u64,
    window: u64,
    ssthresh: u64,
    min_window_segments: u64,
    /// Bytes acknowledged in congestion avoidance since the window last grew.
    acked_in_ca: u64,
    /// Start of the current recovery period: losses of segments sent before
    /// it belong to the same congestion event.
    recovery_start: Option<Instant>,
}

impl NewReno {
    /// A controller with the configured initial window.
    pub fn new(config: &CcConfig) -> Self {
        // A zero MSS or initial window in config must not break the
        // `window() >= minimum_window() > 0` invariant.
        let mss = u64::from(config.mss.max(1));
        let min_window_segments = config.min_segments();
        Self {
            mss,
            window: (config.initial_segments() * mss).min(MAX_WINDOW),
            ssthresh: u64::MAX,
            min_window_segments,
            acked_in_ca: 0,
            recovery_start: None,
        }
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|start| sent <= start)
    }
}

impl Controller for NewReno {
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, ack: &AckEvent<'_>) {
        if ack.app_limited || self.in_recovery(ack.sent) {
            return;
        }
        if self.window < self.ssthresh {
            // RFC 5681 3.1, with appropriate byte counting (RFC 3465, L = 2).
            self.window = (self.window + ack.bytes_acked.min(2 * self.mss)).min(MAX_WINDOW);
        } else {
            // One MSS per window's worth of acknowledged bytes.
            // Saturating: one ACK may claim any byte count.
            self.acked_in_ca = self.acked_in_ca.saturating_add(ack.bytes_acked);
            if self.acked_in_ca >= self.window {
                self.acked_in_ca -= self.window;
                self.window = (self.window + self.mss).min(MAX_WINDOW);
            }
        }
    }

    fn on_congestion_event(&mut self, event: &CongestionEvent) {
        if event.timeout {
            // RFC 5681 3.1 equation 4 and the loss window.
            self.ssthresh = (event.bytes_in_flight / 2).max(2 * self.mss);
            self.window = self.minimum_window();
            self.recovery_start = Some(event.now);
            self.acked_in_ca = 0;
            return;
        }
        if self.in_recovery(event.sent) {
            return;
        }
        self.recovery_start = Some(event.now);
        self.ssthresh = (self.window / 2).max(self.minimum_window());
        self.window = self.ssthresh;
        self.acked_in_ca = 0;
    }

    fn on_mss_update(&mut self, mss: u16) {
        let mss = u64::from(mss.max(1));
        // Keep the window's size in segments.
        self.window = (self.window / self.mss.max(1) * mss)
            .min(MAX_WINDOW)
            .max(self.min_window_segments * mss);
        self.mss = mss;
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn minimum_window(&self) -> u64 {
        self.min_window_segments * self.mss
    }

    fn metrics(&self) -> ControllerMetrics {
        ControllerMetrics {
            window: self.window,
            ssthresh: (self.ssthresh != u64::MAX).then_some(self.ssthresh),
            pacing_rate: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtt::RttEstimator;
    use core::time::Duration;

    fn rtt() -> RttEstimator {
        RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(1),
            Duration::from_secs(60),
        )
    }

    fn ack(rtt: &RttEstimator, now: u64, sent: u64, bytes: u64) -> AckEvent<'_> {
        AckEvent {
            now: Instant::from_millis(now),
            sent: Instant::from_millis(sent),
            bytes_acked: bytes,
            bytes_in_flight: 0,
            app_limited: false,
            delivery_rate: None,
            in_recovery: false,
            rtt,
        }
    }

    #[test]
    fn slow_start_then_halving_once_per_window() {
        let r = rtt();
        let mut cc = NewReno::new(&CcConfig::default());
        assert_eq!(cc.window(), 14_600);
        cc.on_ack(&ack(&r, 10, 1, 1460));
        assert_eq!(cc.window(), 16_060);
        let loss = |now, sent| CongestionEvent {
            now: Instant::from_millis(now),
            sent: Instant::from_millis(sent),
            lost_bytes: 1460,
            bytes_in_flight: 10_000,
            timeout: false,
        };
        cc.on_congestion_event(&loss(20, 15));
        assert_eq!(cc.window(), 8_030);
        // A second loss from the same flight does not reduce again.
        cc.on_congestion_event(&loss(21, 16));
        assert_eq!(cc.window(), 8_030);
        // A loss of data sent after recovery started does.
        cc.on_congestion_event(&loss(40, 30));
        assert_eq!(cc.window(), 4_015);
    }

    #[test]
    fn timeout_collapses_to_minimum() {
        let mut cc = NewReno::new(&CcConfig::default());
        cc.on_congestion_event(&CongestionEvent {
            now: Instant::from_millis(5),
            sent: Instant::from_millis(1),
            lost_bytes: 1460,
            bytes_in_flight: 14_600,
            timeout: true,
        });
        assert_eq!(cc.window(), cc.minimum_window());
        assert_eq!(cc.metrics().ssthresh, Some(7_300));
    }
}
