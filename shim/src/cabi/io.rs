//! Moving bytes: `read`, `write`, `readv`, `writev`, `recvfrom`,
//! `recvmsg`, `sendto`, `sendmsg` and `sendfile`.

use std::ffi::{c_int, c_void};

use libc::{iovec, msghdr, sockaddr, socklen_t};

use super::next;
use super::ptr::{buf, buf_mut, iov_parts, read_addr, recv_parts, send_parts, write_addr};
use super::ret_size;
use crate::layer::SocketLayer;

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
    // `recv` is `recvfrom` without an address: naming the peer (a lookup
    // and the socket's family) only when asked.
    if r.is_ok() && !addr.is_null() {
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
        if flags & libc::MSG_FASTOPEN != 0 && l.watches(fd) {
            // SAFETY: the caller's contract: `addr` is null or has `len`
            // readable bytes.
            if let Err(e) = l.fast_open(fd, unsafe { read_addr(addr, len) }) {
                return ret_size(Err(e));
            }
        }
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
        if flags & libc::MSG_FASTOPEN != 0 && !msg.is_null() && l.watches(fd) {
            // SAFETY: the caller's contract: a valid msghdr, whose name is
            // null or has `msg_namelen` readable bytes.
            let a = unsafe { read_addr((*msg).msg_name.cast(), (*msg).msg_namelen) };
            if let Err(e) = l.fast_open(fd, a) {
                return ret_size(Err(e));
            }
        }
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

/// `sendfile(2)` (and `sendfile64`): to one of the layer's sockets, the
/// file's bytes are read and sent ([`SocketLayer::sendfile`]); `*offset`
/// moves by what was sent, or the file's position does when `offset` is
/// null.
///
/// # Safety
/// `offset` is null or points to a writable `off_t`.
pub unsafe fn sendfile<L: SocketLayer>(
    l: &L,
    out: c_int,
    input: c_int,
    offset: *mut libc::off_t,
    count: usize,
) -> isize {
    if !l.owns(out) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next::sendfile(out, input, offset, count) };
    }
    // SAFETY: the caller's contract: null or a valid `off_t`.
    let at = unsafe { offset.as_ref() }.copied();
    match l.sendfile(out, input, at, count) {
        Ok(n) => {
            // SAFETY: as above; written only when the caller passed one.
            if let Some(o) = unsafe { offset.as_mut() } {
                *o += n as libc::off_t;
            }
            n as isize
        }
        Err(e) => ret_size(Err(e)),
    }
}
