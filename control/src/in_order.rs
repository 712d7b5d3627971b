//! Carrying out the transport's outputs strictly in the order it gave them.
//!
//! A segment that finds the TX ring full has to wait. Whatever the
//! transport asked after it waits too: a later output may depend on the
//! earlier one having happened. The case that forced this rule: the
//! transport retransmits a range (the TX ring is full, so the segment
//! waits), then an ACK for the original transmission arrives and the
//! transport retires the range. Carried out first, the retirement hands
//! the application's buffer back, and the waiting retransmission then
//! names payload no longer posted (the datapath refuses it). In order, the
//! retransmission goes out first (a harmless duplicate for the peer) and
//! the buffer is handed back after.
//!
//! Waiting costs at most the time the ring takes to drain: the stack
//! retries at the start of every poll.

use std::collections::VecDeque;

/// Outputs waiting at which the stack stops reading received packets
/// (they are what produces most outputs), so the list stays bounded: it
/// drains as the TX ring frees, and reading resumes below it.
pub(crate) const MAX_WAITING: usize = 4096;

/// What carrying out one item came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied<T> {
    /// Done (or dropped for good, e.g. its connection is gone).
    Done,
    /// Could not be carried out now (the TX ring is full); try again
    /// later, before anything that came after it.
    Wait(T),
}

/// Items waiting behind one that could not be carried out.
#[derive(Debug)]
pub(crate) struct InOrder<T> {
    waiting: VecDeque<T>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
        }
    }
}

impl<T> InOrder<T> {
    /// Carries out `item` with `apply`, or queues it behind the items
    /// already waiting. Returns whether it was carried out now.
    pub(crate) fn push(&mut self, item: T, mut apply: impl FnMut(T) -> Applied<T>) -> bool {
        if !self.waiting.is_empty() {
            self.waiting.push_back(item);
            return false;
        }
        match apply(item) {
            Applied::Done => true,
            Applied::Wait(item) => {
                self.waiting.push_back(item);
                false
            }
        }
    }

    /// Whether so many items wait that no new work should be taken on
    /// (at least [`MAX_WAITING`]).
    pub(crate) fn backed_up(&self) -> bool {
        self.waiting.len() >= MAX_WAITING
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Carries out waiting items in order until one has to wait again.
    /// Returns how many were carried out.
    pub(crate) fn retry(&mut self, mut apply: impl FnMut(T) -> Applied<T>) -> usize {
        let mut done = 0;
        while let Some(item) = self.waiting.pop_front() {
            match apply(item) {
                Applied::Done => done += 1,
                Applied::Wait(item) => {
                    self.waiting.push_front(item);
                    break;
                }
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of the stack: a TX ring with `room` slots, a set of posted
    /// bytes that retirements shrink, and a log of what was done.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Op {
        /// Send stream bytes `from..to`.
        Send(u64, u64),
        /// Retire everything below this offset.
        Retire(u64),
    }

    struct Model {
        room: usize,
        posted_from: u64,
        sent: Vec<(u64, u64)>,
        refused: usize,
    }

    impl Model {
        fn with_room(room: usize) -> Self {
            Self {
                room,
                posted_from: 0,
                sent: Vec::new(),
                refused: 0,
            }
        }

        fn apply(&mut self, op: Op) -> Applied<Op> {
            match op {
                Op::Send(from, to) => {
                    if from < self.posted_from {
                        self.refused += 1;
                        return Applied::Done;
                    }
                    if self.room == 0 {
                        return Applied::Wait(op);
                    }
                    self.room -= 1;
                    self.sent.push((from, to));
                    Applied::Done
                }
                Op::Retire(upto) => {
                    self.posted_from = self.posted_from.max(upto);
                    Applied::Done
                }
            }
        }
    }

    #[test]
    fn a_retirement_waits_behind_a_segment_of_the_data_it_retires() {
        let mut m = Model::with_room(1);
        let mut q = InOrder::default();
        // Two retransmissions, room for one; then the ACK of the originals.
        assert!(q.push(Op::Send(0, 100), |o| m.apply(o)));
        assert!(!q.push(Op::Send(100, 200), |o| m.apply(o)));
        assert!(!q.push(Op::Retire(200), |o| m.apply(o)));
        assert_eq!(q.waiting.len(), 2);
        assert_eq!(m.posted_from, 0, "the buffer is not handed back yet");
        // The ring drains; both waiting items are carried out, in order.
        m.room = 4;
        assert_eq!(q.retry(|o| m.apply(o)), 2);
        assert!(q.waiting.is_empty());
        assert_eq!(m.sent, vec![(0, 100), (100, 200)]);
        assert_eq!(m.refused, 0);
        assert_eq!(m.posted_from, 200);
    }

    #[test]
    fn retry_stops_at_the_first_item_that_has_to_wait_again() {
        let mut m = Model::with_room(0);
        let mut q = InOrder::default();
        for i in 0..4 {
            assert!(!q.push(Op::Send(i * 10, i * 10 + 10), |o| m.apply(o)));
        }
        m.room = 1;
        assert_eq!(q.retry(|o| m.apply(o)), 1);
        assert_eq!(q.waiting.len(), 3);
        assert_eq!(m.sent, vec![(0, 10)]);
        m.room = 2;
        assert_eq!(q.retry(|o| m.apply(o)), 2);
        assert_eq!(m.sent, vec![(0, 10), (10, 20), (20, 30)]);
        assert_eq!(q.waiting.len(), 1);
        // Something pushed now still goes behind the one waiting.
        m.room = 5;
        assert!(!q.push(Op::Send(40, 50), |o| m.apply(o)));
        assert_eq!(q.retry(|o| m.apply(o)), 2);
        assert_eq!(m.sent.last(), Some(&(40, 50)));
        assert_eq!(m.sent[3], (30, 40));
    }

    #[test]
    fn a_long_wait_reports_back_pressure_and_clears_as_it_drains() {
        let mut m = Model::with_room(0);
        let mut q = InOrder::default();
        for i in 0..MAX_WAITING as u64 {
            assert!(!q.backed_up(), "not yet at {i}");
            q.push(Op::Send(i, i + 1), |o| m.apply(o));
        }
        assert!(q.backed_up(), "{MAX_WAITING} outputs wait");
        m.room = 1;
        assert_eq!(q.retry(|o| m.apply(o)), 1);
        assert!(!q.backed_up(), "below the bound again");
    }
}
