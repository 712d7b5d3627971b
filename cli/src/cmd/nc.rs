//! `zerosplit nc`: netcat over zerosplit (either transport).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use zerosplit::config::{Config, TransportKind};
use zerosplit::engine::smol::{SmolConfig, SmolCongestion};
use zerosplit::host::{HostConfig, Threads};
use zerosplit::provider::Provider;
use zerosplit::stack::SmolStack;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};

/// Options of `zerosplit nc`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Listen instead of connecting.
    #[arg(short = 'l', long)]
    listen: bool,
    /// ADDR:PORT to connect to (IPv4, or IPv6 as [ADDR]:PORT), or (with
    /// -l) the port to listen on as ADDR:PORT or :PORT (the interface's
    /// IPv4 and, with the tcp transport, IPv6 addresses).
    target: String,
    /// Interface to run on (in the current network namespace).
    #[arg(long, required_unless_present = "daemon", conflicts_with = "daemon")]
    iface: Option<String>,
    /// Attach to the `zerosplit daemon` listening on this socket instead
    /// of opening the interface in this process (the daemon's
    /// configuration then decides transport, congestion control and the
    /// rest; no capabilities needed).
    #[arg(long, value_name = "SOCKET")]
    daemon: Option<std::path::PathBuf>,
    /// Configuration file (see config/reference.toml); the options
    /// below override it.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Transport: tcp (header-only: the datapath places payload) or
    /// smoltcp (full packets, payload copied through smoltcp's buffers)
    /// [default: tcp, or the config file's].
    #[arg(long, value_parser = ["tcp", "smoltcp"])]
    transport: Option<String>,
    /// Congestion controller (tcp: newreno, cubic, dctcp, bbr, vegas;
    /// smoltcp: none, reno, cubic) [default: cubic, or the config file's].
    #[arg(long)]
    cc: Option<String>,
    /// XDP attach mode [default: native, or the config file's].
    #[arg(long, value_parser = ["native", "generic"])]
    xdp_mode: Option<String>,
    /// Threads: run-to-completion (rtc: datapath and transport in one
    /// loop) or dedicated (the transport on its own thread)
    /// [default: rtc, or the config file's].
    #[arg(long, value_parser = ["rtc", "dedicated"])]
    threads: Option<String>,
    /// MTU of the interface; above 4082 the sockets use multi-buffer
    /// frames [default: 1500, or the config file's].
    #[arg(long)]
    mtu: Option<u32>,
    /// Give up after this many seconds without progress.
    #[arg(long, default_value_t = 30.0)]
    idle_timeout: f64,
    #[command(flatten)]
    capture: super::CaptureArgs,
    #[command(flatten)]
    metrics: super::MetricsArgs,
}

/// Runs `zerosplit nc`: checks every option before touching the
/// interface, then moves one stream.
///
/// # Errors
/// Bad options or configuration, not root, or the transfer failed.
pub fn run(args: Args) -> Result<()> {
    if !(args.idle_timeout > 0.0 && args.idle_timeout <= 86400.0) {
        bail!(
            "--idle-timeout must be between 0 and 86400 seconds, got {}",
            args.idle_timeout
        );
    }
    if let Some(socket) = &args.daemon {
        super::init_logging(zerosplit::config::LogLevel::Warn);
        let opts = TransferOptions {
            idle_timeout: Duration::from_secs_f64(args.idle_timeout),
        };
        let role = role(&args)?;
        let mut attached = zerosplit::attach(socket)
            .with_context(|| format!("attaching to the daemon at {}", socket.display()))?;
        return run_nc(&mut attached, role, &opts);
    }
    super::require_stack_caps()?;
    let file = load_file(&args)?;
    // nc writes the stream to stdout; its log stays quiet unless asked.
    super::init_logging(
        file.as_ref()
            .map_or(zerosplit::config::LogLevel::Warn, |f| f.log.level),
    );
    let smoltcp = match &args.transport {
        Some(t) => t == "smoltcp",
        None => file
            .as_ref()
            .is_some_and(|f| f.transport.kind == TransportKind::Smoltcp),
    };
    let loop_core = file.as_ref().and_then(|f| f.loop_core(queue(f)));
    let mut config = match &file {
        Some(f) => f.stack_config(queue(f)),
        None => {
            let mut c = HostConfig::default();
            c.nic.xsk.umem.mr_bytes = 64 << 20;
            c.tcp.algorithm = transports::cc::Algorithm::Cubic;
            c
        }
    };
    let smol_cc = congestion(&args, file.as_ref(), smoltcp, &mut config)?;
    apply_overrides(&args, smoltcp, &mut config)?;
    let opts = TransferOptions {
        idle_timeout: Duration::from_secs_f64(args.idle_timeout),
    };
    let role = role(&args)?;
    if let Some(id) = loop_core {
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            eprintln!("zerosplit nc: could not pin the loop to core {id}");
        }
    }
    let iface = args.iface.as_deref().unwrap_or_default();
    let capture = args.capture.open(file.as_ref().map(|f| &f.capture))?;
    let tap = || capture.as_ref().map(zerosplit::capture::PcapTap::tap);
    let metrics = args
        .metrics
        .start(&file.as_ref().map(|f| f.metrics).unwrap_or_default())?;
    let board = || metrics.as_ref().map(super::Metrics::board);
    if smoltcp {
        let smol = SmolConfig {
            congestion: smol_cc,
            stack: config,
            ..match &file {
                Some(f) => f.smol_config(queue(f)).unwrap_or_default(),
                None => SmolConfig::default(),
            }
        };
        let mut stack = SmolStack::new(iface, smol)
            .with_context(|| format!("starting zerosplit (smoltcp) on {iface}"))?;
        stack.set_capture(tap());
        stack.set_metrics(board());
        run_nc(&mut stack, role, &opts)?;
        let c = stack.counters();
        eprintln!(
            "zerosplit nc: smoltcp copied {} payload bytes into and {} out of its socket buffers ({} frames in, {} out); the loop slept {} times, {} ms in all",
            c.payload_copied_in,
            c.payload_copied_out,
            c.frames_in,
            c.frames_out,
            c.loop_idle.sleeps,
            c.loop_idle.slept_ns / 1_000_000
        );
    } else {
        let mut stack =
            Stack::new(iface, config).with_context(|| format!("starting zerosplit on {iface}"))?;
        stack.set_capture(tap());
        stack.set_metrics(board());
        run_nc(&mut stack, role, &opts)?;
        let c = stack.counters();
        eprintln!(
            "zerosplit nc: {} segments ({} bytes of headers and stream ranges) crossed to the transport, {} packets coalesced into them; payload stayed in the datapath; the loop slept {} times, {} ms in all (transport thread: {}, {} ms)",
            c.segments_to_transport,
            c.bytes_to_transport,
            stack.nic_counters().rx_coalesced,
            c.loop_idle.sleeps,
            c.loop_idle.slept_ns / 1_000_000,
            c.transport_idle.sleeps,
            c.transport_idle.slept_ns / 1_000_000
        );
    }
    if let Some(c) = capture {
        eprintln!("zerosplit nc: captured {} frames", c.frames());
    }
    Ok(())
}

/// The queue a file configures `nc` for (it serves exactly one).
fn queue(f: &Config) -> u32 {
    f.interface.queues.first().copied().unwrap_or(0)
}

/// The `--config` file with `--iface` applied, if one was given.
fn load_file(args: &Args) -> Result<Option<Config>> {
    let Some(path) = &args.config else {
        return Ok(None);
    };
    let mut file = Config::load(path).with_context(|| format!("loading {}", path.display()))?;
    file.set_interface(args.iface.as_deref().unwrap_or_default())
        .context("--iface")?;
    if file.interface.queues.len() > 1 {
        bail!(
            "interface.queues: nc serves one queue, {} are listed; list one (zerosplit run serves several)",
            file.interface.queues.len()
        );
    }
    Ok(Some(file))
}

/// Resolves the congestion controller: `--cc` over the file's. Sets it in
/// `config` for tcp; returns smoltcp's.
fn congestion(
    args: &Args,
    file: Option<&Config>,
    smoltcp: bool,
    config: &mut HostConfig,
) -> Result<SmolCongestion> {
    let mut smol_cc = match file {
        Some(f) if smoltcp => match f.smol_config(queue(f)) {
            Ok(s) => s.congestion,
            // The file was written for tcp (e.g. congestion = "bbr"):
            // --cc must then say what smoltcp should use.
            Err(e) if args.cc.is_none() => {
                return Err(e)
                    .context("--transport smoltcp with the config file's transport.congestion")
            }
            Err(_) => SmolCongestion::Cubic,
        },
        _ => SmolCongestion::Cubic,
    };
    if let Some(cc) = &args.cc {
        if smoltcp {
            smol_cc = cc.parse().with_context(|| format!("--cc {cc}"))?;
        } else {
            config.tcp.algorithm = cc.parse().with_context(|| format!("--cc {cc}"))?;
        }
    }
    Ok(smol_cc)
}

/// Applies `--mtu`, `--threads` and `--xdp-mode` over the file's values.
fn apply_overrides(args: &Args, smoltcp: bool, config: &mut HostConfig) -> Result<()> {
    if let Some(mtu) = args.mtu {
        if !(576..=9000).contains(&mtu) {
            bail!("--mtu must be between 576 and 9000, got {mtu}");
        }
        config.nic.mtu = mtu as usize;
        config.nic.xsk.multi_buffer = mtu as usize + 14 > config.nic.xsk.umem.frame_size as usize;
        config.tcp.mss = (mtu - 40) as u16;
    }
    match args.threads.as_deref() {
        Some("dedicated") if smoltcp => {
            bail!("--threads dedicated: the smoltcp transport runs run-to-completion only (--threads rtc)")
        }
        Some("dedicated") => {
            config.threads = Threads::Dedicated {
                datapath_core: None,
                transport_core: None,
                queue: 4096,
            };
        }
        Some(_) => config.threads = Threads::RunToCompletion,
        None => {}
    }
    if smoltcp && config.threads != Threads::RunToCompletion {
        bail!("threads.mode: the smoltcp transport runs run-to-completion only; pass --threads rtc or set mode = \"run-to-completion\"");
    }
    if let Some(mode) = &args.xdp_mode {
        config.nic.xdp_mode = if mode == "generic" {
            datapath::steer::XdpMode::Generic
        } else {
            datapath::steer::XdpMode::Native
        };
    }
    Ok(())
}

/// What `nc` does: listen on a port or connect to an address.
enum NcRole {
    Listen(u16),
    Connect(SocketAddr),
}

fn role(args: &Args) -> Result<NcRole> {
    let target = args.target.as_str();
    Ok(if args.listen {
        let port_text = target.rsplit_once(':').map_or(target, |(_, p)| p);
        NcRole::Listen(
            port_text
                .parse()
                .with_context(|| format!("bad port in {target:?} (want ADDR:PORT or :PORT)"))?,
        )
    } else {
        NcRole::Connect(
            target.parse::<SocketAddr>().with_context(|| {
                format!("bad address {target:?} (want IPv4:PORT or [IPv6]:PORT)")
            })?,
        )
    })
}

fn run_nc<P: Provider>(stack: &mut P, role: NcRole, opts: &TransferOptions) -> Result<()> {
    match role {
        NcRole::Listen(port) => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            let n = transfer::listen(stack, port, &mut out, opts)?;
            eprintln!("zerosplit nc: received {n} bytes");
        }
        NcRole::Connect(remote) => {
            let stdin = std::io::stdin();
            let mut input = stdin.lock();
            let n = transfer::connect(stack, remote, &mut input, opts)?;
            eprintln!("zerosplit nc: sent {n} bytes, all acknowledged");
        }
    }
    Ok(())
}
