//! `tcp_engine`: a `TcpConnection` (opened actively or passively, options
//! negotiated at random) fed arbitrary segments — flags, sequence and
//! acknowledgment numbers near and far from the live ones, windows,
//! options, lying payload lengths and accepted ranges — interleaved with
//! posts, closes and timer ticks at increasing times.
//!
//! Invariants after every step: no panic; SND.UNA <= SND.NXT; the in-order
//! receive point and the acknowledged point never move back, and every
//! byte below the receive point lies in some accepted range; one drain
//! yields a bounded number of segments and events; events are well formed
//! (`Received`/`Acked` strictly increasing and within what the connection
//! reports, nothing after `Closed`); data segments name posted send bytes
//! at their own sequence numbers; timers do not stay due after running.

use core::time::Duration;

use arbitrary::{Result, Unstructured};
use proto::{Ecn, Flags};
use transports::tcp::{State, TcpConfig, TcpConnection};
use transports::{Event, Instant, RxSegment, Transport};

use crate::frames::{self, LOCAL_PORT, PEER_PORT};
use crate::rig::MAX_OUTPUT_PER_STEP;

use super::Reached;

const MAX_STEPS: usize = 64;

/// The connection and what the checks remember.
struct Model {
    c: TcpConnection,
    now: Instant,
    send_posted: u64,
    recv_posted: u64,
    /// Every accepted range handed in so far lay inside posted space.
    honest_ranges: bool,
    /// Union of every accepted range handed in: the stream bytes the
    /// datapath ever said it placed.
    accepted: Vec<(u64, u64)>,
    received: u64,
    acked: u64,
    last_received_event: u64,
    last_acked_event: u64,
    closed: bool,
    peer_closed: bool,
    fin_queued: bool,
    /// A broken invariant seen in the middle of a step.
    error: Option<String>,
}

pub(super) fn run(data: &[u8]) -> core::result::Result<Reached, String> {
    let mut u = Unstructured::new(data);
    let Ok(mut m) = open(&mut u) else {
        return Ok(Reached::SetupOnly);
    };
    m.check()?;
    // The input reached the engine when at least one step (segment, tick,
    // post or close) ran on the open connection.
    let mut steps = 0;
    for _ in 0..MAX_STEPS {
        if u.is_empty() {
            break;
        }
        match step(&mut u, &mut m) {
            Ok(()) => m.check()?,
            Err(_) => break,
        }
        steps += 1;
    }
    Ok(if steps > 0 {
        Reached::Engine
    } else {
        Reached::SetupOnly
    })
}

fn config(u: &mut Unstructured<'_>) -> Result<TcpConfig> {
    Ok(TcpConfig {
        sack: u.arbitrary()?,
        timestamps: u.arbitrary()?,
        ecn: u.arbitrary()?,
        window_scale: if u.arbitrary()? {
            Some(u.int_in_range(0u8..=14)?)
        } else {
            None
        },
        quick_ack_segments: u.int_in_range(0u32..=16)?,
        tail_loss_probe: u.arbitrary()?,
        pacing: u.arbitrary()?,
        mss: u.int_in_range(64u16..=9000)?,
        max_retransmissions: u.int_in_range(1u32..=15)?,
        ..TcpConfig::default()
    })
}

/// The options of the peer's SYN: any subset of MSS, window scale, SACK
/// permitted and timestamps, sometimes garbage.
fn syn_options(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    if u.ratio(1u8, 8u8)? {
        return frames::options(u);
    }
    let mut o = Vec::new();
    if u.arbitrary()? {
        o.extend_from_slice(&[2, 4]);
        o.extend_from_slice(&u.arbitrary::<u16>()?.to_be_bytes());
    }
    if u.arbitrary()? {
        o.extend_from_slice(&[1, 3, 3, u.arbitrary()?]);
    }
    if u.arbitrary()? {
        o.extend_from_slice(&[1, 1, 4, 2]);
    }
    if u.arbitrary()? {
        o.extend_from_slice(&frames::ts_option(u.arbitrary()?, u.arbitrary()?));
    }
    Ok(o)
}

fn open(u: &mut Unstructured<'_>) -> Result<Model> {
    let cfg = config(u)?;
    let iss: u32 = u.arbitrary()?;
    let irs: u32 = u.arbitrary()?;
    let now = Instant::ZERO;
    let opts = syn_options(u)?;
    let window = u.arbitrary()?;
    let c = if u.arbitrary()? {
        let mut c = TcpConnection::connect(now, cfg, LOCAL_PORT, PEER_PORT, iss)
            .map_err(|_| arbitrary::Error::IncorrectFormat)?;
        while c.poll_transmit(now).is_some() {}
        let h = frames::header(
            Flags::SYN | Flags::ACK,
            irs,
            iss.wrapping_add(1),
            window,
            &opts,
        );
        c.handle_segment(now, &bare(h));
        c
    } else {
        let h = frames::header(Flags::SYN, irs, 0, window, &opts);
        TcpConnection::accept(now, cfg, &bare(h), iss)
            .map_err(|_| arbitrary::Error::IncorrectFormat)?
    };
    let mut m = Model {
        c,
        now,
        send_posted: 0,
        recv_posted: 0,
        honest_ranges: true,
        accepted: Vec::new(),
        received: 0,
        acked: 0,
        last_received_event: 0,
        last_acked_event: 0,
        closed: false,
        peer_closed: false,
        fin_queued: false,
        error: None,
    };
    let r = u.int_in_range(0u64..=200_000)?;
    m.c.recv_posted(now, r);
    m.recv_posted = r;
    Ok(m)
}

fn bare(header: proto::TcpHeader) -> RxSegment {
    RxSegment {
        header,
        payload_len: 0,
        accepted: 0..0,
        ecn: Ecn::NotEct,
        segment_size: 0,
    }
}

fn step(u: &mut Unstructured<'_>, m: &mut Model) -> Result<()> {
    match u.int_in_range(0u8..=15)? {
        0..=8 => {
            let s = segment(u, m)?;
            m.c.handle_segment(m.now, &s);
        }
        9 | 10 => {
            m.now += Duration::from_micros(u.int_in_range(0u64..=2_000_000)?);
            for i in 0..=64 {
                match m.c.poll_timeout() {
                    Some(t) if t <= m.now => m.c.handle_timeout(m.now),
                    _ => break,
                }
                if let Some(e) = drain(m) {
                    m.error.get_or_insert(e);
                }
                if i == 64 {
                    m.error
                        .get_or_insert(format!("timer still due at {:?}", m.now));
                }
            }
        }
        11 => {
            let n = u.int_in_range(0u64..=100_000)?;
            m.c.send_posted(m.now, n);
            if !m.fin_queued && m.c.state() != State::Closed {
                m.send_posted += n;
            }
        }
        12 => {
            let n = u.int_in_range(0u64..=100_000)?;
            m.c.recv_posted(m.now, n);
            m.recv_posted += n;
        }
        13 => {
            m.fin_queued |= matches!(
                m.c.state(),
                State::SynReceived | State::Established | State::CloseWait
            );
            m.c.close(m.now);
        }
        14 if u.ratio(1u8, 4u8)? => m.c.abort(m.now),
        _ => m.now += Duration::from_micros(u.int_in_range(0u64..=2000)?),
    }
    Ok(())
}

/// A segment from the peer with fields near the live ones or anywhere.
fn segment(u: &mut Unstructured<'_>, m: &mut Model) -> Result<RxSegment> {
    let c = &m.c;
    let seq = match u.int_in_range(0u8..=3)? {
        0 | 1 => c.rcv_nxt().wrapping_add(u.int_in_range(0u32..=3000)?),
        2 => c
            .rcv_nxt()
            .wrapping_add(u.arbitrary::<i16>()? as i32 as u32),
        _ => u.arbitrary()?,
    };
    let ack = match u.int_in_range(0u8..=5)? {
        0 => c.snd_nxt(),
        // Duplicate ACKs drive fast retransmit and SACK recovery.
        1 => c.snd_una(),
        2 => c.snd_una().wrapping_add(u.int_in_range(0u32..=100_000)?),
        5 => c.snd_una().wrapping_add(u.int_in_range(0u32..=3000)?),
        3 => c.snd_una().wrapping_add(u.arbitrary::<i32>()? as u32),
        _ => u.arbitrary()?,
    };
    let flags = match u.int_in_range(0u8..=7)? {
        0..=3 => Flags::ACK,
        4 => Flags::ACK | Flags::FIN,
        5 => Flags::ACK | Flags::ECE,
        _ => Flags(u.arbitrary()?),
    };
    let options = if c.negotiated().timestamps && u.ratio(2u8, 3u8)? {
        let tsval = (m.now.as_nanos() / 1000) as u32;
        frames::ts_option(
            tsval.wrapping_add(u.arbitrary::<i8>()? as i32 as u32),
            u.arbitrary()?,
        )
        .to_vec()
    } else if c.negotiated().sack && u.arbitrary()? {
        // SACK blocks inside what is in flight.
        let una = c.snd_una();
        let flight = c.snd_nxt().wrapping_sub(una).max(1);
        let l = una.wrapping_add(u.int_in_range(0..=flight - 1)?);
        let r = l.wrapping_add(u.int_in_range(1..=flight)?);
        let mut o = vec![1, 1, 5, 10];
        o.extend_from_slice(&l.to_be_bytes());
        o.extend_from_slice(&r.to_be_bytes());
        o
    } else {
        frames::options(u)?
    };
    let payload_len = if u.ratio(7u8, 8u8)? {
        u.int_in_range(0u32..=3000)?
    } else {
        u.arbitrary()?
    };
    // Where the datapath would have put it, as a stream offset.
    let start = u64::from(seq.wrapping_sub(c.irs().wrapping_add(1)));
    let accepted = match u.int_in_range(0u8..=4)? {
        0 | 1 => start..start + u64::from(payload_len),
        2 => 0..0,
        3 => {
            let a = c.received() + u.int_in_range(0u64..=5000)?;
            a..a + u.int_in_range(0u64..=5000)?
        }
        _ => {
            let a: u64 = u.arbitrary()?;
            a..a.saturating_add(u.arbitrary::<u32>()?.into())
        }
    };
    if !accepted.is_empty() && accepted.end > m.recv_posted {
        m.honest_ranges = false;
    }
    add_range(&mut m.accepted, accepted.start, accepted.end);
    let ecn = *u.choose(&[Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce])?;
    Ok(RxSegment {
        header: frames::header(flags, seq, ack, u.arbitrary()?, &options),
        payload_len,
        accepted,
        ecn,
        segment_size: 0,
    })
}

/// Adds `[start, end)` to a sorted list of disjoint, non-adjacent ranges.
fn add_range(set: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let (mut s, mut e) = (start, end);
    set.retain(|&(a, b)| {
        let touches = a <= e && s <= b;
        if touches {
            s = s.min(a);
            e = e.max(b);
        }
        !touches
    });
    let at = set.partition_point(|&(a, _)| a < s);
    set.insert(at, (s, e));
}

fn drain(m: &mut Model) -> Option<String> {
    let mut n = 0;
    while let Some(s) = m.c.poll_transmit(m.now) {
        n += 1;
        if n > MAX_OUTPUT_PER_STEP {
            return Some(format!(
                "more than {MAX_OUTPUT_PER_STEP} segments in one step"
            ));
        }
        if let Some(r) = &s.payload {
            if r.start >= r.end || r.end > m.send_posted {
                return Some(format!("segment sends {r:?}, posted {}", m.send_posted));
            }
            let seq = m.c.iss().wrapping_add(1).wrapping_add(r.start as u32);
            if s.header.seq != seq {
                return Some(format!(
                    "payload {r:?} sent at seq {} not {seq}",
                    s.header.seq
                ));
            }
        }
        if s.header.src_port != LOCAL_PORT || s.header.dst_port != PEER_PORT {
            return Some(format!("segment with ports {:?}", s.header));
        }
    }
    None
}

impl Model {
    fn check(&mut self) -> core::result::Result<(), String> {
        if let Some(e) = self.error.take().or_else(|| drain(self)) {
            return Err(e);
        }
        let (una, nxt) = (self.c.snd_una(), self.c.snd_nxt());
        if (nxt.wrapping_sub(una) as i32) < 0 {
            return Err(format!("snd_una {una} > snd_nxt {nxt}"));
        }
        let received = self.c.received();
        if received < self.received {
            return Err(format!(
                "received went back {} -> {received}",
                self.received
            ));
        }
        if self.honest_ranges && received > self.recv_posted {
            return Err(format!(
                "received {received} beyond posted {}",
                self.recv_posted
            ));
        }
        // In-order bytes must all have been placed by some segment.
        let placed_prefix = match self.accepted.first() {
            Some(&(0, end)) => end,
            _ => 0,
        };
        if received > placed_prefix {
            return Err(format!(
                "received {received} but the datapath placed only [0, {placed_prefix}) in order"
            ));
        }
        self.received = received;
        let acked = self.c.acked();
        if acked < self.acked || acked > self.send_posted {
            return Err(format!(
                "acked {} -> {acked}, posted {}",
                self.acked, self.send_posted
            ));
        }
        self.acked = acked;
        for _ in 0..=MAX_OUTPUT_PER_STEP {
            let Some(e) = self.c.poll_event() else {
                return Ok(());
            };
            self.check_event(&e)?;
        }
        Err("events never ran dry".to_string())
    }

    fn check_event(&mut self, e: &Event) -> core::result::Result<(), String> {
        if matches!(e, Event::SynForListener) {
            // A SYN handed back is only ever for a connection that ended.
            return if self.closed {
                Ok(())
            } else {
                Err("SynForListener before Closed".to_string())
            };
        }
        if self.closed {
            return Err(format!("{e:?} after Closed"));
        }
        match *e {
            Event::Received { upto } => {
                if upto <= self.last_received_event || upto > self.received {
                    return Err(format!(
                        "Received {upto} after {}, received {}",
                        self.last_received_event, self.received
                    ));
                }
                self.last_received_event = upto;
            }
            Event::Acked { upto } => {
                if upto <= self.last_acked_event || upto > self.acked {
                    return Err(format!(
                        "Acked {upto} after {}, acked {}",
                        self.last_acked_event, self.acked
                    ));
                }
                self.last_acked_event = upto;
            }
            Event::PeerClosed { len } => {
                if self.peer_closed || len < self.last_received_event {
                    return Err(format!("PeerClosed {len} (again: {})", self.peer_closed));
                }
                self.peer_closed = true;
            }
            Event::Closed { .. } => self.closed = true,
            Event::Discarded { ref range } => {
                if range.is_empty() {
                    return Err(format!("Discarded an empty range {range:?}"));
                }
            }
            Event::Connected | Event::SynForListener => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::add_range;

    #[test]
    fn ranges_merge_when_they_touch() {
        let mut s = Vec::new();
        add_range(&mut s, 10, 20);
        add_range(&mut s, 30, 40);
        add_range(&mut s, 5, 5);
        assert_eq!(s, vec![(10, 20), (30, 40)]);
        add_range(&mut s, 0, 10);
        assert_eq!(s, vec![(0, 20), (30, 40)]);
        add_range(&mut s, 15, 35);
        assert_eq!(s, vec![(0, 40)]);
        add_range(&mut s, 50, 60);
        add_range(&mut s, 45, 46);
        assert_eq!(s, vec![(0, 40), (45, 46), (50, 60)]);
    }
}
