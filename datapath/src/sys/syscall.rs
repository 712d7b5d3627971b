//! The syscall entry: every syscall of the datapath returns through
//! [`check`] (or [`check_size`], [`check_mmap`] for the other C return
//! conventions), which turns failure into a typed error
//! naming the call (aya's `SyscallError { call, io_error }`
//! shape). The AF_XDP socket calls live here as typed wrappers ([`xdp_socket`],
//! [`setsockopt`], [`getsockopt`], [`bind_xdp`], [`kick_tx`], [`wake_rx`]),
//! so the socket code outside `sys` runs them without `unsafe`; mappings
//! are in [`super::mmap`] and the socket wait in [`super::wait`], each
//! through the same [`check`].

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// A syscall failed.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {source}")]
pub struct SyscallError {
    /// The syscall and, where useful, its argument (e.g. `setsockopt(XDP_RX_RING)`).
    pub call: &'static str,
    /// The error the kernel returned.
    #[source]
    pub source: io::Error,
}

impl SyscallError {
    /// The errno, if any.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
}

impl SyscallError {
    /// The thread's `errno`, just after `call` reported failure: the one
    /// place a failed syscall becomes an error.
    fn last(call: &'static str) -> SyscallError {
        SyscallError {
            call,
            source: io::Error::last_os_error(),
        }
    }
}

impl From<SyscallError> for io::Error {
    /// Keeps the errno (so `raw_os_error()` and the kind still match) when
    /// there is one; otherwise keeps the kind and names the call.
    fn from(e: SyscallError) -> io::Error {
        match e.source.raw_os_error() {
            Some(errno) => io::Error::from_raw_os_error(errno),
            None => io::Error::new(e.source.kind(), e.to_string()),
        }
    }
}

/// Maps a negative return value to the thread's `errno`.
pub(crate) fn check(ret: libc::c_int, call: &'static str) -> Result<libc::c_int, SyscallError> {
    if ret < 0 {
        Err(SyscallError::last(call))
    } else {
        Ok(ret)
    }
}

/// Like [`check`] for calls returning `ssize_t`.
pub(crate) fn check_size(ret: libc::ssize_t, call: &'static str) -> Result<usize, SyscallError> {
    if ret < 0 {
        Err(SyscallError::last(call))
    } else {
        Ok(ret as usize)
    }
}

/// Like [`check`] for `mmap`, which reports failure as `MAP_FAILED`.
pub(crate) fn check_mmap(
    ptr: *mut libc::c_void,
    call: &'static str,
) -> Result<NonNull<u8>, SyscallError> {
    if ptr == libc::MAP_FAILED {
        return Err(SyscallError::last(call));
    }
    NonNull::new(ptr.cast::<u8>()).ok_or(SyscallError {
        call,
        source: io::Error::other("mmap returned NULL"),
    })
}

/// Plain C values the kernel may read from or write into whole: integers
/// and `#[repr(C)]` structs of integers without padding, for which every
/// bit pattern is a valid value.
///
/// # Safety
/// Implement only for types that have no padding bytes and no invalid bit
/// patterns (no references, enums, `bool`s or niches).
pub(crate) unsafe trait SockOptValue: Copy {}

// SAFETY: a plain integer: no padding, every bit pattern valid.
unsafe impl SockOptValue for libc::c_int {}
// SAFETY: as above.
unsafe impl SockOptValue for u32 {}
// SAFETY: two u64 and four u32 fields in that order: no padding, integers only.
unsafe impl SockOptValue for libc::xdp_umem_reg {}
// SAFETY: four `xdp_ring_offset`s, each four u64s: no padding, integers only.
unsafe impl SockOptValue for libc::xdp_mmap_offsets {}
// SAFETY: six u64 fields: no padding, integers only.
unsafe impl SockOptValue for libc::xdp_statistics {}

/// `socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0)`.
///
/// # Errors
/// The kernel refused (no AF_XDP support, no `CAP_NET_RAW`).
pub(crate) fn xdp_socket() -> Result<OwnedFd, SyscallError> {
    // SAFETY: plain socket(2) without pointers; the result is checked.
    let fd = check(
        unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) },
        "socket(AF_XDP)",
    )?;
    // SAFETY: `fd` is a freshly created descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, level, name, value)`; `call` names it in the error.
///
/// # Errors
/// The kernel refused the option or its value.
pub(crate) fn setsockopt<T: SockOptValue>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    call: &'static str,
) -> Result<(), SyscallError> {
    // SAFETY: `value` points to a live, fully initialised `T` (no padding:
    // `SockOptValue`) of the size passed; the kernel only reads it.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    check(ret, call).map(drop)
}

/// `getsockopt(fd, SOL_XDP, name)` into a zeroed `T`; `call` names it in
/// the error.
///
/// # Errors
/// The kernel refused the option.
pub(crate) fn getsockopt<T: SockOptValue>(
    fd: BorrowedFd<'_>,
    name: libc::c_int,
    call: &'static str,
) -> Result<T, SyscallError> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: the buffer is `size_of::<T>()` writable bytes; `len` says so.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            value.as_mut_ptr().cast(),
            &mut len,
        )
    };
    check(ret, call)?;
    // SAFETY: zero-initialised and possibly overwritten by the kernel with a
    // `T` (or a prefix of one, for older struct versions): valid either way,
    // as every bit pattern is a valid `T` (`SockOptValue`).
    Ok(unsafe { value.assume_init() })
}

/// One `bind(2)` of an AF_XDP socket (no retry: that is the caller's policy).
///
/// # Errors
/// The kernel refused, e.g. `EBUSY` right after the queue's previous socket
/// closed, or `EOPNOTSUPP` for zero-copy on a driver without it.
pub(crate) fn bind_xdp(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared_umem_fd: Option<BorrowedFd<'_>>,
) -> Result<(), SyscallError> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared_umem_fd.map_or(0, |f| f.as_raw_fd() as u32),
    };
    // SAFETY: `addr` is a valid sockaddr_xdp of the size passed.
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_xdp).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    check(ret, "bind(AF_XDP)").map(drop)
}

/// `sendto` with no data: asks the kernel to process the TX ring.
///
/// # Errors
/// `EAGAIN`/`EBUSY`/`ENOBUFS` when the kernel is busy (retry later), other
/// errors as returned.
pub(crate) fn kick_tx(fd: BorrowedFd<'_>) -> Result<(), SyscallError> {
    // SAFETY: sendto with no buffer and no address reads no memory of ours.
    let ret = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    check_size(ret, "sendto(AF_XDP kick)").map(drop)
}

/// `recvfrom` with no buffer: wakes the driver to refill from the fill ring
/// (need_wakeup).
///
/// # Errors
/// `EAGAIN` is the normal answer; others as returned.
pub(crate) fn wake_rx(fd: BorrowedFd<'_>) -> Result<(), SyscallError> {
    // SAFETY: recvfrom with a NULL, zero-length buffer and no address only
    // kicks the driver; no memory is written.
    let ret = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    check_size(ret, "recvfrom(AF_XDP wakeup)").map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_to_io_error_keeps_the_errno() {
        let e = SyscallError {
            call: "setns",
            source: io::Error::from_raw_os_error(libc::EPERM),
        };
        let io = io::Error::from(e);
        assert_eq!(io.raw_os_error(), Some(libc::EPERM));
        assert_eq!(io.kind(), io::ErrorKind::PermissionDenied);
        let e = SyscallError {
            call: "mmap",
            source: io::Error::other("no errno"),
        };
        assert!(io::Error::from(e).to_string().contains("mmap"));
    }
}
