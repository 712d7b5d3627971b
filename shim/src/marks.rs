//! Which descriptors are ours: one bit per descriptor, read without a
//! lock on every call the program makes.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors at or above this are never ours (the bitmaps' size).
pub(crate) const MAX_FD: usize = 1 << 20;

/// One bit per descriptor, read without a lock.
pub(crate) struct FdMarks([AtomicU64; MAX_FD / 64]);

impl FdMarks {
    pub(crate) const fn new() -> Self {
        FdMarks([const { AtomicU64::new(0) }; MAX_FD / 64])
    }

    pub(crate) fn get(&self, fd: RawFd) -> bool {
        usize::try_from(fd)
            .ok()
            .filter(|&f| f < MAX_FD)
            .is_some_and(|f| self.0[f / 64].load(Ordering::Acquire) >> (f % 64) & 1 == 1)
    }

    /// Sets or clears `fd`'s bit; false when `fd` is out of range.
    pub(crate) fn set(&self, fd: RawFd, on: bool) -> bool {
        let Some(f) = usize::try_from(fd).ok().filter(|&f| f < MAX_FD) else {
            return false;
        };
        let bit = 1u64 << (f % 64);
        if on {
            self.0[f / 64].fetch_or(bit, Ordering::AcqRel);
        } else {
            self.0[f / 64].fetch_and(!bit, Ordering::AcqRel);
        }
        true
    }

    /// The marked descriptors in `first..=last` (both at least 0), in
    /// order, into `out`.
    pub(crate) fn marked_in(&self, first: usize, last: usize, out: &mut Vec<RawFd>) {
        let last = last.min(MAX_FD - 1);
        if first > last {
            return;
        }
        for w in first / 64..=last / 64 {
            let mut bits = self.0[w].load(Ordering::Acquire);
            while bits != 0 {
                let fd = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if (first..=last).contains(&fd) {
                    out.push(fd as RawFd);
                }
            }
        }
    }
}
