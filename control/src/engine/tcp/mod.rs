//! [`TcpEngine`]: the header-only TCP as an [`Engine`] of the [`Host`].
//! Every connection's [`TcpConnection`] runs in a driver (`driver.rs`),
//! either in the host's loop (run-to-completion) or on a transport thread
//! of its own, pinned to another core and fed over bounded SPSC queues
//! (dedicated; see [`Threads`]). Payload memory never leaves the calling
//! thread: only headers, events and state cross.
//!
//! Per iteration ([`Engine::poll`]): receive a batch (payload placed by
//! the datapath, header records out), feed each record to its connection
//! or to a listener, run due timers, send what the connections want sent
//! (holding paced segments until their departure time), and turn
//! connection events into datapath retirements and completions
//! (`output.rs`).

mod counters;
mod driver;
mod host;
mod output;
mod timers;

use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use datapath::ms;
use datapath::nic::RxRecord;
use proto::FlowKey;
use transports::segment::{CloseReason, RxSegment};
use transports::tcp::{TcpConfig, TcpConnection};
use transports::Instant;

pub use self::counters::TcpCounters;
use self::driver::{Driver, DriverThread, Input, Output};
use crate::host::{Conn, ConnInfo, Core, Engine, Host, HostError, Peer, Secret, Threads};
use crate::idle::{IdlePolicy, PollConfig};
use crate::idmap::ConnId;
use crate::in_order::InOrder;
use crate::provider::{Direction, WorkRequest};

/// Most packets one poll takes off the receive rings. It must outrun what
/// one poll sends: a sender whose window releases hundreds of segments per
/// poll gets an ACK for every second one back, and ACKs left on a full
/// ring are dropped by the kernel.
const RX_BATCH: u32 = 1024;

/// What the host side keeps of a connection whose TCP lives in the driver:
/// its loss counters, mirrored.
#[derive(Debug, Default)]
pub struct TcpConn {
    retransmits: u64,
    rtos: u64,
    tail_loss_probes: u64,
    /// The transport's input drops, mirrored.
    drops: transports::tcp::Drops,
}

/// The driver, inline or on its own thread.
#[derive(Debug)]
enum DriverMode {
    Inline(Driver),
    Thread(DriverThread),
}

/// The header-only TCP engine.
#[derive(Debug)]
pub struct TcpEngine {
    driver: DriverMode,
    tcp: TcpConfig,
    /// The MSS of an IPv6 connection: the configured one, within the MTU
    /// less IPv6's 40-byte header and TCP's 20 (an IPv4 one's is the
    /// configured one, which the configuration checks against the MTU
    /// less 40).
    mss6: u16,
    /// Keys the initial sequence numbers (RFC 6528).
    secret: Secret,
    records: Vec<RxRecord>,
    retired: Vec<ms::Completion>,
    /// Connections with acknowledged sends whose TX descriptors have not
    /// all come back (one entry each, at most one per connection).
    send_waiting: Vec<ConnId>,
    closed: Vec<ConnId>,
    /// The last connection request (SYN) each connection was handed: kept
    /// in case its TCP gives it back for a listener
    /// ([`transports::Event::SynForListener`]). At most one per connection,
    /// gone with the connection.
    syns: HashMap<ConnId, RxRecord>,
    /// Connection requests given back, for a listener once the connection
    /// they reached is removed (at the end of the poll).
    for_listener: Vec<RxRecord>,
    /// Per-reason RX drop counts of flows that have been removed.
    closed_drops: BTreeMap<&'static str, u64>,
    /// The RX counters of flows that have been removed, summed.
    closed_flows: datapath::counters::RxCounters,
    /// Outputs of the inline driver, handled after it ran.
    outputs: Vec<Output>,
    /// Outputs waiting behind a segment that found the TX ring full.
    waiting: InOrder<Output>,
    counters: TcpCounters,
    /// When the loop sleeps instead of spinning.
    idle: IdlePolicy,
}

impl TcpEngine {
    /// Starts the driver where `threads` says (`epoch`: the host's clock);
    /// `poll` says when the loops sleep.
    pub(crate) fn new(
        tcp: TcpConfig,
        mtu: usize,
        threads: Threads,
        poll: PollConfig,
        epoch: std::time::Instant,
    ) -> Result<TcpEngine, HostError> {
        let driver = match threads {
            Threads::RunToCompletion => DriverMode::Inline(Driver::default()),
            Threads::Dedicated {
                datapath_core,
                transport_core,
                queue,
            } => {
                if let Some(id) = datapath_core {
                    if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                        log::warn!("could not pin the datapath thread to core {id}");
                    }
                }
                DriverMode::Thread(
                    DriverThread::spawn(transport_core, queue.max(16), epoch, poll)
                        .map_err(|source| HostError::Thread { source })?,
                )
            }
        };
        let mss6 = tcp
            .mss
            .min(u16::try_from(mtu.saturating_sub(60)).unwrap_or(u16::MAX));
        Ok(TcpEngine {
            driver,
            mss6,
            tcp,
            secret: Secret::host()?,
            records: Vec::with_capacity(512),
            retired: Vec::new(),
            send_waiting: Vec::new(),
            closed: Vec::new(),
            syns: HashMap::new(),
            for_listener: Vec::new(),
            closed_drops: BTreeMap::new(),
            closed_flows: Default::default(),
            outputs: Vec::new(),
            waiting: InOrder::default(),
            counters: TcpCounters::default(),
            idle: IdlePolicy::new(poll),
        })
    }

    /// Segments the transport dropped because their connection had closed
    /// and gone on its side while they were on the way.
    fn no_connection(&self) -> u64 {
        match &self.driver {
            DriverMode::Inline(driver) => driver.no_connection().load(Ordering::Relaxed),
            DriverMode::Thread(t) => t.no_connection.load(Ordering::Relaxed),
        }
    }

    /// The initial sequence number of a connection over `key` opened at
    /// `now` (RFC 6528; one definition for connect and accept).
    fn isn(&self, core: &Core<TcpConn>, key: &FlowKey, now: Instant) -> u32 {
        self.secret.isn(key, core.clock(now))
    }

    /// Hands an input to the transport at `now`, the clock reading of the
    /// caller's poll or API call (never one read per packet). A full queue
    /// to the transport thread is waited out while handling its outputs, so
    /// the two sides cannot block each other.
    fn feed(&mut self, core: &mut Core<TcpConn>, now: Instant, input: Input) {
        let mut input = input;
        loop {
            match &mut self.driver {
                DriverMode::Inline(driver) => {
                    driver.input(now, input);
                    return;
                }
                DriverMode::Thread(t) => match t.to_driver.push(input) {
                    Ok(()) => {
                        t.input_pushed();
                        return;
                    }
                    Err(rtrb::PushError::Full(back)) => input = back,
                },
            }
            self.run_driver(core, now);
        }
    }

    /// Runs the inline driver, or takes the transport thread's outputs,
    /// and handles what came out.
    fn run_driver(&mut self, core: &mut Core<TcpConn>, now: Instant) -> usize {
        let mut outputs = std::mem::take(&mut self.outputs);
        outputs.clear();
        match &mut self.driver {
            DriverMode::Inline(driver) => {
                driver.drive(now, &mut |o| {
                    outputs.push(o);
                    Ok(())
                });
            }
            DriverMode::Thread(t) => {
                while let Ok(o) = t.from_driver.pop() {
                    outputs.push(o);
                }
            }
        }
        let work = outputs.len();
        for o in outputs.drain(..) {
            self.handle_output(core, o);
        }
        self.outputs = outputs;
        work
    }

    /// Feeds a received record to its connection, or a SYN to a listener.
    fn handle_record(&mut self, core: &mut Core<TcpConn>, now: Instant, rec: &RxRecord) {
        let seg = &rec.segment;
        self.counters.segments_to_transport += 1;
        self.counters.bytes_to_transport += std::mem::size_of::<RxSegment>() as u64;
        if let Some(conn) = rec.flow.map(ConnId).filter(|c| core.conns.contains_key(c)) {
            if seg.header.flags.is_connection_request() {
                self.syns.insert(conn, rec.clone());
                let rec = Box::new(rec.clone());
                self.feed(core, now, Input::Request { conn, rec });
            } else {
                let seg = seg.clone();
                self.feed(core, now, Input::Segment { conn, seg });
            }
            return;
        }
        let syn = seg.header.flags.is_connection_request();
        let Some(room) = core.listener_has_room(rec.key.local_port) else {
            self.counters.stray_segments += 1;
            return;
        };
        if !syn {
            self.counters.stray_segments += 1;
            return;
        }
        if !room {
            self.counters.syn_refused += 1;
            return;
        }
        let port = rec.key.local_port;
        if let Some(oldest) = core.half_open_victim(port) {
            // Give the oldest handshake up, silently: under a flood its SYN
            // most likely came from a spoofed address.
            self.counters.half_open_evicted += 1;
            core.ended(oldest, CloseReason::TimedOut);
            self.closed.push(oldest);
            self.feed(core, now, Input::Forget { conn: oldest });
        }
        let iss = self.isn(core, &rec.key, now);
        let tcp = match TcpConnection::accept(now, self.config_for(&rec.key), seg, iss) {
            Ok(t) => t,
            Err(e) => {
                log::debug!("SYN from {:?} refused: {e}", rec.key);
                self.counters.syn_refused += 1;
                return;
            }
        };
        let local_mac = core.iface.mac;
        // Its own socket and steering entry come when the handshake
        // completes (see `apply_event`).
        match core
            .nic
            .add_half_open_flow(rec.key, local_mac, rec.src_mac, seg.header.seq, iss)
        {
            Ok(flow) => {
                let id = self.open(
                    core,
                    now,
                    Conn::new(flow, port, Some(port), tcp.state(), TcpConn::default()),
                    tcp,
                );
                core.half_opened(port, id);
                self.counters.accepted += 1;
            }
            Err(e) => {
                log::warn!("SYN from {:?}: {e}", rec.key);
                self.counters.syn_refused += 1;
            }
        }
    }

    /// Adds a new connection to the table and its TCP to the driver.
    fn open(
        &mut self,
        core: &mut Core<TcpConn>,
        now: Instant,
        conn: Conn<TcpConn>,
        tcp: TcpConnection,
    ) -> ConnId {
        let id = ConnId(conn.flow);
        core.conns.insert(id, conn);
        let tcp = Box::new(tcp);
        self.feed(core, now, Input::Open { conn: id, tcp });
        id
    }

    /// One iteration: receive, feed the transport, send; the work done.
    fn poll_once(&mut self, core: &mut Core<TcpConn>, now: Instant) -> usize {
        let mut work = 0;
        let mut records = std::mem::take(&mut self.records);
        records.clear();
        // Back-pressure: no new input while outputs back up or the
        // application has not taken its completions.
        let budget = if self.waiting.backed_up() || !core.cq_has_room() {
            self.counters.rx_paused += 1;
            0
        } else {
            RX_BATCH
        };
        work += core.nic.poll_rx_batch(budget, &mut records) as usize;
        for rec in &records {
            self.handle_record(core, now, rec);
        }
        self.records = records;
        work += self.retry_waiting(core);
        work += self.run_driver(core, now);
        core.nic.flush();
        // Sends acknowledged while their descriptors were out complete
        // once the flush reclaimed those descriptors' completions.
        self.retry_sends(core);
        self.remove_closed(core);
        work += self.for_listeners(core, now);
        work
    }

    /// Hands the listeners the connection requests that reached a
    /// connection which had ended or ended for them (TIME-WAIT reused by a
    /// newer SYN, as on Linux): the old connection is removed by now, so
    /// the new one can take its 4-tuple.
    fn for_listeners(&mut self, core: &mut Core<TcpConn>, now: Instant) -> usize {
        let mut requests = std::mem::take(&mut self.for_listener);
        let n = requests.len();
        for mut rec in requests.drain(..) {
            self.counters.syns_passed_on += 1;
            rec.flow = None;
            self.handle_record(core, now, &rec);
        }
        self.for_listener = requests;
        n
    }

    /// Removes the connections that closed during this poll, keeping their
    /// loss and drop counts.
    fn remove_closed(&mut self, core: &mut Core<TcpConn>) {
        for id in self.closed.drain(..) {
            self.syns.remove(&id);
            if let Some(conn) = core.conns.remove(&id) {
                self.counters.closed_retransmits += conn.engine.retransmits;
                self.counters.closed_rtos += conn.engine.rtos;
                self.counters.closed_tail_loss_probes += conn.engine.tail_loss_probes;
                if let Some(f) = core.nic.flow(conn.flow) {
                    self.closed_flows.add(&f.counters);
                    for (name, n) in f.counters.drops() {
                        *self.closed_drops.entry(name).or_default() += n;
                    }
                }
                for (name, n) in conn.engine.drops.iter() {
                    *self.closed_drops.entry(name).or_default() += n;
                }
                let _ = core.nic.remove_flow(conn.flow);
            }
        }
    }
}

impl TcpEngine {
    /// The TCP configuration of a connection of flow `key`: the MSS of its
    /// address family.
    fn config_for(&self, key: &datapath::wire::FlowKey) -> TcpConfig {
        let mut c = self.tcp.clone();
        if key.is_ipv6() {
            c.mss = self.mss6;
        }
        c
    }
}

impl Engine for TcpEngine {
    type Conn = TcpConn;
    type Error = HostError;
    type Counters = TcpCounters;
    const NAME: &'static str = "tcp";
    const IPV6: bool = true;

    fn connect(&mut self, core: &mut Core<TcpConn>, peer: Peer) -> Result<ConnId, HostError> {
        let now = core.now();
        let iss = self.isn(core, &peer.key, now);
        let local_port = peer.key.local_port;
        let config = self.config_for(&peer.key);
        let tcp = TcpConnection::connect(now, config, local_port, peer.remote.port(), iss)
            .map_err(|e| HostError::Tcp(e.to_string()))?;
        let local_mac = core.iface.mac;
        // The peer's ISN comes with its SYN-ACK: nothing is placed before.
        let flow = core
            .nic
            .add_connecting_flow(peer.key, local_mac, peer.mac, iss)?;
        let conn = Conn::new(flow, local_port, None, tcp.state(), TcpConn::default());
        let id = self.open(core, now, conn, tcp);
        self.counters.connected += 1;
        Ok(id)
    }

    /// The datapath takes the work request (receive space for placement,
    /// payload for the TX builder); the transport learns only its length.
    fn post(&mut self, core: &mut Core<TcpConn>, wr: WorkRequest) -> Result<(), HostError> {
        let id = wr.conn;
        let flow = core.open_conn(id)?.flow;
        let (mr, offset, len, wr_id) = (wr.mr, wr.offset, wr.len, wr.wr_id);
        let bytes = len as u64;
        let input = match wr.dir {
            Direction::Recv => {
                core.nic.post_recv(flow, mr, offset, len, wr_id)?;
                Input::RecvPosted { conn: id, bytes }
            }
            Direction::Send => {
                core.nic.post_send(flow, mr, offset, len, wr_id)?;
                Input::SendPosted { conn: id, bytes }
            }
        };
        let now = core.now();
        self.feed(core, now, input);
        Ok(())
    }

    fn close(&mut self, core: &mut Core<TcpConn>, id: ConnId, abort: bool) {
        let input = if abort {
            Input::Abort { conn: id }
        } else {
            Input::Close { conn: id }
        };
        let now = core.now();
        self.feed(core, now, input);
    }

    /// One pass; then, when it found nothing, what the idle policy says:
    /// spin, yield, or sleep until a socket has something, the transport
    /// thread signals, or the next timer (at most [`MAX_SLEEP`](crate::idle::MAX_SLEEP)),
    /// followed by another pass.
    fn poll(&mut self, core: &mut Core<TcpConn>, now: Instant) -> usize {
        let work = self.poll_once(core, now);
        let (driver, waiting) = (&self.driver, &self.waiting);
        let sends_waiting = !self.send_waiting.is_empty();
        let deadline = || next_deadline(driver, waiting, sends_waiting);
        if !self
            .idle
            .settle(work, now, deadline, |limit| wait(driver, core, limit))
        {
            return work;
        }
        let now = core.now();
        let work = self.poll_once(core, now);
        self.idle.woke(work);
        work
    }

    fn counters(&self) -> TcpCounters {
        let mut c = self.counters;
        c.loop_idle = self.idle.counters();
        if let DriverMode::Thread(t) = &self.driver {
            c.transport_idle = t.transport_idle();
        }
        c
    }

    /// Packets the datapath dropped (or kept only in part), by reason, over
    /// every flow this stack has had and the poll loop itself, and the
    /// segments each connection's TCP refused (`tcp_*`, [`Drops::iter`](transports::tcp::Drops::iter)).
    fn drops(&self, core: &Core<TcpConn>) -> Vec<(&'static str, u64)> {
        let mut all = self.closed_drops.clone();
        for c in core.conns.values() {
            if let Some(f) = core.nic.flow(c.flow) {
                for (name, n) in f.counters.drops() {
                    *all.entry(name).or_default() += n;
                }
            }
            for (name, n) in c.engine.drops.iter() {
                *all.entry(name).or_default() += n;
            }
        }
        for (name, n) in core.nic.drops() {
            *all.entry(name).or_default() += n;
        }
        *all.entry("stray_segment").or_default() += self.counters.stray_segments;
        *all.entry("no_connection").or_default() += self.no_connection();
        *all.entry("syn_refused").or_default() += self.counters.syn_refused;
        *all.entry("half_open_evicted").or_default() += self.counters.half_open_evicted;
        all.into_iter().filter(|(_, n)| *n > 0).collect()
    }

    fn retransmissions(&self, core: &Core<TcpConn>) -> Option<(u64, u64)> {
        let open = core.conns.values().fold((0, 0), |(r, t), c| {
            (r + c.engine.retransmits, t + c.engine.rtos)
        });
        Some((
            self.counters.closed_retransmits + open.0,
            self.counters.closed_rtos + open.1,
        ))
    }

    /// 0 by construction: the header-only TCP gets fixed-size header
    /// records ([`RxSegment`], no payload field) and emits header
    /// descriptors that reference stream ranges; the datapath places and
    /// builds payload, and the host never copies payload for the
    /// transport. [`TcpCounters::bytes_to_transport`] counts what did
    /// cross (headers and ranges).
    fn payload_bytes_touched(&self) -> u64 {
        0
    }

    fn tail_loss_probes(&self, core: &Core<TcpConn>) -> u64 {
        let open: u64 = core.conns.values().map(|c| c.engine.tail_loss_probes).sum();
        self.counters.closed_tail_loss_probes + open
    }

    /// When the transport runs inline; `None` in dedicated mode.
    fn urgent_mark(&self, _core: &Core<TcpConn>, id: ConnId) -> Option<u64> {
        let DriverMode::Inline(driver) = &self.driver else {
            return None;
        };
        driver.connection(id)?.urgent_mark()
    }

    /// When the transport runs inline; `None` in dedicated mode (its
    /// connections live on the transport thread).
    fn conn_info(&self, _core: &Core<TcpConn>, id: ConnId) -> Option<ConnInfo> {
        let DriverMode::Inline(driver) = &self.driver else {
            return None;
        };
        let tcp = driver.connection(id)?;
        let cc = tcp.cc_metrics();
        let rtt = tcp.rtt();
        let stats = tcp.stats();
        Some(ConnInfo {
            state: tcp.state(),
            algorithm: tcp.algorithm(),
            cc_phase: cc.phase,
            in_recovery: tcp.in_recovery(),
            mss: tcp.negotiated().peer_mss,
            cwnd: cc.window,
            ssthresh: cc.ssthresh,
            pacing_rate: cc.pacing_rate,
            srtt: rtt.smoothed(),
            rttvar: rtt.var(),
            min_rtt: rtt.min(),
            rto: tcp.current_rto(),
            bytes_in_flight: tcp.bytes_in_flight(),
            send_window: tcp.send_window(),
            acked: tcp.acked(),
            received: tcp.received(),
            segments_sent: stats.segments_sent,
            segments_received: stats.segments_received,
            retransmits: stats.retransmits,
            rtos: stats.rtos,
            tail_loss_probes: stats.tail_loss_probes,
            sack_holes: tcp.sack_holes(),
            negotiated: tcp.negotiated(),
        })
    }

    fn drop_reasons(&self) -> Vec<&'static str> {
        let own = [
            "stray_segment",
            "no_connection",
            "syn_refused",
            "half_open_evicted",
        ];
        transports::tcp::Drops::default()
            .iter()
            .map(|(name, _)| name)
            .chain(own)
            .collect()
    }

    fn closed_flow_counters(&self) -> datapath::counters::RxCounters {
        self.closed_flows
    }

    fn slept_ns(&self) -> u64 {
        self.idle.counters().slept_ns
    }
}

/// Sleeps on the datapath's sockets (and, in dedicated mode, the
/// transport thread's wakeup) for at most `limit`.
fn wait(
    driver: &DriverMode,
    core: &mut Core<TcpConn>,
    limit: std::time::Duration,
) -> std::io::Result<bool> {
    match driver {
        DriverMode::Inline(_) => core.nic.wait(None, limit),
        DriverMode::Thread(t) => {
            let r = if t.wakeups.datapath_may_sleep(&t.from_driver) {
                core.nic.wait(Some(t.wakeups.datapath.as_fd()), limit)
            } else {
                Ok(false)
            };
            t.wakeups.datapath_awake();
            r
        }
    }
}

/// The next time the loop has something to do without new input: now
/// while outputs wait for the TX ring or acknowledged sends for their TX
/// completions; the inline transport's next timer;
/// none in dedicated mode (the transport thread runs the timers and
/// signals when it has outputs).
fn next_deadline(
    driver: &DriverMode,
    waiting: &InOrder<Output>,
    sends_waiting: bool,
) -> Option<Instant> {
    // Sends acknowledged while their TX descriptors were out complete when
    // the completions come back, which wakes no socket: keep polling.
    if !waiting.is_empty() || sends_waiting {
        return Some(Instant::ZERO);
    }
    match driver {
        DriverMode::Inline(driver) => driver.next_deadline(),
        DriverMode::Thread(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv6 connection's segments carry 20 more header bytes: its MSS
    /// is the configured one within the MTU less 60; an IPv4 one's stays.
    #[test]
    fn an_ipv6_connection_takes_the_mss_its_headers_leave() {
        let key = |local: std::net::IpAddr, remote: std::net::IpAddr| FlowKey {
            local_ip: local,
            remote_ip: remote,
            local_port: 5201,
            remote_port: 40000,
        };
        let v4 = key([198, 18, 0, 1].into(), [198, 18, 0, 2].into());
        let a: std::net::Ipv6Addr = "2001:2::1".parse().unwrap();
        let b: std::net::Ipv6Addr = "2001:2::2".parse().unwrap();
        let v6 = key(a.into(), b.into());
        for (mss, mtu, want6) in [(1460, 1500, 1440), (1400, 1500, 1400), (8960, 9000, 8940)] {
            let tcp = TcpConfig {
                mss,
                ..TcpConfig::default()
            };
            let e = TcpEngine::new(
                tcp,
                mtu,
                Threads::RunToCompletion,
                PollConfig::default(),
                std::time::Instant::now(),
            )
            .expect("engine");
            assert_eq!(e.config_for(&v4).mss, mss, "IPv4 at MTU {mtu}");
            assert_eq!(e.config_for(&v6).mss, want6, "IPv6 at MTU {mtu}");
        }
    }
}
