//! The four AF_XDP rings as four types over the generic [`super::ring`]
//! producer and consumer, so a fill address cannot go on the TX ring and
//! a completion cannot be read as a received packet:
//!
//! | ring | user space | element | what moves |
//! |---|---|---|---|
//! | [`FillRing`] | produces | frame address | an owned [`FrameAddr`] to the kernel |
//! | [`RxRing`] | consumes | `xdp_desc` | received [`RxDesc`]s; frames back on release |
//! | [`TxRing`] | produces | `xdp_desc` | [`TxDesc`]s to the kernel |
//! | [`CompRing`] | consumes | frame address | sent frames back as [`Completed`] |
//!
//! Each is mapped from its socket at the offsets `XDP_MMAP_OFFSETS` gives.
//! Frame ownership is carried by the types: a frame enters the kernel only
//! by value and comes back only from a ring.

use std::marker::PhantomData;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use super::desc::{FrameAddr, RxDesc, TxData, TxDesc, UmemLayout, XdpDesc};
use super::frame_owner::{FrameOwners, Holder};
use super::mmap::Mmap;
use super::ring::{ConsumerRing, ProducerRing, RingError, RingOffsets};
use super::syscall::{getsockopt, SyscallError};

/// Where each ring of a socket sits in its mapping (`XDP_MMAP_OFFSETS`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MmapOffsets(libc::xdp_mmap_offsets);

impl MmapOffsets {
    /// Asks the kernel for the ring layout of `fd` (after the ring sizes are set).
    ///
    /// # Errors
    /// `getsockopt(XDP_MMAP_OFFSETS)` failed.
    pub(crate) fn query(fd: BorrowedFd<'_>) -> Result<MmapOffsets, SyscallError> {
        getsockopt(fd, libc::XDP_MMAP_OFFSETS, "getsockopt(XDP_MMAP_OFFSETS)").map(MmapOffsets)
    }
}

fn map<T: Copy>(
    fd: BorrowedFd<'_>,
    off: &libc::xdp_ring_offset,
    size: u32,
    pgoff: u64,
) -> Result<(Arc<Mmap>, RingOffsets), RingError> {
    let offsets = RingOffsets::from_kernel(off);
    let mem = Arc::new(Mmap::shared(fd, offsets.mapping_len::<T>(size), pgoff)?);
    Ok((mem, offsets))
}

/// The fill ring: free RX frames handed to the kernel.
#[derive(Debug)]
pub(crate) struct FillRing(ProducerRing<u64>);

impl FillRing {
    /// Maps the fill ring of `fd` (`size` as set with `XDP_UMEM_FILL_RING`).
    ///
    /// # Errors
    /// The mapping failed or its layout does not fit.
    pub(crate) fn map(fd: BorrowedFd<'_>, off: &MmapOffsets, size: u32) -> Result<Self, RingError> {
        let (mem, o) = map::<u64>(fd, &off.0.fr, size, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        Ok(FillRing(ProducerRing::new(mem, o, size)?))
    }

    /// Moves as many frames as fit from the end of `frames` onto the ring
    /// and publishes them; returns how many moved.
    pub(crate) fn push_from(
        &mut self,
        frames: &mut Vec<FrameAddr>,
        owners: &mut FrameOwners,
    ) -> u32 {
        let want = frames.len().min(u32::MAX as usize) as u32;
        let got = self.0.reserve(want);
        for i in 0..got {
            let Some(frame) = frames.pop() else {
                // Unreachable: `got <= frames.len()`. Publish what was written.
                self.0.submit(i);
                return i;
            };
            owners.give(&frame, Holder::KernelRx);
            self.0.write(i, frame.addr());
        }
        self.0.submit(got);
        got
    }

    /// Whether the kernel asked to be woken up to take frames.
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.0.needs_wakeup()
    }

    /// Frames published to the kernel that it has not taken yet.
    pub(crate) fn in_flight(&mut self) -> u32 {
        self.0.in_flight()
    }

    /// A fill ring over anonymous memory and the kernel's (consuming) side.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn anonymous(size: u32) -> (FillRing, ConsumerRing<u64>) {
        let (p, c) = super::ring::anonymous_pair::<u64>(size).expect("anonymous fill ring");
        (FillRing(p), c)
    }
}

/// What the completion ring gave back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Completed {
    /// A pool frame, free again.
    Frame(FrameAddr),
    /// A zero-copy fragment of the MR area (application memory, no frame):
    /// one descriptor fewer reads its chunk.
    Mr,
    /// An address in the frame area the kernel did not hold for sending,
    /// or in the MR area where no descriptor was in flight (a bug or
    /// corruption): no frame is minted and no memory released.
    Refused,
}

/// The completion ring: frames the kernel has finished sending.
#[derive(Debug)]
pub(crate) struct CompRing {
    ring: ConsumerRing<u64>,
    layout: UmemLayout,
}

impl CompRing {
    /// Maps the completion ring of `fd` for a UMEM laid out as `layout`.
    ///
    /// # Errors
    /// The mapping failed or its layout does not fit.
    pub(crate) fn map(
        fd: BorrowedFd<'_>,
        off: &MmapOffsets,
        size: u32,
        layout: UmemLayout,
    ) -> Result<Self, RingError> {
        let (mem, o) = map::<u64>(fd, &off.0.cr, size, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        Ok(CompRing {
            ring: ConsumerRing::new(mem, o, size)?,
            layout,
        })
    }

    /// Takes every completion available now, in order, passing each to
    /// `on_completed`; returns how many.
    pub(crate) fn drain(
        &mut self,
        owners: &mut FrameOwners,
        mut on_completed: impl FnMut(Completed),
    ) -> u32 {
        let n = self.ring.available(self.ring.size());
        for i in 0..n {
            let addr = self.ring.read(i);
            // A frame is minted only if it went out on the TX ring and has
            // not come back yet, so it returns to its one owner once.
            // An MR fragment counts down its chunk's descriptors in flight;
            // one no queued descriptor pointed at is refused.
            on_completed(if addr >= self.layout.frames_len {
                if owners.complete_mr(addr) {
                    Completed::Mr
                } else {
                    Completed::Refused
                }
            } else {
                match owners.take_back(addr, Holder::KernelTx) {
                    Some(frame) => Completed::Frame(frame),
                    None => Completed::Refused,
                }
            });
        }
        self.ring.release(n);
        n
    }

    /// A completion ring over anonymous memory and the kernel's side.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn anonymous(size: u32, layout: UmemLayout) -> (ProducerRing<u64>, CompRing) {
        let (p, c) = super::ring::anonymous_pair::<u64>(size).expect("anonymous completion ring");
        (p, CompRing { ring: c, layout })
    }
}

/// An RX ring: packets the kernel received into fill frames.
#[derive(Debug)]
pub(crate) struct RxRing {
    ring: ConsumerRing<XdpDesc>,
}

impl RxRing {
    /// Maps the RX ring of `fd`.
    ///
    /// # Errors
    /// The mapping failed or its layout does not fit.
    pub(crate) fn map(fd: BorrowedFd<'_>, off: &MmapOffsets, size: u32) -> Result<Self, RingError> {
        let (mem, o) = map::<XdpDesc>(fd, &off.0.rx, size, libc::XDP_PGOFF_RX_RING as u64)?;
        Ok(RxRing {
            ring: ConsumerRing::new(mem, o, size)?,
        })
    }

    /// Number of entries.
    pub(crate) fn size(&self) -> u32 {
        self.ring.size()
    }

    /// How many descriptors (up to `max`) can be read now.
    pub(crate) fn available(&mut self, max: u32) -> u32 {
        self.ring.available(max)
    }

    /// Available descriptor `i`, borrowed until [`RxRing::release`].
    ///
    /// # Panics
    /// If `i` was not made available.
    pub(crate) fn desc(&self, i: u32) -> RxDesc<'_> {
        RxDesc {
            desc: self.ring.read(i),
            _ring: PhantomData,
        }
    }

    /// Hands the first `n` available descriptors back to the kernel and
    /// their frames to `free`, in ring order. A descriptor that is not a
    /// frame the kernel held for receiving (outside the frame area, across
    /// a frame, a TX frame, one returned twice: a bug or corruption) mints
    /// no frame; returns how many were refused that way.
    ///
    /// # Panics
    /// If `n` exceeds what was made available.
    pub(crate) fn release(
        &mut self,
        n: u32,
        free: &mut Vec<FrameAddr>,
        owners: &mut FrameOwners,
    ) -> u32 {
        let mut refused = 0;
        for i in 0..n {
            let desc = self.desc(i);
            let frame = if owners.received(&desc) {
                owners.take_back(desc.desc.addr, Holder::KernelRx)
            } else {
                None
            };
            match frame {
                Some(frame) => free.push(frame),
                None => refused += 1,
            }
        }
        self.ring.release(n);
        refused
    }

    /// An RX ring over anonymous memory and the kernel's (producing) side.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn anonymous(size: u32) -> (ProducerRing<XdpDesc>, RxRing) {
        let (p, c) = super::ring::anonymous_pair::<XdpDesc>(size).expect("anonymous RX ring");
        (p, RxRing { ring: c })
    }
}

/// The TX ring: descriptors handed to the kernel to send.
#[derive(Debug)]
pub(crate) struct TxRing(ProducerRing<XdpDesc>);

impl TxRing {
    /// Maps the TX ring of `fd`.
    ///
    /// # Errors
    /// The mapping failed or its layout does not fit.
    pub(crate) fn map(fd: BorrowedFd<'_>, off: &MmapOffsets, size: u32) -> Result<Self, RingError> {
        let (mem, o) = map::<XdpDesc>(fd, &off.0.tx, size, libc::XDP_PGOFF_TX_RING as u64)?;
        Ok(TxRing(ProducerRing::new(mem, o, size)?))
    }

    /// Number of entries.
    pub(crate) fn size(&self) -> u32 {
        self.0.size()
    }

    /// Free slots now, up to `want`.
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        self.0.reserve(want)
    }

    /// Moves the first `n` descriptors of `pending` onto the ring and
    /// publishes them. `n` must not exceed what [`TxRing::free`] returned
    /// last, nor `pending.len()`; it is clamped to both.
    pub(crate) fn push_from(
        &mut self,
        pending: &mut Vec<TxDesc>,
        n: u32,
        owners: &mut FrameOwners,
    ) -> u32 {
        let room = self.0.reserve(n);
        let n = room.min(pending.len().min(u32::MAX as usize) as u32);
        for (i, d) in pending.drain(..n as usize).enumerate() {
            if let TxData::Frame(frame) = &d.data {
                owners.give(frame, Holder::KernelTx);
            }
            self.0.write(i as u32, d.to_raw());
        }
        self.0.submit(n);
        n
    }

    /// Whether the kernel asked to be woken up to send.
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.0.needs_wakeup()
    }

    /// A TX ring over anonymous memory and the kernel's (consuming) side.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn anonymous(size: u32) -> (TxRing, ConsumerRing<XdpDesc>) {
        let (p, c) = super::ring::anonymous_pair::<XdpDesc>(size).expect("anonymous TX ring");
        (TxRing(p), c)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ring::anonymous_pair;
    use super::*;

    const LAYOUT: UmemLayout = UmemLayout {
        frame_size: 2048,
        frames_len: 8 * 2048,
        mr_len: 4 * 2048,
    };

    fn frames(ids: &[u64]) -> Vec<FrameAddr> {
        ids.iter().map(|i| FrameAddr::new(i * 2048)).collect()
    }

    /// An ownership table in which the kernel holds `ids` as `holder`.
    fn owners_with(ids: &[u64], holder: Holder) -> FrameOwners {
        let mut owners = FrameOwners::new(LAYOUT);
        for f in frames(ids) {
            owners.give(&f, holder);
        }
        owners
    }

    #[test]
    fn fill_ring_takes_what_fits_from_the_end_of_the_free_list() {
        let (p, mut kernel) = anonymous_pair::<u64>(4).unwrap();
        let mut fill = FillRing(p);
        let mut free = frames(&[0, 1, 2, 3, 4, 5]);
        let mut owners = FrameOwners::new(LAYOUT);
        assert_eq!(fill.push_from(&mut free, &mut owners), 4);
        assert_eq!(free, frames(&[0, 1]), "the rest stays owned by the list");
        assert_eq!(owners.count(Holder::KernelRx), 4);
        assert_eq!(
            fill.push_from(&mut free, &mut owners),
            0,
            "the ring is full"
        );
        assert_eq!(kernel.available(8), 4);
        let got: Vec<u64> = (0..4).map(|i| kernel.read(i)).collect();
        assert_eq!(got, vec![5 * 2048, 4 * 2048, 3 * 2048, 2 * 2048]);
    }

    #[test]
    fn rx_ring_gives_frames_back_in_ring_order_on_release() {
        let (mut kernel, c) = anonymous_pair::<XdpDesc>(8).unwrap();
        let mut rx = RxRing { ring: c };
        let descs = [
            (2 * 2048 + 256, libc::XDP_PKT_CONTD),
            (5 * 2048, 0),
            (8 * 2048 + 4, 0), // the MR area: no frame of ours
        ];
        assert_eq!(kernel.reserve(3), 3);
        for (i, &(addr, options)) in descs.iter().enumerate() {
            kernel.write(
                i as u32,
                XdpDesc {
                    addr,
                    len: 60,
                    options,
                },
            );
        }
        kernel.submit(3);
        assert_eq!(rx.available(8), 3);
        assert!(rx.desc(0).more() && !rx.desc(1).more());
        let mut free = Vec::new();
        let mut owners = owners_with(&[2, 5], Holder::KernelRx);
        assert_eq!(rx.release(3, &mut free, &mut owners), 1, "the MR address");
        assert_eq!(free, frames(&[2, 5]));
        assert_eq!(rx.available(8), 0);
        assert_eq!(owners.count(Holder::KernelRx), 0);
    }

    #[test]
    fn rx_ring_recycles_only_frames_the_kernel_held_for_receiving() {
        let (mut kernel, c) = anonymous_pair::<XdpDesc>(8).unwrap();
        let mut rx = RxRing { ring: c };
        let descs = [
            (2048, 60),            // on the fill ring: good
            (3 * 2048, 60),        // a TX frame in flight
            (4 * 2048, 60),        // held by user space (a free list)
            (2048 + 64, 60),       // frame 1 again: returned twice
            (2 * 2048 + 2000, 60), // crosses into frame 3
            (2 * 2048, 60),        // on the fill ring: good
        ];
        assert_eq!(kernel.reserve(6), 6);
        for (i, &(addr, len)) in descs.iter().enumerate() {
            kernel.write(
                i as u32,
                XdpDesc {
                    addr,
                    len,
                    options: 0,
                },
            );
        }
        kernel.submit(6);
        let mut owners = owners_with(&[1, 2], Holder::KernelRx);
        owners.give(&FrameAddr::new(3 * 2048), Holder::KernelTx);
        assert_eq!(rx.available(8), 6);
        let mut free = Vec::new();
        assert_eq!(rx.release(6, &mut free, &mut owners), 4);
        assert_eq!(free, frames(&[1, 2]), "each good frame once, no other");
        assert_eq!(
            owners.count(Holder::KernelTx),
            1,
            "the TX frame stays the kernel's"
        );
    }

    #[test]
    fn completions_are_frames_or_mr_fragments() {
        let (mut kernel, c) = anonymous_pair::<u64>(4).unwrap();
        let mut comp = CompRing {
            ring: c,
            layout: LAYOUT,
        };
        assert_eq!(kernel.reserve(2), 2);
        kernel.write(0, 3 * 2048);
        kernel.write(1, 8 * 2048 + 100);
        kernel.submit(2);
        let mut seen = Vec::new();
        let mut owners = owners_with(&[3], Holder::KernelTx);
        let frag = LAYOUT.mr_addr(100, 10).unwrap();
        owners.hold_mr(&frag);
        assert!(owners.mr_busy(0..2048) && !owners.mr_busy(2048..4096));
        assert_eq!(comp.drain(&mut owners, |c| seen.push(c)), 2);
        assert_eq!(
            seen,
            vec![Completed::Frame(FrameAddr::new(3 * 2048)), Completed::Mr]
        );
        assert_eq!(owners.mr_in_flight(), 0);
        assert!(!owners.mr_busy(0..2048), "its completion came back");
        assert_eq!(comp.drain(&mut owners, |_| panic!("nothing left")), 0);
        // The same frame and fragment completed again, and an RX frame:
        // refused.
        assert_eq!(kernel.reserve(3), 3);
        kernel.write(0, 3 * 2048);
        kernel.write(1, 5 * 2048);
        kernel.write(2, 8 * 2048 + 100);
        kernel.submit(3);
        owners.give(&FrameAddr::new(5 * 2048), Holder::KernelRx);
        let mut seen = Vec::new();
        assert_eq!(comp.drain(&mut owners, |c| seen.push(c)), 3);
        assert_eq!(
            seen,
            vec![Completed::Refused, Completed::Refused, Completed::Refused]
        );
        assert_eq!(owners.mr_in_flight(), 0);
    }

    #[test]
    fn tx_ring_publishes_raw_descriptors_and_keeps_what_does_not_fit() {
        let (p, mut kernel) = anonymous_pair::<XdpDesc>(2).unwrap();
        let mut tx = TxRing(p);
        let mut pending: Vec<TxDesc> = frames(&[1, 2, 3])
            .into_iter()
            .map(|f| TxDesc {
                data: TxData::Frame(f),
                len: 64,
                more: false,
            })
            .collect();
        assert_eq!(tx.free(3), 2);
        let mut owners = FrameOwners::new(LAYOUT);
        assert_eq!(
            tx.push_from(&mut pending, 3, &mut owners),
            2,
            "clamped to the room"
        );
        assert_eq!(owners.count(Holder::KernelTx), 2);
        assert_eq!(pending.len(), 1);
        assert_eq!(kernel.available(4), 2);
        assert_eq!(kernel.read(0).addr, 2048);
        assert_eq!(kernel.read(1).addr, 2 * 2048);
    }
}
