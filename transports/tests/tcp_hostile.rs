//! Hostile and malformed input: each case is dropped (and counted) or
//! answered as the RFCs say, and nothing panics.

mod tcp_util;

use proptest::prelude::*;
use tcp_util::*;
use transports::segment::{Ecn, Flags, TcpOptions};
use transports::tcp::{State, TcpConfig};
use transports::{RxSegment, Transport};

#[test]
fn ack_of_unsent_data_is_dropped_and_answered() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.send_posted(ms(2), 100);
    drain(&mut c, ms(2));
    // Acknowledges 500 bytes; only 100 were sent. The data it carries is
    // dropped with it.
    c.handle_segment(ms(3), &data(5001, 1501, 1000, 0, 10));
    assert_eq!(c.snd_una(), 1001);
    assert_eq!(c.received(), 0);
    assert_eq!(c.stats().drops.bad_ack, 1);
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.flags, out[0].header.ack), (Flags::ACK, 5001));
}

#[test]
fn ack_far_below_snd_una_draws_a_challenge_ack() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    // The peer's largest window was 65535; this is further back.
    c.handle_segment(
        ms(3),
        &seg(Flags::ACK, 5001, 1001u32.wrapping_sub(70_000), 1000),
    );
    assert_eq!(c.stats().drops.bad_ack, 1);
    assert_eq!(c.stats().challenge_acks, 1);
    assert_eq!(drain(&mut c, ms(3)).len(), 1);
    // An old ACK within the window is merely ignored for the ACK field.
    c.handle_segment(ms(4), &seg(Flags::ACK, 5001, 900, 1000));
    assert_eq!(c.stats().drops.bad_ack, 1);
    assert_eq!(c.snd_una(), 1001);
}

#[test]
fn data_beyond_the_window_is_dropped_and_acked() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.handle_segment(ms(2), &data(5001 + 20_000, 1001, 1000, 20_000, 100));
    assert_eq!(c.stats().drops.out_of_window, 1);
    assert_eq!(c.received(), 0);
    let out = drain(&mut c, ms(2));
    assert_eq!((out.len(), out[0].header.ack), (1, 5001));
}

#[test]
fn old_duplicate_data_is_acked_not_counted() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 100));
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &data(5001, 1001, 1000, 0, 100));
    assert_eq!(c.received(), 100);
    assert_eq!(c.stats().bytes_received, 100);
    let out = drain(&mut c, ms(3));
    assert_eq!((out.len(), out[0].header.ack), (1, 5101));
}

#[test]
fn segment_for_other_ports_is_dropped() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    let mut s = seg(Flags::RST, 5001, 0, 0);
    s.header.src_port = REMOTE + 1;
    c.handle_segment(ms(2), &s);
    let mut s = data(5001, 1001, 1000, 0, 100);
    s.header.dst_port = LOCAL + 1;
    c.handle_segment(ms(2), &s);
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.received(), 0);
    assert_eq!(c.stats().drops.wrong_ports, 2);
}

#[test]
fn segment_without_ack_is_dropped() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    let mut s = data(5001, 1001, 1000, 0, 100);
    s.header.flags = Flags::PSH;
    c.handle_segment(ms(2), &s);
    assert_eq!(c.received(), 0);
    assert_eq!(c.stats().drops.no_ack, 1);
}

#[test]
fn bad_option_lengths_drop_the_segment() {
    let cases: [&[u8]; 6] = [
        &[0x02, 0x03, 0x05, 0xb4],
        &[0x08, 0x0a, 0, 0, 0, 1],
        &[0x05, 0x0b, 0, 0, 0, 1, 0, 0, 0, 2, 0],
        &[0x03, 0x02],
        &[0x01, 0x01, 0x22],
        &[0x04, 0x00],
    ];
    for (i, raw) in cases.iter().enumerate() {
        let mut c = established(plain_config(), 1000, 5000, 10_000);
        let s = with_opts(data(5001, 1001, 1000, 0, 100), raw);
        c.handle_segment(ms(2), &s);
        assert_eq!(c.stats().drops.bad_options, 1, "case {i}");
        assert_eq!(c.received(), 0, "case {i}");
        assert_eq!(c.state(), State::Established);
    }
}

#[test]
fn placement_outside_the_segment_is_clipped_and_counted() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    let mut s = data(5001, 1001, 1000, 0, 100);
    s.accepted = 0..5000;
    c.handle_segment(ms(2), &s);
    assert_eq!(c.received(), 100);
    assert_eq!(c.stats().drops.bad_placement, 1);
}

#[test]
fn placement_beyond_posted_space_is_not_received() {
    let mut c = established(plain_config(), 1000, 5000, 50);
    let mut s = data(5001, 1001, 1000, 0, 100);
    s.accepted = 0..100;
    c.handle_segment(ms(2), &s);
    assert_eq!(c.received(), 50);
}

#[test]
fn huge_payload_length_does_not_panic() {
    let mut c = established(TcpConfig::default(), 1000, 5000, 10_000);
    let mut s = data(5001, 1001, 1000, 0, u32::MAX);
    s.accepted = u64::MAX - 5..u64::MAX;
    c.handle_segment(ms(2), &s);
    let mut s = seg(Flags::FIN | Flags::ACK, u32::MAX, u32::MAX, u16::MAX);
    s.payload_len = u32::MAX;
    c.handle_segment(ms(3), &s);
    drain(&mut c, ms(3));
}

fn any_flags() -> impl Strategy<Value = Flags> {
    any::<u8>().prop_map(Flags)
}

prop_compose! {
    fn any_segment()(
        flags in any_flags(),
        seq_delta in prop_oneof![-3000i64..3000, any::<i32>().prop_map(i64::from)],
        ack_delta in prop_oneof![-3000i64..3000, any::<i32>().prop_map(i64::from)],
        window in any::<u16>(),
        opts in prop::collection::vec(any::<u8>(), 0..40),
        payload_len in prop_oneof![0u32..3000, any::<u32>()],
        acc_start in 0u64..20_000,
        acc_len in 0u64..4000,
        ce in any::<bool>(),
        dt in 0u64..50_000,
    ) -> (Flags, i64, i64, u16, Vec<u8>, u32, u64, u64, bool, u64) {
        (flags, seq_delta, ack_delta, window, opts, payload_len, acc_start, acc_len, ce, dt)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random segments around the live sequence numbers, random options and
    /// placements, random timer firings and application calls: no panic,
    /// and the in-order and acknowledged points never move backwards or
    /// past what exists.
    #[test]
    fn random_input_never_panics(
        segs in prop::collection::vec(any_segment(), 1..120),
        sack in any::<bool>(),
    ) {
        let cfg = TcpConfig { sack, ecn: true, ..TcpConfig::default() };
        let mut c = established_full(cfg, 1000, 5000, 8_000);
        c.send_posted(ms(1), 30_000);
        let mut now = 1_000u64;
        let (mut rx, mut acked) = (0, 0);
        for (i, (flags, sd, ad, window, opts, len, a0, al, ce, dt)) in segs.into_iter().enumerate() {
            now += dt;
            let t = us(now);
            let seq = (i64::from(c.rcv_nxt()) + sd) as u32;
            let ack = (i64::from(c.snd_una()) + ad) as u32;
            let s = RxSegment {
                header: transports::segment::TcpHeader {
                    urgent: 0,
                    src_port: REMOTE,
                    dst_port: LOCAL,
                    seq,
                    ack,
                    flags,
                    window,
                    options: TcpOptions::new(&opts).unwrap(),
                },
                payload_len: len,
                accepted: a0..a0 + al,
                ecn: if ce { Ecn::Ce } else { Ecn::Ect0 },
                segment_size: 0,
            };
            c.handle_segment(t, &s);
            if i % 7 == 0 {
                c.handle_timeout(t);
            }
            if i % 11 == 0 {
                c.recv_posted(t, 1000);
            }
            drain(&mut c, t);
            events(&mut c);
            prop_assert!(c.received() >= rx);
            prop_assert!(c.acked() >= acked && c.acked() <= 30_000);
            rx = c.received();
            acked = c.acked();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The same random input from every starting point (SYN-SENT,
    /// SYN-RECEIVED, and closing states reached through `close`), with
    /// random application calls in between: never a panic, and once
    /// CLOSED nothing but RSTs comes out.
    #[test]
    fn random_input_in_every_state_never_panics(
        segs in prop::collection::vec(any_segment(), 1..80),
        start in 0u8..4,
        calls in prop::collection::vec(0u8..6, 80),
    ) {
        let cfg = TcpConfig { ecn: true, keepalive: Some(transports::tcp::Keepalive {
            idle: std::time::Duration::from_millis(3),
            interval: std::time::Duration::from_millis(1),
            probes: 2,
        }), ..TcpConfig::default() };
        let mut c = match start {
            0 => transports::tcp::TcpConnection::connect(ms(0), cfg, LOCAL, REMOTE, 77).unwrap(),
            1 => transports::tcp::TcpConnection::accept(ms(0), cfg, &seg(Flags::SYN, 5000, 0, 100), 77).unwrap(),
            _ => {
                let mut c = established_full(cfg, 1000, 5000, 4000);
                c.send_posted(ms(1), 5000);
                if start == 3 {
                    c.close(ms(1));
                }
                c
            }
        };
        let mut now = 1_000u64;
        for (i, (flags, sd, ad, window, opts, len, a0, al, ce, dt)) in segs.into_iter().enumerate() {
            now += dt;
            let t = us(now);
            let seq = (i64::from(c.rcv_nxt()) + sd) as u32;
            let ack = (i64::from(c.snd_una()) + ad) as u32;
            let s = RxSegment {
                header: transports::segment::TcpHeader {
                    urgent: 0,
                    src_port: REMOTE,
                    dst_port: LOCAL,
                    seq,
                    ack,
                    flags,
                    window,
                    options: TcpOptions::new(&opts).unwrap(),
                },
                payload_len: len,
                accepted: a0..a0 + al,
                ecn: if ce { Ecn::Ce } else { Ecn::NotEct },
                segment_size: 0,
            };
            let was_closed = c.state() == State::Closed;
            c.handle_segment(t, &s);
            match calls[i] {
                0 => c.handle_timeout(t),
                1 => c.recv_posted(t, 700),
                2 => c.send_posted(t, 900),
                3 => c.close(t),
                4 if i % 9 == 0 => c.abort(t),
                _ => {}
            }
            if let Some(d) = c.poll_timeout() {
                if d <= t {
                    c.handle_timeout(t);
                }
            }
            let out = drain(&mut c, t);
            if was_closed {
                prop_assert!(out.iter().all(|s| s.header.flags.contains(Flags::RST)));
            }
            events(&mut c);
        }
    }
}

#[test]
fn a_flood_of_bad_segments_queues_bounded_replies() {
    let mut c =
        transports::tcp::TcpConnection::connect(ms(0), plain_config(), LOCAL, REMOTE, 1).unwrap();
    drain(&mut c, ms(0));
    for i in 0..1000u32 {
        c.handle_segment(ms(1), &seg(Flags::ACK, i, 5000 + i, 0));
    }
    assert_eq!(drain(&mut c, ms(1)).len(), 16);
    assert_eq!(c.stats().resets_suppressed, 1000 - 16);
}

#[test]
fn progress_events_coalesce_when_not_polled() {
    let mut c = established(plain_config(), 1000, 5000, 1 << 20);
    c.send_posted(ms(2), 100_000);
    for i in 0..50u32 {
        c.handle_segment(
            ms(3),
            &data(
                5001 + i * 100,
                1001 + i * 100,
                1000,
                u64::from(i) * 100,
                100,
            ),
        );
        drain(&mut c, ms(3));
    }
    assert_eq!(
        events(&mut c),
        vec![
            transports::Event::Received { upto: 5000 },
            transports::Event::Acked { upto: 4900 }
        ]
    );
}

#[test]
fn pure_ack_at_the_right_edge_is_acceptable_and_beyond_it_rate_limited() {
    let mut c = established(plain_config(), 1000, 5000, 1000);
    // The peer filled our 1000-byte window (the data is still in flight):
    // its pure ACKs carry SEG.SEQ = the right edge.
    c.handle_segment(ms(2), &seg(Flags::ACK, 6001, 1001, 1000));
    assert_eq!(c.stats().drops.out_of_window, 0);
    assert!(drain(&mut c, ms(2)).is_empty());
    // Beyond the edge: answered, but not every time.
    c.handle_segment(ms(3), &seg(Flags::ACK, 6002, 1001, 1000));
    assert_eq!(drain(&mut c, ms(3)).len(), 1);
    c.handle_segment(ms(3), &seg(Flags::ACK, 6002, 1001, 1000));
    assert!(drain(&mut c, ms(3)).is_empty());
    assert_eq!(c.stats().oow_acks_suppressed, 1);
    // Data beyond the window is always answered.
    c.handle_segment(ms(3), &data(7001, 1001, 1000, 2000, 10));
    assert_eq!(drain(&mut c, ms(3)).len(), 1);
    // Half a minimum RTO later a pure ACK is answered again.
    c.handle_segment(ms(6), &seg(Flags::ACK, 6002, 1001, 1000));
    assert_eq!(drain(&mut c, ms(6)).len(), 1);
}
