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
    /// 0 for a record of one wire segment. For a record the datapath
    /// coalesced from several consecutive wire segments (software GRO),
    /// the payload length of each of them but the last (which carried at
    /// most this many bytes): the receiver's segment-size estimate and its
    /// "ACK every second full-sized segment" rule count wire segments.
    pub segment_size: u32,
}

impl RxSegment {
    /// Payload length of the largest wire segment this record stands for.
    pub fn wire_segment_len(&self) -> u32 {
        if self.segment_size == 0 {
            self.payload_len
        } else {
            self.segment_size.min(self.payload_len)
        }
    }

    /// Number of wire segments this record stands for (1 unless coalesced).
    pub fn wire_segments(&self) -> u32 {
        match self.wire_segment_len() {
            0 => 1,
            size => self.payload_len.div_ceil(size),
        }
    }
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
