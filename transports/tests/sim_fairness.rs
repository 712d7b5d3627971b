//! Several flows over one bottleneck: per-window delivery and Jain's index.

mod sim_common;

use core::time::Duration;

use sim_common::{Gbn, GbnConfig};
use transports::sim::{self, FairnessConfig, PathConfig};
use transports::{Instant, RxSegment};

/// Flow *i* uses a window of `windows[i]` segments.
fn run(windows: &'static [u64], config: &FairnessConfig, seed: u64) -> sim::FairnessReport {
    try_run(windows, config, seed).unwrap()
}

fn try_run(
    windows: &'static [u64],
    config: &FairnessConfig,
    seed: u64,
) -> Result<sim::FairnessReport, sim::SimError> {
    // 1 Gbit/s, 100 µs: BDP 12.5 kB; the queue holds every window, so the
    // FIFO shares the link in proportion to the windows.
    let path = PathConfig::link(1_000_000_000, Duration::from_micros(100))
        .with_queue(1_000_000)
        .unwrap();
    // No loss here: an RTO far above every RTT keeps retransmissions out.
    let cfg = |flow: usize| GbnConfig {
        window: windows[flow],
        rto: Duration::from_millis(20),
        ..GbnConfig::default()
    };
    sim::fairness(
        move |flow, now| Gbn::connect(now, cfg(flow), 40_000 + flow as u16, 5_000, flow as u32),
        move |flow, now, syn: &RxSegment| Some(Gbn::accept(now, cfg(flow), syn, 9)),
        &path,
        config,
        seed,
    )
}

#[test]
fn equal_windows_share_fairly() {
    let config = FairnessConfig::new(2, Duration::from_millis(50));
    let r = run(&[32, 32], &config, 1);
    let jain = r.jain.unwrap();
    assert!(jain > 0.99, "jain {jain}");
    // Together they fill the link: 50 ms × 1 Gbit/s × 1460/1500 ≈ 6.08 MB.
    let total: u64 = r.flows.iter().map(|f| f.delivered).sum();
    assert!(total > 5_900_000 && total < 6_100_000, "{total}");
    for f in &r.flows {
        assert_eq!(f.delivered_per_window.iter().sum::<u64>(), f.delivered);
        assert_eq!(f.completed_at, None, "backlogged flows never finish");
    }
    assert_eq!(r.jain_per_window.len(), 50);
}

#[test]
fn one_to_three_windows_give_jain_near_point_eight() {
    let config = FairnessConfig::new(2, Duration::from_millis(50));
    let r = run(&[16, 48], &config, 1);
    // Shares 1:3 give (1 + 3)² / (2 · (1 + 9)) = 0.8.
    let jain = r.jain.unwrap();
    assert!((jain - 0.8).abs() < 0.02, "jain {jain}");
    let d = r.delivered_between(config.measure_from, config.duration);
    let ratio = d[1] as f64 / d[0] as f64;
    assert!((ratio - 3.0).abs() < 0.15, "ratio {ratio}");
}

#[test]
fn a_late_flow_shows_in_the_windows() {
    // 5 ms windows: each holds several rounds of the two flows' bursts
    // (a round of 64 queued segments takes 768 µs).
    let config = FairnessConfig {
        stagger: Duration::from_millis(10),
        window: Duration::from_millis(5),
        ..FairnessConfig::new(2, Duration::from_millis(40))
    };
    let r = run(&[32, 32], &config, 2);
    assert_eq!(r.jain_per_window.len(), 8);
    // Before the second flow starts, one flow has everything: 1/n.
    assert_eq!(r.jain_per_window[1], Some(0.5));
    // Once both run, every window is close to fair and the interval fairer.
    for w in 3..8 {
        let j = r.jain_per_window[w].unwrap();
        assert!(j > 0.95, "window {w}: {j}");
    }
    let late = r
        .jain_between(Duration::from_millis(20), Duration::from_millis(40))
        .unwrap();
    assert!(late > 0.99, "{late}");
    assert_eq!(r.flows[1].start, Instant::from_millis(10));
    // Identical inputs, identical report.
    assert_eq!(r, run(&[32, 32], &config, 2));
}

#[test]
fn a_longer_rtt_gets_less_with_equal_windows() {
    // Equal windows W = 32 × 1500 B; flow 1 has 1 ms more base RTT. With the
    // link (125 B/µs) saturated and a shared queueing delay q, flow i gets
    // W / (base_i + q): 48000/(100 + q) + 48000/(1100 + q) = 125 gives
    // q ≈ 413 µs and a ratio of 1513 / 513 ≈ 2.95, Jain ≈ 0.80.
    let config = FairnessConfig {
        access_delays: vec![Duration::ZERO, Duration::from_millis(1)],
        ..FairnessConfig::new(2, Duration::from_millis(100))
    };
    let r = try_run(&[32, 32], &config, 1).unwrap();
    let d = r.delivered_between(config.measure_from, config.duration);
    let ratio = d[0] as f64 / d[1] as f64;
    assert!((ratio - 2.95).abs() < 0.1, "ratio {ratio}");
    let jain = r.jain.unwrap();
    assert!((jain - 0.80).abs() < 0.02, "jain {jain}");
}
