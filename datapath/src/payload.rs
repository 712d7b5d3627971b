//! A read-only view of a packet's payload that may lie in several pieces.
//!
//! With multi-buffer AF_XDP (`XDP_PKT_CONTD`), a jumbo frame arrives as a
//! chain of fragments; its payload starts in the first fragment, after the
//! headers, and runs on through the others. [`Payload`] lets the placement
//! engine sum and copy payload byte ranges straight out of those fragments,
//! so the RX path keeps its one copy (fused with the checksum) instead of
//! first linearising the frame.
//!
//! Partial sums of consecutive pieces combine with [`Partial::then`], which
//! byte-swaps a piece that starts at an odd offset (RFC 1071 §2(B)), so
//! pieces of any length give the same sum as the contiguous bytes.

use core::ops::Range;

use crate::checksum::{self, LengthMismatch, Partial};

/// A payload of `len` bytes made of `first` followed by the fragments in
/// `rest`, in order. Bytes of the pieces beyond `len` (Ethernet padding in
/// the last fragment) are not part of the payload.
#[derive(Debug, Clone, Copy)]
pub struct Payload<'a> {
    first: &'a [u8],
    rest: &'a [&'a [u8]],
    len: usize,
}

impl<'a> Payload<'a> {
    /// A payload in one contiguous slice.
    pub fn contiguous(bytes: &'a [u8]) -> Self {
        Payload {
            first: bytes,
            rest: &[],
            len: bytes.len(),
        }
    }

    /// The bytes `range` of the frame made of `fragments` laid end to end,
    /// or `None` when the range is inverted or runs past the fragments.
    pub fn in_fragments(fragments: &'a [&'a [u8]], range: Range<usize>) -> Option<Self> {
        if range.start > range.end {
            return None;
        }
        let len = range.end - range.start;
        let mut skip = range.start;
        for (i, frag) in fragments.iter().enumerate() {
            if skip < frag.len() || (skip == frag.len() && len == 0) {
                let first = &frag[skip..];
                let rest = &fragments[i + 1..];
                let available = first.len() + rest.iter().map(|f| f.len()).sum::<usize>();
                return (available >= len).then_some(Payload { first, rest, len });
            }
            skip -= frag.len();
        }
        // An empty range right at the end of the frame (or of no fragments).
        (skip == 0 && len == 0).then_some(Payload {
            first: &[],
            rest: &[],
            len: 0,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of non-empty pieces the payload's bytes lie in (1 for a
    /// non-empty contiguous payload, 0 for an empty one).
    pub fn pieces(&self) -> usize {
        self.chunks(0..self.len).count()
    }

    /// The sub-slices of the pieces that cover `range` (clamped to the
    /// payload), in order, skipping empty ones.
    fn chunks(&self, range: Range<usize>) -> impl Iterator<Item = &'a [u8]> + 'a {
        let end = range.end.min(self.len);
        let start = range.start.min(end);
        let mut pos = 0usize; // payload offset of the current piece
        core::iter::once(self.first)
            .chain(self.rest.iter().copied())
            .map_while(move |piece| {
                if pos >= end {
                    return None;
                }
                let piece_start = pos;
                let piece_end = pos + piece.len();
                pos = piece_end;
                let lo = start.max(piece_start);
                let hi = end.min(piece_end);
                Some((lo < hi).then(|| &piece[lo - piece_start..hi - piece_start]))
            })
            .flatten()
    }

    /// The checksum partial of the payload bytes in `range` (clamped to the
    /// payload).
    pub fn sum(&self, range: Range<usize>) -> Partial {
        if self.rest.is_empty() {
            // One piece (every frame below the frame size): no iterator.
            let end = range.end.min(self.len);
            return checksum::sum(&self.first[range.start.min(end)..end]);
        }
        self.chunks(range)
            .fold(Partial::EMPTY, |acc, c| acc.then(checksum::sum(c)))
    }

    /// Copies the payload bytes in `range` into `dst` and returns their
    /// checksum partial, in one pass per piece
    /// ([`checksum::copy_and_sum`]): the one RX payload copy.
    ///
    /// # Errors
    /// [`LengthMismatch`] when `dst` is not exactly as long as `range`, or
    /// `range` is not inside the payload; nothing is written then.
    pub fn copy_and_sum(
        &self,
        range: Range<usize>,
        dst: &mut [u8],
    ) -> Result<Partial, LengthMismatch> {
        let src = if range.start <= range.end && range.end <= self.len {
            range.end - range.start
        } else {
            // Report how much of the range the payload holds.
            range.end.min(self.len).saturating_sub(range.start)
        };
        if range.start > range.end || range.end > self.len || dst.len() != src {
            return Err(LengthMismatch {
                dst: dst.len(),
                src,
            });
        }
        if self.rest.is_empty() {
            return checksum::copy_and_sum(dst, &self.first[range]);
        }
        let mut acc = Partial::EMPTY;
        let mut at = 0usize;
        for c in self.chunks(range) {
            let p = checksum::copy_and_sum(&mut dst[at..at + c.len()], c)?;
            acc = acc.then(p);
            at += c.len();
        }
        Ok(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n as u32).map(|i| (i * 37 + 11) as u8).collect()
    }

    /// Splits `bytes` at `cuts` (sorted offsets) into owned pieces.
    fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts {
            out.push(bytes[at..c].to_vec());
            at = c;
        }
        out.push(bytes[at..].to_vec());
        out
    }

    #[test]
    fn sums_across_odd_splits_match_contiguous() {
        let frame = data(9001);
        let splits: [&[usize]; 6] = [
            &[],
            &[1],
            &[4095],
            &[3, 4],
            &[1001, 4097, 8191],
            &[1, 2, 3, 9000],
        ];
        for cuts in splits {
            let pieces = split(&frame, cuts);
            let views: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            // Payload from byte 55 (odd, as behind a 54-byte header + 1) to
            // 8990: padding after it is excluded.
            let p = Payload::in_fragments(&views, 55..8990).expect("fits");
            let whole = &frame[55..8990];
            assert_eq!(p.len(), whole.len());
            for r in [
                0..whole.len(),
                0..0,
                1..2,
                7..4000,
                4040..4041,
                3..whole.len(),
            ] {
                let want = checksum::sum(&whole[r.clone()]);
                assert_eq!(p.sum(r.clone()), want, "cuts {cuts:?} range {r:?}");
                let mut dst = vec![0u8; r.len()];
                let got = p.copy_and_sum(r.clone(), &mut dst).expect("lengths match");
                assert_eq!(got, want, "cuts {cuts:?} range {r:?}");
                assert_eq!(dst, &whole[r.clone()]);
            }
            // Clamped: nothing past the payload is summed.
            assert_eq!(p.sum(0..usize::MAX), checksum::sum(whole));
        }
    }

    #[test]
    fn range_bounds_are_checked() {
        let a = data(10);
        let b = data(7);
        let frags: [&[u8]; 2] = [&a, &b];
        assert!(Payload::in_fragments(&frags, 0..17).is_some());
        assert!(Payload::in_fragments(&frags, 10..17).is_some());
        assert!(Payload::in_fragments(&frags, 17..17).is_some());
        assert!(Payload::in_fragments(&frags, 0..18).is_none());
        assert!(Payload::in_fragments(&frags, 18..18).is_none());
        let inverted = core::ops::Range { start: 5, end: 4 };
        assert!(Payload::in_fragments(&frags, inverted).is_none());
        assert!(Payload::in_fragments(&[], 0..0).is_some());
        assert!(Payload::in_fragments(&[], 0..1).is_none());
        let p = Payload::in_fragments(&frags, 9..12).expect("fits");
        assert_eq!(p.pieces(), 2);
        let mut dst = [0u8; 3];
        p.copy_and_sum(0..3, &mut dst).expect("copy");
        assert_eq!(dst, [a[9], b[0], b[1]]);
        let mut short = [0u8; 2];
        assert_eq!(
            p.copy_and_sum(0..3, &mut short),
            Err(LengthMismatch { dst: 2, src: 3 })
        );
        assert_eq!(short, [0, 0]);
        assert_eq!(
            p.copy_and_sum(2..4, &mut short),
            Err(LengthMismatch { dst: 2, src: 1 })
        );
        assert_eq!(Payload::contiguous(&a).pieces(), 1);
    }
}
