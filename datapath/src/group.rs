//! Several receive queues of one interface, one datapath ([`Nic`]) each.
//!
//! A multi-queue NIC spreads flows over its queues (RSS); on veth the
//! queue is the one the peer transmitted on. The XDP program is attached
//! once per interface, so the datapaths of one interface share it through
//! a [`QueueGroup`]: the steering maps, the XSKMAP slots of per-flow
//! sockets, and a table saying which queue owns each flow.
//!
//! A flow lives on one queue: the queue its first packet arrived on (a
//! passive open) or the queue that opened it (an active open). Its
//! payload memory and segment lists live in that queue's UMEM. When a
//! packet of the flow arrives on another queue — the reply to an outgoing
//! SYN hashed elsewhere, or the peer re-hashed the flow after a timeout —
//! the XDP program sends it to the catch-all socket of the queue it came in
//! on, and that queue's datapath copies it into the owner's inbox. The
//! owner processes inbox frames exactly like its own packets. Forwarding
//! costs one copy and a lock, and is counted: on a NIC whose flow steering
//! keeps flows on one queue it stays near zero.
//!
//! [`Nic`]: crate::nic::Nic

mod inbox;

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::steer::{Proto, SteerError, Steering, XdpMode, FIRST_FLOW_SLOT, MAX_QUEUES, XSKS_MAX};
use crate::wire::FlowKey;
use inbox::Inbox;

/// Most frames waiting in one queue's inbox; beyond it a forwarded frame
/// is dropped and counted (TCP retransmits it), so a stalled owner cannot
/// grow memory without bound.
pub const INBOX_CAPACITY: usize = 4096;

/// Counters of a [`QueueGroup`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCounters {
    /// Frames copied from the queue they arrived on to the queue owning
    /// their flow.
    pub forwarded: u64,
    /// Frames dropped because the owner's inbox was full.
    pub inbox_full: u64,
}

/// The steering program of one interface and the state its queues share.
#[derive(Debug)]
pub struct QueueGroup {
    queues: u32,
    steering: Mutex<Steering>,
    /// Free per-flow XSKMAP slots.
    slots: Mutex<Vec<u32>>,
    /// Which queue owns each installed flow.
    owners: Mutex<HashMap<FlowKey, u32>>,
    /// Claims on listening addresses, counted per queue that made them.
    listens: Mutex<HashMap<(IpAddr, u16), usize>>,
    inboxes: Vec<Inbox>,
    forwarded: AtomicU64,
    inbox_full: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl QueueGroup {
    /// Attaches the steering program to `ifname` for queues `0..queues`.
    ///
    /// # Errors
    /// [`GroupError::Queues`] for 0 or more than [`MAX_QUEUES`] queues;
    /// attach failures from [`Steering::attach`].
    pub fn attach(ifname: &str, mode: XdpMode, queues: u32) -> Result<Arc<Self>, GroupError> {
        if queues == 0 || queues > MAX_QUEUES {
            return Err(GroupError::Queues {
                ifname: ifname.to_owned(),
                queues,
            });
        }
        let steering = Steering::attach(ifname, mode)?;
        Ok(QueueGroup::with_steering(steering, queues))
    }

    /// A group of `queues` queues (1 to [`MAX_QUEUES`]) of an interface
    /// that exists only in memory: steering tables without a program, for
    /// datapaths over the fake kernel ([`crate::testing`]).
    ///
    /// # Errors
    /// [`GroupError::Queues`] for 0 or more than [`MAX_QUEUES`] queues.
    #[cfg(any(test, feature = "testing"))]
    pub fn in_memory(ifname: &str, queues: u32) -> Result<Arc<Self>, GroupError> {
        if queues == 0 || queues > MAX_QUEUES {
            return Err(GroupError::Queues {
                ifname: ifname.to_owned(),
                queues,
            });
        }
        let steering = Steering::Memory(Box::new(crate::steer::MemorySteering::new(ifname)));
        Ok(QueueGroup::with_steering(steering, queues))
    }

    fn with_steering(steering: Steering, queues: u32) -> Arc<Self> {
        Arc::new(QueueGroup {
            queues,
            steering: Mutex::new(steering),
            // Popped from the end: hand out low slots first.
            slots: Mutex::new((FIRST_FLOW_SLOT..XSKS_MAX).rev().collect()),
            owners: Mutex::new(HashMap::new()),
            listens: Mutex::new(HashMap::new()),
            inboxes: (0..queues).map(|_| Inbox::new(INBOX_CAPACITY)).collect(),
            forwarded: AtomicU64::new(0),
            inbox_full: AtomicU64::new(0),
        })
    }

    /// Number of queues, `0..queues()`.
    pub fn queues(&self) -> u32 {
        self.queues
    }

    /// The steering program, locked.
    pub fn steering(&self) -> MutexGuard<'_, Steering> {
        lock(&self.steering)
    }

    /// Forwarding counters.
    pub fn counters(&self) -> GroupCounters {
        GroupCounters {
            forwarded: self.forwarded.load(Ordering::Relaxed),
            inbox_full: self.inbox_full.load(Ordering::Relaxed),
        }
    }

    /// Takes a free per-flow XSKMAP slot.
    pub(crate) fn take_slot(&self) -> Option<u32> {
        lock(&self.slots).pop()
    }

    /// Returns a slot taken with [`QueueGroup::take_slot`].
    pub(crate) fn put_slot(&self, slot: u32) {
        lock(&self.slots).push(slot);
    }

    /// Records that `queue` owns `key`.
    pub(crate) fn set_owner(&self, key: FlowKey, queue: u32) {
        lock(&self.owners).insert(key, queue);
    }

    /// Forgets the owner of `key`, if it is `queue`.
    pub(crate) fn clear_owner(&self, key: &FlowKey, queue: u32) {
        let mut owners = lock(&self.owners);
        if owners.get(key) == Some(&queue) {
            owners.remove(key);
        }
    }

    /// The queue owning `key`, if any.
    pub fn owner(&self, key: &FlowKey) -> Option<u32> {
        lock(&self.owners).get(key).copied()
    }

    /// Claims `(addr, port)` for TCP; claims are counted so that the entry
    /// stays while any queue still listens.
    pub(crate) fn listen(&self, addr: IpAddr, port: u16) -> Result<(), SteerError> {
        let mut listens = lock(&self.listens);
        let n = listens.entry((addr, port)).or_insert(0);
        if *n == 0 {
            self.steering().insert_listen(addr, port, Proto::Tcp)?;
        }
        *n += 1;
        Ok(())
    }

    /// Releases one claim made by [`QueueGroup::listen`]; the last one
    /// gives the port back to the kernel.
    pub(crate) fn unlisten(&self, addr: IpAddr, port: u16) -> Result<(), SteerError> {
        let mut listens = lock(&self.listens);
        let Some(n) = listens.get_mut(&(addr, port)) else {
            return Ok(());
        };
        *n -= 1;
        if *n == 0 {
            listens.remove(&(addr, port));
            self.steering().remove_listen(addr, port, Proto::Tcp)?;
        }
        Ok(())
    }

    /// Copies `fragments` (one packet) into the inbox of `queue`. Returns
    /// `false` when the inbox was full (the frame is dropped and counted).
    pub(crate) fn forward(&self, queue: u32, fragments: &[&[u8]]) -> bool {
        let Some(inbox) = self.inboxes.get(queue as usize) else {
            return false;
        };
        let frame: Box<[u8]> = fragments.concat().into_boxed_slice();
        if !inbox.push(frame) {
            self.inbox_full.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.forwarded.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Moves up to `max` frames waiting for `queue` to the end of `into`
    /// (the rest wait, and the inbox stays bounded by [`INBOX_CAPACITY`]).
    /// Costs one atomic load when nothing waits.
    pub(crate) fn drain_inbox(&self, queue: u32, max: usize, into: &mut VecDeque<Box<[u8]>>) {
        if let Some(inbox) = self.inboxes.get(queue as usize) {
            inbox.drain(max, into);
        }
    }
}

/// Errors of [`QueueGroup::attach`].
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The queue count is out of range.
    #[error("{ifname}: {queues} queues requested; the steering program serves 1 to {MAX_QUEUES}")]
    Queues {
        /// Interface.
        ifname: String,
        /// Requested count.
        queues: u32,
    },
    /// Attaching the steering program failed.
    #[error(transparent)]
    Steer(#[from] SteerError),
}
