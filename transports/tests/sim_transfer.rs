//! End-to-end runs of the simulator with the go-back-N test transport.

mod sim_common;

use core::time::Duration;

use sim_common::{client, server, Gbn, GbnConfig};
use transports::sim::{self, PathConfig, TransferOptions};
use transports::Instant;

const GBIT: u64 = 1_000_000_000;

fn gbn_transfer(
    cfg: GbnConfig,
    path: &PathConfig,
    bytes: u64,
    seed: u64,
) -> Result<sim::TransferReport, sim::SimError> {
    let mut c = client(cfg);
    let mut s = server(cfg);
    sim::transfer(
        |now| c(0, now),
        |now, syn| s(0, now, syn),
        path,
        bytes,
        seed,
    )
}

#[test]
fn lossless_transfer_is_exact_and_near_line_rate() {
    // 10 Gbit/s, 100 µs RTT: BDP 125 kB = 86 segments; window 128 fills it.
    // Go-back-N has no slow start and sends its whole window at once: the
    // queue must hold that burst.
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100))
        .with_queue(400_000)
        .unwrap();
    let cfg = GbnConfig {
        window: 128,
        ..GbnConfig::default()
    };
    let bytes = 10_000_000;
    let r = gbn_transfer(cfg, &path, bytes, 1).unwrap();
    assert_eq!(r.flow.delivered, bytes);
    assert_eq!(r.flow.client_sent.retransmitted_segments, 0);
    assert_eq!(r.forward_drops(), 0);
    // Payload share of each 1500-byte packet is 1460/1500; the handshake and
    // slow start add about an RTT.
    let ceiling = 10.0 * 1460.0 / 1500.0;
    let gbps = r.goodput_gbps();
    assert!(
        gbps > 0.95 * ceiling && gbps <= ceiling,
        "goodput {gbps} Gbit/s"
    );
}

#[test]
fn one_hundred_megabytes_run_in_seconds_of_real_time() {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100))
        .with_queue(400_000)
        .unwrap();
    let cfg = GbnConfig {
        window: 128,
        ..GbnConfig::default()
    };
    let started = std::time::Instant::now();
    let r = gbn_transfer(cfg, &path, 100_000_000, 2).unwrap();
    let wall = started.elapsed();
    assert_eq!(r.flow.delivered, 100_000_000);
    assert_eq!(r.flow.client_sent.retransmitted_segments, 0);
    println!(
        "100 MB: {:.3} Gbit/s simulated, {:?} simulated, {} events, {:?} real",
        r.goodput_gbps(),
        r.completion,
        r.events,
        wall
    );
    assert!(wall < Duration::from_secs(10), "took {wall:?}");
}

#[test]
fn same_seed_same_report_different_seed_different_drops() {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100)).with_loss(0.01);
    let cfg = GbnConfig::default();
    let a = gbn_transfer(cfg, &path, 5_000_000, 7).unwrap();
    let b = gbn_transfer(cfg, &path, 5_000_000, 7).unwrap();
    let c = gbn_transfer(cfg, &path, 5_000_000, 8).unwrap();
    assert_eq!(a, b);
    assert!(a.forward_drops() > 0);
    assert_ne!(
        (
            a.forward_drops(),
            a.completion,
            a.flow.client_sent.retransmitted_bytes
        ),
        (
            c.forward_drops(),
            c.completion,
            c.flow.client_sent.retransmitted_bytes
        )
    );
}

#[test]
fn lossy_reordered_and_duplicated_paths_still_deliver_exactly() {
    let base = PathConfig::link(10 * GBIT, Duration::from_micros(100));
    let cases = [
        ("loss 1%", base.clone().with_loss(0.01)),
        ("loss 5%", base.clone().with_loss(0.05)),
        ("ack loss 5%", base.clone().with_reverse_loss(0.05)),
        (
            "reorder 10%",
            base.clone().with_reorder(0.10, Duration::from_micros(30)),
        ),
        ("duplicate 1%", base.clone().with_duplication(0.01)),
    ];
    for (name, path) in cases {
        let r = gbn_transfer(GbnConfig::default(), &path, 3_000_000, 11)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.flow.delivered, 3_000_000, "{name}");
        let impairment = &r.forward[0];
        match impairment.name {
            "loss" if name.starts_with("loss") => {
                assert!(impairment.dropped > 0, "{name}");
                assert!(r.flow.client_sent.retransmitted_segments > 0, "{name}");
            }
            "reorder" => assert!(impairment.held_back > 0, "{name}"),
            "duplicate" => {
                assert!(impairment.duplicated > 0, "{name}");
                // Duplicates land on already placed bytes (not written
                // again, as in the datapath): never a scoreboard error.
                let p = &r.flow.placement;
                assert!(p.already_placed_bytes > 0, "{name}");
                assert!(p.below_floor_bytes + p.placed_bytes + p.already_placed_bytes > 3_000_000);
            }
            _ => {}
        }
        if name == "ack loss 5%" {
            assert!(r.reverse[0].dropped > 0);
        }
    }
}

#[test]
fn window_beyond_the_queue_causes_tail_drop_and_recovery() {
    // 1 Gbit/s, 100 µs: BDP 12.5 kB; a 30 kB queue; window 200 × 1460 B.
    let path = PathConfig::link(GBIT, Duration::from_micros(100))
        .with_queue(30_000)
        .unwrap();
    let cfg = GbnConfig {
        window: 200,
        ..GbnConfig::default()
    };
    let r = gbn_transfer(cfg, &path, 2_000_000, 3).unwrap();
    assert_eq!(r.flow.delivered, 2_000_000);
    let bottleneck = r.forward.iter().find(|n| n.name == "bottleneck").unwrap();
    assert!(bottleneck.dropped > 0);
    assert!(bottleneck.max_queue_bytes <= 30_000);
    assert!(bottleneck.max_queue_bytes > 28_000);
    assert!(r.flow.client_sent.retransmitted_segments > 0);
}

#[test]
fn ecn_marks_reach_the_receiver_only_for_ect_traffic() {
    let path = PathConfig::link(GBIT, Duration::from_micros(100))
        .with_queue(200_000)
        .unwrap()
        .with_ecn_threshold(20_000)
        .unwrap();
    for ect in [true, false] {
        let cfg = GbnConfig {
            window: 60,
            ect,
            ..GbnConfig::default()
        };
        let mut c = client(cfg);
        let mut s = server(cfg);
        let mut sim = sim::Simulation::new(
            &path,
            vec![sim::FlowSpec::upload(Instant::ZERO, 2_000_000)],
            sim::SimConfig::default(),
            5,
            &mut c,
            &mut s,
        )
        .unwrap();
        assert_eq!(
            sim.run(Instant::from_millis(1000)).unwrap(),
            sim::Outcome::Finished
        );
        let marked = sim.forward_stats()[0].marked;
        let ce = sim.flows()[0].server.transport().unwrap().ce_received;
        if ect {
            // 60 × 1500 B in flight against a 12.5 kB BDP keeps ~77 kB queued.
            assert!(marked > 1000, "marked {marked}");
            assert_eq!(ce, marked);
        } else {
            assert_eq!(marked, 0);
            assert_eq!(ce, 0);
        }
    }
}

#[test]
fn pacing_spaces_departures() {
    // A direct path: arrival time = departure time.
    let cfg = GbnConfig {
        window: 32,
        pace: Some(Duration::from_micros(10)),
        ..GbnConfig::default()
    };
    let path = PathConfig::direct();
    let r = gbn_transfer(cfg, &path, 1460 * 100, 1).unwrap();
    assert_eq!(r.flow.delivered, 1460 * 100);
    assert!(r.flow.client_sent.paced_segments >= 90);
    // Go-back-N hands its whole window over at once; the datapath holds it.
    assert_eq!(r.flow.client_sent.max_paced_backlog, 32);
    // 100 data segments + SYN + ACK at 10 µs spacing ≈ 1 ms.
    assert!(
        r.completion >= Duration::from_micros(990),
        "{:?}",
        r.completion
    );
    assert!(
        r.completion <= Duration::from_micros(1050),
        "{:?}",
        r.completion
    );
}

#[test]
fn receive_space_limits_placement() {
    // The server posts 2 × 8 kB; a 64-segment window overruns it, the
    // excess is not placed, and go-back-N retransmits until it fits.
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(20));
    let cfg = GbnConfig::default();
    let options = TransferOptions {
        recv_chunk: 8192,
        recv_outstanding: 2,
        ..TransferOptions::default()
    };
    let r = sim::transfer_with(&options, client(cfg), server(cfg), &path, 1_000_000, 4).unwrap();
    assert_eq!(r.flow.delivered, 1_000_000);
    assert!(r.flow.placement.beyond_posted_bytes > 0);
    assert!(r.flow.client_sent.retransmitted_segments > 0);
}

#[test]
fn mtu_drops_oversize_segments() {
    let cfg = GbnConfig {
        mss: 8960,
        ..GbnConfig::default()
    };
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(50)).with_mtu(1500);
    let mut options = TransferOptions {
        time_limit: Duration::from_millis(50),
        ..TransferOptions::default()
    };
    options.config.max_events = 1_000_000;
    let err =
        sim::transfer_with(&options, client(cfg), server(cfg), &path, 100_000, 1).unwrap_err();
    assert!(
        matches!(err, sim::SimError::TimedOut { ref delivered, .. } if delivered == &[0]),
        "{err}"
    );
    // With jumbo MTU it goes through.
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(50)).with_mtu(9000);
    let r = sim::transfer_with(&options, client(cfg), server(cfg), &path, 100_000, 1).unwrap();
    assert_eq!(r.forward[0].dropped, 0);
    assert_eq!(r.flow.delivered, 100_000);
}

#[test]
fn graceful_close_is_waited_for_when_required() {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100)).with_loss(0.02);
    let mut options = TransferOptions::default();
    options.config.require_close = true;
    let cfg = GbnConfig::default();
    let r = sim::transfer_with(&options, client(cfg), server(cfg), &path, 500_000, 9).unwrap();
    assert_eq!(
        r.flow.client_closed,
        Some(transports::segment::CloseReason::Graceful)
    );
    assert_eq!(
        r.flow.server_closed,
        Some(transports::segment::CloseReason::Graceful)
    );
    assert!(r.end >= r.flow.completed_at.unwrap());
}

#[test]
fn trace_samples_probe_and_progress_as_csv() {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100));
    let cfg = GbnConfig::default();
    let config = sim::SimConfig {
        trace_interval: Some(Duration::from_micros(100)),
        ..sim::SimConfig::default()
    };
    let mut sim = sim::Simulation::new(
        &path,
        vec![sim::FlowSpec::upload(Instant::ZERO, 2_000_000)],
        config,
        1,
        client(cfg),
        server(cfg),
    )
    .unwrap();
    sim.set_probe(|g: &Gbn| Some(g.window_bytes()));
    sim.run(Instant::from_millis(100)).unwrap();
    let samples = sim.trace().samples();
    assert!(samples.len() > 10);
    let (last, grid) = samples.split_last().unwrap();
    // On the 100 µs grid, plus one final sample when the transfer finished.
    assert!(last.time > grid[grid.len() - 1].time);
    for pair in samples.windows(2) {
        assert!(pair[1].time - pair[0].time <= Duration::from_micros(100));
        assert!(pair[1].delivered >= pair[0].delivered);
    }
    for pair in grid.windows(2) {
        assert_eq!(pair[1].time - pair[0].time, Duration::from_micros(100));
    }
    assert!(samples.iter().all(|s| s.cwnd == Some(64 * 1460)));
    assert_eq!(samples.last().map(|s| s.delivered), Some(2_000_000));
    let csv = sim.trace().to_csv();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(sim::CSV_HEADER));
    assert_eq!(lines.next(), Some("0,0,93440,0,0"));
    assert_eq!(csv.lines().count(), samples.len() + 1);
}

#[test]
fn both_directions_carry_data_at_once_and_are_both_checked() {
    let path = PathConfig::link(10 * GBIT, Duration::from_micros(100))
        .with_loss(0.01)
        .with_reverse_loss(0.01);
    let cfg = GbnConfig::default();
    let spec = sim::FlowSpec {
        start: Instant::ZERO,
        client: sim::AppConfig::sender(2_000_000),
        server: sim::AppConfig {
            send_bytes: 3_000_000,
            close: sim::CloseWhen::AfterConnected,
            ..sim::AppConfig::receiver()
        },
        access_delay: Duration::ZERO,
    };
    let config = sim::SimConfig {
        require_close: true,
        ..sim::SimConfig::default()
    };
    let mut sim =
        sim::Simulation::new(&path, vec![spec], config, 21, client(cfg), server(cfg)).unwrap();
    assert_eq!(
        sim.run(Instant::from_millis(10_000)).unwrap(),
        sim::Outcome::Finished
    );
    let flow = &sim.flows()[0];
    assert_eq!(flow.server.scoreboard().upto(), 2_000_000);
    assert_eq!(flow.client.scoreboard().upto(), 3_000_000);
    assert_eq!(flow.client.peer_closed(), Some(3_000_000));
    assert_eq!(flow.server.peer_closed(), Some(2_000_000));
    assert!(flow.client.send_stats().retransmitted_segments > 0);
    assert!(flow.server.send_stats().retransmitted_segments > 0);
    // The reverse path (loss, bottleneck, delay) carried the server's data.
    assert!(sim.reverse_stats()[0].dropped > 0);
    assert!(sim.reverse_stats()[2].bytes_departed > 3_000_000);
}

#[test]
fn access_delay_adds_exactly_to_the_rtt() {
    // Direct path: only the client's 150 µs access link delays anything.
    // SYN arrives at 150 µs, SYN-ACK returns at once, the one data segment
    // leaves at 150 µs and arrives at 300 µs.
    let cfg = GbnConfig::default();
    let mut spec = sim::FlowSpec::upload(Instant::ZERO, 1000);
    spec.access_delay = Duration::from_micros(150);
    let mut sim = sim::Simulation::new(
        &PathConfig::direct(),
        vec![spec],
        sim::SimConfig::default(),
        1,
        client(cfg),
        server(cfg),
    )
    .unwrap();
    assert_eq!(
        sim.run(Instant::from_millis(10)).unwrap(),
        sim::Outcome::Finished
    );
    assert_eq!(
        sim.flows()[0].server.scoreboard().last_received_at(),
        Some(Instant::from_micros(300))
    );
}
