//! `execve` with Linux's semantics for our sockets, attached: a socket
//! whose descriptors lack `FD_CLOEXEC` lives on in the new program.
//!
//! Before the C library's `execve` the shim writes a manifest of what
//! survives into the new program's environment ([`ENV_INHERIT`]) and
//! tells the daemon an exec is coming ([`Request::Exec`]), so the hang-up
//! of this program's attachment (its socket closes at the exec) does not
//! end it for a grace time. The new program, the same process, loads the
//! shim again; the first call it makes reads the manifest and attaches
//! naming the old attachment, and the daemon welcomes it back as that
//! attachment (same memory slot and channel: regions, posted work
//! requests and unread completions are where they were). It takes up
//! each socket under its descriptor numbers: listeners share their
//! port's accept queue as before, a connection nothing was read or
//! written on is adopted at its first use, and one read or written goes
//! on with the rings the manifest describes ([`CarriedStream`]). What did
//! not survive (every descriptor of it had `FD_CLOEXEC`) is closed as a
//! `close` closes it; a region no connection uses is deregistered. If
//! the exec fails the daemon is told and nothing changed.
//!
//! `execl`, `execle` and `execlp` (variadic: glibc calls its own
//! `execve` inside them, out of the shim's reach), `posix_spawn` and
//! `system` start programs without the manifest: there the inherited
//! descriptors are the kernel's placeholder sockets (`ENOTCONN`).
//!
//! [`Request::Exec`]: zerosplit::ipc::msg::Request::Exec

mod manifest;

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::RawFd;

use datapath::mr::MrId;
use zerosplit::attach::{CarriedRegion, ListenSocket};
use zerosplit::daemon::Families;
use zerosplit::provider::{ConnId, Provider};
use zerosplit::stream::Rings;

use crate::backend::Backend;
use crate::cabi::real;
use crate::log::log_line;
use crate::marks::FdMarks;
use crate::opts::Opts;
use crate::runtime::{Locked, Runtime};
use crate::setup::ENV_INHERIT;
use crate::sockets::{Kind, Listener, Sock, State, Stream};

pub(crate) use manifest::{CarriedStream, Entry, Manifest};

/// The longest manifest written: the kernel takes environment strings of
/// up to 128 KiB (`MAX_ARG_STRLEN`).
const MAX_MANIFEST: usize = 120 << 10;

/// The descriptors of `fds` that are still sockets in the new program:
/// the kernel's placeholders, unless something replaced one in between.
fn live(fds: &[RawFd]) -> Vec<RawFd> {
    fds.iter()
        .copied()
        .filter(|&fd| real::local_addr(fd).is_ok())
        .collect()
}

thread_local! {
    /// The shim's lock, kept by the thread that is calling `execve` from
    /// the manifest until the exec returns (it returns only if it failed).
    static HELD_FOR_EXEC: RefCell<Option<Locked<'static>>> = const { RefCell::new(None) };
}

/// Keeps `st` locked by this thread until [`Runtime::exec_failed`].
fn hold_for_exec(st: Locked<'static>) {
    HELD_FOR_EXEC.with(|h| *h.borrow_mut() = Some(st));
}

/// Whether descriptor `fd` stays open across `execve`.
fn survives_exec(fd: RawFd) -> bool {
    real::fcntl(fd, libc::F_GETFD, 0).is_ok_and(|f| f & libc::FD_CLOEXEC == 0)
}

impl Runtime {
    /// Before `execve`: the manifest's environment entry
    /// (`ZEROSPLIT_EXEC_INHERIT=…`), the daemon told; `None` when nothing
    /// of ours is open, or not attached (a stack of this process's own
    /// ends with its image). With a manifest, the calling thread keeps
    /// the shim's lock until the exec returns ([`Runtime::exec_failed`]):
    /// no other thread reads, writes or takes a completion after the
    /// manifest said where each stream stands.
    pub(crate) fn before_exec(&'static self) -> Option<String> {
        let mut st = self.lock();
        let Backend::Daemon { attached, .. } = &st.stack else {
            return None;
        };
        let attachment = attached.attachment();
        // Completions already come are applied to the sockets here; those
        // that come later wait in the channel for the new program.
        st.dispatch();
        let entries = st.exec_entries();
        if entries.iter().all(|e| matches!(e, Entry::Region(_))) {
            // No socket survives: the attachment ends with this image.
            return None;
        }
        let mut m = Manifest {
            pid: std::process::id(),
            attachment,
            entries,
        };
        let mut text = m.encode();
        if text.len() > MAX_MANIFEST {
            // Too long for one environment string (the kernel refuses the
            // exec past 128 KiB): options stay behind, and the connections
            // with rings are let go (their regions go on, to be
            // deregistered once they closed).
            log_line(&format!(
                "exec: {} sockets are too many to carry; those read or written are closed",
                m.entries.len()
            ));
            m.entries.retain(|e| !matches!(e, Entry::Opts { .. }));
            for e in &mut m.entries {
                if let Entry::Rings(c) = e {
                    *e = Entry::LetGo {
                        conn: c.conn.conn.to_bits(),
                    };
                }
            }
            text = m.encode();
            if text.len() > MAX_MANIFEST {
                log_line("exec: even so the manifest is too long; the sockets close");
                return None;
            }
        }
        if let Err(e) = st.stack.announce_exec(true) {
            log_line(&format!("exec: telling the daemon: {e}; the sockets close"));
            return None;
        }
        hold_for_exec(st);
        Some(format!("{ENV_INHERIT}={text}"))
    }

    /// `execve` failed after [`Runtime::before_exec`]: the program goes on
    /// as it was, and the lock held since is let go.
    pub(crate) fn exec_failed(&self) {
        let held = HELD_FOR_EXEC.with(|h| h.borrow_mut().take());
        let mut st = match held {
            Some(st) => st,
            None => self.lock(),
        };
        let _ = st.stack.announce_exec(false);
    }
}

impl State {
    /// What of this program's sockets survives an `execve` now.
    fn exec_entries(&mut self) -> Vec<Entry> {
        let mut by_sock: HashMap<u64, Vec<RawFd>> = HashMap::new();
        for (&fd, &id) in &self.fds {
            if survives_exec(fd) {
                by_sock.entry(id).or_default().push(fd);
            }
        }
        let mut entries = Vec::new();
        for (id, sock) in &self.socks {
            let mut fds = by_sock.remove(id).unwrap_or_default();
            fds.sort_unstable();
            // Its options, named by its first descriptor that survives.
            let opts = fds.first().and_then(|&fd| {
                sock.opts.encode().map(|_| Entry::Opts {
                    fd,
                    opts: Box::new(sock.opts.clone()),
                })
            });
            match &sock.kind {
                // Attached (the manifest is the daemon's), a listener is a
                // socket of the daemon's.
                Kind::Listener(Listener { socket: None, .. }) => {}
                Kind::Listener(Listener {
                    local,
                    socket: Some(socket),
                    ..
                }) if fds.is_empty() => entries.push(Entry::Unlisten {
                    port: local.port(),
                    socket: socket.0,
                }),
                Kind::Listener(
                    l @ Listener {
                        socket: Some(socket),
                        ..
                    },
                ) => {
                    entries.push(Entry::Listener {
                        local: l.local,
                        families: l.families,
                        socket: socket.0,
                        reuseport: l.reuseport,
                        backlog: l.max_backlog,
                        nonblock: sock.nonblock,
                        fds,
                    });
                    // Accepted here and not taken yet: the daemon's queue
                    // is shared, so there are none attached.
                }
                Kind::Stream(s) if !s.alive => {}
                Kind::Stream(s) if s.rings.is_some() => {
                    let now = |v: Result<u64, _>, seen: u64| v.map_or(seen, |v| v.max(seen));
                    let carried = s.rings.as_ref().and_then(|r| {
                        Some(CarriedStream {
                            conn: self.stack.carried_conn(s.conn)?,
                            rings: r.state(),
                            sends: s.sends,
                            received: now(self.stack.received(s.conn), s.received),
                            acked: now(self.stack.acked(s.conn), s.acked),
                            peer_fin: s.peer_fin,
                            urgent: s.urgent,
                            connected: s.connected,
                            shut_rd: s.shut_rd,
                            shut_wr: s.shut_wr,
                            oob_read: s.oob_read,
                            closing: false,
                            nonblock: sock.nonblock,
                            linger_zero: sock.opts.linger_zero(),
                            forked: s.forked,
                            fds,
                        })
                    });
                    entries.push(match carried {
                        Some(c) => Entry::Rings(Box::new(c)),
                        None => Entry::LetGo {
                            conn: s.conn.to_bits(),
                        },
                    });
                }
                Kind::Stream(s) if fds.is_empty() => entries.push(Entry::LetGo {
                    conn: s.conn.to_bits(),
                }),
                Kind::Stream(s) => {
                    entries.push(Entry::Stream {
                        conn: s.conn.to_bits(),
                        local: s.local,
                        peer: s.peer,
                        nonblock: sock.nonblock,
                        fds,
                    });
                    entries.extend(s.inherited.map(Entry::Parked));
                }
            }
            entries.extend(opts);
        }
        // Closed and still finishing: the new program keeps their rings
        // until they closed, or lets go of those without.
        for (&conn, rings) in &self.orphans {
            let carried = rings.as_ref().and_then(|r| {
                Some(CarriedStream {
                    conn: self.stack.carried_conn(conn)?,
                    rings: r.state(),
                    sends: 0,
                    received: 0,
                    acked: 0,
                    peer_fin: None,
                    urgent: None,
                    connected: true,
                    shut_rd: true,
                    shut_wr: true,
                    oob_read: false,
                    closing: true,
                    nonblock: false,
                    linger_zero: false,
                    forked: false,
                    fds: Vec::new(),
                })
            });
            entries.push(match carried {
                Some(c) => Entry::Rings(Box::new(c)),
                None => Entry::LetGo {
                    conn: conn.to_bits(),
                },
            });
        }
        // The attachment goes on: its regions with it, so that the new
        // program holds every one (and deregisters those it does not use).
        let regions = self.stack.carried_regions();
        entries.extend(regions.into_iter().map(Entry::Region));
        entries
    }

    /// Builds the table of the new program from `m`: its sockets under
    /// their descriptor numbers, marked `owned`.
    pub(crate) fn take_up_exec(&mut self, m: &Manifest, owned: &FdMarks) {
        self.take_up_rings(m, owned);
        self.take_up_sockets(m, owned);
        // The options set before the exec, on the sockets taken up.
        for e in &m.entries {
            if let Entry::Opts { fd, opts } = e {
                let sock = self.fds.get(fd).and_then(|id| self.socks.get_mut(id));
                if let Some(sock) = sock {
                    sock.opts = (**opts).clone();
                }
            }
        }
    }

    /// The listeners and the connections nothing was read or written on
    /// of `m`, and what it lets go of.
    fn take_up_sockets(&mut self, m: &Manifest, owned: &FdMarks) {
        for e in &m.entries {
            match e {
                Entry::Listener {
                    local,
                    families,
                    socket,
                    reuseport,
                    backlog,
                    nonblock,
                    fds,
                } => {
                    let fds = live(fds);
                    let port = local.port();
                    let held = Some(ListenSocket(*socket));
                    let socket = match self.stack.open_listener(port, *reuseport, *families, held) {
                        Ok(s) => s,
                        Err(e) => {
                            log_line(&format!("after exec: the listener on port {port}: {e}"));
                            continue;
                        }
                    };
                    if fds.is_empty() {
                        let _ = self.stack.close_listener(port, socket);
                        continue;
                    }
                    let id = self.insert(Sock {
                        refs: fds.len(),
                        calls: 0,
                        nonblock: *nonblock,
                        kind: Kind::Listener(Listener {
                            local: *local,
                            families: *families,
                            socket,
                            reuseport: *reuseport,
                            backlog: Default::default(),
                            max_backlog: *backlog,
                        }),
                        opts: Opts::default(),
                    });
                    self.listeners.entry(port).or_default().push(id);
                    for fd in fds {
                        self.fds.insert(fd, id);
                        owned.set(fd, true);
                    }
                }
                Entry::Stream {
                    conn,
                    local,
                    peer,
                    nonblock,
                    fds,
                } => {
                    let conn = ConnId::from_bits(*conn);
                    let fds = live(fds);
                    self.stack.hold(conn);
                    if fds.is_empty() {
                        self.stack.let_go(conn);
                        continue;
                    }
                    let mut s = Stream::new(conn, *local, *peer, true);
                    s.lazy = true;
                    let id = self.insert(Sock {
                        refs: fds.len(),
                        calls: 0,
                        nonblock: *nonblock,
                        kind: Kind::Stream(s),
                        opts: Opts::default(),
                    });
                    self.by_conn.insert(conn, id);
                    for fd in fds {
                        self.fds.insert(fd, id);
                        owned.set(fd, true);
                    }
                }
                Entry::Parked(r) => {
                    let id = self.by_conn.get(&r.conn).copied();
                    let sock = id.and_then(|id| self.socks.get_mut(&id));
                    if let Some(Kind::Stream(s)) = sock.map(|s| &mut s.kind) {
                        s.inherited = Some(*r);
                    }
                }
                Entry::Region(_) | Entry::Rings(_) | Entry::Opts { .. } => {}
                Entry::LetGo { conn } => self.stack.let_go(ConnId::from_bits(*conn)),
                Entry::Unlisten { port, socket } => {
                    // Held since the exec: take it up to let go of it.
                    let held = Some(ListenSocket(*socket));
                    if let Ok(s) = self.stack.open_listener(*port, false, Families::BOTH, held) {
                        let _ = self.stack.close_listener(*port, s);
                    }
                }
            }
        }
    }
}

impl State {
    /// The regions and the connections with rings of `m`: taken in when
    /// the daemon welcomed this program back as the attachment its old
    /// self held (else let go of: the daemon resets them). A connection
    /// whose descriptors all closed at the exec is released as a `close`
    /// releases it; regions no connection uses are deregistered (once
    /// nothing is posted on them).
    fn take_up_rings(&mut self, m: &Manifest, owned: &FdMarks) {
        let resumed = self.stack.is_attached() && self.stack.resumed();
        let mut unused: HashMap<MrId, CarriedRegion> = HashMap::new();
        for e in &m.entries {
            if let Entry::Region(r) = e {
                if resumed && self.stack.carry_in(Some(*r), None).is_ok() {
                    unused.insert(r.mr, *r);
                }
            }
        }
        for e in &m.entries {
            let Entry::Rings(c) = e else {
                continue;
            };
            let conn = c.conn.conn;
            if !resumed
                || !c.sound(&unused)
                || self.by_conn.contains_key(&conn)
                || self.stack.carry_in(None, Some(c.conn)).is_err()
            {
                log_line(&format!(
                    "after exec: the connection to {} could not be taken over; it is reset",
                    c.conn.remote
                ));
                self.stack.let_go(conn);
                continue;
            }
            unused.remove(&c.rings.rx);
            unused.remove(&c.rings.tx);
            let rings = Rings::from_state(c.rings);
            if c.closing {
                self.orphans.insert(conn, Some(rings));
                continue;
            }
            let mut s = Stream::new(conn, c.conn.local, c.conn.remote, c.connected);
            s.rings = Some(rings);
            s.sends = c.sends;
            (s.received, s.acked) = (c.received, c.acked);
            (s.peer_fin, s.urgent) = (c.peer_fin, c.urgent);
            s.shut_rd = c.shut_rd;
            s.shut_wr = c.shut_wr;
            s.oob_read = c.oob_read;
            s.forked = c.forked;
            let fds = live(&c.fds);
            let mut opts = Opts::default();
            if c.linger_zero {
                opts.linger = (true, 0);
            }
            let id = self.insert(Sock {
                refs: fds.len(),
                calls: 0,
                nonblock: c.nonblock,
                kind: Kind::Stream(s),
                opts,
            });
            self.by_conn.insert(conn, id);
            if fds.is_empty() {
                // Every descriptor had FD_CLOEXEC: closed at the exec.
                self.release(id);
                continue;
            }
            for fd in fds {
                self.fds.insert(fd, id);
                owned.set(fd, true);
            }
        }
        // Spare rings, and those of connections let go of: the latter
        // still have receive buffers posted until they closed.
        self.unused_regions.extend(unused.into_keys());
        self.free_unused_regions();
    }
}
