//! Reordering: with probability `p` a packet is held back by a random extra
//! delay, uniform in `(0, max_extra]`, so packets behind it overtake it.
//! Everything else passes at once.

use core::cmp::Ordering;
use core::time::Duration;
use std::collections::BinaryHeap;

use super::{Node, NodeStats};
use crate::sim::packet::Packet;
use crate::sim::rng::Rng;
use crate::time::Instant;

/// A held packet, ordered by departure time then arrival order.
#[derive(Debug)]
struct Held {
    at: Instant,
    order: u64,
    packet: Packet,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    /// Reversed, so the max-heap pops the earliest departure first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

/// Holds a random share of packets back so that later ones overtake them.
#[derive(Debug)]
pub struct Reorder {
    probability: f64,
    max_extra: Duration,
    rng: Rng,
    heap: BinaryHeap<Held>,
    order: u64,
    stats: NodeStats,
}

impl Reorder {
    /// Holds a packet back with `probability` by up to `max_extra`.
    pub fn new(probability: f64, max_extra: Duration, rng: Rng) -> Self {
        Reorder {
            probability,
            max_extra,
            rng,
            heap: BinaryHeap::new(),
            order: 0,
            stats: NodeStats::named("reorder"),
        }
    }
}

impl Node for Reorder {
    fn push(&mut self, now: Instant, packet: Packet) {
        self.stats.arrived += 1;
        let max = u64::try_from(self.max_extra.as_nanos()).unwrap_or(u64::MAX);
        let at = if max > 0 && self.rng.chance(self.probability) {
            self.stats.held_back += 1;
            now + Duration::from_nanos(1 + self.rng.below(max))
        } else {
            now
        };
        self.order += 1;
        self.heap.push(Held {
            at,
            order: self.order,
            packet,
        });
    }

    fn next_ready(&self) -> Option<Instant> {
        self.heap.peek().map(|h| h.at)
    }

    fn pop(&mut self, now: Instant) -> Option<Packet> {
        if self.heap.peek()?.at > now {
            return None;
        }
        let packet = self.heap.pop()?.packet;
        self.stats.depart(&packet);
        Some(packet)
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }
}
