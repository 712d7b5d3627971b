//! Congestion-control traces recorded by the transport itself
//! (`TcpConnection::set_trace`), drained by the caller between simulator
//! steps: what a researcher plots.

use core::time::Duration;

use transports::cc::Algorithm;
use transports::segment::RxSegment;
use transports::sim::{FlowSpec, Outcome, PathConfig, SimConfig, Simulation};
use transports::tcp::{CcSample, TcpConfig, TcpConnection, TraceCause, TraceConfig};
use transports::Instant;

const GBIT: u64 = 1_000_000_000;

/// Runs one 20 MB upload over `path` with the client tracing as `trace`
/// says, draining every 5 ms of simulated time. Returns the samples, what
/// was overwritten, and the client's fast recoveries and RTOs.
fn traced(
    algorithm: Algorithm,
    path: &PathConfig,
    trace: Option<TraceConfig>,
) -> (Vec<CcSample>, u64, u64, u64) {
    let cfg = TcpConfig {
        algorithm,
        ..TcpConfig::default()
    };
    let client_cfg = cfg.clone();
    let mut simulation = Simulation::new(
        path,
        vec![FlowSpec::upload(Instant::ZERO, 20_000_000)],
        SimConfig::default(),
        7,
        move |_, now| {
            let mut c = TcpConnection::connect(now, client_cfg.clone(), 40_000, 5_001, 0x1000)
                .expect("valid config");
            c.set_trace(trace);
            c
        },
        move |_, now, syn: &RxSegment| TcpConnection::accept(now, cfg.clone(), syn, 0xFFFF).ok(),
    )
    .expect("valid path");
    let (mut samples, mut overwritten) = (Vec::new(), 0);
    let mut until = Instant::ZERO;
    for _ in 0..4_000 {
        until += Duration::from_millis(5);
        let outcome = simulation.run(until).expect("no error");
        if let Some(c) = simulation.flows_mut()[0].client.transport_mut() {
            overwritten += c.drain_trace(&mut samples);
        }
        if outcome == Outcome::Finished {
            let c = simulation.flows()[0].client.transport().expect("client");
            return (
                samples,
                overwritten,
                c.stats().fast_recoveries,
                c.stats().rtos,
            );
        }
    }
    panic!("{algorithm}: the transfer did not finish in 20 simulated seconds");
}

fn causes(samples: &[CcSample], cause: TraceCause) -> usize {
    samples.iter().filter(|s| s.cause == cause).count()
}

/// CUBIC through 1 % loss: time-ordered samples at the period, the phases
/// it went through, one `recovery` sample per loss episode, and the
/// path's figures (RTT, delivery rate, acknowledged bytes) alongside.
#[test]
fn cubic_under_loss_records_its_phases_and_recoveries() {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100)).with_loss(0.01);
    let period = Duration::from_micros(200);
    let (samples, overwritten, recoveries, rtos) = traced(
        Algorithm::Cubic,
        &path,
        Some(TraceConfig {
            period,
            capacity: 1 << 20,
        }),
    );
    assert_eq!(overwritten, 0);
    assert!(samples.len() > 50, "{} samples", samples.len());
    assert!(
        samples.windows(2).all(|w| w[0].at <= w[1].at),
        "time-ordered"
    );
    let periodic: Vec<&CcSample> = samples
        .iter()
        .filter(|s| s.cause == TraceCause::Periodic)
        .collect();
    assert!(
        periodic
            .windows(2)
            .all(|w| w[1].at.as_nanos() - w[0].at.as_nanos() >= period.as_nanos() as u64),
        "periodic samples at least a period apart"
    );
    assert_eq!(samples[0].phase, "slow_start");
    assert!(samples.iter().any(|s| s.phase == "congestion_avoidance"));
    let entered = causes(&samples, TraceCause::Recovery) as u64;
    assert!(
        entered >= 1 && entered <= recoveries + rtos,
        "{entered} recovery samples for {recoveries} fast recoveries and {rtos} RTOs"
    );
    assert_eq!(causes(&samples, TraceCause::Rto) as u64, rtos);
    assert!(samples.windows(2).all(|w| w[0].acked <= w[1].acked));
    // The last sample is at most a period old when the transfer ends.
    let last = samples.last().map_or(0, |s| s.acked);
    assert!((19_000_000..=20_000_000).contains(&last), "{last}");
    assert!(samples
        .iter()
        .any(|s| s.delivery_rate.is_some_and(|r| r > 0)));
    assert!(samples
        .iter()
        .filter_map(|s| s.srtt)
        .all(|rtt| rtt >= Duration::from_micros(100)));
}

/// BBR on a clean path goes through its startup, drain and probe_bw
/// phases in that order, and its samples carry a pacing rate.
#[test]
fn bbr_phases_appear_in_order() {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100));
    let (samples, _, _, _) = traced(Algorithm::Bbr, &path, Some(TraceConfig::default()));
    let mut phases: Vec<&str> = samples
        .iter()
        .filter(|s| s.cause == TraceCause::Phase)
        .map(|s| s.phase)
        .collect();
    phases.dedup();
    assert_eq!(
        phases.get(..3),
        Some(&["startup", "drain", "probe_bw"][..]),
        "{phases:?}"
    );
    assert!(samples.iter().all(|s| s.pacing_rate.is_some()));
}

/// Off, nothing is recorded; with a small capacity the oldest samples
/// give way and the drain says how many.
#[test]
fn off_records_nothing_and_memory_is_bounded() {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100));
    let (samples, overwritten, _, _) = traced(Algorithm::NewReno, &path, None);
    assert!(samples.is_empty() && overwritten == 0);
    // Drained every 5 ms; a sample every call, at most 16 kept in between.
    let (samples, overwritten, _, _) = traced(
        Algorithm::NewReno,
        &path,
        Some(TraceConfig {
            period: Duration::ZERO,
            capacity: 16,
        }),
    );
    assert!(
        overwritten > 0,
        "the transfer makes far more than 16 samples per 5 ms"
    );
    assert!(!samples.is_empty());
}
