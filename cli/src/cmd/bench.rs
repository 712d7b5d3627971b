//! `zerosplit bench`: turns the command line into
//! [`bench::suite::SuiteOptions`], runs the suite, prints the table, writes
//! `--json` and `--plot`, and applies the `--baseline` gate.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bench::impair::ImpairConfig;
use bench::suite::{
    self, baseline,
    report::Report,
    scenario::{parse_list, Scenario, ThreadMode},
    svg, table, SuiteOptions,
};

/// Options of `zerosplit bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The CI smoke subset (MTU 1500, run-to-completion, 1-second
    /// transfers, 2 rounds; under 2 minutes). The options below still
    /// override it.
    #[arg(long)]
    pub quick: bool,
    /// Only these scenarios (comma-separated): linux-linux,
    /// linux-linux-offload, linux-linux-iperf3, linux-zs, zs-linux,
    /// zs-zs-tcp, zs-zs-smoltcp.
    #[arg(long, value_name = "NAMES")]
    pub scenario: Option<String>,
    /// MTUs (comma-separated, 576..=65535) [full: 1500,9000,65535; quick: 1500].
    #[arg(long, value_name = "MTUS")]
    pub mtu: Option<String>,
    /// zerosplit thread modes (comma-separated: rtc, dedicated)
    /// [full: both; quick: rtc].
    #[arg(long, value_name = "MODES")]
    pub threads: Option<String>,
    /// Run every case of the main table over IPv6 too (2001:2::1 ↔
    /// 2001:2::2, rows keyed `…/v6`) beside its IPv4 twin in the same
    /// rounds, and report IPv6 ÷ IPv4 goodput against the 0.95 target.
    /// The smoltcp rows are n/a over IPv6; the sections after the main
    /// table stay IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Rounds; each case runs once per round, alternating order
    /// [full: 3; quick: 2].
    #[arg(long)]
    pub runs: Option<usize>,
    /// Bytes per transfer (the sender also stops at --seconds).
    #[arg(long)]
    pub bytes: Option<u64>,
    /// Seconds per transfer and per ping-pong [full: 3; quick: 1].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Ping-pong rounds per measurement [full: 20000; quick: 2000].
    #[arg(long)]
    pub pingpong_rounds: Option<u64>,
    /// Skip the raw AF_XDP and memcpy ceilings.
    #[arg(long)]
    pub no_ceilings: bool,
    /// The zerosplit ends' idle policy in the main rows (threads.poll):
    /// spin, adaptive or sleep [adaptive].
    #[arg(long, value_name = "MODE", value_parser = ["spin", "adaptive", "sleep"])]
    pub poll: Option<String>,
    /// Skip the poll section (idle CPU, goodput and ping-pong per
    /// threads.poll mode; about 20 s in --quick).
    #[arg(long)]
    pub no_poll_modes: bool,
    /// Skip the apps section (iperf3 and redis under `zerosplit exec`
    /// beside kernel TCP).
    #[arg(long)]
    pub no_apps: bool,
    /// Skip the attached section (zerosplit attached to a `zerosplit
    /// daemon` beside zerosplit in-process; about 20 s in --quick).
    #[arg(long)]
    pub no_attached: bool,
    /// The zerosplit ends publish their metrics (as `[metrics] listen`
    /// does) and a scraper reads /metrics every 100 ms during every
    /// measurement: run once with and once without to price the metrics.
    #[arg(long)]
    pub metrics: bool,
    /// Impair the path in both directions (same SPEC as `zerosplit
    /// impair`, e.g. loss=0.1%,rate=2gbit); the ends then talk through a
    /// forwarding hop.
    #[arg(long, value_name = "SPEC")]
    pub impair: Option<ImpairConfig>,
    /// Write the machine-readable report (schema 2) here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write SVG charts (goodput.svg, latency-cdf.svg) into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// A stored report to compare ratios with (needs --max-regression).
    #[arg(long, value_name = "FILE", requires = "max_regression")]
    pub baseline: Option<PathBuf>,
    /// Exit non-zero when a ratio falls more than PCT % below the baseline.
    #[arg(long, value_name = "PCT", requires = "baseline")]
    pub max_regression: Option<f64>,
    /// Connection counts of the flows section, comma-separated, or `none`
    /// [full: 1,16,256,1024 × 3 rounds; quick: the same counts, 1 round].
    #[arg(long, value_name = "LIST")]
    pub flows: Option<String>,
    /// Queue counts of the flows section, comma-separated (each count of
    /// --flows runs on each) [full: 1,2; quick: 1].
    #[arg(long, value_name = "LIST")]
    pub flow_queues: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

fn options(args: &BenchArgs) -> Result<SuiteOptions> {
    let exe = std::env::current_exe().context("locating the zerosplit binary")?;
    let mut o = if args.quick {
        SuiteOptions::quick(exe)
    } else {
        SuiteOptions::full(exe)
    };
    o.tool = format!("zerosplit {}", env!("CARGO_PKG_VERSION"));
    if let Some(s) = &args.scenario {
        o.scenarios = parse_list::<Scenario>(s).context("--scenario")?;
    }
    if let Some(m) = &args.mtu {
        o.mtus = parse_numbers(m, "--mtu", "")?;
    }
    if let Some(t) = &args.threads {
        o.threads = parse_list::<ThreadMode>(t).context("--threads")?;
    }
    o.ipv6 = args.ipv6;
    if let Some(r) = args.runs {
        o.runs = r;
    }
    if let Some(b) = args.bytes {
        o.bytes = b;
    }
    if let Some(s) = args.seconds {
        o.seconds = s;
    }
    if let Some(r) = args.pingpong_rounds {
        o.pingpong_rounds = r;
    }
    if let Some(f) = &args.flows {
        o.flow_counts = parse_flow_counts(f)?;
    }
    if let Some(q) = &args.flow_queues {
        o.flow_queues = parse_numbers(q, "--flow-queues", "")?;
    }
    o.ceilings = !args.no_ceilings;
    if let Some(p) = &args.poll {
        o.poll = p.parse().map_err(anyhow::Error::msg).context("--poll")?;
        o.attached_poll = Some(o.poll);
    }
    o.poll_modes = !args.no_poll_modes;
    o.apps = !args.no_apps;
    o.attached = !args.no_attached;
    o.metrics = args.metrics;
    o.impair = args.impair.clone();
    o.progress = !args.no_progress;
    // Ctrl-C or a CI timeout's SIGTERM: finish the current measurement,
    // remove the namespaces, report what ran.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .with_context(|| format!("installing the handler for signal {sig}"))?;
    }
    o.stop = Some(stop);
    Ok(o)
}

/// `--flows`: `none` or comma-separated connection counts.
fn parse_flow_counts(list: &str) -> Result<Vec<usize>> {
    if list.trim() == "none" {
        return Ok(Vec::new());
    }
    parse_numbers(list, "--flows", " (or say `none`)")
}

/// A comma-separated list of numbers given to `flag`; `hint` follows the
/// message naming an entry that is not a number.
fn parse_numbers<T: std::str::FromStr>(list: &str, flag: &str, hint: &str) -> Result<Vec<T>> {
    list.split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|_| anyhow::anyhow!("{flag}: {x:?} is not a number{hint}"))
        })
        .collect()
}

/// Runs `zerosplit bench`.
///
/// # Errors
/// Bad options, the suite could not run, an output could not be written,
/// or the baseline gate failed (the message names each regressed row and
/// ratio).
pub fn run(args: &BenchArgs) -> Result<()> {
    super::require_root()?;
    let opts = options(args)?;
    // Read the baseline first: a bad file should not cost a whole run.
    let base = match &args.baseline {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the baseline {}", path.display()))?;
            Some(Report::from_json(&text).with_context(|| format!("baseline {}", path.display()))?)
        }
        None => None,
    };
    if let Some(p) = args.max_regression {
        if !(0.0..100.0).contains(&p) {
            bail!("--max-regression must be a percentage in 0..100, got {p}");
        }
    }
    let report = suite::run(&opts).context("zerosplit bench")?;
    let interrupted = opts
        .stop
        .as_ref()
        .is_some_and(|s| s.load(Ordering::Relaxed));
    println!(
        "zerosplit bench: {} round(s), kernel {}, {} CPUs, {:.0} s{}",
        report.options.runs,
        report.machine.kernel,
        report.machine.cpus,
        report.wall_seconds,
        if report.options.quick { ", quick" } else { "" }
    );
    print!("{}", table::render(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json())
            .with_context(|| format!("writing {}", path.display()))?;
        println!("JSON written to {}", path.display());
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, doc) in [
            ("goodput.svg", svg::goodput_chart(&report)),
            ("latency-cdf.svg", svg::latency_cdf_chart(&report)),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, doc).with_context(|| format!("writing {}", p.display()))?;
        }
        println!("charts written to {}", dir.display());
    }
    if interrupted {
        bail!("interrupted: the report above covers only the measurements that ran");
    }
    if let (Some(base), Some(pct)) = (base, args.max_regression) {
        let c = baseline::gate(&report, &base, pct).context("baseline check failed")?;
        println!(
            "baseline check passed: {} ratio(s) within {pct} % of the baseline{}",
            c.compared,
            if c.missing.is_empty() {
                String::new()
            } else {
                format!(" ({} not measured in this run)", c.missing.len())
            }
        );
    }
    Ok(())
}
