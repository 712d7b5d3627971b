//! The UMEM's memory slots: which are free, which an attachment holds, and
//! which wait for the TX descriptors still reading a departed
//! attachment's regions to come back before the slot can be reused.

use std::ops::Range;

use datapath::mr::MrId;

use crate::provider::Provider;
use crate::stack::Stack;

#[derive(Debug)]
pub(super) struct Slots {
    free: Vec<u32>,
    /// Slots whose regions could not all be deregistered yet.
    draining: Vec<(u32, Vec<MrId>)>,
    len: usize,
}

impl Slots {
    /// `count` slots of `len` bytes, all free.
    pub fn new(count: u32, len: usize) -> Slots {
        Slots {
            free: (0..count).rev().collect(),
            draining: Vec::new(),
            len,
        }
    }

    /// A free slot, if any.
    pub fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Bytes of a slot.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Slot `slot`'s range of the region area.
    pub fn range(&self, slot: u32) -> Range<usize> {
        let start = slot as usize * self.len;
        start..start + self.len
    }

    /// Free slots.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Slots waiting for TX to let go of them.
    pub fn draining(&self) -> usize {
        self.draining.len()
    }

    /// Gives `slot` back: deregisters its `regions` (those TX still reads
    /// wait, see [`Self::reclaim`]).
    pub fn release(&mut self, slot: u32, mut regions: Vec<MrId>, stack: &mut Stack) {
        regions.retain(|&mr| stack.deregister_memory(mr).is_err() && stack.memory(mr).is_ok());
        if regions.is_empty() {
            self.free.push(slot);
        } else {
            self.draining.push((slot, regions));
        }
    }

    /// Retries the regions of draining slots; frees the slots whose
    /// regions are all gone. Returns how many slots it freed.
    pub fn reclaim(&mut self, stack: &mut Stack) -> usize {
        if self.draining.is_empty() {
            return 0;
        }
        let mut freed = 0;
        let free = &mut self.free;
        self.draining.retain_mut(|(slot, regions)| {
            regions.retain(|&mr| stack.deregister_memory(mr).is_err() && stack.memory(mr).is_ok());
            if regions.is_empty() {
                free.push(*slot);
                freed += 1;
            }
            !regions.is_empty()
        });
        freed
    }
}
