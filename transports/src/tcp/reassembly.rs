//! The receive side without bytes: which receive-stream ranges have arrived.
//!
//! The datapath has already written the payload where it belongs; all the
//! connection needs is the in-order point (`rcv_nxt`) and the out-of-order
//! ranges above it, from which it builds SACK blocks (RFC 2018 4).

use core::ops::Range;

/// Out-of-order ranges kept at most. More would only add SACK information
/// the option cannot carry; when exceeded the highest range is forgotten
/// (reported, so the datapath forgets it too and the retransmission is
/// placed again).
const MAX_BLOCKS: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    start: u64,
    end: u64,
    /// Recency: larger is newer.
    stamp: u64,
}

/// What inserting one range did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inserted {
    /// The in-order point after the insert.
    pub rcv_nxt: u64,
    /// The range landed above the in-order point (a hole remains).
    pub out_of_order: bool,
    /// The range filled (part of) a hole: out-of-order data existed before.
    pub filled_hole: bool,
    /// Bytes not seen before.
    pub new_bytes: u64,
    /// The highest out-of-order range, forgotten because more ranges than
    /// can be tracked were held.
    pub forgotten: Option<Range<u64>>,
}

/// Out-of-order receive ranges above the in-order point.
#[derive(Debug, Clone, Default)]
pub struct Reassembly {
    /// Sorted by start, disjoint and not adjacent.
    blocks: Vec<Block>,
    counter: u64,
}

impl Reassembly {
    /// Records that `range` (receive-stream offsets) arrived, given the
    /// current in-order point `rcv_nxt`.
    pub fn insert(&mut self, rcv_nxt: u64, range: Range<u64>) -> Inserted {
        let had_holes = !self.blocks.is_empty();
        let start = range.start.max(rcv_nxt);
        let end = range.end;
        let mut out = Inserted {
            rcv_nxt,
            ..Inserted::default()
        };
        if start >= end {
            return out;
        }
        let covered: u64 = self
            .blocks
            .iter()
            .map(|b| b.end.min(end).saturating_sub(b.start.max(start)))
            .sum();
        out.new_bytes = (end - start) - covered;
        self.counter += 1;
        // Merge every block overlapping or adjacent to [start, end).
        let mut merged = Block {
            start,
            end,
            stamp: self.counter,
        };
        self.blocks.retain(|b| {
            if b.end < merged.start || b.start > merged.end {
                true
            } else {
                merged.start = merged.start.min(b.start);
                merged.end = merged.end.max(b.end);
                false
            }
        });
        let pos = self.blocks.partition_point(|b| b.start < merged.start);
        self.blocks.insert(pos, merged);
        // Advance the in-order point through blocks that now touch it.
        let mut nxt = rcv_nxt;
        while let Some(first) = self.blocks.first() {
            if first.start > nxt {
                break;
            }
            nxt = nxt.max(first.end);
            self.blocks.remove(0);
        }
        if self.blocks.len() > MAX_BLOCKS {
            out.forgotten = self.blocks.pop().map(|b| b.start..b.end);
        }
        out.rcv_nxt = nxt;
        out.out_of_order = nxt == rcv_nxt;
        out.filled_hole = had_holes && nxt > rcv_nxt;
        out
    }

    /// Whether any out-of-order data is held.
    pub fn has_holes(&self) -> bool {
        !self.blocks.is_empty()
    }

    /// Up to `max` SACK blocks, most recently changed first (RFC 2018 4).
    pub fn sack_blocks(&self, max: usize) -> Vec<Range<u64>> {
        let mut v: Vec<&Block> = self.blocks.iter().collect();
        v.sort_by_key(|b| core::cmp::Reverse(b.stamp));
        v.into_iter().take(max).map(|b| b.start..b.end).collect()
    }

    /// Forgets everything (the connection closed).
    pub fn clear(&mut self) {
        self.blocks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_advances_and_holes_fill() {
        let mut r = Reassembly::default();
        let a = r.insert(0, 0..100);
        assert_eq!((a.rcv_nxt, a.out_of_order, a.new_bytes), (100, false, 100));
        let b = r.insert(100, 200..300);
        assert!(b.out_of_order && b.rcv_nxt == 100);
        let c = r.insert(100, 400..500);
        assert_eq!(r.sack_blocks(4), vec![400..500, 200..300]);
        assert!(c.out_of_order);
        // Re-receiving an old block makes it most recent.
        let d = r.insert(100, 250..300);
        assert_eq!(d.new_bytes, 0);
        assert_eq!(r.sack_blocks(4), vec![200..300, 400..500]);
        let e = r.insert(100, 100..200);
        assert_eq!((e.rcv_nxt, e.filled_hole), (300, true));
        assert_eq!(r.sack_blocks(4), vec![400..500]);
        let f = r.insert(300, 300..450);
        assert_eq!((f.rcv_nxt, f.new_bytes), (500, 100));
        assert!(!r.has_holes());
    }

    #[test]
    fn adjacent_ranges_merge() {
        let mut r = Reassembly::default();
        r.insert(0, 10..20);
        r.insert(0, 30..40);
        r.insert(0, 20..30);
        assert_eq!(r.sack_blocks(4), vec![10..40]);
    }
}
