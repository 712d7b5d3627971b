//! Closing (RFC 9293 3.6): active, passive and simultaneous close, FIN
//! retransmission and TIME-WAIT.

mod tcp_util;

use std::time::Duration;

use tcp_util::*;
use transports::segment::{CloseReason, Flags};
use transports::tcp::{State, TcpConfig, TcpConnection};
use transports::{Event, Transport};

fn cfg() -> TcpConfig {
    TcpConfig {
        time_wait: Duration::from_millis(50),
        ..plain_config()
    }
}

#[test]
fn active_close_through_time_wait() {
    let mut c = established(cfg(), 1000, 5000, 10_000);
    c.close(ms(2));
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.flags, Flags::FIN | Flags::ACK);
    assert_eq!((out[0].header.seq, out[0].header.ack), (1001, 5001));
    assert_eq!(c.state(), State::FinWait1);
    c.handle_segment(ms(3), &seg(Flags::ACK, 5001, 1002, 1000));
    assert_eq!(c.state(), State::FinWait2);
    assert!(drain(&mut c, ms(3)).is_empty());
    c.handle_segment(ms(4), &seg(Flags::FIN | Flags::ACK, 5001, 1002, 1000));
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(events(&mut c), vec![Event::PeerClosed { len: 0 }]);
    let out = drain(&mut c, ms(4));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.flags, out[0].header.ack), (Flags::ACK, 5002));
    assert_eq!(c.poll_timeout(), Some(ms(54)));
    // A retransmitted FIN is ACKed again and restarts TIME-WAIT.
    c.handle_segment(ms(30), &seg(Flags::FIN | Flags::ACK, 5001, 1002, 1000));
    let out = drain(&mut c, ms(30));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.ack, 5002);
    assert_eq!(c.poll_timeout(), Some(ms(80)));
    c.handle_timeout(ms(79));
    assert_eq!(c.state(), State::TimeWait);
    c.handle_timeout(ms(80));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(
        events(&mut c),
        vec![Event::Closed {
            reason: CloseReason::Graceful
        }]
    );
    assert_eq!(c.poll_timeout(), None);
}

/// A peer that already closed (LAST-ACK, then CLOSED) may answer our
/// re-ACK of its retransmitted FIN with a RST. Every byte and both FINs
/// were exchanged, so the RST only ends TIME-WAIT early (RFC 9293
/// 3.10.7.4); the application hears of a graceful close, not a reset.
#[test]
fn reset_in_time_wait_ends_it_early_as_a_graceful_close() {
    let mut c = established(cfg(), 1000, 5000, 10_000);
    c.send_posted(ms(1), 100);
    c.close(ms(1));
    drain(&mut c, ms(1));
    c.handle_segment(ms(3), &seg(Flags::FIN | Flags::ACK, 5001, 1102, 1000));
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(
        events(&mut c),
        vec![Event::Acked { upto: 100 }, Event::PeerClosed { len: 0 }]
    );
    drain(&mut c, ms(3));
    // A RST beside the point we acknowledged is still challenged.
    c.handle_segment(ms(4), &seg(Flags::RST, 5003, 0, 0));
    assert_eq!(c.state(), State::TimeWait);
    c.handle_segment(ms(5), &seg(Flags::RST, 5002, 0, 0));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(
        events(&mut c),
        vec![Event::Closed {
            reason: CloseReason::Graceful
        }]
    );
    assert_eq!(c.stats().time_wait_resets, 1);
    assert_eq!(c.poll_timeout(), None);
}

/// Before our FIN is acknowledged the close is not complete: a RST in
/// CLOSING is still a reset.
#[test]
fn reset_in_closing_is_a_reset() {
    let mut c = established(cfg(), 1000, 5000, 10_000);
    c.close(ms(2));
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &seg(Flags::FIN | Flags::ACK, 5001, 1001, 1000));
    assert_eq!(c.state(), State::Closing);
    events(&mut c);
    c.handle_segment(ms(4), &seg(Flags::RST, 5002, 0, 0));
    assert_eq!(
        events(&mut c),
        vec![Event::Closed {
            reason: CloseReason::Reset
        }]
    );
    assert_eq!(c.stats().time_wait_resets, 0);
}

#[test]
fn passive_close_through_last_ack() {
    let mut c = established(cfg(), 1000, 5000, 10_000);
    c.handle_segment(ms(2), &seg(Flags::FIN | Flags::ACK, 5001, 1001, 1000));
    assert_eq!(c.state(), State::CloseWait);
    assert_eq!(events(&mut c), vec![Event::PeerClosed { len: 0 }]);
    let out = drain(&mut c, ms(2));
    assert_eq!((out.len(), out[0].header.ack), (1, 5002));
    // We may still send, then close.
    c.send_posted(ms(3), 100);
    c.close(ms(3));
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1, "data and FIN in one segment");
    assert_eq!(out[0].payload, Some(0..100));
    assert!(out[0].header.flags.contains(Flags::FIN));
    assert_eq!(c.state(), State::LastAck);
    c.handle_segment(ms(4), &seg(Flags::ACK, 5002, 1001 + 101, 1000));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(
        events(&mut c),
        vec![
            Event::Acked { upto: 100 },
            Event::Closed {
                reason: CloseReason::Graceful
            }
        ]
    );
}

#[test]
fn simultaneous_close_through_closing() {
    let mut c = established(cfg(), 1000, 5000, 10_000);
    c.close(ms(2));
    let fin = drain(&mut c, ms(2));
    assert_eq!(fin.len(), 1);
    // The peer's FIN crosses ours: it does not acknowledge our FIN.
    c.handle_segment(ms(3), &seg(Flags::FIN | Flags::ACK, 5001, 1001, 1000));
    assert_eq!(c.state(), State::Closing);
    let out = drain(&mut c, ms(3));
    assert_eq!((out.len(), out[0].header.ack), (1, 5002));
    c.handle_segment(ms(4), &seg(Flags::ACK, 5002, 1002, 1000));
    assert_eq!(c.state(), State::TimeWait);
    c.handle_timeout(ms(54));
    assert_eq!(c.state(), State::Closed);
}

#[test]
fn fin_and_ack_in_one_segment_go_straight_to_time_wait() {
    let mut c = established(cfg(), 1000, 5000, 10_000);
    c.close(ms(2));
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &seg(Flags::FIN | Flags::ACK, 5001, 1002, 1000));
    assert_eq!(c.state(), State::TimeWait);
}

#[test]
fn unacknowledged_fin_is_retransmitted() {
    let mut c = established(cfg(), 1000, 5000, 10_000);
    c.close(ms(2));
    drain(&mut c, ms(2));
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    let out = drain(&mut c, t);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.flags, Flags::FIN | Flags::ACK);
    assert_eq!(out[0].header.seq, 1001);
    assert_eq!(c.stats().retransmits, 1);
}

#[test]
fn peer_fin_after_a_hole_waits_for_the_hole() {
    let mut c = established(cfg(), 1000, 5000, 10_000);
    // Bytes 100..200 with FIN arrive before 0..100.
    let mut s = data(5101, 1001, 1000, 100, 100);
    s.header.flags = Flags::FIN | Flags::ACK;
    c.handle_segment(ms(2), &s);
    assert_eq!(c.state(), State::Established);
    assert!(events(&mut c).is_empty());
    c.handle_segment(ms(3), &data(5001, 1001, 1000, 0, 100));
    assert_eq!(c.state(), State::CloseWait);
    assert_eq!(
        events(&mut c),
        vec![
            Event::Received { upto: 200 },
            Event::PeerClosed { len: 200 }
        ]
    );
    let out = drain(&mut c, ms(3));
    assert_eq!(out.last().unwrap().header.ack, 5001 + 201);
}

#[test]
fn close_in_syn_sent_just_ends() {
    let mut c = transports::tcp::TcpConnection::connect(ms(0), cfg(), LOCAL, REMOTE, 1).unwrap();
    drain(&mut c, ms(0));
    c.close(ms(1));
    assert_eq!(c.state(), State::Closed);
    assert!(drain(&mut c, ms(1)).is_empty());
}

/// An active close through TIME-WAIT with the peer at ISN 5000: the
/// point acknowledged last is 5002 (one byte of FIN).
fn in_time_wait(config: TcpConfig, peer_ts: Option<u32>) -> TcpConnection {
    let mut c = if config.timestamps {
        established_full(config, 1000, 5000, 10_000)
    } else {
        established(config, 1000, 5000, 10_000)
    };
    c.close(ms(2));
    drain(&mut c, ms(2));
    let mut fin = seg(Flags::FIN | Flags::ACK, 5001, 1002, 1000);
    if let Some(ts) = peer_ts {
        fin = with_opts(fin, &ts_opt(ts, 0));
    }
    c.handle_segment(ms(3), &fin);
    assert_eq!(c.state(), State::TimeWait);
    events(&mut c);
    drain(&mut c, ms(3));
    c
}

fn syn(seq: u32) -> transports::segment::RxSegment {
    seg(Flags::SYN, seq, 0, 64240)
}

/// A SYN beyond what TIME-WAIT acknowledged opens a new incarnation
/// (RFC 1122 4.2.2.13): the connection ends gracefully and hands the SYN
/// back for a listener, answering nothing itself.
#[test]
fn a_newer_syn_ends_time_wait_and_is_handed_back_for_a_listener() {
    let mut c = in_time_wait(cfg(), None);
    c.handle_segment(ms(10), &syn(5002 + 100_000));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(
        events(&mut c),
        vec![
            Event::Closed {
                reason: CloseReason::Graceful
            },
            Event::SynForListener
        ]
    );
    assert!(drain(&mut c, ms(10)).is_empty());
    assert_eq!(c.stats().time_wait_reopened, 1);
    assert_eq!(c.poll_timeout(), None);
    // Retransmitted, it reaches the closed connection: handed back again,
    // never answered with a RST.
    c.handle_segment(ms(11), &syn(5002 + 100_000));
    assert_eq!(events(&mut c), vec![Event::SynForListener]);
    assert!(drain(&mut c, ms(11)).is_empty());
}

/// A SYN at or below that point may be an old duplicate: challenged with
/// an ACK, TIME-WAIT goes on. So is a SYN|ACK, or a SYN with FIN.
#[test]
fn an_old_syn_or_a_syn_with_other_flags_is_challenged_in_time_wait() {
    let mut c = in_time_wait(cfg(), None);
    for (t, s) in [
        syn(5002),
        syn(4000),
        seg(Flags::SYN | Flags::ACK, 5002 + 100_000, 1002, 1000),
        seg(Flags::SYN | Flags::FIN, 5002 + 100_000, 0, 1000),
    ]
    .into_iter()
    .enumerate()
    {
        let now = ms(10 + t as u64);
        c.handle_segment(now, &s);
        assert_eq!(c.state(), State::TimeWait, "{s:?}");
        let out = drain(&mut c, now);
        assert_eq!(out.len(), 1, "{s:?}");
        assert_eq!((out[0].header.flags, out[0].header.ack), (Flags::ACK, 5002));
    }
    assert!(events(&mut c).is_empty());
    assert_eq!(c.stats().time_wait_reopened, 0);
}

/// With timestamps the SYN's timestamp decides (RFC 6191): newer than
/// TS.Recent opens anew even below the point acknowledged; older is an
/// old duplicate even beyond it.
#[test]
fn with_timestamps_a_syns_timestamp_decides_in_time_wait() {
    let ts = TcpConfig {
        timestamps: true,
        ..cfg()
    };
    let mut c = in_time_wait(ts.clone(), Some(900_000));
    c.handle_segment(ms(10), &with_opts(syn(5002 + 100_000), &ts_opt(800_000, 0)));
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(c.stats().time_wait_reopened, 0);

    let mut c = in_time_wait(ts, Some(900_000));
    c.handle_segment(ms(10), &with_opts(syn(4000), &ts_opt(900_500, 0)));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.stats().time_wait_reopened, 1);
    assert_eq!(events(&mut c).last(), Some(&Event::SynForListener));
}
