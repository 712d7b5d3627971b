//! RAII network namespaces for tests and benchmarks (the veth pairs
//! between them are in [`crate::veth`]).
//!
//! No outside program is involved: namespaces are created and deleted as
//! `ip netns add`/`del` do it ([`crate::create_netns`]: an unshared
//! thread's namespace bind-mounted on `/var/run/netns/<name>`), links and
//! addresses are made over rtnetlink ([`LinkSetup`]), TX checksum
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
    io,
    net::{Ipv4Addr, Ipv6Addr},
    os::fd::AsFd,
    process::{Child, Command, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    thread,
    time::Duration,
};

use datapath::rtnl::{Link, Rtnl};

use crate::error::HarnessError;
use crate::exec::{checked, describe, output_within, require_known, EXEC_TIMEOUT};
use crate::rtnl::{LinkSetup, VethSpec};
use crate::sys::ethtool::{self, Offload};
use crate::sys::netns as kernel;

/// Per-process counter that makes namespace and interface names unique.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

pub(crate) fn next_id() -> u32 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
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
        kernel::create_named(&name)
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

    /// Turns IPv6 on for `ifname` (namespaces start with it off: see
    /// [`NetNs::new`]) without duplicate address detection, and adds
    /// `addr/prefix` to it, usable at once (`ip -6 addr add ADDR/PREFIX
    /// dev IF nodad`). Tests use the benchmarking prefix `2001:2::/48`
    /// (RFC 5180), IPv6's `198.18.0.0/15`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`].
    pub fn add_ipv6(&self, ifname: &str, addr: Ipv6Addr, prefix: u8) -> Result<(), HarnessError> {
        self.run(&format!("adding {addr}/{prefix} to {ifname}"), || {
            let conf = format!("/proc/sys/net/ipv6/conf/{ifname}");
            std::fs::write(format!("{conf}/accept_dad"), "0")?;
            std::fs::write(format!("{conf}/disable_ipv6"), "0")?;
            Rtnl::open()?.add_ipv6(ifname, addr, prefix)
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
                ethtool::set_offload(ifname, offload, on)?;
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
            || ethtool::offload(ifname, offload),
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
        let peer_fd = kernel::open_named(peer.name()).map_err(HarnessError::kernel(format!(
            "opening netns {}",
            peer.name()
        )))?;
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
            let _guard = kernel::NetnsGuard::enter(netns)?;
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
    kernel::command_in_named_netns(&mut cmd, netns);
    cmd
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = kernel::delete_named(&self.name) {
            log::error!("cleaning up netns {}: {e}", self.name);
        }
    }
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
            let _guard = kernel::NetnsGuard::enter(name)
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
}
