//! DCTCP on a fluid path with a marking threshold (see `cc_support`).

mod cc_support;

use core::time::Duration;

use cc_support::{config, Fluid, Path};
use transports::cc::Algorithm;

/// With CE marks above a 20-segment queue, DCTCP keeps the window just
/// above the marking point: it cuts by `alpha / 2`, not by half, so the
/// window never drops below the BDP and the link stays busy (RFC 8257 1).
#[test]
fn window_hovers_above_the_bdp_under_marking() {
    let path = Path {
        base_rtt: Duration::from_millis(10),
        bottleneck: 10_000_000,
        mark_above: Some(20_000),
    };
    let bdp = path.bdp();
    let mut f = Fluid::new(Algorithm::Dctcp, &config(false), path);
    let (mut min, mut max, mut marked_rounds) = (u64::MAX, 0, 0);
    for round in 1..=1_500u64 {
        let r = f.round(false);
        if round > 500 {
            min = min.min(r.window_after);
            max = max.max(r.window);
            marked_rounds += u64::from(r.marked > 0);
        }
    }
    eprintln!("DCTCP window {min}..{max} B, BDP {bdp} B, marked rounds {marked_rounds}");
    assert!(marked_rounds > 0);
    assert!(min >= bdp, "min {min} < BDP {bdp}");
    assert!(max <= bdp + 20_000 + 10_000, "max {max}");
    // Reno would swing by half the window; DCTCP by far less.
    assert!(
        (max - min) as f64 / (max as f64) < 0.2,
        "min {min} max {max}"
    );
}

/// Loss is answered like Reno: the window halves.
#[test]
fn loss_halves_the_window() {
    let mut f = Fluid::new(
        Algorithm::Dctcp,
        &config(false),
        cc_support::unlimited(Duration::from_millis(10)),
    );
    for round in 1..=300u64 {
        let lose = round % 30 == 5;
        let r = f.round(lose);
        if lose {
            assert_eq!(r.window_after, r.window / 2);
        }
    }
}
