//! The TX builder: turns a header descriptor from the transport plus the
//! send segment list into an Ethernet/IPv4/TCP or Ethernet/IPv6/TCP frame
//! (the flow's family), checksums filled in software.
//!
//! Two strategies (FACTS.md: on copy-mode devices a contiguous frame is
//! faster; chains pay off only in zero-copy mode):
//! - [`build_copy`]: header and payload in one frame; the payload copy is
//!   fused with the TCP checksum.
//! - [`build_chain`]: a header-only frame plus area fragments for an AF_XDP
//!   multi-buffer (`XDP_PKT_CONTD`) chain; the payload is read once for the
//!   checksum and never copied.
//!
//! IPv4 header: version 4, IHL 5, DF set, TTL 64, identification from a
//! per-flow counter (RFC 6864 §4.1 allows any value on atomic datagrams).
//! IPv6 header: the fixed header alone, flow label 0, hop limit 64; the
//! ECN codepoint in the traffic class, DSCP 0 (as IPv4's).

use core::ops::Range;

use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Address, Ipv4Packet,
    TcpPacket,
};

use std::net::IpAddr;

use crate::checksum::{self, Partial};
use crate::flow_table::FlowState;
use crate::wire::{Ecn, ETH_HEADER_LEN, IPV6_HEADER_LEN};
use proto::{Flags, TcpHeader};

/// IPv4 header length we emit (no options).
pub const IPV4_HEADER_LEN: usize = 20;

/// The IP header length a flow's frames carry: IPv4's without options, or
/// IPv6's fixed header.
pub fn ip_header_len(v6: bool) -> usize {
    if v6 {
        IPV6_HEADER_LEN
    } else {
        IPV4_HEADER_LEN
    }
}
/// TTL we emit.
pub const TTL: u8 = 64;
/// Most fragments a chain carries.
pub const MAX_FRAGMENTS: usize = 8;

/// A segment to send, as the transport describes it (the one definition
/// is in `proto`).
pub use proto::TxSegment;

/// Errors from the TX builder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxError {
    /// The payload range is not fully covered by posted send segments.
    #[error(
        "payload {start}..{end} not covered by send segments posted over {floor}..{posted_end}"
    )]
    PayloadNotPosted {
        /// Requested start.
        start: u64,
        /// Requested end.
        end: u64,
        /// Send list floor.
        floor: u64,
        /// Send list posted end.
        posted_end: u64,
    },
    /// The IP datagram would exceed the MTU.
    #[error("IP datagram of {ip_len} bytes exceeds MTU {mtu}")]
    ExceedsMtu {
        /// Datagram length.
        ip_len: usize,
        /// MTU.
        mtu: usize,
    },
    /// The frame buffer is too small.
    #[error("frame needs {needed} bytes, buffer has {have}")]
    FrameTooSmall {
        /// Needed bytes.
        needed: usize,
        /// Buffer length.
        have: usize,
    },
    /// The payload spans more send segments than a chain can carry.
    #[error("payload spans more than {max} fragments")]
    TooManyFragments {
        /// Maximum.
        max: usize,
    },
    /// A send segment's memory lies outside the area given.
    #[error("send memory {start}..{end} outside the {area_len}-byte area")]
    OutsideArea {
        /// Area start.
        start: usize,
        /// Area end.
        end: usize,
        /// Area length.
        area_len: usize,
    },
}

/// A header frame plus payload fragments (area offset, length) to chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// Bytes of headers written at the start of the frame buffer.
    pub header_len: usize,
    /// Fragments in order; the first `count` are used.
    pub fragments: [(usize, usize); MAX_FRAGMENTS],
    /// Number of fragments.
    pub count: usize,
}

impl Chain {
    /// The used fragments.
    pub fn fragments(&self) -> &[(usize, usize)] {
        &self.fragments[..self.count]
    }
}

/// Collects the area ranges of the payload, checking coverage and bounds.
fn payload_parts(
    flow: &FlowState,
    range: &Range<u64>,
    area_len: usize,
) -> Result<([(usize, usize); MAX_FRAGMENTS], usize), TxError> {
    let mut parts = [(0, 0); MAX_FRAGMENTS];
    let mut count = 0;
    let mut covered = range.start;
    for (part, mem) in flow.send.map(range.clone()) {
        if part.start != covered {
            break;
        }
        if mem.end > area_len {
            return Err(TxError::OutsideArea {
                start: mem.start,
                end: mem.end,
                area_len,
            });
        }
        if count == MAX_FRAGMENTS {
            return Err(TxError::TooManyFragments { max: MAX_FRAGMENTS });
        }
        parts[count] = (mem.start, mem.end - mem.start);
        count += 1;
        covered = part.end;
    }
    if covered != range.end || range.start > range.end {
        return Err(TxError::PayloadNotPosted {
            start: range.start,
            end: range.end,
            floor: flow.send.floor(),
            posted_end: flow.send.posted_end(),
        });
    }
    Ok((parts, count))
}

/// Writes Ethernet, IP (the flow's family) and TCP headers (TCP checksum
/// left zero) and returns the header length and the TCP checksum partial
/// of the pseudo header plus TCP header.
fn write_headers(
    flow: &mut FlowState,
    seg: &TxSegment,
    payload_len: usize,
    mtu: usize,
    frame: &mut [u8],
    frame_needs_payload: bool,
) -> Result<(usize, Partial), TxError> {
    let v6 = flow.key.is_ipv6();
    let ip_header_len = ip_header_len(v6);
    let tcp_header_len = seg.header.header_len();
    let ip_len = ip_header_len + tcp_header_len + payload_len;
    if ip_len > mtu || ip_len - if v6 { ip_header_len } else { 0 } > usize::from(u16::MAX) {
        return Err(TxError::ExceedsMtu { ip_len, mtu });
    }
    let header_len = ETH_HEADER_LEN + ip_header_len + tcp_header_len;
    let needed = if frame_needs_payload {
        ETH_HEADER_LEN + ip_len
    } else {
        header_len
    };
    if frame.len() < needed {
        return Err(TxError::FrameTooSmall {
            needed,
            have: frame.len(),
        });
    }

    let mut eth = EthernetFrame::new_unchecked(&mut frame[..ETH_HEADER_LEN]);
    eth.set_dst_addr(EthernetAddress(flow.remote_mac));
    eth.set_src_addr(EthernetAddress(flow.local_mac));
    eth.set_ethertype(if v6 {
        EthernetProtocol::Ipv6
    } else {
        EthernetProtocol::Ipv4
    });
    let ip_buf = &mut frame[ETH_HEADER_LEN..ETH_HEADER_LEN + ip_header_len];
    match (flow.key.local_ip, flow.key.remote_ip) {
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let traffic_class = seg.ecn.bits();
            ip_buf[0] = 0x60 | traffic_class >> 4;
            ip_buf[1] = (traffic_class & 0x0f) << 4;
            ip_buf[2..4].fill(0);
            ip_buf[4..6].copy_from_slice(&((tcp_header_len + payload_len) as u16).to_be_bytes());
            ip_buf[6] = 6;
            ip_buf[7] = TTL;
            ip_buf[8..24].copy_from_slice(&src.octets());
            ip_buf[24..40].copy_from_slice(&dst.octets());
        }
        (src, dst) => {
            let mut ip = Ipv4Packet::new_unchecked(&mut *ip_buf);
            ip.set_version(4);
            ip.set_header_len(IPV4_HEADER_LEN as u8);
            ip.set_dscp(0);
            ip.set_ecn(seg.ecn.bits());
            ip.set_total_len(ip_len as u16);
            ip.set_ident(flow.ip_id);
            ip.clear_flags();
            ip.set_dont_frag(true);
            ip.set_frag_offset(0);
            ip.set_hop_limit(TTL);
            ip.set_next_header(IpProtocol::Tcp);
            ip.set_src_addr(ipv4_of(src));
            ip.set_dst_addr(ipv4_of(dst));
            ip.set_checksum(0);
            let ip_sum = checksum::sum(ip_buf).checksum();
            ip_buf[10..12].copy_from_slice(&ip_sum.to_be_bytes());
            flow.ip_id = flow.ip_id.wrapping_add(1);
        }
    }

    let tcp_start = ETH_HEADER_LEN + ip_header_len;
    let tcp_buf = &mut frame[tcp_start..tcp_start + tcp_header_len];
    let header = TcpHeader {
        urgent: 0,
        src_port: flow.key.local_port,
        dst_port: flow.key.remote_port,
        ..seg.header
    };
    header.emit(&mut TcpPacket::new_unchecked(&mut *tcp_buf));
    let pseudo = checksum::pseudo_header(
        flow.key.local_ip,
        flow.key.remote_ip,
        6,
        tcp_header_len + payload_len,
    );
    Ok((header_len, pseudo.then(checksum::sum(tcp_buf))))
}

/// An IPv4 flow's address (a [`proto::FlowKey`]'s are of one family).
fn ipv4_of(a: IpAddr) -> Ipv4Address {
    match a {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Address::UNSPECIFIED),
    }
}

fn finish_tcp_checksum(frame: &mut [u8], v6: bool, sum: Partial) {
    let at = ETH_HEADER_LEN + ip_header_len(v6) + 16;
    frame[at..at + 2].copy_from_slice(&sum.checksum().to_be_bytes());
}

/// Builds one contiguous frame (headers then payload copied from `area`)
/// into `frame`; returns the frame length. `mtu` bounds the IP datagram.
///
/// # Errors
/// A [`TxError`] naming what does not fit; `flow` is unchanged then.
pub fn build_copy(
    flow: &mut FlowState,
    seg: &TxSegment,
    area: &[u8],
    mtu: usize,
    frame: &mut [u8],
) -> Result<usize, TxError> {
    let (parts, count) = match &seg.payload {
        Some(r) => payload_parts(flow, r, area.len())?,
        None => ([(0, 0); MAX_FRAGMENTS], 0),
    };
    let payload_len: usize = parts[..count].iter().map(|p| p.1).sum();
    let (header_len, mut sum) = write_headers(flow, seg, payload_len, mtu, frame, true)?;
    let mut at = header_len;
    for &(off, len) in &parts[..count] {
        let p = checksum::copy_and_sum(&mut frame[at..at + len], &area[off..off + len])
            .unwrap_or(Partial::EMPTY);
        sum = sum.then(p);
        at += len;
    }
    finish_tcp_checksum(frame, flow.key.is_ipv6(), sum);
    Ok(at)
}

/// Builds a header-only frame into `frame` and returns it with the payload
/// fragments (area offset, length) to chain after it.
///
/// # Errors
/// A [`TxError`] naming what does not fit; `flow` is unchanged then.
pub fn build_chain(
    flow: &mut FlowState,
    seg: &TxSegment,
    area: &[u8],
    mtu: usize,
    frame: &mut [u8],
) -> Result<Chain, TxError> {
    let (fragments, count) = match &seg.payload {
        Some(r) => payload_parts(flow, r, area.len())?,
        None => ([(0, 0); MAX_FRAGMENTS], 0),
    };
    let payload_len: usize = fragments[..count].iter().map(|p| p.1).sum();
    let (header_len, mut sum) = write_headers(flow, seg, payload_len, mtu, frame, false)?;
    for &(off, len) in &fragments[..count] {
        sum = sum.then(checksum::sum(&area[off..off + len]));
    }
    finish_tcp_checksum(frame, flow.key.is_ipv6(), sum);
    Ok(Chain {
        header_len,
        fragments,
        count,
    })
}

/// A descriptor without payload (pure ACK, SYN, FIN, RST).
pub fn control_segment(seq: u32, ack: u32, flags: Flags, window: u16) -> TxSegment {
    TxSegment {
        header: TcpHeader {
            urgent: 0,
            seq,
            ack,
            flags,
            window,
            ..TcpHeader::default()
        },
        payload: None,
        ecn: Ecn::NotEct,
        segment_size: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow_table::FlowParams;
    use crate::mr::{Access, MrTable};
    use crate::wire::{self, FlowKey, Parsed};
    use proto::TcpOptions;

    fn setup() -> (FlowState, MrTable, Vec<u8>) {
        let mut area: Vec<u8> = (0..20_000u32).map(|i| (i * 13 + 7) as u8).collect();
        area[0] = 0xff;
        let mut mrs = MrTable::new(area.len(), 4);
        let a = mrs.register(1000, 3000, Access::SEND).expect("a");
        let b = mrs.register(9001, 5000, Access::SEND).expect("b");
        let mut f = FlowState::new(&FlowParams {
            key: FlowKey {
                remote_ip: [198, 18, 0, 1].into(),
                local_ip: [198, 18, 0, 2].into(),
                remote_port: 41234,
                local_port: 5201,
            },
            local_mac: [2, 0, 0, 0, 0, 2],
            remote_mac: [2, 0, 0, 0, 0, 1],
            irs: 0,
            iss: 77,
            socket: 0,
            max_recv_segments: 4,
            max_send_segments: 4,
            max_placed_ranges: 4,
        });
        // Send stream 0..1001 from a (odd length), 1001..4001 from b.
        f.send.post(&mut mrs, a, 0, 1001, 1).expect("post a");
        f.send.post(&mut mrs, b, 0, 3000, 2).expect("post b");
        (f, mrs, area)
    }

    fn seg(payload: Option<Range<u64>>) -> TxSegment {
        // MSS 1460 + NOP + NOP + SACK-permitted... 6 bytes -> padded to 8.
        let options = TcpOptions::new(&[2, 4, 0x05, 0xb4, 1, 1]).expect("fits");
        TxSegment {
            header: TcpHeader {
                urgent: 0,
                seq: 0xffff_fff0,
                ack: 12345,
                flags: Flags::ACK | Flags::PSH,
                window: 4096,
                options,
                ..TcpHeader::default()
            },
            payload,
            ecn: Ecn::Ect0,
            segment_size: 0,
        }
    }

    #[test]
    fn copy_frame_parses_back_and_verifies() {
        let (mut f, _mrs, area) = setup();
        let mut frame = [0u8; 2048];
        let s = seg(Some(500..1460));
        let n = build_copy(&mut f, &s, &area, 1500, &mut frame).expect("fits");
        let Ok(Parsed::Tcp(p)) = wire::parse(&frame[..n]) else {
            panic!("built frame must parse");
        };
        // Our frame seen from the peer: remote/local swap.
        assert_eq!(p.key.remote_ip, IpAddr::from([198, 18, 0, 2]));
        assert_eq!(p.key.local_port, 41234);
        assert_eq!(p.header.seq, 0xffff_fff0);
        assert_eq!(p.header.ack, 12345);
        assert_eq!(p.header.flags, Flags::ACK | Flags::PSH);
        assert_eq!(p.header_len, 28);
        assert_eq!(&p.header.options.as_slice()[..6], &[2, 4, 0x05, 0xb4, 1, 1]);
        assert_eq!(p.ecn, Ecn::Ect0);
        let payload = &frame[p.payload_range()];
        let mut expect = area[1500..2001].to_vec();
        expect.extend_from_slice(&area[9001..9001 + 459]);
        assert_eq!(payload, &expect[..]);
        assert!(p.header_sum.then(checksum::sum(payload)).verifies());
        // The IP id advances per frame.
        let n2 = build_copy(&mut f, &s, &area, 1500, &mut frame).expect("fits");
        let Ok(Parsed::Tcp(p2)) = wire::parse(&frame[..n2]) else {
            panic!("parse");
        };
        assert_eq!(p2.ip_id, p.ip_id.wrapping_add(1));
    }

    /// An IPv6 flow's frames: the fixed header (version, traffic class
    /// with the ECN codepoint, payload length, next header, hop limit,
    /// addresses), a checksum over the IPv6 pseudo-header, both builders;
    /// 40 header bytes count against the MTU instead of 20.
    #[test]
    fn an_ipv6_flow_builds_ipv6_frames() {
        let (mut f, _mrs, area) = setup();
        let (ours, peer) = ("2001:2::2", "2001:2::1");
        f.key.local_ip = ours.parse::<std::net::Ipv6Addr>().unwrap().into();
        f.key.remote_ip = peer.parse::<std::net::Ipv6Addr>().unwrap().into();
        let s = seg(Some(500..1460));
        let mut frame = [0u8; 2048];
        let n = build_copy(&mut f, &s, &area, 1500, &mut frame).expect("fits");
        assert_eq!(n, 14 + 40 + 28 + 960);
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        assert_eq!(frame[14] >> 4, 6);
        let traffic_class = (frame[14] & 0x0f) << 4 | frame[15] >> 4;
        assert_eq!(traffic_class, Ecn::Ect0.bits());
        assert_eq!(u16::from_be_bytes([frame[18], frame[19]]), 28 + 960);
        assert_eq!((frame[20], frame[21]), (6, TTL));
        let Ok(Parsed::Tcp(p)) = wire::parse(&frame[..n]) else {
            panic!("built frame must parse");
        };
        assert_eq!(p.key.remote_ip.to_string(), ours);
        assert_eq!(p.key.local_ip.to_string(), peer);
        assert_eq!(
            (p.header.seq, p.header_len, p.ecn),
            (0xffff_fff0, 28, Ecn::Ect0)
        );
        let payload = &frame[p.payload_range()];
        assert!(p.header_sum.then(checksum::sum(payload)).verifies());
        // The chain's header frame checksums the same payload.
        let mut head = [0u8; 256];
        let c = build_chain(&mut f, &s, &area, 1500, &mut head).expect("fits");
        assert_eq!(c.header_len, 14 + 40 + 28);
        assert_eq!(&head[..c.header_len], &frame[..c.header_len]);
        // 1500 holds 40 + 28 + 1432 bytes of payload, not 1452.
        assert!(build_copy(&mut f, &seg(Some(0..1432)), &area, 1500, &mut frame).is_ok());
        assert_eq!(
            build_copy(&mut f, &seg(Some(0..1433)), &area, 1500, &mut frame),
            Err(TxError::ExceedsMtu {
                ip_len: 1501,
                mtu: 1500
            })
        );
    }

    /// Software TSO: each slice of a super-segment, built as the NIC
    /// builds it, parses back with its own sequence number, length, flags
    /// and valid checksums, and together they carry the stream's bytes.
    #[test]
    fn super_segment_slices_parse_back_and_verify() {
        let (mut f, _mrs, area) = setup();
        let mut s = seg(Some(0..4001));
        s.header.flags = Flags::ACK | Flags::PSH | Flags::CWR;
        s.segment_size = 1000;
        assert_eq!(s.wire_segments(), 5);
        // The stream as the two send MRs hold it.
        let mut stream = area[1000..2001].to_vec();
        stream.extend_from_slice(&area[9001..12001]);
        let mut carried = Vec::new();
        for (k, slice) in s.slices().enumerate() {
            let mut frame = [0u8; 2048];
            let n = build_copy(&mut f, &slice, &area, 1500, &mut frame).expect("fits");
            let Ok(Parsed::Tcp(p)) = wire::parse(&frame[..n]) else {
                panic!("slice {k} must parse");
            };
            let want_len = if k == 4 { 1 } else { 1000 };
            assert_eq!(p.payload_len as usize, want_len, "slice {k}");
            assert_eq!(
                p.header.seq,
                0xffff_fff0u32.wrapping_add(1000 * k as u32),
                "slice {k}"
            );
            assert_eq!(p.header.ack, 12345);
            assert_eq!(p.header.window, 4096);
            assert_eq!(&p.header.options.as_slice()[..6], &[2, 4, 0x05, 0xb4, 1, 1]);
            assert_eq!(p.ecn, Ecn::Ect0);
            assert_eq!(p.header.flags.contains(Flags::CWR), k == 0, "slice {k}");
            assert_eq!(p.header.flags.contains(Flags::PSH), k == 4, "slice {k}");
            assert!(p.header.flags.contains(Flags::ACK));
            let payload = &frame[p.payload_range()];
            assert!(
                p.header_sum.then(checksum::sum(payload)).verifies(),
                "slice {k} checksum"
            );
            carried.extend_from_slice(payload);
        }
        assert_eq!(carried, stream);
    }

    #[test]
    fn chain_frame_checksum_covers_fragments() {
        let (mut f, _mrs, area) = setup();
        let mut frame = [0u8; 128];
        let c = build_chain(&mut f, &seg(Some(999..1003)), &area, 1500, &mut frame).expect("fits");
        assert_eq!(c.fragments(), &[(1999, 2), (9001, 2)]);
        let mut whole = frame[..c.header_len].to_vec();
        for &(o, l) in c.fragments() {
            whole.extend_from_slice(&area[o..o + l]);
        }
        let Ok(Parsed::Tcp(p)) = wire::parse(&whole) else {
            panic!("chain must parse once joined");
        };
        assert!(p
            .header_sum
            .then(checksum::sum(&whole[p.payload_range()]))
            .verifies());
    }

    #[test]
    fn pure_ack_and_errors() {
        let (mut f, mut mrs, area) = setup();
        let mut frame = [0u8; 2048];
        let n = build_copy(
            &mut f,
            &control_segment(1, 2, Flags::ACK, 100),
            &area,
            1500,
            &mut frame,
        )
        .expect("fits");
        assert_eq!(n, 54);
        let Ok(Parsed::Tcp(p)) = wire::parse(&frame[..n]) else {
            panic!("parse");
        };
        assert!(p.header_sum.verifies());
        assert!(matches!(
            build_copy(&mut f, &seg(Some(3000..4002)), &area, 9000, &mut frame),
            Err(TxError::PayloadNotPosted { .. })
        ));
        assert!(matches!(
            build_copy(&mut f, &seg(Some(0..1500)), &area, 1500, &mut frame),
            Err(TxError::ExceedsMtu {
                ip_len: 1548,
                mtu: 1500
            })
        ));
        assert!(matches!(
            build_copy(&mut f, &seg(Some(0..1000)), &area, 1500, &mut frame[..500]),
            Err(TxError::FrameTooSmall { .. })
        ));
        // More than 40 option bytes cannot be described at all:
        // `TcpOptions::new` refuses them (tested in proto).
        // Retired send data can no longer be referenced.
        f.send.retire_through(&mut mrs, 1001).expect("retire");
        assert!(matches!(
            build_copy(&mut f, &seg(Some(1000..1100)), &area, 1500, &mut frame),
            Err(TxError::PayloadNotPosted { floor: 1001, .. })
        ));
    }

    #[test]
    fn copy_frame_is_placed_by_the_rx_engine() {
        let (mut f, _mrs, area) = setup();
        let mut frame = [0u8; 2048];
        let n = build_copy(&mut f, &seg(Some(500..1460)), &area, 1500, &mut frame).expect("fits");
        // A receiver whose stream offset 500 is the frame's seq.
        let mut rx_mrs = MrTable::new(4096, 1);
        let mr = rx_mrs.register(0, 4096, Access::RECV).expect("mr");
        let mut rx = FlowState::new(&FlowParams {
            key: FlowKey::default(),
            local_mac: [0; 6],
            remote_mac: [0; 6],
            irs: 0xffff_fff0u32.wrapping_sub(501),
            iss: 0,
            socket: 0,
            max_recv_segments: 1,
            max_send_segments: 1,
            max_placed_ranges: 4,
        });
        rx.recv.post(&mut rx_mrs, mr, 0, 4096, 1).expect("post");
        let mut rx_area = vec![0u8; 4096];
        let Ok(Parsed::Tcp(p)) = wire::parse(&frame[..n]) else {
            panic!("parse");
        };
        let placement = crate::placement::place(&mut rx, &p, &frame[..n], &mut rx_area);
        assert_eq!(placement.verdict, crate::placement::Verdict::Placed);
        assert_eq!(placement.placed.range(), 500..1460);
        assert_eq!(&rx_area[500..1001], &area[1500..2001]);
        assert_eq!(&rx_area[1001..1460], &area[9001..9460]);
    }
}
