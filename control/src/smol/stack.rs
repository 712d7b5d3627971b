//! [`SmolStack`]: smoltcp connections over one datapath queue, driven
//! through registered memory, posted work requests and a completion queue,
//! exactly as [`crate::stack::Stack`] is.
//!
//! Per iteration ([`SmolStack::poll`]): every frame the queue received is
//! lent to smoltcp in place (learning the sender's MAC for smoltcp's
//! neighbour cache first); replies built during ingress are sent; the
//! provider copies in-order bytes from each socket's receive buffer into
//! posted receive segments and posted send segments into each socket's send
//! buffer; smoltcp sends what it wants straight into UMEM TX frames; socket
//! state changes become completions (connected, received, acknowledged,
//! peer closed, closed).

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Range;
use std::time::Duration;

use datapath::flow_table::FlowId;
use datapath::mr::{Access, MrId};
use datapath::nic::Nic;
use datapath::wire::FlowKey;
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::DeviceCapabilities;
use smoltcp::socket::tcp::{self, State as SmolState};
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};
use transports::tcp::State;

mod progress;

use super::config::{SmolConfig, SmolCounters, SmolError};
use super::device::{self, EgressDevice, IngressDevice, Staged, TxCounters};
use super::socket::{add_listening_socket, new_socket};
use crate::idmap::ConnMap;
use crate::netinfo;
use crate::netinfo::ReservedPorts;
use crate::stack::{Completion, ConnId, StackError, Threads};

/// A posted work request: its bytes in the MR area and how far it got.
#[derive(Debug, Clone)]
struct Wr {
    area: Range<usize>,
    wr_id: u64,
    /// Bytes already copied (into the WR for receives, out of it for sends).
    done: usize,
    /// Stream offset of the WR's end (sends: for acknowledgement).
    end: u64,
}

#[derive(Debug)]
struct SConn {
    handle: SocketHandle,
    flow: FlowId,
    local_port: u16,
    listener: Option<u16>,
    recv: VecDeque<Wr>,
    /// Send WRs not yet fully copied into smoltcp.
    send: VecDeque<Wr>,
    /// Send WRs fully copied, waiting for their acknowledgement.
    unacked: VecDeque<Wr>,
    posted_send: u64,
    pushed: u64,
    received: u64,
    acked: u64,
    connected: bool,
    fin_seen: bool,
    peer_closed_reported: bool,
    close_requested: bool,
    fin_queued: bool,
    aborted: bool,
    closed: bool,
    state: State,
    was_synchronized: bool,
}

#[derive(Debug, Default)]
struct Listener {
    /// Sockets in LISTEN for this port.
    listening: Vec<SocketHandle>,
    /// Established connections not yet accepted.
    queue: VecDeque<ConnId>,
}

/// smoltcp connections over one datapath queue.
pub struct SmolStack {
    nic: Nic,
    iface: Interface,
    sockets: SocketSet<'static>,
    caps: DeviceCapabilities,
    conns: ConnMap<SConn>,
    ids: Vec<ConnId>,
    listeners: HashMap<u16, Listener>,
    cq: VecDeque<Completion>,
    epoch: std::time::Instant,
    ifname: String,
    local_ip: Ipv4Addr,
    prefix: u8,
    local_mac: [u8; 6],
    /// MACs learnt from received frames (or resolved through the kernel)
    /// and when they were last given to smoltcp.
    neighbours: HashMap<Ipv4Addr, ([u8; 6], std::time::Instant)>,
    rx_scratch: Vec<u8>,
    tx_scratch: Vec<u8>,
    staged: Staged,
    tx_counters: TxCounters,
    counters: SmolCounters,
    next_port: u16,
    config: SmolConfig,
    _reserved: Option<ReservedPorts>,
}

impl std::fmt::Debug for SmolStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmolStack")
            .field("ifname", &self.ifname)
            .field("local_ip", &self.local_ip)
            .field("connections", &self.conns.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// LISTEN sockets kept ready per listening port (each holds its buffers).
const SPARE_LISTENERS: usize = 2;

/// How often a neighbour's MAC is given to smoltcp again (its cache keeps
/// entries for 60 s).
const NEIGHBOUR_REFRESH: Duration = Duration::from_secs(20);

impl SmolStack {
    /// Starts smoltcp on `ifname`: attaches the steering program, opens the
    /// queue's socket (every flow on the catch-all socket), learns the
    /// interface's address and MAC, and reserves the ephemeral ports.
    ///
    /// # Errors
    /// Dedicated threads, a bad buffer size, no such interface, attach or
    /// socket failures.
    pub fn new(ifname: &str, config: SmolConfig) -> Result<SmolStack, SmolError> {
        if config.stack.threads != Threads::RunToCompletion {
            return Err(SmolError::Threads);
        }
        if !(64 << 10..=1 << 30).contains(&config.socket_buffer) {
            return Err(SmolError::Buffer(config.socket_buffer));
        }
        datapath::raw::ifindex(ifname)
            .map_err(|_| StackError::NoSuchInterface(ifname.to_string()))?;
        let (local_ip, prefix) = netinfo::ipv4_address(ifname)?;
        let local_mac = netinfo::mac_address(ifname)?;
        let mut nic_config = config.stack.nic.clone();
        // smoltcp sees every frame of the queue: no per-flow sockets.
        nic_config.flow_sockets = false;
        let mut nic = Nic::open(ifname, nic_config)?;
        let reserved = if config.stack.reserve_ports {
            let range = config.stack.ephemeral_ports.clone();
            Some(
                ReservedPorts::reserve(&range)
                    .map_err(|source| StackError::ReservePorts { range, source })?,
            )
        } else {
            None
        };
        let caps = device::capabilities(config.stack.nic.mtu);
        let epoch = std::time::Instant::now();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32;
        let mut iface_config =
            IfaceConfig::new(HardwareAddress::Ethernet(EthernetAddress(local_mac)));
        iface_config.random_seed = seed;
        let (mut scratch, mut tx_counters) = (Vec::new(), TxCounters::default());
        let mut iface = Interface::new(
            iface_config,
            &mut EgressDevice {
                nic: &mut nic,
                scratch: &mut scratch,
                caps: &caps,
                counters: &mut tx_counters,
            },
            SmolInstant::ZERO,
        );
        iface.update_ip_addrs(|addrs| {
            // One address; the list has room for it.
            let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(local_ip), prefix));
        });
        Ok(SmolStack {
            nic,
            iface,
            sockets: SocketSet::new(Vec::new()),
            caps,
            conns: ConnMap::default(),
            ids: Vec::new(),
            listeners: HashMap::new(),
            cq: VecDeque::new(),
            epoch,
            ifname: ifname.to_string(),
            local_ip,
            prefix,
            local_mac,
            neighbours: HashMap::new(),
            rx_scratch: Vec::new(),
            tx_scratch: scratch,
            staged: Staged::default(),
            tx_counters,
            counters: SmolCounters::default(),
            next_port: *config.stack.ephemeral_ports.start(),
            config,
            _reserved: reserved,
        })
    }

    fn smol_now(&self) -> SmolInstant {
        SmolInstant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    /// The interface's IPv4 address.
    pub fn local_ip(&self) -> Ipv4Addr {
        self.local_ip
    }

    /// Counters.
    pub fn counters(&self) -> SmolCounters {
        let mut c = self.counters;
        c.frames_out = self.tx_counters.frames;
        c.frames_refused = self.tx_counters.refused;
        c.frames_out_chained = self.tx_counters.chained;
        c.arp_requests = self.tx_counters.arp_requests;
        c
    }

    /// Payload bytes the transport side touched: every byte copied into or
    /// out of smoltcp's socket buffers (about all bytes transferred).
    pub fn payload_bytes_touched_by_transport(&self) -> u64 {
        self.counters.payload_copied_in + self.counters.payload_copied_out
    }

    /// The datapath, for inspection.
    pub fn nic(&self) -> &Nic {
        &self.nic
    }

    /// Frames dropped on the way, by reason; only non-zero reasons.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let port = self.nic.port_counters();
        [
            ("tx_refused", self.tx_counters.refused),
            ("rx_bad_descs", port.rx_bad_descs),
            ("rx_too_many_frags", port.rx_too_many_frags),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }

    /// Number of open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Registers `len` bytes of application memory inside the UMEM.
    ///
    /// # Errors
    /// No space left in the MR area, or the region table is full.
    pub fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, SmolError> {
        Ok(self.nic.register_memory(len, access)?)
    }

    /// Deregisters a region.
    ///
    /// # Errors
    /// Unknown region.
    pub fn deregister_memory(&mut self, mr: MrId) -> Result<(), SmolError> {
        Ok(self.nic.deregister_memory(mr)?)
    }

    /// A registered region's bytes.
    ///
    /// # Errors
    /// Unknown region.
    pub fn memory(&self, mr: MrId) -> Result<&[u8], SmolError> {
        Ok(self.nic.memory(mr)?)
    }

    /// A registered region's bytes, writable.
    ///
    /// # Errors
    /// Unknown region.
    pub fn memory_mut(&mut self, mr: MrId) -> Result<&mut [u8], SmolError> {
        Ok(self.nic.memory_mut(mr)?)
    }

    fn add_listening_socket(&mut self, port: u16) -> Result<SocketHandle, SmolError> {
        add_listening_socket(&mut self.sockets, &self.config, port)
    }

    /// Accepts TCP connections to `port` on the interface's address.
    ///
    /// # Errors
    /// The kernel already listens there, or the steering map update failed.
    pub fn listen(&mut self, port: u16) -> Result<(), SmolError> {
        if netinfo::kernel_listens_on(port)? {
            return Err(StackError::PortOwned(port).into());
        }
        if self.listeners.contains_key(&port) {
            return Ok(());
        }
        self.nic.listen(self.local_ip, port)?;
        // smoltcp's LISTEN socket turns into the connection: keep spares
        // listening (ingress adds one before a SYN that would find none).
        let mut listener = Listener::default();
        for _ in 0..SPARE_LISTENERS {
            listener.listening.push(self.add_listening_socket(port)?);
        }
        self.listeners.insert(port, listener);
        Ok(())
    }

    /// The next established connection of the listener on `port`.
    ///
    /// # Errors
    /// Not listening on `port`.
    pub fn accept(&mut self, port: u16) -> Result<Option<ConnId>, SmolError> {
        Ok(self
            .listeners
            .get_mut(&port)
            .ok_or(StackError::NotListening(port))?
            .queue
            .pop_front())
    }

    /// Feeds smoltcp an ARP reply so its neighbour cache knows `ip`.
    fn fill_neighbour(&mut self, ip: Ipv4Addr, mac: [u8; 6], now: SmolInstant) {
        let frame = device::arp_reply(mac, ip, self.local_mac, self.local_ip);
        let mut dev = IngressDevice::new(&frame, &mut self.staged, &self.caps);
        self.iface
            .poll_ingress_single(now, &mut dev, &mut self.sockets);
        self.neighbours.insert(ip, (mac, std::time::Instant::now()));
        self.counters.neighbours_filled += 1;
    }

    /// Opens a connection to `remote`; a [`CompletionKind::Connected`] (or
    /// `Closed(Refused)`) completion follows.
    ///
    /// # Errors
    /// No route or ARP answer, no free port, the flow table is full.
    pub fn connect(&mut self, remote: SocketAddrV4) -> Result<ConnId, SmolError> {
        let hop = netinfo::next_hop(&self.ifname, self.local_ip, self.prefix, *remote.ip())?;
        let remote_mac = netinfo::resolve_neighbour(
            &self.ifname,
            self.local_ip,
            hop,
            self.config.stack.arp_timeout,
        )?;
        let now = self.smol_now();
        if hop != *remote.ip() {
            let _ = self.iface.routes_mut().add_default_ipv4_route(hop);
        }
        self.fill_neighbour(hop, remote_mac, now);
        let range = self.config.stack.ephemeral_ports.clone();
        let span = u32::from(*range.end() - *range.start()) + 1;
        let mut port = None;
        for _ in 0..span {
            let p = self.next_port;
            self.next_port = if p >= *range.end() {
                *range.start()
            } else {
                p + 1
            };
            if !self.conns.values().any(|c| c.local_port == p) {
                port = Some(p);
                break;
            }
        }
        let local_port = port.ok_or(StackError::PortsExhausted(range))?;
        let key = FlowKey {
            remote_ip: remote.ip().octets(),
            local_ip: self.local_ip.octets(),
            remote_port: remote.port(),
            local_port,
        };
        // The flow entry steers the peer's segments to the queue's socket.
        let flow = self.nic.add_flow(key, self.local_mac, remote_mac, 0, 0)?;
        let mut s = new_socket(&self.config);
        let endpoint = IpEndpoint::new(IpAddress::Ipv4(*remote.ip()), remote.port());
        if let Err(e) = s.connect(self.iface.context(), endpoint, local_port) {
            let _ = self.nic.remove_flow(flow);
            return Err(SmolError::Connect {
                remote,
                message: e.to_string(),
            });
        }
        let handle = self.sockets.add(s);
        let id = ConnId(flow);
        self.conns.insert(
            id,
            SConn::new(handle, flow, local_port, None, State::SynSent),
        );
        self.counters.connected += 1;
        Ok(id)
    }

    fn conn(&mut self, id: ConnId) -> Result<&mut SConn, SmolError> {
        self.conns
            .get_mut(&id)
            .filter(|c| !c.closed)
            .ok_or(SmolError::Stack(StackError::UnknownConnection(id)))
    }

    /// Posts receive space: `len` bytes at `offset` of `mr` receive the next
    /// part of the connection's stream (copied out of smoltcp's buffer).
    ///
    /// # Errors
    /// Unknown connection, region, bounds or access.
    pub fn post_recv(
        &mut self,
        id: ConnId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), SmolError> {
        let area = self.nic.resolve_region(mr, offset, len, Access::RECV)?;
        let c = self.conn(id)?;
        let end = c.recv.back().map_or(c.received, |w| w.end) + len as u64;
        c.recv.push_back(Wr {
            area,
            wr_id,
            done: 0,
            end,
        });
        Ok(())
    }

    /// Posts payload: `len` bytes at `offset` of `mr` become the next part of
    /// the connection's send stream (copied into smoltcp's buffer).
    ///
    /// # Errors
    /// Unknown connection, region, bounds or access.
    pub fn post_send(
        &mut self,
        id: ConnId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), SmolError> {
        let area = self.nic.resolve_region(mr, offset, len, Access::SEND)?;
        let c = self.conn(id)?;
        c.posted_send += len as u64;
        let end = c.posted_send;
        c.send.push_back(Wr {
            area,
            wr_id,
            done: 0,
            end,
        });
        Ok(())
    }

    /// Sends FIN once everything posted is sent.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn close(&mut self, id: ConnId) -> Result<(), SmolError> {
        self.conn(id)?.close_requested = true;
        Ok(())
    }

    /// Resets the connection.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn abort(&mut self, id: ConnId) -> Result<(), SmolError> {
        let c = self.conn(id)?;
        c.aborted = true;
        let handle = c.handle;
        self.sockets.get_mut::<tcp::Socket>(handle).abort();
        Ok(())
    }

    /// Receive-stream bytes below this offset are in posted memory.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn received(&self, id: ConnId) -> Result<u64, SmolError> {
        self.conns
            .get(&id)
            .map(|c| c.received)
            .ok_or(SmolError::Stack(StackError::UnknownConnection(id)))
    }

    /// Send-stream bytes below this offset are acknowledged.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn acked(&self, id: ConnId) -> Result<u64, SmolError> {
        self.conns
            .get(&id)
            .map(|c| c.acked)
            .ok_or(SmolError::Stack(StackError::UnknownConnection(id)))
    }

    /// The connection's TCP state, in the header-only TCP's terms.
    ///
    /// # Errors
    /// Unknown connection.
    pub fn state(&self, id: ConnId) -> Result<State, SmolError> {
        self.conns
            .get(&id)
            .map(|c| c.state)
            .ok_or(SmolError::Stack(StackError::UnknownConnection(id)))
    }

    /// The next completion, if any (does not poll).
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }

    /// Polls until a completion is available or `timeout` passes.
    pub fn wait_completion(&mut self, timeout: Duration) -> Option<Completion> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(c) = self.cq.pop_front() {
                return Some(c);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            if self.poll() == 0 {
                std::hint::spin_loop();
            }
        }
    }

    /// One iteration of the loop; returns how much work it did (frames in
    /// and out, bytes copied, completions).
    pub fn poll(&mut self) -> usize {
        let now = self.smol_now();
        let mut work = self.ingress(now);
        work += self.copy_payload();
        work += self.egress(now);
        work += self.update_connections();
        work
    }

    /// Lends every received frame to smoltcp, then sends the replies it
    /// staged.
    fn ingress(&mut self, now: SmolInstant) -> usize {
        let SmolStack {
            nic,
            iface,
            sockets,
            caps,
            rx_scratch,
            staged,
            neighbours,
            counters,
            local_ip,
            prefix,
            local_mac,
            listeners,
            config,
            ..
        } = self;
        let net = IpCidr::new(IpAddress::Ipv4(*local_ip), *prefix);
        let taken = nic.receive_frames(256, rx_scratch, |frame| {
            counters.frames_in += 1;
            // The peer's MAC, learnt from its own frames: smoltcp's ARP
            // replies would go to the kernel, so fill its cache ourselves.
            if let Some((mac, ip)) = device::ipv4_source(frame) {
                let fresh = neighbours
                    .get(&ip)
                    .is_some_and(|(m, at)| *m == mac && at.elapsed() < NEIGHBOUR_REFRESH);
                if !fresh && net.contains_addr(&IpAddress::Ipv4(ip)) {
                    let arp = device::arp_reply(mac, ip, *local_mac, *local_ip);
                    let mut dev = IngressDevice::new(&arp, staged, caps);
                    iface.poll_ingress_single(now, &mut dev, sockets);
                    neighbours.insert(ip, (mac, std::time::Instant::now()));
                    counters.neighbours_filled += 1;
                }
            }
            // A SYN to a port whose LISTEN sockets are all taken gets a
            // fresh one first, instead of smoltcp's RST.
            if let Some(l) = device::syn_port(frame).and_then(|p| listeners.get_mut(&p)) {
                let free = l
                    .listening
                    .iter()
                    .any(|h| sockets.get::<tcp::Socket>(*h).state() == SmolState::Listen);
                if !free {
                    if let Some(port) = device::syn_port(frame) {
                        match add_listening_socket(sockets, config, port) {
                            Ok(h) => l.listening.push(h),
                            Err(e) => log::warn!("{e}"),
                        }
                    }
                }
            }
            let mut dev = IngressDevice::new(frame, staged, caps);
            iface.poll_ingress_single(now, &mut dev, sockets);
        }) as usize;
        let n = self.staged.len();
        if n > 0 {
            self.counters.frames_staged += n as u64;
            let SmolStack {
                nic,
                staged,
                tx_scratch,
                tx_counters,
                ..
            } = self;
            staged.drain(|frame| {
                let mut ok =
                    nic.transmit_frame(frame.len(), tx_scratch, |b| b.copy_from_slice(frame));
                if matches!(ok, Ok(false)) {
                    nic.flush();
                    ok = nic.transmit_frame(frame.len(), tx_scratch, |b| b.copy_from_slice(frame));
                }
                match ok {
                    Ok(true) => tx_counters.frames += 1,
                    _ => tx_counters.refused += 1,
                }
            });
        }
        taken + n
    }

    /// Lets smoltcp send (one segment per socket per round) until it has
    /// nothing more or the TX ring is full, then kicks the ring.
    fn egress(&mut self, now: SmolInstant) -> usize {
        let before = self.tx_counters.frames;
        let SmolStack {
            nic,
            iface,
            sockets,
            caps,
            tx_scratch,
            tx_counters,
            ..
        } = self;
        let mut dev = EgressDevice {
            nic,
            scratch: tx_scratch,
            caps,
            counters: tx_counters,
        };
        for _ in 0..1024 {
            if iface.poll_egress(now, &mut dev, sockets) == smoltcp::iface::PollResult::None {
                break;
            }
        }
        self.nic.flush();
        (self.tx_counters.frames - before) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::StackConfig;

    #[test]
    fn dedicated_threads_are_refused_before_touching_any_interface() {
        let config = SmolConfig {
            stack: StackConfig {
                threads: Threads::Dedicated {
                    datapath_core: None,
                    transport_core: None,
                    queue: 64,
                },
                ..StackConfig::default()
            },
            ..SmolConfig::default()
        };
        let e = SmolStack::new("no-such-if0", config).unwrap_err();
        assert!(matches!(e, SmolError::Threads), "{e}");
        assert!(e.to_string().contains("threads.mode"), "{e}");
        let tiny = SmolConfig {
            socket_buffer: 1000,
            ..SmolConfig::default()
        };
        assert!(matches!(
            SmolStack::new("no-such-if0", tiny).unwrap_err(),
            SmolError::Buffer(1000)
        ));
    }
}
