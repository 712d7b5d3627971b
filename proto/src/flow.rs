//! The flow 5-tuple.

/// The TCP/UDP 5-tuple of a flow as seen from our side (the protocol is
/// implied by the table the key lives in). Addresses are IPv4 octets in
/// network order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// The peer's address (source of received packets).
    pub remote_ip: [u8; 4],
    /// Our address (destination of received packets).
    pub local_ip: [u8; 4],
    /// The peer's port.
    pub remote_port: u16,
    /// Our port.
    pub local_port: u16,
}
