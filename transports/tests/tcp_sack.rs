//! SACK (RFC 2018) generation on the receive side and SACK-based loss
//! recovery (RFC 6675) on the send side.

mod tcp_util;

use tcp_util::*;
use transports::segment::Flags;
use transports::tcp::TcpConfig;
use transports::{Event, RxSegment, Transport};

const MSS: u64 = 1448;

fn rx_data(c: &mut transports::tcp::TcpConnection, at: u64, off: u64, len: u32) -> Vec<(u32, u32)> {
    c.handle_segment(ms(at), &data(5001 + off as u32, 1001, 1000, off, len));
    let out = drain(c, ms(at));
    assert_eq!(out.len(), 1, "one immediate ACK for data at {off}");
    sack_blocks(&out[0])
}

#[test]
fn blocks_report_out_of_order_ranges_newest_first() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    assert!(c.negotiated().sack && c.negotiated().timestamps);
    assert_eq!(rx_data(&mut c, 2, 1000, 1000), vec![(6001, 7001)]);
    assert_eq!(
        rx_data(&mut c, 3, 3000, 1000),
        vec![(8001, 9001), (6001, 7001)]
    );
    assert_eq!(
        rx_data(&mut c, 4, 5000, 1000),
        vec![(10001, 11001), (8001, 9001), (6001, 7001)]
    );
    // With timestamps only three blocks fit (RFC 2018 3).
    assert_eq!(
        rx_data(&mut c, 5, 7000, 1000),
        vec![(12001, 13001), (10001, 11001), (8001, 9001)]
    );
    // Filling 4000..5000 merges two blocks; the merged one comes first.
    assert_eq!(
        rx_data(&mut c, 6, 4000, 1000),
        vec![(8001, 11001), (12001, 13001), (6001, 7001)]
    );
    // Filling the first hole moves RCV.NXT to 2000.
    c.handle_segment(ms(7), &data(5001, 1001, 1000, 0, 1000));
    let out = drain(&mut c, ms(7));
    assert_eq!(out.len(), 1, "a hole fill is acknowledged at once");
    assert_eq!(out[0].header.ack, 7001);
    assert_eq!(sack_blocks(&out[0]), vec![(8001, 11001), (12001, 13001)]);
    assert_eq!(c.received(), 2000);
    assert!(c.stats().sack_blocks_sent >= 10);
}

#[test]
fn without_timestamps_four_blocks_fit() {
    let cfg = TcpConfig {
        timestamps: false,
        ..TcpConfig::default()
    };
    let mut c = established_full(cfg, 1000, 5000, 100_000);
    assert!(!c.negotiated().timestamps);
    for (i, off) in [1000u64, 3000, 5000, 7000, 9000].into_iter().enumerate() {
        rx_data(&mut c, 2 + i as u64, off, 500);
    }
    c.handle_segment(ms(9), &data(5001 + 11_000, 1001, 1000, 11_000, 500));
    let out = drain(&mut c, ms(9));
    assert_eq!(
        sack_blocks(&out[0]),
        vec![
            (16001, 16501),
            (14001, 14501),
            (12001, 12501),
            (10001, 10501)
        ]
    );
}

/// An ACK from the peer with a timestamp and SACK blocks (send offsets).
fn sack_ack(ack_off: u64, blocks: &[(u64, u64)]) -> RxSegment {
    let mut opts = ts_opt(2, 0);
    if !blocks.is_empty() {
        opts.extend_from_slice(&[1, 1, 5, (2 + 8 * blocks.len()) as u8]);
    }
    for (l, r) in blocks {
        opts.extend_from_slice(&(1001 + *l as u32).to_be_bytes());
        opts.extend_from_slice(&(1001 + *r as u32).to_be_bytes());
    }
    with_opts(seg(Flags::ACK, 5001, 1001 + ack_off as u32, 1000), &opts)
}

#[test]
fn three_sacked_segments_trigger_fast_retransmit_of_the_hole() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    c.send_posted(ms(2), 200_000);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 10, "initial window of 10 segments");
    assert!(out.iter().all(|s| s.payload_len() == MSS));
    let mut w0 = c.cc_metrics().window;
    // Segment 0 is lost; 1, 2 and 3 arrive and are SACKed one by one.
    for k in 1..=3u64 {
        if k == 3 {
            // SACKed bytes count as delivered and grew the window so far.
            w0 = c.cc_metrics().window;
            assert_eq!(w0, 10 * MSS + 2 * MSS);
        }
        c.handle_segment(ms(3), &sack_ack(0, &[(MSS, (k + 1) * MSS)]));
        let out = drain(&mut c, ms(3));
        let rtx: Vec<_> = out
            .iter()
            .filter(|s| s.payload.as_ref().is_some_and(|r| r.start == 0))
            .collect();
        if k < 3 {
            assert!(
                rtx.is_empty(),
                "no retransmission after {k} SACKed segments"
            );
        } else {
            assert_eq!(rtx.len(), 1, "hole retransmitted after three");
            assert_eq!(rtx[0].payload, Some(0..MSS));
            assert_eq!(rtx[0].header.seq, 1001);
        }
    }
    assert!(c.in_recovery());
    assert_eq!(c.stats().fast_recoveries, 1);
    assert_eq!(c.stats().retransmits, 1);
    assert_eq!(c.cc_metrics().window, w0 / 2);
    // More SACKs in the same episode do not start another.
    c.handle_segment(ms(4), &sack_ack(0, &[(MSS, 6 * MSS)]));
    drain(&mut c, ms(4));
    assert_eq!(c.stats().fast_recoveries, 1);
    assert_eq!(c.stats().retransmits, 1, "the hole is not sent twice");
    // The retransmission arrives: everything sent so far is acknowledged.
    let high = c.snd_nxt().wrapping_sub(1001) as u64;
    c.handle_segment(ms(5), &sack_ack(high, &[]));
    assert!(!c.in_recovery());
    assert!(events(&mut c).contains(&Event::Acked { upto: high }));
}

#[test]
fn two_holes_are_both_repaired() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    c.send_posted(ms(2), 10 * MSS);
    assert_eq!(drain(&mut c, ms(2)).len(), 10);
    // Segments 2 and 5 are lost.
    c.handle_segment(
        ms(3),
        &sack_ack(2 * MSS, &[(6 * MSS, 10 * MSS), (3 * MSS, 5 * MSS)]),
    );
    let out = drain(&mut c, ms(3));
    let rtx: Vec<_> = out.iter().filter_map(|s| s.payload.clone()).collect();
    assert!(rtx.contains(&(2 * MSS..3 * MSS)), "{rtx:?}");
    // Segment 5 has 4 SACKed segments above it too, so it is lost as well;
    // the window may hold it back until the first repair is acknowledged.
    c.handle_segment(ms(4), &sack_ack(5 * MSS, &[(6 * MSS, 10 * MSS)]));
    let out = drain(&mut c, ms(4));
    let mut all: Vec<_> = rtx;
    all.extend(out.iter().filter_map(|s| s.payload.clone()));
    assert!(all.contains(&(5 * MSS..6 * MSS)), "{all:?}");
    c.handle_segment(ms(5), &sack_ack(10 * MSS, &[]));
    assert_eq!(c.acked(), 10 * MSS);
    assert_eq!(c.stats().retransmits, 2);
    assert_eq!(c.stats().rtos, 0);
}

#[test]
fn bogus_sack_blocks_are_ignored() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    c.send_posted(ms(2), 4 * MSS);
    drain(&mut c, ms(2));
    // Beyond SND.NXT, below SND.UNA, inverted: none may mark anything.
    c.handle_segment(ms(3), &sack_ack(0, &[(MSS, 90 * MSS), (3 * MSS, MSS)]));
    let mut opts = ts_opt(2, 0);
    opts.extend_from_slice(&[1, 1, 5, 10]);
    opts.extend_from_slice(&900u32.to_be_bytes());
    opts.extend_from_slice(&1001u32.to_be_bytes());
    c.handle_segment(ms(3), &with_opts(seg(Flags::ACK, 5001, 1001, 1000), &opts));
    assert_eq!(c.bytes_in_flight(), 4 * MSS);
    assert!(!c.in_recovery());
}

#[test]
fn tail_loss_probe_repairs_a_lost_last_segment_before_the_rto() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    // SRTT is 1 ms from the handshake: PTO = 2 ms, well before the RTO.
    assert_eq!(
        c.rtt().smoothed(),
        Some(std::time::Duration::from_millis(1))
    );
    c.send_posted(ms(2), 4 * MSS);
    assert_eq!(drain(&mut c, ms(2)).len(), 4);
    // Segments 0..3 are acknowledged; the last one is lost.
    c.handle_segment(ms(3), &sack_ack(3 * MSS, &[]));
    let pto = c.poll_timeout().unwrap();
    // One segment out: PTO = 2 SRTT + the delayed-ACK allowance (1 ms).
    assert_eq!(pto, ms(3) + std::time::Duration::from_millis(3));
    c.handle_timeout(pto);
    let out = drain(&mut c, pto);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, Some(3 * MSS..4 * MSS), "the tail again");
    assert_eq!(c.stats().tail_loss_probes, 1);
    assert_eq!(c.stats().rtos, 0);
    // Only one probe per episode: the next timer is the RTO.
    let next = c.poll_timeout().unwrap();
    assert_eq!(next, pto + c.current_rto());
    let w = c.cc_metrics().window;
    c.handle_segment(
        pto + std::time::Duration::from_millis(1),
        &sack_ack(4 * MSS, &[]),
    );
    assert_eq!(c.acked(), 4 * MSS);
    assert_eq!(c.poll_timeout(), None);
    // No D-SACK came: the probe repaired a real loss, and the controller
    // heard about it (RFC 8985 7.4).
    assert_eq!(c.stats().tlp_repairs, 1);
    assert_eq!(c.cc_metrics().window, w / 2);
}

#[test]
fn a_spurious_probe_reported_by_dsack_is_not_a_loss() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    c.send_posted(ms(2), 4 * MSS);
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &sack_ack(3 * MSS, &[]));
    let pto = c.poll_timeout().unwrap();
    c.handle_timeout(pto);
    assert_eq!(drain(&mut c, pto).len(), 1);
    let w = c.cc_metrics().window;
    // The original was only slow to be acknowledged: the ACK carries a
    // D-SACK for the probe's range, below the cumulative ACK.
    c.handle_segment(
        pto + std::time::Duration::from_millis(1),
        &sack_ack(4 * MSS, &[(3 * MSS, 4 * MSS)]),
    );
    assert_eq!(c.acked(), 4 * MSS);
    assert_eq!(c.stats().dsacks_received, 1);
    assert_eq!(c.stats().tlp_repairs, 0);
    assert!(c.cc_metrics().window >= w);
}

#[test]
fn duplicates_are_reported_with_dsack_first() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 1000));
    drain(&mut c, ms(2));
    // A duplicate below RCV.NXT.
    c.handle_segment(ms(3), &data(5001, 1001, 1000, 0, 1000));
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.ack, 6001);
    assert_eq!(sack_blocks(&out[0]), vec![(5001, 6001)]);
    // Only once.
    c.handle_segment(ms(4), &data(6001, 1001, 1000, 1000, 10));
    c.handle_timeout(ms(6));
    let out = drain(&mut c, ms(6));
    assert!(sack_blocks(&out[0]).is_empty());
    // A duplicate of out-of-order data: D-SACK, then the block holding it.
    c.handle_segment(ms(7), &data(8001, 1001, 1000, 3000, 500));
    drain(&mut c, ms(7));
    c.handle_segment(ms(8), &data(8001, 1001, 1000, 3000, 500));
    let out = drain(&mut c, ms(8));
    assert_eq!(sack_blocks(&out[0]), vec![(8001, 8501), (8001, 8501)]);
}

#[test]
fn tail_loss_probe_sends_new_data_when_it_can() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    c.send_posted(ms(2), 20 * MSS);
    assert_eq!(drain(&mut c, ms(2)).len(), 10, "window-limited");
    let pto = c.poll_timeout().unwrap();
    assert_eq!(pto, ms(4));
    c.handle_timeout(pto);
    let out = drain(&mut c, pto);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].payload,
        Some(10 * MSS..11 * MSS),
        "new data as the probe"
    );
}

#[test]
fn a_lost_retransmission_is_found_before_the_rto() {
    let cfg = TcpConfig {
        tail_loss_probe: false,
        ..TcpConfig::default()
    };
    let mut c = established_full(cfg, 1000, 5000, 1 << 20);
    c.send_posted(ms(2), 100 * MSS);
    assert_eq!(drain(&mut c, ms(2)).len(), 10);
    // Segment 0 is lost; 1..4 SACKed: fast retransmit of 0 at 3 ms.
    c.handle_segment(ms(3), &sack_ack(0, &[(MSS, 4 * MSS)]));
    let out = drain(&mut c, ms(3));
    assert!(out.iter().any(|s| s.payload == Some(0..MSS)));
    // More SACKs free the window: new data leaves at 4 ms, after the
    // retransmission.
    c.handle_segment(ms(4), &sack_ack(0, &[(MSS, 10 * MSS)]));
    let new: Vec<_> = drain(&mut c, ms(4))
        .into_iter()
        .filter_map(|s| s.segment.payload)
        .collect();
    assert!(
        !new.is_empty() && new.iter().all(|r| r.start >= 10 * MSS),
        "{new:?}"
    );
    let first_new = new[0].clone();
    // That new data is SACKed at 6 ms while segment 0 still is not: its
    // retransmission was lost too, and it goes again now, not at the RTO.
    c.handle_segment(
        ms(6),
        &sack_ack(0, &[(first_new.start, first_new.end), (MSS, 10 * MSS)]),
    );
    let out = drain(&mut c, ms(6));
    assert!(out.iter().any(|s| s.payload == Some(0..MSS)), "{out:?}");
    assert_eq!(c.stats().lost_retransmits, 1);
    assert_eq!(c.stats().rtos, 0);
    assert_eq!(c.stats().fast_recoveries, 1);
}

/// Software TSO: the initial window leaves as one super-segment of ten
/// wire segments; the peer lost the second of them and SACKs the rest.
/// Only that slice is sent again, one MSS long, and the SACKed slices are
/// out of the flight.
#[test]
fn a_super_segment_partly_sacked_retransmits_only_the_hole() {
    let cfg = TcpConfig {
        tso_segments: 16,
        ..TcpConfig::default()
    };
    let mut c = established_full(cfg, 1000, 5000, 100_000);
    let before = c.stats().segments_sent;
    c.send_posted(ms(2), 200_000);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1, "the initial window as one send segment");
    assert_eq!(out[0].payload, Some(0..10 * MSS));
    assert_eq!(out[0].segment_size as u64, MSS);
    assert_eq!(out[0].wire_segments(), 10);
    assert_eq!(
        c.stats().segments_sent - before,
        10,
        "counted as wire segments"
    );
    let mut retransmitted = Vec::new();
    for k in 3..=4u64 {
        // Slice 0 is acknowledged, slice 1 lost, slices 2..k SACKed.
        c.handle_segment(ms(3), &sack_ack(MSS, &[(2 * MSS, (k + 1) * MSS)]));
        let out = drain(&mut c, ms(3));
        retransmitted.extend(
            out.iter()
                .filter(|s| s.payload.as_ref().is_some_and(|r| r.start < 10 * MSS))
                .map(|s| (s.payload.clone(), s.wire_segments())),
        );
    }
    assert_eq!(retransmitted, vec![(Some(MSS..2 * MSS), 1)]);
    assert_eq!(c.stats().retransmitted_bytes, MSS);
}

/// RFC 6937 PRR: after a loss that leaves the pipe far below the reduced
/// window, one ACK releases what it delivered plus a segment (PRR-SSRB),
/// not a burst up to the window (RFC 6675 alone would send the whole
/// reduced window at once into the queue that just overflowed).
#[test]
fn a_heavy_loss_is_repaired_in_proportion_to_delivery_not_in_a_burst() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 100_000);
    c.send_posted(ms(2), 400_000);
    assert_eq!(drain(&mut c, ms(2)).len(), 10);
    // Each of the 10 acknowledged one by one: slow start to 20 segments.
    for k in 1..=10u64 {
        c.handle_segment(ms(3), &sack_ack(k * MSS, &[]));
    }
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 20, "slow start doubled the window");
    // Of segments 10..30, 10..26 are lost and 26..30 arrive (SACKed).
    c.handle_segment(ms(4), &sack_ack(10 * MSS, &[(26 * MSS, 30 * MSS)]));
    let out = drain(&mut c, ms(4));
    assert!(c.in_recovery());
    let window = c.cc_metrics().window / MSS;
    assert!(window >= 10, "reduced to {window} segments");
    // Delivered 4: 4 + 1 by PRR-SSRB, the fast retransmit among them.
    assert_eq!(out.len(), 5, "{} segments after the loss", out.len());
    // The first retransmission arrives: one segment delivered releases
    // two more.
    c.handle_segment(ms(5), &sack_ack(11 * MSS, &[(26 * MSS, 30 * MSS)]));
    let out = drain(&mut c, ms(5));
    assert_eq!(
        out.len(),
        2,
        "{} segments after one more delivered",
        out.len()
    );
}
