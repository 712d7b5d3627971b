//! Options and modes of a socket: `fcntl`, `ioctl`, `setsockopt` and
//! `getsockopt`.

use std::ffi::{c_int, c_ulong, c_void};

use libc::socklen_t;

use super::next;
use super::ptr::{buf, buf_mut};
use super::ret_int;
use crate::layer::SocketLayer;

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
    // Close-on-exec is the descriptor's, kept by the placeholder's
    // (Python's `set_inheritable` sets it this way).
    if !l.owns(fd) || request == libc::FIOCLEX || request == libc::FIONCLEX {
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
