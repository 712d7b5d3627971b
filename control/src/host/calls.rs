//! The provider API, implemented once for a [`Host`] over either engine.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use datapath::mr::{Access, MrId};
use datapath::wire::FlowKey;
use transports::tcp::State;

use super::{Conn, Engine, Host, HostError, Peer};
use crate::idmap::ConnId;
use crate::provider::{Completion, Families, Provider, WorkRequest};

impl<E: Engine> Host<E> {
    /// The addresses a listener takes its port on: the interface's IPv4
    /// one, and its IPv6 one if it has one and the engine carries IPv6.
    fn listen_addresses(&self) -> Vec<IpAddr> {
        let iface = &self.core.iface;
        let mut v = vec![IpAddr::V4(iface.ip)];
        if E::IPV6 {
            v.extend(iface.ip6.map(IpAddr::V6));
        }
        v
    }

    /// Narrows listening port `port` to peers of `families`: SYNs to the
    /// stack's addresses of the other family go to the kernel again,
    /// which refuses them as Linux refuses a family no socket on the port
    /// takes (an IPv4 socket's IPv6 peer).
    ///
    /// # Errors
    /// Not listening on `port`, or steering failed.
    pub fn listen_families(&mut self, port: u16, families: Families) -> Result<(), E::Error> {
        if !self.core.listeners.contains_key(&port) {
            return Err(HostError::NotListening(port).into());
        }
        for ip in self.listen_addresses() {
            let steered = if families.take(SocketAddr::new(ip, port)) {
                self.core.nic.listen(ip, port)
            } else {
                self.core.nic.unlisten(ip, port)
            };
            steered.map_err(HostError::from)?;
        }
        Ok(())
    }

    fn conn(&self, id: ConnId) -> Result<&Conn<E::Conn>, E::Error> {
        self.core
            .conns
            .get(&id)
            .ok_or_else(|| HostError::UnknownConnection(id).into())
    }

    fn end(&mut self, id: ConnId, abort: bool) -> Result<(), E::Error> {
        self.core.open_conn(id)?;
        self.engine.close(&mut self.core, id, abort);
        Ok(())
    }
}

/// Semantics as documented on [`Provider`]; `local_ip`, memory, listeners,
/// ports, the completion queue and per-connection progress are the host's,
/// the rest is handed to the engine.
impl<E: Engine> Provider for Host<E> {
    type Error = E::Error;

    fn transport_name(&self) -> &'static str {
        E::NAME
    }

    fn local_ip(&self) -> Ipv4Addr {
        self.core.iface.ip
    }

    fn local_ip6(&self) -> Option<Ipv6Addr> {
        self.core.iface.ip6.filter(|_| E::IPV6)
    }

    fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, E::Error> {
        Ok(self
            .core
            .nic
            .register_memory(len, access)
            .map_err(HostError::from)?)
    }

    fn deregister_memory(&mut self, mr: MrId) -> Result<(), E::Error> {
        Ok(self
            .core
            .nic
            .deregister_memory(mr)
            .map_err(HostError::from)?)
    }

    fn memory(&self, mr: MrId) -> Result<&[u8], E::Error> {
        Ok(self.core.nic.memory(mr).map_err(HostError::from)?)
    }

    fn memory_mut(&mut self, mr: MrId) -> Result<&mut [u8], E::Error> {
        Ok(self.core.nic.memory_mut(mr).map_err(HostError::from)?)
    }

    /// Refuses a port a kernel socket of this namespace listens on; a
    /// second call for the same port does nothing. The port is taken on
    /// the interface's IPv4 address, and on its IPv6 one when it has one
    /// and the engine carries IPv6.
    fn listen(&mut self, port: u16) -> Result<(), E::Error> {
        if self.kernel.listens_on(port)? {
            return Err(HostError::PortOwned(port).into());
        }
        if self.core.listeners.contains_key(&port) {
            return Ok(());
        }
        let ips = self.listen_addresses();
        for (i, &ip) in ips.iter().enumerate() {
            if let Err(e) = self.core.nic.listen(ip, port) {
                for &done in &ips[..i] {
                    let _ = self.core.nic.unlisten(done, port);
                }
                return Err(HostError::from(e).into());
            }
        }
        self.engine.listen(&mut self.core, port)?;
        self.core.listeners.insert(port, VecDeque::new());
        Ok(())
    }

    fn unlisten(&mut self, port: u16) -> Result<(), E::Error> {
        if !self.core.listeners.contains_key(&port) {
            return Err(HostError::NotListening(port).into());
        }
        // Steering first: if it fails, the listener is left as it was.
        for ip in self.listen_addresses() {
            self.core.nic.unlisten(ip, port).map_err(HostError::from)?;
        }
        let queued = self.core.listeners.remove(&port).unwrap_or_default();
        let half_open = self.core.half_open.remove(&port).unwrap_or_default();
        self.engine.unlisten(&mut self.core, port);
        for id in queued.into_iter().chain(half_open) {
            if self.core.open_conn(id).is_ok() {
                self.engine.close(&mut self.core, id, true);
            }
        }
        Ok(())
    }

    fn accept(&mut self, port: u16) -> Result<Option<ConnId>, E::Error> {
        Ok(self
            .core
            .listeners
            .get_mut(&port)
            .ok_or(HostError::NotListening(port))?
            .pop_front())
    }

    /// Resolves the next hop (route, then ARP or neighbour discovery
    /// through the kernel), takes a free ephemeral port, and lets the
    /// engine open the connection, from the interface's address of the
    /// peer's family; a `Connected` (or `Closed(Refused)`) completion
    /// follows.
    fn connect(&mut self, remote: SocketAddr) -> Result<ConnId, E::Error> {
        let iface = &self.core.iface;
        // One key per flow: an IPv4 peer is never named v4-mapped.
        let remote = match remote {
            SocketAddr::V6(r) => match r.ip().to_ipv4_mapped() {
                Some(ip) => SocketAddr::new(ip.into(), r.port()),
                None => remote,
            },
            v4 => v4,
        };
        let local = iface.local_for(remote.ip())?;
        let (hop, mac) = self.kernel.next_hop(iface, remote.ip(), self.arp_timeout)?;
        let conns = &self.core.conns;
        let local_port = self
            .ports
            .allocate(local, remote, |p| conns.values().any(|c| c.local_port == p))?;
        let key = FlowKey {
            remote_ip: remote.ip(),
            local_ip: local,
            remote_port: remote.port(),
            local_port,
        };
        let peer = Peer {
            remote,
            key,
            mac,
            hop,
        };
        self.engine.connect(&mut self.core, peer)
    }

    fn post(&mut self, wr: WorkRequest) -> Result<(), E::Error> {
        self.core.open_conn(wr.conn)?;
        if !self.core.cq_has_room() {
            return Err(HostError::CompletionQueueFull {
                capacity: self.core.cq_capacity,
            }
            .into());
        }
        self.engine.post(&mut self.core, wr)
    }

    fn close(&mut self, id: ConnId) -> Result<(), E::Error> {
        self.end(id, false)
    }

    fn abort(&mut self, id: ConnId) -> Result<(), E::Error> {
        self.end(id, true)
    }

    fn received(&self, id: ConnId) -> Result<u64, E::Error> {
        Ok(self.conn(id)?.received)
    }

    fn acked(&self, id: ConnId) -> Result<u64, E::Error> {
        Ok(self.conn(id)?.acked)
    }

    fn state(&self, id: ConnId) -> Result<State, E::Error> {
        Ok(self.conn(id)?.state)
    }

    fn poll(&mut self) -> usize {
        let now = self.core.now();
        let work = self.engine.poll(&mut self.core, now);
        self.publish_if_due(now);
        work
    }

    fn poll_completion(&mut self) -> Option<Completion> {
        self.core.cq.pop_front()
    }

    /// One clock read per turn: the same reading bounds the wait and is
    /// the poll's `now`.
    fn wait_completion(&mut self, timeout: Duration) -> Option<Completion> {
        let deadline = self.core.now() + timeout;
        loop {
            if let Some(c) = self.core.cq.pop_front() {
                return Some(c);
            }
            let now = self.core.now();
            if now >= deadline {
                return None;
            }
            let work = self.engine.poll(&mut self.core, now);
            self.publish_if_due(now);
            if work == 0 {
                std::hint::spin_loop();
            }
        }
    }

    fn drops(&self) -> Vec<(&'static str, u64)> {
        self.engine.drops(&self.core)
    }

    fn retransmissions(&self) -> Option<(u64, u64)> {
        self.engine.retransmissions(&self.core)
    }

    fn payload_bytes_touched_by_transport(&self) -> u64 {
        self.engine.payload_bytes_touched()
    }
}
