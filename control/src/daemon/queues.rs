//! The queues the daemon serves: one [`Stack`] per configured queue of the
//! interface, all in one queue group (one steering program), all driven by
//! the daemon's one loop.
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

use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Range;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use datapath::mr::{Access, MrId};
use transports::Instant;

use crate::host::{HostConfig, HostError};
use crate::idmap::ConnId;
use crate::ipc::channel::Status;
use crate::ipc::desc::state_code;
use crate::provider::{Completion, Direction, Provider, WorkRequest};
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

/// The stacks of the served queues.
#[derive(Debug)]
pub struct Queues {
    stacks: Vec<Stack>,
    /// Where the next connect and the next accept start looking.
    next_connect: usize,
    next_accept: usize,
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
        Ok(Queues {
            stacks,
            next_connect: 0,
            next_accept: 0,
            _reserved: reserved,
        })
    }

    /// One stack as the only queue (a test's fake stack, say).
    pub fn one(stack: Stack) -> Queues {
        Queues {
            stacks: vec![stack],
            next_connect: 0,
            next_accept: 0,
            _reserved: None,
        }
    }

    /// The stacks, in queue order.
    pub fn stacks(&self) -> &[Stack] {
        &self.stacks
    }

    /// The stacks, writable (metrics, capture).
    pub fn stacks_mut(&mut self) -> &mut [Stack] {
        &mut self.stacks
    }

    /// The first queue's stack: the interface's address, the memory slots,
    /// the clock every deadline is told in.
    pub fn first(&self) -> &Stack {
        &self.stacks[0]
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

    fn stack_of(&self, id: ConnId) -> Result<(&Stack, ConnId), HostError> {
        let (q, inner) = Self::split(id);
        self.stacks
            .get(q)
            .map(|s| (s, inner))
            .ok_or(HostError::UnknownConnection(id))
    }

    fn stack_of_mut(&mut self, id: ConnId) -> Result<(&mut Stack, ConnId), HostError> {
        let (q, inner) = Self::split(id);
        self.stacks
            .get_mut(q)
            .map(|s| (s, inner))
            .ok_or(HostError::UnknownConnection(id))
    }

    /// One pass over every queue.
    pub fn poll_pass(&mut self) -> usize {
        self.stacks.iter_mut().map(Stack::poll_pass).sum()
    }

    /// The first stack's clock.
    pub fn now(&self) -> Instant {
        self.first().now()
    }

    /// The soonest of the queues' next deadlines, on the first's clock.
    pub fn next_deadline(&self) -> Option<Instant> {
        let now = self.now();
        self.stacks
            .iter()
            .filter_map(|s| {
                let due = s.next_deadline()?;
                Some(now + due.saturating_duration_since(s.now()))
            })
            .min()
    }

    /// A connection accepted on `port`, on whichever queue has one (the
    /// queues take turns being asked first).
    pub fn accept(&mut self, port: u16) -> Option<ConnId> {
        let n = self.stacks.len();
        for i in 0..n {
            let q = (self.next_accept + i) % n;
            if let Ok(Some(id)) = self.stacks[q].accept(port) {
                self.next_accept = (q + 1) % n;
                return Some(Self::tag(q, id));
            }
        }
        None
    }

    /// The next completion of any queue, its connection as the attachment
    /// knows it.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.stacks.iter_mut().enumerate().find_map(|(q, s)| {
            let mut c = s.poll_completion()?;
            c.conn = Self::tag(q, c.conn);
            Some(c)
        })
    }

    /// Connection `id`'s progress as its status entry shows it.
    pub fn status(&self, id: ConnId) -> Status {
        let (received, acked, state) = match self.stack_of(id) {
            Ok((s, c)) => (
                s.received(c).unwrap_or(0),
                s.acked(c).unwrap_or(0),
                s.state(c).unwrap_or(transports::tcp::State::Closed),
            ),
            Err(_) => (0, 0, transports::tcp::State::Closed),
        };
        Status {
            conn: id.to_bits(),
            received,
            acked,
            state: state_code(state),
        }
    }

    /// Listens on `port` on every queue (a SYN may arrive on any); on a
    /// failure, none listens.
    ///
    /// # Errors
    /// The first queue's refusal.
    pub fn listen(&mut self, port: u16) -> Result<(), HostError> {
        for i in 0..self.stacks.len() {
            if let Err(e) = self.stacks[i].listen(port) {
                for s in &mut self.stacks[..i] {
                    s.unlisten(port).ok();
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Stops listening on `port` on every queue.
    ///
    /// # Errors
    /// The first queue's refusal (the others still stop).
    pub fn unlisten(&mut self, port: u16) -> Result<(), HostError> {
        let mut first = Ok(());
        for s in &mut self.stacks {
            if let Err(e) = s.unlisten(port) {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Opens a connection to `remote` from the next queue in turn.
    ///
    /// # Errors
    /// As [`Provider::connect`].
    pub fn connect(&mut self, remote: SocketAddrV4) -> Result<ConnId, HostError> {
        let q = self.next_connect % self.stacks.len();
        self.next_connect = (q + 1) % self.stacks.len();
        Ok(Self::tag(q, self.stacks[q].connect(remote)?))
    }

    /// Closes (`abort`: resets) connection `id`.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn close(&mut self, id: ConnId, abort: bool) -> Result<(), HostError> {
        let (s, c) = self.stack_of_mut(id)?;
        if abort {
            s.abort(c)
        } else {
            s.close(c)
        }
    }

    /// Posts a work request on connection `id` over `region`'s memory.
    ///
    /// # Errors
    /// As [`Provider::post`].
    pub(super) fn post(
        &mut self,
        id: ConnId,
        dir: Direction,
        region: &Region,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), HostError> {
        let (q, _) = Self::split(id);
        let mr = *region.ids.get(q).ok_or(HostError::UnknownConnection(id))?;
        let (s, c) = self.stack_of_mut(id)?;
        s.post(WorkRequest::new(c, dir, mr, offset, len, wr_id))
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
        &mut self,
        range: Range<usize>,
        len: usize,
        access: Access,
    ) -> Result<(Region, usize), HostError> {
        let first = self.stacks[0].register_memory_in(range, len, access)?;
        let at = self.stacks[0].memory_offset(first).unwrap_or(0);
        let mut region = Region {
            ids: vec![first],
            registered: 1,
            len: len as u64,
        };
        for (q, s) in self.stacks.iter_mut().enumerate().skip(1) {
            match s.register_memory_in(at..at + len, len, access) {
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
        if let Ok(m) = self.stacks[0].memory_mut(first) {
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
    pub(super) fn deregister(&mut self, region: &mut Region) -> Result<(), HostError> {
        let mut first = Ok(());
        for (q, (s, &mr)) in self.stacks.iter_mut().zip(&region.ids).enumerate() {
            if region.registered & 1 << q == 0 {
                continue;
            }
            match s.deregister_memory(mr) {
                Err(e) if s.memory(mr).is_ok() => first = first.and(Err(e)),
                _ => region.registered &= !(1 << q),
            }
        }
        first
    }

    /// The interface's address.
    pub fn local_ip(&self) -> Ipv4Addr {
        self.first().local_ip()
    }

    /// Drops by reason, summed over the queues.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let mut all: Vec<(&'static str, u64)> = Vec::new();
        for s in &self.stacks {
            for (name, n) in s.drops() {
                match all.iter_mut().find(|(m, _)| *m == name) {
                    Some(e) => e.1 += n,
                    None => all.push((name, n)),
                }
            }
        }
        all
    }

    /// Retransmissions (segments, bytes), summed over the queues.
    pub fn retransmissions(&self) -> (u64, u64) {
        self.stacks
            .iter()
            .filter_map(Provider::retransmissions)
            .fold((0, 0), |a, r| (a.0 + r.0, a.1 + r.1))
    }

    /// Payload bytes the transports touched, summed.
    pub fn payload_touched(&self) -> u64 {
        self.stacks
            .iter()
            .map(Provider::payload_bytes_touched_by_transport)
            .sum()
    }

    /// The payload copies of every queue, summed.
    pub fn payload_copies(&self) -> crate::host::PayloadCopies {
        self.stacks
            .iter()
            .map(Stack::payload_copies)
            .fold(Default::default(), |a, c| a + c)
    }

    /// Sleeps until a queue has something (its sockets; in dedicated mode
    /// its transport thread's signal), one of `extra` is readable, or
    /// `limit` passes (at most [`datapath::nic::GROUP_WAIT_CAP`] with more
    /// than one queue: frames one queue hands another wake no socket).
    ///
    /// # Errors
    /// `ppoll` failed.
    pub fn sleep(&self, extra: &[BorrowedFd<'_>], limit: Duration) -> std::io::Result<bool> {
        let mut fds: Vec<BorrowedFd<'_>> = extra.to_vec();
        let mut may = true;
        for s in &self.stacks {
            may &= s.sleep_fds(&mut fds);
        }
        let limit = if self.stacks.len() > 1 {
            limit.min(datapath::nic::GROUP_WAIT_CAP)
        } else {
            limit
        };
        let r = if may {
            datapath::nic::wait_readable(&fds, limit)
                .map(|n| n > 0)
                .map_err(std::io::Error::from)
        } else {
            Ok(true)
        };
        for s in &self.stacks {
            s.sleep_over();
        }
        r
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
