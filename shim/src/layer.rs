//! The seam between the shim's C side and its logic: the calls of the C
//! socket interface in safe types ([`SocketLayer`]), which `Shim`
//! implements and the C side (`cabi`) calls for descriptors the layer
//! owns.

use std::ffi::{c_int, c_ulong};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use libc::{epoll_event, pollfd, sigset_t};

/// An errno value.
pub type Errno = c_int;
/// A call's result: a value or an errno.
pub type CResult<T> = Result<T, Errno>;

/// The most descriptors a `select` set covers: `fs.nr_open`'s default,
/// the most a process can have unless it is raised (Linux clamps `nfds`
/// at its descriptor table's size, which never exceeds it).
pub const SELECT_MAX_FDS: usize = 1 << 20;

/// The 64-bit words of an `fd_set` that `nfds` descriptors take. That is
/// all a caller's set must have: select(2) examines `nfds` bits, and Linux
/// reads and writes the whole words they fall in, however far short of
/// `FD_SETSIZE` the set is (`calloc(howmany(maxfd + 1, NFDBITS), …)`,
/// Perl's bit strings).
pub const fn fd_set_words(nfds: usize) -> usize {
    nfds.div_ceil(64)
}

/// What the shim implements; the C side's handlers dispatch to it. Methods
/// that return `Option` may answer `None`: "not mine, let the C library do
/// it".
pub trait SocketLayer: Sync {
    /// Whether `fd` is one of the layer's sockets. Called on every `read`
    /// and `write` of the process, so it must be cheap and lock-free.
    fn owns(&self, fd: RawFd) -> bool;
    /// Whether the layer wants to hear about `fd` being closed or
    /// duplicated (a kernel socket it may still claim, an epoll instance
    /// holding its sockets). Lock-free too.
    fn watches(&self, fd: RawFd) -> bool;
    /// The C library created socket `fd`.
    fn on_socket(&self, fd: RawFd, domain: c_int, ty: c_int, protocol: c_int);
    /// `fd` (owned or watched) is about to be closed (`close`,
    /// `close_range`, `closefrom`, `fclose`), or was replaced by
    /// `dup2`/`dup3`.
    fn on_close(&self, fd: RawFd);
    /// The descriptors in `first..=last` the layer owns or watches, in
    /// order (for `close_range` and `closefrom`).
    fn marked(&self, first: RawFd, last: RawFd) -> Vec<RawFd>;
    /// `fork` is about to run: no other thread of the layer's may be
    /// inside its table while the child's copy is made.
    fn before_fork(&self);
    /// `fork` returned `pid` (0 in the child, the child's pid in the
    /// parent, -1 if it failed); called in both processes.
    fn after_fork(&self, pid: libc::pid_t);
    /// `execve` is about to run: the environment entry that carries the
    /// sockets surviving it into the new program (`NAME=value`), if any.
    fn before_exec(&self) -> Option<String> {
        None
    }
    /// `execve` returned: it failed, the program goes on.
    fn exec_failed(&self) {}
    /// The C library duplicated `old` (owned or watched) as `new`.
    fn on_dup(&self, old: RawFd, new: RawFd);
    /// `bind`; `addr` is `None` for anything but IPv4 and IPv6.
    fn bind(&self, fd: RawFd, addr: Option<SocketAddr>) -> Option<CResult<()>>;
    /// `listen`.
    fn listen(&self, fd: RawFd, backlog: c_int) -> Option<CResult<()>>;
    /// `connect`; `addr` is `None` for anything but IPv4 and IPv6.
    fn connect(&self, fd: RawFd, addr: Option<SocketAddr>) -> Option<CResult<()>>;
    /// `accept4` on an owned listener: the new fd and the peer.
    fn accept(&self, fd: RawFd, flags: c_int) -> CResult<(RawFd, SocketAddr)>;
    /// The C library's `accept4` on `fd` (not owned) returned a
    /// connection.
    fn kernel_accepted(&self, fd: RawFd) {
        let _ = fd;
    }
    /// `sendto` or `sendmsg` with `MSG_FASTOPEN` on `fd` (not owned) to
    /// `addr`: an error fails the call, `Ok` lets the C library do it.
    fn fast_open(&self, fd: RawFd, addr: Option<SocketAddr>) -> CResult<()> {
        let _ = (fd, addr);
        Ok(())
    }
    /// `recvmsg` into `bufs` (scatter) on an owned socket.
    fn recv(&self, fd: RawFd, bufs: &mut [&mut [u8]], flags: c_int) -> CResult<usize>;
    /// `sendmsg` from `bufs` (gather) on an owned socket.
    fn send(&self, fd: RawFd, bufs: &[&[u8]], flags: c_int) -> CResult<usize>;
    /// `sendfile` to an owned socket: at most `count` bytes of file
    /// `input` from offset `at` (its position if `None`, which then moves
    /// by what was sent); the bytes sent.
    fn sendfile(&self, out: RawFd, input: RawFd, at: Option<i64>, count: usize) -> CResult<usize>;
    /// `shutdown` on an owned socket.
    fn shutdown(&self, fd: RawFd, how: c_int) -> CResult<()>;
    /// `getsockname` on an owned socket.
    fn local_addr(&self, fd: RawFd) -> CResult<SocketAddr>;
    /// `getpeername` on an owned socket.
    fn peer_addr(&self, fd: RawFd) -> CResult<SocketAddr>;
    /// `fcntl` with an integer (or no) argument on an owned socket.
    fn fcntl(&self, fd: RawFd, cmd: c_int, arg: c_int) -> CResult<c_int>;
    /// `ioctl` with an `int *` argument on an owned socket.
    fn ioctl(&self, fd: RawFd, request: c_ulong, arg: &mut c_int) -> CResult<c_int>;
    /// `setsockopt` on an owned socket.
    fn setsockopt(&self, fd: RawFd, level: c_int, name: c_int, value: &[u8]) -> CResult<()>;
    /// `getsockopt` on an owned socket; the length written.
    fn getsockopt(&self, fd: RawFd, level: c_int, name: c_int, out: &mut [u8]) -> CResult<usize>;
    /// `ppoll` (`timeout` `None`: forever).
    fn poll(
        &self,
        fds: &mut [pollfd],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
    ) -> Option<CResult<usize>>;
    /// `pselect`: the read, write and except sets over `nfds` descriptors,
    /// each [`fd_set_words`]`(nfds)` words (copies of the caller's sets,
    /// written back only on success).
    fn select(
        &self,
        nfds: c_int,
        sets: [Option<&mut [u64]>; 3],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
    ) -> Option<CResult<usize>>;
    /// `epoll_ctl`.
    fn epoll_ctl(
        &self,
        epfd: RawFd,
        op: c_int,
        fd: RawFd,
        event: Option<epoll_event>,
    ) -> Option<CResult<()>>;
    /// `epoll_pwait`.
    fn epoll_wait(
        &self,
        epfd: RawFd,
        events: &mut [epoll_event],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
    ) -> Option<CResult<usize>>;
}
