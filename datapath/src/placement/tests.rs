//! Placement's rules, verdicts and counters on frames built by smoltcp.

use super::*;
use crate::flow_table::FlowParams;
use crate::mr::Access;
use crate::mr::MrTable;
use crate::ms::Completion;
use crate::wire::FlowKey;

fn flow(irs: u32) -> FlowState {
    FlowState::new(&FlowParams {
        key: FlowKey::default(),
        local_mac: [0; 6],
        remote_mac: [0; 6],
        irs,
        iss: 0,
        socket: 0,
        max_recv_segments: 8,
        max_send_segments: 8,
        max_placed_ranges: 4,
    })
}

#[test]
fn stream_offsets_wrap() {
    let mut mrs = MrTable::new(1 << 20, 2);
    let mr = mrs.register(0, 1 << 20, Access::RECV).expect("mr");
    let mut f = flow(u32::MAX - 10);
    assert_eq!(stream_offset(&f, u32::MAX - 9), 0);
    assert_eq!(stream_offset(&f, 5), 15);
    assert_eq!(stream_offset(&f, u32::MAX - 20), -11);
    f.recv.post(&mut mrs, mr, 0, 1 << 20, 1).expect("post");
    assert_eq!(
        advance_floor(&mut f, &mut mrs, 100_000),
        Err(FloorError::NotPlaced {
            floor: 0,
            offset: 100_000,
            first_gap: 0
        })
    );
    assert!(f.placed.insert(0..100_000, 0));
    advance_floor(&mut f, &mut mrs, 100_000).expect("floor");
    assert_eq!(
        stream_offset(&f, (u32::MAX - 9).wrapping_add(100_000)),
        100_000
    );
    assert_eq!(
        stream_offset(&f, (u32::MAX - 9).wrapping_add(99_000)),
        99_000
    );
}

/// A peer frame built with smoltcp's emitters (independent of our TX
/// builder): 198.18.0.1:1000 -> 198.18.0.2:2000.
pub(crate) fn frame(seq: u32, syn: bool, payload: &[u8]) -> Vec<u8> {
    let control = if syn {
        smoltcp::wire::TcpControl::Syn
    } else {
        smoltcp::wire::TcpControl::None
    };
    frame_with(seq, control, Some(1), payload)
}

pub(crate) fn frame_with(
    seq: u32,
    control: smoltcp::wire::TcpControl,
    ack: Option<u32>,
    payload: &[u8],
) -> Vec<u8> {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
        Ipv4Address, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr, TcpSeqNumber,
    };
    let src = Ipv4Address::new(198, 18, 0, 1);
    let dst = Ipv4Address::new(198, 18, 0, 2);
    let tcp = TcpRepr {
        src_port: 1000,
        dst_port: 2000,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 1000,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        ethertype: EthernetProtocol::Ipv4,
    };
    let caps = ChecksumCapabilities::default();
    let mut buf = vec![0u8; 14 + ip.buffer_len() + tcp.buffer_len()];
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..34]), &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut buf[34..]),
        &IpAddress::Ipv4(src),
        &IpAddress::Ipv4(dst),
        &caps,
    );
    buf
}

struct Rig {
    flow: FlowState,
    mrs: MrTable,
    area: Vec<u8>,
}

/// Area of 400 bytes filled with 0xee; receive stream 0..100 at area
/// 50..150 and 100..200 at area 250..350.
fn rig(irs: u32) -> Rig {
    let mut mrs = MrTable::new(400, 4);
    let a = mrs.register(50, 100, Access::RECV).expect("a");
    let b = mrs.register(250, 100, Access::RECV).expect("b");
    let mut f = flow(irs);
    f.recv.post(&mut mrs, a, 0, 100, 1).expect("post");
    f.recv.post(&mut mrs, b, 0, 100, 2).expect("post");
    Rig {
        flow: f,
        mrs,
        area: vec![0xee; 400],
    }
}

impl Rig {
    fn deliver(&mut self, offset: u64, payload: &[u8]) -> Placement {
        self.deliver_raw(
            self.flow.irs.wrapping_add(1).wrapping_add(offset as u32),
            false,
            payload,
            None,
        )
    }

    fn deliver_raw(
        &mut self,
        seq: u32,
        syn: bool,
        payload: &[u8],
        flip: Option<usize>,
    ) -> Placement {
        let mut f = frame(seq, syn, payload);
        if let Some(i) = flip {
            let at = f.len() - payload.len() + i;
            f[at] ^= 0x40;
        }
        let crate::wire::Parsed::Tcp(seg) = crate::wire::parse(&f).expect("parses") else {
            panic!("tcp");
        };
        place(&mut self.flow, &seg, &f, &mut self.area)
    }

    /// Delivers `payload` at stream `offset` with `control` and `ack`.
    fn deliver_with(
        &mut self,
        offset: u64,
        control: smoltcp::wire::TcpControl,
        ack: Option<u32>,
        payload: &[u8],
    ) -> Placement {
        let seq = self.flow.irs.wrapping_add(1).wrapping_add(offset as u32);
        let f = frame_with(seq, control, ack, payload);
        let crate::wire::Parsed::Tcp(seg) = crate::wire::parse(&f).expect("parses") else {
            panic!("tcp");
        };
        place(&mut self.flow, &seg, &f, &mut self.area)
    }

    /// The rig's area bytes of stream offsets `r` (both segments map
    /// stream `[0, 100)` to area `[50, 150)`, `[100, 200)` to `[250, 350)`).
    fn stream_bytes(&self, r: Range<u64>) -> Vec<u8> {
        r.map(|o| {
            let at = if o < 100 { 50 + o } else { 150 + o };
            self.area[at as usize]
        })
        .collect()
    }
}

fn pattern(range: Range<u64>, salt: u8) -> Vec<u8> {
    range
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(salt))
        .collect()
}

#[test]
fn in_order_across_segments_near_wrap() {
    let mut r = rig(u32::MAX - 50);
    let p = r.deliver(0, &pattern(0..150, 1));
    assert_eq!(p.verdict, Verdict::Placed);
    assert_eq!(p.placed, StreamRange::new(0, 150));
    assert_eq!(p.written, 150);
    assert_eq!(&r.area[50..150], &pattern(0..100, 1)[..]);
    assert_eq!(&r.area[250..300], &pattern(100..150, 1)[..]);
    assert!(r.area[..50]
        .iter()
        .chain(&r.area[150..250])
        .chain(&r.area[300..])
        .all(|&b| b == 0xee));
    let done = advance_floor(&mut r.flow, &mut r.mrs, 150).expect("floor");
    assert_eq!(done, vec![Completion { wr_id: 1, len: 100 }]);
    // Below the floor now: a duplicate, nothing written.
    let before = r.area.clone();
    let p = r.deliver(90, &pattern(90..150, 9));
    assert_eq!(p.verdict, Verdict::Duplicate);
    assert!(p.placed.is_empty());
    assert_eq!(r.area, before);
    assert_eq!(r.flow.counters.placed, 1);
    assert_eq!(r.flow.counters.duplicate, 1);
}

#[test]
fn trims_to_posted_end_and_refuses_beyond() {
    let mut r = rig(7);
    let p = r.deliver(180, &pattern(180..230, 3));
    assert_eq!(p.verdict, Verdict::Trimmed);
    assert_eq!(p.stream, StreamRange::new(180, 230));
    assert_eq!(p.placed, StreamRange::new(180, 200));
    assert_eq!(&r.area[330..350], &pattern(180..200, 3)[..]);
    assert!(r.area[350..].iter().all(|&b| b == 0xee));
    let p = r.deliver(200, &pattern(200..260, 3));
    assert_eq!(p.verdict, Verdict::BeyondPosted);
    // Far outside the window, both directions.
    let before = r.area.clone();
    let p = r.deliver_raw(7u32.wrapping_add(0x8000_0000), false, &[1; 40], None);
    assert!(matches!(
        p.verdict,
        Verdict::BeyondPosted | Verdict::Duplicate
    ));
    assert_eq!(r.area, before);
}

#[test]
fn corrupt_and_forged_duplicates_never_overwrite_verified_data() {
    let mut r = rig(1000);
    let good = pattern(10..60, 5);
    assert_eq!(r.deliver(10, &good).verdict, Verdict::Placed);
    let snapshot = r.area.clone();
    // Forged: valid checksum, different content, same range.
    let p = r.deliver(10, &pattern(10..60, 99));
    assert_eq!(p.verdict, Verdict::Duplicate);
    assert_eq!(r.area, snapshot);
    // Corrupt, overlapping the placed range and a gap: the gap may be
    // dirtied, the placed bytes not; the verdict is a drop.
    let p = r.deliver_raw(1001 + 40, false, &pattern(40..80, 5), Some(3));
    assert_eq!(p.verdict, Verdict::BadChecksum);
    assert!(p.placed.is_empty());
    assert_eq!(&r.area[60..110], &good[..]);
    assert_eq!(r.flow.counters.bad_checksum, 1);
    assert_eq!(r.flow.placed.ranges().collect::<Vec<_>>(), vec![10..60]);
    assert_eq!(
        advance_floor(&mut r.flow, &mut r.mrs, 20),
        Err(FloorError::NotPlaced {
            floor: 0,
            offset: 20,
            first_gap: 0
        })
    );
    assert_eq!(r.deliver(0, &pattern(0..10, 5)).verdict, Verdict::Placed);
    assert_eq!(
        advance_floor(&mut r.flow, &mut r.mrs, 61),
        Err(FloorError::NotPlaced {
            floor: 0,
            offset: 61,
            first_gap: 60
        })
    );
    // The retransmission repairs the gap.
    assert_eq!(r.deliver(40, &pattern(40..80, 5)).verdict, Verdict::Placed);
    assert_eq!(&r.area[110..130], &pattern(60..80, 5)[..]);
}

/// `frame` with its TCP checksum field set to `field(frame)`.
fn with_checksum_field(mut f: Vec<u8>, field: impl Fn(&[u8]) -> u16) -> Vec<u8> {
    let v = field(&f);
    f[34 + 16..34 + 18].copy_from_slice(&v.to_be_bytes());
    f
}

/// What a Linux sender with TX checksum offload leaves in the field
/// (`~tcp_v4_check(len, saddr, daddr, 0)`, the complement of a
/// complemented fold): the folded pseudo-header sum, uncomplemented,
/// here computed by smoltcp, not by us.
fn linux_partial(f: &[u8]) -> u16 {
    use smoltcp::wire::{checksum, IpProtocol, Ipv4Address};
    let tcp_len = (f.len() - 34) as u32;
    checksum::pseudo_header_v4(
        &Ipv4Address::new(198, 18, 0, 1),
        &Ipv4Address::new(198, 18, 0, 2),
        IpProtocol::Tcp,
        tcp_len,
    )
}

fn place_under(r: &mut Rig, f: &[u8], policy: ChecksumPolicy) -> Placement {
    let crate::wire::Parsed::Tcp(seg) = crate::wire::parse(f).expect("parses") else {
        panic!("tcp");
    };
    place_parts(&mut r.flow, &seg, &[f], &mut r.area, policy)
}

#[test]
fn a_partial_checksum_is_taken_on_a_veth_only_and_counted() {
    let seq = 1001 + 10;
    let data = pattern(10..60, 5);
    let partial = with_checksum_field(frame(seq, false, &data), linux_partial);
    // Where frames cross a wire, the unfinished checksum is a bad one:
    // nothing is placed.
    let mut r = rig(1000);
    let p = place_under(&mut r, &partial, ChecksumPolicy::Verify);
    assert_eq!(p.verdict, Verdict::BadChecksum);
    assert!(p.placed.is_empty());
    assert_eq!(
        (r.flow.counters.bad_checksum, r.flow.counters.csum_partial),
        (1, 0)
    );
    assert!(r.flow.placed.ranges().next().is_none());
    // On a veth it is placed like a verified segment, and counted.
    let p = place_under(&mut r, &partial, ChecksumPolicy::AcceptPartial);
    assert_eq!(p.verdict, Verdict::Placed);
    assert_eq!(p.placed, StreamRange::new(10, 60));
    assert_eq!(r.stream_bytes(10..60), data);
    assert_eq!(
        (r.flow.counters.placed, r.flow.counters.csum_partial),
        (1, 1)
    );
    // A finished checksum still verifies under the veth policy and is
    // not counted as partial.
    let full = frame(1001 + 60, false, &pattern(60..80, 5));
    let p = place_under(&mut r, &full, ChecksumPolicy::AcceptPartial);
    assert_eq!(p.verdict, Verdict::Placed);
    assert_eq!(r.flow.counters.csum_partial, 1);
}

#[test]
fn on_a_veth_every_other_bad_checksum_is_still_refused() {
    let data = pattern(10..60, 5);
    let mut r = rig(1000);
    let before = r.area.clone();
    // One off the partial sum, a zero field, and the finished checksum
    // of other bytes: all refused, nothing placed.
    let near = with_checksum_field(frame(1011, false, &data), |f| {
        linux_partial(f).wrapping_add(1)
    });
    let zero = with_checksum_field(frame(1011, false, &data), |_| 0);
    let mut corrupt = frame(1011, false, &data);
    let at = corrupt.len() - 3;
    corrupt[at] ^= 0x40;
    for f in [&near, &zero, &corrupt] {
        let p = place_under(&mut r, f, ChecksumPolicy::AcceptPartial);
        assert_eq!(p.verdict, Verdict::BadChecksum);
        assert!(p.placed.is_empty());
    }
    assert_eq!(
        (r.flow.counters.bad_checksum, r.flow.counters.csum_partial),
        (3, 0)
    );
    assert!(r.flow.placed.ranges().next().is_none());
    // The corrupt copy may dirty the gap it was copied into (the
    // checksum is learnt after the copy), never anything outside it.
    assert_eq!(&r.area[..60], &before[..60]);
    assert_eq!(&r.area[110..], &before[110..]);
}

#[test]
fn a_segment_writes_only_its_first_gap_and_reports_what_it_wrote() {
    let mut r = rig(7);
    assert_eq!(r.deliver(20, &pattern(20..30, 1)).placed.range(), 20..30);
    assert_eq!(r.deliver(40, &pattern(40..50, 1)).placed.range(), 40..50);
    let p = r.deliver(10, &pattern(10..60, 1));
    assert_eq!(p.placed.range(), 10..20, "only the first gap");
    assert_eq!(p.written, 10);
    assert_eq!(
        r.stream_bytes(30..40),
        vec![0xee; 10],
        "later gaps untouched"
    );
    assert_eq!(
        r.flow.placed.ranges().collect::<Vec<_>>(),
        vec![10..30, 40..50]
    );
    let p = r.deliver(10, &pattern(10..60, 1));
    assert_eq!(p.placed.range(), 30..40, "the next copy fills the next gap");
    assert_eq!(r.stream_bytes(10..50), pattern(10..50, 1));
    let p = r.deliver(25, &pattern(25..45, 1));
    assert_eq!((p.verdict, p.placed.is_empty()), (Verdict::Duplicate, true));
}

/// Issue 12, item 1: a forged segment placed first must not make the
/// genuine one a duplicate for good. The genuine record reports nothing
/// placed (the bytes are not its own), and once the transport refuses
/// the forged segment and its range is forgotten, the genuine
/// retransmission lands.
#[test]
fn a_refused_segments_bytes_are_forgotten_and_the_genuine_ones_land() {
    let mut r = rig(1000);
    let forged = r.deliver(10, &pattern(10..60, 99));
    assert_eq!(forged.placed.range(), 10..60);
    let genuine = r.deliver(10, &pattern(10..60, 5));
    assert_eq!(genuine.verdict, Verdict::Duplicate);
    assert!(genuine.placed.is_empty(), "not the genuine segment's bytes");
    // The transport refused the forged segment.
    assert_eq!(r.flow.placed.remove(forged.placed.range(), 0), 50);
    assert_eq!(r.deliver(0, &pattern(0..10, 5)).placed.range(), 0..10);
    let again = r.deliver(10, &pattern(10..60, 5));
    assert_eq!(again.placed.range(), 10..60);
    assert_eq!(r.stream_bytes(0..60), pattern(0..60, 5));
    advance_floor(&mut r.flow, &mut r.mrs, 60).expect("all placed");
}

#[test]
fn payload_is_not_placed_without_ack_with_rst_or_before_the_isn() {
    use smoltcp::wire::TcpControl;
    let mut r = rig(3000);
    let before = r.area.clone();
    let data = pattern(0..20, 9);
    let p = r.deliver_with(0, TcpControl::None, None, &data);
    assert_eq!((p.verdict, p.written), (Verdict::Unacceptable, 0));
    let p = r.deliver_with(0, TcpControl::Rst, Some(1), &data);
    assert_eq!((p.verdict, p.written), (Verdict::Unacceptable, 0));
    r.flow.synchronized = false;
    let p = r.deliver(0, &data);
    assert_eq!((p.verdict, p.written), (Verdict::Unsynchronized, 0));
    assert_eq!(r.area, before);
    assert!(r.flow.placed.is_empty());
    let c = r.flow.counters;
    assert_eq!((c.unacceptable_flags, c.unsynchronized), (2, 1));
    r.flow.synchronized = true;
    assert_eq!(r.deliver(0, &data).verdict, Verdict::Placed);
}

#[test]
fn syn_payload_is_not_placed_and_pure_acks_are_reported() {
    let mut r = rig(500);
    let before = r.area.clone();
    let p = r.deliver_raw(500, true, b"early data", None);
    assert_eq!(p.verdict, Verdict::SynPayloadIgnored);
    assert_eq!(p.stream, StreamRange::new(0, 10));
    assert_eq!(r.area, before);
    assert_eq!(r.deliver(0, &[]).verdict, Verdict::NoPayload);
    assert_eq!(
        r.deliver_raw(501, false, &[], None).verdict,
        Verdict::NoPayload
    );
    assert_eq!(r.flow.counters.syn_payload_ignored, 1);
    assert_eq!(r.flow.counters.no_payload, 2);
}

#[test]
fn fragments_place_like_the_frame_and_short_chains_are_refused() {
    let mut r = rig(77);
    let f = frame(78 + 10, false, &pattern(10..130, 4));
    let crate::wire::Parsed::Tcp(seg) =
        crate::wire::parse_head(&f[..61], f.len()).expect("headers in the first fragment")
    else {
        panic!("tcp");
    };
    // The fragments lack the last byte: nothing written, a drop.
    let before = r.area.clone();
    let short = [&f[..61], &f[61..99], &f[99..f.len() - 1]];
    let p = place_parts(
        &mut r.flow,
        &seg,
        &short,
        &mut r.area,
        ChecksumPolicy::Verify,
    );
    assert_eq!(p.verdict, Verdict::BadChecksum);
    assert_eq!(p.written, 0);
    assert_eq!(r.area, before);
    // The whole chain, cut at odd offsets across a posted-segment edge.
    let parts = [&f[..61], &f[61..99], &f[99..]];
    let p = place_parts(
        &mut r.flow,
        &seg,
        &parts,
        &mut r.area,
        ChecksumPolicy::Verify,
    );
    assert_eq!(p.verdict, Verdict::Placed);
    assert_eq!(p.placed, StreamRange::new(10, 130));
    assert_eq!(&r.area[60..150], &pattern(10..100, 4)[..]);
    assert_eq!(&r.area[250..280], &pattern(100..130, 4)[..]);
    assert_eq!(r.flow.counters.bad_checksum, 1);
    assert_eq!(r.flow.counters.placed, 1);
    assert_eq!(r.flow.counters.bytes_placed, 120);
}

#[test]
fn placed_set_full_refuses_out_of_order_but_not_in_order() {
    let mut r = rig(0);
    // max_placed_ranges is 4: three out-of-order holes fit.
    for off in [20, 40, 60] {
        assert_eq!(r.deliver(off, &[off as u8; 5]).verdict, Verdict::Placed);
    }
    let before = r.area.clone();
    assert_eq!(r.deliver(80, &[1; 5]).verdict, Verdict::PlacedSetFull);
    assert_eq!(r.area, before);
    assert_eq!(r.deliver(0, &[2; 5]).verdict, Verdict::Placed);
    assert_eq!(r.flow.counters.placed_set_full, 1);
}
