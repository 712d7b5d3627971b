//! Frame ownership: which frames user space holds, split into the RX pool
//! (circulating through the fill ring) and the TX pool (built into and
//! sent). Every frame is a [`FrameAddr`] owned by exactly one place: one of
//! these lists, a ring, or a packet being built.

use crate::sys::desc::{FrameAddr, UmemLayout};
use crate::sys::frame_owner::FrameOwners;
use crate::sys::xdp_ring::FillRing;

/// The free lists of a port.
#[derive(Debug)]
pub(super) struct FramePool {
    /// RX frames not currently in the fill ring or held by an RX ring.
    pub(super) rx_free: Vec<FrameAddr>,
    /// TX frames not in flight.
    pub(super) tx_free: Vec<FrameAddr>,
    /// Which frames the kernel holds, for receiving or sending: a ring
    /// gives back only frames it was given.
    pub(super) owners: FrameOwners,
}

impl FramePool {
    /// Splits `frames` (every frame of the UMEM laid out as `layout`, in
    /// address order): the first `tx_frames` for TX, the rest for RX.
    pub(super) fn new(mut frames: Vec<FrameAddr>, tx_frames: u32, layout: UmemLayout) -> FramePool {
        let rx_free = frames.split_off((tx_frames as usize).min(frames.len()));
        FramePool {
            rx_free,
            tx_free: frames,
            owners: FrameOwners::new(layout),
        }
    }

    /// Moves free RX frames into the fill ring; returns how many.
    pub(super) fn refill(&mut self, fill: &mut FillRing) -> u32 {
        fill.push_from(&mut self.rx_free, &mut self.owners)
    }
}

/// Where a port's RX frames are at one moment, as user space sees them.
/// Frames the kernel has taken from the fill ring and not yet put on an RX
/// ring (in flight, or cached after a drop) are in none of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxFrameCount {
    /// In the free list.
    pub free: u32,
    /// Published on the fill ring, not yet taken by the kernel.
    pub fill: u32,
    /// On RX rings (the owner's, and per-flow sockets' where counted),
    /// not yet read.
    pub rx: u32,
}

impl RxFrameCount {
    /// Every frame counted.
    pub fn total(&self) -> u32 {
        self.free + self.fill + self.rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::umem::{Umem, UmemConfig};

    #[test]
    fn the_first_frames_are_for_tx_and_the_rest_for_rx() {
        let mut umem = Umem::new(&UmemConfig {
            frame_size: 2048,
            frame_count: 5,
            mr_bytes: 0,
            hugepages: false,
            mr_slots: None,
        })
        .unwrap();
        let pool = FramePool::new(umem.take_frames(), 2, umem.layout());
        assert_eq!((pool.tx_free.len(), pool.rx_free.len()), (2, 3));
        // Every frame has exactly one owner: no frame is in both lists.
        let owned: Vec<&FrameAddr> = pool.tx_free.iter().chain(&pool.rx_free).collect();
        for (i, a) in owned.iter().enumerate() {
            assert!(owned[i + 1..].iter().all(|b| a != b), "{a:?} twice");
        }
        assert!(umem.take_frames().is_empty());
    }
}
