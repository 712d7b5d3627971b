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
use zerosplit::capture::PcapTap;
use zerosplit::config::CaptureConfig;

/// `--pcap FILE` and `--snaplen N`, shared by nc, run and exec.
#[derive(Debug, Clone, clap::Args)]
pub struct CaptureArgs {
    /// Write every frame the stack receives and sends to this pcap file
    /// (`tcpdump -r FILE`) [default: the config file's capture.pcap, or off].
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Bytes kept of each captured frame, 64..=262144 [default: the config
    /// file's capture.snaplen, or 65535].
    #[arg(long, value_name = "BYTES")]
    pub snaplen: Option<u32>,
}

impl CaptureArgs {
    /// The capture file and snap length: the options over `file`'s
    /// `[capture]`; `None` when capture is off.
    pub fn resolve(&self, file: Option<&CaptureConfig>) -> Option<(std::path::PathBuf, u32)> {
        let default = CaptureConfig::default();
        let file = file.unwrap_or(&default);
        let path = self.pcap.clone().or_else(|| file.pcap.on().cloned())?;
        Some((path, self.snaplen.unwrap_or(file.snaplen)))
    }

    /// Opens the capture file, if capture is on.
    ///
    /// # Errors
    /// Snap length out of range, or the file cannot be created.
    pub fn open(&self, file: Option<&CaptureConfig>) -> Result<Option<PcapTap>> {
        self.resolve(file)
            .map(|(path, snaplen)| PcapTap::create(&path, snaplen).context("--pcap"))
            .transpose()
    }
}

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
