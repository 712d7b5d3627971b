//! The socket calls on our sockets: claiming a kernel socket (`listen`,
//! `connect`), `accept`, `shutdown`, names, modes and descriptors (moving
//! bytes is [`crate::io`]).

use std::ffi::c_int;
use std::net::{Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

use zerosplit::provider::Provider;

use crate::cabi::real;
use crate::family::Listen;
use crate::layer::CResult;
use crate::log::log_line;
use crate::marks::FdMarks;
use crate::opts::Opts;
use crate::runtime::{Locked, Runtime};
use crate::sockets::{Kind, Listener, Sock, SockId, Stream};

impl Runtime {
    /// The IPv6 address the stack serves, if any.
    pub(crate) fn local_ip6(&self) -> Option<Ipv6Addr> {
        self.lock().stack.local_ip6()
    }

    /// Claims kernel socket `fd` as a listener named `local` (its bound
    /// address; IPv4 for a v4-mapped one), taking peers of `families`.
    pub(crate) fn listen(
        &self,
        fd: RawFd,
        (local, families): Listen,
        backlog: c_int,
        owned: &FdMarks,
        watched: &FdMarks,
    ) -> CResult<()> {
        let nonblock = real::fcntl(fd, libc::F_GETFL, 0)? & libc::O_NONBLOCK != 0;
        // Set on the kernel socket while it was a candidate.
        let mut on = [0u8; 4];
        let reuseport = real::getsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, &mut on)
            .is_ok_and(|_| i32::from_ne_bytes(on) != 0);
        let mut st = self.lock();
        let port = local.port();
        let group = st.listeners.get(&port).cloned().unwrap_or_default();
        let socket = if st.stack.is_attached() || group.is_empty() {
            // A listener closed on this port earlier: reset what it left.
            if st.closed_ports.remove(&port) {
                while let Ok(Some(conn)) = st.stack.accept(port) {
                    let _ = st.stack.abort(conn);
                }
            }
            // Attached, the daemon arbitrates (a socket of this program's
            // or another's on the port: Linux's rule, its error).
            st.stack
                .open_listener(port, reuseport, families, None)
                .map_err(|e| {
                    log_line(&format!("listen on port {port}: {e}"));
                    e.errno()
                })?
        } else {
            // The own stack listens on the port already: another socket
            // joins a reuseport group, or takes peers of another family,
            // as on Linux.
            let shares = group
                .iter()
                .all(|id| match st.socks.get(id).map(|s| &s.kind) {
                    Some(Kind::Listener(l)) => {
                        !l.families.overlap(families) || (l.reuseport && reuseport)
                    }
                    _ => true,
                });
            if !shares {
                return Err(libc::EADDRINUSE);
            }
            None
        };
        let id = st.insert(Sock {
            refs: 1,
            calls: 0,
            nonblock,
            kind: Kind::Listener(Listener {
                local,
                families,
                socket,
                reuseport,
                backlog: Default::default(),
                max_backlog: backlog.clamp(1, 4096) as usize,
            }),
            opts: Opts::default(),
        });
        st.listeners.entry(port).or_default().push(id);
        st.steer_families(port);
        st.fds.insert(fd, id);
        owned.set(fd, true);
        watched.set(fd, false);
        Ok(())
    }

    /// `listen` again on a listener: sets the backlog.
    pub(crate) fn relisten(&self, fd: RawFd, backlog: c_int) -> CResult<()> {
        let mut st = self.lock();
        match &mut st.sock(fd)?.1.kind {
            Kind::Listener(l) => {
                l.max_backlog = backlog.clamp(1, 4096) as usize;
                Ok(())
            }
            Kind::Stream(_) => Err(libc::EINVAL),
        }
    }

    /// Claims kernel socket `fd` and connects it to `remote`; blocks for
    /// the handshake unless the socket is non-blocking (`EINPROGRESS`).
    pub(crate) fn connect(
        &self,
        fd: RawFd,
        remote: SocketAddr,
        owned: &FdMarks,
        watched: &FdMarks,
    ) -> CResult<()> {
        let nonblock = real::fcntl(fd, libc::F_GETFL, 0)? & libc::O_NONBLOCK != 0;
        let mut opts = Opts::default();
        opts.inherit_kernel(fd);
        let mut st = self.lock();
        let default_cc = st.stack.algorithm();
        if let Some(cc) = opts.congestion {
            if !st.stack.set_algorithm(cc) {
                log_line(&format!(
                    "TCP_CONGESTION {cc:?} to {remote}: attached, the daemon's controller runs it"
                ));
            }
        }
        let conn = st.stack.connect(remote);
        st.stack.set_algorithm(default_cc);
        let conn = conn.map_err(|e| {
            log_line(&format!("connect to {remote}: {e}"));
            e.errno()
        })?;
        let local = st
            .stack
            .endpoints(conn)
            .map_or(SocketAddr::new(st.setup.iface.ip.into(), 0), |(l, _)| l);
        let rings = match st.rings_for(conn) {
            Ok(r) => r,
            Err(_) => {
                let _ = st.stack.abort(conn);
                st.no_memory += 1;
                return Err(libc::ENOBUFS);
            }
        };
        let mut stream = Stream::new(conn, local, remote, false);
        stream.rings = Some(rings);
        let id = st.insert(Sock {
            refs: 1,
            calls: 0,
            nonblock,
            kind: Kind::Stream(stream),
            opts,
        });
        st.by_conn.insert(conn, id);
        st.fds.insert(fd, id);
        owned.set(fd, true);
        watched.set(fd, false);
        drop(st);
        self.kick();
        if nonblock {
            return Err(libc::EINPROGRESS);
        }
        self.wait_connected(fd, false)
    }

    /// `connect` on a socket already connecting or connected: `EISCONN`,
    /// `EALREADY` (non-blocking), or the blocking wait for the handshake.
    pub(crate) fn reconnect(&self, fd: RawFd) -> CResult<()> {
        self.wait_connected(fd, true)
    }

    /// Waits for the handshake of `fd` (unless it is non-blocking); with
    /// `again`, a connected socket answers `EISCONN`.
    fn wait_connected(&self, fd: RawFd, again: bool) -> CResult<()> {
        let mut st = self.lock();
        let (id, sock) = st.sock(fd)?;
        let nonblock = sock.nonblock;
        let mut first = true;
        let r = self.holding(st, id, |st| {
            self.block(st, nonblock, None, |st| {
                let (_, s) = match st.stream_by_id(id) {
                    Ok(x) => x,
                    Err(e) => return Some(Err(e)),
                };
                let was_first = std::mem::replace(&mut first, false);
                if s.connected {
                    return Some(if again && was_first {
                        Err(libc::EISCONN)
                    } else {
                        Ok(())
                    });
                }
                if let Some(e) = s.so_error.take() {
                    return Some(Err(e));
                }
                if s.closed.is_some() {
                    return Some(Err(libc::ECONNABORTED));
                }
                None
            })
        });
        match r {
            Err(libc::EAGAIN) => Err(libc::EALREADY),
            r => r,
        }
    }

    /// `accept4` on listener `fd`, a socket of the IPv6 family (`v6`: the
    /// new one's placeholder is too) or the IPv4 one.
    pub(crate) fn accept(
        &self,
        fd: RawFd,
        flags: c_int,
        v6: bool,
        owned: &FdMarks,
    ) -> CResult<(RawFd, SocketAddr)> {
        let mut st = self.lock();
        let (lid, sock) = st.sock(fd)?;
        let nonblock = sock.nonblock;
        if !matches!(sock.kind, Kind::Listener(_)) {
            return Err(libc::EINVAL);
        }
        let timeout = sock.opts.rcvtimeo;
        let r = self.holding(st, lid, |st| {
            self.accept_on(st, lid, (nonblock, timeout), flags, v6, owned)
        });
        if r.is_ok() {
            self.kick();
        }
        r
    }

    /// [`Runtime::accept`] on listener `lid`, held; `wait`: non-blocking,
    /// and the receive timeout.
    fn accept_on<'a>(
        &'a self,
        mut st: Locked<'a>,
        lid: SockId,
        wait: (bool, Option<std::time::Duration>),
        flags: c_int,
        v6: bool,
        owned: &FdMarks,
    ) -> (Locked<'a>, CResult<(RawFd, SocketAddr)>) {
        loop {
            let (g, r) = self.block(st, wait.0, wait.1, |st| {
                let Some(sock) = st.socks.get_mut(&lid) else {
                    return Some(Err(libc::EBADF));
                };
                let (port, socket, next) = match &mut sock.kind {
                    Kind::Listener(l) => (l.local.port(), l.socket, l.backlog.pop_front()),
                    Kind::Stream(_) => return Some(Err(libc::EINVAL)),
                };
                // Attached, the accept queue is the daemon's, shared with
                // every process holding the socket.
                next.or_else(|| st.pull_accepted(port, socket)).map(Ok)
            });
            st = g;
            let id = match r {
                Ok(id) => id,
                Err(e) => return (st, Err(e)),
            };
            let conn = match st.socks.get(&id).map(|s| &s.kind) {
                Some(Kind::Stream(s)) => s.conn,
                _ => continue,
            };
            // Attached, the rings wait for the first use (a process
            // forking right after accept hands the connection over whole).
            let lazy = st.stack.is_attached();
            let rings = if lazy {
                Ok(None)
            } else {
                st.rings_for(conn).map(Some)
            };
            let rings = match rings {
                Ok(r) => r,
                Err(_) => {
                    st.no_memory += 1;
                    let key = if st.stack.is_attached() {
                        "the daemon's daemon.memory_per_attachment"
                    } else {
                        "umem.mr_bytes"
                    };
                    log_line(&format!(
                        "no registered memory left for a connection's rings: reset it (raise {key})"
                    ));
                    st.release(id);
                    continue;
                }
            };
            // The placeholder carries the flags too, so F_GETFL agrees.
            let ty = libc::SOCK_STREAM | (flags & (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK));
            let domain = if v6 { libc::AF_INET6 } else { libc::AF_INET };
            let new = match real::socket(domain, ty, 0) {
                Ok(new) => new,
                Err(e) => {
                    if let Some(r) = rings {
                        st.spare_rings(r);
                    }
                    st.release(id);
                    return (st, Err(e));
                }
            };
            let Some(sock) = st.socks.get_mut(&id) else {
                real::close(new);
                continue;
            };
            sock.refs = 1;
            sock.nonblock = flags & libc::SOCK_NONBLOCK != 0;
            let Kind::Stream(s) = &mut sock.kind else {
                unreachable!("checked above")
            };
            s.rings = rings;
            s.lazy = lazy;
            let peer = s.peer;
            st.fds.insert(new, id);
            owned.set(new, true);
            return (st, Ok((new, peer)));
        }
    }

    /// `shutdown`: the read side stops returning data; the write side sends
    /// FIN after the posted bytes.
    pub(crate) fn shutdown(&self, fd: RawFd, how: c_int) -> CResult<()> {
        let mut st = self.lock();
        let (stack, sock) = st.stream(fd)?;
        let Kind::Stream(s) = &mut sock.kind else {
            return Err(libc::ENOTCONN);
        };
        if !s.connected && s.closed.is_none() {
            return Err(libc::ENOTCONN);
        }
        let (rd, wr) = match how {
            libc::SHUT_RD => (true, false),
            libc::SHUT_WR => (false, true),
            libc::SHUT_RDWR => (true, true),
            _ => return Err(libc::EINVAL),
        };
        s.shut_rd |= rd;
        if wr && !s.shut_wr {
            s.shut_wr = true;
            if s.alive {
                let _ = stack.close(s.conn);
            }
        }
        drop(st);
        self.kick();
        Ok(())
    }

    /// `getsockname` (`peer` false) / `getpeername`.
    pub(crate) fn addr(&self, fd: RawFd, peer: bool) -> CResult<SocketAddr> {
        let mut st = self.lock();
        match &st.sock(fd)?.1.kind {
            Kind::Listener(l) if !peer => Ok(l.local),
            Kind::Listener(_) => Err(libc::ENOTCONN),
            Kind::Stream(s) if peer => Ok(s.peer),
            Kind::Stream(s) => Ok(s.local),
        }
    }

    /// `fcntl`: `O_NONBLOCK` is ours (and the placeholder's), the rest the
    /// placeholder's.
    pub(crate) fn fcntl(&self, fd: RawFd, cmd: c_int, arg: c_int) -> CResult<c_int> {
        let r = real::fcntl(fd, cmd, arg)?;
        if cmd == libc::F_SETFL {
            self.record_nonblocking(fd, arg & libc::O_NONBLOCK != 0)?;
        }
        Ok(r)
    }

    /// Sets `O_NONBLOCK` (`FIONBIO`): ours and the placeholder's, so
    /// `F_GETFL` agrees.
    pub(crate) fn set_nonblocking(&self, fd: RawFd, on: bool) -> CResult<()> {
        let flags = real::fcntl(fd, libc::F_GETFL, 0)?;
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        real::fcntl(fd, libc::F_SETFL, flags)?;
        self.record_nonblocking(fd, on)
    }

    /// Records `O_NONBLOCK` as the placeholder now has it.
    fn record_nonblocking(&self, fd: RawFd, on: bool) -> CResult<()> {
        let mut st = self.lock();
        st.sock(fd)?.1.nonblock = on;
        Ok(())
    }

    /// `FIONREAD`.
    pub(crate) fn readable(&self, fd: RawFd) -> CResult<u64> {
        let mut st = self.lock();
        let (stack, sock) = st.stream(fd)?;
        match &mut sock.kind {
            Kind::Stream(s) => Ok(s.readable(stack)),
            Kind::Listener(_) => Ok(0),
        }
    }

    /// `fd` is being closed (or replaced): forgets it, releases its socket
    /// when it was the last descriptor, and drops it from epoll sets.
    pub(crate) fn forget_fd(&self, fd: RawFd, owned: &FdMarks) {
        let mut st = self.lock();
        st.epolls.remove(&fd);
        if let Some(id) = st.fds.remove(&fd) {
            owned.set(fd, false);
            for ep in st.epolls.values_mut() {
                ep.entries.remove(&fd);
            }
            // A call blocked on the socket holds it until it returns.
            let last = st.socks.get_mut(&id).is_none_or(|s| {
                s.refs = s.refs.saturating_sub(1);
                s.refs == 0 && s.calls == 0
            });
            if last {
                st.release(id);
            }
        }
        drop(st);
        self.kick();
    }

    /// `new` names the same socket as `old`; false if `old` is not ours.
    pub(crate) fn dup_fd(&self, old: RawFd, new: RawFd) -> bool {
        let mut st = self.lock();
        let Some(&id) = st.fds.get(&old) else {
            return false;
        };
        if let Some(s) = st.socks.get_mut(&id) {
            s.refs += 1;
        }
        st.fds.insert(new, id);
        true
    }
}
