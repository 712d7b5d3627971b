//! BBR version 1, as specified in draft-cardwell-iccrg-bbr-congestion-control-00
//! (Cardwell et al., "BBR: Congestion-Based Congestion Control", 2016).
//!
//! BBR builds a model of the path from two estimates and sets its pacing
//! rate and window from the model, not from loss:
//!
//! * `BtlBw`, the bottleneck bandwidth: a windowed maximum over the last
//!   10 round trips of the delivery-rate samples the transport reports in
//!   [`AckEvent::delivery_rate`] (the draft's `BBRUpdateBtlBw`). Samples taken while
//!   application-limited enter the filter only if they raise it.
//! * `RTprop`, the round-trip propagation time: the minimum RTT sample over
//!   the last 10 s (`BBRUpdateRTprop`). The RTT sample of an ACK is
//!   [`RttEstimator::latest`](crate::rtt::RttEstimator::latest) once the
//!   estimator has a sample.
//!
//! `pacing_rate = pacing_gain * BtlBw`, `cwnd = cwnd_gain * BDP + 3 *
//! send_quantum` with `BDP = BtlBw * RTprop` (the draft's `BBRInflight`),
//! never below 4 segments (`BBRMinPipeCwnd`).
//! Before the first bandwidth sample the pacing rate is
//! `2/ln 2 * initial_window / SRTT` (SRTT defaults to 1 ms) and the target
//! window is the initial window. The state machine:
//!
//! * **Startup**: gains `2/ln 2`; left when three rounds in a row did not
//!   raise `BtlBw` by 25 % (the pipe is "full").
//! * **Drain**: pacing gain `ln 2 / 2` until bytes in flight fall to one BDP.
//! * **ProbeBW**: pacing gain cycles through `[5/4, 3/4, 1, 1, 1, 1, 1, 1]`,
//!   one phase per `RTprop` (the 5/4 phase lasts until the flight reaches
//!   5/4 BDP or a loss is seen; the 3/4 phase ends early once the flight is
//!   down to one BDP); cwnd gain 2. The draft starts at a random phase other
//!   than 3/4; to keep simulations deterministic the phase is derived from
//!   the time BBR enters ProbeBW.
//! * **ProbeRTT**: when `RTprop` has not been refreshed for 10 s, the window
//!   drops to 4 segments for at least 200 ms and one round trip, then the old
//!   window is restored.
//!
//! Deviations from the draft:
//!
//! * Rounds are counted by send time (see `round.rs`) instead of the
//!   draft's delivered-byte counts.
//! * The send quantum (`BBRSetSendQuantum`) is one segment below
//!   1.2 Mbit/s and two segments above, where the draft uses
//!   `min(1 ms * pacing_rate, 64 KiB)` above 24 Mbit/s. The draft sizes it
//!   for TSO bursts; our transport releases paced data one send segment
//!   at a time (with software TSO, `tso_segments` wire segments at most
//!   and about 1 ms of the pacing rate, see `TcpConnection::tso_burst`)
//!   and the receiver acknowledges every second segment. With the draft's
//!   quanta a 10 Gbit/s × 100 µs path gets 192 KiB (1.5 BDP) on top of
//!   every window, overflowing a one-BDP buffer all the time (measured in
//!   the simulator: 7 % retransmitted on a lossless path, transfers stalled
//!   at 1 % loss). The two-segment quanta still do what the draft keeps
//!   them for: they are additive, so when two flows are both
//!   window-limited behind a full queue (where each flow's share of the
//!   delivery rate is its share of the windows, and `2 * BDP` windows keep
//!   any ratio), the smaller flow gains relative to the larger one.
//!
//! What BBR needs from the transport: delivery-rate samples whose send
//! times are the times segments really left (draft-cheng-iccrg-delivery-
//! rate-estimation 3.2 stamps a packet when it is transmitted). A transport
//! that hands paced segments out early with a future departure time and
//! stamps them when queued averages every sample over the pacing backlog;
//! ProbeBW's one-RTprop 5/4 probe then never shows up in the samples and
//! `BtlBw` stays wherever Startup left it (in the simulator, 3.4 Gbit/s on a
//! 10 Gbit/s link). The header-only TCP therefore holds paced data until it
//! is due.
//!
//! Loss: v1 leaves the model alone when packets are lost, so random loss does
//! not lower `BtlBw` or the pacing rate. Only the window reacts (the draft's
//! "modulating cwnd in loss recovery"):
//! entering loss recovery saves the window and sets it to the bytes in flight
//! plus one segment ("packet conservation") for one round trip, after which
//! it grows again toward the model's target; leaving recovery (an ACK for data
//! sent after recovery began, with [`AckEvent::in_recovery`] false) restores
//! at least the saved window. A retransmission timeout saves the window and
//! sets it to the minimum window ([`CcConfig::minimum_window`]); the next ACK
//! brings it back to at least 4 segments.

use core::time::Duration;

use super::round::RoundTracker;
use super::{AckEvent, CcConfig, CongestionEvent, Controller, ControllerMetrics, MAX_WINDOW};
use crate::time::Instant;

/// `2 / ln 2`: the smallest gain that doubles the sending rate every round.
pub(crate) const HIGH_GAIN: f64 = 2.885_390_081_777_926_8;
/// ProbeBW's pacing gains, one per phase.
pub(crate) const PACING_GAIN_CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// Rounds the bandwidth max-filter spans.
const BTL_BW_FILTER_LEN: u64 = 10;
/// How long an `RTprop` estimate stays valid.
pub(crate) const RT_PROP_FILTER_LEN: Duration = Duration::from_secs(10);
/// Minimum time spent in ProbeRTT.
const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// `BBRMinPipeCwnd`, in segments.
const MIN_PIPE_SEGMENTS: u64 = 4;
/// Growth factor that counts as "the bandwidth still grows" in Startup.
const FULL_BW_THRESH: f64 = 1.25;
/// Rounds without such growth before the pipe is declared full.
const FULL_BW_COUNT: u32 = 3;

/// BBR's state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BbrMode {
    /// Exponential search for the bottleneck bandwidth.
    Startup,
    /// Empty the queue Startup built.
    Drain,
    /// Cruise at the bottleneck bandwidth, probing for more.
    ProbeBw,
    /// Shrink the flight to re-measure the propagation delay.
    ProbeRtt,
}

/// A windowed maximum over the last [`BTL_BW_FILTER_LEN`] rounds: one slot per
/// round holds that round's largest sample.
#[derive(Debug, Clone, Default)]
struct MaxFilter {
    slots: [(u64, u64); BTL_BW_FILTER_LEN as usize],
}

impl MaxFilter {
    fn update(&mut self, round: u64, sample: u64) {
        let slot = &mut self.slots[(round % BTL_BW_FILTER_LEN) as usize];
        if slot.0 != round {
            *slot = (round, sample);
        } else {
            slot.1 = slot.1.max(sample);
        }
    }

    fn get(&self, round: u64) -> u64 {
        self.slots
            .iter()
            .filter(|(r, _)| *r <= round && round - *r < BTL_BW_FILTER_LEN)
            .map(|(_, bw)| *bw)
            .max()
            .unwrap_or(0)
    }
}

/// BBR v1 congestion control; see the module docs.
#[derive(Debug, Clone)]
pub struct Bbr {
    mss: u64,
    min_window_segments: u64,
    initial_window: u64,
    mode: BbrMode,
    cwnd: u64,
    /// Bytes per second.
    pacing_rate: u64,
    pacing_gain: f64,
    cwnd_gain: f64,
    btl_bw_filter: MaxFilter,
    rt_prop: Option<Duration>,
    rt_prop_stamp: Instant,
    rounds: RoundTracker,
    delivered: u64,
    filled_pipe: bool,
    full_bw: u64,
    full_bw_count: u32,
    cycle_index: usize,
    cycle_stamp: Instant,
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    prior_cwnd: u64,
    /// Start of the loss recovery BBR is in, if any.
    recovery_start: Option<Instant>,
    /// The round in which packet conservation ends.
    conservation_until_round: Option<u64>,
    loss_since_ack: bool,
    /// An RTT sample has been seen (the pacing rate was initialised from it).
    seen_rtt: bool,
}

impl Bbr {
    /// A controller in Startup with the configured initial window.
    pub fn new(config: &CcConfig) -> Self {
        let mss = config.mss_bytes();
        let min_window_segments = config.min_segments();
        let initial_window = config.starting_window();
        let mut bbr = Self {
            mss,
            min_window_segments,
            initial_window,
            mode: BbrMode::Startup,
            cwnd: initial_window,
            pacing_rate: 0,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            btl_bw_filter: MaxFilter::default(),
            rt_prop: None,
            rt_prop_stamp: Instant::ZERO,
            rounds: RoundTracker::default(),
            delivered: 0,
            filled_pipe: false,
            full_bw: 0,
            full_bw_count: 0,
            cycle_index: 2,
            cycle_stamp: Instant::ZERO,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            prior_cwnd: 0,
            recovery_start: None,
            conservation_until_round: None,
            loss_since_ack: false,
            seen_rtt: false,
        };
        bbr.init_pacing_rate(None);
        bbr
    }

    /// The state BBR is in.
    pub fn mode(&self) -> BbrMode {
        self.mode
    }

    /// The bottleneck-bandwidth estimate in bytes per second (0 before the
    /// first delivery-rate sample).
    pub fn btl_bw(&self) -> u64 {
        self.btl_bw_filter.get(self.rounds.count())
    }

    /// The propagation-delay estimate, `None` before the first RTT sample.
    pub fn rt_prop(&self) -> Option<Duration> {
        self.rt_prop
    }

    /// The current pacing gain.
    pub fn pacing_gain(&self) -> f64 {
        self.pacing_gain
    }

    fn min_pipe_cwnd(&self) -> u64 {
        MIN_PIPE_SEGMENTS * self.mss
    }

    /// The draft's `BBRInitPacingRate`.
    fn init_pacing_rate(&mut self, srtt: Option<Duration>) {
        let srtt = srtt
            .filter(|d| !d.is_zero())
            .unwrap_or(Duration::from_millis(1));
        let rate = HIGH_GAIN * self.initial_window as f64 / srtt.as_secs_f64();
        self.pacing_rate = to_u64(rate).max(1);
    }

    /// `gain * BDP` in bytes, or the initial window before the model has
    /// both estimates (the draft's `BBRInflight`).
    fn inflight(&self, gain: f64) -> u64 {
        let bw = self.btl_bw();
        match self.rt_prop {
            Some(rt_prop) if bw > 0 => {
                let bdp = to_u64(gain * bw as f64 * rt_prop.as_secs_f64());
                bdp.saturating_add(3 * self.send_quantum()).min(MAX_WINDOW)
            }
            _ => self.initial_window,
        }
    }

    /// The draft's `BBRSetSendQuantum`: one segment below 1.2 Mbit/s, else
    /// two (the draft: two below 24 Mbit/s, then 1 ms at the pacing rate
    /// up to 64 KiB; see the module docs).
    fn send_quantum(&self) -> u64 {
        if self.pacing_rate < 150_000 {
            self.mss
        } else {
            2 * self.mss
        }
    }

    fn save_cwnd(&mut self) {
        self.prior_cwnd = if self.recovery_start.is_none() && self.mode != BbrMode::ProbeRtt {
            self.cwnd
        } else {
            self.prior_cwnd.max(self.cwnd)
        };
    }

    fn enter_startup(&mut self) {
        self.mode = BbrMode::Startup;
        self.pacing_gain = HIGH_GAIN;
        self.cwnd_gain = HIGH_GAIN;
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = BbrMode::ProbeBw;
        self.cwnd_gain = 2.0;
        // Any phase but the 3/4 one, chosen from the clock's microseconds
        // rather than a random number so that runs are reproducible.
        let offset = ((now.as_nanos() / 1_000) % 7) as usize;
        self.cycle_index = (PACING_GAIN_CYCLE.len() - offset) % PACING_GAIN_CYCLE.len();
        self.cycle_stamp = now;
        self.pacing_gain = PACING_GAIN_CYCLE[self.cycle_index];
    }

    /// The draft's `BBRIsNextCyclePhase`.
    fn is_next_cycle_phase(&self, now: Instant, prior_inflight: u64) -> bool {
        let full_length = now - self.cycle_stamp > self.rt_prop.unwrap_or(Duration::ZERO);
        if self.pacing_gain > 1.0 {
            full_length
                && (self.loss_since_ack || prior_inflight >= self.inflight(self.pacing_gain))
        } else if self.pacing_gain < 1.0 {
            full_length || prior_inflight <= self.inflight(1.0)
        } else {
            full_length
        }
    }

    /// The draft's `BBRCheckFullPipe`.
    fn check_full_pipe(&mut self, round_start: bool, app_limited: bool) {
        if self.filled_pipe || !round_start || app_limited {
            return;
        }
        let bw = self.btl_bw();
        if bw as f64 >= self.full_bw as f64 * FULL_BW_THRESH {
            self.full_bw = bw;
            self.full_bw_count = 0;
            return;
        }
        self.full_bw_count += 1;
        if self.full_bw_count >= FULL_BW_COUNT {
            self.filled_pipe = true;
        }
    }

    /// The draft's `BBRHandleProbeRTT`, once the mode is ProbeRtt.
    fn handle_probe_rtt(&mut self, now: Instant, inflight: u64, round_start: bool) {
        match self.probe_rtt_done {
            None if inflight <= self.min_pipe_cwnd() => {
                self.probe_rtt_done = Some(now + PROBE_RTT_DURATION);
                self.probe_rtt_round_done = false;
                self.rounds.restart(now);
            }
            None => {}
            Some(done) => {
                if round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done && now > done {
                    self.rt_prop_stamp = now;
                    self.cwnd = self.cwnd.max(self.prior_cwnd);
                    self.probe_rtt_done = None;
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.enter_startup();
                    }
                }
            }
        }
    }

    fn set_pacing_rate(&mut self) {
        let bw = self.btl_bw();
        if bw == 0 {
            return;
        }
        let rate = to_u64(self.pacing_gain * bw as f64).max(1);
        if self.filled_pipe || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    fn set_cwnd(&mut self, acked: u64, inflight: u64, round: u64) {
        let target = self.inflight(self.cwnd_gain).max(self.min_pipe_cwnd());
        let conserving = self.conservation_until_round.is_some_and(|r| round < r);
        if conserving {
            self.cwnd = self.cwnd.max(inflight.saturating_add(acked));
        } else {
            self.conservation_until_round = None;
            if self.filled_pipe {
                self.cwnd = self.cwnd.saturating_add(acked).min(target);
            } else if self.cwnd < target || self.delivered < self.initial_window {
                self.cwnd = self.cwnd.saturating_add(acked);
            }
            self.cwnd = self.cwnd.max(self.min_pipe_cwnd());
        }
        if self.mode == BbrMode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.min_pipe_cwnd());
        }
        self.clamp();
    }

    fn clamp(&mut self) {
        self.cwnd = self.cwnd.clamp(self.minimum_window(), MAX_WINDOW);
    }
}

/// Saturating, NaN-safe float to integer conversion (`as` saturates and maps
/// NaN to 0).
fn to_u64(x: f64) -> u64 {
    x as u64
}

impl Controller for Bbr {
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, ack: &AckEvent<'_>) {
        let now = ack.now;
        self.delivered = self.delivered.saturating_add(ack.bytes_acked);
        let inflight = ack.bytes_in_flight;
        let prior_inflight = inflight.saturating_add(ack.bytes_acked);

        // Loss recovery ends with an ACK for data sent after it began.
        if let Some(start) = self.recovery_start {
            if !ack.in_recovery && ack.sent > start {
                self.recovery_start = None;
                self.conservation_until_round = None;
                self.cwnd = self.cwnd.max(self.prior_cwnd);
            }
        }

        // BBRUpdateRound and BBRUpdateBtlBw.
        let round_start = self.rounds.on_ack(now, ack.sent);
        let round = self.rounds.count();
        if let Some(rate) = ack.delivery_rate {
            if rate > 0 && (!ack.app_limited || rate >= self.btl_bw()) {
                self.btl_bw_filter.update(round, rate);
            }
        }

        // BBRCheckCyclePhase: ProbeBW gain cycling.
        if self.mode == BbrMode::ProbeBw && self.is_next_cycle_phase(now, prior_inflight) {
            self.cycle_index = (self.cycle_index + 1) % PACING_GAIN_CYCLE.len();
            self.cycle_stamp = now;
            self.pacing_gain = PACING_GAIN_CYCLE[self.cycle_index];
        }

        // BBRCheckFullPipe and BBRCheckDrain.
        self.check_full_pipe(round_start, ack.app_limited);
        if self.mode == BbrMode::Startup && self.filled_pipe {
            self.mode = BbrMode::Drain;
            self.pacing_gain = 1.0 / HIGH_GAIN;
            self.cwnd_gain = HIGH_GAIN;
        }
        if self.mode == BbrMode::Drain && inflight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }

        // BBRUpdateRTprop: the minimum RTT with a 10 s expiry.
        let expired = self
            .rt_prop_stamp
            .checked_add(RT_PROP_FILTER_LEN)
            .is_some_and(|deadline| now > deadline);
        if ack.rtt.smoothed().is_some() {
            let sample = ack.rtt.latest();
            if self.rt_prop.is_none_or(|rt| sample <= rt) || expired {
                self.rt_prop = Some(sample);
                self.rt_prop_stamp = now;
            }
        }

        // BBRCheckProbeRTT.
        if self.mode != BbrMode::ProbeRtt && expired {
            self.save_cwnd();
            self.mode = BbrMode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.probe_rtt_done = None;
        }
        if self.mode == BbrMode::ProbeRtt {
            self.handle_probe_rtt(now, inflight, round_start);
        }

        // BBRUpdateControlParameters. The initial pacing rate assumed a
        // 1 ms RTT; redo it from the first real RTT (as Linux does).
        if !self.seen_rtt && ack.rtt.smoothed().is_some() {
            self.seen_rtt = true;
            self.init_pacing_rate(ack.rtt.smoothed());
        }
        self.set_pacing_rate();
        self.set_cwnd(ack.bytes_acked, inflight, round);
        self.loss_since_ack = false;
    }

    fn on_congestion_event(&mut self, event: &CongestionEvent) {
        self.loss_since_ack = true;
        if event.timeout {
            // BBROnEnterRTO: save the window and fall to the loss
            // window; the recovery ends like any other.
            self.save_cwnd();
            self.recovery_start = Some(event.now);
            self.conservation_until_round = None;
            self.cwnd = self.minimum_window();
            return;
        }
        if self.recovery_start.is_some() {
            return;
        }
        // Entering fast recovery: packet conservation for one round trip.
        self.save_cwnd();
        self.recovery_start = Some(event.now);
        self.conservation_until_round = Some(self.rounds.count().saturating_add(1));
        self.cwnd = event.bytes_in_flight.saturating_add(self.mss);
        self.clamp();
    }

    fn on_mss_update(&mut self, mss: u16) {
        let mss = u64::from(mss.max(1));
        let rescale = |bytes: u64| (bytes / self.mss).saturating_mul(mss).min(MAX_WINDOW);
        self.cwnd = rescale(self.cwnd);
        self.prior_cwnd = rescale(self.prior_cwnd);
        self.initial_window = rescale(self.initial_window).max(self.min_window_segments * mss);
        self.mss = mss;
        self.clamp();
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn minimum_window(&self) -> u64 {
        self.min_window_segments * self.mss
    }

    fn pacing_rate(&self) -> Option<u64> {
        Some(self.pacing_rate.max(1))
    }

    fn governs_recovery(&self) -> bool {
        // Packet conservation and the saved window (module docs).
        true
    }

    fn metrics(&self) -> ControllerMetrics {
        ControllerMetrics {
            window: self.cwnd,
            ssthresh: None,
            pacing_rate: self.pacing_rate(),
            phase: match self.mode {
                BbrMode::Startup => "startup",
                BbrMode::Drain => "drain",
                BbrMode::ProbeBw => "probe_bw",
                BbrMode::ProbeRtt => "probe_rtt",
            },
        }
    }
}

#[cfg(test)]
mod tests;
