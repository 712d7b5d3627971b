//! The zerosplit stacks as the bench configures them (`tcp` or `smoltcp`
//! on the interface, sized for `--flows`), their counters into the report,
//! and the metrics load of `--metrics`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use zerosplit::engine::smol::{SmolConfig, SmolCongestion};
use zerosplit::host::{HostConfig, Threads};
use zerosplit::provider::Provider;
use zerosplit::stack::{SmolStack, Stack};

use super::common::{recv_area, PeerArgs, Unavailable};
use crate::suite::peer::PeerReport;

/// `--metrics`: the stack publishes its snapshots to an endpoint on
/// 127.0.0.1 (as `[metrics] listen` makes it), and a reader scrapes
/// /metrics every 100 ms (far more often than Prometheus would) until
/// dropped: what serving metrics costs, measured in the same rows.
pub(super) struct MetricsLoad {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    _server: zerosplit::metrics::MetricsServer,
}

impl MetricsLoad {
    pub(super) fn start<E: zerosplit::host::Engine>(
        args: &PeerArgs,
        stack: &mut zerosplit::host::Host<E>,
    ) -> Result<Option<MetricsLoad>> {
        if !args.metrics {
            return Ok(None);
        }
        let board = zerosplit::metrics::Board::new();
        let server = zerosplit::metrics::serve(
            "127.0.0.1:0".parse().expect("an address"),
            std::sync::Arc::clone(&board),
        )?;
        stack.set_metrics(Some(board));
        let url = format!("http://{}/metrics", server.addr());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let reader = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut r) = ureq::get(&url).call() {
                    let _ = r.body_mut().read_to_string();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Ok(Some(MetricsLoad {
            stop,
            reader: Some(reader),
            _server: server,
        }))
    }
}

impl Drop for MetricsLoad {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// A zerosplit end's retransmissions and drops, into `report`.
pub(super) fn fill_counters<P: Provider>(stack: &P, report: &mut PeerReport) {
    // smoltcp keeps no retransmission count.
    report.retransmits = stack.retransmissions().map_or(0, |(r, _)| r);
    report.drops = stack
        .drops()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect::<BTreeMap<_, _>>();
}

/// The smoltcp transport over the same datapath; it runs
/// run-to-completion only, so a dedicated row is reported unavailable.
pub(super) fn smol_stack(args: &PeerArgs) -> Result<SmolStack> {
    if args.threads == "dedicated" {
        return Err(Unavailable("transport smoltcp runs run-to-completion only".into()).into());
    }
    let stack = stack_config(args);
    // A window the receive ring absorbs: with smoltcp's 4 MiB default a
    // receiver that fell behind for a moment lost a burst to the full ring
    // and stalled on a 1 s RTO (no SACK), a quick run collapsing to 0.05×
    // its baseline (CI saw it; 1 in 4 local runs; 0 in 12 with this).
    let config = SmolConfig {
        socket_buffer: SmolConfig::ring_window(&stack.nic),
        stack,
        congestion: SmolCongestion::Cubic,
        ..SmolConfig::default()
    };
    SmolStack::new(&args.iface, config)
        .with_context(|| format!("starting zerosplit (smoltcp) on {}", args.iface))
}

pub(super) fn stack_config(args: &PeerArgs) -> HostConfig {
    let mut c = HostConfig::default();
    c.nic.mtu = args.mtu as usize;
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    if args.flows > 1 {
        // Room for every connection's buffers (they shrink with the count,
        // see `flows.rs`), table entries and handshakes for all of them.
        c.nic.xsk.umem.mr_bytes = c
            .nic
            .xsk
            .umem
            .mr_bytes
            .max(recv_area(args.flows) + (8 << 20));
        c.nic.max_flows = c.nic.max_flows.max(args.flows + 64);
        c.backlog = c.backlog.max(args.flows);
        c.max_half_open = c.max_half_open.max(args.flows);
        // A local port per connection, with room to spare for the
        // ephemeral search (the range is reserved from the kernel).
        let start = *c.ephemeral_ports.start();
        let span = (2 * args.flows).min(usize::from(u16::MAX - start)) as u16;
        c.ephemeral_ports = start..=(*c.ephemeral_ports.end()).max(start + span);
    }
    c.nic.xsk.multi_buffer = args.mtu as usize + 14 > c.nic.xsk.umem.frame_size as usize;
    c.tcp.mss = (args.mtu - 40) as u16;
    c.tcp.algorithm = transports::cc::Algorithm::Cubic;
    c.poll.mode = args.poll.parse().unwrap_or_default();
    if args.threads == "dedicated" {
        c.threads = Threads::Dedicated {
            datapath_core: None,
            transport_core: None,
            queue: 4096,
        };
    }
    c
}

/// Memory each attached end may register: the bulk buffers (`BUFS` ×
/// `BUF`) and the ping-pong slots, with room to spare.
pub const DAEMON_MEMORY_PER_ATTACHMENT: u64 = 24 << 20;

/// The configuration of the `zerosplit daemon` an attached end of
/// `zerosplit bench` attaches to: the stack [`stack_config`] gives an
/// in-process end on `iface` at `mtu` in `poll` mode (MTU, frames, MSS,
/// Cubic, idle policy), with its region area cut into two attachment
/// slots of [`DAEMON_MEMORY_PER_ATTACHMENT`] and its socket at `socket`.
///
/// # Errors
/// The interface name is not a valid one.
pub fn daemon_config(
    iface: &str,
    mtu: u32,
    poll: zerosplit::idle::PollMode,
    socket: &std::path::Path,
) -> Result<zerosplit::config::Config> {
    use zerosplit::config::{ByteSize, Config, Congestion};
    let mut c = Config::default();
    c.set_interface(iface)?;
    c.umem.mtu = mtu;
    c.umem.multi_buffer = mtu + 14 > c.umem.frame_size;
    c.transport.mss = (mtu - 40) as u16;
    c.transport.congestion = Congestion::Algorithm(transports::cc::Algorithm::Cubic);
    c.threads.poll = poll;
    c.listen.clear();
    c.daemon.socket = socket.to_path_buf();
    c.daemon.socket_mode = 0o600;
    c.daemon.max_attachments = 2;
    c.daemon.memory_per_attachment = ByteSize(DAEMON_MEMORY_PER_ATTACHMENT);
    c.validate()?;
    Ok(c)
}

/// The header-only `tcp` stack.
pub(super) fn zs_stack(args: &PeerArgs) -> Result<Stack> {
    Stack::new(&args.iface, stack_config(args))
        .with_context(|| format!("starting zerosplit on {}", args.iface))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: PeerArgs,
    }

    fn args(mtu: u32, poll: &str) -> PeerArgs {
        Cli::parse_from([
            "bench-peer",
            "--role",
            "send",
            "--stack",
            "tcp",
            "--iface",
            "zbx",
            "--addr",
            "198.18.0.1:5301",
            "--mtu",
            &mtu.to_string(),
            "--poll",
            poll,
        ])
        .args
    }

    /// The attached rows compare like with like: the daemon's stack is the
    /// in-process end's but for the region area (slots instead of one).
    #[test]
    fn the_daemon_runs_the_stack_an_in_process_end_runs() {
        for (mtu, poll) in [(1500, "adaptive"), (9000, "spin"), (65_535, "sleep")] {
            let a = args(mtu, poll);
            let c = daemon_config(
                "zbx",
                mtu,
                poll.parse().expect("poll"),
                "/tmp/d.sock".as_ref(),
            )
            .expect("config");
            let mut daemon = zerosplit::daemon::host_configs(&c)
                .expect("host config")
                .remove(0);
            let slots = daemon.nic.xsk.umem.mr_slots.take().expect("slots");
            assert_eq!(slots.count, 2);
            assert_eq!(slots.len as u64, DAEMON_MEMORY_PER_ATTACHMENT);
            let mut local = stack_config(&a);
            local.nic.xsk.umem.mr_bytes = daemon.nic.xsk.umem.mr_bytes;
            // The daemon's region table holds every attachment's regions.
            assert!(daemon.nic.max_regions >= local.nic.max_regions);
            local.nic.max_regions = daemon.nic.max_regions;
            // A connection takes its controller's MSS from `tcp.mss`
            // (transports' `Connection::new`), whatever `cc.mss` says.
            local.tcp.cc.mss = local.tcp.mss;
            assert_eq!(format!("{daemon:?}"), format!("{local:?}"), "MTU {mtu}");
            let text = c.to_toml_string().expect("toml");
            assert_eq!(
                zerosplit::config::Config::from_toml_str(&text).expect("parses back"),
                c
            );
        }
    }
}
