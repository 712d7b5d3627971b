//! The I/O side of the hop: per direction ("lane"), frames are received
//! from one interface through an `AF_PACKET` socket, passed through an
//! [`Impairer`], and what it releases is sent out of the other interface.
//!
//! The forwarder is a transparent layer-2 bridge of exactly two ports: it
//! does not learn MACs, rewrite headers or decrement TTLs, and it forwards
//! everything, ARP included, so the two ends behave as if they shared a
//! wire. Frames leaving an interface (ours or the local stack's) are not
//! received back (`PACKET_IGNORE_OUTGOING`).
//!
//! By default each direction has its own thread; with
//! [`ForwarderConfig::thread_per_direction`] off, one thread serves both
//! (one `ppoll` on both sockets).
//! A thread waits in `ppoll` when it has nothing to do (at most 10 ms, so
//! [`Forwarder::stop`] returns within that), spins when a held frame is
//! due within 50 µs (a sleeping vCPU wakes ~50 µs late, FACTS.md), and
//! moves up to 64 frames per syscall.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc, Mutex,
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use thiserror::Error;
use zerosplit_lab::{NetnsGuard, PacketError, PacketSocket, RecvMeta, MAX_BATCH};

use super::{
    engine::{ImpairCounters, Impairer, DEFAULT_HELD_LIMIT},
    spec::{ImpairConfig, SpecError},
};

/// Longest sleep of an idle direction thread: the shutdown latency.
const IDLE_WAIT: Duration = Duration::from_millis(10);
/// A held frame due sooner than this is waited for by spinning.
const SPIN_WINDOW: Duration = Duration::from_micros(50);
/// Memory a lane may hold in delayed frames (buffers are `max_frame`
/// bytes each); beyond it arrivals are counted as queue drops.
const HELD_BYTES: usize = 256 << 20;

/// How long [`Forwarder::start`] waits for the threads to open sockets.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How the forwarder runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwarderConfig {
    /// Impairment of frames from interface A to interface B.
    pub a_to_b: ImpairConfig,
    /// Impairment of frames from B to A.
    pub b_to_a: ImpairConfig,
    /// Largest frame forwarded (Ethernet header included); longer ones are
    /// dropped and counted. MTU + 18 covers a VLAN tag and the header.
    pub max_frame: usize,
    /// Socket receive/send buffer size in bytes.
    pub socket_buffer: usize,
    /// How long a direction keeps polling without sleeping after its last
    /// frame (default 0): a sleeping thread costs a wakeup (tens of µs on
    /// an idle vCPU) per burst, spinning costs CPU the endpoints may need.
    /// On the 2-vCPU test machine 0 and 30 µs measured the same.
    pub spin: Duration,
    /// One thread per direction (`true`, the default) or one polling loop
    /// for both (`false`: one core less, one wakeup for data and ACKs). On
    /// the 2-vCPU test VM, kernel TCP through the hop ran ~25 % faster
    /// with a thread per direction (1.47 vs 1.17 Gbit/s, mean of 9 runs
    /// each): the sending thread also does the receiver's softirq work.
    pub thread_per_direction: bool,
}

impl Default for ForwarderConfig {
    fn default() -> Self {
        Self {
            a_to_b: ImpairConfig::default(),
            b_to_a: ImpairConfig::default(),
            max_frame: 9000 + 18,
            socket_buffer: 16 << 20,
            spin: Duration::ZERO,
            thread_per_direction: true,
        }
    }
}

/// The counters of both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathCounters {
    /// Frames from A to B.
    pub a_to_b: ImpairCounters,
    /// Frames from B to A.
    pub b_to_a: ImpairCounters,
}

/// The forwarder could not start or a direction failed. `direction` is
/// `a->b`, `b->a`, or `a<->b` for the thread that serves both.
#[derive(Debug, Error)]
pub enum ForwardError {
    /// A direction's configuration is invalid.
    #[error("impairment {direction}: {source}")]
    Config {
        /// `a->b` or `b->a`.
        direction: &'static str,
        /// What is wrong.
        #[source]
        source: SpecError,
    },
    /// `max_frame` is too small to hold an Ethernet header.
    #[error("max_frame {0} is below the 60-byte minimum Ethernet frame")]
    MaxFrame(usize),
    /// The two interfaces are the same.
    #[error("interface A and interface B are both {0:?}: give two different interfaces")]
    SameInterface(String),
    /// The thread could not enter the namespace.
    #[error("{direction}: entering netns {netns:?}: {source}")]
    Netns {
        /// `a->b` or `b->a`.
        direction: &'static str,
        /// The namespace.
        netns: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A packet socket could not be opened or failed while forwarding.
    #[error("{direction}: {source}")]
    Socket {
        /// `a->b` or `b->a`.
        direction: &'static str,
        /// The socket error (names the interface).
        #[source]
        source: PacketError,
    },
    /// A thread could not be spawned.
    #[error("spawning the {direction} thread: {source}")]
    Spawn {
        /// `a->b` or `b->a`.
        direction: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A thread did not report ready within 10 s, or died.
    #[error("the {direction} thread {what}")]
    Thread {
        /// `a->b` or `b->a`.
        direction: &'static str,
        /// What happened.
        what: &'static str,
    },
}

/// A forwarding thread and the lanes it serves.
#[derive(Debug)]
struct Worker {
    name: &'static str,
    handle: Option<JoinHandle<Result<(), ForwardError>>>,
}

/// A running two-port impairment forwarder; stops on drop.
#[derive(Debug)]
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    /// A→B, B→A.
    counters: [Arc<Mutex<ImpairCounters>>; 2],
    workers: Vec<Worker>,
}

impl Forwarder {
    /// Starts forwarding between interfaces `a_if` and `b_if` of network
    /// namespace `netns` (`None`: the caller's). Returns once both
    /// directions have their sockets open, so no frame sent afterwards is
    /// missed.
    ///
    /// # Errors
    ///
    /// [`ForwardError::Config`] for an invalid impairment;
    /// [`ForwardError::Netns`] / [`ForwardError::Socket`] if a thread cannot
    /// enter the namespace or open its sockets (missing interface, not
    /// root); [`ForwardError::Spawn`] / [`ForwardError::Thread`].
    pub fn start(
        a_if: &str,
        b_if: &str,
        netns: Option<&str>,
        cfg: &ForwarderConfig,
    ) -> Result<Self, ForwardError> {
        cfg.a_to_b
            .validate()
            .map_err(|source| ForwardError::Config {
                direction: "a->b",
                source,
            })?;
        cfg.b_to_a
            .validate()
            .map_err(|source| ForwardError::Config {
                direction: "b->a",
                source,
            })?;
        if cfg.max_frame < 60 {
            return Err(ForwardError::MaxFrame(cfg.max_frame));
        }
        if a_if == b_if {
            return Err(ForwardError::SameInterface(a_if.to_owned()));
        }
        let mut fwd = Self {
            stop: Arc::new(AtomicBool::new(false)),
            counters: Default::default(),
            workers: Vec::new(),
        };
        let plan = |name, from: &str, to: &str, imp: &ImpairConfig, i: usize| LanePlan {
            name,
            from: from.to_owned(),
            to: to.to_owned(),
            impairer: Impairer::new(imp.clone()),
            counters: Arc::clone(&fwd.counters[i]),
        };
        let ab = plan("a->b", a_if, b_if, &cfg.a_to_b, 0);
        let ba = plan("b->a", b_if, a_if, &cfg.b_to_a, 1);
        let groups = if cfg.thread_per_direction {
            vec![("a->b", vec![ab]), ("b->a", vec![ba])]
        } else {
            vec![("a<->b", vec![ab, ba])]
        };
        for (name, lanes) in groups {
            let (ready_tx, ready_rx) = mpsc::channel();
            let job = Job {
                name,
                netns: netns.map(str::to_owned),
                lanes,
                max_frame: cfg.max_frame,
                socket_buffer: cfg.socket_buffer,
                spin: cfg.spin,
                stop: Arc::clone(&fwd.stop),
            };
            let handle = thread::Builder::new()
                .name(format!("impair {name}"))
                .spawn(move || job.run(&ready_tx))
                .map_err(|source| ForwardError::Spawn {
                    direction: name,
                    source,
                })?;
            fwd.workers.push(Worker {
                name,
                handle: Some(handle),
            });
            // On error, Drop stops and joins what already runs.
            if ready_rx.recv_timeout(START_TIMEOUT).is_err() {
                return Err(fwd.join_failed(name));
            }
        }
        Ok(fwd)
    }

    /// After a thread failed to report ready: its error, or a generic one.
    fn join_failed(&mut self, name: &'static str) -> ForwardError {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self
            .workers
            .iter_mut()
            .find(|w| w.name == name)
            .and_then(|w| w.handle.take());
        match handle.map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => ForwardError::Thread {
                direction: name,
                what: "panicked while starting",
            },
            _ => ForwardError::Thread {
                direction: name,
                what: "did not open its sockets in time",
            },
        }
    }

    /// The counters of both directions now (updated after every batch).
    pub fn counters(&self) -> PathCounters {
        let get = |c: &Mutex<ImpairCounters>| *c.lock().unwrap_or_else(|p| p.into_inner());
        PathCounters {
            a_to_b: get(&self.counters[0]),
            b_to_a: get(&self.counters[1]),
        }
    }

    /// True while every forwarding thread runs.
    pub fn is_running(&self) -> bool {
        self.workers
            .iter()
            .all(|w| w.handle.as_ref().is_some_and(|h| !h.is_finished()))
    }

    /// Stops both directions (within ~10 ms) and returns the final counters.
    ///
    /// # Errors
    ///
    /// The first error a thread stopped with (a socket failure while
    /// forwarding, or a panic).
    pub fn stop(mut self) -> Result<PathCounters, ForwardError> {
        self.shutdown()?;
        Ok(self.counters())
    }

    fn shutdown(&mut self) -> Result<(), ForwardError> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for w in &mut self.workers {
            let result = match w.handle.take().map(JoinHandle::join) {
                None | Some(Ok(Ok(()))) => Ok(()),
                Some(Ok(Err(e))) => Err(e),
                Some(Err(_)) => Err(ForwardError::Thread {
                    direction: w.name,
                    what: "panicked",
                }),
            };
            if first.is_ok() {
                first = result;
            }
        }
        first
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!("impairment forwarder: {e}");
        }
    }
}

/// A lane before its thread opened the sockets.
struct LanePlan {
    name: &'static str,
    from: String,
    to: String,
    impairer: Impairer,
    counters: Arc<Mutex<ImpairCounters>>,
}

/// Everything one forwarding thread owns.
struct Job {
    name: &'static str,
    netns: Option<String>,
    lanes: Vec<LanePlan>,
    max_frame: usize,
    socket_buffer: usize,
    spin: Duration,
    stop: Arc<AtomicBool>,
}

impl Job {
    fn run(self, ready: &mpsc::Sender<()>) -> Result<(), ForwardError> {
        let _guard = match &self.netns {
            Some(ns) => Some(NetnsGuard::enter(ns).map_err(|source| ForwardError::Netns {
                direction: self.name,
                netns: ns.clone(),
                source,
            })?),
            None => None,
        };
        let mut lanes = Vec::with_capacity(self.lanes.len());
        for plan in self.lanes {
            let sock_err = |source| ForwardError::Socket {
                direction: plan.name,
                source,
            };
            let rx = PacketSocket::open_rx(&plan.from, self.socket_buffer).map_err(sock_err)?;
            let tx = PacketSocket::open_tx(&plan.to, self.socket_buffer).map_err(sock_err)?;
            lanes.push(Lane::new(plan, rx, tx, self.max_frame));
        }
        let _ = ready.send(());
        let name = self.name;
        run_lanes(&mut lanes, &self.stop, self.spin).map_err(|source| ForwardError::Socket {
            direction: name,
            source,
        })
    }
}

/// Serves `lanes` until `stop`: receive, impair, send, then sleep until a
/// frame arrives on any lane or a held frame is due.
fn run_lanes(lanes: &mut [Lane], stop: &AtomicBool, spin: Duration) -> Result<(), PacketError> {
    let start = Instant::now();
    let now_ns = || u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut last_frame = start;
    while !stop.load(Ordering::Relaxed) {
        let mut busy = false;
        let mut any = false;
        for lane in lanes.iter_mut() {
            let got = lane.step(now_ns())?;
            busy |= got == MAX_BATCH;
            any |= got > 0;
        }
        if any {
            last_frame = Instant::now();
        }
        if busy {
            continue; // more may be waiting
        }
        let now = now_ns();
        let wait = lanes
            .iter()
            .filter_map(Lane::next_release)
            .min()
            .map_or(IDLE_WAIT, |t| Duration::from_nanos(t.saturating_sub(now)));
        if wait > SPIN_WINDOW && last_frame.elapsed() >= spin {
            let sockets: Vec<&PacketSocket> = lanes.iter().map(|l| &l.rx).collect();
            PacketSocket::wait_any(&sockets, (wait - SPIN_WINDOW / 2).min(IDLE_WAIT))?;
        } else if !any {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

/// One direction with its sockets open.
struct Lane {
    rx: PacketSocket,
    tx: PacketSocket,
    imp: Impairer,
    max_frame: usize,
    bufs: Vec<Vec<u8>>,
    metas: [RecvMeta; MAX_BATCH],
    out: Vec<Vec<u8>>,
    counters: Arc<Mutex<ImpairCounters>>,
    published: ImpairCounters,
}

impl Lane {
    fn new(plan: LanePlan, rx: PacketSocket, tx: PacketSocket, max_frame: usize) -> Self {
        let mut imp = plan
            .impairer
            .with_held_limit((HELD_BYTES / max_frame).min(DEFAULT_HELD_LIMIT));
        let bufs = (0..MAX_BATCH).map(|_| imp.buffer(max_frame)).collect();
        Self {
            rx,
            tx,
            imp,
            max_frame,
            bufs,
            metas: [RecvMeta::default(); MAX_BATCH],
            out: Vec::with_capacity(MAX_BATCH),
            counters: plan.counters,
            published: ImpairCounters::default(),
        }
    }

    fn next_release(&self) -> Option<u64> {
        self.imp.next_release()
    }

    /// Receives one batch, sends everything due, publishes the counters;
    /// returns how many frames arrived.
    fn step(&mut self, now: u64) -> Result<usize, PacketError> {
        let got = match self.rx.recv_batch(&mut self.bufs, &mut self.metas) {
            Ok(n) => n,
            // A link flap (`ip link set down`): nothing to receive now;
            // the socket works again once the link is up.
            Err(e) if e.is_link_down() => {
                self.imp.counters_mut().link_down += 1;
                0
            }
            Err(e) => return Err(e),
        };
        let imp = &mut self.imp;
        for (buf, meta) in self.bufs.iter_mut().zip(&self.metas).take(got) {
            if meta.outgoing {
                continue;
            }
            if meta.truncated {
                imp.counters_mut().dropped_oversize += 1;
                continue;
            }
            let mut frame = std::mem::replace(buf, imp.buffer(self.max_frame));
            frame.truncate(meta.len);
            imp.push(now, frame);
        }
        for _ in 0..1024 {
            while self.out.len() < MAX_BATCH {
                match imp.pop_ready(now) {
                    Some(f) => self.out.push(f),
                    None => break,
                }
            }
            if self.out.is_empty() {
                break;
            }
            let frames: Vec<&[u8]> = self.out.iter().map(Vec::as_slice).collect();
            let mut sent = 0;
            for _ in 0..4 {
                match self.tx.send_batch(&frames[sent..]) {
                    Ok(0) => break,
                    Ok(n) => sent += n,
                    Err(e) => {
                        log::debug!("send on {}: {e}", self.tx.ifname());
                        break;
                    }
                }
                if sent == frames.len() {
                    break;
                }
            }
            let failed = (frames.len() - sent) as u64;
            let c = imp.counters_mut();
            c.send_errors += failed;
            c.forwarded -= failed;
            for f in self.out.drain(..) {
                imp.recycle(f);
            }
        }
        let current = imp.counters();
        if current != self.published {
            *self.counters.lock().unwrap_or_else(|p| p.into_inner()) = current;
            self.published = current;
        }
        Ok(got)
    }
}
