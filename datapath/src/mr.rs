//! The memory-region table: which parts of the payload area the application
//! registered, for which directions, and how many posted segments still
//! reference each region.
//!
//! The area itself (a part of the UMEM in production, a `Vec<u8>` in tests)
//! is not owned here; regions are offsets into it. Regions never overlap, and
//! a region referenced by a posted segment cannot be deregistered.

use core::ops::Range;

/// Access rights of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// The region may receive payload (RX placement writes into it).
    pub const RECV: Access = Access(1);
    /// The region may be sent from (TX reads from it).
    pub const SEND: Access = Access(2);
    /// Both directions.
    pub const BOTH: Access = Access(3);

    /// Whether every right in `other` is granted by `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Handle to a registered region, checked by generation so a stale handle to
/// a reused slot is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrId {
    index: u32,
    generation: u32,
}

impl MrId {
    /// The slot index (for display and metrics).
    pub const fn index(self) -> u32 {
        self.index
    }

    /// The handle as one integer (index in the low half, generation in
    /// the high half), for a handle that crosses a process boundary.
    pub const fn to_bits(self) -> u64 {
        (self.generation as u64) << 32 | self.index as u64
    }

    /// The handle [`Self::to_bits`] gave. Any integer makes a handle; the
    /// table refuses one it did not hand out.
    pub const fn from_bits(bits: u64) -> MrId {
        MrId {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

/// Errors from the region table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MrError {
    /// The requested range does not lie inside the area.
    #[error("region {offset}+{len} lies outside the {area_len}-byte area")]
    OutOfArea {
        /// Requested offset.
        offset: usize,
        /// Requested length.
        len: usize,
        /// Area length.
        area_len: usize,
    },
    /// Zero-length regions are refused.
    #[error("zero-length region at offset {offset}")]
    Empty {
        /// Requested offset.
        offset: usize,
    },
    /// The range overlaps a registered region.
    #[error("region {offset}+{len} overlaps registered region {other:?}")]
    Overlap {
        /// Requested offset.
        offset: usize,
        /// Requested length.
        len: usize,
        /// The region it overlaps.
        other: MrId,
    },
    /// All region slots are in use.
    #[error("region table full ({max} regions)")]
    TableFull {
        /// Capacity.
        max: usize,
    },
    /// The id is unknown or stale.
    #[error("unknown or stale region {0:?}")]
    UnknownRegion(MrId),
    /// The region is still referenced by posted segments.
    #[error("region {id:?} still referenced by {refs} posted segment(s)")]
    InUse {
        /// Region.
        id: MrId,
        /// Outstanding references.
        refs: u32,
    },
    /// A sub-range does not lie inside the region.
    #[error("range {offset}+{len} outside region {id:?} of {region_len} bytes")]
    OutOfRegion {
        /// Region.
        id: MrId,
        /// Offset inside the region.
        offset: usize,
        /// Length.
        len: usize,
        /// Region length.
        region_len: usize,
    },
    /// The region lacks the needed access right.
    #[error("region {id:?} lacks access {needed:?}")]
    AccessDenied {
        /// Region.
        id: MrId,
        /// The missing rights.
        needed: Access,
    },
    /// No free gap of the requested size and alignment.
    #[error("no free gap of {len} bytes aligned to {align}")]
    NoSpace {
        /// Requested length.
        len: usize,
        /// Requested alignment.
        align: usize,
    },
    /// Alignment not a nonzero power of two.
    #[error("alignment {align} is not a power of two")]
    BadAlign {
        /// Requested alignment.
        align: usize,
    },
}

#[derive(Debug, Clone)]
struct Region {
    offset: usize,
    len: usize,
    access: Access,
    refs: u32,
}

#[derive(Debug, Clone)]
struct Slot {
    generation: u32,
    region: Option<Region>,
}

/// The memory-region table over an area of `area_len` bytes.
#[derive(Debug, Clone)]
pub struct MrTable {
    area_len: usize,
    slots: Vec<Slot>,
}

impl MrTable {
    /// An empty table for an area of `area_len` bytes holding at most
    /// `max_regions` regions.
    pub fn new(area_len: usize, max_regions: usize) -> Self {
        MrTable {
            area_len,
            slots: (0..max_regions)
                .map(|_| Slot {
                    generation: 0,
                    region: None,
                })
                .collect(),
        }
    }

    /// Length of the area.
    pub fn area_len(&self) -> usize {
        self.area_len
    }

    /// Registers `[offset, offset+len)` of the area.
    ///
    /// # Errors
    /// `Empty`, `OutOfArea`, `Overlap` or `TableFull`.
    pub fn register(&mut self, offset: usize, len: usize, access: Access) -> Result<MrId, MrError> {
        if len == 0 {
            return Err(MrError::Empty { offset });
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.area_len)
            .ok_or(MrError::OutOfArea {
                offset,
                len,
                area_len: self.area_len,
            })?;
        if let Some(other) = self.overlapping(offset..end) {
            return Err(MrError::Overlap { offset, len, other });
        }
        let max = self.slots.len();
        let (index, slot) = self
            .slots
            .iter_mut()
            .enumerate()
            .find(|(_, s)| s.region.is_none())
            .ok_or(MrError::TableFull { max })?;
        slot.region = Some(Region {
            offset,
            len,
            access,
            refs: 0,
        });
        Ok(MrId {
            index: index as u32,
            generation: slot.generation,
        })
    }

    /// A registered region overlapping `range` of the area, if any (the
    /// daemon zeroes a memory slot for reuse only when none is left).
    pub fn overlapping(&self, range: Range<usize>) -> Option<MrId> {
        self.slots.iter().enumerate().find_map(|(i, s)| {
            let r = s.region.as_ref()?;
            (range.start < r.offset + r.len && r.offset < range.end).then_some(MrId {
                index: i as u32,
                generation: s.generation,
            })
        })
    }

    fn region(&self, id: MrId) -> Result<&Region, MrError> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.region.as_ref())
            .ok_or(MrError::UnknownRegion(id))
    }

    fn region_mut(&mut self, id: MrId) -> Result<&mut Region, MrError> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.region.as_mut())
            .ok_or(MrError::UnknownRegion(id))
    }

    /// Removes a region that no posted segment references.
    ///
    /// # Errors
    /// `UnknownRegion` or `InUse`.
    pub fn deregister(&mut self, id: MrId) -> Result<(), MrError> {
        let refs = self.region(id)?.refs;
        if refs > 0 {
            return Err(MrError::InUse { id, refs });
        }
        let slot = &mut self.slots[id.index as usize];
        slot.region = None;
        slot.generation = slot.generation.wrapping_add(1);
        Ok(())
    }

    /// The area range of `[off, off+len)` inside region `id`, if the region
    /// grants `access`.
    ///
    /// # Errors
    /// `UnknownRegion`, `AccessDenied` or `OutOfRegion`.
    pub fn resolve(
        &self,
        id: MrId,
        off: usize,
        len: usize,
        access: Access,
    ) -> Result<Range<usize>, MrError> {
        let r = self.region(id)?;
        if !r.access.contains(access) {
            return Err(MrError::AccessDenied { id, needed: access });
        }
        let out = MrError::OutOfRegion {
            id,
            offset: off,
            len,
            region_len: r.len,
        };
        let end = off.checked_add(len).ok_or(out.clone())?;
        if end > r.len {
            return Err(out);
        }
        Ok(r.offset + off..r.offset + end)
    }

    /// Where a region lies in the area: (offset, length).
    ///
    /// # Errors
    /// `UnknownRegion`.
    pub fn extent(&self, id: MrId) -> Result<(usize, usize), MrError> {
        let r = self.region(id)?;
        Ok((r.offset, r.len))
    }

    /// Takes a reference on a region (a segment was posted on it).
    ///
    /// # Errors
    /// `UnknownRegion`.
    pub fn acquire(&mut self, id: MrId) -> Result<(), MrError> {
        let r = self.region_mut(id)?;
        r.refs = r.refs.saturating_add(1);
        Ok(())
    }

    /// Drops a reference taken by [`MrTable::acquire`].
    ///
    /// # Errors
    /// `UnknownRegion`.
    pub fn release(&mut self, id: MrId) -> Result<(), MrError> {
        let r = self.region_mut(id)?;
        r.refs = r.refs.saturating_sub(1);
        Ok(())
    }

    /// Number of posted segments referencing `id`.
    ///
    /// # Errors
    /// `UnknownRegion`.
    pub fn refs(&self, id: MrId) -> Result<u32, MrError> {
        Ok(self.region(id)?.refs)
    }

    /// First-fit search for a free gap of `len` bytes at an offset aligned to
    /// `align` (a power of two); returns the offset, which the caller then
    /// registers.
    ///
    /// # Errors
    /// `Empty`, `BadAlign` or `NoSpace`.
    pub fn allocate(&self, len: usize, align: usize) -> Result<usize, MrError> {
        self.allocate_in(0..self.area_len, len, align)
    }

    /// [`MrTable::allocate`] inside `range` of the area only (an
    /// application's memory slot): the gap found lies wholly in `range`.
    /// The alignment is of the area offset.
    ///
    /// # Errors
    /// `Empty`, `BadAlign`, `OutOfArea` (the range is reversed or beyond
    /// the area) or `NoSpace`.
    pub fn allocate_in(
        &self,
        range: Range<usize>,
        len: usize,
        align: usize,
    ) -> Result<usize, MrError> {
        if len == 0 {
            return Err(MrError::Empty { offset: 0 });
        }
        if !align.is_power_of_two() {
            return Err(MrError::BadAlign { align });
        }
        if range.start > range.end || range.end > self.area_len {
            return Err(MrError::OutOfArea {
                offset: range.start,
                len: range.end.saturating_sub(range.start),
                area_len: self.area_len,
            });
        }
        let mut used: Vec<(usize, usize)> = self
            .slots
            .iter()
            .filter_map(|s| s.region.as_ref().map(|r| (r.offset, r.offset + r.len)))
            .filter(|&(start, end)| start < range.end && end > range.start)
            .collect();
        used.sort_unstable();
        let mut cursor = range.start;
        for (gap_end, next) in used.iter().copied().chain([(range.end, range.end)]) {
            if let Some(start) = cursor.checked_next_multiple_of(align) {
                if start.checked_add(len).is_some_and(|e| e <= gap_end) {
                    return Ok(start);
                }
            }
            cursor = cursor.max(next);
        }
        Err(MrError::NoSpace { len, align })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_bounds_and_overlap() {
        let mut t = MrTable::new(1000, 4);
        let a = t.register(0, 100, Access::RECV).expect("fits");
        assert!(matches!(
            t.register(99, 10, Access::RECV),
            Err(MrError::Overlap { other, .. }) if other == a
        ));
        t.register(100, 100, Access::SEND)
            .expect("adjacent is fine");
        assert!(matches!(
            t.register(990, 11, Access::RECV),
            Err(MrError::OutOfArea { .. })
        ));
        assert!(matches!(
            t.register(usize::MAX, 2, Access::RECV),
            Err(MrError::OutOfArea { .. })
        ));
        assert_eq!(
            t.register(500, 0, Access::RECV),
            Err(MrError::Empty { offset: 500 })
        );
        t.register(300, 1, Access::RECV).expect("third");
        t.register(400, 1, Access::RECV).expect("fourth");
        assert_eq!(
            t.register(600, 1, Access::RECV),
            Err(MrError::TableFull { max: 4 })
        );
    }

    #[test]
    fn resolve_checks_access_and_bounds() {
        let mut t = MrTable::new(1000, 4);
        let a = t.register(200, 100, Access::RECV).expect("fits");
        assert_eq!(t.resolve(a, 10, 20, Access::RECV), Ok(210..230));
        assert_eq!(t.resolve(a, 0, 100, Access::RECV), Ok(200..300));
        assert!(matches!(
            t.resolve(a, 90, 11, Access::RECV),
            Err(MrError::OutOfRegion { .. })
        ));
        assert!(matches!(
            t.resolve(a, usize::MAX, 2, Access::RECV),
            Err(MrError::OutOfRegion { .. })
        ));
        assert!(matches!(
            t.resolve(a, 0, 1, Access::SEND),
            Err(MrError::AccessDenied { .. })
        ));
    }

    #[test]
    fn deregister_refused_while_referenced_and_stale_ids_fail() {
        let mut t = MrTable::new(1000, 2);
        let a = t.register(0, 100, Access::BOTH).expect("fits");
        t.acquire(a).expect("known");
        assert_eq!(t.deregister(a), Err(MrError::InUse { id: a, refs: 1 }));
        t.release(a).expect("known");
        t.deregister(a).expect("unreferenced");
        assert_eq!(
            t.resolve(a, 0, 1, Access::RECV),
            Err(MrError::UnknownRegion(a))
        );
        let b = t.register(0, 100, Access::BOTH).expect("slot reused");
        assert_eq!(b.index(), a.index());
        assert_eq!(t.deregister(a), Err(MrError::UnknownRegion(a)));
        assert_eq!(t.refs(b), Ok(0));
    }

    #[test]
    fn allocate_first_fit_with_alignment() {
        let mut t = MrTable::new(10_000, 8);
        assert_eq!(t.allocate(100, 64), Ok(0));
        t.register(0, 100, Access::RECV).expect("fits");
        assert_eq!(t.allocate(100, 64), Ok(128));
        t.register(300, 5000, Access::RECV).expect("fits");
        // Gap 100..300: 128..228 fits; 200 bytes at 128 would not.
        assert_eq!(t.allocate(172, 64), Ok(128));
        assert_eq!(t.allocate(200, 64), Ok(5312));
        assert_eq!(
            t.allocate(9000, 1),
            Err(MrError::NoSpace {
                len: 9000,
                align: 1
            })
        );
        assert_eq!(t.allocate(1, 3), Err(MrError::BadAlign { align: 3 }));
    }

    #[test]
    fn allocate_in_stays_inside_its_range() {
        let mut t = MrTable::new(16_384, 8);
        // Slot 1 of 4096-byte slots is 4096..8192.
        assert_eq!(t.allocate_in(4096..8192, 100, 64), Ok(4096));
        t.register(4096, 100, Access::RECV).expect("fits");
        assert_eq!(t.allocate_in(4096..8192, 100, 64), Ok(4224));
        // A region straddling the range's start counts as used.
        t.register(8150, 100, Access::RECV).expect("fits");
        assert_eq!(t.allocate_in(8192..12_288, 64, 64), Ok(8256));
        // A region before the range does not push the search.
        t.register(0, 4000, Access::RECV).expect("fits");
        assert_eq!(t.allocate_in(12_288..16_384, 4096, 4096), Ok(12_288));
        // Nothing spills over the range's end, even when the area has room.
        assert_eq!(
            t.allocate_in(4096..8192, 4000, 64),
            Err(MrError::NoSpace {
                len: 4000,
                align: 64
            })
        );
        assert_eq!(
            t.allocate_in(4096..8192, 3904, 64),
            Ok(4224),
            "up to the straddler"
        );
        assert!(t.allocate_in(4096..8192, 3927, 64).is_err());
        assert!(matches!(
            t.allocate_in(8192..20_000, 1, 1),
            Err(MrError::OutOfArea { .. })
        ));
        let (start, end) = (8192, 4096);
        assert!(matches!(
            t.allocate_in(start..end, 1, 1),
            Err(MrError::OutOfArea { .. })
        ));
        assert_eq!(t.overlapping(4000..4096), None);
        assert!(t.overlapping(3999..4096).is_some());
    }
}
