//! A port over anonymous rings, with the kernel's side of each ring in the
//! test's hands: frame ownership tested without a socket or a network.
//!
//! [`FakeKernel`] holds the kernel's end of the owner's four rings; the
//! kernel's end of each per-flow socket's RX ring stays with the port
//! ([`FakeFlowRings`]), found by the socket's descriptor number as the
//! steering's XSKMAP names it. Frame bytes are read and written through
//! the port's UMEM ([`Umem::kernel_bytes`]), so every operation that
//! touches packet memory borrows the port: the borrow checker keeps the
//! "kernel" and the datapath from touching the UMEM at once.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};

use super::{
    BoundMode, FlowSocket, FramePool, PortCounters, XskConfig, XskPort, XskStats, MAX_FRAGS,
};
use crate::sys::desc::XdpDesc;
use crate::sys::ring::{ConsumerRing, ProducerRing};
use crate::sys::umem::{Umem, UmemConfig};
use crate::sys::xdp_ring::{CompRing, FillRing, RxRing, TxRing};

/// Entries of every ring of a [`XskPort::fake`] port: room for a chain
/// longer than [`MAX_FRAGS`].
#[cfg(test)]
const RING: u32 = 32;

/// The kernel's side of a fake port's rings.
#[derive(Debug)]
pub struct FakeKernel {
    /// The id of the port whose rings these are.
    pub(crate) port: u64,
    /// Takes frames from the fill ring.
    pub(crate) fill: ConsumerRing<u64>,
    /// Delivers to the owner's RX ring.
    pub(crate) rx: ProducerRing<XdpDesc>,
    /// Takes descriptors from the TX ring.
    pub(crate) tx: ConsumerRing<XdpDesc>,
    /// Gives sent addresses back on the completion ring.
    pub(crate) comp: ProducerRing<u64>,
    /// Frames taken from the fill ring and not yet used for a packet.
    pub(crate) spare: Vec<u64>,
    /// Addresses sent and not yet completed (in send order).
    pub(crate) held: Vec<u64>,
}

/// The kernel's side of the RX rings of a fake port's per-flow sockets,
/// by socket descriptor number.
#[derive(Debug, Default)]
pub(crate) struct FakeFlowRings(Mutex<Vec<(RawFd, ProducerRing<XdpDesc>)>>);

/// Why the fake kernel could not put a packet on an RX ring (the real one
/// counts these as `rx_fill_ring_empty_descs` or `rx_ring_full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxRefused {
    /// Not enough frames on the fill ring for the packet.
    FillEmpty,
    /// The RX ring has no room for its descriptors.
    RingFull,
    /// No RX ring with that socket (a closed per-flow socket).
    NoSuchSocket,
    /// Longer than one frame and the port is not multi-buffer, or longer
    /// than [`MAX_FRAGS`] frames.
    TooLong,
}

/// Where a delivered packet goes: the owner's (catch-all) RX ring or the
/// RX ring of the per-flow socket with this descriptor number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxTarget {
    Owner,
    Socket(RawFd),
}

impl FakeKernel {
    /// Receives up to `n` packets of 60 bytes (contents unwritten) into
    /// fill frames on `rx` (the owner's ring or a per-flow one); returns
    /// how many.
    #[cfg(test)]
    pub(crate) fn deliver_blank(
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

    /// Takes every descriptor on the TX ring (the kernel "sends" them) and
    /// returns them; their completions are the caller's to give back, when
    /// it likes, with [`FakeKernel::complete_addrs`].
    pub(crate) fn take_tx_descs(&mut self) -> Vec<XdpDesc> {
        let n = self.tx.available(self.tx.size());
        let descs = (0..n).map(|i| self.tx.read(i)).collect();
        self.tx.release(n);
        descs
    }

    /// Puts `addrs` on the completion ring; returns how many fit.
    pub(crate) fn complete_addrs(&mut self, addrs: &[u64]) -> u32 {
        let want = u32::try_from(addrs.len()).unwrap_or(u32::MAX);
        let n = self.comp.reserve(want);
        for (i, &a) in addrs.iter().take(n as usize).enumerate() {
            self.comp.write(i as u32, a);
        }
        self.comp.submit(n);
        n
    }

    /// Whether these are `port`'s rings.
    pub(crate) fn owns(&self, port: &XskPort) -> bool {
        self.port == port.id
    }

    /// Frames the port put on the fill ring that the kernel has not used
    /// yet (taken or still on the ring).
    pub(crate) fn fill_frames(&mut self) -> Vec<u64> {
        let n = self.fill.available(self.fill.size());
        let mut frames = self.spare.clone();
        frames.extend((0..n).map(|i| self.fill.read(i)));
        frames
    }

    /// Writes `packet` into frames from the fill ring and puts its
    /// descriptors (one per frame, chained with `XDP_PKT_CONTD`) on the
    /// `target` RX ring of `port`, as the kernel receives a packet.
    pub(crate) fn receive(
        &mut self,
        port: &mut XskPort,
        target: RxTarget,
        packet: &[u8],
    ) -> Result<(), RxRefused> {
        let frame_size = port.umem.frame_size() as usize;
        let frames = packet.len().div_ceil(frame_size).max(1);
        if frames > MAX_FRAGS || (frames > 1 && !port.config.multi_buffer) {
            return Err(RxRefused::TooLong);
        }
        let want = u32::try_from(frames).map_err(|_| RxRefused::TooLong)?;
        let on_ring = self.fill.available(want);
        self.spare.extend((0..on_ring).map(|i| self.fill.read(i)));
        self.fill.release(on_ring);
        if self.spare.len() < frames {
            return Err(RxRefused::FillEmpty);
        }
        let flows = port.fake.as_ref().map(|f| &f.0);
        let mut flow_rings = flows.map(|m| m.lock().unwrap_or_else(PoisonError::into_inner));
        let ring = match target {
            RxTarget::Owner => &mut self.rx,
            RxTarget::Socket(fd) => flow_rings
                .as_mut()
                .and_then(|rings| rings.iter_mut().find(|(f, _)| *f == fd))
                .map(|(_, ring)| ring)
                .ok_or(RxRefused::NoSuchSocket)?,
        };
        if ring.reserve(want) < want {
            return Err(RxRefused::RingFull);
        }
        let addrs: Vec<u64> = self.spare.drain(..frames).collect();
        for (i, (chunk, &addr)) in packet.chunks(frame_size).zip(&addrs).enumerate() {
            let len = u32::try_from(chunk.len()).map_err(|_| RxRefused::TooLong)?;
            port.umem
                .kernel_bytes(addr, len)
                .map_err(|_| RxRefused::TooLong)?
                .copy_from_slice(chunk);
            let more = i + 1 < frames;
            let desc = XdpDesc {
                addr,
                len,
                options: if more { libc::XDP_PKT_CONTD } else { 0 },
            };
            ring.write(i as u32, desc);
        }
        if packet.is_empty() {
            ring.write(
                0,
                XdpDesc {
                    addr: addrs[0],
                    len: 0,
                    options: 0,
                },
            );
        }
        ring.submit(want);
        Ok(())
    }

    /// Takes every packet on the TX ring (a chain is one packet), reads
    /// its bytes out of `port`'s UMEM and holds its addresses until
    /// [`FakeKernel::complete_held`] gives them back.
    pub(crate) fn send(&mut self, port: &mut XskPort) -> Vec<Vec<u8>> {
        let mut packets = Vec::new();
        let mut packet = Vec::new();
        for desc in self.take_tx_descs() {
            match port.umem.kernel_bytes(desc.addr, desc.len) {
                Ok(bytes) => packet.extend_from_slice(bytes),
                Err(e) => log::warn!("fake kernel: TX descriptor outside the UMEM: {e}"),
            }
            self.held.push(desc.addr);
            if !desc.more() {
                packets.push(std::mem::take(&mut packet));
            }
        }
        if !packet.is_empty() {
            packets.push(packet);
        }
        packets
    }

    /// Puts the oldest `n` held addresses (all of them with `usize::MAX`)
    /// on the completion ring, as far as it has room; returns how many.
    pub(crate) fn complete_held(&mut self, n: usize) -> usize {
        let n = n.min(self.held.len());
        let mut held = std::mem::take(&mut self.held);
        let done = self.complete_addrs(&held[..n]) as usize;
        held.drain(..done);
        self.held = held;
        done
    }
}

fn null_fd() -> OwnedFd {
    File::open("/dev/null").expect("open /dev/null").into()
}

impl XskPort {
    /// A port of `frame_count` frames (4 for TX) over anonymous rings of
    /// [`RING`] entries, already refilled.
    #[cfg(test)]
    pub(crate) fn fake(frame_count: u32) -> (XskPort, FakeKernel) {
        XskPort::fake_with_mr(frame_count, 0)
    }

    /// [`XskPort::fake`] with an MR area of `mr_bytes` and multi-buffer
    /// TX on (zero-copy chains).
    #[cfg(test)]
    pub(crate) fn fake_with_mr(frame_count: u32, mr_bytes: usize) -> (XskPort, FakeKernel) {
        let config = XskConfig {
            umem: UmemConfig {
                frame_size: 2048,
                frame_count,
                mr_bytes,
                hugepages: false,
                mr_slots: None,
            },
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
        XskPort::fake_from("fake0", 0, &config)
            .unwrap_or_else(|e| panic!("fake port of {frame_count} frames: {e}"))
    }

    /// A port shaped by `config` (UMEM geometry, ring sizes, TX frames,
    /// multi-buffer) over anonymous memory, no socket, "bound" in copy
    /// mode to `ifname` queue `queue`, already refilled; and the kernel's
    /// side of its rings. Huge pages and need_wakeup are not used.
    ///
    /// # Errors
    /// The configuration is invalid or the memory could not be mapped.
    pub(crate) fn fake_from(
        ifname: &str,
        queue: u32,
        config: &XskConfig,
    ) -> Result<(XskPort, FakeKernel), super::XskError> {
        let mut config = XskConfig {
            umem: UmemConfig {
                hugepages: false,
                ..config.umem.clone()
            },
            ..config.clone()
        };
        config.validate()?;
        config.need_wakeup = false;
        let mut umem = Umem::new(&config.umem)?;
        let layout = umem.layout();
        let (fill, kernel_fill) = FillRing::anonymous(config.fill_ring);
        let (kernel_rx, rx) = RxRing::anonymous(config.rx_ring);
        let (kernel_comp, comp) = CompRing::anonymous(config.comp_ring, layout);
        let (tx, kernel_tx) = TxRing::anonymous(config.tx_ring);
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
            tx_pending: Vec::with_capacity(config.tx_ring as usize),
            tx_outstanding: 0,
            chain_scratch: Vec::with_capacity(MAX_FRAGS),
            frag_scratch: Vec::with_capacity(MAX_FRAGS),
            ifname: ifname.to_owned(),
            ifindex: 0,
            queue,
            mode: BoundMode::Copy,
            config,
            counters: PortCounters::default(),
            closed_flow_stats: XskStats::default(),
            fake: Some(FakeFlowRings::default()),
        };
        port.refill();
        let kernel = FakeKernel {
            port: port.id,
            fill: kernel_fill,
            rx: kernel_rx,
            tx: kernel_tx,
            comp: kernel_comp,
            spare: Vec::new(),
            held: Vec::new(),
        };
        Ok((port, kernel))
    }

    /// A per-flow socket of this fake port and the kernel's side of its
    /// RX ring (kept by the caller, not the port).
    pub(crate) fn fake_flow_socket(&self) -> (FlowSocket, ProducerRing<XdpDesc>) {
        let (kernel_rx, rx) = RxRing::anonymous(self.config.flow_rx_ring);
        let socket = FlowSocket {
            owner: self.id,
            fd: null_fd(),
            rx,
        };
        (socket, kernel_rx)
    }

    /// For a port over the fake kernel, a per-flow socket whose kernel
    /// side the port keeps for [`FakeKernel::receive`]; `None` for a real
    /// port.
    pub(super) fn open_fake_flow_socket(&self) -> Option<FlowSocket> {
        let rings = self.fake.as_ref()?;
        let (socket, kernel_rx) = self.fake_flow_socket();
        rings
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((socket.fd.as_raw_fd(), kernel_rx));
        Some(socket)
    }

    /// Forgets the kernel side of a fake per-flow socket being closed.
    pub(super) fn close_fake_flow_socket(&self, socket: &FlowSocket) {
        if let Some(rings) = self.fake.as_ref() {
            let fd = socket.fd.as_raw_fd();
            rings
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|(f, _)| *f != fd);
        }
    }

    /// The owner socket's descriptor number, as the steering's XSKMAP
    /// holds it.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
