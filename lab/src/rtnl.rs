//! The lab's changes to links, addresses and neighbours over rtnetlink
//! (what tests used to ask `ip link add`, `ip addr add`, `ip neigh
//! replace` for), built on the datapath's read-only client
//! ([`datapath::rtnl::Rtnl`]) and its one request path
//! ([`Rtnl::exchange`]): one netlink plumbing for the runtime's queries
//! and the lab's changes.

use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd, BorrowedFd},
};

use datapath::rtnl::Rtnl;
use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::{
    address::{AddressAttribute, AddressMessage},
    link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage},
    neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState},
    AddressFamily, RouteNetlinkMessage,
};

/// One end of a veth pair for [`LinkSetup::create_veth`].
#[derive(Debug, Clone, Copy)]
pub struct VethSpec<'a> {
    /// Interface name (at most 15 bytes).
    pub name: &'a str,
    /// MAC address; the kernel picks a random one when `None`.
    pub mac: Option<[u8; 6]>,
    /// MTU; the kernel default (1500) when `None`.
    pub mtu: Option<u32>,
    /// Number of RX and TX queues; one when `None`.
    pub queues: Option<u32>,
}

/// The lab's link, address and neighbour changes, on an [`Rtnl`] socket
/// (so they act in the namespace of the thread that opened it).
pub trait LinkSetup {
    /// Sets link `name` administratively up or down (`ip link set NAME up`).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown link; the kernel's answer otherwise.
    fn set_link_up(&mut self, name: &str, up: bool) -> io::Result<()>;

    /// Deletes link `name` (both ends for a veth).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown link; the kernel's answer otherwise.
    fn delete_link(&mut self, name: &str) -> io::Result<()>;

    /// Creates the veth pair `a` ↔ `b` with `a` in the socket's namespace
    /// and `b` moved into the namespace `b_netns` (`ip link add A … type
    /// veth peer name B netns NS …`). Both ends are left down.
    ///
    /// # Errors
    ///
    /// `AlreadyExists` when a name is taken; `Unsupported` with a hint when
    /// the kernel has no veth driver (`CONFIG_VETH`).
    fn create_veth(
        &mut self,
        a: &VethSpec<'_>,
        b: &VethSpec<'_>,
        b_netns: BorrowedFd<'_>,
    ) -> io::Result<()>;

    /// Creates the bridge `name`, down (`ip link add NAME type bridge`;
    /// no STP, so ports forward as soon as they are up).
    ///
    /// # Errors
    ///
    /// `AlreadyExists` when the name is taken; `Unsupported` when the
    /// kernel has no bridge driver (`CONFIG_BRIDGE`).
    fn create_bridge(&mut self, name: &str) -> io::Result<()>;

    /// Makes link `port` a port of `master` (`ip link set PORT master
    /// MASTER`).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown link; the kernel's answer otherwise.
    fn set_master(&mut self, port: &str, master: &str) -> io::Result<()>;

    /// Adds `addr/prefix` to link `name` (`ip addr add ADDR/PREFIX dev NAME`).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown link; `AlreadyExists` when it has the
    /// address already.
    fn add_ipv4(&mut self, name: &str, addr: Ipv4Addr, prefix: u8) -> io::Result<()>;

    /// Adds IPv6 `addr/prefix` to link `name` (`ip -6 addr add ADDR/PREFIX
    /// dev NAME`); IPv6 must be on for the link.
    ///
    /// # Errors
    ///
    /// As [`LinkSetup::add_ipv4`].
    fn add_ipv6(&mut self, name: &str, addr: Ipv6Addr, prefix: u8) -> io::Result<()>;

    /// Sets a permanent neighbour entry `ip` → `mac` on link `name` (`ip
    /// neigh replace IP lladdr MAC dev NAME nud permanent`).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown link; the kernel's answer otherwise.
    fn set_permanent_neighbour(&mut self, name: &str, ip: Ipv4Addr, mac: [u8; 6])
        -> io::Result<()>;
}

impl LinkSetup for Rtnl {
    fn set_link_up(&mut self, name: &str, up: bool) -> io::Result<()> {
        let index = self.link(name)?.index;
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.header.flags = if up {
            LinkFlags::Up
        } else {
            LinkFlags::empty()
        };
        msg.header.change_mask = LinkFlags::Up;
        let state = if up { "up" } else { "down" };
        self.exchange(
            RouteNetlinkMessage::SetLink(msg),
            NLM_F_ACK,
            &format!("set link {name} {state}"),
        )
        .map(drop)
    }

    fn delete_link(&mut self, name: &str) -> io::Result<()> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
        self.exchange(
            RouteNetlinkMessage::DelLink(msg),
            NLM_F_ACK,
            &format!("delete link {name}"),
        )
        .map(drop)
    }

    fn create_veth(
        &mut self,
        a: &VethSpec<'_>,
        b: &VethSpec<'_>,
        b_netns: BorrowedFd<'_>,
    ) -> io::Result<()> {
        let mut peer = LinkMessage::default();
        peer.attributes = veth_end_attributes(b);
        peer.attributes
            .push(LinkAttribute::NetNsFd(b_netns.as_raw_fd()));
        let mut msg = LinkMessage::default();
        msg.attributes = veth_end_attributes(a);
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        self.exchange(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            &format!("create veth pair {} <-> {}", a.name, b.name),
        )
        .map(drop)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::Unsupported {
                io::Error::new(
                    e.kind(),
                    format!("{e} (the kernel has no veth driver: CONFIG_VETH, modprobe veth)"),
                )
            } else {
                e
            }
        })
    }

    fn create_bridge(&mut self, name: &str) -> io::Result<()> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        self.exchange(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            &format!("create bridge {name}"),
        )
        .map(drop)
    }

    fn set_master(&mut self, port: &str, master: &str) -> io::Result<()> {
        let (index, master_index) = (self.link(port)?.index, self.link(master)?.index);
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.attributes.push(LinkAttribute::Controller(master_index));
        self.exchange(
            RouteNetlinkMessage::SetLink(msg),
            NLM_F_ACK,
            &format!("set {port} master {master}"),
        )
        .map(drop)
    }

    fn add_ipv4(&mut self, name: &str, addr: Ipv4Addr, prefix: u8) -> io::Result<()> {
        add_address(self, name, addr.into(), prefix)
    }

    fn add_ipv6(&mut self, name: &str, addr: Ipv6Addr, prefix: u8) -> io::Result<()> {
        add_address(self, name, addr.into(), prefix)
    }

    fn set_permanent_neighbour(
        &mut self,
        name: &str,
        ip: Ipv4Addr,
        mac: [u8; 6],
    ) -> io::Result<()> {
        let index = self.link(name)?.index;
        let mut msg = NeighbourMessage::default();
        msg.header.family = AddressFamily::Inet;
        msg.header.ifindex = index;
        msg.header.state = NeighbourState::Permanent;
        msg.attributes
            .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
        msg.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
        self.exchange(
            RouteNetlinkMessage::NewNeighbour(msg),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
            &format!("set neighbour {ip} on {name}"),
        )
        .map(drop)
    }
}

fn veth_end_attributes(end: &VethSpec<'_>) -> Vec<LinkAttribute> {
    let mut attrs = vec![LinkAttribute::IfName(end.name.to_owned())];
    if let Some(mac) = end.mac {
        attrs.push(LinkAttribute::Address(mac.to_vec()));
    }
    if let Some(mtu) = end.mtu {
        attrs.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(q) = end.queues {
        attrs.push(LinkAttribute::NumTxQueues(q));
        attrs.push(LinkAttribute::NumRxQueues(q));
    }
    attrs
}

/// Adds `addr/prefix` to link `name`, either family.
fn add_address(rtnl: &mut Rtnl, name: &str, addr: IpAddr, prefix: u8) -> io::Result<()> {
    let index = rtnl.link(name)?.index;
    let mut msg = AddressMessage::default();
    msg.header.family = match addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    msg.header.prefix_len = prefix;
    msg.header.index = index;
    msg.attributes.push(AddressAttribute::Local(addr));
    msg.attributes.push(AddressAttribute::Address(addr));
    rtnl.exchange(
        RouteNetlinkMessage::NewAddress(msg),
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        &format!("add address {addr}/{prefix} to {name}"),
    )
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deletes the test's namespace however the test ends.
    struct OwnNetns(String);

    impl Drop for OwnNetns {
        fn drop(&mut self) {
            let _ = crate::sys::netns::delete_named(&self.0);
        }
    }

    #[test]
    fn addresses_added_to_a_link_are_listed_with_their_prefix() {
        // A namespace of our own, so that the dump's content is known: its
        // `lo` starts down and without addresses.
        let name = format!("zs-rtnl-{}", std::process::id());
        crate::sys::netns::create_named(&name).expect("create netns");
        let _ns = OwnNetns(name.clone());
        let seen = std::thread::spawn(move || {
            let _inside = crate::sys::netns::NetnsGuard::enter(&name).expect("enter netns");
            let mut rtnl = Rtnl::open().expect("netlink socket");
            let before = rtnl.ipv4_addresses("lo").expect("dump");
            rtnl.add_ipv4("lo", Ipv4Addr::new(198, 18, 7, 1), 32)
                .expect("add /32");
            rtnl.add_ipv4("lo", Ipv4Addr::new(198, 19, 7, 9), 24)
                .expect("add /24");
            let after = rtnl.ipv4_addresses("lo").expect("dump");
            let six = "2001:2::7".parse().expect("address");
            rtnl.add_ipv6("lo", six, 128).expect("add IPv6 /128");
            let v4 = rtnl.ipv4_addresses("lo").expect("dump");
            let v6 = rtnl.ipv6_addresses("lo").expect("dump");
            assert_eq!(v4.len(), 2, "an IPv6 address is not listed as IPv4");
            assert!(v6.contains(&(six, 128)), "{v6:?}");
            (before, after)
        })
        .join()
        .expect("netns thread");
        assert_eq!(seen.0, vec![], "a new namespace's lo has no address");
        let mut after = seen.1;
        after.sort_unstable();
        assert_eq!(
            after,
            vec![
                (Ipv4Addr::new(198, 18, 7, 1), 32),
                (Ipv4Addr::new(198, 19, 7, 9), 24)
            ],
            "exactly the two addresses added, each with its own prefix"
        );
    }
}
