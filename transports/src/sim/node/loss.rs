//! Random loss: each packet is dropped independently with probability `p`.

use super::{Fifo, Node, NodeStats};
use crate::sim::packet::Packet;
use crate::sim::rng::Rng;
use crate::time::Instant;

/// Drops each packet with a fixed probability (Bernoulli loss).
#[derive(Debug)]
pub struct Loss {
    probability: f64,
    rng: Rng,
    fifo: Fifo,
    stats: NodeStats,
}

impl Loss {
    /// Drops with `probability` (clamped to `[0, 1]` by the draw), drawing
    /// from `rng`.
    pub fn new(probability: f64, rng: Rng) -> Self {
        Loss {
            probability,
            rng,
            fifo: Fifo::default(),
            stats: NodeStats::named("loss"),
        }
    }
}

impl Node for Loss {
    fn push(&mut self, now: Instant, packet: Packet) {
        self.stats.arrived += 1;
        if self.rng.chance(self.probability) {
            self.stats.dropped += 1;
        } else {
            self.fifo.push(now, packet);
        }
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
