//! A small synchronous rtnetlink client for what the runtime reads about
//! an interface (link lookup: state, MAC, kind, XDP attachment, counters;
//! its IPv4 and IPv6 addresses), with no outside binary. Its one request path
//! ([`Rtnl::exchange`]) also carries the lab crate's changes (veth pairs,
//! bridges, addresses, neighbours), so there is one netlink plumbing.
//!
//! Why `netlink-packet-route` + `netlink-sys` and not `rtnetlink`: the
//! `rtnetlink` crate is async and needs a tokio runtime, while every caller
//! here is a plain thread that entered a namespace and wants one answer. A
//! netlink socket belongs to the network namespace of the thread that
//! opens it, so [`Rtnl::open`] on such a thread is all the namespace
//! handling needed; the messages are built and parsed by
//! `netlink-packet-route` (maintained with `rtnetlink` by the
//! rust-netlink project), and the request/answer exchange is the dozen
//! lines of [`Rtnl::exchange`], bounded by a receive timeout and a datagram
//! count.

use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::{
    address::{AddressAttribute, AddressMessage},
    link::{LinkAttribute, LinkFlags, LinkInfo, LinkLayerType, LinkMessage, LinkXdp, XdpAttached},
    neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState},
    AddressFamily, RouteNetlinkMessage,
};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// How long one answer from the kernel may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// At most this many datagrams are read for one request (a dump of a few
/// thousand links fits many times over).
const MAX_DATAGRAMS: usize = 10_000;

/// An rtnetlink socket in the network namespace of the thread that opened
/// it (it stays there whichever thread uses it later).
#[derive(Debug)]
pub struct Rtnl {
    socket: Socket,
    seq: u32,
}

/// What [`Rtnl::link`] reports about an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Hardware address, when the link has a 6-byte (Ethernet) one.
    pub mac: Option<[u8; 6]>,
    /// Whether the link layer is Ethernet.
    pub ethernet: bool,
    /// MTU.
    pub mtu: Option<u32>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// How an XDP program is attached, in `ip -d link`'s words (`xdp`,
    /// `xdpgeneric`, `xdpoffload`, `xdpmulti`), `None` when there is none.
    pub xdp: Option<&'static str>,
    /// RX and TX queue counts.
    pub queues: (Option<u32>, Option<u32>),
    /// Its 64-bit counters (`IFLA_STATS64`).
    pub stats: Option<LinkStats>,
    /// The link type (`IFLA_INFO_KIND`: `veth`, `bridge`, …), `None` for
    /// a physical device's driver (which reports none).
    pub kind: Option<String>,
}

/// Interface counters from `IFLA_STATS64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Packets dropped on transmit.
    pub tx_dropped: u64,
}

impl Rtnl {
    /// Opens an rtnetlink socket in the calling thread's network namespace.
    ///
    /// # Errors
    ///
    /// The `socket(AF_NETLINK)` error (a kernel without `CONFIG_NET` or a
    /// seccomp filter forbidding netlink).
    pub fn open() -> io::Result<Self> {
        let socket = Socket::new(NETLINK_ROUTE).map_err(|e| {
            io::Error::new(e.kind(), format!("socket(AF_NETLINK, NETLINK_ROUTE): {e}"))
        })?;
        socket2::SockRef::from(&socket).set_read_timeout(Some(ANSWER_TIMEOUT))?;
        Ok(Self { socket, seq: 0 })
    }

    /// The link named `name`.
    ///
    /// # Errors
    ///
    /// `NotFound` when there is no such link in the socket's namespace.
    pub fn link(&mut self, name: &str) -> io::Result<Link> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
        let answers = self.exchange(
            RouteNetlinkMessage::GetLink(msg),
            0,
            &format!("get link {name}"),
        )?;
        answers
            .into_iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(link_from(l)),
                _ => None,
            })
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("get link {name}: no answer"),
                )
            })
    }

    /// Whether a link named `name` exists.
    ///
    /// # Errors
    ///
    /// Errors other than "no such device".
    pub fn link_exists(&mut self, name: &str) -> io::Result<bool> {
        match self.link(name) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The IPv4 addresses of link `name` with their prefix lengths, in the
    /// kernel's order (`ip -4 addr show dev NAME`).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown link.
    pub fn ipv4_addresses(&mut self, name: &str) -> io::Result<Vec<(Ipv4Addr, u8)>> {
        Ok(self
            .addresses(name, AddressFamily::Inet)?
            .into_iter()
            .filter_map(|(a, p)| match a {
                IpAddr::V4(v) => Some((v, p)),
                IpAddr::V6(_) => None,
            })
            .collect())
    }

    /// The IPv6 addresses of link `name` (link-local ones included) with
    /// their prefix lengths, in the kernel's order (`ip -6 addr show dev
    /// NAME`).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown link.
    pub fn ipv6_addresses(&mut self, name: &str) -> io::Result<Vec<(Ipv6Addr, u8)>> {
        Ok(self
            .addresses(name, AddressFamily::Inet6)?
            .into_iter()
            .filter_map(|(a, p)| match a {
                IpAddr::V6(v) => Some((v, p)),
                IpAddr::V4(_) => None,
            })
            .collect())
    }

    /// The MAC the kernel's neighbour table holds for IPv6 neighbour `ip`
    /// on link `name` (`ip -6 neigh show dev NAME`), if the entry is usable:
    /// reachable, stale, delayed, being probed or permanent (not
    /// incomplete or failed).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown link.
    pub fn ipv6_neighbour(&mut self, name: &str, ip: Ipv6Addr) -> io::Result<Option<[u8; 6]>> {
        let index = self.link(name)?.index;
        let mut msg = NeighbourMessage::default();
        msg.header.family = AddressFamily::Inet6;
        let answers = self.exchange(
            RouteNetlinkMessage::GetNeighbour(msg),
            NLM_F_DUMP,
            &format!("list IPv6 neighbours of {name}"),
        )?;
        Ok(answers.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewNeighbour(n)
                if n.header.ifindex == index
                    && matches!(
                        n.header.state,
                        NeighbourState::Reachable
                            | NeighbourState::Stale
                            | NeighbourState::Delay
                            | NeighbourState::Probe
                            | NeighbourState::Permanent
                    )
                    && n.attributes.iter().any(|a| {
                        matches!(a, NeighbourAttribute::Destination(NeighbourAddress::Inet6(d)) if *d == ip)
                    }) =>
            {
                n.attributes.iter().find_map(|a| match a {
                    NeighbourAttribute::LinkLayerAddress(mac) => {
                        <[u8; 6]>::try_from(mac.as_slice()).ok()
                    }
                    _ => None,
                })
            }
            _ => None,
        }))
    }

    /// The addresses of `family` on link `name`.
    fn addresses(&mut self, name: &str, family: AddressFamily) -> io::Result<Vec<(IpAddr, u8)>> {
        let index = self.link(name)?.index;
        let mut msg = AddressMessage::default();
        msg.header.family = family;
        let answers = self.exchange(
            RouteNetlinkMessage::GetAddress(msg),
            NLM_F_DUMP,
            &format!("list addresses of {name}"),
        )?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == index => {
                    let prefix = a.header.prefix_len;
                    // IFA_LOCAL is the interface's own address; IFA_ADDRESS
                    // is the peer's on point-to-point links (and the only
                    // one an IPv6 address has).
                    let local = a.attributes.iter().find_map(|at| match at {
                        AddressAttribute::Local(v) => Some(*v),
                        _ => None,
                    });
                    let address = a.attributes.iter().find_map(|at| match at {
                        AddressAttribute::Address(v) => Some(*v),
                        _ => None,
                    });
                    local.or(address).map(|v| (v, prefix))
                }
                _ => None,
            })
            .collect())
    }

    /// Sends `msg` with `NLM_F_REQUEST | flags` and collects the kernel's
    /// answers: until the ACK (`NLM_F_ACK`), `NLMSG_DONE` (`NLM_F_DUMP`),
    /// or the first answer otherwise. An error answer becomes an
    /// `io::Error` with its errno and `what`.
    ///
    /// The one request path for every rtnetlink message of the workspace:
    /// the lab builds its link, address and neighbour changes on it.
    ///
    /// # Errors
    ///
    /// Sending or receiving failed, no answer came within the timeout, an
    /// answer could not be decoded, or the kernel answered with an error
    /// (`NotFound` for ENODEV, `Unsupported` for EOPNOTSUPP,
    /// `AlreadyExists` for EEXIST).
    pub fn exchange(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        what: &str,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        let context = |e: io::Error| io::Error::new(e.kind(), format!("netlink: {what}: {e}"));
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut request = NetlinkMessage::from(msg);
        request.header.flags = NLM_F_REQUEST | flags;
        request.header.sequence_number = seq;
        request.finalize();
        let mut buf = vec![0u8; request.buffer_len()];
        request.serialize(&mut buf);
        self.socket
            .send_to(&buf, &SocketAddr::new(0, 0), 0)
            .map_err(context)?;
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let ack = flags & NLM_F_ACK != 0;
        let mut answers = Vec::new();
        for _ in 0..MAX_DATAGRAMS {
            let (data, _) = self.socket.recv_from_full().map_err(|e| {
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    context(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no answer within {ANSWER_TIMEOUT:?}"),
                    ))
                } else {
                    context(e)
                }
            })?;
            let mut at = 0;
            while at < data.len() {
                let answer = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[at..])
                    .map_err(|e| {
                        context(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("undecodable answer: {e}"),
                        ))
                    })?;
                let len = answer.header.length as usize;
                if len == 0 {
                    break;
                }
                at += len.next_multiple_of(4);
                if answer.header.sequence_number != seq {
                    continue;
                }
                match answer.payload {
                    NetlinkPayload::Done(_) => return Ok(answers),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(answers),
                            Some(code) => Err(context(errno_error(-code.get()))),
                        }
                    }
                    NetlinkPayload::InnerMessage(m) => {
                        answers.push(m);
                        if !dump && !ack {
                            return Ok(answers);
                        }
                    }
                    _ => {}
                }
            }
        }
        Err(context(io::Error::other(format!(
            "no end of answer after {MAX_DATAGRAMS} datagrams"
        ))))
    }
}

/// An `io::Error` for errno `errno` whose kind says what the caller tests.
fn errno_error(errno: i32) -> io::Error {
    let e = io::Error::from_raw_os_error(errno);
    match errno {
        libc::ENODEV => io::Error::new(io::ErrorKind::NotFound, e.to_string()),
        libc::EOPNOTSUPP => io::Error::new(io::ErrorKind::Unsupported, e.to_string()),
        libc::EEXIST => io::Error::new(io::ErrorKind::AlreadyExists, e.to_string()),
        _ => e,
    }
}

fn link_from(msg: LinkMessage) -> Link {
    let mut link = Link {
        index: msg.header.index,
        name: String::new(),
        mac: None,
        ethernet: msg.header.link_layer_type == LinkLayerType::Ether,
        mtu: None,
        up: msg.header.flags.contains(LinkFlags::Up),
        xdp: None,
        queues: (None, None),
        stats: None,
        kind: None,
    };
    for attr in msg.attributes {
        match attr {
            LinkAttribute::IfName(n) => link.name = n,
            LinkAttribute::Address(a) => link.mac = <[u8; 6]>::try_from(a.as_slice()).ok(),
            LinkAttribute::Mtu(m) => link.mtu = Some(m),
            LinkAttribute::NumRxQueues(q) => link.queues.0 = Some(q),
            LinkAttribute::NumTxQueues(q) => link.queues.1 = Some(q),
            LinkAttribute::Stats64(s) => {
                link.stats = Some(LinkStats {
                    rx_packets: s.rx_packets,
                    tx_packets: s.tx_packets,
                    rx_bytes: s.rx_bytes,
                    tx_bytes: s.tx_bytes,
                    rx_dropped: s.rx_dropped,
                    tx_dropped: s.tx_dropped,
                });
            }
            LinkAttribute::LinkInfo(infos) => {
                link.kind = infos.iter().find_map(|i| match i {
                    LinkInfo::Kind(k) => Some(k.to_string()),
                    _ => None,
                });
            }
            LinkAttribute::Xdp(xdp) => {
                link.xdp = xdp.iter().find_map(|x| match x {
                    LinkXdp::Attached(XdpAttached::Driver) => Some("xdp"),
                    LinkXdp::Attached(XdpAttached::SocketBuffer) => Some("xdpgeneric"),
                    LinkXdp::Attached(XdpAttached::Hardware) => Some("xdpoffload"),
                    LinkXdp::Attached(XdpAttached::Multiple) => Some("xdpmulti"),
                    _ => None,
                });
            }
            _ => {}
        }
    }
    link
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_and_unknown_links_are_not() {
        let mut rtnl = Rtnl::open().expect("netlink socket");
        let lo = rtnl.link("lo").expect("every namespace has lo");
        assert!(lo.index > 0 && lo.name == "lo" && !lo.ethernet, "{lo:?}");
        assert_eq!(lo.xdp, None);
        assert_eq!(lo.kind, None, "lo has no IFLA_INFO_KIND");
        let err = rtnl.link("zs-nope0").expect_err("no such link");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("zs-nope0"), "{err}");
        assert!(!rtnl.link_exists("zs-nope0").expect("lookup"));
    }
}
