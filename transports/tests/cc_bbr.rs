//! BBR on a fluid path with a bottleneck (see `cc_support`).

mod cc_support;

use core::time::Duration;

use cc_support::{config, Fluid, Path};
use transports::cc::{Algorithm, Cc, Controller};

fn path() -> Path {
    Path {
        base_rtt: Duration::from_millis(10),
        bottleneck: 10_000_000,
        mark_above: None,
    }
}

/// BBR's window in ProbeBW: `2 * BDP` plus three send quanta of two
/// 1000-byte segments (the draft's `BBRInflight`).
fn target_window(p: &Path) -> u64 {
    2 * p.bdp() + 3 * 2 * 1000
}

/// Throughput over `secs` of simulated time with one loss every
/// `loss_every` rounds.
fn throughput(algorithm: Algorithm, loss_every: u64, secs: f64) -> f64 {
    let mut f = Fluid::new(algorithm, &config(false), path());
    let start = f.now;
    let mut delivered = 0;
    for round in 1..=100_000u64 {
        let r = f.round(round % loss_every == 0);
        delivered += r.delivered;
        if (r.end - start).as_secs_f64() >= secs {
            return delivered as f64 / (r.end - start).as_secs_f64();
        }
    }
    panic!("{secs} s not reached");
}

/// BBR finds the bottleneck rate and settles at `cwnd = 2 BDP + 3 quanta`, pacing at
/// `gain * BtlBw`.
#[test]
fn converges_to_the_bottleneck_and_two_bdp() {
    let p = path();
    let mut f = Fluid::new(Algorithm::Bbr, &config(false), p);
    for _ in 0..300 {
        f.round(false);
    }
    let Cc::Bbr(bbr) = &f.cc else {
        unreachable!("built as BBR")
    };
    let bw = bbr.btl_bw();
    assert!(
        bw.abs_diff(p.bottleneck) <= p.bottleneck / 1000,
        "BtlBw {bw}"
    );
    assert_eq!(bbr.rt_prop(), Some(p.base_rtt));
    let window = f.cc.window();
    assert!(
        window.abs_diff(target_window(&p)) <= 2_000,
        "window {window}"
    );
    let pacing = f.cc.pacing_rate().expect("BBR paces");
    assert_eq!(pacing, (bbr.pacing_gain() * bw as f64) as u64);
}

/// One loss every 3 rounds (about 0.2 % of packets): BBR v1 keeps its model
/// and its rate; CUBIC, which reads loss as congestion, does not.
#[test]
fn random_loss_barely_dents_bbr_but_starves_cubic() {
    let bbr = throughput(Algorithm::Bbr, 3, 5.0);
    let cubic = throughput(Algorithm::Cubic, 3, 5.0);
    let link = path().bottleneck as f64;
    eprintln!("1 loss / 3 rounds: BBR {bbr:.0} B/s, CUBIC {cubic:.0} B/s, link {link:.0} B/s");
    assert!(bbr >= 0.9 * link, "BBR {bbr:.0} B/s");
    assert!(cubic < 0.5 * link, "CUBIC {cubic:.0} B/s");
}

/// The min-RTT sample from the start expires after 10 s: BBR enters
/// ProbeRTT with a 4-segment window, and comes back to `2 BDP + 3 quanta`.
#[test]
fn probe_rtt_every_ten_seconds() {
    let p = path();
    let mut f = Fluid::new(Algorithm::Bbr, &config(false), p);
    let start = f.now;
    let mut entered = None;
    let mut left = None;
    for _ in 0..2_000 {
        f.round(false);
        let Cc::Bbr(bbr) = &f.cc else {
            unreachable!("built as BBR")
        };
        let t = (f.now - start).as_secs_f64();
        let probing = bbr.mode() == transports::cc::BbrMode::ProbeRtt;
        if probing && entered.is_none() {
            entered = Some(t);
            assert_eq!(f.cc.window(), 4_000);
        }
        if !probing && entered.is_some() && left.is_none() {
            left = Some(t);
        }
        if t > 12.0 {
            break;
        }
    }
    let entered = entered.expect("ProbeRTT entered");
    let left = left.expect("ProbeRTT left");
    eprintln!("ProbeRTT from {entered:.3} s to {left:.3} s");
    assert!((10.0..10.5).contains(&entered), "entered at {entered:.3} s");
    assert!(
        left - entered >= 0.2 && left - entered < 0.5,
        "{entered} {left}"
    );
    assert!(
        f.cc.window().abs_diff(target_window(&p)) <= 2_000,
        "{}",
        f.cc.window()
    );
}

/// The bottleneck halves (a competing flow arrives, a route changes): the
/// old, higher samples leave the 10-round max filter and BtlBw, the pacing
/// rate and the window (2 × the new BDP + 3 quanta) follow the new rate down once the
/// filter's ten rounds have passed.
#[test]
fn follows_the_bottleneck_down_when_it_halves() {
    let p = path();
    let mut f = Fluid::new(Algorithm::Bbr, &config(false), p);
    for _ in 0..300 {
        f.round(false);
    }
    f.path.bottleneck = p.bottleneck / 2;
    let mut settled = None;
    // 100 rounds: well before the 10 s min-RTT expiry sends it to ProbeRTT.
    for round in 1..=100u32 {
        f.round(false);
        let Cc::Bbr(bbr) = &f.cc else {
            unreachable!("built as BBR")
        };
        if settled.is_none() && bbr.btl_bw().abs_diff(f.path.bottleneck) <= f.path.bottleneck / 100
        {
            settled = Some(round);
        }
    }
    let settled = settled.expect("BtlBw reached the new rate within 100 rounds");
    eprintln!("BtlBw followed a halved bottleneck after {settled} rounds");
    // The old samples age out of the ten-round filter.
    assert!(settled <= 11, "{settled} rounds");
    let Cc::Bbr(bbr) = &f.cc else {
        unreachable!("built as BBR")
    };
    let bw = bbr.btl_bw();
    assert!(
        bw.abs_diff(f.path.bottleneck) <= f.path.bottleneck / 100,
        "BtlBw {bw}"
    );
    let window = f.cc.window();
    assert!(
        window.abs_diff(target_window(&f.path)) <= 2_000,
        "window {window}"
    );
    let pacing = f.cc.pacing_rate().expect("BBR paces");
    assert_eq!(pacing, (bbr.pacing_gain() * bw as f64) as u64);
}
