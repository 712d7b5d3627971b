//! `execve` with Linux's semantics for our sockets, attached: a socket
//! whose descriptors lack `FD_CLOEXEC` lives on in the new program.
//!
//! Before the C library's `execve` the shim writes a manifest of what
//! survives into the new program's environment ([`ENV_INHERIT`]) and
//! tells the daemon an exec is coming ([`Request::Exec`]), so the hang-up
//! of this program's attachment (its socket closes at the exec) does not
//! end it for a grace time. The new program, the same process, loads the
//! shim again; the first call it makes reads the manifest, attaches naming
//! the old attachment (the daemon makes it the holder of all that one
//! held, then ends it) and takes up each socket under its descriptor
//! numbers: listeners share their port's accept queue as before, a
//! connection nothing was read or written on is adopted at its first
//! use. What did not survive (a descriptor with `FD_CLOEXEC`, a
//! connection already read or written here, whose stream is in this
//! process's memory, or one closed and still finishing) is let go by the
//! new program, so the daemon closes it unless another process holds it.
//! If the exec fails the daemon is told and nothing changed.
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

use zerosplit::attach::ListenSocket;
use zerosplit::provider::ConnId;

use crate::backend::Backend;
use crate::cabi::real;
use crate::log::{log_line, unsupported};
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
}

fn fds_text(fds: &[RawFd]) -> String {
    fds.iter()
        .map(RawFd::to_string)
        .collect::<Vec<_>>()
        .join("/")
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
            let fds =
                |s: &str| -> Option<Vec<RawFd>> { s.split('/').map(|n| n.parse().ok()).collect() };
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
        let entries = st.exec_entries();
        if entries.is_empty() {
            return None;
        }
        if let Err(e) = st.stack.announce_exec(true) {
            log_line(&format!("exec: telling the daemon: {e}; the sockets close"));
            return None;
        }
        let m = Manifest {
            pid: std::process::id(),
            attachment,
            entries,
        };
        Some(format!("{ENV_INHERIT}={}", m.encode()))
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
                Kind::Stream(s) if fds.is_empty() => entries.push(Entry::LetGo {
                    conn: s.conn.to_bits(),
                }),
                Kind::Stream(s) if s.rings.is_some() => {
                    unsupported(format!(
                        "a connection to {} read or written before execve(): it is reset in the new program",
                        s.peer
                    ));
                    entries.push(Entry::LetGo {
                        conn: s.conn.to_bits(),
                    });
                }
                Kind::Stream(s) => entries.push(Entry::Stream {
                    conn: s.conn.to_bits(),
                    local: s.local,
                    peer: s.peer,
                    nonblock: sock.nonblock,
                    fds,
                }),
            }
        }
        // Closed and still finishing: the new program lets go.
        for conn in self.orphans.keys() {
            entries.push(Entry::LetGo {
                conn: conn.to_bits(),
            });
        }
        entries
    }

    /// Builds the table of the new program from `m`.
    fn take_up_exec(&mut self, m: &Manifest, owned: &FdMarks) {
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
            ],
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
        ] {
            assert_eq!(Manifest::decode(bad), None, "{bad}");
        }
    }
}
