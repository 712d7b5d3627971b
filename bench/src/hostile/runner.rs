//! Runs the kinds: a lab of two namespaces joined by veth ("stack" and
//! "peer"), and per kind and receiver one fresh legitimate transfer — a
//! paced Linux sender in the peer namespace to a receiver in the stack
//! namespace (a fresh zerosplit stack, or a kernel listener) — while the
//! injector in the peer namespace sniffs the connection and forges the
//! kind's frames for a number of rounds. A fresh receiver per kind keeps
//! the counts and the memory growth the kind's own.
//!
//! The lab and the shared tools are in `lab.rs`; the kinds that hit a
//! sending stack run in `sends.rs`.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use zerosplit::host::HostConfig;
use zerosplit::provider::Provider;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{HarnessError, PacketSocket};

use super::kernel_counters::KernelCounters;
use super::kinds::{Kind, FORGED};
use super::lab::{
    connect, drops_since, face_off, inject, linux_accepts_one, port_of, rss, stream, Lab,
    SuiteConfig, ZS_PORT,
};
use super::report::{Outcome, Receiver, Row};
use super::sends::run_stack_sends;
use super::sniff::Sniffer;

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
    let port = port_of(r);
    let (got, sent) = face_off(
        lab,
        &ready,
        || match r {
            Receiver::Zerosplit => zerosplit_receives(lab, cfg, &ready),
            Receiver::Linux => linux_receives(cfg, &ready),
        },
        || send_and_inject(lab, cfg, kind, port, &payload),
        || Received {
            bytes: Vec::new(),
            error: Some("receiver panicked".into()),
            drops: Vec::new(),
            kernel: Vec::new(),
            rss_growth: 0,
            connections_after: 0,
        },
    );
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
    let drops = drops_since(&stack, &drops_before);
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
