//! Moving a socket's bytes: `recv` (with `MSG_PEEK`, `MSG_WAITALL`,
//! `MSG_OOB` and the urgent mark) and `send`, copied between the caller's
//! buffers and the connection's rings.

use std::ffi::c_int;
use std::os::fd::RawFd;

use crate::backend::Backend;
use transports::segment::CloseReason;

use crate::cabi::real;

/// Bytes one `sendfile` call reads from the file and sends.
const SENDFILE_CHUNK: usize = 256 << 10;
use crate::layer::CResult;
use crate::log::unsupported;
use crate::runtime::{Locked, Runtime};
use crate::sockets::{Kind, SockId, Stream};

impl Runtime {
    /// `recvmsg` into `bufs`: `MSG_PEEK`, `MSG_DONTWAIT`, `MSG_WAITALL`,
    /// `MSG_OOB`. Without `SO_OOBINLINE` the urgent byte is not read
    /// in-band (a read stops before it and the next one skips it), as on
    /// Linux.
    pub(crate) fn recv(&self, fd: RawFd, bufs: &mut [&mut [u8]], flags: c_int) -> CResult<usize> {
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
    /// `sendfile` to socket `fd`: up to [`SENDFILE_CHUNK`] bytes of
    /// file `input` from `offset` (at most `count`), read and sent as a
    /// `send` would (a blocking socket sends all it read). The bytes sent.
    pub(crate) fn send_file(
        &self,
        fd: RawFd,
        input: RawFd,
        offset: i64,
        count: usize,
    ) -> CResult<usize> {
        thread_local! {
            static CHUNK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        CHUNK.with(|c| {
            let mut chunk = c.borrow_mut();
            chunk.resize(count.min(SENDFILE_CHUNK), 0);
            let n = real::pread(input, &mut chunk, offset)?;
            if n == 0 {
                return Ok(0);
            }
            self.send(fd, &[&chunk[..n]], 0)
        })
    }

    pub(crate) fn send(&self, fd: RawFd, bufs: &[&[u8]], flags: c_int) -> CResult<usize> {
        if flags & libc::MSG_OOB != 0 {
            unsupported("send with MSG_OOB".into());
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
}

/// Copies readable bytes into `bufs` (after the first `skip` bytes of
/// them, already filled); the count copied. Unless `inline`, the copy
/// stops before the urgent byte, and a read that starts there skips it
/// (as Linux does with `SO_OOBINLINE` off).
fn copy_out(
    stack: &Backend,
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
    stack: &mut Backend,
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
            if s.sends >= max_sends || !stack.send_room() {
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
