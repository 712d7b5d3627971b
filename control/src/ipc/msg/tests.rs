use super::*;
use proptest::prelude::*;

fn requests() -> Vec<Request> {
    vec![
        Request::Hello {
            name: "redis-server".into(),
            parent: 0,
        },
        Request::Hello {
            name: "nginx".into(),
            parent: 7,
        },
        Request::RegisterMemory {
            len: 1 << 20,
            access: 3,
        },
        Request::DeregisterMemory { mr: 7 << 32 | 3 },
        Request::Listen {
            port: 6379,
            reuseport: true,
            families: 3,
            socket: 0,
        },
        Request::Listen {
            port: 80,
            reuseport: false,
            families: 2,
            socket: 12,
        },
        Request::Unlisten { socket: 12 },
        Request::Connect {
            remote: "198.18.0.1:5201".parse().expect("addr"),
        },
        Request::Connect {
            remote: "[2001:2::1]:5201".parse().expect("addr"),
        },
        Request::Close { conn: 1 << 32 },
        Request::Abort { conn: 2 },
        Request::Stats,
        Request::Detach,
        Request::Endpoints { conn: 3 << 32 | 9 },
        Request::Accept { socket: 3 },
        Request::Adopt { conn: 1 << 32 | 4 },
        Request::Exec { armed: true },
        Request::Exec { armed: false },
        Request::Park {
            conn: 1 << 32 | 5,
            read: 1 << 40,
        },
        Request::Rehome {
            conn: 7,
            moves: vec![(1, 2), (3 << 32 | 4, 5)],
        },
        Request::Rehome {
            conn: 7,
            moves: vec![],
        },
    ]
}

fn replies() -> Vec<Reply> {
    vec![
        Reply::Welcome(Welcome {
            attachment: 4,
            local_ip: Ipv4Addr::new(198, 18, 0, 2),
            local_ip6: Some("2001:2::2".parse().expect("addr")),
            transport: "tcp".into(),
            slot_len: 64 << 20,
            post_ring: 1024,
            completion_ring: 2048,
            max_connections: 256,
            max_posted: 1024,
        }),
        Reply::Welcome(Welcome {
            attachment: 5,
            local_ip: Ipv4Addr::new(198, 18, 0, 2),
            local_ip6: None,
            transport: "smoltcp".into(),
            slot_len: 1 << 20,
            post_ring: 16,
            completion_ring: 32,
            max_connections: 4,
            max_posted: 16,
        }),
        Reply::Done,
        Reply::Registered {
            mr: 9,
            offset: 4096,
            len: 8192,
        },
        Reply::Connecting { conn: 5, slot: 1 },
        Reply::Listening { socket: 4, slot: 3 },
        Reply::Accepted {
            conn: 6,
            slot: 2,
            local: "198.18.0.2:80".parse().expect("addr"),
            remote: "198.18.0.1:40000".parse().expect("addr"),
        },
        Reply::Accepted {
            conn: 7,
            slot: 3,
            local: "[2001:2::2]:80".parse().expect("addr"),
            remote: "[2001:2::1]:40000".parse().expect("addr"),
        },
        Reply::Endpoints {
            local: "198.18.0.2:6379".parse().expect("addr"),
            remote: "198.18.0.1:40022".parse().expect("addr"),
        },
        Reply::Endpoints {
            local: "[2001:2::2]:6379".parse().expect("addr"),
            remote: "[2001:2::1]:40022".parse().expect("addr"),
        },
        Reply::Stats(Stats {
            retransmissions: Some((3, 1)),
            payload_touched: 0,
            drops: vec![("no_posted_memory".into(), 12)],
        }),
        Reply::Error {
            code: ErrorCode::Limit,
            message: "daemon.max_connections (256) reached".into(),
        },
        Reply::Error {
            code: ErrorCode::WouldBlock,
            message: String::new(),
        },
        Reply::Error {
            code: ErrorCode::Busy,
            message: "in use".into(),
        },
        Reply::Error {
            code: ErrorCode::NotShared,
            message: String::new(),
        },
        Reply::Rehomed(Rehomed {
            slot: 3,
            local: "198.18.0.2:80".parse().expect("addr"),
            remote: "198.18.0.1:40000".parse().expect("addr"),
            read: 5000,
            rx_posted: 1 << 20,
            written: 77,
            recvs: 8,
            sends: 1,
            peer_fin: Some(6000),
        }),
        Reply::Rehomed(Rehomed {
            slot: 0,
            local: "198.18.0.2:80".parse().expect("addr"),
            remote: "198.18.0.1:40000".parse().expect("addr"),
            read: 0,
            rx_posted: 0,
            written: 0,
            recvs: 0,
            sends: 0,
            peer_fin: None,
        }),
    ]
}

#[test]
fn every_message_round_trips_within_the_size_limit() {
    for (seq, r) in requests().into_iter().enumerate() {
        let buf = r.encode(seq as u32);
        assert!(buf.len() <= MAX_MESSAGE);
        assert_eq!(Request::decode(&buf), Ok((r, seq as u32)));
    }
    for (seq, r) in replies().into_iter().enumerate() {
        let buf = r.encode(seq as u32);
        assert!(buf.len() <= MAX_MESSAGE);
        assert_eq!(Reply::decode(&buf), Ok((r, seq as u32)));
    }
}

/// A `Rehome` naming more moves than a connection has regions is refused
/// before anything is allocated for them.
#[test]
fn a_rehome_with_too_many_moves_is_refused() {
    let mut w = Writer::new(K_REHOME, 1);
    w.u64(7);
    w.u8(MAX_MOVES as u8 + 1);
    for i in 0..=MAX_MOVES as u64 {
        w.u64(i);
        w.u64(i + 100);
    }
    assert_eq!(Request::decode(&w.0), Err(DecodeError::Field("move count")));
}

/// An address is IPv4 or IPv6 and says which; any other family byte, or
/// an IPv6 address cut short, is refused.
#[test]
fn an_address_of_another_family_or_cut_short_is_refused() {
    let v6 = Request::Connect {
        remote: "[2001:2::1]:80".parse().expect("addr"),
    };
    let mut buf = v6.encode(1);
    assert_eq!(buf[HEADER_LEN], 6, "family byte after the header");
    buf[HEADER_LEN] = 5;
    assert_eq!(
        Request::decode(&buf),
        Err(DecodeError::Field("address family"))
    );
    buf[HEADER_LEN] = 4;
    assert_eq!(
        Request::decode(&buf),
        Err(DecodeError::Trailing(12)),
        "an IPv4 address is 4 bytes"
    );
    let mut w = Writer::new(K_WELCOME, 1);
    w.u32(1);
    w.u32(0);
    w.u8(4);
    assert_eq!(
        Reply::decode(&w.0),
        Err(DecodeError::Field("IPv6 address flag"))
    );
}

#[test]
fn a_truncated_or_extended_message_is_refused() {
    for r in requests() {
        let buf = r.encode(1);
        for cut in 0..buf.len() {
            assert!(Request::decode(&buf[..cut]).is_err(), "{r:?} cut at {cut}");
        }
        let mut long = buf.clone();
        long.push(0);
        assert_eq!(Request::decode(&long), Err(DecodeError::Trailing(1)));
    }
}

#[test]
fn another_version_or_magic_is_named() {
    let mut buf = Request::Stats.encode(0);
    let other = VERSION + 1;
    buf[4..6].copy_from_slice(&other.to_le_bytes());
    assert_eq!(Request::decode(&buf), Err(DecodeError::Version(other)));
    buf[0] ^= 0xff;
    assert!(matches!(Request::decode(&buf), Err(DecodeError::Magic(_))));
}

#[test]
fn long_text_is_cut_at_a_character_boundary() {
    let name = "é".repeat(150); // 300 bytes
    let buf = Request::Hello { name, parent: 0 }.encode(0);
    let (Request::Hello { name, .. }, _) = Request::decode(&buf).expect("decodes") else {
        panic!("not a hello");
    };
    assert!(name.len() <= MAX_TEXT && name.chars().all(|c| c == 'é'));
}

proptest! {
    /// Any bytes: decoding returns, never panics, and what it accepts
    /// encodes back to the same bytes.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok((r, seq)) = Request::decode(&buf) {
            prop_assert_eq!(r.encode(seq), buf.clone());
        }
        if let Ok((r, seq)) = Reply::decode(&buf) {
            prop_assert_eq!(r.encode(seq), buf);
        }
    }
}
