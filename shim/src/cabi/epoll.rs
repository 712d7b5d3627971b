//! epoll: `epoll_ctl` for the layer's sockets and `epoll_pwait` on an
//! instance that holds them.

use std::ffi::c_int;

use libc::{epoll_event, sigset_t};

use super::next;
use super::ptr::duration_ms;
use super::ret_int;
use crate::layer::SocketLayer;

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
