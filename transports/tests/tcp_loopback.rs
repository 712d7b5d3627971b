//! Two header-only connections back to back, no loss: a bulk transfer
//! completes and both sides close gracefully.

mod tcp_util;

use std::cell::RefCell;
use std::rc::Rc;
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
    assert_eq!(
        p.a.stats().retransmits,
        0,
        "no loss, no retransmission {:?} {:?}",
        p.a.stats(),
        p.b.stats()
    );
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

/// More than 4 GiB, starting just below the 32-bit wrap: the wire sequence
/// numbers wrap once at the start and once more later, the 64-bit stream
/// offsets do not.
#[test]
fn five_gigabytes_across_sequence_wraps() {
    let config = TcpConfig::default();
    let w = 8u64 << 20;
    let mut p = Pair::handshake_iss(
        config.clone(),
        config,
        w,
        Duration::from_micros(20),
        u32::MAX - 100,
        u32::MAX - 5,
    );
    let total = 5_000_000_000u64;
    let now = p.now;
    p.a.send_posted(now, total);
    p.b.send_posted(now, 3000);
    let ok = p.run(50_000_000, now + Duration::from_secs(60), |p| {
        let want = p.b.received() + w;
        if want > p.b_posted {
            let now = p.now;
            p.b.recv_posted(now, want - p.b_posted);
            p.b_posted = want;
        }
        p.a.acked() == total && p.b.acked() == 3000
    });
    assert!(ok, "acked {} of {total}", p.a.acked());
    assert_eq!(p.b.received(), total);
    assert_eq!(p.a.received(), 3000);
    assert_eq!(p.a.stats().retransmits, 0);
    assert_eq!(
        p.a.snd_una(),
        (u32::MAX - 100).wrapping_add(1).wrapping_add(total as u32)
    );
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

/// One impaired run: loss, reordering and duplication in per-mille, both
/// directions, each side posting `window` bytes of receive space ahead of
/// what it consumed.
struct Impair {
    seed: u64,
    sack: bool,
    timestamps: bool,
    window_scale: Option<u8>,
    loss: u64,
    reorder: u64,
    dup: u64,
    window: u64,
}

fn impaired_transfer(run: &Impair) {
    let config = TcpConfig {
        sack: run.sack,
        timestamps: run.timestamps,
        window_scale: run.window_scale,
        ..TcpConfig::default()
    };
    let latency = Duration::from_micros(50);
    let window = run.window;
    let mut p = Pair::handshake(config.clone(), config, window, latency);
    let rng = Rc::new(RefCell::new(Rng(run.seed.wrapping_mul(2).wrapping_add(1))));
    let r = rng.clone();
    let loss = run.loss;
    p.drop = Box::new(move |_, _, _| r.borrow_mut().chance(loss));
    let r = rng;
    let (reorder, dup) = (run.reorder, run.dup);
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
    let ok = p.run(3_000_000, now + Duration::from_secs(600), |p| {
        let now = p.now;
        let want = p.b.received() + window;
        if want > p.b_posted {
            p.b.recv_posted(now, want - p.b_posted);
            p.b_posted = want;
        }
        let want = p.a.received() + window;
        if want > p.a_posted {
            p.a.recv_posted(now, want - p.a_posted);
            p.a_posted = want;
        }
        p.a.acked() == total && p.b.acked() == total / 10
    });
    assert!(
        ok,
        "seed {}: a acked {} b acked {} a {:?} b {:?} at {:?}",
        run.seed,
        p.a.acked(),
        p.b.acked(),
        p.a.stats(),
        p.b.stats(),
        p.now
    );
    assert_eq!(p.b.received(), total);
    assert_eq!(p.a.received(), total / 10);
    let now = p.now;
    p.a.close(now);
    p.b.close(now);
    let ok = p.run(100_000, now + Duration::from_secs(300), |p| {
        p.a.state() == State::Closed && p.b.state() == State::Closed
    });
    assert!(
        ok,
        "seed {} close: a {:?} b {:?}",
        run.seed,
        p.a.state(),
        p.b.state()
    );
    // With heavy loss the last ACK of a FIN can be lost for longer than
    // TIME-WAIT lasts; the peer then meets a RST. Anything else is a bug.
    for evs in [&p.a_events, &p.b_events] {
        let closed: Vec<_> = evs
            .iter()
            .filter_map(|e| match e {
                Event::Closed { reason } => Some(*reason),
                _ => None,
            })
            .collect();
        assert_eq!(closed.len(), 1, "seed {}", run.seed);
        assert!(
            closed[0] == CloseReason::Graceful || (run.loss > 0 && closed[0] == CloseReason::Reset),
            "seed {}: {:?}",
            run.seed,
            closed[0]
        );
    }
}

#[test]
fn bidirectional_transfer_survives_loss_reordering_and_duplication() {
    for seed in 1..=6 {
        for sack in [true, false] {
            impaired_transfer(&Impair {
                seed: seed * 7919 + u64::from(sack),
                sack,
                timestamps: true,
                window_scale: Some(7),
                loss: 20,
                reorder: 50,
                dup: 10,
                window: WINDOW,
            });
        }
    }
}

/// A matrix of loss, reordering, duplication, receive-space sizes (down to
/// less than one segment), window scale shifts and option sets.
#[test]
fn impairment_matrix_always_completes() {
    for seed in 0..240u64 {
        impaired_transfer(&Impair {
            seed,
            sack: seed % 4 != 0,
            timestamps: seed % 7 != 0,
            window_scale: (seed % 3 != 0).then_some((seed % 15) as u8),
            loss: [0, 5, 20, 50, 100, 150][(seed % 6) as usize],
            reorder: [0, 100, 300, 800][(seed % 4) as usize],
            dup: [0, 20, 200][(seed % 3) as usize],
            window: [WINDOW, 3000, 20_000, 100_000, 1000][(seed % 5) as usize],
        });
    }
}
