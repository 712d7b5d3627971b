//! Issue 13, item 4: records the datapath coalesced from consecutive
//! in-order segments (software GRO, `datapath::coalesce`). The transport
//! must judge a coalesced record exactly as it would its parts one by one
//! (same bytes received, same bytes discarded), acknowledge once per
//! record, and still count wire segments for "ACK at least every second
//! full-sized segment" (RFC 5681 4.2, RFC 9293 3.8.6.3).

mod tcp_util;

use tcp_util::*;
use transports::tcp::TcpConnection;
use transports::{Event, RxSegment, Transport};

const MSS: u32 = 1460;

/// The record the datapath makes of `n` segments of `size` bytes from
/// sequence number `seq` (stream offset `off`).
fn coalesced(seq: u32, ack: u32, off: u64, n: u32, size: u32) -> RxSegment {
    let mut s = data(seq, ack, 1000, off, n * size);
    s.segment_size = size;
    s
}

/// The `n` parts of [`coalesced`], one record each.
fn parts(seq: u32, ack: u32, off: u64, n: u32, size: u32) -> Vec<RxSegment> {
    (0..n)
        .map(|i| data(seq + i * size, ack, 1000, off + u64::from(i * size), size))
        .collect()
}

/// Pure ACKs the connection sends now.
fn acks(c: &mut TcpConnection, now: transports::Instant) -> Vec<u32> {
    drain(c, now)
        .iter()
        .filter(|s| s.payload_len() == 0)
        .map(|s| s.header.ack)
        .collect()
}

fn discarded(evs: &[Event]) -> Vec<std::ops::Range<u64>> {
    evs.iter()
        .filter_map(|e| match e {
            Event::Discarded { range } => Some(range.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_coalesced_record_gets_one_immediate_ack_where_its_parts_get_one_per_two() {
    let mut one_by_one = established(plain_config(), 1000, 5000, 1 << 20);
    let mut acked = Vec::new();
    for s in parts(5001, 1001, 0, 10, MSS) {
        one_by_one.handle_segment(ms(2), &s);
        acked.extend(acks(&mut one_by_one, ms(2)));
    }
    assert_eq!(acked.len(), 5, "every second full-sized segment: {acked:?}");

    let mut batched = established(plain_config(), 1000, 5000, 1 << 20);
    batched.handle_segment(ms(2), &coalesced(5001, 1001, 0, 10, MSS));
    assert_eq!(
        acks(&mut batched, ms(2)),
        vec![5001 + 10 * MSS],
        "one ACK for the batch, at once"
    );
    assert_eq!(batched.received(), one_by_one.received());
    assert_eq!(
        batched.stats().segments_received,
        one_by_one.stats().segments_received,
        "wire segments counted"
    );
}

/// Fails if the transport took a coalesced record's length for one
/// segment's: its "every second full-sized segment" rule would then wait
/// for 2 × 10 segments.
#[test]
fn a_coalesced_record_leaves_the_segment_size_estimate_at_one_segment() {
    let mut c = established(plain_config(), 1000, 5000, 1 << 20);
    c.handle_segment(ms(2), &coalesced(5001, 1001, 0, 10, MSS));
    assert_eq!(acks(&mut c, ms(2)).len(), 1);
    let off = 10 * MSS;
    c.handle_segment(ms(3), &data(5001 + off, 1001, 1000, u64::from(off), MSS));
    assert!(acks(&mut c, ms(3)).is_empty(), "one segment: delayed");
    let off = 11 * MSS;
    c.handle_segment(ms(3), &data(5001 + off, 1001, 1000, u64::from(off), MSS));
    assert_eq!(
        acks(&mut c, ms(3)),
        vec![5001 + 12 * MSS],
        "the second: at once"
    );
}

#[test]
fn a_refused_coalesced_record_discards_exactly_what_its_parts_placed() {
    // An ACK of data never sent (RFC 5961 5.2) on every part.
    let mut c = established(plain_config(), 1000, 5000, 1 << 20);
    c.handle_segment(ms(2), &coalesced(5001, 9_000, 0, 4, 100));
    assert_eq!(discarded(&events(&mut c)), vec![0..400]);
    assert_eq!(c.received(), 0);
    let mut p = established(plain_config(), 1000, 5000, 1 << 20);
    let mut forgotten = Vec::new();
    for s in parts(5001, 9_000, 0, 4, 100) {
        p.handle_segment(ms(2), &s);
        forgotten.extend(discarded(&events(&mut p)));
    }
    assert_eq!(forgotten, vec![0..100, 100..200, 200..300, 300..400]);
    assert_eq!(p.received(), 0);
}

#[test]
fn a_coalesced_record_past_the_advertised_window_keeps_what_its_parts_would() {
    // 1000 bytes advertised; the application posts more without a window
    // update having gone out, so placement may fill beyond the window.
    let run = |records: Vec<RxSegment>| {
        let mut c = established(plain_config(), 1000, 5000, 1000);
        c.recv_posted(ms(1), 9000);
        let mut forgotten = Vec::new();
        for s in records {
            c.handle_segment(ms(2), &s);
            forgotten.extend(discarded(&events(&mut c)));
        }
        let total: u64 = forgotten.iter().map(|r| r.end - r.start).sum();
        (c.received(), forgotten.first().map(|r| r.start), total)
    };
    let merged = run(vec![coalesced(5001, 1001, 0, 4, 400)]);
    let one_by_one = run(parts(5001, 1001, 0, 4, 400));
    assert_eq!(merged, one_by_one);
    assert_eq!(merged.0, 1000, "the advertised window, no more");
    assert_eq!((merged.1, merged.2), (Some(1000), 600));
}
