//! The zerosplit configuration: one TOML file, read into typed sections,
//! checked as a whole, and mapped onto the datapath's and the transports'
//! own configuration types.
//!
//! ```toml
//! [interface]
//! name = "veth0"
//! queues = [0]
//!
//! [umem]
//! mr_bytes = "64MiB"
//!
//! [[listen]]
//! port = 7
//! service = "echo"
//! ```
//!
//! Every key has a default ([`Config::default`]), so a file names only what
//! it changes; `config/reference.toml` lists and explains every key, and
//! `config/default.toml` is the smallest useful file. Unknown keys are
//! errors (`deny_unknown_fields` on every section), so a typo never goes
//! unnoticed.
//!
//! Loading has three steps, each with errors that name the dotted key:
//! TOML syntax ([`LoadError::Syntax`], with line and column), types and
//! spellings of values ([`LoadError::Key`]: unknown key, wrong type, bad
//! duration or size string), and rules across values
//! ([`Config::validate`], [`InvalidConfig`]: ranges and combinations that
//! cannot work).
//!
//! The interface name is the one value a command line usually overrides:
//! set [`InterfaceConfig::name`] (or call [`Config::set_interface`]) after
//! loading, then validate again.

mod daemon;
mod datapath;
mod error;
mod locate;
mod service;
mod threads;
mod to_smol;
mod to_stack;
mod transport;
mod units;
mod validate;

use std::path::Path;

use ::datapath::config::UmemConfig as DpUmemConfig;
use ::datapath::config::{BindMode, BusyPoll, XskConfig};
use ::datapath::nic::{NicConfig, TxStrategy};
use ::datapath::steer::XdpMode;
use serde::{Deserialize, Serialize};
use transports::cc::{Algorithm, CcConfig};

pub use self::daemon::{DaemonConfig, DEFAULT_SOCKET};
pub use self::datapath::{
    BindModeName, BusyPollConfig, FlowsConfig, InterfaceConfig, TxStrategyName, UmemConfig,
    XdpModeName,
};
pub use self::error::{InvalidConfig, LoadError, Location, Problem};
pub use self::service::{ListenConfig, PortsConfig, Service};
pub use self::threads::{
    CaptureConfig, LogConfig, LogLevel, MetricsConfig, PollMode, ThreadMode, ThreadsConfig,
};
pub use self::transport::{
    Congestion, EcnEchoName, KeepaliveConfig, TransportConfig, TransportKind,
};
pub use self::units::{ByteSize, Core, Dur, PortRange, Switch};

/// A whole zerosplit configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[interface]`.
    pub interface: InterfaceConfig,
    /// `[umem]`.
    pub umem: UmemConfig,
    /// `[flows]`.
    pub flows: FlowsConfig,
    /// `[[listen]]` entries.
    pub listen: Vec<ListenConfig>,
    /// `[ports]`.
    pub ports: PortsConfig,
    /// `[transport]`.
    pub transport: TransportConfig,
    /// `[threads]`.
    pub threads: ThreadsConfig,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[capture]`.
    pub capture: CaptureConfig,
    /// `[log]`.
    pub log: LogConfig,
    /// `[daemon]`.
    pub daemon: DaemonConfig,
}

impl Default for Config {
    /// Values that work on a veth pair: native XDP, automatic bind mode
    /// (falls back to copy on veth), MTU 1500, one echo listener on port 7,
    /// header-only TCP with NewReno, everything in one loop.
    fn default() -> Self {
        Config {
            interface: InterfaceConfig::default(),
            umem: UmemConfig::default(),
            flows: FlowsConfig::default(),
            listen: vec![ListenConfig::echo()],
            ports: PortsConfig::default(),
            transport: TransportConfig::default(),
            threads: ThreadsConfig::default(),
            metrics: MetricsConfig::default(),
            capture: CaptureConfig::default(),
            log: LogConfig::default(),
            daemon: DaemonConfig::default(),
        }
    }
}

/// Name used in errors for text that did not come from a file.
const STRING_ORIGIN: &str = "<string>";

impl Config {
    /// Reads, parses and validates the file at `path`.
    ///
    /// # Errors
    /// The file cannot be read, is not TOML, has an unknown key or a bad
    /// value, or breaks a rule of [`Config::validate`]. Every error but the
    /// first two names the dotted key.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, LoadError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_in(&text, &path.display().to_string())
    }

    /// Parses and validates configuration text.
    ///
    /// # Errors
    /// As [`Config::load`], without the read error.
    pub fn from_toml_str(text: &str) -> Result<Config, LoadError> {
        Self::from_toml_in(text, STRING_ORIGIN)
    }

    /// Parses configuration text without validating it (for tools that
    /// report every problem themselves, or edit a config before checking).
    ///
    /// # Errors
    /// Syntax errors, unknown keys and badly typed or spelled values.
    pub fn parse_toml_str(text: &str) -> Result<Config, LoadError> {
        parse(text, STRING_ORIGIN)
    }

    fn from_toml_in(text: &str, origin: &str) -> Result<Config, LoadError> {
        let config = parse(text, origin)?;
        config.validate().map_err(|mut source| {
            for p in &mut source.problems {
                let offset = locate::value_offset(text, &p.key);
                p.line_column =
                    offset.and_then(|o| Location::at(origin, text, Some(o)).line_column);
            }
            LoadError::Invalid {
                origin: origin.to_string(),
                source,
            }
        })?;
        Ok(config)
    }

    /// Checks ranges and combinations that cannot work; see
    /// `config/reference.toml` for each key's constraints.
    ///
    /// # Errors
    /// Every problem found, each with its dotted key.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let problems = validate::check(self);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InvalidConfig { problems })
        }
    }

    /// Replaces the interface name (the CLI's override) and validates the
    /// result.
    ///
    /// # Errors
    /// The new name (or anything else) breaks a rule.
    pub fn set_interface(&mut self, name: &str) -> Result<(), InvalidConfig> {
        self.interface.name = name.to_string();
        self.validate()
    }

    /// The configuration as TOML text (every key, defaults included).
    ///
    /// # Errors
    /// Only if a value cannot be written as TOML, which the types here rule
    /// out; the error is the serializer's.
    pub fn to_toml_string(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }

    /// The datapath configuration for one receive queue (normally one of
    /// `interface.queues`). Call on a validated config: sizes that do not fit
    /// the target's `usize` saturate.
    pub fn nic_config(&self, queue: u32) -> NicConfig {
        let u = &self.umem;
        let i = &self.interface;
        let f = &self.flows;
        NicConfig {
            xsk: XskConfig {
                umem: DpUmemConfig {
                    frame_size: u.frame_size,
                    frame_count: u.frame_count,
                    mr_bytes: usize::try_from(u.mr_bytes.bytes()).unwrap_or(usize::MAX),
                    hugepages: u.hugepages,
                    mr_slots: None,
                },
                tx_frames: u.tx_frames,
                rx_ring: u.rx_ring,
                tx_ring: u.tx_ring,
                fill_ring: u.fill_ring,
                comp_ring: u.comp_ring,
                flow_rx_ring: u.flow_rx_ring,
                bind: match i.bind_mode {
                    BindModeName::Copy => BindMode::Copy,
                    BindModeName::ZeroCopy => BindMode::ZeroCopy,
                    BindModeName::Auto => BindMode::Auto,
                },
                need_wakeup: i.need_wakeup,
                multi_buffer: u.multi_buffer,
                busy_poll: i.busy_poll.on().map(|b| BusyPoll {
                    usecs: b.usecs,
                    budget: b.budget,
                }),
                tx_budget: i.tx_budget.get(),
            },
            xdp_mode: match i.xdp_mode {
                XdpModeName::Native => XdpMode::Native,
                XdpModeName::Generic => XdpMode::Generic,
            },
            queue,
            max_flows: f.max_flows,
            max_regions: f.max_regions,
            max_recv_segments: f.max_recv_segments,
            max_send_segments: f.max_send_segments,
            max_placed_ranges: f.max_placed_ranges,
            flow_sockets: f.per_flow_sockets,
            tx_strategy: match u.tx_strategy {
                TxStrategyName::Auto => None,
                TxStrategyName::Copy => Some(TxStrategy::Copy),
                TxStrategyName::Chain => Some(TxStrategy::Chain),
            },
            mtu: u.mtu as usize,
            flow_rx_budget: f.flow_rx_budget,
            rx_coalesce_bytes: f.rx_coalesce_bytes,
            max_flow_sockets: f.max_flow_sockets,
        }
    }

    /// The congestion controller's parameters.
    ///
    /// CONVERSION POINT: a `to_tcp_config` for the header-only TCP's
    /// `TcpConfig` belongs next to this once that type is merged; it takes
    /// this and the other [`TransportConfig`] fields one to one.
    pub fn cc_config(&self) -> CcConfig {
        let t = &self.transport;
        CcConfig {
            mss: t.mss,
            initial_window_segments: t.initial_window_segments,
            minimum_window_segments: t.minimum_window_segments,
            params: t.cc_params(),
        }
    }

    /// The congestion control algorithm, or `None` for `"none"`.
    pub fn algorithm(&self) -> Option<Algorithm> {
        self.transport.congestion.algorithm()
    }
}

/// TOML text → [`Config`], with errors that name the key and the place.
fn parse(text: &str, origin: &str) -> Result<Config, LoadError> {
    let de = toml::de::Deserializer::parse(text).map_err(|e| LoadError::Syntax {
        at: Location::at(origin, text, e.span().map(|s| s.start)),
        message: e.message().trim().to_string(),
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = key_of(e.path(), e.inner().message());
        let inner = e.into_inner();
        LoadError::Key {
            at: Location::at(origin, text, inner.span().map(|s| s.start)),
            key,
            message: inner.message().trim().to_string(),
        }
    })
}

/// The dotted key an error is about. serde reports a missing field at the
/// table that lacks it; the field's name is in the message, so it is added
/// to the path.
fn key_of(path: &serde_path_to_error::Path, message: &str) -> String {
    let mut key = path.to_string();
    if key == "." {
        key.clear();
    }
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(field);
    }
    key
}
