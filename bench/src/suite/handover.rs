//! The bound an attached ping-pong is measured against, in the same run:
//! what the attachment protocol itself costs, and what an extra runnable
//! party costs on this machine's CPUs.
//!
//! - [`round_trips`]: one work request through a real attachment channel
//!   ([`zerosplit::ipc::channel`]) and its completion back. The "daemon"
//!   end is a thread that creates the memfd; the "application" end maps
//!   it separately from a duplicate of its descriptor, as an attached
//!   application does. [`Wake::Spin`]: both ends poll their ring without
//!   pause. [`Wake::Sleep`]: an idle end sleeps at once on its doorbell
//!   (an eventfd) after the need-wakeup handshake the daemon and the
//!   provider use (set "wake me", look once more, sleep; the producer
//!   rings only a sleeper): what an adaptive end pays once its idle
//!   budget is spent. With an answer delay the daemon end spins that long
//!   before it completes a post (the wire and the peer of a ping-pong), so
//!   that an application that sleeps is asleep when the answer comes:
//!   the difference to the same delay with a spinning application is
//!   what waking it costs (the attached default, which sleeps).
//! - [`Spinner`]: one thread of the bench busy at normal priority while
//!   an in-process case runs: the CPU an attached case's daemon takes,
//!   without attachment.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use datapath::nic::{wait_readable, EventFd};
use hdrhistogram::Histogram;
use zerosplit::ipc::channel::{AppEnd, DaemonEnd, Layout};
use zerosplit::ipc::desc::{CompletionDesc, PostDesc, DIR_RECV, KIND_RECV};

/// How an idle end of the channel waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Polls its ring without pause.
    Spin,
    /// Sleeps on its doorbell as soon as its ring is empty.
    Sleep,
}

/// Longest one sleep on a doorbell (a lost wakeup costs this, visibly).
const SLEEP_LIMIT: Duration = Duration::from_millis(100);
/// Longest a round trip may take before the measurement gives up.
const STALL: Duration = Duration::from_secs(2);
/// Posts the daemon end takes per look.
const BATCH: u32 = 16;

/// Percentiles of round-trip times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundTrips {
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Round trips timed.
    pub n: u64,
}

impl RoundTrips {
    /// The percentiles of `h` (ns); `None` when it is empty.
    pub fn of(h: &Histogram<u64>) -> Option<RoundTrips> {
        (!h.is_empty()).then(|| RoundTrips {
            p50_us: h.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
            n: h.len(),
        })
    }
}

/// The channel's daemon end on its own thread: answers every post with a
/// receive completion of the same id and length, ringing the application
/// only when it sleeps, until `stop`.
fn daemon_end(
    layout: Layout,
    wake: Wake,
    answer_after: Duration,
    doorbells: &(EventFd, EventFd),
    stop: &AtomicBool,
    fd: &mpsc::Sender<Result<std::os::fd::OwnedFd, String>>,
) {
    let (wake_daemon, wake_app) = doorbells;
    let mut end = match DaemonEnd::create(layout) {
        Ok(e) => e,
        Err(e) => {
            let _ = fd.send(Err(format!("channel: {e}")));
            return;
        }
    };
    let dup = end
        .fd()
        .try_clone_to_owned()
        .map_err(|e| format!("dup: {e}"));
    if fd.send(dup).is_err() {
        return;
    }
    let mut posts = Vec::with_capacity(BATCH as usize);
    while !stop.load(Ordering::Relaxed) {
        posts.clear();
        end.take_posts(BATCH, &mut posts);
        if !posts.is_empty() && !answer_after.is_zero() {
            let t = Instant::now();
            while t.elapsed() < answer_after {
                std::hint::spin_loop();
            }
        }
        for p in &posts {
            end.push_completion(CompletionDesc {
                conn: p.conn,
                wr_id: p.wr_id,
                len: p.len,
                kind: KIND_RECV,
                detail: 0,
            });
        }
        if !posts.is_empty() {
            if end.app_asleep() {
                wake_app.signal();
            }
            continue;
        }
        match wake {
            Wake::Spin => std::hint::spin_loop(),
            Wake::Sleep => {
                end.set_daemon_asleep(true);
                if !end.posts_waiting() {
                    wait_readable(&[wake_daemon.as_fd()], SLEEP_LIMIT).ok();
                }
                end.set_daemon_asleep(false);
                wake_daemon.drain();
            }
        }
    }
}

/// Times up to `max` round trips (one post, its completion back
/// `answer_after` later) through a fresh channel, for at most `budget`,
/// the daemon end waiting as `daemon` says and the application as `app`.
///
/// # Errors
/// The channel or a doorbell could not be made, or a completion did not
/// come back (or came back wrong).
pub fn round_trips(
    daemon: Wake,
    app: Wake,
    answer_after: Duration,
    max: u64,
    budget: Duration,
) -> Result<RoundTrips, String> {
    let layout = Layout::for_limits(64, 1);
    let doorbells = Arc::new((
        EventFd::new().map_err(|e| format!("eventfd: {e}"))?,
        EventFd::new().map_err(|e| format!("eventfd: {e}"))?,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let thread = {
        let (doorbells, stop) = (Arc::clone(&doorbells), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("handover-daemon".into())
            .spawn(move || daemon_end(layout, daemon, answer_after, &doorbells, &stop, &tx))
            .map_err(|e| format!("spawning the daemon end: {e}"))?
    };
    let result = rx
        .recv()
        .map_err(|_| "the daemon end made no channel".to_string())
        .and_then(|fd| fd)
        .and_then(|fd| AppEnd::open(fd, layout).map_err(|e| format!("mapping: {e}")))
        .and_then(|mut end| app_end(&mut end, app, &doorbells, max, budget));
    stop.store(true, Ordering::Relaxed);
    doorbells.0.signal();
    let _ = thread.join();
    result
}

/// The application's side of [`round_trips`].
fn app_end(
    app: &mut AppEnd,
    wake: Wake,
    doorbells: &(EventFd, EventFd),
    max: u64,
    budget: Duration,
) -> Result<RoundTrips, String> {
    let (wake_daemon, wake_app) = doorbells;
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| format!("histogram: {e}"))?;
    let start = Instant::now();
    for id in 0..max {
        if start.elapsed() >= budget {
            break;
        }
        let t0 = Instant::now();
        let post = PostDesc {
            wr_id: id,
            conn: 1,
            len: 64,
            dir: DIR_RECV,
            ..PostDesc::default()
        };
        if !app.post(post) {
            return Err("the post ring is full".into());
        }
        if app.daemon_asleep() {
            wake_daemon.signal();
        }
        let mut looks = 0u32;
        let c = loop {
            if let Some(c) = app.take_completion() {
                break c;
            }
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(1024) && t0.elapsed() > STALL {
                return Err(format!("no completion within {STALL:?}"));
            }
            match wake {
                Wake::Spin => std::hint::spin_loop(),
                Wake::Sleep => {
                    app.set_app_asleep(true);
                    if !app.completions_waiting() {
                        wait_readable(&[wake_app.as_fd()], SLEEP_LIMIT).ok();
                    }
                    app.set_app_asleep(false);
                    wake_app.drain();
                    if t0.elapsed() > STALL {
                        return Err(format!("no completion within {STALL:?}"));
                    }
                }
            }
        };
        let ns = t0.elapsed().as_nanos().max(1) as u64;
        if c.wr_id != id || c.len != post.len {
            return Err(format!("completion {c:?} for post {id}"));
        }
        h.record(ns.min(h.high()))
            .map_err(|e| format!("histogram: {e}"))?;
    }
    RoundTrips::of(&h).ok_or_else(|| "no round trip within the budget".into())
}

/// A thread busy at normal priority until dropped.
#[derive(Debug)]
pub struct Spinner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts the thread.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start() -> Result<Spinner, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("bench-spinner".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
            .map_err(|e| format!("spawning the spinner: {e}"))?;
        Ok(Spinner {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_recorded_round_trips() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram");
        assert_eq!(RoundTrips::of(&h), None);
        for ns in 1..=100u64 {
            h.record(ns * 1000).expect("record");
        }
        let r = RoundTrips::of(&h).expect("some");
        assert_eq!(r.n, 100);
        assert!((r.p50_us - 50.0).abs() < 0.1, "{r:?}");
        assert!((r.p99_us - 99.0).abs() < 0.1, "{r:?}");
    }

    fn sane(r: &RoundTrips, n: u64) {
        assert_eq!(r.n, n, "{r:?}");
        assert!(r.p50_us > 0.0 && r.p50_us <= r.p99_us, "{r:?}");
        // Generous: a loaded 2-CPU test machine, other tests beside.
        assert!(r.p50_us < 50_000.0, "{r:?}");
    }

    /// `n` round trips, answered `after` late, within a generous budget.
    fn measured(daemon: Wake, app: Wake, after: Duration, n: u64) -> RoundTrips {
        let r = round_trips(daemon, app, after, n, Duration::from_secs(20)).expect("measured");
        sane(&r, n);
        r
    }

    #[test]
    fn spinning_round_trips_come_back_in_order() {
        measured(Wake::Spin, Wake::Spin, Duration::ZERO, 2000);
    }

    #[test]
    fn sleeping_round_trips_ring_the_doorbells() {
        // A lost wakeup costs SLEEP_LIMIT: one in a hundred shows at p99.
        let r = measured(Wake::Sleep, Wake::Sleep, Duration::ZERO, 300);
        assert!(r.p99_us < SLEEP_LIMIT.as_micros() as f64 / 2.0, "{r:?}");
    }

    #[test]
    fn a_late_answer_wakes_a_sleeping_application() {
        let r = measured(Wake::Spin, Wake::Sleep, Duration::from_micros(200), 100);
        assert!(r.p50_us >= 200.0, "the answer waits its delay: {r:?}");
        assert!(
            r.p99_us < SLEEP_LIMIT.as_micros() as f64 / 2.0,
            "no lost wakeup: {r:?}"
        );
    }

    #[test]
    fn the_budget_bounds_the_time() {
        let start = Instant::now();
        let r = round_trips(
            Wake::Spin,
            Wake::Spin,
            Duration::ZERO,
            u64::MAX,
            Duration::from_millis(100),
        )
        .expect("measured");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(r.n > 0);
    }

    #[test]
    fn a_spinner_stops_when_dropped() {
        let s = Spinner::start().expect("spinner");
        std::thread::sleep(Duration::from_millis(10));
        let start = Instant::now();
        drop(s);
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
