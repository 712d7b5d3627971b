//! `zerosplit exec`: runs an unmodified program with its TCP sockets over
//! zerosplit (the preload library, `shim/preload/`).

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use zerosplit::config::{Config, TransportKind};
use zerosplit_shim as shim;

/// The preload library's file name.
const LIBRARY: &str = "libzerosplit_preload.so";

/// Options of `zerosplit exec`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Interface whose TCP the program's sockets use [default: the
    /// config file's interface.name].
    #[arg(long)]
    iface: Option<String>,
    /// Configuration file (see config/reference.toml) [default: the
    /// defaults with umem.mr_bytes = 256 MiB, room for 256 connections].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Receive queue to serve (one of interface.queues) [default: the
    /// first].
    #[arg(long)]
    queue: Option<u32>,
    /// The preload library [default: libzerosplit_preload.so next to this
    /// binary, or $ZEROSPLIT_PRELOAD].
    #[arg(long)]
    preload: Option<PathBuf>,
    /// Attach to the daemon listening on this socket [default: the
    /// config's daemon.socket, if a daemon answers there].
    #[arg(long, value_name = "PATH", conflicts_with = "standalone")]
    daemon: Option<PathBuf>,
    /// Run a stack of the program's own even if a daemon serves the
    /// interface (the program then needs the interface to itself).
    #[arg(long)]
    standalone: bool,
    /// Fail a TCP listen or connect the interface could serve but
    /// zerosplit leaves to the kernel (IPv6, a dual-stack socket on an
    /// interface with IPv6, TCP Fast Open) with an errno, instead of a
    /// note on stderr: a benchmark never measures the kernel by accident.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    capture: super::CaptureArgs,
    #[command(flatten)]
    metrics: super::MetricsArgs,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

/// Checks the options and the interface, then replaces this process with
/// the program (same pid, which is how the library knows it is the one to
/// run in).
///
/// # Errors
/// Bad options or configuration, no such interface, no library, or the
/// program could not be started.
pub fn run(args: Args) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::load(path).with_context(|| format!("loading {}", path.display()))?,
        None => shim::exec_defaults(),
    };
    if let Some(iface) = &args.iface {
        config.set_interface(iface).context("--iface")?;
    }
    if config.transport.kind == TransportKind::Smoltcp {
        bail!("transport.kind: zerosplit exec runs the header-only tcp transport; smoltcp is the baseline of nc and bench");
    }
    let queue = match args.queue {
        Some(q) if config.interface.queues.contains(&q) => q,
        Some(q) => bail!(
            "--queue {q}: not one of interface.queues {:?}",
            config.interface.queues
        ),
        None => config.interface.queues.first().copied().unwrap_or(0),
    };
    let iface = config.interface.name.clone();
    let (ip, _) = zerosplit::netinfo::ipv4_address(&iface)
        .with_context(|| format!("interface {iface} (exec needs its IPv4 address)"))?;
    // The program's first socket says which mode it runs in (the shim's
    // start line); here only what must hold before it starts.
    let daemon = daemon_to_attach(&args, &config, ip)?;
    if daemon.is_none() {
        super::require_stack_caps()?;
    }
    let library = library(args.preload.as_deref())?;
    let capture = args.capture.resolve(Some(&config.capture));
    let metrics = args.metrics.resolve(&config.metrics)?;
    if let Some(t) = &capture {
        let (min, max) = zerosplit::capture::SNAPLEN_RANGE;
        if !(min..=max).contains(&t.snaplen) {
            bail!("--snaplen {} is outside {min}..={max}", t.snaplen);
        }
        // The program's stack creates the file new (refusing an existing
        // one); say so now, or clear the way for it.
        if t.overwrite {
            zerosplit::capture::remove_old(&t.path).context("--pcap-overwrite")?;
        } else if t.path.symlink_metadata().is_ok() {
            return Err(zerosplit::capture::CaptureError::Exists {
                path: t.path.clone(),
            })
            .context("--pcap");
        }
    }
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(old) if !old.is_empty() => {
            let mut v = library.clone().into_os_string();
            v.push(":");
            v.push(old);
            v
        }
        _ => library.into_os_string(),
    };
    let (program, rest) = args.command.split_first().context("no program to run")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest)
        .env("LD_PRELOAD", preload)
        .env(shim::ENV_PID, std::process::id().to_string())
        .env(shim::ENV_IFACE, &iface)
        .env(shim::ENV_QUEUE, queue.to_string());
    if args.strict {
        cmd.env(shim::ENV_STRICT, "1");
    } else {
        cmd.env_remove(shim::ENV_STRICT);
    }
    match &daemon {
        Some(path) => cmd.env(shim::ENV_DAEMON, std::path::absolute(path)?),
        None => cmd.env_remove(shim::ENV_DAEMON),
    };
    if let Some(t) = &capture {
        // Absolute: the program may change its directory before the stack
        // starts.
        let path =
            std::path::absolute(&t.path).with_context(|| format!("--pcap {}", t.path.display()))?;
        cmd.env(shim::ENV_PCAP, path)
            .env(shim::ENV_SNAPLEN, t.snaplen.to_string());
    } else {
        cmd.env_remove(shim::ENV_PCAP).env_remove(shim::ENV_SNAPLEN);
    }
    match metrics {
        Some(addr) => cmd.env(shim::ENV_METRICS, addr.to_string()),
        None => cmd.env_remove(shim::ENV_METRICS),
    };
    match &args.config {
        Some(path) => {
            let abs = std::fs::canonicalize(path).with_context(|| format!("{}", path.display()))?;
            cmd.env(shim::ENV_CONFIG, abs)
        }
        None => cmd.env_remove(shim::ENV_CONFIG),
    };
    let err = cmd.exec();
    bail!("running {}: {err}", Path::new(program).display())
}

/// The daemon the program attaches to: `--daemon`, or the config's
/// `daemon.socket` when a daemon serving the interface (address `ip`)
/// answers there (an attach that is dropped at once); `None` with
/// `--standalone` or when none does. A daemon in another network
/// namespace may listen on the same path for another interface.
///
/// # Errors
/// `--daemon` names a socket where no daemon answers, or one serving
/// another address.
fn daemon_to_attach(args: &Args, config: &Config, ip: Ipv4Addr) -> Result<Option<PathBuf>> {
    use zerosplit::provider::Provider;
    if args.standalone {
        return Ok(None);
    }
    if let Some(path) = &args.daemon {
        let daemon = zerosplit::attach::attach(path)
            .with_context(|| format!("--daemon {}", path.display()))?;
        if daemon.local_ip() != ip {
            bail!(
                "--daemon {}: that daemon serves {}, not {ip} (the interface's address)",
                path.display(),
                daemon.local_ip()
            );
        }
        return Ok(Some(path.clone()));
    }
    let path = &config.daemon.socket;
    Ok(zerosplit::attach::attach(path)
        .is_ok_and(|d| d.local_ip() == ip)
        .then(|| path.clone()))
}

/// The preload library: `--preload`, `$ZEROSPLIT_PRELOAD`, or next to this
/// binary (or in `deps/` beside it or one directory up, where cargo
/// builds it as this binary's dependency).
fn library(given: Option<&Path>) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = match given
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("ZEROSPLIT_PRELOAD").map(PathBuf::from))
    {
        Some(p) => vec![p],
        None => {
            let exe = std::env::current_exe().context("locating the zerosplit binary")?;
            let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
            // cargo builds it as a dependency of this binary into deps/.
            vec![
                dir.join(LIBRARY),
                dir.join("deps").join(LIBRARY),
                dir.join("..").join("deps").join(LIBRARY),
            ]
        }
    };
    for c in &candidates {
        if c.is_file() {
            return std::fs::canonicalize(c).with_context(|| format!("{}", c.display()));
        }
    }
    bail!(
        "the preload library is not at {}: build it with `cargo build --release -p zerosplit-preload` (it lands next to the zerosplit binary) or pass --preload",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    )
}
