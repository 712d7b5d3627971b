//! `zerosplit impair`: the impairment hop for kernels without netem.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bench::impair::{
    FlapConfig, Forwarder, ForwarderConfig, ImpairConfig, ImpairedPath, PathCounters,
};

/// Options of `zerosplit impair`.
#[derive(Debug, clap::Args)]
pub struct Args {
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
    /// Flap the lab's R—B wire: down for DOWN every EVERY (e.g. 3s:500ms).
    #[arg(long, value_name = "EVERY:DOWN", requires = "lab")]
    flap: Option<FlapConfig>,
}

/// Runs `zerosplit impair` until a signal or `--duration`.
///
/// # Errors
/// Bad options, not root, or the hop failed.
pub fn run(args: Args) -> Result<()> {
    let Args {
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
        flap,
    } = args;
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
        flap,
    })
}

/// The `impair` subcommand's options, checked.
struct ImpairArgs {
    interfaces: Option<(String, String)>,
    cfg: ForwarderConfig,
    duration: Option<f64>,
    interval: Option<f64>,
    /// `Some(mtu)`: build the lab.
    lab: Option<u32>,
    /// Flap the lab's R—B wire.
    flap: Option<FlapConfig>,
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
    super::require_root()?;
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
        let flapper = args.flap.map(|f| {
            println!(
                "flapping {} down for {:?} every {:?}",
                path.r_b_if, f.down_for, f.every
            );
            path.flap(f)
        });
        wait(&stop, duration, interval, || {
            (path.counters(), path.is_forwarding())
        });
        if let Some(f) = flapper {
            println!("{} flaps", f.stop().context("link flapper")?.len());
        }
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
