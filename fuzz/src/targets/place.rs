//! `place`: frames of one flow (mostly mutated valid ones) through parse →
//! place → transport → floor against arbitrary posted receive segments.
//! The invariants are checked by [`Rig`]: no panic, no write outside the
//! gaps of posted memory above the floor (the rest of the area keeps its
//! canary), placed bytes hold what their segment carried, and the floor
//! moves only over placed bytes.

use core::time::Duration;

use arbitrary::{Result, Unstructured};
use datapath::mr::Access;
use proto::Flags;
use transports::tcp::TcpConfig;

use crate::frames;
use crate::rig::{Rig, RigSpec};

use super::Reached;

/// Most steps (frames, posts, ticks) per input.
const MAX_STEPS: usize = 32;

pub(super) fn run(data: &[u8]) -> core::result::Result<Reached, String> {
    // The input reached the engine when at least one of its frames went
    // through placement to the connection.
    run_rig(data).map(|rig| {
        if rig.is_some_and(|r| r.segments_in > 0) {
            Reached::Engine
        } else {
            Reached::SetupOnly
        }
    })
}

/// The target, returning the rig at the end (to see how deep an input
/// went when tuning the generator).
fn run_rig(data: &[u8]) -> core::result::Result<Option<Rig>, String> {
    let mut u = Unstructured::new(data);
    let Ok(spec) = spec(&mut u) else {
        return Ok(None);
    };
    let mut rig = Rig::new(&spec)?;
    // Initial posts.
    let posts = u.int_in_range(1..=spec.max_recv_segments).unwrap_or(1);
    for _ in 0..posts {
        let (r, len) = post_args(&mut u, &rig).unwrap_or((0, 64));
        rig.post(r, len)?;
    }
    for _ in 0..MAX_STEPS {
        if u.is_empty() {
            break;
        }
        match step(&mut u, &mut rig) {
            Ok(r) => r?,
            Err(_) => break,
        }
    }
    Ok(Some(rig))
}

/// One action; the outer `Result` is the input running out.
fn step(u: &mut Unstructured<'_>, rig: &mut Rig) -> Result<core::result::Result<(), String>> {
    Ok(match u.int_in_range(0u8..=15)? {
        0..=10 => {
            let frame = frame(u, rig)?;
            let parts = frames::split(u, &frame)?;
            rig.deliver(&parts).map(|_| ())
        }
        11 | 12 => {
            let (r, len) = post_args(u, rig)?;
            rig.post(r, len).map(|_| ())
        }
        13 | 14 => rig.tick(Duration::from_micros(u.int_in_range(0u64..=400_000)?)),
        // The floor moved by a caller that does not wait for the transport.
        _ => {
            let end = rig.posted_end();
            let to = u.int_in_range(0..=end + 8)?;
            rig.advance(to).map(|_| ())
        }
    })
}

fn post_args(u: &mut Unstructured<'_>, rig: &Rig) -> Result<(usize, usize)> {
    let r = u.int_in_range(0..=rig.regions().saturating_sub(1))?;
    Ok((r, u.int_in_range(1usize..=700)?))
}

/// The rig: sequence numbers (often near the wrap), options on both sides,
/// a small area with 1..=4 regions at arbitrary places, small bounds.
fn spec(u: &mut Unstructured<'_>) -> Result<RigSpec> {
    let irs = if u.arbitrary()? {
        u32::MAX - u.int_in_range(0u32..=2000)?
    } else {
        u.arbitrary()?
    };
    let config = TcpConfig {
        sack: u.arbitrary()?,
        timestamps: u.arbitrary()?,
        window_scale: if u.arbitrary()? {
            Some(u.int_in_range(0u8..=14)?)
        } else {
            None
        },
        quick_ack_segments: u.int_in_range(0u32..=16)?,
        ..TcpConfig::default()
    };
    let mut synack_options = vec![2, 4, 5, 0xb4];
    if u.arbitrary()? {
        synack_options.extend_from_slice(&[1, 3, 3, u.int_in_range(0u8..=15)?]);
    }
    if u.arbitrary()? {
        synack_options.extend_from_slice(&[1, 1, 4, 2]);
    }
    if u.arbitrary()? {
        synack_options.extend_from_slice(&frames::ts_option(u.arbitrary()?, 0));
    }
    let area_len = u.int_in_range(64usize..=4096)?;
    let mut regions = Vec::new();
    let mut at = 0;
    for _ in 0..u.int_in_range(1u8..=4)? {
        at += u.int_in_range(0usize..=64)?;
        let len = u
            .int_in_range(8usize..=1200)?
            .min(area_len.saturating_sub(at));
        if len == 0 {
            break;
        }
        let access = if u.ratio(1u8, 8u8)? {
            Access::SEND
        } else {
            Access::RECV
        };
        regions.push((at, len, access));
        at += len;
    }
    Ok(RigSpec {
        irs,
        iss: u.arbitrary()?,
        config,
        synack_options,
        synack_window: u.arbitrary()?,
        area_len,
        regions,
        max_recv_segments: u.int_in_range(1usize..=8)?,
        max_placed_ranges: u.int_in_range(1usize..=6)?,
        check_writes: true,
        ipv6: u.ratio(1u8, 3u8)?,
    })
}

/// A frame of the flow: mostly in or near the posted range, acknowledging
/// our ISS + 1, then bent by up to four mutations.
fn frame(u: &mut Unstructured<'_>, rig: &Rig) -> Result<Vec<u8>> {
    let base = rig.irs().wrapping_add(1);
    let posted = rig.posted_end();
    let offset: u32 = match u.int_in_range(0u8..=4)? {
        0 => rig.conn.received() as u32,
        1 => (rig.conn.received() as u32).wrapping_add(u.int_in_range(0u32..=64)?),
        2 => u.int_in_range(0..=posted as u32 + 64)?,
        3 => (rig.conn.received() as u32).wrapping_add(u.arbitrary::<i16>()? as i32 as u32),
        _ => u.arbitrary()?,
    };
    let flags = match u.int_in_range(0u8..=7)? {
        0..=3 => Flags::ACK,
        4 => Flags::ACK | Flags::PSH,
        5 => Flags::ACK | Flags::FIN,
        6 => Flags(u.arbitrary::<u8>()? & 0x1f) | Flags::ACK,
        _ => Flags(u.arbitrary()?),
    };
    let ack = if u.ratio(7u8, 8u8)? {
        rig.conn.iss().wrapping_add(1)
    } else {
        u.arbitrary()?
    };
    let options = if rig.conn.negotiated().timestamps && u.ratio(3u8, 4u8)? {
        frames::ts_option((rig.now.as_nanos() / 1000) as u32, 0).to_vec()
    } else {
        frames::options(u)?
    };
    let h = frames::header(
        flags,
        base.wrapping_add(offset),
        ack,
        u.arbitrary()?,
        &options,
    );
    let len = u.int_in_range(0usize..=600)?.min(u.len());
    let payload = u.bytes(len)?.to_vec();
    let mut f = if rig.ipv6() {
        frames::build6(&h, &payload)
    } else {
        frames::build(&h, &payload)
    };
    frames::mutate(u, &mut f, 4)?;
    Ok(f)
}
