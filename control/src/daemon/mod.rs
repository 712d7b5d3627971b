//! The control stack as a service (`zerosplit daemon`): one [`Daemon`]
//! owns the stacks of an interface's configured queues ([`Queues`]: XDP
//! program, an AF_XDP socket and UMEM per queue, the transport inline or
//! on a thread per queue as `threads.mode` says) and serves applications
//! that attach to it over a Unix socket ([`crate::attach`] is their side).
//!
//! Each attachment is a protection domain:
//!
//! - **Memory.** The UMEM's memory-region area is cut into slots, one
//!   memfd each ([`datapath::config::MrSlots`]); an attachment gets one
//!   slot, mapped into it and the daemon only, and registers its regions
//!   inside it. Placement writes payload straight into that memory and TX
//!   takes payload from it: no copy beyond the in-process one.
//! - **Names.** Every connection, region and port an attachment names is
//!   looked up in its own tables; another's is "unknown". Every posted
//!   range is checked against its own regions by the datapath.
//! - **Limits.** Connections, posted work requests and memory per
//!   attachment come from `[daemon]`; exceeding one is an error naming it.
//! - **Hostility.** Messages are decoded without trust ([`crate::ipc::msg`]);
//!   ring indices the application writes are clamped and counted; a post
//!   the daemon refuses aborts the connection it named (its stream would
//!   have a hole) and is counted; an application that stops draining its
//!   completions only stops its own posts and accepts (back-pressure).
//! - **Life.** A hang-up (exit, kill -9) wakes the loop: the attachment's
//!   connections are reset, its listeners closed, its regions deregistered
//!   (once no TX descriptor reads them) and its slot given back.
//!
//! Threads ([`Daemon::serve`], in `run.rs`): each queue has a thread that
//! polls its stack (pinned to its entry of `threads.datapath_cores`); the
//! attachments' side of a turn (handing accepted connections and
//! completions to their owners, serving control messages, draining the
//! post rings) is run under one lock by whichever queue's thread just
//! did work, and by the first queue's thread every turn. When idle (the
//! idle policy of `threads.poll`) each thread sleeps on its queue's
//! sockets; the first queue's thread also on the listening socket and
//! every attachment's socket and doorbell, after telling every
//! attachment it sleeps (so a post rings the doorbell only then).

mod attachment;
mod detach;
mod handover;
mod holders;
mod ports;
mod queues;
mod requests;
mod run;
mod slots;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datapath::config::MrSlots;

pub use crate::metrics::DaemonCounters;
pub use crate::provider::Families;
pub use attachment::{AttachmentCounters, AttachmentView};
pub use ports::reuseport_pick;
pub use queues::Queues;

use crate::config::{Config, DaemonConfig, TransportKind};
use crate::host::HostConfig;
use crate::idle::PollConfig;
use crate::idmap::ConnMap;
use crate::ipc::channel::Status;
use crate::ipc::desc::{CompletionDesc, PostDesc, KIND_CLOSED};
use crate::ipc::msg::MAX_MESSAGE;
use crate::ipc::sock::{self, Received};
use crate::provider::Completion;
use attachment::Attachment;
use slots::Slots;

/// Work requests taken from one attachment's ring per turn (fairness).
const POSTS_PER_TURN: u32 = 256;
/// Control messages served per attachment per turn.
const MESSAGES_PER_TURN: usize = 16;
/// Connections on the socket that have not said hello yet.
const MAX_PENDING: usize = 16;
/// The socket (new connections, control messages, hang-ups) is read
/// once every this many turns, and after every sleep: control is rare,
/// and reading it costs a system call per attachment, which a busy loop
/// should not pay on every turn.
const TURNS_PER_SOCKET_READ: u32 = 16;
/// How often the neighbours of connects waiting for ARP are looked up.
const ARP_CHECK_EVERY: Duration = Duration::from_millis(5);
/// Connects one attachment may have waiting for ARP at once.
const MAX_CONNECTS_PENDING: usize = 4;
/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// The daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration asks for something the daemon does not do.
    #[error("{key}: {message}")]
    Config {
        /// The dotted key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The socket could not be set up.
    #[error("daemon socket {path}: {source}")]
    Socket {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A `Connect` whose next hop the kernel is still resolving (ARP): it is
/// answered once the MAC is known, or with an error after the stack's
/// ARP timeout, while the loop serves everyone else.
#[derive(Debug)]
struct PendingConnect {
    attachment: u32,
    seq: u32,
    remote: std::net::SocketAddr,
    since: std::time::Instant,
    next_probe: std::time::Instant,
}

/// A connection to the socket that has not said hello yet.
#[derive(Debug)]
struct Pending {
    sock: Arc<OwnedFd>,
    since: std::time::Instant,
}

/// The shared stack and its attachments.
#[derive(Debug)]
pub struct Daemon {
    queues: Arc<Queues>,
    config: DaemonConfig,
    listener: Arc<OwnedFd>,
    pending: Vec<Pending>,
    /// Connects waiting for ARP.
    connects: Vec<PendingConnect>,
    /// When the pending connects' neighbours are looked up next.
    next_arp_check: std::time::Instant,
    attachments: BTreeMap<u32, Attachment>,
    /// Each connection's active holder: the attachment whose status
    /// table shows it and whose work requests it takes.
    conn_owner: ConnMap<u32>,
    /// Holders of a connection beside its active one (processes forked
    /// while it was open); it is closed when the last holder lets go.
    shared: ConnMap<Vec<u32>>,
    /// Each listening port's sockets and their holders (a listener
    /// forked into children is held by each; one accept queue serves
    /// them all; `SO_REUSEPORT` sockets each have their own, see
    /// `ports.rs`).
    listeners: HashMap<u16, ports::Port>,
    /// The number the next listening socket gets (never 0).
    next_socket: u32,
    slots: Slots,
    counters: DaemonCounters,
    next_id: u32,
    poll: PollConfig,
    posts: Vec<PostDesc>,
    /// Completions taken from the stacks, reused each turn.
    completions: Vec<(Completion, Status)>,
    buf: Vec<u8>,
    /// Draining: no new attachments.
    closing: bool,
    /// Where [`Daemon::set_metrics`] asked the loop to publish.
    metrics: Option<std::sync::Arc<crate::metrics::Board>>,
    /// When the next daemon snapshot is due.
    next_publish: std::time::Instant,
    /// Attachment ids, reused each turn (no allocation per turn).
    ids: Vec<u32>,
    /// Turns since the socket was last read.
    since_socket: u32,
}

/// The stack configurations the daemon runs with, one per entry of
/// `interface.queues` (open them with [`Queues::open`]): each UMEM's
/// region area cut into `daemon.max_attachments` slots of
/// `daemon.memory_per_attachment`, the same slots on every queue, and a
/// region table with room for every attachment's regions.
///
/// # Errors
/// The daemon serves the header-only TCP; another transport is refused,
/// naming the key.
pub fn host_configs(config: &Config) -> Result<Vec<HostConfig>, DaemonError> {
    if config.transport.kind != TransportKind::Tcp {
        return Err(DaemonError::Config {
            key: "transport.kind",
            message: "the daemon serves the header-only TCP (\"tcp\")".into(),
        });
    }
    Ok(config
        .interface
        .queues
        .iter()
        .map(|&q| {
            let mut host = config.stack_config(q);
            host.nic.xsk.umem.mr_slots = Some(slot_geometry(&config.daemon));
            // Every attachment may hold its own regions: the queue's table
            // holds them all (flows.max_regions is one program's count).
            let d = &config.daemon;
            let all = (d.max_attachments as usize)
                .saturating_mul(requests::max_regions(d.max_connections));
            host.nic.max_regions = host
                .nic
                .max_regions
                .max(all)
                .min(datapath::nic::MAX_REGIONS);
            host
        })
        .collect())
}

/// The UMEM slots `[daemon]` asks for.
pub fn slot_geometry(d: &DaemonConfig) -> MrSlots {
    MrSlots {
        count: d.max_attachments,
        len: d.memory_per_attachment.bytes() as usize,
        memory: None,
    }
}

impl Daemon {
    /// A daemon serving `queues` (opened with [`host_configs`]) on the
    /// listening socket `listener` ([`crate::ipc::sock::listen`]).
    pub fn new(
        queues: Queues,
        config: DaemonConfig,
        listener: OwnedFd,
        poll: PollConfig,
    ) -> Daemon {
        let slots = Slots::new(config.max_attachments, queues.first().nic().mr_slot_len());
        Daemon {
            queues: Arc::new(queues),
            config,
            listener: Arc::new(listener),
            pending: Vec::new(),
            connects: Vec::new(),
            next_arp_check: std::time::Instant::now(),
            attachments: BTreeMap::new(),
            conn_owner: ConnMap::default(),
            shared: ConnMap::default(),
            listeners: HashMap::new(),
            next_socket: 1,
            slots,
            counters: DaemonCounters::default(),
            next_id: 1,
            poll,
            posts: Vec::with_capacity(POSTS_PER_TURN as usize),
            completions: Vec::new(),
            buf: vec![0; MAX_MESSAGE],
            closing: false,
            ids: Vec::new(),
            since_socket: 0,
            metrics: None,
            next_publish: std::time::Instant::now(),
        }
    }

    /// The queues' stacks (for counters and inspection).
    pub fn queues(&self) -> &Queues {
        &self.queues
    }

    /// Daemon-wide counters.
    pub fn counters(&self) -> DaemonCounters {
        self.counters
    }

    /// Every attachment, as an operator sees it.
    pub fn attachments(&self) -> Vec<AttachmentView> {
        self.attachments.values().map(Attachment::view).collect()
    }

    /// Memory slots not held by an attachment (nor waiting for TX to let
    /// go of their regions).
    pub fn free_slots(&self) -> usize {
        self.slots.free()
    }

    /// Limits for attachments from now on (a reload): connection and post
    /// limits apply to new attachments.
    pub fn set_limits(&mut self, config: DaemonConfig) {
        let keep = (
            self.config.max_attachments,
            self.config.memory_per_attachment,
        );
        self.config = DaemonConfig {
            max_attachments: keep.0,
            memory_per_attachment: keep.1,
            ..config
        };
    }

    /// Publishes each queue's snapshot and the daemon's own
    /// ([`crate::metrics::DaemonSnapshot`]: counters and attachments) to
    /// `board` from now on, every [`crate::metrics::PUBLISH_EVERY`], from
    /// inside [`Daemon::turn`]; `None` stops.
    pub fn set_metrics(&mut self, board: Option<std::sync::Arc<crate::metrics::Board>>) {
        self.queues.for_each_stack(|s| s.set_metrics(board.clone()));
        self.metrics = board;
        self.next_publish = std::time::Instant::now();
    }

    /// Publishes the daemon's snapshot if the metrics are on and one is due.
    fn publish_if_due(&mut self) {
        // Every turn comes here: without metrics, no clock read.
        if self.metrics.is_none() {
            return;
        }
        let now = std::time::Instant::now();
        if now < self.next_publish {
            return;
        }
        self.next_publish = now + crate::metrics::PUBLISH_EVERY;
        let snapshot = crate::metrics::DaemonSnapshot::new(
            self.config.socket.display().to_string(),
            self.counters,
            self.attachments(),
        );
        if let Some(board) = &self.metrics {
            board.publish_daemon(snapshot);
        }
    }

    /// Refuses applications that attach from now on (draining).
    pub fn stop_attaching(&mut self) {
        self.closing = true;
    }

    /// Connections held by attachments.
    pub fn connections(&self) -> usize {
        self.conn_owner.len()
    }

    /// One pass over everything from one thread (tests, fuzzing): every
    /// queue's stack, then [`Self::turn_shared`]; returns how much it did.
    pub fn turn(&mut self) -> usize {
        self.queues.poll_pass() + self.turn_shared()
    }

    /// The attachments' side of a turn: accepted connections,
    /// completions, control messages, posted work, progress, doorbells,
    /// memory coming back; returns how much it did.
    fn turn_shared(&mut self) -> usize {
        let mut work = self.route_completions();
        self.since_socket += 1;
        if self.since_socket >= TURNS_PER_SOCKET_READ {
            self.since_socket = 0;
            work += self.serve_socket();
        }
        work += self.take_posts();
        work += self.serve_connects();
        work += self.spread_accepted();
        self.publish_status();
        for a in self.attachments.values_mut() {
            a.flush_backlog();
            a.ring_doorbell();
        }
        work += self.slots.reclaim(&self.queues);
        self.publish_if_due();
        work
    }

    /// Hands the stack's completions to the attachments whose connections
    /// they are about (others' are dropped: their owner is gone).
    fn route_completions(&mut self) -> usize {
        let mut done = std::mem::take(&mut self.completions);
        self.queues.drain_completions(&mut done);
        let work = done.len();
        for (c, status) in done.drain(..) {
            let Some(owner) = self.conn_owner.get(&c.conn).copied() else {
                if matches!(c.kind, crate::provider::CompletionKind::Closed(_)) {
                    // Closed while waiting on a reuseport socket.
                    for p in self.listeners.values_mut() {
                        p.forget(c.conn);
                    }
                }
                continue;
            };
            let Some(a) = self.attachments.get_mut(&owner) else {
                continue;
            };
            let d = CompletionDesc::from_completion(&c);
            if let Some(e) = a.conns.get_mut(&c.conn) {
                match c.kind {
                    crate::provider::CompletionKind::Recv => e.recv = e.recv.saturating_sub(1),
                    crate::provider::CompletionKind::Send => e.send = e.send.saturating_sub(1),
                    crate::provider::CompletionKind::PeerClosed { len } => e.peer_fin = Some(len),
                    _ => {}
                }
                if matches!(
                    c.kind,
                    crate::provider::CompletionKind::Recv | crate::provider::CompletionKind::Send
                ) {
                    a.posted = a.posted.saturating_sub(1);
                }
            }
            a.show(c.conn, status);
            a.complete(d);
            if d.kind == KIND_CLOSED {
                a.forget(c.conn);
                self.conn_owner.remove(&c.conn);
            }
        }
        self.completions = done;
        work
    }

    /// Writes every attached connection's progress to its status entry,
    /// and every held listener's count of connections waiting to be
    /// accepted (every holder sees the one accept queue; a count rising
    /// from zero rings each, as Linux wakes every waiter of a listener).
    fn publish_status(&mut self) {
        for a in self.attachments.values_mut() {
            a.show_all(|id| self.queues.status_now(id));
            for i in 0..a.listening.len() {
                let l = a.listening[i];
                if let Some(n) = waiting(&self.listeners, &self.queues, l) {
                    a.show_pending(i, n);
                }
            }
        }
    }

    /// Shows attachment `id` the count of connections waiting on its
    /// listening socket `socket` now (after an `Accept`, before the
    /// reply: a program that polls its listeners again at once must not
    /// see the one it took, or its blocking `accept` waits for it).
    pub(super) fn show_waiting(&mut self, id: u32, socket: u32) {
        let Some(a) = self.attachments.get_mut(&id) else {
            return;
        };
        let Some(i) = a.listening.iter().position(|l| l.socket == socket) else {
            return;
        };
        if let Some(n) = waiting(&self.listeners, &self.queues, a.listening[i]) {
            a.show_pending(i, n);
        }
    }

    /// Accepts connections to the socket, reads hellos and requests, and
    /// notices hang-ups.
    fn serve_socket(&mut self) -> usize {
        let mut work = 0;
        while self.pending.len() < MAX_PENDING {
            match sock::accept(self.listener.as_fd()) {
                Ok(Some(s)) => {
                    work += 1;
                    self.pending.push(Pending {
                        sock: Arc::new(s),
                        since: std::time::Instant::now(),
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    log::warn!("daemon: accepting on the socket: {e}");
                    break;
                }
            }
        }
        work += self.serve_pending();
        let mut ids = self.attachment_ids();
        for &id in &ids {
            for _ in 0..MESSAGES_PER_TURN {
                let Some(a) = self.attachments.get_mut(&id) else {
                    break;
                };
                if a.departed {
                    // Exec'd and its new program has not attached yet, or
                    // gone with connections parked for another process.
                    let exec = a.exec_until;
                    if exec.is_none_or(|t| std::time::Instant::now() >= t) {
                        if exec.is_some() {
                            log::info!(
                                "daemon: attachment {id} exec'd and no program took up its sockets within {:?}",
                                crate::ipc::msg::EXEC_GRACE
                            );
                            self.counters.attachments_lost += 1;
                            a.exec_until = None;
                        }
                        match a.parks() {
                            0 => self.detach(id),
                            // Only its parked connections keep it.
                            _ if exec.is_some() => self.depart_for_parks(id),
                            _ => {}
                        }
                    }
                    break;
                }
                match sock::recv(a.sock.as_fd(), &mut self.buf, true) {
                    Ok(Received::Empty) => break,
                    Ok(Received::Message {
                        len,
                        fds,
                        truncated,
                    }) => {
                        work += 1;
                        let msg = self.buf[..len].to_vec();
                        if !self.request(id, &msg, !fds.is_empty(), truncated) {
                            break;
                        }
                    }
                    Ok(Received::HangUp) | Err(_) => {
                        work += 1;
                        self.counters.attachments_lost += 1;
                        match self.attachments.get_mut(&id) {
                            Some(a) if a.exec_until.is_some() => {
                                self.counters.attachments_lost -= 1;
                                a.departed = true;
                            }
                            Some(a) if a.parks() > 0 => self.depart_for_parks(id),
                            _ => self.detach(id),
                        }
                        break;
                    }
                }
            }
        }
        ids.clear();
        self.ids = ids;
        work
    }

    /// The attachments' ids, in the reused buffer (hand it back).
    fn attachment_ids(&mut self) -> Vec<u32> {
        let mut ids = std::mem::take(&mut self.ids);
        ids.extend(self.attachments.keys().copied());
        ids
    }

    /// Drains each attachment's post ring into the stack, checking every
    /// work request against the attachment's own tables and limits.
    fn take_posts(&mut self) -> usize {
        let mut work = 0;
        let mut ids = self.attachment_ids();
        for &id in &ids {
            // Back-pressure: an application that leaves completions
            // unread gets no more work done until it reads them.
            work += self.take_posts_of(id, POSTS_PER_TURN, true);
        }
        ids.clear();
        self.ids = ids;
        work
    }

    /// Takes up to `max` work requests from attachment `id`'s post ring
    /// (none while its completions back up, if `pressure`).
    pub(super) fn take_posts_of(&mut self, id: u32, max: u32, pressure: bool) -> usize {
        let Some(a) = self.attachments.get_mut(&id) else {
            return 0;
        };
        if pressure && !a.backlog.is_empty() {
            return 0;
        }
        self.posts.clear();
        if !a.chan.take_posts(max, &mut self.posts) {
            a.counters.ring_violations += 1;
        }
        let posts = std::mem::take(&mut self.posts);
        for p in &posts {
            self.post(id, p);
        }
        let work = posts.len();
        self.posts = posts;
        work
    }

    /// Spreads the connections the stacks accepted on each port shared
    /// by `SO_REUSEPORT` sockets over those sockets' queues (by a hash of
    /// the peer's address and port); one hashed to a full queue is reset.
    fn spread_accepted(&mut self) -> usize {
        let mut work = 0;
        for (&port, p) in self.listeners.iter_mut().filter(|(_, p)| p.spread()) {
            while let Some((conn, _)) = self.queues.accept(port) {
                work += 1;
                let to = self
                    .queues
                    .endpoints(conn)
                    .and_then(|(_, peer)| p.pick(peer));
                let Some(i) = to else {
                    self.counters.wrong_family += 1;
                    self.queues.close(conn, true).ok();
                    continue;
                };
                let q = &mut p.sockets[i].queue;
                if q.len() >= ports::MAX_SOCKET_QUEUE {
                    self.counters.accept_overflow += 1;
                    self.queues.close(conn, true).ok();
                } else {
                    q.push_back(conn);
                }
            }
        }
        work
    }
}

/// Connections listening socket `l` may accept: its own queue's (a
/// reuseport group's share), and the stack's accept queue unless the
/// port is spread over several sockets.
fn waiting(
    listeners: &HashMap<u16, ports::Port>,
    queues: &queues::Queues,
    l: attachment::Listening,
) -> Option<u64> {
    match listeners.get(&l.port) {
        Some(p) if p.spread() => p.waiting_on(l.socket),
        Some(p) => queues
            .queued(l.port)
            .map(|n| n + p.waiting_on(l.socket).unwrap_or(0)),
        None => queues.queued(l.port),
    }
}

#[cfg(test)]
mod tests;
