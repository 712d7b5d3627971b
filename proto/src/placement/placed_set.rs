//! The ranges of a flow's receive stream already placed (by the datapath:
//! by segments whose checksum verified): placement writes only into the
//! gaps between them.

use core::ops::Range;

/// Stream ranges above the floor already placed with a verified checksum:
/// sorted, disjoint, non-adjacent, at most `max` of them.
#[derive(Debug, Clone)]
pub struct PlacedSet {
    ranges: Vec<(u64, u64)>,
    max: usize,
}

impl PlacedSet {
    /// An empty set tracking at most `max` disjoint ranges (at least 2:
    /// one is kept for the in-order range at the floor).
    pub fn new(max: usize) -> Self {
        let max = max.max(2);
        PlacedSet {
            // Grows as ranges appear; `max` bounds it.
            ranges: Vec::with_capacity(max.min(8)),
            max,
        }
    }

    /// The ranges, sorted.
    pub fn ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.ranges.iter().map(|&(s, e)| s..e)
    }

    /// Whether `r` is entirely placed.
    pub fn contains(&self, r: Range<u64>) -> bool {
        if r.start >= r.end {
            return true;
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= r.start);
        self.ranges
            .get(i)
            .is_some_and(|&(s, e)| s <= r.start && r.end <= e)
    }

    /// How many bytes of `r` are already placed.
    pub fn placed_within(&self, r: Range<u64>) -> u64 {
        if r.start >= r.end {
            return 0;
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= r.start);
        self.ranges[i..]
            .iter()
            .take_while(|&&(s, _)| s < r.end)
            .map(|&(s, e)| e.min(r.end) - s.max(r.start))
            .sum()
    }

    /// The first run of `window` not placed yet (empty at `window.end` if
    /// it is all placed).
    pub fn first_gap(&self, window: Range<u64>) -> Range<u64> {
        let mut pos = window.start;
        for &(s, e) in &self.ranges {
            if e <= pos {
                continue;
            }
            if s >= window.end {
                break;
            }
            if pos < s {
                return pos..s;
            }
            pos = e;
            if pos >= window.end {
                return window.end..window.end;
            }
        }
        pos..window.end
    }

    /// Whether inserting `r` would keep the set within its bound. One slot
    /// is kept for the in-order range at `floor`, so out-of-order ranges use
    /// at most `max - 1` slots and the in-order segment is never refused.
    pub fn can_insert(&self, r: Range<u64>, floor: u64) -> bool {
        if r.start >= r.end {
            return true;
        }
        let i = self.ranges.partition_point(|&(_, e)| e < r.start);
        if self.ranges.get(i).is_some_and(|&(s, _)| s <= r.end) {
            return true; // merges with an existing range
        }
        let limit = if r.start <= floor {
            self.max
        } else {
            self.max - 1
        };
        self.ranges.len() < limit
    }

    /// Adds `r`, merging with overlapping or adjacent ranges. Returns
    /// `false` (and changes nothing) if [`PlacedSet::can_insert`] refuses.
    pub fn insert(&mut self, r: Range<u64>, floor: u64) -> bool {
        if r.start >= r.end {
            return true;
        }
        if !self.can_insert(r.clone(), floor) {
            return false;
        }
        let i = self.ranges.partition_point(|&(_, e)| e < r.start);
        let j = self.ranges.partition_point(|&(s, _)| s <= r.end);
        if i == j {
            self.ranges.insert(i, (r.start, r.end));
        } else {
            // Merge ranges i..j into slot i; the in-order case (extending
            // the one range at the floor) touches only that slot.
            let e = r.end.max(self.ranges[j - 1].1);
            let first = &mut self.ranges[i];
            first.0 = first.0.min(r.start);
            first.1 = e;
            self.ranges.drain(i + 1..j);
        }
        true
    }

    /// Forgets `r` above `floor` (the transport refused the bytes placed
    /// there); returns how many placed bytes were forgotten. Cutting a
    /// range in two may hold one range more than the bound: such a range
    /// was one before only because `r` filled the gap between two, so the
    /// excess is at most the number of refusals still on their way.
    pub fn remove(&mut self, r: Range<u64>, floor: u64) -> u64 {
        let (start, end) = (r.start.max(floor), r.end);
        if start >= end {
            return 0;
        }
        let mut removed = 0;
        let mut kept = Vec::with_capacity(2);
        let i = self.ranges.partition_point(|&(_, e)| e <= start);
        let j = self.ranges.partition_point(|&(s, _)| s < end);
        for &(s, e) in &self.ranges[i..j] {
            removed += e.min(end) - s.max(start);
            if s < start {
                kept.push((s, start));
            }
            if e > end {
                kept.push((end, e));
            }
        }
        self.ranges.splice(i..j, kept);
        removed
    }

    /// Drops everything below `floor`.
    pub fn prune(&mut self, floor: u64) {
        let k = self.ranges.partition_point(|&(_, e)| e <= floor);
        self.ranges.drain(..k);
        if let Some(first) = self.ranges.first_mut() {
            first.0 = first.0.max(floor);
        }
    }

    /// Number of disjoint ranges held.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_set_merges_bounds_and_prunes() {
        let mut s = PlacedSet::new(3);
        assert!(s.insert(10..20, 0));
        assert!(s.insert(30..40, 0));
        assert!(!s.can_insert(50..60, 0), "last slot kept for the floor");
        assert!(!s.insert(50..60, 0));
        assert!(s.insert(0..5, 0), "in-order range uses the kept slot");
        assert!(!s.insert(7..8, 0), "full");
        assert!(s.insert(5..10, 0), "merging is allowed when full");
        assert!(s.insert(20..30, 0));
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![0..40]);
        assert!(s.insert(50..60, 0));
        assert!(s.insert(45..55, 0));
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![0..40, 45..60]);
        assert!(s.contains(46..60));
        assert_eq!(s.placed_within(30..50), 15, "10 of 0..40, 5 of 45..60");
        assert_eq!(s.placed_within(40..45), 0);
        assert_eq!(s.placed_within(50..50), 0);
        assert!(!s.contains(39..46));
        assert!(s.insert(0..100, 0));
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![0..100]);
        assert!(s.contains(5..100));
        assert!(!s.contains(5..101));
        s.prune(50);
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![50..100]);
        s.prune(100);
        assert!(s.is_empty());
    }

    #[test]
    fn removing_cuts_ranges_and_counts_only_placed_bytes() {
        let mut s = PlacedSet::new(4);
        assert!(s.insert(10..20, 10));
        assert!(s.insert(30..40, 10));
        assert!(s.insert(20..30, 10), "fills the gap: one range");
        assert_eq!(s.remove(20..30, 10), 10, "a refused middle is cut out");
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![10..20, 30..40]);
        assert_eq!(s.remove(15..35, 10), 10, "only placed bytes count");
        assert_eq!(s.ranges().collect::<Vec<_>>(), vec![10..15, 35..40]);
        assert_eq!(s.remove(0..12, 12), 0, "nothing below the floor");
        assert_eq!(s.remove(50..60, 10), 0);
        assert_eq!(s.remove(0..100, 0), 10);
        assert!(s.is_empty());
    }
}
