//! The flow 5-tuple.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The TCP/UDP 5-tuple of a flow as seen from our side (the protocol is
/// implied by the table the key lives in).
///
/// Both addresses are of one family, and an IPv4 flow's are
/// [`IpAddr::V4`] (never v4-mapped IPv6), so one flow has one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// The peer's address (source of received packets).
    pub remote_ip: IpAddr,
    /// Our address (destination of received packets).
    pub local_ip: IpAddr,
    /// The peer's port.
    pub remote_port: u16,
    /// Our port.
    pub local_port: u16,
}

impl FlowKey {
    /// Whether the flow is IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.local_ip.is_ipv6()
    }

    /// Our end.
    pub fn local(&self) -> SocketAddr {
        SocketAddr::new(self.local_ip, self.local_port)
    }

    /// The peer's end.
    pub fn remote(&self) -> SocketAddr {
        SocketAddr::new(self.remote_ip, self.remote_port)
    }
}

impl Default for FlowKey {
    /// `0.0.0.0:0` both ways.
    fn default() -> Self {
        FlowKey {
            remote_ip: Ipv4Addr::UNSPECIFIED.into(),
            local_ip: Ipv4Addr::UNSPECIFIED.into(),
            remote_port: 0,
            local_port: 0,
        }
    }
}
