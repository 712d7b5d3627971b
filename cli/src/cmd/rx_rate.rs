//! `zerosplit rx-rate`: raw AF_XDP receive against the datapath on fresh
//! veth pairs.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use bench::rx_rate::{self, RxRateConfig, RxRateReport};

/// Options of `zerosplit rx-rate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// MTU of the veth pair.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Seconds each measurement sends.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Repetitions (each builds its own pair).
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// Runs `zerosplit rx-rate` and prints its table.
///
/// # Errors
/// Bad options, not root, or a measurement failed.
pub fn run(args: Args) -> Result<()> {
    let Args { mtu, seconds, runs } = args;
    super::require_root()?;
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
