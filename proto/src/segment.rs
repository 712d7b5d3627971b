//! A TCP segment as the layers hand it to each other, without payload
//! bytes: received ([`RxSegment`], what the datapath gives a transport
//! after placing the payload) and to send ([`TxSegment`], what a transport
//! asks the datapath's TX builder for).

use core::ops::Range;

use crate::{Ecn, Flags, TcpHeader};

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
    /// 0 for one wire segment. Otherwise a super-segment (software TSO):
    /// the datapath cuts the payload into wire segments of this many bytes
    /// (the last may be shorter), see [`TxSegment::slices`].
    pub segment_size: u32,
}

impl TxSegment {
    /// Payload length in bytes.
    pub fn payload_len(&self) -> u64 {
        self.payload.as_ref().map_or(0, |r| r.end - r.start)
    }

    /// Number of wire segments this segment stands for (1 unless it is a
    /// super-segment longer than its `segment_size`).
    pub fn wire_segments(&self) -> u32 {
        let len = self.payload_len();
        if self.segment_size == 0 || len <= u64::from(self.segment_size) {
            1
        } else {
            u32::try_from(len.div_ceil(u64::from(self.segment_size))).unwrap_or(u32::MAX)
        }
    }

    /// The wire segments, in order (software TSO, as RFC 9293 3.7.4 lets a
    /// sender packetize): slice `k` carries the payload bytes from
    /// `k × segment_size`, its sequence number advanced by as many, the
    /// same ACK, window, options and ECN codepoint; CWR only on the first
    /// (RFC 3168 6.1.2: once per window reduction), PSH and FIN only on
    /// the last. A segment that is not a super-segment is its one slice.
    pub fn slices(&self) -> impl Iterator<Item = TxSegment> + '_ {
        let n = self.wire_segments();
        let size = u64::from(self.segment_size);
        (0..n).map(move |k| {
            if n == 1 {
                return TxSegment {
                    segment_size: 0,
                    ..self.clone()
                };
            }
            let mut flags = self.header.flags;
            if k > 0 {
                flags = flags.without(Flags::CWR);
            }
            if k + 1 < n {
                flags = flags.without(Flags::PSH.with(Flags::FIN));
            }
            let offset = u64::from(k) * size;
            let payload = self.payload.as_ref().map(|r| {
                let start = r.start + offset;
                start..r.end.min(start + size)
            });
            TxSegment {
                header: TcpHeader {
                    urgent: 0,
                    seq: self.header.seq.wrapping_add(offset as u32),
                    flags,
                    ..self.header
                },
                payload,
                ecn: self.ecn,
                segment_size: 0,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superseg(payload: Range<u64>, size: u32, flags: Flags) -> TxSegment {
        TxSegment {
            header: TcpHeader {
                urgent: 0,
                seq: u32::MAX - 100,
                ack: 7,
                flags,
                window: 99,
                ..TcpHeader::default()
            },
            payload: Some(payload),
            ecn: Ecn::Ect0,
            segment_size: size,
        }
    }

    #[test]
    fn slices_cover_the_payload_with_flags_on_the_right_ends() {
        let all = Flags::ACK | Flags::PSH | Flags::FIN | Flags::CWR | Flags::ECE;
        let s = superseg(1000..4500, 1000, all);
        assert_eq!(s.wire_segments(), 4);
        let slices: Vec<_> = s.slices().collect();
        assert_eq!(slices.len(), 4);
        let mut next = 1000;
        for (k, sl) in slices.iter().enumerate() {
            let r = sl.payload.clone().expect("payload");
            assert_eq!(r.start, next);
            next = r.end;
            assert_eq!(
                sl.header.seq,
                (u32::MAX - 100).wrapping_add(k as u32 * 1000)
            );
            assert_eq!(sl.header.ack, 7);
            assert_eq!(sl.header.window, 99);
            assert_eq!(sl.ecn, Ecn::Ect0);
            assert_eq!(sl.segment_size, 0);
            assert!(sl.header.flags.contains(Flags::ACK | Flags::ECE));
            assert_eq!(sl.header.flags.contains(Flags::CWR), k == 0);
            assert_eq!(sl.header.flags.contains(Flags::PSH), k == 3);
            assert_eq!(sl.header.flags.contains(Flags::FIN), k == 3);
        }
        assert_eq!(next, 4500);
        assert_eq!(slices[3].payload_len(), 500);
    }

    #[test]
    fn a_segment_within_its_size_is_its_one_slice() {
        for (payload, size) in [(0..1000, 1000), (0..10, 0), (5..6, 1000)] {
            let s = superseg(payload, size, Flags::ACK | Flags::PSH);
            assert_eq!(s.wire_segments(), 1);
            let one: Vec<_> = s.slices().collect();
            assert_eq!(
                one,
                vec![TxSegment {
                    segment_size: 0,
                    ..s.clone()
                }]
            );
        }
    }
}
