//! The socket table the shim's lock guards ([`State`]): our sockets
//! (listeners and streams), the descriptors naming them, the epoll
//! instances holding them, and what a pass of the stack changes in them
//! (completions, accepted connections).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::backend::{Backend, BackendError};
use datapath::nic::EventFd;
use transports::segment::CloseReason;
use zerosplit::attach::{AttachError, ListenSocket};
use zerosplit::daemon::Families;
use zerosplit::provider::Provider;
use zerosplit::provider::{CompletionKind, ConnId};
use zerosplit::stream::{Rings, RingsState};

use crate::interest::Epoll;
use crate::layer::CResult;
use crate::opts::Opts;
use crate::setup::{Setup, RING_BUF, RING_BUFS};

/// A socket's id in the table (several fds may name one socket).
pub(crate) type SockId = u64;

/// A socket of ours.
#[derive(Debug)]
pub(crate) struct Sock {
    /// Descriptors naming it.
    pub refs: usize,
    /// Calls blocked on it: each holds it as a call holds its open file
    /// on Linux, so closing the descriptor meanwhile (and the number
    /// naming a new socket) never moves the call to another socket; the
    /// socket is released when the last descriptor and call are gone.
    pub calls: usize,
    /// `O_NONBLOCK` (shared by its descriptors, as the open file is).
    pub nonblock: bool,
    pub kind: Kind,
    pub opts: Opts,
}

// Most sockets are streams: boxing them to shrink the rare listener's
// entry would cost an allocation per connection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Kind {
    Listener(Listener),
    Stream(Stream),
}

#[derive(Debug)]
pub(crate) struct Listener {
    /// Its name: the address bound (IPv4 for a v4-mapped one), as the
    /// socket's family shows it through [`crate::family::named`].
    pub local: SocketAddr,
    /// The families of peers it takes.
    pub families: Families,
    /// The daemon's socket (attached); the own stack's listener on the
    /// port otherwise.
    pub socket: Option<ListenSocket>,
    /// `SO_REUSEPORT`: other listeners may share the port.
    pub reuseport: bool,
    /// Established connections not yet accepted (their sockets, no fd yet).
    pub backlog: VecDeque<SockId>,
    pub max_backlog: usize,
}

#[derive(Debug)]
pub(crate) struct Stream {
    pub conn: ConnId,
    /// Registered when the application has the socket (connect, accept;
    /// attached, at its first use: [`State::ensure_rings`]).
    pub rings: Option<Rings>,
    /// Accepted and not used yet: no rings, nothing posted, so a
    /// process forked now (a fork-per-connection server) hands it to its
    /// child whole.
    pub lazy: bool,
    /// In a forked child: the parent's rings as they were at the fork.
    /// At its first use here the connection is taken up with its bytes
    /// once the parent let go of it ([`State::take_up_parked`]).
    pub inherited: Option<RingsState>,
    /// It had rings when this process forked: a child may hold it, so
    /// closing it here parks it for the child ([`State::park`]).
    pub forked: bool,
    /// The connection id is valid (no `Closed` completion yet).
    pub alive: bool,
    pub connected: bool,
    /// The peer's FIN after this many stream bytes.
    pub peer_fin: Option<u64>,
    pub closed: Option<CloseReason>,
    /// `SO_ERROR` not yet read.
    pub so_error: Option<i32>,
    /// A reset was reported once (later calls see EOF / `EPIPE`).
    pub reset_reported: bool,
    pub shut_rd: bool,
    pub shut_wr: bool,
    /// Posted sends not yet acknowledged.
    pub sends: usize,
    /// Last in-order and acknowledged counts seen (kept after close).
    pub received: u64,
    pub acked: u64,
    /// Addresses as on the wire (IPv4 or IPv6).
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// The urgent byte's stream offset, as the transport last marked it.
    pub urgent: Option<u64>,
    /// That byte was read with `MSG_OOB`.
    pub oob_read: bool,
}

/// Everything the lock guards.
#[derive(Debug)]
pub(crate) struct State {
    pub stack: Backend,
    pub fds: HashMap<RawFd, SockId>,
    pub socks: HashMap<SockId, Sock>,
    pub by_conn: HashMap<ConnId, SockId>,
    /// Listeners by port (several: a `SO_REUSEPORT` group), oldest first.
    pub listeners: HashMap<u16, Vec<SockId>>,
    /// Ports whose listener the program closed: the stack still listens
    /// there (it has no unlisten), so what it accepts is reset.
    pub closed_ports: std::collections::HashSet<u16>,
    /// Connections the application closed, until the TCP is done with
    /// them (their rings are released then).
    pub orphans: HashMap<ConnId, Option<Rings>>,
    pub epolls: HashMap<RawFd, Epoll>,
    /// Threads asleep in a wait.
    pub sleepers: Vec<Arc<EventFd>>,
    next_id: SockId,
    pub setup: Setup,
    /// Connections reset because no ring memory was left.
    pub no_memory: u64,
    /// Connections reset because the backlog of the listener of a
    /// reuseport group their peer hashed to was full.
    pub accept_overflow: u64,
    /// Connections reset because no listener on their port takes their
    /// peer's family (an IPv6-only listener's IPv4 peer, say).
    pub wrong_family: u64,
    /// Connections parked for a child to take up: their rings stay in
    /// [`State::orphans`] until it did (or the connection closed).
    pub parked: std::collections::HashSet<ConnId>,
    /// Rings of closed connections, kept for the next ones.
    pub spare: Vec<Rings>,
    /// Regions the program before an `execve` held that no socket here
    /// uses: deregistered once nothing is posted on them any more.
    pub unused_regions: Vec<datapath::mr::MrId>,
}

/// Closed connections' rings kept for new ones (4 MiB of registered
/// memory each way at the default ring size: a server's worth of churn
/// without a registration per connection).
const SPARE_RINGS: usize = 32;

impl State {
    /// An empty table over `stack`.
    pub(crate) fn new(stack: Backend, setup: Setup) -> Self {
        State {
            stack,
            fds: HashMap::new(),
            socks: HashMap::new(),
            by_conn: HashMap::new(),
            listeners: HashMap::new(),
            closed_ports: Default::default(),
            orphans: HashMap::new(),
            epolls: HashMap::new(),
            sleepers: Vec::new(),
            next_id: 1,
            setup,
            no_memory: 0,
            accept_overflow: 0,
            wrong_family: 0,
            spare: Vec::new(),
            parked: std::collections::HashSet::new(),
            unused_regions: Vec::new(),
        }
    }

    /// Takes the completions and accepted connections after a pass;
    /// whether anything changed for a socket.
    pub(crate) fn dispatch(&mut self) -> usize {
        let mut events = 0;
        while let Some(c) = self.stack.poll_completion() {
            events += 1;
            if let CompletionKind::Closed(_) = c.kind {
                self.free_unused_regions();
                self.parked.remove(&c.conn);
                if let Some(rings) = self.orphans.remove(&c.conn) {
                    if let Some(r) = rings {
                        self.spare_rings(r);
                    }
                    continue;
                }
            }
            let Some(id) = self.by_conn.get(&c.conn).copied() else {
                continue;
            };
            let Some(Kind::Stream(s)) = self.socks.get_mut(&id).map(|s| &mut s.kind) else {
                continue;
            };
            match c.kind {
                CompletionKind::Connected => s.connected = true,
                CompletionKind::PeerClosed { len } => {
                    s.peer_fin = Some(len);
                    s.received = s.received.max(len);
                }
                CompletionKind::Send => s.sends = s.sends.saturating_sub(1),
                CompletionKind::Recv => {}
                CompletionKind::Closed(reason) => {
                    s.alive = false;
                    s.closed = Some(reason);
                    s.so_error = match reason {
                        CloseReason::Refused => Some(libc::ECONNREFUSED),
                        CloseReason::Reset => Some(libc::ECONNRESET),
                        CloseReason::TimedOut => Some(libc::ETIMEDOUT),
                        _ => s.so_error,
                    };
                    self.by_conn.remove(&c.conn);
                }
            }
        }
        events + self.take_handed() + self.take_accepted()
    }

    /// Moves established connections from the stack's accept queues to
    /// their listeners' backlogs (up to each backlog); a port with
    /// several (`SO_REUSEPORT`) spreads them by a hash of the peer, as
    /// Linux does, and one hashed to a full backlog is reset (counted in
    /// `accept_overflow`). Attached, none move: the daemon's accept queue
    /// is shared with every process that holds the socket, and `accept`
    /// takes from it ([`State::pull_accepted`]).
    fn take_accepted(&mut self) -> usize {
        if self.stack.is_attached() {
            return 0;
        }
        let mut moved = 0;
        for &port in &self.closed_ports {
            while let Ok(Some(conn)) = self.stack.accept(port) {
                let _ = self.stack.abort(conn);
                moved += 1;
            }
        }
        let ports: Vec<(u16, Vec<SockId>)> = self
            .listeners
            .iter()
            .map(|(&p, v)| (p, v.clone()))
            .collect();
        for (port, lids) in ports {
            while lids.iter().any(|&lid| self.backlog_room(lid)) {
                let Some(id) = self.pull_accepted(port, None) else {
                    break;
                };
                moved += 1;
                let peer = match self.socks.get(&id).map(|s| &s.kind) {
                    Some(Kind::Stream(s)) => s.peer,
                    _ => continue,
                };
                let families = lids
                    .iter()
                    .map(|lid| match self.socks.get(lid).map(|s| &s.kind) {
                        Some(Kind::Listener(l)) => l.families,
                        _ => Families::BOTH,
                    });
                let Some(lid) = zerosplit::daemon::reuseport_pick(peer, families).map(|i| lids[i])
                else {
                    self.wrong_family += 1;
                    self.abort_unaccepted(id);
                    continue;
                };
                if !self.backlog_room(lid) {
                    self.accept_overflow += 1;
                    self.abort_unaccepted(id);
                    continue;
                }
                if let Some(Kind::Listener(l)) = self.socks.get_mut(&lid).map(|s| &mut s.kind) {
                    l.backlog.push_back(id);
                }
            }
        }
        moved
    }

    /// Narrows the own stack's listening `port` to the families its
    /// listeners take (an IPv6 peer of a port with IPv4 listeners only is
    /// refused by the kernel, as by Linux).
    pub(crate) fn steer_families(&mut self, port: u16) {
        let bits = self
            .listeners
            .get(&port)
            .into_iter()
            .flatten()
            .fold(0, |b, id| match self.socks.get(id).map(|s| &s.kind) {
                Some(Kind::Listener(l)) => b | l.families.bits(),
                _ => b,
            });
        if let Some(families) = Families::from_bits(bits) {
            if let Err(e) = self.stack.listen_families(port, families) {
                crate::log::log_line(&format!("listening on port {port}: {e}"));
            }
        }
    }

    /// Whether listener `lid`'s backlog has room.
    fn backlog_room(&self, lid: SockId) -> bool {
        match self.socks.get(&lid).map(|s| &s.kind) {
            Some(Kind::Listener(l)) => l.backlog.len() < l.max_backlog,
            _ => false,
        }
    }

    /// Resets accepted connection `id`, which no listener took.
    fn abort_unaccepted(&mut self, id: SockId) {
        if let Some(Sock {
            kind: Kind::Stream(s),
            ..
        }) = self.socks.remove(&id)
        {
            self.by_conn.remove(&s.conn);
            let _ = self.stack.abort(s.conn);
        }
    }

    /// One connection from a listener's accept queue (the daemon's
    /// `socket` attached, the own stack's on `port` otherwise), as a
    /// socket without a descriptor yet.
    pub(crate) fn pull_accepted(
        &mut self,
        port: u16,
        socket: Option<ListenSocket>,
    ) -> Option<SockId> {
        loop {
            let conn = self.stack.accept_on(port, socket).ok()??;
            let Some((local, peer)) = self.stack.endpoints(conn) else {
                let _ = self.stack.abort(conn);
                continue;
            };
            let id = self.insert(Sock {
                refs: 0,
                calls: 0,
                nonblock: false,
                kind: Kind::Stream(Stream::new(conn, local, peer, true)),
                opts: Opts::default(),
            });
            self.by_conn.insert(conn, id);
            return Some(id);
        }
    }

    /// Rings for connection `conn`: a closed connection's kept spare
    /// ([`State::spare_rings`]), else registered.
    pub(crate) fn rings_for(&mut self, conn: ConnId) -> std::io::Result<Rings> {
        match self.spare.pop() {
            Some(r) => r.recycle(&mut self.stack, conn),
            None => Rings::open(&mut self.stack, conn, RING_BUFS, RING_BUF),
        }
    }

    /// Deregisters the regions of [`State::unused_regions`] nothing is
    /// posted on any more.
    pub(crate) fn free_unused_regions(&mut self) {
        let mut regions = std::mem::take(&mut self.unused_regions);
        regions.retain(|&mr| match self.stack.deregister_memory(mr) {
            Ok(()) => false,
            Err(BackendError::Daemon(AttachError::UnknownRegion(_))) => false,
            Err(_) => true,
        });
        self.unused_regions = regions;
    }

    /// Keeps the rings of a closed connection (nothing is posted on them
    /// any more) for the next one, up to [`SPARE_RINGS`]; deregisters the
    /// rest.
    pub(crate) fn spare_rings(&mut self, r: Rings) {
        if self.spare.len() < SPARE_RINGS {
            self.spare.push(r);
        } else {
            r.release(&mut self.stack);
        }
    }

    /// Registers the rings of stream `id` if it was accepted lazily
    /// ([`Stream::lazy`]); a stream no memory is left for is reset.
    pub(crate) fn ensure_rings(&mut self, id: SockId) {
        let Some(Kind::Stream(s)) = self.socks.get_mut(&id).map(|s| &mut s.kind) else {
            return;
        };
        if !std::mem::take(&mut s.lazy) || !s.alive {
            return;
        }
        if let Some(old) = s.inherited.take() {
            self.take_up_parked(id, old);
            return;
        }
        // Attached, another process may hold it too (fork): it becomes
        // this one's now, unless the other already read or wrote it.
        if self.stack.is_attached() {
            if let Err(e) = self.stack.adopt(s.conn) {
                crate::log::log_line(&format!(
                    "the connection to {} is another process's: {e}",
                    s.peer
                ));
                self.lose_stream(id);
                return;
            }
        }
        let conn = s.conn;
        let rings = self.rings_for(conn);
        let Some(Kind::Stream(s)) = self.socks.get_mut(&id).map(|s| &mut s.kind) else {
            if let Ok(r) = rings {
                self.spare_rings(r);
            }
            return;
        };
        match rings {
            Ok(r) => s.rings = Some(r),
            Err(e) => {
                self.no_memory += 1;
                crate::log::log_line(&format!(
                    "no registered memory left for a connection's rings ({e}): reset it (raise the daemon's daemon.memory_per_attachment)"
                ));
                let _ = self.stack.abort(s.conn);
            }
        }
    }

    pub(crate) fn insert(&mut self, sock: Sock) -> SockId {
        let id = self.next_id;
        self.next_id += 1;
        self.socks.insert(id, sock);
        id
    }

    /// The id of the socket `fd` names.
    pub(crate) fn id_of(&self, fd: RawFd) -> CResult<SockId> {
        self.fds.get(&fd).copied().ok_or(libc::EBADF)
    }

    /// The stream `id` and the stack (`EBADF` once released, `ENOTCONN`
    /// for a listener).
    pub(crate) fn stream_by_id(&mut self, id: SockId) -> CResult<(&mut Backend, &mut Stream)> {
        match self.socks.get_mut(&id).map(|s| &mut s.kind) {
            Some(Kind::Stream(s)) => Ok((&mut self.stack, s)),
            Some(Kind::Listener(_)) => Err(libc::ENOTCONN),
            None => Err(libc::EBADF),
        }
    }

    /// A call holding `id` ended: releases the socket if no descriptor
    /// names it any more (true then).
    pub(crate) fn unhold(&mut self, id: SockId) -> bool {
        let last = self.socks.get_mut(&id).is_some_and(|s| {
            s.calls = s.calls.saturating_sub(1);
            s.calls == 0 && s.refs == 0
        });
        if last {
            self.release(id);
        }
        last
    }

    /// The socket `fd` names.
    pub(crate) fn sock(&mut self, fd: RawFd) -> CResult<(SockId, &mut Sock)> {
        let id = *self.fds.get(&fd).ok_or(libc::EBADF)?;
        self.socks.get_mut(&id).map(|s| (id, s)).ok_or(libc::EBADF)
    }

    /// The stream `fd` names (its rings registered: it is being used),
    /// or `ENOTCONN` for a listener.
    pub(crate) fn stream(&mut self, fd: RawFd) -> CResult<(&mut Backend, &mut Sock)> {
        let id = *self.fds.get(&fd).ok_or(libc::EBADF)?;
        self.ensure_rings(id);
        let sock = self.socks.get_mut(&id).ok_or(libc::EBADF)?;
        match sock.kind {
            Kind::Stream(_) => Ok((&mut self.stack, sock)),
            Kind::Listener(_) => Err(libc::ENOTCONN),
        }
    }

    /// Releases socket `id` once no descriptor names it: a stream with
    /// unread bytes is reset (as Linux does), else closed after its
    /// posted bytes; a listener's unaccepted connections are reset.
    pub(crate) fn release(&mut self, id: SockId) {
        let Some(sock) = self.socks.remove(&id) else {
            return;
        };
        match sock.kind {
            Kind::Listener(l) => {
                let port = l.local.port();
                let last = self.listeners.get_mut(&port).is_none_or(|v| {
                    v.retain(|&s| s != id);
                    v.is_empty()
                });
                if last {
                    self.listeners.remove(&port);
                } else {
                    self.steer_families(port);
                }
                if self.stack.is_attached() {
                    // The daemon's socket closes once no process holds it.
                    let _ = self.stack.close_listener(port, l.socket);
                } else if last {
                    self.closed_ports.insert(port);
                }
                for pending in l.backlog {
                    self.release(pending);
                }
            }
            Kind::Stream(mut s) => {
                self.by_conn.remove(&s.conn);
                if !s.alive {
                    if let Some(r) = s.rings.take() {
                        self.spare_rings(r);
                    }
                    return;
                }
                if s.forked && !sock.opts.linger_zero() && self.park(&mut s) {
                    return;
                }
                // One its parent used and this process never took up: the
                // daemon knows what was read (it closes it with the last
                // holder).
                let unread = s.inherited.is_none()
                    && s.received(&self.stack) > s.rings.as_ref().map_or(0, Rings::read_total);
                let abort = unread || sock.opts.linger_zero();
                let r = if abort {
                    self.stack.abort(s.conn)
                } else {
                    self.stack.close(s.conn)
                };
                if r.is_ok() {
                    self.orphans.insert(s.conn, s.rings.take());
                } else if let Some(r) = s.rings.take() {
                    r.release(&mut self.stack);
                }
            }
        }
    }
}

impl Stream {
    pub(crate) fn new(conn: ConnId, local: SocketAddr, peer: SocketAddr, connected: bool) -> Self {
        Stream {
            conn,
            rings: None,
            lazy: false,
            inherited: None,
            forked: false,
            alive: true,
            connected,
            peer_fin: None,
            closed: None,
            so_error: None,
            reset_reported: false,
            shut_rd: false,
            shut_wr: false,
            sends: 0,
            received: 0,
            acked: 0,
            local,
            peer,
            urgent: None,
            oob_read: false,
        }
    }

    /// The urgent byte's stream offset (it may not have arrived) while
    /// reads have not passed it; a new mark from the transport replaces
    /// the old one (and may be read with `MSG_OOB` again).
    pub(crate) fn urgent_mark(&mut self, stack: &Backend) -> Option<u64> {
        if self.alive {
            if let Some(at) = stack.urgent_mark(self.conn) {
                if self.urgent.is_none_or(|u| at > u) {
                    self.urgent = Some(at);
                    self.oob_read = false;
                }
            }
        }
        let read = self.rings.as_ref().map_or(0, Rings::read_total);
        self.urgent.filter(|&u| u >= read)
    }

    /// In-order receive-stream bytes (the last count seen once closed).
    pub(crate) fn received(&mut self, stack: &Backend) -> u64 {
        if self.alive {
            if let Ok(r) = stack.received(self.conn) {
                self.received = self.received.max(r);
            }
        }
        self.received
    }

    /// Acknowledged send-stream bytes (the last count seen once closed).
    pub(crate) fn acked(&mut self, stack: &Backend) -> u64 {
        if self.alive {
            if let Ok(a) = stack.acked(self.conn) {
                self.acked = self.acked.max(a);
            }
        }
        self.acked
    }

    /// Bytes ready to read.
    pub(crate) fn readable(&mut self, stack: &Backend) -> u64 {
        let received = self.received(stack);
        self.rings.as_ref().map_or(0, |r| r.readable(received))
    }

    /// The peer sent FIN and everything before it was read.
    pub(crate) fn at_eof(&mut self, stack: &Backend) -> bool {
        let read = self.rings.as_ref().map_or(0, Rings::read_total);
        self.peer_fin.is_some_and(|len| read >= len)
            || (self.closed.is_some() && self.readable(stack) == 0)
    }

    /// Room to write now.
    pub(crate) fn writable(&mut self, stack: &Backend, max_sends: usize) -> u64 {
        if !self.connected
            || !self.alive
            || self.shut_wr
            || self.sends >= max_sends
            || !stack.send_room()
        {
            return 0;
        }
        let acked = self.acked(stack);
        self.rings.as_ref().map_or(0, |r| r.send_space(acked))
    }
}
