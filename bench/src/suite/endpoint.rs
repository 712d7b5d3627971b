//! `zerosplit bench-peer` (hidden): one endpoint of a `zerosplit bench`
//! measurement, run as its own process inside its namespace so its CPU
//! time is its own. Roles: bulk sender and receiver, ping-pong client and
//! server, an idle listener (its CPU with no traffic); stacks: Linux kernel sockets, zerosplit with the header-only
//! `tcp`, or zerosplit with `smoltcp`. It prints `{"ready":true}` once it
//! listens and then one JSON result line ([`crate::suite::peer::PeerReport`]);
//! a failure is a result line with `error` set (and `unavailable` when this
//! build lacks what was asked for), and a non-zero exit.
//!
//! Payload never moves more than the stack itself moves it: the zerosplit
//! sender fills its registered send buffers once and posts them again and
//! again (zero-copy TX), the receiver re-posts its buffers without reading
//! them; the kernel ends write from and read into one user buffer (the
//! kernel's copies are the cost being compared). The kernel-socket roles
//! are in `kernel.rs`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use crate::suite::peer::{LatencyReport, PeerReport};
use crate::suite::procfs;
use anyhow::{anyhow, bail, Context, Result};
use datapath::mr::Access;
use hdrhistogram::Histogram;
use transports::segment::CloseReason;
use transports::tcp::State;

use zerosplit::provider::Provider;
use zerosplit::smol::{SmolConfig, SmolCongestion, SmolStack};
use zerosplit::stack::{CompletionKind, ConnId, Stack, StackConfig, Threads};

mod flows;
mod kernel;
mod kernel_flows;

use flows::{check_flows, recv_area, zs_flows_sharded, zs_recv_flows, zs_send_flows};
use kernel::{kernel_pingpong_client, kernel_pingpong_server, kernel_recv, kernel_send};
use kernel_flows::{kernel_recv_flows, kernel_send_flows};

/// Bulk buffers posted at once, each `BUF` bytes.
const BUFS: usize = 16;
const BUF: usize = 1 << 20;
/// Ping-pong message slots per direction.
const SLOTS: usize = 64;
/// Longest a peer waits for its counterpart to show up or to make progress.
const IDLE: Duration = Duration::from_secs(30);

/// Options of `zerosplit bench-peer` (the contract is
/// [`crate::suite::peer::PeerSpec::to_args`]).
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    /// send, recv, pingpong-client, pingpong-server or idle.
    #[arg(long, value_parser = ["send", "recv", "pingpong-client", "pingpong-server", "idle"])]
    pub role: String,
    /// kernel, tcp or smoltcp.
    #[arg(long, value_parser = ["kernel", "tcp", "smoltcp"])]
    pub stack: String,
    /// Interface (zerosplit stacks run on it).
    #[arg(long)]
    pub iface: String,
    /// Listen address (recv, pingpong-server) or the address to connect to.
    #[arg(long)]
    pub addr: SocketAddrV4,
    /// MTU of the interface.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// rtc or dedicated (zerosplit stacks).
    #[arg(long, default_value = "rtc", value_parser = ["rtc", "dedicated"])]
    pub threads: String,
    /// spin, adaptive or sleep (zerosplit stacks: `threads.poll`).
    #[arg(long, default_value = "adaptive", value_parser = ["spin", "adaptive", "sleep"])]
    pub poll: String,
    /// Sender: stop after this many bytes…
    #[arg(long, default_value_t = 1 << 30)]
    pub bytes: u64,
    /// …or this many seconds (ping-pong: the time limit).
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Ping-pong rounds.
    #[arg(long, default_value_t = 10_000)]
    pub rounds: u64,
    /// Ping-pong message size.
    #[arg(long, default_value_t = 64)]
    pub message: usize,
    /// Concurrent bulk connections (send and recv; see `flows.rs`).
    #[arg(long, default_value_t = 1)]
    pub flows: usize,
    /// Receive queues a zerosplit end serves with `--flows` (one stack per
    /// queue, see `flows.rs`); the kernel ends use whatever queues the
    /// interface has.
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
    /// Publish metrics (zerosplit stacks on one queue; the sharded flows
    /// rows do not) and scrape them every 100 ms.
    #[arg(long)]
    pub metrics: bool,
}

/// A requested feature this build does not have.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(String);

/// Runs the peer and prints its result line. Returns the process exit
/// code: 0 on success, 1 on failure, 3 when unavailable.
pub fn main(args: &PeerArgs) -> i32 {
    let mut report = PeerReport {
        role: args.role.clone(),
        stack: args.stack.clone(),
        ..PeerReport::default()
    };
    let code = match run(args, &mut report) {
        Ok(()) => 0,
        Err(e) => {
            report.unavailable = e.downcast_ref::<Unavailable>().is_some();
            report.error = Some(format!("{e:#}"));
            if report.unavailable {
                3
            } else {
                1
            }
        }
    };
    println!(
        "{}",
        serde_json::to_string(&report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    );
    code
}

fn ready() {
    println!(r#"{{"ready":true}}"#);
    let _ = std::io::stdout().flush();
}

fn check(args: &PeerArgs) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be in (0, 600], got {}", args.seconds);
    }
    if !crate::suite::options::MTUS.contains(&args.mtu) {
        bail!(
            "--mtu must be between {} and {}, got {}",
            crate::suite::options::MTUS.start(),
            crate::suite::options::MTUS.end(),
            args.mtu
        );
    }
    if !(1..=1400).contains(&args.message) {
        bail!(
            "--message must be between 1 and 1400 bytes, got {}",
            args.message
        );
    }
    check_flows(args.flows)?;
    flows::check_queues(args)
}

fn run(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    check(args)?;
    name_main_thread(args)?;
    match args.stack.as_str() {
        "kernel" => {
            let before = procfs::net_counters().context("reading /proc/net counters")?;
            let many = args.flows > 1;
            match args.role.as_str() {
                "idle" => {
                    return Err(
                        Unavailable("the idle role measures zerosplit stacks".into()).into(),
                    )
                }
                "send" if many => kernel_send_flows(args, report)?,
                "recv" if many => kernel_recv_flows(args, report)?,
                "send" => kernel_send(args, report)?,
                "recv" => kernel_recv(args, report)?,
                "pingpong-client" => kernel_pingpong_client(args, report)?,
                _ => kernel_pingpong_server(args)?,
            }
            let after = procfs::net_counters().context("reading /proc/net counters")?;
            report.retransmits = procfs::kernel_retransmits(&before, &after);
            report.drops = procfs::kernel_drops(&before, &after);
            Ok(())
        }
        "smoltcp" => {
            let mut stack = smol_stack(args)?;
            let _load = MetricsLoad::start(args, &mut stack)?;
            zs_run(&mut stack, args, report)
        }
        _ if args.queues > 1 => zs_flows_sharded(args, report),
        _ => {
            let mut stack = zs_stack(args)?;
            let _load = MetricsLoad::start(args, &mut stack)?;
            zs_run(&mut stack, args, report)
        }
    }
}

/// `--metrics`: the stack publishes its snapshots to an endpoint on
/// 127.0.0.1 (as `[metrics] listen` makes it), and a reader scrapes
/// /metrics every 100 ms (far more often than Prometheus would) until
/// dropped: what serving metrics costs, measured in the same rows.
struct MetricsLoad {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    _server: zerosplit::metrics::MetricsServer,
}

impl MetricsLoad {
    fn start<E: zerosplit::host::Engine>(
        args: &PeerArgs,
        stack: &mut zerosplit::host::Host<E>,
    ) -> Result<Option<MetricsLoad>> {
        if !args.metrics {
            return Ok(None);
        }
        let board = zerosplit::metrics::Board::new();
        let server = zerosplit::metrics::serve(
            "127.0.0.1:0".parse().expect("an address"),
            std::sync::Arc::clone(&board),
        )?;
        stack.set_metrics(Some(board));
        let url = format!("http://{}/metrics", server.addr());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let reader = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut r) = ureq::get(&url).call() {
                    let _ = r.body_mut().read_to_string();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Ok(Some(MetricsLoad {
            stop,
            reader: Some(reader),
            _server: server,
        }))
    }
}

impl Drop for MetricsLoad {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Runs `args.role` on a zerosplit stack and fills in its counters.
fn zs_run<P: Provider>(stack: &mut P, args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let many = args.flows > 1;
    let result = match args.role.as_str() {
        "send" if many => zs_send_flows(stack, args, report),
        "recv" if many => zs_recv_flows(stack, args, report, &ready),
        "send" => zs_send(stack, args, report),
        "recv" => zs_recv(stack, args, report),
        "pingpong-client" => zs_pingpong_client(stack, args, report),
        "idle" => zs_idle(stack, args, report),
        _ => zs_pingpong_server(stack, args),
    };
    fill_counters(stack, report);
    result
}

/// A zerosplit end's retransmissions and drops, into `report`.
fn fill_counters<P: Provider>(stack: &P, report: &mut PeerReport) {
    // smoltcp keeps no retransmission count.
    report.retransmits = stack.retransmissions().map_or(0, |(r, _)| r);
    report.drops = stack
        .drops()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect::<BTreeMap<_, _>>();
}

/// The smoltcp transport over the same datapath; it runs
/// run-to-completion only, so a dedicated row is reported unavailable.
fn smol_stack(args: &PeerArgs) -> Result<SmolStack> {
    if args.threads == "dedicated" {
        return Err(Unavailable("transport smoltcp runs run-to-completion only".into()).into());
    }
    let config = SmolConfig {
        stack: stack_config(args),
        congestion: SmolCongestion::Cubic,
        ..SmolConfig::default()
    };
    SmolStack::new(&args.iface, config)
        .with_context(|| format!("starting zerosplit (smoltcp) on {}", args.iface))
}

fn stack_config(args: &PeerArgs) -> StackConfig {
    let mut c = StackConfig::default();
    c.nic.mtu = args.mtu as usize;
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    if args.flows > 1 {
        // Room for every connection's buffers (they shrink with the count,
        // see `flows.rs`), table entries and handshakes for all of them.
        c.nic.xsk.umem.mr_bytes = c
            .nic
            .xsk
            .umem
            .mr_bytes
            .max(recv_area(args.flows) + (8 << 20));
        c.nic.max_flows = c.nic.max_flows.max(args.flows + 64);
        c.backlog = c.backlog.max(args.flows);
        c.max_half_open = c.max_half_open.max(args.flows);
        // A local port per connection, with room to spare for the
        // ephemeral search (the range is reserved from the kernel).
        let start = *c.ephemeral_ports.start();
        let span = (2 * args.flows).min(usize::from(u16::MAX - start)) as u16;
        c.ephemeral_ports = start..=(*c.ephemeral_ports.end()).max(start + span);
    }
    c.nic.xsk.multi_buffer = args.mtu as usize + 14 > c.nic.xsk.umem.frame_size as usize;
    c.tcp.mss = (args.mtu - 40) as u16;
    c.tcp.algorithm = transports::cc::Algorithm::Cubic;
    c.poll.mode = args.poll.parse().unwrap_or_default();
    if args.threads == "dedicated" {
        c.threads = Threads::Dedicated {
            datapath_core: None,
            transport_core: None,
            queue: 4096,
        };
    }
    c
}

/// The header-only `tcp` stack.
fn zs_stack(args: &PeerArgs) -> Result<Stack> {
    Stack::new(&args.iface, stack_config(args))
        .with_context(|| format!("starting zerosplit on {}", args.iface))
}

/// The start of a measured window: this process's CPU time and each of
/// its threads' at that moment.
struct CpuWindow {
    process_s: f64,
    threads: Vec<procfs::ThreadCpu>,
}

impl CpuWindow {
    fn start() -> Result<CpuWindow> {
        Ok(CpuWindow {
            process_s: procfs::process_cpu_seconds().context("reading /proc/self/stat")?,
            threads: procfs::thread_times().context("reading /proc/self/task")?,
        })
    }

    /// Fills in the report's process and per-thread CPU time since `start`.
    fn end(&self, report: &mut PeerReport) -> Result<()> {
        let after = procfs::thread_times().context("reading /proc/self/task")?;
        report.cpu_s =
            procfs::process_cpu_seconds().context("reading /proc/self/stat")? - self.process_s;
        report.threads = procfs::thread_deltas(&self.threads, &after);
        Ok(())
    }
}

/// Names the peer's main thread for what it runs (see
/// [`crate::suite::peer::thread_names`]).
fn name_main_thread(args: &PeerArgs) -> Result<()> {
    use crate::suite::peer::thread_names;
    let name = match (args.stack.as_str(), args.threads.as_str()) {
        ("kernel", _) => thread_names::KERNEL,
        (_, "dedicated") => thread_names::DATAPATH,
        _ => thread_names::LOOP,
    };
    procfs::name_this_thread(name).context("naming the main thread")
}

fn deadline(args: &PeerArgs) -> Instant {
    Instant::now() + Duration::from_secs_f64(args.seconds)
}

pub(crate) fn closed_error(reason: CloseReason) -> anyhow::Error {
    anyhow!("connection closed early: {reason:?}")
}

// ---- kernel ends ----------------------------------------------------------

fn histogram() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| anyhow!("histogram: {e}"))
}

/// Percentiles and CDF points (µs) of round-trip times recorded in ns.
pub fn latency_report(h: &Histogram<u64>) -> LatencyReport {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    let qs = [
        0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995,
        0.999, 0.9999, 1.0,
    ];
    LatencyReport {
        rounds: h.len(),
        p50_us: us(0.5),
        p99_us: us(0.99),
        p999_us: us(0.999),
        max_us: h.max() as f64 / 1e3,
        cdf: qs.iter().map(|&q| (q, us(q))).collect(),
    }
}

/// Listens on the address's port and waits (bounded) for one connection.
fn zs_accept<P: Provider>(stack: &mut P, args: &PeerArgs) -> Result<ConnId> {
    let port = args.addr.port();
    stack
        .listen(port)
        .with_context(|| format!("listening on port {port}"))?;
    ready();
    let started = Instant::now();
    loop {
        stack.poll();
        if let Some(c) = stack.accept(port)? {
            return Ok(c);
        }
        if started.elapsed() > IDLE {
            bail!("nobody connected within {IDLE:?}");
        }
    }
}

/// Listens and polls, as an application waiting for connections would,
/// for `--seconds` with no traffic: `cpu_s` over `seconds` is the idle
/// stack's share of a core.
fn zs_idle<P: Provider>(stack: &mut P, args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let port = args.addr.port();
    stack
        .listen(port)
        .with_context(|| format!("listening on port {port}"))?;
    ready();
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let end = deadline(args);
    while Instant::now() < end {
        stack.poll();
        if stack.accept(port)?.is_some() {
            bail!("the idle stack got a connection");
        }
    }
    report.seconds = t0.elapsed().as_secs_f64();
    cpu0.end(report)
}

/// Connects and waits (bounded) for the handshake.
fn zs_connect<P: Provider>(stack: &mut P, addr: SocketAddrV4) -> Result<ConnId> {
    let started = Instant::now();
    loop {
        let conn = stack
            .connect(addr)
            .with_context(|| format!("connecting to {addr}"))?;
        loop {
            stack.poll();
            match stack.poll_completion().map(|c| c.kind) {
                Some(CompletionKind::Connected) => return Ok(conn),
                // The listener may not be up yet: try again for a while.
                Some(CompletionKind::Closed(CloseReason::Refused))
                    if started.elapsed() < Duration::from_secs(10) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
                Some(CompletionKind::Closed(r)) => return Err(closed_error(r)),
                _ => {}
            }
            if started.elapsed() > IDLE {
                bail!("no handshake with {addr} within {IDLE:?}");
            }
        }
    }
}

fn zs_recv<P: Provider>(stack: &mut P, args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let mr = stack
        .register_memory(BUFS * BUF, Access::RECV)
        .context("registering receive buffers")?;
    let conn = zs_accept(stack, args)?;
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let mut next_wr = 0u64;
    for k in 0..BUFS {
        stack.post_recv(conn, mr, k * BUF, BUF, next_wr)?;
        next_wr += 1;
    }
    let (mut peer_len, mut last, mut progress) = (None, t0, t0);
    let mut received = 0;
    loop {
        stack.poll();
        while let Some(c) = stack.poll_completion() {
            if c.conn != conn {
                continue;
            }
            match c.kind {
                CompletionKind::Recv => {
                    let slot = (c.wr_id as usize) % BUFS;
                    stack.post_recv(conn, mr, slot * BUF, BUF, next_wr)?;
                    next_wr += 1;
                }
                CompletionKind::PeerClosed { len } => peer_len = Some(len),
                CompletionKind::Closed(r) if peer_len.is_none() => return Err(closed_error(r)),
                _ => {}
            }
        }
        let now_received = stack.received(conn).unwrap_or(received);
        if now_received > received {
            received = now_received;
            last = Instant::now();
            progress = last;
        }
        if peer_len.is_some_and(|l| received >= l) {
            break;
        }
        if progress.elapsed() > IDLE {
            bail!("no progress for {IDLE:?} after {received} bytes");
        }
    }
    cpu0.end(report)?;
    report.seconds = last.duration_since(t0).as_secs_f64();
    report.bytes = received;
    stack.close(conn).ok();
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end
        && stack
            .state(conn)
            .is_ok_and(|s| s != State::Closed && s != State::TimeWait)
    {
        stack.poll();
    }
    Ok(())
}

fn zs_send<P: Provider>(stack: &mut P, args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let mr = stack
        .register_memory(BUFS * BUF, Access::SEND)
        .context("registering send buffers")?;
    stack.memory_mut(mr)?.fill(0xa5);
    let conn = zs_connect(stack, args.addr)?;
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let end = deadline(args);
    let mut free: Vec<usize> = (0..BUFS).collect();
    let (mut posted, mut fin, mut progress, mut acked) = (0u64, false, t0, 0u64);
    loop {
        stack.poll();
        while let Some(c) = stack.poll_completion() {
            match c.kind {
                CompletionKind::Send => free.push(c.wr_id as usize % BUFS),
                CompletionKind::Closed(CloseReason::Graceful) if fin => {}
                CompletionKind::Closed(r) => return Err(closed_error(r)),
                _ => {}
            }
        }
        if !fin {
            let sending = posted < args.bytes && Instant::now() < end;
            if sending {
                while let Some(slot) = free.pop() {
                    let n = ((args.bytes - posted) as usize).min(BUF);
                    stack.post_send(conn, mr, slot * BUF, n, slot as u64)?;
                    posted += n as u64;
                    if posted >= args.bytes {
                        break;
                    }
                }
            } else {
                stack.close(conn)?;
                fin = true;
            }
        }
        let now_acked = stack.acked(conn).unwrap_or(acked);
        if now_acked > acked {
            acked = now_acked;
            progress = Instant::now();
        }
        if fin
            && acked >= posted
            && stack.state(conn).map_or(true, |s| {
                matches!(s, State::FinWait2 | State::TimeWait | State::Closed)
            })
        {
            break;
        }
        if progress.elapsed() > IDLE {
            bail!("no progress for {IDLE:?} after {acked} of {posted} bytes acknowledged");
        }
    }
    cpu0.end(report)?;
    report.seconds = t0.elapsed().as_secs_f64();
    report.bytes = posted;
    Ok(())
}

/// The two regions of a ping-pong end: receive slots and send slots.
struct Slots {
    rx: datapath::mr::MrId,
    tx: datapath::mr::MrId,
    tx_free: Vec<usize>,
    next_wr: u64,
    msg: usize,
}

impl Slots {
    fn new<P: Provider>(stack: &mut P, msg: usize) -> Result<Slots> {
        Ok(Slots {
            rx: stack.register_memory(SLOTS * msg, Access::RECV)?,
            tx: stack.register_memory(SLOTS * msg, Access::SEND)?,
            tx_free: (0..SLOTS).collect(),
            next_wr: 0,
            msg,
        })
    }

    fn post_all_rx<P: Provider>(&mut self, stack: &mut P, conn: ConnId) -> Result<()> {
        for k in 0..SLOTS {
            stack.post_recv(conn, self.rx, k * self.msg, self.msg, k as u64)?;
        }
        self.next_wr = SLOTS as u64;
        Ok(())
    }

    /// Handles completions; returns how many messages arrived and whether
    /// the peer closed.
    fn drain<P: Provider>(&mut self, stack: &mut P, conn: ConnId) -> Result<(usize, bool)> {
        let (mut got, mut closed) = (0, false);
        while let Some(c) = stack.poll_completion() {
            if c.conn != conn {
                continue;
            }
            match c.kind {
                CompletionKind::Recv => {
                    let slot = (c.wr_id as usize) % SLOTS;
                    stack.post_recv(conn, self.rx, slot * self.msg, self.msg, self.next_wr)?;
                    self.next_wr += 1;
                    got += 1;
                }
                CompletionKind::Send => self.tx_free.push(c.wr_id as usize % SLOTS),
                CompletionKind::PeerClosed { .. } => closed = true,
                CompletionKind::Closed(CloseReason::Graceful) => closed = true,
                CompletionKind::Closed(r) => return Err(closed_error(r)),
                _ => {}
            }
        }
        Ok((got, closed))
    }

    /// Posts one message, waiting (bounded) for a free send slot.
    fn send<P: Provider>(&mut self, stack: &mut P, conn: ConnId) -> Result<()> {
        let started = Instant::now();
        let slot = loop {
            if let Some(s) = self.tx_free.pop() {
                break s;
            }
            stack.poll();
            let (got, _) = self.drain(stack, conn)?;
            if got > 0 {
                bail!("a message arrived while waiting for a send slot");
            }
            if started.elapsed() > IDLE {
                bail!("no send slot freed within {IDLE:?}");
            }
        };
        stack.post_send(conn, self.tx, slot * self.msg, self.msg, slot as u64)?;
        Ok(())
    }
}

fn zs_pingpong_server<P: Provider>(stack: &mut P, args: &PeerArgs) -> Result<()> {
    let mut slots = Slots::new(stack, args.message)?;
    let conn = zs_accept(stack, args)?;
    slots.post_all_rx(stack, conn)?;
    let mut progress = Instant::now();
    loop {
        stack.poll();
        let (got, closed) = slots.drain(stack, conn)?;
        for _ in 0..got {
            slots.send(stack, conn)?;
        }
        if got > 0 {
            progress = Instant::now();
        }
        if closed {
            break;
        }
        if progress.elapsed() > IDLE {
            bail!("no message for {IDLE:?}");
        }
    }
    stack.close(conn).ok();
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end && stack.state(conn).is_ok_and(|s| s != State::Closed) {
        stack.poll();
    }
    Ok(())
}

/// Times `round` (one message out, its reply back) `args.rounds` times or
/// until the deadline, and fills in the report: CPU, time, bytes and the
/// latency percentiles.
fn pingpong_rounds(
    args: &PeerArgs,
    report: &mut PeerReport,
    mut round: impl FnMut() -> Result<()>,
) -> Result<()> {
    let mut h = histogram()?;
    let (end, cpu0, t0) = (deadline(args), CpuWindow::start()?, Instant::now());
    for _ in 0..args.rounds {
        if Instant::now() >= end {
            break;
        }
        let t = Instant::now();
        round()?;
        h.record(t.elapsed().as_nanos() as u64)
            .map_err(|e| anyhow!("histogram: {e}"))?;
    }
    cpu0.end(report)?;
    report.seconds = t0.elapsed().as_secs_f64();
    report.bytes = h.len() * args.message as u64;
    report.latency = Some(latency_report(&h));
    Ok(())
}

fn zs_pingpong_client<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
) -> Result<()> {
    let mut slots = Slots::new(stack, args.message)?;
    let conn = zs_connect(stack, args.addr)?;
    slots.post_all_rx(stack, conn)?;
    pingpong_rounds(args, report, || {
        let t = Instant::now();
        slots.send(stack, conn)?;
        loop {
            stack.poll();
            let (got, closed) = slots.drain(stack, conn)?;
            if got > 0 {
                return Ok(());
            }
            if closed {
                bail!("the server closed the connection");
            }
            if t.elapsed() > IDLE {
                bail!("no reply within {IDLE:?}");
            }
        }
    })?;
    stack.close(conn).ok();
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end
        && stack
            .state(conn)
            .is_ok_and(|s| !matches!(s, State::Closed | State::TimeWait))
    {
        stack.poll();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_report_reads_percentiles_in_microseconds() {
        let mut h = histogram().expect("histogram");
        for us in 1..=1000u64 {
            h.record(us * 1000).expect("record");
        }
        let r = latency_report(&h);
        assert_eq!(r.rounds, 1000);
        assert!((r.p50_us - 500.0).abs() < 1.0, "{}", r.p50_us);
        assert!((r.p99_us - 990.0).abs() < 2.0, "{}", r.p99_us);
        assert!((r.max_us - 1000.0).abs() < 2.0, "{}", r.max_us);
        assert_eq!(r.cdf.first().map(|p| p.0), Some(0.0));
        assert_eq!(r.cdf.last().map(|p| p.0), Some(1.0));
        assert!(r.cdf.windows(2).all(|w| w[0].1 <= w[1].1));
    }
}
