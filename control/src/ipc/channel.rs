//! An attachment's channel: one sealed memfd the daemon creates and the
//! application maps, holding the post ring (work requests, application →
//! daemon), the completion ring (daemon → application) and the status
//! table (each connection's progress, written by the daemon only).
//!
//! The rings are the datapath's single-producer/single-consumer rings
//! ([`datapath::shm::ProducerRing`]), which treat the other side's indices
//! as hostile. Doorbells follow need_wakeup: a side about to sleep sets
//! the "wake me" flag of the ring it consumes, checks the ring once more,
//! then sleeps on its eventfd; the other side rings that eventfd after
//! publishing only if the flag is set.
//!
//! A status entry is four words: the connection's handle, bytes received
//! in order, bytes acknowledged, and the TCP state's code. The daemon
//! writes an entry before any completion that depends on it, so an
//! application that took a completion reads progress at least as new.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use datapath::shm::{ChannelLayout, ConsumerRing, ProducerRing, RingError, SharedMemory, ShmError};

use super::desc::{CompletionDesc, PostDesc};

/// Bytes of one status entry.
const STATUS_ENTRY: usize = 32;
/// Bytes after the status entries holding the progress counter (a cache
/// line of its own).
const PROGRESS: usize = 64;

/// The sizes of a channel, as the welcome gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Entries of the post ring.
    pub post_ring: u32,
    /// Entries of the completion ring.
    pub completion_ring: u32,
    /// Entries of the status table.
    pub status_slots: u32,
}

impl Layout {
    /// The sizes for an attachment that may post `max_posted` work
    /// requests and hold `max_connections` connections: room on the
    /// completion ring for every posted request and four events of each
    /// connection (accepted, connected, peer closed, closed).
    pub fn for_limits(max_posted: u32, max_connections: u32) -> Layout {
        let ring = |n: u64| n.clamp(64, 1 << 22).next_power_of_two() as u32;
        Layout {
            post_ring: ring(u64::from(max_posted)),
            completion_ring: ring(u64::from(max_posted) + 4 * u64::from(max_connections)),
            status_slots: max_connections,
        }
    }

    fn rings(&self) -> Result<ChannelLayout, ChannelError> {
        Ok(ChannelLayout::new::<PostDesc, CompletionDesc>(
            self.post_ring,
            self.completion_ring,
            self.status_slots as usize * STATUS_ENTRY + PROGRESS,
        )?)
    }
}

/// A channel could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// Bad ring sizes.
    #[error("channel rings: {0}")]
    Ring(#[from] RingError),
    /// The memory could not be created or mapped.
    #[error("channel memory: {0}")]
    Memory(#[from] ShmError),
}

/// One connection's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// The connection's handle (0: a free entry).
    pub conn: u64,
    /// Bytes received in order (final).
    pub received: u64,
    /// Bytes the peer acknowledged.
    pub acked: u64,
    /// The TCP state's code ([`super::desc::state_code`]).
    pub state: u32,
}

fn words<'m>(
    mem: &'m SharedMemory,
    rings: &ChannelLayout,
    slot: u32,
) -> Option<[&'m AtomicU64; 4]> {
    if slot as usize * STATUS_ENTRY >= rings.status_len.saturating_sub(PROGRESS) {
        return None;
    }
    let at = rings.status + slot as usize * STATUS_ENTRY;
    Some([
        mem.atomic_u64(at)?,
        mem.atomic_u64(at + 8)?,
        mem.atomic_u64(at + 16)?,
        mem.atomic_u64(at + 24)?,
    ])
}

/// The progress counter: the daemon moves it whenever a status entry
/// changed, so an application awake (that no doorbell reaches) learns of
/// progress that is no completion.
fn progress<'m>(mem: &'m SharedMemory, rings: &ChannelLayout) -> Option<&'m AtomicU64> {
    mem.atomic_u64(rings.status + rings.status_len.checked_sub(PROGRESS)?)
}

/// The daemon's end: consumes posts, produces completions, writes status.
#[derive(Debug)]
pub struct DaemonEnd {
    mem: SharedMemory,
    rings: ChannelLayout,
    posts: ConsumerRing<PostDesc>,
    completions: ProducerRing<CompletionDesc>,
}

impl DaemonEnd {
    /// A new channel of `layout`'s sizes.
    ///
    /// # Errors
    /// Bad sizes, or the memfd could not be made.
    pub fn create(layout: Layout) -> Result<DaemonEnd, ChannelError> {
        let rings = layout.rings()?;
        let mem = SharedMemory::create("zerosplit-channel", rings.len)?;
        Ok(DaemonEnd {
            posts: ConsumerRing::over_shared(&mem, rings.post, rings.post_size)?,
            completions: ProducerRing::over_shared(&mem, rings.completion, rings.completion_size)?,
            mem,
            rings,
        })
    }

    /// The memfd, to pass to the application.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.mem.fd()
    }

    /// Appends up to `max` work requests to `out`; returns false when the
    /// application's indices broke the ring protocol (the ring then reads
    /// as empty).
    pub fn take_posts(&mut self, max: u32, out: &mut Vec<PostDesc>) -> bool {
        let before = self.posts.violations();
        let n = self.posts.available(max);
        out.extend((0..n).map(|i| self.posts.read(i)));
        self.posts.release(n);
        self.posts.violations() == before
    }

    /// Whether work requests wait on the post ring.
    pub fn posts_waiting(&mut self) -> bool {
        self.posts.available(1) > 0
    }

    /// Appends a completion; false if the ring is full.
    pub fn push_completion(&mut self, d: CompletionDesc) -> bool {
        if self.completions.reserve(1) == 0 {
            return false;
        }
        self.completions.write(0, d);
        self.completions.submit(1);
        true
    }

    /// Whether the application sleeps waiting for completions.
    pub fn app_asleep(&self) -> bool {
        self.completions.wakeup_requested()
    }

    /// Tells the application the daemon sleeps (posts must ring).
    pub fn set_daemon_asleep(&self, asleep: bool) {
        self.posts.set_wakeup(asleep);
    }

    /// Writes status entry `slot`.
    pub fn set_status(&self, slot: u32, s: &Status) {
        if let Some([conn, received, acked, state]) = words(&self.mem, &self.rings, slot) {
            // Release: payload placed below `received` is visible to an
            // application that reads the new value (Acquire).
            conn.store(s.conn, Ordering::Release);
            received.store(s.received, Ordering::Release);
            acked.store(s.acked, Ordering::Release);
            state.store(u64::from(s.state), Ordering::Release);
        }
    }

    /// Says a status entry changed (after writing it).
    pub fn bump_progress(&self) {
        if let Some(p) = progress(&self.mem, &self.rings) {
            p.fetch_add(1, Ordering::Release);
        }
    }

    /// Frees status entry `slot`.
    pub fn clear_status(&self, slot: u32) {
        self.set_status(slot, &Status::default());
    }
}

/// The application's end: produces posts, consumes completions, reads
/// status.
#[derive(Debug)]
pub struct AppEnd {
    mem: SharedMemory,
    rings: ChannelLayout,
    posts: ProducerRing<PostDesc>,
    completions: ConsumerRing<CompletionDesc>,
}

impl AppEnd {
    /// Maps the channel the daemon passed.
    ///
    /// # Errors
    /// Not a sealed memfd of the size `layout` gives, or bad sizes.
    pub fn open(fd: OwnedFd, layout: Layout) -> Result<AppEnd, ChannelError> {
        let rings = layout.rings()?;
        let mem = SharedMemory::open(fd, rings.len)?;
        Ok(AppEnd {
            posts: ProducerRing::over_shared(&mem, rings.post, rings.post_size)?,
            completions: ConsumerRing::over_shared(&mem, rings.completion, rings.completion_size)?,
            mem,
            rings,
        })
    }

    /// Appends a work request; false if the ring is full.
    pub fn post(&mut self, d: PostDesc) -> bool {
        if self.posts.reserve(1) == 0 {
            return false;
        }
        self.posts.write(0, d);
        self.posts.submit(1);
        true
    }

    /// The next completion.
    pub fn take_completion(&mut self) -> Option<CompletionDesc> {
        if self.completions.available(1) == 0 {
            return None;
        }
        let d = self.completions.read(0);
        self.completions.release(1);
        Some(d)
    }

    /// Whether completions wait.
    pub fn completions_waiting(&mut self) -> bool {
        self.completions.available(1) > 0
    }

    /// Whether the daemon sleeps (a post must ring its doorbell).
    pub fn daemon_asleep(&self) -> bool {
        self.posts.wakeup_requested()
    }

    /// Tells the daemon this application sleeps (completions must ring).
    pub fn set_app_asleep(&self, asleep: bool) {
        self.completions.set_wakeup(asleep);
    }

    /// The progress counter ([`DaemonEnd::bump_progress`]).
    pub fn progress(&self) -> u64 {
        progress(&self.mem, &self.rings).map_or(0, |p| p.load(Ordering::Acquire))
    }

    /// Status entry `slot`.
    pub fn status(&self, slot: u32) -> Option<Status> {
        let [conn, received, acked, state] = words(&self.mem, &self.rings, slot)?;
        Some(Status {
            conn: conn.load(Ordering::Acquire),
            received: received.load(Ordering::Acquire),
            acked: acked.load(Ordering::Acquire),
            state: state.load(Ordering::Acquire) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(layout: Layout) -> (DaemonEnd, AppEnd) {
        let daemon = DaemonEnd::create(layout).expect("channel");
        let fd = daemon.fd().try_clone_to_owned().expect("dup");
        let app = AppEnd::open(fd, layout).expect("open");
        (daemon, app)
    }

    #[test]
    fn progress_moves_when_the_daemon_says_so_and_stays_out_of_the_status_table() {
        let layout = Layout::for_limits(64, 4);
        let (daemon, app) = pair(layout);
        assert_eq!(app.progress(), 0);
        daemon.bump_progress();
        daemon.bump_progress();
        assert_eq!(app.progress(), 2, "the application sees each bump");
        // Every status entry is its own; the counter lies past the last.
        for slot in 0..4 {
            let s = Status {
                conn: 7 + u64::from(slot),
                received: u64::MAX,
                acked: u64::MAX,
                state: u32::MAX,
            };
            daemon.set_status(slot, &s);
            assert_eq!(app.status(slot), Some(s));
        }
        assert_eq!(app.progress(), 2, "status writes leave the counter alone");
        assert_eq!(app.status(4), None, "no entry past the table");
        daemon.set_status(4, &Status::default());
        assert_eq!(app.progress(), 2);
    }
}
