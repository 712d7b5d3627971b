//! Model-based property test of the RX placement engine.
//!
//! A random byte stream is cut into segments and delivered, in random order,
//! to a flow with random posted receive segments (random sizes, gaps between
//! regions, ISN near the 2^32 wrap included), mixed with duplicates,
//! overlapping retransmissions, segments far outside the window, segments
//! straddling the posted end, corrupted checksums and forged duplicates
//! (valid checksum, other content). The area starts filled with a sentinel.
//!
//! Checked after every delivery: every byte that changed lies in posted
//! segment memory, at a stream offset in `[floor, posted_end)` that was not
//! yet placed by a verified segment; reported placed ranges lie in
//! `[floor, posted_end)` and hold the stream's bytes. At the end (after
//! retransmission rounds, as a sender would do): posted memory equals the
//! stream and no byte outside it changed.
//!
//! Every frame is also delivered to a twin flow as a multi-buffer chain:
//! cut into 1–4 fragments at random (mostly odd) offsets after the headers,
//! parsed from the first fragment ([`wire::parse_head`]) and placed from the
//! fragments ([`place_parts`]). The twin must give the same `Placement`,
//! area bytes, counters and placed set as the contiguous flow, every time.

use datapath::flow_table::{FlowParams, FlowState};
use datapath::mr::{Access, MrTable};
use datapath::placement::{advance_floor, place, place_parts, ChecksumPolicy, Placement, Verdict};
use datapath::wire::{self, FlowKey, Parsed};
use proptest::prelude::*;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

const SENTINEL: u8 = 0xa5;

/// A peer frame built with smoltcp's emitters (independent of our TX code).
fn frame(seq: u32, payload: &[u8]) -> Vec<u8> {
    let src = Ipv4Address::new(198, 18, 0, 1);
    let dst = Ipv4Address::new(198, 18, 0, 2);
    let tcp = TcpRepr {
        src_port: 1000,
        dst_port: 2000,
        control: TcpControl::None,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: Some(TcpSeqNumber(1)),
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

/// xorshift64*: the event schedule comes from one proptest-chosen seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Genuine,
    Corrupt,
    Forged,
    Outside,
}

/// The same flow, fed the same frames as fragment chains.
struct Twin {
    flow: FlowState,
    mrs: MrTable,
    area: Vec<u8>,
    /// Chooses the cuts; separate from the schedule's generator.
    rng: Rng,
    /// Deliveries so far.
    calls: u64,
    /// Deliveries that were cut into more than one fragment.
    split: u64,
}

impl Twin {
    /// Cuts `f` into 1–4 fragments at offsets at or after the 54 header
    /// bytes, mostly odd ones; every other delivery into at least 2.
    fn cut<'a>(&mut self, f: &'a [u8]) -> Vec<&'a [u8]> {
        self.calls += 1;
        let n = if self.calls.is_multiple_of(2) {
            2 + self.rng.below(3)
        } else {
            1 + self.rng.below(4)
        };
        let mut cuts: Vec<usize> = (1..n)
            .map(|_| {
                let mut c = 54 + self.rng.below(f.len() - 54 + 1);
                if self.rng.below(4) != 0 && c.is_multiple_of(2) && c < f.len() {
                    c += 1;
                }
                c
            })
            .collect();
        cuts.sort_unstable();
        let mut pieces = Vec::with_capacity(n);
        let mut at = 0;
        for c in cuts {
            pieces.push(&f[at..c]);
            at = c;
        }
        pieces.push(&f[at..]);
        pieces
    }
}

struct World {
    flow: FlowState,
    mrs: MrTable,
    twin: Twin,
    area: Vec<u8>,
    /// area index -> receive-stream offset, for posted memory.
    owner: Vec<Option<u64>>,
    stream: Vec<u8>,
    posted_end: u64,
    /// Model: stream offsets reported placed (or below the floor).
    placed: Vec<bool>,
    calls: u64,
}

impl World {
    fn seq_of(&self, offset: i64) -> u32 {
        self.flow
            .irs
            .wrapping_add(1)
            .wrapping_add(offset as i32 as u32)
    }

    fn deliver(&mut self, seq: u32, payload: &[u8], flip: Option<usize>, kind: Kind) {
        let mut f = frame(seq, payload);
        if let Some(i) = flip {
            let at = f.len() - payload.len() + i;
            f[at] ^= 0x5a;
        }
        let Ok(Parsed::Tcp(seg)) = wire::parse(&f) else {
            panic!("test frame must parse");
        };
        let before = self.area.clone();
        let floor = self.flow.floor();
        let p: Placement = place(&mut self.flow, &seg, &f, &mut self.area);
        self.calls += 1;

        // The same frame as a fragment chain, on the twin flow.
        let pieces = self.twin.cut(&f);
        self.twin.split += u64::from(pieces.len() > 1);
        let head_seg = match wire::parse_head(pieces[0], f.len()) {
            Ok(Parsed::Tcp(s)) => s,
            other => panic!("head of {} bytes did not parse: {other:?}", pieces[0].len()),
        };
        assert_eq!(head_seg, seg, "parse_head differs from parse");
        let lens: Vec<usize> = pieces.iter().map(|p| p.len()).collect();
        let q = place_parts(
            &mut self.twin.flow,
            &head_seg,
            &pieces,
            &mut self.twin.area,
            ChecksumPolicy::Verify,
        );
        assert_eq!(q, p, "fragments {lens:?} placed differently ({kind:?})");
        assert!(
            self.twin.area == self.area,
            "fragments {lens:?}: area differs ({kind:?}, {p:?})"
        );
        assert_eq!(self.twin.flow.counters, self.flow.counters, "{lens:?}");
        assert!(self.twin.flow.placed.ranges().eq(self.flow.placed.ranges()));

        // Every changed byte: posted memory, in [floor, posted_end), not
        // yet verified-placed.
        for (i, (a, b)) in before.iter().zip(&self.area).enumerate() {
            if a != b {
                let o = self.owner[i].unwrap_or_else(|| {
                    panic!("area byte {i} outside posted memory changed ({kind:?}, {p:?})")
                });
                assert!(
                    o >= floor && o < self.posted_end,
                    "stream offset {o} written outside [{floor}, {}) by {kind:?}",
                    self.posted_end
                );
                assert!(
                    !self.placed[o as usize],
                    "verified byte at stream offset {o} overwritten by {kind:?} ({p:?})"
                );
            }
        }
        if !p.placed.is_empty() {
            assert!(
                p.placed.start >= floor && p.placed.end <= self.posted_end,
                "placed {p:?} outside [{floor}, {})",
                self.posted_end
            );
            for o in p.placed.range() {
                let mem = self.flow.recv.map(o..o + 1).next().map(|(_, m)| m.start);
                if let Some(m) = mem {
                    assert_eq!(
                        self.area[m], self.stream[o as usize],
                        "placed byte {o} differs from the stream ({kind:?}, {p:?})"
                    );
                }
                self.placed[o as usize] = true;
            }
        }
        match kind {
            Kind::Corrupt => assert_eq!(p.verdict, Verdict::BadChecksum),
            Kind::Forged | Kind::Outside => assert!(
                matches!(p.verdict, Verdict::Duplicate | Verdict::BeyondPosted),
                "{kind:?} got {p:?}"
            ),
            Kind::Genuine => assert_ne!(p.verdict, Verdict::BadChecksum),
        }
    }

    fn genuine(&mut self, start: usize, end: usize) {
        let payload = self.stream[start..end].to_vec();
        self.deliver(self.seq_of(start as i64), &payload, None, Kind::Genuine);
    }

    fn advance(&mut self) {
        let mut p = self.flow.floor() as usize;
        while p < self.posted_end as usize && self.placed[p] {
            p += 1;
        }
        // Retired memory must hold the stream already; it may never change.
        let done = advance_floor(&mut self.flow, &mut self.mrs, p as u64).expect("within posted");
        let twin_done =
            advance_floor(&mut self.twin.flow, &mut self.twin.mrs, p as u64).expect("twin");
        assert_eq!(twin_done, done);
        let total: u64 = done.iter().map(|c| c.len).sum();
        assert!(total <= p as u64);
    }
}

/// A flow with `posts` (gap before, length) posted in an area of
/// `area_len` bytes; with `owner`, records each area byte's stream offset.
fn posted_flow(
    irs: u32,
    posts: &[(usize, usize)],
    area_len: usize,
    mut owner: Option<&mut Vec<Option<u64>>>,
) -> (FlowState, MrTable) {
    let mut mrs = MrTable::new(area_len, posts.len() + 1);
    let mut flow = FlowState::new(&FlowParams {
        key: FlowKey::default(),
        local_mac: [0; 6],
        remote_mac: [0; 6],
        irs,
        iss: 0,
        socket: 0,
        max_recv_segments: posts.len(),
        max_send_segments: 1,
        max_placed_ranges: 6,
    });
    let mut at = 0usize;
    for (i, &(gap, len)) in posts.iter().enumerate() {
        at += gap;
        let mr = mrs.register(at, len, Access::RECV).expect("register");
        let r = flow
            .recv
            .post(&mut mrs, mr, 0, len, i as u64)
            .expect("post");
        if let Some(owner) = owner.as_deref_mut() {
            for k in 0..len {
                owner[at + k] = Some(r.start + k as u64);
            }
        }
        at += len;
    }
    (flow, mrs)
}

fn run(irs: u32, posts: Vec<(usize, usize)>, extra: usize, cut: usize, seed: u64) {
    let mut rng = Rng(seed | 1);
    let area_len: usize = posts.iter().map(|(g, l)| g + l).sum::<usize>() + 64;
    let mut owner = vec![None; area_len];
    let (flow, mrs) = posted_flow(irs, &posts, area_len, Some(&mut owner));
    let (twin_flow, twin_mrs) = posted_flow(irs, &posts, area_len, None);
    let posted_end = flow.recv.posted_end();
    let stream: Vec<u8> = (0..posted_end as usize + extra)
        .map(|_| rng.next() as u8)
        .collect();
    let mut w = World {
        flow,
        mrs,
        twin: Twin {
            flow: twin_flow,
            mrs: twin_mrs,
            area: vec![SENTINEL; area_len],
            rng: Rng(seed.rotate_left(17) | 1),
            calls: 0,
            split: 0,
        },
        area: vec![SENTINEL; area_len],
        owner,
        stream,
        posted_end,
        placed: vec![false; posted_end as usize + extra],
        calls: 0,
    };
    let len = w.stream.len();
    let segs: Vec<(usize, usize)> = (0..len)
        .step_by(cut)
        .map(|s| (s, (s + cut).min(len)))
        .collect();
    let mut order: Vec<usize> = (0..segs.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }

    for &i in &order {
        let (s, e) = segs[i];
        w.genuine(s, e);
        for _ in 0..rng.below(3) {
            match rng.below(8) {
                0 => {
                    // Duplicate of any segment.
                    let (s, e) = segs[rng.below(segs.len())];
                    w.genuine(s, e);
                }
                1 => {
                    // Overlapping retransmission of an arbitrary range,
                    // possibly straddling the posted end.
                    let s = rng.below(len);
                    let e = (s + 1 + rng.below(1460)).min(len);
                    w.genuine(s, e);
                }
                2 => {
                    // Corrupted checksum: one payload byte changed.
                    let (s, e) = segs[rng.below(segs.len())];
                    let payload = w.stream[s..e].to_vec();
                    let flip = rng.below(payload.len());
                    w.deliver(w.seq_of(s as i64), &payload, Some(flip), Kind::Corrupt);
                }
                3 => {
                    // Forged duplicate of a fully verified segment.
                    let (s, e) = segs[rng.below(segs.len())];
                    let e_in = e.min(posted_end as usize);
                    if s < e_in && w.placed[s..e_in].iter().all(|&b| b) {
                        let forged: Vec<u8> = w.stream[s..e].iter().map(|b| !b).collect();
                        w.deliver(w.seq_of(s as i64), &forged, None, Kind::Forged);
                    }
                }
                4 => {
                    // Far outside the window: beyond the posted end by up to
                    // 2^31, or far below the floor.
                    let payload: Vec<u8> =
                        (0..1 + rng.below(1460)).map(|_| rng.next() as u8).collect();
                    let off = if rng.below(2) == 0 {
                        posted_end as i64 + 1 + (rng.next() % 0x7fff_0000) as i64
                    } else {
                        w.flow.floor() as i64
                            - payload.len() as i64
                            - (rng.next() % 0x7fff_0000) as i64
                    };
                    w.deliver(w.seq_of(off), &payload, None, Kind::Outside);
                }
                5 | 6 => w.advance(),
                _ => {}
            }
        }
    }
    // A sender retransmits what was not acknowledged, in order.
    for _round in 0..3 {
        w.advance();
        if w.flow.floor() == posted_end {
            break;
        }
        for &(s, e) in &segs {
            if (s as u64) < posted_end
                && !w.placed[s..e.min(posted_end as usize)].iter().all(|&b| b)
            {
                w.genuine(s, e);
            }
        }
    }
    w.advance();
    assert_eq!(w.flow.floor(), posted_end, "whole posted space completed");

    // (a) and (b): posted memory equals the stream, everything else intact.
    for (i, &b) in w.area.iter().enumerate() {
        match w.owner[i] {
            Some(o) => assert_eq!(b, w.stream[o as usize], "posted byte {o} (area {i})"),
            None => assert_eq!(b, SENTINEL, "area byte {i} outside posted memory"),
        }
    }
    let counted: u64 = w
        .flow
        .counters
        .iter()
        .filter(|(n, _)| *n != "bytes_placed")
        .map(|(_, v)| v)
        .sum();
    assert_eq!(counted, w.calls, "every placement counted once");
    assert!(w.flow.recv.is_empty());
    assert!(w.flow.placed.is_empty());
    assert_eq!(w.twin.area, w.area, "twin ends with the same memory");
    assert!(
        w.twin.split >= w.calls / 2,
        "half the deliveries were split"
    );
}

fn irs_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        (u32::MAX - 40_000)..=u32::MAX,
        0u32..40_000,
        Just((1u32 << 31) - 1),
    ]
}

proptest! {
    // 256 cases by default; PROPTEST_CASES raises it for a longer soak.
    #[test]
    fn placement_never_writes_outside_posted_space_and_reassembles(
        irs in irs_strategy(),
        posts in prop::collection::vec((0usize..48, 1usize..3000), 1..6),
        extra in 0usize..800,
        cut in 1usize..1461,
        seed in any::<u64>(),
    ) {
        run(irs, posts, extra, cut, seed);
    }
}

proptest! {
    // Jumbo segments (up to a 9000-byte MTU's payload) over large posted
    // segments: the multi-buffer case the twin checks against.
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn jumbo_segments_place_the_same_from_fragments(
        irs in irs_strategy(),
        posts in prop::collection::vec((0usize..48, 1usize..30_000), 1..4),
        extra in 0usize..9000,
        cut in 1000usize..8961,
        seed in any::<u64>(),
    ) {
        run(irs, posts, extra, cut, seed);
    }
}

#[test]
fn wrap_and_tiny_segments_fixed_case() {
    run(u32::MAX - 3, vec![(5, 10), (0, 1), (17, 300)], 20, 3, 42);
}
