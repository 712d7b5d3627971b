//! The interface a host serves, as read from the kernel once at start:
//! that it exists (its ifindex), its IPv4 address and prefix, its IPv6
//! address (if it has one beyond link-local), its MAC.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::HostError;
use crate::netinfo;

/// The interface's name and addresses.
#[derive(Debug, Clone)]
pub(crate) struct Iface {
    pub(crate) name: String,
    pub(crate) ip: Ipv4Addr,
    pub(crate) prefix: u8,
    /// The first IPv6 address that is not link-local: connections over
    /// IPv6 go from it, listeners take it too.
    pub(crate) ip6: Option<Ipv6Addr>,
    pub(crate) mac: [u8; 6],
}

impl Iface {
    /// Looks `name` up in the calling thread's network namespace.
    ///
    /// # Errors
    /// No such interface, no IPv4 address, no MAC.
    pub(crate) fn lookup(name: &str) -> Result<Iface, HostError> {
        ifindex(name)?;
        let (ip, prefix) = netinfo::ipv4_address(name)?;
        let ip6 = netinfo::ipv6_addresses(name)?
            .into_iter()
            .map(|(a, _)| a)
            .find(|a| !a.is_unicast_link_local());
        let mac = netinfo::mac_address(name)?;
        Ok(Iface {
            name: name.to_string(),
            ip,
            prefix,
            ip6,
            mac,
        })
    }

    /// Our address of `remote`'s family.
    ///
    /// # Errors
    /// [`HostError::NoIpv6Address`] for an IPv6 peer when the interface
    /// has no IPv6 address.
    pub(crate) fn local_for(&self, remote: IpAddr) -> Result<IpAddr, HostError> {
        match remote {
            IpAddr::V4(_) => Ok(self.ip.into()),
            IpAddr::V6(_) => self
                .ip6
                .map(IpAddr::from)
                .ok_or_else(|| HostError::NoIpv6Address(self.name.clone())),
        }
    }
}

/// What the host asks the kernel beside the interface: the next hop's MAC
/// for a new connection, and whether a kernel socket owns a port.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kernel {
    /// The kernel of the calling thread's namespace ([`netinfo`]).
    Netinfo,
    /// No kernel (a fake datapath): every peer is on the link at `peer_mac`
    /// and no kernel socket owns a port.
    #[cfg(feature = "testing")]
    Absent {
        /// The one peer's MAC.
        peer_mac: [u8; 6],
    },
}

/// Our address towards `remote` and the next hop the kernel's routes
/// give for it.
fn hop_towards(iface: &Iface, remote: IpAddr) -> Result<(IpAddr, IpAddr), HostError> {
    let local = iface.local_for(remote)?;
    let hop = match remote {
        IpAddr::V4(r) => netinfo::next_hop(&iface.name, iface.ip, iface.prefix, r)?.into(),
        IpAddr::V6(r) => netinfo::next_hop6(&iface.name, r)?.into(),
    };
    Ok((local, hop))
}

impl Kernel {
    /// The next hop towards `remote` (either family) and its MAC.
    ///
    /// # Errors
    /// No route, or no ARP (neighbour discovery) answer within `timeout`.
    pub(crate) fn next_hop(
        self,
        iface: &Iface,
        remote: IpAddr,
        timeout: std::time::Duration,
    ) -> Result<(IpAddr, [u8; 6]), HostError> {
        match self {
            Kernel::Netinfo => {
                let (local, hop) = hop_towards(iface, remote)?;
                let mac = netinfo::resolve_neighbour(&iface.name, local, hop, timeout)?;
                Ok((hop, mac))
            }
            #[cfg(feature = "testing")]
            Kernel::Absent { peer_mac } => Ok((remote, peer_mac)),
        }
    }

    /// Whether the next hop towards `remote` is resolved now (its MAC in
    /// the kernel's table); if not, asks the kernel to resolve it when
    /// `probe`. Never waits.
    ///
    /// # Errors
    /// No route, or the tables cannot be read.
    pub(crate) fn next_hop_known(
        self,
        iface: &Iface,
        remote: IpAddr,
        probe: bool,
    ) -> Result<bool, HostError> {
        match self {
            Kernel::Netinfo => {
                let (local, hop) = hop_towards(iface, remote)?;
                Ok(netinfo::neighbour_now(&iface.name, local, hop, probe)?.is_some())
            }
            #[cfg(feature = "testing")]
            Kernel::Absent { .. } => Ok(true),
        }
    }

    /// Whether a kernel socket listens on `port`.
    ///
    /// # Errors
    /// The kernel's table cannot be read.
    pub(crate) fn listens_on(self, port: u16) -> Result<bool, HostError> {
        match self {
            Kernel::Netinfo => Ok(netinfo::kernel_listens_on(port)?),
            #[cfg(feature = "testing")]
            Kernel::Absent { .. } => Ok(false),
        }
    }
}

/// The interface's index.
///
/// # Errors
/// [`HostError::NoSuchInterface`].
pub(crate) fn ifindex(name: &str) -> Result<u32, HostError> {
    datapath::iface::ifindex(name).map_err(|_| HostError::NoSuchInterface(name.to_string()))
}
