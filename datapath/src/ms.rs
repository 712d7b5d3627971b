//! Memory-segment lists: per flow and direction, the posted work requests in
//! stream order. Each post appends `len` bytes of stream space backed by a
//! piece of a registered region; together the segments map the stream range
//! `[floor, posted_end)` onto area memory.
//!
//! Segments are retired (removed, so nothing can write to them any more)
//! before their completions are handed out: the caller posts completions to
//! the application only after [`SegmentList::retire_through`] returned them.
//!
//! A send segment is retired only when the peer acknowledged it AND no TX
//! descriptor still points at its memory
//! ([`SegmentList::retire_sent_through`]): a zero-copy chain's fragments
//! are read by the kernel until their completions come back, whatever the
//! peer says. Acknowledged segments still read wait at the front of the
//! list (the floor has passed them, so nothing new is sent from them) and
//! are retired, in order, by a later call once their descriptors came back.

use core::ops::Range;
use std::collections::VecDeque;

use crate::mr::{Access, MrError, MrId, MrTable};

/// A posted segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedSegment {
    /// First stream offset the segment covers.
    pub stream_start: u64,
    /// Length in bytes.
    pub len: u64,
    /// Region the memory belongs to.
    pub mr: MrId,
    /// First area offset of the memory.
    pub area_start: usize,
    /// The application's work-request id.
    pub wr_id: u64,
}

impl PostedSegment {
    /// One past the last stream offset covered.
    pub const fn stream_end(&self) -> u64 {
        self.stream_start + self.len
    }
}

/// A completed work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The application's work-request id.
    pub wr_id: u64,
    /// Bytes completed.
    pub len: u64,
}

/// Errors from segment lists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsError {
    /// The list holds its maximum number of segments.
    #[error("segment list full ({max} segments posted)")]
    Full {
        /// Capacity.
        max: usize,
    },
    /// Zero-length post.
    #[error("zero-length post (wr_id {wr_id})")]
    Empty {
        /// The work request.
        wr_id: u64,
    },
    /// The memory could not be resolved in the region table.
    #[error("posting wr_id {wr_id}: {source}")]
    Region {
        /// The work request.
        wr_id: u64,
        /// What the region table said.
        source: MrError,
    },
    /// A re-home names no new region for memory a segment lies in.
    #[error("segment of wr_id {wr_id} lies in region {mr}, which the move does not name")]
    NotMoved {
        /// The work request.
        wr_id: u64,
        /// Its region.
        mr: u32,
    },
    /// Retirement asked beyond the posted end.
    #[error("retire through {offset} beyond posted end {posted_end}")]
    BeyondPosted {
        /// Requested offset.
        offset: u64,
        /// Posted end.
        posted_end: u64,
    },
}

/// A region a flow's memory moves out of and the region taking its place
/// ([`SegmentList::rehome`]): a byte at offset `x` of `from` is at offset
/// `x` of `to` after the move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrMove {
    /// The region left.
    pub from: MrId,
    /// The region taken up.
    pub to: MrId,
}

/// Room a new [`SegmentList`] reserves before it grows.
const INITIAL_SEGMENTS: usize = 16;

/// The posted segments of one flow direction.
#[derive(Debug, Clone)]
pub struct SegmentList {
    segs: VecDeque<PostedSegment>,
    max: usize,
    access: Access,
    floor: u64,
    end: u64,
    /// Send lists: the stream offset below which every byte's memory is
    /// back with the application (acknowledged and no descriptor reads it).
    released: u64,
}

impl SegmentList {
    /// An empty list that accepts at most `max` outstanding segments, each
    /// of which must grant `access` (`RECV` for receive, `SEND` for send).
    pub fn new(max: usize, access: Access) -> Self {
        SegmentList {
            // Grows as segments are posted: `max` bounds it, and most flows
            // never post that many.
            segs: VecDeque::with_capacity(max.min(INITIAL_SEGMENTS)),
            max,
            access,
            floor: 0,
            end: 0,
            released: 0,
        }
    }

    /// Appends `len` bytes at `offset` inside region `mr` at the current
    /// posted end, takes a reference on the region, and returns the stream
    /// range the segment covers.
    ///
    /// # Errors
    /// `Full`, `Empty` or `Region` (unknown region, access, bounds).
    pub fn post(
        &mut self,
        mrs: &mut MrTable,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<Range<u64>, MsError> {
        if self.segs.len() >= self.max {
            return Err(MsError::Full { max: self.max });
        }
        if len == 0 {
            return Err(MsError::Empty { wr_id });
        }
        let area = mrs
            .resolve(mr, offset, len, self.access)
            .map_err(|source| MsError::Region { wr_id, source })?;
        mrs.acquire(mr)
            .map_err(|source| MsError::Region { wr_id, source })?;
        let start = self.end;
        self.end += len as u64;
        self.segs.push_back(PostedSegment {
            stream_start: start,
            len: len as u64,
            mr,
            area_start: area.start,
            wr_id,
        });
        Ok(start..self.end)
    }

    /// One past the last posted stream offset.
    pub fn posted_end(&self) -> u64 {
        self.end
    }

    /// The first stream offset not yet retired.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Number of outstanding segments.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether no segment is outstanding.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// The outstanding segments in stream order.
    pub fn segments(&self) -> impl Iterator<Item = &PostedSegment> {
        self.segs.iter()
    }

    /// Maps the part of `range` inside `[floor, posted_end)` to area memory,
    /// one `(stream part, area range)` per segment touched, in stream order.
    pub fn map(&self, range: Range<u64>) -> MapIter<'_> {
        let start = range.start.max(self.floor);
        let end = range.end.min(self.end);
        let idx = self.segs.partition_point(|s| s.stream_end() <= start);
        MapIter {
            list: self,
            idx,
            pos: start,
            end,
        }
    }

    /// Retires every segment that ends at or before `offset`, moves the
    /// floor to `offset`, releases the regions' references and returns the
    /// completions in order. Nothing can be mapped below the floor after this
    /// returns.
    ///
    /// # Errors
    /// `BeyondPosted` if `offset` exceeds the posted end (nothing changes).
    pub fn retire_through(
        &mut self,
        mrs: &mut MrTable,
        offset: u64,
    ) -> Result<Vec<Completion>, MsError> {
        if offset > self.end {
            return Err(MsError::BeyondPosted {
                offset,
                posted_end: self.end,
            });
        }
        if offset <= self.floor {
            return Ok(Vec::new());
        }
        self.floor = offset;
        let mut done = Vec::new();
        while let Some(s) = self.segs.front() {
            if s.stream_end() > offset {
                break;
            }
            let s = *s;
            self.segs.pop_front();
            // The region may be gone only if someone released our reference;
            // a completion is still owed to the application.
            let _ = mrs.release(s.mr);
            done.push(Completion {
                wr_id: s.wr_id,
                len: s.len,
            });
        }
        Ok(done)
    }
}

impl SegmentList {
    /// Drops every outstanding segment without completing it (nothing
    /// will be placed in them: the stream ended), releases the regions'
    /// references, and moves the floor to the posted end (nothing maps
    /// any more). Returns how many were dropped.
    pub fn drop_all(&mut self, mrs: &mut MrTable) -> usize {
        let n = self.segs.len();
        for s in self.segs.drain(..) {
            let _ = mrs.release(s.mr);
        }
        self.floor = self.end;
        n
    }
}

impl SegmentList {
    /// Send lists: the peer acknowledged the stream up to `offset`. Moves
    /// the floor there (nothing below it can be mapped, so nothing below it
    /// is sent again) and retires, in order, the segments that end at or
    /// below the floor and whose memory `in_flight` says no TX descriptor
    /// reads any more; releases their regions' references and returns
    /// their completions. A segment still read stops the retirement (and
    /// the ones after it wait too, completions being in order): call again
    /// (any `offset` at or below the floor) once descriptors completed.
    ///
    /// # Errors
    /// `BeyondPosted` if `offset` exceeds the posted end (nothing changes).
    pub fn retire_sent_through(
        &mut self,
        mrs: &mut MrTable,
        offset: u64,
        in_flight: impl Fn(Range<usize>) -> bool,
        out: &mut Vec<Completion>,
    ) -> Result<(), MsError> {
        if offset > self.end {
            return Err(MsError::BeyondPosted {
                offset,
                posted_end: self.end,
            });
        }
        self.floor = self.floor.max(offset);
        while let Some(&s) = self.segs.front() {
            if s.stream_end() > self.floor || in_flight(s.area_start..s.area_start + s.len as usize)
            {
                break;
            }
            self.segs.pop_front();
            // The region may be gone only if someone released our reference;
            // a completion is still owed to the application.
            let _ = mrs.release(s.mr);
            out.push(Completion {
                wr_id: s.wr_id,
                len: s.len,
            });
        }
        // The front segment may straddle the floor, or wait on its
        // descriptors: its acknowledged bytes are released once nothing
        // reads them. Bytes below the floor are never sent again, so the
        // point only moves up.
        let released = match self.segs.front() {
            Some(s) if s.stream_start < self.floor => {
                let below = (self.floor.min(s.stream_end()) - s.stream_start) as usize;
                if in_flight(s.area_start..s.area_start + below) {
                    s.stream_start
                } else {
                    self.floor
                }
            }
            _ => self.floor,
        };
        self.released = self.released.max(released);
        Ok(())
    }

    /// Send lists: the stream offset below which every byte is back with
    /// the application, as of the last [`SegmentList::retire_sent_through`].
    pub fn released(&self) -> u64 {
        self.released
    }

    /// Send lists: whether acknowledged bytes wait for TX descriptors that
    /// point at their memory (or share its chunk) to complete.
    pub fn retire_waiting(&self) -> bool {
        self.released < self.floor
    }

    /// Send lists: whether a whole acknowledged work request waits for its
    /// TX descriptors to complete.
    pub fn completion_waiting(&self) -> bool {
        self.segs
            .front()
            .is_some_and(|s| s.stream_end() <= self.floor)
    }
}

impl SegmentList {
    /// Whether [`SegmentList::rehome`] with `moves` would succeed: every
    /// segment lies in a region some move leaves, and the same place in
    /// the region it moves to exists and grants this list's access.
    /// Returns each segment's new region and area start, in order.
    ///
    /// # Errors
    /// `NotMoved`, or `Region` (a region unknown, the place out of bounds,
    /// or the access missing).
    pub fn check_rehome(
        &self,
        mrs: &MrTable,
        moves: &[MrMove],
    ) -> Result<Vec<(MrId, usize)>, MsError> {
        self.segs
            .iter()
            .map(|s| {
                let m = moves
                    .iter()
                    .find(|m| m.from == s.mr)
                    .ok_or(MsError::NotMoved {
                        wr_id: s.wr_id,
                        mr: s.mr.index(),
                    })?;
                let region = |source| MsError::Region {
                    wr_id: s.wr_id,
                    source,
                };
                let (from_start, _) = mrs.extent(m.from).map_err(region)?;
                let off = s.area_start - from_start;
                let area = mrs
                    .resolve(m.to, off, s.len as usize, self.access)
                    .map_err(region)?;
                Ok((m.to, area.start))
            })
            .collect()
    }

    /// Re-points every outstanding segment at the same place in the region
    /// its move names (the caller copies the bytes): a reference is taken
    /// on the new region per segment, and `old` is given each segment's
    /// old region and area to drop the reference it had (or keep it, while
    /// TX descriptors still read that memory). Stream offsets, the floor
    /// and what was placed do not change. Checks everything first
    /// ([`SegmentList::check_rehome`]): a refusal changes nothing.
    ///
    /// # Errors
    /// As [`SegmentList::check_rehome`].
    pub fn rehome(
        &mut self,
        mrs: &mut MrTable,
        moves: &[MrMove],
        mut old: impl FnMut(&mut MrTable, MrId, Range<usize>),
    ) -> Result<(), MsError> {
        let places = self.check_rehome(mrs, moves)?;
        for (s, (to, start)) in self.segs.iter_mut().zip(places) {
            // Cannot fail: `to` resolved in this same table just above.
            mrs.acquire(to).ok();
            let was = (s.mr, s.area_start..s.area_start + s.len as usize);
            s.mr = to;
            s.area_start = start;
            old(mrs, was.0, was.1);
        }
        Ok(())
    }
}

/// Iterator returned by [`SegmentList::map`].
#[derive(Debug)]
pub struct MapIter<'a> {
    list: &'a SegmentList,
    idx: usize,
    pos: u64,
    end: u64,
}

impl Iterator for MapIter<'_> {
    type Item = (Range<u64>, Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.end {
            return None;
        }
        let s = self.list.segs.get(self.idx)?;
        let part_end = s.stream_end().min(self.end);
        let a = s.area_start + (self.pos - s.stream_start) as usize;
        let item = (self.pos..part_end, a..a + (part_end - self.pos) as usize);
        self.pos = part_end;
        self.idx += 1;
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (MrTable, MrId, MrId) {
        let mut t = MrTable::new(10_000, 4);
        let a = t.register(1000, 1000, Access::RECV).expect("a");
        let b = t.register(5000, 1000, Access::BOTH).expect("b");
        (t, a, b)
    }

    #[test]
    fn post_appends_and_map_splits() {
        let (mut t, a, b) = setup();
        let mut l = SegmentList::new(3, Access::RECV);
        assert_eq!(l.post(&mut t, a, 100, 50, 1), Ok(0..50));
        assert_eq!(l.post(&mut t, b, 0, 30, 2), Ok(50..80));
        assert_eq!(l.post(&mut t, a, 0, 10, 3), Ok(80..90));
        assert_eq!(l.post(&mut t, a, 0, 10, 4), Err(MsError::Full { max: 3 }));
        assert_eq!(l.posted_end(), 90);
        let parts: Vec<_> = l.map(40..200).collect();
        assert_eq!(
            parts,
            vec![
                (40..50, 1140..1150),
                (50..80, 5000..5030),
                (80..90, 1000..1010)
            ]
        );
        assert_eq!(
            l.map(60..70).collect::<Vec<_>>(),
            vec![(60..70, 5010..5020)]
        );
        assert_eq!(l.map(90..100).count(), 0);
        assert_eq!(t.refs(a), Ok(2));
    }

    #[test]
    fn post_checks_region() {
        let (mut t, a, _) = setup();
        let mut l = SegmentList::new(3, Access::SEND);
        assert!(matches!(
            l.post(&mut t, a, 0, 10, 9),
            Err(MsError::Region {
                wr_id: 9,
                source: MrError::AccessDenied { .. }
            })
        ));
        let mut r = SegmentList::new(3, Access::RECV);
        assert!(matches!(
            r.post(&mut t, a, 995, 10, 9),
            Err(MsError::Region {
                source: MrError::OutOfRegion { .. },
                ..
            })
        ));
        assert_eq!(r.post(&mut t, a, 0, 0, 5), Err(MsError::Empty { wr_id: 5 }));
        assert!(r.is_empty());
    }

    #[test]
    fn retire_removes_before_completing_and_raises_floor() {
        let (mut t, a, b) = setup();
        let mut l = SegmentList::new(4, Access::RECV);
        l.post(&mut t, a, 0, 50, 1).expect("post");
        l.post(&mut t, b, 0, 30, 2).expect("post");
        assert_eq!(l.retire_through(&mut t, 49), Ok(vec![]));
        assert_eq!(l.floor(), 49);
        assert_eq!(
            l.map(0..60).collect::<Vec<_>>(),
            vec![(49..50, 1049..1050), (50..60, 5000..5010)]
        );
        assert_eq!(
            l.retire_through(&mut t, 50),
            Ok(vec![Completion { wr_id: 1, len: 50 }])
        );
        assert_eq!(t.refs(a), Ok(0));
        t.deregister(a).expect("no longer referenced");
        assert_eq!(t.deregister(b), Err(MrError::InUse { id: b, refs: 1 }));
        assert_eq!(
            l.retire_through(&mut t, 81),
            Err(MsError::BeyondPosted {
                offset: 81,
                posted_end: 80
            })
        );
        assert_eq!(
            l.retire_through(&mut t, 80),
            Ok(vec![Completion { wr_id: 2, len: 30 }])
        );
        assert_eq!(l.map(0..100).count(), 0);
    }

    /// Send retirement waits for memory still read by TX descriptors, in
    /// order, and releases acknowledged bytes only once nothing reads them.
    #[test]
    fn sent_segments_retire_when_acked_and_no_longer_read() {
        let (mut t, _, b) = setup();
        let mut l = SegmentList::new(4, Access::SEND);
        l.post(&mut t, b, 0, 50, 1).expect("post");
        l.post(&mut t, b, 100, 30, 2).expect("post");
        // Area 5000..5050 and 5100..5130; the first is still read.
        let read = |r: Range<usize>| r.start < 5050 && 5000 < r.end;
        let mut out = Vec::new();
        l.retire_sent_through(&mut t, 80, read, &mut out)
            .expect("acked");
        assert!(
            out.is_empty(),
            "the first is read; the second waits behind it"
        );
        assert_eq!((l.floor(), l.released()), (80, 0));
        assert!(l.retire_waiting() && l.completion_waiting());
        assert_eq!(
            l.map(0..80).count(),
            0,
            "nothing below the floor is sent again"
        );
        assert_eq!(t.refs(b), Ok(2));
        // Nothing reads it any more: both complete, in order, once.
        l.retire_sent_through(&mut t, 0, |_| false, &mut out)
            .expect("again");
        assert_eq!(
            out,
            vec![
                Completion { wr_id: 1, len: 50 },
                Completion { wr_id: 2, len: 30 }
            ]
        );
        assert_eq!((l.released(), l.retire_waiting()), (80, false));
        assert!(!l.completion_waiting());
        l.retire_sent_through(&mut t, 80, |_| false, &mut out)
            .expect("idempotent");
        assert_eq!(out.len(), 2);
        assert_eq!(t.refs(b), Ok(0));
        assert_eq!(
            l.retire_sent_through(&mut t, 81, |_| false, &mut out),
            Err(MsError::BeyondPosted {
                offset: 81,
                posted_end: 80
            })
        );
    }

    /// A segment straddling the acknowledgment: its acknowledged bytes are
    /// released only once nothing reads them.
    #[test]
    fn a_straddling_segment_releases_its_acked_bytes_when_unread() {
        let (mut t, _, b) = setup();
        let mut l = SegmentList::new(4, Access::SEND);
        l.post(&mut t, b, 0, 100, 1).expect("post");
        let mut out = Vec::new();
        l.retire_sent_through(&mut t, 40, |_| true, &mut out)
            .expect("acked");
        assert_eq!((l.released(), l.retire_waiting()), (0, true));
        assert!(!l.completion_waiting(), "not acknowledged in full");
        l.retire_sent_through(&mut t, 40, |r| r.end > 5040, &mut out)
            .expect("unread");
        assert_eq!((l.released(), l.retire_waiting()), (40, false));
        assert!(out.is_empty(), "the segment is not acknowledged in full");
    }

    /// A re-home points every segment at the same place in the new
    /// regions, moves the references and keeps the stream as it was; a
    /// refused one changes nothing.
    #[test]
    fn rehome_repoints_segments_and_moves_their_references() {
        let mut t = MrTable::new(10_000, 6);
        let a = t.register(1000, 1000, Access::RECV).expect("a");
        let b = t.register(3000, 1000, Access::BOTH).expect("b");
        let a2 = t.register(6000, 1000, Access::RECV).expect("a2");
        let b2 = t.register(8000, 1000, Access::BOTH).expect("b2");
        let short = t.register(9500, 100, Access::RECV).expect("short");
        let send_only = t.register(9700, 300, Access::SEND).expect("send");
        let mut l = SegmentList::new(4, Access::RECV);
        l.post(&mut t, a, 100, 50, 1).expect("post");
        l.post(&mut t, b, 0, 30, 2).expect("post");
        l.post(&mut t, a, 500, 20, 3).expect("post");
        l.retire_through(&mut t, 10).expect("floor");
        let before: Vec<PostedSegment> = l.segments().copied().collect();
        let mv = |from, to| MrMove { from, to };
        let never = |_: &mut MrTable, _, _| panic!("a refused move re-pointed a segment");

        assert_eq!(
            l.rehome(&mut t, &[mv(a, a2)], never),
            Err(MsError::NotMoved {
                wr_id: 2,
                mr: b.index()
            })
        );
        assert!(matches!(
            l.rehome(&mut t, &[mv(a, short), mv(b, b2)], never),
            Err(MsError::Region {
                wr_id: 1,
                source: MrError::OutOfRegion { .. }
            })
        ));
        assert!(matches!(
            l.rehome(&mut t, &[mv(a, a2), mv(b, send_only)], never),
            Err(MsError::Region {
                wr_id: 2,
                source: MrError::AccessDenied { .. }
            })
        ));
        assert_eq!(l.segments().copied().collect::<Vec<_>>(), before);
        assert_eq!((t.refs(a), t.refs(b), t.refs(a2)), (Ok(2), Ok(1), Ok(0)));

        let mut old = Vec::new();
        l.rehome(&mut t, &[mv(b, b2), mv(a, a2)], |t, mr, area| {
            t.release(mr).expect("the segment's reference");
            old.push((mr, area));
        })
        .expect("moves");
        assert_eq!(old, vec![(a, 1100..1150), (b, 3000..3030), (a, 1500..1520)]);
        assert_eq!(
            l.map(0..200).collect::<Vec<_>>(),
            vec![
                (10..50, 6110..6150),
                (50..80, 8000..8030),
                (80..100, 6500..6520)
            ]
        );
        assert_eq!((l.floor(), l.posted_end(), l.len()), (10, 100, 3));
        assert_eq!((t.refs(a), t.refs(b)), (Ok(0), Ok(0)));
        assert_eq!((t.refs(a2), t.refs(b2)), (Ok(2), Ok(1)));
        assert_eq!(
            l.retire_through(&mut t, 80),
            Ok(vec![
                Completion { wr_id: 1, len: 50 },
                Completion { wr_id: 2, len: 30 }
            ])
        );
        assert_eq!((t.refs(a2), t.refs(b2)), (Ok(1), Ok(0)));
    }
}
