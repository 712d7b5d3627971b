//! `zerosplit run`: the stack as a service with the configured listeners —
//! echo (RFC 862), discard (RFC 863) and sink (discard, counting) — until
//! a stop flag is raised (SIGINT/SIGTERM in the CLI).
//!
//! Each accepted connection gets its own registered region, used as a ring
//! of receive buffers. Discard and sink re-post a buffer as soon as it
//! completes. Echo sends received bytes back straight out of the receive
//! ring (no copy: the region is registered for both directions and bytes
//! below the in-order point are final) and re-posts a buffer for receiving
//! only once the echoed bytes in it are acknowledged.
//!
//! One connection never takes the service down: a connection that finds
//! no memory left for its buffers is reset (counted as refused), and a post
//! the stack refuses for now (the flow's list of posted segments is full)
//! is retried on a later iteration (counted as deferred).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use datapath::mr::{Access, MrId};

use crate::config::{ListenConfig, Service};
use crate::provider::{CompletionKind, ConnId, Provider, ProviderCallError};

/// Receive buffers per connection and their size.
const BUFS: u64 = 8;
const BUF: u64 = 256 << 10;
const RING: u64 = BUFS * BUF;

/// What a service run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceReport {
    /// Connections accepted.
    pub connections: u64,
    /// Bytes received over all connections.
    pub bytes_in: u64,
    /// Bytes echoed back.
    pub bytes_echoed: u64,
    /// Connections reset at once because no memory was left to register
    /// their buffers (the UMEM area, `umem.mr_bytes`, is shared by all).
    pub refused: u64,
    /// Posts the stack refused for now (the flow's list of posted segments
    /// was full, `flows.max_*_segments`); retried on a later iteration.
    pub posts_deferred: u64,
    /// Connections reset because they arrived while draining.
    pub drain_refused: u64,
    /// Connections still open when the drain time ran out (reset).
    pub drain_cut: u64,
    /// Listener sets taken over while running ([`Listeners::replace`]).
    pub reloads: u64,
}

impl std::ops::AddAssign for ServiceReport {
    fn add_assign(&mut self, o: Self) {
        self.connections += o.connections;
        self.bytes_in += o.bytes_in;
        self.bytes_echoed += o.bytes_echoed;
        self.refused += o.refused;
        self.posts_deferred += o.posts_deferred;
        self.drain_refused += o.drain_refused;
        self.drain_cut += o.drain_cut;
        self.reloads += o.reloads;
    }
}

/// The listeners a service runs, replaceable while it runs (`zerosplit
/// run` on SIGHUP): every queue's loop notices a new set on its next
/// iteration (one atomic load) and listens on the new ports, stops
/// listening on the removed ones, and gives later connections the new
/// service of a kept port. Connections already accepted keep running
/// as they were.
#[derive(Debug, Default)]
pub struct Listeners {
    generation: AtomicU64,
    set: Mutex<Vec<ListenConfig>>,
}

impl Listeners {
    /// A set to start with.
    pub fn new(set: Vec<ListenConfig>) -> Self {
        Listeners {
            generation: AtomicU64::new(0),
            set: Mutex::new(set),
        }
    }

    /// Replaces the set; the loops take it over on their next iteration.
    pub fn replace(&self, set: Vec<ListenConfig>) {
        *self.set.lock().unwrap_or_else(PoisonError::into_inner) = set;
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn current(&self) -> (u64, Vec<ListenConfig>) {
        let set = self.set.lock().unwrap_or_else(PoisonError::into_inner);
        (self.generation(), set.clone())
    }
}

/// Moves `stack` from listening on `old` to `new`; a port it cannot
/// listen on is logged and left out (the service keeps running).
fn switch_listeners<P: Provider>(
    stack: &mut P,
    old: &[ListenConfig],
    new: Vec<ListenConfig>,
) -> Vec<ListenConfig> {
    let has = |set: &[ListenConfig], port| set.iter().any(|l| l.port == port);
    for l in old.iter().filter(|l| !has(&new, l.port)) {
        match stack.unlisten(l.port) {
            Ok(()) => log::info!("stopped listening on port {}", l.port),
            Err(e) => log::warn!("stop listening on port {}: {e}", l.port),
        }
    }
    new.into_iter()
        .filter(|l| {
            if has(old, l.port) {
                return true;
            }
            match stack.listen(l.port) {
                Ok(()) => {
                    log::info!("listening on port {} ({:?})", l.port, l.service);
                    true
                }
                Err(e) => {
                    log::warn!("cannot listen on port {} ({:?}): {e}", l.port, l.service);
                    false
                }
            }
        })
        .collect()
}

/// Logs drops as they happen, in bursts: at most one line a second, with
/// the count per reason since the last line; and, every `summary`, a
/// one-line summary of the counters (`metrics.interval`).
#[derive(Debug)]
pub struct LogWatch {
    summary: Option<Duration>,
    next_check: Instant,
    next_summary: Option<Instant>,
    drops: BTreeMap<&'static str, u64>,
}

impl LogWatch {
    /// Drop bursts every second; a summary every `summary`, if set.
    pub fn new(summary: Option<Duration>) -> Self {
        let now = Instant::now();
        LogWatch {
            summary,
            next_check: now + Duration::from_secs(1),
            next_summary: summary.map(|d| now + d),
            drops: BTreeMap::new(),
        }
    }

    /// Looks at the counters if it is time.
    pub fn tick<P: Provider>(&mut self, stack: &P, report: &ServiceReport) {
        let now = Instant::now();
        if now < self.next_check {
            return;
        }
        self.next_check = now + Duration::from_secs(1);
        let drops: BTreeMap<&'static str, u64> = stack.drops().into_iter().collect();
        let burst: Vec<String> = drops
            .iter()
            .filter_map(|(name, &n)| {
                let new = n.saturating_sub(self.drops.get(name).copied().unwrap_or(0));
                (new > 0).then(|| format!("{name} {new}"))
            })
            .collect();
        if !burst.is_empty() {
            log::warn!("packets dropped in the last second: {}", burst.join(", "));
        }
        self.drops = drops;
        if let Some(at) = self.next_summary.filter(|at| now >= *at) {
            let (rtx, rtos) = stack.retransmissions().unwrap_or_default();
            log::info!(
                "{} connections so far, {} bytes in, {} bytes echoed; {} retransmits, {} RTOs, {} packets dropped in all",
                report.connections,
                report.bytes_in,
                report.bytes_echoed,
                rtx,
                rtos,
                self.drops.values().sum::<u64>()
            );
            self.next_summary = self.summary.map(|d| at + d);
        }
    }
}

#[derive(Debug)]
struct Session {
    service: Service,
    mr: MrId,
    /// End of posted receive space (stream offset).
    posted: u64,
    /// Bytes handed to the send side (echo).
    echoed: u64,
    /// Bytes the peer acknowledged (echo).
    acked: u64,
    peer_len: Option<u64>,
    fin_sent: bool,
}

impl Session {
    /// Posts the receive buffers that are free again. Returns `false` when
    /// the stack refused a post (the flow's receive list is full, or the
    /// connection is closing); the rest waits for the next iteration.
    fn post_recv_space<P: Provider>(&mut self, stack: &mut P, conn: ConnId, received: u64) -> bool {
        // A buffer may receive again once nothing still needs its old bytes:
        // at once for discard/sink, after they were echoed and acknowledged.
        let busy_until = if self.service == Service::Echo {
            self.acked
        } else {
            received
        };
        while self.posted + BUF <= busy_until + RING {
            let off = (self.posted % RING) as usize;
            if let Err(e) = stack.post_recv(conn, self.mr, off, BUF as usize, self.posted / BUF) {
                log::debug!("connection {conn:?}: receive post deferred: {e}");
                return false;
            }
            self.posted += BUF;
        }
        true
    }

    /// Echo: posts the bytes that arrived in order since the last call, out
    /// of the receive ring. Returns `false` when the stack refused a post
    /// (the flow's send list is full until completions free it).
    fn echo_received<P: Provider>(&mut self, stack: &mut P, conn: ConnId, received: u64) -> bool {
        while self.echoed < received {
            let off = self.echoed % RING;
            let n = (received - self.echoed).min(RING - off);
            if let Err(e) = stack.post_send(conn, self.mr, off as usize, n as usize, self.echoed) {
                log::debug!("connection {conn:?}: send post deferred: {e}");
                return false;
            }
            self.echoed += n;
        }
        true
    }
}

/// Serves `listeners` on `stack` until `stop` is raised.
///
/// # Errors
/// A listener could not be installed or the stack refused an operation.
pub fn serve<P: Provider>(
    stack: &mut P,
    listeners: &[ListenConfig],
    stop: &AtomicBool,
) -> Result<ServiceReport, ProviderCallError> {
    serve_draining(
        stack,
        &Listeners::new(listeners.to_vec()),
        stop,
        Duration::ZERO,
        &mut LogWatch::new(None),
    )
}

/// Serves `listeners` on `stack` until `stop` is raised, then drains: new
/// connections are reset (counted `drain_refused`) while the open ones
/// finish, for at most `drain`; those still open then are reset (counted
/// `drain_cut`). A zero `drain` stops at once, as [`serve`]. The loop
/// takes over a new set of `listeners` when one is given and logs drops
/// through `log` as it goes.
///
/// # Errors
/// A listener could not be installed or the stack refused an operation.
pub fn serve_draining<P: Provider>(
    stack: &mut P,
    listeners: &Listeners,
    stop: &AtomicBool,
    drain: Duration,
    log: &mut LogWatch,
) -> Result<ServiceReport, ProviderCallError> {
    let (mut generation, mut current) = listeners.current();
    for l in &current {
        stack
            .listen(l.port)
            .map_err(ProviderCallError::doing(format!(
                "listening on port {} ({:?})",
                l.port, l.service
            )))?;
    }
    let mut sessions: HashMap<ConnId, Session> = HashMap::new();
    let mut report = ServiceReport::default();
    let mut draining: Option<Instant> = None;
    loop {
        if draining.is_none() && stop.load(Ordering::Relaxed) {
            if drain.is_zero() {
                break;
            }
            draining = Some(Instant::now());
        }
        if listeners.generation() != generation && draining.is_none() {
            let (g, next) = listeners.current();
            current = switch_listeners(stack, &current, next);
            generation = g;
            report.reloads += 1;
        }
        if let Some(since) = draining {
            if sessions.is_empty() {
                break;
            }
            if since.elapsed() >= drain {
                for &conn in sessions.keys() {
                    let _ = stack.abort(conn);
                }
                report.drain_cut += sessions.len() as u64;
                break;
            }
        }
        stack.poll();
        log.tick(stack, &report);
        for l in &current {
            while let Some(conn) = stack
                .accept(l.port)
                .map_err(ProviderCallError::doing("accepting"))?
            {
                if draining.is_some() {
                    report.drain_refused += 1;
                    let _ = stack.abort(conn);
                    continue;
                }
                report.connections += 1;
                let mr = match stack.register_memory(RING as usize, Access::BOTH) {
                    Ok(mr) => mr,
                    Err(e) => {
                        // One connection too many for the memory area must
                        // not take the service down: reset it, say why.
                        log::warn!(
                            "connection {conn:?} on port {} reset: no memory for its buffers: {e}",
                            l.port
                        );
                        report.refused += 1;
                        let _ = stack.abort(conn);
                        continue;
                    }
                };
                let mut s = Session {
                    service: l.service,
                    mr,
                    posted: 0,
                    echoed: 0,
                    acked: 0,
                    peer_len: None,
                    fin_sent: false,
                };
                if !s.post_recv_space(stack, conn, 0) {
                    report.posts_deferred += 1;
                }
                sessions.insert(conn, s);
            }
        }
        while let Some(c) = stack.poll_completion() {
            let Some(s) = sessions.get_mut(&c.conn) else {
                continue;
            };
            match c.kind {
                CompletionKind::Send => s.acked += c.len,
                CompletionKind::PeerClosed { len } => s.peer_len = Some(len),
                CompletionKind::Closed(_) => {
                    let s = sessions.remove(&c.conn).expect("present");
                    // Completed or dropped segments no longer reference it.
                    let _ = stack.deregister_memory(s.mr);
                    continue;
                }
                _ => {}
            }
        }
        let conns: Vec<ConnId> = sessions.keys().copied().collect();
        for conn in conns {
            let Some(s) = sessions.get_mut(&conn) else {
                continue;
            };
            let Ok(received) = stack.received(conn) else {
                continue;
            };
            if s.service == Service::Echo {
                // Echo what is in order and final, without wrapping the ring.
                let before = s.echoed;
                if !s.echo_received(stack, conn, received) {
                    report.posts_deferred += 1;
                }
                report.bytes_echoed += s.echoed - before;
            }
            if !s.post_recv_space(stack, conn, received) {
                report.posts_deferred += 1;
            }
            let drained = s.service != Service::Echo || s.echoed >= received;
            if let Some(len) = s
                .peer_len
                .filter(|&len| received >= len && drained && !s.fin_sent)
            {
                report.bytes_in += len;
                if let Err(e) = stack.close(conn) {
                    log::debug!("connection {conn:?}: close: {e}");
                }
                s.fin_sent = true;
            }
        }
    }
    Ok(report)
}
