//! Owned memory mappings: the UMEM area, the rings the kernel shares, and
//! memfds shared with another process (the daemon's memory slots and
//! attachment channels, [`super::shm`]).

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
    /// AF_XDP rings are mapped this way) or with another process (a memfd,
    /// [`super::shm`]).
    ///
    /// # Errors
    /// `mmap` failed.
    pub fn shared(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Result<Mmap, SyscallError> {
        // SAFETY: a new shared mapping at an address the kernel picks, so
        // it aliases no Rust object; the other side (the kernel for a ring,
        // another process for a memfd) writes it concurrently, which every
        // user of the pointer accounts for (atomics, volatile reads, or
        // bytes whose values are never trusted).
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

    /// Keeps this mapping out of processes forked from this one
    /// (`MADV_DONTFORK`): a child never maps what its parent shares with
    /// another process.
    ///
    /// # Errors
    /// `madvise` failed.
    pub fn keep_from_children(&self) -> Result<(), SyscallError> {
        // SAFETY: the range is exactly this live mapping; the advice
        // changes only what a later fork copies, never this process's
        // view of the memory.
        let ret = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_DONTFORK) };
        super::syscall::check(ret, "madvise(MADV_DONTFORK)").map(|_| ())
    }

    fn from_raw(
        ptr: *mut libc::c_void,
        len: usize,
        call: &'static str,
    ) -> Result<Mmap, SyscallError> {
        let ptr = check_mmap(ptr, call)?;
        Ok(Mmap { ptr, len })
    }

    /// Replaces bytes `offset..offset + len` of this mapping with a shared
    /// mapping of `fd` from its start (`MAP_FIXED`): a memfd slot inside
    /// the UMEM. The range stays part of this mapping, unmapped with it.
    ///
    /// # Errors
    /// The range is not page-aligned or not inside the mapping, or `mmap`
    /// failed.
    pub fn overlay_shared(
        &mut self,
        offset: usize,
        fd: BorrowedFd<'_>,
        len: usize,
    ) -> Result<(), SyscallError> {
        let page = page_size();
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len);
        if !inside || len == 0 || !offset.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(SyscallError {
                call: "mmap(MAP_FIXED overlay)",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        // SAFETY: the target range was checked to be page-aligned and to
        // lie inside this mapping, which `self` owns; `&mut self` means no
        // slice into the mapping is alive (they all borrow the owner), so
        // replacing the pages under it invalidates no reference. MAP_FIXED
        // replaces exactly that range; the result is checked for
        // MAP_FAILED (the old pages are gone then, and the range reads as
        // unmapped: the caller drops the whole mapping on error).
        let ptr = unsafe {
            libc::mmap(
                self.ptr.as_ptr().add(offset).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        check_mmap(ptr, "mmap(MAP_FIXED overlay)")?;
        Ok(())
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

/// The system page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
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
