//! `[threads]` (how the datapath and the transport share CPU cores) and
//! `[metrics]` (the metrics endpoint and how often counters are logged).

use serde::{Deserialize, Serialize};

use super::units::{Core, Dur, Switch};
pub use crate::idle::PollMode;

/// How work is spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThreadMode {
    /// One loop runs every queue's datapath and the transport: small
    /// machines and tests.
    #[default]
    RunToCompletion,
    /// A pinned datapath thread per queue and a pinned transport thread,
    /// talking over bounded SPSC queues.
    Dedicated,
}

/// `[threads]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThreadsConfig {
    /// Run-to-completion or dedicated threads.
    pub mode: ThreadMode,
    /// Cores to pin to, one per entry of `interface.queues` in the same
    /// order: each queue's datapath thread (dedicated) or loop
    /// (run-to-completion). Run-to-completion may leave it empty (not
    /// pinned).
    pub datapath_cores: Vec<usize>,
    /// Core of the transport thread (dedicated mode), or `"any"`.
    pub transport_core: Core,
    /// Entries of each SPSC queue between datapath and transport threads.
    pub spsc_capacity: usize,
    /// How the loops wait for work: `spin`, `adaptive` or `sleep` (see
    /// [`crate::idle`]).
    pub poll: PollMode,
    /// Adaptive mode: how long a loop finds no work before it sleeps.
    pub idle_budget: Dur,
}

impl Default for ThreadsConfig {
    fn default() -> Self {
        ThreadsConfig {
            mode: ThreadMode::RunToCompletion,
            datapath_cores: Vec::new(),
            transport_core: Core::Any,
            spsc_capacity: 4096,
            poll: PollMode::Adaptive,
            idle_budget: Dur(std::time::Duration::from_micros(50)),
        }
    }
}

/// `[capture]`: packet capture ([`crate::capture`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CaptureConfig {
    /// The pcap file every frame the stack receives and sends is written
    /// to, or off.
    pub pcap: Switch<std::path::PathBuf>,
    /// Bytes kept of each frame.
    pub snaplen: u32,
    /// Replace an existing file at `pcap` (removed first: a symlink
    /// itself, never what it points to); otherwise an existing file is
    /// refused.
    pub overwrite: bool,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            pcap: Switch::Off,
            snaplen: 65535,
            overwrite: false,
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Where the metrics endpoint listens (`/metrics`, `/stats`), or off.
    pub listen: Switch<std::net::SocketAddr>,
    /// How often a summary of the counters is logged, or off.
    pub interval: Switch<Dur>,
    /// Connections the endpoint serves at once; more are refused (`503`,
    /// counted in `zerosplit_metrics_refused_total`).
    pub max_connections: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: Switch::Off,
            interval: Switch::Off,
            max_connections: crate::metrics::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// How much `zerosplit run` and `nc` log (to standard error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Nothing.
    Off,
    /// Failures only.
    Error,
    /// And drop bursts, refused listeners.
    Warn,
    /// And one line per connection event (open, close, reset, RTO).
    #[default]
    Info,
    /// And handshakes that never completed, deferred posts.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The name as `RUST_LOG` spells it.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Off => "off",
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// `[log]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// The level; `RUST_LOG`, when set, replaces it.
    pub level: LogLevel,
}
