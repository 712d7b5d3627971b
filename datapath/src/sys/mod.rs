//! The datapath's room for `unsafe`, for talking to the kernel through
//! AF_XDP and for the memory the daemon shares with the applications
//! attached to it (the lab's namespaces, packet sockets and ethtool calls
//! are in the `zerosplit-lab` crate). It holds nothing that could be safe:
//!
//! - [`mmap`]: owned memory mappings.
//! - [`shm`]: sealed memfds shared with another (untrusted) process: the
//!   UMEM's memory slots and the attachment channels' rings and status.
//! - [`ring`]: the single-producer/single-consumer ring protocol over shared
//!   memory (with the kernel or with an untrusted process), and
//!   [`xdp_ring`]: the fill, completion, RX and TX rings as four types over
//!   it, mapped from a socket; [`channel`]: the daemon's attachment
//!   channel (two rings and a status area in one shared memory).
//! - [`umem`]: the UMEM mapping and the only access to its frame bytes;
//!   [`umem_error`]: what can go wrong with it.
//! - [`desc`]: owned frame addresses and checked descriptors, so no bare
//!   `u64` address leaves this module; [`frame_owner`]: which side holds
//!   each frame, so a frame comes back from a ring only if it went there.
//! - [`syscall`]: the syscall entry, every call returning a typed error that
//!   names it; the AF_XDP socket calls as safe wrappers.
//! - [`wait`]: sleeping until a socket is readable (`ppoll`) and the
//!   eventfd one thread signals to wake another.
//!
//! Socket policy (opening in steps, frame free lists, refill, multi-buffer
//! gathering, TX batching) lives in safe code in [`crate::xsk`]. Every
//! unsafe block here states why it is sound.

pub mod channel;
pub mod desc;
pub mod frame_owner;
pub mod mmap;
pub mod ring;
pub mod shm;
pub mod syscall;
pub mod umem;
pub mod umem_error;
pub mod wait;
pub mod xdp_ring;
