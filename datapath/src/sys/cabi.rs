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

use std::ffi::{c_int, c_uint, c_ulong, c_void};
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

/// The most bytes one read or write moves (Linux's `MAX_RW_COUNT`); longer
/// requests are cut to it, as the kernel cuts them.
const MAX_RW: usize = 0x7fff_f000;

/// Overlapping iovecs are filled through a buffer of our own, at most this
/// long (a short read, as a stream socket may return).
const BOUNCE_MAX: usize = 1 << 20;

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
    /// `fd` (owned or watched) is about to be closed (`close`,
    /// `close_range`, `closefrom`, `fclose`), or was replaced by
    /// `dup2`/`dup3`.
    fn on_close(&self, fd: RawFd);
    /// The descriptors in `first..=last` the layer owns or watches, in
    /// order (for `close_range` and `closefrom`).
    fn marked(&self, first: RawFd, last: RawFd) -> Vec<RawFd>;
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
    close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    closefrom(low: c_int) -> ();
    fclose(f: *mut libc::FILE) -> c_int;
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

/// A caller's iovec array as (address, length) parts, checked as Linux
/// checks it: more than `UIO_MAXIOV` is `too_many` (readv's `EINVAL`,
/// recvmsg's `EMSGSIZE`), a null array `EFAULT`, a length beyond
/// `isize::MAX` `EINVAL`, a null base with a length `EFAULT`; the total is
/// cut to [`MAX_RW`]. Empty iovecs are left out.
///
/// # Safety
/// `iov` is null or points to `cnt` iovecs.
unsafe fn iov_parts(
    iov: *const iovec,
    cnt: usize,
    too_many: Errno,
) -> CResult<Vec<(*mut u8, usize)>> {
    if cnt > libc::UIO_MAXIOV as usize {
        return Err(too_many);
    }
    if cnt == 0 {
        return Ok(Vec::new());
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract: `cnt` iovecs at `iov`, not null.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt) };
    if v.iter().any(|v| v.iov_len > isize::MAX as usize) {
        return Err(libc::EINVAL);
    }
    if v.iter().any(|v| v.iov_base.is_null() && v.iov_len > 0) {
        return Err(libc::EFAULT);
    }
    let mut total = 0usize;
    Ok(v.iter()
        .map(|v| {
            let n = v.iov_len.min(MAX_RW - total);
            total += n;
            (v.iov_base.cast::<u8>(), n)
        })
        .filter(|&(_, n)| n > 0)
        .collect())
}

/// Whether no two parts share a byte.
fn disjoint(parts: &[(*mut u8, usize)]) -> bool {
    if parts.len() < 2 {
        return true;
    }
    let mut r: Vec<(usize, usize)> = parts.iter().map(|&(p, n)| (p as usize, n)).collect();
    r.sort_unstable();
    r.windows(2)
        .all(|w| w[0].0.saturating_add(w[0].1) <= w[1].0)
}

/// `recv` into a scatter list. Disjoint parts become the layer's slices;
/// overlapping ones (which as `&mut` slices would alias) are filled from
/// one buffer of ours, in order, a later part overwriting an earlier
/// one's overlap as Linux's copy does.
///
/// # Safety
/// Each part names writable bytes (readv's contract); from
/// [`iov_parts`] (not null, lengths within `isize::MAX`).
unsafe fn recv_parts<L: SocketLayer>(
    l: &L,
    fd: c_int,
    parts: &[(*mut u8, usize)],
    flags: c_int,
) -> CResult<usize> {
    if disjoint(parts) {
        let mut bufs: Vec<&mut [u8]> = parts
            .iter()
            // SAFETY: writable (the contract), not null, and no two
            // overlap (checked above), so the slices do not alias.
            .map(|&(p, n)| unsafe { std::slice::from_raw_parts_mut(p, n) })
            .collect();
        return l.recv(fd, &mut bufs, flags);
    }
    let total: usize = parts.iter().map(|&(_, n)| n).sum();
    let mut bounce = vec![0u8; total.min(BOUNCE_MAX)];
    let got = l.recv(fd, &mut [&mut bounce[..]], flags)?;
    let mut at = 0;
    for &(p, n) in parts {
        let k = n.min(got - at);
        if k == 0 {
            break;
        }
        // SAFETY: `p` has `n` >= `k` writable bytes (the contract);
        // `bounce[at..at + k]` is ours, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(bounce.as_ptr().add(at), p, k) };
        at += k;
    }
    Ok(got)
}

/// Gather slices of the parts (shared slices may overlap).
///
/// # Safety
/// Each part names readable bytes (writev's contract); from
/// [`iov_parts`].
unsafe fn send_parts<'a>(parts: &[(*mut u8, usize)]) -> Vec<&'a [u8]> {
    parts
        .iter()
        // SAFETY: readable (the contract), not null, within isize::MAX.
        .map(|&(p, n)| unsafe { std::slice::from_raw_parts(p.cast_const(), n) })
        .collect()
}

/// # Safety
/// `buf` points to `n` writable bytes (or `n` is 0).
unsafe fn buf_mut<'a>(buf: *mut c_void, n: usize) -> CResult<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract; not null, cut to MAX_RW.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n.min(MAX_RW)) })
}

/// # Safety
/// `buf` points to `n` readable bytes (or `n` is 0).
unsafe fn buf<'a>(buf: *const c_void, n: usize) -> CResult<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract; not null, cut to MAX_RW.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n.min(MAX_RW)) })
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
    ret_size(unsafe { buf_mut(b, n) }.and_then(|s| l.recv(fd, &mut [s], 0)))
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
    ret_size(unsafe { buf(b, n) }.and_then(|s| l.send(fd, &[s], 0)))
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
    // A negative count is a huge one to the kernel (an unsigned long).
    let cnt = usize::try_from(cnt).unwrap_or(usize::MAX);
    // SAFETY: the caller's contract: `cnt` iovecs of writable memory.
    ret_size(
        unsafe { iov_parts(v, cnt, libc::EINVAL) }
            .and_then(|p| unsafe { recv_parts(l, fd, &p, 0) }),
    )
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
    let cnt = usize::try_from(cnt).unwrap_or(usize::MAX);
    // SAFETY: the caller's contract: `cnt` iovecs of readable memory.
    ret_size(
        unsafe { iov_parts(v, cnt, libc::EINVAL) }
            .and_then(|p| l.send(fd, &unsafe { send_parts(&p) }, 0)),
    )
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
    let r = unsafe { buf_mut(b, n) }.and_then(|s| l.recv(fd, &mut [s], flags));
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
    let r = unsafe { iov_parts(m.msg_iov, m.msg_iovlen, libc::EMSGSIZE) }
        // SAFETY: as above.
        .and_then(|p| unsafe { recv_parts(l, fd, &p, flags) });
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
    ret_size(unsafe { buf(b, n) }.and_then(|s| l.send(fd, &[s], flags)))
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
    let r = unsafe { iov_parts((*msg).msg_iov, (*msg).msg_iovlen, libc::EMSGSIZE) };
    // SAFETY: as above.
    ret_size(r.and_then(|p| l.send(fd, &unsafe { send_parts(&p) }, flags)))
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
    // `new` is forgotten only once the call replaced it: a failed call
    // (a bad `old`, bad flags) leaves it as it was.
    let replaces = l.owns(new) || l.watches(new);
    // SAFETY: no pointers.
    let r = unsafe {
        if dup2 {
            next::dup2(old, new)
        } else {
            next::dup3(old, new, flags)
        }
    };
    if r >= 0 {
        if replaces {
            l.on_close(new);
        }
        if l.owns(old) || l.watches(old) {
            l.on_dup(old, r);
        }
    }
    r
}

/// `close_range(2)`: the layer forgets the descriptors it knows in the
/// range before they are closed (`CLOSE_RANGE_CLOEXEC` closes nothing; a
/// range or flags the kernel refuses close nothing either).
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn close_range<L: SocketLayer>(
    l: &L,
    first: c_uint,
    last: c_uint,
    flags: c_int,
) -> c_int {
    let known = libc::CLOSE_RANGE_UNSHARE | libc::CLOSE_RANGE_CLOEXEC;
    let closes = (flags as c_uint) & !known == 0
        && (flags as c_uint) & libc::CLOSE_RANGE_CLOEXEC == 0
        && first <= last;
    if closes {
        forget_range(l, first, last);
    }
    // SAFETY: no pointers.
    unsafe { next::close_range(first, last, flags) }
}

/// `closefrom(3)`: the layer forgets its descriptors from `low` on before
/// the C library closes them (it does so with its own `close_range`,
/// which no export sees).
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn closefrom<L: SocketLayer>(l: &L, low: c_int) {
    forget_range(l, low.max(0) as c_uint, c_uint::MAX);
    // SAFETY: no pointers.
    unsafe { next::closefrom(low) }
}

fn forget_range<L: SocketLayer>(l: &L, first: c_uint, last: c_uint) {
    let first = RawFd::try_from(first).unwrap_or(RawFd::MAX);
    let last = RawFd::try_from(last).unwrap_or(RawFd::MAX);
    for fd in l.marked(first, last) {
        l.on_close(fd);
    }
}

/// `fclose(3)`: a stream over a descriptor of the layer's (`fdopen`) is
/// forgotten before the C library closes it (with its own `close`, which
/// no export sees).
///
/// # Safety
/// `f` is a stream the caller opened and has not closed.
pub unsafe fn fclose<L: SocketLayer>(l: &L, f: *mut libc::FILE) -> c_int {
    if !f.is_null() {
        // SAFETY: an open stream (the contract).
        let fd = unsafe { libc::fileno(f) };
        if fd >= 0 && (l.owns(fd) || l.watches(fd)) {
            l.on_close(fd);
        }
    }
    // SAFETY: the caller's argument, unchanged.
    unsafe { next::fclose(f) }
}

/// `vfork(2)`, as `fork`. A vfork child shares the parent's memory until
/// it execs or exits, so a `close` or `dup2` it makes first would change
/// the parent's socket table, under the parent's lock; and a vfork cannot
/// be wrapped (the child returns through the wrapper's frame, which the
/// parent still needs). POSIX lets `vfork` be `fork`; the fork handlers
/// then run, so the child's sockets are the kernel's, as after any fork.
///
/// # Safety
/// None beyond the C function's (the child only uses what a fork child
/// may).
pub unsafe fn vfork() -> libc::pid_t {
    // SAFETY: no pointers; the C library's fork runs its fork handlers.
    unsafe { libc::fork() }
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
    ret_int(
        unsafe { buf(value, len as usize) }
            .and_then(|v| l.setsockopt(fd, level, name, v).map(|()| 0)),
    )
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
    let out = match unsafe { buf_mut(value, *len as usize) } {
        Ok(out) => out,
        Err(e) => return ret_int(Err(e)),
    };
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

/// Whether a set of `words` words at `set` names a descriptor below
/// `nfds` that the layer owns.
///
/// # Safety
/// `set` is null or has `words` readable words.
unsafe fn names_owned<L: SocketLayer>(l: &L, set: *const u64, words: usize, nfds: usize) -> bool {
    if set.is_null() {
        return false;
    }
    (0..words).any(|w| {
        // SAFETY: `w` < `words` (the contract); read unaligned, as a
        // caller's buffer may be.
        let mut bits = unsafe { std::ptr::read_unaligned(set.add(w)) };
        while bits != 0 {
            let fd = w * 64 + bits.trailing_zeros() as usize;
            if fd >= nfds {
                break;
            }
            if l.owns(fd as RawFd) {
                return true;
            }
            bits &= bits - 1;
        }
        false
    })
}

/// `pselect(2)`. Only the [`fd_set_words`]`(nfds)` words of each set are
/// read and written (copied in and out, so the same set passed twice is
/// no aliasing; written back in read, write, except order as Linux
/// does); `nfds` < 0 is the kernel's `EINVAL`.
///
/// # Safety
/// Each set is null or has [`fd_set_words`]`(nfds)` words; `timeout` and
/// `sigmask` null or valid.
pub unsafe fn pselect<L: SocketLayer>(
    l: &L,
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    if let Ok(n) = usize::try_from(nfds) {
        let n = n.min(SELECT_MAX_FDS);
        let words = fd_set_words(n);
        let ptrs = [r, w, e].map(|p| p.cast::<u64>());
        // SAFETY: each set is null or has `words` words (the contract).
        let ours = ptrs.iter().any(|&p| unsafe { names_owned(l, p, words, n) });
        if ours {
            // SAFETY: null or valid (the contract).
            let (t, m) = unsafe { (timeout.as_ref(), sigmask.as_ref()) };
            let t = match t.map(duration_ts).transpose() {
                Ok(t) => t,
                Err(err) => return ret_int(Err(err)),
            };
            let mut copies = ptrs.map(|p| {
                (!p.is_null()).then(|| {
                    (0..words)
                        // SAFETY: `i` < `words` (the contract), unaligned.
                        .map(|i| unsafe { std::ptr::read_unaligned(p.add(i)) })
                        .collect::<Vec<u64>>()
                })
            });
            let sets = copies.each_mut().map(|c| c.as_deref_mut());
            if let Some(res) = l.select(n as c_int, sets, t, m) {
                if res.is_ok() {
                    for (p, c) in ptrs.iter().zip(&copies) {
                        for (i, &word) in c.iter().flatten().enumerate() {
                            // SAFETY: `i` < `words` (the contract).
                            unsafe { std::ptr::write_unaligned(p.add(i), word) };
                        }
                    }
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A layer that owns the descriptors it is given and records what the
    /// C side hands it.
    #[derive(Default)]
    struct Mock {
        owned: Vec<RawFd>,
        /// Each recv's buffers as (address, length).
        recv_bufs: Mutex<Vec<Vec<(usize, usize)>>>,
        /// The bytes each recv delivers.
        data: Vec<u8>,
        closed: Mutex<Vec<RawFd>>,
    }

    impl Mock {
        fn owning(fds: &[RawFd]) -> Self {
            Mock {
                owned: fds.to_vec(),
                ..Mock::default()
            }
        }
    }

    impl SocketLayer for Mock {
        fn owns(&self, fd: RawFd) -> bool {
            self.owned.contains(&fd)
        }
        fn watches(&self, _: RawFd) -> bool {
            false
        }
        fn on_socket(&self, _: RawFd, _: c_int, _: c_int, _: c_int) {}
        fn on_close(&self, fd: RawFd) {
            self.closed.lock().unwrap().push(fd);
        }
        fn on_dup(&self, _: RawFd, _: RawFd) {}
        fn marked(&self, first: RawFd, last: RawFd) -> Vec<RawFd> {
            let mut v: Vec<RawFd> = self
                .owned
                .iter()
                .copied()
                .filter(|fd| (first..=last).contains(fd))
                .collect();
            v.sort_unstable();
            v
        }
        fn bind(&self, _: RawFd, _: Option<SocketAddrV4>) -> Option<CResult<()>> {
            None
        }
        fn listen(&self, _: RawFd, _: c_int) -> Option<CResult<()>> {
            None
        }
        fn connect(&self, _: RawFd, _: Option<SocketAddrV4>) -> Option<CResult<()>> {
            None
        }
        fn accept(&self, _: RawFd, _: c_int) -> CResult<(RawFd, SocketAddrV4)> {
            Err(libc::EINVAL)
        }
        fn recv(&self, _: RawFd, bufs: &mut [&mut [u8]], _: c_int) -> CResult<usize> {
            self.recv_bufs.lock().unwrap().push(
                bufs.iter()
                    .map(|b| (b.as_ptr() as usize, b.len()))
                    .collect(),
            );
            // Scatter in order, as the shim's copy_out does.
            let mut done = 0;
            for b in bufs.iter_mut() {
                let n = b.len().min(self.data.len() - done);
                b[..n].copy_from_slice(&self.data[done..done + n]);
                done += n;
            }
            Ok(done)
        }
        fn send(&self, _: RawFd, bufs: &[&[u8]], _: c_int) -> CResult<usize> {
            Ok(bufs.iter().map(|b| b.len()).sum())
        }
        fn shutdown(&self, _: RawFd, _: c_int) -> CResult<()> {
            Ok(())
        }
        fn local_addr(&self, _: RawFd) -> CResult<SocketAddrV4> {
            Err(libc::EINVAL)
        }
        fn peer_addr(&self, _: RawFd) -> CResult<SocketAddrV4> {
            Err(libc::EINVAL)
        }
        fn fcntl(&self, _: RawFd, _: c_int, _: c_int) -> CResult<c_int> {
            Ok(0)
        }
        fn ioctl(&self, _: RawFd, _: c_ulong, _: &mut c_int) -> CResult<c_int> {
            Ok(0)
        }
        fn setsockopt(&self, _: RawFd, _: c_int, _: c_int, _: &[u8]) -> CResult<()> {
            Ok(())
        }
        fn getsockopt(&self, _: RawFd, _: c_int, _: c_int, _: &mut [u8]) -> CResult<usize> {
            Ok(0)
        }
        fn poll(
            &self,
            _: &mut [pollfd],
            _: Option<Duration>,
            _: Option<&sigset_t>,
        ) -> Option<CResult<usize>> {
            None
        }
        fn select(
            &self,
            nfds: c_int,
            sets: [Option<&mut [u64]>; 3],
            _: Option<Duration>,
            _: Option<&sigset_t>,
        ) -> Option<CResult<usize>> {
            // As the shim does: clear what it was given, then mark the
            // owned descriptors below nfds readable.
            let [r, _, _] = sets;
            let r = r?;
            r.fill(0);
            for &fd in self.owned.iter().filter(|&&fd| fd < nfds) {
                r[fd as usize / 64] |= 1 << (fd % 64);
            }
            Some(Ok(1))
        }
        fn epoll_ctl(
            &self,
            _: RawFd,
            _: c_int,
            _: RawFd,
            _: Option<epoll_event>,
        ) -> Option<CResult<()>> {
            None
        }
        fn epoll_wait(
            &self,
            _: RawFd,
            _: &mut [epoll_event],
            _: Option<Duration>,
            _: Option<&sigset_t>,
        ) -> Option<CResult<usize>> {
            None
        }
    }

    fn errno_now() -> Errno {
        errno()
    }

    #[test]
    fn select_hands_the_layer_only_the_words_nfds_covers() {
        let l = Mock::owning(&[3]);
        // A caller's one-word set, followed by memory that is not its.
        let mut mem = [u64::MAX; 17];
        mem[0] = 1 << 3;
        let set = mem.as_mut_ptr().cast::<libc::fd_set>();
        // SAFETY: `set` has a word for the 4 descriptors nfds covers.
        let r = unsafe {
            pselect(
                &l,
                4,
                set,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 1);
        assert_eq!(mem[0], 1 << 3, "fd 3 readable");
        assert!(
            mem[1..].iter().all(|&w| w == u64::MAX),
            "words past nfds written: {mem:x?}"
        );
        // 65 descriptors: two words, the third untouched.
        let mut mem = [u64::MAX; 17];
        mem[0] = 1 << 3;
        mem[1] = 0;
        let set = mem.as_mut_ptr().cast::<libc::fd_set>();
        // SAFETY: two words for 65 descriptors.
        let r = unsafe {
            pselect(
                &l,
                65,
                set,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 1);
        assert_eq!(&mem[..2], &[1 << 3, 0]);
        assert!(mem[2..].iter().all(|&w| w == u64::MAX), "{mem:x?}");
    }

    #[test]
    fn overlapping_iovecs_reach_the_layer_as_disjoint_buffers() {
        let l = Mock {
            data: b"abcdefgh".to_vec(),
            ..Mock::owning(&[3])
        };
        let mut buf = [b'.'; 16];
        let p = buf.as_mut_ptr();
        let v = [
            iovec {
                iov_base: p.cast(),
                iov_len: 5,
            },
            // SAFETY: inside `buf`.
            iovec {
                iov_base: unsafe { p.add(2) }.cast(),
                iov_len: 5,
            },
        ];
        // SAFETY: two iovecs over `buf`.
        let r = unsafe { readv(&l, 3, v.as_ptr(), 2) };
        assert_eq!(r, 8);
        // As Linux: in order, the later iovec over the earlier's overlap.
        assert_eq!(&buf[..10], b"abfgh.....");
        for bufs in l.recv_bufs.lock().unwrap().iter() {
            for (i, &(a, n)) in bufs.iter().enumerate() {
                for &(b, m) in &bufs[i + 1..] {
                    assert!(a + n <= b || b + m <= a, "aliased buffers {bufs:x?}");
                }
            }
        }
    }

    #[test]
    fn recvmsg_refuses_more_iovecs_than_iov_max_without_truncating() {
        let l = Mock {
            data: b"abcdefgh".to_vec(),
            ..Mock::owning(&[3])
        };
        let mut buf = [0u8; 8];
        let mut v = [iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: 8,
        }];
        // SAFETY: all-zero is a valid msghdr.
        let mut m: msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = v.as_mut_ptr();
        for len in [1025, (1 << 32) + 1] {
            m.msg_iovlen = len;
            // SAFETY: a valid msghdr (the kernel would read no iovec).
            let r = unsafe { recvmsg(&l, 3, &mut m, 0) };
            assert_eq!((r, errno_now()), (-1, libc::EMSGSIZE), "msg_iovlen {len}");
            // SAFETY: as above.
            let r = unsafe { sendmsg(&l, 3, &m, 0) };
            assert_eq!((r, errno_now()), (-1, libc::EMSGSIZE), "msg_iovlen {len}");
        }
        assert!(l.recv_bufs.lock().unwrap().is_empty());
    }

    #[test]
    fn a_null_iov_base_with_a_length_is_efault() {
        let l = Mock {
            data: b"abcdefgh".to_vec(),
            ..Mock::owning(&[3])
        };
        let mut buf = [0u8; 8];
        let v = [
            iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: 3,
            },
            iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 5,
            },
        ];
        // SAFETY: the first iovec is `buf`; the second is the bad one.
        let r = unsafe { readv(&l, 3, v.as_ptr(), 2) };
        assert_eq!((r, errno_now()), (-1, libc::EFAULT));
        // SAFETY: as above.
        let r = unsafe { writev(&l, 3, v.as_ptr(), 2) };
        assert_eq!((r, errno_now()), (-1, libc::EFAULT));
        assert!(l.recv_bufs.lock().unwrap().is_empty());
    }

    #[test]
    fn a_set_of_nfds_descriptors_is_the_words_they_fall_in() {
        let words: Vec<usize> = [0, 1, 63, 64, 65, 1024, 1025].map(fd_set_words).to_vec();
        assert_eq!(words, [0, 1, 1, 1, 2, 16, 17]);
    }

    #[test]
    fn select_with_a_negative_nfds_is_einval_and_leaves_the_set() {
        let l = Mock::owning(&[3]);
        let mut set = [1u64 << 3];
        let t = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a one-word set; a valid timespec.
        let r = unsafe {
            pselect(
                &l,
                -1,
                set.as_mut_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &t,
                std::ptr::null(),
            )
        };
        assert_eq!((r, errno_now(), set[0]), (-1, libc::EINVAL, 1 << 3));
    }

    #[test]
    fn close_range_forgets_what_it_closes_and_nothing_when_refused() {
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: no pointers.
        let a = unsafe { libc::fcntl(p[0], libc::F_DUPFD, 700) };
        let l = Mock::owning(&[a]);
        let at = a as c_uint;
        // SAFETY: no pointers (a range the kernel refuses, then one that
        // closes nothing).
        unsafe {
            assert_eq!(
                (close_range(&l, at + 1, at, 0), errno_now()),
                (-1, libc::EINVAL)
            );
            assert_eq!(
                close_range(&l, at, at, libc::CLOSE_RANGE_CLOEXEC as c_int),
                0
            );
        }
        assert!(l.closed.lock().unwrap().is_empty());
        // SAFETY: no pointers; `a` is this test's.
        assert_eq!(unsafe { close_range(&l, at, at, 0) }, 0);
        assert_eq!(*l.closed.lock().unwrap(), vec![a]);
        // SAFETY: no pointers: `a` is closed now.
        assert_eq!(
            (unsafe { libc::fcntl(a, libc::F_GETFD) }, errno_now()),
            (-1, libc::EBADF)
        );
        real::close(p[0]);
        real::close(p[1]);
    }

    #[test]
    fn dup2_of_a_bad_descriptor_leaves_the_target_alone() {
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let l = Mock::owning(&[p[0]]);
        // SAFETY: no pointers.
        let bad = unsafe { libc::fcntl(p[1], libc::F_DUPFD, 900) };
        real::close(bad);
        for dup2 in [true, false] {
            // SAFETY: no pointers.
            let r = unsafe { dup3(&l, bad, p[0], 0, dup2) };
            assert_eq!((r, errno_now()), (-1, libc::EBADF));
        }
        assert!(
            l.closed.lock().unwrap().is_empty(),
            "the target was forgotten"
        );
        real::close(p[0]);
        real::close(p[1]);
    }
}
