//! TCP Vegas (Brakmo, O'Malley and Peterson, SIGCOMM 1994; Brakmo and
//! Peterson, IEEE JSAC 13(8), 1995): a delay-based window adjustment that
//! keeps a few segments queued at the bottleneck instead of filling its
//! buffer until a loss.
//!
//! Once per round trip Vegas compares the rate it expects with the rate it
//! gets. `BaseRTT` is the smallest RTT sample it has taken; `RTT` is the
//! smallest sample of the round just ended (the minimum, so that a delayed
//! ACK does not look like queueing). With `W` the window the measured data
//! was sent under,
//!
//! ```text
//! Expected = W / BaseRTT      Actual = W / RTT
//! Diff     = (Expected - Actual) × BaseRTT = W × (RTT - BaseRTT) / RTT
//! ```
//!
//! `Diff` is the data the connection keeps queued (on a path whose RTT is
//! `BaseRTT` plus the queue drained at the bottleneck rate it is exactly
//! that), and it is compared with three thresholds in segments,
//! [`VegasParams`]:
//!
//! * **Congestion avoidance**: `Diff < alpha` grows the window by one
//!   segment for the next round, `Diff > beta` shrinks it by one, in
//!   between it holds. The window moves only at the end of a round.
//! * **Slow start** doubles the window every *other* round: in between the
//!   window holds, so that the ACKs of the next round are for data sent
//!   under one window. Those ACKs are judged as they arrive: on any ACK of
//!   a doubling round, `Diff > gamma` over the round's samples so far
//!   leaves slow start at the window that would have kept `gamma` segments
//!   queued, `W - Diff + gamma`. (Judging only at the round's end lets the
//!   window double once more with a queue already standing; in cc-lab that
//!   overflowed a one-BDP buffer.)
//! * **Loss** is Reno's: half the window once per window of data, the loss
//!   window after a timeout ([`Classic`]'s defaults), then congestion
//!   avoidance (or slow start up to `ssthresh` after a timeout).
//!
//! Rounds are counted by send time (`round.rs`), and only over ACKs that
//! may move the window: [`Classic`] hands none acknowledging data sent
//! before a reduction, application-limited ones or ones during the
//! transport's loss recovery, so a round spanning a reduction measures
//! nothing. An ACK without an RTT sample in the estimator yet counts for
//! the round but adds no sample; a round without samples decides nothing.
//!
//! Three choices of our own. The samples are the estimator's
//! [`latest`](crate::rtt::RttEstimator::latest) on the ACKs above, so
//! `BaseRTT` is the RTT of a full data segment, not the handshake's: the
//! estimator's [`min`](crate::rtt::RttEstimator::min) is usually the SYN's,
//! and a small segment crosses the bottleneck sooner (a 1500-byte one takes
//! 120 µs at 100 Mbit/s); against it Vegas reads queue that is not there,
//! which in cc-lab (100 Mbit/s, 10 ms) held the window 5 % below the BDP.
//! The measured window `W` is the window when the round began: the ACKs of
//! a round acknowledge data sent in the previous one, under the window
//! that held until this round began (in avoidance it moves only at round
//! boundaries). And the default thresholds are 2, 4 and 1 segments, the
//! values Linux's `tcp_vegas` ships (the papers evaluate both
//! `alpha, beta = 1, 3` and `2, 4`).
//!
//! The recovery epoch, `ssthresh` and the window's bounds are
//! [`Classic`]'s; this file is Vegas's window adjustment.

use core::time::Duration;

use super::classic::{Classic, Window, WindowAdjust, ABC_L};
use super::round::RoundTracker;
use super::{AckEvent, CcConfig, ParamError, Params};

/// TCP Vegas; see the module docs.
pub type Vegas = Classic<VegasWindow>;

cc_params! {
    /// `[transport.cc.vegas]`: thresholds on the queued data `Diff`, in
    /// segments.
    pub struct VegasParams {
        /// Below this many queued segments avoidance grows the window (2), at least 1.
        pub alpha: u32,
        /// Above this many it shrinks the window (4); greater than `alpha`.
        pub beta: u32,
        /// Above this many slow start ends (1), at least 1.
        pub gamma: u32,
    }
}

impl Default for VegasParams {
    fn default() -> Self {
        Self {
            alpha: 2,
            beta: 4,
            gamma: 1,
        }
    }
}

impl Params for VegasParams {
    fn validate(&self) -> Result<(), ParamError> {
        if self.alpha < 1 {
            return Err(ParamError::new(
                "alpha",
                self.alpha,
                "must be at least 1 segment (default 2)",
            ));
        }
        if self.beta <= self.alpha {
            return Err(ParamError::new(
                "beta",
                self.beta,
                "must be greater than alpha (default 4)",
            ));
        }
        if self.gamma < 1 {
            return Err(ParamError::new(
                "gamma",
                self.gamma,
                "must be at least 1 segment (default 1)",
            ));
        }
        Ok(())
    }
}

/// Vegas's window adjustment; see [`Vegas`].
#[derive(Debug, Clone)]
pub struct VegasWindow {
    /// The thresholds, in segments.
    alpha: f64,
    beta: f64,
    gamma: f64,
    rounds: RoundTracker,
    /// The window when the current round began, in bytes.
    round_window: f64,
    /// The smallest RTT sample of the current round.
    round_min: Option<Duration>,
    /// `BaseRTT`: the smallest sample taken so far.
    base: Option<Duration>,
    /// `Diff` of the last round that measured one, in segments.
    last_diff: Option<f64>,
}

impl Vegas {
    /// `Diff`, the segments this connection kept queued, as measured over
    /// the last round that had RTT samples; `None` before the first.
    pub fn diff(&self) -> Option<f64> {
        self.adjust.last_diff
    }
}

/// `Diff` in bytes: what a window of `window` bytes keeps queued when its
/// round's smallest RTT is `rtt` and the path's is `base`. Zero for a zero
/// RTT (nothing measured).
fn queued(window: f64, base: Duration, rtt: Duration) -> f64 {
    if rtt.is_zero() {
        return 0.0;
    }
    window * rtt.saturating_sub(base).as_secs_f64() / rtt.as_secs_f64()
}

impl VegasWindow {
    /// Feeds one ACK that may move the window. Returns `Diff` in segments
    /// of the round it ends, if that round had RTT samples.
    fn measure(&mut self, window: &Window, ack: &AckEvent<'_>) -> Option<f64> {
        let mut ended = None;
        if self.rounds.on_ack(ack.now, ack.sent) {
            if let (Some(rtt), Some(base)) = (self.round_min.take(), self.base) {
                let diff = queued(self.round_window, base, rtt) / window.mss() as f64;
                self.last_diff = Some(diff);
                ended = Some(diff);
            }
            self.round_window = window.cwnd();
        }
        // This ACK acknowledges data sent after the round began: its sample
        // is the new round's.
        if ack.rtt.smoothed().is_some() {
            let sample = ack.rtt.latest();
            self.round_min = Some(self.round_min.map_or(sample, |m| m.min(sample)));
            self.base = Some(self.base.map_or(sample, |b| b.min(sample)));
        }
        ended
    }
}

/// Slow start doubles the window in odd rounds and holds it in even ones.
fn doubling(round: u64) -> bool {
    round % 2 == 1
}

impl WindowAdjust for VegasWindow {
    /// Thresholds that fail [`VegasParams::validate`] fall back to the
    /// defaults (all three, since they constrain each other).
    fn new(config: &CcConfig) -> Self {
        let params = &config.params.vegas;
        let params = if params.validate().is_ok() {
            params.clone()
        } else {
            VegasParams::default()
        };
        Self {
            alpha: f64::from(params.alpha),
            beta: f64::from(params.beta),
            gamma: f64::from(params.gamma),
            rounds: RoundTracker::default(),
            round_window: config.starting_window() as f64,
            round_min: None,
            base: None,
            last_diff: None,
        }
    }

    fn slow_start(&mut self, window: &mut Window, ack: &AckEvent<'_>) {
        self.measure(window, ack);
        if !doubling(self.rounds.count()) {
            return;
        }
        // A doubling round's ACKs are for the data of the held round
        // before it, sent under `round_window`.
        let diff = match (self.round_min, self.base) {
            (Some(rtt), Some(base)) => queued(self.round_window, base, rtt) / window.mss() as f64,
            _ => 0.0,
        };
        if diff > self.gamma {
            let target = self.round_window - (diff - self.gamma) * window.mss() as f64;
            window.set_cwnd(window.cwnd().min(target).max(window.minimum() as f64));
            window.end_slow_start();
            self.last_diff = Some(diff);
            return;
        }
        window.slow_start(ack.bytes_acked, ABC_L);
    }

    fn avoidance(&mut self, window: &mut Window, ack: &AckEvent<'_>) {
        let Some(diff) = self.measure(window, ack) else {
            return;
        };
        let (cwnd, mss) = (window.cwnd(), window.mss() as f64);
        if diff < self.alpha {
            window.set_cwnd(cwnd + mss);
        } else if diff > self.beta {
            window.set_cwnd((cwnd - mss).max(window.minimum() as f64));
            // Stay in avoidance at the smaller window.
            window.end_slow_start();
        }
    }

    fn on_reduced(&mut self) {
        // Samples taken under the window before the reduction say nothing
        // about the one after it.
        self.round_min = None;
    }

    fn on_mss_update(&mut self, window: &mut Window, mss: u64) {
        window.rescale_segments(mss);
        // A round measured partly in the old MSS decides nothing.
        self.round_min = None;
        self.round_window = window.cwnd();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::{ack, earlier, rtt_after};
    use crate::cc::{CcParams, CongestionEvent, Controller};
    use crate::rtt::RttEstimator;
    use crate::time::Instant;

    const BASE: Duration = Duration::from_millis(10);

    /// A 1000-byte MSS, so windows read as segments × 1000.
    fn config() -> CcConfig {
        CcConfig {
            mss: 1000,
            ..CcConfig::default()
        }
    }

    /// A Vegas controller fed whole rounds of ACKs by hand.
    struct Driver {
        cc: Vegas,
        rtt: RttEstimator,
        now: Instant,
    }

    impl Driver {
        /// The estimator has seen `BASE` once, so `BaseRTT = 10 ms`.
        fn new(config: &CcConfig) -> Self {
            Self {
                cc: Vegas::new(config),
                rtt: rtt_after(Some(BASE)),
                now: Instant::from_millis(100),
            }
        }

        /// A controller in congestion avoidance at `segments` segments.
        fn avoiding(segments: u64) -> Self {
            let mut d = Self::new(&config());
            d.cc.state.set_cwnd((segments * 1000) as f64);
            d.cc.state.end_slow_start();
            d
        }

        /// One round: `acks` ACKs of one segment each, every one with the
        /// RTT sample `sample`, for data sent 1 ms before the round began
        /// (after the previous round began, so the first ACK ends it).
        /// Returns the window after the round's first ACK, which is when
        /// the previous round's verdict applies.
        fn round(&mut self, acks: u64, sample: Duration) -> u64 {
            let start = self.now;
            let sent = earlier(start, Duration::from_millis(1));
            let mut after_first = 0;
            for i in 0..acks {
                self.rtt.update(sample);
                let now = start + Duration::from_micros(i);
                self.cc.on_ack(&ack(&self.rtt, now, sent, 1000));
                if i == 0 {
                    after_first = self.cc.window();
                }
            }
            self.now = start + Duration::from_millis(20);
            after_first
        }
    }

    fn ms(tenths: u64) -> Duration {
        Duration::from_micros(tenths * 100)
    }

    #[test]
    fn defaults_and_validation_name_the_key() {
        let d = VegasParams::default();
        assert_eq!((d.alpha, d.beta, d.gamma), (2, 4, 1));
        assert_eq!(d.validate(), Ok(()));
        let bad = |alpha, beta, gamma| {
            VegasParams { alpha, beta, gamma }
                .validate()
                .unwrap_err()
                .key
        };
        assert_eq!(bad(0, 4, 1), "alpha");
        assert_eq!(bad(2, 2, 1), "beta");
        assert_eq!(bad(5, 4, 1), "beta");
        assert_eq!(bad(2, 4, 0), "gamma");
        assert_eq!(
            VegasParams {
                alpha: 1,
                beta: 3,
                gamma: 1
            }
            .validate(),
            Ok(())
        );
    }

    #[test]
    fn diff_is_expected_minus_actual_times_base_rtt() {
        // 20 segments over a 10 ms BaseRTT: Expected = 2000 segments/s.
        // At RTT = 12.5 ms, Actual = 1600 segments/s, and
        // (Expected - Actual) × BaseRTT = 400/s × 10 ms = 4 segments: the
        // 2.5 ms of queueing at the 1600 segments/s the path delivers.
        let q = queued(20_000.0, BASE, ms(125));
        assert!((q - 4_000.0).abs() < 1e-6, "{q}");
        assert_eq!(queued(20_000.0, BASE, BASE), 0.0);
        // Nothing measured, nothing queued; never a division by zero.
        assert_eq!(queued(20_000.0, Duration::ZERO, Duration::ZERO), 0.0);
        // A sample below the base (cannot come from one estimator) is no
        // queue rather than a negative one.
        assert_eq!(queued(20_000.0, BASE, ms(90)), 0.0);
    }

    #[test]
    fn avoidance_moves_one_segment_per_round_outside_alpha_beta() {
        let mut d = Driver::avoiding(20);
        // Each verdict applies at the first ACK of the next round, and
        // judges the window the measured round's data went out under: the
        // one that held until that round began.
        d.round(20, BASE); // starts the first round; BaseRTT = 10 ms
        assert_eq!(
            d.round(20, ms(120)),
            21_000,
            "at BaseRTT, Diff 0 < alpha: +1"
        );
        assert_eq!(d.round(20, ms(105)), 21_000, "20 × 2 / 12 = 3.3: hold");
        assert_eq!(
            d.round(20, ms(130)),
            22_000,
            "21 × 0.5 / 10.5 = 1 < alpha: +1"
        );
        // The 13 ms round's data went out under 21 segments.
        assert_eq!(d.round(20, ms(115)), 21_000, "21 × 3 / 13 = 4.8 > beta: -1");
        assert!((d.cc.diff().unwrap() - 63.0 / 13.0).abs() < 1e-9);
        // A shrinking window stays in avoidance.
        assert_eq!(d.cc.metrics().ssthresh, Some(21_000));
        assert_eq!(d.cc.metrics().phase, "congestion_avoidance");
        assert_eq!(d.round(20, ms(120)), 21_000, "22 × 1.5 / 11.5 = 2.9: hold");
        assert_eq!(d.round(20, ms(120)), 21_000, "21 × 2 / 12 = 3.5: hold");
        // ACKs within a round move nothing.
        let before = d.cc.window();
        for _ in 0..5 {
            d.cc.on_ack(&ack(&d.rtt, d.now, earlier(d.now, BASE), 1000));
        }
        assert_eq!(d.cc.window(), before);
    }

    #[test]
    fn base_rtt_is_the_smallest_sample_vegas_took() {
        // The estimator's minimum is the handshake's 10 ms; the data
        // segments never came back faster than 10.5 ms. Against 10 ms a
        // 20-segment window would read 20 × 0.5 / 10.5 = 0.95 segments
        // queued and grow; against its own 10.5 ms it reads none at
        // 10.5 ms and 20 × 1.5 / 12 = 2.5 at 12 ms, and holds.
        let mut d = Driver::avoiding(20);
        d.round(20, ms(105));
        assert_eq!(d.round(20, ms(120)), 21_000, "Diff 0 at 10.5 ms: +1");
        assert_eq!(d.round(20, ms(120)), 21_000, "Diff 2.5: hold");
        assert_eq!(d.rtt.min(), Some(BASE));
    }

    #[test]
    fn slow_start_doubles_every_other_round_and_leaves_above_gamma() {
        let mut d = Driver::new(&config());
        assert_eq!(d.cc.window(), 10_000);
        // Round 1 doubles (ABC, one segment per segment acknowledged).
        d.round(10, BASE);
        assert_eq!(d.cc.window(), 20_000);
        // Round 2 holds; its first ACK measured round 1: Diff 0.
        d.round(20, BASE);
        assert_eq!(d.cc.window(), 20_000);
        assert_eq!(d.cc.diff(), Some(0.0));
        assert_eq!(d.cc.metrics().phase, "slow_start");
        d.round(20, BASE); // round 3 doubles
        assert_eq!(d.cc.window(), 40_000);
        // Round 4 holds; its ACKs are for data sent while the window
        // doubled, so the 12 ms they show (Diff 40 × 2 / 12 = 6.7 at the
        // round's end) is not judged.
        d.round(40, Duration::from_millis(12));
        assert_eq!(d.cc.window(), 40_000);
        // Round 5 would double. Its first ACK is for the 40 segments round
        // 4 held, and at 12.5 ms Diff = 40 × 2.5 / 12.5 = 8 > gamma: slow
        // start ends at once, at the window that keeps gamma segments
        // queued, 40 - 8 + 1 = 33.
        assert_eq!(d.round(40, ms(125)), 33_000);
        assert!((d.cc.diff().unwrap() - 8.0).abs() < 1e-9);
        let m = d.cc.metrics();
        assert_eq!((m.window, m.ssthresh), (33_000, Some(33_000)));
        assert_eq!(m.phase, "congestion_avoidance");
        // The rest of the round changes nothing; its end judges the same
        // 40 segments in avoidance (Diff 8 > beta) and takes one more off.
        assert_eq!(d.cc.window(), 33_000);
        assert_eq!(d.round(1, ms(105)), 32_000);
    }

    #[test]
    fn loss_halves_the_window_like_reno() {
        let mut d = Driver::avoiding(40);
        d.round(40, BASE);
        assert_eq!(d.round(40, Duration::from_millis(11)), 41_000, "Diff 0: +1");
        d.cc.on_congestion_event(&CongestionEvent {
            now: d.now,
            sent: earlier(d.now, Duration::from_millis(5)),
            lost_bytes: 1000,
            bytes_in_flight: 40_000,
            timeout: false,
        });
        assert_eq!(d.cc.window(), 20_500);
        assert_eq!(d.cc.metrics().ssthresh, Some(20_500));
        // The round that spans the loss measures nothing; the one after
        // does: at BaseRTT, Diff 0 < alpha.
        d.now += Duration::from_millis(20);
        assert_eq!(d.round(20, BASE), 20_500);
        assert_eq!(d.round(20, BASE), 21_500);
    }

    #[test]
    fn without_rtt_samples_avoidance_holds_and_slow_start_still_grows() {
        let mut cc = Vegas::new(&config());
        let rtt = rtt_after(None);
        let mut now = Instant::from_millis(100);
        for _ in 0..6 {
            let sent = earlier(now, Duration::from_millis(1));
            for _ in 0..10 {
                cc.on_ack(&ack(&rtt, now, sent, 1000));
            }
            now += Duration::from_millis(20);
        }
        assert!(cc.window() > 10_000);
        assert_eq!(cc.diff(), None);
        cc.state.end_slow_start();
        let before = cc.window();
        for _ in 0..6 {
            let sent = earlier(now, Duration::from_millis(1));
            cc.on_ack(&ack(&rtt, now, sent, 1000));
            now += Duration::from_millis(20);
        }
        assert_eq!(cc.window(), before);
    }

    #[test]
    fn bad_thresholds_fall_back_to_the_defaults() {
        let config = CcConfig {
            params: CcParams {
                vegas: VegasParams {
                    alpha: 9,
                    beta: 3,
                    gamma: 0,
                },
                ..CcParams::default()
            },
            ..config()
        };
        let cc = Vegas::new(&config);
        assert_eq!(
            (cc.adjust.alpha, cc.adjust.beta, cc.adjust.gamma),
            (2.0, 4.0, 1.0)
        );
    }
}
