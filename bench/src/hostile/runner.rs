//! Runs the kinds: a lab of two namespaces joined by veth ("stack" and
//! "peer"), and per kind and receiver one fresh legitimate transfer — a
//! paced Linux sender in the peer namespace to a receiver in the stack
//! namespace (a fresh zerosplit stack, or a kernel listener) — while the
//! injector in the peer namespace sniffs the connection and forges the
//! kind's frames for a number of rounds. A fresh receiver per kind keeps
//! the counts and the memory growth the kind's own.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use datapath::raw::{PacketSocket, MAX_BATCH};
use zerosplit::provider::Provider;
use zerosplit::stack::{Stack, StackConfig};
use zerosplit::transfer::{self, TransferOptions};

use super::kernel_counters::KernelCounters;
use super::kinds::{Ctx, Kind, FORGED};
use super::report::{Outcome, Receiver, Row};
use super::sniff::Sniffer;
use crate::{in_netns, HarnessError, NetNs, VethPair};

/// Port the zerosplit receiver listens on.
const ZS_PORT: u16 = 5201;
/// Port the kernel receiver listens on.
const LINUX_PORT: u16 = 5202;
/// A port nobody listens on.
const CLOSED_PORT: u16 = 5999;
/// Inside the stack's default ephemeral range (40000..=40999), unused.
const IDLE_EPHEMERAL_PORT: u16 = 40977;

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

    fn rss_bound(&self) -> i64 {
        (48 << 20) + 2 * self.stream_bytes as i64
    }
}

/// The two namespaces and their veth pair.
#[derive(Debug)]
pub struct Lab {
    pair: VethPair,
    peer: NetNs,
    stack: NetNs,
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
fn rss() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs `kinds` on every receiver of `cfg`, calling `each` with every
/// finished row.
///
/// # Errors
/// The lab could not be built.
pub fn run_suite(
    cfg: &SuiteConfig,
    kinds: &[Kind],
    mut each: impl FnMut(&Row),
) -> Result<Vec<Row>, HarnessError> {
    let lab = Lab::create()?;
    let mut rows = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let mut row = Row {
            kind: *kind,
            zerosplit: None,
            linux: None,
        };
        for &r in &cfg.receivers {
            let o = run_kind(&lab, cfg, kind, r, 1000 + i as u64);
            match r {
                Receiver::Zerosplit => row.zerosplit = Some(o),
                Receiver::Linux => row.linux = Some(o),
            }
        }
        each(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// What the receiver side returns.
struct Received {
    bytes: Vec<u8>,
    error: Option<String>,
    drops: Vec<(String, u64)>,
    kernel: Vec<(String, i64)>,
    rss_growth: i64,
    connections_after: usize,
}

/// One kind against one receiver.
pub fn run_kind(lab: &Lab, cfg: &SuiteConfig, kind: &Kind, r: Receiver, seed: u64) -> Outcome {
    let payload = stream(cfg.stream_bytes, seed);
    let ready = AtomicBool::new(false);
    let port = match r {
        Receiver::Zerosplit => ZS_PORT,
        Receiver::Linux => LINUX_PORT,
    };
    let (got, sent) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.stack, || match r {
                Receiver::Zerosplit => zerosplit_receives(lab, cfg, &ready),
                Receiver::Linux => linux_receives(cfg, &ready),
            })
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready.load(Ordering::Acquire) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let sent = in_netns(&lab.peer, || {
            send_and_inject(lab, cfg, kind, port, &payload)
        });
        let got = server.join().unwrap_or_else(|_| Received {
            bytes: Vec::new(),
            error: Some("receiver panicked".into()),
            drops: Vec::new(),
            kernel: Vec::new(),
            rss_growth: 0,
            connections_after: 0,
        });
        (got, sent)
    });
    let (injected, send_error) = sent;
    let n = got.bytes.len().min(payload.len());
    let wrong: Vec<usize> = (0..n).filter(|&i| got.bytes[i] != payload[i]).collect();
    Outcome {
        received: got.bytes.len(),
        expected: payload.len(),
        wrong_bytes: wrong.len(),
        forged_bytes: wrong.iter().filter(|&&i| got.bytes[i] == FORGED).count(),
        error: got.error.or(send_error.map(|e| format!("sender: {e}"))),
        injected,
        drops: got.drops,
        kernel: got.kernel,
        rss_growth: got.rss_growth,
        rss_bound: cfg.rss_bound(),
        connections_after: got.connections_after,
    }
}

fn zerosplit_receives(lab: &Lab, cfg: &SuiteConfig, ready: &AtomicBool) -> Received {
    let mut sc = StackConfig::default();
    sc.nic.max_flows = cfg.table_limit;
    sc.backlog = cfg.backlog;
    let fail = |e: String| Received {
        bytes: Vec::new(),
        error: Some(e),
        drops: Vec::new(),
        kernel: Vec::new(),
        rss_growth: 0,
        connections_after: 0,
    };
    let mut stack = match Stack::new(&lab.pair.a.ifname, sc) {
        Ok(s) => s,
        Err(e) => return fail(format!("stack: {e}")),
    };
    let kernel_before = KernelCounters::read();
    let drops_before = stack.drops();
    let rss_before = rss();
    ready.store(true, Ordering::Release);
    let mut out = Vec::with_capacity(cfg.stream_bytes);
    let opts = TransferOptions {
        idle_timeout: cfg.idle_timeout,
    };
    let result = transfer::listen(&mut stack, ZS_PORT, &mut out, &opts);
    // Half-open connections and retransmissions settle for a moment.
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        stack.poll();
    }
    let drops = stack
        .drops()
        .into_iter()
        .filter_map(|(name, n)| {
            let before = drops_before.iter().find(|d| d.0 == name).map_or(0, |d| d.1);
            (n > before).then(|| (name.to_string(), n - before))
        })
        .collect();
    Received {
        bytes: out,
        error: result.err().map(|e| e.to_string()),
        drops,
        kernel: KernelCounters::read().grown_since(&kernel_before),
        rss_growth: rss() - rss_before,
        connections_after: stack.connections(),
    }
}

fn linux_receives(cfg: &SuiteConfig, ready: &AtomicBool) -> Received {
    let kernel_before = KernelCounters::read();
    let rss_before = rss();
    let mut got = Vec::with_capacity(cfg.stream_bytes);
    let result = (|| -> std::io::Result<()> {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, LINUX_PORT))?;
        listener.set_nonblocking(true)?;
        ready.store(true, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut c = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline =>
                {
                    thread::sleep(Duration::from_millis(2))
                }
                Err(e) => return Err(e),
            }
        };
        c.set_nonblocking(false)?;
        c.set_read_timeout(Some(cfg.idle_timeout))?;
        c.read_to_end(&mut got)?;
        Ok(())
    })();
    ready.store(true, Ordering::Release);
    Received {
        bytes: got,
        error: result.err().map(|e| e.to_string()),
        drops: Vec::new(),
        kernel: KernelCounters::read().grown_since(&kernel_before),
        rss_growth: rss() - rss_before,
        connections_after: 0,
    }
}

/// In the peer namespace: connects, writes `payload` paced on a thread of
/// its own, and meanwhile sniffs the connection and injects the kind's
/// frames. Returns the frames injected and the sender's error, if any.
fn send_and_inject(
    lab: &Lab,
    cfg: &SuiteConfig,
    kind: &Kind,
    port: u16,
    payload: &[u8],
) -> (u64, Option<String>) {
    let to = SocketAddrV4::new(lab.pair.a.addr, port);
    let mut sniffer = match Sniffer::open(&lab.pair.b.ifname, to, lab.pair.b.addr) {
        Ok(s) => s,
        Err(e) => return (0, Some(format!("sniffer: {e}"))),
    };
    let tx = match PacketSocket::open_tx(&lab.pair.b.ifname, 8 << 20) {
        Ok(s) => s,
        Err(e) => return (0, Some(format!("injector: {e}"))),
    };
    let conn = match connect(to, Duration::from_secs(10)) {
        Ok(c) => c,
        Err(e) => return (0, Some(format!("connect: {e}"))),
    };
    let from = match conn.local_addr() {
        Ok(std::net::SocketAddr::V4(a)) => a,
        _ => return (0, Some("no local IPv4 address".into())),
    };
    thread::scope(|s| {
        let writer = s.spawn(move || write_paced(conn, payload, cfg));
        let injected = inject(&mut sniffer, &tx, lab, cfg, kind, from, payload);
        let sent = writer
            .join()
            .unwrap_or_else(|_| Err("writer panicked".into()));
        (injected, sent.err())
    })
}

fn connect(to: SocketAddrV4, within: Duration) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + within;
    loop {
        match TcpStream::connect_timeout(&to.into(), Duration::from_secs(2)) {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn write_paced(mut c: TcpStream, payload: &[u8], cfg: &SuiteConfig) -> Result<(), String> {
    for chunk in payload.chunks(cfg.chunk) {
        c.write_all(chunk).map_err(|e| format!("write: {e}"))?;
        thread::sleep(cfg.pace);
    }
    c.shutdown(std::net::Shutdown::Write)
        .map_err(|e| format!("FIN: {e}"))?;
    c.set_read_timeout(Some(cfg.idle_timeout + Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    // The receiver closes after our FIN; a reset at this point is its
    // business, not the stream's.
    let _ = c.read_to_end(&mut Vec::new());
    Ok(())
}

fn inject(
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
