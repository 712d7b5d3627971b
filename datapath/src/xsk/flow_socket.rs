//! Per-flow sockets: an RX ring of their own on the port's queue, sharing
//! the port's UMEM (`XDP_SHARED_UMEM`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::open::bind_retrying;
use super::{stats, XskError, XskPort, XskStats};
use crate::sys::syscall::{setsockopt, xdp_socket, SyscallError};
use crate::sys::xdp_ring::{MmapOffsets, RxRing};

/// A per-flow socket: an RX ring of its own on the port's queue, sharing the
/// port's UMEM. Receive from it with [`XskPort::receive_flow`].
#[derive(Debug)]
pub struct FlowSocket {
    /// The id of the port whose UMEM this socket shares.
    pub(super) owner: u64,
    fd: OwnedFd,
    pub(super) rx: RxRing,
}

impl FlowSocket {
    /// The socket, for the XSKMAP.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Kernel statistics of this socket.
    ///
    /// # Errors
    /// `getsockopt` failed.
    pub fn stats(&self) -> Result<XskStats, SyscallError> {
        stats::read(self.fd.as_fd())
    }
}

impl XskPort {
    /// Opens a per-flow socket on the same queue, sharing this UMEM. Put its
    /// fd into the XSKMAP slot the flow's steering entry names.
    ///
    /// # Errors
    /// A syscall failed (some drivers refuse shared sockets: fall back to
    /// the catch-all socket with software demux).
    pub fn open_flow_socket(&self) -> Result<FlowSocket, XskError> {
        let fd = xdp_socket()?;
        let size = self.config.flow_rx_ring;
        setsockopt(
            fd.as_fd(),
            libc::SOL_XDP,
            libc::XDP_RX_RING,
            &size,
            "setsockopt(XDP_RX_RING)",
        )?;
        let off = MmapOffsets::query(fd.as_fd())?;
        let rx = RxRing::map(fd.as_fd(), &off, size, self.umem.layout())?;
        // The owner's flags (copy/zero-copy, need_wakeup, SG) apply; a
        // shared socket passing its own gets EINVAL (FACTS.md).
        bind_retrying(
            fd.as_fd(),
            self.ifindex,
            self.queue,
            libc::XDP_SHARED_UMEM,
            Some(self.fd.as_fd()),
        )
        .map_err(|source| XskError::Bind {
            ifname: self.ifname.clone(),
            queue: self.queue,
            mode: "shared-umem",
            source,
        })?;
        Ok(FlowSocket {
            owner: self.id,
            fd,
            rx,
        })
    }
}
