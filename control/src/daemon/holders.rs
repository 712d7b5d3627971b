//! Who holds what: a forked process holds its parent's listeners and
//! connections, as a child holds its parent's descriptors on Linux.
//!
//! - **Listeners.** A listening socket has holders (the attachment that
//!   listened and every process forked from it). One accept queue serves
//!   them: [`Request::Accept`] takes one connection for the asking
//!   holder, and each holder's status table shows how many wait, so
//!   every holder's `poll`/`epoll` sees the listener readable and
//!   whichever accepts first gets the connection (the others `EAGAIN`).
//!   The port stops listening when its last socket's last holder lets go.
//! - **Connections.** A connection has one active holder (its progress
//!   shows in that attachment's status table, its work requests come
//!   from there) and may have others. A holder adopts it
//!   ([`Request::Adopt`]) while the active one has nothing posted on it;
//!   the active one is told (`KIND_HANDED`) and holds it on. A holder's
//!   close only lets go, unless it is the last: then the connection is
//!   closed. A connection whose active holder has posted on it stays
//!   with that holder (its memory holds the stream): closing it there
//!   closes it (docs/daemon.md, fork).
//! - **Lineage.** A hello naming a parent attachment is taken only from a
//!   process whose parent process is that attachment's (`/proc/PID/stat`),
//!   or from that attachment's own process after it announced an `execve`
//!   ([`crate::ipc::msg::Request::Exec`]): the new program goes on as
//!   that attachment (`requests.rs`, `resume`).

use std::collections::hash_map::Entry;

use super::attachment::Listening;
use super::ports::{Next, Share};
use super::requests::{failed, refuse};
use super::Daemon;
use crate::idmap::ConnId;
use crate::ipc::desc::{CompletionDesc, KIND_CLOSED};
use crate::ipc::msg::{ErrorCode, Reply};
use crate::provider::Families;

/// The parent process of `pid`, from `/proc/PID/stat`.
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

impl Daemon {
    /// Whether a process `pid` may inherit what attachment `parent`
    /// holds: it must be that attachment's process's child, or that
    /// process itself once it announced an `execve`.
    pub(super) fn may_inherit(&self, parent: u32, pid: u32) -> Result<(), String> {
        let Some(p) = self.attachments.get(&parent) else {
            return Err(format!("attachment {parent} is gone"));
        };
        if p.exec_until.is_some() && pid == p.peer.pid {
            return Ok(());
        }
        match parent_pid(pid) {
            Some(ppid) if ppid == p.peer.pid => Ok(()),
            _ => Err(format!(
                "pid {pid} is not a child of attachment {parent}'s pid {}",
                p.peer.pid
            )),
        }
    }

    /// Attachment `child` holds what `parent` holds: its listening
    /// sockets (a status entry each) and its connections (adopted later).
    pub(super) fn inherit(&mut self, parent: u32, child: u32) {
        let Some(p) = self.attachments.get(&parent) else {
            return;
        };
        let sockets: Vec<Listening> = p.listening.clone();
        let conns: Vec<ConnId> = p.conns.keys().chain(p.held.keys()).copied().collect();
        let Some(c) = self.attachments.get_mut(&child) else {
            return;
        };
        let mut ports = Vec::new();
        for l in sockets {
            let Some(slot) = c.free_status.pop() else {
                break;
            };
            c.listening.push(Listening {
                slot,
                shown: None,
                ..l
            });
            if !ports.contains(&l.port) {
                ports.push(l.port);
            }
        }
        for port in ports {
            if let Some(p) = self.listeners.get_mut(&port) {
                p.inherit(parent, child);
            }
        }
        for conn in conns {
            c.held.insert(conn, ());
            self.shared.entry(conn).or_default().push(child);
        }
    }

    /// `Listen`: a socket this attachment holds already (`socket`, taken
    /// up after a fork or exec), or a new one on a port nobody listens
    /// on, or, with `reuseport`, on a port whose sockets all asked for it
    /// and are this user's (it joins the group, as on Linux: sockets of
    /// other programs, or of this one).
    pub(super) fn listen(
        &mut self,
        id: u32,
        port: u16,
        reuseport: bool,
        families: u8,
        socket: u32,
    ) -> Reply {
        let Some(a) = self.attachments.get_mut(&id) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        if socket != 0 {
            return match a.listener(socket) {
                Some(l) if l.port == port => Reply::Listening {
                    socket,
                    slot: l.slot,
                },
                _ => refuse(
                    ErrorCode::NotListening,
                    format!("socket {socket} on port {port} is not this attachment's"),
                ),
            };
        }
        let Some(families) = Families::from_bits(families) else {
            return refuse(
                ErrorCode::BadMessage,
                format!("address families {families}"),
            );
        };
        let share = Share {
            families,
            reuseport,
            uid: a.peer.uid,
        };
        let joins = match self.listeners.get(&port) {
            Some(p) => match p.conflict(share) {
                None => true,
                Some(s) => {
                    let ours = s.holders.contains(&id);
                    let why = match (s.share.reuseport, reuseport, ours) {
                        (true, true, _) => "another user's SO_REUSEPORT group",
                        (true, false, _) => {
                            "listened on with SO_REUSEPORT (this socket does not ask for it)"
                        }
                        (false, _, true) => "this program's, without SO_REUSEPORT",
                        (false, _, false) => "another program's",
                    };
                    return refuse(ErrorCode::PortInUse, format!("port {port} is {why}"));
                }
            },
            None => false,
        };
        let Some(slot) = a.free_status.pop() else {
            return self.connections_full();
        };
        if !joins {
            if let Err(e) = self.queues.listen(port) {
                a.free_status.push(slot);
                return failed(e);
            }
        }
        let socket = self.next_socket;
        self.next_socket = self.next_socket.checked_add(1).unwrap_or(1);
        a.listening.push(Listening {
            socket,
            port,
            slot,
            shown: None,
        });
        let p = match self.listeners.entry(port) {
            Entry::Occupied(e) => {
                let p = e.into_mut();
                p.join(socket, id, share);
                p
            }
            Entry::Vacant(e) => e.insert(super::ports::Port::new(socket, id, share)),
        };
        // A family no socket took before, or the first socket's.
        if let Err(e) = self.queues.listen_families(port, p.families()) {
            log::warn!("daemon: steering port {port}'s address families: {e}");
        }
        Reply::Listening { socket, slot }
    }

    /// `Unlisten`: this attachment lets go of listening socket `socket`.
    pub(super) fn unlisten(&mut self, id: u32, socket: u32) -> Reply {
        let Some(a) = self.attachments.get_mut(&id) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        let Some(&l) = a.listener(socket) else {
            return refuse(
                ErrorCode::NotListening,
                format!("socket {socket} is not this attachment's"),
            );
        };
        a.drop_listener(socket);
        self.let_go_of_socket(id, l);
        Reply::Done
    }

    /// `Accept`: one connection from the socket's accept queue, now
    /// theirs. An attachment at its connection limit, or not reading its
    /// completions, gets none: they wait in the queue (bounded: SYNs
    /// beyond it are refused), as on Linux.
    pub(super) fn accept(&mut self, id: u32, socket: u32) -> Reply {
        let Some(a) = self.attachments.get_mut(&id) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        let Some(&Listening { port, .. }) = a.listener(socket) else {
            return refuse(
                ErrorCode::NotListening,
                format!("socket {socket} is not this attachment's"),
            );
        };
        if !a.backlog.is_empty() {
            return refuse(ErrorCode::Limit, "completions are waiting to be read");
        }
        if a.free_status.is_empty() {
            return self.connections_full();
        }
        let next = self
            .listeners
            .get_mut(&port)
            .map_or(Next::Stack, |p| p.next_for(socket));
        let taken = match next {
            Next::Waiting(conn) => Some((conn, self.queues.status(conn))),
            Next::Stack => self.queues.accept(port),
            Next::Nothing => None,
        };
        let Some((conn, status)) = taken else {
            return refuse(ErrorCode::WouldBlock, "no connection waits");
        };
        let slot = a.adopt(conn).unwrap_or(0);
        self.conn_owner.insert(conn, id);
        a.show(conn, status);
        self.show_waiting(id, socket);
        self.accepted(conn, slot)
    }

    /// The reply that hands connection `conn` (status entry `slot`) over,
    /// with its addresses.
    fn accepted(&self, conn: ConnId, slot: u32) -> Reply {
        let none = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        let (local, remote) = self.queues.endpoints(conn).unwrap_or((none, none));
        Reply::Accepted {
            conn: conn.to_bits(),
            slot,
            local,
            remote,
        }
    }

    /// `Adopt`: connection `conn`, which this attachment holds, becomes
    /// its own (active), unless its active holder has work posted on it.
    pub(super) fn adopt(&mut self, id: u32, conn: ConnId) -> Reply {
        let Some(a) = self.attachments.get(&id) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        if let Some(e) = a.conns.get(&conn) {
            return self.accepted(conn, e.slot);
        }
        if !a.held.contains_key(&conn) {
            return refuse(
                ErrorCode::UnknownConnection,
                "not a connection of this attachment",
            );
        }
        if a.free_status.is_empty() {
            return self.connections_full();
        }
        if let Some(&active) = self.conn_owner.get(&conn) {
            let Some(y) = self.attachments.get_mut(&active) else {
                return refuse(ErrorCode::Failed, "its holder is gone");
            };
            if y.posts_on(conn) > 0 || y.conns.get(&conn).is_some_and(|e| e.parked.is_some()) {
                return refuse(
                    ErrorCode::Busy,
                    format!(
                        "pid {} has read or written it (its memory holds the stream)",
                        y.peer.pid
                    ),
                );
            }
            y.hand_away(conn);
            y.held.insert(conn, ());
            self.shared.entry(conn).or_default().push(active);
        }
        match self.make_active(id, conn) {
            Some(slot) => self.accepted(conn, slot),
            None => refuse(ErrorCode::NotAttached, "not attached"),
        }
    }

    /// Attachment `id`, a holder of `conn`, becomes its active holder: a
    /// status entry (returned) shows its progress there.
    pub(super) fn make_active(&mut self, id: u32, conn: ConnId) -> Option<u32> {
        if let Some(holders) = self.shared.get_mut(&conn) {
            holders.retain(|&h| h != id);
            if holders.is_empty() {
                self.shared.remove(&conn);
            }
        }
        let status = self.queues.status(conn);
        let a = self.attachments.get_mut(&id)?;
        a.held.remove(&conn);
        let slot = a.adopt(conn).unwrap_or(0);
        self.conn_owner.insert(conn, id);
        a.show(conn, status);
        Some(slot)
    }

    /// `Close` / `Abort` (`abort`): the connection closes when this was
    /// its last holder, or its active holder with work posted on it;
    /// otherwise this attachment only lets go (and hears `Closed`).
    pub(super) fn close(&mut self, id: u32, conn: ConnId, abort: bool) -> Reply {
        let Some(a) = self.attachments.get_mut(&id) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        if a.conns.contains_key(&conn) {
            if a.posts_on(conn) == 0 && self.shared.contains_key(&conn) {
                a.forget(conn);
                a.complete(CompletionDesc {
                    conn: conn.to_bits(),
                    wr_id: 0,
                    len: 0,
                    kind: KIND_CLOSED,
                    detail: 0,
                });
                self.conn_owner.remove(&conn);
                return Reply::Done;
            }
            if let Some(e) = a.conns.get_mut(&conn) {
                e.closing = !abort;
            }
            return self
                .queues
                .close(conn, abort)
                .map_or_else(failed, |()| Reply::Done);
        }
        if a.held.remove(&conn).is_some() {
            if self.let_go_of_conn(id, conn) {
                self.close_let_go(conn, abort);
            }
            return Reply::Done;
        }
        refuse(
            ErrorCode::UnknownConnection,
            "not a connection of this attachment",
        )
    }
}
