//! Running the daemon: a thread per queue.
//!
//! Queue `q`'s thread (pinned to `threads.datapath_cores[q]` when given)
//! polls its stack, then, if that pass did work or left completions to
//! hand out, runs the attachments' side of a turn
//! ([`Daemon::turn_shared`]) under the daemon's lock; with nothing to do it
//! only takes the lock if no other thread holds it. The first queue's
//! thread (the caller's) is the home thread: it takes the lock every
//! turn, asks the caller whether to go on, and when it sleeps it also
//! watches the listening socket and every attachment's socket and
//! doorbell. Lock order is the daemon's, then a stack's (see
//! [`super::queues`]); no thread waits for the daemon's lock while it
//! holds its stack.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use datapath::nic::EventFd;

use super::{Daemon, Queues, ARP_CHECK_EVERY, TURNS_PER_SOCKET_READ};
use crate::idle::{Idle, IdlePolicy, PollConfig};

/// What the home thread watches while it sleeps, besides its queue.
#[derive(Debug, Default)]
struct Watch {
    sockets: Vec<Arc<OwnedFd>>,
    doorbells: Vec<Arc<EventFd>>,
}

/// Sets the flag when dropped.
struct StopOnExit<'a>(&'a AtomicBool);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn lock<'a, 'd>(daemon: &'a Mutex<&'d mut Daemon>) -> MutexGuard<'a, &'d mut Daemon> {
    daemon.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Daemon {
    /// Runs until `stop` is set (threads unpinned).
    pub fn run(&mut self, stop: &AtomicBool) {
        self.serve(&[], |_| !stop.load(Ordering::Relaxed));
    }

    /// Runs a thread per queue, queue `q`'s pinned to `cores[q]` if
    /// given, the first queue's being the calling thread, until `go_on`
    /// (called by the calling thread about every turn, or every sleep, at
    /// most [`crate::idle::MAX_SLEEP`] apart) says stop.
    ///
    /// A queue whose thread cannot be started is served by nobody: the
    /// failure is logged and the daemon stops.
    pub fn serve(&mut self, cores: &[usize], mut go_on: impl FnMut(&mut Daemon) -> bool) {
        let queues = Arc::clone(&self.queues);
        let poll = self.poll;
        let stop = AtomicBool::new(false);
        let daemon = Mutex::new(self);
        std::thread::scope(|s| {
            for q in 1..queues.len() {
                let (daemon, queues, stop) = (&daemon, &*queues, &stop);
                let core = cores.get(q).copied();
                let started = std::thread::Builder::new()
                    .name(format!("zs-queue-{q}"))
                    .spawn_scoped(s, move || {
                        // However this thread ends (a panic too), the
                        // daemon stops: no queue goes unserved unseen.
                        let _stop = StopOnExit(stop);
                        if let Some(id) = core {
                            if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                                log::warn!("daemon: could not pin queue {q}'s thread to core {id}");
                            }
                        }
                        serve_queue(daemon, queues, q, poll, stop, &mut |_| true);
                    });
                if let Err(e) = started {
                    log::error!("daemon: starting queue {q}'s thread: {e}");
                    stop.store(true, Ordering::Relaxed);
                }
            }
            serve_queue(&daemon, &queues, 0, poll, &stop, &mut go_on);
            stop.store(true, Ordering::Relaxed);
            queues.wake_all();
        });
    }

    /// Before the home thread sleeps: tells every attachment so (a post
    /// then rings the doorbell) and returns what to watch, or `None` if a
    /// post raced the flags. Sleep at most the returned limit.
    fn prepare_sleep(&mut self, limit: Duration) -> Option<(Watch, Duration)> {
        for a in self.attachments.values() {
            a.chan.set_daemon_asleep(true);
        }
        // A post that raced the flag found it clear and rang no bell.
        if self
            .attachments
            .values_mut()
            .any(|a| a.chan.posts_waiting())
        {
            return None;
        }
        let mut watch = Watch::default();
        watch.sockets.push(Arc::clone(&self.listener));
        watch
            .sockets
            .extend(self.pending.iter().map(|p| Arc::clone(&p.sock)));
        for a in self.attachments.values() {
            watch.sockets.push(Arc::clone(&a.sock));
            watch.doorbells.push(Arc::clone(&a.wake_daemon));
        }
        let limit = if !self.connects.is_empty() {
            limit.min(ARP_CHECK_EVERY)
        } else if self.pending.is_empty() && self.slots.draining() == 0 {
            limit
        } else {
            limit.min(Duration::from_millis(10))
        };
        Some((watch, limit))
    }

    /// The home thread is awake again.
    fn woke(&mut self) {
        for a in self.attachments.values() {
            a.chan.set_daemon_asleep(false);
            a.wake_daemon.drain();
        }
        // What woke the loop may be the socket: read it on the next turn.
        self.since_socket = TURNS_PER_SOCKET_READ;
    }
}

/// Queue `q`'s loop (see the module's text); `go_on` is asked by the home
/// thread (`q == 0`) only.
fn serve_queue(
    daemon: &Mutex<&mut Daemon>,
    queues: &Queues,
    q: usize,
    poll: PollConfig,
    stop: &AtomicBool,
    go_on: &mut dyn FnMut(&mut Daemon) -> bool,
) {
    let home = q == 0;
    let mut idle = IdlePolicy::new(poll);
    while !stop.load(Ordering::Relaxed) {
        queues.yield_to_others(q);
        let pass = queues.poll_queue(q);
        let mut work = pass.work;
        let held = if home || pass.work > 0 || pass.owes {
            Some(lock(daemon))
        } else {
            daemon.try_lock().ok()
        };
        if let Some(mut d) = held {
            work += d.turn_shared();
            if home && !go_on(&mut d) {
                break;
            }
        }
        match idle.after(work, pass.now, || pass.deadline) {
            Idle::Sleep(limit) => {
                let start = std::time::Instant::now();
                let watch = if home {
                    lock(daemon).prepare_sleep(limit)
                } else {
                    Some((Watch::default(), limit))
                };
                if let Some((watch, limit)) = watch {
                    let mut fds: Vec<BorrowedFd<'_>> =
                        watch.sockets.iter().map(|s| s.as_fd()).collect();
                    fds.extend(watch.doorbells.iter().map(|d| d.as_fd()));
                    if let Err(e) = queues.sleep_queue(q, &fds, limit) {
                        log::warn!("daemon: queue {q} sleeping: {e}");
                    }
                }
                if home {
                    lock(daemon).woke();
                }
                idle.slept(start.elapsed());
                idle.busy();
            }
            other => other.pause(),
        }
    }
}
