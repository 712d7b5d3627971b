//! [`Shim`]: which descriptors are ours, the stack started at the first
//! claim, and each call of the [`SocketLayer`] handed to the runtime (or
//! left to the C library: `None`).

use std::ffi::{c_int, c_ulong};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libc::{epoll_event, pollfd, sigset_t};

use crate::cabi::real;
use crate::fallback;
use crate::family::{self, Target};
use crate::layer::{CResult, SocketLayer};
use crate::log::{log_line, unsupported};
use crate::marks::FdMarks;
use crate::runtime::{self, Runtime};
use crate::setup::Setup;

/// The shim: a `static` of the preload library.
pub struct Shim {
    /// Our sockets.
    owned: FdMarks,
    /// Candidate kernel sockets and epoll instances that hold ours.
    watched: FdMarks,
    /// Listeners left to the kernel although the interface could serve
    /// them (their connections are counted: [`crate::fallback`]).
    fell_back: FdMarks,
    /// The environment's settings; `None`: the shim is off in this process.
    setup: OnceLock<Option<Setup>>,
    /// The stack, started at the first claim (or why it could not start).
    rt: OnceLock<Result<Arc<Runtime>, String>>,
    /// The sockets a program exec'd from left it were taken up (at the
    /// first call on a descriptor; see [`crate::exec`]).
    exec: OnceLock<()>,
}

impl std::fmt::Debug for Shim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shim")
            .field("setup", &self.setup)
            .finish_non_exhaustive()
    }
}

impl Default for Shim {
    fn default() -> Self {
        Self::new()
    }
}

/// The shim of this process, for the fork handler.
static FORKED: AtomicBool = AtomicBool::new(false);

/// A fork the shim did not prepare (the C library's own, in `daemon(3)`):
/// the child's sockets are left alone (the kernel's placeholders).
extern "C" fn in_forked_child() {
    if !crate::fork::prepared() {
        FORKED.store(true, Ordering::Release);
    }
}

/// The stack, for the exit handler.
static RUNNING: OnceLock<Arc<Runtime>> = OnceLock::new();

/// How long an exiting program waits for its connections' FINs to be
/// acknowledged.
const EXIT_DRAIN: Duration = Duration::from_secs(2);

/// At `exit`: closes every socket the program left open (the kernel would
/// after the process ended; here the stack ends with it) and gives the
/// FINs up to [`EXIT_DRAIN`] to be acknowledged.
extern "C" fn at_exit() {
    if FORKED.load(Ordering::Acquire) {
        return;
    }
    if let Some(rt) = RUNNING.get() {
        rt.drain_at_exit(EXIT_DRAIN);
    }
}

impl Shim {
    /// A shim that reads its settings from the environment on first use.
    pub const fn new() -> Self {
        Shim {
            owned: FdMarks::new(),
            watched: FdMarks::new(),
            fell_back: FdMarks::new(),
            setup: OnceLock::new(),
            rt: OnceLock::new(),
            exec: OnceLock::new(),
        }
    }

    fn live(&self) -> bool {
        !FORKED.load(Ordering::Acquire)
    }

    fn setup(&self) -> Option<&Setup> {
        self.setup.get_or_init(Setup::from_env).as_ref()
    }

    /// The running stack, starting it on first use.
    fn runtime(&self) -> CResult<&Arc<Runtime>> {
        let setup = self.setup().ok_or(libc::ENETDOWN)?;
        let rt = self.rt.get_or_init(|| Self::start(setup, None));
        rt.as_ref().map_err(|_| libc::ENETDOWN)
    }

    /// Starts the stack (`exec_of`: see [`Runtime::start`]) and says so.
    fn start(setup: &Setup, exec_of: Option<runtime::ExecOf<'_>>) -> Result<Arc<Runtime>, String> {
        let r = Runtime::start(setup, exec_of);
        match &r {
            Ok(rt) => {
                let _ = RUNNING.set(Arc::clone(rt));
                real::at_fork_child(in_forked_child);
                real::at_exit(at_exit);
                let mode = match &setup.daemon {
                    Some(path) => format!("attached to the daemon at {}", path.display()),
                    None => format!("standalone on queue {}", setup.queue),
                };
                log_line(&format!(
                    "TCP over {} ({}), {mode}",
                    setup.iface.name, setup.iface.ip
                ));
            }
            Err(e) => log_line(&format!("could not start the stack: {e}")),
        }
        r
    }

    /// In a program an `execve` started from one whose sockets live on:
    /// takes them up, once, before any call on a descriptor is served.
    /// Never on a thread working for the stack (starting it calls the
    /// C library, which comes back here).
    fn take_up_exec(&self) {
        self.exec.get_or_init(|| {
            let _own = runtime::StackOwn::enter();
            let Some(m) = crate::exec::Manifest::from_env() else {
                return;
            };
            let Some(setup) = self.setup().filter(|s| s.daemon.is_some()) else {
                return;
            };
            if self.rt.get().is_some() {
                return;
            }
            // Only a stack that took the sockets up is kept: a manifest
            // the daemon refuses (its attachment gone: a stale one passed
            // by an exec the shim did not see) leaves the program to start
            // a stack of its own at its first claim.
            let take_up = |st: &mut crate::sockets::State| st.take_up_exec(&m, &self.owned);
            if let Ok(rt) = Self::start(setup, Some((m.attachment, &take_up))) {
                let _ = self.rt.set(Ok(rt));
            }
        });
    }

    /// The running stack, if it started (never starts it).
    /// The IPv6 address the stack serves, if any (starting the stack: it
    /// is asked when an IPv6 socket is about to be claimed).
    fn served6(&self) -> Option<std::net::Ipv6Addr> {
        self.runtime().ok().and_then(|rt| rt.local_ip6())
    }

    fn started(&self) -> Option<&Arc<Runtime>> {
        self.rt.get().and_then(|r| r.as_ref().ok())
    }
}

impl SocketLayer for Shim {
    fn owns(&self, fd: RawFd) -> bool {
        // With the lock held, or on a thread working for the stack, a call
        // is the stack's own (never on a socket of the program's): the C
        // library's.
        if runtime::holds_lock() || runtime::stack_own() {
            return false;
        }
        self.take_up_exec();
        self.owned.get(fd) && self.live()
    }

    fn watches(&self, fd: RawFd) -> bool {
        if runtime::holds_lock() || runtime::stack_own() {
            return false;
        }
        self.take_up_exec();
        self.watched.get(fd) && self.live()
    }

    fn on_socket(&self, fd: RawFd, domain: c_int, ty: c_int, protocol: c_int) {
        let stream = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) == libc::SOCK_STREAM;
        // The stack's own sockets (the metrics endpoint's listener...) are
        // never candidates.
        if (domain == libc::AF_INET || domain == libc::AF_INET6)
            && stream
            && (protocol == 0 || protocol == libc::IPPROTO_TCP)
            && self.live()
            && !runtime::stack_own()
            && self.setup().is_some()
        {
            self.watched.set(fd, true);
        }
    }

    fn on_close(&self, fd: RawFd) {
        if runtime::holds_lock() {
            // The stack closing a descriptor of its own.
            self.owned.set(fd, false);
            self.watched.set(fd, false);
            self.fell_back.set(fd, false);
            return;
        }
        if let Some(rt) = self.started() {
            rt.forget_fd(fd, &self.owned);
        }
        self.owned.set(fd, false);
        self.watched.set(fd, false);
        self.fell_back.set(fd, false);
    }

    fn marked(&self, first: RawFd, last: RawFd) -> Vec<RawFd> {
        let mut out = Vec::new();
        if !self.live() || runtime::holds_lock() {
            return out;
        }
        if !runtime::stack_own() {
            self.take_up_exec();
        }
        let (Ok(first), Ok(last)) = (usize::try_from(first), usize::try_from(last)) else {
            return out;
        };
        self.owned.marked_in(first, last, &mut out);
        self.watched.marked_in(first, last, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    fn before_fork(&self) {
        if self.live() && !runtime::holds_lock() {
            if let Some(rt) = RUNNING.get() {
                rt.before_fork();
            }
        }
    }

    fn after_fork(&self, pid: libc::pid_t) {
        if let Some(rt) = RUNNING.get() {
            rt.after_fork(pid);
        }
    }

    fn before_exec(&self) -> Option<String> {
        if !self.live() || runtime::holds_lock() || runtime::stack_own() {
            return None;
        }
        // A program exec'd into that execs again at once passes its
        // sockets on too.
        self.take_up_exec();
        // The running stack is a `static`'s: the lock it keeps across
        // the exec borrows it for good.
        RUNNING.get()?.before_exec()
    }

    fn exec_failed(&self) {
        if let Some(rt) = self.started() {
            rt.exec_failed();
        }
    }

    fn on_dup(&self, old: RawFd, new: RawFd) {
        if runtime::holds_lock() {
            return;
        }
        if self.owned.get(old) {
            if let Some(rt) = self.started() {
                if rt.dup_fd(old, new) {
                    self.owned.set(new, true);
                }
            }
        } else if self.watched.get(old) {
            self.watched.set(new, true);
            self.fell_back.set(new, self.fell_back.get(old));
        }
    }

    fn bind(&self, fd: RawFd, addr: Option<SocketAddr>) -> Option<CResult<()>> {
        if self.owns(fd) {
            // Claimed sockets are listening or connected already.
            return Some(Err(libc::EINVAL));
        }
        let _ = addr;
        None
    }

    fn listen(&self, fd: RawFd, backlog: c_int) -> Option<CResult<()>> {
        if self.owns(fd) {
            let rt = self.started()?;
            return Some(rt.relisten(fd, backlog));
        }
        if !self.watches(fd) {
            return None;
        }
        let setup = self.setup()?;
        let bound = real::local_addr(fd).ok()?;
        let v6_only = bound.is_ipv6() && real::v6_only(fd);
        let (local, families) = match setup.listen_target(bound, v6_only, || self.served6()) {
            Target::Ours(listen) => listen,
            Target::Kernel => return None,
            Target::LeftToKernel(reason) => {
                let what = format!("listen on {bound}");
                return match fallback::left_to_kernel(reason, &what, setup.strict) {
                    Ok(()) => {
                        self.fell_back.set(fd, true);
                        None
                    }
                    Err(e) => Some(Err(e)),
                };
            }
        };
        // Port 0: an ephemeral port from the kernel, bound in the
        // socket's own family.
        let local = if local.port() == 0 {
            let port = real::bind(fd, bound).and_then(|()| real::local_addr(fd));
            match port {
                Ok(a) => SocketAddr::new(local.ip(), a.port()),
                Err(e) => return Some(Err(e)),
            }
        } else {
            local
        };
        Some(
            self.runtime().and_then(|rt| {
                rt.listen(fd, (local, families), backlog, &self.owned, &self.watched)
            }),
        )
    }

    fn connect(&self, fd: RawFd, addr: Option<SocketAddr>) -> Option<CResult<()>> {
        if self.owns(fd) {
            let rt = self.started()?;
            return Some(rt.reconnect(fd));
        }
        if !self.watches(fd) {
            return None;
        }
        let setup = self.setup()?;
        let remote = addr?;
        let v6 = real::domain(fd).ok()? == libc::AF_INET6;
        let v6_only = v6 && real::v6_only(fd);
        let serves6 = || self.served6().is_some();
        let remote = match setup.connect_target(remote, v6, v6_only, serves6) {
            Target::Ours(remote) => remote,
            Target::Kernel => return None,
            Target::LeftToKernel(reason) => {
                let what = format!("connect to {remote}");
                return match fallback::left_to_kernel(reason, &what, setup.strict) {
                    Ok(()) => {
                        fallback::over_kernel();
                        None
                    }
                    Err(e) => Some(Err(e)),
                };
            }
        };
        let r = self
            .runtime()
            .and_then(|rt| rt.connect(fd, remote, &self.owned, &self.watched));
        if matches!(r, Ok(()) | Err(libc::EINPROGRESS)) {
            fallback::over_zerosplit();
        }
        Some(r)
    }

    fn accept(&self, fd: RawFd, flags: c_int) -> CResult<(RawFd, SocketAddr)> {
        let rt = self.started().ok_or(libc::EBADF)?;
        let v6 = real::domain(fd)? == libc::AF_INET6;
        let (new, peer) = rt.accept(fd, flags, v6, &self.owned)?;
        if v6 && real::v6_only(fd) {
            // An accepted socket has its listener's IPV6_V6ONLY, as on
            // Linux; the placeholder answers for it.
            let _ = real::setsockopt(
                new,
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                &1i32.to_ne_bytes(),
            );
        }
        fallback::over_zerosplit();
        Ok((new, family::named(peer, v6)))
    }

    fn kernel_accepted(&self, fd: RawFd) {
        if self.fell_back.get(fd) {
            fallback::over_kernel();
        }
    }

    fn fast_open(&self, fd: RawFd, addr: Option<SocketAddr>) -> CResult<()> {
        let (Some(setup), Some(remote)) = (self.setup(), addr) else {
            return Ok(());
        };
        let v6 = real::domain(fd)? == libc::AF_INET6;
        let v6_only = v6 && real::v6_only(fd);
        match setup.connect_target(remote, v6, v6_only, || self.served6().is_some()) {
            Target::Kernel => Ok(()),
            Target::Ours(_) | Target::LeftToKernel(_) => {
                let reason = fallback::Reason::FastOpen;
                let what = format!("sendto with MSG_FASTOPEN to {remote}");
                fallback::left_to_kernel(reason, &what, setup.strict)?;
                fallback::over_kernel();
                Ok(())
            }
        }
    }

    fn recv(&self, fd: RawFd, bufs: &mut [&mut [u8]], flags: c_int) -> CResult<usize> {
        self.started().ok_or(libc::EBADF)?.recv(fd, bufs, flags)
    }

    fn send(&self, fd: RawFd, bufs: &[&[u8]], flags: c_int) -> CResult<usize> {
        self.started().ok_or(libc::EBADF)?.send(fd, bufs, flags)
    }

    fn sendfile(&self, out: RawFd, input: RawFd, at: Option<i64>, count: usize) -> CResult<usize> {
        let rt = self.started().ok_or(libc::EBADF)?;
        let start = match at {
            Some(at) => at,
            None => real::lseek(input, 0, libc::SEEK_CUR)?,
        };
        let n = rt.send_file(out, input, start, count)?;
        if at.is_none() {
            real::lseek(input, start + n as i64, libc::SEEK_SET)?;
        }
        Ok(n)
    }

    fn shutdown(&self, fd: RawFd, how: c_int) -> CResult<()> {
        self.started().ok_or(libc::EBADF)?.shutdown(fd, how)
    }

    fn local_addr(&self, fd: RawFd) -> CResult<SocketAddr> {
        let a = self.started().ok_or(libc::EBADF)?.addr(fd, false)?;
        Ok(family::named(a, real::domain(fd)? == libc::AF_INET6))
    }

    fn peer_addr(&self, fd: RawFd) -> CResult<SocketAddr> {
        let a = self.started().ok_or(libc::EBADF)?.addr(fd, true)?;
        Ok(family::named(a, real::domain(fd)? == libc::AF_INET6))
    }

    fn fcntl(&self, fd: RawFd, cmd: c_int, arg: c_int) -> CResult<c_int> {
        let rt = self.started().ok_or(libc::EBADF)?;
        match cmd {
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
                let new = real::fcntl(fd, cmd, arg)?;
                if rt.dup_fd(fd, new) {
                    self.owned.set(new, true);
                }
                Ok(new)
            }
            _ => rt.fcntl(fd, cmd, arg),
        }
    }

    fn ioctl(&self, fd: RawFd, request: c_ulong, arg: &mut c_int) -> CResult<c_int> {
        let rt = self.started().ok_or(libc::EBADF)?;
        match request {
            libc::FIONREAD => {
                *arg = rt.readable(fd)?.min(c_int::MAX as u64) as c_int;
                Ok(0)
            }
            libc::FIONBIO => {
                rt.set_nonblocking(fd, *arg != 0)?;
                Ok(0)
            }
            other => {
                unsupported(format!("ioctl request {other:#x} on a zerosplit socket"));
                Err(libc::ENOTTY)
            }
        }
    }

    fn setsockopt(&self, fd: RawFd, level: c_int, name: c_int, value: &[u8]) -> CResult<()> {
        self.started()
            .ok_or(libc::EBADF)?
            .setsockopt(fd, level, name, value)
    }

    fn getsockopt(&self, fd: RawFd, level: c_int, name: c_int, out: &mut [u8]) -> CResult<usize> {
        self.started()
            .ok_or(libc::EBADF)?
            .getsockopt(fd, level, name, out)
    }

    fn poll(
        &self,
        fds: &mut [pollfd],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
    ) -> Option<CResult<usize>> {
        let rt = self.started()?;
        Some(rt.poll(fds, timeout, sigmask, &self.owned))
    }

    fn select(
        &self,
        nfds: c_int,
        sets: [Option<&mut [u64]>; 3],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
    ) -> Option<CResult<usize>> {
        let rt = self.started()?;
        Some(rt.select(nfds, sets, timeout, sigmask, &self.owned))
    }

    fn epoll_ctl(
        &self,
        epfd: RawFd,
        op: c_int,
        fd: RawFd,
        event: Option<epoll_event>,
    ) -> Option<CResult<()>> {
        let rt = self.started()?;
        let r = rt.epoll_ctl(epfd, op, fd, event);
        if r.is_ok() {
            self.watched.set(epfd, true);
        }
        Some(r)
    }

    fn epoll_wait(
        &self,
        epfd: RawFd,
        events: &mut [epoll_event],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
    ) -> Option<CResult<usize>> {
        let rt = self.started()?;
        rt.epoll_wait(epfd, events, timeout, sigmask)
    }
}
