//! Owned memory mappings: the UMEM area and the rings the kernel shares.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use super::syscall::{check_mmap, SyscallError};

/// A memory mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain process memory owned by this value; moving the
// owner to another thread moves nothing but the pointer.
unsafe impl Send for Mmap {}
// SAFETY: `&Mmap` only exposes the base pointer and length; every read or
// write through them is an `unsafe` operation with its own contract.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Anonymous private memory of `len` bytes, pre-faulted (`MAP_POPULATE`),
    /// optionally backed by huge pages (`MAP_HUGETLB`; needs pages reserved in
    /// `/proc/sys/vm/nr_hugepages`).
    ///
    /// # Errors
    /// `mmap` failed, e.g. `ENOMEM` when no huge pages are reserved.
    pub fn anonymous(len: usize, hugepages: bool) -> Result<Mmap, SyscallError> {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if hugepages {
            flags |= libc::MAP_HUGETLB;
        }
        // SAFETY: a fresh anonymous mapping aliases nothing; the result is
        // checked for MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        Self::from_raw(ptr, len, "mmap(anonymous)")
    }

    /// Maps `len` bytes of `fd` at `offset`, shared with the kernel (the
    /// AF_XDP rings are mapped this way).
    ///
    /// # Errors
    /// `mmap` failed.
    pub fn shared(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Result<Mmap, SyscallError> {
        // SAFETY: a new shared mapping of a socket's ring area; the kernel
        // owns the other side and the layout is read from XDP_MMAP_OFFSETS.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        Self::from_raw(ptr, len, "mmap(ring)")
    }

    fn from_raw(
        ptr: *mut libc::c_void,
        len: usize,
        call: &'static str,
    ) -> Result<Mmap, SyscallError> {
        let ptr = check_mmap(ptr, call)?;
        Ok(Mmap { ptr, len })
    }

    /// Base address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and nobody
        // else unmaps; borrows of it cannot outlive `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
