//! `zerosplit hostile`: the hostile-packet suite ([`bench::hostile`]) on a
//! lab it builds itself, printing the table of kinds × (zerosplit, Linux).

use anyhow::{bail, Result};
use bench::hostile::{run_suite, table, Receiver, SuiteConfig, KINDS};

/// Options of `zerosplit hostile`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The full form: 8 MiB streams, 100 injection rounds, a 100 000-SYN
    /// flood (default: the CI form, 1 MiB, 10 rounds, 2 000 SYNs).
    #[arg(long)]
    full: bool,
    /// Run only these kinds (repeatable; `--list` shows them).
    #[arg(long = "kind")]
    kinds: Vec<String>,
    /// Only zerosplit as the receiver (skip the Linux reference).
    #[arg(long)]
    zerosplit_only: bool,
    /// List the kinds and exit.
    #[arg(long)]
    list: bool,
}

/// Runs `zerosplit hostile`.
///
/// # Errors
/// Not root, an unknown kind, the lab failed, or a kind failed on
/// zerosplit.
pub fn run(args: Args) -> Result<()> {
    if args.list {
        for k in KINDS {
            println!("{:24} {:?}  {}", k.name, k.expect, k.about);
        }
        return Ok(());
    }
    super::require_root()?;
    if let Some(bad) = args
        .kinds
        .iter()
        .find(|n| !KINDS.iter().any(|k| k.name == n.as_str()))
    {
        bail!("no hostile kind named {bad:?} (see `zerosplit hostile --list`)");
    }
    let mut cfg = if args.full {
        SuiteConfig::full()
    } else {
        SuiteConfig::ci()
    };
    if args.zerosplit_only {
        cfg.receivers = vec![Receiver::Zerosplit];
    }
    let kinds: Vec<_> = KINDS
        .iter()
        .filter(|k| args.kinds.is_empty() || args.kinds.iter().any(|n| n == k.name))
        .copied()
        .collect();
    let rows = run_suite(&cfg, &kinds, |row| eprintln!("done: {}", row.kind.name))?;
    print!("{}", table(&rows));
    let failed = rows
        .iter()
        .filter(|r| r.verdicts().0.is_some_and(|v| !v.pass))
        .count();
    if failed > 0 {
        bail!("{failed} kinds failed on zerosplit");
    }
    Ok(())
}
