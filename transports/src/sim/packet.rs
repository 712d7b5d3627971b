//! A packet in flight: the header descriptor a transport emitted, the ECN
//! codepoint the path may rewrite, and bookkeeping the simulator needs. No
//! payload bytes: the payload is the send-stream range the segment refers to.

use crate::segment::{Ecn, SegmentOut};
use crate::time::Instant;

/// IPv4 header without options, in bytes.
pub const IPV4_HEADER_LEN: u64 = 20;
/// TCP header without options, in bytes.
pub const TCP_HEADER_LEN: u64 = 20;

/// Which way a packet travels between the two endpoints of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the connecting side (client) to the accepting side (server).
    ToServer,
    /// From the accepting side (server) to the connecting side (client).
    ToClient,
}

/// A segment on the simulated wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Unique per transmission (a duplicate made by the path keeps the id of
    /// the packet it copies).
    pub id: u64,
    /// Index of the connection pair that sent it.
    pub flow: usize,
    /// Which endpoint it is going to.
    pub direction: Direction,
    /// What the transport asked to send.
    pub segment: SegmentOut,
    /// The IP header's ECN codepoint; starts as `segment.ecn`, a marking node
    /// may set it to CE.
    pub ecn: Ecn,
    /// When it left the sending endpoint.
    pub sent: Instant,
}

impl Packet {
    /// Bytes on the wire at the IP layer: IPv4 + TCP headers, TCP options
    /// and payload (no link-layer framing).
    pub fn wire_len(&self) -> u64 {
        IPV4_HEADER_LEN
            + TCP_HEADER_LEN
            + self.segment.header.options.as_slice().len() as u64
            + self.segment.payload_len()
    }

    /// Whether the packet is ECN-capable (ECT(0) or ECT(1)), so a marking
    /// node may set CE instead of dropping it (RFC 3168 5).
    pub fn is_ect(&self) -> bool {
        matches!(self.ecn, Ecn::Ect0 | Ecn::Ect1)
    }
}
