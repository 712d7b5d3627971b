//! The hostile suite's lab: two namespaces joined by veth ("stack" and
//! "peer"), the suite's configuration, the legitimate stream and the
//! process's memory, and the tools both directions share: connecting,
//! accepting one Linux connection, and the injector that forges a kind's
//! frames from what it sniffs.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use zerosplit::provider::Provider;
use zerosplit::stack::Stack;
use zerosplit_lab::{in_netns, HarnessError, NetNs, PacketSocket, VethPair, MAX_BATCH};

use super::kinds::{Ctx, Kind, FORGED};
use super::report::Receiver;
use super::sniff::Sniffer;

/// Port the zerosplit receiver listens on.
pub(super) const ZS_PORT: u16 = 5201;

/// Port the kernel receiver listens on.
pub(super) const LINUX_PORT: u16 = 5202;

/// A port nobody listens on.
pub(super) const CLOSED_PORT: u16 = 5999;

/// Inside the stack's default ephemeral range (40000..=40999), unused.
pub(super) const IDLE_EPHEMERAL_PORT: u16 = 40977;

/// Sizes and counts of one run of the suite.
#[derive(Debug, Clone)]
pub struct SuiteConfig {
    /// Bytes of each kind's legitimate stream.
    pub stream_bytes: usize,
    /// The sender writes this many bytes at a time ...
    pub chunk: usize,
    /// ... and waits this long in between (so forged segments get ahead).
    pub pace: Duration,
    /// Injection rounds per kind.
    pub rounds: u32,
    /// Pause between rounds.
    pub round_gap: Duration,
    /// Frames of a flood kind over all rounds (the SYN flood's size).
    pub flood: u32,
    /// The zerosplit stack's flow table size (`nic.max_flows`).
    pub table_limit: usize,
    /// The zerosplit stack's accept backlog: above the table size, so the
    /// flood kinds reach the flow table's limit, not only the backlog's.
    pub backlog: usize,
    /// Give up on a stream after this long without progress.
    pub idle_timeout: Duration,
    /// Receivers to run.
    pub receivers: Vec<Receiver>,
}

impl SuiteConfig {
    /// The CI form: every kind, small counts, about a second per kind and
    /// receiver.
    pub fn ci() -> Self {
        SuiteConfig {
            stream_bytes: 1 << 20,
            chunk: 16 << 10,
            pace: Duration::from_millis(6),
            rounds: 10,
            round_gap: Duration::from_millis(25),
            flood: 2_000,
            table_limit: 256,
            backlog: 512,
            idle_timeout: Duration::from_secs(5),
            receivers: vec![Receiver::Zerosplit, Receiver::Linux],
        }
    }

    /// The full form: 8 MiB streams, 100 rounds, a 100 000-SYN flood.
    pub fn full() -> Self {
        SuiteConfig {
            stream_bytes: 8 << 20,
            rounds: 100,
            flood: 100_000,
            table_limit: 1024,
            backlog: 2048,
            idle_timeout: Duration::from_secs(10),
            ..SuiteConfig::ci()
        }
    }

    pub(super) fn rss_bound(&self) -> i64 {
        (48 << 20) + 2 * self.stream_bytes as i64
    }
}

/// The two namespaces and their veth pair.
#[derive(Debug)]
pub struct Lab {
    pub(super) pair: VethPair,
    pub(super) peer: NetNs,
    pub(super) stack: NetNs,
}

impl Lab {
    /// Builds the namespaces ("zhs" with the receiver, "zhp" with the
    /// sender and the attacker) and the veth pair between them.
    ///
    /// # Errors
    /// Namespace or link creation failed (needs root).
    pub fn create() -> Result<Self, HarnessError> {
        let stack = NetNs::new("zhs")?;
        let peer = NetNs::new("zhp")?;
        let pair = VethPair::create(&stack, &peer, 1500)?;
        Ok(Lab { pair, peer, stack })
    }
}

/// `len` bytes of a xorshift64 stream from `seed`, never the forged byte
/// (so a forged byte in the output is always a wrong one).
pub fn stream(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x as u8 {
                FORGED => 0,
                b => b,
            }
        })
        .collect()
}

/// The process's resident set, bytes.
/// The port the victim `r` listens on.
pub(super) fn port_of(r: Receiver) -> u16 {
    match r {
        Receiver::Zerosplit => ZS_PORT,
        Receiver::Linux => LINUX_PORT,
    }
}

/// One round of a kind: `victim` runs in the stack namespace and sets
/// `ready` once it listens; then (or after 20 s) `attacker` runs in the
/// peer namespace. Returns both results, the victim's from `panicked` if
/// its thread panicked.
pub(super) fn face_off<V: Send, A: Send>(
    lab: &Lab,
    ready: &AtomicBool,
    victim: impl FnOnce() -> V + Send,
    attacker: impl FnOnce() -> A + Send,
    panicked: impl FnOnce() -> V,
) -> (V, A) {
    thread::scope(|s| {
        let server = s.spawn(|| in_netns(&lab.stack, victim));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready.load(Ordering::Acquire) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let attacked = in_netns(&lab.peer, attacker);
        (server.join().unwrap_or_else(|_| panicked()), attacked)
    })
}

/// The drop counters of `stack` that grew since `before`, by how much.
pub(super) fn drops_since(stack: &Stack, before: &[(&str, u64)]) -> Vec<(String, u64)> {
    stack
        .drops()
        .into_iter()
        .filter_map(|(name, n)| {
            let was = before.iter().find(|d| d.0 == name).map_or(0, |d| d.1);
            (n > was).then(|| (name.to_string(), n - was))
        })
        .collect()
}

pub(super) fn rss() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A Linux listener on [`LINUX_PORT`]: raises `ready` once it listens and
/// gives its first connection (blocking again), or an error after 15 s.
pub(super) fn linux_accepts_one(ready: &AtomicBool) -> std::io::Result<std::net::TcpStream> {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, LINUX_PORT))?;
    listener.set_nonblocking(true)?;
    ready.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(15);
    let c = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(e),
        }
    };
    c.set_nonblocking(false)?;
    Ok(c)
}

pub(super) fn connect(to: SocketAddrV4, within: Duration) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + within;
    loop {
        match TcpStream::connect_timeout(&to.into(), Duration::from_secs(2)) {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

pub(super) fn inject(
    sniffer: &mut Sniffer,
    tx: &PacketSocket,
    lab: &Lab,
    cfg: &SuiteConfig,
    kind: &Kind,
    from: SocketAddrV4,
    payload: &[u8],
) -> u64 {
    let Ok(Some(_)) = sniffer.wait_live(from, Duration::from_secs(5)) else {
        return 0;
    };
    let mut sent = 0u64;
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ u64::from(from.port());
    for round in 0..cfg.rounds {
        thread::sleep(cfg.round_gap);
        if sniffer.drain().is_err() {
            break;
        }
        let Some(live) = sniffer.live(from) else {
            break;
        };
        let mut ctx = Ctx {
            live,
            sender_mac: lab.pair.b.mac,
            receiver_mac: lab.pair.a.mac,
            genuine: payload,
            round,
            flood: cfg.flood.div_ceil(cfg.rounds.max(1)),
            table_limit: cfg.table_limit as u32,
            closed_port: CLOSED_PORT,
            idle_ephemeral_port: IDLE_EPHEMERAL_PORT,
            rng,
        };
        let frames = (kind.build)(&mut ctx);
        rng = ctx.rng;
        for batch in frames.chunks(MAX_BATCH) {
            let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
            let mut at = 0;
            // A full socket buffer takes fewer; bounded retries.
            for _ in 0..100 {
                match tx.send_batch(&refs[at..]) {
                    Ok(n) => at += n,
                    Err(_) => break,
                }
                if at >= refs.len() {
                    break;
                }
                thread::sleep(Duration::from_micros(200));
            }
            sent += at as u64;
        }
    }
    sent
}
