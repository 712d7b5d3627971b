//! A release queue: items held until a time, let out earliest first and,
//! at equal times, in the order they went in. The one timed hold of the
//! impairment engine, shared by the simulator's reordering node and the
//! impairment hop (`bench::impair`), which both hold items back by a
//! per-item delay so that later ones may overtake them.

use core::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::time::Instant;

/// An item with its release time and arrival order.
#[derive(Debug)]
struct Held<T> {
    at: Instant,
    order: u64,
    item: T,
}

impl<T> PartialEq for Held<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl<T> Eq for Held<T> {}

impl<T> PartialOrd for Held<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Held<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// Items waiting for their release times (a min-heap on time, then arrival).
#[derive(Debug)]
pub struct ReleaseQueue<T> {
    heap: BinaryHeap<Reverse<Held<T>>>,
    order: u64,
}

impl<T> Default for ReleaseQueue<T> {
    fn default() -> Self {
        ReleaseQueue {
            heap: BinaryHeap::new(),
            order: 0,
        }
    }
}

impl<T> ReleaseQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds `item` until `at`.
    pub fn push(&mut self, at: Instant, item: T) {
        let order = self.order;
        self.order += 1;
        self.heap.push(Reverse(Held { at, order, item }));
    }

    /// The earliest release time of a held item.
    pub fn next_ready(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(h)| h.at)
    }

    /// The next item whose release time is at or before `now`.
    pub fn pop(&mut self, now: Instant) -> Option<T> {
        if self.next_ready()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse(h)| h.item)
    }

    /// Items held now.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_arrival_order() {
        let mut q = ReleaseQueue::new();
        q.push(Instant::from_nanos(30), 'a');
        q.push(Instant::from_nanos(10), 'b');
        q.push(Instant::from_nanos(30), 'c');
        q.push(Instant::from_nanos(10), 'd');
        assert_eq!(q.len(), 4);
        assert_eq!(q.next_ready(), Some(Instant::from_nanos(10)));
        assert_eq!(q.pop(Instant::from_nanos(9)), None);
        let out: Vec<char> = std::iter::from_fn(|| q.pop(Instant::from_nanos(30))).collect();
        assert_eq!(out, ['b', 'd', 'a', 'c']);
        assert!(q.is_empty());
        assert_eq!(q.next_ready(), None);
    }

    #[test]
    fn holds_until_exactly_its_time() {
        let mut q = ReleaseQueue::new();
        q.push(Instant::from_nanos(100), 1u8);
        assert_eq!(q.pop(Instant::from_nanos(99)), None);
        assert_eq!(q.pop(Instant::from_nanos(100)), Some(1));
    }
}
