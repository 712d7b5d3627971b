//! The model applies the datapath's rule: clipping, first gap only, no
//! rewrite of placed bytes, refusals.

use super::*;

fn header(seq: u32) -> TcpHeader {
    TcpHeader {
        urgent: 0,
        seq,
        flags: Flags::ACK,
        ..TcpHeader::default()
    }
}

#[test]
fn clips_to_floor_and_posted_end() {
    let mut p = Placement::default();
    p.observe_syn(999);
    p.post(3000);
    // Offsets 0..1000.
    assert_eq!(p.place(&header(1000), 1000).0, 0..1000);
    // 2500..3500 is half beyond posted space.
    assert_eq!(p.place(&header(3500), 1000).0, 2500..3000);
    assert_eq!(p.stats().beyond_posted_bytes, 500);
    p.complete_to(1000);
    // 500..1500: the first half is below the floor.
    assert_eq!(p.place(&header(1500), 1000).0, 1000..1500);
    assert_eq!(p.stats().below_floor_bytes, 500);
    // Entirely beyond.
    assert!(p.place(&header(5000), 100).0.is_empty());
    assert_eq!(p.stats().placed_bytes, 1000 + 500 + 500);
}

#[test]
fn placed_bytes_are_not_rewritten_until_discarded() {
    let mut p = Placement::default();
    p.observe_syn(999);
    p.post(10_000);
    assert_eq!(p.place(&header(3000), 1000).0, 2000..3000);
    // A duplicate writes nothing; one covering two gaps writes the first.
    assert!(p.place(&header(3000), 1000).0.is_empty());
    assert_eq!(p.place(&header(1000), 3000).0, 0..2000);
    assert_eq!(p.stats().already_placed_bytes, 1000 + 1000);
    assert_eq!(p.place(&header(1000), 4000).0, 3000..4000);
    // The transport refused 1000..2000: a retransmission is placed again.
    p.discard(1000..2000);
    assert_eq!(p.place(&header(1000), 3000).0, 1000..2000);
    assert_eq!(p.stats().placed_bytes, 5000);
}

#[test]
fn refused_segments_place_nothing() {
    let mut p = Placement::default();
    p.observe_syn(999);
    p.post(10_000);
    let mut syn = header(999);
    syn.flags = Flags::SYN | Flags::ACK;
    assert_eq!(p.place(&syn, 100), (0..0, Some(0)));
    let mut rst = header(1000);
    rst.flags = Flags::RST | Flags::ACK;
    assert!(p.place(&rst, 100).0.is_empty());
    let mut no_ack = header(1000);
    no_ack.flags = Flags::PSH;
    assert!(p.place(&no_ack, 100).0.is_empty());
    assert_eq!(p.stats().refused_segments, 3);
    assert_eq!(p.stats().placed_bytes, 0);
}

#[test]
fn handles_sequence_wrap() {
    let mut p = Placement::default();
    p.observe_syn(u32::MAX - 10);
    p.post(1 << 40);
    // IRS + 1 = u32::MAX - 9 is offset 0; seq 5 is offset 15.
    assert_eq!(p.stream_offset(5), Some(15));
    // Deep into the stream, past several wraps.
    p.complete_to(5 << 32);
    let seq = (u32::MAX - 9).wrapping_add(100);
    assert_eq!(p.stream_offset(seq), Some((5 << 32) + 100));
}

#[test]
fn nothing_placed_before_syn() {
    let mut p = Placement::default();
    p.post(1000);
    assert!(p.place(&header(1), 10).0.is_empty());
    assert_eq!(p.stats().before_syn_segments, 1);
}
