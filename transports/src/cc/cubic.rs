//! CUBIC (RFC 9438) with HyStart++ (RFC 9406) in the initial slow start.
//!
//! Window arithmetic is done in bytes with `f64`; the RFC's formulas are in
//! segments, so `W` values below are segments times the MSS. The window is
//! kept in `[minimum_window, MAX_WINDOW]` after every call.
//!
//! * Congestion avoidance (RFC 9438 4.2): `W_cubic(t) = C (t - K)^3 + W_max`
//!   with `K = cbrt((W_max - cwnd_epoch) / C)`; per ACK the window moves by
//!   `(target - cwnd) / cwnd` of the acknowledged bytes, where `target` is
//!   `W_cubic(t + SRTT)` clamped to `[cwnd, 1.5 cwnd]`. `t` runs from the
//!   first ACK of the congestion-avoidance stage (the "epoch").
//! * Reno-friendly region (4.3): `W_est` starts at `cwnd_epoch` and grows by
//!   `alpha_cubic = 3 (1 - beta) / (1 + beta)` segments per window of ACKed
//!   data (1 once `W_est >= W_max`); when `W_cubic(t) < W_est` the window is
//!   `W_est`.
//! * Multiplicative decrease (4.6) with fast convergence (4.7): on loss
//!   `W_max = cwnd` (or `cwnd (1 + beta) / 2` when the window had not
//!   regained the previous `W_max`), `ssthresh = cwnd = beta * cwnd`. The
//!   RFC allows `cwnd` in place of the flight size; we use `cwnd`.
//! * Timeout (4.8): `ssthresh` as for a loss, the window collapses to the
//!   minimum (RFC 5681's loss window) and a new epoch starts after slow start.
//!   A timeout for a segment sent before the last reduction (a repeated
//!   RTO) keeps `ssthresh` (RFC 5681 3.1).
//! * Leaving slow start without a loss (4.10, e.g. by HyStart++): `K = 0`
//!   and `W_max` is the window at the start of congestion avoidance.
//! * Application-limited ACKs do not grow the window (5.8). Unlike Linux,
//!   the epoch is not shifted after an idle period: `t` keeps running.
//!
//! The recovery epoch, `ssthresh` and the window's bounds are [`Classic`]'s;
//! this file is CUBIC's window adjustment.
//!
//! HyStart++ (RFC 9406 4.2) runs only in the first slow start (after any
//! loss or timeout, standard slow start is used, as RFC 9406 recommends).
//! Conservative Slow Start lasts `CSS_ROUNDS` rounds counting the partial
//! round in which it began. Rounds
//! are counted by send time (see `round.rs`): a round ends with the first ACK
//! for data sent after the round began. The RTT sample of each ACK is
//! [`RttEstimator::latest`](crate::rtt::RttEstimator::latest) (ignored until
//! the estimator has a sample). Slow start grows by
//! `min(bytes_acked, L * MSS)` with `L = 8` (the RFC's value for a sender
//! that does not pace); without HyStart++ `L = 2` (RFC 3465).

use core::time::Duration;

use super::classic::{Classic, Window, WindowAdjust, ABC_L};
use super::round::RoundTracker;
use super::{AckEvent, CcConfig, CongestionEvent, ParamError, Params, MAX_WINDOW};

/// RFC 9406 constants (section 4.3).
const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
const MIN_RTT_DIVISOR: u32 = 8;
const N_RTT_SAMPLE: u32 = 8;
/// Conservative Slow Start grows this many times slower than slow start.
pub const CSS_GROWTH_DIVISOR: f64 = 4.0;
/// Rounds of Conservative Slow Start before congestion avoidance.
pub const CSS_ROUNDS: u32 = 5;
/// RFC 9406's `L` for a non-pacing sender.
const HYSTART_L: f64 = 8.0;

/// CUBIC congestion control; see the module docs.
pub type Cubic = Classic<CubicWindow>;

cc_params! {
    /// `[transport.cc.cubic]`.
    pub struct CubicParams {
        /// The multiplicative decrease factor beta (RFC 9438 4.6: 0.7), in `(0, 1)`.
        pub beta: f64,
        /// The constant C (RFC 9438 5: 0.4), positive.
        pub c: f64,
        /// HyStart++ (RFC 9406) in the first slow start.
        pub hystart: bool,
    }
}

impl Default for CubicParams {
    fn default() -> Self {
        Self {
            beta: 0.7,
            c: 0.4,
            hystart: true,
        }
    }
}

impl CubicParams {
    fn c_ok(c: f64) -> bool {
        c.is_finite() && c > 0.0
    }

    fn beta_ok(beta: f64) -> bool {
        beta > 0.0 && beta < 1.0
    }
}

impl Params for CubicParams {
    fn validate(&self) -> Result<(), ParamError> {
        if !Self::c_ok(self.c) {
            return Err(ParamError::new(
                "c",
                self.c,
                "must be a positive finite number (RFC 9438: 0.4)",
            ));
        }
        if !Self::beta_ok(self.beta) {
            return Err(ParamError::new(
                "beta",
                self.beta,
                "must be in (0, 1) (RFC 9438: 0.7)",
            ));
        }
        Ok(())
    }
}

/// CUBIC's window adjustment; see [`Cubic`].
#[derive(Debug, Clone)]
pub struct CubicWindow {
    c: f64,
    beta: f64,
    /// `W_max` after the last congestion event, `None` before the first.
    last_w_max: Option<f64>,
    epoch: Option<Epoch>,
    hystart: Option<HyStart>,
}

/// One congestion-avoidance stage.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    start: crate::time::Instant,
    /// Seconds.
    k: f64,
    /// Bytes.
    w_max: f64,
    /// Bytes: the window when the epoch started (`cwnd_epoch`).
    cwnd_epoch: f64,
    /// Bytes: the Reno-friendly estimate `W_est`.
    w_est: f64,
}

impl Epoch {
    /// `W_cubic(t)` in bytes, `t` in seconds since the epoch start.
    fn w_cubic(&self, c: f64, mss: f64, t: f64) -> f64 {
        let d = t - self.k;
        c * d * d * d * mss + self.w_max
    }
}

#[derive(Debug, Clone)]
struct HyStart {
    rounds: RoundTracker,
    last_round_min: Option<Duration>,
    current_round_min: Option<Duration>,
    samples: u32,
    /// In Conservative Slow Start: the baseline min RTT and rounds spent.
    css: Option<(Duration, u32)>,
}

impl CubicWindow {
    /// `alpha_cubic` of RFC 9438 4.3.
    fn alpha(&self) -> f64 {
        3.0 * (1.0 - self.beta) / (1.0 + self.beta)
    }
}

impl WindowAdjust for CubicWindow {
    /// A `c` that is not a positive finite number or a `beta` outside
    /// `(0, 1)` falls back to the RFC 9438 value (0.4, 0.7); see
    /// [`CubicParams::validate`].
    fn new(config: &CcConfig) -> Self {
        let (params, defaults) = (&config.params.cubic, CubicParams::default());
        Self {
            c: if CubicParams::c_ok(params.c) {
                params.c
            } else {
                defaults.c
            },
            beta: if CubicParams::beta_ok(params.beta) {
                params.beta
            } else {
                defaults.beta
            },
            last_w_max: None,
            epoch: None,
            hystart: params.hystart.then(|| HyStart {
                rounds: RoundTracker::default(),
                last_round_min: None,
                current_round_min: None,
                samples: 0,
                css: None,
            }),
        }
    }

    fn slow_start(&mut self, window: &mut Window, ack: &AckEvent<'_>) {
        let acked = ack.bytes_acked as f64;
        let mss = window.mss() as f64;
        let Some(hs) = self.hystart.as_mut() else {
            window.slow_start(ack.bytes_acked, ABC_L);
            return;
        };
        if hs.rounds.on_ack(ack.now, ack.sent) {
            hs.last_round_min = hs.current_round_min.take();
            hs.samples = 0;
            if let Some((_, rounds)) = hs.css.as_mut() {
                *rounds += 1;
            }
        }
        if ack.rtt.smoothed().is_some() {
            let sample = ack.rtt.latest();
            hs.current_round_min = Some(hs.current_round_min.map_or(sample, |m| m.min(sample)));
            hs.samples = hs.samples.saturating_add(1);
        }
        let mut growth = acked.min(HYSTART_L * mss);
        if hs.css.is_some() {
            growth /= CSS_GROWTH_DIVISOR;
        }
        window.set_cwnd(window.cwnd() + growth);
        let enough = hs.samples >= N_RTT_SAMPLE;
        match (hs.css, hs.current_round_min, hs.last_round_min) {
            (None, Some(current), Some(last)) if enough => {
                let thresh = (last / MIN_RTT_DIVISOR).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
                if current >= last.saturating_add(thresh) {
                    hs.css = Some((current, 0));
                }
            }
            (Some((baseline, _)), Some(current), _) if enough && current < baseline => {
                // The delay increase was spurious: back to slow start.
                hs.css = None;
            }
            (Some((_, rounds)), _, _) if rounds >= CSS_ROUNDS => {
                // RFC 9406 4.2: enter congestion avoidance.
                window.end_slow_start();
                self.hystart = None;
            }
            _ => {}
        }
    }

    fn avoidance(&mut self, window: &mut Window, ack: &AckEvent<'_>) {
        let (c, mss, cwnd) = (self.c, window.mss() as f64, window.cwnd());
        let epoch = *self.epoch.get_or_insert_with(|| {
            let (w_max, k) = match self.last_w_max {
                Some(w_max) if w_max > cwnd => (w_max, ((w_max - cwnd) / mss / c).cbrt()),
                _ => (cwnd, 0.0),
            };
            Epoch {
                start: ack.now,
                k,
                w_max,
                cwnd_epoch: cwnd,
                w_est: cwnd,
            }
        });
        let acked = ack.bytes_acked as f64;
        let alpha = if epoch.w_est >= epoch.w_max {
            1.0
        } else {
            self.alpha()
        };
        let w_est = (epoch.w_est + alpha * acked * mss / cwnd).min(MAX_WINDOW as f64);
        let t = (ack.now - epoch.start).as_secs_f64();
        let rtt = ack.rtt.get().as_secs_f64();
        if epoch.w_cubic(c, mss, t) < w_est {
            // Reno-friendly region.
            window.set_cwnd(w_est);
        } else {
            let target = epoch.w_cubic(c, mss, t + rtt).clamp(cwnd, 1.5 * cwnd);
            window.set_cwnd(cwnd + (target - cwnd) * acked / cwnd);
        }
        if let Some(e) = self.epoch.as_mut() {
            e.w_est = w_est;
        }
    }

    fn reduced(&mut self, window: &Window) -> f64 {
        // RFC 9438 4.6 and 4.7 (fast convergence).
        let cwnd = window.cwnd();
        self.last_w_max = Some(match self.last_w_max {
            Some(w_max) if cwnd < w_max => cwnd * (1.0 + self.beta) / 2.0,
            _ => cwnd,
        });
        cwnd * self.beta
    }

    fn timeout_ssthresh(&mut self, window: &Window, _: &CongestionEvent, repeated: bool) -> f64 {
        // RFC 9438 4.8: as for a loss; a repeated timeout keeps ssthresh
        // (RFC 5681 3.1).
        if repeated {
            window.ssthresh()
        } else {
            self.reduced(window)
        }
    }

    fn on_reduced(&mut self) {
        self.epoch = None;
        self.hystart = None;
    }

    fn on_mss_update(&mut self, window: &mut Window, mss: u64) {
        let scale = mss as f64 / window.mss() as f64;
        window.rescale_bytes(mss);
        self.last_w_max = self.last_w_max.map(|w| w * scale);
        if let Some(e) = self.epoch.as_mut() {
            e.w_max *= scale;
            e.cwnd_epoch *= scale;
            e.w_est *= scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{CcParams, Controller};
    use crate::time::Instant;

    use crate::cc::testing::{ack, earlier, rtt_after};
    use crate::rtt::RttEstimator;

    fn rtt_of(sample: Duration) -> RttEstimator {
        rtt_after(Some(sample))
    }

    fn config(hystart: bool) -> CcConfig {
        CcConfig {
            mss: 1000,
            params: CcParams {
                cubic: CubicParams {
                    hystart,
                    ..CubicParams::default()
                },
                ..CcParams::default()
            },
            ..CcConfig::default()
        }
    }

    fn loss(now: Instant, sent: Instant, timeout: bool) -> CongestionEvent {
        CongestionEvent {
            now,
            sent,
            lost_bytes: 1000,
            bytes_in_flight: 0,
            timeout,
        }
    }

    /// A CUBIC controller whose window is exactly `bytes` in slow start.
    fn at_window(bytes: u64) -> Cubic {
        let mut cc = Cubic::new(&config(false));
        cc.state.set_cwnd(bytes as f64);
        cc
    }

    #[test]
    fn loss_sets_window_to_beta_times_w_max_and_k_follows_rfc_9438() {
        let mut cc = at_window(100_000);
        cc.on_congestion_event(&loss(
            Instant::from_millis(1000),
            Instant::from_millis(990),
            false,
        ));
        // beta * W_max = 0.7 * 100 segments.
        assert_eq!(cc.window(), 70_000);
        assert_eq!(cc.metrics().ssthresh, Some(70_000));
        // First ACK of new data starts the epoch.
        let r = rtt_of(Duration::from_millis(10));
        cc.on_ack(&ack(
            &r,
            Instant::from_millis(2000),
            Instant::from_millis(1990),
            1000,
        ));
        let e = cc
            .adjust
            .epoch
            .expect("congestion avoidance started an epoch");
        // K = cbrt(W_max (1 - beta) / C) = cbrt(100 * 0.3 / 0.4) = cbrt(75).
        let k = 75f64.cbrt();
        assert!((e.k - k).abs() < 1e-9, "K = {} expected {k}", e.k);
        assert!((k - 4.217_163).abs() < 1e-6);
        // W_cubic(0) = cwnd_epoch, W_cubic(K) = W_max, and a point between.
        assert!((e.w_cubic(0.4, 1000.0, 0.0) - 70_000.0).abs() < 1e-6);
        assert!((e.w_cubic(0.4, 1000.0, k) - 100_000.0).abs() < 1e-6);
        let expected_2s = (0.4 * (2.0 - k).powi(3) + 100.0) * 1000.0;
        assert!((e.w_cubic(0.4, 1000.0, 2.0) - expected_2s).abs() < 1e-6);
        assert!((expected_2s - 95_640.0).abs() < 1.0, "{expected_2s}");
    }

    #[test]
    fn fast_convergence_lowers_w_max_when_the_window_did_not_recover() {
        let mut cc = at_window(100_000);
        cc.on_congestion_event(&loss(
            Instant::from_millis(1000),
            Instant::from_millis(990),
            false,
        ));
        cc.state.set_cwnd(80_000.0);
        cc.on_congestion_event(&loss(
            Instant::from_millis(3000),
            Instant::from_millis(2000),
            false,
        ));
        // W_max = 80 (1 + 0.7) / 2 = 68 segments; cwnd = 0.7 * 80.
        assert_eq!(cc.adjust.last_w_max, Some(68_000.0));
        assert_eq!(cc.window(), 56_000);
    }

    #[test]
    fn one_reduction_per_window_and_timeout_collapses() {
        let mut cc = at_window(100_000);
        cc.on_congestion_event(&loss(
            Instant::from_millis(1000),
            Instant::from_millis(990),
            false,
        ));
        cc.on_congestion_event(&loss(
            Instant::from_millis(1001),
            Instant::from_millis(995),
            false,
        ));
        assert_eq!(cc.window(), 70_000);
        cc.on_congestion_event(&loss(
            Instant::from_millis(2000),
            Instant::from_millis(1500),
            true,
        ));
        assert_eq!(cc.window(), cc.minimum_window());
        assert_eq!(cc.window(), 2_000);
        assert_eq!(cc.metrics().ssthresh, Some(49_000));
        // A repeated timeout for the same data keeps ssthresh (RFC 5681 3.1).
        cc.on_congestion_event(&loss(
            Instant::from_millis(3000),
            Instant::from_millis(1500),
            true,
        ));
        assert_eq!(cc.metrics().ssthresh, Some(49_000));
    }

    #[test]
    fn reno_friendly_region_follows_w_est() {
        // W_max = 20 segments, cwnd_epoch = 14, K = cbrt(6 / 0.4) = 2.47 s:
        // at a 1 ms RTT Reno grows far faster than the cubic curve.
        let mut cc = at_window(20_000);
        cc.on_congestion_event(&loss(Instant::from_millis(1), Instant::ZERO, false));
        assert_eq!(cc.window(), 14_000);
        let r = rtt_of(Duration::from_millis(1));
        let mut now = Instant::from_millis(10);
        for _ in 0..15 {
            // One stretch ACK per round trip acknowledging a full window.
            let bytes = cc.window();
            cc.on_ack(&ack(&r, now, earlier(now, Duration::from_millis(1)), bytes));
            now += Duration::from_millis(1);
        }
        // alpha = 3 * 0.3 / 1.7; 12 ACKs bring W_est past W_max, after
        // which alpha = 1: 14000 + 12 * 529.41 + 3 * 1000.
        let alpha = 0.9 / 1.7;
        // (Within 2 bytes: each ACK acknowledges the window rounded down.)
        let expected = 14_000.0 + 12.0 * alpha * 1000.0 + 3.0 * 1000.0;
        let e = cc.adjust.epoch.expect("in congestion avoidance");
        assert!(
            (e.w_est - expected).abs() < 2.0,
            "{} vs {expected}",
            e.w_est
        );
        assert!(
            (cc.state.cwnd() - expected).abs() < 2.0,
            "{} vs {expected}",
            cc.state.cwnd()
        );
        assert_eq!(
            cc.state.cwnd(),
            e.w_est,
            "in the Reno-friendly region cwnd = W_est"
        );
        // The cubic curve itself is still near cwnd_epoch.
        assert!(e.w_cubic(0.4, 1000.0, 0.015) < 14_200.0);
    }

    #[test]
    fn concave_region_moves_toward_the_cubic_target() {
        // Expected values evaluated outside the implementation from RFC 9438
        // (eq. 1, 2, 4 and 4.4's target; C = 0.4, beta = 0.7, so
        // alpha_cubic = 0.9 / 1.7; MSS 1000 bytes): W_max = 100 segments,
        // cwnd_epoch = 70, K = cbrt(75) = 4.217163 s, RTT = 0.1 s.
        //   first ACK (1000 bytes), t = 0: W_cubic(0) = 70 000 is below
        //     W_est = 70 000 + alpha * 1000 * 1000 / 70 000 = 70 007.563,
        //     so cwnd = W_est (Reno-friendly);
        //   7000 bytes at t = 2 s: W_cubic(2) = 95 640.3 > W_est, so the
        //     target is W_cubic(2.1) = (0.4 (2.1 - K)^3 + 100) * 1000
        //     = 96 204.027 and cwnd = 70 007.563 + 26 196.464 * 7000 /
        //     70 007.563 = 72 626.926.
        let mut cc = at_window(100_000);
        cc.on_congestion_event(&loss(Instant::from_millis(1), Instant::ZERO, false));
        let r = rtt_of(Duration::from_millis(100));
        let start = Instant::from_millis(1000);
        cc.on_ack(&ack(
            &r,
            start,
            earlier(start, Duration::from_millis(100)),
            1000,
        ));
        assert!(
            (cc.state.cwnd() - 70_007.563_025).abs() < 1e-3,
            "first ACK of the epoch: {}",
            cc.state.cwnd()
        );
        let now = start + Duration::from_secs(2);
        cc.on_ack(&ack(
            &r,
            now,
            earlier(now, Duration::from_millis(100)),
            7_000,
        ));
        assert!(
            (cc.state.cwnd() - 72_626.926_450).abs() < 1e-3,
            "two seconds in: {}",
            cc.state.cwnd()
        );
    }

    #[test]
    fn hystart_exits_slow_start_on_an_rtt_increase() {
        let mut cc = Cubic::new(&config(true));
        let mut now = Instant::from_millis(100);
        let mut prev_first = Instant::ZERO;
        let mut css_seen_at = None;
        let mut ca_at = None;
        // 12 rounds of 10 acks each; from round 4 on the RTT is 20 ms, which
        // exceeds last round's 10 ms + max(4 ms, 10/8 ms). Every ACK of a
        // round acknowledges data sent when the previous round began, so the
        // first one ends the previous round and the rest do not.
        for round in 0..12u64 {
            let rtt = if round >= 4 { 20 } else { 10 };
            let r = rtt_of(Duration::from_millis(rtt));
            let first = now + Duration::from_micros(100);
            for _ in 0..10u64 {
                now += Duration::from_micros(100);
                let in_css = cc.adjust.hystart.as_ref().is_some_and(|h| h.css.is_some());
                let in_ss = cc.state.cwnd() < cc.state.ssthresh();
                let before = cc.state.cwnd();
                cc.on_ack(&ack(&r, now, prev_first, 1000));
                if in_css && in_ss {
                    css_seen_at.get_or_insert(round);
                    assert_eq!(
                        cc.state.cwnd() - before,
                        250.0,
                        "CSS grows at 1/CSS_GROWTH_DIVISOR"
                    );
                }
            }
            if cc.state.cwnd() >= cc.state.ssthresh() {
                ca_at.get_or_insert(round);
            }
            prev_first = first;
            now += Duration::from_millis(1);
        }
        assert_eq!(css_seen_at, Some(4), "delay increase seen in round 4");
        // CSS_ROUNDS rounds of CSS (the entry round counts) then CA.
        assert_eq!(ca_at, Some(4 + u64::from(CSS_ROUNDS)));
        assert!(cc.metrics().ssthresh.is_some());
    }

    #[test]
    fn hystart_keeps_slow_start_without_an_rtt_increase() {
        let mut cc = Cubic::new(&config(true));
        let mut now = Instant::from_millis(100);
        let mut prev_first = Instant::ZERO;
        for round in 0..8u64 {
            // 10 ms, then 13 ms: below 10 + 4 ms.
            let rtt = if round < 4 { 10 } else { 13 };
            let r = rtt_of(Duration::from_millis(rtt));
            let first = now + Duration::from_micros(100);
            for _ in 0..10 {
                now += Duration::from_micros(100);
                cc.on_ack(&ack(&r, now, prev_first, 1000));
            }
            prev_first = first;
            now += Duration::from_millis(1);
        }
        assert!(cc.adjust.hystart.as_ref().is_some_and(|h| h.css.is_none()));
        // 80 acks of 1000 B in slow start: 10 000 + 80 000.
        assert_eq!(cc.window(), 90_000);
        assert_eq!(cc.metrics().ssthresh, None);
    }
}
