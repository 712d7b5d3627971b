//! The preload library of `zerosplit exec`: exports the C library's socket
//! functions under their own names, so an unmodified program's calls reach
//! the shim ([`zerosplit::shim::Shim`]) first. Each export is one line that
//! hands its arguments to the function of the same name in
//! [`datapath::cabi`], which passes descriptors that are not ours to the C
//! library (`dlsym(RTLD_NEXT)`) and turns the C pointers of ours into
//! slices; every pointer dereference happens there, in the datapath's
//! `sys` room, under a `SAFETY` comment.
//!
//! The functions are `unsafe extern "C"` because their callers are C code
//! bound by the C prototypes' contracts (a `read` buffer has `n` writable
//! bytes); `no_mangle` is what makes them interpose.
#![allow(
    unsafe_code,
    reason = "C ABI exports (no_mangle, unsafe extern \"C\" with the C contracts); no unsafe block here"
)]
#![allow(
    clippy::missing_safety_doc,
    reason = "each export's contract is its C prototype's (man 2)"
)]

use std::ffi::{c_int, c_uint, c_ulong, c_void};

use datapath::cabi;
use libc::{
    epoll_event, iovec, msghdr, nfds_t, pollfd, sigset_t, sockaddr, socklen_t, timespec, timeval,
};
use zerosplit::shim::Shim;

static SHIM: Shim = Shim::new();

#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    cabi::socket(&SHIM, domain, ty, protocol)
}

#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    cabi::bind(&SHIM, fd, addr, len)
}

#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    cabi::listen(&SHIM, fd, backlog)
}

#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    cabi::accept4(&SHIM, fd, addr, len, 0)
}

#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    cabi::accept4(&SHIM, fd, addr, len, flags)
}

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    cabi::connect(&SHIM, fd, addr, len)
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    cabi::read(&SHIM, fd, buf, n)
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize {
    cabi::read(&SHIM, fd, buf, n.min(buflen))
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    cabi::write(&SHIM, fd, buf, n)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> isize {
    cabi::readv(&SHIM, fd, iov, cnt)
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> isize {
    cabi::writev(&SHIM, fd, iov, cnt)
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize {
    cabi::recvfrom(
        &SHIM,
        fd,
        buf,
        n,
        flags,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )
}

#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
    flags: c_int,
) -> isize {
    cabi::recvfrom(
        &SHIM,
        fd,
        buf,
        n.min(buflen),
        flags,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> isize {
    cabi::recvfrom(&SHIM, fd, buf, n, flags, addr, len)
}

#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> isize {
    cabi::recvfrom(&SHIM, fd, buf, n.min(buflen), flags, addr, len)
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> isize {
    cabi::recvmsg(&SHIM, fd, msg, flags)
}

#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize {
    cabi::sendto(&SHIM, fd, buf, n, flags, std::ptr::null(), 0)
}

#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> isize {
    cabi::sendto(&SHIM, fd, buf, n, flags, addr, len)
}

#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> isize {
    cabi::sendmsg(&SHIM, fd, msg, flags)
}

#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    cabi::shutdown(&SHIM, fd, how)
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    cabi::close(&SHIM, fd)
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    cabi::dup(&SHIM, fd)
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    cabi::dup3(&SHIM, old, new, 0, true)
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    cabi::dup3(&SHIM, old, new, flags, false)
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    cabi::close_range(&SHIM, first, last, flags)
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    cabi::closefrom(&SHIM, low);
}

#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut libc::FILE) -> c_int {
    cabi::fclose(&SHIM, f)
}

#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    cabi::vfork()
}

#[no_mangle]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    cabi::sockname(&SHIM, fd, addr, len, false)
}

#[no_mangle]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    cabi::sockname(&SHIM, fd, addr, len, true)
}

// fcntl and ioctl are variadic in C; their one optional argument is passed
// in the same register as a third fixed argument on the System V ABIs
// (x86-64, AArch64), which is how they are declared here.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    cabi::fcntl(&SHIM, fd, cmd, arg)
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    cabi::fcntl(&SHIM, fd, cmd, arg)
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    cabi::ioctl(&SHIM, fd, request, arg)
}

#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    cabi::setsockopt(&SHIM, fd, level, name, value, len)
}

#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    cabi::getsockopt(&SHIM, fd, level, name, value, len)
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    cabi::poll(&SHIM, fds, n, timeout)
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    fdslen: usize,
) -> c_int {
    let cap = (fdslen / std::mem::size_of::<pollfd>()) as nfds_t;
    cabi::poll(&SHIM, fds, n.min(cap), timeout)
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    cabi::ppoll(&SHIM, fds, n, timeout, sigmask)
}

#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
    fdslen: usize,
) -> c_int {
    let cap = (fdslen / std::mem::size_of::<pollfd>()) as nfds_t;
    cabi::ppoll(&SHIM, fds, n.min(cap), timeout, sigmask)
}

#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut timeval,
) -> c_int {
    cabi::select(&SHIM, nfds, r, w, e, timeout)
}

#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    cabi::pselect(&SHIM, nfds, r, w, e, timeout, sigmask)
}

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut epoll_event,
) -> c_int {
    cabi::epoll_ctl(&SHIM, epfd, op, fd, event)
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    cabi::epoll_pwait(&SHIM, epfd, events, max, timeout, std::ptr::null())
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const sigset_t,
) -> c_int {
    cabi::epoll_pwait(&SHIM, epfd, events, max, timeout, sigmask)
}
