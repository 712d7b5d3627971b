//! Listening ports and flows: installing a flow gives it a socket of its
//! own (or software demux) and a steering entry; removing gives both back.

use std::net::IpAddr;

use super::{DemuxMode, Nic, NicError};
use crate::flow_table::{FlowId, FlowParams, FlowState, FlowTable};
use crate::steer::{self, Proto};
use crate::wire::FlowKey;

impl Nic {
    /// Claims `(addr, port)` for TCP: SYNs and segments of flows without an
    /// entry of their own go to the catch-all socket instead of the kernel.
    ///
    /// # Errors
    /// The map update failed.
    pub fn listen(&mut self, addr: impl Into<IpAddr>, port: u16) -> Result<(), NicError> {
        let addr = addr.into();
        if self.listening.contains(&(addr, port)) {
            return Ok(());
        }
        self.group.listen(addr, port)?;
        self.listening.push((addr, port));
        Ok(())
    }

    /// Gives `(addr, port)` back to the kernel.
    ///
    /// # Errors
    /// The map update failed.
    pub fn unlisten(&mut self, addr: impl Into<IpAddr>, port: u16) -> Result<(), NicError> {
        let addr = addr.into();
        let Some(i) = self.listening.iter().position(|&l| l == (addr, port)) else {
            return Ok(());
        };
        self.listening.swap_remove(i);
        self.group.unlisten(addr, port)?;
        Ok(())
    }

    /// Installs a flow whose peer ISN is `irs`: flow-table entry, its own
    /// socket where possible, and an exact steering entry.
    ///
    /// # Errors
    /// The flow table is full or has the key, or a map update failed.
    pub fn add_flow(
        &mut self,
        key: FlowKey,
        local_mac: [u8; 6],
        remote_mac: [u8; 6],
        irs: u32,
        iss: u32,
    ) -> Result<FlowId, NicError> {
        self.install_flow(key, local_mac, remote_mac, Some(irs), iss)
    }

    /// Installs the flow of an active open, before the peer's ISN is known:
    /// no payload is placed until [`Nic::set_irs`] says it (a segment's
    /// receive-stream offset is meaningless before).
    ///
    /// # Errors
    /// As [`Nic::add_flow`].
    pub fn add_connecting_flow(
        &mut self,
        key: FlowKey,
        local_mac: [u8; 6],
        remote_mac: [u8; 6],
        iss: u32,
    ) -> Result<FlowId, NicError> {
        self.install_flow(key, local_mac, remote_mac, None, iss)
    }

    /// Installs a passive open's flow while its handshake is under way:
    /// a flow-table entry only. Its packets reach the datapath through the
    /// catch-all socket (the listener's port is steered there) and are
    /// found by software lookup; its own socket and exact steering entry
    /// come with [`Nic::steer_flow`] once the handshake completes, so a
    /// flood of SYNs that never complete costs no sockets or map entries.
    ///
    /// # Errors
    /// The flow table is full or has the key.
    pub fn add_half_open_flow(
        &mut self,
        key: FlowKey,
        local_mac: [u8; 6],
        remote_mac: [u8; 6],
        irs: u32,
        iss: u32,
    ) -> Result<FlowId, NicError> {
        self.insert_flow(key, local_mac, remote_mac, Some(irs), iss)
    }

    fn install_flow(
        &mut self,
        key: FlowKey,
        local_mac: [u8; 6],
        remote_mac: [u8; 6],
        irs: Option<u32>,
        iss: u32,
    ) -> Result<FlowId, NicError> {
        let id = self.insert_flow(key, local_mac, remote_mac, irs, iss)?;
        if let Err(e) = self.steer_flow(id) {
            self.remove_flow(id).ok();
            return Err(e);
        }
        Ok(id)
    }

    /// The flow-table entry alone, owned by this queue.
    fn insert_flow(
        &mut self,
        key: FlowKey,
        local_mac: [u8; 6],
        remote_mac: [u8; 6],
        irs: Option<u32>,
        iss: u32,
    ) -> Result<FlowId, NicError> {
        let params = FlowParams {
            key,
            local_mac,
            remote_mac,
            irs: irs.unwrap_or(0),
            iss,
            socket: self.config.queue,
            max_recv_segments: self.config.max_recv_segments,
            max_send_segments: self.config.max_send_segments,
            max_placed_ranges: self.config.max_placed_ranges,
        };
        let id = self.flows.insert(&params)?;
        if let Some(flow) = self.flows.get_mut(id) {
            flow.synchronized = irs.is_some();
        }
        self.group.set_owner(key, self.config.queue);
        Ok(id)
    }

    /// Gives flow `id` its own socket where possible and an exact steering
    /// entry (a flow added with [`Nic::add_half_open_flow`], once its
    /// handshake completed). Doing it again does nothing.
    ///
    /// # Errors
    /// Unknown flow, or a map update failed (the flow stays, unsteered).
    pub fn steer_flow(&mut self, id: FlowId) -> Result<(), NicError> {
        let f = flow_mut(&mut self.flows, id)?;
        if f.steered {
            return Ok(());
        }
        let key = f.key;
        let mut socket = self.config.queue;
        let index = id.index() as usize;
        let per_flow = self.demux == DemuxMode::PerFlowSockets;
        let capped = per_flow && self.open_sockets.len() >= self.config.max_flow_sockets;
        self.counters.flow_sockets_capped += u64::from(capped);
        let slot = if per_flow && !capped && index < self.flow_sockets.len() {
            self.group.take_slot()
        } else {
            None
        };
        if let Some(slot) = slot {
            match self.port.open_flow_socket() {
                Ok(sock) => {
                    if let Err(e) = self.group.steering().set_socket(slot, sock.fd()) {
                        self.group.put_slot(slot);
                        return Err(e.into());
                    }
                    socket = slot;
                    self.flow_sockets[index] = Some((slot, sock));
                    self.open_sockets.push(index);
                    self.counters.flow_sockets_opened += 1;
                }
                Err(e) => {
                    self.group.put_slot(slot);
                    log::warn!(
                        "{}: per-flow socket refused ({e}); switching to software demux",
                        self.port.ifname()
                    );
                    self.demux = DemuxMode::SoftwareDemux;
                    self.counters.flow_sockets_refused += 1;
                }
            }
        } else {
            self.counters.flow_sockets_refused +=
                u64::from(self.demux == DemuxMode::PerFlowSockets && !capped);
        }
        let inserted =
            self.group
                .steering()
                .insert_flow(&steer_key(&key), socket, self.config.queue);
        if let Some(flow) = self.flows.get_mut(id) {
            flow.socket = socket;
            flow.steered = inserted.is_ok();
        }
        inserted.map_err(NicError::from)
    }

    /// Removes a flow: steering entry, socket, table entry; releases the
    /// references its posted segments held on memory regions — except for
    /// send memory TX descriptors still point at, whose region stays
    /// referenced until they complete (counted `tx_held_on_close`; see
    /// [`Nic::flush`]). Posted work requests are dropped without
    /// completion. Packets still on the flow
    /// socket's RX ring are drained unread (their frames refill the queue;
    /// counted `rx_drained_on_close` in the port counters).
    ///
    /// # Errors
    /// Unknown flow, or a map update failed (the flow is removed anyway).
    pub fn remove_flow(&mut self, id: FlowId) -> Result<(), NicError> {
        let flow = self.flows.remove(id).ok_or(NicError::UnknownFlow(id))?;
        for seg in flow.recv.segments() {
            self.mrs.release(seg.mr).ok();
        }
        self.counters.tx_held_on_close +=
            self.held
                .release_removed(&mut self.mrs, &self.port, &flow.send);
        let index = id.index() as usize;
        let socket = self.flow_sockets.get_mut(index).and_then(Option::take);
        if socket.is_some() {
            self.open_sockets.retain(|&i| i != index);
        }
        self.group.clear_owner(&flow.key, self.config.queue);
        let mut steering = self.group.steering();
        let mut result = if flow.steered {
            steering
                .remove_flow(&steer_key(&flow.key))
                .map_err(NicError::from)
        } else {
            Ok(())
        };
        if let Some((slot, sock)) = socket {
            // Nothing is redirected to the socket any more: what is on its
            // RX ring goes back to the fill ring before it closes.
            let cleared = steering.clear_socket(slot).map_err(NicError::from);
            self.port.close_flow_socket(sock);
            self.group.put_slot(slot);
            result = result.and(cleared);
        }
        result
    }

    /// Sets the peer's initial sequence number of a flow installed before
    /// it was known ([`Nic::add_connecting_flow`]: the flow is installed
    /// with the SYN, the peer's ISN arrives with the SYN-ACK); placement
    /// starts now. Only valid before any payload was placed.
    ///
    /// # Errors
    /// Unknown flow, or payload was already placed with the old mapping.
    pub fn set_irs(&mut self, id: FlowId, irs: u32) -> Result<(), NicError> {
        let f = flow_mut(&mut self.flows, id)?;
        if f.floor() > 0 || !f.placed.is_empty() {
            return Err(NicError::Config(format!(
                "flow {id:?}: cannot change the receive ISN after payload was placed"
            )));
        }
        f.irs = irs;
        f.synchronized = true;
        Ok(())
    }

    /// The transport refused bytes placed at `range` (receive-stream
    /// offsets) for flow `id`: a rejected segment's payload, or the part of
    /// one outside its window. They are forgotten, so the genuine bytes are
    /// written over them when they come; they were never completed, so the
    /// application never saw them. Counted `discarded`.
    ///
    /// # Errors
    /// Unknown flow.
    pub fn discard(&mut self, id: FlowId, range: std::ops::Range<u64>) -> Result<(), NicError> {
        let f = flow_mut(&mut self.flows, id)?;
        let removed = f.placed.remove(range, f.recv.floor());
        if removed > 0 {
            f.counters.discarded += 1;
            f.counters.bytes_discarded += removed;
        }
        Ok(())
    }

    /// Looks up a flow by 5-tuple.
    pub fn flow_id(&self, key: &FlowKey) -> Option<FlowId> {
        self.flows.lookup(key)
    }

    /// A flow's state (counters, floor, posted segments).
    pub fn flow(&self, id: FlowId) -> Option<&crate::flow_table::FlowState> {
        self.flows.get(id)
    }
}

fn steer_key(key: &FlowKey) -> steer::SteerKey {
    steer::SteerKey {
        flow: *key,
        proto: Proto::Tcp,
    }
}

/// The state of flow `id`, or [`NicError::UnknownFlow`].
pub(super) fn flow_mut(flows: &mut FlowTable, id: FlowId) -> Result<&mut FlowState, NicError> {
    flows.get_mut(id).ok_or(NicError::UnknownFlow(id))
}
