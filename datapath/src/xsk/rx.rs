//! Receiving: gather each packet's descriptors (one, or a chain linked by
//! `XDP_PKT_CONTD`), lend its bytes to a closure together with the
//! writable MR area, then give the frames back to the free list and refill.

use std::os::fd::AsFd;

use super::frames::FramePool;
use super::{FlowSocket, PortCounters, XskPort, MAX_FRAGS};
use crate::sys::frame_owner::FrameOwners;
use crate::sys::syscall::wake_rx;
use crate::sys::umem::{Frames, Umem};
use crate::sys::xdp_ring::RxRing;

/// A received packet: one descriptor, or several chained by `XDP_PKT_CONTD`.
#[derive(Debug)]
pub struct RxPacket<'a> {
    frags: [&'a [u8]; MAX_FRAGS],
    count: usize,
}

impl<'a> RxPacket<'a> {
    /// The fragments in order; the first holds the headers.
    pub fn fragments(&self) -> &[&'a [u8]] {
        &self.frags[..self.count]
    }

    /// Total length.
    pub fn len(&self) -> usize {
        self.fragments().iter().map(|f| f.len()).sum()
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl XskPort {
    /// Receives up to `budget` packets from the owner (catch-all) socket.
    /// `on_packet` sees each packet's fragments and the writable MR area;
    /// the frames go back to the fill ring after it returns.
    pub fn receive<F>(&mut self, budget: u32, on_packet: F) -> u32
    where
        F: FnMut(&RxPacket<'_>, &mut [u8]),
    {
        let XskPort {
            rx,
            umem,
            frames,
            counters,
            ..
        } = self;
        let n = drain(rx, umem, frames, counters, budget, on_packet);
        self.refill_and_wake();
        n
    }

    /// Receives up to `budget` packets from a per-flow socket of this port.
    /// A socket of another port receives nothing here (its frames belong to
    /// that port's UMEM).
    pub fn receive_flow<F>(&mut self, socket: &mut FlowSocket, budget: u32, on_packet: F) -> u32
    where
        F: FnMut(&RxPacket<'_>, &mut [u8]),
    {
        let n = self.drain_flow(socket, budget, on_packet);
        self.refill_and_wake();
        n
    }

    /// [`XskPort::receive_flow`] without the fill-ring refill and wakeup:
    /// a sweep over many flow sockets drains each and then calls
    /// [`XskPort::refill_and_wake`] once, so its cost per socket is one
    /// look at that socket's RX ring (no syscall, no fill-ring work).
    pub fn drain_flow<F>(&mut self, socket: &mut FlowSocket, budget: u32, on_packet: F) -> u32
    where
        F: FnMut(&RxPacket<'_>, &mut [u8]),
    {
        if socket.owner != self.id {
            log::error!(
                "{}: receive_flow with a socket of another port; ignored",
                self.ifname
            );
            return 0;
        }
        let XskPort {
            umem,
            frames,
            counters,
            ..
        } = self;
        drain(&mut socket.rx, umem, frames, counters, budget, on_packet)
    }

    /// Gives free frames back to the fill ring and wakes the kernel if it
    /// asked to be (need_wakeup).
    pub fn refill_and_wake(&mut self) {
        self.refill();
        self.wake_rx_if_needed();
    }

    fn wake_rx_if_needed(&mut self) {
        if self.config.need_wakeup && self.fill.needs_wakeup() && !self.is_fake() {
            self.counters.rx_wakeups += 1;
            // EAGAIN is the normal answer; anything else shows in stats.
            let _ = wake_rx(self.fd.as_fd());
        }
    }
}

/// Takes up to `budget` whole packets from `ring`, delivers each, and
/// returns every descriptor's frame to the free list — only frames the
/// kernel held for receiving (see [`FrameOwners`]); others are counted.
fn drain<F>(
    ring: &mut RxRing,
    umem: &mut Umem,
    pool: &mut FramePool,
    counters: &mut PortCounters,
    budget: u32,
    mut on_packet: F,
) -> u32
where
    F: FnMut(&RxPacket<'_>, &mut [u8]),
{
    let avail = ring.available(budget.saturating_mul(MAX_FRAGS as u32).min(ring.size()));
    let (frames, mr) = umem.split();
    let mut i = 0;
    let mut packets = 0;
    while i < avail && packets < budget {
        let Some(end) = chain_end(ring, i, avail) else {
            break;
        };
        let count = (end - i + 1) as usize;
        counters.rx_descs += count as u64;
        if count > MAX_FRAGS {
            counters.rx_too_many_frags += 1;
        } else {
            let owners = &pool.owners;
            deliver(
                &frames,
                owners,
                ring,
                i,
                count,
                counters,
                mr,
                &mut on_packet,
            );
        }
        i = end + 1;
        packets += 1;
    }
    let refused = ring.release(i, &mut pool.rx_free, &mut pool.owners);
    counters.rx_frames_refused += u64::from(refused);
    counters.rx_packets += u64::from(packets);
    packets
}

/// The last descriptor of the packet starting at `start` (XDP_PKT_CONTD
/// chains). A chain cut off by the end of what is available now is left for
/// the next call (`None`), unless it can never complete in this ring: then
/// it ends at the last available descriptor.
fn chain_end(ring: &RxRing, start: u32, avail: u32) -> Option<u32> {
    let mut end = start;
    while end < avail && ring.desc(end).more() {
        end += 1;
    }
    if end == avail {
        if avail - start < ring.size() {
            return None;
        }
        end = avail - 1;
    }
    Some(end)
}

#[expect(clippy::too_many_arguments, reason = "the split borrows of one port")]
fn deliver<F>(
    frames: &Frames<'_>,
    owners: &FrameOwners,
    ring: &RxRing,
    start: u32,
    count: usize,
    counters: &mut PortCounters,
    mr: &mut [u8],
    on_packet: &mut F,
) where
    F: FnMut(&RxPacket<'_>, &mut [u8]),
{
    let mut pkt = RxPacket {
        frags: [&[]; MAX_FRAGS],
        count,
    };
    for k in 0..count {
        let desc = ring.desc(start + k as u32);
        match frames.rx(&desc) {
            Ok(bytes) if owners.received(&desc) => pkt.frags[k] = bytes,
            _ => {
                counters.rx_bad_descs += 1;
                return;
            }
        }
    }
    counters.rx_bytes += pkt.frags[..count]
        .iter()
        .map(|f| f.len() as u64)
        .sum::<u64>();
    on_packet(&pkt, mr);
}

#[cfg(test)]
mod tests {
    use super::super::testing::FakeKernel;
    use super::*;
    use crate::sys::desc::XdpDesc;

    /// Puts `descs` on the owner's RX ring, as the kernel would.
    fn kernel_receives(kernel: &mut FakeKernel, descs: &[XdpDesc]) {
        let n = descs.len() as u32;
        assert_eq!(kernel.rx.reserve(n), n);
        for (i, d) in descs.iter().enumerate() {
            kernel.rx.write(i as u32, *d);
        }
        kernel.rx.submit(n);
    }

    fn desc(frame: u64, more: bool) -> XdpDesc {
        XdpDesc {
            addr: frame * 2048,
            len: 60,
            options: if more { libc::XDP_PKT_CONTD } else { 0 },
        }
    }

    #[test]
    fn a_descriptor_outside_the_frames_is_dropped_and_counted() {
        let (mut port, mut kernel) = XskPort::fake(16);
        // Frame 40 lies beyond the 16 frames of the UMEM.
        kernel_receives(&mut kernel, &[desc(5, false), desc(40, false)]);
        let mut seen = 0;
        assert_eq!(port.receive(8, |_, _| seen += 1), 2);
        assert_eq!(seen, 1, "only the good packet is delivered");
        assert_eq!(port.counters().rx_bad_descs, 1);
    }

    /// Frame addresses (in frames) user space holds or gave to the fill ring.
    fn rx_side(port: &XskPort, kernel: &mut FakeKernel) -> Vec<u64> {
        let n = kernel.fill.available(u32::MAX);
        let mut got: Vec<u64> = (0..n).map(|i| kernel.fill.read(i) / 2048).collect();
        got.extend(port.frames.rx_free.iter().map(|f| f.addr() / 2048));
        got
    }

    #[test]
    fn a_descriptor_for_a_frame_the_kernel_does_not_hold_is_never_recycled() {
        let (mut port, mut kernel) = XskPort::fake(16);
        let tx: Vec<u64> = port
            .frames
            .tx_free
            .iter()
            .map(|f| f.addr() / 2048)
            .collect();
        assert_eq!(tx, vec![0, 1, 2, 3]);
        // The kernel takes every fill frame (it holds them until it
        // receives into them).
        let filled = kernel.fill.available(u32::MAX);
        kernel.fill.release(filled);
        let crossing = XdpDesc {
            addr: 6 * 2048 + 2000,
            len: 100,
            options: 0,
        };
        // A TX frame, a descriptor across two frames, one outside the UMEM
        // and one good packet.
        kernel_receives(
            &mut kernel,
            &[desc(2, false), crossing, desc(40, false), desc(5, false)],
        );
        let mut seen = 0;
        assert_eq!(port.receive(8, |_, _| seen += 1), 4);
        assert_eq!(seen, 1, "only the good packet is delivered");
        assert_eq!(port.counters().rx_bad_descs, 3);
        assert_eq!(port.counters().rx_frames_refused, 3);
        let rx = rx_side(&port, &mut kernel);
        assert!(!rx.contains(&2), "the TX frame went to the RX side: {rx:?}");
        let mut sorted = rx.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            rx.len(),
            "a frame twice on the RX side: {rx:?}"
        );
        assert_eq!(port.frames.tx_free.len(), 4, "the TX frames stay TX's");
        // The good frame came back; the one the bad descriptor named is
        // withheld rather than risk it being on two rings.
        assert!(rx.contains(&5) && !rx.contains(&6), "{rx:?}");
    }

    #[test]
    fn a_chain_longer_than_max_frags_is_dropped_and_counted() {
        let (mut port, mut kernel) = XskPort::fake(32);
        let chain: Vec<XdpDesc> = (0..=MAX_FRAGS as u64)
            .map(|i| desc(4 + i, i < MAX_FRAGS as u64))
            .collect();
        kernel_receives(&mut kernel, &chain);
        let mut seen = 0;
        assert_eq!(port.receive(8, |_, _| seen += 1), 1);
        assert_eq!(seen, 0);
        assert_eq!(port.counters().rx_too_many_frags, 1);
        assert_eq!(port.counters().rx_bad_descs, 0);
    }
}
