//! Creating, binding, claiming and naming sockets: `socket`, `bind`,
//! `listen`, `connect`, `accept4`, `shutdown`, `getsockname` and
//! `getpeername`.

use std::ffi::c_int;

use libc::{sockaddr, socklen_t};

use super::next;
use super::ptr::{read_addr, write_addr};
use super::ret_int;
use crate::layer::SocketLayer;

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
        let new = unsafe { next::accept4(fd, addr, len, flags) };
        if new >= 0 && l.watches(fd) {
            l.kernel_accepted(fd);
        }
        return new;
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
