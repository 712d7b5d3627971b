//! The `zerosplit` command line.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use bench::{
    impair::{Forwarder, ForwarderConfig, ImpairConfig, ImpairedPath, PathCounters},
    rx_rate::{self, RxRateConfig, RxRateReport},
};
use clap::{Parser, Subcommand};

/// zerosplit: a user-space TCP datapath over AF_XDP that writes payload
/// straight into application memory.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build two namespaces and a veth pair, move the same bytes Linux →
    /// Linux, Linux → zerosplit, zerosplit → Linux and zerosplit →
    /// zerosplit, check them byte-exact, print goodput side by side, clean
    /// up.
    Demo {
        /// MTU of the veth pair (9000 exercises multi-buffer frames).
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// MiB per transfer.
        #[arg(long, default_value_t = 256)]
        mib: usize,
        /// zerosplit's congestion controller.
        #[arg(long, default_value = "cubic")]
        cc: String,
        /// Where zerosplit's transport runs: rtc (one loop) or dedicated
        /// (its own thread).
        #[arg(long, default_value = "rtc", value_parser = ["rtc", "dedicated"])]
        threads: String,
    },
    /// Compare the transports on the same datapath: header-only tcp vs
    /// smoltcp, Linux -> zerosplit and zerosplit -> Linux on one fresh veth
    /// pair, each repeated; prints medians of goodput and of CPU per byte.
    CompareTransports {
        /// MTU of the veth pair.
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// MiB per transfer.
        #[arg(long, default_value_t = 64)]
        mib: usize,
        /// Repetitions of each transfer (medians are reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Run the stack as a service with the configured listeners (echo,
    /// discard, sink) until SIGINT or SIGTERM, then detach cleanly.
    Run {
        /// Configuration file (see config/reference.toml).
        #[arg(long)]
        config: std::path::PathBuf,
        /// Interface, overriding `interface.name` in the file.
        #[arg(long)]
        iface: Option<String>,
    },
    /// netcat over zerosplit: with -l accept one connection and write what
    /// arrives to stdout; without, connect, send stdin, FIN, and exit once
    /// everything is acknowledged.
    Nc {
        /// Listen instead of connecting.
        #[arg(short = 'l', long)]
        listen: bool,
        /// ADDR:PORT to connect to, or (with -l) the port to listen on as
        /// ADDR:PORT or :PORT.
        target: String,
        /// Interface to run on (in the current network namespace).
        #[arg(long)]
        iface: String,
        /// Configuration file (see config/reference.toml); the options
        /// below override it.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Transport: tcp (header-only: the datapath places payload) or
        /// smoltcp (full packets, payload copied through smoltcp's buffers)
        /// [default: tcp, or the config file's].
        #[arg(long, value_parser = ["tcp", "smoltcp"])]
        transport: Option<String>,
        /// Congestion controller (tcp: newreno, cubic, dctcp, bbr; smoltcp:
        /// none, reno, cubic) [default: cubic, or the config file's].
        #[arg(long)]
        cc: Option<String>,
        /// XDP attach mode [default: native, or the config file's].
        #[arg(long, value_parser = ["native", "generic"])]
        xdp_mode: Option<String>,
        /// Threads: run-to-completion (rtc: datapath and transport in one
        /// loop) or dedicated (the transport on its own thread)
        /// [default: rtc, or the config file's].
        #[arg(long, value_parser = ["rtc", "dedicated"])]
        threads: Option<String>,
        /// MTU of the interface; above 4082 the sockets use multi-buffer
        /// frames [default: 1500, or the config file's].
        #[arg(long)]
        mtu: Option<u32>,
        /// Give up after this many seconds without progress.
        #[arg(long, default_value_t = 30.0)]
        idle_timeout: f64,
    },
    /// Measure RX rates on a fresh veth pair several times: raw AF_XDP
    /// receive vs the datapath (parse + verify + place). Prints medians.
    RxRate {
        /// MTU of the veth pair.
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// Seconds each measurement sends.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Repetitions (each builds its own pair).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Impairment hop for kernels without netem: bridge frames between two
    /// interfaces, dropping, duplicating, reordering, corrupting, delaying
    /// and rate-limiting them as SPEC says, until SIGINT/SIGTERM or
    /// --duration; prints the counters at the end.
    ///
    /// SPEC: comma-separated loss=P, dup=P, reorder=P:DUR, corrupt=P,
    /// delay=DUR, rate=RATE, queue=SIZE, seed=N (P: 1% or 0.01; DUR: 50us,
    /// 2ms; RATE: 2gbit, 100mbit; SIZE: 256k), e.g.
    /// loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%,delay=50us,rate=2gbit,queue=256k,seed=7
    #[command(verbatim_doc_comment)]
    Impair(Box<ImpairCmd>),
    /// Benchmark on veth pairs this command builds itself: Linux vs
    /// zerosplit side by side (goodput, CPU per GB, retransmits, drops,
    /// ping-pong latency), against the raw AF_XDP and memcpy ceilings of
    /// the same run; table on stdout, optional JSON, SVG charts and a
    /// regression gate for CI.
    Bench(Box<zerosplit::bench_cmd::BenchArgs>),
    /// One endpoint of `zerosplit bench`, run in its own namespace
    /// (internal).
    #[command(hide = true)]
    BenchPeer(Box<zerosplit::bench_peer::PeerArgs>),
}

/// Options of `zerosplit impair`.
#[derive(Debug, clap::Args)]
struct ImpairCmd {
    /// Interface A, in the current network namespace.
    #[arg(long, requires = "b_if", required_unless_present = "lab")]
    a_if: Option<String>,
    /// Interface B, in the current network namespace.
    #[arg(long, requires = "a_if")]
    b_if: Option<String>,
    /// Impairment of frames from A to B.
    #[arg(long, default_value = "none", value_name = "SPEC")]
    forward: ImpairConfig,
    /// Impairment of frames from B to A.
    #[arg(long, default_value = "none", value_name = "SPEC")]
    reverse: ImpairConfig,
    /// Stop after this many seconds (default: run until a signal).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Print the counters every SECS seconds while running.
    #[arg(long, value_name = "SECS")]
    interval: Option<f64>,
    /// Largest frame forwarded, Ethernet header included (MTU + 18).
    #[arg(long, default_value_t = 9018)]
    max_frame: usize,
    /// Keep polling this many µs after the last frame before sleeping
    /// (trades CPU for wakeup latency).
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
    /// One polling loop for both directions instead of a thread each
    /// (one core less, usually slower).
    #[arg(long)]
    single_thread: bool,
    /// Instead of two existing interfaces, build namespaces A — R — B
    /// (198.19.0.0/16, veth) with the hop in R, print how to use them,
    /// and delete them when stopped.
    #[arg(long, conflicts_with_all = ["a_if", "b_if", "max_frame"])]
    lab: bool,
    /// MTU of the lab's veth pairs.
    #[arg(long, default_value_t = 1500, requires = "lab")]
    mtu: u32,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo {
            mtu,
            mib,
            cc,
            threads,
        } => demo(mtu, mib, &cc, &threads),
        Command::CompareTransports { mtu, mib, runs } => compare_transports(mtu, mib, runs),
        Command::Run { config, iface } => run_service(&config, iface.as_deref()),
        Command::RxRate { mtu, seconds, runs } => rx_rate_cmd(mtu, seconds, runs),
        Command::Nc {
            listen,
            target,
            iface,
            config,
            transport,
            cc,
            xdp_mode,
            threads,
            mtu,
            idle_timeout,
        } => nc(
            listen,
            &target,
            &iface,
            config.as_deref(),
            transport.as_deref(),
            cc.as_deref(),
            xdp_mode.as_deref(),
            threads.as_deref(),
            mtu,
            idle_timeout,
        ),
        Command::Impair(cmd) => {
            let ImpairCmd {
                a_if,
                b_if,
                forward,
                reverse,
                duration,
                interval,
                max_frame,
                spin_us,
                single_thread,
                lab,
                mtu,
            } = *cmd;
            impair(ImpairArgs {
                interfaces: a_if.zip(b_if),
                cfg: ForwarderConfig {
                    a_to_b: forward,
                    b_to_a: reverse,
                    max_frame,
                    spin: Duration::from_micros(spin_us.min(1_000_000)),
                    thread_per_direction: !single_thread,
                    ..ForwarderConfig::default()
                },
                duration,
                interval,
                lab: lab.then_some(mtu),
            })
        }
        Command::Bench(args) => {
            require_root()?;
            zerosplit::bench_cmd::run(&args)
        }
        Command::BenchPeer(args) => std::process::exit(zerosplit::bench_peer::main(&args)),
    }
}

/// The `impair` subcommand's options, checked.
struct ImpairArgs {
    interfaces: Option<(String, String)>,
    cfg: ForwarderConfig,
    duration: Option<f64>,
    interval: Option<f64>,
    /// `Some(mtu)`: build the lab.
    lab: Option<u32>,
}

fn seconds_arg(name: &str, v: Option<f64>) -> Result<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => bail!("--{name} must be a number of seconds above 0, got {s}"),
    }
}

fn impair(args: ImpairArgs) -> Result<()> {
    let duration = seconds_arg("duration", args.duration)?;
    let interval = seconds_arg("interval", args.interval)?;
    require_root()?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .with_context(|| format!("installing the handler for signal {sig}"))?;
    }
    println!("a->b: {}\nb->a: {}", args.cfg.a_to_b, args.cfg.b_to_a);
    let final_counters = if let Some(mtu) = args.lab {
        let mut path = ImpairedPath::create_with(mtu, &args.cfg).context("building the lab")?;
        let (a, b) = (&path.a, &path.b);
        println!(
            "lab up (MTU {mtu}):\n  A: netns {} dev {} {}/{} mac {}\n  R: netns {} bridging {} <-> {}\n  B: netns {} dev {} {}/{} mac {}",
            a.netns, a.ifname, a.addr, ImpairedPath::PREFIX_LEN, a.mac_string(),
            path.ns_r().name(), path.r_a_if, path.r_b_if,
            b.netns, b.ifname, b.addr, ImpairedPath::PREFIX_LEN, b.mac_string(),
        );
        println!(
            "try:\n  ip netns exec {} ping -c 3 {}\n  ip netns exec {} iperf3 -s -1 -B {} &\n  ip netns exec {} iperf3 -c {} -t 5",
            a.netns, b.addr, b.netns, b.addr, a.netns, b.addr
        );
        println!("Ctrl-C (or SIGTERM) stops the hop and deletes the namespaces.");
        wait(&stop, duration, interval, || {
            (path.counters(), path.is_forwarding())
        });
        path.stop_forwarding().context("forwarder")?
    } else {
        let (a_if, b_if) = args
            .interfaces
            .context("give --a-if and --b-if, or --lab")?;
        let fwd = Forwarder::start(&a_if, &b_if, None, &args.cfg)
            .with_context(|| format!("starting the hop between {a_if} and {b_if}"))?;
        println!("forwarding {a_if} <-> {b_if}; Ctrl-C (or SIGTERM) stops.");
        wait(&stop, duration, interval, || {
            (fwd.counters(), fwd.is_running())
        });
        fwd.stop().context("forwarder")?
    };
    print_counters(&final_counters);
    Ok(())
}

/// Sleeps until a signal, the duration, or the forwarder's end; prints the
/// counters every `interval`.
fn wait(
    stop: &AtomicBool,
    duration: Option<Duration>,
    interval: Option<Duration>,
    poll: impl Fn() -> (PathCounters, bool),
) {
    let started = Instant::now();
    let mut next_print = interval.map(|i| started + i);
    while !stop.load(Ordering::Relaxed) {
        if duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let (counters, running) = poll();
        if !running {
            eprintln!("the forwarder stopped on its own");
            break;
        }
        if let (Some(at), Some(i)) = (next_print, interval) {
            if Instant::now() >= at {
                print_counters(&counters);
                next_print = Some(at + i);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn print_counters(c: &PathCounters) {
    println!("{:<18} {:>14} {:>14}", "counter", "a->b", "b->a");
    for ((name, ab), (_, ba)) in c.a_to_b.entries().iter().zip(c.b_to_a.entries()) {
        println!("{name:<18} {ab:>14} {ba:>14}");
    }
}

fn require_root() -> Result<()> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u32>().ok());
    if euid != Some(0) {
        bail!("zerosplit creates network namespaces and attaches XDP programs: run it as root");
    }
    Ok(())
}

fn config(mtu: u32, seconds: f64) -> Result<RxRateConfig> {
    if !(0.1..=600.0).contains(&seconds) {
        bail!("--seconds must be between 0.1 and 600, got {seconds}");
    }
    if !(576..=9000).contains(&mtu) {
        bail!("--mtu must be between 576 and 9000, got {mtu}");
    }
    Ok(RxRateConfig {
        mtu,
        duration: Duration::from_secs_f64(seconds),
        ..RxRateConfig::default()
    })
}

fn demo(mtu: u32, mib: usize, cc: &str, threads: &str) -> Result<()> {
    use zerosplit::demo::{self, DemoOptions};
    require_root()?;
    let algorithm: transports::cc::Algorithm = cc.parse().with_context(|| format!("--cc {cc}"))?;
    if !(576..=9000).contains(&mtu) {
        bail!("--mtu must be between 576 and 9000, got {mtu}");
    }
    if !(1..=4096).contains(&mib) {
        bail!("--mib must be between 1 and 4096, got {mib}");
    }
    println!("zerosplit demo: two fresh namespaces joined by veth (198.18.0.0/15), MTU {mtu}, {mib} MiB each way, cc {algorithm}");
    let threads = if threads == "dedicated" {
        zerosplit::stack::Threads::Dedicated {
            datapath_core: None,
            transport_core: None,
            queue: 4096,
        }
    } else {
        zerosplit::stack::Threads::RunToCompletion
    };
    let rows = demo::run(&DemoOptions {
        bytes: mib << 20,
        mtu,
        algorithm,
        threads,
    })
    .context("demo")?;
    let base = rows[0].gbps;
    println!(
        "\n{:<24} {:>12} {:>14} {:>12} {:>10}",
        "transfer", "goodput", "vs Linux", "retransmits", "bytes"
    );
    let drops = |d: &[(&str, u64)]| {
        if d.is_empty() {
            "none".to_string()
        } else {
            d.iter()
                .map(|(n, v)| format!("{n} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    for r in &rows {
        println!(
            "{:<24} {:>8.2} Gb/s {:>13.2}x {:>12} {:>10}",
            r.scenario,
            r.gbps,
            r.gbps / base,
            r.retransmits.map_or("-".to_string(), |n| n.to_string()),
            if r.exact { "exact" } else { "DIFFER" }
        );
    }
    println!("\ndatapath drops by reason (zerosplit ends):");
    for r in rows.iter().filter(|r| r.retransmits.is_some()) {
        println!("  {:<24} {}", r.scenario, drops(&r.drops));
    }
    println!("\nnamespaces and veth removed; the XDP program detached with its link.");
    Ok(())
}

fn compare_transports(mtu: u32, mib: usize, runs: usize) -> Result<()> {
    use zerosplit::compare::{self, CompareOptions};
    require_root()?;
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
    let rows = compare::run(&CompareOptions {
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rx_rate_cmd(mtu: u32, seconds: f64, runs: usize) -> Result<()> {
    require_root()?;
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    let cfg = config(mtu, seconds)?;
    let mut reports = Vec::new();
    for i in 0..runs {
        eprintln!("run {}/{runs} ...", i + 1);
        reports.push(rx_rate::run(&cfg).with_context(|| format!("run {}", i + 1))?);
    }
    print_table(&reports);
    let m = |f: fn(&RxRateReport) -> f64| median(reports.iter().map(f).collect());
    println!(
        "median of {runs}: raw {:.2} Mpps {:.1} Gbit/s | datapath {:.2} Mpps {:.1} Gbit/s ({:.0} % of raw pps) | goodput {:.1} Gbit/s",
        m(|r| r.raw.mpps()),
        m(|r| r.raw.gbps()),
        m(|r| r.datapath.mpps()),
        m(|r| r.datapath.gbps()),
        m(|r| 100.0 * r.datapath.mpps() / r.raw.mpps()),
        m(|r| r.goodput_gbps),
    );
    if reports.iter().any(|r| !r.verified) {
        bail!("a run's placed bytes differ from what was sent");
    }
    Ok(())
}

fn print_table(reports: &[RxRateReport]) {
    println!(
        "{:<5} {:>10} {:>10} {:>12} {:>12} {:>10} {:>10} {:>9}",
        "MTU",
        "raw Mpps",
        "raw Gb/s",
        "datapath Mpps",
        "datapath Gb/s",
        "goodput",
        "ratio",
        "verified"
    );
    for r in reports {
        println!(
            "{:<5} {:>10.2} {:>10.1} {:>12.2} {:>12.1} {:>10.1} {:>9.0}% {:>9}",
            r.mtu,
            r.raw.mpps(),
            r.raw.gbps(),
            r.datapath.mpps(),
            r.datapath.gbps(),
            r.goodput_gbps,
            100.0 * r.datapath.mpps() / r.raw.mpps(),
            if r.verified { "yes" } else { "NO" }
        );
    }
}

#[allow(
    clippy::too_many_arguments,
    reason = "one parameter per command-line option"
)]
fn nc(
    listen: bool,
    target: &str,
    iface: &str,
    config_path: Option<&std::path::Path>,
    transport: Option<&str>,
    cc: Option<&str>,
    xdp_mode: Option<&str>,
    threads: Option<&str>,
    mtu: Option<u32>,
    idle_timeout: f64,
) -> Result<()> {
    use std::net::SocketAddrV4;
    use zerosplit::config::{Config, TransportKind};
    use zerosplit::nc::NcOptions;
    use zerosplit::smol::{SmolConfig, SmolCongestion, SmolStack};
    use zerosplit::stack::{Stack, StackConfig};

    require_root()?;
    if !(idle_timeout > 0.0 && idle_timeout <= 86400.0) {
        bail!("--idle-timeout must be between 0 and 86400 seconds, got {idle_timeout}");
    }
    let file = match config_path {
        Some(path) => {
            let mut file =
                Config::load(path).with_context(|| format!("loading {}", path.display()))?;
            file.set_interface(iface).context("--iface")?;
            if file.interface.queues.len() > 1 {
                bail!(
                    "interface.queues: nc serves one queue, {} are listed; list one (zerosplit run serves several)",
                    file.interface.queues.len()
                );
            }
            Some(file)
        }
        None => None,
    };
    let smoltcp = match transport {
        Some(t) => t == "smoltcp",
        None => file
            .as_ref()
            .is_some_and(|f| f.transport.kind == TransportKind::Smoltcp),
    };
    let queue = |f: &Config| f.interface.queues.first().copied().unwrap_or(0);
    let loop_core = file.as_ref().and_then(|f| f.loop_core(queue(f)));
    let mut config = match &file {
        Some(f) => f.stack_config(queue(f)),
        None => {
            let mut c = StackConfig::default();
            c.nic.xsk.umem.mr_bytes = 64 << 20;
            c.tcp.algorithm = transports::cc::Algorithm::Cubic;
            c
        }
    };
    let mut smol_cc = match &file {
        Some(f) if smoltcp => match f.smol_config(queue(f)) {
            Ok(s) => s.congestion,
            // The file was written for tcp (e.g. congestion = "bbr"):
            // --cc must then say what smoltcp should use.
            Err(e) if cc.is_none() => {
                return Err(e)
                    .context("--transport smoltcp with the config file's transport.congestion")
            }
            Err(_) => SmolCongestion::Cubic,
        },
        _ => SmolCongestion::Cubic,
    };
    if let Some(cc) = cc {
        if smoltcp {
            smol_cc = cc.parse().with_context(|| format!("--cc {cc}"))?;
        } else {
            config.tcp.algorithm = cc.parse().with_context(|| format!("--cc {cc}"))?;
        }
    }
    if let Some(mtu) = mtu {
        if !(576..=9000).contains(&mtu) {
            bail!("--mtu must be between 576 and 9000, got {mtu}");
        }
        config.nic.mtu = mtu as usize;
        config.nic.xsk.multi_buffer = mtu as usize + 14 > config.nic.xsk.umem.frame_size as usize;
        config.tcp.mss = (mtu - 40) as u16;
    }
    match threads {
        Some("dedicated") if smoltcp => {
            bail!("--threads dedicated: the smoltcp transport runs run-to-completion only (--threads rtc)")
        }
        Some("dedicated") => {
            config.threads = zerosplit::stack::Threads::Dedicated {
                datapath_core: None,
                transport_core: None,
                queue: 4096,
            };
        }
        Some(_) => config.threads = zerosplit::stack::Threads::RunToCompletion,
        None => {}
    }
    if smoltcp && config.threads != zerosplit::stack::Threads::RunToCompletion {
        bail!("threads.mode: the smoltcp transport runs run-to-completion only; pass --threads rtc or set mode = \"run-to-completion\"");
    }
    if let Some(mode) = xdp_mode {
        config.nic.xdp_mode = if mode == "generic" {
            datapath::steer::XdpMode::Generic
        } else {
            datapath::steer::XdpMode::Native
        };
    }
    let opts = NcOptions {
        idle_timeout: std::time::Duration::from_secs_f64(idle_timeout),
    };
    // Check every argument before touching the interface.
    let role = if listen {
        let port_text = target.rsplit_once(':').map_or(target, |(_, p)| p);
        NcRole::Listen(
            port_text
                .parse()
                .with_context(|| format!("bad port in {target:?} (want ADDR:PORT or :PORT)"))?,
        )
    } else {
        NcRole::Connect(
            target
                .parse::<SocketAddrV4>()
                .with_context(|| format!("bad address {target:?} (want IPv4:PORT)"))?,
        )
    };
    if let Some(id) = loop_core {
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            eprintln!("zerosplit nc: could not pin the loop to core {id}");
        }
    }
    if smoltcp {
        let smol = SmolConfig {
            congestion: smol_cc,
            stack: config,
            ..match &file {
                Some(f) => f.smol_config(queue(f)).unwrap_or_default(),
                None => SmolConfig::default(),
            }
        };
        let mut stack = SmolStack::new(iface, smol)
            .with_context(|| format!("starting zerosplit (smoltcp) on {iface}"))?;
        run_nc(&mut stack, role, &opts)?;
        let c = stack.counters();
        eprintln!(
            "zerosplit nc: smoltcp copied {} payload bytes into and {} out of its socket buffers ({} frames in, {} out)",
            c.payload_copied_in, c.payload_copied_out, c.frames_in, c.frames_out
        );
    } else {
        let mut stack =
            Stack::new(iface, config).with_context(|| format!("starting zerosplit on {iface}"))?;
        run_nc(&mut stack, role, &opts)?;
        let c = stack.counters();
        eprintln!(
            "zerosplit nc: {} segments ({} bytes of headers and stream ranges) crossed to the transport; payload stayed in the datapath",
            c.segments_to_transport, c.bytes_to_transport
        );
    }
    Ok(())
}

/// What `nc` does once its arguments are checked.
enum NcRole {
    Listen(u16),
    Connect(std::net::SocketAddrV4),
}

fn run_nc<P: zerosplit::provider::Provider>(
    stack: &mut P,
    role: NcRole,
    opts: &zerosplit::nc::NcOptions,
) -> Result<()> {
    use zerosplit::nc as netcat;
    match role {
        NcRole::Listen(port) => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            let n = netcat::listen(stack, port, &mut out, opts)?;
            eprintln!("zerosplit nc: received {n} bytes");
        }
        NcRole::Connect(remote) => {
            let stdin = std::io::stdin();
            let mut input = stdin.lock();
            let n = netcat::connect(stack, remote, &mut input, opts)?;
            eprintln!("zerosplit nc: sent {n} bytes, all acknowledged");
        }
    }
    Ok(())
}

fn run_service(path: &std::path::Path, iface: Option<&str>) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use zerosplit::config::{Config, TransportKind};
    use zerosplit::provider::Provider;
    use zerosplit::service::{serve, ServiceReport};

    require_root()?;
    let mut config = Config::load(path).with_context(|| format!("loading {}", path.display()))?;
    if let Some(name) = iface {
        config.set_interface(name).context("--iface")?;
    }
    let name = config.interface.name.clone();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing the signal handler")?;
    }
    let queues = config.interface.queues.clone();
    let announce = |local_ip: std::net::Ipv4Addr, transport: &str, queue: u32| {
        if let Some(id) = config.loop_core(queue) {
            if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                eprintln!("zerosplit run: could not pin queue {queue}'s loop to core {id}");
            }
        }
        for l in &config.listen {
            eprintln!(
                "zerosplit run: {:?} on {local_ip}:{} ({name}, queue {queue}, {transport})",
                l.service, l.port,
            );
        }
    };
    if config.transport.kind == TransportKind::Smoltcp {
        if queues.len() != 1 {
            bail!(
                "interface.queues: the smoltcp transport serves one queue, {} are listed",
                queues.len()
            );
        }
        let smol = config.smol_config(queues[0])?;
        let mut stack = zerosplit::smol::SmolStack::new(&name, smol)
            .with_context(|| format!("starting zerosplit (smoltcp) on {name}"))?;
        announce(stack.local_ip(), stack.transport_name(), queues[0]);
        let r = serve(&mut stack, &config.listen, &stop)?;
        drop(stack);
        eprintln!(
            "zerosplit run: stopped; {} connections, {} bytes in, {} bytes echoed (smoltcp); XDP program detached",
            r.connections, r.bytes_in, r.bytes_echoed
        );
        return Ok(());
    }
    let configs = queues.iter().map(|&q| config.stack_config(q)).collect();
    // One stack per queue, each on its own thread; a queue that fails
    // stops the others.
    let sharded = zerosplit::shards::run_sharded(&name, configs, |queue, stack| {
        announce(stack.local_ip(), stack.transport_name(), queue);
        let report = serve(stack, &config.listen, &stop);
        if report.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        report
    })
    .with_context(|| format!("starting zerosplit on {name}"))?;
    let mut total = ServiceReport::default();
    for (queue, report) in sharded.results {
        let r = report.with_context(|| format!("queue {queue}"))?;
        if queues.len() > 1 {
            eprintln!(
                "zerosplit run: queue {queue}: {} connections, {} bytes in, {} bytes echoed",
                r.connections, r.bytes_in, r.bytes_echoed
            );
        }
        total.connections += r.connections;
        total.bytes_in += r.bytes_in;
        total.bytes_echoed += r.bytes_echoed;
        total.refused += r.refused;
        total.posts_deferred += r.posts_deferred;
    }
    eprintln!(
        "zerosplit run: stopped; {} connections ({} reset for lack of memory), {} bytes in, {} bytes echoed, {} posts deferred; {} packets handed between queues; XDP program detached",
        total.connections,
        total.refused,
        total.bytes_in,
        total.bytes_echoed,
        total.posts_deferred,
        sharded.group.forwarded
    );
    Ok(())
}
