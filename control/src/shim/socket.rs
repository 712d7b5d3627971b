//! The socket calls on our sockets: claiming a kernel socket (`listen`,
//! `connect`), `accept`, moving bytes, `shutdown`, descriptors.

use std::ffi::c_int;
use std::net::SocketAddrV4;
use std::os::fd::RawFd;

use datapath::cabi::{real, CResult};
use transports::segment::CloseReason;

use super::opts::Opts;
use super::runtime::{Kind, Listener, Locked, Runtime, Sock, SockId, Stream};
use super::setup::{RING_BUF, RING_BUFS};
use super::FdMarks;
use crate::host::HostError as StackError;
use crate::provider::Provider;
use crate::stream::Rings;

/// The errno for a stack error on `listen` / `connect`.
fn errno_of(e: &StackError) -> c_int {
    match e {
        StackError::PortOwned(_) => libc::EADDRINUSE,
        StackError::NetInfo(_) => libc::ENETUNREACH,
        _ => libc::EAGAIN,
    }
}

impl Runtime {
    /// Claims kernel socket `fd` as a listener on `local` (its bound
    /// address; port 0 takes an ephemeral port from the kernel).
    pub(super) fn listen(
        &self,
        fd: RawFd,
        mut local: SocketAddrV4,
        backlog: c_int,
        owned: &FdMarks,
        watched: &FdMarks,
    ) -> CResult<()> {
        if local.port() == 0 {
            real::bind(fd, local)?;
            local = real::local_addr(fd)?;
        }
        let nonblock = real::fcntl(fd, libc::F_GETFL, 0)? & libc::O_NONBLOCK != 0;
        let mut st = self.lock();
        if st.listeners.contains_key(&local.port()) {
            return Err(libc::EADDRINUSE);
        }
        // A listener closed on this port earlier: reset what it left.
        if st.closed_ports.remove(&local.port()) {
            while let Ok(Some(conn)) = st.stack.accept(local.port()) {
                let _ = st.stack.abort(conn);
            }
        }
        if let Err(e) = st.stack.listen(local.port()) {
            super::log_line(&format!("listen on port {}: {e}", local.port()));
            return Err(errno_of(&e));
        }
        let id = st.insert(Sock {
            refs: 1,
            calls: 0,
            nonblock,
            kind: Kind::Listener(Listener {
                local,
                backlog: Default::default(),
                max_backlog: backlog.clamp(1, 4096) as usize,
            }),
            opts: Opts::default(),
        });
        st.listeners.insert(local.port(), id);
        st.fds.insert(fd, id);
        owned.set(fd, true);
        watched.set(fd, false);
        Ok(())
    }

    /// `listen` again on a listener: sets the backlog.
    pub(super) fn relisten(&self, fd: RawFd, backlog: c_int) -> CResult<()> {
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
    pub(super) fn connect(
        &self,
        fd: RawFd,
        remote: SocketAddrV4,
        owned: &FdMarks,
        watched: &FdMarks,
    ) -> CResult<()> {
        let nonblock = real::fcntl(fd, libc::F_GETFL, 0)? & libc::O_NONBLOCK != 0;
        let mut opts = Opts::default();
        opts.inherit_kernel(fd);
        let mut st = self.lock();
        let default_cc = st.stack.algorithm();
        if let Some(cc) = opts.congestion {
            st.stack.set_algorithm(cc);
        }
        let conn = st.stack.connect(remote);
        st.stack.set_algorithm(default_cc);
        let conn = conn.map_err(|e| {
            super::log_line(&format!("connect to {remote}: {e}"));
            errno_of(&e)
        })?;
        let local = st
            .stack
            .endpoints(conn)
            .map_or(SocketAddrV4::new(st.setup.iface.ip, 0), |(l, _)| l);
        let rings = match Rings::open(&mut st.stack, conn, RING_BUFS, RING_BUF) {
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
    pub(super) fn reconnect(&self, fd: RawFd) -> CResult<()> {
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

    /// `accept4` on listener `fd`.
    pub(super) fn accept(
        &self,
        fd: RawFd,
        flags: c_int,
        owned: &FdMarks,
    ) -> CResult<(RawFd, SocketAddrV4)> {
        let mut st = self.lock();
        let (lid, sock) = st.sock(fd)?;
        let nonblock = sock.nonblock;
        if !matches!(sock.kind, Kind::Listener(_)) {
            return Err(libc::EINVAL);
        }
        let timeout = sock.opts.rcvtimeo;
        let r = self.holding(st, lid, |st| {
            self.accept_on(st, lid, nonblock, timeout, flags, owned)
        });
        if r.is_ok() {
            self.kick();
        }
        r
    }

    /// [`Runtime::accept`] on listener `lid`, held.
    fn accept_on<'a>(
        &'a self,
        mut st: Locked<'a>,
        lid: SockId,
        nonblock: bool,
        timeout: Option<std::time::Duration>,
        flags: c_int,
        owned: &FdMarks,
    ) -> (Locked<'a>, CResult<(RawFd, SocketAddrV4)>) {
        loop {
            let (g, r) = self.block(st, nonblock, timeout, |st| {
                let Some(sock) = st.socks.get_mut(&lid) else {
                    return Some(Err(libc::EBADF));
                };
                match &mut sock.kind {
                    Kind::Listener(l) => l.backlog.pop_front().map(Ok),
                    Kind::Stream(_) => Some(Err(libc::EINVAL)),
                }
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
            let rings = match Rings::open(&mut st.stack, conn, RING_BUFS, RING_BUF) {
                Ok(r) => r,
                Err(_) => {
                    st.no_memory += 1;
                    super::log_line("no registered memory left for a connection's rings: reset it (raise umem.mr_bytes)");
                    st.release(id);
                    continue;
                }
            };
            // The placeholder carries the flags too, so F_GETFL agrees.
            let ty = libc::SOCK_STREAM | (flags & (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK));
            let new = match real::socket(libc::AF_INET, ty, 0) {
                Ok(new) => new,
                Err(e) => {
                    rings.release(&mut st.stack);
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
            s.rings = Some(rings);
            let peer = s.peer;
            st.fds.insert(new, id);
            owned.set(new, true);
            return (st, Ok((new, peer)));
        }
    }

    /// `recvmsg` into `bufs`: `MSG_PEEK`, `MSG_DONTWAIT`, `MSG_WAITALL`,
    /// `MSG_OOB`. Without `SO_OOBINLINE` the urgent byte is not read
    /// in-band (a read stops before it and the next one skips it), as on
    /// Linux.
    pub(super) fn recv(&self, fd: RawFd, bufs: &mut [&mut [u8]], flags: c_int) -> CResult<usize> {
        if flags & libc::MSG_OOB != 0 {
            return self.recv_oob(fd, bufs, flags & libc::MSG_PEEK != 0);
        }
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        if want == 0 {
            return Ok(0);
        }
        let mut st = self.lock();
        let id = st.id_of(fd)?;
        let (_, sock) = st.stream(fd)?;
        let nonblock = sock.nonblock || flags & libc::MSG_DONTWAIT != 0;
        let timeout = sock.opts.rcvtimeo;
        let inline = sock.opts.oob_inline();
        self.holding(st, id, |st| {
            self.recv_on(st, id, bufs, (flags, inline), nonblock, timeout, want)
        })
    }

    /// `recv(MSG_OOB)`: the urgent byte, once, as Linux gives it (never
    /// waits): `EINVAL` with `SO_OOBINLINE`, without a mark or once read;
    /// `EAGAIN` before it arrived (0 after the peer's FIN).
    fn recv_oob(&self, fd: RawFd, bufs: &mut [&mut [u8]], peek: bool) -> CResult<usize> {
        let mut st = self.lock();
        let (stack, sock) = st.stream(fd)?;
        if sock.opts.oob_inline() {
            return Err(libc::EINVAL);
        }
        let Kind::Stream(s) = &mut sock.kind else {
            return Err(libc::ENOTCONN);
        };
        let Some(at) = s.urgent_mark(stack) else {
            return Err(libc::EINVAL);
        };
        if s.oob_read {
            return Err(libc::EINVAL);
        }
        let received = s.received(stack);
        if at >= received {
            return if s.at_eof(stack) {
                Ok(0)
            } else {
                Err(libc::EAGAIN)
            };
        }
        let Some(out) = bufs.iter_mut().find(|b| !b.is_empty()) else {
            return Ok(0);
        };
        let Some(rings) = s.rings.as_mut() else {
            return Err(libc::ENOTCONN);
        };
        let ahead = at - rings.read_total();
        let n = rings
            .read_into(stack, received, &mut out[..1], Some(ahead))
            .map_err(|_| libc::EINVAL)?;
        if n == 1 && !peek {
            s.oob_read = true;
        }
        Ok(n)
    }

    /// [`Runtime::recv`] on stream `id`, held.
    #[allow(clippy::too_many_arguments)]
    fn recv_on<'a>(
        &'a self,
        mut st: Locked<'a>,
        id: SockId,
        bufs: &mut [&mut [u8]],
        (flags, inline): (c_int, bool),
        nonblock: bool,
        timeout: Option<std::time::Duration>,
        want: usize,
    ) -> (Locked<'a>, CResult<usize>) {
        let peek = flags & libc::MSG_PEEK != 0;
        let waitall = flags & libc::MSG_WAITALL != 0 && !peek;
        let mut got = 0usize;
        loop {
            let (g, r) = self.block(st, nonblock || got > 0 && !waitall, timeout, |st| {
                let (stack, s) = match st.stream_by_id(id) {
                    Ok(x) => x,
                    Err(e) => return Some(Err(e)),
                };
                if s.shut_rd {
                    return Some(Ok(0));
                }
                if s.rings.is_none() || !s.connected && s.closed.is_none() {
                    return if s.closed.is_some() {
                        Some(Err(libc::ENOTCONN))
                    } else {
                        None
                    };
                }
                if s.readable(stack) > 0 {
                    // Nothing copied: only the urgent byte (skipped), or
                    // a read that already has bytes stopped at the mark.
                    let n = copy_out(stack, s, bufs, got, peek, inline);
                    if n > 0 || got > 0 {
                        return Some(Ok(n));
                    }
                }
                if s.closed == Some(CloseReason::Reset) && !s.reset_reported {
                    s.reset_reported = true;
                    s.so_error = None;
                    return Some(Err(libc::ECONNRESET));
                }
                if s.closed == Some(CloseReason::TimedOut) && s.so_error.take().is_some() {
                    return Some(Err(libc::ETIMEDOUT));
                }
                if s.at_eof(stack) {
                    return Some(Ok(0));
                }
                None
            });
            st = g;
            match r {
                Ok(n) => {
                    got += n;
                    if n > 0 && !peek {
                        if let Ok((stack, s)) = st.stream_by_id(id) {
                            if s.alive {
                                if let Some(r) = s.rings.as_mut() {
                                    let _ = r.repost(stack);
                                }
                            }
                        }
                        self.kick();
                    }
                    if n == 0 || got == want || !waitall {
                        return (st, Ok(got));
                    }
                }
                Err(_) if got > 0 => return (st, Ok(got)),
                Err(e) => return (st, Err(e)),
            }
        }
    }

    /// `sendmsg` from `bufs`: a blocking socket sends everything (waiting
    /// for room), a non-blocking one what fits; `EPIPE` (and `SIGPIPE`
    /// unless `MSG_NOSIGNAL`) once the write side is gone.
    pub(super) fn send(&self, fd: RawFd, bufs: &[&[u8]], flags: c_int) -> CResult<usize> {
        if flags & libc::MSG_OOB != 0 {
            super::unsupported("send with MSG_OOB".into());
            return Err(libc::EOPNOTSUPP);
        }
        let mut st = self.lock();
        let id = st.id_of(fd)?;
        let (_, sock) = st.stream(fd)?;
        let nonblock = sock.nonblock || flags & libc::MSG_DONTWAIT != 0;
        let timeout = sock.opts.sndtimeo;
        let r = self.holding(st, id, |st| self.send_on(st, id, bufs, nonblock, timeout));
        if r == Err(libc::EPIPE) && flags & libc::MSG_NOSIGNAL == 0 {
            real::raise_sigpipe();
        }
        r
    }

    /// [`Runtime::send`] on stream `id`, held.
    fn send_on<'a>(
        &'a self,
        mut st: Locked<'a>,
        id: SockId,
        bufs: &[&[u8]],
        nonblock: bool,
        timeout: Option<std::time::Duration>,
    ) -> (Locked<'a>, CResult<usize>) {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let max_sends = st.setup.max_sends;
        let mut sent = 0usize;
        loop {
            let (g, r) = self.block(st, nonblock, timeout, |st| {
                let (stack, s) = match st.stream_by_id(id) {
                    Ok(x) => x,
                    Err(e) => return Some(Err(e)),
                };
                if s.closed == Some(CloseReason::Reset) && !s.reset_reported {
                    s.reset_reported = true;
                    return Some(Err(libc::ECONNRESET));
                }
                if s.shut_wr || s.closed.is_some() {
                    return Some(Err(libc::EPIPE));
                }
                if !s.connected {
                    return None;
                }
                if total == 0 {
                    return Some(Ok(0));
                }
                if s.writable(stack, max_sends) == 0 {
                    return None;
                }
                Some(copy_in(stack, s, bufs, sent, max_sends))
            });
            st = g;
            match r {
                Ok(n) => {
                    sent += n;
                    if n > 0 {
                        self.kick();
                    }
                    if sent >= total || nonblock {
                        return (st, Ok(sent));
                    }
                }
                Err(_) if sent > 0 => return (st, Ok(sent)),
                Err(e) => return (st, Err(e)),
            }
        }
    }

    /// `shutdown`: the read side stops returning data; the write side sends
    /// FIN after the posted bytes.
    pub(super) fn shutdown(&self, fd: RawFd, how: c_int) -> CResult<()> {
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
    pub(super) fn addr(&self, fd: RawFd, peer: bool) -> CResult<SocketAddrV4> {
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
    pub(super) fn fcntl(&self, fd: RawFd, cmd: c_int, arg: c_int) -> CResult<c_int> {
        let r = real::fcntl(fd, cmd, arg)?;
        if cmd == libc::F_SETFL {
            self.record_nonblocking(fd, arg & libc::O_NONBLOCK != 0)?;
        }
        Ok(r)
    }

    /// Sets `O_NONBLOCK` (`FIONBIO`): ours and the placeholder's, so
    /// `F_GETFL` agrees.
    pub(super) fn set_nonblocking(&self, fd: RawFd, on: bool) -> CResult<()> {
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
    pub(super) fn readable(&self, fd: RawFd) -> CResult<u64> {
        let mut st = self.lock();
        let (stack, sock) = st.stream(fd)?;
        match &mut sock.kind {
            Kind::Stream(s) => Ok(s.readable(stack)),
            Kind::Listener(_) => Ok(0),
        }
    }

    /// `fd` is being closed (or replaced): forgets it, releases its socket
    /// when it was the last descriptor, and drops it from epoll sets.
    pub(super) fn forget_fd(&self, fd: RawFd, owned: &FdMarks) {
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
    pub(super) fn dup_fd(&self, old: RawFd, new: RawFd) -> bool {
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

/// Copies readable bytes into `bufs` (after the first `skip` bytes of
/// them, already filled); the count copied. Unless `inline`, the copy
/// stops before the urgent byte, and a read that starts there skips it
/// (as Linux does with `SO_OOBINLINE` off).
fn copy_out(
    stack: &crate::stack::Stack,
    s: &mut Stream,
    bufs: &mut [&mut [u8]],
    skip: usize,
    peek: bool,
    inline: bool,
) -> usize {
    let received = s.received(stack);
    let mark = if inline { None } else { s.urgent_mark(stack) };
    let Some(rings) = s.rings.as_mut() else {
        return 0;
    };
    let start = rings.read_total();
    // How far past the read point a peek has got.
    let mut ahead = 0u64;
    let mut done = 0usize;
    let mut skip = skip;
    let copied_before = skip > 0;
    for b in bufs.iter_mut() {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        let mut at = skip;
        skip = 0;
        while at < b.len() {
            let pos = if peek {
                start + ahead
            } else {
                rings.read_total()
            };
            let mut room = b.len() - at;
            if let Some(m) = mark {
                if pos == m {
                    // A read stops at the mark; one that starts there
                    // skips the urgent byte (once it arrived).
                    if done > 0 || copied_before || m >= received {
                        return done;
                    }
                    if peek {
                        ahead += 1;
                    } else if rings
                        .read_into(stack, received, &mut [0u8; 1], None)
                        .unwrap_or(0)
                        == 0
                    {
                        return done;
                    }
                    continue;
                }
                if m > pos {
                    room = room.min(usize::try_from(m - pos).unwrap_or(usize::MAX));
                }
            }
            let n = rings
                .read_into(
                    stack,
                    received,
                    &mut b[at..at + room],
                    peek.then_some(ahead),
                )
                .unwrap_or(0);
            if n == 0 {
                return done;
            }
            at += n;
            done += n;
            ahead += n as u64;
        }
    }
    done
}

/// Copies from `bufs` (after the first `skip` bytes, already sent) into
/// the send ring, as far as it has room; the count taken.
fn copy_in(
    stack: &mut crate::stack::Stack,
    s: &mut Stream,
    bufs: &[&[u8]],
    skip: usize,
    max_sends: usize,
) -> CResult<usize> {
    let acked = s.acked(stack);
    let Some(rings) = s.rings.as_mut() else {
        return Err(libc::ENOTCONN);
    };
    let mut done = 0usize;
    let mut skip = skip;
    for b in bufs {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        let mut at = skip;
        skip = 0;
        while at < b.len() {
            if s.sends >= max_sends {
                return Ok(done);
            }
            match rings.write_from(stack, acked, &b[at..]) {
                Ok(0) => return Ok(done),
                Ok(n) => {
                    s.sends += 1;
                    at += n;
                    done += n;
                }
                Err(_) if done > 0 => return Ok(done),
                Err(_) => return Err(libc::EPIPE),
            }
        }
    }
    Ok(done)
}
