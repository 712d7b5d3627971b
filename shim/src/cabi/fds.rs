//! Descriptors closed, duplicated and inherited: `close`, `dup`,
//! `dup2`/`dup3`, `close_range`, `closefrom`, `fclose` and `vfork`; the
//! layer hears of each before a number it knows is reused.

use std::ffi::{c_int, c_uint};
use std::os::fd::RawFd;

use super::next;
use crate::layer::SocketLayer;

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

/// `fork(2)`: the layer prepares (its table consistent, no other thread
/// inside it) and, after the C library's fork, gives the child its own
/// hold on every socket it inherited ([`SocketLayer::after_fork`]); the
/// caller's `errno` is the fork's.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn fork<L: SocketLayer>(l: &L) -> libc::pid_t {
    l.before_fork();
    // SAFETY: no pointers; the C library's fork runs its fork handlers.
    let pid = unsafe { next::fork() };
    let e = super::errno();
    l.after_fork(pid);
    if pid < 0 {
        super::set_errno(e);
    }
    pid
}

/// `vfork(2)`, as [`fork`]. A vfork child shares the parent's memory
/// until it execs or exits, so a `close` or `dup2` it makes first would
/// change the parent's socket table, under the parent's lock; and a vfork
/// cannot be wrapped (the child returns through the wrapper's frame,
/// which the parent still needs). POSIX lets `vfork` be `fork`.
///
/// # Safety
/// None beyond the C function's (the child only uses what a fork child
/// may).
pub unsafe fn vfork<L: SocketLayer>(l: &L) -> libc::pid_t {
    // SAFETY: as `fork`.
    unsafe { fork(l) }
}
