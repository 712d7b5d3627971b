//! Resets (RFC 9293 3.10.7, RFC 5961 3) and challenge ACKs with their rate
//! limit (RFC 5961 7).

mod tcp_util;

use tcp_util::*;
use transports::segment::{CloseReason, Flags};
use transports::tcp::{State, TcpConfig, TcpConnection};
use transports::{Event, Transport};

fn syn_sent() -> TcpConnection {
    let mut c = TcpConnection::connect(ms(0), plain_config(), LOCAL, REMOTE, 1000).unwrap();
    drain(&mut c, ms(0));
    c
}

#[test]
fn rst_in_syn_sent_with_acceptable_ack_refuses() {
    let mut c = syn_sent();
    c.handle_segment(ms(1), &seg(Flags::RST | Flags::ACK, 0, 1001, 0));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(
        events(&mut c),
        vec![Event::Closed {
            reason: CloseReason::Refused
        }]
    );
    assert!(drain(&mut c, ms(1)).is_empty(), "never answer a RST");
}

#[test]
fn rst_in_syn_sent_with_bad_ack_or_no_ack_is_ignored() {
    let mut c = syn_sent();
    c.handle_segment(ms(1), &seg(Flags::RST | Flags::ACK, 0, 1500, 0));
    c.handle_segment(ms(1), &seg(Flags::RST, 0, 0, 0));
    assert_eq!(c.state(), State::SynSent);
    assert!(drain(&mut c, ms(1)).is_empty());
    assert!(events(&mut c).is_empty());
}

#[test]
fn bad_ack_in_syn_sent_draws_a_reset() {
    let mut c = syn_sent();
    c.handle_segment(ms(1), &seg(Flags::ACK, 77, 999, 100));
    let out = drain(&mut c, ms(1));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.flags, out[0].header.seq), (Flags::RST, 999));
    assert_eq!(c.state(), State::SynSent);
}

#[test]
fn rst_with_exact_sequence_resets() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.handle_segment(ms(2), &seg(Flags::RST, 5001, 0, 0));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(
        events(&mut c),
        vec![Event::Closed {
            reason: CloseReason::Reset
        }]
    );
}

#[test]
fn rst_in_window_but_not_exact_draws_a_challenge_ack() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.handle_segment(ms(2), &seg(Flags::RST, 5100, 0, 0));
    assert_eq!(c.state(), State::Established);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.flags, Flags::ACK);
    assert_eq!((out[0].header.seq, out[0].header.ack), (1001, 5001));
    assert_eq!(c.stats().challenge_acks, 1);
}

#[test]
fn rst_outside_the_window_is_ignored_silently() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    for seq in [4000, 5001 + 10_000, 5001u32.wrapping_add(1 << 31)] {
        c.handle_segment(ms(2), &seg(Flags::RST, seq, 0, 0));
    }
    assert_eq!(c.state(), State::Established);
    assert!(drain(&mut c, ms(2)).is_empty());
    assert_eq!(c.stats().drops.bad_rst, 3);
}

#[test]
fn syn_on_an_established_connection_draws_a_challenge_ack() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    for seq in [5001, 1, 9000] {
        c.handle_segment(ms(2), &seg(Flags::SYN, seq, 0, 1000));
        assert_eq!(c.state(), State::Established);
        let out = drain(&mut c, ms(2));
        assert_eq!(out.len(), 1, "seq {seq}");
        assert_eq!(out[0].header.flags, Flags::ACK);
        assert_eq!(out[0].header.ack, 5001);
    }
}

#[test]
fn challenge_acks_are_rate_limited() {
    let cfg = TcpConfig {
        challenge_ack_limit: 2,
        ..plain_config()
    };
    let mut c = established(cfg, 1000, 5000, 10_000);
    let mut sent = 0;
    for _ in 0..5 {
        c.handle_segment(ms(10), &seg(Flags::RST, 5002, 0, 0));
        sent += drain(&mut c, ms(10)).len();
    }
    assert_eq!(sent, 2);
    assert_eq!(c.stats().challenge_acks_suppressed, 3);
    // A second later the budget is back.
    c.handle_segment(ms(1010), &seg(Flags::RST, 5002, 0, 0));
    assert_eq!(drain(&mut c, ms(1010)).len(), 1);
}

#[test]
fn abort_sends_rst_at_snd_nxt() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.send_posted(ms(2), 500);
    drain(&mut c, ms(2));
    c.abort(ms(3));
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.flags, out[0].header.seq), (Flags::RST, 1501));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(
        events(&mut c),
        vec![Event::Closed {
            reason: CloseReason::Aborted
        }]
    );
}

#[test]
fn segments_after_close_draw_resets() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.abort(ms(3));
    drain(&mut c, ms(3));
    // With ACK: <SEQ=SEG.ACK><CTL=RST>.
    c.handle_segment(ms(4), &data(5001, 1234, 100, 0, 10));
    let out = drain(&mut c, ms(4));
    assert_eq!((out[0].header.flags, out[0].header.seq), (Flags::RST, 1234));
    // Without ACK: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    c.handle_segment(ms(4), &seg(Flags::FIN, 700, 0, 0));
    let out = drain(&mut c, ms(4));
    assert_eq!(out[0].header.flags, Flags::RST | Flags::ACK);
    assert_eq!((out[0].header.seq, out[0].header.ack), (0, 701));
    // A RST gets nothing.
    c.handle_segment(ms(4), &seg(Flags::RST, 700, 0, 0));
    assert!(drain(&mut c, ms(4)).is_empty());
}
