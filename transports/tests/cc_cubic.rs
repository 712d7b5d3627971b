//! CUBIC on a fluid path (see `cc_support`): recovery to `W_max` in about
//! `K`, the `beta` sawtooth under periodic loss, and HyStart++ leaving slow
//! start on queueing delay alone.

mod cc_support;

use core::time::Duration;

use cc_support::{config, unlimited, Fluid, Path};
use transports::cc::{Algorithm, Controller};

/// After a single loss at `W_max`, the window climbs back to `W_max` about
/// `K = cbrt(W_max (1 - beta) / C)` later (RFC 9438 4.2), then keeps
/// probing past it along the convex part of the curve.
#[test]
fn recovers_to_w_max_in_about_k() {
    // A 100 ms RTT keeps the Reno-friendly estimate out of the way.
    let mut f = Fluid::new(
        Algorithm::Cubic,
        &config(false),
        unlimited(Duration::from_millis(100)),
    );
    // Slow start to at least 100 segments, then one loss.
    let mut rounds = 0;
    while f.cc.window() < 100_000 && rounds < 100 {
        f.round(false);
        rounds += 1;
    }
    let w_max = f.cc.window();
    let loss = f.round(true);
    assert_eq!(loss.window_after, (w_max as f64 * 0.7) as u64);
    let k = (w_max as f64 / 1000.0 * 0.3 / 0.4).cbrt();
    let loss_time = loss.end;
    let mut reached = None;
    let mut at_2k = None;
    for _ in 0..1_000 {
        let r = f.round(false);
        let t = (r.end - loss_time).as_secs_f64();
        if reached.is_none() && r.window_after >= w_max {
            reached = Some(t);
        }
        if t >= 2.0 * k {
            at_2k = Some(r.window_after);
            break;
        }
    }
    let reached = reached.expect("window regained W_max");
    eprintln!("W_max {w_max} B regained after {reached:.3} s, K = {k:.3} s");
    assert!(
        (reached - k).abs() <= 0.3,
        "W_max after {reached:.2} s, K = {k:.2} s"
    );
    // W_cubic(2K) = C K^3 + W_max = W_max + (W_max - cwnd_epoch).
    let expected = w_max as f64 * (1.0 + 0.3);
    let at_2k = at_2k.expect("ran to 2K") as f64;
    assert!(
        (at_2k / expected - 1.0).abs() < 0.05,
        "{at_2k} vs {expected}"
    );
}

/// One loss every 40 rounds: each loss takes the window to `beta` times its
/// value (RFC 9438 4.6), and between losses the window only grows, so every
/// cycle is a tooth from `beta W` up to the next peak. The peaks settle
/// (fast convergence, 4.7, can make them alternate between two values).
#[test]
fn periodic_loss_gives_a_beta_sawtooth() {
    let mut f = Fluid::new(
        Algorithm::Cubic,
        &config(false),
        unlimited(Duration::from_millis(10)),
    );
    let mut peaks = Vec::new();
    let mut last = 0;
    for round in 1..=800u64 {
        // The first loss comes early, while slow start is still small.
        let lose = round % 40 == 5;
        let r = f.round(lose);
        if lose {
            let expected = (r.window as f64 * 0.7) as u64;
            assert!(r.window_after.abs_diff(expected) <= 1, "round {round}");
            peaks.push(r.window);
        } else if round > 5 {
            assert!(
                r.window_after >= last,
                "round {round}: shrank without a loss"
            );
        }
        last = r.window_after;
    }
    // Steady state: the last peaks agree to within 10 %.
    let tail = &peaks[peaks.len() - 6..];
    let (lo, hi) = (tail.iter().min().unwrap(), tail.iter().max().unwrap());
    assert!(*hi as f64 <= 1.1 * *lo as f64, "peaks {peaks:?}");
    assert!(*lo > 20_000, "peaks {peaks:?}");
}

/// HyStart++ leaves slow start when the queue shows up in the RTT, with no
/// loss at all; the window then is a few BDPs, not the runaway a loss-free
/// slow start would reach.
#[test]
fn hystart_leaves_slow_start_on_queueing_delay() {
    let path = Path {
        base_rtt: Duration::from_millis(10),
        bottleneck: 10_000_000,
        mark_above: None,
    };
    let bdp = path.bdp();
    let mut f = Fluid::new(Algorithm::Cubic, &config(true), path);
    let mut exit = None;
    for round in 1..=40u64 {
        let r = f.round(false);
        if exit.is_none() && f.cc.metrics().ssthresh.is_some() {
            exit = Some((round, r.window_after));
            break;
        }
    }
    let (round, window) = exit.expect("HyStart++ ended slow start without a loss");
    eprintln!("HyStart++ exit in round {round} at {window} B, BDP {bdp} B");
    assert!(round <= 12, "round {round}");
    assert!(
        window > bdp && window < 6 * bdp,
        "window {window}, BDP {bdp}"
    );
}
