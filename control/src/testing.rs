//! A two-host harness (feature `testing`): two real [`Stack`]s (host,
//! header-only TCP engine, datapath) over the datapath's fake kernel,
//! joined by a driver that moves every frame one sends to the other. No
//! socket, no XDP program, no root, and time is a parameter: both hosts
//! read the pair's clock, which moves by [`Pair::tick`] per step.
//!
//! One [`Pair::step`]: host A polls, host B polls (both at the pair's
//! time), each frame A sent is delivered through B's fake kernel (its
//! steering decides: B's flow, B's listener, or B's kernel) and the other
//! way round, then each side's TX descriptors are completed unless the
//! side holds them ([`Side::hold_tx`], to test back-pressure). B's kernel
//! is absent, so the harness answers for it what Linux would for a frame
//! no socket claims: a SYN gets RST|ACK ([`Pair::kernel_resets`]).
//!
//! ```
//! use zerosplit::provider::{CompletionKind, Provider};
//! use zerosplit::testing::Pair;
//!
//! let mut pair = Pair::new();
//! pair.b.stack.listen(5201).expect("listen");
//! let id = pair.a.stack.connect(pair.b_addr(5201).into()).expect("connect");
//! pair.drive(20);
//! let c = pair.a.stack.poll_completion().expect("a completion");
//! assert_eq!((c.conn, c.kind), (id, CompletionKind::Connected));
//! ```

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use datapath::testing::{Delivery, FakeKernel};
use transports::Instant;

use crate::host::HostConfig;
use crate::provider::Provider;
use crate::stack::Stack;

/// Host A's address.
pub const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Host B's address.
pub const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Host A's MAC.
pub const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// Host B's MAC.
pub const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// Which host sent a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// Host A.
    A,
    /// Host B.
    B,
    /// The (absent) kernel of the receiving host, as the harness answers
    /// for it.
    Kernel,
}

/// The TCP fields of one frame that crossed the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Who sent it.
    pub from: From,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// SYN, ACK, RST, FIN as [`proto::Flags`] bits.
    pub flags: proto::Flags,
    /// Payload bytes.
    pub len: usize,
    /// What the receiving side's fake kernel did with it (`None`: the
    /// link lost it, see [`Pair::cut`]).
    pub delivery: Option<Delivery>,
}

impl Segment {
    /// Whether every bit of `flags` is set.
    pub fn has(&self, flags: proto::Flags) -> bool {
        self.flags.contains(flags)
    }
}

/// One host of the pair with the kernel's side of its rings.
#[derive(Debug)]
pub struct Side {
    /// The host.
    pub stack: Stack,
    /// Its fake kernel.
    pub kernel: FakeKernel,
    /// Hold the TX descriptors this host sends (the NIC never reports
    /// them transmitted) instead of completing them each step.
    pub hold_tx: bool,
}

impl Side {
    fn new(config: &HostConfig, ip: Ipv4Addr, mac: [u8; 6], peer_mac: [u8; 6]) -> Side {
        let (stack, kernel) = Stack::fake(config.clone(), ip, mac, peer_mac).expect("fake stack");
        Side {
            stack,
            kernel,
            hold_tx: false,
        }
    }

    /// Polls the host at `now`, then takes what it sent.
    fn poll(&mut self, now: Instant) -> (usize, Vec<Vec<u8>>) {
        self.stack.set_clock(now);
        let work = self.stack.poll();
        let frames = self.kernel.take_tx(self.stack.nic_mut());
        (work, frames)
    }
}

/// Two hosts on one link, and the driver between them.
#[derive(Debug)]
pub struct Pair {
    /// Host A (at [`IP_A`]).
    pub a: Side,
    /// Host B (at [`IP_B`]).
    pub b: Side,
    /// Every frame that crossed the link, in order.
    pub log: Vec<Segment>,
    /// How far the clock moves per step.
    pub tick: Duration,
    /// Answer a SYN that a host's steering passed to its (absent) kernel
    /// with RST|ACK, as Linux does for a port nobody listens on.
    pub kernel_resets: bool,
    /// Lose every frame this host sends (a cut link one way).
    pub cut: Option<From>,
    now: Instant,
}

impl Default for Pair {
    fn default() -> Self {
        Pair::new()
    }
}

impl Pair {
    /// Two hosts of [`Pair::config`].
    pub fn new() -> Pair {
        Pair::with_config(&Pair::config())
    }

    /// Two hosts of `config` (its `nic.queue` must be 0).
    ///
    /// # Panics
    /// The configuration is refused.
    pub fn with_config(config: &HostConfig) -> Pair {
        Pair {
            a: Side::new(config, IP_A, MAC_A, MAC_B),
            b: Side::new(config, IP_B, MAC_B, MAC_A),
            log: Vec::new(),
            tick: Duration::from_millis(1),
            kernel_resets: true,
            cut: None,
            now: Instant::ZERO,
        }
    }

    /// A small configuration: the datapath's
    /// [`small_config`](datapath::testing::small_config), TSO off, loops
    /// that never sleep (an idle host's sleep is real time, which the
    /// pair's clock keeps out), the host's defaults otherwise.
    pub fn config() -> HostConfig {
        let mut config = HostConfig {
            nic: datapath::testing::small_config(),
            poll: crate::idle::PollConfig {
                mode: crate::idle::PollMode::Spin,
                ..crate::idle::PollConfig::default()
            },
            ..HostConfig::default()
        };
        config.tcp.tso_segments = 1;
        config
    }

    /// B's address at `port`.
    pub fn b_addr(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(IP_B, port)
    }

    /// The pair's clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// One step (see the module); returns the work both hosts reported
    /// plus the frames that crossed.
    pub fn step(&mut self) -> usize {
        let now = self.now;
        let (work_a, from_a) = self.a.poll(now);
        let (work_b, from_b) = self.b.poll(now);
        let moved = from_a.len() + from_b.len();
        let (lose_a, lose_b) = (self.cut == Some(From::A), self.cut == Some(From::B));
        for frame in from_a {
            if lose_a {
                self.log.extend(parse(From::A, &frame, None));
                continue;
            }
            Pair::carry(
                &mut self.log,
                self.kernel_resets,
                From::A,
                &frame,
                &mut self.b,
                &mut self.a,
            );
        }
        for frame in from_b {
            if lose_b {
                self.log.extend(parse(From::B, &frame, None));
                continue;
            }
            Pair::carry(
                &mut self.log,
                self.kernel_resets,
                From::B,
                &frame,
                &mut self.a,
                &mut self.b,
            );
        }
        for side in [&mut self.a, &mut self.b] {
            if !side.hold_tx {
                side.kernel.complete_all();
            }
        }
        self.now += self.tick;
        work_a + work_b + moved
    }

    /// Delivers `frame` from `sender` to `to`; a SYN `to`'s kernel would
    /// get is answered with RST|ACK back to `sender`'s host.
    fn carry(
        log: &mut Vec<Segment>,
        kernel_resets: bool,
        from: From,
        frame: &[u8],
        to: &mut Side,
        back: &mut Side,
    ) {
        let delivery = to.kernel.deliver(to.stack.nic_mut(), frame);
        let Some(seg) = parse(from, frame, Some(delivery)) else {
            return;
        };
        log.push(seg);
        let syn_only = seg.flags.is_connection_request();
        if kernel_resets && delivery == Delivery::Passed && syn_only {
            let rst = reset_for(frame, seg);
            let d = back.kernel.deliver(back.stack.nic_mut(), &rst);
            if let Some(r) = parse(From::Kernel, &rst, Some(d)) {
                log.push(r);
            }
        }
    }

    /// Steps `n` times.
    pub fn drive(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }

    /// Steps until `done` holds (checked before each step), at most `max`
    /// steps; whether it held.
    pub fn run_until(&mut self, max: usize, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        for _ in 0..max {
            if done(self) {
                return true;
            }
            self.step();
        }
        done(self)
    }

    /// The frames of the log sent by `from`.
    pub fn sent_by(&self, from: From) -> impl Iterator<Item = &Segment> {
        self.log.iter().filter(move |s| s.from == from)
    }
}

const ETH: usize = 14;
const IPV4: usize = 20;
const TCP: usize = 20;

/// The TCP fields of an Ethernet/IPv4/TCP frame (None for anything else).
fn parse(from: From, frame: &[u8], delivery: Option<Delivery>) -> Option<Segment> {
    if frame.len() < ETH + IPV4 + TCP || frame[12..14] != [0x08, 0x00] || frame[ETH + 9] != 6 {
        return None;
    }
    let ihl = usize::from(frame[ETH] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([frame[ETH + 2], frame[ETH + 3]]));
    let t = ETH + ihl;
    let be16 = |i: usize| u16::from_be_bytes([frame[i], frame[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([frame[i], frame[i + 1], frame[i + 2], frame[i + 3]]);
    let doff = usize::from(frame[t + 12] >> 4) * 4;
    Some(Segment {
        from,
        src_port: be16(t),
        dst_port: be16(t + 2),
        seq: be32(t + 4),
        ack: be32(t + 8),
        flags: proto::Flags(frame[t + 13]),
        len: total.saturating_sub(ihl + doff),
        delivery,
    })
}

/// The RST|ACK Linux sends for `syn` (a frame `seg` describes), addressed
/// back to its sender.
fn reset_for(syn: &[u8], seg: Segment) -> Vec<u8> {
    let mut ends = [0u8; 20];
    ends[0..6].copy_from_slice(&syn[6..12]);
    ends[6..12].copy_from_slice(&syn[0..6]);
    ends[12..16].copy_from_slice(&syn[ETH + 16..ETH + 20]);
    ends[16..20].copy_from_slice(&syn[ETH + 12..ETH + 16]);
    let rst = Forged {
        src_port: seg.dst_port,
        dst_port: seg.src_port,
        seq: 0,
        ack: seg.seq.wrapping_add(1),
        flags: proto::Flags::RST | proto::Flags::ACK,
        options: Vec::new(),
    };
    tcp_frame(&ends, &rst)
}

/// A TCP segment a test makes up ([`Pair::forge_to_b`]): what a peer the
/// harness does not run (a Linux client reusing a port, an attacker)
/// would send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forged {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags.
    pub flags: proto::Flags,
    /// Options, as on the wire (padded to a multiple of 4 here).
    pub options: Vec<u8>,
}

impl Pair {
    /// Delivers `seg`, as if A's address had sent it, through B's fake
    /// kernel, and logs it (from A); B's answers come with the next steps.
    pub fn forge_to_b(&mut self, seg: &Forged) -> Delivery {
        let mut ends = [0u8; 20];
        ends[0..6].copy_from_slice(&MAC_B);
        ends[6..12].copy_from_slice(&MAC_A);
        ends[12..16].copy_from_slice(&IP_A.octets());
        ends[16..20].copy_from_slice(&IP_B.octets());
        let frame = tcp_frame(&ends, seg);
        let delivery = self.b.kernel.deliver(self.b.stack.nic_mut(), &frame);
        self.log.extend(parse(From::A, &frame, Some(delivery)));
        delivery
    }
}

/// An Ethernet/IPv4/TCP frame without payload; `ends` holds the
/// destination and source MACs, then the source and destination
/// addresses.
fn tcp_frame(ends: &[u8; 20], seg: &Forged) -> Vec<u8> {
    let mut options = seg.options.clone();
    options.resize(options.len().div_ceil(4) * 4, 0);
    let tcp = TCP + options.len();
    let mut f = vec![0u8; ETH + IPV4 + tcp];
    f[0..12].copy_from_slice(&ends[0..12]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = ETH;
    f[ip] = 0x45;
    f[ip + 2..ip + 4].copy_from_slice(&((IPV4 + tcp) as u16).to_be_bytes());
    f[ip + 6] = 0x40; // DF
    f[ip + 8] = 64;
    f[ip + 9] = 6;
    f[ip + 12..ip + 20].copy_from_slice(&ends[12..20]);
    let c = checksum(0, &f[ip..ip + IPV4]);
    f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let t = ETH + IPV4;
    f[t..t + 2].copy_from_slice(&seg.src_port.to_be_bytes());
    f[t + 2..t + 4].copy_from_slice(&seg.dst_port.to_be_bytes());
    f[t + 4..t + 8].copy_from_slice(&seg.seq.to_be_bytes());
    f[t + 8..t + 12].copy_from_slice(&seg.ack.to_be_bytes());
    f[t + 12] = ((tcp / 4) as u8) << 4;
    f[t + 13] = seg.flags.0;
    let window: u16 = if seg.flags.contains(proto::Flags::RST) {
        0
    } else {
        64240
    };
    f[t + 14..t + 16].copy_from_slice(&window.to_be_bytes());
    f[t + TCP..].copy_from_slice(&options);
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&f[ip + 12..ip + 20]);
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(tcp as u16).to_be_bytes());
    let c = checksum(checksum_sum(0, &pseudo), &f[t..]);
    f[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

fn checksum_sum(mut sum: u32, bytes: &[u8]) -> u32 {
    for pair in bytes.chunks(2) {
        let hi = u32::from(pair[0]) << 8;
        let lo = pair.get(1).map_or(0, |b| u32::from(*b));
        sum += hi | lo;
    }
    sum
}

fn checksum(start: u32, bytes: &[u8]) -> u16 {
    let mut sum = checksum_sum(start, bytes);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
