//! Parsing frames built by smoltcp's emitters, and every way a frame is refused.

use super::*;

/// Ethernet + IPv4 + TCP (ACK|PSH, 5 payload bytes "hello") from
/// 198.18.0.1:41234 to 198.18.0.2:5201, with 3 bytes of Ethernet padding
/// after the IP datagram. IP checksum 0x9c6d and TCP checksum 0x2465
/// were computed independently (Python RFC 1071).
pub(crate) const DATA: [u8; 62] = [
    // Ethernet: dst 02:00:00:00:00:02, src 02:00:00:00:00:01, IPv4
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
    // IPv4: total 45, id 0x1234, DF, TTL 64, TCP, ECT(0)
    0x45, 0x02, 0x00, 0x2d, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x9c, 0x6d, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02,
    // TCP: ports, seq 0xfffffffe, ack 0x01020304, doff 5, ACK|PSH, win 512
    0xa1, 0x12, 0x14, 0x51, 0xff, 0xff, 0xff, 0xfe, 0x01, 0x02, 0x03, 0x04, 0x50, 0x18, 0x02, 0x00,
    0x24, 0x65, 0x00, 0x00, // payload
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
    assert_eq!(s.key.remote_ip, IpAddr::from([198, 18, 0, 1]));
    assert_eq!(s.key.local_ip, IpAddr::from([198, 18, 0, 2]));
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
fn other_ethertypes_and_versions() {
    let mut f = DATA;
    // An IPv4 packet behind the IPv6 ethertype.
    f[12] = 0x86;
    f[13] = 0xdd;
    assert_eq!(
        parse(&f),
        Err(WireError::BadIpVersion {
            version: 4,
            expected: 6
        })
    );
    f[12] = 0x08;
    f[13] = 0x06;
    assert_eq!(parse(&f), Err(WireError::NotIp { ethertype: 0x0806 }));
    let mut v = DATA;
    v[14] = 0x65;
    assert_eq!(
        parse(&v),
        Err(WireError::BadIpVersion {
            version: 6,
            expected: 4
        })
    );
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

/// A straightforward RFC 1071 sum (32-bit accumulator, folded at the
/// end), independent of `crate::checksum`.
fn reference_sum(parts: &[&[u8]]) -> u16 {
    let mut s: u32 = 0;
    for p in parts {
        for c in p.chunks(2) {
            s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn v6(s: &str) -> std::net::Ipv6Addr {
    s.parse().unwrap()
}

/// Ethernet + IPv6 (traffic class with ECT(0), hop limit 64) + TCP
/// (ACK|PSH, "hello") from `[src]:41234` to `[dst]:5201`, then `pad`
/// bytes of Ethernet padding. The TCP checksum is [`reference_sum`] over
/// the RFC 8200 §8.1 pseudo-header and the segment.
fn ipv6_frame(src: &str, dst: &str, pad: usize) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + 20];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    // Version 6, traffic class 0x02 (DSCP 0, ECT(0)), flow label 0x12345.
    f[14..18].copy_from_slice(&[0x60, 0x21, 0x23, 0x45]);
    f[18..20].copy_from_slice(&25u16.to_be_bytes());
    f[20] = 6;
    f[21] = 64;
    f[22..38].copy_from_slice(&v6(src).octets());
    f[38..54].copy_from_slice(&v6(dst).octets());
    let tcp = [
        0xa1, 0x12, 0x14, 0x51, 0xff, 0xff, 0xff, 0xfe, 0x01, 0x02, 0x03, 0x04, 0x50, 0x18, 0x02,
        0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    f[54..74].copy_from_slice(&tcp);
    f.extend_from_slice(b"hello");
    let len = 25u32.to_be_bytes();
    let c = reference_sum(&[&f[22..54], &len, &[0, 0, 0, 6], &f[54..79]]);
    f[70..72].copy_from_slice(&c.to_be_bytes());
    f.extend(std::iter::repeat_n(0, pad));
    f
}

#[test]
fn parses_an_ipv6_tcp_segment_ignoring_padding() {
    let f = ipv6_frame("2001:2::2", "2001:2::1", 6);
    let s = tcp(&f);
    assert_eq!(s.key.remote_ip, IpAddr::V6(v6("2001:2::2")));
    assert_eq!(s.key.local_ip, IpAddr::V6(v6("2001:2::1")));
    assert_eq!((s.key.remote_port, s.key.local_port), (41234, 5201));
    assert!(s.key.is_ipv6());
    assert_eq!(s.header.seq, 0xffff_fffe);
    assert!(s.has(Flags::ACK | Flags::PSH));
    assert_eq!(s.ecn, Ecn::Ect0);
    assert_eq!(s.ip_id, 0);
    assert_eq!(&f[s.payload_range()], b"hello");
    let full = s.header_sum.then(checksum::sum(&f[s.payload_range()]));
    assert!(
        full.verifies(),
        "the TCP checksum over the IPv6 pseudo-header"
    );
    // One bit off in an address breaks it: the pseudo-header covers them.
    let mut g = f.clone();
    g[37] ^= 1;
    let s = tcp(&g);
    let full = s.header_sum.then(checksum::sum(&g[s.payload_range()]));
    assert!(!full.verifies());
}

#[test]
fn an_ipv6_partial_checksum_is_finished() {
    let mut f = ipv6_frame("2001:2::2", "2001:2::1", 0);
    let good = f.clone();
    // What a Linux sender with offload leaves: the pseudo-header sum.
    let len = 25u32.to_be_bytes();
    let pseudo = !reference_sum(&[&f[22..54], &len, &[0, 0, 0, 6]]);
    f[70..72].copy_from_slice(&pseudo.to_be_bytes());
    assert!(tcp(&f).pseudo_only_checksum);
    assert!(finish_partial_checksum(&mut f));
    assert_eq!(f, good);
}

#[test]
fn ipv6_packets_we_do_not_take_are_refused_by_name() {
    let base = ipv6_frame("2001:2::2", "2001:2::1", 0);
    let with = |at: usize, v: u8| {
        let mut f = base.clone();
        f[at] = v;
        parse(&f)
    };
    // Extension headers: hop-by-hop, routing, fragment, destination
    // options, AH, ESP.
    for next_header in [0, 43, 44, 60, 51, 50] {
        assert_eq!(
            with(20, next_header),
            Err(WireError::Ipv6ExtensionHeader { next_header })
        );
    }
    assert_eq!(
        with(20, 58),
        Err(WireError::UnsupportedProtocol { protocol: 58 })
    );
    // Version nibble, payload length 0 (a jumbogram's) and past the frame.
    assert_eq!(
        with(14, 0x40),
        Err(WireError::BadIpVersion {
            version: 4,
            expected: 6
        })
    );
    let len = base.len();
    assert_eq!(with(19, 0), Err(WireError::MalformedIpv6 { len }));
    assert_eq!(with(19, 26), Err(WireError::MalformedIpv6 { len }));
    assert_eq!(
        parse(&base[..14 + 39]),
        Err(WireError::MalformedIpv6 { len: 53 })
    );
    // Addresses that never appear on the wire.
    for (src, dst, bad) in [
        ("::ffff:198.18.0.2", "2001:2::1", "::ffff:198.18.0.2"),
        ("ff02::1", "2001:2::1", "ff02::1"),
        ("::", "2001:2::1", "::"),
        ("::1", "2001:2::1", "::1"),
        ("2001:2::2", "::ffff:198.18.0.1", "::ffff:198.18.0.1"),
    ] {
        assert_eq!(
            parse(&ipv6_frame(src, dst, 0)),
            Err(WireError::BadIpv6Address { addr: v6(bad) }),
            "{src} -> {dst}"
        );
    }
    // A lying TCP data offset, as for IPv4.
    assert_eq!(
        with(54 + 12, 0xf0),
        Err(WireError::MalformedTcp { len: 25 })
    );
}

/// The IPv6 headers must lie in the first fragment of a multi-buffer
/// frame, as IPv4's.
#[test]
fn parse_head_reads_ipv6_headers_from_the_first_fragment_only() {
    let f = ipv6_frame("2001:2::2", "2001:2::1", 0);
    assert!(matches!(parse_head(&f[..74], f.len()), Ok(Parsed::Tcp(_))));
    assert_eq!(
        parse_head(&f[..50], f.len()),
        Err(WireError::SplitHeaders {
            head: 50,
            needed: 54
        })
    );
    for cut in 0..f.len() {
        // Never a panic, whatever the head's length.
        let _ = parse_head(&f[..cut], f.len());
        let _ = parse(&f[..cut]);
    }
}

/// Over IPv6 a UDP datagram must carry a checksum (RFC 8200 §8.1): a zero
/// field is not "none" as over IPv4.
#[test]
fn an_ipv6_udp_datagram_without_a_checksum_is_not_ok() {
    let mut f = ipv6_frame("2001:2::2", "2001:2::1", 0);
    f[20] = 17;
    // UDP header: ports, length 25, checksum 0.
    f[54 + 4..54 + 6].copy_from_slice(&25u16.to_be_bytes());
    f[54 + 6..54 + 8].fill(0);
    let Ok(Parsed::Udp(d)) = parse(&f) else {
        panic!("expected UDP");
    };
    assert!(!d.checksum_ok);
}
