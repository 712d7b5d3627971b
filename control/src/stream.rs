//! A `std::io::Read` + `Write` facade over one connection, for ordinary
//! applications that want a socket-like stream rather than work requests.
//!
//! It is a convenience with a cost, stated plainly: the stream registers
//! its own receive and send rings, posts the receive buffers itself, and
//! **copies** — out of the receive ring into the caller's buffer on `read`,
//! and from the caller's buffer into the send ring on `write`. Applications
//! that want zerosplit's zero-copy placement use [`Provider::post_recv`](crate::provider::Provider::post_recv) and
//! [`Provider::post_send`](crate::provider::Provider::post_send) with their own registered memory instead.
//!
//! The stream borrows the stack mutably and drives it (run-to-completion):
//! each blocking call polls until it can make progress or its timeout
//! passes. Bytes below the connection's in-order point are final in the
//! receive ring, so `read` returns them without waiting for a whole buffer.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use datapath::mr::{Access, MrId};
use transports::segment::CloseReason;

use crate::provider::{CompletionKind, ConnId, Provider};
use crate::stack::Stack;

/// Ring sizes of [`ZsStream`]: `BUFS` buffers of `BUF` bytes each way.
const BUFS: u64 = 8;
const BUF: u64 = 128 << 10;

fn io_err(kind: io::ErrorKind, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(kind, e.to_string())
}

/// One connection's copy rings: a receive ring the stream keeps posted
/// (`bufs` buffers of `buf` bytes, each reposted once the application has
/// read its bytes) and a send ring the application's bytes are copied
/// into and posted from. The bookkeeping of every copying front-end: the
/// [`ZsStream`] facade and the socket shim (`zerosplit exec`).
#[derive(Debug)]
pub struct Rings {
    conn: ConnId,
    rx: MrId,
    tx: MrId,
    /// Bytes of one posted receive buffer.
    buf: u64,
    /// Bytes of each ring.
    ring: u64,
    /// Receive-stream bytes the application has read.
    read: u64,
    /// End of posted receive space.
    rx_posted: u64,
    /// Send-stream bytes posted.
    written: u64,
}

/// What [`Rings`] keeps: the connection, its receive and send regions,
/// their geometry, and how far the application read, posted and wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingsState {
    /// The connection.
    pub conn: ConnId,
    /// The receive ring's region.
    pub rx: MrId,
    /// The send ring's region.
    pub tx: MrId,
    /// Bytes of one posted receive buffer.
    pub buf: u64,
    /// Bytes of each ring.
    pub ring: u64,
    /// Receive-stream bytes the application has read.
    pub read: u64,
    /// End of posted receive space.
    pub rx_posted: u64,
    /// Send-stream bytes posted.
    pub written: u64,
}

impl Rings {
    /// Registers `bufs` × `buf` bytes each way for `conn` and posts the
    /// receive ring.
    ///
    /// # Errors
    /// No room to register (`OutOfMemory`) or the post failed.
    pub fn open<P: Provider>(
        stack: &mut P,
        conn: ConnId,
        bufs: u64,
        buf: u64,
    ) -> io::Result<Rings> {
        let ring = bufs.max(1) * buf;
        let rx = stack
            .register_memory(ring as usize, Access::RECV)
            .map_err(|e| io_err(io::ErrorKind::OutOfMemory, e))?;
        let tx = match stack.register_memory(ring as usize, Access::SEND) {
            Ok(tx) => tx,
            Err(e) => {
                let _ = stack.deregister_memory(rx);
                return Err(io_err(io::ErrorKind::OutOfMemory, e));
            }
        };
        let mut r = Rings {
            conn,
            rx,
            tx,
            buf,
            ring,
            read: 0,
            rx_posted: 0,
            written: 0,
        };
        r.repost(stack)?;
        Ok(r)
    }

    /// Its bookkeeping, for a successor that takes the rings over (the
    /// socket shim's exec: the regions and posted work requests stay, the
    /// attachment goes on).
    pub fn state(&self) -> RingsState {
        RingsState {
            conn: self.conn,
            rx: self.rx,
            tx: self.tx,
            buf: self.buf,
            ring: self.ring,
            read: self.read,
            rx_posted: self.rx_posted,
            written: self.written,
        }
    }

    /// Rings over regions registered and posted before, as
    /// [`Rings::state`] gave them.
    pub fn from_state(s: RingsState) -> Rings {
        Rings {
            conn: s.conn,
            rx: s.rx,
            tx: s.tx,
            buf: s.buf,
            ring: s.ring,
            read: s.read,
            rx_posted: s.rx_posted,
            written: s.written,
        }
    }

    /// The connection.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// Bytes of each ring.
    pub fn ring_len(&self) -> u64 {
        self.ring
    }

    /// Receive-stream bytes read so far.
    pub fn read_total(&self) -> u64 {
        self.read
    }

    /// Send-stream bytes posted so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Bytes ready to read, given the connection's in-order count.
    pub fn readable(&self, received: u64) -> u64 {
        received.saturating_sub(self.read)
    }

    /// Room in the send ring, given the acknowledged count.
    pub fn send_space(&self, acked: u64) -> u64 {
        self.ring - (self.written - acked.min(self.written))
    }

    /// Posts receive buffers whose previous bytes the application has read.
    ///
    /// # Errors
    /// The post failed.
    pub fn repost<P: Provider>(&mut self, stack: &mut P) -> io::Result<()> {
        while self.rx_posted + self.buf <= self.read + self.ring {
            let off = (self.rx_posted % self.ring) as usize;
            stack
                .post_recv(self.conn, self.rx, off, self.buf as usize, self.rx_posted)
                .map_err(|e| io_err(io::ErrorKind::Other, e))?;
            self.rx_posted += self.buf;
        }
        Ok(())
    }

    /// Copies up to `out.len()` of the `received` in-order bytes out of the
    /// receive ring (one contiguous piece: call again after a wrap). Unless
    /// `peek`, they count as read; the caller reposts.
    ///
    /// # Errors
    /// The region is gone.
    pub fn read_into<P: Provider>(
        &mut self,
        stack: &P,
        received: u64,
        out: &mut [u8],
        peek_at: Option<u64>,
    ) -> io::Result<usize> {
        let from = self.read + peek_at.unwrap_or(0);
        let avail = received.saturating_sub(from);
        let at = from % self.ring;
        let n = avail.min(out.len() as u64).min(self.ring - at) as usize;
        if n == 0 {
            return Ok(0);
        }
        let ring = stack
            .memory(self.rx)
            .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        out[..n].copy_from_slice(&ring[at as usize..at as usize + n]);
        if peek_at.is_none() {
            self.read += n as u64;
        }
        Ok(n)
    }

    /// Copies as much of `data` as the send ring has room for (given
    /// `acked`; one contiguous piece) and posts it; the bytes taken.
    ///
    /// # Errors
    /// The region is gone or the post failed.
    pub fn write_from<P: Provider>(
        &mut self,
        stack: &mut P,
        acked: u64,
        data: &[u8],
    ) -> io::Result<usize> {
        let at = self.written % self.ring;
        let n = self
            .send_space(acked)
            .min(data.len() as u64)
            .min(self.ring - at) as usize;
        if n == 0 {
            return Ok(0);
        }
        let ring = stack
            .memory_mut(self.tx)
            .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        ring[at as usize..at as usize + n].copy_from_slice(&data[..n]);
        stack
            .post_send(self.conn, self.tx, at as usize, n, self.written)
            .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        self.written += n as u64;
        Ok(n)
    }

    /// The same rings for connection `conn`, the receive ring posted
    /// again: a connection that closed (nothing is posted on its rings any
    /// more) hands them to the next, so a server under connection churn
    /// registers no memory per connection. On an error the rings are
    /// deregistered.
    ///
    /// # Errors
    /// Posting the receive ring failed.
    pub fn recycle<P: Provider>(self, stack: &mut P, conn: ConnId) -> io::Result<Rings> {
        let mut r = Rings {
            conn,
            read: 0,
            rx_posted: 0,
            written: 0,
            ..self
        };
        if let Err(e) = r.repost(stack) {
            r.release(stack);
            return Err(e);
        }
        Ok(r)
    }

    /// Deregisters both rings (after the connection closed).
    pub fn release<P: Provider>(self, stack: &mut P) {
        let _ = stack.deregister_memory(self.rx);
        let _ = stack.deregister_memory(self.tx);
    }
}

/// A TCP byte stream over a zerosplit [`Stack`] (or any [`Provider`]).
#[derive(Debug)]
pub struct ZsStream<'s, P: Provider = Stack> {
    stack: &'s mut P,
    rings: Rings,
    peer_len: Option<u64>,
    closed: Option<CloseReason>,
    timeout: Duration,
}

impl<'s, P: Provider> ZsStream<'s, P> {
    /// Connects to `remote` and waits (at most `timeout`) for the handshake.
    ///
    /// # Errors
    /// `ConnectionRefused`, `TimedOut`, or the stack's error.
    pub fn connect(stack: &'s mut P, remote: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let conn = stack
            .connect(remote)
            .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        let mut s = Self::new(stack, conn, timeout)?;
        s.wait(|s| s.connected_or_closed())?;
        match s.closed {
            Some(CloseReason::Refused) => Err(io_err(
                io::ErrorKind::ConnectionRefused,
                format!("{remote} refused the connection"),
            )),
            Some(reason) => Err(io_err(
                io::ErrorKind::ConnectionAborted,
                format!("{remote}: {reason:?}"),
            )),
            None => Ok(s),
        }
    }

    /// Waits (at most `timeout`) for a connection on `port`, which must be
    /// listening ([`Provider::listen`](crate::provider::Provider::listen)).
    ///
    /// # Errors
    /// `TimedOut`, or the stack's error.
    pub fn accept(stack: &'s mut P, port: u16, timeout: Duration) -> io::Result<Self> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(conn) = stack
                .accept(port)
                .map_err(|e| io_err(io::ErrorKind::Other, e))?
            {
                return Self::new(stack, conn, timeout);
            }
            if Instant::now() >= deadline {
                return Err(io_err(
                    io::ErrorKind::TimedOut,
                    format!("no connection on port {port} within {timeout:?}"),
                ));
            }
            stack.poll();
        }
    }

    fn new(stack: &'s mut P, conn: ConnId, timeout: Duration) -> io::Result<Self> {
        let rings = Rings::open(stack, conn, BUFS, BUF)?;
        Ok(ZsStream {
            stack,
            rings,
            peer_len: None,
            closed: None,
            timeout,
        })
    }

    /// The connection.
    pub fn conn(&self) -> ConnId {
        self.rings.conn
    }

    /// Sends FIN after everything written and waits (at most the timeout)
    /// until the peer acknowledged it; the read side stays open.
    ///
    /// # Errors
    /// The connection is gone, or the FIN was not acknowledged in time.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        use transports::tcp::State;
        let conn = self.conn();
        self.stack
            .close(conn)
            .map_err(|e| io_err(io::ErrorKind::NotConnected, e))?;
        self.wait(|s| {
            s.closed.is_some()
                || s.stack.state(conn).map_or(true, |st| {
                    matches!(st, State::FinWait2 | State::TimeWait | State::Closed)
                })
        })
    }

    fn connected_or_closed(&self) -> bool {
        self.closed.is_some()
            || self.stack.state(self.conn()).is_ok_and(|s| {
                s != transports::tcp::State::SynSent && s != transports::tcp::State::SynReceived
            })
    }

    /// Polls the stack once and takes this connection's completions.
    fn step(&mut self) {
        self.stack.poll();
        while let Some(c) = self.stack.poll_completion() {
            if c.conn != self.conn() {
                continue;
            }
            match c.kind {
                CompletionKind::PeerClosed { len } => self.peer_len = Some(len),
                CompletionKind::Closed(reason) => self.closed = Some(reason),
                _ => {}
            }
        }
    }

    /// Polls until `ready` holds or the timeout passes.
    fn wait(&mut self, mut ready: impl FnMut(&Self) -> bool) -> io::Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if ready(self) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io_err(
                    io::ErrorKind::TimedOut,
                    format!("no progress within {:?}", self.timeout),
                ));
            }
            self.step();
        }
    }

    fn received(&self) -> u64 {
        self.stack
            .received(self.conn())
            .unwrap_or(self.rings.read_total())
    }

    fn acked(&self) -> u64 {
        self.stack.acked(self.conn()).unwrap_or(0)
    }

    fn readable(&self) -> u64 {
        self.rings.readable(self.received())
    }
}

impl<P: Provider> Read for ZsStream<'_, P> {
    /// Copies in-order bytes out of the receive ring; returns 0 at the
    /// peer's FIN.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.wait(|s| {
            s.readable() > 0
                || s.peer_len.is_some_and(|len| s.rings.read_total() >= len)
                || s.closed.is_some()
        })?;
        if self.readable() == 0 {
            return match self.closed {
                Some(CloseReason::Reset) => Err(io_err(
                    io::ErrorKind::ConnectionReset,
                    "connection reset by the peer",
                )),
                _ => Ok(0),
            };
        }
        let received = self.received();
        let n = self.rings.read_into(&*self.stack, received, buf, None)?;
        if self.closed.is_none() {
            self.rings.repost(self.stack)?;
        }
        Ok(n)
    }
}

impl<P: Provider> Write for ZsStream<'_, P> {
    /// Copies into the send ring (waiting for acknowledged space) and posts.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.wait(|s| s.closed.is_some() || s.rings.send_space(s.acked()) > 0)?;
        if let Some(reason) = self.closed {
            return Err(io_err(
                io::ErrorKind::BrokenPipe,
                format!("connection closed: {reason:?}"),
            ));
        }
        let acked = self.acked();
        self.rings.write_from(self.stack, acked, buf)
    }

    /// Waits until everything written is acknowledged.
    fn flush(&mut self) -> io::Result<()> {
        self.wait(|s| s.closed.is_some() || s.acked() >= s.rings.written())?;
        match self.closed {
            Some(reason) if self.acked() < self.rings.written() => Err(io_err(
                io::ErrorKind::BrokenPipe,
                format!("connection closed before the data was acknowledged: {reason:?}"),
            )),
            _ => Ok(()),
        }
    }
}
