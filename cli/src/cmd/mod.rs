//! One module per command of the `zerosplit` binary: each holds its clap
//! options (`Args`) and one `run`.

pub mod bench;
pub mod cc_lab;
pub mod compare;
pub mod daemon;
pub mod demo;
pub mod exec;
pub mod hostile;
pub mod impair;
pub mod nc;
pub mod run;
pub mod rx_rate;
pub mod stats;

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
    /// Replace an existing capture file (its name is removed first: a
    /// symlink itself, never what it points to); without it an existing
    /// file is refused [default: the config file's capture.overwrite].
    #[arg(long)]
    pub pcap_overwrite: bool,
}

/// Where and how to capture: the options over the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureTarget {
    /// The pcap file.
    pub path: std::path::PathBuf,
    /// Bytes kept of each frame.
    pub snaplen: u32,
    /// Replace what is at `path`.
    pub overwrite: bool,
}

impl CaptureArgs {
    /// The capture file, snap length and whether to replace the file:
    /// the options over `file`'s `[capture]`; `None` when capture is off.
    pub fn resolve(&self, file: Option<&CaptureConfig>) -> Option<CaptureTarget> {
        let default = CaptureConfig::default();
        let file = file.unwrap_or(&default);
        let path = self.pcap.clone().or_else(|| file.pcap.on().cloned())?;
        Some(CaptureTarget {
            path,
            snaplen: self.snaplen.unwrap_or(file.snaplen),
            overwrite: self.pcap_overwrite || file.overwrite,
        })
    }

    /// Opens the capture file, if capture is on.
    ///
    /// # Errors
    /// Snap length out of range, the file exists (without overwrite), or
    /// it cannot be created.
    pub fn open(&self, file: Option<&CaptureConfig>) -> Result<Option<PcapTap>> {
        self.resolve(file)
            .map(|t| {
                if t.overwrite {
                    PcapTap::replace(&t.path, t.snaplen)
                } else {
                    PcapTap::create(&t.path, t.snaplen)
                }
                .context("--pcap")
            })
            .transpose()
    }
}

/// Sends log lines (the library's `log` records, through
/// `tracing-subscriber`) to standard error, at `level` unless `RUST_LOG`
/// says otherwise. Called once, by the command, as soon as it knows its
/// level; a second call changes nothing.
pub fn init_logging(level: zerosplit::config::LogLevel) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level.name()));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// `--metrics ADDRESS`, shared by run, nc and exec.
#[derive(Debug, Clone, clap::Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics on http://ADDRESS/metrics and the figures
    /// `zerosplit stats` reads on /stats, e.g. 127.0.0.1:9464, or "off"
    /// [default: the config file's metrics.listen, or off].
    #[arg(long, value_name = "ADDRESS")]
    pub metrics: Option<String>,
}

/// A running metrics endpoint and the board its queues publish to.
#[derive(Debug)]
pub struct Metrics {
    board: std::sync::Arc<zerosplit::metrics::Board>,
    /// Serves until dropped.
    _server: zerosplit::metrics::MetricsServer,
}

impl Metrics {
    /// The board the queues publish to.
    pub fn board(&self) -> std::sync::Arc<zerosplit::metrics::Board> {
        std::sync::Arc::clone(&self.board)
    }
}

impl MetricsArgs {
    /// The address the option or `file` asks for (the option wins);
    /// `None` when off.
    ///
    /// # Errors
    /// A malformed address.
    pub fn resolve(
        &self,
        file: &zerosplit::config::MetricsConfig,
    ) -> Result<Option<std::net::SocketAddr>> {
        Ok(match self.metrics.as_deref() {
            Some("off") => None,
            Some(a) => Some(a.parse::<std::net::SocketAddr>().with_context(|| {
                format!("--metrics {a:?}: give an address and port such as 127.0.0.1:9464, or off")
            })?),
            None => file.listen.get(),
        })
    }

    /// Starts the endpoint the option or `file` asks for (the option
    /// wins), and says where it listens; `None` when off.
    ///
    /// # Errors
    /// A malformed address, or it cannot be bound.
    pub fn start(&self, file: &zerosplit::config::MetricsConfig) -> Result<Option<Metrics>> {
        let Some(addr) = self.resolve(file)? else {
            return Ok(None);
        };
        let board = zerosplit::metrics::Board::new();
        let server = zerosplit::metrics::serve_with(
            addr,
            std::sync::Arc::clone(&board),
            file.max_connections,
        )?;
        if let Some(w) = server.exposure() {
            eprintln!("zerosplit: {w}");
        }
        eprintln!(
            "zerosplit: metrics on http://{}/metrics (stats: /stats)",
            server.addr()
        );
        Ok(Some(Metrics {
            board,
            _server: server,
        }))
    }
}

/// The capabilities a stack needs on an existing interface: load and
/// attach the XDP program and create its maps (`CAP_BPF`, `CAP_NET_ADMIN`,
/// which also writes the namespace's reserved ports; `CAP_PERFMON`, without
/// which the verifier refuses the program's packet-pointer arithmetic),
/// open AF_XDP sockets (`CAP_NET_RAW`) and lock the UMEM (`CAP_IPC_LOCK`).
/// As (bit, name).
const STACK_CAPS: [(u32, &str); 5] = [
    (12, "CAP_NET_ADMIN"),
    (13, "CAP_NET_RAW"),
    (14, "CAP_IPC_LOCK"),
    (38, "CAP_PERFMON"),
    (39, "CAP_BPF"),
];

/// run, nc and exec need the capabilities of [`STACK_CAPS`], not root
/// itself: a service runs as its own user with just those (the systemd
/// unit in `deploy/`).
pub fn require_stack_caps() -> Result<()> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .context("no CapEff line in /proc/self/status")?;
    let missing: Vec<&str> = STACK_CAPS
        .iter()
        .filter(|(bit, _)| effective & (1 << bit) == 0)
        .map(|(_, name)| *name)
        .collect();
    if !missing.is_empty() {
        bail!(
            "zerosplit attaches an XDP program and opens AF_XDP sockets: run it as root, or grant it {} (missing: {}; see deploy/zerosplit.service)",
            STACK_CAPS.map(|(_, n)| n).join(", "),
            missing.join(", ")
        );
    }
    Ok(())
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
