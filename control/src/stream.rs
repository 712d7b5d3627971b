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
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use datapath::mr::{Access, MrId};
use transports::segment::CloseReason;

use crate::provider::Provider;
use crate::stack::{CompletionKind, ConnId, Stack};

/// Ring sizes: `BUFS` buffers of `BUF` bytes each way.
const BUFS: u64 = 8;
const BUF: u64 = 128 << 10;
const RING: u64 = BUFS * BUF;

/// A TCP byte stream over a zerosplit [`Stack`] (or any [`Provider`]).
#[derive(Debug)]
pub struct ZsStream<'s, P: Provider = Stack> {
    stack: &'s mut P,
    conn: ConnId,
    rx: MrId,
    tx: MrId,
    /// Receive-stream bytes the application has read.
    read: u64,
    /// End of posted receive space.
    rx_posted: u64,
    /// Send-stream bytes posted.
    written: u64,
    peer_len: Option<u64>,
    closed: Option<CloseReason>,
    timeout: Duration,
}

fn io_err(kind: io::ErrorKind, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(kind, e.to_string())
}

impl<'s, P: Provider> ZsStream<'s, P> {
    /// Connects to `remote` and waits (at most `timeout`) for the handshake.
    ///
    /// # Errors
    /// `ConnectionRefused`, `TimedOut`, or the stack's error.
    pub fn connect(stack: &'s mut P, remote: SocketAddrV4, timeout: Duration) -> io::Result<Self> {
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
        let rx = stack
            .register_memory(RING as usize, Access::RECV)
            .map_err(|e| io_err(io::ErrorKind::OutOfMemory, e))?;
        let tx = stack
            .register_memory(RING as usize, Access::SEND)
            .map_err(|e| io_err(io::ErrorKind::OutOfMemory, e))?;
        let mut s = ZsStream {
            stack,
            conn,
            rx,
            tx,
            read: 0,
            rx_posted: 0,
            written: 0,
            peer_len: None,
            closed: None,
            timeout,
        };
        s.repost()?;
        Ok(s)
    }

    /// The connection.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// Sends FIN after everything written and waits (at most the timeout)
    /// until the peer acknowledged it; the read side stays open.
    ///
    /// # Errors
    /// The connection is gone, or the FIN was not acknowledged in time.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        use transports::tcp::State;
        self.stack
            .close(self.conn)
            .map_err(|e| io_err(io::ErrorKind::NotConnected, e))?;
        let conn = self.conn;
        self.wait(|s| {
            s.closed.is_some()
                || s.stack.state(conn).map_or(true, |st| {
                    matches!(st, State::FinWait2 | State::TimeWait | State::Closed)
                })
        })
    }

    fn connected_or_closed(&self) -> bool {
        self.closed.is_some()
            || self.stack.state(self.conn).is_ok_and(|s| {
                s != transports::tcp::State::SynSent && s != transports::tcp::State::SynReceived
            })
    }

    /// Polls the stack once and takes this connection's completions.
    fn step(&mut self) {
        self.stack.poll();
        while let Some(c) = self.stack.poll_completion() {
            if c.conn != self.conn {
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

    /// Posts receive buffers whose previous bytes the application has read.
    fn repost(&mut self) -> io::Result<()> {
        while self.closed.is_none() && self.rx_posted + BUF <= self.read + RING {
            let off = (self.rx_posted % RING) as usize;
            self.stack
                .post_recv(self.conn, self.rx, off, BUF as usize, self.rx_posted)
                .map_err(|e| io_err(io::ErrorKind::Other, e))?;
            self.rx_posted += BUF;
        }
        Ok(())
    }

    fn readable(&self) -> u64 {
        self.stack
            .received(self.conn)
            .unwrap_or(self.read)
            .saturating_sub(self.read)
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
            s.readable() > 0 || s.peer_len.is_some_and(|len| s.read >= len) || s.closed.is_some()
        })?;
        let avail = self.readable();
        if avail == 0 {
            return match self.closed {
                Some(CloseReason::Reset) => Err(io_err(
                    io::ErrorKind::ConnectionReset,
                    "connection reset by the peer",
                )),
                _ => Ok(0),
            };
        }
        let at = self.read % RING;
        let n = (avail.min(buf.len() as u64)).min(RING - at) as usize;
        let ring = self
            .stack
            .memory(self.rx)
            .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        buf[..n].copy_from_slice(&ring[at as usize..at as usize + n]);
        self.read += n as u64;
        self.repost()?;
        Ok(n)
    }
}

impl<P: Provider> Write for ZsStream<'_, P> {
    /// Copies into the send ring (waiting for acknowledged space) and posts.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let conn = self.conn;
        self.wait(|s| s.closed.is_some() || s.written - s.stack.acked(conn).unwrap_or(0) < RING)?;
        if let Some(reason) = self.closed {
            return Err(io_err(
                io::ErrorKind::BrokenPipe,
                format!("connection closed: {reason:?}"),
            ));
        }
        let free = RING - (self.written - self.stack.acked(conn).unwrap_or(0));
        let at = self.written % RING;
        let n = (free.min(buf.len() as u64)).min(RING - at) as usize;
        let ring = self
            .stack
            .memory_mut(self.tx)
            .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        ring[at as usize..at as usize + n].copy_from_slice(&buf[..n]);
        self.stack
            .post_send(conn, self.tx, at as usize, n, self.written)
            .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        self.written += n as u64;
        Ok(n)
    }

    /// Waits until everything written is acknowledged.
    fn flush(&mut self) -> io::Result<()> {
        let conn = self.conn;
        self.wait(|s| s.closed.is_some() || s.stack.acked(conn).unwrap_or(0) >= s.written)?;
        match self.closed {
            Some(reason) if self.stack.acked(conn).unwrap_or(0) < self.written => Err(io_err(
                io::ErrorKind::BrokenPipe,
                format!("connection closed before the data was acknowledged: {reason:?}"),
            )),
            _ => Ok(()),
        }
    }
}
