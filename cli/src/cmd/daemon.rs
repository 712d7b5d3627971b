//! `zerosplit daemon`: the stack as a host service that many applications
//! attach to (`zerosplit::attach`, `--daemon PATH` on the front-ends),
//! until SIGINT or SIGTERM.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Options of `zerosplit daemon`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (see config/reference.toml; `[daemon]` holds
    /// the socket and the per-application limits).
    #[arg(long)]
    config: std::path::PathBuf,
    /// Interface, overriding `interface.name` in the file.
    #[arg(long)]
    iface: Option<String>,
    /// Socket path, overriding `daemon.socket` in the file.
    #[arg(long)]
    socket: Option<std::path::PathBuf>,
    /// On SIGINT/SIGTERM, stop taking new applications and let open
    /// connections finish for at most this many seconds (0: stop at once).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    drain: f64,
    /// At exit, write the stack's payload copies (JSON,
    /// `zerosplit::host::PayloadCopies`) to this file: what `zerosplit
    /// bench` counts per byte of an attached application.
    #[arg(long, value_name = "FILE")]
    report: Option<std::path::PathBuf>,
    #[command(flatten)]
    capture: super::CaptureArgs,
    #[command(flatten)]
    metrics: super::MetricsArgs,
}

/// The group id of `name` from `/etc/group`.
fn group_id(name: &str) -> Result<u32> {
    let groups = std::fs::read_to_string("/etc/group").context("reading /etc/group")?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(n, _)| *n == name)
        .and_then(|(_, gid)| gid.parse().ok())
        .with_context(|| format!("daemon.socket_group: no group {name:?} in /etc/group"))
}

/// Runs `zerosplit daemon` until SIGINT/SIGTERM.
///
/// # Errors
/// Bad configuration, missing capabilities, or the stack or socket failed.
pub fn run(args: Args) -> Result<()> {
    use zerosplit::config::Config;
    super::require_stack_caps()?;
    if !(0.0..=3600.0).contains(&args.drain) {
        bail!(
            "--drain must be between 0 and 3600 seconds, got {}",
            args.drain
        );
    }
    let path = args.config.as_path();
    let mut config = Config::load(path).with_context(|| format!("loading {}", path.display()))?;
    if let Some(name) = args.iface.as_deref() {
        config.set_interface(name).context("--iface")?;
    }
    if let Some(socket) = &args.socket {
        config.daemon.socket = socket.clone();
        config.validate().context("--socket")?;
    }
    super::init_logging(config.log.level);
    let name = config.interface.name.clone();
    let hosts = zerosplit::daemon::host_configs(&config)?;
    let gid = config
        .daemon
        .socket_group
        .as_deref()
        .map(group_id)
        .transpose()?;
    let socket = config.daemon.socket.clone();
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let capture = args.capture.open(Some(&config.capture))?;
    let metrics = args.metrics.start(&config.metrics)?;
    let queues = zerosplit::daemon::Queues::open(&name, hosts)
        .with_context(|| format!("starting zerosplit on {name}"))?;
    queues.for_each_stack(|stack| {
        stack.set_capture(capture.as_ref().map(zerosplit::capture::PcapTap::tap));
    });
    let listener = zerosplit::ipc::sock::listen(&socket, config.daemon.socket_mode, gid).map_err(
        |source| zerosplit::daemon::DaemonError::Socket {
            path: socket.clone(),
            source,
        },
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing the signal handler")?;
    }
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .context("installing the SIGHUP handler")?;
    // This thread serves the first queue (in dedicated mode opening each
    // queue pinned it to that queue's core); `serve` pins the others.
    let cores = config.threads.datapath_cores.clone();
    if let Some(&id) = cores.first() {
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            eprintln!("zerosplit daemon: could not pin the first queue's thread to core {id}");
        }
    }
    let poll = config.poll_config();
    let mut daemon = zerosplit::daemon::Daemon::new(queues, config.daemon.clone(), listener, poll);
    daemon.set_metrics(metrics.as_ref().map(super::Metrics::board));
    eprintln!(
        "zerosplit daemon: serving {name} ({}{}) queues {:?} ({:?}) on {}; {} applications of {} each",
        daemon.queues().local_ip(),
        daemon
            .queues()
            .local_ip6()
            .map_or(String::new(), |ip| format!(", {ip}")),
        config.interface.queues,
        config.threads.mode,
        socket.display(),
        config.daemon.max_attachments,
        config.daemon.memory_per_attachment,
    );
    daemon.serve(&cores, |d| {
        if hup.swap(false, Ordering::Relaxed) {
            reload(path, d);
        }
        !stop.load(Ordering::Relaxed)
    });
    let drain = Duration::from_secs_f64(args.drain);
    let until = Instant::now() + drain;
    daemon.stop_attaching();
    daemon.serve(&cores, |d| d.connections() > 0 && Instant::now() < until);
    let c = daemon.counters();
    if let Some(file) = &args.report {
        let copies = daemon.queues().payload_copies();
        std::fs::write(file, serde_json::to_string(&copies)?)
            .with_context(|| format!("writing --report {}", file.display()))?;
    }
    drop(daemon);
    std::fs::remove_file(&socket).ok();
    eprintln!(
        "zerosplit daemon: stopped; {} applications attached ({} lost), {} connections reset; XDP program detached",
        c.attachments_opened, c.attachments_lost, c.conns_reset
    );
    Ok(())
}

/// On SIGHUP: re-reads the file; the per-application limits apply to
/// applications that attach from now on, the rest needs a restart.
fn reload(path: &std::path::Path, daemon: &mut zerosplit::daemon::Daemon) {
    match zerosplit::config::Config::load(path) {
        Ok(c) => {
            log::info!(
                "SIGHUP: daemon.max_connections {} and daemon.max_posted {} apply to new applications (other settings need a restart)",
                c.daemon.max_connections, c.daemon.max_posted
            );
            daemon.set_limits(c.daemon);
        }
        Err(e) => log::error!("SIGHUP: {} not reloaded: {e:#}", path.display()),
    }
}
