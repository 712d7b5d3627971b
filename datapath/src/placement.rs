//! The RX placement engine: map a TCP segment's sequence number to a
//! receive-stream offset and copy its payload, fused with the checksum, into
//! the posted receive memory at that offset.
//!
//! Which bytes a segment may write, and its verdict, is placement's rule
//! ([`proto::placement`], written once and shared with the simulator):
//! sequence numbers map to stream offsets ([`proto::placement::stream_offset`]),
//! payload on a SYN segment is never placed (it is counted, and the
//! transport sees the header). A FIN occupies the sequence number after
//! the last payload byte; it does not change placement and is left to the
//! transport. This engine applies the rule to the bytes.
//!
//! Safety rules, enforced here:
//! - only bytes in `[floor, posted_end)` are written, and only into posted
//!   receive segments' memory;
//! - the checksum is learnt only after the copy, so the copy goes only into
//!   a gap of the flow's [`PlacedSet`](proto::placement::PlacedSet) (ranges already placed by segments
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

use crate::wire::ParsedSegment;
pub use proto::placement::Verdict;
use proto::placement::{self as rule, Receiver};
use proto::Flags;

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
    rule::stream_offset(flow.irs, flow.floor(), seq)
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
    let floor = flow.floor();
    let decision = rule::decide(
        Receiver {
            floor,
            posted_end: flow.recv.posted_end(),
            placed: &flow.placed,
        },
        start..end,
        rule::refusal(seg.header.flags, flow.synchronized),
    );
    let gap = decision.gap.start as i64..decision.gap.end as i64;

    let (acc, written) = if decision.writes() {
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
    out.verdict = decision.verdict;
    if decision.writes() {
        // `can_insert` held when the rule decided and nothing changed since.
        let _ = flow.placed.insert(decision.gap.clone(), floor);
        out.placed = StreamRange::new(decision.gap.start, decision.gap.end);
    }
    (out, check)
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
