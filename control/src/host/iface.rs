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

/// The interface's index.
///
/// # Errors
/// [`HostError::NoSuchInterface`].
pub(crate) fn ifindex(name: &str) -> Result<u32, HostError> {
    datapath::raw::ifindex(name).map_err(|_| HostError::NoSuchInterface(name.to_string()))
}
