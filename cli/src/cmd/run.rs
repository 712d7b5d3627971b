//! `zerosplit run`: the stack as a service (echo, discard, sink) until
//! SIGINT or SIGTERM.

use anyhow::{bail, Context, Result};

/// Options of `zerosplit run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (see config/reference.toml).
    #[arg(long)]
    config: std::path::PathBuf,
    /// Interface, overriding `interface.name` in the file.
    #[arg(long)]
    iface: Option<String>,
    #[command(flatten)]
    capture: super::CaptureArgs,
    /// On SIGINT/SIGTERM, stop accepting and let open connections finish
    /// for at most this many seconds before resetting them (0: stop at
    /// once).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    drain: f64,
    #[command(flatten)]
    metrics: super::MetricsArgs,
    /// Serve the listeners as an application attached to the `zerosplit
    /// daemon` on this socket instead of opening the interface here (the
    /// file's `[[listen]]`, `[log]` and `[metrics] interval` apply; the
    /// daemon's configuration decides the rest).
    #[arg(long, value_name = "SOCKET", conflicts_with_all = ["iface", "pcap"])]
    daemon: Option<std::path::PathBuf>,
}

/// Runs `zerosplit run` until SIGINT/SIGTERM.
///
/// # Errors
/// Bad configuration, not root, or the stack failed.
pub fn run(args: Args) -> Result<()> {
    let (path, iface) = (args.config.as_path(), args.iface.as_deref());
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use zerosplit::config::{Config, TransportKind};
    use zerosplit::provider::Provider;
    use zerosplit::service::{serve_draining, Listeners, LogWatch, ServiceReport};

    if args.daemon.is_none() {
        super::require_stack_caps()?;
    }
    if !(0.0..=3600.0).contains(&args.drain) {
        bail!(
            "--drain must be between 0 and 3600 seconds, got {}",
            args.drain
        );
    }
    let drain = std::time::Duration::from_secs_f64(args.drain);
    let mut config = Config::load(path).with_context(|| format!("loading {}", path.display()))?;
    if let Some(name) = iface {
        config.set_interface(name).context("--iface")?;
    }
    super::init_logging(config.log.level);
    let name = config.interface.name.clone();
    let capture = args.capture.open(Some(&config.capture))?;
    let metrics = args.metrics.start(&config.metrics)?;
    let board = || metrics.as_ref().map(super::Metrics::board);
    let tap = || capture.as_ref().map(zerosplit::capture::PcapTap::tap);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing the signal handler")?;
    }
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .context("installing the SIGHUP handler")?;
    let listeners = Listeners::new(config.listen.clone());
    let summary = config.metrics.interval.get().map(|d| d.get());
    if let Some(socket) = &args.daemon {
        let mut app = zerosplit::attach(socket)
            .with_context(|| format!("attaching to the daemon at {}", socket.display()))?;
        for l in &config.listen {
            eprintln!(
                "zerosplit run: {:?} on {}:{} (attached to {})",
                l.service,
                app.local_ip(),
                l.port,
                socket.display()
            );
        }
        let r = std::thread::scope(|s| {
            s.spawn(|| reload_on_hup(path, &hup, &stop, &listeners));
            let r = serve_draining(
                &mut app,
                &listeners,
                &stop,
                drain,
                &mut LogWatch::new(summary),
            );
            stop.store(true, Ordering::Relaxed);
            r
        })?;
        eprintln!(
            "zerosplit run: stopped; {} connections, {} bytes in, {} bytes echoed (attached)",
            r.connections, r.bytes_in, r.bytes_echoed
        );
        return Ok(());
    }
    let queues = config.interface.queues.clone();
    let announce = |local_ip: std::net::Ipv4Addr, transport: &str, queue: u32| {
        if let Some(id) = config.loop_core(queue) {
            if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                eprintln!("zerosplit run: could not pin queue {queue}'s loop to core {id}");
            }
        }
        for l in &config.listen {
            eprintln!(
                "zerosplit run: {:?} on {local_ip}:{} ({name}, queue {queue}, {transport})",
                l.service, l.port,
            );
        }
    };
    if config.transport.kind == TransportKind::Smoltcp {
        if queues.len() != 1 {
            bail!(
                "interface.queues: the smoltcp transport serves one queue, {} are listed",
                queues.len()
            );
        }
        let smol = config.smol_config(queues[0])?;
        let mut stack = zerosplit::stack::SmolStack::new(&name, smol)
            .with_context(|| format!("starting zerosplit (smoltcp) on {name}"))?;
        stack.set_capture(tap());
        stack.set_metrics(board());
        announce(stack.local_ip(), stack.transport_name(), queues[0]);
        let r = std::thread::scope(|s| {
            s.spawn(|| reload_on_hup(path, &hup, &stop, &listeners));
            let r = serve_draining(
                &mut stack,
                &listeners,
                &stop,
                drain,
                &mut LogWatch::new(summary),
            );
            // Ends the reload thread, also after an error.
            stop.store(true, Ordering::Relaxed);
            r
        })?;
        drop(stack);
        eprintln!(
            "zerosplit run: stopped; {} connections, {} bytes in, {} bytes echoed (smoltcp); XDP program detached",
            r.connections, r.bytes_in, r.bytes_echoed
        );
        return Ok(());
    }
    let configs = queues.iter().map(|&q| config.stack_config(q)).collect();
    // One stack per queue, each on its own thread; a queue that fails
    // stops the others.
    let sharded = std::thread::scope(|s| {
        s.spawn(|| reload_on_hup(path, &hup, &stop, &listeners));
        let sharded = zerosplit::shards::run_sharded(&name, configs, |queue, stack| {
            stack.set_capture(tap());
            stack.set_metrics(board());
            announce(stack.local_ip(), stack.transport_name(), queue);
            let report =
                serve_draining(stack, &listeners, &stop, drain, &mut LogWatch::new(summary));
            if report.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            report
        });
        // Ends the reload thread, also when a queue failed to start.
        stop.store(true, Ordering::Relaxed);
        sharded
    });
    let sharded = sharded.with_context(|| format!("starting zerosplit on {name}"))?;
    let mut total = ServiceReport::default();
    for (queue, report) in sharded.results {
        let r = report.with_context(|| format!("queue {queue}"))?;
        if queues.len() > 1 {
            eprintln!(
                "zerosplit run: queue {queue}: {} connections, {} bytes in, {} bytes echoed",
                r.connections, r.bytes_in, r.bytes_echoed
            );
        }
        total += r;
    }
    eprintln!(
        "zerosplit run: stopped; {} connections ({} reset for lack of memory), {} bytes in, {} bytes echoed, {} posts deferred; {} packets handed between queues; drained: {} arriving while draining reset, {} still open after --drain reset; XDP program detached",
        total.connections,
        total.refused,
        total.bytes_in,
        total.bytes_echoed,
        total.posts_deferred,
        sharded.group.forwarded,
        total.drain_refused,
        total.drain_cut
    );
    Ok(())
}

/// On SIGHUP, re-reads the `[[listen]]` entries of `path` and hands them
/// to the running queues; a file that does not load is reported and the
/// running listeners stay. Returns when `stop` is raised.
fn reload_on_hup(
    path: &std::path::Path,
    hup: &std::sync::atomic::AtomicBool,
    stop: &std::sync::atomic::AtomicBool,
    listeners: &zerosplit::service::Listeners,
) {
    use std::sync::atomic::Ordering;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if !hup.swap(false, Ordering::Relaxed) {
            continue;
        }
        match zerosplit::config::Config::load(path) {
            Ok(c) => {
                let ports: Vec<String> = c
                    .listen
                    .iter()
                    .map(|l| format!("{}/{:?}", l.port, l.service))
                    .collect();
                log::info!(
                    "SIGHUP: listeners now {} (only [[listen]] is reloaded; other settings need a restart)",
                    ports.join(", ")
                );
                listeners.replace(c.listen);
            }
            Err(e) => log::error!(
                "SIGHUP: {} not reloaded, the running listeners stay: {e:#}",
                path.display()
            ),
        }
    }
}
