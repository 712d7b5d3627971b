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

use datapath::mr::Access;
use datapath::nic::TxStrategy;
use transports::segment::CloseReason;
use transports::tcp::State;
use zerosplit::host::HostConfig;
use zerosplit::provider::CompletionKind;
use zerosplit::provider::Provider;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{PacketSocket, MAX_BATCH};

use super::kernel_counters::KernelCounters;
use super::kinds::{Ctx, Kind, FORGED};
use super::report::{Outcome, Receiver, Row};
use super::sniff::Sniffer;
use zerosplit_lab::{in_netns, HarnessError, NetNs, VethPair};

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
    if kind.expect.stack_sends() {
        return run_stack_sends(lab, cfg, kind, r, seed);
    }
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
        ..Outcome::default()
    }
}

/// Send buffers of the sending stack, each `SEND_BUF` bytes: few and
/// small, so every one is reused many times over a stream.
const SEND_BUFS: usize = 8;
const SEND_BUF: usize = 16 << 10;

/// What the sending side returns (stack-sends kinds).
#[derive(Default)]
struct Sent {
    error: Option<String>,
    drops: Vec<(String, u64)>,
    rss_growth: i64,
    connections_after: usize,
    early_completions: u64,
    double_completions: u64,
    deferred: u64,
}

/// One stack-sends kind ([`Expect::SenderDrop`](super::Expect::SenderDrop)):
/// the victim in the stack namespace sends the stream to a Linux reader
/// in the peer namespace, which the injector's forged ACKs pretend to be.
fn run_stack_sends(lab: &Lab, cfg: &SuiteConfig, kind: &Kind, r: Receiver, seed: u64) -> Outcome {
    let payload = stream(cfg.stream_bytes, seed);
    let ready = AtomicBool::new(false);
    let port = match r {
        Receiver::Zerosplit => ZS_PORT,
        Receiver::Linux => LINUX_PORT,
    };
    let (sent, (got, injected, read_error)) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.stack, || match r {
                Receiver::Zerosplit => zerosplit_sends(lab, cfg, &ready, &payload),
                Receiver::Linux => linux_sends(cfg, &ready, &payload),
            })
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready.load(Ordering::Acquire) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let got = in_netns(&lab.peer, || {
            read_and_inject(lab, cfg, kind, port, &payload)
        });
        let sent = server.join().unwrap_or_else(|_| Sent {
            error: Some("sender panicked".into()),
            ..Sent::default()
        });
        (sent, got)
    });
    let n = got.len().min(payload.len());
    let wrong: Vec<usize> = (0..n).filter(|&i| got[i] != payload[i]).collect();
    Outcome {
        received: got.len(),
        expected: payload.len(),
        wrong_bytes: wrong.len(),
        forged_bytes: wrong.iter().filter(|&&i| got[i] == FORGED).count(),
        error: sent.error.or(read_error.map(|e| format!("reader: {e}"))),
        injected,
        drops: sent.drops,
        kernel: Vec::new(),
        rss_growth: sent.rss_growth,
        rss_bound: cfg.rss_bound(),
        connections_after: sent.connections_after,
        early_completions: sent.early_completions,
        double_completions: sent.double_completions,
        deferred: sent.deferred,
    }
}

/// The stack sends `payload` to the first connection on [`ZS_PORT`] as
/// zero-copy chains from a few send buffers; the moment a send completes
/// its buffer is overwritten with the forged byte (the application reuses
/// it) and checked to be read by no TX descriptor any more.
fn zerosplit_sends(lab: &Lab, cfg: &SuiteConfig, ready: &AtomicBool, payload: &[u8]) -> Sent {
    let mut sc = HostConfig::default();
    sc.nic.max_flows = cfg.table_limit;
    sc.backlog = cfg.backlog;
    sc.nic.tx_strategy = Some(TxStrategy::Chain);
    sc.nic.xsk.multi_buffer = true;
    let mut stack = match Stack::new(&lab.pair.a.ifname, sc) {
        Ok(s) => s,
        Err(e) => {
            ready.store(true, Ordering::Release);
            return Sent {
                error: Some(format!("stack: {e}")),
                ..Sent::default()
            };
        }
    };
    let drops_before = stack.drops();
    let nic_before = stack.nic_counters();
    let rss_before = rss();
    let mut sent = Sent::default();
    let result = send_stream(&mut stack, cfg, ready, payload, &mut sent);
    // Retransmissions and the close settle for a moment.
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        stack.poll();
    }
    sent.error = result.err();
    sent.drops = stack
        .drops()
        .into_iter()
        .filter_map(|(name, n)| {
            let before = drops_before.iter().find(|d| d.0 == name).map_or(0, |d| d.1);
            (n > before).then(|| (name.to_string(), n - before))
        })
        .collect();
    let nic = stack.nic_counters();
    sent.deferred = nic.tx_ack_before_completion - nic_before.tx_ack_before_completion;
    // Where completions leave the datapath, and (in `send_stream`) where
    // the application takes them.
    sent.early_completions += nic.tx_completed_in_flight - nic_before.tx_completed_in_flight;
    sent.rss_growth = rss() - rss_before;
    sent.connections_after = stack.connections();
    sent
}

fn send_stream(
    stack: &mut Stack,
    cfg: &SuiteConfig,
    ready: &AtomicBool,
    payload: &[u8],
    sent: &mut Sent,
) -> Result<(), String> {
    stack.listen(ZS_PORT).map_err(|e| format!("listen: {e}"))?;
    let mr = stack
        .register_memory(SEND_BUFS * SEND_BUF, Access::SEND)
        .map_err(|e| format!("register: {e}"))?;
    ready.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(15);
    let conn = loop {
        stack.poll();
        if let Some(c) = stack.accept(ZS_PORT).map_err(|e| format!("accept: {e}"))? {
            break c;
        }
        if Instant::now() > deadline {
            return Err("no connection".into());
        }
    };
    // Per buffer, the work request on it, if one is outstanding.
    let mut outstanding: [Option<u64>; SEND_BUFS] = [None; SEND_BUFS];
    let (mut at, mut next_wr, mut fin) = (0usize, 0u64, false);
    let mut last_activity = Instant::now();
    loop {
        if stack.poll() > 0 {
            last_activity = Instant::now();
        }
        while let Some(c) = stack.poll_completion() {
            if c.conn != conn {
                continue;
            }
            match c.kind {
                CompletionKind::Send => {
                    let slot = (c.wr_id % SEND_BUFS as u64) as usize;
                    if outstanding[slot] != Some(c.wr_id) {
                        sent.double_completions += 1;
                        continue;
                    }
                    outstanding[slot] = None;
                    let off = slot * SEND_BUF;
                    if stack.send_memory_in_flight(mr, off, c.len as usize) != Some(false) {
                        sent.early_completions += 1;
                    }
                    // Reused at once: a byte the kernel reads from it from
                    // now on is a wrong one at the reader.
                    if let Ok(m) = stack.memory_mut(mr) {
                        m[off..off + SEND_BUF].fill(FORGED);
                    }
                }
                CompletionKind::Closed(reason) => {
                    return if fin && reason == CloseReason::Graceful {
                        Ok(())
                    } else {
                        Err(format!("closed: {reason:?}"))
                    };
                }
                _ => {}
            }
        }
        while at < payload.len() {
            let Some(slot) = outstanding.iter().position(Option::is_none) else {
                break;
            };
            let n = SEND_BUF.min(payload.len() - at);
            let off = slot * SEND_BUF;
            let m = stack.memory_mut(mr).map_err(|e| format!("memory: {e}"))?;
            m[off..off + n].copy_from_slice(&payload[at..at + n]);
            let wr = next_wr * SEND_BUFS as u64 + slot as u64;
            stack
                .post_send(conn, mr, off, n, wr)
                .map_err(|e| format!("post_send: {e}"))?;
            outstanding[slot] = Some(wr);
            next_wr += 1;
            at += n;
            last_activity = Instant::now();
        }
        if at == payload.len() && !fin {
            stack.close(conn).map_err(|e| format!("close: {e}"))?;
            fin = true;
        }
        let all_done = outstanding.iter().all(Option::is_none);
        if fin
            && all_done
            && stack
                .state(conn)
                .is_ok_and(|s| matches!(s, State::FinWait2 | State::TimeWait | State::Closed))
        {
            return Ok(());
        }
        if last_activity.elapsed() > cfg.idle_timeout {
            return Err(format!(
                "nothing happened for {:?} ({at} of {} bytes posted)",
                cfg.idle_timeout,
                payload.len()
            ));
        }
    }
}

/// A Linux listener on [`LINUX_PORT`]: raises `ready` once it listens and
/// gives its first connection (blocking again), or an error after 15 s.
fn linux_accepts_one(ready: &AtomicBool) -> std::io::Result<std::net::TcpStream> {
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

/// The kernel's reference: a Linux listener on [`LINUX_PORT`] that writes
/// `payload` to its first connection.
fn linux_sends(cfg: &SuiteConfig, ready: &AtomicBool, payload: &[u8]) -> Sent {
    let rss_before = rss();
    let result = (|| -> std::io::Result<()> {
        let mut c = linux_accepts_one(ready)?;
        c.set_write_timeout(Some(cfg.idle_timeout))?;
        for chunk in payload.chunks(cfg.chunk) {
            c.write_all(chunk)?;
        }
        c.shutdown(std::net::Shutdown::Write)?;
        c.set_read_timeout(Some(cfg.idle_timeout))?;
        let _ = c.read_to_end(&mut Vec::new());
        Ok(())
    })();
    ready.store(true, Ordering::Release);
    Sent {
        error: result.err().map(|e| e.to_string()),
        rss_growth: rss() - rss_before,
        ..Sent::default()
    }
}

/// In the peer namespace: connects to the sender, reads the stream to its
/// end on a thread of its own, and meanwhile sniffs the connection and
/// injects the kind's frames. Returns the bytes read, the frames injected
/// and the reader's error, if any.
fn read_and_inject(
    lab: &Lab,
    cfg: &SuiteConfig,
    kind: &Kind,
    port: u16,
    payload: &[u8],
) -> (Vec<u8>, u64, Option<String>) {
    let to = SocketAddrV4::new(lab.pair.a.addr, port);
    let mut sniffer = match Sniffer::open(&lab.pair.b.ifname, to, lab.pair.b.addr) {
        Ok(s) => s,
        Err(e) => return (Vec::new(), 0, Some(format!("sniffer: {e}"))),
    };
    let tx = match PacketSocket::open_tx(&lab.pair.b.ifname, 8 << 20) {
        Ok(s) => s,
        Err(e) => return (Vec::new(), 0, Some(format!("injector: {e}"))),
    };
    let mut conn = match connect(to, Duration::from_secs(10)) {
        Ok(c) => c,
        Err(e) => return (Vec::new(), 0, Some(format!("connect: {e}"))),
    };
    let from = match conn.local_addr() {
        Ok(std::net::SocketAddr::V4(a)) => a,
        _ => return (Vec::new(), 0, Some("no local IPv4 address".into())),
    };
    thread::scope(|s| {
        // A paced reader: segments wait in its receive queue (acknowledged,
        // their sender's TX completions not necessarily back) while the
        // forged ACKs run ahead.
        let reader = s.spawn(move || {
            let mut got = Vec::with_capacity(payload.len());
            let mut buf = vec![0u8; cfg.chunk];
            let r = conn
                .set_read_timeout(Some(cfg.idle_timeout))
                .and_then(|()| loop {
                    match conn.read(&mut buf) {
                        Ok(0) => break Ok(()),
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                    thread::sleep(cfg.pace);
                });
            (got, r.err().map(|e| e.to_string()))
        });
        let injected = inject(&mut sniffer, &tx, lab, cfg, kind, from, payload);
        let (got, err) = reader
            .join()
            .unwrap_or_else(|_| (Vec::new(), Some("reader panicked".into())));
        (got, injected, err)
    })
}

fn zerosplit_receives(lab: &Lab, cfg: &SuiteConfig, ready: &AtomicBool) -> Received {
    let mut sc = HostConfig::default();
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
        let mut c = linux_accepts_one(ready)?;
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
