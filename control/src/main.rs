//! The `zerosplit` command line.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use bench::rx_rate::{self, RxRateConfig, RxRateReport};
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
    /// Build two namespaces and a veth pair, push a TCP stream through the
    /// datapath from an AF_XDP sender, show what it placed, clean up.
    Demo {
        /// MTU of the veth pair (9000 exercises multi-buffer frames).
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// Seconds each measurement sends.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
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
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo { mtu, seconds } => demo(mtu, seconds),
        Command::RxRate { mtu, seconds, runs } => rx_rate_cmd(mtu, seconds, runs),
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

fn demo(mtu: u32, seconds: f64) -> Result<()> {
    require_root()?;
    let cfg = config(mtu, seconds)?;
    println!("zerosplit demo: veth pair in two fresh namespaces (198.18.0.0/15), MTU {mtu}");
    println!("  peer: AF_XDP sender of one TCP flow; stack: XDP steering + zerosplit datapath\n");
    let r = rx_rate::run(&cfg).context("demo run")?;
    print_table(std::slice::from_ref(&r));
    println!("\nplacement counters of the flow:");
    for (name, value) in &r.flow_counters {
        println!("  {name:<22} {value}");
    }
    let c = r.counters;
    println!(
        "poll loop: {} records to the transport side, {} parse errors",
        c.records,
        c.rx.iter()
            .filter(|(n, _)| !matches!(*n, "unknown_flow"))
            .map(|(_, v)| v)
            .sum::<u64>()
    );
    println!(
        "\nreceive memory {} the sender's bytes ({} MiB completed in order); namespaces removed.",
        if r.verified {
            "matches"
        } else {
            "DOES NOT match"
        },
        r.completed >> 20
    );
    if !r.verified {
        bail!("placed bytes differ from what was sent");
    }
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
