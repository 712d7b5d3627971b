//! The loss-based window machinery, written once: RFC 5681 slow start and
//! congestion avoidance, and the recovery epoch of RFC 6582 (the window is
//! reduced at most once per window of data).
//!
//! [`Classic`] owns the congestion window, `ssthresh` and the recovery
//! epoch; an algorithm plugs in as a [`WindowAdjust`]: how the window grows
//! in congestion avoidance (and, optionally, in slow start), what a loss
//! reduces it to, and what it does with ECN feedback. [`NewReno`],
//! [`Cubic`] and [`Dctcp`] are `Classic` over their adjustments, as in
//! neqo's `ClassicCongestionControl`.
//!
//! * An ACK grows the window unless the sender was application-limited or
//!   the ACK covers only data sent before the current recovery began (its
//!   growth was already answered by the reduction), or the transport reports
//!   loss recovery ([`AckEvent::in_recovery`]). NewReno opts out of the
//!   last rule ([`WindowAdjust::FREEZE_IN_TRANSPORT_RECOVERY`]), as it
//!   always has: it grows on ACKs of data sent after the recovery began.
//! * A loss of data sent after the recovery began starts a new recovery:
//!   `ssthresh = cwnd = max(reduced, minimum_window)` where the adjustment
//!   says what `reduced` is (RFC 5681 equation 4 for Reno: half).
//! * A retransmission timeout sets `ssthresh` (RFC 5681 3.1; the adjustment
//!   chooses the value) and collapses the window to the loss window, the
//!   minimum, whether or not a recovery was under way.
//! * The window stays in `[minimum_window, MAX_WINDOW]` after every call.
//!
//! The window is kept in bytes as `f64` because CUBIC's growth is
//! fractional; Reno arithmetic stays on whole bytes (every value it stores
//! is an integer far below 2^53, so `f64` holds it exactly).
//!
//! [`NewReno`]: super::NewReno
//! [`Cubic`]: super::Cubic
//! [`Dctcp`]: super::Dctcp

use core::fmt;

use super::{
    AckEvent, CcConfig, CongestionEvent, Controller, ControllerMetrics, EcnEvent, MAX_WINDOW,
};
use crate::time::Instant;

/// RFC 3465's byte-counting limit `L` for slow start, in segments.
pub const ABC_L: f64 = 2.0;

/// The state every loss-based controller shares: window, `ssthresh`, the
/// recovery epoch and the bounds the window lives in.
#[derive(Debug, Clone)]
pub struct Window {
    mss: u64,
    min_segments: u64,
    cwnd: f64,
    ssthresh: f64,
    /// Bytes acknowledged in Reno congestion avoidance since the window
    /// last grew by one segment.
    acked_in_ca: u64,
    /// Start of the current recovery: losses (and ECN marks) of data sent
    /// before it belong to the congestion event already answered.
    recovery_start: Option<Instant>,
    /// The current recovery began with a retransmission timeout: the
    /// window slow-starts from the loss window even while the transport
    /// still repairs the flight (RFC 5681 3.1; Linux's `Loss` state).
    after_timeout: bool,
}

impl Window {
    /// The initial window of `config`. A zero MSS or initial window must not
    /// break the `window >= minimum_window > 0` invariant, so both are
    /// raised to what the bounds allow.
    pub(crate) fn new(config: &CcConfig) -> Self {
        Self {
            mss: config.mss_bytes(),
            min_segments: config.min_segments(),
            cwnd: config.starting_window() as f64,
            ssthresh: f64::INFINITY,
            acked_in_ca: 0,
            recovery_start: None,
            after_timeout: false,
        }
    }

    /// The sender's MSS in bytes.
    pub fn mss(&self) -> u64 {
        self.mss
    }

    /// The congestion window in bytes.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// Sets the congestion window; [`Classic`] clamps it after the call.
    pub fn set_cwnd(&mut self, cwnd: f64) {
        self.cwnd = cwnd;
    }

    /// The slow-start threshold in bytes (infinite until the first
    /// reduction or until slow start is left another way).
    pub fn ssthresh(&self) -> f64 {
        self.ssthresh
    }

    /// Leaves slow start at the current window (RFC 9406 4.2).
    pub fn end_slow_start(&mut self) {
        self.ssthresh = self.cwnd;
    }

    /// The smallest window in bytes.
    pub fn minimum(&self) -> u64 {
        self.min_segments * self.mss
    }

    /// When the current recovery began, if one did.
    pub fn recovery_start(&self) -> Option<Instant> {
        self.recovery_start
    }

    /// Data sent at `sent` belongs to a congestion event already answered.
    pub fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|start| sent <= start)
    }

    /// RFC 5681 3.1 slow start with RFC 3465 byte counting: grows by the
    /// acknowledged bytes, at most `limit` segments per ACK.
    pub fn slow_start(&mut self, bytes_acked: u64, limit: f64) {
        self.cwnd += (bytes_acked as f64).min(limit * self.mss as f64);
    }

    /// RFC 5681 3.1 congestion avoidance: one MSS per window's worth of
    /// acknowledged bytes. Saturating: one ACK may claim any byte count.
    pub fn reno_avoidance(&mut self, bytes_acked: u64) {
        self.acked_in_ca = self.acked_in_ca.saturating_add(bytes_acked);
        let window = self.cwnd as u64;
        if self.acked_in_ca >= window {
            self.acked_in_ca -= window;
            self.cwnd = window.saturating_add(self.mss) as f64;
        }
    }

    /// Starts a recovery at `now`: `ssthresh = cwnd = max(target, minimum)`.
    pub fn reduce(&mut self, now: Instant, target: f64) {
        self.ssthresh = target.max(self.minimum() as f64);
        self.cwnd = self.ssthresh;
        self.acked_in_ca = 0;
        self.recovery_start = Some(now);
        self.after_timeout = false;
    }

    /// Keeps the window's size in whole segments across an MSS change (and
    /// `ssthresh`'s, once it is finite).
    pub fn rescale_segments(&mut self, mss: u64) {
        let window = self.cwnd as u64 / self.mss * mss;
        self.cwnd = window.max(self.min_segments * mss).min(MAX_WINDOW) as f64;
        if self.ssthresh.is_finite() {
            self.ssthresh = (self.ssthresh as u64 / self.mss).saturating_mul(mss) as f64;
        }
        self.mss = mss;
    }

    /// Scales window and `ssthresh` by `mss / old mss` (fractional windows).
    pub fn rescale_bytes(&mut self, mss: u64) {
        let scale = mss as f64 / self.mss as f64;
        self.cwnd *= scale;
        self.ssthresh *= scale;
        self.mss = mss;
    }

    fn clamp(&mut self) {
        let min = self.minimum() as f64;
        self.cwnd = if self.cwnd.is_finite() {
            self.cwnd.clamp(min, MAX_WINDOW as f64)
        } else {
            min
        };
    }
}

/// How one loss-based algorithm moves the window; [`Classic`] does the rest.
/// Methods get the shared [`Window`] to read and change.
pub trait WindowAdjust: Send + fmt::Debug {
    /// Whether ACKs arriving while the transport reports loss recovery
    /// ([`AckEvent::in_recovery`]) leave the window alone. NewReno says no:
    /// it grows on ACKs of data sent after the recovery began.
    const FREEZE_IN_TRANSPORT_RECOVERY: bool = true;

    /// Builds the adjustment from its parameters in `config`.
    fn new(config: &CcConfig) -> Self;

    /// Sees every ACK before the growth rules (DCTCP counts its bytes).
    fn observe_ack(&mut self, _window: &Window, _ack: &AckEvent<'_>) {}

    /// Growth below `ssthresh`. The default is RFC 5681 slow start with
    /// RFC 3465 byte counting (`L = 2`).
    fn slow_start(&mut self, window: &mut Window, ack: &AckEvent<'_>) {
        window.slow_start(ack.bytes_acked, ABC_L);
    }

    /// Growth at or above `ssthresh`. The default is RFC 5681's: one
    /// segment per window of acknowledged bytes.
    fn avoidance(&mut self, window: &mut Window, ack: &AckEvent<'_>) {
        window.reno_avoidance(ack.bytes_acked);
    }

    /// The window a loss reduces to (before the minimum is applied). The
    /// default is RFC 5681 equation 4 with the window for FlightSize: half
    /// of it, in whole bytes.
    fn reduced(&mut self, window: &Window) -> f64 {
        (window.cwnd() as u64 / 2) as f64
    }

    /// `ssthresh` after a retransmission timeout; `repeated` when the timed
    /// out data was sent before the current recovery began. The default is
    /// RFC 5681 equation 4, `max(FlightSize / 2, 2 SMSS)`.
    fn timeout_ssthresh(
        &mut self,
        window: &Window,
        event: &CongestionEvent,
        _repeated: bool,
    ) -> f64 {
        (event.bytes_in_flight / 2).max(2 * window.mss()) as f64
    }

    /// Called after every reduction (loss or timeout).
    fn on_reduced(&mut self) {}

    /// ECN feedback; the default ignores it.
    fn on_ecn(&mut self, _window: &mut Window, _event: &EcnEvent) {}

    /// The MSS changed; the default keeps the window in whole segments.
    fn on_mss_update(&mut self, window: &mut Window, mss: u64) {
        window.rescale_segments(mss);
    }

    /// Whether the sender should mark its packets ECN-capable.
    fn wants_ecn(&self) -> bool {
        false
    }
}

/// A loss-based controller: the shared [`Window`] driven by the adjustment
/// `A`. See the module docs.
#[derive(Debug, Clone)]
pub struct Classic<A> {
    pub(crate) state: Window,
    pub(crate) adjust: A,
}

impl<A: WindowAdjust> Classic<A> {
    /// A controller with the configured initial window and parameters.
    pub fn new(config: &CcConfig) -> Self {
        Self {
            state: Window::new(config),
            adjust: A::new(config),
        }
    }
}

impl<A: WindowAdjust> Controller for Classic<A> {
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, ack: &AckEvent<'_>) {
        let w = &mut self.state;
        self.adjust.observe_ack(w, ack);
        // The freeze is fast recovery's: after a timeout the window
        // slow-starts while the transport retransmits what was lost (with
        // it frozen at the loss window, a timeout after a slow-start
        // overshoot resent hundreds of segments two per round trip).
        let frozen = A::FREEZE_IN_TRANSPORT_RECOVERY && ack.in_recovery && !w.after_timeout;
        if ack.app_limited || frozen || w.in_recovery(ack.sent) {
            return;
        }
        if w.cwnd < w.ssthresh {
            self.adjust.slow_start(w, ack);
        } else {
            self.adjust.avoidance(w, ack);
        }
        w.clamp();
    }

    fn on_congestion_event(&mut self, event: &CongestionEvent) {
        let w = &mut self.state;
        let repeated = w.in_recovery(event.sent);
        if repeated && !event.timeout {
            return;
        }
        if event.timeout {
            let ssthresh = self.adjust.timeout_ssthresh(w, event, repeated);
            w.reduce(event.now, ssthresh);
            // RFC 5681 3.1: the loss window.
            w.cwnd = w.minimum() as f64;
            w.after_timeout = true;
        } else {
            let target = self.adjust.reduced(w);
            w.reduce(event.now, target);
        }
        self.adjust.on_reduced();
        w.clamp();
    }

    fn on_ecn(&mut self, event: &EcnEvent) {
        self.adjust.on_ecn(&mut self.state, event);
        self.state.clamp();
    }

    fn on_mss_update(&mut self, mss: u16) {
        self.adjust
            .on_mss_update(&mut self.state, u64::from(mss.max(1)));
        self.state.clamp();
    }

    fn window(&self) -> u64 {
        self.state.cwnd as u64
    }

    fn minimum_window(&self) -> u64 {
        self.state.minimum()
    }

    fn wants_ecn(&self) -> bool {
        self.adjust.wants_ecn()
    }

    fn metrics(&self) -> ControllerMetrics {
        let ssthresh = self.state.ssthresh;
        ControllerMetrics {
            window: self.window(),
            ssthresh: ssthresh.is_finite().then_some(ssthresh as u64),
            pacing_rate: None,
            phase: if self.state.cwnd < ssthresh {
                "slow_start"
            } else {
                "congestion_avoidance"
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::{ack, rtt_after};
    use crate::cc::{CubicWindow, DctcpWindow, Reno};

    /// After a loss at 10 ms, an ACK (with `in_recovery` as given) of data
    /// sent at 20 ms: the window before and after it.
    fn ack_after_loss<A: WindowAdjust>(in_recovery: bool) -> (u64, u64) {
        ack_after::<A>(in_recovery, false)
    }

    /// As [`ack_after_loss`], the loss found by a fast retransmit or by a
    /// timeout.
    fn ack_after<A: WindowAdjust>(in_recovery: bool, timeout: bool) -> (u64, u64) {
        let mut cc = Classic::<A>::new(&CcConfig::default());
        cc.on_congestion_event(&CongestionEvent {
            now: Instant::from_millis(10),
            sent: Instant::from_millis(5),
            lost_bytes: 1460,
            bytes_in_flight: 0,
            timeout,
        });
        let before = cc.window();
        let rtt = rtt_after(None);
        let mut event = ack(
            &rtt,
            Instant::from_millis(30),
            Instant::from_millis(20),
            100_000,
        );
        event.in_recovery = in_recovery;
        cc.on_ack(&event);
        (before, cc.window())
    }

    #[test]
    fn data_sent_after_the_reduction_grows_the_window_outside_recovery() {
        for (before, after) in [
            ack_after_loss::<Reno>(false),
            ack_after_loss::<DctcpWindow>(false),
            ack_after_loss::<CubicWindow>(false),
        ] {
            assert!(after > before, "{before} -> {after}");
        }
    }

    #[test]
    fn only_newreno_grows_while_the_transport_recovers() {
        let (before, after) = ack_after_loss::<Reno>(true);
        assert!(after > before, "{before} -> {after}");
        for (before, after) in [
            ack_after_loss::<DctcpWindow>(true),
            ack_after_loss::<CubicWindow>(true),
        ] {
            assert_eq!(after, before);
        }
    }

    #[test]
    fn after_a_timeout_every_controller_slow_starts_while_the_transport_recovers() {
        for (before, after) in [
            ack_after::<Reno>(true, true),
            ack_after::<DctcpWindow>(true, true),
            ack_after::<CubicWindow>(true, true),
        ] {
            // From the loss window (2 segments) by slow start or, where
            // the adjustment's ssthresh is already reached, avoidance.
            assert_eq!(before, 2 * 1460);
            assert!(after > before, "{before} -> {after}");
        }
    }

    #[test]
    fn a_timeout_collapses_even_during_a_recovery_and_floors_ssthresh() {
        let config = CcConfig {
            minimum_window_segments: 4,
            ..CcConfig::default()
        };
        let mut cc = Classic::<Reno>::new(&config);
        let timeout = |now| CongestionEvent {
            now: Instant::from_millis(now),
            sent: Instant::from_millis(1),
            lost_bytes: 1460,
            bytes_in_flight: 1460,
            timeout: true,
        };
        cc.on_congestion_event(&timeout(10));
        cc.on_congestion_event(&timeout(20));
        assert_eq!(cc.window(), 4 * 1460);
        // RFC 5681 equation 4 gives 2 segments; never below the minimum.
        assert_eq!(cc.metrics().ssthresh, Some(4 * 1460));
    }
}
