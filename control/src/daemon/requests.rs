//! Serving what attachments ask: the hello that creates an attachment,
//! control requests on the socket, and work requests from the post ring.
//! Every name a request carries is looked up in the asking attachment's
//! own tables.

use std::collections::HashMap;
use std::os::fd::AsFd;

use datapath::mr::{Access, MrId};
use datapath::nic::EventFd;

use super::attachment::{Attachment, AttachmentCounters};
use std::net::SocketAddr;

use super::{
    Daemon, Pending, PendingConnect, ARP_CHECK_EVERY, HELLO_TIMEOUT, MAX_CONNECTS_PENDING,
};
use crate::host::HostError;
use crate::idmap::{ConnId, ConnMap};
use crate::ipc::channel::{DaemonEnd, Layout};
use crate::ipc::desc::PostDesc;
use crate::ipc::msg::{ErrorCode, Reply, Request, Stats, Welcome, EXEC_GRACE, MAX_DROPS};
use crate::ipc::sock::{self, Received};
use crate::provider::Provider;

/// Regions one attachment may hold at once: a receive and a send ring
/// for each of its `max_connections` (the stream facade's and the socket
/// shim's shape), and 64 more.
pub(super) fn max_regions(max_connections: u32) -> usize {
    2 * max_connections as usize + 64
}

pub(super) fn refuse(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error {
        code,
        message: message.into(),
    }
}

pub(super) fn failed(e: HostError) -> Reply {
    match e {
        HostError::PortOwned(port) => refuse(
            ErrorCode::PortInUse,
            format!("port {port} is held by a kernel socket"),
        ),
        HostError::NotListening(port) => {
            refuse(ErrorCode::NotListening, format!("not listening on {port}"))
        }
        other => refuse(ErrorCode::Failed, other.to_string()),
    }
}

impl Daemon {
    /// The refusal of a connection beyond `daemon.max_connections`.
    pub(super) fn connections_full(&self) -> Reply {
        refuse(
            ErrorCode::Limit,
            format!(
                "daemon.max_connections ({}) reached",
                self.config.max_connections
            ),
        )
    }

    /// Reads the hellos of connections that have not attached yet; drops
    /// those that hung up, said something else, or took too long.
    pub(super) fn serve_pending(&mut self) -> usize {
        let mut work = 0;
        let mut i = 0;
        while i < self.pending.len() {
            let got = sock::recv(self.pending[i].sock.as_fd(), &mut self.buf, true);
            match got {
                Ok(Received::Empty) if self.pending[i].since.elapsed() < HELLO_TIMEOUT => {
                    i += 1;
                    continue;
                }
                Ok(Received::Message {
                    len,
                    fds,
                    truncated: false,
                }) if fds.is_empty() => {
                    let p = self.pending.swap_remove(i);
                    work += 1;
                    match Request::decode(&self.buf[..len]) {
                        Ok((Request::Hello { name, parent }, seq)) => {
                            self.hello(p, &name, parent, seq);
                        }
                        _ => {
                            self.counters.attach_refused += 1;
                            let no = refuse(
                                ErrorCode::NotAttached,
                                "the first message must be a hello of this version",
                            );
                            sock::send(p.sock.as_fd(), &no.encode(0), &[]).ok();
                        }
                    }
                }
                _ => {
                    // Hung up, timed out, or sent descriptors or garbage.
                    self.pending.swap_remove(i);
                    self.counters.attach_refused += 1;
                    work += 1;
                }
            }
        }
        work
    }

    /// Attaches the sender of a hello: a memory slot, a channel, two
    /// doorbells, all sent back with the welcome; a process forked from
    /// attachment `parent` (non-zero) holds what that one holds.
    fn hello(&mut self, p: Pending, name: &str, parent: u32, seq: u32) {
        let reply = |r: Reply, fds: &[std::os::fd::BorrowedFd<'_>]| {
            sock::send(p.sock.as_fd(), &r.encode(seq), fds)
        };
        if self.closing {
            self.counters.attach_refused += 1;
            reply(refuse(ErrorCode::Limit, "the daemon is shutting down"), &[]).ok();
            return;
        }
        let peer = match sock::peer(p.sock.as_fd()) {
            Ok(peer) => peer,
            Err(e) => {
                self.counters.attach_refused += 1;
                reply(refuse(ErrorCode::Failed, format!("SO_PEERCRED: {e}")), &[]).ok();
                return;
            }
        };
        if parent != 0 {
            if let Err(why) = self.may_inherit(parent, peer.pid) {
                self.counters.attach_refused += 1;
                reply(refuse(ErrorCode::NotAttached, why), &[]).ok();
                return;
            }
            if self
                .attachments
                .get(&parent)
                .is_some_and(|a| a.exec_until.is_some() && a.peer.pid == peer.pid)
            {
                self.resume(p, parent, peer, name, seq);
                return;
            }
        }
        let slot = match self.slots.take(peer.pid) {
            Ok(slot) => slot,
            Err(holder) => {
                self.counters.attach_refused += 1;
                let mut msg = format!(
                    "daemon.max_attachments ({}) memory slots are taken",
                    self.config.max_attachments
                );
                if let Some(pid) = holder {
                    msg += &format!(
                        " (one by pid {pid}, which detached but lives on and may still map it)"
                    );
                }
                reply(refuse(ErrorCode::Limit, msg), &[]).ok();
                return;
            }
        };
        let made = (|| -> Result<_, String> {
            // Whoever held the slot before left bytes in it; the new
            // application maps all of it.
            (self.queues.zero(self.slots.range(slot)))
                .map_err(|e| format!("clearing the memory slot: {e}"))?;
            let layout = Layout::for_limits(self.config.max_posted, self.config.max_connections);
            let chan = DaemonEnd::create(layout).map_err(|e| e.to_string())?;
            let wake_daemon = EventFd::new().map_err(|e| e.to_string())?;
            let wake_app = EventFd::new().map_err(|e| e.to_string())?;
            Ok((layout, chan, std::sync::Arc::new(wake_daemon), wake_app))
        })();
        let (layout, chan, wake_daemon, wake_app) = match made {
            Ok(m) => m,
            Err(e) => {
                self.slots.release(slot, Vec::new(), &self.queues, None);
                self.counters.attach_refused += 1;
                reply(refuse(ErrorCode::Failed, e), &[]).ok();
                return;
            }
        };
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let welcome = self.welcome(id, layout);
        let sent = match self.queues.first().nic().mr_slot_fd(slot) {
            Some(memory) => reply(
                welcome,
                &[memory, chan.fd(), wake_daemon.as_fd(), wake_app.as_fd()],
            ),
            None => Err(std::io::Error::other("no such memory slot")),
        };
        if let Err(e) = sent {
            log::warn!("daemon: welcoming pid {}: {e}", peer.pid);
            self.slots.release(slot, Vec::new(), &self.queues, None);
            self.counters.attach_refused += 1;
            return;
        }
        let command = std::fs::read_to_string(format!("/proc/{}/comm", peer.pid))
            .map(|s| s.trim_end().to_owned())
            .unwrap_or_else(|_| name.to_owned());
        log::info!(
            "daemon: attachment {id}: {command} (pid {}, uid {}) on memory slot {slot}",
            peer.pid,
            peer.uid
        );
        self.counters.attachments_opened += 1;
        self.attachments.insert(
            id,
            Attachment {
                id,
                sock: p.sock,
                peer,
                command,
                slot,
                chan,
                layout,
                wake_daemon,
                wake_app,
                regions: HashMap::new(),
                conns: ConnMap::default(),
                free_status: (0..layout.status_slots).rev().collect(),
                listening: Vec::new(),
                held: ConnMap::default(),
                posted: 0,
                backlog: Default::default(),
                completed: false,
                counters: AttachmentCounters::default(),
                exec_until: None,
                departed: false,
            },
        );
        if parent != 0 {
            self.inherit(parent, id);
        }
    }

    /// The welcome of attachment `id`, whose channel has `layout`.
    fn welcome(&self, id: u32, layout: Layout) -> Reply {
        Reply::Welcome(Welcome {
            attachment: id,
            local_ip: self.queues.local_ip(),
            local_ip6: self.queues.local_ip6(),
            transport: Provider::transport_name(&*self.queues.first()).into(),
            slot_len: self.slots.len() as u64,
            post_ring: layout.post_ring,
            completion_ring: layout.completion_ring,
            max_connections: layout.status_slots,
            max_posted: self.config.max_posted,
        })
    }

    /// The program attachment `id`'s process exec'd into says hello:
    /// it goes on as that attachment, welcomed with the same memory
    /// slot, channel and doorbells. Its regions, posted work requests,
    /// connections, listeners and unread completions stay as they were
    /// (the daemon's mapping of the slot kept the bytes); the new program
    /// learns what it held from the manifest its old self wrote. A
    /// welcome that cannot be sent leaves the attachment waiting for the
    /// rest of its grace time.
    fn resume(&mut self, p: Pending, id: u32, peer: sock::Peer, name: &str, seq: u32) {
        let Some(layout) = self.attachments.get(&id).map(|a| a.layout) else {
            return;
        };
        let welcome = self.welcome(id, layout).encode(seq);
        // A connect the old program was waiting for is answered nowhere
        // now: the new program's requests start their numbers again.
        self.connects.retain(|c| c.attachment != id);
        let Some(a) = self.attachments.get_mut(&id) else {
            return;
        };
        let sent = match self.queues.first().nic().mr_slot_fd(a.slot) {
            Some(memory) => sock::send(
                p.sock.as_fd(),
                &welcome,
                &[
                    memory,
                    a.chan.fd(),
                    a.wake_daemon.as_fd(),
                    a.wake_app.as_fd(),
                ],
            ),
            None => Err(std::io::Error::other("no such memory slot")),
        };
        if let Err(e) = sent {
            log::warn!("daemon: welcoming pid {} back: {e}", peer.pid);
            self.counters.attach_refused += 1;
            return;
        }
        let old = std::mem::replace(
            &mut a.command,
            std::fs::read_to_string(format!("/proc/{}/comm", peer.pid))
                .map(|s| s.trim_end().to_owned())
                .unwrap_or_else(|_| name.to_owned()),
        );
        log::info!(
            "daemon: attachment {id} exec'd ({old} became {}, pid {}); it goes on",
            a.command,
            peer.pid
        );
        a.sock = p.sock;
        a.peer = peer;
        a.exec_until = None;
        a.departed = false;
        a.completed = true;
        self.counters.attachments_exec += 1;
    }

    /// Serves one message of attachment `id`; returns whether to read on
    /// (false once it detached).
    pub(super) fn request(&mut self, id: u32, msg: &[u8], fds: bool, truncated: bool) -> bool {
        let decoded = Request::decode(msg);
        let (reply, seq, go_on) = match decoded {
            _ if fds => {
                self.counters.bad_messages += 1;
                let seq = decoded.as_ref().map_or(0, |d| d.1);
                let r = refuse(ErrorCode::Descriptors, "the daemon takes no descriptors");
                (r, seq, true)
            }
            Err(e) => {
                self.counters.bad_messages += 1;
                (refuse(ErrorCode::BadMessage, e.to_string()), 0, true)
            }
            Ok((_, seq)) if truncated => {
                self.counters.bad_messages += 1;
                (refuse(ErrorCode::BadMessage, "message too long"), seq, true)
            }
            Ok((Request::Detach, seq)) => {
                self.counters.attachments_closed += 1;
                (Reply::Done, seq, false)
            }
            Ok((req @ (Request::Close { .. } | Request::Park { .. }), seq)) => {
                // The FIN goes after every byte posted before the close:
                // the posts still on the ring (the socket overtakes the
                // ring) are taken first, whatever the back-pressure
                // (bounded: `max_posted` refuses the rest).
                self.take_posts_of(id, u32::MAX, false);
                (self.carry_out(id, req), seq, true)
            }
            Ok((Request::Connect { remote }, seq)) => match self.defer_connect(id, seq, remote) {
                None => return true,
                Some(reply) => (reply, seq, true),
            },
            Ok((req, seq)) => (self.carry_out(id, req), seq, true),
        };
        self.answer(id, seq, &reply);
        if !go_on {
            match self.attachments.get_mut(&id) {
                // It lingers for its parked connections' takers.
                Some(a) if a.parks() > 0 => self.depart_for_parks(id),
                _ => self.detach(id),
            }
        }
        go_on
    }

    /// Sends attachment `id` the `reply` to its request `seq`, counted.
    fn answer(&mut self, id: u32, seq: u32, reply: &Reply) {
        if let Some(a) = self.attachments.get_mut(&id) {
            a.counters.requests += 1;
            if matches!(reply, Reply::Error { .. }) {
                a.counters.requests_refused += 1;
            }
            // A full socket buffer means the application does not read
            // its replies: its loss.
            sock::send(a.sock.as_fd(), &reply.encode(seq), &[]).ok();
        }
    }

    /// A `Connect` to `remote`: served now if its next hop's MAC is known
    /// (or cannot be: the error), else set aside until ARP answers
    /// ([`Self::serve_connects`]) and `None` (no reply yet), so that
    /// resolving one attachment's peer never stalls the others.
    fn defer_connect(&mut self, id: u32, seq: u32, remote: SocketAddr) -> Option<Reply> {
        let waiting = self.connects.iter().filter(|c| c.attachment == id).count();
        let known = self.queues.first().next_hop_known(remote.ip(), true);
        match known {
            Ok(false) if waiting < MAX_CONNECTS_PENDING => {
                let now = std::time::Instant::now();
                self.connects.push(PendingConnect {
                    attachment: id,
                    seq,
                    remote,
                    since: now,
                    next_probe: now + crate::netinfo::PROBE_EVERY,
                });
                None
            }
            Ok(false) => Some(refuse(
                ErrorCode::Limit,
                format!(
                    "{MAX_CONNECTS_PENDING} connects already wait for their next hop's ARP answer"
                ),
            )),
            Ok(true) => Some(self.carry_out(id, Request::Connect { remote })),
            Err(e) => Some(failed(e)),
        }
    }

    /// Serves the connects whose next hop answered; fails those that
    /// waited longer than the stack's ARP timeout; probes the others
    /// again. Looks at the kernel's table at most every
    /// [`ARP_CHECK_EVERY`].
    pub(super) fn serve_connects(&mut self) -> usize {
        if self.connects.is_empty() {
            return 0;
        }
        let now = std::time::Instant::now();
        if now < self.next_arp_check {
            return 0;
        }
        self.next_arp_check = now + ARP_CHECK_EVERY;
        let timeout = self.queues.first().arp_timeout();
        let mut work = 0;
        let mut i = 0;
        while i < self.connects.len() {
            let c = &mut self.connects[i];
            let probe = now >= c.next_probe;
            if probe {
                c.next_probe = now + crate::netinfo::PROBE_EVERY;
            }
            let (id, seq, remote) = (c.attachment, c.seq, c.remote);
            let known = self.queues.first().next_hop_known(remote.ip(), probe);
            let reply = match known {
                Ok(true) => self.carry_out(id, Request::Connect { remote }),
                Ok(false) if now.duration_since(c.since) < timeout => {
                    i += 1;
                    continue;
                }
                Ok(false) => refuse(
                    ErrorCode::Failed,
                    format!("no ARP answer from the next hop towards {remote} within {timeout:?}"),
                ),
                Err(e) => failed(e),
            };
            self.connects.swap_remove(i);
            self.answer(id, seq, &reply);
            work += 1;
        }
        work
    }

    fn carry_out(&mut self, id: u32, req: Request) -> Reply {
        match req {
            Request::Listen {
                port,
                reuseport,
                families,
                socket,
            } => return self.listen(id, port, reuseport, families, socket),
            Request::Unlisten { socket } => return self.unlisten(id, socket),
            Request::Accept { socket } => return self.accept(id, socket),
            Request::Adopt { conn } => return self.adopt(id, ConnId::from_bits(conn)),
            Request::Close { conn } => return self.close(id, ConnId::from_bits(conn), false),
            Request::Abort { conn } => return self.close(id, ConnId::from_bits(conn), true),
            Request::Park { conn, read } => return self.park(id, ConnId::from_bits(conn), read),
            Request::Rehome { conn, moves } => {
                return self.rehome(id, ConnId::from_bits(conn), &moves)
            }
            _ => {}
        }
        let Some(a) = self.attachments.get_mut(&id) else {
            return refuse(ErrorCode::NotAttached, "not attached");
        };
        let queues = &*self.queues;
        match req {
            Request::Hello { .. } => refuse(ErrorCode::NotAttached, "already attached"),
            Request::Detach => Reply::Done,
            Request::Exec { armed } => {
                a.exec_until = armed.then(|| std::time::Instant::now() + EXEC_GRACE);
                Reply::Done
            }
            Request::RegisterMemory { len, access } => {
                let access = match access {
                    1 => Access::RECV,
                    2 => Access::SEND,
                    3 => Access::BOTH,
                    _ => return refuse(ErrorCode::BadMessage, format!("access {access}")),
                };
                let max = max_regions(self.config.max_connections);
                if a.regions.len() >= max {
                    return refuse(ErrorCode::Limit, format!("{max} regions per attachment"));
                }
                let range = self.slots.range(a.slot);
                let Ok(len) = usize::try_from(len) else {
                    return refuse(ErrorCode::Limit, "daemon.memory_per_attachment");
                };
                let (region, at) = match queues.register(range.clone(), len, access) {
                    Ok(r) => r,
                    Err(e) => {
                        return refuse(
                            ErrorCode::Limit,
                            format!(
                                "{len} bytes do not fit the {} bytes of daemon.memory_per_attachment left: {e}",
                                range.len() as u64 - a.regions.values().map(|r| r.len).sum::<u64>()
                            ),
                        )
                    }
                };
                let mr = region.handle();
                a.regions.insert(mr, region);
                Reply::Registered {
                    mr: mr.to_bits(),
                    offset: (at - range.start) as u64,
                    len: len as u64,
                }
            }
            Request::DeregisterMemory { mr } => {
                let mr = MrId::from_bits(mr);
                let Some(region) = a.regions.get_mut(&mr) else {
                    return refuse(ErrorCode::UnknownRegion, "not a region of this attachment");
                };
                match queues.deregister(region) {
                    Ok(()) => {
                        a.regions.remove(&mr);
                        Reply::Done
                    }
                    Err(e) => failed(e),
                }
            }
            Request::Connect { remote } => {
                if !a.backlog.is_empty() {
                    return refuse(ErrorCode::Limit, "completions are waiting to be read");
                }
                if a.free_status.is_empty() {
                    return self.connections_full();
                }
                match queues.connect(remote) {
                    Ok(conn) => {
                        let slot = a.adopt(conn).unwrap_or(0);
                        self.conn_owner.insert(conn, id);
                        a.show(conn, queues.status(conn));
                        Reply::Connecting {
                            conn: conn.to_bits(),
                            slot,
                        }
                    }
                    Err(e) => failed(e),
                }
            }
            Request::Endpoints { conn } => {
                let conn = ConnId::from_bits(conn);
                if !a.conns.contains_key(&conn) && !a.held.contains_key(&conn) {
                    return refuse(
                        ErrorCode::UnknownConnection,
                        "not a connection of this attachment",
                    );
                }
                match queues.endpoints(conn) {
                    Some((local, remote)) => Reply::Endpoints { local, remote },
                    None => refuse(ErrorCode::UnknownConnection, "the connection is gone"),
                }
            }
            Request::Listen { .. }
            | Request::Unlisten { .. }
            | Request::Accept { .. }
            | Request::Adopt { .. }
            | Request::Close { .. }
            | Request::Abort { .. }
            | Request::Park { .. }
            | Request::Rehome { .. } => refuse(ErrorCode::Failed, "served by the holders' tables"),
            Request::Stats => {
                let mut drops: Vec<(String, u64)> = queues
                    .drops()
                    .into_iter()
                    .map(|(n, c)| (n.to_owned(), c))
                    .collect();
                drops.truncate(MAX_DROPS);
                Reply::Stats(Stats {
                    retransmissions: Some(queues.retransmissions()),
                    payload_touched: queues.payload_touched(),
                    drops,
                })
            }
        }
    }

    /// One work request from attachment `id`'s post ring: checked against
    /// its connections, regions and limit, then handed to the stack. A
    /// refused one is counted and aborts the connection it named, if that
    /// connection is the attachment's.
    pub(super) fn post(&mut self, id: u32, p: &PostDesc) {
        let Some(a) = self.attachments.get_mut(&id) else {
            return;
        };
        let conn = ConnId::from_bits(p.conn);
        let mr = MrId::from_bits(p.mr);
        let owned = a.conns.contains_key(&conn);
        let region = a.regions.get(&mr);
        let refused = if !owned || p.reserved != 0 {
            Some("not its connection, or a reserved field set".to_string())
        } else if a.posted >= self.config.max_posted {
            Some(format!("daemon.max_posted ({})", self.config.max_posted))
        } else {
            match (
                region,
                p.direction(),
                usize::try_from(p.offset),
                usize::try_from(p.len),
            ) {
                (Some(region), Some(dir), Ok(offset), Ok(len)) => self
                    .queues
                    .post(conn, dir, region, offset, len, p.wr_id)
                    .err()
                    .map(|e| e.to_string()),
                _ => Some("not its region, or a bad direction or range".to_string()),
            }
        };
        if let Some(why) = refused {
            log::debug!("daemon: attachment {id}: work request on {conn:?} refused: {why}");
            a.counters.posts_refused += 1;
            if owned {
                self.queues.close(conn, true).ok();
            }
            return;
        }
        a.counters.posts += 1;
        a.posted += 1;
        if let Some(e) = a.conns.get_mut(&conn) {
            match p.direction() {
                Some(crate::provider::Direction::Recv) => e.recv += 1,
                _ => e.send += 1,
            }
            e.posted_in.note(mr);
        }
    }
}
