//! Issue 12, item 1: the datapath places a segment's payload before the
//! transport judges it, so every segment the connection refuses, in whole
//! or in part, must have its placed bytes discarded (`Event::Discarded`)
//! and never reported as received. Each case: a forged segment with the
//! right ports and an in-window sequence number that fails one check.

mod tcp_util;

use tcp_util::*;
use transports::segment::Flags;
use transports::tcp::{TcpConfig, TcpConnection};
use transports::{Event, RxSegment, Transport};

fn discarded(c: &mut TcpConnection) -> Vec<std::ops::Range<u64>> {
    events(c)
        .into_iter()
        .filter_map(|e| match e {
            Event::Discarded { range } => Some(range),
            _ => None,
        })
        .collect()
}

fn received(evs: &[Event]) -> Option<u64> {
    evs.iter().rev().find_map(|e| match e {
        Event::Received { upto } => Some(*upto),
        _ => None,
    })
}

#[test]
fn data_with_an_unacceptable_ack_is_discarded() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    // ACKs data never sent (RFC 5961 5.2).
    c.handle_segment(ms(2), &data(5001, 9_000, 1000, 0, 100));
    assert_eq!(c.stats().drops.bad_ack, 1);
    assert_eq!(discarded(&mut c), vec![0..100]);
    assert_eq!(c.received(), 0);
    assert_eq!(c.stats().drops.payload_discarded, 1);
    // The genuine segment, placed after the forged bytes were forgotten,
    // is received.
    c.handle_segment(ms(3), &data(5001, 1001, 1000, 0, 100));
    let evs = events(&mut c);
    assert_eq!(received(&evs), Some(100));
    assert!(!evs.iter().any(|e| matches!(e, Event::Discarded { .. })));
}

#[test]
fn data_without_ack_or_with_rst_is_discarded() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    let mut no_ack = data(5001, 1001, 1000, 0, 100);
    no_ack.header.flags = Flags::default();
    c.handle_segment(ms(2), &no_ack);
    assert_eq!(discarded(&mut c), vec![0..100]);
    // A RST with data at a sequence number that is not RCV.NXT: a
    // challenge ACK, and the data is not taken.
    let mut rst = data(5011, 1001, 1000, 10, 90);
    rst.header.flags = Flags::RST | Flags::ACK;
    c.handle_segment(ms(3), &rst);
    assert_eq!(discarded(&mut c), vec![10..100]);
    assert_eq!(c.received(), 0);
}

#[test]
fn data_with_a_stale_timestamp_is_discarded() {
    let cfg = TcpConfig {
        timestamps: true,
        ..plain_config()
    };
    let mut c = established_full(cfg, 1000, 5000, 100_000);
    let genuine = with_opts(data(5001, 1001, 1000, 0, 100), &ts_opt(900_000, 0));
    c.handle_segment(ms(2), &genuine);
    assert_eq!(received(&events(&mut c)), Some(100));
    // PAWS (RFC 7323 5): far older than TS.Recent.
    let stale = with_opts(data(5101, 1001, 1000, 100, 100), &ts_opt(5, 0));
    c.handle_segment(ms(3), &stale);
    assert_eq!(c.stats().drops.paws, 1);
    assert_eq!(discarded(&mut c), vec![100..200]);
    assert_eq!(c.received(), 100);
}

#[test]
fn data_beyond_the_advertised_window_is_discarded_even_inside_posted_space() {
    // Without window scaling the window is at most 65 535 bytes; the
    // application posted more.
    let mut c = established(plain_config(), 1000, 5000, 200_000);
    let seg: RxSegment = data(5001 + 65_500, 1001, 1000, 65_500, 100);
    c.handle_segment(ms(2), &seg);
    assert_eq!(discarded(&mut c), vec![65_535..65_600]);
    // The part inside the window is kept as out-of-order data.
    c.handle_segment(ms(3), &data(5001, 1001, 1000, 0, 65_500));
    assert_eq!(received(&events(&mut c)), Some(65_535));
}

#[test]
fn a_segment_after_close_reports_nothing() {
    // The host removes a closed connection's flow, and with it whatever
    // was placed: nothing to discard, nothing received, no event after
    // `Closed`.
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.abort(ms(2));
    events(&mut c);
    c.handle_segment(ms(3), &data(5001, 1001, 1000, 0, 100));
    assert!(events(&mut c).is_empty());
    assert_eq!(c.received(), 0);
}
