//! The provider API over the daemon (semantics as on [`Provider`]).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use datapath::mr::{Access, MrId};
use transports::tcp::State;

use super::{intern, AttachError, Attached, ListenSocket, Local, Region};
use crate::idle::Idle;
use crate::idmap::ConnId;
use crate::ipc::desc::{state_from_code, PostDesc, DIR_RECV, DIR_SEND, KIND_HANDED};
use crate::ipc::msg::{ErrorCode, Reply, Request};
use crate::ipc::sock::{self, Received};
use crate::provider::Families;
use crate::provider::{Completion, CompletionKind, Direction, Provider, WorkRequest};

/// Polls between two looks at the socket for a daemon that died.
pub(super) const POLLS_PER_LIVENESS_CHECK: u32 = 4096;

impl Attached {
    /// Moves completions from the ring to the local queue (a connection
    /// handed to another holder becomes held). Returns how many.
    pub(super) fn drain(&mut self) -> usize {
        let mut n = 0;
        while let Some(d) = self.chan.take_completion() {
            n += 1;
            let conn = ConnId::from_bits(d.conn);
            if d.kind == KIND_HANDED {
                // A process forked from this one adopted it (held here on,
                // its progress shown there), or took it up once parked
                // (gone from here; its memory is free).
                if let Some(l) = self.conns.remove(&conn) {
                    self.posted = self.posted.saturating_sub(l.recv + l.send);
                    if self.parked.remove(&conn).is_some() {
                        self.addresses.remove(&conn);
                        self.handed.push(conn);
                    } else {
                        self.held.insert(conn, ());
                    }
                }
                continue;
            }
            let Some(c) = d.completion() else {
                continue;
            };
            match c.kind {
                CompletionKind::Recv | CompletionKind::Send => {
                    self.posted = self.posted.saturating_sub(1);
                    if let Some(l) = self.conns.get_mut(&conn) {
                        if c.kind == CompletionKind::Recv {
                            l.recv = l.recv.saturating_sub(1);
                        } else {
                            l.send = l.send.saturating_sub(1);
                        }
                    }
                }
                CompletionKind::Closed(_) => {
                    self.addresses.remove(&conn);
                    self.parked.remove(&conn);
                    if let Some(l) = self.conns.remove(&conn) {
                        self.posted = self.posted.saturating_sub(l.recv + l.send);
                    }
                }
                _ => {}
            }
            self.cq.push_back(c);
        }
        n
    }

    /// Whether the daemon hung up (checked without waiting).
    /// Closing a connection only held (inherited, not adopted): lets go
    /// of it (the daemon closes it if this was its last holder) and
    /// completes it as closed here. `false` if `id` is not held.
    fn let_go(&mut self, id: ConnId, abort: bool) -> Result<bool, AttachError> {
        if !self.held.contains_key(&id) {
            return Ok(false);
        }
        let conn = id.to_bits();
        self.done(if abort {
            Request::Abort { conn }
        } else {
            Request::Close { conn }
        })?;
        self.held.remove(&id);
        self.addresses.remove(&id);
        self.cq.push_back(Completion {
            conn: id,
            kind: CompletionKind::Closed(transports::segment::CloseReason::Graceful),
            wr_id: 0,
            len: 0,
        });
        Ok(true)
    }

    pub(super) fn check_alive(&mut self) {
        if !self.lost.get() && sock::readable(self.sock.as_fd()) {
            // Nothing is sent unasked: readable means hung up (or a stray
            // late reply, which is dropped).
            let mut buf = self.buf.borrow_mut();
            if let Ok(Received::HangUp) | Err(_) = sock::recv(self.sock.as_fd(), &mut buf, true) {
                self.lost.set(true);
            }
        }
        self.end_if_lost();
    }

    pub(super) fn local(&self, id: ConnId) -> Result<Local, AttachError> {
        if self.lost.get() {
            return Err(AttachError::Lost);
        }
        self.conns
            .get(&id)
            .copied()
            .ok_or(AttachError::UnknownConnection(id))
    }

    fn status(&self, id: ConnId) -> Result<crate::ipc::channel::Status, AttachError> {
        let l = self.local(id)?;
        match self.chan.status(l.slot) {
            Some(s) if s.conn == id.to_bits() => Ok(s),
            _ => Err(AttachError::UnknownConnection(id)),
        }
    }

    pub(super) fn region(&self, mr: MrId) -> Result<Region, AttachError> {
        self.regions
            .get(&mr)
            .copied()
            .ok_or(AttachError::UnknownRegion(mr))
    }

    /// Tells the daemon this process is about to `execve` (`armed`), or
    /// that its `execve` failed: armed, the attachment outlives its
    /// hang-up until the new program attaches naming it
    /// ([`super::attach_child`]).
    ///
    /// # Errors
    /// The daemon is gone or refused.
    pub fn announce_exec(&mut self, armed: bool) -> Result<(), AttachError> {
        self.done(Request::Exec { armed })
    }

    /// Opens a listening socket on `port`, or takes up `inherited`, one
    /// this process holds since a fork or exec. With `reuseport`
    /// (`SO_REUSEPORT`) a port whose sockets all asked for it and are
    /// this user's is shared, each socket with its own accept queue. It
    /// takes peers of `families` (an IPv6-only socket: [`Families::V6`]);
    /// sockets of different families share a port without `reuseport`.
    ///
    /// # Errors
    /// The port is another socket's (`PortInUse`), `inherited` is not
    /// held (`NotListening`), or the daemon is gone.
    pub fn listen_socket(
        &mut self,
        port: u16,
        reuseport: bool,
        families: Families,
        inherited: Option<ListenSocket>,
    ) -> Result<ListenSocket, AttachError> {
        let socket = inherited.map_or(0, |s| s.0);
        match self.call(Request::Listen {
            port,
            reuseport,
            families: families.bits(),
            socket,
        })? {
            Reply::Listening { socket, slot } if socket != 0 => {
                self.listening.insert(ListenSocket(socket), (port, slot));
                Ok(ListenSocket(socket))
            }
            other => Err(AttachError::Protocol(format!(
                "{other:?} instead of listening"
            ))),
        }
    }

    /// Lets go of listening socket `socket` (it closes with its last
    /// holder in any process).
    ///
    /// # Errors
    /// Not held, or the daemon is gone.
    pub fn unlisten_socket(&mut self, socket: ListenSocket) -> Result<(), AttachError> {
        self.done(Request::Unlisten { socket: socket.0 })?;
        self.listening.remove(&socket);
        Ok(())
    }

    /// One connection from listening socket `socket`'s accept queue, if
    /// one waits and no other holder takes it first.
    ///
    /// # Errors
    /// Not listening on it, or the daemon is gone.
    pub fn accept_on(&mut self, socket: ListenSocket) -> Result<Option<ConnId>, AttachError> {
        if self.lost.get() {
            return Err(AttachError::Lost);
        }
        if !self.listening.contains_key(&socket) {
            return Err(AttachError::UnknownSocket(socket.0));
        }
        // One accept queue for every holder of the socket: ask only when
        // the daemon shows connections waiting.
        if self.pending(socket) == 0 {
            return Ok(None);
        }
        match self.call(Request::Accept { socket: socket.0 }) {
            Ok(Reply::Accepted {
                conn,
                slot,
                local,
                remote,
            }) => {
                let conn = ConnId::from_bits(conn);
                self.addresses.insert(conn, (local, remote));
                self.conns.insert(conn, Local::at(slot));
                Ok(Some(conn))
            }
            // Another holder took it, or a limit keeps it waiting.
            Err(AttachError::Refused {
                code: ErrorCode::WouldBlock | ErrorCode::Limit,
                ..
            }) => Ok(None),
            Err(e) => Err(e),
            Ok(other) => Err(AttachError::Protocol(format!(
                "{other:?} instead of a connection"
            ))),
        }
    }

    /// The listening sockets on `port` this application holds, oldest
    /// first.
    fn sockets_on(&self, port: u16) -> Vec<ListenSocket> {
        let mut v: Vec<ListenSocket> = self
            .listening
            .iter()
            .filter(|(_, &(p, _))| p == port)
            .map(|(&s, _)| s)
            .collect();
        v.sort();
        v
    }

    fn done(&mut self, req: Request) -> Result<(), AttachError> {
        match self.call(req)? {
            Reply::Done => Ok(()),
            other => Err(AttachError::Protocol(format!("{other:?} instead of done"))),
        }
    }
}

impl Provider for Attached {
    type Error = AttachError;

    fn transport_name(&self) -> &'static str {
        intern(&self.welcome.transport)
    }

    fn local_ip(&self) -> Ipv4Addr {
        self.welcome.local_ip
    }

    fn local_ip6(&self) -> Option<Ipv6Addr> {
        self.welcome.local_ip6
    }

    fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, AttachError> {
        let bits = [Access::RECV, Access::SEND, Access::BOTH]
            .iter()
            .position(|&a| a == access)
            .map_or(3, |i| i as u8 + 1);
        let reply = self.call(Request::RegisterMemory {
            len: len as u64,
            access: bits,
        })?;
        let Reply::Registered { mr, offset, len } = reply else {
            return Err(AttachError::Protocol(format!(
                "{reply:?} instead of a region"
            )));
        };
        let (offset, len) = (offset as usize, len as usize);
        if offset
            .checked_add(len)
            .is_none_or(|e| e > self.memory.len())
        {
            return Err(AttachError::Protocol(format!(
                "region {offset}+{len} outside the {}-byte memory slot",
                self.memory.len()
            )));
        }
        let mr = MrId::from_bits(mr);
        self.regions.insert(
            mr,
            Region {
                offset,
                len,
                access,
            },
        );
        Ok(mr)
    }

    fn deregister_memory(&mut self, mr: MrId) -> Result<(), AttachError> {
        self.region(mr)?;
        self.done(Request::DeregisterMemory { mr: mr.to_bits() })?;
        self.regions.remove(&mr);
        Ok(())
    }

    fn memory(&self, mr: MrId) -> Result<&[u8], AttachError> {
        let r = self.region(mr)?;
        Ok(&self.memory.bytes()[r.offset..r.offset + r.len])
    }

    fn memory_mut(&mut self, mr: MrId) -> Result<&mut [u8], AttachError> {
        let r = self.region(mr)?;
        Ok(&mut self.memory.bytes_mut()[r.offset..r.offset + r.len])
    }

    /// As the own stack's: a second call for a port this application
    /// listens on does nothing ([`Attached::listen_socket`] opens
    /// another socket).
    fn listen(&mut self, port: u16) -> Result<(), AttachError> {
        if !self.sockets_on(port).is_empty() {
            return Ok(());
        }
        self.listen_socket(port, false, Families::BOTH, None)
            .map(drop)
    }

    fn unlisten(&mut self, port: u16) -> Result<(), AttachError> {
        let sockets = self.sockets_on(port);
        if sockets.is_empty() {
            return Err(AttachError::NotListening(port));
        }
        for s in sockets {
            self.unlisten_socket(s)?;
        }
        Ok(())
    }

    fn accept(&mut self, port: u16) -> Result<Option<ConnId>, AttachError> {
        let sockets = self.sockets_on(port);
        if sockets.is_empty() {
            return Err(AttachError::NotListening(port));
        }
        for s in sockets {
            if let Some(c) = self.accept_on(s)? {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    fn connect(&mut self, remote: std::net::SocketAddr) -> Result<ConnId, AttachError> {
        let remote = match remote {
            SocketAddr::V6(r) => match r.ip().to_ipv4_mapped() {
                Some(ip) => SocketAddrV4::new(ip, r.port()).into(),
                None if self.welcome.local_ip6.is_none() => return Err(AttachError::Ipv6(remote)),
                None => remote,
            },
            v4 => v4,
        };
        let reply = self.call(Request::Connect { remote })?;
        let Reply::Connecting { conn, slot } = reply else {
            return Err(AttachError::Protocol(format!(
                "{reply:?} instead of a connection"
            )));
        };
        let conn = ConnId::from_bits(conn);
        self.conns.insert(conn, Local::at(slot));
        Ok(conn)
    }

    fn post(&mut self, wr: WorkRequest) -> Result<(), AttachError> {
        let l = self.local(wr.conn)?;
        let r = self.region(wr.mr)?;
        let need = match wr.dir {
            Direction::Recv => Access::RECV,
            Direction::Send => Access::SEND,
        };
        if wr.offset.checked_add(wr.len).is_none_or(|e| e > r.len) || !r.access.contains(need) {
            return Err(AttachError::Range {
                mr: wr.mr,
                offset: wr.offset,
                len: wr.len,
                region_len: r.len,
                access: r.access,
            });
        }
        if self.posted >= self.welcome.max_posted {
            return Err(AttachError::Limit(format!(
                "daemon.max_posted ({}) work requests outstanding",
                self.welcome.max_posted
            )));
        }
        let d = PostDesc {
            wr_id: wr.wr_id,
            conn: wr.conn.to_bits(),
            mr: wr.mr.to_bits(),
            offset: wr.offset as u64,
            len: wr.len as u64,
            dir: match wr.dir {
                Direction::Recv => DIR_RECV,
                Direction::Send => DIR_SEND,
            },
            reserved: 0,
        };
        if !self.chan.post(d) {
            return Err(AttachError::Limit("the post ring is full".into()));
        }
        self.posted += 1;
        let mut l = l;
        match wr.dir {
            Direction::Recv => l.recv += 1,
            Direction::Send => l.send += 1,
        }
        self.conns.insert(wr.conn, l);
        if self.chan.daemon_asleep() {
            self.wake_daemon.signal();
        }
        Ok(())
    }

    fn close(&mut self, id: ConnId) -> Result<(), AttachError> {
        if self.let_go(id, false)? {
            return Ok(());
        }
        self.local(id)?;
        self.done(Request::Close { conn: id.to_bits() })
    }

    fn abort(&mut self, id: ConnId) -> Result<(), AttachError> {
        if self.let_go(id, true)? {
            return Ok(());
        }
        self.local(id)?;
        self.done(Request::Abort { conn: id.to_bits() })
    }

    fn received(&self, id: ConnId) -> Result<u64, AttachError> {
        Ok(self.status(id)?.received)
    }

    fn acked(&self, id: ConnId) -> Result<u64, AttachError> {
        Ok(self.status(id)?.acked)
    }

    fn state(&self, id: ConnId) -> Result<State, AttachError> {
        Ok(state_from_code(self.status(id)?.state))
    }

    /// Takes what the daemon completed; when nothing came for a while,
    /// spins, yields or sleeps on the doorbell as the idle policy says
    /// (as an in-process stack's `poll` sleeps on its sockets).
    fn poll(&mut self) -> usize {
        let work = self.take_completions();
        let now = transports::Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64);
        match self.idle.after(work, now, || None) {
            Idle::Sleep(limit) => {
                let start = Instant::now();
                self.sleep(limit);
                self.idle.slept(start.elapsed());
                let work = self.drain();
                self.idle.woke(work);
                work
            }
            other => {
                other.pause();
                work
            }
        }
    }

    fn poll_completion(&mut self) -> Option<Completion> {
        self.end_if_lost();
        if self.cq.is_empty() {
            self.drain();
        }
        self.cq.pop_front()
    }

    /// Polls the ring for the idle policy's spin budget, then sleeps on
    /// the doorbell and the socket (a dead daemon hangs it up: its
    /// connections end at once).
    fn wait_completion(&mut self, timeout: Duration) -> Option<Completion> {
        let start = Instant::now();
        let deadline = start + timeout;
        let spin = self.idle.spin_budget();
        loop {
            if let Some(c) = self.poll_completion() {
                return Some(c);
            }
            if self.lost.get() {
                self.end_if_lost();
                return self.cq.pop_front();
            }
            let now = Instant::now();
            if now >= deadline {
                self.check_alive();
                return self.cq.pop_front();
            }
            if now - start < spin {
                std::hint::spin_loop();
                continue;
            }
            self.sleep(deadline - now);
        }
    }

    fn drops(&self) -> Vec<(&'static str, u64)> {
        self.stats()
            .map(|s| s.drops.iter().map(|(n, c)| (intern(n), *c)).collect())
            .unwrap_or_default()
    }

    fn retransmissions(&self) -> Option<(u64, u64)> {
        self.stats().ok()?.retransmissions
    }

    fn payload_bytes_touched_by_transport(&self) -> u64 {
        self.stats().map(|s| s.payload_touched).unwrap_or(0)
    }
}

impl Attached {
    /// Sleeps until the daemon rings (it completed something or showed
    /// progress), hangs up, or `limit` passes.
    fn sleep(&mut self, limit: Duration) {
        self.chan.set_app_asleep(true);
        if !self.chan.completions_waiting() {
            let fds = [self.wake_app.as_fd(), self.sock.as_fd()];
            datapath::nic::wait_readable(&fds, limit).ok();
        }
        self.chan.set_app_asleep(false);
        self.wake_app.drain();
        self.check_alive();
    }

    /// The daemon's counters.
    fn stats(&self) -> Result<crate::ipc::msg::Stats, AttachError> {
        match self.call(Request::Stats)? {
            Reply::Stats(s) => Ok(s),
            other => Err(AttachError::Protocol(format!("{other:?} instead of stats"))),
        }
    }
}
