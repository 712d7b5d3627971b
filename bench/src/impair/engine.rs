//! The impairment itself, without I/O: frames go in with their arrival
//! time, come out at their release time — or never, or twice, or with a
//! flipped bit. Time is a parameter (nanoseconds on the caller's clock), so
//! the behaviour is tested on a virtual clock and replays exactly for a
//! given seed.
//!
//! Per frame, in this order:
//! 1. **loss**: dropped with probability `loss`;
//! 2. **duplication**: with probability `dup` a second copy follows the
//!    first through the rest of the pipeline;
//! 3. **rate**: each copy waits for the bottleneck link, which serialises
//!    `len · 8 / rate` per frame; a copy that would find more than `queue`
//!    bytes waiting before it is tail-dropped;
//! 4. **delay and reordering**: the copy is held `delay` after leaving the
//!    link, plus `reorder_delay` with probability `reorder`, so later
//!    frames overtake it (netem's model of reordering by delay);
//! 5. **corruption**: with probability `corrupt`, one random bit of the
//!    copy's TCP/UDP payload is flipped (frames without such a payload are
//!    never corrupted and draw no number), so the receiver's checksum
//!    check fails.
//!
//! Frames with the same release time leave in arrival order.

use std::fmt;

use transports::sim::{rng::Rng, Link, ReleaseQueue};
use transports::Instant;

use super::{frame::l4_payload, spec::ImpairConfig};

/// Frames held at most at once (delay line plus rate queue); arrivals
/// beyond it are counted as queue drops.
pub const DEFAULT_HELD_LIMIT: usize = 1 << 16;

/// What one direction of the hop did, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairCounters {
    /// Frames received from the ingress interface.
    pub received: u64,
    /// Frames handed to the egress interface (duplicates included).
    pub forwarded: u64,
    /// Frames dropped by `loss`.
    pub dropped_loss: u64,
    /// Copies tail-dropped because the rate queue (or the hold limit) was
    /// full.
    pub dropped_queue: u64,
    /// Extra copies made by `dup`.
    pub duplicated: u64,
    /// Copies given the reorder delay.
    pub reordered: u64,
    /// Copies with a flipped payload bit.
    pub corrupted: u64,
    /// Copies held back (delay, reorder or rate) instead of sent at once.
    pub delayed: u64,
    /// Frames dropped because they were longer than the receive buffer.
    pub dropped_oversize: u64,
    /// Frames the egress socket refused.
    pub send_errors: u64,
    /// Times the ingress socket reported its link down (a flap).
    pub link_down: u64,
    /// Copies held at the moment of reading (delay line and rate queue),
    /// not yet forwarded: a gauge, not a total. Every copy is counted once
    /// as forwarded, refused, dropped or held.
    pub held: u64,
}

impl ImpairCounters {
    /// The counters as `(name, value)` pairs, in a fixed order.
    pub fn entries(&self) -> [(&'static str, u64); 12] {
        [
            ("received", self.received),
            ("forwarded", self.forwarded),
            ("dropped_loss", self.dropped_loss),
            ("dropped_queue", self.dropped_queue),
            ("duplicated", self.duplicated),
            ("reordered", self.reordered),
            ("corrupted", self.corrupted),
            ("delayed", self.delayed),
            ("dropped_oversize", self.dropped_oversize),
            ("send_errors", self.send_errors),
            ("link_down", self.link_down),
            ("held", self.held),
        ]
    }
}

impl fmt::Display for ImpairCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .entries()
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        f.write_str(&parts.join(" "))
    }
}

/// One direction's impairment: a seeded pipeline from arrivals to releases.
#[derive(Debug)]
pub struct Impairer {
    cfg: ImpairConfig,
    rng: Rng,
    /// The bottleneck link, when `rate` is set.
    link: Option<Link>,
    held: ReleaseQueue<Vec<u8>>,
    held_limit: usize,
    counters: ImpairCounters,
    /// Spare frame buffers, so the steady state allocates nothing.
    spare: Vec<Vec<u8>>,
}

impl Impairer {
    /// A pipeline for `cfg` (assumed valid, see [`ImpairConfig::validate`]).
    pub fn new(cfg: ImpairConfig) -> Self {
        Self {
            rng: Rng::new(cfg.seed),
            link: cfg.rate_bps.map(Link::new),
            cfg,
            held: ReleaseQueue::new(),
            held_limit: DEFAULT_HELD_LIMIT,
            counters: ImpairCounters::default(),
            spare: Vec::new(),
        }
    }

    /// Caps the frames held at once (at least 1).
    #[must_use]
    pub fn with_held_limit(mut self, limit: usize) -> Self {
        self.held_limit = limit.max(1);
        self
    }

    /// The counters so far, with the frames held now.
    pub fn counters(&self) -> ImpairCounters {
        ImpairCounters {
            held: self.held.len() as u64,
            ..self.counters
        }
    }

    /// Mutable counters, for the I/O layer's own entries (oversize, send
    /// errors).
    pub fn counters_mut(&mut self) -> &mut ImpairCounters {
        &mut self.counters
    }

    /// Frames held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The earliest release time of a held frame.
    pub fn next_release(&self) -> Option<u64> {
        self.held.next_ready().map(Instant::as_nanos)
    }

    /// A zero-filled buffer of `len` bytes, reused if one is spare.
    pub fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.resize(len, 0);
        b
    }

    /// Returns a buffer for reuse (at most 1024 are kept).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < 1024 {
            self.spare.push(buf);
        }
    }

    /// Takes a frame that arrived at `now_ns` through the pipeline.
    pub fn push(&mut self, now_ns: u64, frame: Vec<u8>) {
        self.counters.received += 1;
        if self.rng.chance(self.cfg.loss) {
            self.counters.dropped_loss += 1;
            self.recycle(frame);
            return;
        }
        if self.rng.chance(self.cfg.duplicate) {
            self.counters.duplicated += 1;
            let mut copy = self.buffer(0);
            copy.extend_from_slice(&frame);
            self.enqueue(now_ns, frame);
            self.enqueue(now_ns, copy);
        } else {
            self.enqueue(now_ns, frame);
        }
    }

    /// Steps 3–5 for one copy.
    fn enqueue(&mut self, now_ns: u64, mut frame: Vec<u8>) {
        if self.held.len() >= self.held_limit {
            self.counters.dropped_queue += 1;
            self.recycle(frame);
            return;
        }
        let now = Instant::from_nanos(now_ns);
        let mut release = now;
        if let Some(link) = &mut self.link {
            let len = frame.len() as u64;
            if link.backlog_bytes(now).saturating_add(len) > self.cfg.queue_bytes {
                self.counters.dropped_queue += 1;
                self.recycle(frame);
                return;
            }
            release = link.send(now, len);
        }
        release += self.cfg.delay;
        if self.rng.chance(self.cfg.reorder) {
            self.counters.reordered += 1;
            release += self.cfg.reorder_delay;
        }
        if self.cfg.corrupt > 0.0 {
            if let Some(payload) = l4_payload(&frame) {
                if self.rng.chance(self.cfg.corrupt) {
                    let bits = (payload.len() * 8) as u64;
                    let bit = self.rng.below(bits) as usize;
                    frame[payload.start + bit / 8] ^= 1 << (bit % 8);
                    self.counters.corrupted += 1;
                }
            }
        }
        if release > now {
            self.counters.delayed += 1;
        }
        self.held.push(release, frame);
    }

    /// The next frame whose release time is at or before `now_ns`; counts
    /// it as forwarded.
    pub fn pop_ready(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        let frame = self.held.pop(Instant::from_nanos(now_ns))?;
        self.counters.forwarded += 1;
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::frame::tests::tcp_frame;
    use super::*;

    fn cfg(spec: &str) -> ImpairConfig {
        spec.parse().expect(spec)
    }

    /// Frames tagged with their index in the first payload bytes.
    fn tagged(i: u32, payload: usize) -> Vec<u8> {
        let mut f = tcp_frame(payload.max(4));
        f[66..70].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn tag(f: &[u8]) -> u32 {
        u32::from_be_bytes([f[66], f[67], f[68], f[69]])
    }

    /// Pushes `n` frames 1 µs apart, draining as the clock moves; drains the
    /// rest at the end. Returns (release time, tag) of every output.
    fn run(imp: &mut Impairer, n: u32, payload: usize) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        let mut now = 0;
        for i in 0..n {
            now = u64::from(i) * 1_000;
            while let Some(f) = imp.pop_ready(now) {
                out.push((now, tag(&f)));
            }
            imp.push(now, tagged(i, payload));
        }
        for _ in 0..10_000_000 {
            let Some(t) = imp.next_release() else { break };
            now = now.max(t);
            while let Some(f) = imp.pop_ready(now) {
                out.push((now, tag(&f)));
            }
        }
        assert_eq!(imp.held(), 0);
        out
    }

    #[test]
    fn identity_forwards_everything_at_once_in_order() {
        let mut imp = Impairer::new(ImpairConfig::default());
        let out = run(&mut imp, 1000, 100);
        assert_eq!(out.len(), 1000);
        assert!(out.iter().enumerate().all(|(i, &(_, t))| t == i as u32));
        let c = imp.counters();
        assert_eq!((c.received, c.forwarded, c.delayed), (1000, 1000, 0));
    }

    #[test]
    fn loss_drops_its_share_and_nothing_else() {
        let mut imp = Impairer::new(cfg("loss=10%,seed=3"));
        let out = run(&mut imp, 50_000, 10);
        let c = imp.counters();
        assert_eq!(c.received, 50_000);
        assert_eq!(c.forwarded as usize, out.len());
        assert_eq!(c.forwarded + c.dropped_loss, c.received);
        let rate = c.dropped_loss as f64 / c.received as f64;
        assert!((rate - 0.10).abs() < 0.01, "{rate}");
        assert!(out.windows(2).all(|w| w[0].1 < w[1].1), "order kept");
    }

    #[test]
    fn duplicates_follow_their_original() {
        let mut imp = Impairer::new(cfg("dup=5%"));
        let out = run(&mut imp, 20_000, 10);
        let c = imp.counters();
        assert_eq!(c.forwarded, c.received + c.duplicated);
        let rate = c.duplicated as f64 / c.received as f64;
        assert!((rate - 0.05).abs() < 0.01, "{rate}");
        let twins = out.windows(2).filter(|w| w[0].1 == w[1].1).count() as u64;
        assert_eq!(twins, c.duplicated);
    }

    #[test]
    fn fixed_delay_holds_every_frame_exactly() {
        let mut imp = Impairer::new(cfg("delay=50us"));
        let out = run(&mut imp, 100, 10);
        for (released, t) in out {
            assert_eq!(released, u64::from(t) * 1_000 + 50_000, "frame {t}");
        }
        assert_eq!(imp.counters().delayed, 100);
    }

    #[test]
    fn reordered_frames_are_overtaken() {
        let mut imp = Impairer::new(cfg("reorder=5%:20us,seed=11"));
        let out = run(&mut imp, 10_000, 10);
        let c = imp.counters();
        assert_eq!(c.forwarded, 10_000);
        let rate = c.reordered as f64 / 10_000.0;
        assert!((rate - 0.05).abs() < 0.01, "{rate}");
        // Each reordered frame is overtaken by the ~20 frames that arrive
        // during its extra 20 µs.
        let inversions = out.windows(2).filter(|w| w[0].1 > w[1].1).count() as u64;
        assert!(
            inversions > c.reordered / 2,
            "{inversions} vs {}",
            c.reordered
        );
        let mut tags: Vec<u32> = out.iter().map(|&(_, t)| t).collect();
        tags.sort_unstable();
        assert!(tags.iter().enumerate().all(|(i, &t)| t == i as u32));
    }

    #[test]
    fn corruption_flips_one_payload_bit_and_never_a_header() {
        let mut imp = Impairer::new(cfg("corrupt=30%,seed=5"));
        let mut flipped = 0;
        for i in 0..2000 {
            let original = tagged(i, 200);
            imp.push(0, original.clone());
            let out = imp.pop_ready(0).expect("no delay");
            let diff: Vec<usize> = (0..out.len()).filter(|&k| out[k] != original[k]).collect();
            match diff.as_slice() {
                [] => {}
                [k] => {
                    assert!(*k >= 66, "byte {k} is a header byte");
                    assert_eq!((out[*k] ^ original[*k]).count_ones(), 1);
                    flipped += 1;
                }
                many => panic!("{} bytes changed", many.len()),
            }
        }
        assert_eq!(imp.counters().corrupted, flipped);
        let rate = flipped as f64 / 2000.0;
        assert!((rate - 0.30).abs() < 0.04, "{rate}");
        // A pure ACK has no payload: never corrupted.
        let ack = tcp_frame(0);
        for _ in 0..100 {
            imp.push(0, ack.clone());
            assert_eq!(imp.pop_ready(0).expect("forwarded"), ack);
        }
    }

    #[test]
    fn rate_spaces_frames_by_their_wire_time_and_tail_drops() {
        // 1000-byte frames at 80 Mbit/s: 100 µs each; arrivals every 1 µs
        // overrun it, and the 10 kB queue holds 10 frames.
        let mut imp = Impairer::new(cfg("rate=80mbit,queue=10000"));
        let frame_len = tagged(0, 1000 - 66).len();
        assert_eq!(frame_len, 1000);
        let out = run(&mut imp, 200, 1000 - 66);
        let c = imp.counters();
        assert_eq!(c.forwarded + c.dropped_queue, 200);
        // The queue admits a frame while ≤ 10 000 bytes (incl. it) wait:
        // the first 10 arrivals, then one per 100 µs as the link drains.
        assert!((10..=13).contains(&c.forwarded), "{c}");
        for w in out.windows(2) {
            assert!(w[1].0 - w[0].0 >= 100_000, "{w:?}");
        }
        assert_eq!(out[0].0, 100_000);
    }

    #[test]
    fn same_seed_same_fate() {
        let spec = "loss=5%,dup=5%,reorder=5%:10us,corrupt=5%,delay=3us,seed=42";
        let a = run(&mut Impairer::new(cfg(spec)), 5000, 50);
        let b = run(&mut Impairer::new(cfg(spec)), 5000, 50);
        let c = run(&mut Impairer::new(cfg(spec).with_seed(43)), 5000, 50);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn held_limit_bounds_memory() {
        let mut imp = Impairer::new(cfg("delay=1s")).with_held_limit(100);
        for i in 0..1000 {
            imp.push(u64::from(i), tagged(i, 10));
        }
        assert_eq!(imp.held(), 100);
        let c = imp.counters();
        assert_eq!((c.dropped_queue, c.held), (900, 100));
        assert_eq!(imp.pop_ready(1_000_000), None);
        assert!(imp
            .pop_ready(Duration::from_secs(2).as_nanos() as u64)
            .is_some());
        let c = imp.counters();
        assert_eq!((c.forwarded, c.held), (1, 99), "{c}");
    }
}
