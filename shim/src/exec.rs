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

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::os::fd::RawFd;

use datapath::mr::{Access, MrId};
use zerosplit::attach::{CarriedConn, CarriedRegion, ListenSocket};
use zerosplit::provider::{ConnId, Provider};
use zerosplit::stream::{Rings, RingsState};

use crate::backend::Backend;
use crate::cabi::real;
use crate::log::log_line;
use crate::marks::FdMarks;
use crate::opts::Opts;
use crate::runtime::Runtime;
use crate::setup::ENV_INHERIT;
use crate::sockets::{Kind, Listener, Sock, State, Stream};

/// What crosses an `execve`, as the new program takes it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The process that exec'd (the new program is the same one; another
    /// process that inherits the environment ignores the manifest).
    pub pid: u32,
    /// Its attachment to the daemon.
    pub attachment: u32,
    pub entries: Vec<Entry>,
}

/// One socket, or something the new program lets go of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A listener (the daemon's socket) and the descriptors naming it.
    Listener {
        local: SocketAddrV4,
        socket: u32,
        reuseport: bool,
        backlog: usize,
        nonblock: bool,
        fds: Vec<RawFd>,
    },
    /// A connection nothing was read or written on here.
    Stream {
        conn: u64,
        local: SocketAddrV4,
        peer: SocketAddrV4,
        nonblock: bool,
        fds: Vec<RawFd>,
    },
    /// A connection that does not survive: let go of it.
    LetGo { conn: u64 },
    /// A listener that does not survive: let go of it.
    Unlisten { port: u16, socket: u32 },
    /// A region of the attachment's memory slot: the attachment goes on,
    /// so the new program takes it in (and deregisters what no
    /// connection of its own uses).
    Region(CarriedRegion),
    /// A connection read or written here: its rings and the posted work
    /// requests on them stay where they are, in the attachment's memory.
    Rings(Box<CarriedStream>),
}

/// A connection with rings, as the new program takes it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CarriedStream {
    pub conn: CarriedConn,
    pub rings: RingsState,
    /// Posted sends not yet acknowledged.
    pub sends: usize,
    pub peer_fin: Option<u64>,
    pub connected: bool,
    pub shut_rd: bool,
    pub shut_wr: bool,
    pub oob_read: bool,
    /// Closed here and still finishing: only its rings are taken over,
    /// to be kept or deregistered once it closed.
    pub closing: bool,
    pub nonblock: bool,
    /// Its descriptors in the new program (none: it closes at the exec).
    pub fds: Vec<RawFd>,
}

impl CarriedStream {
    const CONNECTED: u8 = 1;
    const SHUT_RD: u8 = 2;
    const SHUT_WR: u8 = 4;
    const OOB_READ: u8 = 8;
    const CLOSING: u8 = 16;
    const NONBLOCK: u8 = 32;

    fn flags(&self) -> u8 {
        [
            (self.connected, Self::CONNECTED),
            (self.shut_rd, Self::SHUT_RD),
            (self.shut_wr, Self::SHUT_WR),
            (self.oob_read, Self::OOB_READ),
            (self.closing, Self::CLOSING),
            (self.nonblock, Self::NONBLOCK),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |f, (_, bit)| f | bit)
    }

    fn encode(&self) -> String {
        let (c, r) = (&self.conn, &self.rings);
        let fin = self.peer_fin.map_or("-".into(), |f| f.to_string());
        format!(
            "R,{},{},{},{},{},{},{},{},{},{},{},{},{},{},{fin},{},{}",
            c.conn.to_bits(),
            c.slot,
            c.recv,
            c.send,
            c.local,
            c.remote,
            r.rx.to_bits(),
            r.tx.to_bits(),
            r.buf,
            r.ring,
            r.read,
            r.rx_posted,
            r.written,
            self.sends,
            self.flags(),
            fds_text(&self.fds)
        )
    }

    /// The fields after `R`, as [`CarriedStream::encode`] wrote them.
    fn decode(f: &[&str]) -> Option<CarriedStream> {
        let [conn, slot, recv, send, local, remote, rx, tx, buf, ring, read, rx_posted, written, sends, fin, flags, fds] =
            f
        else {
            return None;
        };
        let n = |s: &str| s.parse::<u64>().ok();
        let id = ConnId::from_bits(n(conn)?);
        let flags: u8 = flags.parse().ok()?;
        if flags >= Self::NONBLOCK << 1 {
            return None;
        }
        let on = |bit: u8| flags & bit != 0;
        Some(CarriedStream {
            conn: CarriedConn {
                conn: id,
                slot: slot.parse().ok()?,
                recv: recv.parse().ok()?,
                send: send.parse().ok()?,
                local: local.parse().ok()?,
                remote: remote.parse().ok()?,
            },
            rings: RingsState {
                conn: id,
                rx: MrId::from_bits(n(rx)?),
                tx: MrId::from_bits(n(tx)?),
                buf: n(buf)?,
                ring: n(ring)?,
                read: n(read)?,
                rx_posted: n(rx_posted)?,
                written: n(written)?,
            },
            sends: sends.parse().ok()?,
            peer_fin: match *fin {
                "-" => None,
                f => Some(f.parse().ok()?),
            },
            connected: on(Self::CONNECTED),
            shut_rd: on(Self::SHUT_RD),
            shut_wr: on(Self::SHUT_WR),
            oob_read: on(Self::OOB_READ),
            closing: on(Self::CLOSING),
            nonblock: on(Self::NONBLOCK),
            fds: parse_fds(fds)?,
        })
    }
}

/// Region access as the manifest writes it.
fn access_code(a: Access) -> u8 {
    match a {
        Access::RECV => 1,
        Access::SEND => 2,
        _ => 3,
    }
}

/// Descriptors as `3/9`, none as `-`.
fn fds_text(fds: &[RawFd]) -> String {
    if fds.is_empty() {
        return "-".into();
    }
    fds.iter()
        .map(RawFd::to_string)
        .collect::<Vec<_>>()
        .join("/")
}

fn parse_fds(s: &str) -> Option<Vec<RawFd>> {
    if s == "-" {
        return Some(Vec::new());
    }
    s.split('/').map(|n| n.parse().ok()).collect()
}

impl Manifest {
    /// The value of [`ENV_INHERIT`].
    pub(crate) fn encode(&self) -> String {
        let mut out = format!("{},{}", self.pid, self.attachment);
        for e in &self.entries {
            out.push(';');
            out += &match e {
                Entry::Listener {
                    local,
                    socket,
                    reuseport,
                    backlog,
                    nonblock,
                    fds,
                } => format!(
                    "L,{local},{socket},{},{backlog},{},{}",
                    u8::from(*reuseport),
                    u8::from(*nonblock),
                    fds_text(fds)
                ),
                Entry::Stream {
                    conn,
                    local,
                    peer,
                    nonblock,
                    fds,
                } => format!(
                    "C,{conn},{local},{peer},{},{}",
                    u8::from(*nonblock),
                    fds_text(fds)
                ),
                Entry::LetGo { conn } => format!("X,{conn}"),
                Entry::Unlisten { port, socket } => format!("U,{port},{socket}"),
                Entry::Region(r) => format!(
                    "M,{},{},{},{}",
                    r.mr.to_bits(),
                    r.offset,
                    r.len,
                    access_code(r.access)
                ),
                Entry::Rings(c) => c.encode(),
            };
        }
        out
    }

    /// Reads a manifest; `None` if any part of it is malformed (a
    /// manifest is the shim's own writing: nothing of a damaged one is
    /// taken up).
    pub(crate) fn decode(text: &str) -> Option<Manifest> {
        let mut parts = text.split(';');
        let (pid, attachment) = parts.next()?.split_once(',')?;
        let mut m = Manifest {
            pid: pid.parse().ok()?,
            attachment: attachment.parse().ok()?,
            entries: Vec::new(),
        };
        for part in parts {
            let f: Vec<&str> = part.split(',').collect();
            let fds = parse_fds;
            let flag = |s: &str| -> Option<bool> {
                match s {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => None,
                }
            };
            m.entries.push(match f.as_slice() {
                ["L", local, socket, reuseport, backlog, nonblock, list] => Entry::Listener {
                    local: local.parse().ok()?,
                    socket: socket.parse().ok()?,
                    reuseport: flag(reuseport)?,
                    backlog: backlog.parse().ok()?,
                    nonblock: flag(nonblock)?,
                    fds: fds(list)?,
                },
                ["C", conn, local, peer, nonblock, list] => Entry::Stream {
                    conn: conn.parse().ok()?,
                    local: local.parse().ok()?,
                    peer: peer.parse().ok()?,
                    nonblock: flag(nonblock)?,
                    fds: fds(list)?,
                },
                ["X", conn] => Entry::LetGo {
                    conn: conn.parse().ok()?,
                },
                ["U", port, socket] => Entry::Unlisten {
                    port: port.parse().ok()?,
                    socket: socket.parse().ok()?,
                },
                ["M", mr, offset, len, access] => Entry::Region(CarriedRegion {
                    mr: MrId::from_bits(mr.parse().ok()?),
                    offset: offset.parse().ok()?,
                    len: len.parse().ok()?,
                    access: match *access {
                        "1" => Access::RECV,
                        "2" => Access::SEND,
                        "3" => Access::BOTH,
                        _ => return None,
                    },
                }),
                ["R", rest @ ..] => Entry::Rings(Box::new(CarriedStream::decode(rest)?)),
                _ => return None,
            });
        }
        Some(m)
    }

    /// The manifest this process was started with, if it is this
    /// process's.
    pub(crate) fn from_env() -> Option<Manifest> {
        let text = std::env::var(ENV_INHERIT).ok()?;
        let m = Manifest::decode(&text);
        if m.is_none() {
            log_line(&format!(
                "{ENV_INHERIT} is malformed: no socket is taken up"
            ));
        }
        m.filter(|m| m.pid == std::process::id())
    }
}

/// The longest manifest written: the kernel takes environment strings of
/// up to 128 KiB (`MAX_ARG_STRLEN`).
const MAX_MANIFEST: usize = 120 << 10;

/// Whether descriptor `fd` stays open across `execve`.
fn survives_exec(fd: RawFd) -> bool {
    real::fcntl(fd, libc::F_GETFD, 0).is_ok_and(|f| f & libc::FD_CLOEXEC == 0)
}

impl Runtime {
    /// Before `execve`: the manifest's environment entry
    /// (`ZEROSPLIT_EXEC_INHERIT=…`), the daemon told; `None` when nothing
    /// of ours is open, or not attached (a stack of this process's own
    /// ends with its image).
    pub(crate) fn before_exec(&self) -> Option<String> {
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
            // exec past 128 KiB): the connections with rings are let go.
            log_line(&format!(
                "exec: {} sockets are too many to carry; those read or written are reset",
                m.entries.len()
            ));
            m.entries.retain(|e| !matches!(e, Entry::Region(_)));
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
        Some(format!("{ENV_INHERIT}={text}"))
    }

    /// `execve` failed after [`Runtime::before_exec`]: the program goes on
    /// as it was.
    pub(crate) fn exec_failed(&self) {
        let mut st = self.lock();
        let _ = st.stack.announce_exec(false);
    }

    /// In the new program: takes up the sockets of `m` under their
    /// descriptor numbers and marks them `owned`.
    pub(crate) fn take_up_exec(&self, m: &Manifest, owned: &FdMarks) {
        let mut st = self.lock();
        st.take_up_exec(m, owned);
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
                    let carried = s.rings.as_ref().and_then(|r| {
                        Some(CarriedStream {
                            conn: self.stack.carried_conn(s.conn)?,
                            rings: r.state(),
                            sends: s.sends,
                            peer_fin: s.peer_fin,
                            connected: s.connected,
                            shut_rd: s.shut_rd,
                            shut_wr: s.shut_wr,
                            oob_read: s.oob_read,
                            closing: false,
                            nonblock: sock.nonblock,
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
                Kind::Stream(s) => entries.push(Entry::Stream {
                    conn: s.conn.to_bits(),
                    local: s.local,
                    peer: s.peer,
                    nonblock: sock.nonblock,
                    fds,
                }),
            }
        }
        // Closed and still finishing: the new program keeps their rings
        // until they closed, or lets go of those without.
        for (&conn, rings) in &self.orphans {
            let carried = rings.as_ref().and_then(|r| {
                Some(CarriedStream {
                    conn: self.stack.carried_conn(conn)?,
                    rings: r.state(),
                    sends: 0,
                    peer_fin: None,
                    connected: true,
                    shut_rd: true,
                    shut_wr: true,
                    oob_read: false,
                    closing: true,
                    nonblock: false,
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

    /// Builds the table of the new program from `m`.
    fn take_up_exec(&mut self, m: &Manifest, owned: &FdMarks) {
        self.take_up_rings(m, owned);
        // A descriptor the old program named is still a socket (the
        // placeholder) unless something replaced it in between.
        let live = |fds: &[RawFd]| -> Vec<RawFd> {
            fds.iter()
                .copied()
                .filter(|&fd| real::local_addr(fd).is_ok())
                .collect()
        };
        for e in &m.entries {
            match e {
                Entry::Listener {
                    local,
                    socket,
                    reuseport,
                    backlog,
                    nonblock,
                    fds,
                } => {
                    let fds = live(fds);
                    let port = local.port();
                    let held = Some(ListenSocket(*socket));
                    let socket = match self.stack.open_listener(port, *reuseport, held) {
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
                Entry::Region(_) | Entry::Rings(_) => {}
                Entry::LetGo { conn } => self.stack.let_go(ConnId::from_bits(*conn)),
                Entry::Unlisten { port, socket } => {
                    // Held since the exec: take it up to let go of it.
                    let held = Some(ListenSocket(*socket));
                    if let Ok(s) = self.stack.open_listener(*port, false, held) {
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
    /// releases it; regions no connection uses are deregistered.
    fn take_up_rings(&mut self, m: &Manifest, owned: &FdMarks) {
        let resumed = self.stack.is_attached() && self.stack.resumed();
        let mut unused: Vec<MrId> = Vec::new();
        for e in &m.entries {
            if let Entry::Region(r) = e {
                if resumed && self.stack.carry_in(Some(*r), None).is_ok() {
                    unused.push(r.mr);
                }
            }
        }
        for e in &m.entries {
            let Entry::Rings(c) = e else {
                continue;
            };
            let conn = c.conn.conn;
            let has = |mr: MrId| unused.contains(&mr);
            if !resumed
                || !has(c.rings.rx)
                || !has(c.rings.tx)
                || self.stack.carry_in(None, Some(c.conn)).is_err()
            {
                log_line(&format!(
                    "after exec: the connection to {} could not be taken over; it is reset",
                    c.conn.remote
                ));
                self.stack.let_go(conn);
                continue;
            }
            unused.retain(|&mr| mr != c.rings.rx && mr != c.rings.tx);
            let rings = Rings::from_state(c.rings);
            if c.closing {
                self.orphans.insert(conn, Some(rings));
                continue;
            }
            let mut s = Stream::new(conn, c.conn.local, c.conn.remote, c.connected);
            s.rings = Some(rings);
            s.sends = c.sends;
            s.peer_fin = c.peer_fin;
            s.shut_rd = c.shut_rd;
            s.shut_wr = c.shut_wr;
            s.oob_read = c.oob_read;
            let fds: Vec<RawFd> = c
                .fds
                .iter()
                .copied()
                .filter(|&fd| real::local_addr(fd).is_ok())
                .collect();
            let id = self.insert(Sock {
                refs: fds.len(),
                calls: 0,
                nonblock: c.nonblock,
                kind: Kind::Stream(s),
                opts: Opts::default(),
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
        for mr in unused {
            let _ = self.stack.deregister_memory(mr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            pid: 4242,
            attachment: 7,
            entries: vec![
                Entry::Listener {
                    local: "0.0.0.0:8080".parse().unwrap(),
                    socket: 12,
                    reuseport: true,
                    backlog: 511,
                    nonblock: true,
                    fds: vec![3, 9],
                },
                Entry::Stream {
                    conn: u64::MAX - 5,
                    local: "198.18.0.1:8080".parse().unwrap(),
                    peer: "198.18.0.2:40000".parse().unwrap(),
                    nonblock: false,
                    fds: vec![0],
                },
                Entry::LetGo { conn: 17 },
                Entry::Unlisten {
                    port: 9000,
                    socket: 4,
                },
                Entry::Region(CarriedRegion {
                    mr: MrId::from_bits(3 << 32 | 5),
                    offset: 1 << 20,
                    len: 1 << 20,
                    access: Access::RECV,
                }),
                Entry::Rings(Box::new(rings_sample())),
            ],
        }
    }

    fn rings_sample() -> CarriedStream {
        let conn = ConnId::from_bits(u64::MAX - 9);
        CarriedStream {
            conn: CarriedConn {
                conn,
                slot: 3,
                recv: 8,
                send: 2,
                local: "198.18.0.1:8080".parse().unwrap(),
                remote: "198.18.0.2:40001".parse().unwrap(),
            },
            rings: RingsState {
                conn,
                rx: MrId::from_bits(3 << 32 | 5),
                tx: MrId::from_bits(1 << 32 | 6),
                buf: 128 << 10,
                ring: 1 << 20,
                read: 5000,
                rx_posted: (1 << 20) + 4096,
                written: 77,
            },
            sends: 2,
            peer_fin: Some(6000),
            connected: true,
            shut_rd: false,
            shut_wr: true,
            oob_read: false,
            closing: false,
            nonblock: true,
            fds: vec![4, 5],
        }
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode()), Some(m));
        let empty = Manifest {
            pid: 1,
            attachment: 2,
            entries: Vec::new(),
        };
        assert_eq!(Manifest::decode(&empty.encode()), Some(empty));
        // Every flag, no descriptors, no FIN.
        let mut other = rings_sample();
        (other.shut_rd, other.oob_read, other.closing) = (true, true, true);
        (other.connected, other.shut_wr, other.nonblock) = (false, false, false);
        (other.peer_fin, other.fds) = (None, Vec::new());
        let m = Manifest {
            pid: 1,
            attachment: 2,
            entries: vec![Entry::Rings(Box::new(other))],
        };
        assert_eq!(Manifest::decode(&m.encode()), Some(m));
    }

    #[test]
    fn a_damaged_manifest_is_refused_whole() {
        let text = sample().encode();
        for bad in [
            "",
            "4242",
            "x,7",
            &text.replace("L,", "Q,"),
            &text.replace("/9", "/nine"),
            &text.replace(",511,", ",-1,"),
            &text.replace(",1,3", ",2,3"),
            &text.replace(",12,1,", ",12,yes,"),
            &text.replace("U,9000,4", "U,9000"),
            &format!("{text};X"),
            &format!("{text};U,70000,1"),
            &text.replace(",1048576,1;", ",1048576,4;"),
            &text.replace(",6000,", ",-6000,"),
            &text.replace(",6000,37,", ",6000,64,"),
            &text.replace(",4/5", ",-/5"),
            &text.replace(";R,", ";R,1,"),
        ] {
            assert_eq!(Manifest::decode(bad), None, "{bad}");
        }
    }
}
