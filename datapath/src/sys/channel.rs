//! An attachment channel: one shared memory ([`SharedMemory`]) holding a
//! ring of work requests (application → daemon), a ring of completions
//! (daemon → application) and a status area, laid out by
//! [`ChannelLayout`]; and the rings' constructors over shared memory.
//!
//! The rings are the one protocol of [`super::ring`]; over shared memory
//! their elements must be plain data valid for any bit pattern
//! ([`Pod`]), since the peer may write anything into the slots.
//!
//! ```text
//! 0      64       128    192                     (64-aligned)      (64-aligned)        (page)
//! | post prod | post cons | post flags | post slots | comp prod ... comp slots | status | pad |
//! ```

use bytemuck::Pod;

use super::mmap::page_size;
use super::ring::{ConsumerRing, ProducerRing, RingError, RingOffsets};
use super::shm::SharedMemory;

/// Bytes between the fields of a ring (a cache line each, so the two
/// processes do not share a line they both write).
const LINE: usize = 64;

/// Where the two rings and the status area of a channel lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelLayout {
    /// The work-request ring (the application produces).
    pub post: RingOffsets,
    /// Its entries.
    pub post_size: u32,
    /// The completion ring (the daemon produces).
    pub completion: RingOffsets,
    /// Its entries.
    pub completion_size: u32,
    /// Byte offset of the status area (64-byte aligned).
    pub status: usize,
    /// Its length.
    pub status_len: usize,
    /// Bytes of the whole channel (whole pages).
    pub len: usize,
}

impl ChannelLayout {
    /// The layout of a channel whose post ring carries `P`s and completion
    /// ring `C`s, with `status_len` bytes of status after them.
    ///
    /// # Errors
    /// A size is not a power of two, or the total overflows.
    pub fn new<P: Pod, C: Pod>(
        post_size: u32,
        completion_size: u32,
        status_len: usize,
    ) -> Result<ChannelLayout, RingError> {
        let (post, after_post) = ring_at::<P>(0, post_size)?;
        let (completion, after_comp) = ring_at::<C>(after_post, completion_size)?;
        let too_big = || RingError::BadLayout {
            offsets: completion,
            size: completion_size,
            len: usize::MAX,
        };
        let len = after_comp
            .checked_add(status_len)
            .and_then(|e| e.checked_next_multiple_of(page_size()))
            .ok_or_else(too_big)?;
        Ok(ChannelLayout {
            post,
            post_size,
            completion,
            completion_size,
            status: after_comp,
            status_len,
            len,
        })
    }
}

/// A ring of `size` `T`s at `base` (64-aligned): its offsets and the
/// 64-aligned end.
fn ring_at<T>(base: usize, size: u32) -> Result<(RingOffsets, usize), RingError> {
    if !size.is_power_of_two() {
        return Err(RingError::NotPowerOfTwo(size));
    }
    let desc = (base + 3 * LINE).next_multiple_of(std::mem::align_of::<T>().max(LINE));
    let offsets = RingOffsets {
        producer: base,
        consumer: base + LINE,
        flags: base + 2 * LINE,
        desc,
    };
    let end = offsets
        .mapping_len::<T>(size)
        .checked_next_multiple_of(LINE)
        .filter(|&e| e < usize::MAX / 2)
        .ok_or(RingError::BadLayout {
            offsets,
            size,
            len: usize::MAX,
        })?;
    Ok((offsets, end))
}

impl<T: Pod> ProducerRing<T> {
    /// The producing side of a ring in shared memory `mem` (laid out by
    /// [`ChannelLayout`] or otherwise), whose consumer may be another,
    /// untrusted process.
    ///
    /// # Errors
    /// The size is not a power of two or the layout does not fit `mem`.
    pub fn over_shared(
        mem: &SharedMemory,
        offsets: RingOffsets,
        size: u32,
    ) -> Result<Self, RingError> {
        ProducerRing::new(mem.mapping().clone(), offsets, size)
    }
}

impl<T: Pod> ConsumerRing<T> {
    /// The consuming side of a ring in shared memory `mem`, whose producer
    /// may be another, untrusted process.
    ///
    /// # Errors
    /// The size is not a power of two or the layout does not fit `mem`.
    pub fn over_shared(
        mem: &SharedMemory,
        offsets: RingOffsets,
        size: u32,
    ) -> Result<Self, RingError> {
        ConsumerRing::new(mem.mapping().clone(), offsets, size)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct Wr {
        id: u64,
        len: u32,
        op: u32,
    }

    /// The daemon's mapping of a channel and the client's (the same memfd
    /// received through a dup), as two processes would have them.
    fn channel(post: u32, comp: u32) -> (ChannelLayout, SharedMemory, SharedMemory) {
        let layout = ChannelLayout::new::<Wr, u64>(post, comp, 256).expect("layout");
        let daemon = SharedMemory::create("zs-channel", layout.len).expect("create");
        let client = SharedMemory::open(daemon.fd().try_clone_to_owned().expect("dup"), layout.len)
            .expect("open");
        (layout, daemon, client)
    }

    #[test]
    fn layout_separates_the_indices_and_fits_whole_pages() {
        let l = ChannelLayout::new::<Wr, u64>(8, 16, 100).expect("layout");
        assert_eq!(l.post.producer, 0);
        assert_eq!(l.post.desc, 192);
        assert_eq!(l.completion.producer, 192 + 8 * 16);
        assert_eq!(l.completion.desc, l.completion.producer + 192);
        assert_eq!(l.status, l.completion.desc + 16 * 8);
        assert!(l.status.is_multiple_of(64));
        assert!(l.len.is_multiple_of(page_size()) && l.len >= l.status + 100);
        assert!(matches!(
            ChannelLayout::new::<Wr, u64>(6, 16, 0),
            Err(RingError::NotPowerOfTwo(6))
        ));
        assert!(ChannelLayout::new::<Wr, u64>(1 << 31, 1 << 31, usize::MAX).is_err());
    }

    #[test]
    fn rings_move_values_between_two_mappings_of_one_memfd() {
        let (l, daemon, client) = channel(8, 8);
        let mut post = ProducerRing::<Wr>::over_shared(&client, l.post, l.post_size).unwrap();
        let mut take = ConsumerRing::<Wr>::over_shared(&daemon, l.post, l.post_size).unwrap();
        let mut done =
            ProducerRing::<u64>::over_shared(&daemon, l.completion, l.completion_size).unwrap();
        let mut reap =
            ConsumerRing::<u64>::over_shared(&client, l.completion, l.completion_size).unwrap();
        for round in 0..5u64 {
            let n = post.reserve(5);
            assert_eq!(n, 5);
            for i in 0..n {
                post.write(
                    i,
                    Wr {
                        id: round * 10 + u64::from(i),
                        len: i,
                        op: 1,
                    },
                );
            }
            post.submit(n);
            assert_eq!(take.available(u32::MAX), 5);
            assert_eq!(done.reserve(5), 5);
            for i in 0..5 {
                let wr = take.read(i);
                assert_eq!(wr.id, round * 10 + u64::from(i));
                done.write(i, wr.id);
            }
            take.release(5);
            done.submit(5);
            assert_eq!(reap.available(8), 5);
            assert_eq!(reap.read(4), round * 10 + 4);
            reap.release(5);
        }
        assert_eq!(take.violations() + post.violations(), 0);
    }

    #[test]
    fn the_wakeup_bit_is_seen_across_mappings() {
        let (l, daemon, client) = channel(4, 4);
        let take = ConsumerRing::<Wr>::over_shared(&daemon, l.post, 4).unwrap();
        let post = ProducerRing::<Wr>::over_shared(&client, l.post, 4).unwrap();
        assert!(!post.wakeup_requested());
        take.set_wakeup(true);
        assert!(post.wakeup_requested());
        take.set_wakeup(false);
        assert!(!post.wakeup_requested());
    }

    #[test]
    fn a_wild_producer_index_reads_as_empty_and_is_counted() {
        let (l, daemon, client) = channel(8, 8);
        let mut take = ConsumerRing::<Wr>::over_shared(&daemon, l.post, 8).unwrap();
        let prod = client.atomic_u32(l.post.producer).unwrap();
        for wild in [9, 1000, u32::MAX, u32::MAX - 7, 1 << 31] {
            prod.store(wild, Ordering::Release);
            assert_eq!(take.available(u32::MAX), 0, "index {wild}");
        }
        assert_eq!(take.violations(), 5);
        prod.store(8, Ordering::Release);
        assert_eq!(take.available(u32::MAX), 8, "a full ring is legal");
        take.release(8);
        assert_eq!(take.violations(), 5);
    }

    #[test]
    fn a_wild_consumer_index_reads_as_full_and_is_counted() {
        let (l, daemon, client) = channel(8, 8);
        let mut done = ProducerRing::<u64>::over_shared(&daemon, l.completion, 8).unwrap();
        let cons = client.atomic_u32(l.completion.consumer).unwrap();
        assert_eq!(done.reserve(3), 3);
        done.submit(3);
        for wild in [4, 100, u32::MAX - 100] {
            cons.store(wild, Ordering::Release);
            assert_eq!(done.reserve(8), 0, "index {wild}");
            assert_eq!(done.in_flight(), 8);
        }
        assert_eq!(done.violations(), 6);
        cons.store(3, Ordering::Release);
        assert_eq!(done.reserve(8), 8);
    }

    proptest! {
        /// A hostile peer writing any producer index, consumer index and
        /// slot bytes between our calls: we never panic, never see more
        /// than the ring size, and never get more than we asked.
        #[test]
        fn a_hostile_peer_cannot_make_us_overrun(
            steps in proptest::collection::vec(
                (any::<u32>(), any::<u32>(), any::<u8>(), 0u32..20, 0u32..20), 1..60),
        ) {
            let (l, daemon, mut client) = channel(8, 16);
            let mut take = ConsumerRing::<Wr>::over_shared(&daemon, l.post, 8).unwrap();
            let mut done = ProducerRing::<u64>::over_shared(&daemon, l.completion, 16).unwrap();
            for (prod, cons, byte, want, give) in steps {
                client.atomic_u32(l.post.producer).unwrap().store(prod, Ordering::Release);
                client.atomic_u32(l.completion.consumer).unwrap().store(cons, Ordering::Release);
                let slots = l.post.desc..l.post.desc + 8 * 16;
                client.bytes_mut()[slots].fill(byte);
                let n = take.available(want);
                prop_assert!(n <= 8 && n <= want);
                for i in 0..n {
                    let _ = take.read(i);
                }
                take.release(n.min(give));
                let r = done.reserve(want);
                prop_assert!(r <= 16 && r <= want);
                for i in 0..r {
                    done.write(i, u64::from(i));
                }
                done.submit(r.min(give));
                prop_assert!(done.in_flight() <= 16);
            }
        }
    }
}
