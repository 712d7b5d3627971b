//! Who holds each frame of a UMEM's frame area: user space, or the kernel
//! for receiving (on the fill ring or an RX ring) or for sending (on the
//! TX or completion ring). [`FrameAddr`] tokens make a frame's user-space
//! holder unique; this table makes the kernel's side checkable, so a
//! descriptor the kernel (or a bug, or memory corruption) hands back is
//! taken as a frame only if that frame was given to the kernel for that
//! purpose and not yet returned. A frame is therefore never on two rings,
//! and a bad descriptor's address is never recycled.
//!
//! The MR area (application memory sent from in place by zero-copy
//! chains) has no single holder: the same bytes may be on the TX ring
//! several times (a retransmission while the first copy is in flight).
//! For it the table counts, per chunk, the descriptors queued or on the
//! TX ring that point into the chunk and have not come back on the
//! completion ring. Memory of a chunk with a nonzero count is still read
//! by the kernel: a send work request over it must not complete yet.

use core::ops::Range;

use super::desc::{FrameAddr, MrAddr, RxDesc, UmemLayout};

/// Where a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// In user space: a free list, or a packet being built or read.
    User,
    /// Given to the kernel through the fill ring; comes back on an RX ring.
    KernelRx,
    /// Given to the kernel through the TX ring; comes back on the
    /// completion ring.
    KernelTx,
}

/// The holder of every frame of one UMEM.
#[derive(Debug)]
pub(crate) struct FrameOwners {
    holders: Vec<Holder>,
    /// Per chunk of the MR area: TX descriptors pointing into it that have
    /// not completed.
    mr_in_flight: Vec<u32>,
    /// The sum of `mr_in_flight`.
    mr_total: u64,
    layout: UmemLayout,
}

impl FrameOwners {
    /// Every frame of `layout` held by user space (as [`super::umem::Umem::take_frames`]
    /// hands them out).
    pub(crate) fn new(layout: UmemLayout) -> FrameOwners {
        let fs = u64::from(layout.frame_size.max(1));
        let frames = layout.frames_len / fs;
        FrameOwners {
            holders: vec![Holder::User; frames as usize],
            mr_in_flight: vec![0; layout.mr_len.div_ceil(fs) as usize],
            mr_total: 0,
            layout,
        }
    }

    /// The MR chunk of a UMEM address, if it is in the MR area.
    fn mr_chunk(&self, addr: u64) -> Option<usize> {
        let off = addr.checked_sub(self.layout.frames_len)?;
        let i = usize::try_from(off / u64::from(self.layout.frame_size.max(1))).ok()?;
        (i < self.mr_in_flight.len()).then_some(i)
    }

    /// Records that a TX descriptor pointing at `frag` was queued: its
    /// chunk is read by the kernel until the completion comes back. A
    /// checked [`MrAddr`] always lies in one chunk of the area.
    pub(crate) fn hold_mr(&mut self, frag: &MrAddr) {
        if let Some(i) = self.mr_chunk(frag.addr()) {
            self.mr_in_flight[i] = self.mr_in_flight[i].saturating_add(1);
            self.mr_total += 1;
        }
    }

    /// A completion of the MR-area address `addr`: whether a descriptor
    /// into its chunk was in flight (and now no longer is). `false` for an
    /// address no queued descriptor pointed into (a bug or corruption):
    /// nothing is released.
    pub(super) fn complete_mr(&mut self, addr: u64) -> bool {
        match self.mr_chunk(addr) {
            Some(i) if self.mr_in_flight[i] > 0 => {
                self.mr_in_flight[i] -= 1;
                self.mr_total -= 1;
                true
            }
            _ => false,
        }
    }

    /// Whether any TX descriptor queued or in flight points into the MR
    /// area bytes `area` (MR-area offsets). Chunk-grained: bytes sharing a
    /// chunk with in-flight bytes count as in flight (never too early; at
    /// worst later, when that chunk's descriptors complete).
    pub(crate) fn mr_busy(&self, area: Range<usize>) -> bool {
        if self.mr_total == 0 || area.is_empty() {
            return false;
        }
        let fs = self.layout.frame_size.max(1) as usize;
        let last = (area.end - 1) / fs;
        (area.start / fs..=last).any(|i| self.mr_in_flight.get(i).is_some_and(|&n| n > 0))
    }

    /// TX descriptors into the MR area not yet completed.
    pub(crate) fn mr_in_flight(&self) -> u64 {
        self.mr_total
    }

    fn index(&self, addr: u64) -> Option<usize> {
        let i = usize::try_from(addr / u64::from(self.layout.frame_size)).ok()?;
        (i < self.holders.len()).then_some(i)
    }

    /// Records that `frame` goes to the kernel as `holder` (the caller is
    /// putting it on the matching ring).
    pub(super) fn give(&mut self, frame: &FrameAddr, holder: Holder) {
        if let Some(i) = self.index(frame.addr()) {
            self.holders[i] = holder;
        }
    }

    /// The frame at `addr`, taken back from the kernel, if the kernel held
    /// it as `holder`; `None` (nothing minted) for an address outside the
    /// frame area or a frame the kernel did not hold that way.
    pub(super) fn take_back(&mut self, addr: u64, holder: Holder) -> Option<FrameAddr> {
        let frame = self.layout.frame_of(addr)?;
        let i = self.index(frame.addr())?;
        if self.holders[i] != holder {
            return None;
        }
        self.holders[i] = Holder::User;
        Some(frame)
    }

    /// Whether `desc` is a received descriptor user space may read: inside
    /// one frame of the frame area, and that frame given to the kernel for
    /// receiving and not yet returned.
    pub(crate) fn received(&self, desc: &RxDesc<'_>) -> bool {
        let (addr, len) = (desc.desc.addr, u64::from(desc.desc.len));
        let fs = u64::from(self.layout.frame_size);
        addr % fs + len <= fs
            && self
                .index(addr)
                .is_some_and(|i| self.holders[i] == Holder::KernelRx)
    }

    /// Frames held by `holder`.
    #[cfg(test)]
    pub(crate) fn count(&self, holder: Holder) -> usize {
        self.holders.iter().filter(|&&h| h == holder).count()
    }
}
