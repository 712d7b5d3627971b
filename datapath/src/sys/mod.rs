//! The only place in zerosplit that talks to the kernel directly and the
//! only module allowed `unsafe`: memory mappings, the AF_XDP rings and
//! sockets, raw packet sockets, network-namespace switching. Every unsafe
//! block states why it is sound.

pub mod mmap;
pub mod netns;
pub mod packet;
pub mod ring;
pub mod syscall;
pub mod umem;
pub mod xsk;
