//! Software GRO: consecutive in-order records of one flow, taken in one
//! poll, become one record before a transport sees them, so the transport
//! judges, and decides whether to acknowledge, once per batch instead of
//! once per packet. Nothing is copied: the payloads were placed already;
//! only the headers' records merge.
//!
//! Two records merge only where one segment with the first's header could
//! have carried both, so every check the transport makes comes out as it
//! would have for the parts one by one:
//! - same flow (and 5-tuple and source MAC), both of a flow the datapath
//!   knows;
//! - control bits exactly ACK on every part but the last, ACK or ACK|PSH on
//!   the last: never SYN, FIN, RST, URG, ECE or CWR, and a PSH ends the run
//!   (as in Linux GRO);
//! - equal acknowledgment number and window field, so the ACK and window
//!   processing (RFC 9293 3.10.7.4, RFC 5961 5.2) of the parts is the
//!   first part's;
//! - equal ECN codepoint (RFC 3168 6.1.3, RFC 8257 3.2 see one codepoint);
//! - byte-identical options without SACK blocks: the same layout and the
//!   same TSval and TSecr, so PAWS and the TS.Recent update (RFC 7323 5.3,
//!   4.3) decide for the merged record as they would for its first part
//!   (the later parts only repeat the same timestamp at higher sequence
//!   numbers, which RFC 7323 4.3 lets change nothing);
//! - payload placed whole: each part's placed range is its whole payload
//!   range (every byte new, verified, written by that part), and the parts
//!   are contiguous in sequence and stream space. The merged record's
//!   `accepted` range is then exactly the union of the parts' own: a
//!   refused merged record discards exactly the bytes its parts placed,
//!   and the floor moves only over accepted ones;
//! - the run starts with a record in order at the placement point
//!   ([`RxRecord::in_order`]): out-of-order segments stay one record each,
//!   so each still gets its immediate duplicate ACK (RFC 5681 4.2);
//! - every part but the last carries the same payload length and the last
//!   at most that ([`RxSegment::segment_size`]), and the merged payload
//!   stays within the configured bound: the transport's segment-size
//!   estimate, and so its "ACK every second full-sized segment" rule,
//!   count wire segments.

use proto::{Flags, RxSegment, TcpOptions};

use crate::rx::RxRecord;

/// Default bound on the payload of one coalesced record: 64 KiB, what
/// Linux GRO builds.
pub const DEFAULT_COALESCE_BYTES: u32 = 65_536;

/// Largest bound accepted for one coalesced record's payload.
pub const MAX_COALESCE_BYTES: u32 = 1 << 20;

/// Option kind of SACK blocks (RFC 2018).
const SACK: u8 = 5;

/// Merges, in place, each run of consecutive mergeable records (see the
/// module doc) of `records[from..]` into its first record, keeping the
/// order of everything else. `max_bytes` bounds a merged record's payload;
/// 0 turns coalescing off. Returns the number of records merged away.
pub fn coalesce(records: &mut Vec<RxRecord>, from: usize, max_bytes: u32) -> u64 {
    if max_bytes == 0 || records.len() <= from.saturating_add(1) {
        return 0;
    }
    let mut head = from;
    let mut merged = 0;
    for next in from + 1..records.len() {
        let (done, rest) = records.split_at_mut(next);
        if mergeable(&done[head], &rest[0], max_bytes) {
            absorb(&mut done[head], &rest[0]);
            merged += 1;
        } else {
            head += 1;
            records.swap(head, next);
        }
    }
    records.truncate(head + 1);
    merged
}

/// Whether `b` may join the run that `a` heads.
fn mergeable(a: &RxRecord, b: &RxRecord, max_bytes: u32) -> bool {
    let (sa, sb) = (&a.segment, &b.segment);
    let (ha, hb) = (&sa.header, &sb.header);
    let size = sa.wire_segment_len();
    a.flow.is_some()
        && a.flow == b.flow
        && a.key == b.key
        && a.src_mac == b.src_mac
        && a.in_order
        && ha.flags == Flags::ACK
        && (hb.flags == Flags::ACK || hb.flags == Flags::ACK | Flags::PSH)
        && ha.ack == hb.ack
        && ha.window == hb.window
        && sa.ecn == sb.ecn
        && ha.options == hb.options
        && options_allow_merge(&ha.options)
        && placed_whole(a)
        && placed_whole(b)
        && sb.segment_size == 0
        && hb.seq == ha.seq.wrapping_add(sa.payload_len)
        && sb.accepted.start == sa.accepted.end
        && sa.payload_len % size == 0
        && sb.payload_len <= size
        && sa
            .payload_len
            .checked_add(sb.payload_len)
            .is_some_and(|n| n <= max_bytes)
}

/// Whether `r` carries payload placed whole by itself (checked against its
/// placement).
fn placed_whole(r: &RxRecord) -> bool {
    let s = &r.segment;
    let Some(p) = &r.placement else {
        return false;
    };
    s.payload_len > 0
        && p.placed == p.stream
        && p.placed.len() == u64::from(s.payload_len)
        && s.accepted == p.placed.range()
}

/// Whether the options are well formed and carry no SACK blocks (a SACK
/// block is news for the sender each time: never merged away).
fn options_allow_merge(options: &TcpOptions) -> bool {
    let b = options.as_slice();
    let mut i = 0;
    while let Some(&kind) = b.get(i) {
        match kind {
            0 => return true,
            1 => i += 1,
            SACK => return false,
            _ => match b.get(i + 1) {
                Some(&len) if len >= 2 => i += usize::from(len),
                _ => return false,
            },
        }
    }
    i == b.len()
}

/// Appends `b` (contiguous, mergeable) to the run `a` heads.
fn absorb(a: &mut RxRecord, b: &RxRecord) {
    let sa: &mut RxSegment = &mut a.segment;
    sa.segment_size = sa.wire_segment_len();
    sa.payload_len += b.segment.payload_len;
    sa.accepted.end = b.segment.accepted.end;
    sa.header.flags = b.segment.header.flags;
    if let (Some(pa), Some(pb)) = (&mut a.placement, &b.placement) {
        pa.stream.end = pb.stream.end;
        pa.placed.end = pb.placed.end;
        pa.written += pb.written;
    }
}

#[cfg(test)]
mod tests {
    use proto::{Ecn, FlowKey, TcpHeader};

    use super::*;
    use crate::flow_table::{FlowId, FlowParams, FlowTable};
    use crate::placement::{Placement, StreamRange, Verdict};

    const MSS: u32 = 1448;
    /// NOP, NOP, timestamps TSval 7, TSecr 9.
    const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9];

    fn key(remote_port: u16) -> FlowKey {
        FlowKey {
            remote_ip: [198, 18, 0, 1].into(),
            local_ip: [198, 18, 0, 2].into(),
            remote_port,
            local_port: 5201,
        }
    }

    /// Two flows, as the flow table hands them out.
    fn flows() -> (FlowId, FlowId) {
        let mut table = FlowTable::new(2);
        let mut id = |remote_port| {
            let params = FlowParams {
                key: key(remote_port),
                local_mac: [2, 0, 0, 0, 0, 2],
                remote_mac: [2, 0, 0, 0, 0, 1],
                irs: 0,
                iss: 0,
                socket: 0,
                max_recv_segments: 1,
                max_send_segments: 1,
                max_placed_ranges: 2,
            };
            table.insert(&params).expect("room for two flows")
        };
        (id(40000), id(40001))
    }

    /// A data segment of `flow` at stream offset `off` (sequence number
    /// `off + 1`: the peer's ISN is 0), placed whole and in order.
    fn rec(flow: FlowId, port: u16, off: u64, len: u32) -> RxRecord {
        let placed = StreamRange::new(off, off + u64::from(len));
        RxRecord {
            flow: Some(flow),
            key: key(port),
            src_mac: [2, 0, 0, 0, 0, 1],
            segment: RxSegment {
                header: TcpHeader {
                    urgent: 0,
                    src_port: port,
                    dst_port: 5201,
                    seq: off as u32 + 1,
                    ack: 1000,
                    flags: Flags::ACK,
                    window: 500,
                    options: TcpOptions::new(&TS).expect("12 bytes"),
                },
                payload_len: len,
                accepted: placed.range(),
                ecn: Ecn::Ect0,
                segment_size: 0,
            },
            placement: Some(Placement {
                stream: placed,
                placed,
                verdict: Verdict::Placed,
                written: len,
            }),
            in_order: true,
        }
    }

    /// A change to a record, given another flow's id.
    type Change = fn(&mut RxRecord, FlowId);

    /// `n` back-to-back full-sized segments of flow `a` from offset 0.
    fn run(a: FlowId, n: u64) -> Vec<RxRecord> {
        (0..n)
            .map(|i| rec(a, 40000, i * u64::from(MSS), MSS))
            .collect()
    }

    #[test]
    fn consecutive_in_order_segments_become_one_record_covering_them_all() {
        let (a, _) = flows();
        let mut records = run(a, 4);
        records.push(rec(a, 40000, 4 * u64::from(MSS), 100));
        records[4].segment.header.flags = Flags::ACK | Flags::PSH;
        assert_eq!(coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES), 4);
        assert_eq!(records.len(), 1);
        let s = &records[0].segment;
        let total = 4 * MSS + 100;
        assert_eq!(s.header.seq, 1);
        assert_eq!(s.payload_len, total);
        assert_eq!(s.accepted, 0..u64::from(total));
        assert_eq!(s.segment_size, MSS);
        assert_eq!((s.wire_segment_len(), s.wire_segments()), (MSS, 5));
        assert_eq!(
            s.header.flags,
            Flags::ACK | Flags::PSH,
            "the last part's PSH"
        );
        let p = records[0].placement.expect("placed");
        assert_eq!(p.placed, StreamRange::new(0, u64::from(total)));
        assert_eq!((p.stream, p.written), (p.placed, total));
    }

    #[test]
    fn only_records_appended_after_from_are_merged() {
        let (a, _) = flows();
        let mut records = run(a, 3);
        assert_eq!(coalesce(&mut records, 1, DEFAULT_COALESCE_BYTES), 1);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0], run(a, 1)[0], "before `from`: untouched");
        assert_eq!(records[1].segment.payload_len, 2 * MSS);
    }

    /// Every way the second record differs that must keep it a record of
    /// its own: the transport would judge or acknowledge it differently.
    #[test]
    fn records_the_transport_would_judge_differently_never_merge() {
        let (a, b) = flows();
        let cases: Vec<(&str, Change)> = vec![
            ("ACK number", |r, _| r.segment.header.ack += 1),
            ("window", |r, _| r.segment.header.window -= 1),
            ("ECN codepoint", |r, _| r.segment.ecn = Ecn::Ce),
            ("TSval", |r, _| {
                let mut ts = TS;
                ts[7] = 8;
                r.segment.header.options = TcpOptions::new(&ts).unwrap();
            }),
            ("option layout", |r, _| {
                r.segment.header.options = TcpOptions::new(&TS[2..]).unwrap();
            }),
            ("no ACK", |r, _| r.segment.header.flags = Flags::PSH),
            ("sequence gap", |r, _| {
                r.segment.header.seq += 1;
                r.segment.accepted = r.segment.accepted.start + 1..r.segment.accepted.end + 1;
                let p = r.placement.as_mut().unwrap();
                p.stream = StreamRange::new(p.stream.start + 1, p.stream.end + 1);
                p.placed = p.stream;
            }),
            ("partly placed (another segment's bytes)", |r, _| {
                let p = r.placement.as_mut().unwrap();
                p.placed = StreamRange::new(p.stream.start, p.stream.end - 1);
                r.segment.accepted = p.placed.range();
            }),
            ("nothing placed", |r, _| {
                let p = r.placement.as_mut().unwrap();
                p.placed = StreamRange::new(p.stream.start, p.stream.start);
                p.verdict = Verdict::Duplicate;
                r.segment.accepted = p.placed.range();
            }),
            ("pure ACK", |r, _| {
                r.segment.payload_len = 0;
                r.placement = None;
                r.segment.accepted = 0..0;
            }),
            ("larger than the segments before", |r, _| {
                r.segment.payload_len += 1;
                let p = r.placement.as_mut().unwrap();
                p.stream.end += 1;
                p.placed = p.stream;
                r.segment.accepted = p.placed.range();
            }),
            ("another flow", |r, other| r.flow = Some(other)),
            ("unknown flow", |r, _| r.flow = None),
            ("source MAC", |r, _| r.src_mac[5] ^= 1),
        ];
        for (what, change) in cases {
            let mut records = run(a, 2);
            change(&mut records[1], b);
            let expected = records.clone();
            assert_eq!(
                coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES),
                0,
                "{what}"
            );
            assert_eq!(records, expected, "{what}");
        }
        // Any control bit but ACK and a final PSH.
        for flag in [
            Flags::SYN,
            Flags::FIN,
            Flags::RST,
            Flags::URG,
            Flags::ECE,
            Flags::CWR,
        ] {
            let mut records = run(a, 2);
            records[1].segment.header.flags = Flags::ACK | flag;
            assert_eq!(
                coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES),
                0,
                "{flag:?}"
            );
        }
        // A SACK block in otherwise identical options.
        let mut records = run(a, 2);
        let sack = TcpOptions::new(&[1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2]).unwrap();
        for r in &mut records {
            r.segment.header.options = sack;
        }
        assert_eq!(coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES), 0, "SACK");
        // Malformed options (a length running past the area).
        for r in &mut records {
            r.segment.header.options = TcpOptions::new(&[8, 10, 0, 0]).unwrap();
        }
        assert_eq!(
            coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES),
            0,
            "bad opts"
        );
        // A run never starts out of order; nothing follows a PSH or a
        // short segment.
        let mut records = run(a, 2);
        records[0].in_order = false;
        assert_eq!(
            coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES),
            0,
            "out of order"
        );
        let mut records = run(a, 2);
        records[0].segment.header.flags = Flags::ACK | Flags::PSH;
        assert_eq!(coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES), 0, "PSH");
        let m = u64::from(MSS);
        let mut records = vec![
            rec(a, 40000, 0, MSS),
            rec(a, 40000, m, 100),
            rec(a, 40000, m + 100, MSS),
        ];
        assert_eq!(
            coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES),
            1,
            "short"
        );
        assert_eq!(records[1].segment.accepted, m + 100..2 * m + 100);
    }

    #[test]
    fn a_forged_segment_in_the_middle_splits_the_run_and_stays_itself() {
        let (a, _) = flows();
        let mut records = run(a, 5);
        // An attacker's in-window segment with a wrong ACK, in the middle.
        records[2].segment.header.ack = 0xdead_beef;
        let forged = records[2].clone();
        assert_eq!(coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES), 2);
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].segment.accepted, 0..2 * u64::from(MSS));
        assert_eq!(records[1], forged, "the forged record, alone and unchanged");
        assert_eq!(
            records[2].segment.accepted,
            3 * u64::from(MSS)..5 * u64::from(MSS)
        );
    }

    #[test]
    fn interleaved_flows_keep_their_order_and_the_bound_holds() {
        let (a, b) = flows();
        let m = u64::from(MSS);
        let mut records = vec![
            rec(a, 40000, 0, MSS),
            rec(a, 40000, m, MSS),
            rec(b, 40001, 0, MSS),
            rec(b, 40001, m, MSS),
            rec(a, 40000, 2 * m, MSS),
        ];
        assert_eq!(coalesce(&mut records, 0, DEFAULT_COALESCE_BYTES), 2);
        let got: Vec<_> = records
            .iter()
            .map(|r| (r.flow, r.segment.accepted.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(a), 0..2 * m),
                (Some(b), 0..2 * m),
                (Some(a), 2 * m..3 * m)
            ]
        );
        // At most `max_bytes` per record; 0 turns coalescing off.
        let mut records = run(a, 5);
        assert_eq!(coalesce(&mut records, 0, 2 * MSS), 2);
        let lens: Vec<_> = records.iter().map(|r| r.segment.payload_len).collect();
        assert_eq!(lens, vec![2 * MSS, 2 * MSS, MSS]);
        let mut records = run(a, 5);
        assert_eq!(coalesce(&mut records, 0, 0), 0);
        assert_eq!(records, run(a, 5));
    }

    /// What a test stream's record may get wrong, one per kind of rule.
    const MUTATIONS: usize = 9;

    /// Applies mutation `m` (`m >= MUTATIONS`: none) to `r`.
    fn mutate(r: &mut RxRecord, m: usize, other: FlowId) {
        let s = &mut r.segment;
        match m {
            0 => s.header.ack ^= 0x4000_0000,
            1 => s.header.window ^= 1,
            2 => s.ecn = Ecn::Ce,
            3 => s.header.flags = Flags::ACK | Flags::PSH,
            4 => s.header.flags = Flags::ACK | Flags::FIN,
            5 => r.in_order = false,
            6 => {
                let mut ts = TS;
                ts[7] ^= 1;
                s.header.options = TcpOptions::new(&ts).expect("12 bytes");
            }
            7 => r.flow = Some(other),
            8 => {
                let p = r.placement.as_mut().expect("placed");
                p.placed = StreamRange::new(p.stream.start, p.stream.end - 1);
                s.accepted = p.placed.range();
            }
            _ => {}
        }
    }

    proptest::proptest! {
        /// Whatever mix of honest and odd records a poll takes, coalescing
        /// keeps every record's bytes exactly once and in order, and a
        /// merged record stands for consecutive records that agree on
        /// everything the transport judges.
        #[test]
        fn coalescing_keeps_every_byte_once_in_order_and_merges_only_alike_records(
            lens in proptest::collection::vec(1u32..=3 * MSS, 1..40),
            muts in proptest::collection::vec(0usize..3 * MUTATIONS, 40),
            max in 0u32..20_000,
        ) {
            let (a, b) = flows();
            let mut off = 0;
            let mut input = Vec::new();
            for (i, &len) in lens.iter().enumerate() {
                // Two in three full-sized, as a bulk transfer's.
                let len = if len > MSS { MSS } else { len };
                let mut r = rec(a, 40000, off, len);
                mutate(&mut r, muts[i], b);
                off += u64::from(len);
                input.push(r);
            }
            let mut out = input.clone();
            let merged = coalesce(&mut out, 0, max);
            proptest::prop_assert_eq!(out.len() as u64 + merged, input.len() as u64);
            let mut parts = input.iter();
            for r in &out {
                let first = parts.next().expect("a part for every record");
                let mut end = first.segment.accepted.end;
                let mut len = first.segment.payload_len;
                let mut last = first;
                while len < r.segment.payload_len {
                    let p = parts.next().expect("parts cover the merged record");
                    for q in [last, p] {
                        proptest::prop_assert_eq!(q.flow, first.flow);
                        proptest::prop_assert_eq!(q.segment.header.ack, first.segment.header.ack);
                        proptest::prop_assert_eq!(q.segment.header.window, first.segment.header.window);
                        proptest::prop_assert_eq!(q.segment.ecn, first.segment.ecn);
                        proptest::prop_assert_eq!(q.segment.header.options, first.segment.header.options);
                        proptest::prop_assert_eq!(q.segment.accepted.end - q.segment.accepted.start, u64::from(q.segment.payload_len));
                    }
                    proptest::prop_assert_eq!(last.segment.header.flags, Flags::ACK);
                    proptest::prop_assert!(first.in_order);
                    proptest::prop_assert_eq!(p.segment.accepted.start, end);
                    proptest::prop_assert!(p.segment.payload_len <= first.segment.payload_len);
                    end = p.segment.accepted.end;
                    len += p.segment.payload_len;
                    last = p;
                }
                proptest::prop_assert_eq!(len, r.segment.payload_len);
                proptest::prop_assert_eq!(r.segment.accepted.clone(), first.segment.accepted.start..end);
                proptest::prop_assert!(max == 0 && r == first || r.segment.payload_len <= max.max(first.segment.payload_len));
                if len == first.segment.payload_len {
                    proptest::prop_assert_eq!(r, first, "a record merged with nothing is unchanged");
                } else {
                    proptest::prop_assert_eq!(r.segment.header.flags, last.segment.header.flags);
                    proptest::prop_assert_eq!(r.segment.segment_size, first.segment.payload_len);
                    proptest::prop_assert_eq!(r.segment.header.seq, first.segment.header.seq);
                }
            }
            proptest::prop_assert!(parts.next().is_none(), "every part is in a record");
        }
    }
}
