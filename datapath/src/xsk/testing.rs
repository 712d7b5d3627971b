//! A port over anonymous rings, with the kernel's side of each ring in the
//! test's hands: frame ownership tested without a socket or a network.

use std::fs::File;
use std::os::fd::OwnedFd;

use super::{
    BoundMode, FlowSocket, FramePool, PortCounters, XskConfig, XskPort, XskStats, MAX_FRAGS,
};
use crate::sys::desc::XdpDesc;
use crate::sys::ring::{ConsumerRing, ProducerRing};
use crate::sys::umem::{Umem, UmemConfig};
use crate::sys::xdp_ring::{CompRing, FillRing, RxRing, TxRing};

/// Entries of every ring of a fake port: room for a chain longer than
/// [`MAX_FRAGS`].
const RING: u32 = 32;

/// The kernel's side of a fake port's rings.
pub(crate) struct FakeKernel {
    /// Takes frames from the fill ring.
    pub(super) fill: ConsumerRing<u64>,
    /// Delivers to the owner's RX ring.
    pub(super) rx: ProducerRing<XdpDesc>,
    /// Takes descriptors from the TX ring.
    pub(crate) tx: ConsumerRing<XdpDesc>,
    /// Gives sent addresses back on the completion ring.
    pub(crate) comp: ProducerRing<u64>,
}

impl FakeKernel {
    /// Receives up to `n` packets of 60 bytes into fill frames on `rx`
    /// (the owner's ring or a per-flow one); returns how many.
    pub(super) fn deliver(
        fill: &mut ConsumerRing<u64>,
        rx: &mut ProducerRing<XdpDesc>,
        n: u32,
    ) -> u32 {
        let n = fill.available(n).min(rx.reserve(n));
        for i in 0..n {
            let desc = XdpDesc {
                addr: fill.read(i),
                len: 60,
                options: 0,
            };
            rx.write(i, desc);
        }
        fill.release(n);
        rx.submit(n);
        n
    }
}

impl FakeKernel {
    /// Takes every descriptor on the TX ring (the kernel "sends" them) and
    /// returns them; their completions are the caller's to give back, when
    /// it likes, with [`FakeKernel::complete`].
    pub(crate) fn take_tx(&mut self) -> Vec<XdpDesc> {
        let n = self.tx.available(self.tx.size());
        let descs = (0..n).map(|i| self.tx.read(i)).collect();
        self.tx.release(n);
        descs
    }

    /// Puts `addrs` on the completion ring; returns how many fit.
    pub(crate) fn complete(&mut self, addrs: &[u64]) -> u32 {
        let want = u32::try_from(addrs.len()).unwrap_or(u32::MAX);
        let n = self.comp.reserve(want);
        for (i, &a) in addrs.iter().take(n as usize).enumerate() {
            self.comp.write(i as u32, a);
        }
        self.comp.submit(n);
        n
    }
}

fn null_fd() -> OwnedFd {
    File::open("/dev/null").expect("open /dev/null").into()
}

impl XskPort {
    /// A port of `frame_count` frames (4 for TX) over anonymous rings of
    /// [`RING`] entries, already refilled.
    pub(super) fn fake(frame_count: u32) -> (XskPort, FakeKernel) {
        XskPort::fake_with_mr(frame_count, 0)
    }

    /// [`XskPort::fake`] with an MR area of `mr_bytes` and multi-buffer
    /// TX on (zero-copy chains).
    pub(crate) fn fake_with_mr(frame_count: u32, mr_bytes: usize) -> (XskPort, FakeKernel) {
        let umem_config = UmemConfig {
            frame_size: 2048,
            frame_count,
            mr_bytes,
            hugepages: false,
        };
        let mut umem = Umem::new(&umem_config).expect("anonymous UMEM");
        let layout = umem.layout();
        let (fill, kernel_fill) = FillRing::anonymous(RING);
        let (kernel_rx, rx) = RxRing::anonymous(RING);
        let (kernel_comp, comp) = CompRing::anonymous(RING, layout);
        let (tx, kernel_tx) = TxRing::anonymous(RING);
        let config = XskConfig {
            umem: umem_config,
            tx_frames: 4,
            rx_ring: RING,
            tx_ring: RING,
            fill_ring: RING,
            comp_ring: RING,
            flow_rx_ring: RING,
            need_wakeup: false,
            multi_buffer: mr_bytes > 0,
            ..XskConfig::default()
        };
        let frames = FramePool::new(umem.take_frames(), config.tx_frames, umem.layout());
        let mut port = XskPort {
            id: XskPort::next_id(),
            fd: null_fd(),
            umem,
            fill,
            comp,
            rx,
            tx,
            frames,
            tx_pending: Vec::new(),
            tx_outstanding: 0,
            chain_scratch: Vec::with_capacity(MAX_FRAGS),
            frag_scratch: Vec::with_capacity(MAX_FRAGS),
            ifname: "fake0".to_string(),
            ifindex: 0,
            queue: 0,
            mode: BoundMode::Copy,
            config,
            counters: PortCounters::default(),
            closed_flow_stats: XskStats::default(),
        };
        port.refill();
        let kernel = FakeKernel {
            fill: kernel_fill,
            rx: kernel_rx,
            tx: kernel_tx,
            comp: kernel_comp,
        };
        (port, kernel)
    }

    /// A per-flow socket of this fake port and the kernel's side of its
    /// RX ring.
    pub(super) fn fake_flow_socket(&self) -> (FlowSocket, ProducerRing<XdpDesc>) {
        let (kernel_rx, rx) = RxRing::anonymous(self.config.flow_rx_ring);
        let socket = FlowSocket {
            owner: self.id,
            fd: null_fd(),
            rx,
        };
        (socket, kernel_rx)
    }
}
