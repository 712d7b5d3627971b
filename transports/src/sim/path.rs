//! Paths: a chain of nodes per direction, described by a [`PathConfig`]
//! that can be cloned, validated and built into nodes from a seed.

use core::time::Duration;

use super::node::{Bottleneck, Delay, Duplicate, Loss, Mtu, Node, NodeStats, Reorder};
use super::packet::Packet;
use super::rng::{derive_seed, Rng};
use crate::time::Instant;

/// One node of a path, as configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeConfig {
    /// Fixed delay (see [`Delay`]).
    Delay(Duration),
    /// Rate limit with a FIFO queue and tail drop (see [`Bottleneck`]).
    Bottleneck {
        /// Link rate in bits per second.
        rate_bps: u64,
        /// Queue limit in bytes (IP layer), the packet on the wire included.
        queue_bytes: u64,
        /// Mark ECN-capable packets CE when the queue holds more than this
        /// many bytes on their arrival.
        ecn_threshold: Option<u64>,
    },
    /// Independent random loss with this probability (see [`Loss`]).
    Loss(f64),
    /// Hold a packet back with `probability` by up to `max_extra` (see
    /// [`Reorder`]).
    Reorder {
        /// Share of packets held back.
        probability: f64,
        /// Largest extra delay.
        max_extra: Duration,
    },
    /// Send an extra copy with this probability (see [`Duplicate`]).
    Duplicate(f64),
    /// Drop packets above this many bytes at the IP layer (see [`Mtu`]).
    Mtu(u32),
}

/// A path setting that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A probability outside `[0, 1]` (or NaN).
    #[error("{direction} node {index} ({kind}): probability {value} is not in [0, 1]")]
    Probability {
        /// `"forward"` or `"reverse"`.
        direction: &'static str,
        /// Position in the chain.
        index: usize,
        /// Node kind.
        kind: &'static str,
        /// The bad value.
        value: f64,
    },
    /// A bottleneck with zero rate.
    #[error("{direction} node {index} (bottleneck): rate_bps must be above 0")]
    ZeroRate {
        /// `"forward"` or `"reverse"`.
        direction: &'static str,
        /// Position in the chain.
        index: usize,
    },
    /// An MTU too small to carry a bare TCP/IP header.
    #[error("{direction} node {index} (mtu): {mtu} bytes cannot carry a 40-byte TCP/IPv4 header")]
    TinyMtu {
        /// `"forward"` or `"reverse"`.
        direction: &'static str,
        /// Position in the chain.
        index: usize,
        /// The bad value.
        mtu: u32,
    },
    /// The builder was asked to change the bottleneck of a path without one.
    #[error("the forward path has no bottleneck node to set {setting} on")]
    NoBottleneck {
        /// Which setting.
        setting: &'static str,
    },
}

impl NodeConfig {
    fn kind(&self) -> &'static str {
        match self {
            NodeConfig::Delay(_) => "delay",
            NodeConfig::Bottleneck { .. } => "bottleneck",
            NodeConfig::Loss(_) => "loss",
            NodeConfig::Reorder { .. } => "reorder",
            NodeConfig::Duplicate(_) => "duplicate",
            NodeConfig::Mtu(_) => "mtu",
        }
    }

    fn validate(&self, direction: &'static str, index: usize) -> Result<(), ConfigError> {
        let probability = |value: f64| {
            if (0.0..=1.0).contains(&value) {
                Ok(())
            } else {
                Err(ConfigError::Probability {
                    direction,
                    index,
                    kind: self.kind(),
                    value,
                })
            }
        };
        match *self {
            NodeConfig::Loss(p) | NodeConfig::Duplicate(p) => probability(p),
            NodeConfig::Reorder { probability: p, .. } => probability(p),
            NodeConfig::Bottleneck { rate_bps: 0, .. } => {
                Err(ConfigError::ZeroRate { direction, index })
            }
            NodeConfig::Mtu(mtu) if mtu < 40 => Err(ConfigError::TinyMtu {
                direction,
                index,
                mtu,
            }),
            _ => Ok(()),
        }
    }

    /// Builds the node, drawing randomness from a generator seeded with `seed`.
    pub fn build(&self, seed: u64) -> Box<dyn Node> {
        match *self {
            NodeConfig::Delay(d) => Box::new(Delay::new(d)),
            NodeConfig::Bottleneck {
                rate_bps,
                queue_bytes,
                ecn_threshold,
            } => Box::new(Bottleneck::new(rate_bps, queue_bytes, ecn_threshold)),
            NodeConfig::Loss(p) => Box::new(Loss::new(p, Rng::new(seed))),
            NodeConfig::Reorder {
                probability,
                max_extra,
            } => Box::new(Reorder::new(probability, max_extra, Rng::new(seed))),
            NodeConfig::Duplicate(p) => Box::new(Duplicate::new(p, Rng::new(seed))),
            NodeConfig::Mtu(mtu) => Box::new(Mtu::new(mtu)),
        }
    }
}

/// Both directions of a simulated path. `forward` carries what the
/// connecting side (client) sends; `reverse` what the accepting side sends.
/// With several flows, every flow shares the same chains (one bottleneck).
///
/// ```
/// use core::time::Duration;
/// use transports::sim::PathConfig;
/// // 10 Gbit/s, 100 µs RTT, one bandwidth-delay product of buffer, 1 % loss.
/// let path = PathConfig::link(10_000_000_000, Duration::from_micros(100)).with_loss(0.01);
/// assert!(path.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PathConfig {
    /// Nodes from client to server, in the order a packet crosses them.
    pub forward: Vec<NodeConfig>,
    /// Nodes from server to client.
    pub reverse: Vec<NodeConfig>,
}

/// Smallest queue [`PathConfig::link`] gives a bottleneck: 64 KiB, so that a
/// short path still holds a few full-size segments.
pub const MIN_LINK_QUEUE: u64 = 64 * 1024;

impl PathConfig {
    /// A path with no nodes: packets arrive the instant they are sent.
    pub fn direct() -> Self {
        PathConfig::default()
    }

    /// A symmetric link of `rate_bps` with round-trip propagation delay
    /// `rtt`: each direction is a bottleneck (queue of one bandwidth-delay
    /// product, at least [`MIN_LINK_QUEUE`]) followed by a delay of `rtt / 2`.
    pub fn link(rate_bps: u64, rtt: Duration) -> Self {
        let bdp = u64::try_from(u128::from(rate_bps) * rtt.as_nanos() / 8_000_000_000)
            .unwrap_or(u64::MAX);
        let one_way = rtt / 2;
        let chain = vec![
            NodeConfig::Bottleneck {
                rate_bps,
                queue_bytes: bdp.max(MIN_LINK_QUEUE),
                ecn_threshold: None,
            },
            NodeConfig::Delay(one_way),
        ];
        PathConfig {
            forward: chain.clone(),
            reverse: chain,
        }
    }

    /// Adds random loss with probability `p` to the forward direction, ahead
    /// of the other forward nodes.
    #[must_use]
    pub fn with_loss(mut self, p: f64) -> Self {
        self.forward.insert(0, NodeConfig::Loss(p));
        self
    }

    /// Adds random loss with probability `p` to the reverse direction (ACKs),
    /// ahead of the other reverse nodes.
    #[must_use]
    pub fn with_reverse_loss(mut self, p: f64) -> Self {
        self.reverse.insert(0, NodeConfig::Loss(p));
        self
    }

    /// Adds reordering to the forward direction: a share `p` of packets is
    /// held back by up to `max_extra`.
    #[must_use]
    pub fn with_reorder(mut self, p: f64, max_extra: Duration) -> Self {
        self.forward.insert(
            0,
            NodeConfig::Reorder {
                probability: p,
                max_extra,
            },
        );
        self
    }

    /// Adds duplication with probability `p` to the forward direction.
    #[must_use]
    pub fn with_duplication(mut self, p: f64) -> Self {
        self.forward.insert(0, NodeConfig::Duplicate(p));
        self
    }

    /// Drops packets above `mtu` bytes (IP layer) in both directions.
    #[must_use]
    pub fn with_mtu(mut self, mtu: u32) -> Self {
        self.forward.insert(0, NodeConfig::Mtu(mtu));
        self.reverse.insert(0, NodeConfig::Mtu(mtu));
        self
    }

    /// Sets the queue limit of every forward bottleneck.
    ///
    /// # Errors
    /// [`ConfigError::NoBottleneck`] if the forward path has none.
    pub fn with_queue(mut self, bytes: u64) -> Result<Self, ConfigError> {
        let mut found = false;
        for node in &mut self.forward {
            if let NodeConfig::Bottleneck { queue_bytes, .. } = node {
                *queue_bytes = bytes;
                found = true;
            }
        }
        if found {
            Ok(self)
        } else {
            Err(ConfigError::NoBottleneck { setting: "queue" })
        }
    }

    /// Turns on ECN marking at `threshold` bytes on every forward bottleneck.
    ///
    /// # Errors
    /// [`ConfigError::NoBottleneck`] if the forward path has none.
    pub fn with_ecn_threshold(mut self, threshold: u64) -> Result<Self, ConfigError> {
        let mut found = false;
        for node in &mut self.forward {
            if let NodeConfig::Bottleneck { ecn_threshold, .. } = node {
                *ecn_threshold = Some(threshold);
                found = true;
            }
        }
        if found {
            Ok(self)
        } else {
            Err(ConfigError::NoBottleneck {
                setting: "ecn_threshold",
            })
        }
    }

    /// The slowest forward bottleneck rate, if any.
    pub fn bottleneck_rate(&self) -> Option<u64> {
        self.forward
            .iter()
            .filter_map(|n| match n {
                NodeConfig::Bottleneck { rate_bps, .. } => Some(*rate_bps),
                _ => None,
            })
            .min()
    }

    /// Checks every node.
    ///
    /// # Errors
    /// The first node setting that cannot work, naming direction and position.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (index, node) in self.forward.iter().enumerate() {
            node.validate("forward", index)?;
        }
        for (index, node) in self.reverse.iter().enumerate() {
            node.validate("reverse", index)?;
        }
        Ok(())
    }

    /// Builds both chains; node *i* of direction *d* draws from its own
    /// stream of `seed`.
    ///
    /// # Errors
    /// As [`PathConfig::validate`].
    pub fn build(&self, seed: u64) -> Result<(Path, Path), ConfigError> {
        self.validate()?;
        let chain = |nodes: &[NodeConfig], direction: u64| {
            Path::new(
                nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| n.build(derive_seed(seed, direction << 32 | i as u64)))
                    .collect(),
            )
        };
        Ok((chain(&self.forward, 1), chain(&self.reverse, 2)))
    }
}

/// A built chain of nodes.
#[derive(Debug)]
pub struct Path {
    nodes: Vec<Box<dyn Node>>,
    /// Packets that crossed a chain with no nodes, waiting to be collected.
    bypass: Vec<(Instant, Packet)>,
}

impl Path {
    /// A chain of already built nodes (for custom nodes).
    pub fn new(nodes: Vec<Box<dyn Node>>) -> Self {
        Path {
            nodes,
            bypass: Vec::new(),
        }
    }

    /// A packet enters the chain at `now`.
    pub fn push(&mut self, now: Instant, packet: Packet) {
        match self.nodes.first_mut() {
            Some(first) => first.push(now, packet),
            None => self.bypass.push((now, packet)),
        }
    }

    /// The earliest time some node has a packet to let out.
    pub fn next_ready(&self) -> Option<Instant> {
        let bypass = self.bypass.first().map(|(at, _)| *at);
        self.nodes
            .iter()
            .filter_map(|n| n.next_ready())
            .chain(bypass)
            .min()
    }

    /// Moves every packet that is ready at `now` one node on (and on through
    /// nodes that pass it at once); packets leaving the last node go to `out`.
    pub fn advance(&mut self, now: Instant, out: &mut Vec<Packet>) {
        out.extend(self.bypass.drain(..).map(|(_, p)| p));
        let n = self.nodes.len();
        for i in 0..n {
            while let Some(packet) = self.nodes[i].pop(now) {
                match self.nodes.get_mut(i + 1) {
                    Some(next) => next.push(now, packet),
                    None => out.push(packet),
                }
            }
        }
    }

    /// Counters of every node, in chain order.
    pub fn stats(&self) -> Vec<NodeStats> {
        self.nodes.iter().map(|n| n.stats()).collect()
    }
}
