//! `zerosplit cc-lab`: congestion controllers through simulator scenarios,
//! with traces, plots, fairness and a summary checked against stated
//! bounds (see `bench::cclab`).

use anyhow::{bail, Context, Result};
use transports::cc::Algorithm;

/// Options of `zerosplit cc-lab`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Short runs (CI): 30 simulated seconds, 10 s alone and 30 s shared on veth.
    #[arg(long)]
    quick: bool,
    /// Controllers, comma-separated [default: every registered one].
    #[arg(long, value_name = "LIST")]
    cc: Option<String>,
    /// Only the simulator scenarios (the veth ones need root).
    #[arg(long)]
    sim_only: bool,
    /// Where the CSV, JSON and SVG files go [default: target/cc-lab].
    #[arg(long, value_name = "DIR")]
    out: Option<std::path::PathBuf>,
}

/// Runs the lab; fails when a bound was not kept.
///
/// # Errors
/// An unknown controller, a scenario the simulator refused, an output that
/// could not be written, or a bound not kept.
pub fn run(args: Args) -> Result<()> {
    let ccs: Vec<Algorithm> = match &args.cc {
        Some(list) => list
            .split(',')
            .map(|n| {
                n.parse::<Algorithm>()
                    .with_context(|| format!("--cc {list}"))
            })
            .collect::<Result<_>>()?,
        None => Algorithm::ALL.to_vec(),
    };
    if ccs.is_empty() {
        bail!("--cc: give at least one controller");
    }
    let out = args.out.unwrap_or_else(bench::cclab::default_out);
    let report = bench::cclab::run(&bench::cclab::LabOptions {
        quick: args.quick,
        ccs,
        out: out.clone(),
        progress: true,
        veth: !args.sim_only,
    })?;
    print!("{}", bench::cclab::table(&report));
    println!("outputs in {}", out.display());
    if !report.passed() {
        bail!("a bound was not kept (see above)");
    }
    Ok(())
}
