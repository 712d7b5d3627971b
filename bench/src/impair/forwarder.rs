//! The I/O side of the hop: two threads, one per direction, each receiving
//! frames from one interface through an `AF_PACKET` socket, passing them
//! through an [`Impairer`] and sending what it releases out of the other
//! interface.
//!
//! The forwarder is a transparent layer-2 bridge of exactly two ports: it
//! does not learn MACs, rewrite headers or decrement TTLs, and it forwards
//! everything, ARP included, so the two ends behave as if they shared a
//! wire. Frames leaving an interface (ours or the local stack's) are not
//! received back (`PACKET_IGNORE_OUTGOING`).
//!
//! Each thread waits in `ppoll` when it has nothing to do (at most 10 ms,
//! so [`Forwarder::stop`] returns within that), spins when a held frame is
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

use datapath::sys::{
    netns::NetnsGuard,
    packet::{PacketError, PacketSocket, RecvMeta, MAX_BATCH},
};
use thiserror::Error;

use super::{
    engine::{ImpairCounters, Impairer},
    spec::{ImpairConfig, SpecError},
};

/// Longest sleep of an idle direction thread: the shutdown latency.
const IDLE_WAIT: Duration = Duration::from_millis(10);
/// A held frame due sooner than this is waited for by spinning.
const SPIN_WINDOW: Duration = Duration::from_micros(50);
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
}

impl Default for ForwarderConfig {
    fn default() -> Self {
        Self {
            a_to_b: ImpairConfig::default(),
            b_to_a: ImpairConfig::default(),
            max_frame: 9000 + 18,
            socket_buffer: 16 << 20,
            spin: Duration::ZERO,
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

/// The forwarder could not start or a direction failed.
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
    /// A thread did not report within [`START_TIMEOUT`] or died.
    #[error("the {direction} thread {what}")]
    Thread {
        /// `a->b` or `b->a`.
        direction: &'static str,
        /// What happened.
        what: &'static str,
    },
}

/// One running direction.
#[derive(Debug)]
struct Direction {
    name: &'static str,
    counters: Arc<Mutex<ImpairCounters>>,
    handle: Option<JoinHandle<Result<(), ForwardError>>>,
}

/// A running two-port impairment forwarder; stops on drop.
#[derive(Debug)]
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    directions: Vec<Direction>,
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
            directions: Vec::new(),
        };
        for (name, from, to, imp) in [
            ("a->b", a_if, b_if, &cfg.a_to_b),
            ("b->a", b_if, a_if, &cfg.b_to_a),
        ] {
            let counters = Arc::new(Mutex::new(ImpairCounters::default()));
            let (ready_tx, ready_rx) = mpsc::channel();
            let job = Job {
                name,
                from: from.to_owned(),
                to: to.to_owned(),
                netns: netns.map(str::to_owned),
                impairer: Impairer::new(imp.clone()),
                max_frame: cfg.max_frame,
                socket_buffer: cfg.socket_buffer,
                spin: cfg.spin,
                stop: Arc::clone(&fwd.stop),
                counters: Arc::clone(&counters),
            };
            let handle = thread::Builder::new()
                .name(format!("impair {name}"))
                .spawn(move || job.run(&ready_tx))
                .map_err(|source| ForwardError::Spawn {
                    direction: name,
                    source,
                })?;
            fwd.directions.push(Direction {
                name,
                counters,
                handle: Some(handle),
            });
            // Drop (on error) stops and joins what already runs.
            match ready_rx.recv_timeout(START_TIMEOUT) {
                Ok(()) => {}
                Err(_) => return Err(fwd.join_failed(name)),
            }
        }
        Ok(fwd)
    }

    /// After a thread failed to report ready: its error, or a generic one.
    fn join_failed(&mut self, name: &'static str) -> ForwardError {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self
            .directions
            .iter_mut()
            .find(|d| d.name == name)
            .and_then(|d| d.handle.take());
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
        let get = |i: usize| {
            self.directions
                .get(i)
                .map(|d| *d.counters.lock().unwrap_or_else(|p| p.into_inner()))
                .unwrap_or_default()
        };
        PathCounters {
            a_to_b: get(0),
            b_to_a: get(1),
        }
    }

    /// True while both direction threads run.
    pub fn is_running(&self) -> bool {
        self.directions
            .iter()
            .all(|d| d.handle.as_ref().is_some_and(|h| !h.is_finished()))
    }

    /// Stops both directions (within ~10 ms) and returns the final counters.
    ///
    /// # Errors
    ///
    /// The first error a direction stopped with (a socket failure while
    /// forwarding, or a panic).
    pub fn stop(mut self) -> Result<PathCounters, ForwardError> {
        self.shutdown()?;
        Ok(self.counters())
    }

    fn shutdown(&mut self) -> Result<(), ForwardError> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for d in &mut self.directions {
            let result = match d.handle.take().map(JoinHandle::join) {
                None | Some(Ok(Ok(()))) => Ok(()),
                Some(Ok(Err(e))) => Err(e),
                Some(Err(_)) => Err(ForwardError::Thread {
                    direction: d.name,
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

/// Everything one direction thread owns.
struct Job {
    name: &'static str,
    from: String,
    to: String,
    netns: Option<String>,
    impairer: Impairer,
    max_frame: usize,
    socket_buffer: usize,
    spin: Duration,
    stop: Arc<AtomicBool>,
    counters: Arc<Mutex<ImpairCounters>>,
}

impl Job {
    fn run(mut self, ready: &mpsc::Sender<()>) -> Result<(), ForwardError> {
        let name = self.name;
        let _guard = match &self.netns {
            Some(ns) => Some(NetnsGuard::enter(ns).map_err(|source| ForwardError::Netns {
                direction: name,
                netns: ns.clone(),
                source,
            })?),
            None => None,
        };
        let sock_err = |source| ForwardError::Socket {
            direction: name,
            source,
        };
        let rx = PacketSocket::open_rx(&self.from, self.socket_buffer).map_err(sock_err)?;
        let tx = PacketSocket::open_tx(&self.to, self.socket_buffer).map_err(sock_err)?;
        let _ = ready.send(());
        self.forward(&rx, &tx).map_err(sock_err)
    }

    fn forward(&mut self, rx: &PacketSocket, tx: &PacketSocket) -> Result<(), PacketError> {
        let start = Instant::now();
        let now_ns = || u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let imp = &mut self.impairer;
        let mut bufs: Vec<Vec<u8>> = (0..MAX_BATCH).map(|_| imp.buffer(self.max_frame)).collect();
        let mut metas = [RecvMeta::default(); MAX_BATCH];
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(MAX_BATCH);
        let mut published = ImpairCounters::default();
        let mut last_frame = start;
        while !self.stop.load(Ordering::Relaxed) {
            let got = rx.recv_batch(&mut bufs, &mut metas)?;
            let now = now_ns();
            if got > 0 {
                last_frame = Instant::now();
            }
            for (buf, meta) in bufs.iter_mut().zip(&metas).take(got) {
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
            // Send everything due, in batches.
            for _ in 0..1024 {
                while out.len() < MAX_BATCH {
                    match imp.pop_ready(now) {
                        Some(f) => out.push(f),
                        None => break,
                    }
                }
                if out.is_empty() {
                    break;
                }
                let frames: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
                let mut sent = 0;
                for _ in 0..4 {
                    match tx.send_batch(&frames[sent..]) {
                        Ok(0) => break,
                        Ok(n) => sent += n,
                        Err(e) => {
                            log::debug!("{}: send: {e}", self.name);
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
                for f in out.drain(..) {
                    imp.recycle(f);
                }
            }
            let current = imp.counters();
            if current != published {
                *self.counters.lock().unwrap_or_else(|p| p.into_inner()) = current;
                published = current;
            }
            if got == MAX_BATCH {
                continue; // more may be waiting
            }
            let wait = match imp.next_release() {
                Some(t) => Duration::from_nanos(t.saturating_sub(now_ns())),
                None => IDLE_WAIT,
            };
            if wait > SPIN_WINDOW && last_frame.elapsed() >= self.spin {
                rx.wait_readable((wait - SPIN_WINDOW / 2).min(IDLE_WAIT))?;
            } else if got == 0 {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }
}
