//! Memory shared with another process through a sealed memfd: the
//! daemon's memory slots (a part of the UMEM's MR area an application
//! maps) and the attachment channels (request and completion rings plus a
//! status table).
//!
//! The other process is not trusted: it may write any byte at any time.
//! Two things keep that harmless here. The size is sealed
//! (`F_SEAL_SHRINK | F_SEAL_GROW`, and `F_SEAL_SEAL` so the seals stay),
//! so the peer cannot truncate the file under our mapping and make a
//! later access fault with `SIGBUS`; [`SharedMemory::open`] refuses a
//! descriptor without those seals or of another size. And the bytes are
//! only ever read as plain data: payload copied in and out
//! ([`SharedMemory::bytes`]), or atomics and ring slots whose every bit
//! pattern is a valid value ([`SharedMemory::atomic_u32`],
//! [`super::ring`]); nothing read from them is trusted as an index or
//! length without a check.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

use rustix::fs::{MemfdFlags, SealFlags};

use super::mmap::Mmap;
use super::syscall::SyscallError;

/// The seals a shared memory must carry: its size can change no more.
const SIZE_SEALS: SealFlags = SealFlags::SHRINK.union(SealFlags::GROW);

/// Shared memory could not be created or a received descriptor is refused.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A zero-length mapping was asked for.
    #[error("shared memory of 0 bytes")]
    Empty,
    /// A call creating, sizing or sealing the memfd failed.
    #[error("{call} failed: {source}")]
    Create {
        /// The call (`memfd_create`, `ftruncate`, `fcntl(F_ADD_SEALS)`).
        call: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The received descriptor is not a memfd that allows sealing.
    #[error("descriptor is not a sealable memfd (F_GET_SEALS failed: {0})")]
    NotMemfd(#[source] std::io::Error),
    /// The received memfd's size is not sealed: the peer could shrink it
    /// under our mapping.
    #[error("memfd lacks the F_SEAL_SHRINK and F_SEAL_GROW seals (has {0:?})")]
    NotSealed(SealFlags),
    /// The received memfd is not of the expected size.
    #[error("memfd is {actual} bytes, expected {expected}")]
    WrongSize {
        /// Its size.
        actual: u64,
        /// The size agreed on.
        expected: usize,
    },
    /// `fstat` of the received descriptor failed.
    #[error("fstat of the received memfd failed: {0}")]
    Stat(#[source] std::io::Error),
    /// Mapping it failed.
    #[error(transparent)]
    Map(#[from] SyscallError),
}

/// A sealed memfd of fixed size, mapped shared and writable.
#[derive(Debug)]
pub struct SharedMemory {
    fd: OwnedFd,
    mem: Arc<Mmap>,
}

impl SharedMemory {
    /// A new memfd of `len` bytes (zero-filled), its size sealed, mapped.
    /// `name` shows in `/proc/<pid>/fd` (debugging only).
    ///
    /// # Errors
    /// `len` is 0, or a call failed ([`ShmError::Create`], [`ShmError::Map`]).
    pub fn create(name: &str, len: usize) -> Result<SharedMemory, ShmError> {
        let fd = create_sealed(name, len)?;
        let mem = Mmap::shared(fd.as_fd(), len, 0)?;
        Ok(SharedMemory {
            fd,
            mem: Arc::new(mem),
        })
    }

    /// Maps a memfd received from another process, which must be `len`
    /// bytes with its size sealed; a process forked from this one will
    /// not map it.
    ///
    /// # Errors
    /// Not a memfd, size not sealed, another size, or `mmap` failed.
    pub fn open(fd: OwnedFd, len: usize) -> Result<SharedMemory, ShmError> {
        check_received(fd.as_fd(), len)?;
        let mem = Mmap::shared(fd.as_fd(), len, 0)?;
        // A process forked from this one must not map memory another
        // process shares with this one (it could outlive this one and see
        // the memory's next user).
        mem.keep_from_children()?;
        Ok(SharedMemory {
            fd,
            mem: Arc::new(mem),
        })
    }

    /// The memfd, to pass to the peer (`SCM_RIGHTS`).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Always false: a zero-length shared memory cannot be made.
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    /// The bytes. The peer may change them at any time: read them as
    /// payload to copy, never as a length or index to trust.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes, alive as long as `self`, and
        // its size is sealed so no page can disappear (no SIGBUS). The
        // bytes are shared with another process that may write them
        // concurrently: the slice is only for copying payload, any value
        // of any byte is valid for `u8`, and callers do not rely on two
        // reads agreeing. No `&mut` to it exists while `&self` is held.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr(), self.mem.len()) }
    }

    /// The bytes, writable (an application filling its memory slot).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only slice of
        // the mapping in this process (atomics and rings built over it
        // share an `Arc<Mmap>` and write only through atomics or raw
        // pointers, as the other process does).
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr(), self.mem.len()) }
    }

    /// The `u32` at byte `offset` as an atomic (a status word of a
    /// channel), if it lies inside and is 4-byte aligned.
    pub fn atomic_u32(&self, offset: usize) -> Option<&AtomicU32> {
        let ptr = self.aligned_field::<AtomicU32>(offset)?;
        // SAFETY: `aligned_field` checked that the 4 bytes lie inside the
        // mapping (alive as long as `&self`) at a suitable alignment; any
        // bit pattern is a valid `u32`, and both processes access the word
        // atomically.
        Some(unsafe { &*ptr })
    }

    /// The `u64` at byte `offset` as an atomic, if it lies inside and is
    /// 8-byte aligned.
    pub fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        let ptr = self.aligned_field::<AtomicU64>(offset)?;
        // SAFETY: as in `atomic_u32`, for 8 bytes.
        Some(unsafe { &*ptr })
    }

    fn aligned_field<A>(&self, offset: usize) -> Option<*const A> {
        let end = offset.checked_add(std::mem::size_of::<A>())?;
        if end > self.mem.len() || !offset.is_multiple_of(std::mem::align_of::<A>()) {
            return None;
        }
        // The base is page-aligned, so an aligned offset is an aligned
        // address.
        Some(
            self.mem
                .as_ptr()
                .wrapping_add(offset)
                .cast::<A>()
                .cast_const(),
        )
    }

    /// The mapping, for rings built over it ([`super::ring`]).
    pub(crate) fn mapping(&self) -> &Arc<Mmap> {
        &self.mem
    }

    /// The memfd itself, handed over (the mapping stays valid).
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

/// A new memfd of `len` bytes, its size sealed; for a memory slot that is
/// mapped into the UMEM rather than on its own.
pub(crate) fn create_sealed(name: &str, len: usize) -> Result<OwnedFd, ShmError> {
    if len == 0 {
        return Err(ShmError::Empty);
    }
    let create = |call| {
        move |e: rustix::io::Errno| ShmError::Create {
            call,
            source: e.into(),
        }
    };
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(create("memfd_create"))?;
    rustix::fs::ftruncate(&fd, len as u64).map_err(create("ftruncate(memfd)"))?;
    rustix::fs::fcntl_add_seals(&fd, SIZE_SEALS | SealFlags::SEAL)
        .map_err(create("fcntl(F_ADD_SEALS)"))?;
    Ok(fd)
}

/// Refuses a received descriptor that is not a memfd of `len` bytes with
/// its size sealed.
fn check_received(fd: BorrowedFd<'_>, len: usize) -> Result<(), ShmError> {
    if len == 0 {
        return Err(ShmError::Empty);
    }
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| ShmError::NotMemfd(e.into()))?;
    if !seals.contains(SIZE_SEALS) {
        return Err(ShmError::NotSealed(seals));
    }
    let st = rustix::fs::fstat(fd).map_err(|e| ShmError::Stat(e.into()))?;
    let actual = u64::try_from(st.st_size).unwrap_or(0);
    if actual != len as u64 {
        return Err(ShmError::WrongSize {
            actual,
            expected: len,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reopen(shm: &SharedMemory, len: usize) -> Result<SharedMemory, ShmError> {
        SharedMemory::open(shm.fd().try_clone_to_owned().expect("dup"), len)
    }

    #[test]
    fn two_mappings_of_one_memfd_see_each_others_writes() {
        let mut a = SharedMemory::create("zs-test", 8192).expect("create");
        let mut b = reopen(&a, 8192).expect("open");
        a.bytes_mut()[5000] = 42;
        assert_eq!(b.bytes()[5000], 42);
        b.bytes_mut()[1] = 7;
        assert_eq!(a.bytes()[1], 7);
        a.atomic_u64(8)
            .expect("aligned")
            .store(99, std::sync::atomic::Ordering::Release);
        assert_eq!(
            b.atomic_u64(8)
                .expect("aligned")
                .load(std::sync::atomic::Ordering::Acquire),
            99
        );
    }

    #[test]
    fn atomics_are_bounds_and_alignment_checked() {
        let a = SharedMemory::create("zs-test", 4096).expect("create");
        assert!(a.atomic_u32(4092).is_some());
        assert!(a.atomic_u32(4093).is_none(), "misaligned");
        assert!(a.atomic_u32(4096).is_none(), "outside");
        assert!(a.atomic_u64(4092).is_none(), "misaligned for u64");
        assert!(a.atomic_u64(4088).is_some());
        assert!(a.atomic_u64(usize::MAX - 3).is_none(), "overflow");
    }

    #[test]
    fn the_size_is_sealed_against_the_peer() {
        let a = SharedMemory::create("zs-test", 4096).expect("create");
        assert!(rustix::fs::ftruncate(a.fd(), 0).is_err(), "shrink refused");
        assert!(rustix::fs::ftruncate(a.fd(), 8192).is_err(), "grow refused");
        assert!(
            rustix::fs::fcntl_add_seals(a.fd(), SealFlags::WRITE).is_err(),
            "sealed seals"
        );
    }

    #[test]
    fn a_received_descriptor_is_checked() {
        let a = SharedMemory::create("zs-test", 4096).expect("create");
        assert!(matches!(
            reopen(&a, 8192),
            Err(ShmError::WrongSize {
                actual: 4096,
                expected: 8192
            })
        ));
        let file: OwnedFd = std::fs::File::open("/dev/null").expect("null").into();
        let e = SharedMemory::open(file, 4096).unwrap_err();
        assert!(matches!(e, ShmError::NotMemfd(_)), "{e}");
        // A memfd whose size the sender can still change.
        let loose =
            rustix::fs::memfd_create("loose", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .expect("memfd");
        rustix::fs::ftruncate(&loose, 4096).expect("size");
        let e = SharedMemory::open(loose, 4096).unwrap_err();
        assert!(matches!(e, ShmError::NotSealed(_)), "{e}");
        assert!(e.to_string().contains("F_SEAL_SHRINK"), "{e}");
        assert!(matches!(
            SharedMemory::create("zs-test", 0),
            Err(ShmError::Empty)
        ));
    }
}
