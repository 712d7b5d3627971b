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
