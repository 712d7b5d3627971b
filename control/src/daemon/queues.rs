//! The queues the daemon serves: one [`Stack`] per configured queue of the
//! interface, all in one queue group (one steering program), each driven
//! by a thread of its own ([`super::run`]).
//!
//! A connection lives on one queue for its life (the queue its SYN
//! arrived on, or the one that opened it, as in [`crate::shards`]). The
//! handle an attachment holds is the queue's stack handle with the
//! queue's position in bits 24..32 of its index ([`QUEUE_SHIFT`]; a flow
//! table never has 2^24 entries), so the attachment's tables stay keyed by
//! one [`ConnId`] and every call finds its stack from the handle alone.
//!
//! Memory: every queue's UMEM maps the same memory slots
//! ([`datapath::config::MrSlots::memory`]), so an attachment's region is
//! one memory that each queue's datapath registers at the same place; the
//! attachment knows it by the first queue's handle ([`Region`]).
//!
//! Locking: each stack sits in a mutex its queue's thread holds while it
//! polls and while it sleeps. Another thread (the one serving the
//! attachments at the moment) takes a stack either blocking, through
//! [`Queues::stack`], which first *kicks* the owner (counts itself in
//! and rings the owner's wake-up if it sleeps, so the owner lets go at
//! once and does not sleep again while someone waits), or without
//! waiting, through `try_lock`, for the per-turn passes (completions,
//! accepts, progress) that can as well take a busy queue next turn. A
//! queue's thread never waits for anything while it holds its stack but
//! in its sleep, which a kick ends; the attachments' lock is always taken
//! before a stack's, never after: no cycle.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::{Deref, DerefMut, Range};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use datapath::mr::{Access, MrId};
use datapath::ms::MrMove;
use datapath::nic::EventFd;
use transports::Instant;

use crate::host::{HostConfig, HostError};
use crate::idmap::ConnId;
use crate::ipc::channel::Status;
use crate::ipc::desc::state_code;
use crate::provider::{Completion, Direction, Families, Provider, WorkRequest};
use crate::reserved_ports::ReservedPorts;
use crate::stack::Stack;

/// Where the queue's position sits in a handle's index.
const QUEUE_SHIFT: u32 = 24;

/// A region registered on every queue: one memory, one handle per queue's
/// datapath, the attachment knowing it by the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Region {
    /// The handle of each queue's datapath, in queue order.
    pub ids: Vec<MrId>,
    /// Bit `q`: queue `q` still has it registered.
    registered: u64,
    /// Bytes.
    pub len: u64,
}

impl Region {
    /// The handle the attachment holds.
    pub fn handle(&self) -> MrId {
        self.ids[0]
    }
}

/// One queue: its stack and what lets another thread take it.
#[derive(Debug)]
struct QueueCell {
    stack: Mutex<Stack>,
    /// Threads other than the queue's own that wait for or hold the stack.
    kicks: AtomicU32,
    /// The queue's thread sleeps (holding the stack).
    asleep: AtomicBool,
    /// Wakes the queue's thread.
    wake: EventFd,
}

/// A queue's stack held by a thread other than the queue's own
/// ([`Queues::stack`]); the owner waits for it to be dropped.
#[derive(Debug)]
pub struct Held<'a> {
    guard: MutexGuard<'a, Stack>,
    kicks: &'a AtomicU32,
}

impl Deref for Held<'_> {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.guard
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Stack {
        &mut self.guard
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.kicks.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A panic elsewhere does not make a stack unusable here: its state is
/// whatever the last complete call left.
fn unpoisoned<T>(r: Result<T, PoisonError<T>>) -> T {
    r.unwrap_or_else(PoisonError::into_inner)
}

/// What one pass of a queue's own thread found ([`Queues::poll_queue`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Pass {
    /// Work done (packets, timers, outputs).
    pub work: usize,
    /// Completions or accepted connections wait to be handed out.
    pub owes: bool,
    /// The stack's clock.
    pub now: Instant,
    /// When it next has something to do without new input.
    pub deadline: Option<Instant>,
}

/// The stacks of the served queues.
#[derive(Debug)]
pub struct Queues {
    cells: Vec<QueueCell>,
    /// Where the next connect and the next accept start looking.
    next_connect: AtomicUsize,
    next_accept: AtomicUsize,
    local_ip: Ipv4Addr,
    local_ip6: Option<Ipv6Addr>,
    /// The ephemeral ports reserved from the kernel for all queues.
    _reserved: Option<ReservedPorts>,
}

impl Queues {
    /// Opens one stack per entry of `configs` on `ifname` (queue
    /// `config.nic.queue` each, disjoint slices of the first's ephemeral
    /// range, one queue group), every UMEM mapping the memory slots of the
    /// first (`configs[0].nic.xsk.umem.mr_slots`).
    ///
    /// # Errors
    /// As [`crate::shards::prepare`] and [`Stack::new_in`], the latter
    /// naming the queue.
    pub fn open(ifname: &str, mut configs: Vec<HostConfig>) -> Result<Queues, HostError> {
        let (group, reserved) = crate::shards::prepare(ifname, &mut configs)?;
        let mut stacks: Vec<Stack> = Vec::with_capacity(configs.len());
        for mut config in configs {
            let queue = config.nic.queue;
            if let (Some(first), Some(slots)) = (stacks.first(), &mut config.nic.xsk.umem.mr_slots)
            {
                slots.memory = Some(first.nic().mr_slot_set());
            }
            let stack = Stack::new_in(&group, config).map_err(|e| HostError::OnQueue {
                queue,
                source: Box::new(e),
            })?;
            stacks.push(stack);
        }
        Self::of(stacks, reserved)
    }

    /// One stack as the only queue (a test's fake stack, say).
    ///
    /// # Errors
    /// No eventfd for its thread's wake-up.
    pub fn one(stack: Stack) -> Result<Queues, HostError> {
        Self::of(vec![stack], None)
    }

    fn of(stacks: Vec<Stack>, reserved: Option<ReservedPorts>) -> Result<Queues, HostError> {
        let local_ip = stacks
            .first()
            .map_or(Ipv4Addr::UNSPECIFIED, |s| s.local_ip());
        let local_ip6 = stacks.first().and_then(|s| s.local_ip6());
        let cells = stacks
            .into_iter()
            .map(|stack| {
                Ok(QueueCell {
                    stack: Mutex::new(stack),
                    kicks: AtomicU32::new(0),
                    asleep: AtomicBool::new(false),
                    wake: EventFd::new()
                        .map_err(|e| HostError::Queues(format!("a queue's wake-up: {e}")))?,
                })
            })
            .collect::<Result<Vec<_>, HostError>>()?;
        Ok(Queues {
            cells,
            next_connect: AtomicUsize::new(0),
            next_accept: AtomicUsize::new(0),
            local_ip,
            local_ip6,
            _reserved: reserved,
        })
    }

    /// How many queues.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// Never: there is at least one queue.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Queue `q`'s stack, taken from whichever thread holds it (its own
    /// lets go at once, even asleep).
    ///
    /// # Panics
    /// `q` is not a queue.
    pub fn stack(&self, q: usize) -> Held<'_> {
        let cell = &self.cells[q];
        cell.kicks.fetch_add(1, Ordering::SeqCst);
        if cell.asleep.load(Ordering::SeqCst) {
            cell.wake.signal();
        }
        Held {
            guard: unpoisoned(cell.stack.lock()),
            kicks: &cell.kicks,
        }
    }

    /// The first queue's stack: the memory slots, ARP, the transport.
    pub fn first(&self) -> Held<'_> {
        self.stack(0)
    }

    /// Calls `f` on every stack in turn (capture, metrics).
    pub fn for_each_stack(&self, mut f: impl FnMut(&mut Stack)) {
        for q in 0..self.cells.len() {
            f(&mut self.stack(q));
        }
    }

    fn tag(queue: usize, id: ConnId) -> ConnId {
        ConnId::from_bits(id.to_bits() | (queue as u64) << QUEUE_SHIFT)
    }

    /// The queue of handle `id` and the stack's own handle.
    fn split(id: ConnId) -> (usize, ConnId) {
        let bits = id.to_bits();
        let queue = (bits >> QUEUE_SHIFT) & 0xff;
        (
            queue as usize,
            ConnId::from_bits(bits & !(0xff << QUEUE_SHIFT)),
        )
    }

    fn stack_of(&self, id: ConnId) -> Result<(Held<'_>, ConnId), HostError> {
        let (q, inner) = Self::split(id);
        if q >= self.cells.len() {
            return Err(HostError::UnknownConnection(id));
        }
        Ok((self.stack(q), inner))
    }

    /// One pass over every queue, from one thread (tests, fuzzing).
    pub fn poll_pass(&self) -> usize {
        (0..self.cells.len()).map(|q| self.poll_queue(q).work).sum()
    }

    /// Before queue `q`'s own thread takes its stack: lets whoever kicked
    /// it go first.
    pub(super) fn yield_to_others(&self, q: usize) {
        while self.cells[q].kicks.load(Ordering::SeqCst) > 0 {
            std::thread::yield_now();
        }
    }

    /// One pass of queue `q`, by its own thread.
    pub(super) fn poll_queue(&self, q: usize) -> Pass {
        let mut s = unpoisoned(self.cells[q].stack.lock());
        let work = s.poll_pass();
        Pass {
            work,
            owes: s.completions_queued() > 0,
            now: s.now(),
            deadline: s.next_deadline(),
        }
    }

    /// Wakes every queue's thread (to see that it should stop).
    pub(super) fn wake_all(&self) {
        for c in &self.cells {
            c.wake.signal();
        }
    }

    /// A connection accepted on `port`, with its progress, on whichever
    /// queue has one and is not busy (the queues take turns being asked
    /// first).
    pub fn accept(&self, port: u16) -> Option<(ConnId, Status)> {
        let n = self.cells.len();
        let start = self.next_accept.load(Ordering::Relaxed);
        for i in 0..n {
            let q = (start + i) % n;
            let Ok(mut s) = self.cells[q].stack.try_lock() else {
                continue;
            };
            if let Ok(Some(id)) = s.accept(port) {
                self.next_accept.store((q + 1) % n, Ordering::Relaxed);
                let id = Self::tag(q, id);
                return Some((id, status_in(&s, id)));
            }
        }
        None
    }

    /// Connections waiting in `port`'s accept queues, over every queue;
    /// `None` if a queue is busy right now (ask again next turn).
    pub fn queued(&self, port: u16) -> Option<u64> {
        let mut n = 0;
        for cell in &self.cells {
            let s = cell.stack.try_lock().ok()?;
            n += s.accept_queue_len(port) as u64;
        }
        Some(n)
    }

    /// Moves the completions of every queue not busy right now to `out`,
    /// each with its connection's progress as of the completion (the
    /// status an application reads must be at least as new), connections
    /// as the attachments know them.
    pub(super) fn drain_completions(&self, out: &mut Vec<(Completion, Status)>) {
        for (q, cell) in self.cells.iter().enumerate() {
            let Ok(mut s) = cell.stack.try_lock() else {
                continue;
            };
            while let Some(mut c) = s.poll_completion() {
                c.conn = Self::tag(q, c.conn);
                out.push((c, status_in(&s, c.conn)));
            }
        }
    }

    /// Connection `id`'s progress as its status entry shows it.
    pub fn status(&self, id: ConnId) -> Status {
        match self.stack_of(id) {
            Ok((s, _)) => status_in(&s, id),
            Err(_) => status_in_none(id),
        }
    }

    /// [`Self::status`] if `id`'s queue is not busy right now.
    pub fn status_now(&self, id: ConnId) -> Option<Status> {
        let (q, _) = Self::split(id);
        let s = self.cells.get(q)?.stack.try_lock().ok()?;
        Some(status_in(&s, id))
    }

    /// Listens on `port` on every queue (a SYN may arrive on any); on a
    /// failure, none listens.
    ///
    /// # Errors
    /// The first queue's refusal.
    pub fn listen(&self, port: u16) -> Result<(), HostError> {
        for i in 0..self.cells.len() {
            if let Err(e) = self.stack(i).listen(port) {
                for q in 0..i {
                    self.stack(q).unlisten(port).ok();
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Narrows listening port `port` to peers of `families` on every
    /// queue ([`crate::host::Host::listen_families`]).
    ///
    /// # Errors
    /// The first queue's refusal (the others still narrow).
    pub fn listen_families(&self, port: u16, families: Families) -> Result<(), HostError> {
        let mut first = Ok(());
        for q in 0..self.cells.len() {
            if let Err(e) = self.stack(q).listen_families(port, families) {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Stops listening on `port` on every queue.
    ///
    /// # Errors
    /// The first queue's refusal (the others still stop).
    pub fn unlisten(&self, port: u16) -> Result<(), HostError> {
        let mut first = Ok(());
        for q in 0..self.cells.len() {
            if let Err(e) = self.stack(q).unlisten(port) {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Opens a connection to `remote` from the next queue in turn.
    ///
    /// # Errors
    /// As [`Provider::connect`].
    pub fn connect(&self, remote: SocketAddr) -> Result<ConnId, HostError> {
        let n = self.cells.len();
        let q = self.next_connect.load(Ordering::Relaxed) % n;
        self.next_connect.store((q + 1) % n, Ordering::Relaxed);
        Ok(Self::tag(q, self.stack(q).connect(remote)?))
    }

    /// Closes (`abort`: resets) connection `id`.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn close(&self, id: ConnId, abort: bool) -> Result<(), HostError> {
        let (mut s, c) = self.stack_of(id)?;
        if abort {
            s.abort(c)
        } else {
            s.close(c)
        }
    }

    /// Connection `id`'s local and remote addresses.
    pub(super) fn endpoints(&self, id: ConnId) -> Option<(SocketAddr, SocketAddr)> {
        let (s, c) = self.stack_of(id).ok()?;
        s.endpoints(c)
    }

    /// Posts a work request on connection `id` over `region`'s memory.
    ///
    /// # Errors
    /// As [`Provider::post`].
    pub(super) fn post(
        &self,
        id: ConnId,
        dir: Direction,
        region: &Region,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), HostError> {
        let (q, _) = Self::split(id);
        let mr = *region.ids.get(q).ok_or(HostError::UnknownConnection(id))?;
        let (mut s, c) = self.stack_of(id)?;
        s.post(WorkRequest::new(c, dir, mr, offset, len, wr_id))
    }

    /// Zeroes `range` of the region area ([`crate::host::Host::zero_memory`];
    /// every queue maps the same memory).
    ///
    /// # Errors
    /// As that.
    pub(super) fn zero(&self, range: Range<usize>) -> Result<(), HostError> {
        self.stack(0).zero_memory(range)
    }

    /// Moves connection `id`'s memory from each pair's first region into
    /// its second ([`crate::host::Host::rehome`]), under one hold of the
    /// connection's queue: nothing is placed, sent or reclaimed there
    /// meanwhile. Returns the posted ends, receive then send.
    ///
    /// # Errors
    /// Unknown connection; the datapath refused the moves (nothing
    /// changed).
    pub(super) fn rehome(
        &self,
        id: ConnId,
        pairs: &[(Region, Region)],
    ) -> Result<(u64, u64), HostError> {
        let (q, _) = Self::split(id);
        let moves = pairs
            .iter()
            .map(|(from, to)| {
                Some(MrMove {
                    from: *from.ids.get(q)?,
                    to: *to.ids.get(q)?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or(HostError::UnknownConnection(id))?;
        let (mut s, c) = self.stack_of(id)?;
        s.rehome(c, &moves)
    }

    /// Registers `len` bytes inside `range` of the region area on every
    /// queue, at the place the first queue chose; zeroes them (the slot
    /// may hold a departed attachment's bytes). Returns the region and its
    /// offset in the region area.
    ///
    /// # Errors
    /// No room (on the first queue: nothing is registered; on another,
    /// whose old registration there is still draining: what was
    /// registered is taken back).
    pub(super) fn register(
        &self,
        range: Range<usize>,
        len: usize,
        access: Access,
    ) -> Result<(Region, usize), HostError> {
        let (first, at) = {
            let mut s = self.stack(0);
            let first = s.register_memory_in(range, len, access)?;
            (first, s.memory_offset(first).unwrap_or(0))
        };
        let mut region = Region {
            ids: vec![first],
            registered: 1,
            len: len as u64,
        };
        for q in 1..self.cells.len() {
            let registered = self.stack(q).register_memory_in(at..at + len, len, access);
            match registered {
                Ok(mr) => {
                    region.ids.push(mr);
                    region.registered |= 1 << q;
                }
                Err(e) => {
                    self.deregister(&mut region).ok();
                    return Err(e);
                }
            }
        }
        if let Ok(m) = self.stack(0).memory_mut(first) {
            m.fill(0);
        }
        Ok((region, at))
    }

    /// Deregisters `region` on every queue whose TX no longer reads it
    /// (those queues are done with it; call again for the others).
    ///
    /// # Errors
    /// A queue whose posted segments still read it: the first such
    /// refusal.
    pub(super) fn deregister(&self, region: &mut Region) -> Result<(), HostError> {
        let mut first = Ok(());
        for (q, &mr) in region.ids.iter().enumerate() {
            if region.registered & 1 << q == 0 {
                continue;
            }
            let mut s = self.stack(q);
            match s.deregister_memory(mr) {
                Err(e) if s.memory(mr).is_ok() => first = first.and(Err(e)),
                _ => region.registered &= !(1 << q),
            }
        }
        first
    }

    /// The interface's address.
    pub fn local_ip(&self) -> Ipv4Addr {
        self.local_ip
    }

    /// The interface's IPv6 address, when the queues serve IPv6.
    pub fn local_ip6(&self) -> Option<Ipv6Addr> {
        self.local_ip6
    }

    /// Drops by reason, summed over the queues.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let mut all: Vec<(&'static str, u64)> = Vec::new();
        self.for_each_stack(|s| {
            for (name, n) in s.drops() {
                match all.iter_mut().find(|(m, _)| *m == name) {
                    Some(e) => e.1 += n,
                    None => all.push((name, n)),
                }
            }
        });
        all
    }

    /// Retransmissions (segments, bytes), summed over the queues.
    pub fn retransmissions(&self) -> (u64, u64) {
        let mut sum = (0, 0);
        self.for_each_stack(|s| {
            if let Some(r) = Provider::retransmissions(&*s) {
                sum = (sum.0 + r.0, sum.1 + r.1);
            }
        });
        sum
    }

    /// Payload bytes the transports touched, summed.
    pub fn payload_touched(&self) -> u64 {
        let mut sum = 0;
        self.for_each_stack(|s| sum += Provider::payload_bytes_touched_by_transport(&*s));
        sum
    }

    /// The payload copies of every queue, summed.
    pub fn payload_copies(&self) -> crate::host::PayloadCopies {
        let mut sum = crate::host::PayloadCopies::default();
        self.for_each_stack(|s| sum = sum + s.payload_copies());
        sum
    }

    /// Queue `q`'s own thread sleeps, holding its stack, until the queue
    /// has something (its sockets; in dedicated mode its transport
    /// thread's signal), one of `extra` is readable, another thread wants
    /// the stack, or `limit` passes (at most
    /// [`datapath::nic::GROUP_WAIT_CAP`] with more than one queue: frames
    /// one queue hands another wake no socket). It does not sleep while
    /// someone waits for the stack or completions wait to be handed out.
    ///
    /// # Errors
    /// `ppoll` failed.
    pub(super) fn sleep_queue(
        &self,
        q: usize,
        extra: &[BorrowedFd<'_>],
        limit: Duration,
    ) -> std::io::Result<()> {
        let cell = &self.cells[q];
        let s = unpoisoned(cell.stack.lock());
        cell.asleep.store(true, Ordering::SeqCst);
        let mut fds: Vec<BorrowedFd<'_>> = extra.to_vec();
        fds.push(cell.wake.as_fd());
        let may = s.sleep_fds(&mut fds)
            && cell.kicks.load(Ordering::SeqCst) == 0
            && s.completions_queued() == 0;
        let limit = if self.cells.len() > 1 {
            limit.min(datapath::nic::GROUP_WAIT_CAP)
        } else {
            limit
        };
        let r = if may {
            datapath::nic::wait_readable(&fds, limit)
                .map(|_| ())
                .map_err(std::io::Error::from)
        } else {
            Ok(())
        };
        s.sleep_over();
        cell.asleep.store(false, Ordering::SeqCst);
        cell.wake.drain();
        r
    }
}

/// Connection `id`'s progress on stack `s` (its queue's).
fn status_in(s: &Stack, id: ConnId) -> Status {
    let (_, c) = Queues::split(id);
    Status {
        conn: id.to_bits(),
        received: s.received(c).unwrap_or(0),
        acked: s.acked(c).unwrap_or(0),
        state: state_code(s.state(c).unwrap_or(transports::tcp::State::Closed)),
    }
}

/// The progress of a connection no stack knows.
fn status_in_none(id: ConnId) -> Status {
    Status {
        conn: id.to_bits(),
        received: 0,
        acked: 0,
        state: state_code(transports::tcp::State::Closed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_carries_its_queue_and_the_stacks_handle_back() {
        for q in [0usize, 1, 7, 63] {
            for bits in [0u64, 5, (9 << 32) | 65_535, (u64::from(u32::MAX) << 32) | 1] {
                let inner = ConnId::from_bits(bits);
                let tagged = Queues::tag(q, inner);
                assert_eq!(
                    Queues::split(tagged),
                    (q, inner),
                    "queue {q} bits {bits:#x}"
                );
                if q > 0 {
                    assert_ne!(tagged, inner, "the queue shows in the handle");
                }
            }
        }
    }
}
