//! Two datapaths over fake kernels, joined by the test: what one sends,
//! the other receives and places.

use std::net::Ipv4Addr;

use super::*;
use crate::flow_table::FlowId;
use crate::mr::{Access, MrId};
use crate::nic::RxRecord;
use crate::placement::Verdict;
use crate::steer::FIRST_FLOW_SLOT;
use crate::tx::control_segment;
use crate::wire::{Ecn, FlowKey};
use proto::{Flags, TcpHeader, TxSegment};

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const IP_A: [u8; 4] = [198, 18, 0, 1];
const IP_B: [u8; 4] = [198, 18, 0, 2];
const ISS_A: u32 = 5000;
const ISS_B: u32 = 1000;

fn small() -> NicConfig {
    NicConfig {
        xsk: crate::xsk::XskConfig {
            umem: crate::sys::umem::UmemConfig {
                frame_size: 2048,
                frame_count: 128,
                mr_bytes: 64 << 10,
                hugepages: false,
                mr_slots: None,
            },
            tx_frames: 8,
            rx_ring: 32,
            tx_ring: 32,
            fill_ring: 64,
            comp_ring: 32,
            flow_rx_ring: 32,
            need_wakeup: false,
            ..crate::xsk::XskConfig::default()
        },
        max_flows: 8,
        max_regions: 4,
        ..NicConfig::default()
    }
}

fn key(local: [u8; 4], lport: u16, remote: [u8; 4], rport: u16) -> FlowKey {
    FlowKey {
        remote_ip: remote.into(),
        local_ip: local.into(),
        remote_port: rport,
        local_port: lport,
    }
}

/// A (sender) and B (receiver) with one flow between them: A's send
/// memory holds `payload`, B has 4 KiB of receive memory posted.
struct Link {
    a: Nic,
    ka: FakeKernel,
    fa: FlowId,
    b: Nic,
    kb: FakeKernel,
    fb: FlowId,
    recv: MrId,
}

fn link(payload: &[u8]) -> Link {
    let (mut a, ka) = Nic::fake(small()).expect("fake A");
    let (mut b, kb) = Nic::fake(small()).expect("fake B");
    let fa = a
        .add_flow(key(IP_A, 40000, IP_B, 5201), MAC_A, MAC_B, ISS_B, ISS_A)
        .expect("flow A");
    let fb = b
        .add_flow(key(IP_B, 5201, IP_A, 40000), MAC_B, MAC_A, ISS_A, ISS_B)
        .expect("flow B");
    let send = a.register_memory(4096, Access::SEND).expect("send memory");
    a.memory_mut(send).expect("send memory")[..payload.len()].copy_from_slice(payload);
    a.post_send(fa, send, 0, payload.len(), 7)
        .expect("post send");
    let recv = b.register_memory(4096, Access::RECV).expect("recv memory");
    b.post_recv(fb, recv, 0, 4096, 9).expect("post recv");
    Link {
        a,
        ka,
        fa,
        b,
        kb,
        fb,
        recv,
    }
}

fn data(len: u64) -> TxSegment {
    TxSegment {
        header: TcpHeader {
            seq: ISS_A + 1,
            ack: ISS_B + 1,
            flags: Flags::ACK | Flags::PSH,
            window: 1000,
            ..TcpHeader::default()
        },
        payload: Some(0..len),
        ecn: Ecn::NotEct,
        segment_size: 0,
    }
}

#[test]
fn a_fake_nic_transmits_and_another_receives_and_places_the_payload() {
    let payload: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let Link {
        mut a,
        mut ka,
        fa,
        mut b,
        mut kb,
        fb,
        recv,
    } = link(&payload);

    assert!(a.send(fa, &data(payload.len() as u64)).expect("send"));
    a.flush();
    let frames = ka.take_tx(&mut a);
    assert_eq!(frames.len(), 1, "one segment, one packet");

    // B's flow has a socket of its own: the steering puts it there.
    match kb.deliver(&mut b, &frames[0]) {
        Delivery::Received { slot } => assert!(slot >= FIRST_FLOW_SLOT, "slot {slot}"),
        other => panic!("not received: {other:?}"),
    }
    let mut records: Vec<RxRecord> = Vec::new();
    assert_eq!(b.poll_rx(64, &mut records), 1);
    let rec = &records[0];
    assert_eq!(rec.flow, Some(fb));
    assert_eq!(rec.src_mac, MAC_A);
    let placement = rec.placement.as_ref().expect("placed");
    assert_eq!(placement.verdict, Verdict::Placed);
    assert_eq!(rec.segment.accepted, 0..payload.len() as u64);
    assert!(
        b.memory(recv).expect("recv memory")[..payload.len()] == payload[..],
        "the payload is in B's receive memory"
    );

    // The frame stays in flight until the kernel completes it.
    assert_eq!((ka.held_completions(), a.tx_in_flight()), (1, 1));
    a.flush();
    assert_eq!(a.tx_in_flight(), 1, "no completion, no reclaim");
    assert_eq!(ka.complete_all(), 1);
    a.flush();
    assert_eq!((ka.held_completions(), a.tx_in_flight()), (0, 0));
}

#[test]
fn held_completions_hold_tx_frames_until_given_back() {
    let Link {
        mut a, mut ka, fa, ..
    } = link(&[1; 100]);
    let ack = control_segment(ISS_A + 1, ISS_B + 1, Flags::ACK, 1000);
    let mut sent = 0;
    while a.send(fa, &ack).expect("send") {
        sent += 1;
        a.flush();
        assert!(sent <= 8, "more packets than TX frames went out");
    }
    assert_eq!(sent, 8, "the 8 TX frames, then back-pressure");
    assert_eq!(ka.take_tx(&mut a).len(), 8);
    assert_eq!(ka.complete(3), 3);
    a.flush();
    assert!(
        a.send(fa, &ack).expect("send"),
        "a completed frame is free again"
    );
}

#[test]
fn the_in_memory_steering_passes_strangers_and_catches_listened_syns() {
    let (mut a, mut ka) = Nic::fake(small()).expect("fake A");
    let (mut b, mut kb) = Nic::fake(small()).expect("fake B");
    // A sends a SYN to B's port 80, for which B has no flow.
    let fa = a
        .add_flow(key(IP_A, 40001, IP_B, 80), MAC_A, MAC_B, 0, ISS_A)
        .expect("flow A");
    assert!(a
        .send(fa, &control_segment(ISS_A, 0, Flags::SYN, 1000))
        .expect("send"));
    a.flush();
    let syn = ka.take_tx(&mut a).pop().expect("a SYN");
    let fill_before = kb.fill_ring_frames().len();
    assert_eq!(kb.deliver(&mut b, &syn), Delivery::Passed);
    assert_eq!(kb.fill_ring_frames().len(), fill_before, "no frame used");

    b.listen(Ipv4Addr::from(IP_B), 80).expect("listen");
    assert_eq!(kb.deliver(&mut b, &syn), Delivery::Received { slot: 0 });
    assert_eq!(kb.fill_ring_frames().len(), fill_before - 1);
    let mut records = Vec::new();
    assert_eq!(b.poll_rx(64, &mut records), 1);
    assert_eq!(records[0].flow, None, "a SYN for a listener");
    assert!(records[0].segment.header.has(Flags::SYN));
    let steer = b.steering().counters().expect("counters");
    assert_eq!((steer.steered, steer.passed), (1, 1));
}

#[test]
fn a_fake_nic_and_its_kernel_can_each_move_to_another_thread() {
    fn send<T: Send>() {}
    send::<Nic>();
    send::<FakeKernel>();
}

/// The daemon's memory slots on a fake NIC: a region registered inside
/// slot 1 is the application's mapping of slot 1's memfd, both ways, and
/// slot 0's mapping does not see it; the slot is zeroed for reuse only
/// once nothing is registered in it.
#[test]
fn memory_slots_are_the_applications_mappings_of_the_mr_area() {
    use crate::shm::SharedMemory;
    use crate::sys::umem::MrSlots;
    let mut config = small();
    config.xsk.umem.mr_slots = Some(MrSlots {
        count: 2,
        len: 32 << 10,
        memory: None,
    });
    let (mut nic, _kernel) = Nic::fake(config).expect("fake nic with slots");
    assert_eq!((nic.mr_slot_count(), nic.mr_slot_len()), (2, 32 << 10));
    let len = nic.mr_slot_len();
    let map = |nic: &Nic, i| {
        let fd = nic.mr_slot_fd(i).expect("slot").try_clone_to_owned();
        SharedMemory::open(fd.expect("dup"), len).expect("maps")
    };
    let mut app1 = map(&nic, 1);
    let app0 = map(&nic, 0);

    let mr = nic
        .register_memory_in(len..2 * len, 1000, Access::BOTH)
        .expect("room in slot 1");
    let (offset, region_len) = nic.mr_extent(mr).expect("known");
    assert!((len..2 * len).contains(&offset) && region_len == 1000);
    nic.memory_mut(mr).expect("region")[..5].copy_from_slice(b"place");
    let at = offset - len;
    assert_eq!(&app1.bytes()[at..at + 5], b"place");
    assert!(app0.bytes().iter().all(|&b| b == 0), "slot 0 sees nothing");
    app1.bytes_mut()[at + 999] = 0x77;
    assert_eq!(nic.memory(mr).expect("region")[999], 0x77);

    let e = nic.zero_mr(len..2 * len).unwrap_err();
    assert!(e.to_string().contains("still registered"), "{e}");
    assert!(nic.zero_mr(0..3 * len).is_err(), "beyond the area");
    nic.deregister_memory(mr).expect("unreferenced");
    nic.zero_mr(len..2 * len).expect("free slot");
    assert!(app1.bytes().iter().all(|&b| b == 0), "zeroed for reuse");
    assert!(matches!(
        nic.register_memory_in(len..2 * len, len + 1, Access::RECV),
        Err(NicError::Mr(crate::mr::MrError::NoSpace { .. }))
    ));
}

/// Stream bytes `range` of A's send stream, as one segment.
fn data_at(range: std::ops::Range<u64>) -> TxSegment {
    let mut seg = data(range.end);
    seg.header.seq = ISS_A + 1 + range.start as u32;
    seg.payload = Some(range);
    seg
}

/// A sends `range` of its stream; B receives and places it.
fn carry(l: &mut Link, range: std::ops::Range<u64>) {
    assert!(l.a.send(l.fa, &data_at(range)).expect("send"));
    l.a.flush();
    for frame in l.ka.take_tx(&mut l.a) {
        assert!(matches!(
            l.kb.deliver(&mut l.b, &frame),
            Delivery::Received { .. }
        ));
    }
    let mut records = Vec::new();
    assert_eq!(l.b.poll_rx(64, &mut records), 1);
    assert!(records[0].placement.is_some(), "placed: {:?}", records[0]);
    l.ka.complete_all();
    l.a.flush();
}

/// Re-homing a receiving flow (a connection handed to a forked child):
/// bytes placed in order and out of order before the move are in the new
/// memory, and a segment placed after it lands there and only there.
#[test]
fn a_rehomed_flow_keeps_its_bytes_and_places_the_rest_in_the_new_memory() {
    use crate::ms::MrMove;
    let payload: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let mut l = link(&payload);
    carry(&mut l, 0..1000);
    carry(&mut l, 2000..3000);
    let to = l.b.register_memory(4096, Access::RECV).expect("new memory");
    let moved = l.b.rehome_flow(l.fb, &[MrMove { from: l.recv, to }]);
    assert_eq!(moved.expect("moves"), (4096, 0), "posted ends");
    l.b.memory_mut(l.recv).expect("old memory").fill(0);

    carry(&mut l, 1000..2000);
    assert!(
        l.b.memory(to).expect("new")[..3000] == payload[..],
        "every byte, before and after the move, is in the new memory"
    );
    assert!(l.b.memory(l.recv).expect("old").iter().all(|&b| b == 0));
    l.b.deregister_memory(l.recv)
        .expect("the old memory is no longer posted");
}

/// A move that cannot be made is refused naming why, and the flow goes on
/// in its old memory.
#[test]
fn a_refused_rehome_changes_nothing() {
    use crate::ms::{MrMove, MsError};
    let payload = [0x42u8; 1000];
    let mut l = link(&payload);
    let short = l.b.register_memory(1024, Access::RECV).expect("short");
    let posted = l.b.register_memory(4096, Access::RECV).expect("posted");
    let other =
        l.b.add_flow(key(IP_B, 5202, IP_A, 40000), MAC_B, MAC_A, 0, 0)
            .expect("another flow");
    l.b.post_recv(other, posted, 0, 10, 1).expect("post");
    let mv = |from, to| MrMove { from, to };
    let why = |r: Result<(u64, u64), NicError>| match r {
        Err(NicError::BadMove { why, .. }) => why,
        other => panic!("not a bad move: {other:?}"),
    };
    let (b, fb, recv) = (&mut l.b, l.fb, l.recv);
    assert_eq!(
        why(b.rehome_flow(fb, &[mv(recv, recv)])),
        "they are the same region"
    );
    assert_eq!(
        why(b.rehome_flow(fb, &[mv(recv, short)])),
        "their lengths differ"
    );
    assert_eq!(
        why(b.rehome_flow(fb, &[mv(recv, posted)])),
        "the new region is posted on"
    );
    let fresh = b.register_memory(4096, Access::RECV).expect("fresh");
    assert_eq!(
        why(b.rehome_flow(fb, &[mv(recv, fresh), mv(posted, fresh)])),
        "a region is named by two moves"
    );
    assert!(matches!(
        b.rehome_flow(fb, &[mv(posted, fresh)]),
        Err(NicError::Ms(MsError::NotMoved { wr_id: 9, .. }))
    ));
    b.post_recv(other, recv, 100, 10, 2)
        .expect("another flow posts");
    assert_eq!(
        why(b.rehome_flow(fb, &[mv(recv, fresh)])),
        "another flow holds the old region"
    );
    b.memory_mut(fresh).expect("fresh")[0] = 0x77;
    assert!(b.deregister_memory(recv).is_err(), "still posted on");

    carry(&mut l, 0..1000);
    assert!(l.b.memory(l.recv).expect("old")[..1000] == payload[..]);
    assert_eq!(
        l.b.memory(fresh).expect("fresh")[..2],
        [0x77, 0],
        "not copied into"
    );
}

/// Re-homing a sending flow while a zero-copy chain still reads its old
/// memory: the old region stays referenced (not to be reused) until the
/// descriptors return, and a retransmission reads the new memory.
#[test]
fn a_rehomed_sender_retransmits_from_the_new_memory_and_frees_the_old_once_read() {
    use crate::ms::MrMove;
    let payload: Vec<u8> = (0..1000u32).map(|i| (i % 241) as u8).collect();
    let mut config = small();
    config.xsk.multi_buffer = true;
    config.tx_strategy = Some(crate::nic::TxStrategy::Chain);
    let (mut a, ka) = Nic::fake(config).expect("fake A");
    let mut l = link(&payload);
    let fa = a
        .add_flow(key(IP_A, 40000, IP_B, 5201), MAC_A, MAC_B, ISS_B, ISS_A)
        .expect("flow A");
    let send = a.register_memory(4096, Access::SEND).expect("send memory");
    a.memory_mut(send).expect("send")[..1000].copy_from_slice(&payload);
    a.post_send(fa, send, 0, 1000, 7).expect("post");
    (l.a, l.ka, l.fa) = (a, ka, fa);

    assert!(l.a.send(l.fa, &data(1000)).expect("send"));
    l.a.flush();
    let lost = l.ka.take_tx(&mut l.a);
    assert_eq!(lost.len(), 1, "sent, never delivered, not completed");
    let to = l.a.register_memory(4096, Access::SEND).expect("new memory");
    let moved = l.a.rehome_flow(l.fa, &[MrMove { from: send, to }]);
    assert_eq!(moved.expect("moves"), (0, 1000), "posted ends");
    assert!(
        matches!(l.a.deregister_memory(send), Err(NicError::Mr(_))),
        "a descriptor still reads the old memory"
    );
    l.a.memory_mut(send).expect("old")[..1000].fill(0xee);

    // The retransmission goes out of the new memory: B places the payload.
    l.ka.complete_all();
    l.a.flush();
    carry(&mut l, 0..1000);
    assert!(l.b.memory(l.recv).expect("B")[..1000] == payload[..]);
    l.a.deregister_memory(send)
        .expect("the old memory is free once its descriptors returned");
    let mut out = Vec::new();
    l.a.complete_send(l.fa, 1000, &mut out).expect("acked");
    assert_eq!(
        out,
        vec![crate::ms::Completion {
            wr_id: 7,
            len: 1000
        }]
    );
}

/// IPv6 not ours is the kernel's, as the XDP program has it: a TCP
/// segment to a port nobody claimed and an ICMPv6 neighbour solicitation
/// are passed, not counted malformed.
#[test]
fn the_in_memory_steering_passes_ipv6_as_the_program_does() {
    let (mut b, mut kb) = Nic::fake(small()).expect("fake B");
    for next_header in [6, 58] {
        let mut frame = vec![0u8; 14 + 40 + 20];
        frame[..6].copy_from_slice(&MAC_B);
        frame[6..12].copy_from_slice(&MAC_A);
        frame[12..14].copy_from_slice(&[0x86, 0xdd]);
        frame[14] = 0x60;
        frame[14 + 5] = 20;
        frame[14 + 6] = next_header;
        frame[14 + 8..14 + 24]
            .copy_from_slice(&"2001:2::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        frame[14 + 24..14 + 40]
            .copy_from_slice(&"2001:2::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        frame[54 + 12] = 0x50;
        assert_eq!(kb.deliver(&mut b, &frame), Delivery::Passed);
    }
    let c = b.steering().counters().expect("counters");
    assert_eq!((c.passed, c.malformed), (2, 0));
}
