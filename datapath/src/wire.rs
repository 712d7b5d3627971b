//! Frame parsing for the RX path: Ethernet II / IPv4 or IPv6 / TCP or UDP,
//! through `smoltcp::wire`'s checked views (IPv6's fixed header by its
//! offsets), into a small `Copy` record.
//!
//! [`parse_head`] parses a multi-buffer frame from its first fragment alone
//! (headers always lie there), checking lengths against the whole frame;
//! [`parse`] is the one-piece case of it.
//!
//! The IPv4 header checksum is verified here; the TCP checksum is not,
//! because it covers the payload and is verified during placement, fused with
//! the one copy ([`crate::placement`]). The record carries the partial sum of
//! the pseudo-header and the TCP header for that purpose. Trailing Ethernet
//! padding after the IPv4 total length (the IPv6 payload length) is
//! ignored. An IPv6 packet is taken when TCP or UDP follows its fixed
//! header; extension headers (hop-by-hop, routing, fragment, destination
//! options, ...) are refused and counted, as are IPv6 jumbograms and
//! addresses that must not appear on the wire (a v4-mapped or multicast
//! source, RFC 4291 §2.5.5.2 and §2.7).

use std::net::{IpAddr, Ipv6Addr};

use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket,
};

use crate::checksum::{self, ChecksumCheck, ChecksumPolicy, Partial};

pub use proto::{Ecn, FlowKey, ETH_HEADER_LEN};
use proto::{Flags, TcpHeader, TCP_MIN_HEADER_LEN};

/// Smallest IPv4 header (IHL 5, RFC 791 §3.1).
const IPV4_MIN_HEADER_LEN: usize = 20;

/// The IPv6 fixed header (RFC 8200 §3).
pub const IPV6_HEADER_LEN: usize = 40;

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
    /// IPv4 identification field (0 for IPv6).
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
    /// Neither IPv4 nor IPv6.
    #[error("ethertype {ethertype:#06x} is not IPv4 or IPv6")]
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
    /// The version nibble does not match the ethertype.
    #[error("IP version {version} in an IPv{expected} ethertype frame")]
    BadIpVersion {
        /// Version nibble.
        version: u8,
        /// The ethertype's (4 or 6).
        expected: u8,
    },
    /// IPv6 payload length inconsistent with the frame, or 0 (a jumbogram,
    /// RFC 2675, which needs a hop-by-hop option).
    #[error("IPv6 payload length does not fit a {len}-byte frame")]
    MalformedIpv6 {
        /// Frame length.
        len: usize,
    },
    /// An IPv6 extension header (or another next header than TCP and UDP
    /// that is one) follows the fixed header: not walked.
    #[error("IPv6 extension header {next_header} is not handled")]
    Ipv6ExtensionHeader {
        /// The fixed header's next-header field.
        next_header: u8,
    },
    /// An IPv6 address that must not appear on the wire: a v4-mapped,
    /// multicast or unspecified source, or a v4-mapped destination.
    #[error("IPv6 address {addr} must not appear on the wire")]
    BadIpv6Address {
        /// The address.
        addr: Ipv6Addr,
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
    let ip = match eth.ethertype() {
        EthernetProtocol::Ipv6 => ipv6(head, frame_len)?,
        _ => ipv4(head, frame_len)?,
    };
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

/// The Ethernet header of an IPv4 or IPv6 frame.
fn ethernet(head: &[u8], frame_len: usize) -> Result<EthernetFrame<&[u8]>, WireError> {
    if frame_len < ETH_HEADER_LEN {
        return Err(WireError::TruncatedEthernet { len: frame_len });
    }
    if head.len() < ETH_HEADER_LEN {
        return Err(split(head, ETH_HEADER_LEN));
    }
    let eth = EthernetFrame::new_unchecked(&head[..ETH_HEADER_LEN]);
    match eth.ethertype() {
        EthernetProtocol::Ipv4 | EthernetProtocol::Ipv6 => Ok(eth),
        other => Err(WireError::NotIp {
            ethertype: u16::from(other),
        }),
    }
}

/// What the IP header (either family) says about the transport segment
/// behind it.
struct IpHead {
    src: IpAddr,
    dst: IpAddr,
    ecn: Ecn,
    /// IPv4's identification; 0 for IPv6.
    ident: u16,
    protocol: IpProtocol,
    /// IP header plus data, without Ethernet padding.
    total_len: usize,
    /// Where the transport header starts in the frame.
    l4_offset: usize,
    /// Bytes of the transport segment.
    l4_len: usize,
}

/// Checks the IPv4 header (version, lengths, checksum, no fragment).
fn ipv4(head: &[u8], frame_len: usize) -> Result<IpHead, WireError> {
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
            return Err(WireError::BadIpVersion {
                version: b >> 4,
                expected: 4,
            });
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
    Ok(IpHead {
        src: ip.src_addr().into(),
        dst: ip.dst_addr().into(),
        ecn: Ecn::from_bits(ip.ecn()),
        ident: ip.ident(),
        protocol: ip.next_header(),
        total_len,
        l4_offset: ETH_HEADER_LEN + ip_header_len,
        l4_len: total_len - ip_header_len,
    })
}

/// Checks the IPv6 fixed header (version, payload length, addresses) and
/// that TCP or UDP follows it.
fn ipv6(head: &[u8], frame_len: usize) -> Result<IpHead, WireError> {
    let ip_head = &head[ETH_HEADER_LEN..];
    let ip_len = frame_len - ETH_HEADER_LEN;
    if ip_len > 0 {
        let Some(&b) = ip_head.first() else {
            return Err(split(head, ETH_HEADER_LEN + 1));
        };
        if b >> 4 != 6 {
            return Err(WireError::BadIpVersion {
                version: b >> 4,
                expected: 6,
            });
        }
    }
    let malformed = WireError::MalformedIpv6 { len: frame_len };
    if ip_len < IPV6_HEADER_LEN {
        return Err(malformed);
    }
    let Some(h) = ip_head.get(..IPV6_HEADER_LEN) else {
        return Err(split(head, ETH_HEADER_LEN + IPV6_HEADER_LEN));
    };
    // RFC 8200 §3: the payload length counts what follows the fixed
    // header; padding may follow it. 0 is a jumbogram's (RFC 2675).
    let payload_len = usize::from(u16::from_be_bytes([h[4], h[5]]));
    if payload_len == 0 || IPV6_HEADER_LEN + payload_len > ip_len {
        return Err(malformed);
    }
    let next_header = h[6];
    let protocol = match next_header {
        6 => IpProtocol::Tcp,
        17 => IpProtocol::Udp,
        // Hop-by-hop, routing, fragment, ESP, AH, destination options,
        // mobility, HIP, shim6, and the two experimental numbers (RFC
        // 8200 §4, IANA's IPv6 extension header types).
        0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254 => {
            return Err(WireError::Ipv6ExtensionHeader { next_header });
        }
        other => {
            return Err(WireError::UnsupportedProtocol { protocol: other });
        }
    };
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&h[at..at + 16]);
        Ipv6Addr::from(a)
    };
    let (src, dst) = (addr(8), addr(24));
    // RFC 4291 §2.5.5.2: v4-mapped addresses are not used on the wire;
    // §2.7: a multicast address is never a source; §2.5.3: `::1` never
    // leaves a node; and a TCP peer is never `::`.
    for (bad, a) in [
        (
            src.to_ipv4_mapped().is_some()
                || src.is_multicast()
                || src.is_unspecified()
                || src.is_loopback(),
            src,
        ),
        (dst.to_ipv4_mapped().is_some(), dst),
    ] {
        if bad {
            return Err(WireError::BadIpv6Address { addr: a });
        }
    }
    // Traffic class: DSCP in its upper six bits, ECN in its lower two.
    let traffic_class = (h[0] & 0x0f) << 4 | h[1] >> 4;
    Ok(IpHead {
        src: src.into(),
        dst: dst.into(),
        ecn: Ecn::from_bits(traffic_class & 0b11),
        ident: 0,
        protocol,
        total_len: IPV6_HEADER_LEN + payload_len,
        l4_offset: ETH_HEADER_LEN + IPV6_HEADER_LEN,
        l4_len: payload_len,
    })
}

/// The TCP header; `l4` is the part of the segment inside the head.
fn tcp(
    head: &[u8],
    eth: &EthernetFrame<&[u8]>,
    ip: &IpHead,
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
    let pseudo = checksum::pseudo_header(ip.src, ip.dst, 6, l4_len);
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
    let pseudo = checksum::pseudo_header(seg.key.remote_ip, seg.key.local_ip, 6, l4_len);
    let sum = pseudo.then(checksum::sum(&frame[l4_start..l4_start + l4_len]));
    frame[field..field + 2].copy_from_slice(&sum.checksum().to_be_bytes());
    true
}

/// The UDP header, and the checksum when the datagram lies in the head.
fn udp(head: &[u8], ip: &IpHead, l4: &[u8]) -> Result<ParsedDatagram, WireError> {
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
    // A zero checksum field means "no checksum" over IPv4 (RFC 768); over
    // IPv6 the checksum is mandatory and such a datagram is discarded
    // (RFC 8200 §8.1).
    let checksum_ok = if field == 0 {
        ip.src.is_ipv4()
    } else {
        let Some(datagram) = l4.get(..udp_len) else {
            return Err(split(head, l4_offset + udp_len));
        };
        checksum::pseudo_header(ip.src, ip.dst, 17, udp_len)
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
mod tests;
