//! Who holds each frame of a UMEM's frame area: user space, or the kernel
//! for receiving (on the fill ring or an RX ring) or for sending (on the
//! TX or completion ring). [`FrameAddr`] tokens make a frame's user-space
//! holder unique; this table makes the kernel's side checkable, so a
//! descriptor the kernel (or a bug, or memory corruption) hands back is
//! taken as a frame only if that frame was given to the kernel for that
//! purpose and not yet returned. A frame is therefore never on two rings,
//! and a bad descriptor's address is never recycled.

use super::desc::{FrameAddr, RxDesc, UmemLayout};

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
    layout: UmemLayout,
}

impl FrameOwners {
    /// Every frame of `layout` held by user space (as [`super::umem::Umem::take_frames`]
    /// hands them out).
    pub(crate) fn new(layout: UmemLayout) -> FrameOwners {
        let frames = layout.frames_len / u64::from(layout.frame_size.max(1));
        FrameOwners {
            holders: vec![Holder::User; frames as usize],
            layout,
        }
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
