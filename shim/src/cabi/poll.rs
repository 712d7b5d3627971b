//! Waiting on a set of descriptors: `poll`/`ppoll` and
//! `select`/`pselect`. A set that names none of the layer's sockets is the
//! C library's.

use std::ffi::c_int;
use std::os::fd::RawFd;

use libc::{pollfd, sigset_t, timespec, timeval};

use super::next;
use super::ptr::{duration_ms, duration_ts};
use super::ret_int;
use crate::layer::{fd_set_words, SocketLayer, SELECT_MAX_FDS};

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
