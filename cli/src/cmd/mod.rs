//! One module per command of the `zerosplit` binary: each holds its clap
//! options (`Args`) and one `run`.

pub mod bench;
pub mod compare;
pub mod demo;
pub mod exec;
pub mod hostile;
pub mod impair;
pub mod nc;
pub mod run;
pub mod rx_rate;

use anyhow::{bail, Context, Result};

/// The commands that build namespaces or attach XDP programs need root.
pub fn require_root() -> Result<()> {
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
