//! Single-producer/single-consumer rings shared with the kernel (AF_XDP's
//! fill, completion, RX and TX rings), and the same logic over anonymous
//! memory for tests.
//!
//! Protocol (Documentation/networking/af_xdp.rst): the producer writes
//! descriptors, then publishes its index with release ordering; the consumer
//! reads the producer index with acquire ordering, reads the descriptors,
//! then publishes its own index with release ordering. Indices run freely
//! and wrap at 2^32; a slot is `index & (size - 1)`.
//!
//! The API is acquire → data → release, as in s2n-quic-xdp: a producer
//! [`ProducerRing::reserve`]s slots, [`ProducerRing::write`]s them and
//! [`ProducerRing::submit`]s; a consumer asks [`ConsumerRing::available`],
//! [`ConsumerRing::read`]s and [`ConsumerRing::release`]s. Reads and writes
//! are bounds-checked against what was reserved or made available, so safe
//! code can never touch a slot the other side owns.
//!
//! The other side is not always trusted: the daemon shares rings with
//! application processes that may write any value into the shared memory
//! at any time. So an index the peer publishes is checked before use: a
//! producer–consumer distance above the ring size is a protocol violation
//! (counted, [`ProducerRing::violations`], [`ConsumerRing::violations`]),
//! read as a full ring by a producer and an empty one by a consumer; the
//! arithmetic saturates instead of underflowing; slots are read with
//! volatile reads, once, by value. Our own index is kept in this process
//! and only published, never read back. Element types of rings over
//! memory shared with a process are plain data valid for any bit pattern
//! ([`bytemuck::Pod`], see [`super::channel`]).
//!
//! Wakeups between processes (need_wakeup): the side about to sleep sets
//! the ring's flags word ([`ProducerRing::set_wakeup`]), looks at the ring
//! once more and then sleeps on an eventfd; the other side, after
//! publishing, rings that eventfd only if [`ProducerRing::wakeup_requested`]
//! says so. Both calls fence (`SeqCst`), so one of the two always sees the
//! other's write and no wakeup is lost.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;

#[cfg(test)]
use super::desc::XdpDesc;
use super::mmap::Mmap;
use super::syscall::SyscallError;

/// Byte offsets of a ring's fields inside its mapping (`xdp_ring_offset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingOffsets {
    /// Producer index.
    pub producer: usize,
    /// Consumer index.
    pub consumer: usize,
    /// First descriptor.
    pub desc: usize,
    /// Flags word (`XDP_RING_NEED_WAKEUP`).
    pub flags: usize,
}

impl RingOffsets {
    /// The layout used for rings over anonymous memory in tests: each index
    /// on its own cache line, descriptors after them.
    pub const TEST: RingOffsets = RingOffsets {
        producer: 0,
        consumer: 64,
        flags: 128,
        desc: 192,
    };

    pub(crate) fn from_kernel(off: &libc::xdp_ring_offset) -> RingOffsets {
        RingOffsets {
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            desc: off.desc as usize,
            flags: off.flags as usize,
        }
    }

    /// Bytes a ring of `size` elements of `T` needs with this layout
    /// (`usize::MAX` if that overflows).
    pub fn mapping_len<T>(&self, size: u32) -> usize {
        (size as usize)
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|d| d.checked_add(self.desc))
            .unwrap_or(usize::MAX)
    }

    /// Whether the layout fits a `len`-byte mapping with aligned fields
    /// that do not overlap one another or the descriptors.
    fn fits<T>(&self, size: u32, len: usize) -> bool {
        let desc_end = self.mapping_len::<T>(size);
        let words = [self.producer, self.consumer, self.flags];
        let word_ok = |o: usize| {
            o.is_multiple_of(4)
                && o.checked_add(4).is_some_and(|e| e <= len)
                && (o + 4 <= self.desc || o >= desc_end)
        };
        desc_end <= len
            && self.desc.is_multiple_of(std::mem::align_of::<T>())
            && words.iter().all(|&o| word_ok(o))
            && words
                .iter()
                .enumerate()
                .all(|(i, &a)| words[i + 1..].iter().all(|&b| a.abs_diff(b) >= 4))
    }
}

/// A ring could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// Ring sizes must be powers of two (the kernel refuses others too).
    #[error("ring size {0} is not a power of two")]
    NotPowerOfTwo(u32),
    /// The layout does not fit the mapping or misaligns a field.
    #[error("ring layout {offsets:?} with {size} entries does not fit a {len}-byte mapping or is misaligned")]
    BadLayout {
        /// The layout.
        offsets: RingOffsets,
        /// Entries requested.
        size: u32,
        /// Mapping length.
        len: usize,
    },
    /// Mapping the memory failed.
    #[error(transparent)]
    Map(#[from] SyscallError),
}

/// Fields and memory shared by both ring roles.
#[derive(Debug)]
struct RawRing<T> {
    _mem: Arc<Mmap>,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    desc: NonNull<T>,
    size: u32,
    _marker: PhantomData<T>,
}

// SAFETY: the ring memory is shared with exactly one other party (the kernel,
// or in tests the other role) through atomics and the index protocol; the
// value itself may move between threads.
unsafe impl<T: Send> Send for RawRing<T> {}

impl<T: Copy> RawRing<T> {
    fn new(mem: Arc<Mmap>, offsets: RingOffsets, size: u32) -> Result<Self, RingError> {
        if !size.is_power_of_two() {
            return Err(RingError::NotPowerOfTwo(size));
        }
        let bad = || RingError::BadLayout {
            offsets,
            size,
            len: mem.len(),
        };
        if !offsets.fits::<T>(size, mem.len()) {
            return Err(bad());
        }
        let base = mem.as_ptr();
        // SAFETY: every offset was checked above (`fits`) to lie inside the
        // mapping with room for its field, to be suitably aligned, and not
        // to overlap another field; the mapping is page-aligned.
        let (producer, consumer, flags, desc) = unsafe {
            (
                NonNull::new_unchecked(base.add(offsets.producer).cast::<AtomicU32>()),
                NonNull::new_unchecked(base.add(offsets.consumer).cast::<AtomicU32>()),
                NonNull::new_unchecked(base.add(offsets.flags).cast::<AtomicU32>()),
                NonNull::new_unchecked(base.add(offsets.desc).cast::<T>()),
            )
        };
        Ok(RawRing {
            _mem: mem,
            producer,
            consumer,
            flags,
            desc,
            size,
            _marker: PhantomData,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the mapping `_mem` keeps alive; aligned and
        // only accessed atomically (by us and by the other side).
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.consumer.as_ref() }
    }

    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.flags.as_ref() }
    }

    /// Entries between the two indices, if the protocol allows that
    /// distance (at most `size`); `None` when a peer published an index
    /// no correct peer could.
    fn distance(&self, prod: u32, cons: u32) -> Option<u32> {
        Some(prod.wrapping_sub(cons)).filter(|&d| d <= self.size)
    }

    /// Sets (`on`) or clears the wakeup bit of the flags word, then fences
    /// so the caller's next look at the ring is ordered after it.
    fn set_wakeup(&self, on: bool) {
        if on {
            self.flags()
                .fetch_or(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        } else {
            self.flags()
                .fetch_and(!libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
    }

    /// Fences after the caller's publish, then reads the wakeup bit.
    fn wakeup_requested(&self) -> bool {
        fence(Ordering::SeqCst);
        self.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn slot(&self, index: u32) -> *mut T {
        // SAFETY: the masked index is below `size`, and the layout check in
        // `new` guarantees `size` descriptors fit in the mapping.
        unsafe { self.desc.as_ptr().add((index & (self.size - 1)) as usize) }
    }
}

/// The producing side of a ring (user space produces on fill and TX).
#[derive(Debug)]
pub struct ProducerRing<T> {
    raw: RawRing<T>,
    cached_prod: u32,
    cached_cons: u32,
    reserved: u32,
    violations: u64,
}

impl<T: Copy> ProducerRing<T> {
    /// A producer view over `mem` with the given layout.
    ///
    /// # Errors
    /// The size is not a power of two or the layout does not fit.
    pub fn new(mem: Arc<Mmap>, offsets: RingOffsets, size: u32) -> Result<Self, RingError> {
        let raw = RawRing::new(mem, offsets, size)?;
        let cached_prod = raw.producer().load(Ordering::Relaxed);
        let cached_cons = raw.consumer().load(Ordering::Acquire);
        Ok(ProducerRing {
            raw,
            cached_prod,
            cached_cons,
            reserved: 0,
            violations: 0,
        })
    }

    /// Number of entries.
    pub fn size(&self) -> u32 {
        self.raw.size
    }

    /// Reserves up to `n` free slots and returns how many it got (possibly
    /// 0). Slots `0..got` may then be written with [`ProducerRing::write`].
    ///
    /// A consumer index no correct peer could publish (more than `size`
    /// entries in flight, or ahead of ours) reads as a full ring and is
    /// counted in [`ProducerRing::violations`].
    pub fn reserve(&mut self, n: u32) -> u32 {
        let mut free = self.free();
        if free < n {
            self.cached_cons = self.raw.consumer().load(Ordering::Acquire);
            free = self.free();
            if self
                .raw
                .distance(self.cached_prod, self.cached_cons)
                .is_none()
            {
                self.violations += 1;
            }
        }
        self.reserved = free.min(n);
        self.reserved
    }

    /// Free slots as the cached indices say (0 for an impossible distance).
    fn free(&self) -> u32 {
        self.raw
            .distance(self.cached_prod, self.cached_cons)
            .map_or(0, |used| self.raw.size - used)
    }

    /// Writes reserved slot `i`.
    ///
    /// # Panics
    /// If `i` was not reserved: that would overwrite a slot the consumer owns.
    pub fn write(&mut self, i: u32, value: T) {
        assert!(
            i < self.reserved,
            "ring slot {i} written but only {} reserved",
            self.reserved
        );
        // SAFETY: the slot lies in the mapping (see `slot`) and, being
        // reserved, is owned by the producer until `submit` publishes it.
        // Volatile: the memory may be another process's.
        unsafe {
            self.raw
                .slot(self.cached_prod.wrapping_add(i))
                .write_volatile(value)
        }
    }

    /// Publishes the first `n` reserved slots to the consumer.
    ///
    /// # Panics
    /// If `n` exceeds what was reserved.
    pub fn submit(&mut self, n: u32) {
        assert!(
            n <= self.reserved,
            "submitting {n} ring slots but only {} reserved",
            self.reserved
        );
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.reserved -= n;
        self.raw
            .producer()
            .store(self.cached_prod, Ordering::Release);
    }

    /// Entries published but not yet consumed (a fresh read of the
    /// consumer), at most the ring size: an impossible consumer index
    /// reads as a full ring and is counted as a violation.
    pub fn in_flight(&mut self) -> u32 {
        self.cached_cons = self.raw.consumer().load(Ordering::Acquire);
        match self.raw.distance(self.cached_prod, self.cached_cons) {
            Some(d) => d,
            None => {
                self.violations += 1;
                self.raw.size
            }
        }
    }

    /// Whether the kernel asked to be woken up (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        self.raw.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// How many times a fresh read of the consumer's index found one no
    /// correct consumer could publish (a hostile or broken peer).
    pub fn violations(&self) -> u64 {
        self.violations
    }

    /// The sleeping side's half of the doorbell protocol (module docs):
    /// sets (`true`) or clears the "wake me" bit of this ring's flags
    /// word, then fences. A producer sets it before sleeping on a full
    /// ring.
    pub fn set_wakeup(&self, on: bool) {
        self.raw.set_wakeup(on);
    }

    /// The publishing side's half: after [`ProducerRing::submit`], whether
    /// the consumer asked to be woken (ring its eventfd then).
    pub fn wakeup_requested(&self) -> bool {
        self.raw.wakeup_requested()
    }
}

/// The consuming side of a ring (user space consumes RX and completion).
#[derive(Debug)]
pub struct ConsumerRing<T> {
    raw: RawRing<T>,
    cached_prod: u32,
    cached_cons: u32,
    available: u32,
    violations: u64,
}

impl<T: Copy> ConsumerRing<T> {
    /// A consumer view over `mem` with the given layout.
    ///
    /// # Errors
    /// The size is not a power of two or the layout does not fit.
    pub fn new(mem: Arc<Mmap>, offsets: RingOffsets, size: u32) -> Result<Self, RingError> {
        let raw = RawRing::new(mem, offsets, size)?;
        let cached_cons = raw.consumer().load(Ordering::Relaxed);
        let cached_prod = raw.producer().load(Ordering::Acquire);
        Ok(ConsumerRing {
            raw,
            cached_prod,
            cached_cons,
            available: 0,
            violations: 0,
        })
    }

    /// Number of entries.
    pub fn size(&self) -> u32 {
        self.raw.size
    }

    /// How many entries (up to `max`) can be read now; entries `0..got` may
    /// then be read with [`ConsumerRing::read`].
    ///
    /// Never more than the ring size: a producer index no correct peer
    /// could publish (more than `size` entries ahead of ours, or behind
    /// it) reads as an empty ring, so no slot is read that the peer did
    /// not fill, and is counted in [`ConsumerRing::violations`].
    pub fn available(&mut self, max: u32) -> u32 {
        let mut ready = self.ready();
        if ready < max {
            self.cached_prod = self.raw.producer().load(Ordering::Acquire);
            ready = self.ready();
            if self
                .raw
                .distance(self.cached_prod, self.cached_cons)
                .is_none()
            {
                self.violations += 1;
            }
        }
        self.available = ready.min(max);
        self.available
    }

    /// Entries ready as the cached indices say (0 for an impossible
    /// distance).
    fn ready(&self) -> u32 {
        self.raw
            .distance(self.cached_prod, self.cached_cons)
            .unwrap_or(0)
    }

    /// Reads available entry `i`.
    ///
    /// # Panics
    /// If `i` was not made available: the producer may still be writing it.
    pub fn read(&self, i: u32) -> T {
        assert!(
            i < self.available,
            "ring slot {i} read but only {} available",
            self.available
        );
        // SAFETY: the slot lies in the mapping and was published by the
        // producer (acquire load in `available`), which will not touch it
        // again until we release it.
        // The read is volatile and by value: the producer may be another
        // process that rewrites the slot meanwhile (a torn value is still
        // a value for the plain-data types such rings carry).
        unsafe {
            self.raw
                .slot(self.cached_cons.wrapping_add(i))
                .read_volatile()
        }
    }

    /// Hands the first `n` available entries back to the producer.
    ///
    /// # Panics
    /// If `n` exceeds what was made available.
    pub fn release(&mut self, n: u32) {
        assert!(
            n <= self.available,
            "releasing {n} ring slots but only {} available",
            self.available
        );
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.available -= n;
        self.raw
            .consumer()
            .store(self.cached_cons, Ordering::Release);
    }

    /// Whether the kernel asked to be woken up (`XDP_RING_NEED_WAKEUP`).
    #[cfg(test)]
    pub fn needs_wakeup(&self) -> bool {
        self.raw.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// How many times a fresh read of the producer's index found one no
    /// correct producer could publish (a hostile or broken peer).
    pub fn violations(&self) -> u64 {
        self.violations
    }

    /// The sleeping side's half of the doorbell protocol (module docs):
    /// sets (`true`) or clears the "wake me" bit of this ring's flags
    /// word, then fences. Look at [`ConsumerRing::available`] once more
    /// before sleeping.
    pub fn set_wakeup(&self, on: bool) {
        self.raw.set_wakeup(on);
    }

    /// After [`ConsumerRing::release`], whether a producer sleeping on a
    /// full ring asked to be woken.
    pub fn wakeup_requested(&self) -> bool {
        self.raw.wakeup_requested()
    }
}

/// A producer and a consumer over the same anonymous memory, as the kernel
/// and user space see one ring: for tests of ring logic without a kernel.
///
/// # Errors
/// The size is not a power of two or the memory could not be mapped.
#[cfg(any(test, feature = "testing"))]
pub fn anonymous_pair<T: Copy>(size: u32) -> Result<(ProducerRing<T>, ConsumerRing<T>), RingError> {
    if !size.is_power_of_two() {
        return Err(RingError::NotPowerOfTwo(size));
    }
    let len = RingOffsets::TEST.mapping_len::<T>(size);
    let mem = Arc::new(Mmap::anonymous(len, false)?);
    Ok((
        ProducerRing::new(mem.clone(), RingOffsets::TEST, size)?,
        ConsumerRing::new(mem, RingOffsets::TEST, size)?,
    ))
}

/// Sets the flags word of a test ring, standing in for the kernel.
#[cfg(test)]
pub fn set_test_flags<T: Copy>(ring: &ProducerRing<T>, flags: u32) {
    ring.raw.flags().store(flags, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_sizes_that_are_not_powers_of_two() {
        assert!(matches!(
            anonymous_pair::<u64>(6),
            Err(RingError::NotPowerOfTwo(6))
        ));
    }

    #[test]
    fn full_ring_refuses_more_until_consumed() {
        let (mut p, mut c) = anonymous_pair::<u64>(4).unwrap();
        assert_eq!(p.reserve(8), 4);
        for i in 0..4 {
            p.write(i, u64::from(i) * 10);
        }
        p.submit(4);
        assert_eq!(p.reserve(1), 0, "a full ring has no free slot");
        assert_eq!(c.available(8), 4);
        assert_eq!(
            (0..4).map(|i| c.read(i)).collect::<Vec<_>>(),
            vec![0, 10, 20, 30]
        );
        c.release(3);
        assert_eq!(p.reserve(8), 3);
        assert_eq!(p.in_flight(), 1);
    }

    #[test]
    fn indices_wrap_at_u32() {
        let (mut p, mut c) = anonymous_pair::<XdpDesc>(8).unwrap();
        // Start both sides near the wrap point, as a long-running socket would.
        let start = u32::MAX - 2;
        p.raw.producer().store(start, Ordering::Relaxed);
        p.raw.consumer().store(start, Ordering::Relaxed);
        p.cached_prod = start;
        p.cached_cons = start;
        c.cached_prod = start;
        c.cached_cons = start;
        let mut next = 0u64;
        let mut expect = 0u64;
        for round in 0..50u32 {
            let want = round % 7 + 1;
            let got = p.reserve(want);
            for i in 0..got {
                p.write(
                    i,
                    XdpDesc {
                        addr: next,
                        len: i,
                        options: 0,
                    },
                );
                next += 1;
            }
            p.submit(got);
            let n = c.available(u32::MAX);
            for i in 0..n {
                assert_eq!(c.read(i).addr, expect);
                expect += 1;
            }
            c.release(n);
        }
        assert_eq!(next, expect);
        assert!(next > 100);
    }

    #[test]
    #[should_panic(expected = "only 0 available")]
    fn reading_beyond_available_panics() {
        let (_p, mut c) = anonymous_pair::<u64>(4).unwrap();
        c.available(4);
        c.read(0);
    }

    #[test]
    #[should_panic(expected = "only 2 reserved")]
    fn writing_beyond_reserved_panics() {
        let (mut p, _c) = anonymous_pair::<u64>(4).unwrap();
        p.reserve(2);
        p.write(2, 1);
    }

    #[test]
    fn wakeup_flag_is_read_from_shared_memory() {
        let (p, c) = anonymous_pair::<u64>(4).unwrap();
        assert!(!p.needs_wakeup());
        set_test_flags(&p, libc::XDP_RING_NEED_WAKEUP);
        assert!(p.needs_wakeup() && c.needs_wakeup());
    }

    #[test]
    fn threads_see_every_entry_once_in_order() {
        let (mut p, mut c) = anonymous_pair::<u64>(64).unwrap();
        const N: u64 = 200_000;
        let producer = std::thread::spawn(move || {
            let mut next = 0;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while next < N && std::time::Instant::now() < deadline {
                let got = p.reserve(16);
                for i in 0..got {
                    p.write(i, next + u64::from(i));
                }
                next += u64::from(got);
                p.submit(got);
                if got == 0 {
                    std::thread::yield_now();
                }
            }
            next
        });
        let mut expect = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while expect < N && std::time::Instant::now() < deadline {
            let n = c.available(32);
            for i in 0..n {
                assert_eq!(c.read(i), expect);
                expect += 1;
            }
            c.release(n);
            if n == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(producer.join().unwrap(), N);
        assert_eq!(expect, N);
    }
}
