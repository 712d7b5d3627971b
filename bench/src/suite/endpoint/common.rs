//! What every end of `bench-peer` shares: its options, the ready line, the
//! measured CPU window, deadlines, and the latency histogram of the
//! ping-pong rounds.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use hdrhistogram::Histogram;
use transports::segment::CloseReason;

use crate::suite::peer::{LatencyReport, PeerReport};
use crate::suite::procfs;

/// Bulk buffers posted at once, each `BUF` bytes.
pub(super) const BUFS: usize = 16;

pub(super) const BUF: usize = 1 << 20;

/// Ping-pong message slots per direction.
pub(super) const SLOTS: usize = 64;

/// Longest a peer waits for its counterpart to show up or to make progress.
pub(super) const IDLE: Duration = Duration::from_secs(30);

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
    /// Listen address (recv, pingpong-server) or the address to connect
    /// to, IPv4 or IPv6 (`198.18.0.1:5301`, `[2001:2::1]:5301`).
    #[arg(long)]
    pub addr: SocketAddr,
    /// MTU of the interface.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// rtc or dedicated (zerosplit stacks).
    #[arg(long, default_value = "rtc", value_parser = ["rtc", "dedicated"])]
    pub threads: String,
    /// spin, adaptive or sleep (zerosplit stacks: `threads.poll`).
    #[arg(long, default_value = "adaptive", value_parser = ["spin", "adaptive", "sleep"])]
    pub poll: String,
    /// How an end attached to `--daemon` waits for completions (default:
    /// the provider library's, `zerosplit::attach::default_poll`).
    #[arg(long, value_parser = ["spin", "adaptive", "sleep"])]
    pub app_poll: Option<String>,
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
    /// Attach to the `zerosplit daemon` on this socket instead of opening
    /// the interface (`tcp` stack, run-to-completion, one flow).
    #[arg(long, value_name = "SOCKET")]
    pub daemon: Option<std::path::PathBuf>,
    /// The daemon's process id: its CPU time over each measured window is
    /// added to this process's (`PeerReport::daemon_cpu_s`).
    #[arg(long, requires = "daemon")]
    pub daemon_pid: Option<u32>,
}

/// The daemon whose CPU time a measured window adds ([`CpuWindow`]); set
/// once from `--daemon-pid` before anything is measured.
pub(super) static DAEMON_PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

fn daemon_cpu_seconds() -> Result<f64> {
    DAEMON_PID.get().map_or(Ok(0.0), |&pid| {
        procfs::pid_cpu_seconds(pid)
            .with_context(|| format!("reading the daemon's (pid {pid}) CPU time"))
    })
}

/// A requested feature this build does not have.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub(super) String);

pub(super) fn ready() {
    println!(r#"{{"ready":true}}"#);
    let _ = std::io::stdout().flush();
}

/// The start of a measured window: this process's CPU time and each of
/// its threads' at that moment.
pub(super) struct CpuWindow {
    process_s: f64,
    daemon_s: f64,
    threads: Vec<procfs::ThreadCpu>,
}

impl CpuWindow {
    pub(super) fn start() -> Result<CpuWindow> {
        Ok(CpuWindow {
            process_s: procfs::process_cpu_seconds().context("reading /proc/self/stat")?,
            daemon_s: daemon_cpu_seconds()?,
            threads: procfs::thread_times().context("reading /proc/self/task")?,
        })
    }

    /// Fills in the report's process and per-thread CPU time since `start`.
    pub(super) fn end(&self, report: &mut PeerReport) -> Result<()> {
        let after = procfs::thread_times().context("reading /proc/self/task")?;
        report.daemon_cpu_s = daemon_cpu_seconds()? - self.daemon_s;
        report.cpu_s = procfs::process_cpu_seconds().context("reading /proc/self/stat")?
            - self.process_s
            + report.daemon_cpu_s;
        report.threads = procfs::thread_deltas(&self.threads, &after);
        Ok(())
    }
}

pub(super) fn deadline(args: &PeerArgs) -> Instant {
    Instant::now() + Duration::from_secs_f64(args.seconds)
}

pub(crate) fn closed_error(reason: CloseReason) -> anyhow::Error {
    anyhow!("connection closed early: {reason:?}")
}

pub(super) fn histogram() -> Result<Histogram<u64>> {
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

/// Times `round` (one message out, its reply back) `args.rounds` times or
/// until the deadline, and fills in the report: CPU, time, bytes and the
/// latency percentiles.
pub(super) fn pingpong_rounds(
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

// How many flows share the one-flow buffer budget (`flows.rs`), and the
// registered memory that takes (the stack's configuration, `stacks.rs`).

/// Smallest buffer a connection posts.
pub(super) const MIN_BUF: usize = 16 << 10;

/// How one connection's buffers are cut: `bufs` buffers of `buf` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowBufs {
    pub(crate) bufs: usize,
    pub(crate) buf: usize,
}

impl FlowBufs {
    /// The one-flow budget (`BUFS` × `BUF`) shared by `flows`
    /// connections, each posting 4 buffers of 16 KiB to 1 MiB.
    pub(crate) fn for_flows(flows: usize) -> FlowBufs {
        let bufs = 4;
        let share = (BUFS * BUF) / (bufs * flows.max(1));
        let buf = (share & !4095).clamp(MIN_BUF, BUF);
        FlowBufs { bufs, buf }
    }

    /// Bytes one connection's buffers span.
    pub(crate) fn per_conn(self) -> usize {
        self.bufs * self.buf
    }
}

/// Registered bytes `flows` receiving connections need.
pub(crate) fn recv_area(flows: usize) -> usize {
    FlowBufs::for_flows(flows).per_conn() * flows
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
