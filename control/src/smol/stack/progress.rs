//! The provider's side of each poll: payload copied between posted work
//! requests and smoltcp's socket buffers, and socket state turned into
//! completions (connected, received, acknowledged, peer closed, closed).

use std::collections::VecDeque;

use datapath::flow_table::FlowId;
use datapath::wire::FlowKey;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp::{self, State as SmolState};
use smoltcp::wire::{IpAddress, IpEndpoint};
use transports::segment::CloseReason;
use transports::tcp::State;

use super::{SConn, SmolStack, SPARE_LISTENERS};
use crate::smol::socket::map_state;
use crate::stack::{Completion, CompletionKind, ConnId};

impl SmolStack {
    /// Copies in-order bytes out of each socket into posted receive
    /// segments and posted send segments into each socket.
    pub(super) fn copy_payload(&mut self) -> usize {
        let mut work = 0;
        let SmolStack {
            nic,
            sockets,
            conns,
            counters,
            cq,
            ..
        } = self;
        for (&id, c) in conns.iter_mut() {
            if c.closed {
                continue;
            }
            let sock = sockets.get_mut::<tcp::Socket>(c.handle);
            // Receive: smoltcp's buffer → posted segments, in order.
            while let Some(wr) = c.recv.front_mut() {
                if !sock.can_recv() {
                    break;
                }
                let area = nic.mr_area_mut();
                let dst = &mut area[wr.area.start + wr.done..wr.area.end];
                let n = sock
                    .recv(|buf| {
                        let n = buf.len().min(dst.len());
                        dst[..n].copy_from_slice(&buf[..n]);
                        (n, n)
                    })
                    .unwrap_or(0);
                if n == 0 {
                    break;
                }
                wr.done += n;
                c.received += n as u64;
                counters.payload_copied_out += n as u64;
                work += 1;
                if wr.done == wr.area.len() {
                    let wr = c.recv.pop_front().expect("front exists");
                    cq.push_back(Completion {
                        conn: id,
                        kind: CompletionKind::Recv,
                        wr_id: wr.wr_id,
                        len: wr.area.len() as u64,
                    });
                }
            }
            // Send: posted segments → smoltcp's buffer.
            while let Some(wr) = c.send.front_mut() {
                if !sock.can_send() {
                    break;
                }
                let area = nic.mr_area();
                let src = &area[wr.area.start + wr.done..wr.area.end];
                let n = sock
                    .send(|buf| {
                        let n = buf.len().min(src.len());
                        buf[..n].copy_from_slice(&src[..n]);
                        (n, n)
                    })
                    .unwrap_or(0);
                if n == 0 {
                    break;
                }
                wr.done += n;
                c.pushed += n as u64;
                counters.payload_copied_in += n as u64;
                work += 1;
                if wr.done == wr.area.len() {
                    let wr = c.send.pop_front().expect("front exists");
                    c.unacked.push_back(wr);
                }
            }
            if c.close_requested && !c.fin_queued && c.send.is_empty() {
                sock.close();
                c.fin_queued = true;
            }
        }
        work
    }

    /// Turns socket state into completions; promotes listening sockets that
    /// got a SYN into connections; drops closed connections.
    pub(super) fn update_connections(&mut self) -> usize {
        let mut work = 0;
        // Listening sockets that left LISTEN became connections.
        let ports: Vec<u16> = self.listeners.keys().copied().collect();
        for port in ports {
            let handles = self.listeners[&port].listening.clone();
            for h in handles {
                let sock = self.sockets.get::<tcp::Socket>(h);
                if sock.state() == SmolState::Listen {
                    continue;
                }
                let remote = sock.remote_endpoint();
                let state = map_state(sock.state());
                let l = self.listeners.get_mut(&port).expect("listed");
                l.listening.retain(|x| *x != h);
                if l.listening.len() < SPARE_LISTENERS {
                    match self.add_listening_socket(port) {
                        Ok(r) => self
                            .listeners
                            .get_mut(&port)
                            .expect("listed")
                            .listening
                            .push(r),
                        Err(e) => log::warn!("{e}"),
                    }
                }
                let Some(IpEndpoint {
                    addr: IpAddress::Ipv4(rip),
                    port: rport,
                }) = remote
                else {
                    self.sockets.remove(h);
                    continue;
                };
                let key = FlowKey {
                    remote_ip: rip.octets(),
                    local_ip: self.local_ip.octets(),
                    remote_port: rport,
                    local_port: port,
                };
                let mac = self.neighbours.get(&rip).map_or([0; 6], |(m, _)| *m);
                match self.nic.add_flow(key, self.local_mac, mac, 0, 0) {
                    Ok(flow) => {
                        let id = ConnId(flow);
                        self.conns
                            .insert(id, SConn::new(h, flow, port, Some(port), state));
                        self.counters.accepted += 1;
                        work += 1;
                    }
                    Err(e) => {
                        log::warn!("connection from {rip}:{rport}: {e}");
                        self.sockets.get_mut::<tcp::Socket>(h).abort();
                        self.sockets.remove(h);
                    }
                }
            }
        }
        self.ids.clear();
        self.ids.extend(self.conns.keys().copied());
        for i in 0..self.ids.len() {
            let id = self.ids[i];
            work += self.update_connection(id);
        }
        work
    }

    fn update_connection(&mut self, id: ConnId) -> usize {
        let Some(c) = self.conns.get_mut(&id) else {
            return 0;
        };
        if c.closed {
            return 0;
        }
        let mut work = 0;
        let sock = self.sockets.get::<tcp::Socket>(c.handle);
        let smol_state = sock.state();
        c.state = map_state(smol_state);
        // smoltcp returns a connection that was reset in SYN-RECEIVED to
        // LISTEN; for us it has ended like a closed one.
        let ended = matches!(smol_state, SmolState::Closed | SmolState::Listen);
        let graceful = c.fin_seen && c.fin_queued && !c.aborted;
        // Acknowledged: what was pushed minus what smoltcp still holds. A
        // reset empties smoltcp's buffer without anything being
        // acknowledged; a graceful close means everything was.
        let acked = match (ended, graceful) {
            (false, _) => c.pushed - sock.send_queue() as u64,
            (true, true) => c.pushed,
            (true, false) => c.acked,
        };
        if acked > c.acked {
            c.acked = acked;
            while c.unacked.front().is_some_and(|w| w.end <= acked) {
                let wr = c.unacked.pop_front().expect("front exists");
                self.cq.push_back(Completion {
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
        if synchronized && !c.connected {
            c.connected = true;
            c.was_synchronized = true;
            if let Some(l) = c.listener.and_then(|p| self.listeners.get_mut(&p)) {
                l.queue.push_back(id);
            }
            self.cq.push_back(Completion {
                conn: id,
                kind: CompletionKind::Connected,
                wr_id: 0,
                len: 0,
            });
            work += 1;
        }
        if matches!(
            smol_state,
            SmolState::CloseWait | SmolState::LastAck | SmolState::Closing | SmolState::TimeWait
        ) {
            c.fin_seen = true;
        }
        if c.fin_seen && !c.peer_closed_reported && sock.recv_queue() == 0 {
            c.peer_closed_reported = true;
            self.cq.push_back(Completion {
                conn: id,
                kind: CompletionKind::PeerClosed { len: c.received },
                wr_id: 0,
                len: 0,
            });
            work += 1;
        }
        if ended {
            // smoltcp does not say why a connection ended; this is read
            // from what we saw of it. (A give-up after `timeout` shows as a
            // reset.)
            let reason = if c.aborted || (c.fin_queued && !c.was_synchronized) {
                // Aborted, or closed by us before the handshake completed.
                CloseReason::Aborted
            } else if !c.was_synchronized {
                if c.listener.is_some() {
                    CloseReason::Reset
                } else {
                    CloseReason::Refused
                }
            } else if graceful {
                CloseReason::Graceful
            } else {
                CloseReason::Reset
            };
            c.closed = true;
            let (handle, flow, listener) = (c.handle, c.flow, c.listener);
            if let Some(l) = listener.and_then(|p| self.listeners.get_mut(&p)) {
                l.queue.retain(|x| *x != id);
            }
            self.cq.push_back(Completion {
                conn: id,
                kind: CompletionKind::Closed(reason),
                wr_id: 0,
                len: 0,
            });
            self.sockets.remove(handle);
            let _ = self.nic.remove_flow(flow);
            self.conns.remove(&id);
            work += 1;
        }
        work
    }
}

impl SConn {
    pub(super) fn new(
        handle: SocketHandle,
        flow: FlowId,
        local_port: u16,
        listener: Option<u16>,
        state: State,
    ) -> SConn {
        SConn {
            handle,
            flow,
            local_port,
            listener,
            recv: VecDeque::new(),
            send: VecDeque::new(),
            unacked: VecDeque::new(),
            posted_send: 0,
            pushed: 0,
            received: 0,
            acked: 0,
            connected: false,
            fin_seen: false,
            peer_closed_reported: false,
            close_requested: false,
            fin_queued: false,
            aborted: false,
            closed: false,
            state,
            was_synchronized: false,
        }
    }
}
