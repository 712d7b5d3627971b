//! The UMEM's memory slots: which are free, which an attachment holds, and
//! which wait for the TX descriptors still reading a departed
//! attachment's regions to come back before the slot can be reused.
//!
//! A mapping cannot be taken back from another process: an application
//! that detached but lives on still maps its old slot. So a slot goes to
//! a new attachment only once the process that held it last has exited
//! (or to that same process again); until then it is not free.

use std::ops::Range;

use super::queues::{Queues, Region};

#[derive(Debug)]
pub(super) struct Slots {
    /// Free slots and the process that held each last.
    free: Vec<(u32, Option<u32>)>,
    /// Slots whose regions could not all be deregistered yet, and their
    /// last holder.
    draining: Vec<(u32, Vec<Region>, u32)>,
    len: usize,
}

/// Whether process `pid` still exists.
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl Slots {
    /// `count` slots of `len` bytes, all free.
    pub fn new(count: u32, len: usize) -> Slots {
        Slots {
            free: (0..count).rev().map(|s| (s, None)).collect(),
            draining: Vec::new(),
            len,
        }
    }

    /// A free slot for process `pid`: one nobody held, or whose last
    /// holder is `pid` or has exited. `Err` names a live process still
    /// holding a slot that would otherwise be free, if any.
    pub fn take(&mut self, pid: u32) -> Result<u32, Option<u32>> {
        let usable = |last: Option<u32>| last.is_none_or(|p| p == pid || !alive(p));
        match self.free.iter().rposition(|&(_, last)| usable(last)) {
            Some(i) => Ok(self.free.remove(i).0),
            None => Err(self.free.first().and_then(|f| f.1)),
        }
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

    /// Free slots (whoever held them last).
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Slots waiting for TX to let go of them.
    pub fn draining(&self) -> usize {
        self.draining.len()
    }

    /// Gives `slot` back from process `pid` (`None`: it never reached
    /// the application): deregisters its `regions` (those TX still reads
    /// wait, see [`Self::reclaim`]).
    pub fn release(
        &mut self,
        slot: u32,
        mut regions: Vec<Region>,
        queues: &Queues,
        pid: Option<u32>,
    ) {
        regions.retain_mut(|r| queues.deregister(r).is_err());
        match pid {
            Some(pid) if !regions.is_empty() => self.draining.push((slot, regions, pid)),
            _ => self.free.push((slot, pid)),
        }
    }

    /// Retries the regions of draining slots; frees the slots whose
    /// regions are all gone. Returns how many slots it freed.
    pub fn reclaim(&mut self, queues: &Queues) -> usize {
        if self.draining.is_empty() {
            return 0;
        }
        let mut freed = 0;
        let free = &mut self.free;
        self.draining.retain_mut(|(slot, regions, pid)| {
            regions.retain_mut(|r| queues.deregister(r).is_err());
            if regions.is_empty() {
                free.push((*slot, Some(*pid)));
                freed += 1;
            }
            !regions.is_empty()
        });
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot whose last holder lives on (it may still map it) goes to
    /// nobody else; once that process exits it is free again.
    #[test]
    fn a_slot_is_not_reused_while_its_last_holder_lives() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let holder = child.id();
        let mut slots = Slots {
            free: vec![(0, Some(holder))],
            draining: Vec::new(),
            len: 4096,
        };
        assert_eq!(
            slots.take(holder + 1),
            Err(Some(holder)),
            "taken by another"
        );
        assert_eq!(slots.take(holder), Ok(0), "the holder gets it back");
        slots.free.push((0, Some(holder)));
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert_eq!(slots.take(holder + 1), Ok(0), "free once the holder exited");
        assert_eq!(slots.take(7), Err(None), "no slot left");
    }
}
