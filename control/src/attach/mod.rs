//! The provider library over a daemon: [`attach`] connects to
//! `zerosplit daemon` and returns an [`Attached`] that implements the same
//! [`Provider`] as an in-process stack, so every front-end (stream facade,
//! `nc`, bench endpoint, services) runs either way.
//!
//! - Control (register memory, listen, connect, close, stats) is a
//!   request and its reply on the daemon's Unix socket ([`crate::ipc::msg`]).
//! - Registered memory lives in the attachment's memory slot: a memfd the
//!   daemon passed at attach time, part of the UMEM, mapped here and in the
//!   daemon. [`Provider::memory_mut`] is this process's own mapping of it:
//!   the datapath places received payload there and sends from there.
//! - Work requests go on the post ring and completions come back on the
//!   completion ring (shared memory, single producer and consumer each);
//!   a doorbell (eventfd) is rung only when the other side said it sleeps.
//! - Progress of each connection (`received`, `acked`, `state`) is read
//!   from the channel's status table, which the daemon keeps current.
//!
//! Every check the daemon makes on a work request is made here first, so
//! a well-behaved application learns of a mistake as an error from
//! [`Provider::post`] (the daemon would abort the connection instead). A
//! daemon that dies ends every connection (`Closed(Aborted)` completions)
//! and every later call fails with [`AttachError::Lost`]; nothing waits
//! for it beyond the wait asked for.

mod calls;
mod carry;
mod handover;
mod intern;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use datapath::mr::{Access, MrId};
use datapath::nic::EventFd;
use datapath::shm::{SharedMemory, ShmError};

use crate::idmap::{ConnId, ConnMap};
use crate::ipc::channel::{AppEnd, ChannelError, Layout};
use crate::ipc::msg::{DecodeError, ErrorCode, Reply, Request, Welcome, MAX_MESSAGE};
use crate::ipc::sock::{self, Received};
use crate::provider::Completion;

/// How long a control request may wait for its reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// An attached provider call failed.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// No daemon at the socket, or it refused the connection.
    #[error("connecting to the daemon at {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The daemon is gone (exited, killed): every connection ended.
    #[error("the zerosplit daemon is gone")]
    Lost,
    /// The daemon did not answer in time.
    #[error("the daemon did not answer within {0:?}")]
    Timeout(Duration),
    /// The daemon refused the request.
    #[error("the daemon refused: {message} ({code:?})")]
    Refused {
        /// What kind of refusal.
        code: ErrorCode,
        /// Its words.
        message: String,
    },
    /// The daemon's answer made no sense.
    #[error("bad answer from the daemon: {0}")]
    Protocol(String),
    /// The memory or channel the daemon passed could not be mapped.
    #[error("mapping the daemon's memory: {0}")]
    Memory(#[from] ShmError),
    /// A socket call failed.
    #[error("daemon socket: {0}")]
    Io(#[from] std::io::Error),
    /// Not a connection of this application.
    #[error("unknown connection {0:?}")]
    UnknownConnection(ConnId),
    /// Not a region of this application.
    #[error("unknown memory region {0:?}")]
    UnknownRegion(MrId),
    /// The range lies outside the region, or the region lacks the access.
    #[error("{len} bytes at {offset} of region {mr:?} ({region_len} bytes, {access:?}) cannot be posted")]
    Range {
        /// The region.
        mr: MrId,
        /// Offset asked for.
        offset: usize,
        /// Bytes asked for.
        len: usize,
        /// Bytes of the region.
        region_len: usize,
        /// Its access.
        access: Access,
    },
    /// A limit the daemon gave this application (named).
    #[error("limit reached: {0}")]
    Limit(String),
    /// Not listening on the port.
    #[error("not listening on port {0}")]
    NotListening(u16),
    /// Not holding the listening socket.
    #[error("not holding listening socket {0}")]
    UnknownSocket(u32),
    /// An IPv6 peer, and the daemon serves no IPv6 address.
    #[error("{0}: the daemon serves no IPv6 address on its interface (IPv4 peers only)")]
    Ipv6(std::net::SocketAddr),
}

/// A listening socket of the daemon's, by its number (an application
/// may hold several on one port: a `SO_REUSEPORT` group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenSocket(pub u32);

impl From<DecodeError> for AttachError {
    fn from(e: DecodeError) -> Self {
        AttachError::Protocol(e.to_string())
    }
}

impl From<ChannelError> for AttachError {
    fn from(e: ChannelError) -> Self {
        match e {
            ChannelError::Memory(m) => m.into(),
            ChannelError::Ring(r) => Self::Protocol(r.to_string()),
        }
    }
}

/// A region of the memory slot.
#[derive(Debug, Clone, Copy)]
struct Region {
    offset: usize,
    len: usize,
    access: Access,
}

/// A connection: its status entry and what it has posted, per direction.
#[derive(Debug, Clone, Copy)]
struct Local {
    slot: u32,
    recv: u32,
    send: u32,
}

impl Local {
    /// A connection at status entry `slot`, nothing posted yet.
    fn at(slot: u32) -> Local {
        Local {
            slot,
            recv: 0,
            send: 0,
        }
    }
}

/// A [`Provider`](crate::provider::Provider) attached to a daemon.
#[derive(Debug)]
pub struct Attached {
    sock: OwnedFd,
    memory: SharedMemory,
    chan: AppEnd,
    wake_daemon: EventFd,
    wake_app: EventFd,
    welcome: Welcome,
    regions: HashMap<MrId, Region>,
    conns: ConnMap<Local>,
    /// Listening sockets opened (or held, inherited): each one's port
    /// and the status entry showing its accept queue.
    listening: HashMap<ListenSocket, (u16, u32)>,
    /// Connections held (inherited from the process this one was forked
    /// from) and not adopted: no status entry here.
    held: ConnMap<()>,
    /// Connections parked for another holder ([`Attached::park`]): still
    /// this one's until the daemon says it was taken up.
    parked: ConnMap<()>,
    /// Parked connections taken up since [`Attached::take_handed`].
    handed: Vec<ConnId>,
    /// Addresses of accepted and adopted connections, as the daemon gave
    /// them with the connection.
    addresses: ConnMap<(SocketAddr, SocketAddr)>,
    cq: VecDeque<Completion>,
    posted: u32,
    /// Control requests: the last sequence number, the receive buffer
    /// (cells: the provider's counter calls take `&self`).
    seq: Cell<u32>,
    buf: RefCell<Vec<u8>>,
    /// The daemon hung up; `ended`: its connections were ended.
    lost: Cell<bool>,
    ended: bool,
    polls: u32,
    /// The daemon's progress counter as last seen.
    progress: u64,
    /// A copy in a forked child of its parent's attachment: dropping it
    /// must not detach the parent.
    forked_copy: bool,
    /// The daemon welcomed this program back as the attachment the one it
    /// exec'd from held: that program's tables may be carried in
    /// ([`Attached::take_region`], [`Attached::take_conn`]).
    resumed: bool,
    /// When `poll` spins, yields or sleeps (`threads.poll`'s defaults).
    idle: crate::idle::IdlePolicy,
    epoch: std::time::Instant,
}

/// Attaches to the daemon listening at `path`.
///
/// # Errors
/// No daemon there, it refused (at its attachment limit, say), or what it
/// passed could not be mapped.
pub fn attach(path: impl AsRef<Path>) -> Result<Attached, AttachError> {
    attach_as(path.as_ref(), 0)
}

/// Attaches a process forked from the one holding attachment `parent`:
/// the daemon checks that this process is its child and makes the new
/// attachment a holder of the parent's listeners and connections
/// ([`Attached::listen`] again on an inherited port gives its accept
/// queue, [`Attached::adopt`] an inherited connection).
///
/// # Errors
/// As [`attach`], or the daemon refused the lineage.
pub fn attach_child(path: impl AsRef<Path>, parent: u32) -> Result<Attached, AttachError> {
    attach_as(path.as_ref(), parent)
}

fn attach_as(path: &Path, parent: u32) -> Result<Attached, AttachError> {
    let sock = sock::connect(path).map_err(|source| AttachError::Connect {
        path: path.to_path_buf(),
        source,
    })?;
    let name = std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default();
    let hello = Request::Hello { name, parent }.encode(0);
    sock::send(sock.as_fd(), &hello, &[])?;
    let mut buf = vec![0; MAX_MESSAGE];
    let (reply, fds) = receive(&sock, &mut buf, REPLY_TIMEOUT)?;
    let welcome = match Reply::decode(&buf[..reply])?.0 {
        Reply::Welcome(w) => w,
        Reply::Error { code, message } => return Err(AttachError::Refused { code, message }),
        other => {
            return Err(AttachError::Protocol(format!(
                "{other:?} instead of a welcome"
            )))
        }
    };
    let [memory, channel, wake_daemon, wake_app]: [OwnedFd; 4] = fds
        .try_into()
        .map_err(|_| AttachError::Protocol("the welcome lacks its four descriptors".into()))?;
    let slot_len = usize::try_from(welcome.slot_len)
        .map_err(|_| AttachError::Protocol("memory slot too large".into()))?;
    let memory = SharedMemory::open(memory, slot_len)?;
    let layout = Layout {
        post_ring: welcome.post_ring,
        completion_ring: welcome.completion_ring,
        status_slots: welcome.max_connections,
    };
    let chan = AppEnd::open(channel, layout)?;
    let eventfd = |fd| {
        EventFd::from_received(fd).map_err(|e| AttachError::Protocol(format!("doorbell: {e}")))
    };
    let resumed = parent != 0 && welcome.attachment == parent;
    Ok(Attached {
        wake_daemon: eventfd(wake_daemon)?,
        wake_app: eventfd(wake_app)?,
        sock,
        memory,
        chan,
        welcome,
        regions: HashMap::new(),
        conns: ConnMap::default(),
        listening: HashMap::new(),
        held: ConnMap::default(),
        parked: ConnMap::default(),
        handed: Vec::new(),
        addresses: ConnMap::default(),
        forked_copy: false,
        resumed,
        cq: VecDeque::new(),
        posted: 0,
        seq: Cell::new(0),
        buf: RefCell::new(buf),
        lost: Cell::new(false),
        ended: false,
        polls: 0,
        progress: 0,
        idle: crate::idle::IdlePolicy::new(default_poll()),
        epoch: std::time::Instant::now(),
    })
}

/// How an attached application waits for completions unless told
/// otherwise ([`Attached::set_poll`]): it sleeps on its doorbell as soon as
/// none is waiting. The daemon polls the queues for every application; an
/// application that spins as well takes a core from the daemon or the peer
/// whenever they outnumber the cores, and the daemon's slices then land
/// between each completion and the application that waits for it (on 2
/// vCPUs: ping-pong 43–48 µs above in-process with the application
/// adaptive, 14–17 µs with it sleeping; docs/daemon.md). As Onload's
/// `EF_POLL_USEC=0`, spinning is the application's choice to make.
pub fn default_poll() -> crate::idle::PollConfig {
    crate::idle::PollConfig {
        mode: crate::idle::PollMode::Sleep,
        ..crate::idle::PollConfig::default()
    }
}

/// Waits up to `timeout` for one message on `sock`: its length (in `buf`)
/// and descriptors.
fn receive(
    sock: &OwnedFd,
    buf: &mut [u8],
    timeout: Duration,
) -> Result<(usize, Vec<OwnedFd>), AttachError> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match sock::recv(sock.as_fd(), buf, true)? {
            Received::Message {
                truncated: true, ..
            } => return Err(AttachError::Protocol("message too long".into())),
            Received::Message { len, fds, .. } => return Ok((len, fds)),
            Received::HangUp => return Err(AttachError::Lost),
            Received::Empty => {}
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(AttachError::Timeout(timeout));
        }
        datapath::nic::wait_readable(&[sock.as_fd()], left)
            .map_err(|e| AttachError::Io(e.into()))?;
    }
}

impl Attached {
    /// The daemon's number for this attachment.
    pub fn attachment(&self) -> u32 {
        self.welcome.attachment
    }

    /// The limits the daemon gave this application: connections and
    /// posted work requests.
    pub fn limits(&self) -> (u32, u32) {
        (self.welcome.max_connections, self.welcome.max_posted)
    }

    /// How [`Provider::poll`](crate::provider::Provider::poll) and
    /// `wait_completion` wait when nothing comes (default
    /// [`default_poll`]: sleep on the doorbell at once).
    pub fn set_poll(&mut self, config: crate::idle::PollConfig) {
        self.idle = crate::idle::IdlePolicy::new(config);
    }

    /// Whether the daemon is gone.
    pub fn is_lost(&self) -> bool {
        self.lost.get()
    }

    /// Work requests this application may still post before
    /// `daemon.max_posted` (its posted requests not yet completed).
    pub fn post_room(&self) -> u32 {
        self.welcome.max_posted.saturating_sub(self.posted)
    }

    /// Connection `id`'s local and remote addresses (one request).
    ///
    /// # Errors
    /// Not this application's connection, or the daemon is gone.
    pub fn endpoints(&self, id: ConnId) -> Result<(SocketAddr, SocketAddr), AttachError> {
        if let Some(&a) = self.addresses.get(&id) {
            return Ok(a);
        }
        self.local(id)?;
        match self.call(Request::Endpoints { conn: id.to_bits() })? {
            Reply::Endpoints { local, remote } => Ok((local, remote)),
            other => Err(AttachError::Protocol(format!(
                "{other:?} instead of endpoints"
            ))),
        }
    }

    /// For a caller that runs its own waiting loop (the socket shim):
    /// takes what the daemon completed into the completion queue, and
    /// now and then looks for a daemon that died. Returns how many.
    pub fn take_completions(&mut self) -> usize {
        self.polls = self.polls.wrapping_add(1);
        if self.polls.is_multiple_of(calls::POLLS_PER_LIVENESS_CHECK) {
            self.check_alive();
        }
        // Progress that is no completion (bytes received or acknowledged)
        // counts as work: readers and writers waiting must look.
        let progress = self.chan.progress();
        let moved = usize::from(std::mem::replace(&mut self.progress, progress) != progress);
        self.drain() + moved
    }

    /// What such a caller sleeps on: the doorbell, and the daemon's socket
    /// (readable when it hangs up) while it is there.
    pub fn wait_fds(&self) -> Vec<RawFd> {
        let mut fds = vec![self.wake_app.as_fd().as_raw_fd()];
        if !self.lost.get() {
            fds.push(self.sock.as_fd().as_raw_fd());
        }
        fds
    }

    /// Before such a caller sleeps: asks the daemon to ring the doorbell
    /// on its next completion. `false` when completions already wait (do
    /// not sleep; [`Attached::woke`] all the same).
    pub fn prepare_sleep(&mut self) -> bool {
        self.chan.set_app_asleep(true);
        !self.chan.completions_waiting() && self.chan.progress() == self.progress
    }

    /// After such a caller slept (or decided not to). `true` when the
    /// daemon rang: something completed, or a connection's progress
    /// (bytes received or acknowledged) moved, which the completion ring
    /// does not show: a caller with readers waiting wakes them.
    pub fn woke(&mut self) -> bool {
        self.chan.set_app_asleep(false);
        let rung = self.wake_app.drain();
        self.check_alive();
        rung || self.lost.get()
    }

    /// In a process forked from the one that attached: lets go of this
    /// copy (its descriptors; its memory was never mapped here, see
    /// [`SharedMemory::open`]) without detaching the parent, which still
    /// uses the same attachment.
    pub fn forget_in_child(mut self) {
        self.forked_copy = true;
    }

    /// Marks connection `id` as held (inherited from the parent) and not
    /// adopted yet.
    pub fn hold(&mut self, id: ConnId) {
        if !self.conns.contains_key(&id) {
            self.held.insert(id, ());
        }
    }

    /// Makes held connection `id` this application's own: its progress
    /// and completions come here, and it may post on it.
    ///
    /// # Errors
    /// Not held; [`ErrorCode::Busy`] while the process that held it
    /// before has work posted on it (it read or wrote it).
    pub fn adopt(&mut self, id: ConnId) -> Result<(), AttachError> {
        if self.conns.contains_key(&id) {
            return Ok(());
        }
        if !self.held.contains_key(&id) {
            return Err(AttachError::UnknownConnection(id));
        }
        match self.call(Request::Adopt { conn: id.to_bits() })? {
            Reply::Accepted {
                slot,
                local,
                remote,
                ..
            } => {
                self.held.remove(&id);
                self.addresses.insert(id, (local, remote));
                self.conns.insert(id, Local::at(slot));
                Ok(())
            }
            other => Err(AttachError::Protocol(format!(
                "{other:?} instead of an adoption"
            ))),
        }
    }

    /// Connections waiting in listening socket `socket`'s accept queue
    /// (shared by every holder of the socket), as the daemon last showed.
    pub fn pending(&self, socket: ListenSocket) -> u64 {
        let Some(&(port, slot)) = self.listening.get(&socket) else {
            return 0;
        };
        self.chan
            .status(slot)
            .filter(|s| s.conn == crate::ipc::desc::listener_tag(port))
            .map_or(0, |s| s.received)
    }

    /// Sends a request and waits for its reply.
    fn call(&self, req: Request) -> Result<Reply, AttachError> {
        if self.lost.get() {
            return Err(AttachError::Lost);
        }
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        if sock::send(self.sock.as_fd(), &req.encode(seq), &[]).is_err() {
            self.lost.set(true);
            return Err(AttachError::Lost);
        }
        let mut buf = self.buf.borrow_mut();
        loop {
            let len = match receive(&self.sock, &mut buf, REPLY_TIMEOUT) {
                Ok((len, _fds)) => len,
                Err(AttachError::Lost) => {
                    self.lost.set(true);
                    return Err(AttachError::Lost);
                }
                Err(e) => return Err(e),
            };
            let (reply, of) = Reply::decode(&buf[..len])?;
            if of != seq {
                // The answer to an earlier request that timed out.
                continue;
            }
            return match reply {
                Reply::Error { code, message } => Err(AttachError::Refused { code, message }),
                r => Ok(r),
            };
        }
    }

    /// Once the daemon is gone: every connection ends (a `Closed(Aborted)`
    /// completion each), every later call fails.
    fn end_if_lost(&mut self) {
        if !self.lost.get() || self.ended {
            return;
        }
        self.ended = true;
        for (&conn, _) in self.conns.iter() {
            self.cq.push_back(Completion {
                conn,
                kind: crate::provider::CompletionKind::Closed(
                    transports::segment::CloseReason::Aborted,
                ),
                wr_id: 0,
                len: 0,
            });
        }
        self.conns.clear();
        log::warn!("zerosplit: the daemon is gone; every connection ended");
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        if !self.lost.get() && !self.forked_copy {
            let seq = self.seq.get().wrapping_add(1);
            sock::send(self.sock.as_fd(), &Request::Detach.encode(seq), &[]).ok();
        }
    }
}

pub use carry::{CarriedConn, CarriedRegion};
pub use intern::intern;
