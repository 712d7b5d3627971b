//! Loss recovery without SACK (NewReno, RFC 6582) and by retransmission
//! timeout (RFC 6298), with backoff, its cap and giving up.

mod tcp_util;

use std::time::Duration;

use tcp_util::*;
use transports::segment::{CloseReason, Flags};
use transports::tcp::{State, TcpConfig, TcpConnection};
use transports::{Event, Transport};

const MSS: u64 = 1460;

fn ack(off: u64) -> transports::RxSegment {
    seg(Flags::ACK, 5001, 1001 + off as u32, 65535)
}

#[test]
fn newreno_fast_retransmit_and_partial_acks() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.send_posted(ms(2), 12 * MSS);
    assert_eq!(drain(&mut c, ms(2)).len(), 10);
    // Segments 0 and 3 are lost. Dup ACKs for 1, 2 (not yet three): each
    // says a segment left the network, so one new segment may go (as
    // RFC 3042 limited transmit), but nothing is retransmitted.
    for k in 0..2 {
        c.handle_segment(ms(3), &ack(0));
        let out = drain(&mut c, ms(3));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].payload, Some((10 + k) * MSS..(11 + k) * MSS));
    }
    c.handle_segment(ms(3), &ack(0));
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1, "third dup ACK: fast retransmit");
    assert_eq!(out[0].payload, Some(0..MSS));
    assert_eq!(out[0].header.seq, 1001);
    assert_eq!(c.stats().dup_acks, 3);
    assert_eq!(c.stats().fast_recoveries, 1);
    assert_eq!(c.cc_metrics().window, 5 * MSS);
    // The repair arrives: the ACK stops at the next hole (partial ACK),
    // which is retransmitted at once.
    c.handle_segment(ms(4), &ack(3 * MSS));
    let out = drain(&mut c, ms(4));
    assert_eq!(out[0].payload, Some(3 * MSS..4 * MSS));
    assert!(c.in_recovery());
    // The full ACK ends recovery; no RTO happened.
    c.handle_segment(ms(5), &ack(12 * MSS));
    assert!(!c.in_recovery());
    assert_eq!(c.acked(), 12 * MSS);
    assert_eq!(c.stats().retransmits, 2);
    assert_eq!(c.stats().rtos, 0);
}

#[test]
fn window_updates_and_data_are_not_dup_acks() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.send_posted(ms(2), 10 * MSS);
    drain(&mut c, ms(2));
    for w in [60_000u16, 50_000, 40_000] {
        c.handle_segment(ms(3), &seg(Flags::ACK, 5001, 1001, w));
    }
    for i in 0..3u32 {
        c.handle_segment(
            ms(3),
            &data(5001 + i * 10, 1001, 40_000, u64::from(i) * 10, 10),
        );
    }
    assert_eq!(c.stats().dup_acks, 0);
    assert_eq!(c.stats().fast_recoveries, 0);
}

#[test]
fn rto_retransmits_with_a_collapsed_window() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.send_posted(ms(2), 5 * MSS);
    assert_eq!(drain(&mut c, ms(2)).len(), 5);
    let t = c.poll_timeout().expect("RTO armed");
    // One handshake sample of 1 ms: RTO = 1 + max(4 * 0.5, 5 ms floor).
    assert_eq!(t, ms(2) + Duration::from_millis(6));
    c.handle_timeout(t);
    let out = drain(&mut c, t);
    assert_eq!(c.stats().rtos, 1);
    // Loss window: the minimum of two segments, oldest first.
    let ranges: Vec<_> = out.iter().filter_map(|s| s.payload.clone()).collect();
    assert_eq!(ranges, vec![0..MSS, MSS..2 * MSS]);
    assert_eq!(c.cc_metrics().window, 2 * MSS);
    assert_eq!(c.cc_metrics().ssthresh, Some((5 * MSS / 2).max(2 * MSS)));
    // The ACK of those two lets the rest go.
    c.handle_segment(t + Duration::from_millis(1), &ack(2 * MSS));
    let out = drain(&mut c, t + Duration::from_millis(1));
    let ranges: Vec<_> = out.iter().filter_map(|s| s.payload.clone()).collect();
    assert_eq!(ranges.first(), Some(&(2 * MSS..3 * MSS)));
    assert_eq!(c.current_rto(), c.rtt().rto(), "backoff cleared by new ACK");
}

#[test]
fn rto_doubles_up_to_the_cap_then_gives_up() {
    let cfg = TcpConfig {
        initial_rto: Duration::from_millis(40),
        max_rto: Duration::from_millis(40),
        max_retransmissions: 6,
        ..plain_config()
    };
    let mut c = established(cfg, 1000, 5000, 10_000);
    c.send_posted(ms(2), 100);
    drain(&mut c, ms(2));
    let mut last = ms(2);
    let mut gaps = Vec::new();
    for _ in 0..7 {
        let t = c.poll_timeout().expect("timer");
        gaps.push((t - last).as_millis());
        last = t;
        c.handle_timeout(t);
        let out = drain(&mut c, t);
        if c.state() != State::Closed {
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].payload, Some(0..100));
        }
    }
    // SRTT 1 ms + the 5 ms floor, doubled up to the 40 ms cap.
    assert_eq!(gaps, vec![6, 12, 24, 40, 40, 40, 40]);
    assert_eq!(c.state(), State::Closed);
    assert!(events(&mut c).contains(&Event::Closed {
        reason: CloseReason::TimedOut
    }));
    assert_eq!(c.stats().rtos, 6);
}

#[test]
fn user_timeout_gives_up_early() {
    let cfg = TcpConfig {
        user_timeout: Some(Duration::from_millis(12)),
        ..plain_config()
    };
    let mut c = established(cfg, 1000, 5000, 10_000);
    c.send_posted(ms(2), 100);
    drain(&mut c, ms(2));
    for _ in 0..10 {
        let Some(t) = c.poll_timeout() else { break };
        c.handle_timeout(t);
        drain(&mut c, t);
    }
    assert_eq!(c.state(), State::Closed);
    // 5 + 10 ms of RTOs reach 12 ms at the second expiry.
    assert_eq!(c.stats().rtos, 1);
}

#[test]
fn karn_rtt_sample_without_timestamps() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    let before = c.rtt().smoothed().unwrap();
    c.send_posted(ms(10), 100);
    drain(&mut c, ms(10));
    c.handle_segment(ms(14), &ack(100));
    assert_eq!(c.rtt().latest(), Duration::from_millis(4));
    assert_ne!(c.rtt().smoothed().unwrap(), before);
    // A retransmitted segment gives no sample.
    c.send_posted(ms(20), 100);
    drain(&mut c, ms(20));
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    drain(&mut c, t);
    c.handle_segment(t + Duration::from_millis(9), &ack(200));
    assert_eq!(c.rtt().latest(), Duration::from_millis(4));
}

#[test]
fn timestamp_echo_of_the_retransmission_gives_a_sample() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 10_000);
    c.send_posted(ms(10), 100);
    drain(&mut c, ms(10));
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    let rtx = drain(&mut c, t);
    assert_eq!(rtx.len(), 1);
    // The peer echoes the retransmission's TSval: an exact sample even
    // though Karn's algorithm could not take one.
    let (tsval, _) = ts_of(&rtx[0]).unwrap();
    let a = with_opts(seg(Flags::ACK, 5001, 1101, 1000), &ts_opt(9, tsval));
    c.handle_segment(t + Duration::from_millis(3), &a);
    assert_eq!(c.rtt().latest(), Duration::from_millis(3));
}

#[test]
fn timestamp_echo_older_than_the_retransmission_is_not_used() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 10_000);
    let before = c.rtt().latest();
    c.send_posted(ms(10), 100);
    let out = drain(&mut c, ms(10));
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    drain(&mut c, t);
    // The original arrived but its ACK was lost; the retransmission draws
    // an ACK echoing the original's TSval (RFC 7323 4.2). Taking it would
    // add the whole RTO to the sample.
    let (tsval, _) = ts_of(&out[0]).unwrap();
    let a = with_opts(seg(Flags::ACK, 5001, 1101, 1000), &ts_opt(9, tsval));
    c.handle_segment(t + Duration::from_millis(3), &a);
    assert_eq!(c.rtt().latest(), before);
    assert_eq!(c.acked(), 100);
}

#[test]
fn an_ack_covering_a_retransmission_gives_no_karn_sample() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    let before = c.rtt().latest();
    c.send_posted(ms(10), 3 * MSS);
    drain(&mut c, ms(10));
    // Segment 0 is lost, 1 and 2 arrive: the RTO resends 0 and 1 (a
    // window of two) and the ACK covers all three; segment 2 was never
    // retransmitted, yet its send time would include the RTO wait.
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    let rtx = drain(&mut c, t);
    assert_eq!(rtx.len(), 2);
    c.handle_segment(t + Duration::from_millis(1), &ack(3 * MSS));
    assert_eq!(c.acked(), 3 * MSS);
    assert_eq!(c.rtt().latest(), before);
}

#[test]
fn syn_received_times_out_too() {
    let cfg = TcpConfig {
        max_retransmissions: 1,
        ..plain_config()
    };
    let mut c = TcpConnection::accept(ms(0), cfg, &seg(Flags::SYN, 1, 0, 100), 7).unwrap();
    drain(&mut c, ms(0));
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    assert_eq!(drain(&mut c, t).len(), 1, "SYN-ACK retransmitted");
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    assert_eq!(c.state(), State::Closed);
}
