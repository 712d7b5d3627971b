//! Every syscall of the datapath goes through [`check`], which turns the C
//! return convention into a typed error naming the call (as aya does).

use std::io;

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

/// Maps a negative return value to the thread's `errno`.
pub(crate) fn check(ret: libc::c_int, call: &'static str) -> Result<libc::c_int, SyscallError> {
    if ret < 0 {
        Err(SyscallError {
            call,
            source: io::Error::last_os_error(),
        })
    } else {
        Ok(ret)
    }
}

/// Like [`check`] for calls returning `ssize_t`.
pub(crate) fn check_size(ret: libc::ssize_t, call: &'static str) -> Result<usize, SyscallError> {
    if ret < 0 {
        Err(SyscallError {
            call,
            source: io::Error::last_os_error(),
        })
    } else {
        Ok(ret as usize)
    }
}
