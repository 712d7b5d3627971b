//! The header-only TCP engine's transport side: the [`Driver`] of every
//! connection's TCP.
//!
//! It consumes [`Input`]s (segments, application calls, new connections)
//! and produces [`Output`]s (segments to send, events, state mirrors). It
//! never touches payload memory or the datapath, so it can run inline in
//! the datapath's loop (run-to-completion) or on a thread of its own pinned
//! to another core (dedicated), fed over bounded SPSC queues — the split
//! ZeroNIC makes between the NIC (data) and the host's transport (headers).

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use datapath::nic::EventFd;
use datapath::rx::RxRecord;

use transports::segment::{Event, RxSegment, SegmentOut, Transport};
use transports::tcp::{Drops, State, TcpConnection};
use transports::Instant;

use super::timers::{fire, Armed, Timers};
use crate::idle::{Idle, IdleCounters, IdlePolicy, PollConfig};
use crate::idmap::{ConnId, ConnMap};

/// What the transport side is told.
#[derive(Debug)]
pub(crate) enum Input {
    /// A new connection (active or passive open), built by the datapath side.
    Open {
        conn: ConnId,
        tcp: Box<TcpConnection>,
    },
    /// A received segment of `conn`.
    Segment { conn: ConnId, seg: RxSegment },
    /// A connection request (SYN) that reached `conn`: a segment of it,
    /// whole, so that it can go to a listener if `conn` ended on this
    /// side while the request was on its way (Linux's client reuses a
    /// port in our TIME-WAIT; the SYN must not be lost).
    Request { conn: ConnId, rec: Box<RxRecord> },
    /// The application posted bytes to send.
    SendPosted { conn: ConnId, bytes: u64 },
    /// The application posted receive space.
    RecvPosted { conn: ConnId, bytes: u64 },
    /// Send FIN after the posted bytes.
    Close { conn: ConnId },
    /// Reset now.
    Abort { conn: ConnId },
    /// Drop the connection without a word (a handshake evicted by a newer
    /// SYN): the host has ended it already.
    Forget { conn: ConnId },
}

/// What the transport side asks of the datapath side.
#[derive(Debug)]
pub(crate) enum Output {
    /// Build and send this segment.
    Transmit { conn: ConnId, seg: SegmentOut },
    /// A connection event; `irs` is the peer's ISN (for active opens).
    Event {
        conn: ConnId,
        event: Event,
        irs: u32,
    },
    /// A connection request that reached a connection this side had
    /// removed: for a listener.
    ForListener { rec: Box<RxRecord> },
    /// The connection's state and loss counters changed.
    Mirror {
        conn: ConnId,
        state: State,
        retransmits: u64,
        rtos: u64,
        /// Tail loss probes sent.
        tail_loss_probes: u64,
        /// The transport's input drops, by reason (boxed: mirrors are rare,
        /// and every output would otherwise carry their size).
        drops: Box<Drops>,
    },
}

#[derive(Debug)]
struct TConn {
    tcp: TcpConnection,
    /// A segment waiting for its pacing time.
    held: Option<SegmentOut>,
    /// Outputs that found the output full, in order; sent first next turn.
    backlog: std::collections::VecDeque<Output>,
    mirror: (State, u64, u64, u64, Drops),
    closed: bool,
    /// On the ready list.
    queued: bool,
    /// Its deadline in the timer queue.
    armed: Armed,
}

/// Every connection's TCP. A poll visits only the connections with
/// something to do — an input since the last poll, a due timer, outputs
/// left over — never every open connection: the ready list and the timer
/// queue (`timers.rs`) say which.
#[derive(Debug, Default)]
pub(crate) struct Driver {
    conns: ConnMap<TConn>,
    /// Connections to visit on the next poll, each once.
    ready: Vec<ConnId>,
    /// The list being visited (kept for its allocation).
    ids: Vec<ConnId>,
    timers: Timers<ConnId>,
    /// Segments for a connection this driver no longer has (it closed and
    /// was removed while they were on the way): dropped. Shared so the
    /// datapath side can read it when the driver runs on its own thread.
    no_connection: Arc<AtomicU64>,
    /// Connection requests for connections this driver no longer has,
    /// going back for a listener: at most `FOR_LISTENER_CAP`, the rest
    /// dropped and counted as `no_connection` (the peer sends its SYN
    /// again).
    for_listener: std::collections::VecDeque<Output>,
}

/// Connection requests held for a listener while the engine has no room.
const FOR_LISTENER_CAP: usize = 1024;

impl Driver {
    /// The count of segments dropped for want of their connection.
    pub(crate) fn no_connection(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.no_connection)
    }

    /// Connection `id`'s TCP.
    pub(crate) fn connection(&self, id: ConnId) -> Option<&TcpConnection> {
        self.conns.get(&id).map(|c| &c.tcp)
    }

    /// Applies one input.
    pub(crate) fn input(&mut self, now: Instant, input: Input) {
        match input {
            Input::Open { conn, tcp } => {
                let tcp = *tcp;
                self.conns.insert(
                    conn,
                    TConn {
                        tcp,
                        held: None,
                        backlog: Default::default(),
                        mirror: (
                            State::Closed,
                            u64::MAX,
                            u64::MAX,
                            u64::MAX,
                            Drops::default(),
                        ),
                        closed: false,
                        queued: false,
                        armed: None,
                    },
                );
                self.mark(conn);
            }
            Input::Segment { conn, seg } => match self.conns.get_mut(&conn) {
                Some(c) => {
                    c.tcp.handle_segment(now, &seg);
                    self.mark(conn);
                }
                None => {
                    self.no_connection.fetch_add(1, Ordering::Relaxed);
                }
            },
            Input::Request { conn, rec } => match self.conns.get_mut(&conn) {
                Some(c) => {
                    c.tcp.handle_segment(now, &rec.segment);
                    self.mark(conn);
                }
                None if self.for_listener.len() < FOR_LISTENER_CAP => {
                    self.for_listener.push_back(Output::ForListener { rec });
                }
                None => {
                    self.no_connection.fetch_add(1, Ordering::Relaxed);
                }
            },
            Input::SendPosted { conn, bytes } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tcp.send_posted(now, bytes);
                    self.mark(conn);
                }
            }
            Input::RecvPosted { conn, bytes } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tcp.recv_posted(now, bytes);
                    self.mark(conn);
                }
            }
            Input::Close { conn } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tcp.close(now);
                    self.mark(conn);
                }
            }
            Input::Abort { conn } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tcp.abort(now);
                    self.mark(conn);
                }
            }
            Input::Forget { conn } => {
                self.conns.remove(&conn);
            }
        }
    }

    /// When this driver next has something to do without new input: now
    /// (`Instant::ZERO`) when a connection is on the ready list (an input
    /// not yet handled, outputs waiting for room), else the earliest entry
    /// of the timer queue (RFC 6298 retransmission, delayed ACK, persist,
    /// keepalive, TIME-WAIT, pacing). Every connection's deadline, paced
    /// segments' included, is armed there after each visit; a stale entry
    /// is never later than the deadline it stood for, so the answer may
    /// wake a loop early, never late. Looks at no connection: with a
    /// thousand open, walking them each time a loop thought of sleeping
    /// was the largest single cost in the receiver's profile.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        if !self.ready.is_empty() || !self.for_listener.is_empty() {
            return Some(Instant::ZERO);
        }
        self.timers.next()
    }

    /// Puts `conn` on the ready list (once).
    fn mark(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if !c.queued {
                c.queued = true;
                self.ready.push(conn);
            }
        }
    }

    /// Runs due timers, then hands segments, events and state mirrors to
    /// `out`, which gives an output back when it has no room. Nothing is
    /// dropped: what does not fit waits in the connection's backlog, in
    /// order, and goes first next turn. Visits only the connections on
    /// the ready list and those with a due timer. Returns how many outputs
    /// went out.
    pub(crate) fn drive(
        &mut self,
        now: Instant,
        out: &mut impl FnMut(Output) -> Result<(), Output>,
    ) -> usize {
        while let Some((conn, at)) = self.timers.pop_due(now) {
            if self
                .conns
                .get_mut(&conn)
                .is_some_and(|c| fire(&mut c.armed, at))
            {
                self.mark(conn);
            }
        }
        let mut work = 0;
        while let Some(o) = self.for_listener.pop_front() {
            if let Err(o) = out(o) {
                self.for_listener.push_front(o);
                return work;
            }
            work += 1;
        }
        // Visit this poll's list; marks made meanwhile go to the next.
        let mut ids = std::mem::replace(&mut self.ready, std::mem::take(&mut self.ids));
        for &conn in &ids {
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            c.queued = false;
            if c.tcp.poll_timeout().is_some_and(|t| t <= now) {
                c.tcp.handle_timeout(now);
            }
            work += c.run(conn, now, out);
            if c.closed && c.backlog.is_empty() {
                self.conns.remove(&conn);
                continue;
            }
            let deadline = match (
                c.tcp.poll_timeout(),
                c.held.as_ref().and_then(|s| s.not_before),
            ) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.timers.arm(conn, deadline, &mut c.armed);
            if !c.backlog.is_empty() {
                self.mark(conn);
            }
        }
        ids.clear();
        self.ids = ids;
        work
    }

    /// Connections on the ready list and entries in the timer queue.
    #[cfg(test)]
    fn pending(&self) -> (usize, usize) {
        (self.ready.len(), self.timers.len())
    }
}

impl TConn {
    /// Sends `o`, or keeps it (and everything after it) in the backlog.
    fn emit(&mut self, o: Output, out: &mut impl FnMut(Output) -> Result<(), Output>) -> bool {
        if !self.backlog.is_empty() {
            self.backlog.push_back(o);
            return false;
        }
        match out(o) {
            Ok(()) => true,
            Err(o) => {
                self.backlog.push_back(o);
                false
            }
        }
    }

    fn run(
        &mut self,
        conn: ConnId,
        now: Instant,
        out: &mut impl FnMut(Output) -> Result<(), Output>,
    ) -> usize {
        let mut work = 0;
        while let Some(o) = self.backlog.pop_front() {
            if let Err(o) = out(o) {
                self.backlog.push_front(o);
                return work;
            }
            work += 1;
        }
        loop {
            let seg = match self.held.take() {
                Some(s) => s,
                None => match self.tcp.poll_transmit(now) {
                    Some(s) => s,
                    None => break,
                },
            };
            if seg.not_before.is_some_and(|t| t > now) {
                self.held = Some(seg);
                break;
            }
            if !self.emit(Output::Transmit { conn, seg }, out) {
                return work;
            }
            work += 1;
        }
        while let Some(event) = self.tcp.poll_event() {
            if matches!(event, Event::Closed { .. }) {
                self.closed = true;
            }
            let irs = self.tcp.irs();
            if !self.emit(Output::Event { conn, event, irs }, out) {
                // Later events stay queued inside the TCP until next turn.
                return work;
            }
            work += 1;
        }
        let stats = self.tcp.stats();
        let mirror = (
            self.tcp.state(),
            stats.retransmits,
            stats.rtos,
            stats.tail_loss_probes,
            stats.drops,
        );
        if mirror != self.mirror {
            self.mirror = mirror;
            self.emit(
                Output::Mirror {
                    conn,
                    state: mirror.0,
                    retransmits: mirror.1,
                    rtos: mirror.2,
                    tail_loss_probes: mirror.3,
                    drops: Box::new(mirror.4),
                },
                out,
            );
            work += 1;
        }
        work
    }
}

/// The sleep handshake between the datapath thread and the transport
/// thread. A side about to sleep raises its flag, then looks at its input
/// queue once more; a side that pushed looks at the other's flag after
/// the push (a full fence on both sides between the two steps), so one of
/// them sees the other and no wakeup is lost. Only a sleeper is signalled:
/// while both are busy, the cost is a fence and a load per push.
#[derive(Debug)]
pub(crate) struct Wakeups {
    /// The transport thread is asleep (or about to be): unpark it.
    transport_sleeping: AtomicBool,
    /// The datapath thread is asleep (or about to be): signal [`Self::datapath`].
    datapath_sleeping: AtomicBool,
    /// Readable once the transport pushed outputs to a sleeping datapath
    /// thread; watched by the datapath thread's wait.
    pub(crate) datapath: EventFd,
    /// The transport thread's sleeps.
    transport_sleeps: AtomicU64,
    /// Nanoseconds the transport thread slept.
    transport_slept_ns: AtomicU64,
}

impl Wakeups {
    /// The datapath thread is about to sleep; whether it still may (no
    /// output arrived meanwhile). Call [`Self::datapath_awake`] after.
    pub(crate) fn datapath_may_sleep(&self, from_driver: &rtrb::Consumer<Output>) -> bool {
        self.datapath_sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        from_driver.is_empty()
    }

    /// The datapath thread woke (or chose not to sleep).
    pub(crate) fn datapath_awake(&self) {
        self.datapath_sleeping.store(false, Ordering::Relaxed);
        self.datapath.drain();
    }

    /// The transport thread pushed outputs: wake the datapath thread if
    /// it sleeps.
    fn outputs_pushed(&self) {
        fence(Ordering::SeqCst);
        if self.datapath_sleeping.load(Ordering::Relaxed) {
            self.datapath.signal();
        }
    }
}

/// The driver on a thread of its own, joined on drop.
#[derive(Debug)]
pub(crate) struct DriverThread {
    pub(crate) to_driver: rtrb::Producer<Input>,
    pub(crate) from_driver: rtrb::Consumer<Output>,
    /// The driver's [`Driver::no_connection`].
    pub(crate) no_connection: Arc<AtomicU64>,
    /// The sleep handshake with the transport thread.
    pub(crate) wakeups: Arc<Wakeups>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl DriverThread {
    /// Starts the transport thread, pinned to `core` when given; `clock`
    /// gives the time (the same epoch as the datapath side); `poll` says
    /// when it sleeps (until an input comes, or its next timer).
    ///
    /// # Errors
    /// The thread or its wakeup event could not be created.
    pub(crate) fn spawn(
        core: Option<usize>,
        capacity: usize,
        clock: std::time::Instant,
        poll: PollConfig,
    ) -> std::io::Result<DriverThread> {
        let (to_driver, mut inputs) = rtrb::RingBuffer::<Input>::new(capacity);
        let (mut outputs, from_driver) = rtrb::RingBuffer::<Output>::new(capacity);
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let wakeups = Arc::new(Wakeups {
            transport_sleeping: AtomicBool::new(false),
            datapath_sleeping: AtomicBool::new(false),
            datapath: EventFd::new()?,
            transport_sleeps: AtomicU64::new(0),
            transport_slept_ns: AtomicU64::new(0),
        });
        let w = Arc::clone(&wakeups);
        let mut driver = Driver::default();
        let no_connection = driver.no_connection();
        let handle = std::thread::Builder::new()
            .name("zs-transport".into())
            .spawn(move || {
                if let Some(id) = core {
                    if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                        log::warn!("could not pin the transport thread to core {id}");
                    }
                }
                // Woken by the datapath thread and at shutdown: no
                // application waits on this loop.
                let mut idle = IdlePolicy::unwatched(poll);
                let now = || Instant::from_nanos(clock.elapsed().as_nanos() as u64);
                while !stop_flag.load(Ordering::Relaxed) {
                    let t = now();
                    let mut work = 0;
                    while let Ok(input) = inputs.pop() {
                        driver.input(t, input);
                        work += 1;
                    }
                    let sent = driver.drive(t, &mut |o| {
                        outputs.push(o).map_err(|rtrb::PushError::Full(o)| o)
                    });
                    if sent > 0 {
                        w.outputs_pushed();
                    }
                    work += sent;
                    match idle.after(work, t, || driver.next_deadline()) {
                        Idle::Sleep(limit) => {
                            w.transport_sleeping.store(true, Ordering::Relaxed);
                            fence(Ordering::SeqCst);
                            if inputs.is_empty() && !stop_flag.load(Ordering::Relaxed) {
                                let start = std::time::Instant::now();
                                std::thread::park_timeout(limit);
                                let slept = start.elapsed().as_nanos() as u64;
                                w.transport_sleeps.fetch_add(1, Ordering::Relaxed);
                                w.transport_slept_ns.fetch_add(slept, Ordering::Relaxed);
                            }
                            w.transport_sleeping.store(false, Ordering::Relaxed);
                        }
                        other => other.pause(),
                    }
                }
            })?;
        Ok(DriverThread {
            to_driver,
            from_driver,
            no_connection,
            wakeups,
            stop,
            handle: Some(handle),
        })
    }

    /// An input was pushed: wake the transport thread if it sleeps.
    pub(crate) fn input_pushed(&self) {
        fence(Ordering::SeqCst);
        if self.wakeups.transport_sleeping.load(Ordering::Relaxed) {
            if let Some(h) = &self.handle {
                h.thread().unpark();
            }
        }
    }

    /// How often and how long the transport thread slept.
    pub(crate) fn transport_idle(&self) -> IdleCounters {
        IdleCounters {
            sleeps: self.wakeups.transport_sleeps.load(Ordering::Relaxed),
            slept_ns: self.wakeups.transport_slept_ns.load(Ordering::Relaxed),
        }
    }
}

impl Drop for DriverThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use datapath::flow_table::{FlowParams, FlowTable};
    use datapath::wire::FlowKey;
    use transports::tcp::TcpConfig;

    use super::*;

    /// The 5-tuple `local_port` → `remote_port` between the tests' hosts.
    fn key(local_port: u16, remote_port: u16) -> FlowKey {
        FlowKey {
            remote_ip: [198, 18, 0, 1].into(),
            local_ip: [198, 18, 0, 2].into(),
            remote_port,
            local_port,
        }
    }

    /// A connection id for `local_port` → `remote_port`, as the flow
    /// table hands them out.
    fn conn_id(table: &mut FlowTable, local_port: u16, remote_port: u16) -> ConnId {
        let params = FlowParams {
            key: key(local_port, remote_port),
            local_mac: [2, 0, 0, 0, 0, 2],
            remote_mac: [2, 0, 0, 0, 0, 1],
            irs: 0,
            iss: 0,
            socket: 0,
            max_recv_segments: 1,
            max_send_segments: 1,
            max_placed_ranges: 1,
        };
        ConnId(table.insert(&params).expect("room in the flow table"))
    }

    /// Two connection ids.
    fn ids() -> (ConnId, ConnId) {
        let mut table = FlowTable::new(2);
        (
            conn_id(&mut table, 5201, 40000),
            conn_id(&mut table, 5201, 40001),
        )
    }

    /// A driver with one connection, `open`, opened at `now`.
    fn driver_with(open: ConnId, now: Instant) -> Driver {
        let mut driver = Driver::default();
        let tcp = TcpConnection::connect(now, TcpConfig::default(), 5201, 40000, 1)
            .expect("default config");
        driver.input(
            now,
            Input::Open {
                conn: open,
                tcp: Box::new(tcp),
            },
        );
        driver
    }

    fn segment() -> RxSegment {
        RxSegment {
            header: Default::default(),
            payload_len: 0,
            accepted: 0..0,
            ecn: Default::default(),
            segment_size: 0,
        }
    }

    #[test]
    fn a_segment_for_a_connection_the_driver_does_not_have_is_counted() {
        let (open, gone) = ids();
        let now = Instant::from_nanos(0);
        let mut driver = driver_with(open, now);
        let counted = driver.no_connection();
        driver.input(
            now,
            Input::Segment {
                conn: open,
                seg: segment(),
            },
        );
        assert_eq!(counted.load(Ordering::Relaxed), 0);
        driver.input(
            now,
            Input::Segment {
                conn: gone,
                seg: segment(),
            },
        );
        driver.input(
            now,
            Input::Segment {
                conn: gone,
                seg: segment(),
            },
        );
        assert_eq!(counted.load(Ordering::Relaxed), 2);
    }

    /// A SYN that reached a connection the transport side had removed
    /// (its TIME-WAIT ended while the SYN crossed the queue: the dedicated
    /// mode's race) goes back whole for a listener, not dropped; one that
    /// reaches a live connection is that connection's.
    #[test]
    fn a_connection_request_for_a_removed_connection_goes_back_for_a_listener() {
        let (open, gone) = ids();
        let now = Instant::from_nanos(0);
        let mut driver = driver_with(open, now);
        let mut syn = segment();
        syn.header.flags = proto::Flags::SYN;
        let request = |conn: ConnId| RxRecord {
            flow: Some(conn.0),
            key: key(5201, 40001),
            src_mac: [2, 0, 0, 0, 0, 1],
            segment: syn.clone(),
            placement: None,
            in_order: false,
        };
        for conn in [open, gone] {
            let rec = Box::new(request(conn));
            driver.input(now, Input::Request { conn, rec });
        }
        assert_eq!(driver.next_deadline(), Some(Instant::ZERO), "work waits");
        let mut back = Vec::new();
        driver.drive(now, &mut |o| {
            if let Output::ForListener { rec } = o {
                back.push(*rec);
            }
            Ok(())
        });
        assert_eq!(back, vec![request(gone)], "only the removed one's");
        assert_eq!(driver.no_connection().load(Ordering::Relaxed), 0);

        // An engine with no room: the requests held are bounded, the rest
        // counted, and those held go out once there is room.
        let extra = 10;
        for _ in 0..FOR_LISTENER_CAP + extra {
            let rec = Box::new(request(gone));
            driver.input(now, Input::Request { conn: gone, rec });
        }
        assert_eq!(driver.drive(now, &mut Err), 0, "no room, nothing out");
        assert_eq!(driver.for_listener.len(), FOR_LISTENER_CAP);
        let dropped = driver.no_connection().load(Ordering::Relaxed);
        assert_eq!(dropped, extra as u64, "the requests past the cap");
        let mut sent = 0;
        driver.drive(now, &mut |o| {
            sent += usize::from(matches!(o, Output::ForListener { .. }));
            Ok(())
        });
        assert_eq!(sent, FOR_LISTENER_CAP, "every held request went out");
    }

    fn outputs(driver: &mut Driver, now: Instant) -> (usize, usize) {
        let (mut transmits, mut all) = (0, 0);
        driver.drive(now, &mut |o| {
            all += 1;
            transmits += usize::from(matches!(o, Output::Transmit { .. }));
            Ok(())
        });
        (transmits, all)
    }

    #[test]
    fn idle_connections_are_not_visited_and_their_timers_still_fire() {
        let mut table = FlowTable::new(256);
        let mut driver = Driver::default();
        let now = Instant::from_nanos(1_000_000_000);
        for port in 0..200u16 {
            let conn = conn_id(&mut table, 40000 + port, 5201);
            let tcp = TcpConnection::connect(now, TcpConfig::default(), 40000 + port, 5201, 1)
                .expect("default config");
            driver.input(
                now,
                Input::Open {
                    conn,
                    tcp: Box::new(tcp),
                },
            );
        }
        assert_eq!(
            driver.pending().0,
            200,
            "every new connection is ready once"
        );
        let (syns, _) = outputs(&mut driver, now);
        assert_eq!(syns, 200, "one SYN each");
        // Nothing to do: nothing visited, one timer entry per connection.
        let (ready, timers) = driver.pending();
        assert_eq!(ready, 0);
        assert!((1..=200).contains(&timers), "{timers} timer entries");
        assert_eq!(outputs(&mut driver, now), (0, 0));
        // The SYN retransmission timers (RFC 6298: 1 s) fire through the queue.
        let later = Instant::from_nanos(now.as_nanos() + 1_100_000_000);
        let (again, _) = outputs(&mut driver, later);
        assert_eq!(again, 200, "every SYN retransmitted");
        assert_eq!(driver.pending().0, 0);
    }

    #[test]
    fn the_next_deadline_is_the_earliest_timer_or_now_when_work_waits() {
        let mut table = FlowTable::new(16);
        let mut driver = Driver::default();
        assert_eq!(driver.next_deadline(), None, "nothing open");
        let now = Instant::from_nanos(1_000_000_000);
        let open = |driver: &mut Driver, table: &mut FlowTable, port: u16, at: Instant| {
            let conn = conn_id(table, port, 5201);
            let tcp = TcpConnection::connect(at, TcpConfig::default(), port, 5201, 1)
                .expect("default config");
            driver.input(
                at,
                Input::Open {
                    conn,
                    tcp: Box::new(tcp),
                },
            );
        };
        open(&mut driver, &mut table, 40000, now);
        assert_eq!(
            driver.next_deadline(),
            Some(Instant::ZERO),
            "a new connection waits to send its SYN"
        );
        outputs(&mut driver, now);
        let syn_rto = driver
            .next_deadline()
            .expect("the SYN's retransmission timer");
        assert!(syn_rto > now, "{syn_rto:?}");
        // A connection opened later has a later timer: the earliest stays.
        let later = Instant::from_nanos(now.as_nanos() + 50_000_000);
        assert!(later < syn_rto);
        open(&mut driver, &mut table, 40001, later);
        outputs(&mut driver, later);
        assert_eq!(driver.next_deadline(), Some(syn_rto));
        // Once it fired and was re-armed, the other connection's is next.
        outputs(&mut driver, syn_rto);
        let next = driver.next_deadline().expect("a timer");
        assert!(next > syn_rto, "{next:?} after {syn_rto:?}");
    }
}
