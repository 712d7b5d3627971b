//! The UMEM: one mapping holding the packet frames and, after them, the
//! memory-region (MR) area the application registers buffers in.
//!
//! ```text
//! 0                         frames_len                      len
//! | frame 0 | frame 1 | ... | MR area (application buffers) |
//! ```
//!
//! The whole mapping is registered with the kernel, so a TX descriptor may
//! point into the MR area (zero-copy fragment); the kernel only ever writes
//! into frames that sit in the fill ring. Safe code reaches frame memory only
//! through an owned [`FrameAddr`] (TX) or an [`RxDesc`] borrowed from an RX
//! ring, which exist only for frames user space owns at that moment.
//!
//! Memory slots ([`UmemConfig::mr_slots`], for the daemon): the MR area is
//! then `count` slots of `len` bytes, each its own sealed memfd mapped
//! `MAP_SHARED | MAP_FIXED` over its part of the UMEM before the UMEM is
//! registered (`XDP_UMEM_REG` pins the pages it finds, so the mapping must
//! be final by then). The daemon passes slot `i`'s memfd to one
//! application, which maps it: placement writes payload straight into the
//! application's memory and zero-copy TX descriptors still point into the
//! UMEM. That application may write its slot at any time, so the MR area's
//! bytes are payload to copy, never values to trust.
//!
//! A daemon serving several queues gives every queue's UMEM the same
//! slots ([`MrSlots::memory`]): the first UMEM creates them, the others map
//! the same memfds at the same place, so an application's region is one
//! memory every queue's datapath writes into and sends from.

use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::desc::{FrameAddr, RxDesc, UmemLayout};
use super::mmap::{page_size, Mmap};
use super::shm::create_sealed;
use super::syscall::{setsockopt, SyscallError};
use super::umem_error::UmemError;

/// Smallest chunk the kernel accepts (`XDP_UMEM_MIN_CHUNK_SIZE`).
pub const MIN_FRAME_SIZE: u32 = 2048;
/// Largest chunk in aligned mode: one page.
pub const MAX_FRAME_SIZE: u32 = 4096;

/// UMEM geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UmemConfig {
    /// Bytes per frame (chunk): a power of two in 2048..=4096.
    pub frame_size: u32,
    /// Packet frames (RX and TX together).
    pub frame_count: u32,
    /// Bytes of MR area after the frames (rounded up to whole frames);
    /// ignored when `mr_slots` is set.
    pub mr_bytes: usize,
    /// Back the mapping with huge pages.
    pub hugepages: bool,
    /// Make the MR area exactly these memory slots, each its own memfd
    /// (module docs); `None`: one anonymous MR area of `mr_bytes`.
    pub mr_slots: Option<MrSlots>,
}

/// The MR area as memory slots, each a memfd another process can map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrSlots {
    /// Number of slots (at least 1).
    pub count: u32,
    /// Bytes per slot: a nonzero multiple of the page size and of the
    /// frame size.
    pub len: usize,
    /// The slots of another UMEM to map ([`Umem::mr_slot_set`]: same
    /// `count` and `len`), or `None` to create new ones.
    pub memory: Option<SlotSet>,
}

/// The memfds of a UMEM's memory slots, shared with the UMEMs of the
/// other queues that map them too. Two sets are equal when they are the
/// same memfds.
#[derive(Debug, Clone)]
pub struct SlotSet {
    fds: Arc<[OwnedFd]>,
    /// Bytes per slot.
    len: usize,
}

impl SlotSet {
    /// Number of slots.
    pub fn count(&self) -> u32 {
        self.fds.len() as u32
    }

    /// Bytes per slot.
    pub fn slot_len(&self) -> usize {
        self.len
    }
}

impl PartialEq for SlotSet {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.fds, &other.fds) && self.len == other.len
    }
}

impl Eq for SlotSet {}

impl Default for UmemConfig {
    fn default() -> Self {
        UmemConfig {
            frame_size: 4096,
            frame_count: 8192,
            mr_bytes: 64 << 20,
            hugepages: false,
            mr_slots: None,
        }
    }
}

/// The UMEM mapping and its layout.
#[derive(Debug)]
pub struct Umem {
    mem: Mmap,
    frame_size: u32,
    frame_count: u32,
    frames_len: usize,
    /// Whether [`Umem::take_frames`] has handed out the frames.
    frames_taken: bool,
    /// The memfds of the memory slots, in address order (empty without).
    slots: SlotSet,
    /// Bytes per slot (0 without).
    slot_len: usize,
}

impl Umem {
    /// Maps a UMEM with the given geometry.
    ///
    /// # Errors
    /// Bad geometry, or the mapping failed (huge pages not reserved, say).
    pub fn new(config: &UmemConfig) -> Result<Umem, UmemError> {
        let fs = config.frame_size;
        if !fs.is_power_of_two() || !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE).contains(&fs) {
            return Err(UmemError::FrameSize(fs));
        }
        if config.frame_count == 0 {
            return Err(UmemError::NoFrames);
        }
        let too_large = || UmemError::TooLarge {
            frames: config.frame_count,
            frame_size: fs,
            mr_bytes: config.mr_bytes,
        };
        let frames_len = (config.frame_count as usize)
            .checked_mul(fs as usize)
            .ok_or_else(too_large)?;
        let mr_len = match &config.mr_slots {
            Some(slots) => {
                check_slots(config, slots, frames_len)?;
                slots.len.checked_mul(slots.count as usize)
            }
            None => config.mr_bytes.checked_next_multiple_of(fs as usize),
        }
        .ok_or_else(too_large)?;
        let mut len = frames_len.checked_add(mr_len).ok_or_else(too_large)?;
        if config.hugepages {
            len = len
                .checked_next_multiple_of(2 << 20)
                .ok_or_else(too_large)?;
        }
        let mut mem = Mmap::anonymous(len, config.hugepages)?;
        let slot_len = config.mr_slots.as_ref().map_or(0, |s| s.len);
        let slots = match &config.mr_slots {
            None => SlotSet {
                fds: Arc::new([]),
                len: 0,
            },
            Some(MrSlots {
                memory: Some(set), ..
            }) => set.clone(),
            Some(MrSlots { count, .. }) => {
                let mut fds = Vec::with_capacity(*count as usize);
                for i in 0..*count {
                    fds.push(create_sealed(&format!("zerosplit-mr-slot-{i}"), slot_len)?);
                }
                SlotSet {
                    fds: fds.into(),
                    len: slot_len,
                }
            }
        };
        for (i, fd) in slots.fds.iter().enumerate() {
            mem.overlay_shared(frames_len + i * slot_len, fd.as_fd(), slot_len)?;
        }
        Ok(Umem {
            mem,
            frame_size: fs,
            frame_count: config.frame_count,
            frames_len,
            frames_taken: false,
            slots,
            slot_len,
        })
    }

    /// Slot `i`'s memfd, to pass to the application it is for; `None`
    /// past the last slot or without slots.
    pub fn mr_slot_fd(&self, i: u32) -> Option<BorrowedFd<'_>> {
        self.slots.fds.get(i as usize).map(AsFd::as_fd)
    }

    /// Number of memory slots (0 without).
    pub fn mr_slot_count(&self) -> u32 {
        self.slots.count()
    }

    /// The memory slots, for another queue's UMEM to map too
    /// ([`MrSlots::memory`]).
    pub fn mr_slot_set(&self) -> SlotSet {
        self.slots.clone()
    }

    /// Bytes per memory slot (0 without); slot `i` is bytes
    /// `i * len..(i + 1) * len` of the MR area.
    pub fn mr_slot_len(&self) -> usize {
        self.slot_len
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of packet frames.
    pub fn frame_count(&self) -> u32 {
        self.frame_count
    }

    /// UMEM address where the MR area starts.
    pub fn mr_offset(&self) -> u64 {
        self.frames_len as u64
    }

    /// Length of the MR area.
    pub fn mr_len(&self) -> usize {
        self.mem.len() - self.frames_len
    }

    /// Where the frame and MR areas lie, for the rings.
    pub(crate) fn layout(&self) -> UmemLayout {
        UmemLayout {
            frame_size: self.frame_size,
            frames_len: self.frames_len as u64,
            mr_len: self.mr_len() as u64,
        }
    }

    /// Every frame of the frame area, in address order, the first time it
    /// is called; empty afterwards, so each frame has one owner.
    pub(crate) fn take_frames(&mut self) -> Vec<FrameAddr> {
        if std::mem::replace(&mut self.frames_taken, true) {
            return Vec::new();
        }
        let fs = u64::from(self.frame_size);
        (0..u64::from(self.frame_count))
            .map(|i| FrameAddr::new(i * fs))
            .collect()
    }

    /// Registers the whole mapping with the socket `fd` (`XDP_UMEM_REG`).
    /// The kernel then writes only into frames put on the fill ring.
    ///
    /// # Errors
    /// `setsockopt(XDP_UMEM_REG)` failed.
    pub(crate) fn register(&self, fd: BorrowedFd<'_>) -> Result<(), SyscallError> {
        let reg = libc::xdp_umem_reg {
            addr: self.mem.as_ptr() as u64,
            len: self.mem.len() as u64,
            chunk_size: self.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(
            fd,
            libc::SOL_XDP,
            libc::XDP_UMEM_REG,
            &reg,
            "setsockopt(XDP_UMEM_REG)",
        )
    }

    /// The MR area, for the application to fill send buffers and read
    /// received data. With memory slots, the applications the slots were
    /// passed to may write their slot at any time: copy the bytes, never
    /// trust their values.
    pub fn mr(&self) -> &[u8] {
        // SAFETY: the MR area lies inside the mapping after the frames; the
        // kernel never writes it (it is never put on the fill ring), and
        // `&self` excludes a concurrent `&mut` from safe code. A memory
        // slot's pages are also mapped by another process, which may write
        // them concurrently: any byte value is a valid `u8`, and the
        // datapath only copies payload out of (and into) the area, never
        // relying on two reads agreeing.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr().add(self.frames_len), self.mr_len()) }
    }

    /// The MR area, writable.
    pub fn mr_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `mr`; `&mut self` makes this the only reference in
        // this process (another process may share a slot's pages, as said
        // there).
        unsafe {
            std::slice::from_raw_parts_mut(self.mem.as_ptr().add(self.frames_len), self.mr_len())
        }
    }

    /// The bytes `addr..addr + len` of the whole mapping (frames or MR
    /// area) as the kernel sees them: for the fake kernel of tests
    /// ([`crate::xsk::testing`]), which writes received packets into the
    /// frames the fill ring gave it and reads the ones the TX ring handed
    /// it.
    ///
    /// # Errors
    /// The range lies outside the mapping.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn kernel_bytes(&mut self, addr: u64, len: u32) -> Result<&mut [u8], UmemError> {
        let bad = UmemError::BadDescriptor { addr, len };
        let start = usize::try_from(addr).map_err(|_| bad)?;
        let end = start
            .checked_add(len as usize)
            .ok_or(UmemError::BadDescriptor { addr, len })?;
        if end > self.mem.len() {
            return Err(UmemError::BadDescriptor { addr, len });
        }
        // SAFETY: checked to lie inside the mapping; `&mut self` makes this
        // the only reference into the UMEM from safe code while it lives
        // (every other slice of frames or the MR area borrows `self`).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr().add(start), len as usize) })
    }

    /// Splits the UMEM into frame access and the writable MR area, so a
    /// received frame can be read while its payload is placed into the MR
    /// area (the two never overlap).
    pub fn split(&mut self) -> (Frames<'_>, &mut [u8]) {
        let frames = Frames {
            base: self.mem.as_ptr(),
            frames_len: self.frames_len,
            frame_size: self.frame_size,
            _borrow: PhantomData,
        };
        let mr_len = self.mr_len();
        // SAFETY: the MR area starts where the frame area ends, so this
        // slice and any slice `Frames` hands out are disjoint; the borrow of
        // `self` keeps the mapping alive and exclusive in this process (a
        // memory slot's bytes are shared with another process, see `mr`).
        let mr = unsafe {
            std::slice::from_raw_parts_mut(self.mem.as_ptr().add(self.frames_len), mr_len)
        };
        (frames, mr)
    }
}

/// Refuses memory-slot geometry the mapping cannot honour.
fn check_slots(config: &UmemConfig, slots: &MrSlots, frames_len: usize) -> Result<(), UmemError> {
    let page = page_size();
    let fs = config.frame_size as usize;
    let why = if slots.count == 0 {
        "count must be at least 1".to_owned()
    } else if let Some(m) = slots
        .memory
        .as_ref()
        .filter(|m| (m.count(), m.slot_len()) != (slots.count, slots.len))
    {
        format!(
            "{} slots of {} bytes differ from the {} of {} given to map",
            slots.count,
            slots.len,
            m.count(),
            m.slot_len()
        )
    } else if slots.len == 0 || !slots.len.is_multiple_of(page) || !slots.len.is_multiple_of(fs) {
        format!(
            "len {} must be a nonzero multiple of the page size ({page}) and of frame_size ({fs})",
            slots.len
        )
    } else if !frames_len.is_multiple_of(page) {
        format!(
            "the frame area ({} frames of {fs} bytes) must end on a page boundary ({page})",
            config.frame_count
        )
    } else if config.hugepages {
        "memory slots cannot be mapped into a huge-page UMEM".to_owned()
    } else {
        return Ok(());
    };
    Err(UmemError::MrSlots(why))
}

/// Access to the frame area while the MR area is borrowed separately.
/// Slices are handed out per descriptor, checked to lie inside one frame.
#[derive(Debug)]
pub struct Frames<'a> {
    base: *mut u8,
    frames_len: usize,
    frame_size: u32,
    _borrow: PhantomData<&'a mut Umem>,
}

impl Frames<'_> {
    fn check(&self, addr: u64, len: u32) -> Result<usize, UmemError> {
        let bad = UmemError::BadDescriptor { addr, len };
        let start = usize::try_from(addr).map_err(|_| bad)?;
        let end = start
            .checked_add(len as usize)
            .ok_or(UmemError::BadDescriptor { addr, len })?;
        let fs = self.frame_size as usize;
        if end > self.frames_len || (len > 0 && start / fs != (end - 1) / fs) {
            return Err(UmemError::BadDescriptor { addr, len });
        }
        Ok(start)
    }

    /// The bytes of a received descriptor; they live no longer than the
    /// borrow of its ring (which must release the descriptor before the
    /// frame can go back to the kernel).
    ///
    /// # Errors
    /// The descriptor lies outside the frame area or crosses a frame.
    pub(crate) fn rx<'s>(&'s self, desc: &RxDesc<'s>) -> Result<&'s [u8], UmemError> {
        let (addr, len) = (desc.desc.addr, desc.desc.len);
        let start = self.check(addr, len)?;
        // SAFETY: checked to lie inside one frame of the frame area. An
        // `RxDesc` exists only while its RX ring holds the descriptor: the
        // kernel handed that frame to user space and cannot get it back
        // (through the fill ring) before the ring releases it, which needs
        // the `&mut` ring borrow the returned slice's lifetime excludes.
        // The descriptor must come from a ring of this UMEM: the range check
        // cannot tell two ports' UMEMs of the same layout apart, so the
        // caller guarantees it (xsk/rx.rs reads a flow socket only through
        // the port that owns its UMEM, checking `socket.owner`).
        Ok(unsafe { std::slice::from_raw_parts(self.base.add(start), len as usize) })
    }

    /// The whole of an owned frame, writable.
    ///
    /// `frame` must be one of this UMEM's frames (xsk/ keeps each port's
    /// `FrameAddr`s with that port); the range check below cannot tell two
    /// UMEMs of the same layout apart.
    ///
    /// # Errors
    /// The address lies outside the frame area.
    pub(crate) fn tx(&mut self, frame: &FrameAddr) -> Result<&mut [u8], UmemError> {
        let room = self.frame_size;
        let start = self.check(frame.addr(), room)?;
        // SAFETY: checked to lie inside one frame. A `FrameAddr` is not
        // `Clone` and its holder is not a ring, so neither the kernel nor
        // other safe code can reach this frame now, provided the frame is
        // this UMEM's (each port's frames are minted by its own `Umem` and
        // stay with that port in xsk/); `&mut self` prevents two live
        // writable slices from safe code.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.base.add(start), room as usize) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::desc::XdpDesc;
    use super::*;

    /// A received descriptor as an RX ring would lend it.
    fn rx_desc(addr: u64, len: u32) -> RxDesc<'static> {
        RxDesc {
            desc: XdpDesc {
                addr,
                len,
                options: 0,
            },
            _ring: PhantomData,
        }
    }

    #[test]
    fn geometry_is_validated() {
        let cfg = |frame_size, frame_count| UmemConfig {
            frame_size,
            frame_count,
            mr_bytes: 0,
            hugepages: false,
            mr_slots: None,
        };
        assert!(matches!(
            Umem::new(&cfg(3000, 4)),
            Err(UmemError::FrameSize(3000))
        ));
        assert!(matches!(
            Umem::new(&cfg(8192, 4)),
            Err(UmemError::FrameSize(8192))
        ));
        assert!(matches!(Umem::new(&cfg(2048, 0)), Err(UmemError::NoFrames)));
    }

    #[test]
    fn mr_area_follows_frames_and_rounds_up() {
        let mut u = Umem::new(&UmemConfig {
            frame_size: 2048,
            frame_count: 8,
            mr_bytes: 5000,
            hugepages: false,
            mr_slots: None,
        })
        .unwrap();
        assert_eq!(u.mr_offset(), 16384);
        assert_eq!(u.mr_len(), 6144);
        u.mr_mut()[6143] = 7;
        let owned = u.take_frames();
        let (mut frames, mr) = u.split();
        assert_eq!(mr[6143], 7);
        frames.tx(&owned[1]).unwrap()[0] = 9;
        assert_eq!(frames.rx(&rx_desc(2048, 1)).unwrap(), &[9]);
    }

    #[test]
    fn frames_are_handed_out_once_in_address_order() {
        let mut u = Umem::new(&UmemConfig {
            frame_size: 2048,
            frame_count: 3,
            mr_bytes: 0,
            hugepages: false,
            mr_slots: None,
        })
        .unwrap();
        let addrs: Vec<u64> = u.take_frames().iter().map(FrameAddr::addr).collect();
        assert_eq!(addrs, vec![0, 2048, 4096]);
        assert!(u.take_frames().is_empty(), "a second owner of every frame");
        assert_eq!(
            u.layout(),
            UmemLayout {
                frame_size: 2048,
                frames_len: 3 * 2048,
                mr_len: 0
            }
        );
    }

    #[test]
    fn descriptors_outside_or_across_frames_are_refused() {
        let mut u = Umem::new(&UmemConfig {
            frame_size: 2048,
            frame_count: 2,
            mr_bytes: 4096,
            hugepages: false,
            mr_slots: None,
        })
        .unwrap();
        let (mut frames, _) = u.split();
        assert!(
            frames.rx(&rx_desc(2000, 100)).is_err(),
            "crosses a frame boundary"
        );
        assert!(
            frames.rx(&rx_desc(4096, 1)).is_err(),
            "MR area is not a frame"
        );
        assert!(frames.rx(&rx_desc(u64::MAX, 1)).is_err());
        assert!(
            frames.tx(&FrameAddr::new(4096)).is_err(),
            "a frame of another UMEM"
        );
        assert_eq!(frames.tx(&FrameAddr::new(2048)).unwrap().len(), 2048);
        assert_eq!(frames.rx(&rx_desc(256, 1792)).unwrap().len(), 1792);
    }

    fn slotted(count: u32, len: usize) -> Result<Umem, UmemError> {
        Umem::new(&UmemConfig {
            frame_size: 2048,
            frame_count: 4,
            mr_bytes: 12345,
            hugepages: false,
            mr_slots: Some(MrSlots {
                count,
                len,
                memory: None,
            }),
        })
    }

    #[test]
    fn memory_slots_are_memfds_mapped_into_the_mr_area() {
        use crate::sys::shm::SharedMemory;
        let mut u = slotted(2, 8192).expect("slots");
        assert_eq!((u.mr_slot_count(), u.mr_slot_len()), (2, 8192));
        assert_eq!(u.mr_len(), 2 * 8192, "mr_bytes is ignored");
        assert!(u.mr_slot_fd(2).is_none());
        let dup = |u: &Umem, i| {
            u.mr_slot_fd(i)
                .expect("slot")
                .try_clone_to_owned()
                .expect("dup")
        };
        let mut one = SharedMemory::open(dup(&u, 1), 8192).expect("slot 1 maps");
        let zero = SharedMemory::open(dup(&u, 0), 8192).expect("slot 0 maps");
        u.mr_mut()[8192 + 100..8192 + 104].copy_from_slice(b"zero");
        assert_eq!(
            &one.bytes()[100..104],
            b"zero",
            "the app sees the UMEM's write"
        );
        assert!(zero.bytes().iter().all(|&b| b == 0), "slot 0 does not");
        one.bytes_mut()[8191] = 0xab;
        assert_eq!(u.mr()[2 * 8192 - 1], 0xab, "the UMEM sees the app's write");
        let (_, mr) = u.split();
        assert_eq!(mr[8192 + 100], b'z');
        // The frame area is untouched and still private.
        u.take_frames();
    }

    #[test]
    fn a_second_umem_maps_the_first_ones_slots() {
        let mut first = slotted(2, 8192).expect("slots");
        let set = first.mr_slot_set();
        let second = |count, len| {
            Umem::new(&UmemConfig {
                frame_size: 2048,
                frame_count: 2,
                mr_bytes: 0,
                hugepages: false,
                mr_slots: Some(MrSlots {
                    count,
                    len,
                    memory: Some(set.clone()),
                }),
            })
        };
        let mut other = second(2, 8192).expect("same geometry maps");
        assert_eq!(other.mr_slot_set(), set, "the same memfds");
        assert_ne!(slotted(2, 8192).expect("new").mr_slot_set(), set);
        first.mr_mut()[8192 + 7] = 0x5a;
        assert_eq!(other.mr()[8192 + 7], 0x5a, "one memory, two UMEMs");
        other.mr_mut()[3] = 0xa5;
        assert_eq!(first.mr()[3], 0xa5);
        let e = second(3, 8192).expect_err("count differs").to_string();
        assert!(e.contains("differ"), "{e}");
        let e = second(2, 4096).expect_err("len differs").to_string();
        assert!(e.contains("differ"), "{e}");
    }

    #[test]
    fn memory_slot_geometry_is_validated() {
        let msg = |r: Result<Umem, UmemError>| r.expect_err("refused").to_string();
        assert!(msg(slotted(0, 4096)).contains("count"));
        assert!(msg(slotted(1, 2048)).contains("multiple of the page size"));
        assert!(msg(slotted(1, 0)).contains("nonzero"));
        let odd = Umem::new(&UmemConfig {
            frame_size: 2048,
            frame_count: 3,
            mr_bytes: 0,
            hugepages: false,
            mr_slots: Some(MrSlots {
                count: 1,
                len: 4096,
                memory: None,
            }),
        });
        assert!(msg(odd).contains("page boundary"));
        let huge = Umem::new(&UmemConfig {
            frame_size: 4096,
            frame_count: 4,
            mr_bytes: 0,
            hugepages: true,
            mr_slots: Some(MrSlots {
                count: 1,
                len: 4096,
                memory: None,
            }),
        });
        assert!(msg(huge).contains("huge"));
        assert!(slotted(u32::MAX, 1 << 40).is_err(), "overflow");
    }
}
