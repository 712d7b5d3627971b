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
    pub(super) fd: OwnedFd,
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

    /// Descriptors on this socket's RX ring not yet read.
    pub fn rx_pending(&mut self) -> u32 {
        self.rx.available(self.rx.size())
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
        #[cfg(any(test, feature = "testing"))]
        if let Some(socket) = self.open_fake_flow_socket() {
            return Ok(socket);
        }
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
        let rx = RxRing::map(fd.as_fd(), &off, size)?;
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

    /// Closes a per-flow socket without losing its frames. Clear the
    /// socket's XSKMAP slot and steering entry first, so nothing new is
    /// redirected to it; then every descriptor still on its RX ring gives
    /// its frame back to the free list unread (counted
    /// `rx_drained_on_close`) and on to the fill ring, and the socket is
    /// closed; its kernel statistics are kept in
    /// [`closed_flow_stats`](XskPort::closed_flow_stats). Returns how many
    /// descriptors were drained.
    pub fn close_flow_socket(&mut self, mut socket: FlowSocket) -> u32 {
        if socket.owner != self.id {
            log::error!(
                "{}: close_flow_socket with a socket of another port; its frames are not ours",
                self.ifname
            );
            return 0;
        }
        #[cfg(any(test, feature = "testing"))]
        self.close_fake_flow_socket(&socket);
        if let Ok(stats) = socket.stats() {
            self.closed_flow_stats += stats;
        }
        let drained = socket.rx_pending();
        let frames = &mut self.frames;
        let refused = socket
            .rx
            .release(drained, &mut frames.rx_free, &mut frames.owners);
        self.counters.rx_frames_refused += u64::from(refused);
        self.counters.rx_drained_on_close += u64::from(drained);
        drop(socket);
        self.refill();
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::FakeKernel;
    use super::*;

    #[test]
    fn closing_flow_sockets_with_traffic_on_their_rings_conserves_rx_frames() {
        let (mut port, mut kernel) = XskPort::fake(16);
        let start = port.rx_frame_count();
        assert_eq!(
            (start.total(), start.fill),
            (12, 12),
            "12 RX frames, all filled"
        );
        let (mut a, mut a_rx) = port.fake_flow_socket();
        let (mut b, mut b_rx) = port.fake_flow_socket();
        assert_eq!(FakeKernel::deliver_blank(&mut kernel.fill, &mut a_rx, 3), 3);
        assert_eq!(FakeKernel::deliver_blank(&mut kernel.fill, &mut b_rx, 2), 2);
        assert_eq!(
            FakeKernel::deliver_blank(&mut kernel.fill, &mut kernel.rx, 1),
            1
        );
        let held = |port: &mut XskPort| port.rx_frame_count().total();
        assert_eq!(held(&mut port) + a.rx_pending() + b.rx_pending(), 12);

        assert_eq!(port.close_flow_socket(a), 3);
        assert_eq!(port.close_flow_socket(b), 2);
        let end = port.rx_frame_count();
        assert_eq!(end.total(), start.total(), "no frame lost with the sockets");
        assert_eq!((end.fill, end.rx), (11, 1), "drained frames are refilled");
        assert_eq!(port.counters().rx_drained_on_close, 5);
    }

    #[test]
    fn closing_a_socket_of_another_port_takes_none_of_its_frames() {
        let (mut port, _kernel) = XskPort::fake(16);
        let (mut other, mut other_kernel) = XskPort::fake(16);
        let (socket, mut rx) = other.fake_flow_socket();
        assert_eq!(
            FakeKernel::deliver_blank(&mut other_kernel.fill, &mut rx, 2),
            2
        );
        assert_eq!(port.close_flow_socket(socket), 0);
        assert_eq!(port.rx_frame_count().total(), 12);
        assert_eq!(port.counters().rx_drained_on_close, 0);
        assert_eq!(
            other.rx_frame_count().total(),
            10,
            "other's frames are gone with its socket"
        );
    }
}
