//! The receive side of the datapath, modelled: where would a segment's
//! payload have been written?
//!
//! The datapath maps a segment's sequence number to a receive-stream offset
//! (offset 0 is the byte after the peer's SYN, so offset = seq − (IRS + 1)
//! modulo 2^32, RFC 9293 3.4), and writes only the part that lies inside
//! posted receive space at or above the placement floor (the end of the last
//! completed receive segment). That part is the segment's `accepted` range;
//! the rest of the payload is dropped and counted.

use core::ops::Range;

use crate::segment::TcpHeader;
use proto::SeqNum;

/// Counters of what placement did with payload bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementStats {
    /// Bytes written into posted space (including rewrites of bytes already
    /// there, e.g. from duplicates and retransmissions above the floor).
    pub placed_bytes: u64,
    /// Bytes dropped because they lay beyond the posted receive space.
    pub beyond_posted_bytes: u64,
    /// Bytes dropped because they lay below the placement floor.
    pub below_floor_bytes: u64,
    /// Segments with payload that arrived before any SYN told us the IRS.
    pub before_syn_segments: u64,
}

/// Receive-side placement state of one endpoint.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    irs: Option<u32>,
    floor: u64,
    posted_end: u64,
    stats: PlacementStats,
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
        // The floor's sequence number is the reference, as in the
        // datapath's `placement::stream_offset`.
        let floor_seq = SeqNum::from_offset(SeqNum(irs.wrapping_add(1)), self.floor);
        SeqNum(seq).to_offset(self.floor, floor_seq)
    }

    /// Places the payload of a segment with `header` and `len` payload
    /// bytes; returns the accepted receive-stream range (empty if nothing was
    /// placed) and the stream offset the segment's sequence number maps to.
    pub fn place(&mut self, header: &TcpHeader, len: u64) -> (Range<u64>, Option<u64>) {
        if len == 0 {
            return (0..0, self.stream_offset(header.seq));
        }
        // Payload starts after the SYN's own sequence number when both ride
        // in one segment (RFC 9293 3.4).
        let seq = if header.flags.contains(crate::segment::Flags::SYN) {
            header.seq.wrapping_add(1)
        } else {
            header.seq
        };
        let Some(start) = self.stream_offset(seq) else {
            if self.irs.is_none() {
                self.stats.before_syn_segments += 1;
            } else {
                self.stats.below_floor_bytes += len;
            }
            return (0..0, None);
        };
        let end = start.saturating_add(len);
        let lo = start.max(self.floor);
        let hi = end.min(self.posted_end);
        self.stats.below_floor_bytes += lo.min(end) - start;
        self.stats.beyond_posted_bytes += end - hi.max(start);
        if lo < hi {
            self.stats.placed_bytes += hi - lo;
            (lo..hi, Some(start))
        } else {
            (0..0, Some(start))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(seq: u32) -> TcpHeader {
        TcpHeader {
            urgent: 0,
            seq,
            ..TcpHeader::default()
        }
    }

    #[test]
    fn clips_to_floor_and_posted_end() {
        let mut p = Placement::default();
        p.observe_syn(999);
        p.post(3000);
        // Offsets 0..1000.
        assert_eq!(p.place(&header(1000), 1000).0, 0..1000);
        // 2500..3500 is half beyond posted space.
        assert_eq!(p.place(&header(3500), 1000).0, 2500..3000);
        assert_eq!(p.stats().beyond_posted_bytes, 500);
        p.complete_to(1000);
        // 500..1500: the first half is below the floor.
        assert_eq!(p.place(&header(1500), 1000).0, 1000..1500);
        assert_eq!(p.stats().below_floor_bytes, 500);
        // Entirely beyond.
        assert!(p.place(&header(5000), 100).0.is_empty());
        assert_eq!(p.stats().placed_bytes, 1000 + 500 + 500);
    }

    #[test]
    fn handles_sequence_wrap() {
        let mut p = Placement::default();
        p.observe_syn(u32::MAX - 10);
        p.post(1 << 40);
        // IRS + 1 = u32::MAX - 9 is offset 0; seq 5 is offset 15.
        assert_eq!(p.stream_offset(5), Some(15));
        // Deep into the stream, past several wraps.
        p.complete_to(5 << 32);
        let seq = (u32::MAX - 9).wrapping_add(100);
        assert_eq!(p.stream_offset(seq), Some((5 << 32) + 100));
    }

    #[test]
    fn nothing_placed_before_syn() {
        let mut p = Placement::default();
        p.post(1000);
        assert!(p.place(&header(1), 10).0.is_empty());
        assert_eq!(p.stats().before_syn_segments, 1);
    }
}
