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
use datapath::nic::{Nic, NicError};
use datapath::wire::FlowKey;
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::DeviceCapabilities;
use smoltcp::socket::tcp::{self, CongestionControl, State as SmolState};
use smoltcp::time::{Duration as SmolDuration, Instant as SmolInstant};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};
use transports::segment::CloseReason;
use transports::tcp::State;

use super::device::{self, EgressDevice, IngressDevice, Staged, TxCounters};
use crate::netinfo::{self, NetInfoError};
use crate::stack::{
    Completion, CompletionKind, ConnId, ReservedPorts, StackConfig, StackError, Threads,
};

/// smoltcp's congestion controllers (its closed set; 0.14 has no others).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SmolCongestion {
    /// No congestion control: the window is the peer's receive window.
    None,
    /// Reno (RFC 5681).
    Reno,
    /// CUBIC (RFC 9438).
    #[default]
    Cubic,
}

impl std::str::FromStr for SmolCongestion {
    type Err = SmolError;
    fn from_str(s: &str) -> Result<Self, SmolError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(SmolCongestion::None),
            "reno" | "newreno" => Ok(SmolCongestion::Reno),
            "cubic" => Ok(SmolCongestion::Cubic),
            other => Err(SmolError::Congestion(other.to_string())),
        }
    }
}

impl SmolCongestion {
    fn to_smoltcp(self) -> CongestionControl {
        match self {
            SmolCongestion::None => CongestionControl::None,
            SmolCongestion::Reno => CongestionControl::Reno,
            SmolCongestion::Cubic => CongestionControl::Cubic,
        }
    }
}

/// Everything a [`SmolStack`] is built from.
#[derive(Debug, Clone)]
pub struct SmolConfig {
    /// Datapath, ports, backlog and ARP timeout as for the header-only stack
    /// (`tcp` is not used; `threads` must be run-to-completion).
    pub stack: StackConfig,
    /// Congestion controller.
    pub congestion: SmolCongestion,
    /// Bytes of each socket's receive buffer (the advertised window) and
    /// send buffer.
    pub socket_buffer: usize,
    /// Delayed-ACK time, or `None` to ACK every segment at once.
    pub ack_delay: Option<Duration>,
    /// Give up a connection after this long without an answer.
    pub timeout: Option<Duration>,
}

impl Default for SmolConfig {
    fn default() -> Self {
        SmolConfig {
            stack: StackConfig {
                reserve_ports: true,
                ..StackConfig::default()
            },
            congestion: SmolCongestion::Cubic,
            socket_buffer: 4 << 20,
            ack_delay: Some(Duration::from_millis(1)),
            timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// Errors of [`SmolStack`] operations.
#[derive(Debug, thiserror::Error)]
pub enum SmolError {
    /// The operation failed as it would on the header-only stack.
    #[error(transparent)]
    Stack(#[from] StackError),
    /// A congestion controller smoltcp does not have.
    #[error("transport.congestion: smoltcp supports none, reno (newreno) and cubic, not {0:?}; use the header-only tcp transport for other controllers")]
    Congestion(String),
    /// Dedicated threads were asked for.
    #[error("threads.mode: the smoltcp transport runs run-to-completion only; set mode = \"run-to-completion\"")]
    Threads,
    /// A socket buffer size that cannot work.
    #[error("smoltcp socket buffer of {0} bytes: must be between 64 KiB and 1 GiB")]
    Buffer(usize),
    /// smoltcp refused to listen.
    #[error("smoltcp cannot listen on port {port}: {message}")]
    Listen {
        /// The port.
        port: u16,
        /// smoltcp's error.
        message: String,
    },
    /// smoltcp refused to connect.
    #[error("smoltcp cannot connect to {remote}: {message}")]
    Connect {
        /// The peer.
        remote: SocketAddrV4,
        /// smoltcp's error.
        message: String,
    },
}

impl From<NicError> for SmolError {
    fn from(e: NicError) -> Self {
        SmolError::Stack(StackError::Nic(e))
    }
}

impl From<NetInfoError> for SmolError {
    fn from(e: NetInfoError) -> Self {
        SmolError::Stack(StackError::NetInfo(e))
    }
}

/// Counters of a [`SmolStack`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmolCounters {
    /// Frames received and lent to smoltcp.
    pub frames_in: u64,
    /// Frames smoltcp sent.
    pub frames_out: u64,
    /// Replies smoltcp built during ingress, staged and sent after it.
    pub frames_staged: u64,
    /// Frames the datapath refused to send (dropped; TCP recovers them).
    pub frames_refused: u64,
    /// Frames larger than a UMEM frame (MTU 9000), built in a scratch
    /// buffer and copied across a multi-buffer chain.
    pub frames_out_chained: u64,
    /// ARP requests smoltcp sent (its cache is filled by the stack).
    pub arp_requests: u64,
    /// Synthetic ARP replies fed to smoltcp from learnt or resolved MACs.
    pub neighbours_filled: u64,
    /// Payload bytes copied from posted send segments into smoltcp's send
    /// buffers.
    pub payload_copied_in: u64,
    /// Payload bytes copied from smoltcp's receive buffers into posted
    /// receive segments.
    pub payload_copied_out: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections opened actively.
    pub connected: u64,
}

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
    conns: HashMap<ConnId, SConn>,
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
        datapath::sys::netns::ifindex(ifname)
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
            conns: HashMap::new(),
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

    /// Copies in-order bytes out of each socket into posted receive
    /// segments and posted send segments into each socket.
    fn copy_payload(&mut self) -> usize {
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
    fn update_connections(&mut self) -> usize {
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
            let reason = if c.aborted {
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
    fn new(
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

/// A TCP socket with the configured buffers and options.
fn new_socket(config: &SmolConfig) -> tcp::Socket<'static> {
    let n = config.socket_buffer;
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0u8; n]),
        tcp::SocketBuffer::new(vec![0u8; n]),
    );
    s.set_congestion_control(config.congestion.to_smoltcp());
    s.set_nagle_enabled(false);
    s.set_ack_delay(config.ack_delay.map(smol_duration));
    s.set_timeout(config.timeout.map(smol_duration));
    s
}

/// Adds a socket listening on `port`.
fn add_listening_socket(
    sockets: &mut SocketSet<'static>,
    config: &SmolConfig,
    port: u16,
) -> Result<SocketHandle, SmolError> {
    let mut s = new_socket(config);
    s.listen(port).map_err(|e| SmolError::Listen {
        port,
        message: e.to_string(),
    })?;
    Ok(sockets.add(s))
}

fn smol_duration(d: Duration) -> SmolDuration {
    SmolDuration::from_micros(d.as_micros().min(u128::from(u64::MAX)) as u64)
}

/// smoltcp's TCP state in the header-only TCP's terms (RFC 9293 3.3.2
/// names both follow; LISTEN never reaches a connection).
fn map_state(s: SmolState) -> State {
    match s {
        SmolState::Closed | SmolState::Listen => State::Closed,
        SmolState::SynSent => State::SynSent,
        SmolState::SynReceived => State::SynReceived,
        SmolState::Established => State::Established,
        SmolState::FinWait1 => State::FinWait1,
        SmolState::FinWait2 => State::FinWait2,
        SmolState::CloseWait => State::CloseWait,
        SmolState::Closing => State::Closing,
        SmolState::LastAck => State::LastAck,
        SmolState::TimeWait => State::TimeWait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn congestion_names_map_to_smoltcps_set_and_others_are_refused_by_key() {
        assert_eq!(
            "none".parse::<SmolCongestion>().unwrap(),
            SmolCongestion::None
        );
        assert_eq!(
            "Reno".parse::<SmolCongestion>().unwrap(),
            SmolCongestion::Reno
        );
        assert_eq!(
            "newreno".parse::<SmolCongestion>().unwrap(),
            SmolCongestion::Reno
        );
        assert_eq!(
            "cubic".parse::<SmolCongestion>().unwrap(),
            SmolCongestion::Cubic
        );
        for bad in ["dctcp", "bbr", "vegas"] {
            let e = bad.parse::<SmolCongestion>().unwrap_err().to_string();
            assert!(e.contains("transport.congestion"), "{e}");
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn every_smoltcp_state_maps_and_synchronized_states_stay_synchronized() {
        use SmolState::*;
        for s in [
            Closed,
            Listen,
            SynSent,
            SynReceived,
            Established,
            FinWait1,
            FinWait2,
            CloseWait,
            Closing,
            LastAck,
            TimeWait,
        ] {
            let ours = map_state(s);
            let smol_sync = !matches!(s, Closed | Listen | SynSent);
            assert_eq!(ours.is_synchronized(), smol_sync, "{s:?} -> {ours:?}");
        }
    }

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
