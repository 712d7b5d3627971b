//! The simulator's checks catch broken transports: each deliberate bug of
//! the test transport must end in the matching error, quickly.

mod sim_common;

use core::time::Duration;

use sim_common::{client, server, Bug, Gbn, GbnConfig};
use transports::segment::CloseReason;
use transports::sim::{self, PathConfig, ScoreboardError, Side, SimError, TransferOptions};
use transports::{Instant, RxSegment};

fn run(
    cfg: GbnConfig,
    path: &PathConfig,
    options: &TransferOptions,
) -> Result<sim::TransferReport, SimError> {
    sim::transfer_with(options, client(cfg), server(cfg), path, 1_000_000, 3)
}

fn buggy(bug: Bug) -> GbnConfig {
    GbnConfig {
        bug,
        ..GbnConfig::default()
    }
}

fn link() -> PathConfig {
    PathConfig::link(1_000_000_000, Duration::from_micros(100))
}

#[test]
fn the_well_behaved_transport_passes_the_same_checks() {
    let r = run(GbnConfig::default(), &link(), &TransferOptions::default()).unwrap();
    assert_eq!(r.flow.delivered, 1_000_000);
}

#[test]
fn skipping_ahead_is_caught() {
    let err = run(buggy(Bug::SkipAhead), &link(), &TransferOptions::default()).unwrap_err();
    match err {
        SimError::Scoreboard {
            flow: 0,
            side: Side::Server,
            source: ScoreboardError::NeverPlaced { reported, missing },
            ..
        } => {
            // Eleven segments in order, then one claimed that never came.
            assert_eq!(reported, 12 * 1460);
            assert_eq!(missing.start, 11 * 1460);
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn going_backwards_is_caught() {
    let err = run(buggy(Bug::Backwards), &link(), &TransferOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::Scoreboard {
                source: ScoreboardError::NotIncreasing { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_sequence_number_that_disagrees_with_the_payload_is_caught() {
    let err = run(buggy(Bug::WrongSeq), &link(), &TransferOptions::default()).unwrap_err();
    match err {
        SimError::Scoreboard {
            source:
                ScoreboardError::Misplaced {
                    seq_offset,
                    payload_offset,
                },
            ..
        } => {
            assert_eq!(payload_offset, 4 * 1460);
            assert_eq!(seq_offset, payload_offset + 1);
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn a_transport_that_never_retransmits_stalls() {
    let path = link().with_loss(0.05);
    let err = run(buggy(Bug::NoRetransmit), &path, &TransferOptions::default()).unwrap_err();
    match err {
        SimError::Stalled { delivered, .. } => assert!(delivered[0] < 1_000_000),
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn a_timer_stuck_in_the_past_hits_the_event_limit() {
    let mut options = TransferOptions::default();
    options.config.max_events = 50_000;
    let started = std::time::Instant::now();
    let err = run(buggy(Bug::StuckTimer), &link(), &options).unwrap_err();
    assert!(
        matches!(err, SimError::EventLimit { events, .. } if events > 50_000),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_premature_close_is_reported() {
    let err = run(buggy(Bug::Abort), &link(), &TransferOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::Closed {
                side: Side::Server,
                reason: CloseReason::Aborted,
                delivered,
                ..
            } if delivered > 0 && delivered < 1_000_000
        ),
        "{err}"
    );
}

#[test]
fn a_runaway_sender_hits_the_burst_limit() {
    let cfg = GbnConfig {
        window: 1_000,
        ..GbnConfig::default()
    };
    let mut options = TransferOptions::default();
    options.config.max_burst = 100;
    let err = run(cfg, &link(), &options).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::Burst {
                side: Side::Client,
                limit: 100,
                what: "segments from poll_transmit",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn the_time_limit_is_reported_with_progress() {
    // 1 MB at 10 Mbit/s needs 0.8 s; allow 100 ms.
    let path = PathConfig::link(10_000_000, Duration::from_micros(100));
    let options = TransferOptions {
        time_limit: Duration::from_millis(100),
        ..TransferOptions::default()
    };
    // A window of 8 segments keeps the 10 Mbit/s link busy without loss; an
    // RTO far above the ~10 ms queueing delay avoids spurious retransmits.
    let cfg = GbnConfig {
        window: 8,
        rto: Duration::from_millis(200),
        ..GbnConfig::default()
    };
    match run(cfg, &path, &options).unwrap_err() {
        SimError::TimedOut { at, delivered } => {
            assert_eq!(at, Instant::from_millis(100));
            // At most 100 ms × 10 Mbit/s × 1460/1500 = 121 667 bytes.
            assert!(
                delivered[0] > 110_000 && delivered[0] <= 121_667,
                "{delivered:?}"
            );
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn refused_and_misdirected_segments_are_counted_not_delivered() {
    let cfg = GbnConfig::default();
    let options = TransferOptions {
        time_limit: Duration::from_millis(20),
        ..TransferOptions::default()
    };
    // The server refuses every SYN: the client keeps retrying, nothing arrives.
    let mut sim = sim::Simulation::new(
        &link(),
        vec![sim::FlowSpec::upload(Instant::ZERO, 10_000)],
        options.config.clone(),
        1,
        client(cfg),
        |_, _, _: &RxSegment| None::<Gbn>,
    )
    .unwrap();
    assert_eq!(
        sim.run(Instant::from_millis(20)).unwrap(),
        sim::Outcome::TimeReached
    );
    let flow = &sim.flows()[0];
    assert!(
        flow.unaccepted_segments >= 10,
        "{}",
        flow.unaccepted_segments
    );
    assert!(flow.server.transport().is_none());

    // The server answers from the wrong port: the client's ACKs (to port
    // 5000) no longer match the server's ports and are dropped.
    let wrong_port = |_: usize, now: Instant, syn: &RxSegment| {
        let mut syn = syn.clone();
        syn.header.dst_port = 5_001;
        Some(Gbn::accept(now, cfg, &syn, 77))
    };
    let err =
        sim::transfer_with(&options, client(cfg), wrong_port, &link(), 10_000, 1).unwrap_err();
    assert!(matches!(err, SimError::TimedOut { .. }), "{err}");
    let mut sim = sim::Simulation::new(
        &link(),
        vec![sim::FlowSpec::upload(Instant::ZERO, 10_000)],
        options.config.clone(),
        1,
        client(cfg),
        wrong_port,
    )
    .unwrap();
    sim.run(Instant::from_millis(20)).unwrap();
    assert!(sim.flows()[0].server.misdirected_segments() > 0);
    assert_eq!(sim.flows()[0].server.scoreboard().upto(), 0);
}

#[test]
fn bad_configuration_and_no_flows_are_errors() {
    let cfg = GbnConfig::default();
    let bad = link().with_loss(-0.1);
    assert!(matches!(
        run(cfg, &bad, &TransferOptions::default()),
        Err(SimError::Config(_))
    ));
    let err = sim::Simulation::new(
        &link(),
        vec![],
        sim::SimConfig::default(),
        1,
        client(cfg),
        server(cfg),
    )
    .unwrap_err();
    assert_eq!(err, SimError::NoFlows);
}

#[test]
fn a_flood_of_events_hits_the_burst_limit() {
    let err = run(buggy(Bug::EventFlood), &link(), &TransferOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::Burst {
                what: "events from poll_event",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_backwards_payload_range_is_rejected_not_a_panic() {
    let err = run(
        buggy(Bug::ReversedRange),
        &link(),
        &TransferOptions::default(),
    )
    .unwrap_err();
    match err {
        SimError::BadSegment {
            side: Side::Client,
            reason,
            ..
        } => assert!(reason.contains("4380..2920"), "{reason}"),
        other => panic!("unexpected {other}"),
    }
}
