//! `zerosplit compare-transports`: the header-only `tcp` against the
//! full-packet `smoltcp` on the same datapath, the same veth pair and in the
//! same run — Linux → zerosplit and zerosplit → Linux, each repeated and
//! reported as medians of goodput and of CPU per byte, beside Linux → Linux
//! on the same pair as the run's baseline.
//!
//! CPU is the zerosplit thread's own time on a CPU
//! (`/proc/thread-self/schedstat`, nanoseconds, user and kernel together:
//! in copy mode the kernel work of the AF_XDP syscalls — including, on veth,
//! the peer's receive work done inside `sendto` — counts too, for both
//! transports alike). The Linux peer's CPU is not counted.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use transports::cc::Algorithm;
use zerosplit_lab::{in_netns, NetNs, VethPair};

use super::demo::{gbps, kernel_receive, kernel_send, pattern, wait_ready, Checker};
use zerosplit::engine::smol::{SmolConfig, SmolCongestion};
use zerosplit::host::HostConfig;
use zerosplit::provider::Provider;
use zerosplit::stack::SmolStack;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Bytes per transfer.
    pub bytes: usize,
    /// MTU of the veth pair.
    pub mtu: u32,
    /// Repetitions of each transfer.
    pub runs: usize,
}

/// One measured transfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Goodput at the receiver, Gbit/s.
    pub gbps: f64,
    /// Nanoseconds of the zerosplit thread on a CPU per payload byte.
    pub cpu_ns_per_byte: f64,
    /// Payload bytes the transport touched.
    pub touched: u64,
    /// Frames the zerosplit end sent (data segments or ACKs).
    pub frames_out: u64,
}

/// Medians over the runs of one (transport, direction).
#[derive(Debug, Clone)]
pub struct CompareRow {
    /// `tcp` or `smoltcp`.
    pub transport: &'static str,
    /// `Linux -> zerosplit` or `zerosplit -> Linux`.
    pub direction: &'static str,
    /// Every run's sample.
    pub samples: Vec<Sample>,
}

impl CompareRow {
    fn median(&self, f: impl Fn(&Sample) -> f64) -> f64 {
        let mut v: Vec<f64> = self.samples.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    }
    /// Median goodput, Gbit/s.
    pub fn gbps(&self) -> f64 {
        self.median(|s| s.gbps)
    }
    /// Median CPU nanoseconds per byte.
    pub fn cpu_ns_per_byte(&self) -> f64 {
        self.median(|s| s.cpu_ns_per_byte)
    }
    /// Median payload bytes touched by the transport.
    pub fn touched(&self) -> f64 {
        self.median(|s| s.touched as f64)
    }
    /// Median frames the zerosplit end sent.
    pub fn frames_out(&self) -> f64 {
        self.median(|s| s.frames_out as f64)
    }
}

/// Nanoseconds the calling thread has spent on a CPU.
fn thread_cpu_ns() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .context("reading /proc/thread-self/schedstat")?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("unexpected /proc/thread-self/schedstat: {text:?}"))
}

fn tcp_frames(s: &Stack) -> u64 {
    s.nic().port_counters().tx_packets
}

fn smol_frames(s: &SmolStack) -> u64 {
    s.counters().frames_out
}

fn stack_config(mtu: u32) -> HostConfig {
    let mut c = HostConfig::default();
    c.nic.mtu = mtu as usize;
    c.nic.xsk.multi_buffer = mtu > 4000;
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    c.tcp.mss = (mtu - 40) as u16;
    c.tcp.algorithm = Algorithm::Cubic;
    c
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tcp,
    Smoltcp,
}

fn transfer_options() -> TransferOptions {
    TransferOptions {
        idle_timeout: Duration::from_secs(20),
    }
}

/// Runs the body for `kind` on a fresh provider of that kind on `ifname`.
fn with_provider<T>(
    kind: Kind,
    ifname: &str,
    mtu: u32,
    body_tcp: impl FnOnce(&mut Stack) -> Result<T>,
    body_smol: impl FnOnce(&mut SmolStack) -> Result<T>,
) -> Result<T> {
    match kind {
        Kind::Tcp => {
            let mut s = Stack::new(ifname, stack_config(mtu))?;
            body_tcp(&mut s)
        }
        Kind::Smoltcp => {
            let mut s = SmolStack::new(
                ifname,
                SmolConfig {
                    stack: stack_config(mtu),
                    congestion: SmolCongestion::Cubic,
                    ..SmolConfig::default()
                },
            )?;
            body_smol(&mut s)
        }
    }
}

/// What the zerosplit end of one transfer cost and did.
#[derive(Debug, Clone, Copy)]
struct Side {
    cpu_ns: u64,
    touched: u64,
    frames_out: u64,
}

impl Side {
    fn sample(self, gbps: f64, bytes: usize) -> Sample {
        Sample {
            gbps,
            cpu_ns_per_byte: self.cpu_ns as f64 / bytes as f64,
            touched: self.touched,
            frames_out: self.frames_out,
        }
    }
}

/// Receives `data` on `port` and returns (exact, last byte time, side).
fn receive_on<P: Provider>(
    stack: &mut P,
    port: u16,
    data: &[u8],
    ready: &AtomicBool,
    frames_out: impl Fn(&P) -> u64,
) -> Result<(bool, Option<Instant>, Side)> {
    let mut check = Checker {
        want: data,
        at: 0,
        exact: true,
        last_byte: None,
    };
    ready.store(true, Ordering::Release);
    let cpu0 = thread_cpu_ns()?;
    let (_, touched) = transfer::listen_with(stack, port, &mut check, &transfer_options(), |s| {
        (s.payload_bytes_touched_by_transport(), frames_out(s))
    })?;
    let cpu_ns = thread_cpu_ns()? - cpu0;
    Ok((
        check.exact && check.at == data.len(),
        check.last_byte,
        Side {
            cpu_ns,
            touched: touched.0,
            frames_out: touched.1,
        },
    ))
}

/// Sends `data` to `to`; returns (start, side).
fn send_to<P: Provider>(
    stack: &mut P,
    to: SocketAddrV4,
    data: &[u8],
    frames_out: impl Fn(&P) -> u64,
) -> Result<(Instant, Side)> {
    let cpu0 = thread_cpu_ns()?;
    let start = Instant::now();
    transfer::connect(stack, to.into(), &mut &data[..], &transfer_options())?;
    let cpu_ns = thread_cpu_ns()? - cpu0;
    Ok((
        start,
        Side {
            cpu_ns,
            touched: stack.payload_bytes_touched_by_transport(),
            frames_out: frames_out(stack),
        },
    ))
}

/// Runs every transfer `runs` times, alternating transports within each
/// round, and returns one row per (transport, direction).
///
/// # Errors
/// Setup failed, a transfer failed, or bytes arrived wrong.
pub fn measure(opts: &CompareOptions) -> Result<Vec<CompareRow>> {
    let a = NetNs::new("zca").context("namespace")?;
    let b = NetNs::new("zcb").context("namespace")?;
    let pair = VethPair::create(&a, &b, opts.mtu).context("veth pair")?;
    let data = pattern(opts.bytes);
    let (ip_a, ip_b) = (pair.a.addr, pair.b.addr);
    let mut rows: Vec<CompareRow> = Vec::new();
    for (transport, direction) in [
        ("tcp", "Linux -> zerosplit"),
        ("smoltcp", "Linux -> zerosplit"),
        ("tcp", "zerosplit -> Linux"),
        ("smoltcp", "zerosplit -> Linux"),
    ] {
        rows.push(CompareRow {
            transport,
            direction,
            samples: Vec::new(),
        });
    }
    rows.push(CompareRow {
        transport: "kernel",
        direction: "Linux -> Linux",
        samples: Vec::new(),
    });
    let mut port = 5400u16;
    for _ in 0..opts.runs {
        // Linux → Linux on the same pair: the machine's baseline this run.
        port += 1;
        let listener = in_netns(&a, || TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))?;
        let (exact, start, end) = thread::scope(|s| -> Result<_> {
            let rx = s.spawn(|| kernel_receive(&listener, &data));
            let start = in_netns(&b, || kernel_send(SocketAddrV4::new(ip_a, port), &data))?;
            let (exact, end) = rx.join().map_err(|_| anyhow!("receiver panicked"))??;
            Ok((exact, start, end))
        })?;
        if !exact {
            bail!("Linux -> Linux: bytes differ");
        }
        rows[4].samples.push(Sample {
            gbps: gbps(opts.bytes, start, end),
            cpu_ns_per_byte: f64::NAN,
            touched: 0,
            frames_out: 0,
        });
        for (i, kind) in [Kind::Tcp, Kind::Smoltcp].into_iter().enumerate() {
            // Linux → zerosplit.
            port += 1;
            let ready = AtomicBool::new(false);
            let (exact, start, end, side) = thread::scope(|s| -> Result<_> {
                let rx = s.spawn(|| {
                    in_netns(&a, || {
                        with_provider(
                            kind,
                            &pair.a.ifname,
                            opts.mtu,
                            |st| receive_on(st, port, &data, &ready, tcp_frames),
                            |st| receive_on(st, port, &data, &ready, smol_frames),
                        )
                    })
                });
                wait_ready(&ready);
                let start = in_netns(&b, || kernel_send(SocketAddrV4::new(ip_a, port), &data))?;
                let (exact, end, side) = rx.join().map_err(|_| anyhow!("receiver panicked"))??;
                Ok((exact, start, end, side))
            })?;
            if !exact {
                bail!("Linux -> zerosplit ({kind:?}): bytes differ");
            }
            rows[i]
                .samples
                .push(side.sample(gbps(opts.bytes, start, end), opts.bytes));

            // zerosplit → Linux.
            port += 1;
            let listener = in_netns(&b, || TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))?;
            let (exact, start, end, side) = thread::scope(|s| -> Result<_> {
                let rx = s.spawn(|| kernel_receive(&listener, &data));
                let (start, side) = in_netns(&a, || {
                    with_provider(
                        kind,
                        &pair.a.ifname,
                        opts.mtu,
                        |st| send_to(st, SocketAddrV4::new(ip_b, port), &data, tcp_frames),
                        |st| send_to(st, SocketAddrV4::new(ip_b, port), &data, smol_frames),
                    )
                })?;
                let (exact, end) = rx.join().map_err(|_| anyhow!("receiver panicked"))??;
                Ok((exact, start, end, side))
            })?;
            if !exact {
                bail!("zerosplit -> Linux ({kind:?}): bytes differ");
            }
            rows[2 + i]
                .samples
                .push(side.sample(gbps(opts.bytes, start, end), opts.bytes));
        }
    }
    Ok(rows)
}

/// Options of `zerosplit compare-transports`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// MTU of the veth pair.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// MiB per transfer.
    #[arg(long, default_value_t = 64)]
    mib: usize,
    /// Repetitions of each transfer (medians are reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// Runs `zerosplit compare-transports` and prints its table.
///
/// # Errors
/// Bad options, not root, or a transfer failed.
pub fn run(args: Args) -> Result<()> {
    let Args { mtu, mib, runs } = args;
    super::require_root()?;
    if !(576..=9000).contains(&mtu) {
        bail!("--mtu must be between 576 and 9000, got {mtu}");
    }
    if !(1..=1024).contains(&mib) {
        bail!("--mib must be between 1 and 1024, got {mib}");
    }
    if !(1..=15).contains(&runs) {
        bail!("--runs must be between 1 and 15, got {runs}");
    }
    println!("zerosplit compare-transports: one veth pair (198.18.0.0/15), MTU {mtu}, {mib} MiB per transfer, {runs} runs, cubic");
    let rows = measure(&CompareOptions {
        bytes: mib << 20,
        mtu,
        runs,
    })
    .context("compare-transports")?;
    let base = rows
        .iter()
        .find(|r| r.transport == "kernel")
        .map_or(f64::NAN, |r| r.gbps());
    println!(
        "\n{:<20} {:<9} {:>12} {:>9} {:>12} {:>16} {:>15}",
        "direction",
        "transport",
        "goodput",
        "vs Linux",
        "CPU ns/byte",
        "payload touched",
        "frames out/MiB"
    );
    let kernel_first = rows
        .iter()
        .filter(|r| r.transport == "kernel")
        .chain(rows.iter().filter(|r| r.transport != "kernel"));
    for r in kernel_first {
        let (cpu, touched, frames) = if r.transport == "kernel" {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            (
                format!("{:.3}", r.cpu_ns_per_byte()),
                format!("{:.0}%", 100.0 * r.touched() / (mib << 20) as f64),
                format!("{:.0}", r.frames_out() / mib as f64),
            )
        };
        println!(
            "{:<20} {:<9} {:>7.2} Gb/s {:>8.2}x {:>12} {:>16} {:>15}",
            r.direction,
            r.transport,
            r.gbps(),
            r.gbps() / base,
            cpu,
            touched,
            frames
        );
    }
    println!("\nmedians of {runs}; CPU is the zerosplit thread's time on a CPU (user + kernel) per payload byte.");
    Ok(())
}
