//! Moving the calling thread into a named network namespace and back.
//!
//! This module owns the crate's only `setns(2)` call. Network namespaces
//! are per thread (a `setns` with `CLONE_NEWNET` affects only the calling
//! thread), which lets a test thread attach XDP programs and open sockets
//! inside a namespace created by `ip netns add` while the rest of the
//! process stays where it was. Needs `CAP_SYS_ADMIN`; Linux ≥ 3.0
//! (`setns`), ≥ 3.17 for `/proc/thread-self`.
//!
//! Interface names are per namespace too, so the name → index lookup
//! ([`ifindex`]) lives here: it resolves in the calling thread's namespace.

use std::{
    fs::File,
    io,
    marker::PhantomData,
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    path::Path,
};

use super::syscall::{check, check_nonzero};

/// Where `ip netns add NAME` places the namespace handle.
const NETNS_RUN_DIR: &str = "/var/run/netns";

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
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("netns name {name:?} is not a plain file name"),
            ));
        }
        let original = open_ns(Path::new("/proc/thread-self/ns/net"))?;
        let target = open_ns(&Path::new(NETNS_RUN_DIR).join(name))?;
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

/// The index of interface `name` in the calling thread's network namespace.
///
/// # Errors
///
/// `InvalidInput` if `name` contains a NUL byte; `NotFound` (ENODEV) if no
/// interface has that name in this namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c_name = std::ffi::CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} contains a NUL byte"),
        )
    })?;
    // SAFETY: `c_name` is a valid NUL-terminated string that outlives the
    // call; if_nametoindex only reads it.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    check_nonzero(index, "if_nametoindex").map_err(|e| {
        let kind = if e.errno() == Some(libc::ENODEV) {
            io::ErrorKind::NotFound
        } else {
            e.source.kind()
        };
        io::Error::new(kind, format!("interface {name:?}: {e}"))
    })
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
    fn loopback_has_an_index_and_unknown_names_are_not_found() {
        assert!(ifindex("lo").expect("every namespace has lo") > 0);
        let err = ifindex("zs-nope0").expect_err("no such interface");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("zs-nope0"), "{err}");
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
