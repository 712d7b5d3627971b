//! RAII network namespaces and veth pairs for tests and benchmarks.
//!
//! Everything here shells out to iproute2 (`ip`) and `ethtool`, so the
//! harness needs no `unsafe` and does exactly what an operator would type.
//! Names are unique per process (prefix + pid + counter) so tests running
//! in parallel threads never collide; interface names fit the kernel's 15
//! byte limit. Addresses come from the benchmarking range 198.18.0.0/15
//! (RFC 2544 §C.2.2), one /30 per pair. Dropping a [`NetNs`] deletes the
//! namespace (and with it every interface inside), also during a panic.

use std::{
    ffi::OsStr,
    fmt,
    io::Read,
    net::Ipv4Addr,
    path::Path,
    process::{Child, Command, ExitStatus, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    thread,
    time::{Duration, Instant},
};

use thiserror::Error;

/// How long [`NetNs::exec`] lets a command run before killing it.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// Per-process counter that makes namespace and interface names unique.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

fn next_id() -> u32 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What went wrong in the harness; each variant names the command.
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
}

/// A network namespace created with `ip netns add`; deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates a namespace named `<prefix><pid>-<n>` and sets its `lo` up.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Invalid`] if `prefix` is not made of ASCII letters,
    /// digits, `-` or `_`, or is longer than 16 bytes; a command error if
    /// `ip` is missing or fails (e.g. not root).
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
        require_tool("ip", "iproute2")?;
        let name = format!("{prefix}{}-{}", std::process::id(), next_id());
        run("ip", ["netns", "add", name.as_str()])?;
        // From here on the guard exists, so a failure below still deletes it.
        let ns = Self { name };
        run("ip", ["-n", ns.name(), "link", "set", "lo", "up"])?;
        // IPv4 only: without this, interfaces coming up send IPv6 DAD, MLD
        // and router solicitations at random moments, which would show in
        // the counters tests read. Best effort: a kernel without IPv6 has
        // nothing to disable.
        let _ = ns.exec(
            "sysctl",
            [
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        );
        Ok(ns)
    }

    /// The namespace's name (as in `/var/run/netns/<name>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A `Command` running `program args…` inside this namespace
    /// (`ip netns exec <name> program args…`), for callers that want to
    /// set up stdio themselves.
    pub fn command<S: AsRef<OsStr>>(
        &self,
        program: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.name.as_str(), program])
            .args(args);
        cmd
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
                command: line,
                source,
            })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = run("ip", ["netns", "del", self.name.as_str()]) {
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
/// (unless made with [`VethPair::create_with_offloads`]) with TX checksum offload off on both ends (so AF_XDP sees finished
/// checksums). Dropping it deletes the link (best effort; deleting either
/// namespace deletes it too).
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
    /// [`HarnessError::MissingTool`] if `ethtool` is missing; a command
    /// error naming the failing `ip`/`ethtool` call and its stderr.
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
        require_tool("ip", "iproute2")?;
        require_tool("ethtool", "ethtool")?;
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
        let pair = Self {
            a: end(ns_a, 'a', 1),
            b: end(ns_b, 'b', 2),
            mtu,
        };
        for e in [&pair.a, &pair.b] {
            if e.ifname.len() > 15 {
                return Err(HarnessError::Invalid {
                    what: "interface name",
                    detail: format!("{} is longer than 15 bytes", e.ifname),
                });
            }
        }
        let mtu_s = mtu.to_string();
        let q = queues.to_string();
        let (a, b) = (&pair.a, &pair.b);
        run(
            "ip",
            [
                "-n",
                &a.netns,
                "link",
                "add",
                &a.ifname,
                "address",
                &a.mac_string(),
                "mtu",
                &mtu_s,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                &b.ifname,
                "netns",
                &b.netns,
                "address",
                &b.mac_string(),
                "mtu",
                &mtu_s,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
            ],
        )?;
        for e in [a, b] {
            let cidr = format!("{}/{}", e.addr, Self::PREFIX_LEN);
            run(
                "ip",
                ["-n", &e.netns, "addr", "add", &cidr, "dev", &e.ifname],
            )?;
            run("ip", ["-n", &e.netns, "link", "set", &e.ifname, "up"])?;
            if offloads == Offloads::TxChecksumOff {
                run(
                    "ip",
                    [
                        "netns", "exec", &e.netns, "ethtool", "-K", &e.ifname, "tx", "off",
                    ],
                )?;
            }
        }
        Ok(pair)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Ignored when the namespace (and so the link) is already gone.
        let _ = output_within(
            {
                let mut c = Command::new("ip");
                c.args(["-n", &self.a.netns, "link", "del", &self.a.ifname]);
                c
            },
            EXEC_TIMEOUT,
        );
    }
}

fn mac_string(mac: [u8; 6]) -> String {
    let parts: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(":")
}

/// The outside programs the harness and the tests run in namespaces, with
/// the Debian package of each: a missing one is named with its package
/// (`ip netns exec` itself would only say "exec of ... failed").
const KNOWN_TOOLS: &[(&str, &str)] = &[
    ("ping", "iputils-ping"),
    ("ethtool", "ethtool"),
    ("tc", "iproute2"),
    ("sysctl", "procps"),
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
    match KNOWN_TOOLS.iter().find(|(tool, _)| *tool == program) {
        Some(&(tool, package)) => require_tool(tool, package),
        None => Ok(()),
    }
}

/// Fails with [`HarnessError::MissingTool`] unless `tool` is in `PATH`.
pub fn require_tool(tool: &'static str, package: &'static str) -> Result<(), HarnessError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| is_executable(&dir.join(tool))) {
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
pub(crate) fn run<S: AsRef<OsStr>>(
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
        assert_eq!(
            require_known("ping").is_ok(),
            require_tool("ping", "iputils-ping").is_ok()
        );
        assert!(
            require_known("zs-not-in-the-table").is_ok(),
            "other programs are left to ip netns exec"
        );
        assert!(KNOWN_TOOLS
            .iter()
            .all(|(t, p)| !t.is_empty() && !p.is_empty()));
    }

    /// Needs root and iproute2/ethtool: the harness is for root-only tests.
    #[test]
    fn pair_is_reachable_and_everything_is_removed_on_drop() {
        let (ns_name, ifname);
        {
            let a = NetNs::new("zsb").expect("netns a (needs root)");
            let b = NetNs::new("zsb").expect("netns b");
            let pair = VethPair::create(&a, &b, 1500).expect("veth pair");
            assert!(pair.a.ifname.len() <= 15 && pair.b.ifname.len() <= 15);
            assert_eq!(u32::from(pair.b.addr) - u32::from(pair.a.addr), 1);
            assert_eq!(pair.a.addr.octets()[0..2], [198, 18]);
            let link = a
                .exec_ok("ip", ["-o", "link", "show", "dev", &pair.a.ifname])
                .expect("link");
            let link = String::from_utf8_lossy(&link.stdout).to_string();
            assert!(link.contains(&pair.a.mac_string()), "{link}");
            assert!(link.contains("mtu 1500") && link.contains("UP"), "{link}");
            let features = a
                .exec_ok("ethtool", ["-k", &pair.a.ifname])
                .expect("ethtool -k");
            let features = String::from_utf8_lossy(&features.stdout).to_string();
            assert!(features.contains("tx-checksumming: off"), "{features}");
            let out = b
                .exec_timeout(
                    "ping",
                    ["-c", "1", "-W", "2", &pair.a.addr.to_string()],
                    Duration::from_secs(10),
                )
                .expect("ping runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
            ns_name = a.name().to_owned();
            ifname = pair.a.ifname.clone();
        }
        let list = run("ip", ["netns", "list"]).expect("ip netns list");
        let list = String::from_utf8_lossy(&list.stdout).to_string();
        assert!(!list.contains(&ns_name), "{ns_name} still exists: {list}");
        let host = run("ip", ["-o", "link"]).expect("ip link");
        assert!(!String::from_utf8_lossy(&host.stdout).contains(&ifname));
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
            let features = ns
                .exec_ok("ethtool", ["-k", &end.ifname])
                .expect("ethtool -k");
            let features = String::from_utf8_lossy(&features.stdout).to_string();
            assert!(features.contains("tx-checksumming: on"), "{features}");
        }
    }

    /// Needs root: `spawn` and `exec` run inside the namespace (a fresh one
    /// has only `lo`), and a spawned child can be killed.
    #[test]
    fn exec_and_spawn_run_inside_the_namespace() {
        let ns = NetNs::new("zsb").expect("netns (needs root)");
        let out = ns
            .exec_ok("ip", ["-o", "link", "show"])
            .expect("ip link in netns");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains(": lo:"), "{text}");

        let child = ns.spawn("ip", ["-o", "link", "show"]).expect("spawn");
        let out = child.wait_with_output().expect("wait");
        assert_eq!(String::from_utf8_lossy(&out.stdout), text);

        let mut sleeper = ns.spawn("sleep", ["30"]).expect("spawn sleep");
        sleeper.kill().expect("kill");
        let status = sleeper.wait().expect("wait");
        assert!(!status.success());

        let failed = ns
            .exec_ok("ip", ["link", "show", "dev", "zs-absent0"])
            .expect_err("no such device");
        assert!(matches!(failed, HarnessError::Failed { .. }), "{failed}");
        assert!(failed.to_string().contains("zs-absent0"), "{failed}");
    }

    #[test]
    fn mac_formatting() {
        assert_eq!(
            mac_string([0x02, 0x5a, 0, 0x10, 1, 0xff]),
            "02:5a:00:10:01:ff"
        );
    }
}
