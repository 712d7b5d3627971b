//! Placement's rule, written once and without bytes: which part of a
//! segment's payload may be written into a flow's receive stream, and the
//! verdict. The datapath's engine (`datapath::placement`) applies it and
//! copies the bytes, fused with the checksum; the simulator
//! (`transports::sim`) applies it to payload it only counts.
//!
//! Sequence space (RFC 9293 §3.4): the peer's SYN occupies sequence number
//! `irs`, so receive-stream offset 0 is the byte with sequence number
//! `irs + 1`. A sequence number becomes a 64-bit stream offset by its
//! signed 32-bit distance from the floor's sequence number ([`stream_offset`];
//! valid while the peer stays within 2^31 bytes of the floor, which TCP's
//! window rules guarantee).
//!
//! The rule ([`decide`]): only bytes in `[floor, posted_end)` are written,
//! and only into the first gap of the flow's [`PlacedSet`] there, so a
//! segment's placed range is exactly what it wrote and a transport that
//! refuses the segment can have exactly those bytes forgotten
//! ([`PlacedSet::remove`]); a gap past the first is filled by the next
//! segment that covers it. Payload is never placed for segments no
//! transport would take whatever their sequence number ([`refusal`]).

use core::ops::Range;

mod placed_set;
mod verdict;

pub use placed_set::PlacedSet;
pub use verdict::Verdict;

use crate::{Flags, SeqNum};

/// The receive-stream offset of sequence number `seq` for a flow whose
/// peer ISN is `irs` and whose placement floor is at offset `floor`, as a
/// signed value (negative: before the stream start).
pub fn stream_offset(irs: u32, floor: u64, seq: u32) -> i64 {
    let floor_seq = SeqNum::from_offset(SeqNum(irs.wrapping_add(1)), floor);
    floor as i64 + i64::from(SeqNum(seq).diff(floor_seq))
}

/// Why a segment with `flags` must not have its payload placed whatever
/// its sequence number, if it must not: a SYN (its payload is not
/// accepted), a flow whose peer ISN is not known (`synchronized` false),
/// or flags the transport refuses data with (no ACK, or RST: RFC 9293
/// 3.10.7.4). Such bytes would be placed before the transport could say
/// no.
pub fn refusal(flags: Flags, synchronized: bool) -> Option<Verdict> {
    if flags.contains(Flags::SYN) {
        Some(Verdict::SynPayloadIgnored)
    } else if !synchronized {
        Some(Verdict::Unsynchronized)
    } else if !flags.contains(Flags::ACK) || flags.contains(Flags::RST) {
        Some(Verdict::Unacceptable)
    } else {
        None
    }
}

/// A flow's receive side as placement sees it.
#[derive(Debug, Clone, Copy)]
pub struct Receiver<'a> {
    /// Stream offset below which everything is completed.
    pub floor: u64,
    /// End (exclusive) of the posted receive space, as a stream offset.
    pub posted_end: u64,
    /// Ranges above the floor already placed.
    pub placed: &'a PlacedSet,
}

/// What [`decide`] made of a segment's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Start of the part of the payload at or above the floor, as a
    /// stream offset (the payload's end if none of it is).
    pub lo: i64,
    /// End of the part below the posted end (at least `lo`): `lo..hi` is
    /// the payload's part inside `[floor, posted_end)`.
    pub hi: i64,
    /// The bytes this segment writes: the first gap of `lo..hi` in the
    /// placed set, empty unless the verdict is [`Verdict::Placed`] or
    /// [`Verdict::Trimmed`].
    pub gap: Range<u64>,
    /// The verdict, once the segment is known good (the datapath checks
    /// its checksum first; a segment that fails it is
    /// [`Verdict::BadChecksum`] whatever this says).
    pub verdict: Verdict,
}

impl Decision {
    /// Whether the segment writes bytes (its `gap`).
    pub fn writes(&self) -> bool {
        !self.gap.is_empty()
    }
}

/// Decides what becomes of a payload occupying stream offsets
/// `payload` (signed: negative before the stream start) on a segment
/// `refused` or not (see [`refusal`]), for flow side `rx`. Nothing
/// changes: the caller writes `gap` and, once the segment is known good,
/// inserts it into the placed set ([`PlacedSet::insert`] cannot refuse
/// it then: [`PlacedSet::can_insert`] held).
pub fn decide(rx: Receiver<'_>, payload: Range<i64>, refused: Option<Verdict>) -> Decision {
    let (start, end) = (payload.start, payload.end.max(payload.start));
    let floor = rx.floor as i64;
    let lo = start.max(floor).min(end);
    let hi = end.min(rx.posted_end as i64).max(lo);
    let mut d = Decision {
        lo,
        hi,
        gap: 0..0,
        verdict: Verdict::NoPayload,
    };
    if start == end {
        return d;
    }
    if let Some(v) = refused {
        d.verdict = v;
        return d;
    }
    if lo >= hi {
        d.verdict = if end <= floor {
            Verdict::Duplicate
        } else {
            Verdict::BeyondPosted
        };
        return d;
    }
    let gap = rx.placed.first_gap(lo as u64..hi as u64);
    if gap.is_empty() {
        d.verdict = Verdict::Duplicate;
        return d;
    }
    if !rx.placed.can_insert(gap.clone(), rx.floor) {
        d.verdict = Verdict::PlacedSetFull;
        return d;
    }
    d.gap = gap;
    d.verdict = if lo == start && hi == end {
        Verdict::Placed
    } else {
        Verdict::Trimmed
    };
    d
}

#[cfg(test)]
mod tests;
