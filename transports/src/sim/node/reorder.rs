//! Reordering: with probability `p` a packet is held back by a random extra
//! delay, uniform in `(0, max_extra]`, so packets behind it overtake it.
//! Everything else passes at once.

use core::time::Duration;

use super::{Node, NodeStats};
use crate::sim::packet::Packet;
use crate::sim::release::ReleaseQueue;
use crate::sim::rng::Rng;
use crate::time::Instant;

/// Holds a random share of packets back so that later ones overtake them.
#[derive(Debug)]
pub struct Reorder {
    probability: f64,
    max_extra: Duration,
    rng: Rng,
    held: ReleaseQueue<Packet>,
    stats: NodeStats,
}

impl Reorder {
    /// Holds a packet back with `probability` by up to `max_extra`.
    pub fn new(probability: f64, max_extra: Duration, rng: Rng) -> Self {
        Reorder {
            probability,
            max_extra,
            rng,
            held: ReleaseQueue::new(),
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
        self.held.push(at, packet);
    }

    fn next_ready(&self) -> Option<Instant> {
        self.held.next_ready()
    }

    fn pop(&mut self, now: Instant) -> Option<Packet> {
        let packet = self.held.pop(now)?;
        self.stats.depart(&packet);
        Some(packet)
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }
}
