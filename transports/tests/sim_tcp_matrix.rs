//! Header-only TCP in the deterministic simulator: every congestion
//! controller over lossy, reordering and duplicating paths, goodput figures
//! against the Mathis et al. bound, two-flow fairness, and what BBR's model
//! learns about the path.
//!
//! The path is 10 Gbit/s × 100 µs RTT with one BDP of buffer. Run with
//! `--nocapture` to see the figures and the goodput table.

use core::time::Duration;

use transports::cc::{Algorithm, CcConfig, Controller};
use transports::segment::CloseReason;
use transports::sim::{self, FairnessConfig, PathConfig, TransferOptions, TransferReport};
use transports::tcp::{TcpConfig, TcpConnection};
use transports::{Instant, RxSegment};

const GBIT: u64 = 1_000_000_000;
const HUNDRED_MB: u64 = 100_000_000;
/// The bottleneck's rate in Gbit/s.
const LINK_GBPS: f64 = 10.0;
/// Goodput ceiling of a 10 Gbit/s link with 1500-byte packets carrying
/// 1460-byte payloads, before TCP options take their share.
const CEILING_10G: f64 = 10.0 * 1460.0 / 1500.0;
/// Payload per segment: MSS 1460 less the 12 bytes of the timestamp option.
const SEGMENT_PAYLOAD: f64 = 1448.0;
/// The path's round-trip propagation time in seconds.
const RTT_S: f64 = 100e-6;

/// The Mathis et al. bound (CCR 1997) for a Reno-style sender at random
/// loss `p`: `MSS / RTT × sqrt(3/2) / sqrt(p)`, in Gbit/s, with the
/// propagation RTT (queueing only lowers the real figure).
fn mathis_gbps(p: f64) -> f64 {
    SEGMENT_PAYLOAD * 8.0 / RTT_S * (1.5f64).sqrt() / p.sqrt() / 1e9
}

fn tcp_config(algorithm: Algorithm) -> TcpConfig {
    TcpConfig {
        algorithm,
        // DCTCP needs ECN negotiated; the others run without it.
        ecn: algorithm.build(&CcConfig::default()).wants_ecn(),
        ..TcpConfig::default()
    }
}

/// 10 Gbit/s × 100 µs RTT, one BDP of buffer; DCTCP gets its switch marking
/// at K = 65 packets (RFC 8257 3.1's guidance for 10 Gbit/s).
fn dc_path(algorithm: Algorithm) -> PathConfig {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100));
    if algorithm == Algorithm::Dctcp {
        path.with_ecn_threshold(65 * 1500)
            .expect("link has a bottleneck")
    } else {
        path
    }
}

fn connect(cfg: TcpConfig) -> impl FnMut(usize, Instant) -> TcpConnection {
    move |flow, now| {
        TcpConnection::connect(
            now,
            cfg.clone(),
            40_000 + flow as u16,
            5_001,
            0x1000_0000 + flow as u32,
        )
        .expect("valid TCP config")
    }
}

fn accept(cfg: TcpConfig) -> impl FnMut(usize, Instant, &RxSegment) -> Option<TcpConnection> {
    // Near the top of the sequence space so every transfer wraps.
    move |_, now, syn| TcpConnection::accept(now, cfg.clone(), syn, 0xFFFF_0000).ok()
}

fn transfer(algorithm: Algorithm, path: &PathConfig, bytes: u64, seed: u64) -> TransferReport {
    transfer_config(tcp_config(algorithm), path, bytes, seed)
}

fn transfer_config(cfg: TcpConfig, path: &PathConfig, bytes: u64, seed: u64) -> TransferReport {
    let algorithm = cfg.algorithm;
    let mut options = TransferOptions::default();
    // Also require the FIN exchange to finish on both sides.
    options.config.require_close = true;
    sim::transfer_with(
        &options,
        connect(cfg.clone()),
        accept(cfg),
        path,
        bytes,
        seed,
    )
    .unwrap_or_else(|e| panic!("{algorithm} over {path:?}: {e}"))
}

fn impairments(algorithm: Algorithm) -> Vec<(&'static str, PathConfig)> {
    let base = dc_path(algorithm);
    vec![
        ("lossless", base.clone()),
        ("1% loss", base.clone().with_loss(0.01)),
        ("5% loss", base.clone().with_loss(0.05)),
        (
            "10% reorder",
            base.clone().with_reorder(0.10, Duration::from_micros(50)),
        ),
        ("1% duplication", base.clone().with_duplication(0.01)),
    ]
}

/// Every algorithm × every impairment: 100 MB, scoreboard-exact (the
/// simulator fails the transfer on any in-order point that skips, repeats,
/// goes back, covers unplaced bytes or ends short), then a graceful close.
#[test]
fn every_algorithm_delivers_100_mb_exactly_over_every_impairment() {
    for &algorithm in Algorithm::ALL {
        for (name, path) in impairments(algorithm) {
            let r = transfer(algorithm, &path, HUNDRED_MB, 1);
            assert_eq!(r.flow.delivered, HUNDRED_MB, "{algorithm} {name}");
            assert_eq!(
                r.flow.client_closed,
                Some(CloseReason::Graceful),
                "{algorithm} {name}"
            );
            assert_eq!(
                r.flow.server_closed,
                Some(CloseReason::Graceful),
                "{algorithm} {name}"
            );
            if name.ends_with("loss") {
                assert!(
                    r.flow.client_sent.retransmitted_segments > 0,
                    "{algorithm} {name}"
                );
            }
            if name == "lossless" {
                // Nothing but the bottleneck can drop; a loss-based sender
                // may overflow the queue in slow start, BBR in Startup and
                // when it probes, but not for long.
                let retx = r.flow.client_sent.retransmitted_bytes as f64 / HUNDRED_MB as f64;
                assert!(retx < 0.01, "{algorithm} lossless retransmitted {retx:.4}");
            }
            println!(
                "{algorithm:8} {name:15} {:6.2} Gbit/s  completion {:?}  retx {} segs",
                r.goodput_gbps(),
                r.completion,
                r.flow.client_sent.retransmitted_segments
            );
        }
    }
}

/// Software TSO (send segments of up to 16 wire segments, sliced as the
/// datapath does) changes nothing the peer can tell: every algorithm ×
/// every impairment delivers the same bytes exactly and closes, with a
/// completion time within 10 % of one segment at a time, and retransmits
/// no more than 1.5× as many bytes plus 1 % of the transfer (a paced
/// controller's super-segments leave as bursts of up to a millisecond of
/// its rate, which a BDP-sized queue feels in BBR's Startup).
#[test]
fn software_tso_delivers_the_same_bytes_with_comparable_completion() {
    for &algorithm in Algorithm::ALL {
        for (name, path) in impairments(algorithm) {
            let off = transfer(algorithm, &path, HUNDRED_MB / 4, 4);
            let on = transfer_config(
                TcpConfig {
                    tso_segments: 16,
                    ..tcp_config(algorithm)
                },
                &path,
                HUNDRED_MB / 4,
                4,
            );
            assert_eq!(on.flow.delivered, off.flow.delivered, "{algorithm} {name}");
            assert_eq!(on.flow.delivered, HUNDRED_MB / 4, "{algorithm} {name}");
            assert_eq!(
                on.flow.server_closed,
                Some(CloseReason::Graceful),
                "{algorithm} {name}"
            );
            let (t_on, t_off) = (on.completion.as_secs_f64(), off.completion.as_secs_f64());
            println!(
                "{algorithm:8} {name:15} completion TSO off {t_off:.4} s, on {t_on:.4} s; \
                 retx bytes off {}, on {}",
                off.flow.client_sent.retransmitted_bytes, on.flow.client_sent.retransmitted_bytes
            );
            assert!(
                t_on <= 1.10 * t_off,
                "{algorithm} {name}: {t_on} s vs {t_off} s"
            );
            assert!(
                on.flow.client_sent.retransmitted_bytes as f64
                    <= 1.5 * off.flow.client_sent.retransmitted_bytes as f64
                        + 0.01 * (HUNDRED_MB / 4) as f64,
                "{algorithm} {name}"
            );
        }
    }
}

/// Goodput at 1 % loss against lossless, on 10 Gbit/s × 100 µs.
///
/// Lossless, every algorithm runs at 80 %+ of the link (slow start over a
/// 100 µs RTT costs well under 1 ms). At 1 % random loss a loss-based
/// sender is bounded by Mathis et al. (≈ 1.42 Gbit/s here); reaching 70 %
/// of that bound shows that SACK recovery does not stall. BBR does not
/// take random loss as congestion, so it must keep at least half of its
/// lossless goodput.
#[test]
fn goodput_at_one_percent_loss_versus_lossless() {
    let bound = mathis_gbps(0.01);
    println!("Mathis bound at 1 % loss: {bound:.2} Gbit/s");
    for &algorithm in Algorithm::ALL {
        let clean = transfer(algorithm, &dc_path(algorithm), HUNDRED_MB, 2);
        let lossy = transfer(
            algorithm,
            &dc_path(algorithm).with_loss(0.01),
            HUNDRED_MB,
            2,
        );
        let (clean_g, lossy_g) = (clean.goodput_gbps(), lossy.goodput_gbps());
        println!(
            "{algorithm:8} lossless {clean_g:.2} Gbit/s, 1% loss {lossy_g:.2} Gbit/s \
             ({:.0} % of lossless, {:.0} % of the Mathis bound {bound:.2})",
            100.0 * lossy_g / clean_g,
            100.0 * lossy_g / bound
        );
        assert!(
            clean_g >= 0.8 * LINK_GBPS,
            "{algorithm}: lossless {clean_g:.2} Gbit/s"
        );
        assert!(clean_g <= CEILING_10G);
        assert!(lossy_g < clean_g, "{algorithm}");
        if algorithm == Algorithm::Bbr {
            assert!(
                lossy_g >= 0.5 * clean_g,
                "bbr: 1% loss {lossy_g:.2} Gbit/s, lossless {clean_g:.2}"
            );
        } else {
            assert!(
                lossy_g >= 0.7 * bound,
                "{algorithm}: 1% loss {lossy_g:.2} Gbit/s, Mathis bound {bound:.2}"
            );
        }
    }
}

/// The table researchers look at: goodput (Gbit/s) per algorithm and loss
/// rate, 100 MB on 10 Gbit/s × 100 µs, seed 3.
#[test]
fn goodput_table() {
    let losses = [0.0, 0.001, 0.01, 0.05];
    let mut table = String::from("algorithm  ");
    for p in losses {
        table.push_str(&format!("{:>9}", format!("{:.1}%", p * 100.0)));
    }
    table.push('\n');
    let mut violations = Vec::new();
    for &algorithm in Algorithm::ALL {
        table.push_str(&format!("{:10} ", algorithm.name()));
        let mut previous = f64::INFINITY;
        for p in losses {
            let path = if p > 0.0 {
                dc_path(algorithm).with_loss(p)
            } else {
                dc_path(algorithm)
            };
            let g = transfer(algorithm, &path, HUNDRED_MB, 3).goodput_gbps();
            table.push_str(&format!("{g:9.2}"));
            // More loss never helps by more than noise.
            if g > previous * 1.05 {
                violations.push(format!(
                    "{algorithm}: {g:.2} Gbit/s at {p} after {previous:.2}"
                ));
            }
            previous = g;
        }
        table.push('\n');
    }
    table.push_str(&format!("{:10} ", "mathis"));
    for p in losses {
        if p > 0.0 {
            table.push_str(&format!("{:9.2}", mathis_gbps(p)));
        } else {
            table.push_str(&format!("{:>9}", "-"));
        }
    }
    table.push('\n');
    println!("{table}");
    assert!(
        violations.is_empty(),
        "goodput rose with loss: {violations:?}"
    );
}

/// How long two flows of `algorithm` run, and from when their shares are
/// measured. Loss-based flows converge within 100 ms and are measured over
/// 100–200 ms. BBR v1 keeps a full one-BDP queue with two flows (each
/// flow's window is 2 × its own BDP estimate plus three send quanta), and
/// single 100 ms windows still swing (Jain 0.86–1.00 here) as losses and
/// ProbeBW phases hit one flow or the other; it is measured over 200 ms–1 s.
fn fairness_span(algorithm: Algorithm) -> (Duration, Duration) {
    if algorithm == Algorithm::Bbr {
        (Duration::from_millis(200), Duration::from_secs(1))
    } else {
        (Duration::from_millis(100), Duration::from_millis(200))
    }
}

/// Two flows of the same algorithm share 10 Gbit/s × 100 µs; the second
/// starts 5 ms after the first. Over the span [`fairness_span`] states,
/// Jain's index of their delivered bytes must be at least 0.95, and together
/// they must use the link.
#[test]
fn two_flows_share_fairly() {
    for &algorithm in Algorithm::ALL {
        let cfg = tcp_config(algorithm);
        let (from, to) = fairness_span(algorithm);
        let config = FairnessConfig {
            stagger: Duration::from_millis(5),
            window: Duration::from_millis(10),
            measure_from: from,
            ..FairnessConfig::new(2, to)
        };
        let r = sim::fairness(
            connect(cfg.clone()),
            accept(cfg),
            &dc_path(algorithm),
            &config,
            4,
        )
        .unwrap_or_else(|e| panic!("{algorithm}: {e}"));
        let jain = r.jain.expect("both flows delivered");
        let shares = r.delivered_between(from, to);
        // Jain per 100 ms, from the start, to show how the flows converge.
        let step = Duration::from_millis(100);
        let mut t = Duration::ZERO;
        let mut per_100ms = Vec::new();
        while t + step <= to {
            per_100ms.push(format!("{:.2}", r.jain_between(t, t + step).unwrap_or(0.0)));
            t += step;
        }
        println!(
            "{algorithm:8} Jain {jain:.3} over {from:?}–{to:?}, bytes {shares:?}; \
             per 100 ms: {}",
            per_100ms.join(" ")
        );
        assert!(
            jain >= 0.95,
            "{algorithm}: Jain {jain:.3}, bytes {shares:?}"
        );
        let total: u64 = shares.iter().sum();
        let gbps = total as f64 * 8.0 / (to - from).as_secs_f64() / 1e9;
        assert!(
            gbps > 0.8 * CEILING_10G,
            "{algorithm}: {gbps:.2} Gbit/s together"
        );
    }
}

/// A cwnd trace for the researcher: one CSV per algorithm at 1 % loss.
#[test]
fn cwnd_trace_is_recorded() {
    for &algorithm in Algorithm::ALL {
        let cfg = tcp_config(algorithm);
        let config = sim::SimConfig {
            trace_interval: Some(Duration::from_micros(100)),
            ..sim::SimConfig::default()
        };
        let mut simulation = sim::Simulation::new(
            &dc_path(algorithm).with_loss(0.01),
            vec![sim::FlowSpec::upload(Instant::ZERO, 10_000_000)],
            config,
            5,
            connect(cfg.clone()),
            accept(cfg),
        )
        .expect("valid path");
        simulation.set_probe(|c: &TcpConnection| Some(c.cc_metrics().window));
        assert_eq!(
            simulation
                .run(Instant::from_millis(10_000))
                .expect("no error"),
            sim::Outcome::Finished
        );
        let samples = simulation.trace().samples();
        assert!(samples.len() > 10, "{algorithm}");
        assert!(
            samples.iter().all(|s| s.cwnd.is_some_and(|w| w >= 1460)),
            "{algorithm}"
        );
        let csv = simulation.trace().to_csv();
        assert!(csv.starts_with(sim::CSV_HEADER));
    }
}

/// The same seed gives the same run, bit for bit; another seed another one.
#[test]
fn tcp_runs_are_reproducible_from_the_seed() {
    for &algorithm in Algorithm::ALL {
        let path = dc_path(algorithm).with_loss(0.01);
        let a = transfer(algorithm, &path, 10_000_000, 6);
        let b = transfer(algorithm, &path, 10_000_000, 6);
        let c = transfer(algorithm, &path, 10_000_000, 7);
        assert_eq!(a, b, "{algorithm}");
        assert_ne!(a.forward, c.forward, "{algorithm}");
    }
}

/// BBR's model of a lossless 10 Gbit/s path after Startup: in ProbeBW its
/// pacing rate is the bottleneck-bandwidth estimate times a gain of 3/4, 1
/// or 5/4, so the median pacing rate over 20–80 ms must be within 10 % of
/// the link's rate and never above 5/4 of it by more than 10 %. This is
/// what broke when the transport stamped paced segments with the time they
/// were queued instead of the time they left: delivery-rate samples then
/// spanned the pacing backlog and BBR settled near 3.4 Gbit/s.
#[test]
fn bbr_pacing_rate_tracks_the_bottleneck() {
    let cfg = tcp_config(Algorithm::Bbr);
    let config = sim::SimConfig {
        trace_interval: Some(Duration::from_micros(50)),
        ..sim::SimConfig::default()
    };
    let mut simulation = sim::Simulation::new(
        &dc_path(Algorithm::Bbr),
        vec![sim::FlowSpec::upload(Instant::ZERO, HUNDRED_MB)],
        config,
        8,
        connect(cfg.clone()),
        accept(cfg),
    )
    .expect("valid path");
    simulation.set_probe(|c: &TcpConnection| c.cc_metrics().pacing_rate);
    assert_eq!(
        simulation
            .run(Instant::from_millis(10_000))
            .expect("no error"),
        sim::Outcome::Finished
    );
    let link_bytes_per_s = LINK_GBPS * 1e9 / 8.0;
    let mut rates: Vec<f64> = simulation
        .trace()
        .samples()
        .iter()
        .filter(|s| s.time >= Instant::from_millis(20) && s.time <= Instant::from_millis(80))
        .filter_map(|s| s.cwnd)
        .map(|r| r as f64 / link_bytes_per_s)
        .collect();
    assert!(rates.len() > 1000, "{} samples", rates.len());
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    let (low, high) = (rates[0], rates[rates.len() - 1]);
    println!("bbr pacing / link rate over 20–80 ms: median {median:.3}, range {low:.3}–{high:.3}");
    assert!((0.9..=1.1).contains(&median), "median {median:.3}");
    assert!(
        low >= 0.75 * 0.9 && high <= 1.25 * 1.1,
        "{low:.3}–{high:.3}"
    );
}

/// Pacing holds data back in the transport: no segment is handed to the
/// datapath before its departure time, so the send time every RTT and
/// delivery-rate sample starts from is the time the segment really left.
#[test]
fn paced_segments_leave_when_they_are_handed_over() {
    let r = transfer(Algorithm::Bbr, &dc_path(Algorithm::Bbr), 10_000_000, 9);
    assert_eq!(r.flow.delivered, 10_000_000);
    assert_eq!(r.flow.client_sent.paced_segments, 0);
    assert!(
        r.flow.client_sent.max_paced_backlog <= 1,
        "backlog {}",
        r.flow.client_sent.max_paced_backlog
    );
}
