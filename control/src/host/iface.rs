//! The interface a host serves, as read from the kernel once at start:
//! that it exists (its ifindex), its IPv4 address and prefix, its MAC.

use std::net::Ipv4Addr;

use super::HostError;
use crate::netinfo;

/// The interface's name and addresses.
#[derive(Debug, Clone)]
pub(crate) struct Iface {
    pub(crate) name: String,
    pub(crate) ip: Ipv4Addr,
    pub(crate) prefix: u8,
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
        let mac = netinfo::mac_address(name)?;
        Ok(Iface {
            name: name.to_string(),
            ip,
            prefix,
            mac,
        })
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

impl Kernel {
    /// The next hop towards `remote` and its MAC.
    ///
    /// # Errors
    /// No route, or no ARP answer within `timeout`.
    pub(crate) fn next_hop(
        self,
        iface: &Iface,
        remote: Ipv4Addr,
        timeout: std::time::Duration,
    ) -> Result<(Ipv4Addr, [u8; 6]), HostError> {
        match self {
            Kernel::Netinfo => {
                let hop = netinfo::next_hop(&iface.name, iface.ip, iface.prefix, remote)?;
                let mac = netinfo::resolve_neighbour(&iface.name, iface.ip, hop, timeout)?;
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
        remote: Ipv4Addr,
        probe: bool,
    ) -> Result<bool, HostError> {
        match self {
            Kernel::Netinfo => {
                let hop = netinfo::next_hop(&iface.name, iface.ip, iface.prefix, remote)?;
                Ok(netinfo::neighbour_now(&iface.name, iface.ip, hop, probe)?.is_some())
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
