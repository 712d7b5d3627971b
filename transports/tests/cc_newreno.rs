//! NewReno on a fluid path (see `cc_support`): the classic sawtooth.

mod cc_support;

use core::time::Duration;

use cc_support::{config, unlimited, Fluid};
use transports::cc::{Algorithm, Controller};

/// With one loss every `P` rounds, the window halves at each loss and grows
/// one segment per round in between (RFC 5681 3.1), so it settles into a
/// sawtooth between `W` and `W / 2` with `W / 2` about `P - 1` segments
/// (the round with the loss does not grow).
#[test]
fn sawtooth_between_half_and_full_window() {
    const P: u64 = 25;
    let mut f = Fluid::new(
        Algorithm::NewReno,
        &config(false),
        unlimited(Duration::from_millis(10)),
    );
    let mut peaks = Vec::new();
    let mut troughs = Vec::new();
    for round in 1..=600u64 {
        // The first loss comes early, while slow start is still small.
        let lose = round % P == 5;
        let r = f.round(lose);
        if lose && round > 200 {
            peaks.push(r.window);
            troughs.push(r.window_after);
            assert_eq!(r.window_after, r.window / 2, "round {round}: halved");
        }
        assert!(f.cc.window() >= f.cc.minimum_window());
    }
    // One segment per round for P - 1 rounds, give or take the rounds
    // whose ACKs (whole segments) fall just short of a full window:
    // W = W / 2 + (P - 1) - e, so W is between 2 (P - 2) and 2 (P - 1).
    for (&peak, &trough) in peaks.iter().zip(&troughs) {
        assert!((46_000..=48_000).contains(&peak), "peak {peak}");
        assert_eq!(trough, peak / 2);
    }
    // Steady state: the teeth agree to within a segment.
    let spread = peaks.iter().max().unwrap() - peaks.iter().min().unwrap();
    assert!(spread <= 1_000, "{peaks:?}");
}
