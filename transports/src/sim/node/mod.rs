//! Path nodes: each takes packets in, holds, changes or drops them, and lets
//! them out at a time of its choosing. A path is a chain of nodes per
//! direction (the shape of neqo's `test-fixture/src/sim`): a packet leaving
//! node *i* enters node *i + 1* at that instant.
//!
//! Nodes draw randomness only from the [`Rng`](super::rng::Rng) they were
//! built with, so a path is reproducible from its seed.

use core::fmt;

use super::packet::Packet;
use crate::time::Instant;

mod bottleneck;
mod delay;
mod duplicate;
mod loss;
mod mtu;
mod reorder;

pub use bottleneck::Bottleneck;
pub use delay::Delay;
pub use duplicate::Duplicate;
pub use loss::Loss;
pub use mtu::Mtu;
pub use reorder::Reorder;

/// What a node did, counted since it was built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// The node's kind, for reports.
    pub name: &'static str,
    /// Packets that entered.
    pub arrived: u64,
    /// Packets that left (duplicates included).
    pub departed: u64,
    /// Bytes (IP layer) that left.
    pub bytes_departed: u64,
    /// Packets dropped (loss, tail drop, oversize).
    pub dropped: u64,
    /// Packets whose ECN field was set to CE.
    pub marked: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Packets held back by an extra delay.
    pub held_back: u64,
    /// Largest queue occupancy seen, in bytes (queueing nodes only).
    pub max_queue_bytes: u64,
}

impl NodeStats {
    pub(crate) fn named(name: &'static str) -> Self {
        NodeStats {
            name,
            ..NodeStats::default()
        }
    }

    pub(crate) fn depart(&mut self, packet: &Packet) {
        self.departed += 1;
        self.bytes_departed += packet.wire_len();
    }
}

/// A stage of a simulated path.
///
/// The driver calls [`Node::push`] with nondecreasing `now`, asks
/// [`Node::next_ready`] when the node next has a packet to let out, and calls
/// [`Node::pop`] at that time until it returns `None`.
pub trait Node: fmt::Debug {
    /// A packet arrives at `now`.
    fn push(&mut self, now: Instant, packet: Packet);

    /// When the next packet can leave, if the node holds any.
    fn next_ready(&self) -> Option<Instant>;

    /// A packet whose departure time is at or before `now`, if any.
    fn pop(&mut self, now: Instant) -> Option<Packet>;

    /// Counters.
    fn stats(&self) -> NodeStats;
}

/// A FIFO of packets with their departure times, for nodes whose departure
/// times never decrease (everything but reordering).
#[derive(Debug, Default)]
pub(crate) struct Fifo {
    queue: std::collections::VecDeque<(Instant, Packet)>,
}

impl Fifo {
    pub(crate) fn push(&mut self, at: Instant, packet: Packet) {
        self.queue.push_back((at, packet));
    }

    pub(crate) fn next_ready(&self) -> Option<Instant> {
        self.queue.front().map(|(at, _)| *at)
    }

    pub(crate) fn pop(&mut self, now: Instant) -> Option<Packet> {
        match self.queue.front() {
            Some((at, _)) if *at <= now => self.queue.pop_front().map(|(_, p)| p),
            _ => None,
        }
    }
}
