//! What a port counts: our own counters and the kernel's `XDP_STATISTICS`.

use std::os::fd::BorrowedFd;

use crate::sys::syscall::{getsockopt, SyscallError};

/// Kernel statistics of one socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XskStats {
    /// Dropped for reasons other than invalid descriptors.
    pub rx_dropped: u64,
    /// Invalid RX descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors.
    pub tx_invalid_descs: u64,
    /// RX ring was full.
    pub rx_ring_full: u64,
    /// Fill ring was empty when a packet arrived.
    pub rx_fill_ring_empty_descs: u64,
    /// TX ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

impl XskStats {
    /// Every statistic as `(name, value)`, named as the kernel's
    /// `struct xdp_statistics` names them.
    pub fn iter(&self) -> [(&'static str, u64); 6] {
        [
            ("rx_dropped", self.rx_dropped),
            ("rx_invalid_descs", self.rx_invalid_descs),
            ("tx_invalid_descs", self.tx_invalid_descs),
            ("rx_ring_full", self.rx_ring_full),
            ("rx_fill_ring_empty_descs", self.rx_fill_ring_empty_descs),
            ("tx_ring_empty_descs", self.tx_ring_empty_descs),
        ]
    }

    /// The statistics that count a packet or descriptor lost, as
    /// `(name, value)`. `tx_ring_empty_descs` is left out: it counts the
    /// kernel finding nothing to send, not a loss.
    pub fn drops(&self) -> [(&'static str, u64); 5] {
        [
            ("xsk_rx_dropped", self.rx_dropped),
            ("xsk_rx_invalid_descs", self.rx_invalid_descs),
            ("xsk_tx_invalid_descs", self.tx_invalid_descs),
            ("xsk_rx_ring_full", self.rx_ring_full),
            ("xsk_rx_fill_ring_empty", self.rx_fill_ring_empty_descs),
        ]
    }
}

impl std::ops::AddAssign for XskStats {
    fn add_assign(&mut self, o: XskStats) {
        self.rx_dropped += o.rx_dropped;
        self.rx_invalid_descs += o.rx_invalid_descs;
        self.tx_invalid_descs += o.tx_invalid_descs;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty_descs += o.rx_fill_ring_empty_descs;
        self.tx_ring_empty_descs += o.tx_ring_empty_descs;
    }
}

/// Our own counters of the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCounters {
    /// Packets received (all sockets of the port).
    pub rx_packets: u64,
    /// Descriptors received.
    pub rx_descs: u64,
    /// Bytes of the packets received (every fragment, headers included).
    pub rx_bytes: u64,
    /// Received packets dropped because a descriptor was not a frame the
    /// kernel held for receiving: outside the frame area, across a frame,
    /// a TX frame, or a frame returned twice.
    pub rx_bad_descs: u64,
    /// RX descriptors whose address was not recycled for that reason
    /// (frames, not packets: a dropped chain may hold several).
    pub rx_frames_refused: u64,
    /// Completions of addresses in the frame area the kernel did not hold
    /// for sending (a bug or corruption): not recycled.
    pub tx_frames_refused: u64,
    /// Multi-buffer packets with more fragments than
    /// [`MAX_FRAGS`](super::MAX_FRAGS) (dropped).
    pub rx_too_many_frags: u64,
    /// Packets queued for TX.
    pub tx_packets: u64,
    /// Bytes of the packets queued for TX (headers included).
    pub tx_bytes: u64,
    /// Of `tx_packets`, those queued as multi-buffer packets (more than one
    /// descriptor, `XDP_PKT_CONTD` on all but the last): a chain of a
    /// header frame and fragments pointing into the MR area
    /// ([`XskPort::transmit_chain`](super::XskPort::transmit_chain)), or a
    /// packet copied across several frames.
    pub tx_multi_buffer: u64,
    /// Descriptors those packets took after their first (a chain's MR
    /// fragments: one per chunk the payload touches).
    pub tx_fragments: u64,
    /// TX attempts refused because no TX frame or ring slot was free.
    pub tx_no_frame: u64,
    /// `sendto` kicks.
    pub tx_kicks: u64,
    /// Kicks answered EAGAIN/EBUSY/ENOBUFS (retried on the next flush).
    pub tx_kick_busy: u64,
    /// TX completions reclaimed.
    pub tx_completed: u64,
    /// RX wakeups issued for need_wakeup.
    pub rx_wakeups: u64,
    /// Descriptors still on a per-flow socket's RX ring when it was
    /// closed, whose frames went back to the fill ring unread.
    pub rx_drained_on_close: u64,
}

impl PortCounters {
    /// The counters that count a packet dropped, as `(name, value)`.
    pub fn drops(&self) -> [(&'static str, u64); 3] {
        [
            ("rx_bad_descs", self.rx_bad_descs),
            ("rx_too_many_frags", self.rx_too_many_frags),
            ("rx_drained_on_close", self.rx_drained_on_close),
        ]
    }
}

/// Reads `XDP_STATISTICS` of one socket.
pub(super) fn read(fd: BorrowedFd<'_>) -> Result<XskStats, SyscallError> {
    let s: libc::xdp_statistics =
        getsockopt(fd, libc::XDP_STATISTICS, "getsockopt(XDP_STATISTICS)")?;
    Ok(XskStats {
        rx_dropped: s.rx_dropped,
        rx_invalid_descs: s.rx_invalid_descs,
        tx_invalid_descs: s.tx_invalid_descs,
        rx_ring_full: s.rx_ring_full,
        rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        tx_ring_empty_descs: s.tx_ring_empty_descs,
    })
}
