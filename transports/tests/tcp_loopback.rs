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
    eprintln!(
        "virtual time {:?} cc {:?} rtt {:?} a {:?} b {:?}",
        p.now,
        p.a.cc_metrics(),
        p.a.rtt().smoothed(),
        p.a.stats(),
        p.b.stats()
    );
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
    eprintln!("loss: time {:?} a {:?}", p.now, p.a.stats());
    assert!(p.a.stats().fast_recoveries > 0);
    assert!(p.a.stats().retransmits > 0);
}
