//! Two header-only connections back to back, no loss: a bulk transfer
//! completes and both sides close gracefully.

mod tcp_util;

use std::time::Duration;

use tcp_util::{Dir, Pair};
use transports::segment::CloseReason;
use transports::tcp::{State, TcpConfig};
use transports::{Event, Transport};

const TEN_MB: u64 = 10 * 1000 * 1000;
const WINDOW: u64 = 4 << 20;

fn transfer(config: TcpConfig) -> Pair {
    let mut p = Pair::handshake(config.clone(), config, WINDOW, Duration::from_micros(20));
    let now = p.now;
    p.a.send_posted(now, TEN_MB);
    let deadline = now + Duration::from_secs(30);
    let done = p.run(2_000_000, deadline, |p| {
        // The receiving application keeps WINDOW bytes posted ahead of what
        // it has consumed.
        let want = p.b.received() + WINDOW;
        if want > p.b_posted {
            let more = want - p.b_posted;
            p.b_posted = want;
            let now = p.now;
            p.b.recv_posted(now, more);
        }
        p.a.acked() == TEN_MB
    });
    assert!(
        done,
        "transfer stalled: acked {} received {} stats {:?}",
        p.a.acked(),
        p.b.received(),
        p.a.stats()
    );
    assert_eq!(p.b.received(), TEN_MB);
    let last_rx = p
        .b_events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Received { upto } => Some(*upto),
            _ => None,
        })
        .expect("Received events");
    assert_eq!(last_rx, TEN_MB);
    let last_ack = p
        .a_events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Acked { upto } => Some(*upto),
            _ => None,
        })
        .expect("Acked events");
    assert_eq!(last_ack, TEN_MB);
    // Events are monotone.
    let ups: Vec<u64> = p
        .b_events
        .iter()
        .filter_map(|e| match e {
            Event::Received { upto } => Some(*upto),
            _ => None,
        })
        .collect();
    assert!(ups.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(p.a.stats().retransmits, 0, "no loss, no retransmission");
    assert_eq!(p.a.stats().rtos, 0);
    p
}

fn close_both(p: &mut Pair) {
    let now = p.now;
    p.a.close(now);
    p.b.close(now);
    let deadline = now + Duration::from_secs(5);
    let ok = p.run(10_000, deadline, |p| {
        p.a.state() == State::Closed && p.b.state() == State::Closed
    });
    assert!(ok, "close: a {:?} b {:?}", p.a.state(), p.b.state());
    for evs in [&p.a_events, &p.b_events] {
        assert!(evs.contains(&Event::Closed {
            reason: CloseReason::Graceful
        }));
        assert!(evs.iter().any(|e| matches!(e, Event::PeerClosed { .. })));
    }
}

#[test]
fn ten_megabytes_with_sack_timestamps_and_scaling() {
    let mut p = transfer(TcpConfig::default());
    let n = p.a.negotiated();
    assert!(n.sack && n.timestamps);
    assert_eq!((n.snd_wscale, n.rcv_wscale), (7, 7));
    assert_eq!(p.a.stats().bytes_sent, TEN_MB);
    assert!(p.a.rtt().smoothed().is_some());
    close_both(&mut p);
}

#[test]
fn ten_megabytes_without_options() {
    let config = TcpConfig {
        sack: false,
        timestamps: false,
        window_scale: Some(8),
        ..TcpConfig::default()
    };
    let mut p = transfer(config);
    let n = p.a.negotiated();
    assert!(!n.sack && !n.timestamps);
    close_both(&mut p);
}

#[test]
fn transfer_recovers_from_periodic_loss() {
    let config = TcpConfig::default();
    let mut p = Pair::handshake(config.clone(), config, WINDOW, Duration::from_micros(20));
    // Drop every 50th data segment from a to b, each only the first time
    // its range is seen.
    let mut seen = std::collections::HashSet::new();
    p.drop = Box::new(move |dir, idx, s| {
        dir == Dir::AtoB
            && s.payload.is_some()
            && idx % 50 == 7
            && seen.insert(s.payload.clone().map(|r| r.start))
    });
    let now = p.now;
    let total = 2_000_000;
    p.a.send_posted(now, total);
    let ok = p.run(2_000_000, now + Duration::from_secs(30), |p| {
        p.a.acked() == total
    });
    assert!(ok, "stalled at {} {:?}", p.a.acked(), p.a.stats());
    assert_eq!(p.b.received(), total);
    assert!(p.a.stats().fast_recoveries > 0);
    assert!(p.a.stats().retransmits > 0);
}

/// A small deterministic generator (xorshift64*), so the test needs no RNG
/// crate and every run sees the same impairments.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

fn impaired_transfer(seed: u64, sack: bool, loss: u64, reorder: u64, dup: u64) {
    let config = TcpConfig {
        sack,
        ..TcpConfig::default()
    };
    let latency = Duration::from_micros(50);
    let mut p = Pair::handshake(config.clone(), config, WINDOW, latency);
    let rng = std::rc::Rc::new(std::cell::RefCell::new(Rng(seed
        .wrapping_mul(2)
        .wrapping_add(1))));
    let r = rng.clone();
    p.drop = Box::new(move |_, _, _| r.borrow_mut().chance(loss));
    let r = rng;
    p.copies = Box::new(move |_, _, _| {
        let mut r = r.borrow_mut();
        let mut v = vec![if r.chance(reorder) {
            Duration::from_micros(r.next() % 300)
        } else {
            Duration::ZERO
        }];
        if r.chance(dup) {
            v.push(Duration::from_micros(r.next() % 100));
        }
        v
    });
    let total = 1_000_000;
    let now = p.now;
    p.a.send_posted(now, total);
    p.b.send_posted(now, total / 10);
    let ok = p.run(3_000_000, now + Duration::from_secs(60), |p| {
        p.a.acked() == total && p.b.acked() == total / 10
    });
    assert!(
        ok,
        "seed {seed} sack {sack}: a acked {} b acked {} a {:?} b {:?} at {:?}",
        p.a.acked(),
        p.b.acked(),
        p.a.stats(),
        p.b.stats(),
        p.now
    );
    assert_eq!(p.b.received(), total);
    assert_eq!(p.a.received(), total / 10);
    close_both(&mut p);
}

#[test]
fn bidirectional_transfer_survives_loss_reordering_and_duplication() {
    for seed in 1..=6 {
        impaired_transfer(seed, true, 20, 50, 10);
        impaired_transfer(seed * 7919, false, 20, 50, 10);
    }
}

#[test]
fn heavy_loss_still_completes() {
    impaired_transfer(42, true, 100, 0, 0);
    impaired_transfer(43, false, 100, 0, 0);
}
