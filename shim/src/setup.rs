//! The shim's settings, from the environment `zerosplit exec` prepares.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

use zerosplit::config::{Config, ThreadMode, TransportKind};
use zerosplit::host::{HostConfig, Threads};
use zerosplit::netinfo;

use crate::family::{self, Listen, Target};
use crate::log::log_line;

/// The process id the shim runs in (`zerosplit exec` replaces itself with
/// the program, so the program keeps it); other processes that load the
/// library (children that exec) leave everything to the kernel.
pub const ENV_PID: &str = "ZEROSPLIT_EXEC_PID";
/// `1`: run in every process that loads the library, not only `ENV_PID`.
pub const ENV_FOLLOW: &str = "ZEROSPLIT_EXEC_FOLLOW";
/// The configuration file (optional).
pub const ENV_CONFIG: &str = "ZEROSPLIT_EXEC_CONFIG";
/// The interface.
pub const ENV_IFACE: &str = "ZEROSPLIT_EXEC_IFACE";
/// The receive queue.
pub const ENV_QUEUE: &str = "ZEROSPLIT_EXEC_QUEUE";
/// The pcap file (`--pcap`; `exec` resolves it with the config's).
pub const ENV_PCAP: &str = "ZEROSPLIT_EXEC_PCAP";
/// The capture's snap length.
pub const ENV_SNAPLEN: &str = "ZEROSPLIT_EXEC_SNAPLEN";
/// The metrics endpoint's address (`--metrics`; `exec` resolves it with
/// the config's `metrics.listen`).
pub const ENV_METRICS: &str = "ZEROSPLIT_EXEC_METRICS";
/// The daemon's socket: when set, the sockets live in the daemon (the
/// program attaches to it) instead of a stack of the program's own.
pub const ENV_DAEMON: &str = "ZEROSPLIT_EXEC_DAEMON";
/// `1`: a call the interface could serve that would be left to the
/// kernel fails with an errno instead (`exec --strict`; see
/// `crate::fallback`).
pub const ENV_STRICT: &str = "ZEROSPLIT_EXEC_STRICT";
/// The sockets a program passes to the one its `execve` starts (set by
/// the shim for the new program only; see `crate::exec`).
pub const ENV_INHERIT: &str = "ZEROSPLIT_EXEC_INHERIT";

/// Receive and send ring of each socket: `RING_BUFS` buffers of `RING_BUF`
/// bytes each way (2 MiB of registered memory per connection: the default
/// 256 MiB of `zerosplit exec` hold 128 connections).
pub(crate) const RING_BUFS: u64 = 8;
pub(crate) const RING_BUF: u64 = 128 << 10;

/// The interface the sockets run on.
#[derive(Debug, Clone)]
pub(crate) struct IfaceInfo {
    pub name: String,
    pub ip: Ipv4Addr,
    pub prefix: u8,
    /// Its IPv6 addresses (link-local included), to know what the kernel
    /// is left ([`crate::family`]).
    pub ip6: Vec<(Ipv6Addr, u8)>,
}

/// What the shim runs with.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub iface: IfaceInfo,
    pub queue: u32,
    pub stack: HostConfig,
    /// Posted sends one connection may have outstanding.
    pub max_sends: usize,
    /// Packet capture: file and snap length.
    pub capture: Option<(std::path::PathBuf, u32)>,
    /// Where to serve metrics, and how many connections at once
    /// (`metrics.max_connections`).
    pub metrics: Option<(std::net::SocketAddr, usize)>,
    /// The daemon to attach to (attached mode), if any.
    pub daemon: Option<std::path::PathBuf>,
    /// Calls the interface could serve fail instead of going to the
    /// kernel ([`ENV_STRICT`]).
    pub strict: bool,
}

impl Setup {
    /// The settings, or `None` when the shim is not meant to run in this
    /// process (no `ENV_PID`, or another process's) or they are unusable
    /// (logged once).
    pub(crate) fn from_env() -> Option<Setup> {
        let follow = std::env::var(ENV_FOLLOW).is_ok_and(|v| v == "1");
        let pid = std::env::var(ENV_PID).ok()?;
        // A program another one exec'd into, its sockets with it (an
        // inetd-style server's child), is the shim's too.
        let exec_of_ours = std::env::var(ENV_INHERIT)
            .is_ok_and(|m| m.starts_with(&format!("{},", std::process::id())));
        if !follow && !exec_of_ours && pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
        match Self::load() {
            Ok(s) => Some(s),
            Err(e) => {
                log_line(&format!("zerosplit is off in this process: {e}"));
                None
            }
        }
    }

    fn load() -> Result<Setup, String> {
        let iface = std::env::var(ENV_IFACE).map_err(|_| format!("{ENV_IFACE} is not set"))?;
        let mut config = match std::env::var(ENV_CONFIG) {
            Ok(path) if !path.is_empty() => {
                Config::load(&path).map_err(|e| format!("loading {path}: {e}"))?
            }
            _ => exec_defaults(),
        };
        config.set_interface(&iface).map_err(|e| e.to_string())?;
        if config.transport.kind == TransportKind::Smoltcp {
            return Err("transport.kind: the shim runs the header-only tcp transport".into());
        }
        let queue = match std::env::var(ENV_QUEUE) {
            Ok(q) => q
                .parse()
                .map_err(|_| format!("{ENV_QUEUE}={q} is not a queue id"))?,
            Err(_) => config.interface.queues.first().copied().unwrap_or(0),
        };
        let mut stack = config.stack_config(queue);
        // The shim's own thread polls; the transport runs inside it.
        stack.threads = Threads::RunToCompletion;
        if config.threads.mode != ThreadMode::RunToCompletion {
            log_line("threads.mode: the shim runs the transport in its polling thread");
        }
        let (ip, prefix) = netinfo::ipv4_address(&iface).map_err(|e| e.to_string())?;
        let ip6 = netinfo::ipv6_addresses(&iface).map_err(|e| e.to_string())?;
        let capture = match std::env::var_os(ENV_PCAP) {
            Some(path) => {
                let snaplen = std::env::var(ENV_SNAPLEN)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(config.capture.snaplen);
                Some((std::path::PathBuf::from(path), snaplen))
            }
            None => None,
        };
        let metrics = match std::env::var(ENV_METRICS) {
            Ok(a) => Some((
                a.parse()
                    .map_err(|_| format!("{ENV_METRICS}={a} is not an address and port"))?,
                config.metrics.max_connections,
            )),
            Err(_) => None,
        };
        Ok(Setup {
            metrics,
            daemon: std::env::var_os(ENV_DAEMON)
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from),
            iface: IfaceInfo {
                name: iface,
                ip,
                prefix,
                ip6,
            },
            strict: std::env::var(ENV_STRICT).is_ok_and(|v| v == "1"),
            queue,
            max_sends: stack.nic.max_send_segments.saturating_sub(1).max(1),
            capture,
            stack,
        })
    }

    /// What `listen` on a socket bound to `bound` becomes (`v6_only`: an
    /// IPv6-only socket); `served6`: the IPv6 address the stack serves.
    pub(crate) fn listen_target(
        &self,
        bound: SocketAddr,
        v6_only: bool,
        served6: impl FnOnce() -> Option<Ipv6Addr>,
    ) -> Target<Listen> {
        family::listen_target(bound, v6_only, self.iface.ip, &self.iface.ip6, served6)
    }

    /// What `connect` to `remote` on a socket of the IPv6 family (`v6`,
    /// `v6_only`) or the IPv4 one becomes: ours when the peer is not our
    /// own address, not loopback, and routed out of the interface (an IPv6
    /// one when the stack serves IPv6: `serves6`).
    pub(crate) fn connect_target(
        &self,
        remote: SocketAddr,
        v6: bool,
        v6_only: bool,
        serves6: impl FnOnce() -> bool,
    ) -> Target<SocketAddr> {
        let routes = |remote: SocketAddrV4| {
            let ip = *remote.ip();
            !ip.is_loopback()
                && !ip.is_unspecified()
                && !ip.is_multicast()
                && ip != self.iface.ip
                && netinfo::next_hop(&self.iface.name, self.iface.ip, self.iface.prefix, ip).is_ok()
        };
        let routes6 = |ip: Ipv6Addr| {
            !self.iface.ip6.is_empty()
                && !self.iface.ip6.iter().any(|(a, _)| *a == ip)
                && netinfo::ipv6_routes_via(&self.iface.name, ip).unwrap_or(false)
        };
        family::connect_target(remote, v6, v6_only, routes, routes6, serves6)
    }
}

/// The configuration `zerosplit exec` uses without `--config`: the
/// defaults with room for 128 connections' rings (`umem.mr_bytes` 256 MiB)
/// and twice the frames, a fill ring to match and a 8192-entry RX ring, so
/// a burst from many clients at once (redis-benchmark's 50 connections
/// pipelining 16 KiB values) finds frames instead of a full ring: with the
/// defaults 3.5 % of such a client's segments were dropped
/// (`xsk_rx_ring_full`) and retransmitted.
pub fn exec_defaults() -> Config {
    let mut c = Config::default();
    c.umem.mr_bytes = zerosplit::config::ByteSize(256 << 20);
    c.umem.frame_count = 16384;
    c.umem.tx_frames = 2048;
    c.umem.fill_ring = 16384;
    c.umem.rx_ring = 8192;
    c
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_exec_defaults_are_a_valid_configuration() {
        let c = super::exec_defaults();
        c.validate().expect("exec defaults validate");
        assert!(c.umem.mr_bytes.bytes() >= 128 * 2 * super::RING_BUFS * super::RING_BUF);
    }
}
