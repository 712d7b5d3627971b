//! Safe calls of the C library's own functions, for the layer's work on
//! descriptors it manages: the kernel socket behind each of its fds, the
//! kernel fds of a mixed poll set, the epoll instances that hold its
//! sockets. Descriptors are plain numbers here because the C program owns
//! them; the layer passes only descriptors the program gave it or that
//! these calls created.

use std::ffi::{c_int, c_ulong};
use std::mem::size_of;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use libc::{epoll_event, pollfd, sigset_t, socklen_t, timespec};

use super::check;
use super::next;
use super::ptr::{read_addr, sockaddr_in, sockaddr_in6};
use crate::layer::CResult;

/// `socket(2)`.
///
/// # Errors
/// The errno.
pub fn socket(domain: c_int, ty: c_int, protocol: c_int) -> CResult<RawFd> {
    // SAFETY: no pointers.
    check(unsafe { next::socket(domain, ty, protocol) })
}

/// `close(2)`.
pub fn close(fd: RawFd) {
    // SAFETY: no pointers; the layer closes only descriptors it made.
    unsafe { next::close(fd) };
}

/// `bind(2)` to an IPv4 or IPv6 address.
///
/// # Errors
/// The errno.
pub fn bind(fd: RawFd, a: SocketAddr) -> CResult<()> {
    let r = match &a {
        SocketAddr::V4(a) => {
            let sin = sockaddr_in(a);
            // SAFETY: `sin` is a live sockaddr_in of the length passed.
            unsafe {
                next::bind(
                    fd,
                    (&raw const sin).cast(),
                    size_of::<libc::sockaddr_in>() as socklen_t,
                )
            }
        }
        SocketAddr::V6(a) => {
            let sin6 = sockaddr_in6(a);
            // SAFETY: `sin6` is a live sockaddr_in6 of the length passed.
            unsafe {
                next::bind(
                    fd,
                    (&raw const sin6).cast(),
                    size_of::<libc::sockaddr_in6>() as socklen_t,
                )
            }
        }
    };
    check(r).map(|_| ())
}

/// `getsockname(2)` of an IPv4 or IPv6 socket.
///
/// # Errors
/// The errno, or `EAFNOSUPPORT` for another family.
pub fn local_addr(fd: RawFd) -> CResult<SocketAddr> {
    // The larger of the two; an IPv4 name fills its first bytes.
    let mut sin6 = sockaddr_in6(&SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0));
    let mut len = size_of::<libc::sockaddr_in6>() as socklen_t;
    // SAFETY: `sin6` has `len` writable bytes; `len` is writable.
    check(unsafe { next::getsockname(fd, (&raw mut sin6).cast(), &mut len) })?;
    // A longer name (a Unix socket's) was cut to the buffer: `len` says
    // its full length, the buffer holds at most its own.
    let len = len.min(size_of::<libc::sockaddr_in6>() as socklen_t);
    // SAFETY: `sin6` is live and initialised, and has the `len` bytes
    // named (at most its size).
    unsafe { read_addr((&raw const sin6).cast(), len) }.ok_or(libc::EAFNOSUPPORT)
}

/// The socket's family (`SO_DOMAIN`).
///
/// # Errors
/// The errno (`ENOTSOCK` for another kind of descriptor).
pub fn domain(fd: RawFd) -> CResult<c_int> {
    let mut v = [0u8; 4];
    getsockopt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN, &mut v)?;
    Ok(c_int::from_ne_bytes(v))
}

/// Whether IPv6 socket `fd` is IPv6-only (`IPV6_V6ONLY`): it takes no
/// IPv4 peers.
pub fn v6_only(fd: RawFd) -> bool {
    let mut v = [0u8; 4];
    getsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &mut v)
        .is_ok_and(|_| c_int::from_ne_bytes(v) != 0)
}

/// `fcntl(2)` with an integer argument.
///
/// # Errors
/// The errno.
pub fn fcntl(fd: RawFd, cmd: c_int, arg: c_int) -> CResult<c_int> {
    // SAFETY: integer commands only (the layer's).
    check(unsafe { next::fcntl(fd, cmd, arg as c_ulong) })
}

/// `dup3`-like: duplicates `fd` as the lowest free descriptor
/// (`F_DUPFD_CLOEXEC` when `cloexec`).
///
/// # Errors
/// The errno.
pub fn dup(fd: RawFd, cloexec: bool) -> CResult<RawFd> {
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    fcntl(fd, cmd, 0)
}

/// `setsockopt(2)`.
///
/// # Errors
/// The errno.
pub fn setsockopt(fd: RawFd, level: c_int, name: c_int, value: &[u8]) -> CResult<()> {
    // SAFETY: `value` is live for the call and its length is passed.
    check(unsafe {
        next::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as socklen_t,
        )
    })
    .map(|_| ())
}

/// `getsockopt(2)`; the length written.
///
/// # Errors
/// The errno.
pub fn getsockopt(fd: RawFd, level: c_int, name: c_int, out: &mut [u8]) -> CResult<usize> {
    let mut len = out.len() as socklen_t;
    // SAFETY: `out` has `len` writable bytes; `len` is writable.
    check(unsafe { next::getsockopt(fd, level, name, out.as_mut_ptr().cast(), &mut len) })?;
    Ok(len as usize)
}

/// `ppoll(2)` over kernel descriptors.
///
/// # Errors
/// The errno (`EINTR` included).
pub fn ppoll(
    fds: &mut [pollfd],
    timeout: Option<Duration>,
    sigmask: Option<&sigset_t>,
) -> CResult<usize> {
    let ts = timeout.map(|d| timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tp = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    let mp = sigmask.map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: `fds` is a live slice of pollfds; `tp`/`mp` null or live.
    check(unsafe { next::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, tp, mp) })
        .map(|n| n as usize)
}

/// `epoll_pwait(2)`.
///
/// # Errors
/// The errno (`EINTR` included).
pub fn epoll_wait(
    epfd: RawFd,
    events: &mut [epoll_event],
    timeout: Option<Duration>,
    sigmask: Option<&sigset_t>,
) -> CResult<usize> {
    let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as c_int);
    let mp = sigmask.map_or(std::ptr::null(), std::ptr::from_ref);
    let max = events.len().min(i32::MAX as usize) as c_int;
    // SAFETY: `events` has `max` writable entries; `mp` null or live.
    check(unsafe { next::epoll_pwait(epfd, events.as_mut_ptr(), max, ms, mp) }).map(|n| n as usize)
}

/// `write(2)` of all of `b` to a kernel descriptor (best effort).
pub fn write(fd: RawFd, b: &[u8]) {
    // SAFETY: `b` is live for the call and its length is passed.
    unsafe { next::write(fd, b.as_ptr().cast(), b.len()) };
}

/// `raise(SIGPIPE)`, as a write to a closed socket does without
/// `MSG_NOSIGNAL`.
pub fn raise_sigpipe() {
    // SAFETY: no pointers.
    unsafe { libc::raise(libc::SIGPIPE) };
}

/// Calls `f` when the process exits through `exit` (or returns from
/// `main`).
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: a plain function pointer that lives forever.
    unsafe { libc::atexit(f) };
}

/// Calls `child` in the child process after every `fork` (it must only
/// touch atomics and this thread's own state).
pub fn at_fork_child(child: extern "C" fn()) {
    // SAFETY: a plain function pointer that lives forever.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// A pipe, both ends close-on-exec: (read end, write end).
///
/// # Errors
/// The errno.
pub fn pipe() -> CResult<(OwnedFd, OwnedFd)> {
    let mut fds: [c_int; 2] = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded: both are new descriptors nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `read(2)` from a kernel descriptor into `b`.
///
/// # Errors
/// The errno.
pub fn read(fd: RawFd, b: &mut [u8]) -> CResult<usize> {
    // SAFETY: `b` is live and writable for the call and its length passed.
    let n = unsafe { next::read(fd, b.as_mut_ptr().cast(), b.len()) };
    if n < 0 {
        Err(super::errno())
    } else {
        Ok(n as usize)
    }
}

/// Puts a new eventfd (non-blocking, close-on-exec, as the stack makes
/// them) at descriptor number `fd`, in place of the one there: a forked
/// child's own wakeup instead of the one it shares with its parent.
///
/// # Errors
/// The errno.
pub fn renew_eventfd(fd: RawFd) -> CResult<()> {
    // SAFETY: no pointers.
    let new = check(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: no pointers; `fd` is the stack's own descriptor, replaced
    // atomically.
    let r = check(unsafe { next::dup3(new, fd, libc::O_CLOEXEC) });
    // SAFETY: `new` is ours and no longer needed (its copy is at `fd`).
    unsafe { next::close(new) };
    r.map(|_| ())
}

/// `pread(2)` of a kernel descriptor into `b` at `offset`.
///
/// # Errors
/// The errno.
pub fn pread(fd: RawFd, b: &mut [u8], offset: i64) -> CResult<usize> {
    // SAFETY: `b` is live and writable for the call and its length passed.
    let n = unsafe { libc::pread(fd, b.as_mut_ptr().cast(), b.len(), offset) };
    if n < 0 {
        Err(super::errno())
    } else {
        Ok(n as usize)
    }
}

/// `lseek(2)` of a kernel descriptor; the new position.
///
/// # Errors
/// The errno.
pub fn lseek(fd: RawFd, offset: i64, whence: c_int) -> CResult<i64> {
    // SAFETY: no pointers.
    let r = unsafe { libc::lseek(fd, offset, whence) };
    if r < 0 {
        Err(super::errno())
    } else {
        Ok(r)
    }
}
