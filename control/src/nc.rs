//! `zerosplit nc`: netcat over the zerosplit stack (either transport, see
//! [`Provider`]), run-to-completion.
//!
//! Listening: accept one connection, write every received byte to stdout as
//! soon as it is in order (bytes below the in-order point are final in
//! posted memory), re-post each receive buffer when it completes, and exit
//! after the peer's FIN. Connecting: read stdin into send buffers, post
//! them, reuse each buffer once its bytes are acknowledged, FIN at end of
//! input, and exit once everything including the FIN is acknowledged.

use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use datapath::mr::Access;
use transports::segment::CloseReason;
use transports::tcp::State;

use crate::provider::Provider;
use crate::stack::{CompletionKind, ConnId};

/// Buffers posted at once, each `BUF` bytes.
const BUFS: usize = 16;
const BUF: usize = 1 << 20;

/// Options of one `nc` run.
#[derive(Debug, Clone)]
pub struct NcOptions {
    /// Give up when nothing happens for this long.
    pub idle_timeout: Duration,
}

fn closed_error(reason: CloseReason) -> anyhow::Error {
    match reason {
        CloseReason::Refused => anyhow::anyhow!("connection refused by the peer (RST)"),
        CloseReason::Reset => anyhow::anyhow!("connection reset by the peer"),
        CloseReason::TimedOut => anyhow::anyhow!("connection timed out (no answer from the peer)"),
        CloseReason::Aborted => anyhow::anyhow!("connection aborted"),
        CloseReason::Graceful => anyhow::anyhow!("connection closed before the transfer finished"),
    }
}

/// Accepts one connection on `port` and copies it to `out`. Returns the
/// number of bytes received.
///
/// # Errors
/// The stack failed, the peer reset, or nothing happened for the idle time.
pub fn listen<P: Provider>(
    stack: &mut P,
    port: u16,
    out: &mut impl Write,
    opts: &NcOptions,
) -> Result<u64> {
    listen_with(stack, port, out, opts, |_| ()).map(|(n, ())| n)
}

/// [`listen`], calling `probe` once the whole stream is in (before the
/// connection closes) and returning what it returned: for tests and
/// reports that need the connection's counters.
///
/// # Errors
/// As [`listen`].
pub fn listen_with<P: Provider, T>(
    stack: &mut P,
    port: u16,
    out: &mut impl Write,
    opts: &NcOptions,
    probe: impl FnOnce(&P) -> T,
) -> Result<(u64, T)> {
    stack
        .listen(port)
        .with_context(|| format!("listening on port {port}"))?;
    let mr = stack
        .register_memory(BUFS * BUF, Access::RECV)
        .context("registering receive buffers")?;
    let mut conn: Option<ConnId> = None;
    let mut written = 0u64;
    let mut peer_len: Option<u64> = None;
    let mut next_wr = 0u64;
    let mut last_activity = Instant::now();
    loop {
        if stack.poll() > 0 {
            last_activity = Instant::now();
        }
        if conn.is_none() {
            if let Some(c) = stack.accept(port)? {
                for k in 0..BUFS {
                    stack.post_recv(c, mr, k * BUF, BUF, next_wr)?;
                    next_wr += 1;
                }
                conn = Some(c);
            }
        }
        while let Some(c) = stack.poll_completion() {
            if Some(c.conn) != conn {
                continue;
            }
            match c.kind {
                CompletionKind::Recv => {
                    // This buffer is full and written out below; post it again.
                    let slot = (c.wr_id as usize) % BUFS;
                    stack.post_recv(c.conn, mr, slot * BUF, BUF, next_wr)?;
                    next_wr += 1;
                }
                CompletionKind::PeerClosed { len } => peer_len = Some(len),
                // Closed before the whole stream arrived: refused, reset,
                // timed out. After the peer's FIN, a close is expected.
                CompletionKind::Closed(reason) if peer_len.is_none() => {
                    return Err(closed_error(reason))
                }
                _ => {}
            }
        }
        if let Some(c) = conn {
            // Write out every byte that is in order and final.
            let upto = stack.received(c).unwrap_or(written);
            let memory = stack.memory(mr)?;
            while written < upto {
                let at = (written as usize) % (BUFS * BUF);
                let n = ((upto - written) as usize).min(BUFS * BUF - at);
                out.write_all(&memory[at..at + n])
                    .context("writing to stdout")?;
                written += n as u64;
            }
            if peer_len.is_some_and(|len| written >= len) {
                out.flush().context("flushing stdout")?;
                let probed = probe(stack);
                stack.close(c).ok();
                // Wait (bounded) for our FIN to be acknowledged.
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline
                    && stack
                        .state(c)
                        .is_ok_and(|s| s != State::Closed && s != State::TimeWait)
                {
                    stack.poll();
                }
                return Ok((written, probed));
            }
        }
        if last_activity.elapsed() > opts.idle_timeout {
            bail!("nothing happened for {:?}", opts.idle_timeout);
        }
    }
}

/// Connects to `remote` and sends everything `input` yields. Returns the
/// number of bytes sent.
///
/// # Errors
/// Refused, reset, timed out, or the stack failed.
pub fn connect<P: Provider>(
    stack: &mut P,
    remote: SocketAddrV4,
    input: &mut impl Read,
    opts: &NcOptions,
) -> Result<u64> {
    let conn = stack
        .connect(remote)
        .with_context(|| format!("connecting to {remote}"))?;
    let mr = stack
        .register_memory(BUFS * BUF, Access::SEND)
        .context("registering send buffers")?;
    let mut free: Vec<usize> = (0..BUFS).collect();
    let (mut posted, mut connected, mut eof, mut fin) = (0u64, false, false, false);
    let mut last_activity = Instant::now();
    loop {
        if stack.poll() > 0 {
            last_activity = Instant::now();
        }
        while let Some(c) = stack.poll_completion() {
            match c.kind {
                CompletionKind::Connected => connected = true,
                CompletionKind::Send => free.push(c.wr_id as usize % BUFS),
                CompletionKind::Closed(reason) => {
                    if fin && reason == CloseReason::Graceful {
                        return Ok(posted);
                    }
                    return Err(closed_error(reason));
                }
                _ => {}
            }
        }
        if connected && !eof {
            if let Some(slot) = free.pop() {
                let buf = &mut stack.memory_mut(mr)?[slot * BUF..(slot + 1) * BUF];
                let mut n = 0;
                while n < BUF {
                    match input.read(&mut buf[n..]) {
                        Ok(0) => {
                            eof = true;
                            break;
                        }
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e).context("reading stdin"),
                    }
                }
                if n > 0 {
                    stack.post_send(conn, mr, slot * BUF, n, slot as u64)?;
                    posted += n as u64;
                } else {
                    free.push(slot);
                }
                last_activity = Instant::now();
            }
        }
        if eof && !fin {
            stack.close(conn)?;
            fin = true;
        }
        if fin
            && stack.acked(conn).is_ok_and(|a| a >= posted)
            && stack
                .state(conn)
                .is_ok_and(|s| matches!(s, State::FinWait2 | State::TimeWait | State::Closed))
        {
            return Ok(posted);
        }
        if last_activity.elapsed() > opts.idle_timeout {
            bail!(
                "nothing happened for {:?} (connected: {connected})",
                opts.idle_timeout
            );
        }
    }
}
