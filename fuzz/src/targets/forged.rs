//! `forged_delivery`: the oracle for issue 12 item 1. An honest sender's
//! stream (known bytes) arrives in MSS segments with the right sequence
//! and acknowledgment numbers, inside the advertised window; hostile
//! frames of the same 4-tuple, with in-window sequence numbers just ahead
//! of the honest sender and payload that differs from the honest bytes
//! there, are interleaved: a wrong ACK, no ACK, RST with data, SYN with
//! data, a stale timestamp, or data beyond the advertised window but inside
//! posted memory. Each frame takes the stack's path through [`Rig`]
//! (placement, then the connection, then retirement through the floor on
//! `Received`). The bytes the application receives must be a prefix of the
//! honest stream: a receiver that rejects the hostile segments (as RFC
//! 9293, 5961 and 7323 ask) never delivers their bytes. Half the flows
//! are IPv6 (frames over the fixed header), half IPv4.

use core::time::Duration;

use arbitrary::{Result, Unstructured};
use datapath::mr::Access;
use proto::Flags;
use transports::sim::rng::Rng;
use transports::tcp::TcpConfig;

use crate::frames;
use crate::rig::{Rig, RigSpec};

use super::Reached;

/// What a hostile frame gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hostile {
    /// ACK far from anything we sent (RFC 5961 5.2).
    WrongAck,
    /// Data without the ACK flag (RFC 9293 3.10.7.4, fifth check).
    NoAck,
    /// RST carrying data, not at RCV.NXT (RFC 5961 3.2).
    RstWithData,
    /// SYN carrying data in the window (RFC 5961 4.2).
    SynWithData,
    /// A timestamp older than TS.Recent (RFC 7323 5.3).
    StaleTimestamp,
    /// Beyond the advertised window, inside posted memory (RFC 9293 3.10.7.4).
    BeyondWindow,
}

const KINDS: [Hostile; 6] = [
    Hostile::WrongAck,
    Hostile::NoAck,
    Hostile::RstWithData,
    Hostile::SynWithData,
    Hostile::StaleTimestamp,
    Hostile::BeyondWindow,
];

/// A hostile frame that placed bytes.
#[derive(Debug)]
struct Landed {
    kind: Hostile,
    placed: core::ops::Range<u64>,
}

/// The honest sender.
struct Sender {
    stream: Vec<u8>,
    mss: usize,
    next: usize,
    /// Its timestamp clock (ticks once per segment sent).
    ts: u32,
}

pub(super) fn run(data: &[u8]) -> core::result::Result<Reached, String> {
    run_with(data, true)
}

/// The oracle; `hostile: false` sends only the honest stream (which must
/// then arrive whole).
fn run_with(data: &[u8], hostile: bool) -> core::result::Result<Reached, String> {
    let mut u = Unstructured::new(data);
    let Ok((spec, mut sender)) = setup(&mut u) else {
        return Ok(Reached::SetupOnly);
    };
    let mut rig = Rig::new(&spec)?;
    let posted = spec.regions[0].1;
    // Up to 8 posts (the segment list's bound); the last takes the rest.
    let posts = u.int_in_range(1..=spec.max_recv_segments).unwrap_or(1);
    let mut left = posted;
    for i in 1..=posts {
        if left == 0 {
            break;
        }
        let chunk = if i == posts {
            left
        } else {
            u.int_in_range(1..=left).unwrap_or(left)
        };
        if !rig.post(0, chunk)? {
            break;
        }
        left -= chunk;
    }
    let mut landed = Vec::new();
    let mut stalls = 0;
    let budget = 4 * sender.stream.len() / sender.mss + 400;
    for _ in 0..budget {
        if rig.closed || (sender.next == sender.stream.len() && u.is_empty()) {
            break;
        }
        if hostile && !u.is_empty() && u.ratio(2u8, 5u8).unwrap_or(false) {
            if let Some(l) = send_hostile(&mut u, &mut rig, &mut sender)? {
                landed.push(l);
            }
            continue;
        }
        if !send_honest(&mut rig, &mut sender)? {
            stalls += 1;
            if stalls > 100 {
                break;
            }
            rig.tick(Duration::from_millis(1))?;
        } else {
            stalls = 0;
        }
    }
    for _ in 0..20 {
        rig.tick(Duration::from_millis(5))?;
    }
    verdict(&rig, &sender, &landed, hostile)?;
    // The input reached the engine when at least one of its frames went
    // through placement to the connection.
    Ok(if rig.segments_in > 0 {
        Reached::Engine
    } else {
        Reached::SetupOnly
    })
}

/// The application's bytes against the honest stream.
fn verdict(
    rig: &Rig,
    sender: &Sender,
    landed: &[Landed],
    hostile: bool,
) -> core::result::Result<(), String> {
    let honest = &sender.stream;
    let bad = rig
        .app
        .iter()
        .zip(honest.iter().chain(core::iter::repeat(&0)))
        .position(|(a, h)| a != h)
        .or((rig.app.len() > honest.len()).then_some(honest.len()));
    if let Some(off) = bad {
        let by: Vec<_> = landed
            .iter()
            .filter(|l| l.placed.contains(&(off as u64)))
            .map(|l| format!("{:?} placed {:?}", l.kind, l.placed))
            .collect();
        return Err(format!(
            "forged bytes delivered: application byte {off} is {:#04x}, the honest stream has {:?} \
             ({} of {} bytes delivered); hostile frames over it: [{}]",
            rig.app[off],
            honest.get(off),
            rig.app.len(),
            honest.len(),
            by.join(", ")
        ));
    }
    if !hostile && rig.app.len() != honest.len() {
        return Err(format!(
            "honest stream stalled: {} of {} bytes delivered",
            rig.app.len(),
            honest.len()
        ));
    }
    Ok(())
}

fn setup(u: &mut Unstructured<'_>) -> Result<(RigSpec, Sender)> {
    let ipv6 = u.arbitrary()?;
    let timestamps = u.arbitrary()?;
    let window_scale = if u.arbitrary()? {
        Some(u.int_in_range(0u8..=8)?)
    } else {
        None
    };
    let config = TcpConfig {
        sack: u.arbitrary()?,
        timestamps,
        window_scale,
        ..TcpConfig::default()
    };
    let ts0: u32 = u.arbitrary()?;
    let mut synack_options = vec![2, 4, 5, 0xb4, 1, 1, 4, 2];
    if window_scale.is_some() {
        synack_options.extend_from_slice(&[1, 3, 3, 7]);
    }
    if timestamps {
        synack_options.extend_from_slice(&frames::ts_option(ts0, 0));
    }
    let len = u.int_in_range(2000usize..=120_000)?;
    let mut rng = Rng::new(u.arbitrary()?);
    let stream = (0..len).map(|_| rng.next_u64() as u8).collect();
    let posted = len + u.int_in_range(0usize..=70_000)?;
    let spec = RigSpec {
        irs: u.arbitrary()?,
        iss: u.arbitrary()?,
        config,
        synack_options,
        synack_window: 65535,
        area_len: posted,
        regions: vec![(0, posted, Access::RECV)],
        max_recv_segments: 8,
        max_placed_ranges: u.int_in_range(4usize..=16)?,
        check_writes: false,
        ipv6,
    };
    let sender = Sender {
        stream,
        mss: u.int_in_range(200usize..=1400)?,
        next: 0,
        ts: ts0.wrapping_add(1),
    };
    Ok((spec, sender))
}

/// The next honest segment, if the advertised window has room for it.
fn send_honest(rig: &mut Rig, s: &mut Sender) -> core::result::Result<bool, String> {
    if s.next == s.stream.len() {
        return Ok(false);
    }
    // What fits in the window: a short segment at a window edge that
    // the scale rounds down.
    let edge = usize::try_from(rig.advertised_edge).unwrap_or(usize::MAX);
    let end = (s.next + s.mss).min(s.stream.len()).min(edge);
    if end <= s.next {
        return Ok(false);
    }
    s.ts = s.ts.wrapping_add(1);
    let f = frame(
        rig,
        Flags::ACK | Flags::PSH,
        s.next as u64,
        rig.conn.iss().wrapping_add(1),
        s.ts,
        &s.stream[s.next..end],
    );
    rig.deliver(&[&f])?;
    s.next = end;
    Ok(true)
}

fn frame(rig: &Rig, flags: Flags, offset: u64, ack: u32, ts: u32, payload: &[u8]) -> Vec<u8> {
    let seq = rig.irs().wrapping_add(1).wrapping_add(offset as u32);
    let opts = if rig.conn.negotiated().timestamps {
        frames::ts_option(ts, 0).to_vec()
    } else {
        Vec::new()
    };
    let h = frames::header(flags, seq, ack, 65535, &opts);
    if rig.ipv6() {
        frames::build6(&h, payload)
    } else {
        frames::build(&h, payload)
    }
}

/// One hostile frame just ahead of the honest sender, or beyond the
/// window; returns what it placed.
fn send_hostile(
    u: &mut Unstructured<'_>,
    rig: &mut Rig,
    s: &mut Sender,
) -> core::result::Result<Option<Landed>, String> {
    let (Ok(&kind), Ok(ahead)) = (u.choose(&KINDS), u.int_in_range(0..=3 * s.mss)) else {
        return Ok(None);
    };
    let posted = rig.posted_end() as usize;
    let good_ack = rig.conn.iss().wrapping_add(1);
    let offset = match kind {
        Hostile::BeyondWindow => rig.advertised_edge as usize + ahead % s.mss,
        // A RST exactly at RCV.NXT is a valid reset, not an attack on data.
        Hostile::RstWithData => (rig.conn.received() as usize).max(s.next) + 1 + ahead,
        _ => s.next + ahead,
    };
    let end = (offset + s.mss).min(posted);
    if offset >= end {
        return Ok(None);
    }
    let payload: Vec<u8> = (offset..end)
        .map(|i| !s.stream.get(i).copied().unwrap_or(0))
        .collect();
    let (flags, ack, ts) = match kind {
        Hostile::WrongAck => (
            Flags::ACK | Flags::PSH,
            good_ack.wrapping_add(0x4000_0000),
            s.ts,
        ),
        Hostile::NoAck => (Flags::PSH, 0, s.ts),
        Hostile::RstWithData => (Flags::RST | Flags::ACK, good_ack, s.ts),
        Hostile::SynWithData => (Flags::SYN | Flags::ACK, good_ack, s.ts),
        Hostile::StaleTimestamp => (
            Flags::ACK | Flags::PSH,
            good_ack,
            s.ts.wrapping_sub(0x100_0000),
        ),
        Hostile::BeyondWindow => (Flags::ACK | Flags::PSH, good_ack, s.ts),
    };
    if kind == Hostile::StaleTimestamp && !rig.conn.negotiated().timestamps {
        return Ok(None);
    }
    // A SYN's data starts one past its sequence number.
    let at = if kind == Hostile::SynWithData {
        offset as u64 - 1
    } else {
        offset as u64
    };
    if kind == Hostile::SynWithData && offset == 0 {
        return Ok(None);
    }
    let f = frame(rig, flags, at, ack, ts, &payload);
    let p = rig.deliver(&[&f])?;
    Ok(p.filter(|p| !p.placed.is_empty()).map(|p| Landed {
        kind,
        placed: p.placed.range(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::input_from_seed;

    /// Without hostile frames the rig delivers the whole honest stream, so
    /// a failure of the oracle is the hostile frames' doing; both families
    /// are among the flows.
    #[test]
    fn the_honest_stream_alone_arrives_whole() {
        let mut families = [0; 2];
        for seed in 0..200 {
            let input = input_from_seed(seed, 256);
            run_with(&input, false).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            if let Ok((spec, _)) = setup(&mut Unstructured::new(&input)) {
                families[usize::from(spec.ipv6)] += 1;
            }
        }
        assert!(families[0] > 50 && families[1] > 50, "{families:?}");
    }
}
