//! The driver's timer queue: a min-heap of (deadline, connection), so a
//! poll finds the connections whose timers are due without looking at
//! the others (the transport's cost per packet must not grow with the
//! number of open connections).
//!
//! Entries are never removed in place: a connection keeps the deadline it
//! armed last ([`Armed`]) and an entry that no longer matches it is
//! skipped when it comes out. A connection pushes a new entry only when
//! its deadline moves *earlier* (or it has none armed); a deadline that
//! moves later (an RTO pushed back by every ACK) is found when the old
//! entry fires and the connection is looked at once and re-armed. So the
//! heap holds about one entry per connection, not one per ACK.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use transports::Instant;

/// The deadline a connection has in the queue, if any.
pub(crate) type Armed = Option<Instant>;

#[derive(Debug)]
struct Entry<K> {
    at: Instant,
    key: K,
}

impl<K> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl<K> Eq for Entry<K> {}
impl<K> PartialOrd for Entry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Entry<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.cmp(&other.at)
    }
}

/// Deadlines of keys, earliest first.
#[derive(Debug)]
pub(crate) struct Timers<K> {
    heap: BinaryHeap<Reverse<Entry<K>>>,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Timers {
            heap: BinaryHeap::new(),
        }
    }
}

impl<K: Copy> Timers<K> {
    /// Arms `key` for `deadline` unless it already has an entry at or
    /// before it; updates `armed`.
    pub(crate) fn arm(&mut self, key: K, deadline: Option<Instant>, armed: &mut Armed) {
        let Some(at) = deadline else { return };
        if armed.is_some_and(|a| a <= at) {
            return;
        }
        *armed = Some(at);
        self.heap.push(Reverse(Entry { at, key }));
    }

    /// The next entry due at `now`: its key and the deadline it was armed
    /// for. The caller compares that with the key's [`Armed`] (a mismatch
    /// is a stale entry) and clears it.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(K, Instant)> {
        if self.heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
            self.heap.pop().map(|Reverse(e)| (e.key, e.at))
        } else {
            None
        }
    }

    /// The earliest entry's deadline (it may be stale: never later than
    /// the deadline of the key that armed it).
    pub(crate) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(e)| e.at)
    }

    /// Entries in the queue (stale ones included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

/// Takes `key`'s entry at `at` if it is the one armed: then the key is
/// due and is no longer armed.
pub(crate) fn fire(armed: &mut Armed, at: Instant) -> bool {
    if *armed == Some(at) {
        *armed = None;
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn due_entries_come_out_earliest_first_and_only_when_due() {
        let mut q = Timers::default();
        let mut armed = [None; 3];
        q.arm(0usize, Some(t(30)), &mut armed[0]);
        q.arm(1, Some(t(10)), &mut armed[1]);
        q.arm(2, Some(t(20)), &mut armed[2]);
        q.arm(2, None, &mut armed[2]);
        assert_eq!(q.pop_due(t(5)), None);
        assert_eq!(q.pop_due(t(25)), Some((1, t(10))));
        assert_eq!(q.pop_due(t(25)), Some((2, t(20))));
        assert_eq!(q.pop_due(t(25)), None);
        assert_eq!(q.pop_due(t(30)), Some((0, t(30))));
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_later_deadline_adds_no_entry_and_an_earlier_one_makes_the_old_stale() {
        let mut q = Timers::default();
        let mut armed = None;
        q.arm(7u32, Some(t(100)), &mut armed);
        // Pushed back (an ACK re-armed the RTO): no new entry.
        for ms in 101..1000 {
            q.arm(7, Some(t(ms)), &mut armed);
        }
        assert_eq!(q.len(), 1);
        assert_eq!(armed, Some(t(100)));
        // Brought forward: a new entry, the old one goes stale.
        q.arm(7, Some(t(50)), &mut armed);
        assert_eq!(q.len(), 2);
        let (k, at) = q.pop_due(t(60)).expect("due");
        assert_eq!((k, at), (7, t(50)));
        assert!(fire(&mut armed, at));
        assert_eq!(armed, None);
        let (_, stale) = q.pop_due(t(200)).expect("the old entry");
        assert!(!fire(&mut armed, stale), "a stale entry does not fire");
    }
}
