//! RAII network namespaces and veth pairs for tests and benchmarks.
//!
//! No outside program is involved: namespaces are created and deleted as
//! `ip netns add`/`del` do it (`datapath::raw::create_netns`: an unshared
//! thread's namespace bind-mounted on `/var/run/netns/<name>`), links and
//! addresses are made over rtnetlink (`datapath::rtnl`), TX checksum
//! offload is turned off with the `SIOCETHTOOL` ioctl, and programs run in
//! a namespace through a `setns` between fork and exec
//! ([`NetNs::command`]). Kernel work for a namespace runs on a short-lived
//! thread that entered it ([`NetNs::run`]), since netlink and ioctl
//! sockets belong to the namespace of the thread that opens them. So the
//! harness needs root and a kernel with network namespaces and veth, but
//! neither iproute2 nor ethtool; an error names what the kernel refused.
//!
//! Names are unique per process (prefix + pid + counter) so tests running
//! in parallel threads never collide; interface names fit the kernel's 15
//! byte limit. Addresses come from the benchmarking range 198.18.0.0/15
//! (RFC 2544 §C.2.2), one /30 per pair. Dropping a [`NetNs`] deletes the
//! namespace (and with it every interface inside), also during a panic.

use std::{
    ffi::OsStr,
    fmt, io,
    io::Read,
    net::Ipv4Addr,
    os::fd::AsFd,
    path::Path,
    process::{Child, Command, ExitStatus, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    thread,
    time::{Duration, Instant},
};

use datapath::raw::Offload;
use datapath::rtnl::{Link, Rtnl, VethSpec};
use thiserror::Error;

/// How long [`NetNs::exec`] lets a command run before killing it.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// Per-process counter that makes namespace and interface names unique.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

fn next_id() -> u32 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What went wrong in the harness; each variant names the command or the
/// kernel operation.
#[derive(Debug, Error)]
pub enum HarnessError {
    /// A tool the harness needs is not installed.
    #[error(
        "`{tool}` is not installed (not found in PATH); install it: apt-get install -y {package}"
    )]
    MissingTool {
        /// Program name.
        tool: &'static str,
        /// Debian package that provides it.
        package: &'static str,
    },
    /// The command could not be started.
    #[error("`{command}` could not be started: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The command exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// The command ran longer than allowed and was killed.
    #[error("`{command}` did not finish within {timeout:?}; killed")]
    Timeout {
        /// The command line.
        command: String,
        /// The limit.
        timeout: Duration,
    },
    /// A name or argument the harness cannot use.
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// What was wrong.
        what: &'static str,
        /// Details.
        detail: String,
    },
    /// The kernel refused an operation (netlink, ioctl, mount, setns).
    #[error("{what}: {source}")]
    Kernel {
        /// The operation, with its namespace and interface.
        what: String,
        /// The kernel's error (its message names the call).
        source: io::Error,
    },
}

impl HarnessError {
    fn kernel(what: impl Into<String>) -> impl FnOnce(io::Error) -> HarnessError {
        let what = what.into();
        move |source| HarnessError::Kernel { what, source }
    }
}

/// A named network namespace (`/var/run/netns/<name>`, as `ip netns add`
/// makes it); deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates a namespace named `<prefix><pid>-<n>`, sets its `lo` up and
    /// turns IPv6 off in it.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Invalid`] if `prefix` is not made of ASCII letters,
    /// digits, `-` or `_`, or is longer than 16 bytes;
    /// [`HarnessError::Kernel`] naming the refused call (e.g. not root, or
    /// a kernel without network namespaces).
    pub fn new(prefix: &str) -> Result<Self, HarnessError> {
        if prefix.len() > 16
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(HarnessError::Invalid {
                what: "netns prefix",
                detail: format!("{prefix:?}: use at most 16 of [A-Za-z0-9_-]"),
            });
        }
        let name = format!("{prefix}{}-{}", std::process::id(), next_id());
        datapath::raw::create_netns(&name)
            .map_err(HarnessError::kernel(format!("creating netns {name}")))?;
        // From here on the guard exists, so a failure below still deletes it.
        let ns = Self { name };
        ns.run("bringing lo up", || {
            Rtnl::open()?.set_link_up("lo", true)?;
            // IPv4 only: without this, interfaces coming up send IPv6 DAD,
            // MLD and router solicitations at random moments, which would
            // show in the counters tests read. /proc/sys/net shows the
            // namespace of the thread that opens it. Best effort: a kernel
            // without IPv6 has nothing to disable.
            for conf in ["all", "default"] {
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6"), "1");
            }
            Ok(())
        })?;
        Ok(ns)
    }

    /// The namespace's name (as in `/var/run/netns/<name>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a short-lived thread that entered this namespace and
    /// returns its result; an error becomes [`HarnessError::Kernel`] with
    /// `what` and the namespace's name. Sockets `f` opens belong to the
    /// namespace.
    ///
    /// # Errors
    ///
    /// The namespace cannot be entered, or `f` failed.
    pub fn run<T: Send>(
        &self,
        what: &str,
        f: impl FnOnce() -> io::Result<T> + Send,
    ) -> Result<T, HarnessError> {
        run_in(&self.name, what, f)
    }

    /// What the kernel says about link `ifname` in this namespace (index,
    /// MAC, MTU, up, XDP attachment, counters).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`] (`NotFound` when there is no such link).
    pub fn link(&self, ifname: &str) -> Result<Link, HarnessError> {
        self.run(&format!("reading link {ifname}"), || {
            Rtnl::open()?.link(ifname)
        })
    }

    /// Whether link `ifname` exists in this namespace.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`] for failures other than "no such link".
    pub fn has_link(&self, ifname: &str) -> Result<bool, HarnessError> {
        self.run(&format!("looking up link {ifname}"), || {
            Rtnl::open()?.link_exists(ifname)
        })
    }

    /// Sets link `ifname` up or down (`ip link set IF up|down`).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`].
    pub fn set_link_up(&self, ifname: &str, up: bool) -> Result<(), HarnessError> {
        self.run(&format!("setting link {ifname} up={up}"), || {
            Rtnl::open()?.set_link_up(ifname, up)
        })
    }

    /// Adds `addr/prefix` to `ifname` (`ip addr add ADDR/PREFIX dev IF`).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`].
    pub fn add_ipv4(&self, ifname: &str, addr: Ipv4Addr, prefix: u8) -> Result<(), HarnessError> {
        self.run(&format!("adding {addr}/{prefix} to {ifname}"), || {
            Rtnl::open()?.add_ipv4(ifname, addr, prefix)
        })
    }

    /// A permanent neighbour entry `ip` → `mac` on `ifname` (`ip neigh
    /// replace IP lladdr MAC dev IF nud permanent`).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`].
    pub fn set_permanent_neighbour(
        &self,
        ifname: &str,
        ip: Ipv4Addr,
        mac: [u8; 6],
    ) -> Result<(), HarnessError> {
        self.run(&format!("setting neighbour {ip} on {ifname}"), || {
            Rtnl::open()?.set_permanent_neighbour(ifname, ip, mac)
        })
    }

    /// Turns offloads of `ifname` on or off, in order (`ethtool -K IF tx
    /// off …`), through the `SIOCETHTOOL` ioctl.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`] naming the offload the driver refused.
    pub fn set_offloads(
        &self,
        ifname: &str,
        offloads: &[(Offload, bool)],
    ) -> Result<(), HarnessError> {
        self.run(&format!("setting offloads of {ifname}"), || {
            for &(offload, on) in offloads {
                datapath::raw::set_offload(ifname, offload, on)?;
            }
            Ok(())
        })
    }

    /// Whether `offload` is on for `ifname` (`ethtool -k IF`).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`].
    pub fn offload(&self, ifname: &str, offload: Offload) -> Result<bool, HarnessError> {
        self.run(
            &format!("reading offload {} of {ifname}", offload.name()),
            || datapath::raw::offload(ifname, offload),
        )
    }

    /// Creates the veth pair `here` (in this namespace) ↔ `there` (in
    /// `peer`), both ends down and without addresses.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`] (a name taken, a kernel without veth).
    pub fn add_veth(
        &self,
        here: &VethSpec<'_>,
        peer: &NetNs,
        there: &VethSpec<'_>,
    ) -> Result<(), HarnessError> {
        let peer_fd = datapath::raw::open_netns(peer.name()).map_err(HarnessError::kernel(
            format!("opening netns {}", peer.name()),
        ))?;
        self.run(
            &format!(
                "creating veth {} <-> {} (in {})",
                here.name,
                there.name,
                peer.name()
            ),
            || Rtnl::open()?.create_veth(here, there, peer_fd.as_fd()),
        )
    }

    /// Creates bridge `name` in the namespace with `ports` as its ports,
    /// and sets it up (`ip link add NAME type bridge; ip link set PORT
    /// master NAME; ip link set NAME up`).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`] naming the refused operation (a kernel
    /// without bridges, a port that does not exist).
    pub fn add_bridge(&self, name: &str, ports: &[&str]) -> Result<(), HarnessError> {
        self.run(&format!("creating bridge {name} over {ports:?}"), || {
            let mut rtnl = Rtnl::open()?;
            rtnl.create_bridge(name)?;
            for port in ports {
                rtnl.set_master(port, name)?;
            }
            rtnl.set_link_up(name, true)
        })
    }

    /// A `Command` running `program args…` inside this namespace (it
    /// `setns`es between fork and exec, like `ip netns exec` without the
    /// `/sys` remount), for callers that want to set up stdio themselves.
    pub fn command<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Command {
        command_in(&self.name, program, args)
    }

    /// Runs `program args…` in the namespace and returns its output,
    /// whatever its exit status; killed after [`EXEC_TIMEOUT`].
    ///
    /// # Errors
    ///
    /// [`HarnessError::Spawn`] if it cannot start, [`HarnessError::Timeout`].
    pub fn exec<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Result<Output, HarnessError> {
        require_known(program)?;
        output_within(self.command(program, args), EXEC_TIMEOUT)
    }

    /// Like [`NetNs::exec`] but with a caller-chosen time limit.
    ///
    /// # Errors
    ///
    /// As [`NetNs::exec`].
    pub fn exec_timeout<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: impl IntoIterator<Item = S>,
        timeout: Duration,
    ) -> Result<Output, HarnessError> {
        require_known(program)?;
        output_within(self.command(program, args), timeout)
    }

    /// Runs `program args…` in the namespace and fails unless it exits 0.
    ///
    /// # Errors
    ///
    /// As [`NetNs::exec`], plus [`HarnessError::Failed`] with its stderr.
    pub fn exec_ok<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Result<Output, HarnessError> {
        require_known(program)?;
        checked(self.command(program, args), EXEC_TIMEOUT)
    }

    /// Starts `program args…` in the namespace with stdin closed and stdout
    /// and stderr piped. The caller owns the child: kill and wait for it.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Spawn`].
    pub fn spawn<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Result<Child, HarnessError> {
        require_known(program)?;
        let mut cmd = self.command(program, args);
        let line = describe(&cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                command: format!("{line} (in netns {})", self.name),
                source,
            })
    }
}

/// [`NetNs::run`] for a namespace known by name only.
///
/// # Errors
///
/// The namespace cannot be entered, or `f` failed.
pub fn run_in<T: Send>(
    netns: &str,
    what: &str,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> Result<T, HarnessError> {
    thread::scope(|s| {
        s.spawn(|| {
            let _guard = datapath::raw::NetnsGuard::enter(netns)?;
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
    .map_err(HarnessError::kernel(format!("{what} in netns {netns}")))
}

/// A `Command` running `program args…` inside the named namespace `netns`
/// (see [`NetNs::command`]); spawning it fails if the namespace is gone.
pub fn command_in<S: AsRef<OsStr>>(
    netns: &str,
    program: impl AsRef<OsStr>,
    args: impl IntoIterator<Item = S>,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    datapath::raw::command_in_named_netns(&mut cmd, netns);
    cmd
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = datapath::raw::delete_netns(&self.name) {
            log::error!("cleaning up netns {}: {e}", self.name);
        }
    }
}

/// One end of a [`VethPair`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethEnd {
    /// Namespace the interface lives in.
    pub netns: String,
    /// Interface name (≤ 15 bytes).
    pub ifname: String,
    /// IPv4 address (prefix length [`VethPair::PREFIX_LEN`]).
    pub addr: Ipv4Addr,
    /// MAC address (locally administered, unique per pair).
    pub mac: [u8; 6],
}

impl VethEnd {
    /// The MAC as `aa:bb:cc:dd:ee:ff`.
    pub fn mac_string(&self) -> String {
        mac_string(self.mac)
    }
}

/// The offloads a [`VethPair`]'s ends are left with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offloads {
    /// TX checksum offload off on both ends (and with it TSO and GSO's
    /// checksum help): AF_XDP sees finished checksums, and Linux is
    /// compared packet for packet. What every test and bench row uses
    /// unless it asks otherwise.
    TxChecksumOff,
    /// Whatever a freshly created veth has (TX checksum, TSO, GSO, GRO as
    /// the kernel sets them): the Linux a user gets.
    Default,
}

/// A veth pair with one end in each of two namespaces, addressed, up, and
/// (unless made with [`VethPair::create_with_offloads`]) with TX checksum
/// offload off on both ends (so AF_XDP sees finished checksums). Dropping
/// it deletes the link (best effort; deleting either namespace deletes it
/// too).
#[derive(Debug)]
pub struct VethPair {
    /// The end in `ns_a`, address `.1` of the /30.
    pub a: VethEnd,
    /// The end in `ns_b`, address `.2` of the /30.
    pub b: VethEnd,
    /// The MTU of both ends.
    pub mtu: u32,
}

impl VethPair {
    /// Prefix length of the pair's subnet.
    pub const PREFIX_LEN: u8 = 30;

    /// Creates the pair `zs<pid>x<n>a` (in `ns_a`) ↔ `zs<pid>x<n>b` (in
    /// `ns_b`) with MTU `mtu`, addresses 198.18.0.0/15 + 4·n + {1, 2} /30.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`] naming the refused operation (creating
    /// the pair, an address, setting it up, the TX checksum ioctl).
    pub fn create(ns_a: &NetNs, ns_b: &NetNs, mtu: u32) -> Result<Self, HarnessError> {
        Self::create_with_queues(ns_a, ns_b, mtu, 1)
    }

    /// As [`VethPair::create`], with `queues` receive and transmit queues
    /// on each end. The receiving end takes a packet on the queue the
    /// sender transmitted it on, so several queues spread flows like RSS.
    ///
    /// # Errors
    ///
    /// As [`VethPair::create`]; `queues` 0 or above 64 is invalid.
    pub fn create_with_queues(
        ns_a: &NetNs,
        ns_b: &NetNs,
        mtu: u32,
        queues: u32,
    ) -> Result<Self, HarnessError> {
        Self::create_with_offloads(ns_a, ns_b, mtu, queues, Offloads::TxChecksumOff)
    }

    /// As [`VethPair::create_with_queues`], with the ends' offloads chosen
    /// by `offloads` ([`Offloads::Default`] leaves a fresh veth as it is:
    /// what a Linux user gets, and not usable by AF_XDP ends).
    ///
    /// # Errors
    ///
    /// As [`VethPair::create_with_queues`].
    pub fn create_with_offloads(
        ns_a: &NetNs,
        ns_b: &NetNs,
        mtu: u32,
        queues: u32,
        offloads: Offloads,
    ) -> Result<Self, HarnessError> {
        if !(1..=64).contains(&queues) {
            return Err(HarnessError::Invalid {
                what: "veth queues",
                detail: format!("{queues} is outside 1..=64"),
            });
        }
        let id = next_id();
        let pid = std::process::id();
        let subnet = id % (1 << 15); // 32768 /30 subnets in 198.18.0.0/15
        let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + subnet * 4;
        let end = |ns: &NetNs, side: char, host: u32| VethEnd {
            netns: ns.name().to_owned(),
            ifname: format!("zs{pid}x{}{side}", id % 10_000),
            addr: Ipv4Addr::from(base + host),
            mac: {
                let s = subnet.to_be_bytes();
                [0x02, 0x5a, s[2], s[3], u8::from(side == 'b'), 0x01]
            },
        };
        let a = end(ns_a, 'a', 1);
        let b = end(ns_b, 'b', 2);
        for e in [&a, &b] {
            if e.ifname.len() > 15 {
                return Err(HarnessError::Invalid {
                    what: "interface name",
                    detail: format!("{} is longer than 15 bytes", e.ifname),
                });
            }
        }
        fn spec(e: &VethEnd, mtu: u32, queues: u32) -> VethSpec<'_> {
            VethSpec {
                name: &e.ifname,
                mac: Some(e.mac),
                mtu: Some(mtu),
                queues: Some(queues),
            }
        }
        ns_a.add_veth(&spec(&a, mtu, queues), ns_b, &spec(&b, mtu, queues))?;
        // From here on the pair exists: dropping it on a failure below
        // deletes the link.
        let pair = Self { a, b, mtu };
        for (ns, e) in [(ns_a, &pair.a), (ns_b, &pair.b)] {
            ns.run(&format!("setting up {}", e.ifname), || {
                let mut rtnl = Rtnl::open()?;
                rtnl.add_ipv4(&e.ifname, e.addr, Self::PREFIX_LEN)?;
                rtnl.set_link_up(&e.ifname, true)?;
                if offloads == Offloads::TxChecksumOff {
                    datapath::raw::set_offload(&e.ifname, Offload::TxChecksum, false)?;
                }
                Ok(())
            })?;
        }
        Ok(pair)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Ignored when the namespace (and so the link) is already gone.
        let (netns, ifname) = (self.a.netns.as_str(), self.a.ifname.as_str());
        let _ = thread::scope(|s| {
            s.spawn(|| -> io::Result<()> {
                let _guard = datapath::raw::NetnsGuard::enter(netns)?;
                Rtnl::open()?.delete_link(ifname)
            })
            .join()
        });
    }
}

fn mac_string(mac: [u8; 6]) -> String {
    let parts: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(":")
}

/// The outside programs the benchmarks and a few tests run in namespaces
/// (the harness itself runs none), with the Debian package of each: a
/// missing one is named with its package instead of a bare ENOENT. `tc`
/// shapes the bench suite's bottleneck; nothing on the demo path or in the
/// namespace-only tests needs any of these.
const KNOWN_TOOLS: &[(&str, &str)] = &[
    ("tc", "iproute2"),
    ("iperf3", "iperf3"),
    ("redis-server", "redis-server"),
    ("redis-cli", "redis-tools"),
    ("redis-benchmark", "redis-tools"),
    ("python3", "python3"),
    ("tcpdump", "tcpdump"),
    ("nstat", "iproute2"),
    ("ss", "iproute2"),
];

/// [`require_tool`] for `program` when it is one of [`KNOWN_TOOLS`].
fn require_known(program: &str) -> Result<(), HarnessError> {
    require_known_in(program, &std::env::var_os("PATH").unwrap_or_default())
}

/// [`require_known`] with the search path given.
fn require_known_in(program: &str, path: &std::ffi::OsStr) -> Result<(), HarnessError> {
    match KNOWN_TOOLS.iter().find(|(tool, _)| *tool == program) {
        Some(&(tool, package)) => require_tool_in(tool, package, path),
        None => Ok(()),
    }
}

/// Fails with [`HarnessError::MissingTool`] unless `tool` is in `PATH`.
pub fn require_tool(tool: &'static str, package: &'static str) -> Result<(), HarnessError> {
    require_tool_in(tool, package, &std::env::var_os("PATH").unwrap_or_default())
}

/// [`require_tool`] with the search path given.
fn require_tool_in(
    tool: &'static str,
    package: &'static str,
    path: &std::ffi::OsStr,
) -> Result<(), HarnessError> {
    if std::env::split_paths(path).any(|dir| is_executable(&dir.join(tool))) {
        Ok(())
    } else {
        Err(HarnessError::MissingTool { tool, package })
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `program args…` (in the caller's namespace), failing unless it exits 0.
#[cfg(test)]
fn run<S: AsRef<OsStr>>(
    program: &str,
    args: impl IntoIterator<Item = S>,
) -> Result<Output, HarnessError> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    checked(cmd, EXEC_TIMEOUT)
}

fn checked(cmd: Command, timeout: Duration) -> Result<Output, HarnessError> {
    let line = describe(&cmd);
    let out = output_within(cmd, timeout)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(HarnessError::Failed {
            command: line,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// Runs `cmd` with piped output, killing it after `timeout`.
fn output_within(mut cmd: Command, timeout: Duration) -> Result<Output, HarnessError> {
    let line = describe(&cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            command: line.clone(),
            source,
        })?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::Timeout {
                    command: line,
                    timeout,
                });
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(source) => {
                return Err(HarnessError::Spawn {
                    command: line,
                    source,
                })
            }
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// The command line as a shell would show it, for error messages.
fn describe(cmd: &Command) -> String {
    struct Line<'a>(&'a Command);
    impl fmt::Display for Line<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0.get_program().to_string_lossy())?;
            for a in self.0.get_args() {
                write!(f, " {}", a.to_string_lossy())?;
            }
            Ok(())
        }
    }
    Line(cmd).to_string()
}

/// Runs `f` on a fresh thread that has entered namespace `ns`, and returns
/// its result. Sockets, AF_XDP rings and XDP attachments made inside `f`
/// belong to `ns`.
///
/// # Panics
/// If the namespace cannot be entered, or `f` panics.
pub fn in_netns<T: Send>(ns: &NetNs, f: impl FnOnce() -> T + Send) -> T {
    let name = ns.name();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _guard = datapath::raw::NetnsGuard::enter(name)
                .unwrap_or_else(|e| panic!("enter netns {name}: {e}"));
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_prefixes_are_refused_before_running_anything() {
        for bad in ["a/b", "with space", "much-too-long-prefix-x"] {
            assert!(
                matches!(NetNs::new(bad), Err(HarnessError::Invalid { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn failing_command_reports_its_line_and_stderr() {
        let err = run("sh", ["-c", "echo boom >&2; exit 3"]).expect_err("exit 3");
        let text = err.to_string();
        assert!(text.contains("sh -c echo boom"), "{text}");
        assert!(text.contains("boom"), "{text}");
    }

    #[test]
    fn slow_command_is_killed_at_the_limit() {
        let mut cmd = Command::new("sleep");
        cmd.arg("5");
        let started = Instant::now();
        let err = output_within(cmd, Duration::from_millis(100)).expect_err("timeout");
        assert!(matches!(err, HarnessError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn missing_tool_names_the_package() {
        let err = require_tool("zs-no-such-tool", "zs-pkg").expect_err("missing");
        assert!(
            err.to_string().contains("apt-get install -y zs-pkg"),
            "{err}"
        );
    }

    #[test]
    fn known_tools_are_checked_with_their_package() {
        use std::os::unix::fs::PermissionsExt;
        // A search path of our own: one directory with an executable `tc`
        // and a `redis-cli` that is not executable, one empty.
        let dir = std::env::temp_dir().join(format!("zs-known-{}", std::process::id()));
        let (bin, empty) = (dir.join("bin"), dir.join("empty"));
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::create_dir_all(&empty).expect("mkdir");
        for (name, mode) in [("tc", 0o755), ("redis-cli", 0o644)] {
            let file = bin.join(name);
            std::fs::write(&file, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        let only_empty = empty.clone().into_os_string();
        let both = std::env::join_paths([&empty, &bin]).expect("join");
        let missing = |program: &str, path: &std::ffi::OsStr| {
            require_known_in(program, path)
                .expect_err(program)
                .to_string()
        };
        let result = (
            require_known_in("tc", &both).is_ok(),
            missing("tc", &only_empty),
            missing("redis-cli", &both),
            missing("iperf3", &both),
            require_known_in("zs-not-in-the-table", &only_empty).is_ok(),
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(result.0, "an executable tc anywhere on the path is found");
        assert!(
            result.1.contains("apt-get install -y iproute2"),
            "{}",
            result.1
        );
        assert!(
            result.2.contains("apt-get install -y redis-tools"),
            "a file without x bits is not the tool: {}",
            result.2
        );
        assert!(
            result.3.contains("apt-get install -y iperf3"),
            "{}",
            result.3
        );
        assert!(result.4, "other programs are left to the spawn error");
        for gone in ["ip", "ethtool", "ping", "sysctl"] {
            assert!(
                KNOWN_TOOLS.iter().all(|(t, _)| *t != gone),
                "{gone} is no longer needed by the harness"
            );
        }
        assert!(KNOWN_TOOLS
            .iter()
            .all(|(t, p)| !t.is_empty() && !p.is_empty()));
    }

    /// Needs root (no iproute2, ethtool or ping): a pair comes up as asked,
    /// carries an ICMP echo, and everything is removed on drop.
    #[test]
    fn pair_is_reachable_and_everything_is_removed_on_drop() {
        let (ns_names, ifname);
        let host_v6 = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6").ok();
        {
            let a = NetNs::new("zsb").expect("netns a (needs root)");
            let b = NetNs::new("zsb").expect("netns b");
            assert!(Path::new("/var/run/netns").join(a.name()).exists());
            let pair = VethPair::create_with_queues(&a, &b, 1500, 2).expect("veth pair");
            assert!(pair.a.ifname.len() <= 15 && pair.b.ifname.len() <= 15);
            assert_eq!(u32::from(pair.b.addr) - u32::from(pair.a.addr), 1);
            assert_eq!(pair.a.addr.octets()[0..2], [198, 18]);
            for (ns, end) in [(&a, &pair.a), (&b, &pair.b)] {
                let link = ns.link(&end.ifname).expect("link");
                assert_eq!(link.mac, Some(end.mac), "{link:?}");
                assert_eq!(link.mtu, Some(1500), "{link:?}");
                assert!(link.up && link.ethernet, "{link:?}");
                assert_eq!(link.queues, (Some(2), Some(2)), "{link:?}");
                assert_eq!(link.xdp, None);
                let addrs = ns
                    .run("listing addresses", || {
                        Rtnl::open()?.ipv4_addresses(&end.ifname)
                    })
                    .expect("addresses");
                assert_eq!(addrs, vec![(end.addr, VethPair::PREFIX_LEN)]);
                // Read back with ETHTOOL_GTXCSUM; TSO follows TX checksum.
                assert!(!ns.offload(&end.ifname, Offload::TxChecksum).expect("tx"));
                assert!(!ns.offload(&end.ifname, Offload::Tso).expect("tso"));
            }
            // Each end lives in its own namespace only.
            assert!(!a.has_link(&pair.b.ifname).expect("lookup"));
            assert!(!b.has_link(&pair.a.ifname).expect("lookup"));
            // IPv6 is off inside, whatever the host has.
            let v6 = a
                .run("reading disable_ipv6", || {
                    std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6")
                })
                .ok();
            assert!(v6.is_none_or(|v| v.trim() == "1"), "IPv6 left on");
            // … and the write went to the namespace, not to the host (the
            // test's own namespace), whose /proc/sys/net is another one.
            let outside = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6").ok();
            assert_eq!(outside, host_v6, "the host's disable_ipv6 changed");
            let lo = a.link("lo").expect("lo");
            assert!(lo.up, "{lo:?}");
            let rtt = crate::icmp::ping(&b, pair.a.addr, Duration::from_secs(2))
                .expect("echo reply from a");
            assert!(rtt < Duration::from_secs(2));
            crate::icmp::ping(&a, pair.b.addr, Duration::from_secs(2)).expect("echo reply from b");
            // With b's end down, the echo goes unanswered.
            b.set_link_up(&pair.b.ifname, false).expect("b down");
            assert!(!b.link(&pair.b.ifname).expect("link").up);
            let silent = crate::icmp::ping(&a, pair.b.addr, Duration::from_millis(300))
                .expect_err("b is down");
            assert!(
                matches!(silent, crate::icmp::PingError::NoReply { .. }),
                "{silent}"
            );
            ns_names = [a.name().to_owned(), b.name().to_owned()];
            ifname = pair.a.ifname.clone();
        }
        for name in &ns_names {
            assert!(
                !Path::new("/var/run/netns").join(name).exists(),
                "{name} still exists"
            );
            let err = datapath::raw::NetnsGuard::enter(name).expect_err("gone");
            assert_eq!(err.kind(), io::ErrorKind::NotFound);
        }
        let host = Rtnl::open()
            .and_then(|mut r| r.link_exists(&ifname))
            .expect("host lookup");
        assert!(!host, "{ifname} left in the test's namespace");
    }

    /// Needs root: a pair made with the default offloads keeps TX checksum
    /// offload (and the TSO it enables) as a fresh veth has it.
    #[test]
    fn default_offloads_are_left_as_a_fresh_veth_has_them() {
        let a = NetNs::new("zsb").expect("netns a (needs root)");
        let b = NetNs::new("zsb").expect("netns b");
        let pair =
            VethPair::create_with_offloads(&a, &b, 1500, 1, Offloads::Default).expect("veth pair");
        for (ns, end) in [(&a, &pair.a), (&b, &pair.b)] {
            assert!(ns.offload(&end.ifname, Offload::TxChecksum).expect("tx"));
        }
        // And the ioctl turns it off and on again, as read back.
        a.set_offloads(&pair.a.ifname, &[(Offload::TxChecksum, false)])
            .expect("tx off");
        assert!(!a.offload(&pair.a.ifname, Offload::TxChecksum).expect("tx"));
        a.set_offloads(&pair.a.ifname, &[(Offload::TxChecksum, true)])
            .expect("tx on");
        assert!(a.offload(&pair.a.ifname, Offload::TxChecksum).expect("tx"));
    }

    /// Needs root: `spawn` and `exec` run inside the namespace (a fresh one
    /// has only `lo`), and a spawned child can be killed.
    #[test]
    fn exec_and_spawn_run_inside_the_namespace() {
        let ns = NetNs::new("zsb").expect("netns (needs root)");
        let inode = |out: &Output| String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let mine = std::fs::read_link("/proc/self/ns/net").expect("own netns");
        let theirs = ns
            .exec_ok("readlink", ["/proc/self/ns/net"])
            .expect("readlink in netns");
        assert_ne!(
            inode(&theirs),
            mine.to_string_lossy(),
            "child stayed outside"
        );
        let in_thread = ns
            .run("reading the namespace", || {
                std::fs::read_link("/proc/thread-self/ns/net")
            })
            .expect("thread netns");
        assert_eq!(inode(&theirs), in_thread.to_string_lossy());
        // Only lo: /proc/net/dev lists the reader's namespace.
        let dev = ns
            .exec_ok("cat", ["/proc/self/net/dev"])
            .expect("cat in netns");
        let devs = String::from_utf8_lossy(&dev.stdout).to_string();
        assert_eq!(devs.lines().count(), 3, "{devs}");
        assert!(devs.contains("lo:"), "{devs}");

        let child = ns.spawn("readlink", ["/proc/self/ns/net"]).expect("spawn");
        let out = child.wait_with_output().expect("wait");
        assert_eq!(inode(&out), inode(&theirs));

        let mut sleeper = ns.spawn("sleep", ["30"]).expect("spawn sleep");
        sleeper.kill().expect("kill");
        let status = sleeper.wait().expect("wait");
        assert!(!status.success());

        let failed = ns
            .exec_ok("sh", ["-c", "echo zs-absent0 >&2; exit 1"])
            .expect_err("exit 1");
        assert!(matches!(failed, HarnessError::Failed { .. }), "{failed}");
        assert!(failed.to_string().contains("zs-absent0"), "{failed}");

        let mut gone = command_in("zs-no-such-ns-xyz", "true", [""; 0]);
        let err = gone.status().expect_err("namespace missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    }

    #[test]
    fn mac_formatting() {
        assert_eq!(
            mac_string([0x02, 0x5a, 0, 0x10, 1, 0xff]),
            "02:5a:00:10:01:ff"
        );
    }
}
