//! `zerosplit run`: the stack as a service with the configured listeners —
//! echo (RFC 862), discard (RFC 863) and sink (discard, counting) — until
//! a stop flag is raised (SIGINT/SIGTERM in the CLI).
//!
//! Each accepted connection gets its own registered region, used as a ring
//! of receive buffers. Discard and sink re-post a buffer as soon as it
//! completes. Echo sends received bytes back straight out of the receive
//! ring (no copy: the region is registered for both directions and bytes
//! below the in-order point are final) and re-posts a buffer for receiving
//! only once the echoed bytes in it are acknowledged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use datapath::mr::{Access, MrId};

use crate::config::{ListenConfig, Service};
use crate::provider::Provider;
use crate::stack::{CompletionKind, ConnId};

/// Receive buffers per connection and their size.
const BUFS: u64 = 8;
const BUF: u64 = 256 << 10;
const RING: u64 = BUFS * BUF;

/// What a service run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceReport {
    /// Connections accepted.
    pub connections: u64,
    /// Bytes received over all connections.
    pub bytes_in: u64,
    /// Bytes echoed back.
    pub bytes_echoed: u64,
}

#[derive(Debug)]
struct Session {
    service: Service,
    mr: MrId,
    /// End of posted receive space (stream offset).
    posted: u64,
    /// Bytes handed to the send side (echo).
    echoed: u64,
    /// Bytes the peer acknowledged (echo).
    acked: u64,
    peer_len: Option<u64>,
    fin_sent: bool,
}

impl Session {
    fn post_recv_space<P: Provider>(&mut self, stack: &mut P, conn: ConnId) -> Result<()> {
        // A buffer may receive again once nothing still needs its old bytes:
        // at once for discard/sink, after they were echoed and acknowledged.
        let busy_until = if self.service == Service::Echo {
            self.acked
        } else {
            stack.received(conn)?
        };
        while self.posted + BUF <= busy_until + RING {
            let off = (self.posted % RING) as usize;
            stack.post_recv(conn, self.mr, off, BUF as usize, self.posted / BUF)?;
            self.posted += BUF;
        }
        Ok(())
    }
}

/// Serves `listeners` on `stack` until `stop` is raised.
///
/// # Errors
/// A listener could not be installed or the stack refused an operation.
pub fn serve<P: Provider>(
    stack: &mut P,
    listeners: &[ListenConfig],
    stop: &AtomicBool,
) -> Result<ServiceReport> {
    for l in listeners {
        stack
            .listen(l.port)
            .with_context(|| format!("listening on port {} ({:?})", l.port, l.service))?;
    }
    let mut sessions: HashMap<ConnId, Session> = HashMap::new();
    let mut report = ServiceReport::default();
    while !stop.load(Ordering::Relaxed) {
        stack.poll();
        for l in listeners {
            while let Some(conn) = stack.accept(l.port)? {
                let mr = stack
                    .register_memory(RING as usize, Access::BOTH)
                    .context("registering a connection's buffers")?;
                let mut s = Session {
                    service: l.service,
                    mr,
                    posted: 0,
                    echoed: 0,
                    acked: 0,
                    peer_len: None,
                    fin_sent: false,
                };
                s.post_recv_space(stack, conn)?;
                sessions.insert(conn, s);
                report.connections += 1;
            }
        }
        while let Some(c) = stack.poll_completion() {
            let Some(s) = sessions.get_mut(&c.conn) else {
                continue;
            };
            match c.kind {
                CompletionKind::Send => s.acked += c.len,
                CompletionKind::PeerClosed { len } => s.peer_len = Some(len),
                CompletionKind::Closed(_) => {
                    let s = sessions.remove(&c.conn).expect("present");
                    // Completed or dropped segments no longer reference it.
                    let _ = stack.deregister_memory(s.mr);
                    continue;
                }
                _ => {}
            }
        }
        let conns: Vec<ConnId> = sessions.keys().copied().collect();
        for conn in conns {
            let Some(s) = sessions.get_mut(&conn) else {
                continue;
            };
            let Ok(received) = stack.received(conn) else {
                continue;
            };
            if s.service == Service::Echo {
                // Echo what is in order and final, without wrapping the ring.
                while s.echoed < received {
                    let off = s.echoed % RING;
                    let n = (received - s.echoed).min(RING - off);
                    stack.post_send(conn, s.mr, off as usize, n as usize, s.echoed)?;
                    report.bytes_echoed += n;
                    s.echoed += n;
                }
            }
            s.post_recv_space(stack, conn)?;
            let drained = s.service != Service::Echo || s.echoed >= received;
            if let Some(len) = s
                .peer_len
                .filter(|&len| received >= len && drained && !s.fin_sent)
            {
                report.bytes_in += len;
                stack.close(conn)?;
                s.fin_sent = true;
            }
        }
    }
    Ok(report)
}
