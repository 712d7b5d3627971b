//! Moving one byte stream through a [`Provider`] (either transport),
//! run-to-completion: what `zerosplit nc`, the demo and the integration
//! tests do with a connection.
//!
//! Listening: accept one connection, write every received byte to stdout as
//! soon as it is in order (bytes below the in-order point are final in
//! posted memory), re-post each receive buffer when it completes, and exit
//! after the peer's FIN. Connecting: read stdin into send buffers, post
//! them, reuse each buffer once its bytes are acknowledged, FIN at end of
//! input, and exit once everything including the FIN is acknowledged.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use datapath::mr::Access;
use transports::segment::CloseReason;
use transports::tcp::State;

use crate::provider::{CompletionKind, ConnId, Provider, ProviderCallError};

/// Buffers posted at once, each `BUF` bytes.
const BUFS: usize = 16;
const BUF: usize = 1 << 20;

/// Options of one transfer.
#[derive(Debug, Clone)]
pub struct TransferOptions {
    /// Give up when nothing happens for this long.
    pub idle_timeout: Duration,
}

/// Why a transfer stopped before its stream was through.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The stack refused an operation.
    #[error(transparent)]
    Stack(#[from] ProviderCallError),
    /// The connection closed before the whole stream was through.
    #[error("{}", closed_message(*.0))]
    Closed(CloseReason),
    /// Reading the input or writing the output failed.
    #[error("{what}: {source}")]
    Io {
        /// `reading stdin`, `writing to stdout`, …
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Nothing happened for the idle timeout.
    #[error("nothing happened for {idle:?}{}", connected.map(|c| format!(" (connected: {c})")).unwrap_or_default())]
    Idle {
        /// The timeout.
        idle: Duration,
        /// Connecting side: whether the connection had been established.
        connected: Option<bool>,
    },
}

type Result<T> = std::result::Result<T, TransferError>;

fn closed_message(reason: CloseReason) -> &'static str {
    match reason {
        CloseReason::Refused => "connection refused by the peer (RST)",
        CloseReason::Reset => "connection reset by the peer",
        CloseReason::TimedOut => "connection timed out (no answer from the peer)",
        CloseReason::Aborted => "connection aborted",
        CloseReason::ZeroWindow => "connection given up: the peer kept its window closed",
        CloseReason::Graceful => "connection closed before the transfer finished",
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
    opts: &TransferOptions,
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
    opts: &TransferOptions,
    probe: impl FnOnce(&P) -> T,
) -> Result<(u64, T)> {
    stack
        .listen(port)
        .map_err(ProviderCallError::doing(format!(
            "listening on port {port}"
        )))?;
    let mr = stack
        .register_memory(BUFS * BUF, Access::RECV)
        .map_err(ProviderCallError::doing("registering receive buffers"))?;
    let mut conn: Option<ConnId> = None;
    let mut written = 0u64;
    let mut peer_len: Option<u64> = None;
    let mut next_wr = 0u64;
    let mut last_activity = Instant::now();
    let mut full: Vec<usize> = Vec::with_capacity(BUFS);
    loop {
        if stack.poll() > 0 {
            last_activity = Instant::now();
        }
        if conn.is_none() {
            if let Some(c) = stack
                .accept(port)
                .map_err(ProviderCallError::doing("accepting"))?
            {
                for k in 0..BUFS {
                    stack
                        .post_recv(c, mr, k * BUF, BUF, next_wr)
                        .map_err(ProviderCallError::doing("posting a receive buffer"))?;
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
                // This buffer is full: posted again once written out below.
                CompletionKind::Recv => full.push((c.wr_id as usize) % BUFS),
                CompletionKind::PeerClosed { len } => peer_len = Some(len),
                // Closed before the whole stream arrived: refused, reset,
                // timed out. After the peer's FIN, a close is expected.
                CompletionKind::Closed(reason) if peer_len.is_none() => {
                    return Err(TransferError::Closed(reason))
                }
                _ => {}
            }
        }
        if let Some(c) = conn {
            // Write out every byte that is in order and final.
            let upto = stack.received(c).unwrap_or(written);
            let memory = stack
                .memory(mr)
                .map_err(ProviderCallError::doing("reading received bytes"))?;
            while written < upto {
                let at = (written as usize) % (BUFS * BUF);
                let n = ((upto - written) as usize).min(BUFS * BUF - at);
                out.write_all(&memory[at..at + n])
                    .map_err(|source| TransferError::Io {
                        what: "writing to stdout",
                        source,
                    })?;
                written += n as u64;
            }
            // Only now may the full buffers take new bytes: an attached
            // provider's daemon places them while this loop runs.
            for slot in full.drain(..) {
                stack
                    .post_recv(c, mr, slot * BUF, BUF, next_wr)
                    .map_err(ProviderCallError::doing("posting a receive buffer"))?;
                next_wr += 1;
            }
            if peer_len.is_some_and(|len| written >= len) {
                out.flush().map_err(|source| TransferError::Io {
                    what: "flushing stdout",
                    source,
                })?;
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
            return Err(TransferError::Idle {
                idle: opts.idle_timeout,
                connected: None,
            });
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
    remote: SocketAddr,
    input: &mut impl Read,
    opts: &TransferOptions,
) -> Result<u64> {
    let conn = stack
        .connect(remote)
        .map_err(ProviderCallError::doing(format!("connecting to {remote}")))?;
    let mr = stack
        .register_memory(BUFS * BUF, Access::SEND)
        .map_err(ProviderCallError::doing("registering send buffers"))?;
    let mut free: Vec<usize> = (0..BUFS).collect();
    let (mut posted, mut connected, mut eof, mut fin) = (0u64, false, false, false);
    let mut last_activity = Instant::now();
    loop {
        if stack.poll() > 0 {
            last_activity = Instant::now();
        }
        while let Some(c) = stack.poll_completion() {
            // Another connection's (an earlier transfer's close, say).
            if c.conn != conn {
                continue;
            }
            match c.kind {
                CompletionKind::Connected => connected = true,
                CompletionKind::Send => free.push(c.wr_id as usize % BUFS),
                CompletionKind::Closed(reason) => {
                    if fin && reason == CloseReason::Graceful {
                        return Ok(posted);
                    }
                    return Err(TransferError::Closed(reason));
                }
                _ => {}
            }
        }
        if connected && !eof {
            if let Some(slot) = free.pop() {
                let memory = stack
                    .memory_mut(mr)
                    .map_err(ProviderCallError::doing("filling a send buffer"))?;
                let buf = &mut memory[slot * BUF..(slot + 1) * BUF];
                let mut n = 0;
                while n < BUF {
                    match input.read(&mut buf[n..]) {
                        Ok(0) => {
                            eof = true;
                            break;
                        }
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(source) => {
                            return Err(TransferError::Io {
                                what: "reading stdin",
                                source,
                            })
                        }
                    }
                }
                if n > 0 {
                    stack
                        .post_send(conn, mr, slot * BUF, n, slot as u64)
                        .map_err(ProviderCallError::doing("posting a send buffer"))?;
                    posted += n as u64;
                } else {
                    free.push(slot);
                }
                last_activity = Instant::now();
            }
        }
        if eof && !fin {
            stack
                .close(conn)
                .map_err(ProviderCallError::doing("closing"))?;
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
            return Err(TransferError::Idle {
                idle: opts.idle_timeout,
                connected: Some(connected),
            });
        }
    }
}
