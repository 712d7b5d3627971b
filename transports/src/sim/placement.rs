//! The receive side of the datapath, modelled: where would a segment's
//! payload have been written?
//!
//! The rule is the datapath's own ([`proto::placement`]): a segment's
//! sequence number maps to a receive-stream offset (offset 0 is the byte
//! after the peer's SYN, RFC 9293 3.4); only the first run of its payload
//! that lies inside posted receive space, at or above the placement floor
//! (the end of the last completed receive segment), and not placed yet is
//! written. That run is the segment's `accepted` range; bytes already
//! placed are not written again (a duplicate's accepted range is empty),
//! and the transport has refused bytes forgotten ([`Placement::discard`]).
//! Payload on a SYN, before the peer's ISN is known, or on a segment
//! without ACK or with RST is never placed. The model has no bytes and no
//! checksum: every segment is taken as good.

use core::ops::Range;

use crate::segment::{Flags, TcpHeader};
use proto::placement::{self as rule, PlacedSet, Receiver, Verdict};

/// Disjoint placed ranges a flow tracks above its floor: the host's
/// default (`flows.max_placed_ranges`).
pub const PLACED_RANGES: usize = 64;

/// Counters of what placement did with payload bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementStats {
    /// Bytes written into posted space, each once (until the transport
    /// has them forgotten): bytes already placed are not written again.
    pub placed_bytes: u64,
    /// Bytes inside posted space, at or above the floor, not written
    /// because they were already placed (duplicates, retransmissions).
    pub already_placed_bytes: u64,
    /// Bytes dropped because they lay beyond the posted receive space.
    pub beyond_posted_bytes: u64,
    /// Bytes dropped because they lay below the placement floor.
    pub below_floor_bytes: u64,
    /// Segments with payload that arrived before any SYN told us the IRS.
    pub before_syn_segments: u64,
    /// Segments whose payload no transport would take whatever its
    /// sequence number (on a SYN, without ACK, or with RST): not placed.
    pub refused_segments: u64,
    /// Out-of-order segments not placed because the flow tracked
    /// [`PLACED_RANGES`] disjoint ranges already.
    pub placed_set_full_segments: u64,
}

/// Receive-side placement state of one endpoint.
#[derive(Debug, Clone)]
pub struct Placement {
    irs: Option<u32>,
    floor: u64,
    posted_end: u64,
    placed: PlacedSet,
    stats: PlacementStats,
}

impl Default for Placement {
    fn default() -> Self {
        Placement {
            irs: None,
            floor: 0,
            posted_end: 0,
            placed: PlacedSet::new(PLACED_RANGES),
            stats: PlacementStats::default(),
        }
    }
}

impl Placement {
    /// The peer's initial sequence number, once a SYN was seen.
    pub fn irs(&self) -> Option<u32> {
        self.irs
    }

    /// Records the IRS from the first SYN seen; later SYNs do not change it.
    pub fn observe_syn(&mut self, seq: u32) {
        if self.irs.is_none() {
            self.irs = Some(seq);
        }
    }

    /// The placement floor: receive-stream offset of the first byte of the
    /// first receive segment not yet completed.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// End (exclusive) of the posted receive space, as a stream offset.
    pub fn posted_end(&self) -> u64 {
        self.posted_end
    }

    /// The application posted `bytes` more receive space.
    pub fn post(&mut self, bytes: u64) {
        self.posted_end = self.posted_end.saturating_add(bytes);
    }

    /// Receive segments ending at or before `floor` were completed; the
    /// floor never moves back.
    pub fn complete_to(&mut self, floor: u64) {
        self.floor = self.floor.max(floor.min(self.posted_end));
        self.placed.prune(self.floor);
    }

    /// The transport refused the bytes placed at `range`: forget them, so
    /// a retransmission is placed over them.
    pub fn discard(&mut self, range: Range<u64>) {
        self.placed.remove(range, self.floor);
    }

    /// Counters so far.
    pub fn stats(&self) -> &PlacementStats {
        &self.stats
    }

    /// The receive-stream offset `seq` maps to, taking the 64-bit offset
    /// nearest the floor (so the 32-bit wrap is handled), or `None` before
    /// the IRS is known or when the offset would lie before the stream start.
    pub fn stream_offset(&self, seq: u32) -> Option<u64> {
        let irs = self.irs?;
        u64::try_from(rule::stream_offset(irs, self.floor, seq)).ok()
    }

    /// Places the payload of a segment with `header` and `len` payload
    /// bytes; returns the receive-stream range written (empty if none) and
    /// the stream offset the segment's payload starts at.
    pub fn place(&mut self, header: &TcpHeader, len: u64) -> (Range<u64>, Option<u64>) {
        // Payload starts after the SYN's own sequence number when both ride
        // in one segment (RFC 9293 3.4).
        let seq = if header.flags.contains(Flags::SYN) {
            header.seq.wrapping_add(1)
        } else {
            header.seq
        };
        let seq_offset = self.stream_offset(seq);
        if len == 0 {
            return (0..0, seq_offset);
        }
        let start = self
            .irs
            .map_or(0, |irs| rule::stream_offset(irs, self.floor, seq));
        let end = start.saturating_add(i64::try_from(len).unwrap_or(i64::MAX));
        let rx = Receiver {
            floor: self.floor,
            posted_end: self.posted_end,
            placed: &self.placed,
        };
        let refused = rule::refusal(header.flags, self.irs.is_some());
        let d = rule::decide(rx, start..end, refused);
        let stats = &mut self.stats;
        match d.verdict {
            Verdict::Unsynchronized => stats.before_syn_segments += 1,
            Verdict::SynPayloadIgnored | Verdict::Unacceptable => stats.refused_segments += 1,
            Verdict::PlacedSetFull => stats.placed_set_full_segments += 1,
            _ => {}
        }
        if refused.is_none() {
            let bytes = |r: Range<i64>| (r.end - r.start) as u64;
            stats.below_floor_bytes += bytes(start..d.lo);
            stats.beyond_posted_bytes += bytes(d.hi..end);
            stats.already_placed_bytes += self.placed.placed_within(d.lo as u64..d.hi as u64);
        }
        if !d.writes() {
            return (0..0, seq_offset);
        }
        // The rule checked `can_insert`; nothing changed since.
        let _ = self.placed.insert(d.gap.clone(), self.floor);
        stats.placed_bytes += d.gap.end - d.gap.start;
        (d.gap, seq_offset)
    }
}

#[cfg(test)]
mod tests;
