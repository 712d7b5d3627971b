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
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use datapath::nic::EventFd;
use libc::{pollfd, sigset_t};
use transports::tcp::State as TcpState;
use zerosplit::idle::{Idle, IdlePolicy};
use zerosplit::provider::Provider;
use zerosplit::stack::Stack;

use crate::backend::Backend;

use crate::cabi::real;
use crate::layer::CResult;
use crate::log::log_line;
use crate::setup::Setup;
use crate::sockets::{SockId, State};

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

/// The stack of this process and its polling thread.
#[derive(Debug)]
pub(crate) struct Runtime {
    state: Mutex<State>,
    /// Wakes the polling thread.
    pub(crate) wake: EventFd,
    /// The polling thread sleeps (set under the lock).
    pub(crate) asleep: AtomicBool,
    /// Application threads waiting for the lock: the polling thread lets
    /// them in before its next pass.
    pub(crate) contenders: AtomicUsize,
    /// Passes that did work.
    generation: AtomicU64,
    /// Packet capture, when on.
    capture: Option<zerosplit::capture::PcapTap>,
    /// The metrics endpoint, when on; serves until the process ends.
    _metrics: Option<zerosplit::metrics::MetricsServer>,
    /// Passes application threads ran while they waited: while this moves,
    /// the polling thread stays out of their way.
    app_passes: AtomicU64,
}

thread_local! {
    /// This thread's wakeup, for its waits.
    pub(crate) static WAKER: Option<Arc<EventFd>> = EventFd::new().ok().map(Arc::new);
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
pub(crate) fn stack_own() -> bool {
    STACK_OWN.with(Cell::get)
}

/// Marks this thread as the stack's while it lives (restoring the mark
/// it had when dropped).
pub(crate) struct StackOwn(bool);

impl StackOwn {
    pub(crate) fn enter() -> StackOwn {
        StackOwn(STACK_OWN.with(|o| o.replace(true)))
    }
}

impl Drop for StackOwn {
    fn drop(&mut self) {
        STACK_OWN.with(|o| o.set(self.0));
    }
}

/// A program an `execve` started: the attachment of the program it
/// replaced, and how to take that one's sockets up.
pub(crate) type ExecOf<'a> = (u32, &'a dyn Fn(&mut State));

/// Whether this thread holds the shim's lock.
pub(crate) fn holds_lock() -> bool {
    HOLDS_LOCK.with(Cell::get)
}

/// The lock held ([`Runtime::lock`]).
#[derive(Debug)]
pub(crate) struct Locked<'a>(MutexGuard<'a, State>);

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
    /// Opens the stack (or attaches to the daemon) and starts the
    /// polling thread. `exec_of`: the attachment of the program this one
    /// replaced by `execve`, and how to take its sockets up; that runs
    /// before the polling thread starts, so that no completion of theirs
    /// is taken before they are known.
    pub(crate) fn start(
        setup: &Setup,
        exec_of: Option<ExecOf<'_>>,
    ) -> Result<Arc<Runtime>, String> {
        let _own = StackOwn::enter();
        if let Some(path) = &setup.daemon {
            let attached = match exec_of {
                Some((parent, _)) => zerosplit::attach::attach_child(path, parent),
                None => zerosplit::attach::attach(path),
            }
            .map_err(|e| format!("attaching to the daemon at {}: {e}", path.display()))?;
            if setup.capture.is_some() || setup.metrics.is_some() {
                log_line("attached: packet capture and metrics are the daemon's (its config)");
            }
            let stack = Backend::Daemon {
                attached: Box::new(attached),
                since: Instant::now(),
                algorithm: setup.stack.tcp.algorithm,
            };
            let rt = Self::new(stack, setup, None, None)?;
            if let Some((_, take_up)) = exec_of {
                take_up(&mut rt.lock());
            }
            rt.spawn_poller(setup)?;
            return Ok(rt);
        }
        let mut stack = Stack::new(&setup.iface.name, setup.stack.clone())
            .map_err(|e| format!("starting zerosplit on {}: {e}", setup.iface.name))?;
        let capture = match &setup.capture {
            Some((path, snaplen)) => Some(
                zerosplit::capture::PcapTap::create(path, *snaplen).map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        stack.set_capture(capture.as_ref().map(zerosplit::capture::PcapTap::tap));
        let metrics = match setup.metrics {
            Some((addr, max_connections)) => {
                let board = zerosplit::metrics::Board::new();
                let server = zerosplit::metrics::serve_with(
                    addr,
                    std::sync::Arc::clone(&board),
                    max_connections,
                )
                .map_err(|e| e.to_string())?;
                stack.set_metrics(Some(board));
                log_line(&format!(
                    "metrics on http://{}/metrics (stats: /stats)",
                    server.addr()
                ));
                if let Some(warning) = server.exposure() {
                    log_line(&warning);
                }
                Some(server)
            }
            None => None,
        };
        let rt = Self::new(Backend::Own(Box::new(stack)), setup, capture, metrics)?;
        rt.spawn_poller(setup)?;
        Ok(rt)
    }

    /// The runtime over `stack`, its polling thread not started yet.
    fn new(
        stack: Backend,
        setup: &Setup,
        capture: Option<zerosplit::capture::PcapTap>,
        metrics: Option<zerosplit::metrics::MetricsServer>,
    ) -> Result<Arc<Runtime>, String> {
        let rt = Arc::new(Runtime {
            state: Mutex::new(State::new(stack, setup.clone())),
            wake: EventFd::new().map_err(|e| e.to_string())?,
            asleep: AtomicBool::new(false),
            contenders: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            app_passes: AtomicU64::new(0),
            capture,
            _metrics: metrics,
        });
        Ok(rt)
    }

    /// Starts the polling thread.
    pub(crate) fn spawn_poller(self: &Arc<Self>, setup: &Setup) -> Result<(), String> {
        let poll = setup.stack.poll;
        let looper = Arc::clone(self);
        std::thread::Builder::new()
            .name("zerosplit-poll".into())
            .spawn(move || {
                let _own = StackOwn::enter();
                looper.run(IdlePolicy::new(poll));
            })
            .map(|_| ())
            .map_err(|e| format!("starting the polling thread: {e}"))
    }

    /// The lock, for an application thread.
    pub(crate) fn lock(&self) -> Locked<'_> {
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
    pub(crate) fn kick(&self) {
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
            Self::announce(&self.generation, st);
        }
        work
    }

    /// Something changed for the sockets: wakes every waiting thread.
    fn announce(generation: &AtomicU64, st: &mut Locked<'_>) {
        generation.fetch_add(1, Ordering::AcqRel);
        for s in st.sleepers.drain(..) {
            s.signal();
        }
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
                    if !st.stack.prepare_sleep() {
                        if st.stack.woke() {
                            Self::announce(&self.generation, &mut st);
                        }
                        continue;
                    }
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
                    let mut st = self.take_lock();
                    if st.stack.woke() {
                        // The daemon's progress (bytes received or
                        // acknowledged) is no completion: readers look.
                        Self::announce(&self.generation, &mut st);
                    }
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
    pub(crate) fn wait<'a>(
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
    pub(crate) fn block<'a, T>(
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
    pub(crate) fn holding<'a, T>(
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
    pub(crate) fn drain_at_exit(&self, within: Duration) {
        let mut st = self.lock();
        if std::env::var_os("ZEROSPLIT_EXEC_STATS").is_some() {
            let (retx, rtos) = st.stack.retransmission_counts();
            log_line(&format!(
                "at exit: {retx} retransmitted segments, {rtos} RTOs, {} connections reset for want of ring memory, {} for a full reuseport backlog, {} for no listener of their family; drops: {:?}",
                st.no_memory,
                st.accept_overflow,
                st.wrong_family,
                st.stack.drops()
            ));
            crate::fallback::report();
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
            // A parked connection goes on in another process.
            let mut closing = st.orphans.keys().filter(|c| !st.parked.contains(c));
            let done = closing.all(|&c| {
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
                log_line(&format!("writing the capture file: {e}"));
            }
        }
    }
}
