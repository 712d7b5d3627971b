//! The UMEM's memory slots: which are free, which an attachment holds, and
//! which wait for the TX descriptors still reading a departed
//! attachment's regions to come back before the slot can be reused.
//!
//! A mapping cannot be taken back from another process: an application
//! that detached but lives on still maps its old slot. So a slot goes to
//! a new attachment only once the process that held it last has exited
//! or no longer maps it (it exec'd another program), or to that same
//! process again; until then it is not free.

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

/// Whether process `pid` still exists and maps slot `slot` (its memfd,
/// `zerosplit-mr-slot-N`, shows in `/proc/PID/maps`). A process that
/// exec'd since (a forked child running another program) maps nothing of
/// it any more. Unreadable maps count as mapping it.
fn still_maps(pid: u32, slot: u32) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return std::path::Path::new(&format!("/proc/{pid}")).exists();
    };
    let name = format!("/memfd:zerosplit-mr-slot-{slot} ");
    let last = format!("/memfd:zerosplit-mr-slot-{slot}");
    maps.lines()
        .any(|l| l.contains(&name) || l.ends_with(&last))
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
        let usable =
            |slot: u32, last: Option<u32>| last.is_none_or(|p| p == pid || !still_maps(p, slot));
        match self
            .free
            .iter()
            .rposition(|&(slot, last)| usable(slot, last))
        {
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

    /// A process mapping a memfd named as slot `slot`'s, until killed.
    fn mapper(slot: u32) -> std::process::Child {
        let code = format!(
            "import os, mmap, time\n\
             fd = os.memfd_create('zerosplit-mr-slot-{slot}')\n\
             os.ftruncate(fd, 4096)\n\
             m = mmap.mmap(fd, 4096)\n\
             time.sleep(30)\n"
        );
        let child = std::process::Command::new("python3")
            .args(["-c", &code])
            .spawn()
            .expect("spawn python3");
        let start = std::time::Instant::now();
        while !still_maps_named(child.id(), slot) {
            assert!(start.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        child
    }

    fn still_maps_named(pid: u32, slot: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .is_ok_and(|m| m.contains(&format!("zerosplit-mr-slot-{slot}")))
    }

    /// A slot whose last holder still maps it goes to nobody else; once
    /// it maps it no more (it exited, or exec'd another program) the slot
    /// is free again.
    #[test]
    fn a_slot_is_not_reused_while_its_last_holder_maps_it() {
        let mut holder = mapper(0);
        let pid = holder.id();
        let mut slots = Slots {
            free: vec![(0, Some(pid))],
            draining: Vec::new(),
            len: 4096,
        };
        assert_eq!(slots.take(pid + 1), Err(Some(pid)), "taken by another");
        assert_eq!(slots.take(pid), Ok(0), "the holder gets it back");
        slots.free.push((0, Some(pid)));
        holder.kill().expect("kill");
        holder.wait().expect("reap");
        assert_eq!(slots.take(pid + 1), Ok(0), "free once the holder exited");
        // A live process that maps nothing of it (a child that exec'd).
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        slots.free.push((0, Some(other.id())));
        assert_eq!(slots.take(pid + 1), Ok(0), "free: sleep maps no slot");
        other.kill().expect("kill");
        other.wait().expect("reap");
        assert_eq!(slots.take(7), Err(None), "no slot left");
    }
}
