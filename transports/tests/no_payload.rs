//! "The header-only TCP touches no payload", made checkable:
//!
//! - **types**: what crosses into and out of a connection (`RxSegment`,
//!   `SegmentOut`/`TxSegment`, `TcpHeader`, `TcpOptions`, `Event`) is
//!   plain owned data: `Send + Sync + 'static` (no reference, no raw
//!   pointer into payload memory), a few dozen bytes (no payload inline),
//!   and destructured here field by field with their types, so a field
//!   added to carry payload (a `Vec<u8>`, a slice) does not compile;
//! - **dependencies**: this crate and `proto` depend on nothing that can
//!   name the datapath or its memory, and deny `unsafe`;
//! - **poison run**: two connections exchange a transfer through a stand-in
//!   datapath that really builds each packet from payload memory with
//!   `proto`'s emitter and parses it back with `proto`'s parser (the code
//!   the datapath runs), placing the payload in receive memory. Run once
//!   with ordinary payload and once with payload memory (send and receive)
//!   full of a poison pattern of forged TCP headers and options: every
//!   segment the transport sent (ACKs, SACK blocks, windows, options), every
//!   event and its statistics must be identical.

mod tcp_util;

use std::mem::size_of;
use std::ops::Range;
use std::time::Duration;

use smoltcp::wire::TcpPacket;
use transports::segment::{Ecn, Flags, TcpHeader, TcpOptions, TxSegment};
use transports::tcp::{TcpConfig, TcpConnection};
use transports::{Event, Instant, RxSegment, SegmentOut, Transport};

/// Plain owned data: no borrow (`'static`), no raw pointer (`Send + Sync`).
fn plain<T: Send + Sync + 'static>() -> usize {
    size_of::<T>()
}

#[test]
fn the_transport_inputs_and_outputs_are_small_plain_values() {
    // Far below one segment's payload (an MSS is 536 bytes at least): the
    // values cannot hold payload inline.
    for (name, size) in [
        ("RxSegment", plain::<RxSegment>()),
        ("TxSegment", plain::<TxSegment>()),
        ("SegmentOut", plain::<SegmentOut>()),
        ("TcpHeader", plain::<TcpHeader>()),
        ("TcpOptions", plain::<TcpOptions>()),
        ("Event", plain::<Event>()),
    ] {
        assert!(size <= 128, "{name} is {size} bytes");
    }
}

/// Every field named with its type: a new field (one that could carry
/// payload or point at it) fails to compile here.
#[test]
fn every_field_of_what_crosses_is_a_header_field_or_a_stream_offset() {
    let header = tcp_util::hdr(Flags::ACK, 1, 2, 3);
    let TcpHeader {
        src_port,
        dst_port,
        seq,
        ack,
        flags,
        window,
        options,
        urgent,
    } = header;
    let _: (u16, u16, u32, u32, Flags, u16, TcpOptions, u16) =
        (src_port, dst_port, seq, ack, flags, window, options, urgent);
    // Options are header bytes, at most 40 (the data offset's limit).
    assert!(options.as_slice().len() <= 40);
    let rx = tcp_util::data(1, 2, 3, 0, 100);
    let RxSegment {
        header,
        payload_len,
        accepted,
        ecn,
        segment_size,
    } = rx;
    let _: (TcpHeader, u32, Range<u64>, Ecn, u32) =
        (header, payload_len, accepted, ecn, segment_size);
    let out = SegmentOut::control(header);
    let SegmentOut {
        segment,
        not_before,
    } = out;
    let _: Option<Instant> = not_before;
    let TxSegment {
        header,
        payload,
        ecn,
        segment_size,
    } = segment;
    let _: (TcpHeader, Option<Range<u64>>, Ecn, u32) = (header, payload, ecn, segment_size);
    for event in [Event::Connected, Event::Received { upto: 1 }] {
        let _: Option<u64> = match event {
            Event::Connected | Event::SynForListener => None,
            Event::Received { upto } | Event::Acked { upto } => Some(upto),
            Event::Discarded { range } => Some(range.end),
            Event::PeerClosed { len } => Some(len),
            Event::Closed { reason } => {
                let _: transports::segment::CloseReason = reason;
                None
            }
        };
    }
}

/// The `[dependencies]` names of a manifest.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps {
            if let Some((name, _)) = line.split_once('=') {
                // `smoltcp.workspace = true` names `smoltcp`.
                let name = name.split('.').next().unwrap_or(name);
                names.push(name.trim().to_string());
            }
        }
    }
    names
}

#[test]
fn the_transports_cannot_name_the_datapath_or_its_memory() {
    let own = include_str!("../Cargo.toml");
    let proto = include_str!("../../proto/Cargo.toml");
    assert_eq!(
        dependencies(own),
        ["zerosplit-proto", "smoltcp", "thiserror", "serde"],
        "transports' dependencies changed: can one reach payload memory?"
    );
    assert_eq!(dependencies(proto), ["smoltcp"]);
    for manifest in [own, proto] {
        assert!(
            manifest.contains("[lints]\nworkspace = true"),
            "the workspace's unsafe_code = deny applies"
        );
    }
    let workspace = include_str!("../../Cargo.toml");
    assert!(workspace.contains("unsafe_code = \"deny\""));
}

/// Payload memory full of forged TCP headers: RST|SYN|FIN flags, data
/// offset 15, SACK blocks, window 0, MSS 1, a timestamp, repeated.
fn poison(len: usize) -> Vec<u8> {
    let unit: [u8; 40] = [
        0x0f, 0xa0, 0x13, 0x88, 0xde, 0xad, 0xbe, 0xef, 0xfe, 0xed, 0xfa, 0xce, 0xf0, 0x07, 0x00,
        0x00, 0xff, 0xff, 0x00, 0x00, 5, 18, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 9, 2, 4,
        0, 1, 8, 10,
    ];
    unit.iter().copied().cycle().take(len).collect()
}

fn ordinary(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// One end: its connection, its send memory (the send stream from offset
/// 0), its receive memory.
struct End {
    conn: TcpConnection,
    send: Vec<u8>,
    recv: Vec<u8>,
}

/// The stand-in datapath: `out` (sent by `from`) becomes wire bytes built
/// from `from`'s send memory, which are parsed back, the payload placed in
/// `to`'s receive memory, and the record handed to `to`.
fn carry(out: &SegmentOut, from: &End, to: &mut End, now: Instant) {
    let header_len = out.header.header_len();
    let payload = out.payload.clone().unwrap_or(0..0);
    let (start, end) = (payload.start as usize, payload.end as usize);
    let mut wire = vec![0u8; header_len + (end - start)];
    out.header
        .emit(&mut TcpPacket::new_unchecked(&mut wire[..]));
    wire[header_len..].copy_from_slice(&from.send[start..end]);
    let packet = TcpPacket::new_checked(&wire[..]).expect("a TCP packet");
    let header = TcpHeader::parse(&packet);
    let bytes = packet.payload();
    // Placement by stream offset, as the datapath does: within the
    // receive memory the receiver posted.
    let place_end = (start + bytes.len()).min(to.recv.len());
    let place_start = start.min(place_end);
    to.recv[place_start..place_end].copy_from_slice(&bytes[..place_end - place_start]);
    let record = RxSegment {
        header,
        payload_len: bytes.len() as u32,
        accepted: place_start as u64..place_end as u64,
        ecn: out.ecn,
        segment_size: 0,
    };
    to.conn.handle_segment(now, &record);
}

/// What the transports produced, in order.
#[derive(Debug, PartialEq)]
enum Seen {
    Out(bool, SegmentOut),
    Event(bool, Event),
}

/// A transfer of `len` bytes from a to b over a 1 ms link that loses every
/// 29th segment a→b once (so SACK blocks and retransmissions happen), with
/// `fill` making both ends' payload memory. Returns the transcript, both
/// ends' statistics and b's receive memory.
fn transfer(len: usize, fill: fn(usize) -> Vec<u8>) -> (Vec<Seen>, String, Vec<u8>) {
    let config = TcpConfig::default();
    let latency = Duration::from_millis(1);
    let mut now = Instant::ZERO;
    let mut a = End {
        conn: TcpConnection::connect(now, config.clone(), tcp_util::LOCAL, tcp_util::REMOTE, 7)
            .expect("connect"),
        send: fill(len),
        recv: fill(1 << 16),
    };
    a.conn.recv_posted(now, 1 << 16);
    let syn = a.conn.poll_transmit(now).expect("SYN");
    let mut seen = vec![Seen::Out(true, syn.clone())];
    let syn_in = RxSegment {
        header: syn.header,
        payload_len: 0,
        accepted: 0..0,
        ecn: Ecn::NotEct,
        segment_size: 0,
    };
    now += latency;
    let mut b = End {
        conn: TcpConnection::accept(now, config, &syn_in, 0xffff_0000).expect("accept"),
        send: fill(0),
        recv: fill(len),
    };
    b.conn.recv_posted(now, len as u64);
    a.conn.send_posted(now, len as u64);
    let mut closed = false;
    // (arrival, a→b?, segment), ordered by arrival.
    let mut wire: Vec<(Instant, bool, SegmentOut)> = Vec::new();
    let mut sent_ab = 0u64;
    for _ in 0..200_000 {
        // FIN after the data, once connected (a close in SYN-SENT aborts).
        if !closed && a.conn.state() == transports::tcp::State::Established {
            a.conn.close(now);
            closed = true;
        }
        for from_a in [true, false] {
            let end = if from_a { &mut a } else { &mut b };
            while let Some(out) = end.conn.poll_transmit(now) {
                seen.push(Seen::Out(from_a, out.clone()));
                if from_a {
                    sent_ab += 1;
                    if sent_ab.is_multiple_of(29) {
                        continue;
                    }
                }
                let at = out.not_before.unwrap_or(now).max(now) + latency;
                let pos = wire.partition_point(|(t, _, _)| *t <= at);
                wire.insert(pos, (at, from_a, out));
            }
            while let Some(e) = end.conn.poll_event() {
                seen.push(Seen::Event(from_a, e));
            }
        }
        let done = [&a, &b]
            .iter()
            .all(|e| e.conn.state() == transports::tcp::State::Closed);
        if done {
            break;
        }
        let next = [
            wire.first().map(|w| w.0),
            a.conn.poll_timeout(),
            b.conn.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        now = now.max(next);
        if wire.first().is_some_and(|w| w.0 <= now) {
            let (_, from_a, out) = wire.remove(0);
            if from_a {
                carry(&out, &a, &mut b, now);
            } else {
                carry(&out, &b, &mut a, now);
            }
            continue;
        }
        for end in [&mut a, &mut b] {
            if end.conn.poll_timeout().is_some_and(|t| t <= now) {
                end.conn.handle_timeout(now);
            }
        }
    }
    let stats = format!("{:?} {:?}", a.conn.stats(), b.conn.stats());
    (seen, stats, b.recv)
}

#[test]
fn transport_outputs_do_not_depend_on_what_payload_memory_holds() {
    const LEN: usize = 2 << 20;
    let (plain_run, plain_stats, plain_recv) = transfer(LEN, ordinary);
    let (poison_run, poison_stats, poison_recv) = transfer(LEN, poison);
    assert_eq!(plain_run.len(), poison_run.len(), "as many outputs");
    for (k, (p, q)) in plain_run.iter().zip(&poison_run).enumerate() {
        assert_eq!(p, q, "output {k} differs with poisoned payload memory");
    }
    assert_eq!(plain_stats, poison_stats);
    // The payload really went through: each run's receive memory holds
    // what its sender's memory held.
    assert!(
        plain_recv == ordinary(LEN),
        "ordinary payload arrived intact"
    );
    assert!(
        poison_recv == poison(LEN),
        "poisoned payload arrived intact"
    );
    let sacks = plain_run
        .iter()
        .filter(|s| matches!(s, Seen::Out(false, o) if !tcp_util::sack_blocks(o).is_empty()))
        .count();
    assert!(
        sacks > 0,
        "the lossy link made the receiver send SACK blocks"
    );
    assert!(
        plain_run.iter().any(
            |s| matches!(s, Seen::Event(false, Event::PeerClosed { len }) if *len == LEN as u64)
        ),
        "the transfer completed"
    );
}
