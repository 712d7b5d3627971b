//! RX path microbenchmark: parse + checksum verify + placement of 1514-byte
//! Eth/IPv4/TCP frames of one flow into a 64 MiB receive area, against a
//! plain `copy_from_slice` of the same payload bytes into the same
//! destinations, in the same run. Reports medians over repetitions.
//!
//! Then the jumbo case: 9014-byte frames (MTU 9000) split into 3 fragments
//! as multi-buffer AF_XDP delivers them from 4 KiB frames, placed straight
//! from the fragments (`parse_head` + `place_parts`), against linearising
//! first and placing the copy (the path this replaced), and against a
//! plain memcpy of the payload pieces.
//!
//! Run: `cargo bench -p zerosplit-datapath --bench rx_path`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use datapath::checksum;
use datapath::flow_table::{FlowParams, FlowState};
use datapath::mr::{Access, MrId, MrTable};
use datapath::placement::{advance_floor, place, place_parts, ChecksumPolicy, Verdict};
use datapath::tx::{build_copy, TxSegment};
use datapath::wire::{self, Ecn, FlowKey, Parsed};
use proto::{Flags, TcpHeader};

const AREA: usize = 64 << 20;
const MSS: usize = 1460;
const SEGMENT: usize = 1 << 20;
const REPS: usize = 9;
const IRS: u32 = u32::MAX - 100_000;

fn key(remote: [u8; 4], local: [u8; 4], rp: u16, lp: u16) -> FlowKey {
    FlowKey {
        remote_ip: remote.into(),
        local_ip: local.into(),
        remote_port: rp,
        local_port: lp,
    }
}

fn params(k: FlowKey, irs: u32, iss: u32, segs: usize) -> FlowParams {
    FlowParams {
        key: k,
        local_mac: [2, 0, 0, 0, 0, 2],
        remote_mac: [2, 0, 0, 0, 0, 1],
        irs,
        iss,
        socket: 0,
        max_recv_segments: segs,
        max_send_segments: segs,
        max_placed_ranges: 16,
    }
}

/// Frames as the peer would send them, built with our TX path.
fn build_frames(n: usize) -> Vec<Vec<u8>> {
    build_frames_mss(n, MSS)
}

/// `n` frames of `mss` payload bytes each (IP MTU `mss + 40`).
fn build_frames_mss(n: usize, mss: usize) -> Vec<Vec<u8>> {
    let src: Vec<u8> = (0..n * mss).map(|i| (i * 2654435761) as u8).collect();
    let mut mrs = MrTable::new(src.len(), 1);
    let mr = mrs.register(0, src.len(), Access::SEND).expect("register");
    let mut peer = FlowState::new(&params(
        key([198, 18, 0, 2], [198, 18, 0, 1], 5201, 41234),
        0,
        IRS,
        1,
    ));
    peer.send.post(&mut mrs, mr, 0, src.len(), 0).expect("post");
    let mut frames = Vec::with_capacity(n);
    for i in 0..n {
        let off = (i * mss) as u64;
        let seg = TxSegment {
            header: TcpHeader {
                urgent: 0,
                seq: IRS.wrapping_add(1).wrapping_add(off as u32),
                ack: 1,
                flags: Flags::ACK,
                window: 1000,
                ..TcpHeader::default()
            },
            payload: Some(off..off + mss as u64),
            ecn: Ecn::NotEct,
            segment_size: 0,
        };
        let mut f = vec![0u8; 54 + mss];
        let len = build_copy(&mut peer, &seg, &src, mss + 40, &mut f).expect("frame");
        assert_eq!(len, 54 + mss);
        frames.push(f);
    }
    frames
}

fn fresh_flow(mrs: &mut MrTable, mr: MrId) -> FlowState {
    let mut f = FlowState::new(&params(
        key([198, 18, 0, 1], [198, 18, 0, 2], 41234, 5201),
        IRS,
        0,
        AREA / SEGMENT,
    ));
    for s in 0..AREA / SEGMENT {
        f.recv
            .post(mrs, mr, s * SEGMENT, SEGMENT, s as u64)
            .expect("post");
    }
    f
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Parse + verify + place every frame, advancing the floor every MiB as a
/// transport would, so segments retire and complete.
fn run_place(frames: &[Vec<u8>], area: &mut [u8], mrs: &mut MrTable, mr: MrId) -> Duration {
    let n = frames.len();
    let mut flow = fresh_flow(mrs, mr);
    let t0 = Instant::now();
    let mut placed = 0u64;
    for f in frames {
        let Ok(Parsed::Tcp(seg)) = wire::parse(f) else {
            panic!("frame must parse");
        };
        let p = place(&mut flow, &seg, f, area);
        debug_assert_eq!(p.verdict, Verdict::Placed);
        placed = p.placed.end;
        if placed - flow.floor() >= SEGMENT as u64 {
            let done = advance_floor(&mut flow, mrs, placed).expect("advance");
            black_box(done);
        }
    }
    let d = t0.elapsed();
    assert_eq!(placed, (n * MSS) as u64);
    assert_eq!(flow.counters.placed, n as u64, "every frame placed");
    assert_eq!(&area[..MSS], &frames[0][54..]);
    let done = advance_floor(&mut flow, mrs, placed).expect("advance");
    black_box(done);
    d
}

/// Plain memcpy of the same payload bytes to the same places.
fn run_memcpy(frames: &[Vec<u8>], area: &mut [u8]) -> Duration {
    let t0 = Instant::now();
    for (i, f) in frames.iter().enumerate() {
        area[i * MSS..(i + 1) * MSS].copy_from_slice(black_box(&f[54..]));
    }
    black_box(&area);
    t0.elapsed()
}

/// Payload bytes of a 9014-byte frame (MTU 9000).
const JUMBO_MSS: usize = 8960;

/// Where a 9014-byte frame is cut when received into 4 KiB UMEM frames
/// with 256 bytes of headroom: fragments of 3840, 4096 and 1078 bytes.
const JUMBO_CUTS: [usize; 2] = [3840, 7936];

fn pieces(f: &[u8]) -> [&[u8]; 3] {
    let [a, b] = JUMBO_CUTS;
    [&f[..a], &f[a..b], &f[b..]]
}

/// Jumbo frames as fragment chains: placed straight from the fragments, or
/// (`linearise`) first copied into one buffer as the old RX path did.
fn run_place_jumbo(
    frames: &[Vec<u8>],
    area: &mut [u8],
    mrs: &mut MrTable,
    mr: MrId,
    linearise: bool,
) -> Duration {
    let n = frames.len();
    let mut flow = fresh_flow(mrs, mr);
    let mut scratch = Vec::with_capacity(1 << 16);
    let t0 = Instant::now();
    let mut placed = 0u64;
    for f in frames {
        let frags = pieces(black_box(f));
        let p = if linearise {
            scratch.clear();
            for x in frags {
                scratch.extend_from_slice(x);
            }
            let Ok(Parsed::Tcp(seg)) = wire::parse(&scratch) else {
                panic!("frame must parse");
            };
            place(&mut flow, &seg, &scratch, area)
        } else {
            let Ok(Parsed::Tcp(seg)) = wire::parse_head(frags[0], f.len()) else {
                panic!("frame must parse");
            };
            place_parts(&mut flow, &seg, &frags, area, ChecksumPolicy::Verify)
        };
        debug_assert_eq!(p.verdict, Verdict::Placed);
        placed = p.placed.end;
        if placed - flow.floor() >= SEGMENT as u64 {
            black_box(advance_floor(&mut flow, mrs, placed).expect("advance"));
        }
    }
    let d = t0.elapsed();
    assert_eq!(placed, (n * JUMBO_MSS) as u64);
    assert_eq!(flow.counters.placed, n as u64, "every frame placed");
    assert_eq!(&area[..JUMBO_MSS], &frames[0][54..]);
    black_box(advance_floor(&mut flow, mrs, placed).expect("advance"));
    d
}

/// Plain memcpy of the payload pieces of the fragment chains.
fn run_memcpy_jumbo(frames: &[Vec<u8>], area: &mut [u8]) -> Duration {
    let t0 = Instant::now();
    for (i, f) in frames.iter().enumerate() {
        let [a, b, c] = pieces(black_box(f));
        let mut at = i * JUMBO_MSS;
        for piece in [&a[54..], b, c] {
            area[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
    }
    black_box(&area);
    t0.elapsed()
}

/// The jumbo comparison; prints its own table.
fn jumbo(area: &mut [u8], mrs: &mut MrTable, mr: MrId) {
    let n = AREA / JUMBO_MSS;
    eprintln!("building {n} frames of 9014 bytes...");
    let frames = build_frames_mss(n, JUMBO_MSS);
    let (mut t_parts, mut t_lin, mut t_mem) = (Vec::new(), Vec::new(), Vec::new());
    let mut ratios = Vec::new();
    for rep in 0..REPS {
        let (p, l, m) = if rep % 2 == 0 {
            let p = run_place_jumbo(&frames, area, mrs, mr, false);
            let l = run_place_jumbo(&frames, area, mrs, mr, true);
            (p, l, run_memcpy_jumbo(&frames, area))
        } else {
            let m = run_memcpy_jumbo(&frames, area);
            let l = run_place_jumbo(&frames, area, mrs, mr, true);
            (run_place_jumbo(&frames, area, mrs, mr, false), l, m)
        };
        ratios.push(p.as_secs_f64() / m.as_secs_f64());
        t_parts.push(p);
        t_lin.push(l);
        t_mem.push(m);
    }
    ratios.sort_by(f64::total_cmp);
    let per = |d: Duration| d.as_nanos() as f64 / n as f64;
    let gbps = |d: Duration| (n * JUMBO_MSS * 8) as f64 / d.as_nanos() as f64;
    let (p, l, m) = (median(t_parts), median(t_lin), median(t_mem));
    println!(
        "rx_path jumbo: {n} frames x 9014 B (8960 B payload) in 3 fragments \
         ({:?}), 64 MiB area, median of {REPS}",
        JUMBO_CUTS
    );
    println!(
        "  parse_head+place_parts  : {:7.1} ns/pkt {:6.1} Gbit/s payload",
        per(p),
        gbps(p)
    );
    println!(
        "  linearise+parse+place   : {:7.1} ns/pkt {:6.1} Gbit/s payload",
        per(l),
        gbps(l)
    );
    println!(
        "  memcpy pieces (baseline): {:7.1} ns/pkt {:6.1} Gbit/s",
        per(m),
        gbps(m)
    );
    println!(
        "  ratio fragments/memcpy = {:.2} (medians), {:.2} (paired); linearised/fragments = {:.2}",
        p.as_nanos() as f64 / m.as_nanos() as f64,
        ratios[ratios.len() / 2],
        l.as_nanos() as f64 / p.as_nanos() as f64
    );
}

fn main() {
    let n = AREA / MSS;
    eprintln!("building {n} frames of 1514 bytes...");
    let frames = build_frames(n);
    let mut area = vec![0u8; AREA];
    let mut mrs = MrTable::new(AREA, 2);
    let mr = mrs.register(0, AREA, Access::RECV).expect("register");

    let mut t_place = Vec::new();
    let mut t_parse = Vec::new();
    let mut t_memcpy = Vec::new();
    let mut t_sum = Vec::new();
    let mut t_fused = Vec::new();
    for rep in 0..REPS {
        // Alternate which of the two compared loops runs first, so neither
        // always inherits the other's cache state.
        if rep % 2 == 0 {
            t_place.push(run_place(&frames, &mut area, &mut mrs, mr));
            t_memcpy.push(run_memcpy(&frames, &mut area));
        } else {
            t_memcpy.push(run_memcpy(&frames, &mut area));
            t_place.push(run_place(&frames, &mut area, &mut mrs, mr));
        }

        // Parse only.
        let t0 = Instant::now();
        for f in &frames {
            black_box(wire::parse(black_box(f)).ok());
        }
        t_parse.push(t0.elapsed());

        // Fused copy + sum alone, and sum alone.
        let t0 = Instant::now();
        for (i, f) in frames.iter().enumerate() {
            black_box(checksum::copy_and_sum(&mut area[i * MSS..(i + 1) * MSS], &f[54..]).ok());
        }
        t_fused.push(t0.elapsed());
        let t0 = Instant::now();
        for f in &frames {
            black_box(checksum::sum(black_box(&f[54..])));
        }
        t_sum.push(t0.elapsed());
        eprintln!("rep {rep} done");
    }
    // Each rep ran the two compared loops back to back: their ratio is less
    // sensitive to other load on a shared machine than the ratio of medians.
    let mut ratios: Vec<f64> = t_place
        .iter()
        .zip(&t_memcpy)
        .map(|(p, m)| p.as_secs_f64() / m.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let paired = ratios[ratios.len() / 2];
    let per = |d: Duration| d.as_nanos() as f64 / n as f64;
    let gbps = |d: Duration| (n * MSS * 8) as f64 / d.as_nanos() as f64;
    let (p, pa, m, fu, s) = (
        median(t_place),
        median(t_parse),
        median(t_memcpy),
        median(t_fused),
        median(t_sum),
    );
    println!("rx_path: {n} frames x 1514 B (1460 B payload), 64 MiB area, median of {REPS}");
    println!(
        "  parse+verify+place : {:7.1} ns/pkt {:6.1} Gbit/s payload",
        per(p),
        gbps(p)
    );
    println!("  parse only         : {:7.1} ns/pkt", per(pa));
    println!(
        "  copy_and_sum only  : {:7.1} ns/pkt {:6.1} Gbit/s",
        per(fu),
        gbps(fu)
    );
    println!(
        "  sum only           : {:7.1} ns/pkt {:6.1} Gbit/s",
        per(s),
        gbps(s)
    );
    println!(
        "  memcpy (baseline)  : {:7.1} ns/pkt {:6.1} Gbit/s",
        per(m),
        gbps(m)
    );
    println!(
        "  ratio placement/memcpy = {:.2} (medians), {:.2} (median of paired runs; target <= 1.3)",
        p.as_nanos() as f64 / m.as_nanos() as f64,
        paired
    );
    jumbo(&mut area, &mut mrs, mr);
}
