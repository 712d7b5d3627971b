//! A link of fixed rate: the serialisation clock of the impairment engine's
//! rate limit, shared by the simulator's [`Bottleneck`](super::node::Bottleneck)
//! and the impairment hop (`bench::impair`). It says when a packet handed to
//! the link finishes on the wire and how many bytes are still ahead of a new
//! arrival; the queue policy (limit, drop, marking) stays with the caller.

use core::time::Duration;

use crate::time::Instant;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A rate-limited link: one packet on the wire at a time, back to back.
#[derive(Debug, Clone)]
pub struct Link {
    rate_bps: u64,
    /// When the link finishes serialising the last packet handed to it.
    busy_until: Instant,
    /// Sub-nanosecond remainder of serialisation times (numerator units of
    /// bit-nanoseconds), carried so long runs keep the exact rate.
    carry: u128,
}

impl Link {
    /// A link of `rate_bps` bits per second (0 is treated as 1 bit/s).
    pub fn new(rate_bps: u64) -> Self {
        Link {
            rate_bps: rate_bps.max(1),
            busy_until: Instant::ZERO,
            carry: 0,
        }
    }

    /// When the link finishes the last packet handed to it.
    pub fn busy_until(&self) -> Instant {
        self.busy_until
    }

    /// Bytes still to serialise at `now` before a new packet could start
    /// (fractions of the packet on the wire included, rounded down).
    pub fn backlog_bytes(&self, now: Instant) -> u64 {
        let ns = self.busy_until.saturating_duration_since(now).as_nanos();
        let bytes = ns * u128::from(self.rate_bps) / (8 * NANOS_PER_SEC);
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }

    /// Hands a packet of `len` bytes to the link at `now`; returns when its
    /// last bit leaves (after the packets before it).
    pub fn send(&mut self, now: Instant, len: u64) -> Instant {
        let numerator = u128::from(len) * 8 * NANOS_PER_SEC + self.carry;
        let rate = u128::from(self.rate_bps);
        self.carry = numerator % rate;
        let wire = Duration::from_nanos(u64::try_from(numerator / rate).unwrap_or(u64::MAX));
        let start = self.busy_until.max(now);
        self.busy_until = start + wire;
        self.busy_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_to_back_at_the_exact_rate() {
        // 1000 bytes at 80 Mbit/s: 100 µs each.
        let mut link = Link::new(80_000_000);
        assert_eq!(link.send(Instant::ZERO, 1000), Instant::from_micros(100));
        assert_eq!(
            link.send(Instant::from_micros(1), 1000),
            Instant::from_micros(200)
        );
        assert_eq!(link.backlog_bytes(Instant::from_micros(150)), 500);
        // An idle link starts at the arrival.
        assert_eq!(
            link.send(Instant::from_micros(500), 1000),
            Instant::from_micros(600)
        );
        assert_eq!(link.backlog_bytes(Instant::from_micros(700)), 0);
    }

    #[test]
    fn carry_keeps_the_long_run_rate() {
        // 1 byte at 3 bit/s is 2.67 s: the remainders add up, not round away.
        let mut link = Link::new(3);
        let mut last = Instant::ZERO;
        for _ in 0..3 {
            last = link.send(Instant::ZERO, 1);
        }
        assert_eq!(last, Instant::from_millis(8_000));
    }
}
