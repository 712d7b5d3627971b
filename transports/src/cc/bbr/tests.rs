//! BBR's unit tests: the draft's rules with explicit numbers.

use super::*;

use crate::cc::testing::{earlier, rtt_after};
use crate::rtt::RttEstimator;

fn config() -> CcConfig {
    CcConfig {
        mss: 1000,
        ..CcConfig::default()
    }
}

fn rtt_of(ms: u64) -> RttEstimator {
    rtt_after(Some(Duration::from_millis(ms)))
}

struct Feed {
    now: Instant,
    prev_round_first: Instant,
}

impl Feed {
    fn new() -> Self {
        Self {
            now: Instant::from_millis(1),
            prev_round_first: Instant::ZERO,
        }
    }

    /// One round of `acks` ACKs of 1000 B at `rate` B/s and `rtt` ms
    /// with `inflight` bytes in flight after each: the first ACK
    /// acknowledges data sent when the previous round began.
    fn round(&mut self, bbr: &mut Bbr, acks: u32, rate: u64, rtt: u64, inflight: u64) {
        let r = rtt_of(rtt);
        let first = self.now + Duration::from_micros(10);
        for _ in 0..acks {
            self.now += Duration::from_micros(10);
            bbr.on_ack(&AckEvent {
                now: self.now,
                sent: self.prev_round_first,
                bytes_acked: 1000,
                bytes_in_flight: inflight,
                app_limited: false,
                delivery_rate: Some(rate),
                in_recovery: false,
                rtt: &r,
            });
        }
        self.prev_round_first = first;
        self.now += Duration::from_millis(rtt);
    }
}

#[test]
fn startup_ends_after_three_rounds_without_25_percent_growth() {
    let mut bbr = Bbr::new(&config());
    let mut feed = Feed::new();
    // Rounds 1 to 3: the rate doubles.
    for rate in [1_000_000, 2_000_000, 4_000_000] {
        feed.round(&mut bbr, 4, rate, 10, 60_000);
        assert_eq!(bbr.mode(), BbrMode::Startup);
    }
    // 20 % more is not growth; two such rounds keep Startup.
    feed.round(&mut bbr, 4, 4_800_000, 10, 60_000);
    feed.round(&mut bbr, 4, 4_800_000, 10, 60_000);
    assert_eq!(bbr.mode(), BbrMode::Startup);
    assert_eq!(bbr.btl_bw(), 4_800_000);
    // Pacing in Startup = 2/ln 2 * max-filtered bandwidth.
    assert_eq!(bbr.pacing_rate(), Some((HIGH_GAIN * 4_800_000.0) as u64));
    // The third round without 25 % growth: the pipe is full, Drain.
    feed.round(&mut bbr, 4, 4_800_000, 10, 60_000);
    assert_eq!(bbr.mode(), BbrMode::Drain);
    assert!((bbr.pacing_gain() - 1.0 / HIGH_GAIN).abs() < 1e-12);
    // BDP = 4.8 MB/s * 10 ms = 48 000 B, plus 3 send quanta of two
    // segments: 54 000 B. With 60 000 in flight still draining, with
    // 50 000 in ProbeBW.
    feed.round(&mut bbr, 1, 4_800_000, 10, 60_000);
    assert_eq!(bbr.mode(), BbrMode::Drain);
    feed.round(&mut bbr, 1, 4_800_000, 10, 50_000);
    assert_eq!(bbr.mode(), BbrMode::ProbeBw);
    // ProbeBW: cwnd heads for 2 * BDP + 3 quanta.
    for _ in 0..200 {
        feed.round(&mut bbr, 4, 4_800_000, 10, 40_000);
    }
    assert_eq!(bbr.window(), 102_000);
    let gain = bbr.pacing_gain();
    assert!(PACING_GAIN_CYCLE.contains(&gain));
    assert_eq!(bbr.pacing_rate(), Some((gain * 4_800_000.0) as u64));
}

#[test]
fn bandwidth_filter_keeps_the_max_for_ten_rounds() {
    let mut bbr = Bbr::new(&config());
    let mut feed = Feed::new();
    feed.round(&mut bbr, 2, 9_000_000, 10, 10_000);
    for i in 0..9 {
        feed.round(&mut bbr, 2, 1_000_000, 10, 10_000);
        assert_eq!(bbr.btl_bw(), 9_000_000, "round {}", i + 2);
    }
    // Round 11: the 9 MB/s sample is 10 rounds old.
    feed.round(&mut bbr, 2, 1_000_000, 10, 10_000);
    assert_eq!(bbr.btl_bw(), 1_000_000);
}

#[test]
fn probe_rtt_after_ten_seconds_without_a_new_min_rtt() {
    let mut bbr = Bbr::new(&config());
    let mut feed = Feed::new();
    for _ in 0..10 {
        feed.round(&mut bbr, 4, 2_000_000, 10, 20_000);
    }
    assert_eq!(bbr.rt_prop(), Some(Duration::from_millis(10)));
    let stamp = bbr.rt_prop_stamp;
    let before = bbr.window();
    // RTT rises to 12 ms: no new minimum. ProbeRTT comes once 10 s
    // have passed since the 10 ms sample.
    let mut entered = None;
    for _ in 0..1_000 {
        feed.round(&mut bbr, 4, 2_000_000, 12, 20_000);
        if bbr.mode() == BbrMode::ProbeRtt {
            entered = Some(feed.now);
            break;
        }
        assert!(feed.now - stamp <= RT_PROP_FILTER_LEN + Duration::from_millis(13));
    }
    let entered = entered.expect("ProbeRTT within 1000 rounds");
    assert!(entered - stamp > RT_PROP_FILTER_LEN);
    assert_eq!(bbr.window(), 4_000, "ProbeRTT window is 4 segments");
    assert_eq!(bbr.rt_prop(), Some(Duration::from_millis(12)));
    // With the flight down to 4 segments, 200 ms and a round later
    // ProbeRTT ends and the window comes back.
    for _ in 0..30 {
        feed.round(&mut bbr, 2, 2_000_000, 12, 4_000);
        if bbr.mode() != BbrMode::ProbeRtt {
            break;
        }
    }
    assert_eq!(bbr.mode(), BbrMode::ProbeBw);
    assert!(feed.now - entered >= PROBE_RTT_DURATION);
    assert!(bbr.window() >= before);
}

#[test]
fn window_floor_is_four_segments() {
    let mut bbr = Bbr::new(&config());
    let mut feed = Feed::new();
    // 10 kB/s at 1 ms: a BDP of 10 bytes.
    for _ in 0..40 {
        feed.round(&mut bbr, 2, 10_000, 1, 0);
    }
    assert_eq!(bbr.mode(), BbrMode::ProbeBw);
    assert_eq!(bbr.window(), 4_000);
    assert!(bbr.pacing_rate().is_some_and(|p| p > 0));
}

#[test]
fn cwnd_target_adds_three_send_quanta() {
    // Below 1.2 Mbit/s (150 kB/s) the quantum is one segment:
    // 100 kB/s * 20 ms = 2 000 B, so 2 * BDP + 3 * 1 000.
    let mut bbr = Bbr::new(&config());
    let mut feed = Feed::new();
    for _ in 0..60 {
        feed.round(&mut bbr, 4, 100_000, 20, 1_000);
    }
    assert_eq!(bbr.mode(), BbrMode::ProbeBw);
    assert_eq!(bbr.window(), 7_000);
    // Above it, two segments: 1 MB/s * 20 ms = 20 000 B, 2 * BDP + 6 000.
    let mut bbr = Bbr::new(&config());
    let mut feed = Feed::new();
    for _ in 0..60 {
        feed.round(&mut bbr, 4, 1_000_000, 20, 10_000);
    }
    assert_eq!(bbr.mode(), BbrMode::ProbeBw);
    assert_eq!(bbr.window(), 46_000);
}

#[test]
fn random_loss_keeps_the_model_and_restores_the_window() {
    let mut bbr = Bbr::new(&config());
    let mut feed = Feed::new();
    for _ in 0..40 {
        feed.round(&mut bbr, 4, 5_000_000, 10, 50_000);
    }
    let (bw, pacing, window) = (bbr.btl_bw(), bbr.pacing_rate(), bbr.window());
    // 2 * BDP + 3 quanta of two segments.
    assert_eq!(window, 106_000);
    bbr.on_congestion_event(&CongestionEvent {
        now: feed.now,
        sent: earlier(feed.now, Duration::from_millis(10)),
        lost_bytes: 1000,
        bytes_in_flight: 30_000,
        timeout: false,
    });
    // Packet conservation: flight + 1 segment.
    assert_eq!(bbr.window(), 31_000);
    assert_eq!(bbr.btl_bw(), bw);
    assert_eq!(bbr.pacing_rate(), pacing);
    // ACKs for data sent after the loss end recovery.
    feed.round(&mut bbr, 2, 5_000_000, 10, 30_000);
    feed.round(&mut bbr, 2, 5_000_000, 10, 30_000);
    assert_eq!(bbr.window(), window);
}
