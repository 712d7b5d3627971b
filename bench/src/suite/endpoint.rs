//! `zerosplit bench-peer` (hidden): one endpoint of a `zerosplit bench`
//! measurement, run as its own process inside its namespace so its CPU
//! time is its own. Roles: bulk sender and receiver, ping-pong client and
//! server, an idle listener (its CPU with no traffic); stacks: Linux kernel sockets, zerosplit with the header-only
//! `tcp`, or zerosplit with `smoltcp`. It prints `{"ready":true}` once it
//! listens and then one JSON result line ([`crate::suite::peer::PeerReport`]);
//! a failure is a result line with `error` set (and `unavailable` when this
//! build lacks what was asked for), and a non-zero exit.
//!
//! Payload never moves more than the stack itself moves it: the zerosplit
//! sender fills its registered send buffers once and posts them again and
//! again (zero-copy TX), the receiver re-posts its buffers without reading
//! them; the kernel ends write from and read into one user buffer (the
//! kernel's copies are the cost being compared). What every end shares is
//! in `common.rs`, the zerosplit ends in `zs.rs`, the kernel-socket ends in
//! `kernel.rs`, the many-flow ends in `flows.rs` and `kernel_flows.rs`.

use anyhow::{bail, Context, Result};

use crate::suite::peer::PeerReport;
use crate::suite::procfs;

mod common;
mod flows;
mod kernel;
mod kernel_flows;
mod stacks;
mod zs;

use common::ready;
pub use common::{latency_report, PeerArgs, Unavailable};
use flows::{check_flows, zs_flows_sharded};
use flows::{zs_recv_flows, zs_send_flows};
use kernel::{kernel_pingpong_client, kernel_pingpong_server, kernel_recv, kernel_send};
use kernel_flows::{kernel_recv_flows, kernel_send_flows};
pub use stacks::{daemon_config, DAEMON_MEMORY_PER_ATTACHMENT};
use stacks::{fill_counters, smol_stack, zs_stack, MetricsLoad};
use zerosplit::provider::Provider;
use zs::{zs_idle, zs_pingpong_client, zs_pingpong_server, zs_recv, zs_send};

/// Runs the peer and prints its result line. Returns the process exit
/// code: 0 on success, 1 on failure, 3 when unavailable.
pub fn main(args: &PeerArgs) -> i32 {
    let mut report = PeerReport {
        role: args.role.clone(),
        stack: args.stack.clone(),
        ..PeerReport::default()
    };
    let code = match run(args, &mut report) {
        Ok(()) => 0,
        Err(e) => {
            report.unavailable = e.downcast_ref::<Unavailable>().is_some();
            report.error = Some(format!("{e:#}"));
            if report.unavailable {
                3
            } else {
                1
            }
        }
    };
    println!(
        "{}",
        serde_json::to_string(&report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    );
    code
}

fn check(args: &PeerArgs) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be in (0, 600], got {}", args.seconds);
    }
    if !crate::suite::options::MTUS.contains(&args.mtu) {
        bail!(
            "--mtu must be between {} and {}, got {}",
            crate::suite::options::MTUS.start(),
            crate::suite::options::MTUS.end(),
            args.mtu
        );
    }
    if !(1..=1400).contains(&args.message) {
        bail!(
            "--message must be between 1 and 1400 bytes, got {}",
            args.message
        );
    }
    check_flows(args.flows)?;
    flows::check_queues(args)
}

fn run(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    check(args)?;
    name_main_thread(args)?;
    match args.stack.as_str() {
        "kernel" => {
            let before = procfs::net_counters().context("reading /proc/net counters")?;
            let many = args.flows > 1;
            match args.role.as_str() {
                "idle" => {
                    return Err(
                        Unavailable("the idle role measures zerosplit stacks".into()).into(),
                    )
                }
                "send" if many => kernel_send_flows(args, report)?,
                "recv" if many => kernel_recv_flows(args, report)?,
                "send" => kernel_send(args, report)?,
                "recv" => kernel_recv(args, report)?,
                "pingpong-client" => kernel_pingpong_client(args, report)?,
                _ => kernel_pingpong_server(args)?,
            }
            let after = procfs::net_counters().context("reading /proc/net counters")?;
            report.retransmits = procfs::kernel_retransmits(&before, &after);
            report.drops = procfs::kernel_drops(&before, &after);
            Ok(())
        }
        "smoltcp" if args.addr.is_ipv6() => Err(Unavailable(
            "the smoltcp transport carries IPv4 only (the tcp transport carries IPv6)".into(),
        )
        .into()),
        "smoltcp" => {
            let mut stack = smol_stack(args)?;
            let _load = MetricsLoad::start(args, &mut stack)?;
            zs_run(&mut stack, args, report)
        }
        _ if args.daemon.is_some() => zs_attached(args, report),
        _ if args.queues > 1 => zs_flows_sharded(args, report),
        _ => {
            let mut stack = zs_stack(args)?;
            let _load = MetricsLoad::start(args, &mut stack)?;
            let result = zs_run(&mut stack, args, report);
            report.copies = Some(stack.payload_copies());
            result
        }
    }
}

/// The `tcp` end attached to `--daemon` (the same roles as in-process,
/// over [`zerosplit::attach`]); the daemon's CPU counts with this
/// process's (`--daemon-pid`), its copies are the daemon's to report.
fn zs_attached(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let Some(socket) = args.daemon.as_deref() else {
        bail!("no --daemon socket");
    };
    if args.flows > 1 || args.queues > 1 || args.metrics || args.threads != "rtc" {
        return Err(Unavailable(
            "an attached end runs one flow, run-to-completion, without --metrics (the daemon's own settings)".into(),
        )
        .into());
    }
    if let Some(pid) = args.daemon_pid {
        common::DAEMON_PID
            .set(pid)
            .map_err(|_| anyhow::anyhow!("the daemon pid is set twice"))?;
    }
    let mut app = zerosplit::attach(socket)
        .with_context(|| format!("attaching to the daemon on {}", socket.display()))?;
    // The application's own waiting: the provider library's default
    // unless the bench was told (`zerosplit bench --poll` sets it with
    // the daemon's).
    if let Some(mode) = &args.app_poll {
        app.set_poll(zerosplit::idle::PollConfig {
            mode: mode.parse().unwrap_or_default(),
            ..zerosplit::idle::PollConfig::default()
        });
    }
    zs_run(&mut app, args, report)
}

/// Names the peer's main thread for what it runs (see
/// [`crate::suite::peer::thread_names`]).
fn name_main_thread(args: &PeerArgs) -> Result<()> {
    use crate::suite::peer::thread_names;
    let name = match (args.stack.as_str(), args.threads.as_str()) {
        ("kernel", _) => thread_names::KERNEL,
        (_, "dedicated") => thread_names::DATAPATH,
        _ => thread_names::LOOP,
    };
    procfs::name_this_thread(name).context("naming the main thread")
}

/// Runs `args.role` on a zerosplit stack and fills in its counters.
pub(super) fn zs_run<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
) -> Result<()> {
    if args.addr.is_ipv6() && stack.local_ip6().is_none() {
        bail!(
            "the stack on {} serves no IPv6 address (it takes the interface's first global one when it starts: was it there?)",
            args.iface
        );
    }
    let many = args.flows > 1;
    let result = match args.role.as_str() {
        "send" if many => zs_send_flows(stack, args, report),
        "recv" if many => zs_recv_flows(stack, args, report, &ready),
        "send" => zs_send(stack, args, report),
        "recv" => zs_recv(stack, args, report),
        "pingpong-client" => zs_pingpong_client(stack, args, report),
        "idle" => zs_idle(stack, args, report),
        _ => zs_pingpong_server(stack, args),
    };
    fill_counters(stack, report);
    result
}
