//! `fork` with Linux's semantics for our sockets, attached: the child
//! holds every socket it inherited, in its own attachment.
//!
//! Before the C library's fork, the forking thread takes the shim's lock
//! (the child's copy of the table is then consistent: no other thread is
//! inside it) and makes a pipe. After it:
//!
//! - **the child** lets go of its copy of the parent's attachment (its
//!   descriptors; the parent's memory is not mapped in a child, see
//!   `SharedMemory::open`), gets its own wakeups, attaches anew naming
//!   the parent's attachment (the daemon checks the lineage and makes it a
//!   holder of all the parent holds) and takes up its inherited
//!   listeners (one accept queue with the parent's). A connection
//!   nothing was posted on yet (accepted and handed to a child, the
//!   fork-per-connection shape) is held, and adopted by whichever process
//!   uses it first. It starts its polling thread and tells the parent
//!   through the pipe.
//! - **the parent** lets the lock go and waits (at most
//!   [`CHILD_ATTACH_TIMEOUT`]) for that word, so that nothing it does
//!   next (closing its copies, exiting: a daemonizing server) can close
//!   a socket the child holds.
//!
//! A connection the parent had read or written before the fork lives in
//! the parent's memory: the parent parks it when it closes its descriptor
//! and the child, at its first use, takes it up with its bytes
//! (`handover.rs`). Standalone (`--standalone`), a child's
//! sockets are unusable, as before: the stack is the parent's.

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::cabi::real;
use crate::log::log_line;
use crate::runtime::{Locked, Runtime, StackOwn, WAKER};
use crate::sockets::{Kind, State};

/// How long a parent waits for its child to take up the sockets.
const CHILD_ATTACH_TIMEOUT: Duration = Duration::from_secs(5);

/// A fork under way, kept by the forking thread from before the fork to
/// after it (in both processes: the child's thread is a copy).
struct Forking {
    guard: Locked<'static>,
    ready_rx: OwnedFd,
    ready_tx: OwnedFd,
    parent: u32,
}

thread_local! {
    static FORKING: RefCell<Option<Forking>> = const { RefCell::new(None) };
}

/// Whether this thread is inside a fork the shim prepared (the child's
/// fork handler then leaves the shim on).
pub(crate) fn prepared() -> bool {
    FORKING.with(|f| f.borrow().is_some())
}

impl Runtime {
    /// Before `fork`: attached, takes the lock and makes the pipe.
    pub(crate) fn before_fork(&'static self) {
        let st = self.lock();
        let Backend::Daemon { attached, .. } = &st.stack else {
            return;
        };
        let parent = attached.attachment();
        let Ok((ready_rx, ready_tx)) = real::pipe() else {
            return;
        };
        FORKING.with(|f| {
            *f.borrow_mut() = Some(Forking {
                guard: st,
                ready_rx,
                ready_tx,
                parent,
            });
        });
    }

    /// After `fork` returned `pid`, in the parent (or after a failed
    /// fork) and in the child.
    pub(crate) fn after_fork(self: &std::sync::Arc<Self>, pid: libc::pid_t) {
        let Some(f) = FORKING.with(|f| f.borrow_mut().take()) else {
            return;
        };
        let Forking {
            guard,
            ready_rx,
            ready_tx,
            parent,
        } = f;
        if pid != 0 {
            let mut guard = guard;
            if pid > 0 {
                guard.mark_forked();
            }
            drop(guard);
            drop(ready_tx);
            if pid > 0 {
                wait_for_child(&ready_rx);
            }
            return;
        }
        drop(ready_rx);
        let mut st = guard;
        let _own = StackOwn::enter();
        self.become_child(&mut st, parent);
        let setup = st.setup.clone();
        drop(st);
        if let Err(e) = self.spawn_poller(&setup) {
            log_line(&format!("after fork: {e}"));
        }
        real::write(ready_tx.as_fd().as_raw_fd(), b"1");
    }

    /// In the child: its own wakeups and attachment, and its hold on what
    /// it inherited.
    fn become_child(&self, st: &mut Locked<'_>, parent: u32) {
        // The parent's other threads do not exist here, and its spare
        // rings are in its memory.
        st.sleepers.clear();
        st.spare.clear();
        st.parked.clear();
        self.contenders
            .store(0, std::sync::atomic::Ordering::Release);
        self.asleep
            .store(false, std::sync::atomic::Ordering::Release);
        let mut fds = vec![self.wake.as_fd().as_raw_fd()];
        WAKER.with(|w| fds.extend(w.as_ref().map(|w| w.as_fd().as_raw_fd())));
        for fd in fds {
            if let Err(e) = real::renew_eventfd(fd) {
                log_line(&format!("after fork: a wakeup of its own: errno {e}"));
            }
        }
        let old = std::mem::replace(&mut st.stack, Backend::Detached);
        let algorithm = old.algorithm();
        if let Backend::Daemon { attached, .. } = old {
            attached.forget_in_child();
        }
        if let Some(path) = st.setup.daemon.clone() {
            match zerosplit::attach::attach_child(&path, parent) {
                Ok(a) => {
                    st.stack = Backend::Daemon {
                        attached: Box::new(a),
                        since: Instant::now(),
                        algorithm,
                    };
                }
                Err(e) => log_line(&format!(
                    "after fork: attaching to the daemon at {}: {e}; the sockets this process inherited are reset",
                    path.display()
                )),
            }
        }
        st.take_up_inherited();
    }
}

/// Waits for the child's word that it holds what it inherited.
fn wait_for_child(rx: &OwnedFd) {
    let mut fds = [libc::pollfd {
        fd: rx.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let until = Instant::now() + CHILD_ATTACH_TIMEOUT;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match real::ppoll(&mut fds, Some(left), None) {
            Ok(0) => {
                log_line("fork: the child did not take up its sockets in time");
                return;
            }
            Ok(_) => {
                // A word, or EOF: the child exec'd or exited first.
                let _ = real::read(rx.as_fd().as_raw_fd(), &mut [0u8; 1]);
                return;
            }
            Err(libc::EINTR) if !left.is_zero() => continue,
            Err(_) => return,
        }
    }
}

impl State {
    /// In a parent after `fork`: its streams with rings may be held by the
    /// child now, so closing them parks them ([`State::park`]).
    fn mark_forked(&mut self) {
        for s in self.socks.values_mut() {
            if let Kind::Stream(s) = &mut s.kind {
                s.forked |= s.rings.is_some() && s.alive;
            }
        }
    }

    /// A forked child's hold on its inherited sockets: listeners take up
    /// the shared accept queue, untouched connections are adopted, and
    /// what the parent used or closed is let go (reset here).
    fn take_up_inherited(&mut self) {
        // The daemon's sockets (a parent with a stack of its own has none
        // to hand down).
        let held: Vec<_> = (self.socks.values())
            .filter_map(|s| match &s.kind {
                Kind::Listener(l) => Some((l.local.port(), l.reuseport, l.families, l.socket?)),
                Kind::Stream(_) => None,
            })
            .collect();
        for (port, reuseport, families, socket) in held {
            if let Err(e) = self
                .stack
                .open_listener(port, reuseport, families, Some(socket))
            {
                log_line(&format!("after fork: the listener on port {port}: {e}"));
            }
        }
        // Connections the parent closed and the TCP still finishes.
        for (conn, _) in std::mem::take(&mut self.orphans) {
            self.stack.let_go(conn);
        }
        let ids: Vec<_> = self.socks.keys().copied().collect();
        for id in ids {
            let Some(Kind::Stream(s)) = self.socks.get_mut(&id).map(|s| &mut s.kind) else {
                continue;
            };
            if !s.alive {
                continue;
            }
            // Held; adopted at its first use here (the parent may be the
            // one that uses it: a child that forks to exec), or, if the
            // parent read or wrote it, taken up with its bytes once the
            // parent let go of it (its rings are in the parent's memory).
            self.stack.hold(s.conn);
            if let Some(r) = s.rings.take() {
                s.inherited = Some(r.state());
            }
            s.lazy = true;
        }
    }
}
