//! A TCP segment as the layers hand it to each other, without payload
//! bytes: received ([`RxSegment`], what the datapath gives a transport
//! after placing the payload) and to send ([`TxSegment`], what a transport
//! asks the datapath's TX builder for).

use core::ops::Range;

use crate::{Ecn, TcpHeader};

/// A received segment after the datapath placed its payload. Segments
/// whose checksum failed never get this far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxSegment {
    /// The TCP header.
    pub header: TcpHeader,
    /// Payload length on the wire.
    pub payload_len: u32,
    /// The part of the payload, as receive-stream offsets (offset 0 is the
    /// byte after the peer's SYN), that the datapath wrote into posted
    /// receive memory (or found already there). Empty when nothing was
    /// placed; bytes of the segment outside this range were not kept and
    /// must be treated as not received.
    pub accepted: Range<u64>,
    /// ECN codepoint the segment carried.
    pub ecn: Ecn,
}

/// A segment to send: the TX builder makes the packet from the header and,
/// when `payload` is set, the bytes of the send stream at those offsets
/// (offset 0 is the byte after our SYN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxSegment {
    /// The TCP header: window already scaled down, options sent
    /// zero-padded (EOL) to a multiple of 4 (RFC 9293 §3.2). Its ports are
    /// not read by the datapath: the flow's key supplies them.
    pub header: TcpHeader,
    /// Send-stream offsets of the payload, if any.
    pub payload: Option<Range<u64>>,
    /// ECN codepoint for the IP header.
    pub ecn: Ecn,
}

impl TxSegment {
    /// Payload length in bytes.
    pub fn payload_len(&self) -> u64 {
        self.payload.as_ref().map_or(0, |r| r.end - r.start)
    }
}
