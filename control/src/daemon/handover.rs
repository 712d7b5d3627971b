//! Handing a used connection to another process: a connection one process
//! read or wrote lives in that process's memory (its stream's unread bytes
//! and its posted work requests), which a process forked from it does not
//! map. So the first lets go of it by parking it ([`Request::Park`]): the
//! connection stays open, its memory stays registered, and the daemon
//! notes how far that process read. A holder then takes it up
//! ([`Request::Rehome`]): under the connection's queue the daemon copies
//! the bytes into the taker's regions and re-points the posted work
//! requests there ([`crate::host::Host::rehome`]); the work requests still
//! to complete, the peer's FIN and the read offset go to the taker, and
//! the parker is told (`KIND_HANDED`) that its memory is free.
//!
//! A parked connection whose last holder lets go is closed (reset when
//! bytes the parker did not read wait, as Linux does on close). A parker
//! that exits or detaches with connections parked lingers (its memory with
//! it) until each was taken up or closed.
//!
//! [`Request::Park`]: crate::ipc::msg::Request::Park
//! [`Request::Rehome`]: crate::ipc::msg::Request::Rehome

use datapath::mr::MrId;

use super::requests::{failed, refuse};
use super::Daemon;
use crate::idmap::ConnId;
use crate::ipc::msg::{ErrorCode, Rehomed, Reply};

impl Daemon {
    /// `Park`: attachment `id`, the active holder of `conn`, lets go of it
    /// having read `read` bytes; another holder takes it up.
    pub(super) fn park(&mut self, id: u32, conn: ConnId, read: u64) -> Reply {
        let Some(a) = self.attachments.get_mut(&id) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        let Some(e) = a.conns.get_mut(&conn) else {
            return refuse(
                ErrorCode::UnknownConnection,
                "not a connection this attachment uses",
            );
        };
        if self.shared.get(&conn).is_none_or(|h| h.is_empty()) {
            return refuse(ErrorCode::NotShared, "no other process holds it");
        }
        e.parked = Some(read);
        Reply::Done
    }

    /// `Rehome`: attachment `id`, a holder of `conn`, takes it up from
    /// the attachment that parked it, each move's bytes copied from the
    /// parker's region into this attachment's.
    pub(super) fn rehome(&mut self, id: u32, conn: ConnId, moves: &[(u64, u64)]) -> Reply {
        let Some(a) = self.attachments.get(&id) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        if !a.held.contains_key(&conn) {
            return refuse(
                ErrorCode::UnknownConnection,
                "not a connection this attachment holds",
            );
        }
        if a.free_status.is_empty() {
            return self.connections_full();
        }
        let Some(&owner) = self.conn_owner.get(&conn) else {
            return refuse(
                ErrorCode::UnknownConnection,
                "nobody has its stream (take it up with Adopt)",
            );
        };
        let Some(y) = self.attachments.get(&owner) else {
            return refuse(ErrorCode::Failed, "its holder is gone");
        };
        let Some(entry) = y.conns.get(&conn).copied() else {
            return refuse(ErrorCode::Failed, "its holder is gone");
        };
        let Some(read) = entry.parked else {
            return refuse(
                ErrorCode::Busy,
                format!(
                    "pid {} uses it; it can be taken up once that process closes it",
                    y.peer.pid
                ),
            );
        };
        if entry.posted_in.overflow {
            return refuse(
                ErrorCode::Failed,
                "its user posted on it from more regions than a move names",
            );
        }
        let moved = entry.recv.saturating_add(entry.send);
        if a.posted.saturating_add(moved) > self.config.max_posted {
            return refuse(
                ErrorCode::Limit,
                format!("daemon.max_posted ({})", self.config.max_posted),
            );
        }
        let mut pairs = Vec::with_capacity(moves.len());
        for &(from, to) in moves {
            let (from_id, to) = (MrId::from_bits(from), MrId::from_bits(to));
            let Some(from) = y.regions.get(&from_id) else {
                return refuse(
                    ErrorCode::UnknownRegion,
                    "a region to move from is not the parker's",
                );
            };
            let Some(to) = a.regions.get(&to) else {
                return refuse(
                    ErrorCode::UnknownRegion,
                    "a region to move to is not this attachment's",
                );
            };
            // Memory its user never posted on for this connection holds
            // none of its bytes (a send ring not written yet), and the
            // parker's other memory is not the taker's to read: not
            // copied (the taker's region was zeroed when registered).
            if entry.posted_in.contains(from_id) {
                pairs.push((from.clone(), to.clone()));
            }
        }
        let (rx_posted, written) = match self.queues.rehome(conn, &pairs) {
            Ok(ends) => ends,
            Err(e) => return failed(e),
        };

        // The parker hears it is free of it; the work requests still to
        // complete become the taker's (those routed already were the
        // parker's and are counted out).
        if let Some(y) = self.attachments.get_mut(&owner) {
            y.hand_away(conn);
        }
        let slot = self.make_active(id, conn);
        let Some((slot, a)) = slot.zip(self.attachments.get_mut(&id)) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        if let Some(e) = a.conns.get_mut(&conn) {
            e.recv = entry.recv;
            e.send = entry.send;
            e.peer_fin = entry.peer_fin;
            for (_, to) in &pairs {
                e.posted_in.note(to.handle());
            }
        }
        a.posted = a.posted.saturating_add(entry.recv + entry.send);
        self.counters.conns_handed += 1;
        let none = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        let (local, remote) = self.queues.endpoints(conn).unwrap_or((none, none));
        Reply::Rehomed(Rehomed {
            slot,
            local,
            remote,
            read,
            rx_posted,
            written,
            recvs: entry.recv,
            sends: entry.send,
            peer_fin: entry.peer_fin,
        })
    }

    /// Whether `conn` is parked by its active holder, and if so whether
    /// bytes it did not read wait (closing it then resets it).
    pub(super) fn parked_unread(&self, conn: ConnId) -> Option<bool> {
        let owner = self.conn_owner.get(&conn)?;
        let read = self.attachments.get(owner)?.conns.get(&conn)?.parked?;
        Some(self.queues.status(conn).received > read)
    }
}
