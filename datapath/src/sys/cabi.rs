//! The C side of the socket shim (`zerosplit exec`): the C library's own
//! socket functions, found with `dlsym(RTLD_NEXT, …)`, and the conversions
//! between a C caller's pointers and the safe types a [`SocketLayer`] takes.
//!
//! The preload library (`preload/`) exports `socket`, `read`, `epoll_wait`
//! and the rest under their C names; each is one line that hands its
//! arguments to the function of the same name here. This module asks the
//! layer whether the descriptor is one of its sockets ([`SocketLayer::owns`],
//! lock-free, so the pass-through costs an atomic load) and either calls
//! the C library's function or turns the pointers into slices and calls the
//! layer. Every pointer a C caller passes is trusted exactly as far as the
//! C function's contract says (`read(fd, buf, n)`: `buf` has `n` writable
//! bytes), and no further.
//!
//! [`real`] gives the layer safe wrappers over the C library's functions for
//! the descriptors it manages itself (the placeholder socket behind each
//! of its fds, kernel fds in a mixed poll set, the epoll instance).

use std::ffi::{c_int, c_ulong, c_void};
use std::mem::size_of;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use libc::{epoll_event, iovec, msghdr, pollfd, sigset_t, sockaddr, socklen_t, timespec, timeval};

/// An errno value.
pub type Errno = c_int;
/// A call's result: a value or an errno.
pub type CResult<T> = Result<T, Errno>;
/// An `fd_set` (`FD_SETSIZE` = 1024 bits) as words.
pub type FdBits = [u64; 16];

/// What the shim implements; the C functions here dispatch to it. Methods
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
    /// `fd` (owned or watched) is about to be closed, or replaced by
    /// `dup2`/`dup3`.
    fn on_close(&self, fd: RawFd);
    /// The C library duplicated `old` (owned or watched) as `new`.
    fn on_dup(&self, old: RawFd, new: RawFd);
    /// `bind`; `addr` is `None` for anything but IPv4.
    fn bind(&self, fd: RawFd, addr: Option<SocketAddrV4>) -> Option<CResult<()>>;
    /// `listen`.
    fn listen(&self, fd: RawFd, backlog: c_int) -> Option<CResult<()>>;
    /// `connect`; `addr` is `None` for anything but IPv4.
    fn connect(&self, fd: RawFd, addr: Option<SocketAddrV4>) -> Option<CResult<()>>;
    /// `accept4` on an owned listener: the new fd and the peer.
    fn accept(&self, fd: RawFd, flags: c_int) -> CResult<(RawFd, SocketAddrV4)>;
    /// `recvmsg` into `bufs` (scatter) on an owned socket.
    fn recv(&self, fd: RawFd, bufs: &mut [&mut [u8]], flags: c_int) -> CResult<usize>;
    /// `sendmsg` from `bufs` (gather) on an owned socket.
    fn send(&self, fd: RawFd, bufs: &[&[u8]], flags: c_int) -> CResult<usize>;
    /// `shutdown` on an owned socket.
    fn shutdown(&self, fd: RawFd, how: c_int) -> CResult<()>;
    /// `getsockname` on an owned socket.
    fn local_addr(&self, fd: RawFd) -> CResult<SocketAddrV4>;
    /// `getpeername` on an owned socket.
    fn peer_addr(&self, fd: RawFd) -> CResult<SocketAddrV4>;
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
    /// `pselect`: the read, write and except sets over `nfds` descriptors.
    fn select(
        &self,
        nfds: c_int,
        sets: [Option<&mut FdBits>; 3],
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

/// Finds `name` (NUL-terminated) in the libraries after this one.
fn lookup(name: &'static str) -> usize {
    // SAFETY: `name` is a NUL-terminated literal that lives forever;
    // RTLD_NEXT is a valid pseudo-handle for dlsym.
    let addr = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if addr == 0 {
        // The C library always has these; without one the process cannot
        // go on, and there is no caller to return an error to.
        let msg = b"zerosplit preload: a C library socket function is missing\n";
        // SAFETY: writes `msg`, which lives for the call, to stderr.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    addr
}

macro_rules! next_fns {
    ($($name:ident($($arg:ident: $t:ty),*) -> $ret:ty;)*) => {
        /// The C library's functions this module wraps, found on first use.
        mod next {
            use super::*;
            $(
                #[allow(clippy::too_many_arguments)]
                pub(super) unsafe fn $name($($arg: $t),*) -> $ret {
                    static ADDR: AtomicUsize = AtomicUsize::new(0);
                    let mut addr = ADDR.load(Ordering::Relaxed);
                    if addr == 0 {
                        addr = lookup(concat!(stringify!($name), "\0"));
                        ADDR.store(addr, Ordering::Relaxed);
                    }
                    // SAFETY: `addr` is the C library's function of this
                    // name, whose C prototype is the one written here.
                    let f: unsafe extern "C" fn($($t),*) -> $ret = unsafe { std::mem::transmute(addr) };
                    // SAFETY: the caller passes what the C function expects.
                    unsafe { f($($arg),*) }
                }
            )*
        }
    };
}

next_fns! {
    socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    listen(fd: c_int, backlog: c_int) -> c_int;
    accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    readv(fd: c_int, iov: *const iovec, cnt: c_int) -> isize;
    writev(fd: c_int, iov: *const iovec, cnt: c_int) -> isize;
    recvfrom(fd: c_int, buf: *mut c_void, n: usize, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> isize;
    recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> isize;
    sendto(fd: c_int, buf: *const c_void, n: usize, flags: c_int, addr: *const sockaddr, len: socklen_t) -> isize;
    sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> isize;
    shutdown(fd: c_int, how: c_int) -> c_int;
    close(fd: c_int) -> c_int;
    dup(fd: c_int) -> c_int;
    dup2(old: c_int, new: c_int) -> c_int;
    dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int;
    ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int;
    setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: socklen_t) -> c_int;
    getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut socklen_t) -> c_int;
    ppoll(fds: *mut pollfd, n: libc::nfds_t, timeout: *const timespec, sigmask: *const sigset_t) -> c_int;
    pselect(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *const timespec, sigmask: *const sigset_t) -> c_int;
    epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut epoll_event) -> c_int;
    epoll_pwait(epfd: c_int, events: *mut epoll_event, max: c_int, timeout: c_int, sigmask: *const sigset_t) -> c_int;
}

/// Sets the thread's `errno`.
fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The thread's `errno` after a C library call failed.
fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn ret_int(r: CResult<c_int>) -> c_int {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

fn ret_size(r: CResult<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn check(ret: c_int) -> CResult<c_int> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// An IPv4 socket address from a C `sockaddr`, if it is one.
///
/// # Safety
/// `addr` is null or points to `len` readable bytes.
unsafe fn read_addr(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddrV4> {
    if addr.is_null() || (len as usize) < size_of::<libc::sockaddr_in>() {
        return None;
    }
    // SAFETY: the caller's contract: `len` (at least a sockaddr_in's size)
    // readable bytes; read unaligned, as a caller's buffer may be.
    let sin = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in>()) };
    (c_int::from(sin.sin_family) == libc::AF_INET).then(|| {
        SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
            u16::from_be(sin.sin_port),
        )
    })
}

/// Writes `a` as a `sockaddr_in` into a C caller's `addr`/`len` pair
/// (truncated to `*len`, which then says the full length), as `accept`
/// and `getsockname` do.
///
/// # Safety
/// `addr` and `len` are null, or `len` points to a writable `socklen_t`
/// and `addr` to `*len` writable bytes.
unsafe fn write_addr(addr: *mut sockaddr, len: *mut socklen_t, a: SocketAddrV4) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: the caller's contract: `len` is writable and `addr` has
    // `*len` writable bytes; we copy at most that many.
    unsafe {
        let n = (*len as usize).min(size_of::<libc::sockaddr_in>());
        std::ptr::copy_nonoverlapping((&raw const sin).cast::<u8>(), addr.cast::<u8>(), n);
        *len = size_of::<libc::sockaddr_in>() as socklen_t;
    }
}

/// # Safety
/// `iov` points to `cnt` iovecs, each naming `iov_len` writable bytes.
unsafe fn iov_mut<'a>(iov: *const iovec, cnt: c_int) -> CResult<Vec<&'a mut [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) || (iov.is_null() && cnt > 0) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract: `cnt` iovecs at `iov`.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    Ok(v.iter()
        .filter(|v| v.iov_len > 0)
        // SAFETY: each iovec names `iov_len` writable bytes (readv's
        // contract), and distinct iovecs do not overlap.
        .map(|v| unsafe { std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len) })
        .collect())
}

/// # Safety
/// `iov` points to `cnt` iovecs, each naming `iov_len` readable bytes.
unsafe fn iov<'a>(iov: *const iovec, cnt: c_int) -> CResult<Vec<&'a [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) || (iov.is_null() && cnt > 0) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract: `cnt` iovecs at `iov`.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    Ok(v.iter()
        .filter(|v| v.iov_len > 0)
        // SAFETY: each iovec names `iov_len` readable bytes (writev's
        // contract).
        .map(|v| unsafe {
            std::slice::from_raw_parts(v.iov_base.cast::<u8>().cast_const(), v.iov_len)
        })
        .collect())
}

/// # Safety
/// `buf` points to `n` writable bytes (or `n` is 0).
unsafe fn buf_mut<'a>(buf: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) }
}

/// # Safety
/// `buf` points to `n` readable bytes (or `n` is 0).
unsafe fn buf<'a>(buf: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }
}

fn duration_ts(ts: &timespec) -> CResult<Duration> {
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return Err(libc::EINVAL);
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

fn duration_ms(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

// ---------------------------------------------------------------------------
// The exported functions' bodies. Each has the C function's contract as
// its safety contract: the pointers are what the C prototype says.
// ---------------------------------------------------------------------------

/// `socket(2)`.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn socket<L: SocketLayer>(l: &L, domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: no pointers.
    let fd = unsafe { next::socket(domain, ty, protocol) };
    if fd >= 0 {
        l.on_socket(fd, domain, ty, protocol);
    }
    fd
}

/// `bind(2)`.
///
/// # Safety
/// `addr` points to `len` readable bytes.
pub unsafe fn bind<L: SocketLayer>(
    l: &L,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> c_int {
    // SAFETY: the caller's contract.
    let a = unsafe { read_addr(addr, len) };
    match l.bind(fd, a) {
        Some(r) => ret_int(r.map(|()| 0)),
        // SAFETY: the caller's arguments, unchanged.
        None => unsafe { next::bind(fd, addr, len) },
    }
}

/// `listen(2)`.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn listen<L: SocketLayer>(l: &L, fd: c_int, backlog: c_int) -> c_int {
    match l.listen(fd, backlog) {
        Some(r) => ret_int(r.map(|()| 0)),
        // SAFETY: no pointers.
        None => unsafe { next::listen(fd, backlog) },
    }
}

/// `connect(2)`.
///
/// # Safety
/// `addr` points to `len` readable bytes.
pub unsafe fn connect<L: SocketLayer>(
    l: &L,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> c_int {
    // SAFETY: the caller's contract.
    let a = unsafe { read_addr(addr, len) };
    match l.connect(fd, a) {
        Some(r) => ret_int(r.map(|()| 0)),
        // SAFETY: the caller's arguments, unchanged.
        None => unsafe { next::connect(fd, addr, len) },
    }
}

/// `accept4(2)` (`accept` is `flags` 0).
///
/// # Safety
/// `addr`/`len` as for `accept`.
pub unsafe fn accept4<L: SocketLayer>(
    l: &L,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::accept4(fd, addr, len, flags) };
    }
    match l.accept(fd, flags) {
        Ok((new, peer)) => {
            // SAFETY: the caller's contract.
            unsafe { write_addr(addr, len, peer) };
            new
        }
        Err(e) => ret_int(Err(e)),
    }
}

/// `read(2)`.
///
/// # Safety
/// `b` points to `n` writable bytes.
pub unsafe fn read<L: SocketLayer>(l: &L, fd: c_int, b: *mut c_void, n: usize) -> isize {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::read(fd, b, n) };
    }
    // SAFETY: the caller's contract.
    let s = unsafe { buf_mut(b, n) };
    ret_size(l.recv(fd, &mut [s], 0))
}

/// `write(2)`.
///
/// # Safety
/// `b` points to `n` readable bytes.
pub unsafe fn write<L: SocketLayer>(l: &L, fd: c_int, b: *const c_void, n: usize) -> isize {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::write(fd, b, n) };
    }
    // SAFETY: the caller's contract.
    let s = unsafe { buf(b, n) };
    ret_size(l.send(fd, &[s], 0))
}

/// `readv(2)`.
///
/// # Safety
/// `v` points to `cnt` iovecs of writable memory.
pub unsafe fn readv<L: SocketLayer>(l: &L, fd: c_int, v: *const iovec, cnt: c_int) -> isize {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::readv(fd, v, cnt) };
    }
    // SAFETY: the caller's contract.
    ret_size(unsafe { iov_mut(v, cnt) }.and_then(|mut bufs| l.recv(fd, &mut bufs, 0)))
}

/// `writev(2)`.
///
/// # Safety
/// `v` points to `cnt` iovecs of readable memory.
pub unsafe fn writev<L: SocketLayer>(l: &L, fd: c_int, v: *const iovec, cnt: c_int) -> isize {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::writev(fd, v, cnt) };
    }
    // SAFETY: the caller's contract.
    ret_size(unsafe { iov(v, cnt) }.and_then(|bufs| l.send(fd, &bufs, 0)))
}

/// `recvfrom(2)` (`recv` is a null address).
///
/// # Safety
/// `b` points to `n` writable bytes; `addr`/`len` as for `recvfrom`.
pub unsafe fn recvfrom<L: SocketLayer>(
    l: &L,
    fd: c_int,
    b: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> isize {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::recvfrom(fd, b, n, flags, addr, len) };
    }
    // SAFETY: the caller's contract.
    let s = unsafe { buf_mut(b, n) };
    let r = l.recv(fd, &mut [s], flags);
    if r.is_ok() {
        if let Ok(peer) = l.peer_addr(fd) {
            // SAFETY: the caller's contract.
            unsafe { write_addr(addr, len, peer) };
        }
    }
    ret_size(r)
}

/// `recvmsg(2)`.
///
/// # Safety
/// `msg` points to a valid `msghdr`.
pub unsafe fn recvmsg<L: SocketLayer>(l: &L, fd: c_int, msg: *mut msghdr, flags: c_int) -> isize {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::recvmsg(fd, msg, flags) };
    }
    if msg.is_null() {
        return ret_size(Err(libc::EFAULT));
    }
    // SAFETY: the caller's contract: a valid msghdr.
    let m = unsafe { &mut *msg };
    // SAFETY: its iovecs are writable (recvmsg's contract).
    let r = unsafe { iov_mut(m.msg_iov, m.msg_iovlen as c_int) }
        .and_then(|mut b| l.recv(fd, &mut b, flags));
    if r.is_ok() {
        m.msg_controllen = 0;
        m.msg_flags = 0;
        if !m.msg_name.is_null() {
            match l.peer_addr(fd) {
                // SAFETY: msg_name has msg_namelen writable bytes.
                Ok(peer) => unsafe { write_addr(m.msg_name.cast(), &raw mut m.msg_namelen, peer) },
                Err(_) => m.msg_namelen = 0,
            }
        }
    }
    ret_size(r)
}

/// `sendto(2)` (`send` is a null address; a connected TCP socket ignores
/// the address).
///
/// # Safety
/// `b` points to `n` readable bytes.
pub unsafe fn sendto<L: SocketLayer>(
    l: &L,
    fd: c_int,
    b: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> isize {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::sendto(fd, b, n, flags, addr, len) };
    }
    // SAFETY: the caller's contract.
    let s = unsafe { buf(b, n) };
    ret_size(l.send(fd, &[s], flags))
}

/// `sendmsg(2)`.
///
/// # Safety
/// `msg` points to a valid `msghdr`.
pub unsafe fn sendmsg<L: SocketLayer>(l: &L, fd: c_int, msg: *const msghdr, flags: c_int) -> isize {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::sendmsg(fd, msg, flags) };
    }
    if msg.is_null() {
        return ret_size(Err(libc::EFAULT));
    }
    // SAFETY: the caller's contract: a valid msghdr whose iovecs are
    // readable.
    let r = unsafe { iov((*msg).msg_iov, (*msg).msg_iovlen as c_int) };
    ret_size(r.and_then(|b| l.send(fd, &b, flags)))
}

/// `shutdown(2)`.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn shutdown<L: SocketLayer>(l: &L, fd: c_int, how: c_int) -> c_int {
    if !l.owns(fd) {
        // SAFETY: no pointers.
        return unsafe { next::shutdown(fd, how) };
    }
    ret_int(l.shutdown(fd, how).map(|()| 0))
}

/// `close(2)`.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn close<L: SocketLayer>(l: &L, fd: c_int) -> c_int {
    if l.owns(fd) || l.watches(fd) {
        l.on_close(fd);
    }
    // SAFETY: no pointers.
    unsafe { next::close(fd) }
}

/// `dup(2)`.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn dup<L: SocketLayer>(l: &L, fd: c_int) -> c_int {
    // SAFETY: no pointers.
    let new = unsafe { next::dup(fd) };
    if new >= 0 && (l.owns(fd) || l.watches(fd)) {
        l.on_dup(fd, new);
    }
    new
}

/// `dup3(2)` (`dup2` is `flags` 0 and allows `old == new`).
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn dup3<L: SocketLayer>(
    l: &L,
    old: c_int,
    new: c_int,
    flags: c_int,
    dup2: bool,
) -> c_int {
    if old == new {
        // dup2 returns `new` if it is open; dup3 refuses.
        // SAFETY: no pointers.
        return unsafe {
            if dup2 {
                next::dup2(old, new)
            } else {
                next::dup3(old, new, flags)
            }
        };
    }
    if l.owns(new) || l.watches(new) {
        l.on_close(new);
    }
    // SAFETY: no pointers.
    let r = unsafe {
        if dup2 {
            next::dup2(old, new)
        } else {
            next::dup3(old, new, flags)
        }
    };
    if r >= 0 && (l.owns(old) || l.watches(old)) {
        l.on_dup(old, r);
    }
    r
}

/// `getsockname(2)` (`peer` false) and `getpeername(2)` (`peer` true).
///
/// # Safety
/// `addr`/`len` as for `getsockname`.
pub unsafe fn sockname<L: SocketLayer>(
    l: &L,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    peer: bool,
) -> c_int {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe {
            if peer {
                next::getpeername(fd, addr, len)
            } else {
                next::getsockname(fd, addr, len)
            }
        };
    }
    if addr.is_null() || len.is_null() {
        return ret_int(Err(libc::EFAULT));
    }
    match if peer {
        l.peer_addr(fd)
    } else {
        l.local_addr(fd)
    } {
        Ok(a) => {
            // SAFETY: the caller's contract.
            unsafe { write_addr(addr, len, a) };
            0
        }
        Err(e) => ret_int(Err(e)),
    }
}

/// `fcntl(2)`: the third argument as the integer (or pointer) the command
/// takes; only integer commands reach the layer.
///
/// # Safety
/// `arg` is what `cmd` expects.
pub unsafe fn fcntl<L: SocketLayer>(l: &L, fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    let int_cmd = matches!(
        cmd,
        libc::F_GETFL
            | libc::F_SETFL
            | libc::F_GETFD
            | libc::F_SETFD
            | libc::F_DUPFD
            | libc::F_DUPFD_CLOEXEC
    );
    if l.owns(fd) && int_cmd {
        return ret_int(l.fcntl(fd, cmd, arg as c_int));
    }
    // SAFETY: the caller's arguments, unchanged.
    let r = unsafe { next::fcntl(fd, cmd, arg) };
    if r >= 0 && matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) && l.watches(fd) {
        l.on_dup(fd, r);
    }
    r
}

/// `ioctl(2)`: `FIONREAD` and `FIONBIO` (an `int *`) on owned sockets go to
/// the layer; other requests on them fail with `ENOTTY`.
///
/// # Safety
/// `arg` is what `request` expects.
pub unsafe fn ioctl<L: SocketLayer>(l: &L, fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::ioctl(fd, request, arg) };
    }
    if request != libc::FIONREAD && request != libc::FIONBIO {
        return ret_int(l.ioctl(fd, request, &mut 0));
    }
    if arg.is_null() {
        return ret_int(Err(libc::EFAULT));
    }
    // SAFETY: FIONREAD and FIONBIO take an `int *` (ioctl's contract);
    // read and written unaligned.
    let mut v = unsafe { std::ptr::read_unaligned(arg.cast::<c_int>()) };
    let r = l.ioctl(fd, request, &mut v);
    if r.is_ok() {
        // SAFETY: as above.
        unsafe { std::ptr::write_unaligned(arg.cast::<c_int>(), v) };
    }
    ret_int(r)
}

/// `setsockopt(2)`.
///
/// # Safety
/// `value` points to `len` readable bytes.
pub unsafe fn setsockopt<L: SocketLayer>(
    l: &L,
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::setsockopt(fd, level, name, value, len) };
    }
    // SAFETY: the caller's contract.
    let v = unsafe { buf(value, len as usize) };
    ret_int(l.setsockopt(fd, level, name, v).map(|()| 0))
}

/// `getsockopt(2)`.
///
/// # Safety
/// `len` points to a writable `socklen_t` and `value` to `*len` writable
/// bytes.
pub unsafe fn getsockopt<L: SocketLayer>(
    l: &L,
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    if !l.owns(fd) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::getsockopt(fd, level, name, value, len) };
    }
    if len.is_null() {
        return ret_int(Err(libc::EFAULT));
    }
    // SAFETY: the caller's contract.
    let out = unsafe { buf_mut(value, *len as usize) };
    match l.getsockopt(fd, level, name, out) {
        Ok(n) => {
            // SAFETY: the caller's contract.
            unsafe { *len = n as socklen_t };
            0
        }
        Err(e) => ret_int(Err(e)),
    }
}

/// `ppoll(2)` (`poll` passes its milliseconds as a timespec).
///
/// # Safety
/// `fds` points to `n` pollfds; `timeout` and `sigmask` are null or valid.
pub unsafe fn ppoll<L: SocketLayer>(
    l: &L,
    fds: *mut pollfd,
    n: libc::nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    if !fds.is_null() && n > 0 && n <= 1 << 20 {
        // SAFETY: the caller's contract: `n` pollfds at `fds`.
        let set = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
        if set.iter().any(|p| l.owns(p.fd)) {
            // SAFETY: null or a valid timespec / sigset (the contract).
            let (t, m) = unsafe { (timeout.as_ref(), sigmask.as_ref()) };
            let t = match t.map(duration_ts).transpose() {
                Ok(t) => t,
                Err(e) => return ret_int(Err(e)),
            };
            if let Some(r) = l.poll(set, t, m) {
                return ret_int(r.map(|k| k as c_int));
            }
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { next::ppoll(fds, n, timeout, sigmask) }
}

/// `poll(2)`.
///
/// # Safety
/// `fds` points to `n` pollfds.
pub unsafe fn poll<L: SocketLayer>(l: &L, fds: *mut pollfd, n: libc::nfds_t, ms: c_int) -> c_int {
    let ts = duration_ms(ms).map(|d| timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tp = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: the caller's contract; `tp` is null or `ts`, live for the call.
    unsafe { ppoll(l, fds, n, tp, std::ptr::null()) }
}

/// `pselect(2)`.
///
/// # Safety
/// Each set is null or a valid `fd_set`; `timeout` and `sigmask` null or
/// valid.
pub unsafe fn pselect<L: SocketLayer>(
    l: &L,
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    if (0..=1024).contains(&nfds) {
        // SAFETY: an fd_set is FD_SETSIZE (1024) bits, 16 u64 words on
        // Linux; each pointer is null or a valid set (the contract).
        let sets = unsafe { [r, w, e].map(|p| p.cast::<FdBits>().as_mut()) };
        let ours = sets
            .iter()
            .flatten()
            .any(|s| (0..nfds).any(|fd| s[fd as usize / 64] >> (fd % 64) & 1 == 1 && l.owns(fd)));
        if ours {
            // SAFETY: null or valid (the contract).
            let (t, m) = unsafe { (timeout.as_ref(), sigmask.as_ref()) };
            let t = match t.map(duration_ts).transpose() {
                Ok(t) => t,
                Err(err) => return ret_int(Err(err)),
            };
            if let Some(res) = l.select(nfds, sets, t, m) {
                return ret_int(res.map(|k| k as c_int));
            }
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { next::pselect(nfds, r, w, e, timeout, sigmask) }
}

/// `select(2)`. Unlike Linux, `timeout` is not updated to the time left.
///
/// # Safety
/// As for [`pselect`]; `timeout` null or a valid timeval.
pub unsafe fn select<L: SocketLayer>(
    l: &L,
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut timeval,
) -> c_int {
    // SAFETY: null or a valid timeval (the contract).
    let ts = match unsafe { timeout.as_ref() } {
        None => None,
        Some(tv) if tv.tv_sec < 0 || !(0..1_000_000).contains(&tv.tv_usec) => {
            return ret_int(Err(libc::EINVAL))
        }
        Some(tv) => Some(timespec {
            tv_sec: tv.tv_sec,
            tv_nsec: tv.tv_usec * 1000,
        }),
    };
    let tp = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: the caller's contract; `tp` is null or `ts`, live for the call.
    unsafe { pselect(l, nfds, r, w, e, tp, std::ptr::null()) }
}

/// `epoll_ctl(2)`.
///
/// # Safety
/// `event` is null or a valid `epoll_event`.
pub unsafe fn epoll_ctl<L: SocketLayer>(
    l: &L,
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut epoll_event,
) -> c_int {
    if l.owns(fd) {
        // SAFETY: null or valid (the contract); read unaligned (the struct
        // is packed on x86-64).
        let ev = (!event.is_null()).then(|| unsafe { std::ptr::read_unaligned(event) });
        if let Some(r) = l.epoll_ctl(epfd, op, fd, ev) {
            return ret_int(r.map(|()| 0));
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { next::epoll_ctl(epfd, op, fd, event) }
}

/// `epoll_pwait(2)` (`epoll_wait` is a null mask).
///
/// # Safety
/// `events` points to `max` writable entries; `sigmask` null or valid.
pub unsafe fn epoll_pwait<L: SocketLayer>(
    l: &L,
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    ms: c_int,
    sigmask: *const sigset_t,
) -> c_int {
    if l.watches(epfd) && max > 0 && !events.is_null() {
        // SAFETY: the caller's contract: `max` writable entries.
        let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
        // SAFETY: null or valid (the contract).
        let m = unsafe { sigmask.as_ref() };
        if let Some(r) = l.epoll_wait(epfd, out, duration_ms(ms), m) {
            return ret_int(r.map(|k| k as c_int));
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { next::epoll_pwait(epfd, events, max, ms, sigmask) }
}

/// Safe calls of the C library's own functions, for the layer's work on
/// descriptors it manages: the kernel socket behind each of its fds, the
/// kernel fds of a mixed poll set, the epoll instances that hold its
/// sockets. Descriptors are plain numbers here because the C program owns
/// them; the layer passes only descriptors the program gave it or that
/// these calls created.
pub mod real {
    use super::*;

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

    /// `bind(2)` to an IPv4 address.
    ///
    /// # Errors
    /// The errno.
    pub fn bind(fd: RawFd, a: SocketAddrV4) -> CResult<()> {
        let mut sin: libc::sockaddr_in = zeroed_sin();
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = a.port().to_be();
        sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
        // SAFETY: `sin` is a live sockaddr_in of the length passed.
        check(unsafe {
            next::bind(
                fd,
                (&raw const sin).cast(),
                size_of::<libc::sockaddr_in>() as socklen_t,
            )
        })
        .map(|_| ())
    }

    fn zeroed_sin() -> libc::sockaddr_in {
        libc::sockaddr_in {
            sin_family: 0,
            sin_port: 0,
            sin_addr: libc::in_addr { s_addr: 0 },
            sin_zero: [0; 8],
        }
    }

    /// `getsockname(2)` of an IPv4 socket.
    ///
    /// # Errors
    /// The errno, or `EAFNOSUPPORT` for another family.
    pub fn local_addr(fd: RawFd) -> CResult<SocketAddrV4> {
        let mut sin = zeroed_sin();
        let mut len = size_of::<libc::sockaddr_in>() as socklen_t;
        // SAFETY: `sin` has `len` writable bytes; `len` is writable.
        check(unsafe { next::getsockname(fd, (&raw mut sin).cast(), &mut len) })?;
        // SAFETY: `sin` is a live, initialised sockaddr_in.
        unsafe { read_addr((&raw const sin).cast(), len) }.ok_or(libc::EAFNOSUPPORT)
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
        check(unsafe { next::epoll_pwait(epfd, events.as_mut_ptr(), max, ms, mp) })
            .map(|n| n as usize)
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
    /// touch atomics).
    pub fn at_fork_child(child: extern "C" fn()) {
        // SAFETY: a plain function pointer that lives forever.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    }
}
