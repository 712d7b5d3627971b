//! Memory shared with other processes, for the daemon and the
//! applications attached to it: sealed memfds ([`SharedMemory`]) — an
//! application's memory slot of the UMEM, or an attachment channel — and
//! the rings and wakeup events over them. Defined in the crate's `unsafe`
//! room (`sys`), published here.

pub use crate::sys::channel::ChannelLayout;
pub use crate::sys::ring::{ConsumerRing, ProducerRing, RingError, RingOffsets};
pub use crate::sys::shm::{SharedMemory, ShmError};
pub use crate::sys::wait::EventFd;
pub use bytemuck::{Pod, Zeroable};
