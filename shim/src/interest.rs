//! One epoll instance's entries for our sockets, as `epoll_ctl` set them
//! and as the readiness of `ready` last reported them.

use std::collections::BTreeMap;
use std::os::fd::RawFd;

/// One epoll instance's entries for our sockets.
#[derive(Debug, Default)]
pub(crate) struct Epoll {
    pub entries: BTreeMap<RawFd, Interest>,
}

/// What an edge-triggered entry last reported: its mask and the socket's
/// counts then (new bytes or acknowledgements are a new edge).
pub(crate) type Stamp = (u32, u64, u64, usize);

/// One epoll entry for a socket of ours.
#[derive(Debug, Clone)]
pub(crate) struct Interest {
    pub events: u32,
    pub data: u64,
    pub last: Option<Stamp>,
    /// An `EPOLLONESHOT` entry that fired (until `EPOLL_CTL_MOD`).
    pub disabled: bool,
}
