//! Fixed propagation delay: every packet leaves exactly `delay` after it
//! arrived, in arrival order.

use core::time::Duration;

use super::{Fifo, Node, NodeStats};
use crate::sim::packet::Packet;
use crate::time::Instant;

/// Delays every packet by the same amount.
#[derive(Debug)]
pub struct Delay {
    delay: Duration,
    fifo: Fifo,
    stats: NodeStats,
}

impl Delay {
    /// A node that holds each packet for `delay`.
    pub fn new(delay: Duration) -> Self {
        Delay {
            delay,
            fifo: Fifo::default(),
            stats: NodeStats::named("delay"),
        }
    }
}

impl Node for Delay {
    fn push(&mut self, now: Instant, packet: Packet) {
        self.stats.arrived += 1;
        self.fifo.push(now + self.delay, packet);
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
