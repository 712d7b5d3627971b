//! The smoltcp engine's side of each poll: payload copied between posted
//! work requests and smoltcp's socket buffers, and socket state turned
//! into completions (connected, received, acknowledged, peer closed,
//! closed).

use std::collections::VecDeque;

use datapath::wire::FlowKey;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp::{self, State as SmolState};
use smoltcp::wire::{IpAddress, IpEndpoint};
use transports::segment::CloseReason;

use super::{SConn, SmolEngine, Wr, SPARE_LISTENERS};
use crate::engine::smol::socket::map_state;
use crate::host::{Conn, Core};
use crate::idmap::ConnId;
use crate::provider::{Completion, CompletionKind};

/// Moves bytes between `wrs` (front first) and a smoltcp buffer with
/// `copy(wr's remaining bytes) -> bytes moved`; a work request that is
/// done leaves the queue through `finished`. Returns (bytes, copies).
fn copy_wrs(
    wrs: &mut VecDeque<Wr>,
    mut copy: impl FnMut(std::ops::Range<usize>) -> usize,
    mut finished: impl FnMut(Wr),
) -> (u64, usize) {
    let (mut bytes, mut copies) = (0, 0);
    while let Some(wr) = wrs.front_mut() {
        let n = copy(wr.area.start + wr.done..wr.area.end);
        if n == 0 {
            break;
        }
        wr.done += n;
        bytes += n as u64;
        copies += 1;
        if wr.done == wr.area.len() {
            if let Some(wr) = wrs.pop_front() {
                finished(wr);
            }
        }
    }
    (bytes, copies)
}

impl SmolEngine {
    /// Copies in-order bytes out of each socket into posted receive
    /// segments and posted send segments into each socket.
    pub(super) fn copy_payload(&mut self, core: &mut Core<SConn>) -> usize {
        let mut work = 0;
        let Core { nic, conns, cq, .. } = core;
        for (&id, c) in conns.iter_mut() {
            if c.closed {
                continue;
            }
            let e = &mut c.engine;
            let sock = self.sockets.get_mut::<tcp::Socket>(e.handle);
            // Receive: smoltcp's buffer → posted segments, in order.
            let (n, copies) = copy_wrs(
                &mut e.recv,
                |area| {
                    if !sock.can_recv() {
                        return 0;
                    }
                    let dst = &mut nic.mr_area_mut()[area];
                    sock.recv(|buf| {
                        let n = buf.len().min(dst.len());
                        dst[..n].copy_from_slice(&buf[..n]);
                        (n, n)
                    })
                    .unwrap_or(0)
                },
                |wr| {
                    cq.push_back(Completion {
                        conn: id,
                        kind: CompletionKind::Recv,
                        wr_id: wr.wr_id,
                        len: wr.area.len() as u64,
                    })
                },
            );
            c.received += n;
            self.counters.payload_copied_out += n;
            work += copies;
            // Send: posted segments → smoltcp's buffer.
            let unacked = &mut e.unacked;
            let (n, copies) = copy_wrs(
                &mut e.send,
                |area| {
                    if !sock.can_send() {
                        return 0;
                    }
                    let src = &nic.mr_area()[area];
                    sock.send(|buf| {
                        let n = buf.len().min(src.len());
                        buf[..n].copy_from_slice(&src[..n]);
                        (n, n)
                    })
                    .unwrap_or(0)
                },
                |wr| unacked.push_back(wr),
            );
            e.pushed += n;
            self.counters.payload_copied_in += n;
            work += copies;
            if e.close_requested && !e.fin_queued && e.send.is_empty() {
                sock.close();
                e.fin_queued = true;
            }
        }
        work
    }

    /// Turns socket state into completions; promotes listening sockets that
    /// got a SYN into connections; drops closed connections.
    pub(super) fn update_connections(&mut self, core: &mut Core<SConn>) -> usize {
        let mut work = 0;
        // Listening sockets that left LISTEN became connections.
        let ports: Vec<u16> = self.listening.keys().copied().collect();
        for port in ports {
            let handles = self.listening[&port].clone();
            for h in handles {
                work += self.promote(core, port, h);
            }
        }
        self.ids.clear();
        self.ids.extend(core.conns.keys().copied());
        for i in 0..self.ids.len() {
            let id = self.ids[i];
            work += self.update_connection(core, id);
        }
        work
    }

    /// A listening socket of `port` that got a SYN becomes a connection
    /// (and a spare takes its place).
    fn promote(&mut self, core: &mut Core<SConn>, port: u16, h: SocketHandle) -> usize {
        let sock = self.sockets.get::<tcp::Socket>(h);
        if sock.state() == SmolState::Listen {
            return 0;
        }
        let remote = sock.remote_endpoint();
        let state = map_state(sock.state());
        let spares = self.listening.get_mut(&port).map_or(0, |l| {
            l.retain(|x| *x != h);
            l.len()
        });
        if spares < SPARE_LISTENERS {
            match self.add_listening_socket(port) {
                Ok(r) => self.listening.entry(port).or_default().push(r),
                Err(e) => log::warn!("{e}"),
            }
        }
        let Some(IpEndpoint {
            addr: IpAddress::Ipv4(rip),
            port: rport,
        }) = remote
        else {
            self.sockets.remove(h);
            return 0;
        };
        let key = FlowKey {
            remote_ip: rip.into(),
            local_ip: core.iface.ip.into(),
            remote_port: rport,
            local_port: port,
        };
        let mac = self.neighbours.get(&rip).map_or([0; 6], |(m, _)| *m);
        let local_mac = core.iface.mac;
        match core.nic.add_flow(key, local_mac, mac, 0, 0) {
            Ok(flow) => {
                let conn = Conn::new(flow, port, Some(port), state, SConn::new(h));
                core.conns.insert(ConnId(flow), conn);
                if state == transports::tcp::State::SynReceived {
                    core.half_opened(port, ConnId(flow));
                }
                self.counters.accepted += 1;
                1
            }
            Err(e) => {
                log::warn!("connection from {rip}:{rport}: {e}");
                self.sockets.get_mut::<tcp::Socket>(h).abort();
                self.sockets.remove(h);
                0
            }
        }
    }

    fn update_connection(&mut self, core: &mut Core<SConn>, id: ConnId) -> usize {
        let Some(c) = core.conns.get_mut(&id) else {
            return 0;
        };
        if c.closed {
            return 0;
        }
        let mut work = 0;
        let sock = self.sockets.get::<tcp::Socket>(c.engine.handle);
        let smol_state = sock.state();
        c.state = map_state(smol_state);
        // smoltcp returns a connection that was reset in SYN-RECEIVED to
        // LISTEN; for us it has ended like a closed one.
        let ended = matches!(smol_state, SmolState::Closed | SmolState::Listen);
        let e = &mut c.engine;
        let graceful = e.fin_seen && e.fin_queued && !e.aborted;
        // Acknowledged: what was pushed minus what smoltcp still holds. A
        // reset empties smoltcp's buffer without anything being
        // acknowledged; a graceful close means everything was.
        let acked = match (ended, graceful) {
            (false, _) => e.pushed - sock.send_queue() as u64,
            (true, true) => e.pushed,
            (true, false) => c.acked,
        };
        if acked > c.acked {
            c.acked = acked;
            while e.unacked.front().is_some_and(|w| w.end <= acked) {
                let Some(wr) = e.unacked.pop_front() else {
                    break;
                };
                core.cq.push_back(Completion {
                    conn: id,
                    kind: CompletionKind::Send,
                    wr_id: wr.wr_id,
                    len: wr.area.len() as u64,
                });
            }
            work += 1;
        }
        let synchronized = !matches!(
            smol_state,
            SmolState::Closed | SmolState::Listen | SmolState::SynSent | SmolState::SynReceived
        );
        let newly_connected = synchronized && !e.connected;
        if newly_connected {
            e.connected = true;
            e.was_synchronized = true;
        }
        if matches!(
            smol_state,
            SmolState::CloseWait | SmolState::LastAck | SmolState::Closing | SmolState::TimeWait
        ) {
            e.fin_seen = true;
        }
        let peer_closed = e.fin_seen && !e.peer_closed_reported && sock.recv_queue() == 0;
        if peer_closed {
            e.peer_closed_reported = true;
        }
        let received = c.received;
        let reason = ended.then(|| close_reason(e, c.listener.is_some(), graceful));
        if newly_connected {
            core.connected(id);
            work += 1;
        }
        if peer_closed {
            core.complete(id, CompletionKind::PeerClosed { len: received }, 0, 0);
            work += 1;
        }
        if let Some(reason) = reason {
            core.ended(id, reason);
            if let Some(c) = core.conns.remove(&id) {
                self.sockets.remove(c.engine.handle);
                let _ = core.nic.remove_flow(c.flow);
            }
            work += 1;
        }
        work
    }
}

/// Why a connection ended. smoltcp does not say; this is read from what we
/// saw of it. (A give-up after `timeout` shows as a reset.)
fn close_reason(e: &SConn, accepted: bool, graceful: bool) -> CloseReason {
    if e.aborted || (e.fin_queued && !e.was_synchronized) {
        // Aborted, or closed by us before the handshake completed.
        CloseReason::Aborted
    } else if !e.was_synchronized {
        if accepted {
            CloseReason::Reset
        } else {
            CloseReason::Refused
        }
    } else if graceful {
        CloseReason::Graceful
    } else {
        CloseReason::Reset
    }
}

impl SConn {
    pub(super) fn new(handle: SocketHandle) -> SConn {
        SConn {
            handle,
            recv: VecDeque::new(),
            send: VecDeque::new(),
            unacked: VecDeque::new(),
            posted_send: 0,
            pushed: 0,
            connected: false,
            fin_seen: false,
            peer_closed_reported: false,
            close_requested: false,
            fin_queued: false,
            aborted: false,
            was_synchronized: false,
        }
    }
}
