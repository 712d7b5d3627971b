//! Forging frames byte by byte: a well-formed Ethernet II / IPv4 / TCP
//! frame from its fields ([`Forge::build`]), and the lies a hostile kind
//! tells afterwards (a wrong checksum, a length that does not match, a
//! header length beyond the frame), applied to the built bytes.
//!
//! Checked views (`proto::TcpHeader::emit`) cannot write a malformed
//! header, which is the point here, so the layout is spelled out: IPv4 at
//! RFC 791 §3.1, TCP at RFC 9293 §3.1. Checksums use the datapath's
//! one-definition internet checksum ([`datapath::checksum`]).

use std::net::Ipv4Addr;

use datapath::checksum::{ipv4_pseudo_header, sum};
use proto::{TcpHeader, ETH_HEADER_LEN};

/// Where the IPv4 header starts in a forged frame.
pub const IP: usize = ETH_HEADER_LEN;
/// IPv4 protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// The "don't fragment" bit of the IPv4 flags/fragment-offset field.
pub const DF: u16 = 0x4000;
/// The "more fragments" bit.
pub const MF: u16 = 0x2000;

/// The fields of one forged TCP/IPv4 frame: the IPv4 fields a kind lies
/// about, then the one TCP header type ([`TcpHeader`]).
#[derive(Debug, Clone)]
pub struct Forge {
    /// Ethernet source.
    pub src_mac: [u8; 6],
    /// Ethernet destination.
    pub dst_mac: [u8; 6],
    /// IPv4 source.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination.
    pub dst_ip: Ipv4Addr,
    /// IPv4 options (padded to a multiple of 4 bytes).
    pub ip_options: Vec<u8>,
    /// IPv4 flags and fragment offset (in 8-byte units), host order.
    pub frag: u16,
    /// IPv4 protocol number.
    pub protocol: u8,
    /// The TCP header's fields (the data offset and checksum are computed,
    /// the options padded to a multiple of 4 bytes).
    pub tcp: TcpHeader,
    /// Urgent pointer.
    pub urgent: u16,
    /// Payload.
    pub payload: Vec<u8>,
}

fn padded(v: &[u8]) -> Vec<u8> {
    let mut v = v.to_vec();
    v.resize(v.len().next_multiple_of(4), 0);
    v
}

impl Forge {
    /// The frame, every length and checksum consistent.
    pub fn build(&self) -> Vec<u8> {
        let ip_opts = padded(&self.ip_options);
        let t = &self.tcp;
        let tcp_opts = padded(t.options.as_slice());
        let ihl = 20 + ip_opts.len();
        let doff = 20 + tcp_opts.len();
        let total = ihl + doff + self.payload.len();
        let mut f = Vec::with_capacity(IP + total);
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.push(0x40 | (ihl / 4) as u8);
        f.push(0);
        f.extend_from_slice(&(total as u16).to_be_bytes());
        f.extend_from_slice(&0x5a5au16.to_be_bytes());
        f.extend_from_slice(&self.frag.to_be_bytes());
        f.push(64);
        f.push(self.protocol);
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&self.src_ip.octets());
        f.extend_from_slice(&self.dst_ip.octets());
        f.extend_from_slice(&ip_opts);
        f.extend_from_slice(&t.src_port.to_be_bytes());
        f.extend_from_slice(&t.dst_port.to_be_bytes());
        f.extend_from_slice(&t.seq.to_be_bytes());
        f.extend_from_slice(&t.ack.to_be_bytes());
        f.push(((doff / 4) as u8) << 4);
        f.push(t.flags.0);
        f.extend_from_slice(&t.window.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&self.urgent.to_be_bytes());
        f.extend_from_slice(&tcp_opts);
        f.extend_from_slice(&self.payload);
        fix_ip_checksum(&mut f);
        fix_tcp_checksum(&mut f);
        f
    }
}

/// IPv4 header length of a forged frame, from its IHL.
pub fn ihl(f: &[u8]) -> usize {
    usize::from(f[IP] & 0x0f) * 4
}

/// Recomputes the IPv4 header checksum over the header the IHL names (or
/// as much of it as the frame holds).
pub fn fix_ip_checksum(f: &mut [u8]) {
    let end = (IP + ihl(f).max(20)).min(f.len());
    f[IP + 10..IP + 12].fill(0);
    let c = sum(&f[IP..end]).checksum();
    f[IP + 10..IP + 12].copy_from_slice(&c.to_be_bytes());
}

/// Recomputes the TCP checksum over everything after the IPv4 header.
pub fn fix_tcp_checksum(f: &mut [u8]) {
    let at = IP + ihl(f);
    if f.len() < at + 18 {
        return;
    }
    f[at + 16..at + 18].fill(0);
    let ip = |o: usize| [f[IP + o], f[IP + o + 1], f[IP + o + 2], f[IP + o + 3]];
    let pseudo = ipv4_pseudo_header(ip(12), ip(16), f[IP + 9], (f.len() - at) as u16);
    let c = pseudo.then(sum(&f[at..])).checksum();
    f[at + 16..at + 18].copy_from_slice(&c.to_be_bytes());
}

/// Sets the IPv4 total length field (and the header checksum to match).
pub fn set_total_len(f: &mut [u8], len: u16) {
    f[IP + 2..IP + 4].copy_from_slice(&len.to_be_bytes());
    fix_ip_checksum(f);
}

/// Sets the IHL nibble (and the header checksum over what it now names).
pub fn set_ihl(f: &mut [u8], words: u8) {
    f[IP] = 0x40 | (words & 0x0f);
    fix_ip_checksum(f);
}

/// Sets the IP version nibble (and the header checksum).
pub fn set_version(f: &mut [u8], version: u8) {
    f[IP] = (version << 4) | (f[IP] & 0x0f);
    fix_ip_checksum(f);
}

/// Sets the TCP data offset nibble (the TCP checksum is recomputed, so
/// only the lie about the header's length remains).
pub fn set_data_offset(f: &mut [u8], words: u8) {
    let at = IP + ihl(f);
    f[at + 12] = (words & 0x0f) << 4;
    fix_tcp_checksum(f);
}

/// Flips bits of the IPv4 header checksum.
pub fn break_ip_checksum(f: &mut [u8]) {
    f[IP + 10] ^= 0x5a;
}

/// Flips bits of the TCP checksum.
pub fn break_tcp_checksum(f: &mut [u8]) {
    let at = IP + ihl(f);
    f[at + 16] ^= 0x5a;
}

#[cfg(test)]
mod tests {
    use super::*;
    use datapath::wire::{parse, Parsed};
    use proto::{Flags, TcpOptions};

    fn forge() -> Forge {
        Forge {
            src_mac: [2, 0, 0, 0, 0, 2],
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_ip: Ipv4Addr::new(198, 18, 0, 2),
            dst_ip: Ipv4Addr::new(198, 18, 0, 1),
            ip_options: vec![1, 1, 1, 1],
            frag: DF,
            protocol: IPPROTO_TCP,
            tcp: TcpHeader {
                urgent: 0,
                src_port: 40000,
                dst_port: 5201,
                seq: 1000,
                ack: 2000,
                flags: Flags::ACK | Flags::PSH,
                window: 512,
                options: TcpOptions::new(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]).expect("fits"),
            },
            urgent: 0,
            payload: b"hello, hostile world".to_vec(),
        }
    }

    #[test]
    fn a_built_frame_parses_with_valid_checksums() {
        let f = forge().build();
        let Ok(Parsed::Tcp(seg)) = parse(&f) else {
            panic!("not parsed as TCP: {:?}", parse(&f));
        };
        assert_eq!(seg.header.seq, 1000);
        assert_eq!(seg.header.ack, 2000);
        assert_eq!(seg.payload_len, 20);
        let whole = seg.header_sum.then(sum(&f[seg.payload_range()]));
        assert!(whole.verifies(), "TCP checksum verifies");
        assert!(sum(&f[IP..IP + 24]).verifies(), "IP checksum verifies");
    }

    #[test]
    fn each_lie_is_seen_by_the_parser() {
        let good = forge().build();
        let mut f = good.clone();
        break_ip_checksum(&mut f);
        assert!(parse(&f).is_err());
        let mut f = good.clone();
        set_total_len(&mut f, 10);
        assert!(parse(&f).is_err());
        let mut f = good.clone();
        set_ihl(&mut f, 4);
        assert!(parse(&f).is_err());
        let mut f = good.clone();
        set_version(&mut f, 6);
        assert!(parse(&f).is_err());
        let mut f = good;
        set_data_offset(&mut f, 3);
        assert!(parse(&f).is_err());
    }
}
