//! Duplication: with probability `p` a packet leaves twice, back to back.

use super::{Fifo, Node, NodeStats};
use crate::sim::packet::Packet;
use crate::sim::rng::Rng;
use crate::time::Instant;

/// Emits an extra copy of each packet with a fixed probability.
#[derive(Debug)]
pub struct Duplicate {
    probability: f64,
    rng: Rng,
    fifo: Fifo,
    stats: NodeStats,
}

impl Duplicate {
    /// Duplicates with `probability`, drawing from `rng`.
    pub fn new(probability: f64, rng: Rng) -> Self {
        Duplicate {
            probability,
            rng,
            fifo: Fifo::default(),
            stats: NodeStats::named("duplicate"),
        }
    }
}

impl Node for Duplicate {
    fn push(&mut self, now: Instant, packet: Packet) {
        self.stats.arrived += 1;
        if self.rng.chance(self.probability) {
            self.stats.duplicated += 1;
            self.fifo.push(now, packet.clone());
        }
        self.fifo.push(now, packet);
    }

    fn next_ready(&self) -> Option<Instant> {
        self.fifo.next_ready()
    }

    fn pop(&mut self, now: Instant) -> Option<Packet> {
        let packet = self.fifo.pop(now)?;
        self.stats.depart(&packet);
        Some(packet)
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }
}
