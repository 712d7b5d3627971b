//! AF_XDP sockets: the UMEM owner of one (interface, queue) — which is also
//! that queue's catch-all socket — and per-flow sockets bound to the same
//! queue with `XDP_SHARED_UMEM`.
//!
//! All RX frames return through the owner's fill ring and all TX
//! completions arrive on the owner's completion ring (FACTS.md: this is how
//! the kernel shares one UMEM), so one thread owns the [`XskPort`] and every
//! [`FlowSocket`] of it. Per-flow RX rings are kept small relative to the
//! fill ring so that one undrained flow cannot hold every frame.
//!
//! This is the socket's policy, in safe code: opening in steps
//! ([`open`](XskPort::open)), frame ownership ([`frames`]), receiving and
//! multi-buffer gathering ([`rx`]), transmitting and reclaiming ([`tx`]).
//! What must be `unsafe` — the mappings, the rings, frame memory and the
//! syscalls — is in the crate-private `sys` module, reached through typed
//! rings and owned frame addresses.
//!
//! Minimum kernel: 5.4 (need_wakeup), 6.6 for multi-buffer (`XDP_USE_SG`).

mod config;
mod error;
mod flow_socket;
mod frames;
mod open;
mod rx;
mod stats;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;
mod tx;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

pub use config::{
    BindMode, BoundMode, BusyPoll, XskConfig, MAX_FRAGS, MAX_FRAME_COUNT, MAX_RING_SIZE,
};
pub use error::XskError;
pub use flow_socket::FlowSocket;
pub use frames::RxFrameCount;
pub use rx::RxPacket;
pub use stats::{PortCounters, XskStats};

use crate::sys::desc::{MrAddr, TxDesc};
use crate::sys::syscall::SyscallError;
use crate::sys::umem::Umem;
use crate::sys::xdp_ring::{CompRing, FillRing, RxRing, TxRing};
use frames::FramePool;

/// The UMEM owner on one (interface, queue): the catch-all socket, the fill
/// and completion rings, the TX ring, and the frame pools.
#[derive(Debug)]
pub struct XskPort {
    /// Unique per port: a [`FlowSocket`] remembers its owner's, so frames
    /// of one UMEM are never taken into another port's free list.
    id: u64,
    fd: OwnedFd,
    umem: Umem,
    fill: FillRing,
    comp: CompRing,
    rx: RxRing,
    tx: TxRing,
    frames: FramePool,
    /// Descriptors written by `transmit` but not yet on the TX ring.
    tx_pending: Vec<TxDesc>,
    /// TX ring slots handed to the kernel and not yet completed.
    tx_outstanding: u32,
    /// Reused list of payload fragments for `transmit_chain`.
    chain_scratch: Vec<(usize, usize)>,
    /// Reused list of the checked MR fragments of one chain.
    frag_scratch: Vec<MrAddr>,
    ifname: String,
    ifindex: u32,
    queue: u32,
    mode: BoundMode,
    config: XskConfig,
    counters: PortCounters,
    /// Kernel statistics of the per-flow sockets closed so far.
    closed_flow_stats: XskStats,
    /// For a port over the fake kernel: the kernel's side of its per-flow
    /// sockets' RX rings ([`testing`]); `None` for a real socket.
    #[cfg(any(test, feature = "testing"))]
    fake: Option<testing::FakeFlowRings>,
}

/// The id of the next port opened.
static NEXT_PORT_ID: AtomicU64 = AtomicU64::new(0);

impl XskPort {
    /// A fresh port id.
    fn next_id() -> u64 {
        NEXT_PORT_ID.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether this port runs over the fake kernel of tests (no socket:
    /// no wakeups, no statistics syscalls).
    fn is_fake(&self) -> bool {
        #[cfg(any(test, feature = "testing"))]
        {
            self.fake.is_some()
        }
        #[cfg(not(any(test, feature = "testing")))]
        {
            false
        }
    }

    /// The owner (catch-all) socket, for the XSKMAP.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Queue id.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Copy or zero-copy, as bound.
    pub fn mode(&self) -> BoundMode {
        self.mode
    }

    /// The configuration the port was opened with.
    pub fn config(&self) -> &XskConfig {
        &self.config
    }

    /// Our counters.
    pub fn counters(&self) -> PortCounters {
        self.counters
    }

    /// Kernel statistics of the owner socket.
    ///
    /// # Errors
    /// `getsockopt` failed.
    pub fn stats(&self) -> Result<XskStats, SyscallError> {
        stats::read(self.fd.as_fd())
    }

    /// Kernel statistics of the per-flow sockets of this port that were
    /// closed, summed (read just before each closed).
    pub fn closed_flow_stats(&self) -> XskStats {
        self.closed_flow_stats
    }

    /// The UMEM (MR area access for the application side).
    pub fn umem(&self) -> &Umem {
        &self.umem
    }

    /// The UMEM, writable.
    pub fn umem_mut(&mut self) -> &mut Umem {
        &mut self.umem
    }

    /// Frames available for RX that are not yet in the fill ring.
    pub fn rx_frames_free(&self) -> usize {
        self.frames.rx_free.len()
    }

    /// TX frames not in flight.
    pub fn tx_frames_free(&self) -> usize {
        self.frames.tx_free.len()
    }

    /// Moves free RX frames into the fill ring; returns how many.
    pub fn refill(&mut self) -> u32 {
        self.frames.refill(&mut self.fill)
    }

    /// Where the RX frames are now: free, on the fill ring, on the owner's
    /// RX ring. Add [`FlowSocket::rx_pending`] of each open per-flow socket.
    pub fn rx_frame_count(&mut self) -> RxFrameCount {
        RxFrameCount {
            free: self.frames.rx_free.len().min(u32::MAX as usize) as u32,
            fill: self.fill.in_flight(),
            rx: self.rx.available(self.rx.size()),
        }
    }
}
