//! Configuration → the running stack's types: the conversion point the
//! `[transport]` section was written for.

use transports::tcp::{EcnEcho, Keepalive, TcpConfig};

use super::transport::EcnEchoName;
use super::Config;
use super::ThreadMode;
use crate::host::{HostConfig, Threads};
use crate::idle::PollConfig;

impl Config {
    /// The header-only TCP's configuration from `[transport]` (the
    /// congestion controller's from [`Config::cc_config`]).
    pub fn tcp_config(&self) -> TcpConfig {
        let t = &self.transport;
        let defaults = TcpConfig::default();
        TcpConfig {
            mss: t.mss,
            initial_rto: t.rto_initial.get(),
            min_rto: t.rto_min.get(),
            max_rto: t.rto_max.get(),
            max_retransmissions: t.max_retransmissions,
            syn_ack_retries: t.syn_ack_retries,
            max_persist_probes: t.max_persist_probes,
            user_timeout: t.user_timeout.get().map(|d| d.get()),
            delayed_ack: t
                .delayed_ack
                .get()
                .map_or(std::time::Duration::ZERO, |d| d.get()),
            quick_ack_segments: t.quick_ack_segments,
            window_scale: t.window_scale.get(),
            sack: t.sack,
            timestamps: t.timestamps,
            ecn: t.ecn,
            ecn_echo: match t.ecn_echo {
                EcnEchoName::Auto => EcnEcho::Auto,
                EcnEchoName::Classic => EcnEcho::Classic,
                EcnEchoName::PerPacket => EcnEcho::PerPacket,
            },
            tail_loss_probe: t.tail_loss_probe,
            keepalive: t.keepalive.on().map(|k| Keepalive {
                idle: k.idle.get(),
                interval: k.interval.get(),
                probes: k.probes,
            }),
            time_wait: t.time_wait.get(),
            algorithm: self.algorithm().unwrap_or(defaults.algorithm),
            cc: self.cc_config(),
            pacing: t.pacing,
            pacing_gain: t.pacing_gain,
            challenge_ack_limit: t.challenge_ack_limit,
            tso_segments: t.tso_segments,
        }
    }

    /// The core the loop of queue `queue` pins itself to in
    /// run-to-completion mode (`threads.datapath_cores` at the queue's
    /// position in `interface.queues`); `None` when not pinned, and in
    /// dedicated mode, where [`crate::stack::Stack`] pins its threads.
    pub fn loop_core(&self, queue: u32) -> Option<usize> {
        if self.threads.mode != ThreadMode::RunToCompletion {
            return None;
        }
        let position = self.interface.queues.iter().position(|&q| q == queue)?;
        self.threads.datapath_cores.get(position).copied()
    }

    /// When the loops sleep (`threads.poll`, `threads.idle_budget`).
    pub fn poll_config(&self) -> PollConfig {
        PollConfig {
            mode: self.threads.poll,
            idle_budget: self.threads.idle_budget.get(),
            max_sleep: None,
        }
    }

    /// Everything [`crate::stack::Stack::new`] needs for queue `queue`. In
    /// dedicated mode the datapath thread is pinned to the entry of
    /// `threads.datapath_cores` at the queue's position in
    /// `interface.queues`.
    pub fn stack_config(&self, queue: u32) -> HostConfig {
        let position = self
            .interface
            .queues
            .iter()
            .position(|&q| q == queue)
            .unwrap_or(0);
        HostConfig {
            nic: self.nic_config(queue),
            tcp: self.tcp_config(),
            ephemeral_ports: self.ports.ephemeral_range.first..=self.ports.ephemeral_range.last,
            backlog: self.flows.backlog,
            max_half_open: self.flows.max_half_open,
            threads: match self.threads.mode {
                ThreadMode::RunToCompletion => Threads::RunToCompletion,
                ThreadMode::Dedicated => Threads::Dedicated {
                    datapath_core: self.threads.datapath_cores.get(position).copied(),
                    transport_core: self.threads.transport_core.id(),
                    queue: self.threads.spsc_capacity,
                },
            },
            poll: self.poll_config(),
            ipv6: self.interface.ipv6,
            ..HostConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_gives_a_valid_tcp_config_with_the_configured_values() {
        let c = Config::default();
        let tcp = c.tcp_config();
        tcp.validate()
            .expect("default transport section is a valid TCP config");
        assert_eq!(tcp.mss, c.transport.mss);
        assert_eq!(tcp.min_rto, c.transport.rto_min.get());
        assert_eq!(Some(tcp.algorithm), c.algorithm());
        let s = c.stack_config(0);
        assert_eq!(
            s.ephemeral_ports,
            c.ports.ephemeral_range.first..=c.ports.ephemeral_range.last
        );
        assert_eq!(s.nic.mtu, c.nic_config(0).mtu);
    }
}
