//! The RX placement engine: map a TCP segment's sequence number to a
//! receive-stream offset and copy its payload, fused with the checksum, into
//! the posted receive memory at that offset.
//!
//! Sequence space (RFC 9293 §3.4): the peer's SYN occupies sequence number
//! `irs`, so receive-stream offset 0 is the byte with sequence number
//! `irs + 1`. A segment's sequence number is turned into a 64-bit stream
//! offset by its signed 32-bit distance from the floor's sequence number
//! (valid while the peer stays within 2^31 bytes of the floor, which TCP's
//! window rules guarantee). Payload on a SYN segment is never placed (it is
//! counted, and the transport sees the header). A FIN occupies the sequence
//! number after the last payload byte; it does not change placement and is
//! left to the transport.
//!
//! Safety rules, enforced here:
//! - only bytes in `[floor, posted_end)` are written, and only into posted
//!   receive segments' memory;
//! - the checksum is learnt only after the copy, so the copy goes only into
//!   a gap of the flow's [`PlacedSet`](crate::placed_set::PlacedSet) (ranges already placed by segments
//!   whose checksum verified); a corrupt or forged duplicate can dirty a gap
//!   (which stays a gap and is overwritten by the retransmission), never
//!   good data;
//! - the checksum is not the transport's judgement: a segment is placed
//!   before the transport saw it. So a segment writes only one gap and its
//!   record's placed range is exactly what it wrote; when the transport
//!   refuses the segment (bad ACK, stale timestamp, outside the window…) it
//!   has the datapath forget that range ([`crate::nic::Nic::discard`]) and
//!   the genuine bytes are written over it. The transport advances only
//!   over ranges of segments it accepted, and the floor only where it
//!   advanced: a refused segment's bytes are never completed;
//! - payload is never placed for segments no transport would take whatever
//!   their sequence number (SYN, no ACK, RST) or before the peer's ISN is
//!   known;
//! - [`advance_floor`] retires segments before returning their completions.
//!
//! The payload is read through a [`Payload`] view, so a multi-buffer frame
//! is placed straight from its fragments ([`place_parts`]) with the same
//! single copy as a contiguous one ([`place`]).

use core::ops::Range;

mod floor;

pub use floor::{advance_floor, FloorError};

pub use crate::checksum::ChecksumPolicy;
use crate::checksum::{ChecksumCheck, Partial};
use crate::flow_table::FlowState;
use crate::payload::Payload;

pub use crate::verdict::Verdict;
use crate::wire::ParsedSegment;
use proto::{Flags, SeqNum};

/// A half-open range of receive-stream offsets, `Copy` so it can cross the
/// datapath → transport queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamRange {
    /// First offset.
    pub start: u64,
    /// One past the last offset.
    pub end: u64,
}

impl StreamRange {
    /// The range `[start, end)`; an inverted range is empty at `start`.
    pub const fn new(start: u64, end: u64) -> Self {
        StreamRange {
            start,
            end: if end < start { start } else { end },
        }
    }

    /// Length in bytes.
    pub const fn len(self) -> u64 {
        self.end - self.start
    }

    /// Whether the range is empty.
    pub const fn is_empty(self) -> bool {
        self.end <= self.start
    }

    /// As a `Range<u64>`.
    pub const fn range(self) -> Range<u64> {
        self.start..self.end
    }
}

/// The result of placing one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Receive-stream range the payload occupies (clamped at 0 for bytes
    /// before the stream start).
    pub stream: StreamRange,
    /// The sub-range this segment wrote into posted memory, checksum
    /// verified; empty if none (bytes another segment placed are not
    /// reported: they are that segment's).
    pub placed: StreamRange,
    /// What happened.
    pub verdict: Verdict,
    /// Bytes written into area memory by this segment.
    pub written: u32,
}

/// The receive-stream offset of sequence number `seq` for `flow`, as a
/// signed value (negative: before the stream start).
pub fn stream_offset(flow: &FlowState, seq: u32) -> i64 {
    let floor = flow.floor();
    let floor_seq = SeqNum::from_offset(SeqNum(flow.irs.wrapping_add(1)), floor);
    floor as i64 + i64::from(SeqNum(seq).diff(floor_seq))
}

/// Places the payload of `seg` (parsed from `frame`) for `flow` into `area`,
/// verifying the TCP checksum in the same pass. Counts the verdict in
/// `flow.counters`. The one-fragment case of [`place_parts`].
///
/// Never writes outside `[floor, posted_end)` of the flow's posted receive
/// segments, and never over bytes already placed by a verified segment.
pub fn place(
    flow: &mut FlowState,
    seg: &ParsedSegment,
    frame: &[u8],
    area: &mut [u8],
) -> Placement {
    place_parts(flow, seg, &[frame], area, ChecksumPolicy::Verify)
}

/// [`place`] for a frame that arrived as a chain of `fragments` (a
/// multi-buffer packet; `seg` parsed with [`crate::wire::parse_head`]): the
/// payload is summed and copied straight out of the fragments, so the
/// frame is never linearised. Same rules, verdicts and counters as
/// [`place`]; a record whose payload range runs past the fragments is
/// [`Verdict::BadChecksum`]. The checksum is judged under `policy`: a
/// segment taken with its checksum unverified (a veth's partial checksum)
/// is placed like a verified one and counted in `csum_partial` too.
pub fn place_parts(
    flow: &mut FlowState,
    seg: &ParsedSegment,
    fragments: &[&[u8]],
    area: &mut [u8],
    policy: ChecksumPolicy,
) -> Placement {
    let (p, check) = place_inner(flow, seg, fragments, area, policy);
    flow.counters.csum_partial += u64::from(check == ChecksumCheck::Partial);
    flow.counters.count_verdict(p.verdict);
    flow.counters.bytes_placed += u64::from(p.written);
    p
}

fn place_inner(
    flow: &mut FlowState,
    seg: &ParsedSegment,
    fragments: &[&[u8]],
    area: &mut [u8],
    policy: ChecksumPolicy,
) -> (Placement, ChecksumCheck) {
    let found = Payload::in_fragments(fragments, seg.payload_range());
    let payload = found.unwrap_or(Payload::contiguous(&[]));
    let syn = seg.has(Flags::SYN);
    // With SYN, the payload would start one past `seq`; it is not placed
    // anyway, so only its position in the report is affected.
    let data_seq = if syn {
        seg.header.seq.wrapping_add(1)
    } else {
        seg.header.seq
    };
    let start = stream_offset(flow, data_seq);
    let end = start + payload.len() as i64;
    let clamp = |x: i64| x.max(0) as u64;
    let stream = StreamRange::new(clamp(start), clamp(end));
    let mut out = Placement {
        stream,
        placed: StreamRange::new(stream.start, stream.start),
        verdict: Verdict::NoPayload,
        written: 0,
    };
    // A record that does not match the frame (payload range outside it)
    // cannot verify: report it as a checksum failure, write nothing.
    if found.is_none() {
        out.verdict = Verdict::BadChecksum;
        return (out, ChecksumCheck::Bad);
    }
    let refused = refusal(flow, seg);
    let floor = flow.floor() as i64;
    let posted_end = flow.recv.posted_end() as i64;
    let lo = start.max(floor).min(end);
    let hi = end.min(posted_end).max(lo);
    let gap = if refused.is_none() && lo < hi {
        first_gap(flow, lo..hi)
    } else {
        lo..lo
    };
    let writable = !gap.is_empty()
        && flow
            .placed
            .can_insert(gap.start as u64..gap.end as u64, floor as u64);

    let (acc, written) = if writable {
        let sum_of = |a: i64, b: i64| payload.sum((a - start) as usize..(b - start) as usize);
        let (copied, written) = copy_gap(flow, &payload, start, gap.clone(), area);
        let acc = sum_of(start, gap.start)
            .then(copied)
            .then(sum_of(gap.end, end));
        (acc, written)
    } else {
        (payload.sum(0..payload.len()), 0)
    };

    let check = seg.check_checksum(acc, policy);
    if check == ChecksumCheck::Bad {
        out.verdict = Verdict::BadChecksum;
        return (out, check);
    }
    out.written = written as u32;
    if payload.is_empty() {
        return (out, check);
    }
    if let Some(v) = refused {
        out.verdict = v;
        return (out, check);
    }
    if lo >= hi {
        out.verdict = if end <= floor {
            Verdict::Duplicate
        } else {
            Verdict::BeyondPosted
        };
        return (out, check);
    }
    if gap.is_empty() {
        out.verdict = Verdict::Duplicate;
        return (out, check);
    }
    if !writable {
        out.verdict = Verdict::PlacedSetFull;
        return (out, check);
    }
    let placed = gap.start as u64..gap.end as u64;
    // `can_insert` held before the copy and nothing changed since.
    let _ = flow.placed.insert(placed.clone(), floor as u64);
    out.placed = StreamRange::new(placed.start, placed.end);
    out.verdict = if lo == start && hi == end {
        Verdict::Placed
    } else {
        Verdict::Trimmed
    };
    (out, check)
}

/// Why a segment's payload must not be placed whatever its sequence
/// number, if it must not: a SYN (its payload is not accepted), a flow
/// whose peer ISN is unknown, or flags the transport refuses data with (no
/// ACK, or RST: RFC 9293 3.10.7.4). Such bytes would be placed before the
/// transport could say no.
fn refusal(flow: &FlowState, seg: &ParsedSegment) -> Option<Verdict> {
    if seg.has(Flags::SYN) {
        Some(Verdict::SynPayloadIgnored)
    } else if !flow.synchronized {
        Some(Verdict::Unsynchronized)
    } else if !seg.has(Flags::ACK) || seg.has(Flags::RST) {
        Some(Verdict::Unacceptable)
    } else {
        None
    }
}

/// The first run of `window` no verified segment has placed yet. A segment
/// writes only there: its record's placed range is then exactly the bytes
/// it wrote, so the transport, which accepts or refuses each segment
/// whole, can have the datapath forget a refused segment's bytes without
/// touching anyone else's (see [`crate::nic::Nic::discard`]). A gap past
/// the first is filled by the next segment that covers it.
fn first_gap(flow: &FlowState, window: Range<i64>) -> Range<i64> {
    let mut pos = window.start;
    for r in flow.placed.ranges() {
        let (ps, pe) = (r.start as i64, r.end as i64);
        if pe <= pos {
            continue;
        }
        if ps >= window.end {
            break;
        }
        if pos < ps {
            return pos..ps;
        }
        pos = pe;
        if pos >= window.end {
            return window.end..window.end;
        }
    }
    pos..window.end
}

/// Copies the payload bytes of stream range `gap` (inside
/// `[floor, posted_end)`) into the posted memory that maps it, returning the
/// checksum partial of those bytes and the count written. Bytes the segment
/// list does not map, or that fall outside `area`, are summed, not written.
fn copy_gap(
    flow: &FlowState,
    payload: &Payload<'_>,
    start: i64,
    gap: Range<i64>,
    area: &mut [u8],
) -> (Partial, u64) {
    let idx = |x: u64| (x as i64 - start) as usize;
    let mut acc = Partial::EMPTY;
    let mut pos = gap.start as u64;
    let mut written = 0u64;
    for (part, mem) in flow.recv.map(gap.start as u64..gap.end as u64) {
        if pos < part.start {
            acc = acc.then(payload.sum(idx(pos)..idx(part.start)));
        }
        let src = idx(part.start)..idx(part.end);
        match area.get_mut(mem) {
            Some(dst) => {
                // Lengths match by construction of `map`; a mismatch would
                // return an error and we fall back to summing.
                match payload.copy_and_sum(src.clone(), dst) {
                    Ok(p) => {
                        acc = acc.then(p);
                        written += src.len() as u64;
                    }
                    Err(_) => acc = acc.then(payload.sum(src)),
                }
            }
            None => acc = acc.then(payload.sum(src)),
        }
        pos = part.end;
    }
    if pos < gap.end as u64 {
        acc = acc.then(payload.sum(idx(pos)..idx(gap.end as u64)));
    }
    (acc, written)
}

#[cfg(test)]
pub(crate) mod tests;
