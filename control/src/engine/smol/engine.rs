//! [`SmolEngine`]: smoltcp connections as an [`Engine`] of the [`Host`],
//! over the same datapath queue, driven through registered memory, posted
//! work requests and a completion queue exactly as the header-only TCP.
//!
//! Per iteration ([`Engine::poll`]): every frame the queue received is lent
//! to smoltcp in place (learning the sender's MAC for smoltcp's neighbour
//! cache first); replies built during ingress are sent; the engine copies
//! in-order bytes from each socket's receive buffer into posted receive
//! segments and posted send segments into each socket's send buffer
//! (`progress.rs`); smoltcp sends what it wants straight into UMEM TX
//! frames; socket state changes become completions (connected, received,
//! acknowledged, peer closed, closed).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::Range;
use std::time::Duration;

use datapath::mr::Access;
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::DeviceCapabilities;
use smoltcp::socket::tcp::{self, State as SmolState};
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};
use transports::tcp::State;
use transports::Instant;

mod progress;

use super::config::{SmolConfig, SmolCounters, SmolError};
use super::device::{self, EgressDevice, IngressDevice, Staged, TxCounters};
use super::socket::{add_listening_socket, new_socket};
use super::zero_window::ClosedWindows;
use crate::host::{self, Conn, Core, Engine, Peer};
use crate::idle::IdlePolicy;
use crate::idmap::ConnId;
use crate::provider::{Direction, WorkRequest};

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

/// smoltcp's side of a connection: its socket, the posted work requests
/// and how far the socket got.
#[derive(Debug)]
pub struct SConn {
    handle: SocketHandle,
    recv: VecDeque<Wr>,
    /// Send WRs not yet fully copied into smoltcp.
    send: VecDeque<Wr>,
    /// Send WRs fully copied, waiting for their acknowledgement.
    unacked: VecDeque<Wr>,
    posted_send: u64,
    pushed: u64,
    connected: bool,
    fin_seen: bool,
    peer_closed_reported: bool,
    close_requested: bool,
    fin_queued: bool,
    aborted: bool,
    was_synchronized: bool,
}

/// smoltcp's interface and sockets over the host's datapath queue.
pub struct SmolEngine {
    iface: Interface,
    sockets: SocketSet<'static>,
    caps: DeviceCapabilities,
    ids: Vec<ConnId>,
    /// Sockets in LISTEN, per listening port.
    listening: HashMap<u16, Vec<SocketHandle>>,
    /// MACs learnt from received frames (or resolved through the kernel)
    /// and when they were last given to smoltcp.
    neighbours: HashMap<Ipv4Addr, ([u8; 6], std::time::Instant)>,
    rx_scratch: Vec<u8>,
    tx_scratch: Vec<u8>,
    staged: Staged,
    /// Connections smoltcp holds at a closed receive window, and the frame
    /// that feeds it a peer's ACK it would drop (see [`ClosedWindows`]).
    closed: ClosedWindows,
    ack_scratch: Vec<u8>,
    tx_counters: TxCounters,
    counters: SmolCounters,
    config: SmolConfig,
    /// When the loop sleeps instead of spinning (`config.stack.poll`).
    idle: IdlePolicy,
}

impl std::fmt::Debug for SmolEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmolEngine")
            .field("listening", &self.listening.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// LISTEN sockets kept ready per listening port (each holds its buffers).
const SPARE_LISTENERS: usize = 2;

/// How often a neighbour's MAC is given to smoltcp again (its cache keeps
/// entries for 60 s).
const NEIGHBOUR_REFRESH: Duration = Duration::from_secs(20);

/// Most neighbours remembered: any frame teaches one, so a flood from
/// spoofed addresses must not grow the table without end.
const MAX_NEIGHBOURS: usize = 4096;

impl SmolEngine {
    /// smoltcp chooses its ISNs from a generator seeded here, from the OS
    /// RNG (its ISN choice is its own, not [`host::Secret::isn`]).
    pub(crate) fn new(core: &mut Core<SConn>, config: SmolConfig) -> Result<SmolEngine, SmolError> {
        let caps = device::capabilities(config.stack.nic.mtu);
        let mut iface_config =
            IfaceConfig::new(HardwareAddress::Ethernet(EthernetAddress(core.iface.mac)));
        iface_config.random_seed = host::os_random_u64()?;
        let (mut scratch, mut tx_counters) = (Vec::new(), TxCounters::default());
        let mut closed = ClosedWindows::new(config.socket_buffer);
        let mut iface = Interface::new(
            iface_config,
            &mut EgressDevice {
                nic: &mut core.nic,
                scratch: &mut scratch,
                caps: &caps,
                counters: &mut tx_counters,
                closed: &mut closed,
            },
            SmolInstant::ZERO,
        );
        let (ip, prefix) = (core.iface.ip, core.iface.prefix);
        iface.update_ip_addrs(|addrs| {
            // One address; the list has room for it.
            let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(ip), prefix));
        });
        Ok(SmolEngine {
            iface,
            sockets: SocketSet::new(Vec::new()),
            caps,
            ids: Vec::new(),
            listening: HashMap::new(),
            neighbours: HashMap::new(),
            rx_scratch: Vec::new(),
            tx_scratch: scratch,
            staged: Staged::default(),
            closed,
            ack_scratch: Vec::new(),
            tx_counters,
            counters: SmolCounters::default(),
            idle: IdlePolicy::new(config.stack.poll),
            config,
        })
    }

    /// One iteration: receive, copy payload, send, update connections.
    fn poll_once(&mut self, core: &mut Core<SConn>, now: Instant) -> usize {
        let now = smol_instant(now);
        // Back-pressure: no received frames while the application has not
        // taken its completions.
        let mut work = if core.cq_has_room() {
            self.ingress(core, now)
        } else {
            0
        };
        work += self.copy_payload(core);
        work += self.egress(core, now);
        work += self.update_connections(core);
        work
    }

    fn add_listening_socket(&mut self, port: u16) -> Result<SocketHandle, SmolError> {
        add_listening_socket(&mut self.sockets, &self.config, port)
    }

    /// Feeds smoltcp an ARP reply so its neighbour cache knows `ip`.
    fn fill_neighbour(&mut self, core: &Core<SConn>, ip: Ipv4Addr, mac: [u8; 6], now: SmolInstant) {
        let frame = device::arp_reply(mac, ip, core.iface.mac, core.iface.ip);
        let mut dev = IngressDevice::new(&frame, &mut self.staged, &self.caps);
        self.iface
            .poll_ingress_single(now, &mut dev, &mut self.sockets);
        self.neighbours.insert(ip, (mac, std::time::Instant::now()));
        self.counters.neighbours_filled += 1;
    }
}

/// smoltcp's clock from the host's.
fn smol_instant(now: Instant) -> SmolInstant {
    SmolInstant::from_micros((now.as_nanos() / 1000) as i64)
}

impl Engine for SmolEngine {
    type Conn = SConn;
    type Error = SmolError;
    type Counters = SmolCounters;
    const NAME: &'static str = "smoltcp";
    const IPV6: bool = false;

    /// smoltcp's LISTEN socket turns into the connection: keep spares
    /// listening (ingress adds one before a SYN that would find none).
    fn listen(&mut self, _core: &mut Core<SConn>, port: u16) -> Result<(), SmolError> {
        let mut listening = Vec::with_capacity(SPARE_LISTENERS);
        for _ in 0..SPARE_LISTENERS {
            listening.push(self.add_listening_socket(port)?);
        }
        self.listening.insert(port, listening);
        Ok(())
    }

    /// Drops the port's LISTEN sockets (and handshakes still on them).
    fn unlisten(&mut self, _core: &mut Core<SConn>, port: u16) {
        for h in self.listening.remove(&port).unwrap_or_default() {
            self.sockets.remove(h);
        }
    }

    fn connect(&mut self, core: &mut Core<SConn>, peer: Peer) -> Result<ConnId, SmolError> {
        let now = smol_instant(core.now());
        let remote = peer.remote;
        let (SocketAddr::V4(remote4), IpAddr::V4(hop)) = (remote, peer.hop) else {
            return Err(SmolError::Connect {
                remote,
                message: "the smoltcp transport carries IPv4 only (the tcp transport carries IPv6)"
                    .into(),
            });
        };
        if hop != *remote4.ip() {
            let _ = self.iface.routes_mut().add_default_ipv4_route(hop);
        }
        self.fill_neighbour(core, hop, peer.mac, now);
        // The flow entry steers the peer's segments to the queue's socket.
        let local_mac = core.iface.mac;
        let flow = core.nic.add_flow(peer.key, local_mac, peer.mac, 0, 0)?;
        let mut s = new_socket(&self.config);
        let endpoint = IpEndpoint::new(IpAddress::Ipv4(*remote4.ip()), remote4.port());
        let local_port = peer.key.local_port;
        if let Err(e) = s.connect(self.iface.context(), endpoint, local_port) {
            let _ = core.nic.remove_flow(flow);
            return Err(SmolError::Connect {
                remote,
                message: e.to_string(),
            });
        }
        let handle = self.sockets.add(s);
        let id = ConnId(flow);
        let conn = Conn::new(flow, local_port, None, State::SynSent, SConn::new(handle));
        core.conns.insert(id, conn);
        self.counters.connected += 1;
        Ok(id)
    }

    /// The work request waits in the connection's queue; the bytes are
    /// copied into (receives) or out of (sends) smoltcp's buffers.
    fn post(&mut self, core: &mut Core<SConn>, wr: WorkRequest) -> Result<(), SmolError> {
        let id = wr.conn;
        let access = match wr.dir {
            Direction::Recv => Access::RECV,
            Direction::Send => Access::SEND,
        };
        let area = core.nic.resolve_region(wr.mr, wr.offset, wr.len, access)?;
        let c = core.open_conn(id)?;
        let len = wr.len as u64;
        let (queue, end) = match wr.dir {
            Direction::Recv => {
                let end = c.engine.recv.back().map_or(c.received, |w| w.end) + len;
                (&mut c.engine.recv, end)
            }
            Direction::Send => {
                c.engine.posted_send += len;
                (&mut c.engine.send, c.engine.posted_send)
            }
        };
        queue.push_back(Wr {
            area,
            wr_id: wr.wr_id,
            done: 0,
            end,
        });
        Ok(())
    }

    fn close(&mut self, core: &mut Core<SConn>, id: ConnId, abort: bool) {
        let Ok(c) = core.open_conn(id) else {
            return;
        };
        if abort {
            c.engine.aborted = true;
            self.sockets.get_mut::<tcp::Socket>(c.engine.handle).abort();
        } else {
            c.engine.close_requested = true;
        }
    }

    /// One pass; when it found nothing, spin, yield or sleep as the idle
    /// policy says (until a frame arrives or smoltcp's next timer,
    /// `Interface::poll_at`), then another pass.
    fn poll(&mut self, core: &mut Core<SConn>, now: Instant) -> usize {
        let work = self.poll_once(core, now);
        let (iface, sockets) = (&mut self.iface, &self.sockets);
        let deadline = || {
            iface
                .poll_at(smol_instant(now), sockets)
                .map(|t| Instant::from_micros(t.total_micros().max(0) as u64))
        };
        if !self
            .idle
            .settle(work, now, deadline, |limit| core.nic.wait(None, limit))
        {
            return work;
        }
        let now = core.now();
        let work = self.poll_once(core, now);
        self.idle.woke(work);
        work
    }

    fn counters(&self) -> SmolCounters {
        let mut c = self.counters;
        c.frames_out = self.tx_counters.frames;
        c.frames_refused = self.tx_counters.refused;
        c.frames_out_chained = self.tx_counters.chained;
        c.zero_window_untracked = self.closed.untracked;
        c.arp_requests = self.tx_counters.arp_requests;
        c.loop_idle = self.idle.counters();
        c
    }

    /// Frames dropped on the way, by reason.
    fn drops(&self, core: &Core<SConn>) -> Vec<(&'static str, u64)> {
        let mut drops = core.nic.drops();
        if self.tx_counters.refused > 0 {
            drops.push(("tx_refused", self.tx_counters.refused));
        }
        if self.counters.syn_refused > 0 {
            drops.push(("syn_refused", self.counters.syn_refused));
        }
        drops
    }

    /// smoltcp does not count them.
    fn retransmissions(&self, _core: &Core<SConn>) -> Option<(u64, u64)> {
        None
    }

    fn slept_ns(&self) -> u64 {
        self.idle.counters().slept_ns
    }

    /// Every byte copied into or out of smoltcp's socket buffers (about
    /// all bytes transferred).
    fn payload_bytes_touched(&self) -> u64 {
        self.counters.payload_copied_in + self.counters.payload_copied_out
    }
}

impl SmolEngine {
    /// Lends every received frame to smoltcp, then sends the replies it
    /// staged.
    fn ingress(&mut self, core: &mut Core<SConn>, now: SmolInstant) -> usize {
        let SmolEngine {
            iface,
            sockets,
            caps,
            rx_scratch,
            staged,
            closed,
            ack_scratch,
            neighbours,
            counters,
            listening,
            config,
            ..
        } = self;
        let (local_ip, local_mac) = (core.iface.ip, core.iface.mac);
        let net = IpCidr::new(IpAddress::Ipv4(local_ip), core.iface.prefix);
        let (half_open, accept) = (&core.half_open, &core.listeners);
        let (max_half_open, backlog) = (core.max_half_open, core.backlog);
        let nic = &mut core.nic;
        let taken = nic.receive_frames(256, rx_scratch, |frame| {
            counters.frames_in += 1;
            // The peer's MAC, learnt from its own frames: smoltcp's ARP
            // replies would go to the kernel, so fill its cache ourselves.
            if let Some((mac, ip)) = device::ipv4_source(frame) {
                let fresh = neighbours
                    .get(&ip)
                    .is_some_and(|(m, at)| *m == mac && at.elapsed() < NEIGHBOUR_REFRESH);
                if !fresh && !neighbours.contains_key(&ip) && neighbours.len() >= MAX_NEIGHBOURS {
                    neighbours.retain(|_, (_, at)| at.elapsed() < NEIGHBOUR_REFRESH);
                }
                let room = neighbours.len() < MAX_NEIGHBOURS || neighbours.contains_key(&ip);
                if !fresh && !room {
                    counters.neighbours_refused += 1;
                } else if !fresh && net.contains_addr(&IpAddress::Ipv4(ip)) {
                    let arp = device::arp_reply(mac, ip, local_mac, local_ip);
                    let mut dev = IngressDevice::new(&arp, staged, caps);
                    iface.poll_ingress_single(now, &mut dev, sockets);
                    neighbours.insert(ip, (mac, std::time::Instant::now()));
                    counters.neighbours_filled += 1;
                }
            }
            // A SYN to a port whose LISTEN sockets are all taken gets a
            // fresh one first, instead of smoltcp's RST.
            if let Some(port) = device::syn_port(frame) {
                if let Some(l) = listening.get_mut(&port) {
                    // The same limits as the header-only TCP: handshakes
                    // under way (promoted, or still on a LISTEN socket of
                    // this poll) and the accept queue.
                    let pending = l
                        .iter()
                        .filter(|h| sockets.get::<tcp::Socket>(**h).state() != SmolState::Listen)
                        .count();
                    let under_way = half_open.get(&port).map_or(0, VecDeque::len) + pending;
                    let queued = accept.get(&port).map_or(0, VecDeque::len);
                    if under_way >= max_half_open || queued >= backlog {
                        counters.syn_refused += 1;
                        return;
                    }
                    let free = l
                        .iter()
                        .any(|h| sockets.get::<tcp::Socket>(*h).state() == SmolState::Listen);
                    if !free {
                        match add_listening_socket(sockets, config, port) {
                            Ok(h) => l.push(h),
                            Err(e) => log::warn!("{e}"),
                        }
                    }
                }
            }
            let mut dev = IngressDevice::new(frame, staged, caps);
            iface.poll_ingress_single(now, &mut dev, sockets);
            if closed.acceptable_ack(frame, ack_scratch) {
                counters.zero_window_acks += 1;
                let mut dev = IngressDevice::new(ack_scratch, staged, caps);
                iface.poll_ingress_single(now, &mut dev, sockets);
            }
        }) as usize;
        let n = self.staged.len();
        if n > 0 {
            self.counters.frames_staged += n as u64;
            let (staged, tx_scratch, tx_counters, closed) = (
                &mut self.staged,
                &mut self.tx_scratch,
                &mut self.tx_counters,
                &mut self.closed,
            );
            staged.drain(|frame| {
                closed.sent(frame);
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
    fn egress(&mut self, core: &mut Core<SConn>, now: SmolInstant) -> usize {
        let before = self.tx_counters.frames;
        let mut dev = EgressDevice {
            nic: &mut core.nic,
            scratch: &mut self.tx_scratch,
            caps: &self.caps,
            counters: &mut self.tx_counters,
            closed: &mut self.closed,
        };
        for _ in 0..1024 {
            let sent = self.iface.poll_egress(now, &mut dev, &mut self.sockets);
            if sent == smoltcp::iface::PollResult::None {
                break;
            }
        }
        core.nic.flush();
        (self.tx_counters.frames - before) as usize
    }
}
