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

use super::round::RoundTracker;
use super::{AckEvent, CcConfig, CongestionEvent, Controller, ControllerMetrics, MAX_WINDOW};
use crate::time::Instant;

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
/// RFC 3465's `L` for plain slow start.
const ABC_L: f64 = 2.0;

/// CUBIC congestion control; see the module docs.
#[derive(Debug, Clone)]
pub struct Cubic {
    mss: f64,
    min_window_segments: f64,
    c: f64,
    beta: f64,
    cwnd: f64,
    ssthresh: f64,
    /// `W_max` after the last congestion event, `None` before the first.
    last_w_max: Option<f64>,
    epoch: Option<Epoch>,
    /// Start of the current recovery period (as in [`super::NewReno`]).
    recovery_start: Option<Instant>,
    hystart: Option<HyStart>,
}

/// One congestion-avoidance stage.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    start: Instant,
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

impl Cubic {
    /// A controller with the configured initial window. A `cubic_c` that is
    /// not a positive finite number or a `cubic_beta` outside `(0, 1)` falls
    /// back to the RFC 9438 value (0.4, 0.7); see [`CcConfig::validate`].
    pub fn new(config: &CcConfig) -> Self {
        let defaults = CcConfig::default();
        let c = if config.cubic_c.is_finite() && config.cubic_c > 0.0 {
            config.cubic_c
        } else {
            defaults.cubic_c
        };
        let beta = if config.cubic_beta > 0.0 && config.cubic_beta < 1.0 {
            config.cubic_beta
        } else {
            defaults.cubic_beta
        };
        let mss = f64::from(config.mss.max(1));
        let min_window_segments = config.min_segments() as f64;
        let cwnd = config.initial_segments() as f64 * mss;
        Self {
            mss,
            min_window_segments,
            c,
            beta,
            cwnd: cwnd.min(MAX_WINDOW as f64),
            ssthresh: f64::INFINITY,
            last_w_max: None,
            epoch: None,
            recovery_start: None,
            hystart: config.hystart.then(|| HyStart {
                rounds: RoundTracker::default(),
                last_round_min: None,
                current_round_min: None,
                samples: 0,
                css: None,
            }),
        }
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|start| sent <= start)
    }

    fn clamp(&mut self) {
        let min = self.min_window_segments * self.mss;
        self.cwnd = if self.cwnd.is_finite() {
            self.cwnd.clamp(min, MAX_WINDOW as f64)
        } else {
            min
        };
    }

    /// `alpha_cubic` of RFC 9438 4.3.
    fn alpha(&self) -> f64 {
        3.0 * (1.0 - self.beta) / (1.0 + self.beta)
    }

    fn slow_start(&mut self, ack: &AckEvent<'_>) {
        let acked = ack.bytes_acked as f64;
        let Some(hs) = self.hystart.as_mut() else {
            self.cwnd += acked.min(ABC_L * self.mss);
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
        let mut growth = acked.min(HYSTART_L * self.mss);
        if hs.css.is_some() {
            growth /= CSS_GROWTH_DIVISOR;
        }
        self.cwnd += growth;
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
                self.ssthresh = self.cwnd;
                self.hystart = None;
            }
            _ => {}
        }
    }

    fn congestion_avoidance(&mut self, ack: &AckEvent<'_>) {
        let (c, mss, cwnd) = (self.c, self.mss, self.cwnd);
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
            self.cwnd = w_est;
        } else {
            let target = epoch.w_cubic(c, mss, t + rtt).clamp(cwnd, 1.5 * cwnd);
            self.cwnd += (target - cwnd) * acked / cwnd;
        }
        if let Some(e) = self.epoch.as_mut() {
            e.w_est = w_est;
        }
    }
}

impl Controller for Cubic {
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, ack: &AckEvent<'_>) {
        if ack.app_limited || ack.in_recovery || self.in_recovery(ack.sent) {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.slow_start(ack);
        } else {
            self.congestion_avoidance(ack);
        }
        self.clamp();
    }

    fn on_congestion_event(&mut self, event: &CongestionEvent) {
        let repeated = self.in_recovery(event.sent);
        if repeated && !event.timeout {
            return;
        }
        if !repeated {
            // RFC 9438 4.6 and 4.7 (fast convergence).
            let cwnd = self.cwnd;
            self.last_w_max = Some(match self.last_w_max {
                Some(w_max) if cwnd < w_max => cwnd * (1.0 + self.beta) / 2.0,
                _ => cwnd,
            });
            self.ssthresh = (cwnd * self.beta).max(self.min_window_segments * self.mss);
        }
        self.recovery_start = Some(event.now);
        self.epoch = None;
        self.hystart = None;
        self.cwnd = if event.timeout { 0.0 } else { self.ssthresh };
        self.clamp();
    }

    fn on_mss_update(&mut self, mss: u16) {
        let mss = f64::from(mss.max(1));
        let scale = mss / self.mss;
        self.cwnd *= scale;
        self.ssthresh *= scale;
        self.last_w_max = self.last_w_max.map(|w| w * scale);
        if let Some(e) = self.epoch.as_mut() {
            e.w_max *= scale;
            e.cwnd_epoch *= scale;
            e.w_est *= scale;
        }
        self.mss = mss;
        self.clamp();
    }

    fn window(&self) -> u64 {
        self.cwnd as u64
    }

    fn minimum_window(&self) -> u64 {
        (self.min_window_segments * self.mss) as u64
    }

    fn metrics(&self) -> ControllerMetrics {
        ControllerMetrics {
            window: self.window(),
            ssthresh: self.ssthresh.is_finite().then_some(self.ssthresh as u64),
            pacing_rate: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `t - d` (the crate's `Instant` only adds durations).
    fn earlier(t: Instant, d: Duration) -> Instant {
        Instant::from_nanos(t.as_nanos() - d.as_nanos() as u64)
    }
    use crate::rtt::RttEstimator;

    fn config(hystart: bool) -> CcConfig {
        CcConfig {
            mss: 1000,
            hystart,
            ..CcConfig::default()
        }
    }

    fn rtt_of(sample: Duration) -> RttEstimator {
        let mut r = RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(1),
            Duration::from_secs(60),
        );
        r.update(sample);
        r
    }

    fn ack(rtt: &RttEstimator, now: Instant, sent: Instant, bytes: u64) -> AckEvent<'_> {
        AckEvent {
            now,
            sent,
            bytes_acked: bytes,
            bytes_in_flight: 0,
            app_limited: false,
            delivery_rate: None,
            in_recovery: false,
            rtt,
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
        cc.cwnd = bytes as f64;
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
        let e = cc.epoch.expect("congestion avoidance started an epoch");
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
        cc.cwnd = 80_000.0;
        cc.on_congestion_event(&loss(
            Instant::from_millis(3000),
            Instant::from_millis(2000),
            false,
        ));
        // W_max = 80 (1 + 0.7) / 2 = 68 segments; cwnd = 0.7 * 80.
        assert_eq!(cc.last_w_max, Some(68_000.0));
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
        let e = cc.epoch.expect("in congestion avoidance");
        assert!(
            (e.w_est - expected).abs() < 2.0,
            "{} vs {expected}",
            e.w_est
        );
        assert!(
            (cc.cwnd - expected).abs() < 2.0,
            "{} vs {expected}",
            cc.cwnd
        );
        assert_eq!(cc.cwnd, e.w_est, "in the Reno-friendly region cwnd = W_est");
        // The cubic curve itself is still near cwnd_epoch.
        assert!(e.w_cubic(0.4, 1000.0, 0.015) < 14_200.0);
    }

    #[test]
    fn concave_region_moves_toward_the_cubic_target() {
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
        let before = cc.cwnd;
        let e = cc.epoch.expect("epoch");
        // One ACK two seconds in: cwnd += (target - cwnd) * acked / cwnd.
        let now = start + Duration::from_secs(2);
        cc.on_ack(&ack(
            &r,
            now,
            earlier(now, Duration::from_millis(100)),
            7_000,
        ));
        let target = e.w_cubic(0.4, 1000.0, 2.1).clamp(before, 1.5 * before);
        let expected = before + (target - before) * 7_000.0 / before;
        assert!(
            (cc.cwnd - expected).abs() < 1e-6,
            "{} vs {expected}",
            cc.cwnd
        );
        assert!(cc.cwnd < 100_000.0);
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
                let in_css = cc.hystart.as_ref().is_some_and(|h| h.css.is_some());
                let in_ss = cc.cwnd < cc.ssthresh;
                let before = cc.cwnd;
                cc.on_ack(&ack(&r, now, prev_first, 1000));
                if in_css && in_ss {
                    css_seen_at.get_or_insert(round);
                    assert_eq!(cc.cwnd - before, 250.0, "CSS grows at 1/CSS_GROWTH_DIVISOR");
                }
            }
            if cc.cwnd >= cc.ssthresh {
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
        assert!(cc.hystart.as_ref().is_some_and(|h| h.css.is_none()));
        // 80 acks of 1000 B in slow start: 10 000 + 80 000.
        assert_eq!(cc.window(), 90_000);
        assert_eq!(cc.metrics().ssthresh, None);
    }
}
