//! Where a frame's transport payload starts, so corruption can hit the
//! bytes the TCP/UDP checksum covers but no header the hop or the receiver
//! needs to route or demultiplex the frame.
//!
//! Parses Ethernet II (with up to two 802.1Q/802.1ad tags), IPv4 (IHL,
//! RFC 791 §3.1) or IPv6 (fixed header, RFC 8200 §3; extension headers are
//! not walked) and the TCP data offset (RFC 9293 §3.1) or the 8-byte UDP
//! header (RFC 768). Fragments other than the first carry no L4 header and
//! are not eligible.

use proto::ETH_HEADER_LEN;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// The byte range of the TCP or UDP payload inside `frame`, or `None` when
/// the frame is not IPv4/IPv6 TCP/UDP, is truncated, or has no payload
/// bytes (a pure ACK). The end is bounded by the IP length, so Ethernet
/// padding is never part of it.
pub fn l4_payload(frame: &[u8]) -> Option<std::ops::Range<usize>> {
    let be16 = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
    };
    let mut off = ETH_HEADER_LEN;
    let mut ethertype = be16(12)?;
    for _ in 0..2 {
        if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
            ethertype = be16(off + 2)?;
            off += 4;
        }
    }
    let (proto, l4, ip_end) = match ethertype {
        ETHERTYPE_IPV4 => {
            let vihl = *frame.get(off)?;
            let ihl = usize::from(vihl & 0x0f) * 4;
            if vihl >> 4 != 4 || ihl < 20 {
                return None;
            }
            let total = usize::from(be16(off + 2)?);
            let frag = be16(off + 6)?;
            if frag & 0x1fff != 0 {
                return None; // not the first fragment: no L4 header here
            }
            (*frame.get(off + 9)?, off + ihl, off + total)
        }
        ETHERTYPE_IPV6 => {
            if *frame.get(off)? >> 4 != 6 {
                return None;
            }
            let payload_len = usize::from(be16(off + 4)?);
            (*frame.get(off + 6)?, off + 40, off + 40 + payload_len)
        }
        _ => return None,
    };
    let ip_end = ip_end.min(frame.len());
    let start = match proto {
        IPPROTO_TCP => l4 + usize::from(*frame.get(l4 + 12)? >> 4) * 4,
        IPPROTO_UDP => l4 + 8,
        _ => return None,
    };
    (start < ip_end).then_some(start..ip_end)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet + IPv4 + TCP frame (20-byte IP header, 32-byte TCP
    /// header with options) with `payload` bytes of payload and 0 padding.
    pub(crate) fn tcp_frame(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 32 + payload];
        f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        let total = (20 + 32 + payload) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[14 + 6] = 0x40; // DF
        f[14 + 8] = 64;
        f[14 + 9] = IPPROTO_TCP;
        f[14 + 12..14 + 16].copy_from_slice(&[198, 18, 0, 1]);
        f[14 + 16..14 + 20].copy_from_slice(&[198, 18, 0, 2]);
        f[34 + 12] = 8 << 4; // data offset 8 words = 32 bytes
        for (i, b) in f[66..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    #[test]
    fn tcp_payload_starts_after_the_options() {
        let f = tcp_frame(100);
        assert_eq!(l4_payload(&f), Some(66..166));
    }

    #[test]
    fn pure_ack_has_no_payload() {
        assert_eq!(l4_payload(&tcp_frame(0)), None);
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut f = tcp_frame(2);
        f.extend_from_slice(&[0; 10]); // pad to a minimum frame
        assert_eq!(l4_payload(&f), Some(66..68));
    }

    #[test]
    fn vlan_tag_is_skipped() {
        let plain = tcp_frame(10);
        let mut f = plain[..12].to_vec();
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        f.extend_from_slice(&plain[12..]);
        assert_eq!(l4_payload(&f), Some(70..80));
    }

    #[test]
    fn udp_ipv6_and_refusals() {
        // IPv4 UDP, 5 bytes of payload.
        let mut f = tcp_frame(0);
        f.truncate(34);
        f[23] = IPPROTO_UDP;
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(b"hello");
        f[16..18].copy_from_slice(&(20u16 + 8 + 5).to_be_bytes());
        assert_eq!(l4_payload(&f), Some(42..47));

        // IPv6 TCP, 20-byte header, 3 bytes payload.
        let mut g = vec![0u8; 14 + 40 + 20 + 3];
        g[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        g[14] = 0x60;
        g[18..20].copy_from_slice(&23u16.to_be_bytes());
        g[20] = IPPROTO_TCP;
        g[54 + 12] = 5 << 4;
        assert_eq!(l4_payload(&g), Some(74..77));

        // ARP, a later fragment, a truncated header, garbage: not eligible.
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(l4_payload(&arp), None);
        let mut frag = tcp_frame(100);
        frag[20..22].copy_from_slice(&0x0010u16.to_be_bytes());
        assert_eq!(l4_payload(&frag), None);
        assert_eq!(l4_payload(&tcp_frame(100)[..40]), None);
        assert_eq!(l4_payload(&[0xff; 5]), None);
    }
}
