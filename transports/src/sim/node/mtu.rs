//! MTU: packets larger than the path MTU (IP layer) are dropped, as a router
//! does for a packet with DF set (RFC 1191 3; we send no ICMP back).

use super::{Fifo, Node, NodeStats};
use crate::sim::packet::Packet;
use crate::time::Instant;

/// Drops packets whose IP length exceeds `mtu`.
#[derive(Debug)]
pub struct Mtu {
    mtu: u64,
    fifo: Fifo,
    stats: NodeStats,
}

impl Mtu {
    /// A node that passes packets of at most `mtu` bytes (IP layer).
    pub fn new(mtu: u32) -> Self {
        Mtu {
            mtu: u64::from(mtu),
            fifo: Fifo::default(),
            stats: NodeStats::named("mtu"),
        }
    }
}

impl Node for Mtu {
    fn push(&mut self, now: Instant, packet: Packet) {
        self.stats.arrived += 1;
        if packet.wire_len() > self.mtu {
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
