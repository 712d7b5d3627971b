//! The shim's stack and its polling thread, the socket table they share
//! under one lock, and how an application thread waits for them.
//!
//! The polling thread runs passes of the stack ([`Stack::poll_pass`]),
//! takes the completions and moves accepted connections to their
//! listeners; after a pass that did something it bumps
//! [`Runtime::generation`] and signals every thread asleep in a wait. When
//! idle (the `threads.poll` policy) it sleeps in `ppoll` on the queue's
//! sockets and its own eventfd **without the lock**, until a packet
//! arrives, an application thread posted something ([`Runtime::kick`]) or
//! the transport's next timer is due. An application thread that has to
//! wait runs passes itself for up to [`SPIN`] first ([`Runtime::wait`]);
//! while it does (`app_passes` moves) the polling thread sleeps
//! [`APP_GRACE`] at a time instead of competing for the lock and the core.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use datapath::cabi::{real, CResult};
use datapath::nic::EventFd;
use libc::{pollfd, sigset_t};
use transports::segment::CloseReason;
use transports::tcp::State as TcpState;

use super::setup::Setup;
use crate::idle::{Idle, IdlePolicy};
use crate::idmap::ConnId;
use crate::provider::CompletionKind;
use crate::provider::Provider;
use crate::stack::Stack;
use crate::stream::Rings;

/// A socket's id in the table (several fds may name one socket).
pub(super) type SockId = u64;

/// How long a waiting thread polls the stack itself before it sleeps:
/// under load the next packet comes sooner than a wakeup would.
const SPIN: Duration = Duration::from_micros(50);

/// How long a waiting thread spins: [`SPIN`], or `ZS_SHIM_SPIN_US`
/// (experiments).
fn spin_for() -> Duration {
    static US: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    US.get_or_init(|| {
        std::env::var("ZS_SHIM_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
    })
    .map_or(SPIN, Duration::from_micros)
}

/// How long the polling thread stays out of the way after it saw an
/// application thread poll.
const APP_GRACE: Duration = Duration::from_micros(50);

/// Spins the polling thread waits, after a pass, for an application thread
/// that wants the lock to take it.
const HANDOFF_SPINS: u32 = 2000;

/// A socket of ours.
#[derive(Debug)]
pub(super) struct Sock {
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
    pub opts: super::opts::Opts,
}

#[derive(Debug)]
pub(super) enum Kind {
    Listener(Listener),
    Stream(Stream),
}

#[derive(Debug)]
pub(super) struct Listener {
    pub local: SocketAddrV4,
    /// Established connections not yet accepted (their sockets, no fd yet).
    pub backlog: VecDeque<SockId>,
    pub max_backlog: usize,
}

#[derive(Debug)]
pub(super) struct Stream {
    pub conn: ConnId,
    /// Registered when the application has the socket (connect, accept).
    pub rings: Option<Rings>,
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
    pub local: SocketAddrV4,
    pub peer: SocketAddrV4,
    /// The urgent byte's stream offset, as the transport last marked it.
    pub urgent: Option<u64>,
    /// That byte was read with `MSG_OOB`.
    pub oob_read: bool,
}

/// One epoll instance's entries for our sockets.
#[derive(Debug, Default)]
pub(super) struct Epoll {
    pub entries: BTreeMap<RawFd, super::ready::Interest>,
}

/// Everything the lock guards.
#[derive(Debug)]
pub(super) struct State {
    pub stack: Stack,
    pub fds: HashMap<RawFd, SockId>,
    pub socks: HashMap<SockId, Sock>,
    pub by_conn: HashMap<ConnId, SockId>,
    pub listeners: HashMap<u16, SockId>,
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
}

/// The stack of this process and its polling thread.
#[derive(Debug)]
pub(super) struct Runtime {
    state: Mutex<State>,
    /// Wakes the polling thread.
    wake: EventFd,
    /// The polling thread sleeps (set under the lock).
    asleep: AtomicBool,
    /// Application threads waiting for the lock: the polling thread lets
    /// them in before its next pass.
    contenders: AtomicUsize,
    /// Passes that did work.
    generation: AtomicU64,
    /// Packet capture, when on.
    capture: Option<crate::capture::PcapTap>,
    /// The metrics endpoint, when on; serves until the process ends.
    _metrics: Option<crate::metrics::MetricsServer>,
    /// Passes application threads ran while they waited: while this moves,
    /// the polling thread stays out of their way.
    app_passes: AtomicU64,
}

thread_local! {
    /// This thread's wakeup, for its waits.
    static WAKER: Option<Arc<EventFd>> = EventFd::new().ok().map(Arc::new);
    /// This thread holds the lock: descriptors the stack itself closes or
    /// duplicates meanwhile (its per-flow sockets, a datagram that asks
    /// for an ARP answer) are never the program's, and must not take it
    /// again.
    static HOLDS_LOCK: Cell<bool> = const { Cell::new(false) };
    /// This thread works for the stack: it is starting it (opening the
    /// queue, netlink, the metrics endpoint's listener) or is the polling
    /// thread. Its sockets are the stack's own, never claimed: claiming
    /// the metrics listener re-entered the stack's start and hung.
    static STACK_OWN: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread works for the stack ([`STACK_OWN`]).
pub(super) fn stack_own() -> bool {
    STACK_OWN.with(Cell::get)
}

/// Marks this thread as the stack's while it lives (restoring the mark
/// it had when dropped).
struct StackOwn(bool);

impl StackOwn {
    fn enter() -> StackOwn {
        StackOwn(STACK_OWN.with(|o| o.replace(true)))
    }
}

impl Drop for StackOwn {
    fn drop(&mut self) {
        STACK_OWN.with(|o| o.set(self.0));
    }
}

/// Whether this thread holds the shim's lock.
pub(super) fn holds_lock() -> bool {
    HOLDS_LOCK.with(Cell::get)
}

/// The lock held ([`Runtime::lock`]).
#[derive(Debug)]
pub(super) struct Locked<'a>(MutexGuard<'a, State>);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        HOLDS_LOCK.with(|h| h.set(false));
    }
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.0
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.0
    }
}

impl Runtime {
    /// Opens the stack and starts the polling thread.
    pub(super) fn start(setup: &Setup) -> Result<Arc<Runtime>, String> {
        let _own = StackOwn::enter();
        let mut stack = Stack::new(&setup.iface.name, setup.stack.clone())
            .map_err(|e| format!("starting zerosplit on {}: {e}", setup.iface.name))?;
        let capture = match &setup.capture {
            Some((path, snaplen)) => {
                Some(crate::capture::PcapTap::create(path, *snaplen).map_err(|e| e.to_string())?)
            }
            None => None,
        };
        stack.set_capture(capture.as_ref().map(crate::capture::PcapTap::tap));
        let metrics = match setup.metrics {
            Some((addr, max_connections)) => {
                let board = crate::metrics::Board::new();
                let server = crate::metrics::serve_with(
                    addr,
                    std::sync::Arc::clone(&board),
                    max_connections,
                )
                .map_err(|e| e.to_string())?;
                stack.set_metrics(Some(board));
                super::log_line(&format!(
                    "metrics on http://{}/metrics (stats: /stats)",
                    server.addr()
                ));
                if let Some(warning) = server.exposure() {
                    super::log_line(&warning);
                }
                Some(server)
            }
            None => None,
        };
        let rt = Arc::new(Runtime {
            state: Mutex::new(State {
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
                setup: setup.clone(),
                no_memory: 0,
            }),
            wake: EventFd::new().map_err(|e| e.to_string())?,
            asleep: AtomicBool::new(false),
            contenders: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            app_passes: AtomicU64::new(0),
            capture,
            _metrics: metrics,
        });
        let poll = setup.stack.poll;
        let looper = Arc::clone(&rt);
        std::thread::Builder::new()
            .name("zerosplit-poll".into())
            .spawn(move || {
                let _own = StackOwn::enter();
                looper.run(IdlePolicy::new(poll));
            })
            .map_err(|e| format!("starting the polling thread: {e}"))?;
        Ok(rt)
    }

    /// The lock, for an application thread.
    pub(super) fn lock(&self) -> Locked<'_> {
        self.contenders.fetch_add(1, Ordering::AcqRel);
        let g = self.take_lock();
        self.contenders.fetch_sub(1, Ordering::AcqRel);
        g
    }

    fn take_lock(&self) -> Locked<'_> {
        let guard = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        HOLDS_LOCK.with(|h| h.set(true));
        Locked(guard)
    }

    /// Wakes the polling thread if it sleeps (after a post).
    pub(super) fn kick(&self) {
        if self.asleep.load(Ordering::Acquire) {
            self.wake.signal();
        }
    }

    /// One pass of the stack and its completions; tells the waiting
    /// threads when it did work.
    fn pass(&self, st: &mut Locked<'_>) -> usize {
        let mut work = st.stack.poll_pass();
        work += st.dispatch();
        if work > 0 {
            self.generation.fetch_add(1, Ordering::AcqRel);
            for s in st.sleepers.drain(..) {
                s.signal();
            }
        }
        work
    }

    /// The polling loop; never returns (the process's exit ends it).
    fn run(&self, mut idle: IdlePolicy) {
        let mut seen = self.app_passes.load(Ordering::Acquire);
        loop {
            // An application thread polls while it waits (as in
            // run-to-completion): stay out of its way until it stops.
            let app = self.app_passes.load(Ordering::Acquire);
            if app != seen {
                seen = app;
                std::thread::sleep(APP_GRACE);
                continue;
            }
            let mut st = self.take_lock();
            let work = self.pass(&mut st);
            let now = st.stack.now();
            let decision = idle.after(work, now, || st.stack.next_deadline());
            match decision {
                Idle::Sleep(limit) => {
                    let mut fds: Vec<pollfd> = st
                        .stack
                        .wait_fds()
                        .into_iter()
                        .chain(std::iter::once(self.wake.as_fd().as_raw_fd()))
                        .map(|fd| pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        })
                        .collect();
                    self.asleep.store(true, Ordering::Release);
                    drop(st);
                    let start = Instant::now();
                    let _ = real::ppoll(&mut fds, Some(limit), None);
                    self.asleep.store(false, Ordering::Release);
                    self.wake.drain();
                    idle.slept(start.elapsed());
                    idle.busy();
                }
                other => {
                    drop(st);
                    // Let waiting application threads have the lock.
                    let mut spins = 0;
                    while self.contenders.load(Ordering::Acquire) > 0 && spins < HANDOFF_SPINS {
                        std::hint::spin_loop();
                        spins += 1;
                    }
                    other.pause();
                }
            }
        }
    }

    /// Waits until the stack did work, `deadline` passes, one of `kernel`
    /// (kernel descriptors) is ready or a signal arrives; returns the lock
    /// again and how many of `kernel` are ready. With `spin`, first runs
    /// passes of the stack itself for up to [`SPIN`] (returning as soon as
    /// one did work); else sleeps on this thread's eventfd and `kernel`.
    pub(super) fn wait<'a>(
        &'a self,
        st: Locked<'a>,
        deadline: Option<Instant>,
        kernel: &mut [pollfd],
        sigmask: Option<&sigset_t>,
        spin: bool,
    ) -> CResult<(Locked<'a>, usize)> {
        let generation = self.generation.load(Ordering::Acquire);
        if spin && !spin_for().is_zero() {
            // Poll the stack itself for a while (no wakeup, no second
            // thread on the core), letting other threads in between.
            let until = Instant::now() + spin_for();
            let until = deadline.map_or(until, |d| d.min(until));
            let mut st = st;
            loop {
                let work = self.pass(&mut st);
                self.app_passes.fetch_add(1, Ordering::AcqRel);
                if work > 0
                    || self.generation.load(Ordering::Acquire) != generation
                    || Instant::now() >= until
                {
                    return Ok((st, 0));
                }
                drop(st);
                std::hint::spin_loop();
                st = self.lock();
            }
        }
        let Some(waker) = WAKER.with(Clone::clone) else {
            return Err(libc::ENOMEM);
        };
        let mut st = st;
        st.sleepers.push(Arc::clone(&waker));
        drop(st);
        let mut fds: Vec<pollfd> = Vec::with_capacity(kernel.len() + 1);
        fds.push(pollfd {
            fd: waker.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend_from_slice(kernel);
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let r = real::ppoll(&mut fds, timeout, sigmask);
        waker.drain();
        let mut st = self.lock();
        st.sleepers.retain(|s| !Arc::ptr_eq(s, &waker));
        let n = r?;
        let mut ready = 0;
        for (k, f) in kernel.iter_mut().zip(&fds[1..]) {
            k.revents = f.revents;
            if f.revents != 0 {
                ready += 1;
            }
        }
        let _ = n;
        Ok((st, ready))
    }

    /// Blocks the calling thread until `ready` says so (returning its
    /// value), the socket is non-blocking (`EAGAIN`), or `timeout` passes
    /// (`EAGAIN`, as `SO_RCVTIMEO` does); returns the lock in every case.
    /// A call that blocks runs in [`Runtime::holding`], and `ready` looks
    /// its socket up by id, never by descriptor: a descriptor closed
    /// meanwhile may name another socket by the next wake.
    pub(super) fn block<'a, T>(
        &'a self,
        mut st: Locked<'a>,
        nonblock: bool,
        timeout: Option<Duration>,
        mut ready: impl FnMut(&mut State) -> Option<CResult<T>>,
    ) -> (Locked<'a>, CResult<T>) {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut spins = 0;
        loop {
            if let Some(r) = ready(&mut st) {
                return (st, r);
            }
            if nonblock || deadline.is_some_and(|d| Instant::now() >= d) {
                return (st, Err(libc::EAGAIN));
            }
            spins += 1;
            match self.wait(st, deadline, &mut [], None, spins <= 2) {
                Ok((g, _)) => st = g,
                Err(e) => return (self.lock(), Err(e)),
            }
        }
    }

    /// Runs `call` on socket `id` holding it ([`Sock::calls`]), as a call
    /// holds its open file on Linux: closing the descriptor meanwhile
    /// leaves the socket to the call, and the socket is released when the
    /// call ends if no descriptor names it any more. `call` gets and gives
    /// back the lock.
    pub(super) fn holding<'a, T>(
        &'a self,
        mut st: Locked<'a>,
        id: SockId,
        call: impl FnOnce(Locked<'a>) -> (Locked<'a>, CResult<T>),
    ) -> CResult<T> {
        let Some(sock) = st.socks.get_mut(&id) else {
            return Err(libc::EBADF);
        };
        sock.calls += 1;
        let (mut st, r) = call(st);
        let released = st.unhold(id);
        drop(st);
        if released {
            self.kick();
        }
        r
    }
}

impl Runtime {
    /// Closes every socket (reset where unread bytes wait, as in
    /// [`State::release`]) and waits, at most `within`, until each
    /// connection's FIN is acknowledged.
    pub(super) fn drain_at_exit(&self, within: Duration) {
        let mut st = self.lock();
        if std::env::var_os("ZEROSPLIT_EXEC_STATS").is_some() {
            let (retx, rtos) = st.stack.retransmissions();
            super::log_line(&format!(
                "at exit: {retx} retransmitted segments, {rtos} RTOs, {} connections reset for want of ring memory; drops: {:?}",
                st.no_memory,
                st.stack.drops()
            ));
        }
        st.fds.clear();
        let ids: Vec<SockId> = st.socks.keys().copied().collect();
        for id in ids {
            st.release(id);
        }
        drop(st);
        self.kick();
        let end = Instant::now() + within;
        while Instant::now() < end {
            let st = self.lock();
            let done = st.orphans.keys().all(|&c| {
                st.stack.state(c).map_or(true, |s| {
                    matches!(
                        s,
                        TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed
                    )
                })
            });
            drop(st);
            if done {
                break;
            }
            self.kick();
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(c) = &self.capture {
            if let Err(e) = c.finish() {
                super::log_line(&format!("writing the capture file: {e}"));
            }
        }
    }
}

impl State {
    /// Takes the completions and accepted connections after a pass;
    /// whether anything changed for a socket.
    fn dispatch(&mut self) -> usize {
        let mut events = 0;
        while let Some(c) = self.stack.poll_completion() {
            events += 1;
            if let CompletionKind::Closed(_) = c.kind {
                if let Some(rings) = self.orphans.remove(&c.conn) {
                    if let Some(r) = rings {
                        r.release(&mut self.stack);
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
        events + self.take_accepted()
    }

    /// Moves established connections from the stack's accept queues to
    /// their listeners' backlogs (up to each backlog).
    fn take_accepted(&mut self) -> usize {
        let mut moved = 0;
        for &port in &self.closed_ports {
            while let Ok(Some(conn)) = self.stack.accept(port) {
                let _ = self.stack.abort(conn);
                moved += 1;
            }
        }
        let ports: Vec<(u16, SockId)> = self.listeners.iter().map(|(&p, &s)| (p, s)).collect();
        for (port, lid) in ports {
            loop {
                let room = match self.socks.get(&lid).map(|s| &s.kind) {
                    Some(Kind::Listener(l)) => l.backlog.len() < l.max_backlog,
                    _ => false,
                };
                if !room {
                    break;
                }
                let Ok(Some(conn)) = self.stack.accept(port) else {
                    break;
                };
                let Some((local, peer)) = self.stack.endpoints(conn) else {
                    let _ = self.stack.abort(conn);
                    continue;
                };
                let id = self.insert(Sock {
                    refs: 0,
                    calls: 0,
                    nonblock: false,
                    kind: Kind::Stream(Stream::new(conn, local, peer, true)),
                    opts: super::opts::Opts::default(),
                });
                self.by_conn.insert(conn, id);
                if let Some(Kind::Listener(l)) = self.socks.get_mut(&lid).map(|s| &mut s.kind) {
                    l.backlog.push_back(id);
                }
                moved += 1;
            }
        }
        moved
    }

    pub(super) fn insert(&mut self, sock: Sock) -> SockId {
        let id = self.next_id;
        self.next_id += 1;
        self.socks.insert(id, sock);
        id
    }

    /// The id of the socket `fd` names.
    pub(super) fn id_of(&self, fd: RawFd) -> CResult<SockId> {
        self.fds.get(&fd).copied().ok_or(libc::EBADF)
    }

    /// The stream `id` and the stack (`EBADF` once released, `ENOTCONN`
    /// for a listener).
    pub(super) fn stream_by_id(&mut self, id: SockId) -> CResult<(&mut Stack, &mut Stream)> {
        match self.socks.get_mut(&id).map(|s| &mut s.kind) {
            Some(Kind::Stream(s)) => Ok((&mut self.stack, s)),
            Some(Kind::Listener(_)) => Err(libc::ENOTCONN),
            None => Err(libc::EBADF),
        }
    }

    /// A call holding `id` ended: releases the socket if no descriptor
    /// names it any more (true then).
    pub(super) fn unhold(&mut self, id: SockId) -> bool {
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
    pub(super) fn sock(&mut self, fd: RawFd) -> CResult<(SockId, &mut Sock)> {
        let id = *self.fds.get(&fd).ok_or(libc::EBADF)?;
        self.socks.get_mut(&id).map(|s| (id, s)).ok_or(libc::EBADF)
    }

    /// The stream `fd` names, or `ENOTCONN` for a listener.
    pub(super) fn stream(&mut self, fd: RawFd) -> CResult<(&mut Stack, &mut Sock)> {
        let id = *self.fds.get(&fd).ok_or(libc::EBADF)?;
        let sock = self.socks.get_mut(&id).ok_or(libc::EBADF)?;
        match sock.kind {
            Kind::Stream(_) => Ok((&mut self.stack, sock)),
            Kind::Listener(_) => Err(libc::ENOTCONN),
        }
    }

    /// Releases socket `id` once no descriptor names it: a stream with
    /// unread bytes is reset (as Linux does), else closed after its
    /// posted bytes; a listener's unaccepted connections are reset.
    pub(super) fn release(&mut self, id: SockId) {
        let Some(sock) = self.socks.remove(&id) else {
            return;
        };
        match sock.kind {
            Kind::Listener(l) => {
                self.listeners.retain(|_, s| *s != id);
                self.closed_ports.insert(l.local.port());
                for pending in l.backlog {
                    self.release(pending);
                }
            }
            Kind::Stream(mut s) => {
                self.by_conn.remove(&s.conn);
                if !s.alive {
                    if let Some(r) = s.rings.take() {
                        r.release(&mut self.stack);
                    }
                    return;
                }
                let unread =
                    s.received(&self.stack) > s.rings.as_ref().map_or(0, Rings::read_total);
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
    pub(super) fn new(
        conn: ConnId,
        local: SocketAddrV4,
        peer: SocketAddrV4,
        connected: bool,
    ) -> Self {
        Stream {
            conn,
            rings: None,
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
    pub(super) fn urgent_mark(&mut self, stack: &Stack) -> Option<u64> {
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
    pub(super) fn received(&mut self, stack: &Stack) -> u64 {
        if self.alive {
            if let Ok(r) = stack.received(self.conn) {
                self.received = self.received.max(r);
            }
        }
        self.received
    }

    /// Acknowledged send-stream bytes (the last count seen once closed).
    pub(super) fn acked(&mut self, stack: &Stack) -> u64 {
        if self.alive {
            if let Ok(a) = stack.acked(self.conn) {
                self.acked = self.acked.max(a);
            }
        }
        self.acked
    }

    /// Bytes ready to read.
    pub(super) fn readable(&mut self, stack: &Stack) -> u64 {
        let received = self.received(stack);
        self.rings.as_ref().map_or(0, |r| r.readable(received))
    }

    /// The peer sent FIN and everything before it was read.
    pub(super) fn at_eof(&mut self, stack: &Stack) -> bool {
        let read = self.rings.as_ref().map_or(0, Rings::read_total);
        self.peer_fin.is_some_and(|len| read >= len)
            || (self.closed.is_some() && self.readable(stack) == 0)
    }

    /// Room to write now.
    pub(super) fn writable(&mut self, stack: &Stack, max_sends: usize) -> u64 {
        if !self.connected || !self.alive || self.shut_wr || self.sends >= max_sends {
            return 0;
        }
        let acked = self.acked(stack);
        self.rings.as_ref().map_or(0, |r| r.send_space(acked))
    }
}
