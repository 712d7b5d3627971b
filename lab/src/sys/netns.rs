//! Named network namespaces: creating and deleting them the way
//! `ip netns add`/`ip netns del` do, moving the calling thread into one and
//! back, and making a child process start inside one.
//!
//! This module owns the workspace's only `setns(2)`, `unshare(2)` and
//! `mount(2)` calls. Network namespaces
//! are per thread (a `setns` with `CLONE_NEWNET` affects only the calling
//! thread), which lets a test thread attach XDP programs and open sockets
//! inside a namespace created by `ip netns add` while the rest of the
//! process stays where it was. Needs `CAP_SYS_ADMIN`; Linux ≥ 3.0
//! (`setns`), ≥ 3.17 for `/proc/thread-self`.
//!
//! Interface names are per namespace too: `datapath::iface::ifindex`
//! resolves a name in the calling thread's namespace.

use std::{
    ffi::CString,
    fs::{File, OpenOptions},
    io,
    marker::PhantomData,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
        unix::{
            ffi::OsStrExt,
            fs::{DirBuilderExt, OpenOptionsExt},
            process::CommandExt,
        },
    },
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

use super::check;

/// Where `ip netns add NAME` places the namespace handle.
pub const NETNS_RUN_DIR: &str = "/var/run/netns";

/// The calling thread is inside the namespace `name` while this guard
/// lives; dropping it moves the thread back to the namespace it had before.
///
/// The guard is neither `Send` nor `Sync`: it must be dropped on the thread
/// that created it.
#[derive(Debug)]
pub struct NetnsGuard {
    original: File,
    name: String,
    /// Ties the guard to its thread.
    _not_send: PhantomData<*const ()>,
}

impl NetnsGuard {
    /// Moves the calling thread into `/var/run/netns/<name>`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if `name` is empty or contains `/` or is `.`/`..`;
    /// the `open` error (with the path) if the namespace or the thread's
    /// own namespace handle cannot be opened; the `setns` error (e.g.
    /// `EPERM` without `CAP_SYS_ADMIN`).
    pub fn enter(name: &str) -> io::Result<Self> {
        let path = netns_path(name)?;
        let original = open_ns(Path::new("/proc/thread-self/ns/net"))?;
        let target = open_ns(&path)?;
        set_net_ns(target.as_fd())
            .map_err(|e| io::Error::new(e.kind(), format!("setns into netns {name:?}: {e}")))?;
        Ok(Self {
            original,
            name: name.to_owned(),
            _not_send: PhantomData,
        })
    }

    /// The name of the namespace the thread is in.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Err(e) = set_net_ns(self.original.as_fd()) {
            // Staying in the wrong namespace would silently misdirect every
            // later socket and attach of this thread: make it loud.
            log::error!("leaving netns {:?}: setns back failed: {e}", self.name);
            if !std::thread::panicking() {
                panic!("leaving netns {:?}: setns back failed: {e}", self.name);
            }
        }
    }
}

fn open_ns(path: &Path) -> io::Result<File> {
    File::open(path).map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))
}

/// `/var/run/netns/<name>`, after checking that `name` is a plain file name.
fn netns_path(name: &str) -> io::Result<PathBuf> {
    if name.is_empty() || name.contains('/') || name.contains('\0') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("netns name {name:?} is not a plain file name"),
        ));
    }
    Ok(Path::new(NETNS_RUN_DIR).join(name))
}

/// Opens the handle of the named namespace `/var/run/netns/<name>`
/// (close-on-exec), e.g. for [`command_in_netns`] or for moving a link
/// there.
///
/// # Errors
///
/// As [`NetnsGuard::enter`]'s name check and `open`.
pub fn open_named(name: &str) -> io::Result<OwnedFd> {
    Ok(open_ns(&netns_path(name)?)?.into())
}

/// Creates the network namespace `name` as `ip netns add` does: an empty
/// file `/var/run/netns/<name>` with the namespace of a short-lived thread
/// that `unshare(CLONE_NEWNET)`ed bind-mounted on it. The namespace lives
/// as long as that mount; [`delete_named`] removes it. The new namespace
/// has only a `lo` that is down.
///
/// `/var/run/netns` is created if missing and made a shared mount point
/// (bind-mounted on itself first when it is not a mount point), like
/// iproute2 does, so that mounts under it are seen by `ip netns exec` and
/// other mount namespaces.
///
/// # Errors
///
/// `InvalidInput` for a bad name, `AlreadyExists` when the file exists;
/// otherwise the failing call (`mkdir`, `mount`, `unshare`) with its
/// errno — `unshare(CLONE_NEWNET)` failing with `EINVAL` means a kernel
/// built without `CONFIG_NET_NS`, `EPERM` a process without
/// `CAP_SYS_ADMIN`.
pub fn create_named(name: &str) -> io::Result<()> {
    let path = netns_path(name)?;
    prepare_run_dir()?;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("create {}: {e}", path.display())))?;
    let bound = std::thread::scope(|s| {
        s.spawn(|| -> io::Result<()> {
            // The thread exits right after: its namespace lives on only
            // through the bind mount.
            unshare_net().map_err(|e| {
                let hint = if e.raw_os_error() == Some(libc::EINVAL) {
                    " (kernel built without network namespaces, CONFIG_NET_NS)"
                } else if e.raw_os_error() == Some(libc::EPERM) {
                    " (needs CAP_SYS_ADMIN: run as root)"
                } else {
                    ""
                };
                io::Error::new(e.kind(), format!("unshare(CLONE_NEWNET): {e}{hint}"))
            })?;
            mount_named(
                Some(Path::new("/proc/thread-self/ns/net")),
                &path,
                libc::MS_BIND,
            )
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("netns creation thread panicked")))
    });
    if let Err(e) = bound {
        let _ = std::fs::remove_file(&path);
        return Err(io::Error::new(
            e.kind(),
            format!("creating netns {name:?}: {e}"),
        ));
    }
    Ok(())
}

/// Deletes the namespace `name` as `ip netns del` does: detaches the bind
/// mount (the namespace goes away with its last user) and removes the file.
///
/// # Errors
///
/// `InvalidInput` for a bad name; the `unlink` error (`NotFound` when there
/// is no such namespace).
pub fn delete_named(name: &str) -> io::Result<()> {
    let path = netns_path(name)?;
    // EINVAL (not a mount point) still lets the file go.
    let _ = umount_detach(&path);
    std::fs::remove_file(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("remove {}: {e}", path.display())))
}

/// Makes `cmd` start inside the namespace `ns` (a handle from
/// [`open_named`] or `/proc/<pid>/ns/net`): the child calls
/// `setns(ns, CLONE_NEWNET)` between `fork` and `exec`. `ns` is kept open
/// by `cmd` (close-on-exec, so the program does not inherit it).
pub fn command_in_netns(cmd: &mut Command, ns: OwnedFd) {
    let hook = move || -> io::Result<()> {
        // SAFETY: `ns` is owned by the closure, so the descriptor is open;
        // setns only reads it and changes the calling thread's namespace.
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc < 0 {
            // Reads errno only: no allocation.
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: the hook runs in the forked child, where only
    // async-signal-safe work is allowed: it makes one raw syscall (setns)
    // and reads errno, taking no lock and allocating nothing; the
    // descriptor it uses is owned by the hook and stays open until exec
    // (close-on-exec closes it there).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Makes `cmd` start inside the named namespace `/var/run/netns/<name>`
/// ([`command_in_netns`] with [`open_named`]). When the namespace cannot be
/// opened, spawning `cmd` fails with that error (its errno) instead.
pub fn command_in_named_netns(cmd: &mut Command, name: &str) {
    match open_named(name) {
        Ok(fd) => command_in_netns(cmd, fd),
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(libc::ENOENT);
            // SAFETY: the hook runs in the forked child and only builds an
            // error from an integer (no allocation, no lock), which is
            // async-signal-safe.
            unsafe {
                cmd.pre_exec(move || Err(io::Error::from_raw_os_error(errno)));
            }
        }
    }
}

/// Whether `/var/run/netns` is already a shared mount point in this process.
static RUN_DIR_READY: Mutex<bool> = Mutex::new(false);

/// `mkdir -p /var/run/netns` and make it a shared mount point, as
/// iproute2's `netns_add` does; once per process.
fn prepare_run_dir() -> io::Result<()> {
    let mut ready = RUN_DIR_READY.lock().unwrap_or_else(|p| p.into_inner());
    if *ready {
        return Ok(());
    }
    let dir = Path::new(NETNS_RUN_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display())))?;
    // Two rounds at most: make-shared, and if the directory is not a mount
    // point yet (EINVAL), bind it on itself and try once more.
    let mut bound = false;
    loop {
        match mount(None, dir, libc::MS_SHARED | libc::MS_REC) {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && !bound => {
                mount_named(Some(dir), dir, libc::MS_BIND | libc::MS_REC)?;
                bound = true;
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("making {} a shared mount point: {e}", dir.display()),
                ))
            }
        }
    }
    *ready = true;
    Ok(())
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} contains a NUL byte", path.display()),
        )
    })
}

/// `mount(source, target, "none", flags, NULL)`; the error keeps the errno.
fn mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let source_c = source.map(c_path).transpose()?;
    let target_c = c_path(target)?;
    let fstype = c"none";
    // SAFETY: every pointer is either null (source when absent, data) or
    // points to a NUL-terminated string that outlives the call; mount only
    // reads them.
    let rc = unsafe {
        libc::mount(
            source_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            target_c.as_ptr(),
            fstype.as_ptr(),
            flags,
            std::ptr::null(),
        )
    };
    check(rc, "mount").map(|_| ()).map_err(io::Error::from)
}

/// [`mount`] with an error that names the call and its arguments.
fn mount_named(source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> io::Result<()> {
    mount(source, target, flags).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "mount({}, {}, flags {flags:#x}): {e}",
                source.map_or("none".into(), |s| s.display().to_string()),
                target.display()
            ),
        )
    })
}

/// `umount2(target, MNT_DETACH)`.
fn umount_detach(target: &Path) -> io::Result<()> {
    let target_c = c_path(target)?;
    // SAFETY: `target_c` is a NUL-terminated string that outlives the call;
    // umount2 only reads it.
    let rc = unsafe { libc::umount2(target_c.as_ptr(), libc::MNT_DETACH) };
    check(rc, "umount2").map(|_| ()).map_err(io::Error::from)
}

/// `unshare(CLONE_NEWNET)` for the calling thread.
fn unshare_net() -> io::Result<()> {
    // SAFETY: unshare takes a flag word and touches no memory of ours; with
    // CLONE_NEWNET alone it only moves the calling thread into a new
    // network namespace.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    check(rc, "unshare(CLONE_NEWNET)")
        .map(|_| ())
        .map_err(io::Error::from)
}

/// `setns(fd, CLONE_NEWNET)` for the calling thread.
fn set_net_ns(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `fd` is a valid open descriptor for the duration of the call
    // (the borrow guarantees it); setns only reads it and changes the
    // calling thread's namespace, touching no memory of ours.
    let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
    check(rc, "setns(CLONE_NEWNET)")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_names_that_are_paths() {
        for bad in ["", ".", "..", "a/b", "/var/run/netns/x"] {
            let err = NetnsGuard::enter(bad).expect_err(bad);
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn missing_namespace_is_not_found_and_names_the_path() {
        let err = NetnsGuard::enter("zs-no-such-ns-xyz").expect_err("must not exist");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string().contains("/var/run/netns/zs-no-such-ns-xyz"),
            "{err}"
        );
    }
}
