//! Helpers for the segment-level TCP tests: build `RxSegment`s by hand,
//! drain a connection's output and events, and run two connections against
//! each other with a fixed latency and an optional drop rule.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::time::Duration;

use transports::segment::{Ecn, Flags, TcpHeader, TcpOptions};
use transports::tcp::{TcpConfig, TcpConnection};
use transports::{Event, Instant, RxSegment, SegmentOut, Transport};

/// Port of the connection under test.
pub const LOCAL: u16 = 4000;
/// Port of the hand-driven peer.
pub const REMOTE: u16 = 5000;

/// `ms` milliseconds after the epoch.
pub fn ms(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// `us` microseconds after the epoch.
pub fn us(us: u64) -> Instant {
    Instant::from_micros(us)
}

/// A header from the peer (REMOTE → LOCAL).
pub fn hdr(flags: Flags, seq: u32, ack: u32, window: u16) -> TcpHeader {
    TcpHeader {
        urgent: 0,
        src_port: REMOTE,
        dst_port: LOCAL,
        seq,
        ack,
        flags,
        window,
        options: TcpOptions::EMPTY,
    }
}

/// A segment without payload.
pub fn seg(flags: Flags, seq: u32, ack: u32, window: u16) -> RxSegment {
    RxSegment {
        header: hdr(flags, seq, ack, window),
        payload_len: 0,
        accepted: 0..0,
        ecn: Ecn::NotEct,
        segment_size: 0,
    }
}

/// `seg` with options.
pub fn with_opts(mut s: RxSegment, raw: &[u8]) -> RxSegment {
    s.header.options = TcpOptions::new(raw).expect("at most 40 option bytes");
    s
}

/// A data segment whose payload the datapath placed entirely, at receive
/// stream offset `stream_off`.
pub fn data(seq: u32, ack: u32, window: u16, stream_off: u64, len: u32) -> RxSegment {
    RxSegment {
        header: hdr(Flags::ACK, seq, ack, window),
        payload_len: len,
        accepted: stream_off..stream_off + u64::from(len),
        ecn: Ecn::NotEct,
        segment_size: 0,
    }
}

/// Everything the connection wants to send now.
pub fn drain(c: &mut TcpConnection, now: Instant) -> Vec<SegmentOut> {
    let mut v = Vec::new();
    for _ in 0..10_000 {
        match c.poll_transmit(now) {
            Some(s) => v.push(s),
            None => return v,
        }
    }
    panic!("poll_transmit never returned None");
}

/// Every pending event.
pub fn events(c: &mut TcpConnection) -> Vec<Event> {
    let mut v = Vec::new();
    for _ in 0..10_000 {
        match c.poll_event() {
            Some(e) => v.push(e),
            None => return v,
        }
    }
    panic!("poll_event never returned None");
}

/// Parsed SACK blocks of a segment, as wire sequence numbers.
pub fn sack_blocks(s: &SegmentOut) -> Vec<(u32, u32)> {
    let raw = s.header.options.as_slice();
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let len = usize::from(raw[i + 1]);
                if kind == 5 {
                    for c in raw[i + 2..i + len].chunks_exact(8) {
                        let l = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                        let r = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
                        out.push((l, r));
                    }
                }
                i += len;
            }
        }
    }
    out
}

/// A timestamps option `NOP NOP TS` with the given values.
pub fn ts_opt(tsval: u32, tsecr: u32) -> Vec<u8> {
    let mut v = vec![1, 1, 8, 10];
    v.extend_from_slice(&tsval.to_be_bytes());
    v.extend_from_slice(&tsecr.to_be_bytes());
    v
}

/// Finds the timestamp option of a segment.
pub fn ts_of(s: &SegmentOut) -> Option<(u32, u32)> {
    let raw = s.header.options.as_slice();
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            0 => return None,
            1 => i += 1,
            8 => {
                let b = &raw[i + 2..i + 10];
                return Some((
                    u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                    u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                ));
            }
            _ => i += usize::from(raw[i + 1]).max(1),
        }
    }
    None
}

/// A config with SACK, timestamps, window scaling, quick-ack and tail loss
/// probes off: plain segments and plain RFC 6298 timers.
pub fn plain_config() -> TcpConfig {
    TcpConfig {
        sack: false,
        timestamps: false,
        window_scale: None,
        quick_ack_segments: 0,
        tail_loss_probe: false,
        ..TcpConfig::default()
    }
}

/// Connects LOCAL (active, ISS `iss`) to a hand-driven peer with ISN
/// `peer_iss` (its SYN-ACK offers MSS 1460 and nothing else); returns the
/// connection in ESTABLISHED at `ms(0)` with
/// `posted` bytes of receive space posted. Panics if the handshake fails.
pub fn established(config: TcpConfig, iss: u32, peer_iss: u32, posted: u64) -> TcpConnection {
    let mut c = TcpConnection::connect(ms(0), config, LOCAL, REMOTE, iss).expect("config");
    c.recv_posted(ms(0), posted);
    let out = drain(&mut c, ms(0));
    assert_eq!(out.len(), 1, "one SYN");
    assert!(out[0].header.flags.contains(Flags::SYN));
    // The SYN-ACK carries only MSS 1460.
    let synack = seg(
        Flags::SYN | Flags::ACK,
        peer_iss,
        iss.wrapping_add(1),
        65535,
    );
    c.handle_segment(ms(1), &with_opts(synack, &[0x02, 0x04, 0x05, 0xb4]));
    assert_eq!(c.state(), transports::tcp::State::Established);
    let out = drain(&mut c, ms(1));
    assert_eq!(out.len(), 1, "the handshake ACK");
    events(&mut c);
    c
}

/// Which direction a segment travels in a [`Pair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From `a` to `b`.
    AtoB,
    /// From `b` to `a`.
    BtoA,
}

/// Decides whether a segment is lost: direction, per-direction index, segment.
pub type DropRule = Box<dyn FnMut(Dir, u64, &SegmentOut) -> bool>;

/// Extra delay for each copy of a segment that is delivered: one entry per
/// copy (two entries duplicate it); larger delays reorder.
pub type CopyRule = Box<dyn FnMut(Dir, u64, &SegmentOut) -> Vec<Duration>>;

/// Two connections wired back to back with a fixed one-way latency. The
/// "datapath" places a payload range when it lies inside the receiver's
/// posted space, exactly as the real one does.
pub struct Pair {
    pub a: TcpConnection,
    pub b: TcpConnection,
    pub now: Instant,
    pub latency: Duration,
    pub a_posted: u64,
    pub b_posted: u64,
    wire: VecDeque<(Instant, Dir, SegmentOut)>,
    /// Return `true` to drop a segment (index counts segments per direction).
    pub drop: DropRule,
    /// Copies and their extra delays for segments not dropped.
    pub copies: CopyRule,
    sent_count: [u64; 2],
    pub a_events: Vec<Event>,
    pub b_events: Vec<Event>,
}

impl Pair {
    /// A pair from two connections (`a` typically already has its SYN queued).
    pub fn new(a: TcpConnection, b: TcpConnection, latency: Duration) -> Self {
        Self {
            a,
            b,
            now: Instant::ZERO,
            latency,
            a_posted: 0,
            b_posted: 0,
            wire: VecDeque::new(),
            drop: Box::new(|_, _, _| false),
            copies: Box::new(|_, _, _| vec![Duration::ZERO]),
            sent_count: [0, 0],
            a_events: Vec::new(),
            b_events: Vec::new(),
        }
    }

    fn flush(&mut self) {
        for dir in [Dir::AtoB, Dir::BtoA] {
            for _ in 0..100_000 {
                let conn = match dir {
                    Dir::AtoB => &mut self.a,
                    Dir::BtoA => &mut self.b,
                };
                let Some(s) = conn.poll_transmit(self.now) else {
                    break;
                };
                let idx = &mut self.sent_count[dir as usize];
                *idx += 1;
                if (self.drop)(dir, *idx - 1, &s) {
                    continue;
                }
                let depart = s.not_before.unwrap_or(self.now).max(self.now);
                for extra in (self.copies)(dir, *idx - 1, &s) {
                    let at = depart + self.latency + extra;
                    // Keep the wire ordered by arrival time.
                    let pos = self.wire.partition_point(|(t, _, _)| *t <= at);
                    self.wire.insert(pos, (at, dir, s.clone()));
                }
            }
        }
        // Two well-behaved ends never flood the wire (an ACK war would).
        assert!(
            self.wire.len() < 100_000,
            "{} segments on the wire at {:?}",
            self.wire.len(),
            self.now
        );
        self.a_events.extend(events(&mut self.a));
        self.b_events.extend(events(&mut self.b));
    }

    fn deliver(&mut self, dir: Dir, s: SegmentOut) {
        let (conn, posted) = match dir {
            Dir::AtoB => (&mut self.b, self.b_posted),
            Dir::BtoA => (&mut self.a, self.a_posted),
        };
        let accepted = match &s.payload {
            Some(r) => {
                let end = r.end.min(posted);
                let start = r.start.min(end);
                start..end
            }
            None => 0..0,
        };
        let seg_in = RxSegment {
            header: s.header,
            payload_len: s.payload_len() as u32,
            accepted,
            ecn: s.ecn,
            segment_size: 0,
        };
        conn.handle_segment(self.now, &seg_in);
    }

    /// Runs until `done` holds or `max_steps` steps or `until` pass;
    /// returns whether `done` held.
    pub fn run(
        &mut self,
        max_steps: u64,
        until: Instant,
        mut done: impl FnMut(&mut Pair) -> bool,
    ) -> bool {
        for _ in 0..max_steps {
            self.flush();
            if done(self) {
                return true;
            }
            let next_wire = self.wire.front().map(|(t, _, _)| *t);
            let next = [next_wire, self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(next) = next else {
                return done(self);
            };
            if next > until {
                return done(self);
            }
            self.now = self.now.max(next);
            while let Some((t, _, _)) = self.wire.front() {
                if *t > self.now {
                    break;
                }
                let Some((_, dir, s)) = self.wire.pop_front() else {
                    break;
                };
                self.deliver(dir, s);
                // Answer each segment before the next arrives, as a
                // receiver without receive batching would.
                self.flush();
            }
            if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
                self.a.handle_timeout(self.now);
            }
            if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
                self.b.handle_timeout(self.now);
            }
        }
        done(self)
    }

    /// Passes the SYN from `a` to a new passive connection with `config`
    /// and returns the pair after the handshake. Both sides post `posted`
    /// bytes of receive space.
    pub fn handshake(a_cfg: TcpConfig, b_cfg: TcpConfig, posted: u64, latency: Duration) -> Pair {
        Self::handshake_iss(a_cfg, b_cfg, posted, latency, 1_000, 0xffff_f000)
    }

    /// [`Pair::handshake`] with chosen initial sequence numbers.
    pub fn handshake_iss(
        a_cfg: TcpConfig,
        b_cfg: TcpConfig,
        posted: u64,
        latency: Duration,
        a_iss: u32,
        b_iss: u32,
    ) -> Pair {
        let mut a =
            TcpConnection::connect(Instant::ZERO, a_cfg, LOCAL, REMOTE, a_iss).expect("config");
        a.recv_posted(Instant::ZERO, posted);
        let syn = a.poll_transmit(Instant::ZERO).expect("SYN");
        let syn_in = RxSegment {
            header: syn.header,
            payload_len: 0,
            accepted: 0..0,
            ecn: Ecn::NotEct,
            segment_size: 0,
        };
        let now = Instant::ZERO + latency;
        let mut b = TcpConnection::accept(now, b_cfg, &syn_in, b_iss).expect("accept");
        b.recv_posted(now, posted);
        let mut p = Pair::new(a, b, latency);
        p.now = now;
        p.a_posted = posted;
        p.b_posted = posted;
        let ok = p.run(100, now + Duration::from_secs(1), |p| {
            p.a.state() == transports::tcp::State::Established
                && p.b.state() == transports::tcp::State::Established
        });
        assert!(ok, "handshake: a {:?} b {:?}", p.a.state(), p.b.state());
        p
    }
}

/// What the peer's datapath would hand over for a segment we sent: the
/// whole payload placed.
pub fn to_in(s: &SegmentOut) -> RxSegment {
    RxSegment {
        header: s.header,
        payload_len: s.payload_len() as u32,
        accepted: s.payload.clone().unwrap_or(0..0),
        ecn: s.ecn,
        segment_size: 0,
    }
}

/// Like [`established`], but the peer's SYN-ACK offers MSS 1460,
/// SACK-permitted, timestamps (TSval 1) and window scale 7, so everything
/// `config` enables is negotiated.
pub fn established_full(config: TcpConfig, iss: u32, peer_iss: u32, posted: u64) -> TcpConnection {
    let mut c = TcpConnection::connect(ms(0), config, LOCAL, REMOTE, iss).expect("config");
    c.recv_posted(ms(0), posted);
    let out = drain(&mut c, ms(0));
    let tsecr = ts_of(&out[0]).map_or(0, |t| t.0);
    let mut opts = vec![0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a];
    opts.extend_from_slice(&1u32.to_be_bytes());
    opts.extend_from_slice(&tsecr.to_be_bytes());
    opts.extend_from_slice(&[0x01, 0x03, 0x03, 0x07]);
    let synack = with_opts(
        seg(
            Flags::SYN | Flags::ACK,
            peer_iss,
            iss.wrapping_add(1),
            65535,
        ),
        &opts,
    );
    c.handle_segment(ms(1), &synack);
    assert_eq!(c.state(), transports::tcp::State::Established);
    drain(&mut c, ms(1));
    events(&mut c);
    c
}
