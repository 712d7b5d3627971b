//! The fronts: a [`Host`] driving one engine, with the constructors that
//! open it on an interface. [`Stack`] drives the header-only TCP
//! ([`TcpEngine`]), [`SmolStack`] smoltcp ([`SmolEngine`]). See
//! [`crate::host`] for what the host owns and [`crate::provider`] for the
//! API both implement.

use std::sync::Arc;

use datapath::group::QueueGroup;
use datapath::nic::{Nic, NicConfig, NicError};

use crate::engine::smol::{SmolConfig, SmolEngine, SmolError};
use crate::engine::tcp::TcpEngine;
use crate::host::{Host, HostConfig, HostError, Threads};

/// The run-to-completion (or dedicated) header-only TCP stack on one
/// interface queue.
pub type Stack = Host<TcpEngine>;

/// The smoltcp stack on one interface queue (run-to-completion only).
pub type SmolStack = Host<SmolEngine>;

impl Host<TcpEngine> {
    /// Starts a stack on `ifname` (in the calling thread's namespace):
    /// attaches the steering program, opens the queue's socket, learns the
    /// interface's address and MAC, and reserves the ephemeral ports.
    ///
    /// # Errors
    /// Bad configuration, no such interface, attach or socket failures.
    pub fn new(ifname: &str, config: HostConfig) -> Result<Stack, HostError> {
        Stack::build(ifname, config, |nic| Nic::open(ifname, nic))
    }

    /// Starts a stack on one queue (`config.nic.queue`) of a group whose
    /// other queues run stacks of their own, on other threads (see
    /// [`crate::shards`]). Flows stay on the queue that opened them;
    /// packets of theirs arriving elsewhere are handed over by the group.
    ///
    /// # Errors
    /// As [`Stack::new`].
    pub fn new_in(group: &Arc<QueueGroup>, config: HostConfig) -> Result<Stack, HostError> {
        let ifname = group.steering().ifname().to_owned();
        Stack::build(&ifname, config, |nic| Nic::open_in(group, nic))
    }

    fn build(
        ifname: &str,
        config: HostConfig,
        open: impl FnOnce(NicConfig) -> Result<Nic, NicError>,
    ) -> Result<Stack, HostError> {
        config
            .tcp
            .validate()
            .map_err(|e| HostError::Tcp(e.to_string()))?;
        Host::open(ifname, &config, open, |core| tcp_engine(&config, core))
    }

    /// A stack over the datapath's fake kernel (feature `testing`): the
    /// interface is "fake0" at `ip`/24 with MAC `mac`, every peer is on
    /// the link at `peer_mac`, and no kernel owns ports (none are
    /// reserved). `config.nic.queue` must be 0. The returned
    /// [`FakeKernel`](datapath::testing::FakeKernel) is the kernel's side
    /// of the stack's rings ([`Host::nic_mut`]).
    ///
    /// # Errors
    /// Bad configuration; the datapath could not be built.
    #[cfg(feature = "testing")]
    pub fn fake(
        mut config: HostConfig,
        ip: std::net::Ipv4Addr,
        mac: [u8; 6],
        peer_mac: [u8; 6],
    ) -> Result<(Stack, datapath::testing::FakeKernel), HostError> {
        config
            .tcp
            .validate()
            .map_err(|e| HostError::Tcp(e.to_string()))?;
        config.reserve_ports = false;
        let (nic, kernel) = Nic::fake(config.nic.clone())?;
        let iface = crate::host::Iface {
            name: "fake0".into(),
            ip,
            prefix: 24,
            ip6: None,
            mac,
        };
        let absent = crate::host::Kernel::Absent { peer_mac };
        let stack = Host::assemble(iface, nic, absent, &config, |core| {
            tcp_engine(&config, core)
        })?;
        Ok((stack, kernel))
    }
}

/// The header-only TCP engine of `config` over `core`.
fn tcp_engine(
    config: &HostConfig,
    core: &mut crate::host::Core<crate::engine::tcp::TcpConn>,
) -> Result<TcpEngine, HostError> {
    let mut tcp = config.tcp.clone();
    // A super-segment is queued whole or not at all: never more wire
    // segments than the TX ring and frames can ever hold.
    tcp.tso_segments = tcp.tso_segments.min(core.nic.max_tx_burst());
    TcpEngine::new(tcp, config.nic.mtu, config.threads, config.poll, core.epoch)
}

impl Host<SmolEngine> {
    /// Starts smoltcp on `ifname`: attaches the steering program, opens the
    /// queue's socket (every flow on the catch-all socket), learns the
    /// interface's address and MAC, and reserves the ephemeral ports.
    ///
    /// # Errors
    /// Dedicated threads, a bad buffer size, no such interface, attach or
    /// socket failures.
    pub fn new(ifname: &str, config: SmolConfig) -> Result<SmolStack, SmolError> {
        if config.stack.threads != Threads::RunToCompletion {
            return Err(SmolError::Threads);
        }
        if !(64 << 10..=1 << 30).contains(&config.socket_buffer) {
            return Err(SmolError::Buffer(config.socket_buffer));
        }
        let open = |mut nic: datapath::nic::NicConfig| {
            // smoltcp sees every frame of the queue: no per-flow sockets.
            nic.flow_sockets = false;
            Nic::open(ifname, nic)
        };
        let stack = config.stack.clone();
        Host::open(ifname, &stack, open, |core| SmolEngine::new(core, config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_engines_open_through_the_host_and_refuse_a_missing_interface_alike() {
        let tcp = Stack::new("no-such-if0", HostConfig::default()).unwrap_err();
        assert!(
            matches!(tcp, HostError::NoSuchInterface(ref n) if n == "no-such-if0"),
            "{tcp}"
        );
        let smol = SmolStack::new("no-such-if0", SmolConfig::default()).unwrap_err();
        assert!(
            matches!(smol, SmolError::Stack(HostError::NoSuchInterface(ref n)) if n == "no-such-if0"),
            "{smol}"
        );
        assert_eq!(tcp.to_string(), smol.to_string());
    }

    #[test]
    fn dedicated_threads_are_refused_before_touching_any_interface() {
        let config = SmolConfig {
            stack: HostConfig {
                threads: Threads::Dedicated {
                    datapath_core: None,
                    transport_core: None,
                    queue: 64,
                },
                ..HostConfig::default()
            },
            ..SmolConfig::default()
        };
        let e = SmolStack::new("no-such-if0", config).unwrap_err();
        assert!(matches!(e, SmolError::Threads), "{e}");
        assert!(e.to_string().contains("threads.mode"), "{e}");
        let tiny = SmolConfig {
            socket_buffer: 1000,
            ..SmolConfig::default()
        };
        assert!(matches!(
            SmolStack::new("no-such-if0", tiny).unwrap_err(),
            SmolError::Buffer(1000)
        ));
    }
}
