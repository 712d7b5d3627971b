//! `zerosplit-fuzz`: runs the fuzz targets for a bounded time, prints the
//! executions of each, and reproduces a failure from its input seed or a
//! saved input.
//!
//! ```text
//! cargo run -p zerosplit-fuzz --release -- list
//! cargo run -p zerosplit-fuzz --release -- place --seconds 600 --seed 7
//! cargo run -p zerosplit-fuzz --release -- ci --seconds 20
//! cargo run -p zerosplit-fuzz --release -- forged_delivery --seconds 60 --keep-going
//! cargo run -p zerosplit-fuzz --release -- place --replay 0x1234abcd
//! cargo run -p zerosplit-fuzz --release -- place --input target/fuzz-failures/place-1234abcd.bin
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use fuzz::runner::{execute, input_from_seed, DEFAULT_MAX_LEN};
use fuzz::{find, run, Budget, Report, Target, TARGETS};

/// Fuzz zerosplit's parsers, placement, TCP engine and config on stable Rust.
#[derive(Debug, Parser)]
struct Args {
    /// A target name, `all`, `ci` (the targets `.ci/run` runs) or `list`.
    target: String,
    /// Seconds per target.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Stop each target after this many executions.
    #[arg(long)]
    execs: Option<u64>,
    /// Seed of the run (input i is generated from this seed and i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest input in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_LEN)]
    max_len: usize,
    /// Run the one input generated from this input seed (as printed by a
    /// failure; decimal or 0x-hex).
    #[arg(long, value_parser = parse_seed)]
    replay: Option<u64>,
    /// Count failing inputs and go on (report the first) instead of
    /// stopping at the first failure.
    #[arg(long)]
    keep_going: bool,
    /// Run the one input stored in this file.
    #[arg(long)]
    input: Option<PathBuf>,
}

fn parse_seed(s: &str) -> Result<u64, std::num::ParseIntError> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    }
}

fn main() -> Result<ExitCode> {
    let args = Args::parse();
    let targets: Vec<&Target> = match args.target.as_str() {
        "list" => {
            for t in TARGETS {
                println!(
                    "{:<16} {}{}",
                    t.name,
                    if t.ci { "" } else { "(not in ci) " },
                    t.about
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        "all" => TARGETS.iter().collect(),
        "ci" => TARGETS.iter().filter(|t| t.ci).collect(),
        name => match find(name) {
            Some(t) => vec![t],
            None => bail!("no target `{name}`; `list` shows them"),
        },
    };
    if args.replay.is_some() || args.input.is_some() {
        let [t] = targets[..] else {
            bail!("--replay and --input take one target");
        };
        return replay(t, &args);
    }
    let budget = Budget {
        time: Duration::try_from_secs_f64(args.seconds).context("--seconds")?,
        max_execs: args.execs,
        seed: args.seed,
        max_len: args.max_len,
        keep_going: args.keep_going,
    };
    let mut failed = false;
    for t in targets {
        let report = run(t, &budget);
        print_report(&report, &args)?;
        failed |= report.failure.is_some();
        // The CI run also fails when the inputs stop reaching the code
        // under test (a generator that mostly fails its own setup passes
        // every input while testing nothing).
        if args.target == "ci" && report.failure.is_none() && !report.reached_enough(t) {
            println!(
                "FAILED {}: only {} of {} inputs got past the setup (at least {} % must)",
                t.name,
                report.reached,
                report.execs,
                t.min_reached * 100.0
            );
            failed = true;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_report(r: &Report, args: &Args) -> Result<()> {
    println!(
        "{:<16} {:>10} execs in {:>6.1} s = {:>9.0} execs/s, {:>5.1} % past the setup (seed {})",
        r.target,
        r.execs,
        r.elapsed.as_secs_f64(),
        r.rate(),
        100.0 * r.reached as f64 / r.execs.max(1) as f64,
        args.seed
    );
    if let Some(f) = &r.failure {
        if args.keep_going {
            println!("  {} of {} inputs failed; the first:", r.failed, r.execs);
        }
        let dir = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| PathBuf::from("target"), PathBuf::from)
            .join("fuzz-failures");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}-{:016x}.bin", r.target, f.input_seed));
        std::fs::write(&path, &f.input).with_context(|| format!("writing {}", path.display()))?;
        println!("FAILED {}: {}", r.target, f.message);
        println!(
            "  input seed {:#x}, {} bytes, saved to {}",
            f.input_seed,
            f.input.len(),
            path.display()
        );
        let len = if args.max_len == DEFAULT_MAX_LEN {
            String::new()
        } else {
            format!(" --max-len {}", args.max_len)
        };
        println!(
            "  reproduce: cargo run -p zerosplit-fuzz --release -- {} --replay {:#x}{len}",
            r.target, f.input_seed
        );
    }
    Ok(())
}

fn replay(t: &Target, args: &Args) -> Result<ExitCode> {
    let input = match (&args.input, args.replay) {
        (Some(path), _) => {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
        }
        (None, Some(seed)) => input_from_seed(seed, args.max_len),
        (None, None) => bail!("nothing to replay"),
    };
    match execute(t, &input) {
        Ok(reached) => {
            println!(
                "{}: input of {} bytes passes ({reached:?})",
                t.name,
                input.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("{}: FAILED: {e}", t.name);
            Ok(ExitCode::FAILURE)
        }
    }
}
