//! Vegas on a fluid path (see `cc_support`): it finds the bottleneck and
//! then keeps between `alpha` and `beta` segments queued there, where a
//! loss-based controller would grow until the buffer overflows.

mod cc_support;

use core::time::Duration;

use cc_support::{config, unlimited, Fluid, Path, Round};
use transports::cc::{Algorithm, Cc, CcConfig, Controller, VegasParams};

/// Segments standing in the bottleneck queue during `r`: the RTT above the
/// base, drained at the bottleneck rate.
fn queued_segments(path: &Path, r: &Round, mss: u64) -> f64 {
    (r.rtt - path.base_rtt).as_secs_f64() * path.bottleneck as f64 / mss as f64
}

/// Runs `rounds` rounds and returns them.
fn run(config: &CcConfig, path: Path, rounds: usize) -> (Fluid, Vec<Round>) {
    let mut f = Fluid::new(Algorithm::Vegas, config, path);
    let trace = (0..rounds).map(|_| f.round(false)).collect();
    (f, trace)
}

/// On a 10 ms path with a 10 MB/s bottleneck (a BDP of 100 segments) and
/// on a 40 ms, 2.5 MB/s one (also 100 segments, four times the delay):
/// after slow start the queue the path shows stays within
/// `[alpha, beta] = [2, 4]` segments, the link stays full (the window never
/// drops below the BDP), and the controller's own `Diff` is the queue the
/// path had.
#[test]
fn holds_between_alpha_and_beta_segments_of_queue() {
    for path in [
        Path {
            base_rtt: Duration::from_millis(10),
            bottleneck: 10_000_000,
            mark_above: None,
        },
        Path {
            base_rtt: Duration::from_millis(40),
            bottleneck: 2_500_000,
            mark_above: None,
        },
    ] {
        let config = config(false);
        let mss = u64::from(config.mss);
        let (f, trace) = run(&config, path, 400);
        let steady = &trace[100..];
        let queues: Vec<f64> = steady
            .iter()
            .map(|r| queued_segments(&path, r, mss))
            .collect();
        let (lo, hi) = queues
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &q| (lo.min(q), hi.max(q)));
        eprintln!(
            "vegas over {:?} x {} B/s: queue {lo:.2}..{hi:.2} segments, window {} B, BDP {} B",
            path.base_rtt,
            path.bottleneck,
            f.cc.window(),
            path.bdp()
        );
        assert!(
            (2.0..=4.0).contains(&lo) && (2.0..=4.0).contains(&hi),
            "queue {lo:.2}..{hi:.2} segments, outside [alpha, beta]"
        );
        for r in steady {
            assert!(r.window >= path.bdp(), "window {} < BDP", r.window);
        }
        let Cc::Vegas(vegas) = &f.cc else {
            panic!("not Vegas")
        };
        let last = trace.len() - 2;
        let own = vegas.diff().expect("measured");
        let path_queue = queued_segments(&path, &trace[last], mss);
        assert!(
            (own - path_queue).abs() < 1e-6,
            "Diff {own} vs queue {path_queue}"
        );
    }
}

/// When the bottleneck halves, the queue jumps to half a BDP; Vegas
/// drains it one segment per round and settles in `[alpha, beta]` again.
#[test]
fn drains_the_queue_when_the_bottleneck_slows() {
    let path = Path {
        base_rtt: Duration::from_millis(10),
        bottleneck: 10_000_000,
        mark_above: None,
    };
    let (mut f, _) = run(&config(false), path, 200);
    f.path.bottleneck /= 2;
    let after: Vec<Round> = (0..200).map(|_| f.round(false)).collect();
    let first = queued_segments(&f.path, &after[0], 1000);
    assert!(first > 50.0, "queue {first:.1} segments after the change");
    // 50 segments too many at one a round: back in the band within ~60.
    let settled = after
        .iter()
        .position(|r| queued_segments(&f.path, r, 1000) <= 4.0)
        .expect("drained");
    assert!(
        (45..=65).contains(&settled),
        "settled after {settled} rounds"
    );
    for r in &after[settled..] {
        let q = queued_segments(&f.path, r, 1000);
        assert!((2.0..=4.0).contains(&q), "queue {q:.2} segments");
    }
}

/// Other thresholds move the operating point with them: `alpha = 6,
/// beta = 10` keeps 6 to 10 segments queued.
#[test]
fn the_thresholds_set_the_queue() {
    let path = Path {
        base_rtt: Duration::from_millis(10),
        bottleneck: 10_000_000,
        mark_above: None,
    };
    let mut config = config(false);
    config.params.vegas = VegasParams {
        alpha: 6,
        beta: 10,
        gamma: 1,
    };
    let (_, trace) = run(&config, path, 400);
    for r in &trace[150..] {
        let q = queued_segments(&path, r, 1000);
        assert!((6.0..=10.0).contains(&q), "queue {q:.2} segments");
    }
}

/// Loss is answered like Reno: the window halves at once; then Vegas grows
/// one segment per round while the queue is below `alpha`.
#[test]
fn loss_halves_the_window_then_growth_is_linear() {
    let mut f = Fluid::new(
        Algorithm::Vegas,
        &config(false),
        unlimited(Duration::from_millis(10)),
    );
    let mut after_loss = None;
    for round in 1..=300u64 {
        // The first loss ends slow start early (on a path without a
        // queue, Diff never passes gamma), the second is the one measured.
        let lose = round == 7 || round == 200;
        let r = f.round(lose);
        if lose {
            assert_eq!(r.window_after, r.window / 2);
            after_loss = Some(r.window_after);
        }
        assert!(f.cc.window() >= f.cc.minimum_window());
    }
    // 100 rounds after the loss, on a path that never queues: about one
    // segment per round (the round spanning the loss measures nothing).
    let grown = f.cc.window() - after_loss.expect("lost");
    assert!((97_000..=100_000).contains(&grown), "grew {grown} B");
}
