//! What opening or using an AF_XDP port can fail with.

use crate::sys::ring::RingError;
use crate::sys::syscall::SyscallError;
use crate::sys::umem_error::UmemError;

/// Opening or using a socket failed.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    /// A syscall failed.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
    /// A ring could not be set up.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// The UMEM could not be set up, or a descriptor was out of bounds.
    #[error(transparent)]
    Umem(#[from] UmemError),
    /// No interface of that name in this network namespace.
    #[error("no network interface named {0:?}")]
    NoSuchInterface(String),
    /// A configuration value is impossible.
    #[error("invalid AF_XDP configuration: {0}")]
    Config(String),
    /// Binding failed; says which mode was tried.
    #[error("binding AF_XDP socket to {ifname} queue {queue} in {mode} mode: {source}")]
    Bind {
        /// Interface.
        ifname: String,
        /// Queue.
        queue: u32,
        /// Mode tried.
        mode: &'static str,
        /// Underlying error.
        #[source]
        source: SyscallError,
    },
}
