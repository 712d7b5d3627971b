//! Carrying out what the header-only TCP asked, in the order it asked (see
//! [`crate::in_order`]): segments to build and send, state mirrors, and
//! events turned into datapath retirements and completions.

use datapath::ms;
use datapath::nic::NicError;
use transports::segment::{Event, SegmentOut};
use transports::tcp::State;

use super::driver::Output;
use super::TcpCounters;
use super::{TcpConn, TcpEngine};
use crate::host::Core;
use crate::idmap::ConnId;
use crate::in_order::Applied;
use crate::provider::CompletionKind;

impl TcpEngine {
    /// Carries out the outputs waiting since the TX ring was full, in order,
    /// until one has to wait again.
    pub(super) fn retry_waiting(&mut self, core: &mut Core<TcpConn>) -> usize {
        let mut waiting = std::mem::take(&mut self.waiting);
        let done = waiting.retry(|o| self.apply_output(core, o));
        self.waiting = waiting;
        done
    }

    /// Carries out one output after those still waiting.
    pub(super) fn handle_output(&mut self, core: &mut Core<TcpConn>, output: Output) {
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.push(output, |o| self.apply_output(core, o));
        self.waiting = waiting;
    }

    /// Retires the receive (`Recv`) or send (`Send`) work requests of `id`
    /// that end at or below `upto`, completes them and moves the
    /// connection's received or acknowledged point. A send completes, and
    /// the acknowledged point passes its bytes, only once no TX descriptor
    /// points at its memory: until then the connection waits in
    /// `send_waiting` and [`TcpEngine::retry_sends`] retires it later.
    fn retire(&mut self, core: &mut Core<TcpConn>, id: ConnId, kind: CompletionKind, upto: u64) {
        let Some(flow) = core.conns.get(&id).map(|c| c.flow) else {
            return;
        };
        self.retired.clear();
        let (result, point) = if kind == CompletionKind::Recv {
            (core.nic.complete_recv(flow, upto, &mut self.retired), upto)
        } else {
            match core.nic.complete_send(flow, upto, &mut self.retired) {
                Ok(released) => (Ok(()), released),
                Err(e) => (Err(e), 0),
            }
        };
        if !post_retired(&mut self.counters, core, id, kind, result, &self.retired) {
            return;
        }
        if kind == CompletionKind::Send
            && core.nic.send_waiting(flow).unwrap_or(false)
            && !self.send_waiting.contains(&id)
        {
            self.send_waiting.push(id);
        }
        if let Some(c) = core.conns.get_mut(&id) {
            let at = if kind == CompletionKind::Recv {
                &mut c.received
            } else {
                &mut c.acked
            };
            *at = (*at).max(point);
        }
    }

    /// Completes the acknowledged sends that waited for their TX
    /// descriptors, where those came back (call after the datapath
    /// reclaimed completions). Returns the connections still waiting.
    pub(super) fn retry_sends(&mut self, core: &mut Core<TcpConn>) -> usize {
        if self.send_waiting.is_empty() {
            return 0;
        }
        let mut waiting = std::mem::take(&mut self.send_waiting);
        for &id in &waiting {
            // Any offset at or below the acknowledged one re-checks.
            self.retire(core, id, CompletionKind::Send, 0);
        }
        waiting.retain(|id| {
            core.conns
                .get(id)
                .is_some_and(|c| core.nic.send_waiting(c.flow).unwrap_or(false))
        });
        // `retire` re-added the ones still waiting: keep one entry each.
        self.send_waiting.clear();
        self.send_waiting.append(&mut waiting);
        self.send_waiting.len()
    }

    /// Sends a segment, retires and completes work requests, records
    /// state. A segment that finds the TX ring full is handed back to wait.
    fn apply_output(&mut self, core: &mut Core<TcpConn>, output: Output) -> Applied<Output> {
        match output {
            Output::Transmit { conn, seg } => return self.transmit(core, conn, seg),
            Output::ForListener { mut rec } => {
                // The connection it reached ended on the transport's side
                // while it was on its way; this side may still have it
                // (removed at the end of the poll).
                if let Some(conn) = rec.flow.map(ConnId) {
                    self.syns.remove(&conn);
                }
                rec.flow = None;
                self.for_listener.push(*rec);
            }
            Output::Mirror {
                conn,
                state,
                retransmits,
                rtos,
                tail_loss_probes,
                drops,
            } => {
                if core.conns.get(&conn).is_some_and(|c| rtos > c.engine.rtos) {
                    log::info!(
                        "connection {}: retransmission timeout ({rtos} so far, {retransmits} segments retransmitted)",
                        core.describe(conn)
                    );
                }
                if state == State::TimeWait
                    && core
                        .conns
                        .get(&conn)
                        .is_some_and(|c| c.state != State::TimeWait)
                {
                    core.lingering(conn);
                }
                if let Some(c) = core.conns.get_mut(&conn) {
                    c.state = state;
                    c.engine.retransmits = retransmits;
                    c.engine.rtos = rtos;
                    c.engine.tail_loss_probes = tail_loss_probes;
                    c.engine.drops = *drops;
                }
            }
            Output::Event { conn, event, irs } => self.apply_event(core, conn, event, irs),
        }
        Applied::Done
    }

    fn transmit(
        &mut self,
        core: &mut Core<TcpConn>,
        conn: ConnId,
        seg: SegmentOut,
    ) -> Applied<Output> {
        let Some(flow) = core.conns.get(&conn).map(|c| c.flow) else {
            return Applied::Done;
        };
        match core.nic.send(flow, &seg.segment) {
            Ok(true) => {}
            Ok(false) => {
                core.nic.flush();
                return Applied::Wait(Output::Transmit { conn, seg });
            }
            Err(e) => {
                log::warn!("connection {conn:?}: segment not sent: {e}");
                self.counters.tx_refused += 1;
            }
        }
        Applied::Done
    }

    fn apply_event(&mut self, core: &mut Core<TcpConn>, id: ConnId, event: Event, irs: u32) {
        let Some(conn) = core.conns.get_mut(&id) else {
            return;
        };
        let flow = conn.flow;
        match event {
            Event::Connected => {
                let result = if conn.listener.is_none() {
                    // Active open: the peer's ISN is known only now.
                    core.nic.set_irs(flow, irs)
                } else {
                    // Passive open: its own socket and steering entry now
                    // the handshake is done (until now the listener's
                    // catch-all socket carried it).
                    core.nic.steer_flow(flow)
                };
                if let Err(e) = result {
                    log::warn!("connection {id:?}: {e}");
                }
                core.connected(id);
            }
            Event::Received { upto } => self.retire(core, id, CompletionKind::Recv, upto),
            Event::Acked { upto } => self.retire(core, id, CompletionKind::Send, upto),
            Event::Discarded { range } => {
                // The flow may be gone already (closed meanwhile): then so
                // are the bytes.
                let _ = core.nic.discard(flow, range);
            }
            Event::PeerClosed { len } => {
                core.complete(id, CompletionKind::PeerClosed { len }, 0, 0);
            }
            Event::Closed { reason } => {
                self.closed.push(id);
                core.ended(id, reason);
            }
            Event::SynForListener => {
                if let Some(rec) = self.syns.remove(&id) {
                    self.for_listener.push(rec);
                }
            }
        }
    }
}

/// Queues the completions of work requests the datapath just retired;
/// counts and logs a refused retirement (a transport bug). Returns whether
/// the retirement succeeded.
fn post_retired(
    counters: &mut TcpCounters,
    core: &mut Core<TcpConn>,
    id: ConnId,
    kind: CompletionKind,
    result: Result<(), NicError>,
    retired: &[ms::Completion],
) -> bool {
    if let Err(e) = result {
        log::warn!("connection {id:?}: {kind:?} retirement refused: {e}");
        counters.retire_refused += 1;
        return false;
    }
    for c in retired {
        core.complete(id, kind, c.wr_id, c.len);
    }
    true
}
