//! A bandwidth bottleneck: a link of fixed rate behind a FIFO queue of
//! limited size in bytes, with tail drop, and optional ECN marking at a
//! threshold K as DCTCP expects from switches (RFC 8257 3.1: mark CE when
//! the instantaneous queue exceeds K on arrival).
//!
//! The queue counts every packet that has arrived and not finished
//! serialising, the one on the wire included. A packet that would make it
//! exceed the limit is dropped (tail drop). When marking is on, an ECN-capable
//! packet that arrives while the queue holds more than K bytes is marked CE;
//! packets that are not ECN-capable are not marked and only see tail drop.

use super::{Fifo, Node, NodeStats};
use crate::segment::Ecn;
use crate::sim::link::Link;
use crate::sim::packet::Packet;
use crate::time::Instant;

/// A rate-limited link with a byte-limited FIFO in front of it.
#[derive(Debug)]
pub struct Bottleneck {
    link: Link,
    limit_bytes: u64,
    ecn_threshold: Option<u64>,
    fifo: Fifo,
    /// Bytes queued, including the packet being serialised.
    queued: u64,
    /// Departure time and length of every packet counted in `queued`, in
    /// order; occupancy is released at the departure time even if the
    /// downstream node has not taken the packet yet.
    lengths: std::collections::VecDeque<(Instant, u64)>,
    stats: NodeStats,
}

impl Bottleneck {
    /// A link of `rate_bps` bits per second behind a queue of `limit_bytes`,
    /// marking ECN-capable packets CE above `ecn_threshold` bytes if set.
    /// A zero rate is treated as 1 bit/s (the path config rejects it).
    pub fn new(rate_bps: u64, limit_bytes: u64, ecn_threshold: Option<u64>) -> Self {
        Bottleneck {
            link: Link::new(rate_bps),
            limit_bytes,
            ecn_threshold,
            fifo: Fifo::default(),
            queued: 0,
            lengths: std::collections::VecDeque::new(),
            stats: NodeStats::named("bottleneck"),
        }
    }

    /// Bytes queued as of the last push or pop, the packet on the wire
    /// included.
    pub fn queued_bytes(&self) -> u64 {
        self.queued
    }

    fn release_departed(&mut self, now: Instant) {
        while let Some(&(at, len)) = self.lengths.front() {
            if at > now {
                break;
            }
            self.queued = self.queued.saturating_sub(len);
            self.lengths.pop_front();
        }
    }
}

impl Node for Bottleneck {
    fn push(&mut self, now: Instant, mut packet: Packet) {
        self.stats.arrived += 1;
        self.release_departed(now);
        let len = packet.wire_len();
        if self.queued + len > self.limit_bytes {
            self.stats.dropped += 1;
            return;
        }
        if let Some(k) = self.ecn_threshold {
            if self.queued > k && packet.is_ect() {
                packet.ecn = Ecn::Ce;
                self.stats.marked += 1;
            }
        }
        let departs = self.link.send(now, len);
        self.queued += len;
        self.lengths.push_back((departs, len));
        self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(self.queued);
        self.fifo.push(departs, packet);
    }

    fn next_ready(&self) -> Option<Instant> {
        self.fifo.next_ready()
    }

    fn pop(&mut self, now: Instant) -> Option<Packet> {
        let packet = self.fifo.pop(now)?;
        self.release_departed(now);
        self.stats.depart(&packet);
        Some(packet)
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }
}
