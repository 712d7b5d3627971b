//! Each path node on its own: packets pushed in at chosen times, what comes
//! out and when.

use core::time::Duration;

use transports::segment::TxSegment;
use transports::segment::{Ecn, Flags, TcpHeader};
use transports::sim::node::{Bottleneck, Delay, Duplicate, Loss, Mtu, Node, Reorder};
use transports::sim::rng::Rng;
use transports::sim::{ConfigError, Direction, NodeConfig, Packet, PathConfig};
use transports::{Instant, SegmentOut};

/// A packet with `payload` bytes (IP length payload + 40).
fn packet(id: u64, payload: u64, ecn: Ecn) -> Packet {
    Packet {
        id,
        flow: 0,
        direction: Direction::ToServer,
        segment: SegmentOut {
            segment: TxSegment {
                header: TcpHeader {
                    urgent: 0,
                    seq: id as u32,
                    flags: Flags::ACK,
                    ..TcpHeader::default()
                },
                payload: (payload > 0).then(|| id * payload..(id + 1) * payload),
                ecn,
                segment_size: 0,
            },
            not_before: None,
        },
        ecn,
        sent: Instant::ZERO,
    }
}

/// Drains everything the node lets out, stepping through its ready times,
/// with a bound on steps. Returns (departure time, packet).
fn drain(node: &mut dyn Node, max_steps: usize) -> Vec<(Instant, Packet)> {
    let mut out = Vec::new();
    for _ in 0..max_steps {
        let Some(at) = node.next_ready() else { break };
        while let Some(p) = node.pop(at) {
            out.push((at, p));
        }
    }
    assert!(node.next_ready().is_none(), "node still holds packets");
    out
}

#[test]
fn delay_delays_by_exactly_d_in_order() {
    let d = Duration::from_micros(37);
    let mut node = Delay::new(d);
    let times = [0u64, 5, 5, 100, 1_000];
    for (i, t) in times.iter().enumerate() {
        node.push(Instant::from_micros(*t), packet(i as u64, 100, Ecn::NotEct));
    }
    assert!(node.pop(Instant::from_micros(36)).is_none());
    let out = drain(&mut node, 100);
    assert_eq!(out.len(), times.len());
    for ((at, _), t) in out.iter().zip(times) {
        assert_eq!(*at, Instant::from_micros(t) + d);
    }
    let ids: Vec<u64> = out.iter().map(|(_, p)| p.id).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4]);
    let s = node.stats();
    assert_eq!((s.arrived, s.departed, s.dropped), (5, 5, 0));
}

#[test]
fn bottleneck_rate_matches_configuration_within_one_percent() {
    for rate in [1_000_000_000u64, 10_000_000_000, 3_333_333_333, 100_000_000] {
        let mut node = Bottleneck::new(rate, u64::MAX, None);
        // 10 000 packets of 1500 bytes all offered at once.
        let n = 10_000u64;
        for i in 0..n {
            node.push(Instant::ZERO, packet(i, 1460, Ecn::NotEct));
        }
        let out = drain(&mut node, 20_000);
        assert_eq!(out.len() as u64, n);
        let last = out.last().unwrap().0;
        let measured = (n * 1500 * 8) as f64 / (last - Instant::ZERO).as_secs_f64();
        let error = (measured - rate as f64).abs() / rate as f64;
        assert!(error < 0.01, "rate {rate}: measured {measured}");
        // Exactly one packet time apart at 10 Gbit/s (1.2 µs).
        if rate == 10_000_000_000 {
            assert_eq!(out[1].0 - out[0].0, Duration::from_nanos(1200));
            assert_eq!(out[0].0, Instant::from_nanos(1200));
        }
    }
}

#[test]
fn bottleneck_idle_link_sends_at_once_and_queues_a_burst() {
    let mut node = Bottleneck::new(1_000_000_000, u64::MAX, None);
    // 1500 B at 1 Gbit/s = 12 µs.
    node.push(Instant::from_micros(100), packet(0, 1460, Ecn::NotEct));
    assert_eq!(node.next_ready(), Some(Instant::from_micros(112)));
    node.push(Instant::from_micros(101), packet(1, 1460, Ecn::NotEct));
    assert_eq!(node.queued_bytes(), 3000);
    let out = drain(&mut node, 10);
    assert_eq!(out[1].0, Instant::from_micros(124));
    // Idle again: the next packet starts when it arrives.
    node.push(Instant::from_micros(500), packet(2, 1460, Ecn::NotEct));
    assert_eq!(node.next_ready(), Some(Instant::from_micros(512)));
}

#[test]
fn bottleneck_tail_drops_at_the_queue_limit() {
    // Room for exactly 10 packets of 1500 bytes.
    let mut node = Bottleneck::new(1_000_000_000, 15_000, None);
    for i in 0..25 {
        node.push(Instant::ZERO, packet(i, 1460, Ecn::NotEct));
    }
    let s = node.stats();
    assert_eq!(s.dropped, 15);
    assert_eq!(s.max_queue_bytes, 15_000);
    // The first ten got through: tail drop, not head drop.
    let out = drain(&mut node, 100);
    let ids: Vec<u64> = out.iter().map(|(_, p)| p.id).collect();
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
    // Once one packet has left, one more fits.
    let mut node = Bottleneck::new(1_000_000_000, 15_000, None);
    for i in 0..10 {
        node.push(Instant::ZERO, packet(i, 1460, Ecn::NotEct));
    }
    node.push(Instant::from_micros(11), packet(10, 1460, Ecn::NotEct));
    assert_eq!(node.stats().dropped, 1);
    node.push(Instant::from_micros(12), packet(11, 1460, Ecn::NotEct));
    assert_eq!(node.stats().dropped, 1);
    // A packet larger than the whole queue never fits.
    let mut node = Bottleneck::new(1_000_000_000, 1_000, None);
    node.push(Instant::ZERO, packet(0, 1460, Ecn::NotEct));
    assert_eq!(node.stats().dropped, 1);
}

#[test]
fn bottleneck_marks_ect_packets_above_k_only() {
    // K = 4500 bytes: the 4th packet arrives to 4500 queued (not above K),
    // the 5th to 6000 (above K).
    let mut node = Bottleneck::new(1_000_000_000, 1_000_000, Some(4_500));
    for i in 0..8 {
        node.push(Instant::ZERO, packet(i, 1460, Ecn::Ect0));
    }
    node.push(Instant::ZERO, packet(8, 1460, Ecn::NotEct));
    node.push(Instant::ZERO, packet(9, 1460, Ecn::Ect1));
    let out = drain(&mut node, 100);
    let ecn: Vec<Ecn> = out.iter().map(|(_, p)| p.ecn).collect();
    use Ecn::*;
    assert_eq!(
        ecn,
        vec![Ect0, Ect0, Ect0, Ect0, Ce, Ce, Ce, Ce, NotEct, Ce]
    );
    assert_eq!(node.stats().marked, 5);
    assert_eq!(node.stats().dropped, 0);
    // Below K after draining: no more marks.
    node.push(Instant::from_millis(1), packet(10, 1460, Ecn::Ect0));
    assert_eq!(drain(&mut node, 10)[0].1.ecn, Ect0);
}

fn loss_pattern(seed: u64, p: f64, n: u64) -> (Vec<u64>, u64) {
    let mut node = Loss::new(p, Rng::new(seed));
    let mut kept = Vec::new();
    for i in 0..n {
        node.push(Instant::ZERO, packet(i, 0, Ecn::NotEct));
        while let Some(p) = node.pop(Instant::ZERO) {
            kept.push(p.id);
        }
    }
    (kept, node.stats().dropped)
}

#[test]
fn loss_drops_about_p_and_is_deterministic() {
    let n = 100_000;
    for p in [0.001, 0.01, 0.05, 0.5] {
        let (kept, dropped) = loss_pattern(42, p, n);
        assert_eq!(kept.len() as u64 + dropped, n);
        let rate = dropped as f64 / n as f64;
        // Binomial standard deviation is sqrt(p(1-p)/n); allow 5 sigma.
        let sigma = (p * (1.0 - p) / n as f64).sqrt();
        assert!((rate - p).abs() < 5.0 * sigma, "p {p}: dropped {rate}");
    }
    assert_eq!(loss_pattern(42, 0.01, n), loss_pattern(42, 0.01, n));
    assert_ne!(loss_pattern(42, 0.01, n).0, loss_pattern(43, 0.01, n).0);
    assert_eq!(loss_pattern(1, 0.0, 1000).1, 0);
    assert_eq!(loss_pattern(1, 1.0, 1000).1, 1000);
}

#[test]
fn duplicate_emits_copies_back_to_back() {
    let mut node = Duplicate::new(0.1, Rng::new(9));
    let n = 20_000u64;
    for i in 0..n {
        node.push(Instant::from_nanos(i), packet(i, 100, Ecn::NotEct));
    }
    let out = drain(&mut node, 100_000);
    let s = node.stats();
    assert_eq!(out.len() as u64, n + s.duplicated);
    let share = s.duplicated as f64 / n as f64;
    assert!((share - 0.1).abs() < 0.01, "duplicated {share}");
    // Every id appears once or twice, copies adjacent and identical, order kept.
    let mut i = 0;
    let mut expected = 0;
    while i < out.len() {
        assert_eq!(out[i].1.id, expected);
        if i + 1 < out.len() && out[i + 1].1.id == expected {
            assert_eq!(out[i].1, out[i + 1].1);
            assert_eq!(out[i].0, out[i + 1].0);
            i += 1;
        }
        i += 1;
        expected += 1;
    }
    assert_eq!(expected, n);
}

#[test]
fn reorder_holds_back_p_and_others_overtake() {
    let max_extra = Duration::from_micros(50);
    let mut node = Reorder::new(0.1, max_extra, Rng::new(5));
    let n = 20_000u64;
    let gap = Duration::from_micros(1);
    let mut sent_at = Vec::new();
    for i in 0..n {
        let t = Instant::ZERO + gap * i as u32;
        sent_at.push(t);
        node.push(t, packet(i, 100, Ecn::NotEct));
    }
    let out = drain(&mut node, 100_000);
    assert_eq!(out.len() as u64, n, "nothing lost, nothing made");
    let s = node.stats();
    let share = s.held_back as f64 / n as f64;
    assert!((share - 0.1).abs() < 0.01, "held back {share}");
    let mut held = 0;
    let mut overtaken = 0;
    let mut max_seen = 0;
    for (at, p) in &out {
        let extra = *at - sent_at[p.id as usize];
        assert!(extra <= max_extra);
        if extra > Duration::ZERO {
            held += 1;
        }
        if p.id < max_seen {
            overtaken += 1;
        }
        max_seen = max_seen.max(p.id);
    }
    assert_eq!(held, s.held_back);
    // With 1 µs spacing and up to 50 µs extra, almost every held packet is
    // overtaken by a later one.
    assert!(
        overtaken as f64 > 0.9 * held as f64,
        "{overtaken} of {held}"
    );
    // Those not held keep their relative order.
    let passed: Vec<u64> = out
        .iter()
        .filter(|(at, p)| *at == sent_at[p.id as usize])
        .map(|(_, p)| p.id)
        .collect();
    assert!(passed.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn mtu_drops_only_oversize() {
    let mut node = Mtu::new(1500);
    node.push(Instant::ZERO, packet(0, 1460, Ecn::NotEct));
    node.push(Instant::ZERO, packet(1, 1461, Ecn::NotEct));
    node.push(Instant::ZERO, packet(2, 0, Ecn::NotEct));
    let ids: Vec<u64> = drain(&mut node, 10).iter().map(|(_, p)| p.id).collect();
    assert_eq!(ids, vec![0, 2]);
    assert_eq!(node.stats().dropped, 1);
}

#[test]
fn path_config_rejects_impossible_settings_by_name() {
    let bad = PathConfig::link(1_000, Duration::from_micros(1)).with_loss(1.5);
    assert_eq!(
        bad.validate(),
        Err(ConfigError::Probability {
            direction: "forward",
            index: 0,
            kind: "loss",
            value: 1.5
        })
    );
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("forward node 0 (loss)"));
    let nan = PathConfig::direct().with_duplication(f64::NAN);
    assert!(nan.validate().is_err());
    let zero = PathConfig {
        forward: vec![],
        reverse: vec![NodeConfig::Bottleneck {
            rate_bps: 0,
            queue_bytes: 1,
            ecn_threshold: None,
        }],
    };
    assert_eq!(
        zero.validate(),
        Err(ConfigError::ZeroRate {
            direction: "reverse",
            index: 0
        })
    );
    assert!(PathConfig::direct().with_mtu(20).validate().is_err());
    assert_eq!(
        PathConfig::direct().with_queue(10).unwrap_err(),
        ConfigError::NoBottleneck { setting: "queue" }
    );
}

#[test]
fn link_sizes_queue_to_the_bdp_with_a_floor() {
    let p = PathConfig::link(10_000_000_000, Duration::from_micros(100));
    assert_eq!(
        p.forward,
        vec![
            NodeConfig::Bottleneck {
                rate_bps: 10_000_000_000,
                queue_bytes: 125_000,
                ecn_threshold: None
            },
            NodeConfig::Delay(Duration::from_micros(50)),
        ]
    );
    assert_eq!(p.reverse, p.forward);
    let small = PathConfig::link(1_000_000, Duration::from_millis(1));
    assert!(matches!(
        small.forward[0],
        NodeConfig::Bottleneck { queue_bytes, .. } if queue_bytes == transports::sim::MIN_LINK_QUEUE
    ));
    assert_eq!(p.bottleneck_rate(), Some(10_000_000_000));
}

#[test]
fn a_built_path_chains_nodes_in_order() {
    // Bottleneck 1 Gbit/s then 10 µs delay: a 1500-byte packet pushed at 0
    // leaves the path at 12 + 10 µs.
    let config = PathConfig {
        forward: vec![
            NodeConfig::Bottleneck {
                rate_bps: 1_000_000_000,
                queue_bytes: 1_000_000,
                ecn_threshold: None,
            },
            NodeConfig::Delay(Duration::from_micros(10)),
        ],
        reverse: vec![],
    };
    let (mut fwd, mut rev) = config.build(1).unwrap();
    fwd.push(Instant::ZERO, packet(0, 1460, Ecn::NotEct));
    fwd.push(Instant::ZERO, packet(1, 1460, Ecn::NotEct));
    let mut out = Vec::new();
    let mut arrivals = Vec::new();
    for _ in 0..10 {
        let Some(at) = fwd.next_ready() else { break };
        fwd.advance(at, &mut out);
        arrivals.extend(out.drain(..).map(|p| (at, p.id)));
    }
    assert_eq!(
        arrivals,
        vec![(Instant::from_micros(22), 0), (Instant::from_micros(34), 1)]
    );
    // The empty reverse path delivers at once.
    rev.push(Instant::from_micros(3), packet(7, 0, Ecn::NotEct));
    assert_eq!(rev.next_ready(), Some(Instant::from_micros(3)));
    rev.advance(Instant::from_micros(3), &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(fwd.stats().len(), 2);
}
