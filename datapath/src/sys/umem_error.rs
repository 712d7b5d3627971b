//! What can go wrong with a UMEM: its geometry, its mapping, or an
//! address outside it. Its own module so that both the UMEM ([`super::umem`])
//! and the descriptors checked against its layout ([`super::desc`]) use it
//! without importing each other.

use super::syscall::SyscallError;

/// A UMEM could not be set up or an address is outside it.
#[derive(Debug, thiserror::Error)]
pub enum UmemError {
    /// Frame size out of range or not a power of two.
    #[error("frame_size {0} must be a power of two between 2048 and 4096")]
    FrameSize(u32),
    /// No frames.
    #[error("frame_count must be at least 1")]
    NoFrames,
    /// The total does not fit in memory arithmetic.
    #[error("UMEM of {frames} frames of {frame_size} bytes plus {mr_bytes} MR bytes is too large")]
    TooLarge {
        /// Frames.
        frames: u32,
        /// Frame size.
        frame_size: u32,
        /// MR bytes.
        mr_bytes: usize,
    },
    /// A descriptor points outside the frame area or across a frame boundary.
    #[error("descriptor addr {addr:#x} len {len} is outside the frame area or crosses a frame")]
    BadDescriptor {
        /// Address.
        addr: u64,
        /// Length.
        len: u32,
    },
    /// The memory-slot geometry is refused (says why).
    #[error("mr_slots: {0}")]
    MrSlots(String),
    /// A memory slot's memfd could not be made.
    #[error("memory slot: {0}")]
    Slot(#[from] super::shm::ShmError),
    /// Mapping failed.
    #[error(transparent)]
    Map(#[from] SyscallError),
}
