//! Sequence-number arithmetic (RFC 9293 3.4) and the mapping between 32-bit
//! wire sequence numbers and 64-bit stream offsets.
//!
//! Wire sequence numbers wrap every 4 GiB; comparisons are therefore made on
//! the signed difference, which is meaningful while the two numbers are less
//! than 2^31 apart (the window is far smaller). Inside the connection every
//! position is a 64-bit offset from the initial sequence number, which never
//! wraps; [`SeqNum::to_offset`] converts back using a nearby known offset.

use core::fmt;

/// A wire sequence number with modular comparisons.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNum(pub u32);

impl SeqNum {
    /// `self + n`, wrapping.
    #[must_use]
    pub fn wrapping_add(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_add(n))
    }

    /// The signed distance from `other` to `self`.
    pub fn diff(self, other: SeqNum) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self < other` in sequence space.
    pub fn lt(self, other: SeqNum) -> bool {
        self.diff(other) < 0
    }

    /// `self <= other` in sequence space.
    pub fn le(self, other: SeqNum) -> bool {
        self.diff(other) <= 0
    }

    /// `self > other` in sequence space.
    pub fn gt(self, other: SeqNum) -> bool {
        self.diff(other) > 0
    }

    /// `self >= other` in sequence space.
    pub fn ge(self, other: SeqNum) -> bool {
        self.diff(other) >= 0
    }

    /// The 64-bit offset from `base` of this sequence number, found relative
    /// to a reference point `(ref_offset, ref_seq)` that lies within 2^31 of
    /// it. Returns `None` when the result would fall below offset 0.
    pub fn to_offset(self, ref_offset: u64, ref_seq: SeqNum) -> Option<u64> {
        let d = i64::from(self.diff(ref_seq));
        ref_offset.checked_add_signed(d)
    }

    /// The wire sequence number at `offset` from `base`.
    pub fn from_offset(base: SeqNum, offset: u64) -> SeqNum {
        base.wrapping_add(offset as u32)
    }
}

impl fmt::Debug for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seq {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_hold_across_the_wrap() {
        let a = SeqNum(u32::MAX - 10);
        let b = a.wrapping_add(20);
        assert_eq!(b.0, 9);
        assert!(a.lt(b) && a.le(b) && b.gt(a) && b.ge(a));
        assert!(!b.lt(a));
        assert_eq!(b.diff(a), 20);
        assert_eq!(a.diff(b), -20);
        assert!(a.le(a) && a.ge(a) && !a.lt(a));
    }

    #[test]
    fn offsets_round_trip_over_several_wraps() {
        let base = SeqNum(0xffff_fff0);
        let far = 5 * (1u64 << 32) + 123;
        let seq = SeqNum::from_offset(base, far);
        // A reference point 1000 bytes earlier recovers the offset.
        let r = far - 1000;
        assert_eq!(seq.to_offset(r, SeqNum::from_offset(base, r)), Some(far));
        // And one 1000 bytes later too.
        let r = far + 1000;
        assert_eq!(seq.to_offset(r, SeqNum::from_offset(base, r)), Some(far));
        // Below zero is refused.
        assert_eq!(base.wrapping_add(u32::MAX).to_offset(0, base), None);
    }
}
