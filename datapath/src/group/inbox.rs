//! The cross-queue inbox of one queue: frames other queues copied here,
//! bounded on both sides. A sender finds it full and drops (counted as
//! `inbox_full`; TCP retransmits); the owner takes at most what its poll
//! budget has room for, so neither the inbox nor the owner's own backlog
//! grows without bound however fast the other queues forward.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Frames forwarded to one queue, at most `capacity` of them.
#[derive(Debug)]
pub(super) struct Inbox {
    frames: Mutex<VecDeque<Box<[u8]>>>,
    capacity: usize,
    /// Number of frames waiting, read without the lock by the owner's poll.
    waiting: AtomicUsize,
}

impl Inbox {
    /// An empty inbox holding at most `capacity` frames.
    pub(super) fn new(capacity: usize) -> Inbox {
        Inbox {
            frames: Mutex::new(VecDeque::new()),
            capacity,
            waiting: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Box<[u8]>>> {
        self.frames.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `frame`; `false` (and the frame dropped) when full.
    pub(super) fn push(&self, frame: Box<[u8]>) -> bool {
        let mut frames = self.lock();
        if frames.len() >= self.capacity {
            return false;
        }
        frames.push_back(frame);
        self.waiting.store(frames.len(), Ordering::Release);
        true
    }

    /// Moves up to `max` of the oldest frames to the end of `into`; the
    /// rest keep waiting here. Costs one atomic load when nothing waits.
    pub(super) fn drain(&self, max: usize, into: &mut VecDeque<Box<[u8]>>) -> usize {
        if max == 0 || self.waiting.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let mut frames = self.lock();
        let n = max.min(frames.len());
        into.extend(frames.drain(..n));
        self.waiting.store(frames.len(), Ordering::Release);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(i: u8) -> Box<[u8]> {
        vec![i; 4].into_boxed_slice()
    }

    #[test]
    fn a_full_inbox_refuses_frames() {
        let inbox = Inbox::new(3);
        assert!((0..3).all(|i| inbox.push(frame(i))));
        assert!(!inbox.push(frame(9)), "the fourth frame is refused");
    }

    #[test]
    fn drain_takes_at_most_what_it_is_allowed_oldest_first() {
        let inbox = Inbox::new(100);
        for i in 0..100 {
            assert!(inbox.push(frame(i)));
        }
        let mut into = VecDeque::new();
        assert_eq!(inbox.drain(32, &mut into), 32);
        assert_eq!(into.len(), 32, "the owner's backlog holds one budget");
        assert_eq!(into[0][0], 0);
        assert_eq!(inbox.drain(0, &mut into), 0);
        into.clear();
        assert_eq!(inbox.drain(1000, &mut into), 68);
        assert_eq!(into[0][0], 32);
        assert_eq!(inbox.drain(1000, &mut into), 0, "empty now");
        // Drained frames made room for new ones.
        assert!((0..100).all(|i| inbox.push(frame(i))));
    }
}
