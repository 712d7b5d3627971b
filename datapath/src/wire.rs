//! Frame parsing for the RX path: Ethernet II / IPv4 / TCP or UDP, through
//! `smoltcp::wire`'s checked views, into a small `Copy` record.
//!
//! [`parse_head`] parses a multi-buffer frame from its first fragment alone
//! (headers always lie there), checking lengths against the whole frame;
//! [`parse`] is the one-piece case of it.
//!
//! The IPv4 header checksum is verified here; the TCP checksum is not,
//! because it covers the payload and is verified during placement, fused with
//! the one copy ([`crate::placement`]). The record carries the partial sum of
//! the pseudo-header and the TCP header for that purpose. Trailing Ethernet
//! padding after the IPv4 total length is ignored. IPv6 is recognised and
//! refused as unsupported.

use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket,
};

use crate::checksum::{self, ChecksumCheck, ChecksumPolicy, Partial};

pub use proto::{Ecn, FlowKey, ETH_HEADER_LEN};
use proto::{Flags, TcpHeader, TCP_MIN_HEADER_LEN};

/// Smallest IPv4 header (IHL 5, RFC 791 §3.1).
const IPV4_MIN_HEADER_LEN: usize = 20;

/// UDP header length (RFC 768).
const UDP_HEADER_LEN: usize = 8;

/// A parsed TCP segment: everything the transport needs except the payload,
/// plus where the payload lies in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedSegment {
    /// Flow 5-tuple from our side.
    pub key: FlowKey,
    /// Source MAC (the peer or its router).
    pub src_mac: [u8; 6],
    /// Destination MAC (ours).
    pub dst_mac: [u8; 6],
    /// The TCP header, options included.
    pub header: TcpHeader,
    /// TCP header length in bytes (data offset × 4).
    pub header_len: u8,
    /// Offset of the payload inside the frame.
    pub payload_offset: u32,
    /// Payload length in bytes (padding excluded).
    pub payload_len: u32,
    /// ECN codepoint of the IP header.
    pub ecn: Ecn,
    /// IPv4 identification field.
    pub ip_id: u16,
    /// Checksum partial of the pseudo-header plus the TCP header (checksum
    /// field included); adding the payload's sum must give all ones.
    pub header_sum: Partial,
    /// Whether the checksum field holds exactly the pseudo-header partial
    /// sum: what a Linux sender with TX checksum offload leaves for its
    /// NIC to finish (see [`ChecksumPolicy`]).
    pub pseudo_only_checksum: bool,
}

impl ParsedSegment {
    /// Whether every bit in `f` is set.
    pub const fn has(&self, f: Flags) -> bool {
        self.header.has(f)
    }

    /// The payload range inside the frame.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        let start = self.payload_offset as usize;
        start..start + self.payload_len as usize
    }

    /// Judges the TCP checksum under `policy`, given the partial sum of the
    /// whole payload.
    pub fn check_checksum(&self, payload: Partial, policy: ChecksumPolicy) -> ChecksumCheck {
        policy.judge(self.header_sum.then(payload), self.pseudo_only_checksum)
    }
}

/// A parsed UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedDatagram {
    /// Flow 5-tuple from our side.
    pub key: FlowKey,
    /// Offset of the payload inside the frame.
    pub payload_offset: u32,
    /// Payload length in bytes.
    pub payload_len: u32,
    /// Whether the UDP checksum verified (or was absent, RFC 768).
    pub checksum_ok: bool,
    /// ECN codepoint of the IP header.
    pub ecn: Ecn,
}

/// What a frame turned out to carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A TCP segment.
    Tcp(ParsedSegment),
    /// A UDP datagram.
    Udp(ParsedDatagram),
}

/// Why a frame was not parsed. Every variant is counted
/// ([`crate::counters::RxCounters::count_parse_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than an Ethernet header.
    #[error("frame of {len} bytes is shorter than an Ethernet header")]
    TruncatedEthernet {
        /// Frame length.
        len: usize,
    },
    /// An IPv6 frame: recognised, not supported.
    #[error("IPv6 frame: not supported")]
    Ipv6Unsupported,
    /// Neither IPv4 nor IPv6.
    #[error("ethertype {ethertype:#06x} is not IPv4")]
    NotIp {
        /// The ethertype field.
        ethertype: u16,
    },
    /// IPv4 header or total length inconsistent with the frame.
    #[error("IPv4 header/total length does not fit a {len}-byte frame")]
    MalformedIpv4 {
        /// Frame length.
        len: usize,
    },
    /// The version nibble is not 4.
    #[error("IP version {version} in an IPv4 ethertype frame")]
    BadIpVersion {
        /// Version nibble.
        version: u8,
    },
    /// The IPv4 header checksum failed.
    #[error("IPv4 header checksum {found:#06x} does not verify")]
    BadIpChecksum {
        /// The checksum field as received.
        found: u16,
    },
    /// A fragment (more-fragments set or nonzero offset): not reassembled.
    #[error("IPv4 fragment (offset {offset}), not reassembled")]
    Fragment {
        /// Fragment offset in bytes.
        offset: u16,
    },
    /// Neither TCP nor UDP.
    #[error("IP protocol {protocol} is not TCP or UDP")]
    UnsupportedProtocol {
        /// The protocol field.
        protocol: u8,
    },
    /// The TCP data offset is below 5 words or points past the IP payload.
    #[error("TCP data offset does not fit a {len}-byte IP payload")]
    MalformedTcp {
        /// IP payload length.
        len: usize,
    },
    /// The UDP length field is inconsistent with the IP payload.
    #[error("UDP length does not fit a {len}-byte IP payload")]
    MalformedUdp {
        /// IP payload length.
        len: usize,
    },
    /// The lengths fit the frame, but the headers (or, for UDP with a
    /// checksum, the whole datagram) run past the first fragment of a
    /// multi-buffer frame ([`parse_head`]).
    #[error("headers need the first {needed} bytes but the first fragment holds {head}")]
    SplitHeaders {
        /// Bytes in the first fragment.
        head: usize,
        /// Bytes of the frame the headers need.
        needed: usize,
    },
}

/// Parses one frame held in one contiguous slice.
///
/// The same checks as [`parse_head`] with the whole frame as its head.
///
/// # Errors
/// A [`WireError`] naming the first problem found.
pub fn parse(frame: &[u8]) -> Result<Parsed, WireError> {
    parse_head(frame, frame.len())
}

/// Parses a frame of `frame_len` bytes of which only the first piece,
/// `head`, is at hand: the first fragment of a multi-buffer (`XDP_PKT_CONTD`)
/// packet. Headers must lie inside `head` (AF_XDP frames are at least 2048
/// bytes and Ethernet + IPv4 + TCP headers at most 14 + 60 + 60); lengths
/// are checked against `frame_len` exactly as [`parse`] checks them against
/// a whole frame. A `head` longer than `frame_len` is cut to `frame_len`.
///
/// The TCP payload may run on past `head`; [`ParsedSegment::payload_range`]
/// is relative to the start of the whole frame. A UDP datagram whose
/// checksum field is set is only verified when it lies wholly in `head`;
/// otherwise [`WireError::SplitHeaders`] is returned (the TCP datapath
/// drops UDP anyway).
///
/// # Errors
/// A [`WireError`] naming the first problem found;
/// [`WireError::SplitHeaders`] when the lengths are consistent with
/// `frame_len` but a header does not lie inside `head`.
pub fn parse_head(head: &[u8], frame_len: usize) -> Result<Parsed, WireError> {
    let head = &head[..head.len().min(frame_len)];
    let eth = ethernet(head, frame_len)?;
    let ip = ipv4(head, frame_len)?;
    // The transport segment stops at the total length: Ethernet padding is
    // ignored. `l4` is the part of it inside the head.
    let l4 = &head[ip.l4_offset..head.len().min(ETH_HEADER_LEN + ip.total_len)];
    match ip.protocol {
        IpProtocol::Tcp => tcp(head, &eth, &ip, l4).map(Parsed::Tcp),
        IpProtocol::Udp => udp(head, &ip, l4).map(Parsed::Udp),
        other => Err(WireError::UnsupportedProtocol {
            protocol: u8::from(other),
        }),
    }
}

/// The headers end at `needed`, past the first fragment `head`.
fn split(head: &[u8], needed: usize) -> WireError {
    WireError::SplitHeaders {
        head: head.len(),
        needed,
    }
}

/// The Ethernet header of an IPv4 frame.
fn ethernet(head: &[u8], frame_len: usize) -> Result<EthernetFrame<&[u8]>, WireError> {
    if frame_len < ETH_HEADER_LEN {
        return Err(WireError::TruncatedEthernet { len: frame_len });
    }
    if head.len() < ETH_HEADER_LEN {
        return Err(split(head, ETH_HEADER_LEN));
    }
    let eth = EthernetFrame::new_unchecked(&head[..ETH_HEADER_LEN]);
    match eth.ethertype() {
        EthernetProtocol::Ipv4 => Ok(eth),
        EthernetProtocol::Ipv6 => Err(WireError::Ipv6Unsupported),
        other => Err(WireError::NotIp {
            ethertype: u16::from(other),
        }),
    }
}

/// What the IPv4 header says about the transport segment behind it.
struct Ipv4Head {
    src: [u8; 4],
    dst: [u8; 4],
    ecn: Ecn,
    ident: u16,
    protocol: IpProtocol,
    /// Header plus data, without Ethernet padding.
    total_len: usize,
    /// Where the transport header starts in the frame.
    l4_offset: usize,
    /// Bytes of the transport segment.
    l4_len: usize,
}

/// Checks the IPv4 header (version, lengths, checksum, no fragment).
fn ipv4(head: &[u8], frame_len: usize) -> Result<Ipv4Head, WireError> {
    let ip_head = &head[ETH_HEADER_LEN..];
    // Length of the IP datagram plus any padding, from the frame.
    let ip_len = frame_len - ETH_HEADER_LEN;
    // Check the version before the lengths: a v6 packet behind a v4
    // ethertype would otherwise be reported as a length problem.
    if ip_len > 0 {
        let Some(&b) = ip_head.first() else {
            return Err(split(head, ETH_HEADER_LEN + 1));
        };
        if b >> 4 != 4 {
            return Err(WireError::BadIpVersion { version: b >> 4 });
        }
    }
    // RFC 791 §3.1: IHL counts 32-bit words, at least 5; total length
    // covers header and data and must fit the frame (padding may follow).
    let malformed_ip = WireError::MalformedIpv4 { len: frame_len };
    if ip_len < IPV4_MIN_HEADER_LEN {
        return Err(malformed_ip);
    }
    if ip_head.len() < IPV4_MIN_HEADER_LEN {
        return Err(split(head, ETH_HEADER_LEN + IPV4_MIN_HEADER_LEN));
    }
    let ip = Ipv4Packet::new_unchecked(ip_head);
    let ip_header_len = usize::from(ip.header_len());
    let total_len = usize::from(ip.total_len());
    if ip_header_len < IPV4_MIN_HEADER_LEN || ip_header_len > total_len || total_len > ip_len {
        return Err(malformed_ip);
    }
    if ip_head.len() < ip_header_len {
        return Err(split(head, ETH_HEADER_LEN + ip_header_len));
    }
    // A view of the header alone: nothing below may read past it.
    let ip = Ipv4Packet::new_unchecked(&ip_head[..ip_header_len]);
    if !ip.verify_checksum() {
        return Err(WireError::BadIpChecksum {
            found: ip.checksum(),
        });
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Err(WireError::Fragment {
            offset: ip.frag_offset(),
        });
    }
    Ok(Ipv4Head {
        src: ip.src_addr().octets(),
        dst: ip.dst_addr().octets(),
        ecn: Ecn::from_bits(ip.ecn()),
        ident: ip.ident(),
        protocol: ip.next_header(),
        total_len,
        l4_offset: ETH_HEADER_LEN + ip_header_len,
        l4_len: total_len - ip_header_len,
    })
}

/// The TCP header; `l4` is the part of the segment inside the head.
fn tcp(
    head: &[u8],
    eth: &EthernetFrame<&[u8]>,
    ip: &Ipv4Head,
    l4: &[u8],
) -> Result<ParsedSegment, WireError> {
    let (l4_len, l4_offset) = (ip.l4_len, ip.l4_offset);
    // RFC 9293 §3.1: data offset counts 32-bit words, at least 5,
    // and may not point past the segment.
    let malformed = WireError::MalformedTcp { len: l4_len };
    if l4_len < TCP_MIN_HEADER_LEN {
        return Err(malformed);
    }
    if l4.len() < TCP_MIN_HEADER_LEN {
        return Err(split(head, l4_offset + TCP_MIN_HEADER_LEN));
    }
    let header_len = usize::from(TcpPacket::new_unchecked(l4).header_len());
    if header_len < TCP_MIN_HEADER_LEN || header_len > l4_len {
        return Err(malformed);
    }
    if l4.len() < header_len {
        return Err(split(head, l4_offset + header_len));
    }
    let header = &l4[..header_len];
    let tcp = TcpPacket::new_unchecked(header);
    let pseudo = checksum::ipv4_pseudo_header(ip.src, ip.dst, 6, l4_len as u16);
    let header_sum = pseudo.then(checksum::sum(header));
    let pseudo_only_checksum = tcp.checksum() == pseudo.sum();
    Ok(ParsedSegment {
        key: FlowKey {
            remote_ip: ip.src,
            local_ip: ip.dst,
            remote_port: tcp.src_port(),
            local_port: tcp.dst_port(),
        },
        src_mac: eth.src_addr().0,
        dst_mac: eth.dst_addr().0,
        header: TcpHeader::parse(&tcp),
        header_len: header_len as u8,
        payload_offset: (l4_offset + header_len) as u32,
        payload_len: (l4_len - header_len) as u32,
        ecn: ip.ecn,
        ip_id: ip.ident,
        header_sum,
        pseudo_only_checksum,
    })
}

/// Whether `frame` is a TCP segment whose checksum field holds only the
/// pseudo-header sum (header-only look: the payload is not summed).
pub fn has_partial_checksum(frame: &[u8]) -> bool {
    matches!(parse(frame), Ok(Parsed::Tcp(seg)) if seg.pseudo_only_checksum)
}

/// If `frame` is a TCP segment whose checksum a veth left partial (the
/// field holds only the pseudo-header sum, [`ChecksumPolicy`]), finishes
/// the checksum in place, so a transport that verifies checksums itself
/// (smoltcp) sees what a NIC would have delivered. Returns whether it did;
/// any other frame, verified or bad, is left as it is.
pub fn finish_partial_checksum(frame: &mut [u8]) -> bool {
    let Ok(Parsed::Tcp(seg)) = parse(frame) else {
        return false;
    };
    let payload = checksum::sum(&frame[seg.payload_range()]);
    if seg.check_checksum(payload, ChecksumPolicy::AcceptPartial) != ChecksumCheck::Partial {
        return false;
    }
    let l4_start = seg.payload_offset as usize - usize::from(seg.header_len);
    let field = l4_start + 16;
    frame[field..field + 2].fill(0);
    let l4_len = usize::from(seg.header_len) + seg.payload_len as usize;
    let pseudo =
        checksum::ipv4_pseudo_header(seg.key.remote_ip, seg.key.local_ip, 6, l4_len as u16);
    let sum = pseudo.then(checksum::sum(&frame[l4_start..l4_start + l4_len]));
    frame[field..field + 2].copy_from_slice(&sum.checksum().to_be_bytes());
    true
}

/// The UDP header, and the checksum when the datagram lies in the head.
fn udp(head: &[u8], ip: &Ipv4Head, l4: &[u8]) -> Result<ParsedDatagram, WireError> {
    let (l4_len, l4_offset) = (ip.l4_len, ip.l4_offset);
    // RFC 768: the length field covers header and data.
    let malformed = WireError::MalformedUdp { len: l4_len };
    if l4_len < UDP_HEADER_LEN {
        return Err(malformed);
    }
    if l4.len() < UDP_HEADER_LEN {
        return Err(split(head, l4_offset + UDP_HEADER_LEN));
    }
    let udp = UdpPacket::new_unchecked(&l4[..UDP_HEADER_LEN]);
    let udp_len = usize::from(udp.len());
    if udp_len < UDP_HEADER_LEN || udp_len > l4_len {
        return Err(malformed);
    }
    let field = u16::from_be_bytes([l4[6], l4[7]]);
    // A zero checksum field means "no checksum" (RFC 768).
    let checksum_ok = if field == 0 {
        true
    } else {
        let Some(datagram) = l4.get(..udp_len) else {
            return Err(split(head, l4_offset + udp_len));
        };
        checksum::ipv4_pseudo_header(ip.src, ip.dst, 17, udp_len as u16)
            .then(checksum::sum(datagram))
            .verifies()
    };
    Ok(ParsedDatagram {
        key: FlowKey {
            remote_ip: ip.src,
            local_ip: ip.dst,
            remote_port: udp.src_port(),
            local_port: udp.dst_port(),
        },
        payload_offset: (l4_offset + UDP_HEADER_LEN) as u32,
        payload_len: (udp_len - UDP_HEADER_LEN) as u32,
        checksum_ok,
        ecn: ip.ecn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 + TCP (ACK|PSH, 5 payload bytes "hello") from
    /// 198.18.0.1:41234 to 198.18.0.2:5201, with 3 bytes of Ethernet padding
    /// after the IP datagram. IP checksum 0x9c6d and TCP checksum 0x2465
    /// were computed independently (Python RFC 1071).
    pub(crate) const DATA: [u8; 62] = [
        // Ethernet: dst 02:00:00:00:00:02, src 02:00:00:00:00:01, IPv4
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
        // IPv4: total 45, id 0x1234, DF, TTL 64, TCP, ECT(0)
        0x45, 0x02, 0x00, 0x2d, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x9c, 0x6d, 0xc6, 0x12, 0x00,
        0x01, 0xc6, 0x12, 0x00, 0x02,
        // TCP: ports, seq 0xfffffffe, ack 0x01020304, doff 5, ACK|PSH, win 512
        0xa1, 0x12, 0x14, 0x51, 0xff, 0xff, 0xff, 0xfe, 0x01, 0x02, 0x03, 0x04, 0x50, 0x18, 0x02,
        0x00, 0x24, 0x65, 0x00, 0x00, // payload
        b'h', b'e', b'l', b'l', b'o', // padding
        0x00, 0x00, 0x00,
    ];

    fn tcp(frame: &[u8]) -> ParsedSegment {
        match parse(frame) {
            Ok(Parsed::Tcp(s)) => s,
            other => panic!("expected TCP, got {other:?}"),
        }
    }

    #[test]
    fn parses_tcp_fixture_ignoring_padding() {
        let s = tcp(&DATA);
        assert_eq!(s.key.remote_ip, [198, 18, 0, 1]);
        assert_eq!(s.key.local_ip, [198, 18, 0, 2]);
        assert_eq!(s.key.remote_port, 41234);
        assert_eq!(s.key.local_port, 5201);
        assert_eq!(s.header.seq, 0xffff_fffe);
        assert_eq!(s.header.ack, 0x0102_0304);
        assert!(s.has(Flags::ACK | Flags::PSH));
        assert!(!s.has(Flags::SYN));
        assert_eq!(s.header.window, 512);
        assert_eq!(s.header_len, 20);
        assert!(s.header.options.is_empty());
        assert_eq!(s.ecn, Ecn::Ect0);
        assert_eq!(s.ip_id, 0x1234);
        assert_eq!(&DATA[s.payload_range()], b"hello");
        assert_eq!(s.src_mac, [2, 0, 0, 0, 0, 1]);
        let full = s.header_sum.then(checksum::sum(&DATA[s.payload_range()]));
        assert!(full.verifies(), "TCP checksum must verify");
    }

    #[test]
    fn a_partial_checksum_is_recognised_and_finished() {
        // The fixture as a Linux sender with TX checksum offload hands it
        // to a veth: the field holds the pseudo-header sum 0x8c47
        // (computed independently, Python RFC 1071).
        let mut f = DATA;
        f[50..52].copy_from_slice(&0x8c47u16.to_be_bytes());
        let s = tcp(&f);
        assert!(s.pseudo_only_checksum);
        let payload = checksum::sum(&f[s.payload_range()]);
        assert_eq!(
            s.check_checksum(payload, ChecksumPolicy::Verify),
            ChecksumCheck::Bad
        );
        assert_eq!(
            s.check_checksum(payload, ChecksumPolicy::AcceptPartial),
            ChecksumCheck::Partial
        );
        assert!(has_partial_checksum(&f));
        assert!(finish_partial_checksum(&mut f));
        assert_eq!(f, DATA, "finished to the independently computed 0x2465");
        // A finished or a plainly wrong checksum is left alone.
        assert!(!has_partial_checksum(&DATA));
        assert!(!finish_partial_checksum(&mut f));
        f[50] ^= 1;
        let wrong = f;
        assert!(!finish_partial_checksum(&mut f));
        assert_eq!(f, wrong);
        assert_eq!(
            tcp(&f).check_checksum(payload, ChecksumPolicy::AcceptPartial),
            ChecksumCheck::Bad
        );
    }

    #[test]
    fn rejects_bad_ip_checksum() {
        let mut f = DATA;
        f[24] ^= 0x01;
        assert!(matches!(
            parse(&f),
            Err(WireError::BadIpChecksum { found: 0x9d6d })
        ));
    }

    #[test]
    fn rejects_truncated_and_lying_lengths() {
        assert_eq!(
            parse(&DATA[..10]),
            Err(WireError::TruncatedEthernet { len: 10 })
        );
        // Total length beyond the frame.
        assert!(matches!(
            parse(&DATA[..50]),
            Err(WireError::MalformedIpv4 { .. })
        ));
        // Data offset 15 words (60 bytes) > 25-byte IP payload. Fix the TCP
        // byte only; the IP checksum still verifies.
        let mut f = DATA;
        f[46] = 0xf0;
        assert_eq!(parse(&f), Err(WireError::MalformedTcp { len: 25 }));
        // Data offset below 5 words.
        f[46] = 0x40;
        assert_eq!(parse(&f), Err(WireError::MalformedTcp { len: 25 }));
    }

    #[test]
    fn ipv6_and_other_ethertypes() {
        let mut f = DATA;
        f[12] = 0x86;
        f[13] = 0xdd;
        assert_eq!(parse(&f), Err(WireError::Ipv6Unsupported));
        f[12] = 0x08;
        f[13] = 0x06;
        assert_eq!(parse(&f), Err(WireError::NotIp { ethertype: 0x0806 }));
        let mut v = DATA;
        v[14] = 0x65;
        assert_eq!(parse(&v), Err(WireError::BadIpVersion { version: 6 }));
    }

    #[test]
    fn rejects_fragments_and_other_protocols() {
        let mut f = DATA;
        // Set more-fragments and recompute the IP checksum.
        f[20] = 0x20;
        fix_ip_checksum(&mut f);
        assert_eq!(parse(&f), Err(WireError::Fragment { offset: 0 }));
        let mut p = DATA;
        p[23] = 1; // ICMP
        fix_ip_checksum(&mut p);
        assert_eq!(
            parse(&p),
            Err(WireError::UnsupportedProtocol { protocol: 1 })
        );
    }

    #[test]
    fn parses_udp() {
        // Turn the fixture into UDP: protocol 17, length 13, checksum 0
        // (absent), 5-byte payload right after the 8-byte header.
        let mut f = DATA[..47].to_vec();
        f[17] = 33; // total length 20 + 8 + 5
        f[23] = 17;
        f[38..40].copy_from_slice(&13u16.to_be_bytes());
        f[40..42].copy_from_slice(&[0, 0]);
        f[42..47].copy_from_slice(b"hello");
        fix_ip_checksum(&mut f);
        match parse(&f) {
            Ok(Parsed::Udp(d)) => {
                assert_eq!(d.key.remote_port, 41234);
                assert_eq!(d.payload_offset, 42);
                assert_eq!(d.payload_len, 5);
                assert!(d.checksum_ok);
            }
            other => panic!("expected UDP, got {other:?}"),
        }
        // A nonzero wrong checksum is reported, not hidden.
        f[40] = 0x12;
        match parse(&f) {
            Ok(Parsed::Udp(d)) => assert!(!d.checksum_ok),
            other => panic!("expected UDP, got {other:?}"),
        }
    }

    #[test]
    fn parse_head_reads_headers_from_a_short_first_fragment() {
        // Headers end at byte 54; the payload and padding are elsewhere.
        let whole = parse(&DATA).expect("fixture parses");
        for cut in 54..=DATA.len() {
            assert_eq!(parse_head(&DATA[..cut], DATA.len()), Ok(whole), "cut {cut}");
        }
        let s = tcp(&DATA);
        assert_eq!(s.payload_range(), 54..59, "relative to the whole frame");
        // A head longer than the frame is cut to it.
        let mut long = DATA.to_vec();
        long.extend_from_slice(&[0xab; 100]);
        assert_eq!(parse_head(&long, DATA.len()), Ok(whole));
    }

    #[test]
    fn parse_head_refuses_headers_past_the_head() {
        let n = DATA.len();
        assert_eq!(
            parse_head(&DATA[..10], n),
            Err(WireError::SplitHeaders {
                head: 10,
                needed: 14
            })
        );
        assert_eq!(
            parse_head(&DATA[..14], n),
            Err(WireError::SplitHeaders {
                head: 14,
                needed: 15
            })
        );
        assert_eq!(
            parse_head(&DATA[..20], n),
            Err(WireError::SplitHeaders {
                head: 20,
                needed: 34
            })
        );
        assert_eq!(
            parse_head(&DATA[..40], n),
            Err(WireError::SplitHeaders {
                head: 40,
                needed: 54
            })
        );
        assert_eq!(
            parse_head(&DATA[..53], n),
            Err(WireError::SplitHeaders {
                head: 53,
                needed: 54
            })
        );
        // An empty first fragment.
        assert_eq!(
            parse_head(&[], n),
            Err(WireError::SplitHeaders {
                head: 0,
                needed: 14
            })
        );
    }

    #[test]
    fn parse_head_checks_lengths_against_the_frame_length() {
        // Total length 45 needs a frame of 59; the head alone would do.
        for len in 35..59 {
            assert_eq!(
                parse_head(&DATA[..54], len),
                Err(WireError::MalformedIpv4 { len }),
                "frame_len {len}"
            );
        }
        assert_eq!(
            parse_head(&DATA[..54], 10),
            Err(WireError::TruncatedEthernet { len: 10 })
        );
        assert_eq!(
            parse_head(&DATA[..54], 14),
            Err(WireError::MalformedIpv4 { len: 14 })
        );
        // Length errors are reported even when the headers are split: the
        // data offset (60 bytes) is checked against the 25-byte segment.
        let mut f = DATA;
        f[46] = 0xf0;
        assert_eq!(
            parse_head(&f[..54], f.len()),
            Err(WireError::MalformedTcp { len: 25 })
        );
        // And the IP checksum is verified from the head.
        let mut g = DATA;
        g[24] ^= 0x01;
        assert!(matches!(
            parse_head(&g[..34], g.len()),
            Err(WireError::BadIpChecksum { found: 0x9d6d })
        ));
    }

    #[test]
    fn parse_head_agrees_with_parse_under_any_single_byte_change() {
        // Every header byte, every bit: the head-only parser gives the
        // whole-frame parser's answer unless it needs more of the head.
        for i in 0..54 {
            for bit in 0..8 {
                let mut f = DATA;
                f[i] ^= 1 << bit;
                let whole = parse(&f);
                match parse_head(&f[..54], f.len()) {
                    Err(WireError::SplitHeaders { head, needed }) => {
                        assert_eq!(head, 54);
                        assert!(needed > 54, "byte {i} bit {bit}");
                    }
                    r => assert_eq!(r, whole, "byte {i} bit {bit}"),
                }
            }
        }
    }

    #[test]
    fn parse_head_udp_across_fragments() {
        // A UDP datagram with 105 payload bytes, checksum absent: parsed
        // from its 42-byte head.
        let mut f = DATA[..42].to_vec();
        f.extend_from_slice(&[7u8; 105]);
        f[16..18].copy_from_slice(&133u16.to_be_bytes()); // 20 + 8 + 105
        f[23] = 17;
        f[38..40].copy_from_slice(&113u16.to_be_bytes());
        f[40..42].copy_from_slice(&[0, 0]);
        fix_ip_checksum(&mut f);
        let Ok(Parsed::Udp(d)) = parse_head(&f[..42], f.len()) else {
            panic!("expected UDP");
        };
        assert_eq!((d.payload_offset, d.payload_len), (42, 105));
        assert!(d.checksum_ok);
        // With a checksum set, the body is needed to verify it.
        f[40] = 0x12;
        assert_eq!(
            parse_head(&f[..42], f.len()),
            Err(WireError::SplitHeaders {
                head: 42,
                needed: 147
            })
        );
        assert!(matches!(parse(&f), Ok(Parsed::Udp(_))));
    }

    fn fix_ip_checksum(f: &mut [u8]) {
        f[24] = 0;
        f[25] = 0;
        let c = checksum::sum(&f[14..34]).checksum();
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }
}
