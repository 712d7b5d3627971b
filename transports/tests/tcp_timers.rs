//! Delayed ACK with quick-ack, keepalive, ECN and pacing.

mod tcp_util;

use std::time::Duration;

use tcp_util::*;
use transports::segment::{CloseReason, Ecn, Flags};
use transports::tcp::{Keepalive, State, TcpConfig, TcpConnection};
use transports::{Event, Transport};

#[test]
fn a_lone_segment_is_acked_when_the_timer_fires() {
    let mut c = established(plain_config(), 1000, 5000, 100_000);
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 500));
    assert!(drain(&mut c, ms(2)).is_empty());
    assert_eq!(c.poll_timeout(), Some(ms(3)));
    c.handle_timeout(ms(3));
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.ack, 5501);
}

#[test]
fn every_second_full_segment_is_acked_at_once() {
    let mut c = established(plain_config(), 1000, 5000, 100_000);
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 1460));
    assert!(drain(&mut c, ms(2)).is_empty());
    c.handle_segment(ms(2), &data(6461, 1001, 1000, 1460, 1460));
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.ack, 5001 + 2920);
    assert_eq!(c.poll_timeout(), None, "delayed-ACK timer cleared");
}

#[test]
fn quick_ack_covers_the_first_segments() {
    let cfg = TcpConfig {
        quick_ack_segments: 2,
        ..plain_config()
    };
    let mut c = established(cfg, 1000, 5000, 100_000);
    for i in 0..3u32 {
        c.handle_segment(
            ms(2),
            &data(5001 + i * 100, 1001, 1000, u64::from(i) * 100, 100),
        );
        let n = drain(&mut c, ms(2)).len();
        assert_eq!(n, usize::from(i < 2), "segment {i}");
    }
}

#[test]
fn out_of_order_data_is_acked_at_once() {
    let mut c = established(plain_config(), 1000, 5000, 100_000);
    c.handle_segment(ms(2), &data(5501, 1001, 1000, 500, 100));
    let out = drain(&mut c, ms(2));
    assert_eq!((out.len(), out[0].header.ack), (1, 5001));
}

#[test]
fn data_segments_carry_the_ack_and_clear_the_timer() {
    let mut c = established(plain_config(), 1000, 5000, 100_000);
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 500));
    c.send_posted(ms(2), 100);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, Some(0..100));
    assert_eq!(out[0].header.ack, 5501);
    c.handle_timeout(ms(3));
    assert!(drain(&mut c, ms(3)).is_empty());
}

fn keepalive_config() -> TcpConfig {
    TcpConfig {
        keepalive: Some(Keepalive {
            idle: Duration::from_secs(1),
            interval: Duration::from_millis(100),
            probes: 3,
        }),
        ..plain_config()
    }
}

#[test]
fn keepalive_probes_then_gives_up() {
    let mut c = established(keepalive_config(), 1000, 5000, 1000);
    assert_eq!(c.poll_timeout(), Some(ms(1001)));
    c.handle_timeout(ms(1001));
    let out = drain(&mut c, ms(1001));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.seq, out[0].header.ack), (1000, 5001));
    // Answered: the idle clock restarts.
    c.handle_segment(ms(1002), &seg(Flags::ACK, 5001, 1001, 1000));
    assert_eq!(c.poll_timeout(), Some(ms(2002)));
    for t in [2002, 2102, 2202] {
        assert_eq!(c.poll_timeout(), Some(ms(t)));
        c.handle_timeout(ms(t));
        assert_eq!(drain(&mut c, ms(t)).len(), 1);
    }
    assert_eq!(c.stats().keepalives, 4);
    c.handle_timeout(ms(2302));
    assert_eq!(c.state(), State::Closed);
    assert!(events(&mut c).contains(&Event::Closed {
        reason: CloseReason::TimedOut
    }));
}

#[test]
fn ecn_is_negotiated_and_echoed() {
    let cfg = TcpConfig {
        ecn: true,
        ..plain_config()
    };
    let mut c = TcpConnection::connect(ms(0), cfg, LOCAL, REMOTE, 1000).unwrap();
    c.recv_posted(ms(0), 100_000);
    let syn = drain(&mut c, ms(0)).remove(0);
    assert_eq!(syn.header.flags, Flags::SYN | Flags::ECE | Flags::CWR);
    c.handle_segment(
        ms(1),
        &with_opts(
            seg(Flags::SYN | Flags::ACK | Flags::ECE, 5000, 1001, 65535),
            &[2, 4, 5, 0xb4],
        ),
    );
    assert!(c.negotiated().ecn);
    let ack = drain(&mut c, ms(1)).remove(0);
    assert_eq!(ack.ecn, Ecn::NotEct, "pure ACKs are not ECN-capable");
    c.send_posted(ms(1), 3000);
    let out = drain(&mut c, ms(1));
    assert!(out.iter().all(|s| s.ecn == Ecn::Ect0));
    // A CE mark is echoed with ECE until the sender's CWR.
    let mut s = data(5001, 1001, 1000, 0, 100);
    s.ecn = Ecn::Ce;
    c.handle_segment(ms(2), &s);
    c.handle_timeout(ms(3));
    let out = drain(&mut c, ms(3));
    assert!(out[0].header.flags.contains(Flags::ECE));
    c.handle_segment(ms(4), &data(5101, 1001, 1000, 100, 100));
    c.handle_timeout(ms(5));
    assert!(drain(&mut c, ms(5))[0].header.flags.contains(Flags::ECE));
    let mut s = data(5201, 1001, 1000, 200, 100);
    s.header.flags = Flags::ACK | Flags::CWR;
    c.handle_segment(ms(6), &s);
    c.handle_timeout(ms(7));
    assert!(!drain(&mut c, ms(7))[0].header.flags.contains(Flags::ECE));
}

#[test]
fn ece_reduces_the_window_once_and_sets_cwr() {
    let cfg = TcpConfig {
        ecn: true,
        ..plain_config()
    };
    let mut c = TcpConnection::connect(ms(0), cfg, LOCAL, REMOTE, 1000).unwrap();
    drain(&mut c, ms(0));
    c.handle_segment(
        ms(1),
        &with_opts(
            seg(Flags::SYN | Flags::ACK | Flags::ECE, 5000, 1001, 65535),
            &[2, 4, 5, 0xb4],
        ),
    );
    drain(&mut c, ms(1));
    c.send_posted(ms(1), 100_000);
    drain(&mut c, ms(1));
    let w0 = c.cc_metrics().window;
    c.handle_segment(
        ms(2),
        &seg(Flags::ACK | Flags::ECE, 5001, 1001 + 1460, 65535),
    );
    assert_eq!(c.cc_metrics().window, w0 / 2);
    c.handle_segment(
        ms(2),
        &seg(Flags::ACK | Flags::ECE, 5001, 1001 + 2920, 65535),
    );
    assert_eq!(c.cc_metrics().window, w0 / 2, "once per window");
    // Once the window has room, the next new data carries CWR, once.
    c.handle_segment(ms(3), &seg(Flags::ACK, 5001, 1001 + 8 * 1460, 65535));
    let out = drain(&mut c, ms(3));
    assert!(!out.is_empty());
    assert!(out[0].header.flags.contains(Flags::CWR));
    assert!(out
        .iter()
        .skip(1)
        .all(|s| !s.header.flags.contains(Flags::CWR)));
}

#[test]
fn passive_open_accepts_an_ecn_setup_syn() {
    let cfg = TcpConfig {
        ecn: true,
        ..plain_config()
    };
    let syn = seg(Flags::SYN | Flags::ECE | Flags::CWR, 1, 0, 1000);
    let mut c = TcpConnection::accept(ms(0), cfg.clone(), &syn, 9).unwrap();
    assert_eq!(
        drain(&mut c, ms(0))[0].header.flags,
        Flags::SYN | Flags::ACK | Flags::ECE
    );
    // Without ECN in the config the SYN-ACK does not agree.
    let mut c = TcpConnection::accept(ms(0), plain_config(), &syn, 9).unwrap();
    assert_eq!(
        drain(&mut c, ms(0))[0].header.flags,
        Flags::SYN | Flags::ACK
    );
}

#[test]
fn pacing_spaces_segments_at_window_over_srtt() {
    let cfg = TcpConfig {
        pacing: true,
        pacing_gain: 1.0,
        ..plain_config()
    };
    let mut c = established(cfg, 1000, 5000, 1000);
    // One 1 ms sample: 14600 bytes per ms, so 1460 bytes take 100 µs.
    assert_eq!(c.rtt().smoothed(), Some(Duration::from_millis(1)));
    c.send_posted(ms(2), 4 * 1460);
    // Paced data is held back until its departure time, so every segment
    // leaves when the connection releases it (and its send time, which RTT
    // and delivery-rate samples start from, is the real one): one segment
    // now, then one per 100 µs, each at the timer the connection asks for.
    let mut departures = Vec::new();
    let mut now = ms(2);
    for _ in 0..8 {
        for s in drain(&mut c, now) {
            assert_eq!(s.not_before, None, "released only when due");
            if s.payload.is_some() {
                departures.push(now);
            }
        }
        if departures.len() == 4 {
            break;
        }
        let next = c.poll_timeout().expect("a pacing timer while data waits");
        assert!(next > now);
        now = next;
        c.handle_timeout(now);
    }
    assert_eq!(departures, vec![us(2000), us(2100), us(2200), us(2300)]);
}

fn ecn_established(echo: transports::tcp::EcnEcho) -> TcpConnection {
    let cfg = TcpConfig {
        ecn: true,
        ecn_echo: echo,
        ..plain_config()
    };
    let mut c = TcpConnection::connect(ms(0), cfg, LOCAL, REMOTE, 1000).unwrap();
    c.recv_posted(ms(0), 100_000);
    drain(&mut c, ms(0));
    c.handle_segment(
        ms(1),
        &with_opts(
            seg(Flags::SYN | Flags::ACK | Flags::ECE, 5000, 1001, 65535),
            &[2, 4, 5, 0xb4],
        ),
    );
    drain(&mut c, ms(1));
    c
}

fn marked(off: u32, ce: bool) -> transports::RxSegment {
    let mut s = data(5001 + off, 1001, 1000, u64::from(off), 1000);
    s.ecn = if ce { Ecn::Ce } else { Ecn::Ect0 };
    s
}

#[test]
fn per_packet_echo_follows_rfc_8257_state_machine() {
    let mut c = ecn_established(transports::tcp::EcnEcho::PerPacket);
    c.handle_segment(ms(2), &marked(0, false));
    assert!(drain(&mut c, ms(2)).is_empty(), "delayed");
    // CE arrives: the ACK owed for the unmarked segment goes out at once,
    // without ECE; this segment's own ACK is delayed and carries ECE.
    c.handle_segment(ms(2), &marked(1000, true));
    let out = drain(&mut c, ms(2));
    let acks: Vec<_> = out
        .iter()
        .map(|s| (s.header.ack, s.header.flags.contains(Flags::ECE)))
        .collect();
    assert_eq!(acks, vec![(6001, false)]);
    c.handle_timeout(ms(3));
    let out = drain(&mut c, ms(3));
    assert_eq!(
        (out[0].header.ack, out[0].header.flags.contains(Flags::ECE)),
        (7001, true)
    );
    // CE persists: delayed ACKs carry ECE.
    c.handle_segment(ms(4), &marked(2000, true));
    assert!(drain(&mut c, ms(4)).is_empty());
    c.handle_timeout(ms(5));
    let out = drain(&mut c, ms(5));
    assert_eq!(
        (out[0].header.ack, out[0].header.flags.contains(Flags::ECE)),
        (8001, true)
    );
    // CE stops: ECE stops with it, no CWR needed.
    c.handle_segment(ms(6), &marked(3000, false));
    c.handle_timeout(ms(7));
    let out = drain(&mut c, ms(7));
    assert_eq!(
        (out[0].header.ack, out[0].header.flags.contains(Flags::ECE)),
        (9001, false)
    );
}

#[test]
fn classic_echo_ignores_pure_acks_and_waits_for_cwr() {
    let mut c = ecn_established(transports::tcp::EcnEcho::Classic);
    c.handle_segment(ms(2), &marked(0, true));
    // A pure ACK (not ECN-capable) does not clear the echo.
    c.handle_segment(ms(2), &seg(Flags::ACK, 6001, 1001, 1000));
    c.handle_timeout(ms(3));
    assert!(drain(&mut c, ms(3))[0].header.flags.contains(Flags::ECE));
    c.handle_segment(ms(4), &marked(1000, false));
    c.handle_timeout(ms(5));
    assert!(drain(&mut c, ms(5))[0].header.flags.contains(Flags::ECE));
}

/// Issue 12, item 4: a passive open whose final ACK never comes (a SYN
/// from a spoofed address) gives up after `syn_ack_retries` SYN-ACK
/// retransmissions, long before the data retransmission limit.
#[test]
fn a_handshake_that_never_completes_gives_up_after_syn_ack_retries() {
    let cfg = TcpConfig {
        syn_ack_retries: 3,
        max_retransmissions: 15,
        ..plain_config()
    };
    let syn = seg(Flags::SYN, 7000, 0, 65535);
    let mut c = TcpConnection::accept(ms(0), cfg, &syn, 100).expect("accept");
    let mut synacks = 0;
    let mut now = ms(0);
    for _ in 0..100 {
        synacks += drain(&mut c, now)
            .iter()
            .filter(|s| s.header.flags.contains(Flags::SYN))
            .count();
        if c.state() == State::Closed {
            break;
        }
        let Some(t) = c.poll_timeout() else { break };
        now = t;
        c.handle_timeout(now);
    }
    assert_eq!(c.state(), State::Closed);
    assert_eq!(synacks, 1 + 3, "the SYN-ACK and three retransmissions");
    assert!(events(&mut c).contains(&Event::Closed {
        reason: CloseReason::TimedOut
    }));
}
