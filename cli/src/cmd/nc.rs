//! `zerosplit nc`: netcat over zerosplit (either transport).

use anyhow::{bail, Context, Result};

/// Options of `zerosplit nc`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Listen instead of connecting.
    #[arg(short = 'l', long)]
    listen: bool,
    /// ADDR:PORT to connect to, or (with -l) the port to listen on as
    /// ADDR:PORT or :PORT.
    target: String,
    /// Interface to run on (in the current network namespace).
    #[arg(long)]
    iface: String,
    /// Configuration file (see config/reference.toml); the options
    /// below override it.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Transport: tcp (header-only: the datapath places payload) or
    /// smoltcp (full packets, payload copied through smoltcp's buffers)
    /// [default: tcp, or the config file's].
    #[arg(long, value_parser = ["tcp", "smoltcp"])]
    transport: Option<String>,
    /// Congestion controller (tcp: newreno, cubic, dctcp, bbr; smoltcp:
    /// none, reno, cubic) [default: cubic, or the config file's].
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
}

/// Runs `zerosplit nc`.
///
/// # Errors
/// Bad options or configuration, not root, or the transfer failed.
pub fn run(args: Args) -> Result<()> {
    nc(
        args.listen,
        &args.target,
        &args.iface,
        args.config.as_deref(),
        args.transport.as_deref(),
        args.cc.as_deref(),
        args.xdp_mode.as_deref(),
        args.threads.as_deref(),
        args.mtu,
        args.idle_timeout,
    )
}

#[allow(
    clippy::too_many_arguments,
    reason = "one parameter per command-line option"
)]
fn nc(
    listen: bool,
    target: &str,
    iface: &str,
    config_path: Option<&std::path::Path>,
    transport: Option<&str>,
    cc: Option<&str>,
    xdp_mode: Option<&str>,
    threads: Option<&str>,
    mtu: Option<u32>,
    idle_timeout: f64,
) -> Result<()> {
    use std::net::SocketAddrV4;
    use zerosplit::config::{Config, TransportKind};
    use zerosplit::smol::{SmolConfig, SmolCongestion, SmolStack};
    use zerosplit::stack::{Stack, StackConfig};
    use zerosplit::transfer::TransferOptions;

    super::require_root()?;
    if !(idle_timeout > 0.0 && idle_timeout <= 86400.0) {
        bail!("--idle-timeout must be between 0 and 86400 seconds, got {idle_timeout}");
    }
    let file = match config_path {
        Some(path) => {
            let mut file =
                Config::load(path).with_context(|| format!("loading {}", path.display()))?;
            file.set_interface(iface).context("--iface")?;
            if file.interface.queues.len() > 1 {
                bail!(
                    "interface.queues: nc serves one queue, {} are listed; list one (zerosplit run serves several)",
                    file.interface.queues.len()
                );
            }
            Some(file)
        }
        None => None,
    };
    let smoltcp = match transport {
        Some(t) => t == "smoltcp",
        None => file
            .as_ref()
            .is_some_and(|f| f.transport.kind == TransportKind::Smoltcp),
    };
    let queue = |f: &Config| f.interface.queues.first().copied().unwrap_or(0);
    let loop_core = file.as_ref().and_then(|f| f.loop_core(queue(f)));
    let mut config = match &file {
        Some(f) => f.stack_config(queue(f)),
        None => {
            let mut c = StackConfig::default();
            c.nic.xsk.umem.mr_bytes = 64 << 20;
            c.tcp.algorithm = transports::cc::Algorithm::Cubic;
            c
        }
    };
    let mut smol_cc = match &file {
        Some(f) if smoltcp => match f.smol_config(queue(f)) {
            Ok(s) => s.congestion,
            // The file was written for tcp (e.g. congestion = "bbr"):
            // --cc must then say what smoltcp should use.
            Err(e) if cc.is_none() => {
                return Err(e)
                    .context("--transport smoltcp with the config file's transport.congestion")
            }
            Err(_) => SmolCongestion::Cubic,
        },
        _ => SmolCongestion::Cubic,
    };
    if let Some(cc) = cc {
        if smoltcp {
            smol_cc = cc.parse().with_context(|| format!("--cc {cc}"))?;
        } else {
            config.tcp.algorithm = cc.parse().with_context(|| format!("--cc {cc}"))?;
        }
    }
    if let Some(mtu) = mtu {
        if !(576..=9000).contains(&mtu) {
            bail!("--mtu must be between 576 and 9000, got {mtu}");
        }
        config.nic.mtu = mtu as usize;
        config.nic.xsk.multi_buffer = mtu as usize + 14 > config.nic.xsk.umem.frame_size as usize;
        config.tcp.mss = (mtu - 40) as u16;
    }
    match threads {
        Some("dedicated") if smoltcp => {
            bail!("--threads dedicated: the smoltcp transport runs run-to-completion only (--threads rtc)")
        }
        Some("dedicated") => {
            config.threads = zerosplit::stack::Threads::Dedicated {
                datapath_core: None,
                transport_core: None,
                queue: 4096,
            };
        }
        Some(_) => config.threads = zerosplit::stack::Threads::RunToCompletion,
        None => {}
    }
    if smoltcp && config.threads != zerosplit::stack::Threads::RunToCompletion {
        bail!("threads.mode: the smoltcp transport runs run-to-completion only; pass --threads rtc or set mode = \"run-to-completion\"");
    }
    if let Some(mode) = xdp_mode {
        config.nic.xdp_mode = if mode == "generic" {
            datapath::steer::XdpMode::Generic
        } else {
            datapath::steer::XdpMode::Native
        };
    }
    let opts = TransferOptions {
        idle_timeout: std::time::Duration::from_secs_f64(idle_timeout),
    };
    // Check every argument before touching the interface.
    let role = if listen {
        let port_text = target.rsplit_once(':').map_or(target, |(_, p)| p);
        NcRole::Listen(
            port_text
                .parse()
                .with_context(|| format!("bad port in {target:?} (want ADDR:PORT or :PORT)"))?,
        )
    } else {
        NcRole::Connect(
            target
                .parse::<SocketAddrV4>()
                .with_context(|| format!("bad address {target:?} (want IPv4:PORT)"))?,
        )
    };
    if let Some(id) = loop_core {
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            eprintln!("zerosplit nc: could not pin the loop to core {id}");
        }
    }
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
        run_nc(&mut stack, role, &opts)?;
        let c = stack.counters();
        eprintln!(
            "zerosplit nc: smoltcp copied {} payload bytes into and {} out of its socket buffers ({} frames in, {} out)",
            c.payload_copied_in, c.payload_copied_out, c.frames_in, c.frames_out
        );
    } else {
        let mut stack =
            Stack::new(iface, config).with_context(|| format!("starting zerosplit on {iface}"))?;
        run_nc(&mut stack, role, &opts)?;
        let c = stack.counters();
        eprintln!(
            "zerosplit nc: {} segments ({} bytes of headers and stream ranges) crossed to the transport; payload stayed in the datapath",
            c.segments_to_transport, c.bytes_to_transport
        );
    }
    Ok(())
}

/// What `nc` does once its arguments are checked.
enum NcRole {
    Listen(u16),
    Connect(std::net::SocketAddrV4),
}

fn run_nc<P: zerosplit::provider::Provider>(
    stack: &mut P,
    role: NcRole,
    opts: &zerosplit::transfer::TransferOptions,
) -> Result<()> {
    use zerosplit::transfer;
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
