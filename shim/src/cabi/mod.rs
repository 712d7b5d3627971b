//! The shim's C side: the C interface (`table.rs`, written once) and the
//! handlers behind it, the C library's own functions (`next.rs`,
//! `dlsym(RTLD_NEXT, …)`), and the conversions between a C caller's
//! pointers and the safe types a [`SocketLayer`] takes (`ptr.rs`).
//! The only module of this crate with `unsafe`.
//!
//! Each handler asks the layer whether the descriptor is one of its
//! sockets ([`SocketLayer::owns`], lock-free, so the pass-through costs an
//! atomic load) and either calls the C library's function or turns the
//! pointers into slices and calls the layer. Every pointer a C caller
//! passes is trusted exactly as far as the C function's contract says
//! (`read(fd, buf, n)`: `buf` has `n` writable bytes), and no further.
//! The handlers are grouped by family: [`sock`], [`io`], [`fds`],
//! [`sockopt`], [`poll`] (and select), [`epoll`], [`exec`]. Each has the C
//! function's contract as its safety contract.
//!
//! [`real`] gives the layer safe wrappers over the C library's functions for
//! the descriptors it manages itself (the placeholder socket behind each
//! of its fds, kernel fds in a mixed poll set, the epoll instance).
//!
//! The module is public (hidden) only because the preload library's
//! exports, expanded there from the table, call the handlers.

use std::ffi::c_int;

#[cfg(doc)]
use crate::layer::SocketLayer;
use crate::layer::{CResult, Errno};

pub mod epoll;
pub mod exec;
pub mod fds;
pub mod io;
mod next;
pub mod poll;
mod ptr;
pub mod real;
pub mod sock;
pub mod sockopt;
mod table;
#[cfg(test)]
mod tests;

/// The C types of the table's prototypes, for the modules it expands in.
pub mod ctypes {
    pub use libc::{
        epoll_event, fd_set, iovec, msghdr, nfds_t, off_t, pid_t, pollfd, sigset_t, sockaddr,
        socklen_t, timespec, timeval, FILE,
    };
    pub use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
}
/// Sets the thread's `errno`.
pub(crate) fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The thread's `errno` after a C library call failed.
pub(crate) fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

pub(crate) fn ret_int(r: CResult<c_int>) -> c_int {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

pub(crate) fn ret_size(r: CResult<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

pub(crate) fn check(ret: c_int) -> CResult<c_int> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}
