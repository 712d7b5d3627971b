//! One attached application as the daemon sees it: its socket, its memory
//! slot and regions, its channel (rings and status table), its
//! connections and listeners, and what it has posted. Everything an
//! attachment names is looked up here first, so it reaches only what is
//! its own.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::queues::Region;
use datapath::nic::EventFd;

use crate::idmap::{ConnId, ConnMap};
use crate::ipc::channel::{DaemonEnd, Layout, Status};
use crate::ipc::desc::CompletionDesc;
use crate::ipc::sock::Peer;

/// A connection of an attachment: its status-table entry and the work
/// requests it has posted and not yet had completed, per direction.
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnEntry {
    pub slot: u32,
    pub recv: u32,
    pub send: u32,
    /// What its status entry shows.
    pub shown: Status,
    /// Parked ([`crate::ipc::msg::Request::Park`]): this attachment let
    /// go of it having read this many bytes, and keeps its memory for the
    /// holder that takes it up.
    pub parked: Option<u64>,
    /// The peer's FIN came after this many bytes (routed here, so a
    /// holder taking the connection up learns it).
    pub peer_fin: Option<u64>,
    /// It closed it (FIN after its posted bytes): if it goes before the
    /// connection finished, the connection finishes without it, as a
    /// closed socket of an exited process does on Linux.
    pub closing: bool,
    /// The regions it posted on this connection: a holder taking it up
    /// may have those copied, and nothing else of this attachment's.
    pub posted_in: PostedIn,
}

/// The regions an attachment posted on for one connection (the shim's
/// rings: one each way), up to [`crate::ipc::msg::MAX_MOVES`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PostedIn {
    ids: [Option<datapath::mr::MrId>; crate::ipc::msg::MAX_MOVES],
    /// It posted on more: the connection cannot be handed over.
    pub overflow: bool,
}

impl PostedIn {
    /// Notes a post on region `mr`.
    pub fn note(&mut self, mr: datapath::mr::MrId) {
        if self.contains(mr) {
            return;
        }
        match self.ids.iter_mut().find(|i| i.is_none()) {
            Some(free) => *free = Some(mr),
            None => self.overflow = true,
        }
    }

    /// Whether it posted on `mr`.
    pub fn contains(&self, mr: datapath::mr::MrId) -> bool {
        self.ids.contains(&Some(mr))
    }
}

pub use crate::metrics::{AttachmentCounters, AttachmentView};

/// A listening socket the attachment opened (or holds, inherited): its
/// port, and the status entry where it sees how many connections wait to
/// be accepted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listening {
    pub socket: u32,
    pub port: u16,
    pub slot: u32,
    /// What that entry shows.
    pub shown: Option<u64>,
}

/// Writes `status` to `e`'s entry if it differs from what it shows;
/// whether it did.
fn show(chan: &DaemonEnd, e: &mut ConnEntry, status: Status) -> bool {
    if e.shown == status {
        return false;
    }
    e.shown = status;
    chan.set_status(e.slot, &status);
    true
}

/// An attached application.
#[derive(Debug)]
pub(super) struct Attachment {
    pub id: u32,
    pub sock: Arc<OwnedFd>,
    pub peer: Peer,
    pub command: String,
    /// Its memory slot of the UMEM.
    pub slot: u32,
    pub chan: DaemonEnd,
    /// Its channel's sizes, as welcomed (a reload changes the limits for
    /// new attachments only).
    pub layout: Layout,
    /// Signalled by the application when it posted while the daemon slept.
    pub wake_daemon: Arc<EventFd>,
    /// Signalled by the daemon when it completed while the application slept.
    pub wake_app: EventFd,
    /// Its registered regions, by handle.
    pub regions: HashMap<datapath::mr::MrId, Region>,
    pub conns: ConnMap<ConnEntry>,
    pub free_status: Vec<u32>,
    /// Listening sockets it opened or holds.
    pub listening: Vec<Listening>,
    /// Connections it holds (inherited) without being their active
    /// holder: their progress shows elsewhere until it adopts them.
    pub held: ConnMap<()>,
    /// Work requests posted and not completed, over every connection.
    pub posted: u32,
    /// Completions that found the ring full, oldest first.
    pub backlog: VecDeque<CompletionDesc>,
    /// Completions were written or progress shown since the last
    /// doorbell check.
    pub completed: bool,
    pub counters: AttachmentCounters,
    /// It announced an `execve` ([`crate::ipc::msg::Request::Exec`]):
    /// until then its hang-up leaves what it holds to the new program.
    pub exec_until: Option<std::time::Instant>,
    /// Its socket hung up while an exec was announced: nothing more is
    /// read from it; it ends when the new program attached or at
    /// `exec_until`.
    pub departed: bool,
}

impl Attachment {
    /// Appends completions (to the ring while it has room, then to the
    /// backlog, which keeps their order).
    pub fn complete(&mut self, d: CompletionDesc) {
        if self.backlog.is_empty() && self.chan.push_completion(d) {
            self.counters.completions += 1;
            self.completed = true;
        } else {
            self.counters.completions_deferred += 1;
            self.backlog.push_back(d);
        }
    }

    /// Moves backlogged completions to the ring as room allows.
    pub fn flush_backlog(&mut self) {
        while let Some(d) = self.backlog.front().copied() {
            if !self.chan.push_completion(d) {
                break;
            }
            self.backlog.pop_front();
            self.counters.completions += 1;
            self.completed = true;
        }
    }

    /// Rings the application's doorbell if completions came and it sleeps.
    pub fn ring_doorbell(&mut self) {
        if std::mem::take(&mut self.completed) {
            self.chan.bump_progress();
            if self.chan.app_asleep() {
                self.wake_app.signal();
            }
        }
    }

    /// Shows `status` in `id`'s entry if it changed (progress wakes a
    /// sleeping application like a completion: a stream reader waits
    /// for bytes below `received`, not only for whole work requests).
    pub fn show(&mut self, id: ConnId, status: Status) {
        if let Some(e) = self.conns.get_mut(&id) {
            self.completed |= show(&self.chan, e, status);
        }
    }

    /// [`Self::show`] for every connection, `status` giving each one's
    /// (`None`: not now; its queue is busy).
    pub fn show_all(&mut self, status: impl Fn(ConnId) -> Option<Status>) {
        for (&id, e) in self.conns.iter_mut() {
            if let Some(now) = status(id) {
                self.completed |= show(&self.chan, e, now);
            }
        }
    }

    /// Shows `pending` waiting connections in listener `l`'s entry if
    /// that changed (from none to some wakes it: accept may succeed).
    pub fn show_pending(&mut self, i: usize, pending: u64) {
        let Some(l) = self.listening.get_mut(i) else {
            return;
        };
        if l.shown == Some(pending) {
            return;
        }
        let rising = l.shown.unwrap_or(0) == 0 && pending > 0;
        l.shown = Some(pending);
        self.chan.set_status(
            l.slot,
            &Status {
                conn: crate::ipc::desc::listener_tag(l.port),
                received: pending,
                acked: 0,
                state: crate::ipc::desc::state_code(transports::tcp::State::Closed),
            },
        );
        self.completed |= rising;
    }

    /// The listening socket `socket`, if it holds it.
    pub fn listener(&self, socket: u32) -> Option<&Listening> {
        self.listening.iter().find(|l| l.socket == socket)
    }

    /// Stops holding listening socket `socket`; frees its status entry.
    pub fn drop_listener(&mut self, socket: u32) {
        if let Some(i) = self.listening.iter().position(|l| l.socket == socket) {
            let l = self.listening.swap_remove(i);
            self.chan.clear_status(l.slot);
            self.free_status.push(l.slot);
        }
    }

    /// Work requests it has posted on `id` and not had completed.
    pub fn posts_on(&self, id: ConnId) -> u32 {
        self.conns.get(&id).map_or(0, |e| e.recv + e.send)
    }

    /// Connections it parked that nobody took up yet: while there are
    /// any, its memory stays and its hang-up does not end it.
    pub fn parks(&self) -> usize {
        self.conns.values().filter(|e| e.parked.is_some()).count()
    }

    /// Takes a status-table entry for `id`.
    pub fn adopt(&mut self, id: ConnId) -> Option<u32> {
        let slot = self.free_status.pop()?;
        self.conns.insert(
            id,
            ConnEntry {
                slot,
                recv: 0,
                send: 0,
                shown: Status::default(),
                parked: None,
                peer_fin: None,
                closing: false,
                posted_in: PostedIn::default(),
            },
        );
        Some(slot)
    }

    /// Forgets `id` (it closed): frees its status entry and its posted
    /// work requests, which will never complete.
    pub fn forget(&mut self, id: ConnId) {
        if let Some(e) = self.conns.remove(&id) {
            self.posted = self.posted.saturating_sub(e.recv + e.send);
            self.chan.clear_status(e.slot);
            self.free_status.push(e.slot);
        }
    }

    /// Connection `id` went to another holder: forgets it and hears
    /// `Handed`.
    pub fn hand_away(&mut self, id: ConnId) {
        self.forget(id);
        self.complete(CompletionDesc {
            conn: id.to_bits(),
            wr_id: 0,
            len: 0,
            kind: crate::ipc::desc::KIND_HANDED,
            detail: 0,
        });
    }

    /// The operator's view.
    pub fn view(&self) -> AttachmentView {
        AttachmentView {
            id: self.id,
            pid: self.peer.pid,
            uid: self.peer.uid,
            command: self.command.clone(),
            connections: self.conns.len(),
            listening: self.listening.iter().map(|l| l.port).collect(),
            memory_bytes: self.regions.values().map(|r| r.len).sum(),
            posted: self.posted,
            counters: self.counters,
        }
    }
}
