//! An attachment letting go: of one listening socket or held connection,
//! or of everything when it ends. One that parked connections for other
//! processes lets go of the rest at once and lingers for those
//! (`handover.rs`).

use super::attachment::Listening;
use super::Daemon;
use crate::idmap::ConnId;

impl Daemon {
    /// Ends attachment `id`: lets go of everything it holds
    /// ([`Self::let_go_of_all`]) and gives its memory back (once TX lets
    /// go of it).
    pub(super) fn detach(&mut self, id: u32) {
        self.let_go_of_all(id, false);
        let Some(mut a) = self.attachments.remove(&id) else {
            return;
        };
        let regions = std::mem::take(&mut a.regions).into_values().collect();
        self.slots
            .release(a.slot, regions, &self.queues, Some(a.peer.pid));
        log::info!(
            "daemon: attachment {} ({} pid {}) ended",
            a.id,
            a.command,
            a.peer.pid
        );
    }

    /// Attachment `id` hung up or detached with connections parked: it
    /// lets go of everything else now and lingers, departed, its memory
    /// with it, until each parked connection was taken up or closed.
    pub(super) fn depart_for_parks(&mut self, id: u32) {
        self.let_go_of_all(id, true);
        if let Some(a) = self.attachments.get_mut(&id) {
            a.departed = true;
        }
    }

    /// Attachment `id` lets go of its listening sockets, the connections
    /// it holds, and those it uses: reset, unless another process holds
    /// one it has nothing posted on (that one lives on, without an active
    /// holder until one adopts it) or it closed one already (that one
    /// finishes on its own: its posted bytes stay registered, and its
    /// memory slot with them, until they are sent); of those it parked
    /// too unless `keep_parked`.
    fn let_go_of_all(&mut self, id: u32, keep_parked: bool) {
        self.connects.retain(|c| c.attachment != id);
        let Some(a) = self.attachments.get_mut(&id) else {
            return;
        };
        let listening = std::mem::take(&mut a.listening);
        let held: Vec<ConnId> = a.held.keys().copied().collect();
        a.held.clear();
        let conns: Vec<(ConnId, u32, bool)> = (a.conns.iter())
            .filter(|(_, e)| !(keep_parked && e.parked.is_some()))
            .map(|(&c, e)| (c, e.recv + e.send, e.closing))
            .collect();
        for &(c, ..) in &conns {
            a.forget(c);
        }
        for l in listening {
            self.let_go_of_socket(id, l);
        }
        for (c, posts, closing) in conns {
            self.conn_owner.remove(&c);
            if closing || (posts == 0 && self.shared.contains_key(&c)) {
                continue;
            }
            self.shared.remove(&c);
            if self.queues.close(c, true).is_ok() {
                self.counters.conns_reset += 1;
            }
        }
        for c in held {
            // A parked connection closes as its parker would have closed
            // it; others are reset.
            let parked = self.parked_unread(c).is_some();
            if self.let_go_of_conn(id, c) && self.close_let_go(c, !parked) {
                self.counters.conns_reset += 1;
            }
        }
    }

    /// Attachment `id` stops holding listening socket `l`; the port
    /// stops listening when that was its last socket's last holder.
    pub(super) fn let_go_of_socket(&mut self, id: u32, l: Listening) {
        let port = l.port;
        let Some(p) = self.listeners.get_mut(&port) else {
            return;
        };
        let (orphaned, empty) = p.let_go(l.socket, id);
        for c in orphaned {
            if self.queues.close(c, true).is_ok() {
                self.counters.conns_reset += 1;
            }
        }
        if empty {
            self.listeners.remove(&port);
            self.queues.unlisten(port).ok();
        } else {
            // The port may take a family fewer.
            self.queues.listen_families(port, p.families()).ok();
        }
    }

    /// Attachment `id`, not the active holder, stops holding connection
    /// `c`; true when nobody holds it any more, or only its parker (the
    /// caller closes it: [`Self::close_let_go`]).
    pub(super) fn let_go_of_conn(&mut self, id: u32, c: ConnId) -> bool {
        let Some(holders) = self.shared.get_mut(&c) else {
            return false;
        };
        holders.retain(|&h| h != id);
        if holders.is_empty() {
            self.shared.remove(&c);
            return !self.conn_owner.contains_key(&c) || self.parked_unread(c).is_some();
        }
        false
    }

    /// Closes connection `c`, whose last holder let go of it: reset if
    /// `abort`, or if it is parked and bytes its parker did not read wait
    /// (as Linux resets a socket closed with unread bytes). A departed
    /// parker forgets it at once, so that it ends (its memory drains with
    /// its slot: what TX still reads stays registered until read). Returns
    /// whether it was reset.
    pub(super) fn close_let_go(&mut self, c: ConnId, abort: bool) -> bool {
        let abort = abort || self.parked_unread(c) == Some(true);
        let closed = self.queues.close(c, abort).is_ok();
        if let Some(owner) = self.conn_owner.get(&c).copied() {
            match self.attachments.get_mut(&owner) {
                Some(a) if a.departed => {
                    a.forget(c);
                    self.conn_owner.remove(&c);
                }
                // Parked no more: closing, it finishes on its own should
                // its parker go first.
                Some(a) => {
                    if let Some(e) = a.conns.get_mut(&c) {
                        e.parked = None;
                        e.closing = !abort;
                    }
                }
                None => {}
            }
        }
        closed && abort
    }
}
