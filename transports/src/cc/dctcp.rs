//! DCTCP, RFC 8257: Reno's window growth, with the ECN response scaled by
//! the fraction of bytes the network marked.
//!
//! * The sender keeps `alpha`, an estimate of the CE-marked fraction, and
//!   updates it once per window of data (RFC 8257 3.3):
//!   `alpha = (1 - g) alpha + g F`, where `F` = marked bytes / acknowledged
//!   bytes over the window just ended and `g` is [`DctcpParams::gain`].
//!   `alpha` starts at 1 (3.3).
//! * An observation window ends with the first ACK for data sent after the
//!   window began (send-time rounds, see `round.rs`): the equivalent of
//!   RFC 8257's `SEG.ACK > WindowEnd` with `WindowEnd = SND.NXT`.
//! * Acknowledged bytes come from [`Controller::on_ack`], marked bytes from
//!   [`Controller::on_ecn`]. The transport should report an ACK's ECN
//!   feedback before its [`AckEvent`] (either order works; the other one
//!   moves a boundary ACK's marks into the next window) and may call
//!   `on_ecn` for every ACK or only for those with CE bytes.
//! * On CE feedback the window is reduced at most once per window of data:
//!   `cwnd = ssthresh = cwnd (1 - alpha / 2)` (3.3), not below the minimum.
//! * Loss is handled as by Reno (3.5): halve once per window, collapse to the
//!   minimum window on a timeout. A loss and a CE mark in the same window
//!   reduce once (RFC 3168 6.1.2).
//! * Growth is RFC 5681 slow start (with RFC 3465 byte counting, `L = 2`)
//!   and congestion avoidance (one MSS per window of acknowledged bytes):
//!   [`Classic`]'s, as is the recovery epoch; this file adds `alpha`.

use super::classic::{Classic, Window, WindowAdjust};
use super::round::RoundTracker;
use super::{AckEvent, CcConfig, EcnEvent, ParamError, Params};
use crate::time::Instant;

/// RFC 8257 DCTCP; see the module docs.
pub type Dctcp = Classic<DctcpWindow>;

cc_params! {
    /// `[transport.cc.dctcp]`.
    pub struct DctcpParams {
        /// The gain g of the CE fraction estimate (RFC 8257 3.3: 1/16), in `(0, 1]`.
        pub gain: f64,
    }
}

impl Default for DctcpParams {
    fn default() -> Self {
        Self { gain: 1.0 / 16.0 }
    }
}

impl Params for DctcpParams {
    fn validate(&self) -> Result<(), ParamError> {
        if !(self.gain > 0.0 && self.gain <= 1.0) {
            return Err(ParamError::new(
                "gain",
                self.gain,
                "must be in (0, 1] (RFC 8257 suggests 1/16)",
            ));
        }
        Ok(())
    }
}

/// DCTCP's window adjustment: Reno's growth, the ECN response scaled by
/// `alpha`; see [`Dctcp`].
#[derive(Debug, Clone)]
pub struct DctcpWindow {
    gain: f64,
    alpha: f64,
    observation: RoundTracker,
    window_acked: u64,
    window_marked: u64,
    /// Send time of the newest data acknowledged so far.
    last_acked_sent: Option<Instant>,
}

impl Dctcp {
    /// The current estimate of the marked fraction, in `[0, 1]`.
    pub fn alpha(&self) -> f64 {
        self.adjust.alpha
    }
}

impl WindowAdjust for DctcpWindow {
    /// A `gain` outside `(0, 1]` falls back to RFC 8257's 1/16; see
    /// [`DctcpParams::validate`].
    fn new(config: &CcConfig) -> Self {
        let gain = config.params.dctcp.gain;
        let gain = if gain > 0.0 && gain <= 1.0 {
            gain
        } else {
            DctcpParams::default().gain
        };
        Self {
            gain,
            alpha: 1.0,
            observation: RoundTracker::default(),
            window_acked: 0,
            window_marked: 0,
            last_acked_sent: None,
        }
    }

    fn observe_ack(&mut self, _window: &Window, ack: &AckEvent<'_>) {
        self.last_acked_sent = Some(self.last_acked_sent.map_or(ack.sent, |s| s.max(ack.sent)));
        // RFC 8257 3.3 steps 1 to 6.
        self.window_acked = self.window_acked.saturating_add(ack.bytes_acked);
        if self.observation.on_ack(ack.now, ack.sent) {
            let fraction = if self.window_acked == 0 {
                0.0
            } else {
                (self.window_marked as f64 / self.window_acked as f64).min(1.0)
            };
            self.alpha = ((1.0 - self.gain) * self.alpha + self.gain * fraction).clamp(0.0, 1.0);
            self.window_acked = 0;
            self.window_marked = 0;
        }
    }

    fn on_ecn(&mut self, window: &mut Window, event: &EcnEvent) {
        // F is clamped to 1 when the window ends, so an EcnEvent that
        // reports more CE bytes than acknowledged ones cannot push alpha
        // past 1.
        let marked = event.ce_bytes;
        self.window_marked = self.window_marked.saturating_add(marked);
        if marked == 0 {
            return;
        }
        let answered = match (window.recovery_start(), self.last_acked_sent) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(at), Some(sent)) => sent <= at,
        };
        if !answered {
            let reduced = window.cwnd() * (1.0 - self.alpha / 2.0);
            window.reduce(event.now, (reduced as u64) as f64);
        }
    }

    fn wants_ecn(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::{ack, rtt_after};
    use crate::cc::{CcParams, CongestionEvent, Controller};
    use core::time::Duration;

    fn config(gain: f64) -> CcConfig {
        CcConfig {
            mss: 1000,
            params: CcParams {
                dctcp: DctcpParams { gain },
                ..CcParams::default()
            },
            ..CcConfig::default()
        }
    }

    fn ecn(now: Instant, acked: u64, ce: u64) -> EcnEvent {
        EcnEvent {
            now,
            acked_bytes: acked,
            ce_bytes: ce,
        }
    }

    #[test]
    fn alpha_converges_to_the_marked_fraction() {
        let r = rtt_after(None);
        let g = 1.0 / 16.0;
        let mut cc = Dctcp::new(&config(g));
        assert_eq!(cc.alpha(), 1.0);
        // The first ACK is a window of its own, unmarked: alpha = 1 - g.
        let mut now = Instant::from_millis(1);
        cc.on_ack(&ack(&r, now, Instant::ZERO, 1000));
        assert_eq!(cc.alpha(), 1.0 - g);
        // Then windows of 4 ACKs, one of them CE-marked: F = 1/4. The last
        // ACK of each window acknowledges data sent when the window began.
        let mut window_start = now;
        let mut expected = 1.0 - g;
        for n in 1..=100 {
            for i in 0..4 {
                now += Duration::from_micros(250);
                let sent = if i == 3 { window_start } else { Instant::ZERO };
                cc.on_ecn(&ecn(now, 1000, if i == 1 { 1000 } else { 0 }));
                cc.on_ack(&ack(&r, now, sent, 1000));
            }
            window_start = now;
            expected = (1.0 - g) * expected + g * 0.25;
            assert!((cc.alpha() - expected).abs() < 1e-12, "window {n}");
        }
        // Closed form: alpha_n = F + (1 - g)^n (alpha_0 - F).
        let closed = 0.25 + (1.0 - g).powi(100) * (1.0 - g - 0.25);
        assert!((cc.alpha() - closed).abs() < 1e-12);
        assert!((cc.alpha() - 0.25).abs() < 0.002);
    }

    #[test]
    fn ce_reduces_by_half_alpha_once_per_window() {
        let r = rtt_after(None);
        let mut cc = Dctcp::new(&config(0.5));
        assert!(cc.wants_ecn());
        // One unmarked window: alpha = 0.5; slow start: 10 000 + 1000.
        cc.on_ack(&ack(&r, Instant::from_millis(10), Instant::ZERO, 1000));
        assert_eq!(cc.alpha(), 0.5);
        assert_eq!(cc.window(), 11_000);
        cc.on_ecn(&ecn(Instant::from_millis(11), 1000, 1000));
        // cwnd (1 - alpha / 2) = 11 000 * 0.75.
        assert_eq!(cc.window(), 8_250);
        assert_eq!(cc.metrics().ssthresh, Some(8_250));
        // More marks for data of the same window: no second reduction.
        cc.on_ack(&ack(
            &r,
            Instant::from_millis(12),
            Instant::from_millis(5),
            1000,
        ));
        cc.on_ecn(&ecn(Instant::from_millis(12), 1000, 1000));
        assert_eq!(cc.window(), 8_250);
        // A mark on data sent after the reduction: reduce again.
        cc.on_ack(&ack(
            &r,
            Instant::from_millis(30),
            Instant::from_millis(20),
            1000,
        ));
        let before = cc.window();
        cc.on_ecn(&ecn(Instant::from_millis(30), 1000, 1000));
        let expected = (before as f64 * (1.0 - cc.alpha() / 2.0)) as u64;
        assert_eq!(cc.window(), expected);
        assert!(cc.window() < before);
    }

    #[test]
    fn loss_halves_like_reno_and_timeout_collapses() {
        let mut cc = Dctcp::new(&config(1.0 / 16.0));
        let loss = |now, sent, timeout| CongestionEvent {
            now: Instant::from_millis(now),
            sent: Instant::from_millis(sent),
            lost_bytes: 1000,
            bytes_in_flight: 6_000,
            timeout,
        };
        cc.on_congestion_event(&loss(10, 5, false));
        assert_eq!(cc.window(), 5_000);
        cc.on_congestion_event(&loss(11, 6, false));
        assert_eq!(cc.window(), 5_000);
        cc.on_congestion_event(&loss(20, 15, true));
        assert_eq!(cc.window(), 2_000);
        assert_eq!(cc.metrics().ssthresh, Some(3_000));
    }
}
