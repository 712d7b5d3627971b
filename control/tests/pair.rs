//! The host, the header-only TCP engine and the datapath, two of each over
//! the fake kernel ([`zerosplit::testing::Pair`]): the handshake and its
//! refusals, the listen backlog, back-pressure, retirement and
//! completions, without root.

use std::time::Duration;

use datapath::mr::Access;
use datapath::testing::Delivery;
use proto::Flags;
use transports::segment::CloseReason;
use transports::tcp::State;
use zerosplit::host::{HostConfig, HostError};
use zerosplit::provider::{Completion, CompletionKind, ConnId, Provider};
use zerosplit::stack::Stack;
use zerosplit::testing::{From, Pair};

const PORT: u16 = 5201;

/// Every completion `stack` has queued.
fn take(stack: &mut Stack) -> Vec<Completion> {
    std::iter::from_fn(|| stack.poll_completion()).collect()
}

fn has(cs: &[Completion], id: ConnId, kind: CompletionKind) -> bool {
    cs.iter().any(|c| c.conn == id && c.kind == kind)
}

/// A connected pair: A's connection and B's accepted one.
fn connected(pair: &mut Pair) -> (ConnId, ConnId) {
    pair.b.stack.listen(PORT).expect("listen");
    let a = pair
        .a
        .stack
        .connect(pair.b_addr(PORT).into())
        .expect("connect");
    let mut b = None;
    assert!(
        pair.run_until(50, |p| {
            b = b.or_else(|| p.b.stack.accept(PORT).expect("accept"));
            b.is_some() && p.a.stack.state(a).ok() == Some(State::Established)
        }),
        "no handshake: {:?}",
        pair.log
    );
    let b = b.expect("accepted");
    assert!(has(&take(&mut pair.a.stack), a, CompletionKind::Connected));
    assert!(has(&take(&mut pair.b.stack), b, CompletionKind::Connected));
    (a, b)
}

#[test]
fn a_connect_to_a_listener_completes_the_three_way_handshake() {
    let mut pair = Pair::new();
    let (a, b) = connected(&mut pair);
    assert_eq!(pair.b.stack.state(b).expect("b"), State::Established);
    let hs: Vec<_> = pair.log.iter().take(3).collect();
    assert_eq!(hs.len(), 3, "{:?}", pair.log);
    assert!(hs[0].from == From::A && hs[0].flags == Flags::SYN, "{hs:?}");
    assert!(
        hs[1].from == From::B && hs[1].flags == Flags::SYN | Flags::ACK,
        "{hs:?}"
    );
    assert_eq!(hs[1].ack, hs[0].seq.wrapping_add(1));
    assert!(hs[2].from == From::A && hs[2].flags == Flags::ACK, "{hs:?}");
    assert_eq!(hs[2].ack, hs[1].seq.wrapping_add(1));
    // Each side's steering gave the handshake to zerosplit, not the kernel.
    assert!(hs
        .iter()
        .all(|s| matches!(s.delivery, Some(Delivery::Received { .. }))));
    assert_eq!(pair.a.stack.counters().connected, 1);
    assert_eq!(pair.b.stack.counters().accepted, 1);
    assert!(pair.a.stack.flow_of(a).is_some());
}

#[test]
fn a_syn_to_a_closed_port_goes_to_the_kernel_and_its_reset_refuses_the_connect() {
    let mut pair = Pair::new();
    let a = pair
        .a
        .stack
        .connect(pair.b_addr(PORT).into())
        .expect("connect");
    let mut cs = Vec::new();
    assert!(pair.run_until(20, |p| {
        cs.extend(take(&mut p.a.stack));
        !cs.is_empty()
    }));
    let syn = pair.sent_by(From::A).next().expect("a SYN");
    assert_eq!(syn.delivery, Some(Delivery::Passed), "{:?}", pair.log);
    let rst = pair.sent_by(From::Kernel).next().expect("the kernel's RST");
    assert!(rst.has(Flags::RST | Flags::ACK));
    assert!(
        has(&cs, a, CompletionKind::Closed(CloseReason::Refused))
            || has(&cs, a, CompletionKind::Closed(CloseReason::Reset)),
        "{cs:?}"
    );
    assert_eq!(pair.a.stack.connections(), 0);
    assert_eq!(pair.b.stack.connections(), 0);
    assert_eq!(pair.b.stack.counters().accepted, 0);
    assert_eq!(pair.b.stack.counters().stray_segments, 0);
}

#[test]
fn a_full_backlog_refuses_and_counts_syns_and_admits_again_once_accepted() {
    let config = HostConfig {
        backlog: 2,
        ..Pair::config()
    };
    let mut pair = Pair::with_config(&config);
    pair.b.stack.listen(PORT).expect("listen");
    // Two handshakes complete and wait in B's accept queue.
    let mut ids: Vec<ConnId> = (0..2)
        .map(|_| {
            pair.a
                .stack
                .connect(pair.b_addr(PORT).into())
                .expect("connect")
        })
        .collect();
    pair.drive(20);
    assert_eq!(pair.b.stack.counters().syn_refused, 0);
    // A third finds the backlog full.
    ids.push(
        pair.a
            .stack
            .connect(pair.b_addr(PORT).into())
            .expect("connect"),
    );
    pair.drive(20);
    let established = |p: &Pair| {
        ids.iter()
            .filter(|id| p.a.stack.state(**id).ok() == Some(State::Established))
            .count()
    };
    assert_eq!(established(&pair), 2, "{:?}", pair.log);
    let refused = pair.b.stack.counters().syn_refused;
    assert!(refused >= 1, "syn_refused {refused}");
    assert_eq!(pair.b.stack.counters().accepted, 2);
    // Room again: A's SYN retransmission (after its initial RTO) gets in.
    assert!(pair.b.stack.accept(PORT).expect("accept").is_some());
    pair.tick = Duration::from_millis(50);
    assert!(
        pair.run_until(200, |p| established(p) == 3),
        "{:?}",
        pair.log
    );
    assert_eq!(pair.b.stack.counters().accepted, 3);
}

#[test]
fn a_full_completion_queue_refuses_posts_and_pauses_receiving() {
    let config = HostConfig {
        completion_queue: 3,
        ..Pair::config()
    };
    let mut pair = Pair::with_config(&config);
    let (a, b) = connected(&mut pair);
    let send = pair
        .a
        .stack
        .register_memory(8192, Access::SEND)
        .expect("mr");
    let recv = pair
        .b
        .stack
        .register_memory(8192, Access::RECV)
        .expect("mr");
    for i in 0..4u64 {
        pair.b
            .stack
            .post_recv(b, recv, i as usize * 1000, 1000, i)
            .expect("post recv");
    }
    for i in 0..4u64 {
        pair.a
            .stack
            .post_send(a, send, i as usize * 1000, 1000, i)
            .expect("post send");
        for _ in 0..5 {
            pair.step();
            take(&mut pair.a.stack);
        }
    }
    pair.drive(20);
    // B took no completions: its queue stopped at the bound, posting is
    // refused and receiving paused.
    assert_eq!(pair.b.stack.completions_queued(), 3);
    let e = pair.b.stack.post_recv(b, recv, 4000, 1000, 9).unwrap_err();
    assert!(
        matches!(e, HostError::CompletionQueueFull { capacity: 3 }),
        "{e}"
    );
    assert!(pair.b.stack.counters().rx_paused > 0);
    assert_eq!(pair.b.stack.received(b).expect("received"), 3000);
    // Taking them lets the fourth in.
    assert_eq!(take(&mut pair.b.stack).len(), 3);
    pair.tick = Duration::from_millis(50);
    assert!(pair.run_until(100, |p| p.b.stack.received(b).ok() == Some(4000)));
}

#[test]
fn close_retires_both_flows_and_the_connections() {
    let mut pair = Pair::new();
    let (a, b) = connected(&mut pair);
    let (fa, fb) = (
        pair.a.stack.flow_of(a).expect("flow a"),
        pair.b.stack.flow_of(b).expect("flow b"),
    );
    assert!(pair.a.stack.nic().flow(fa).is_some());
    pair.a.stack.close(a).expect("close a");
    let mut b_closed = false;
    assert!(pair.run_until(50, |p| {
        let cs = take(&mut p.b.stack);
        if has(&cs, b, CompletionKind::PeerClosed { len: 0 }) {
            p.b.stack.close(b).expect("close b");
        }
        b_closed |= has(&cs, b, CompletionKind::Closed(CloseReason::Graceful));
        b_closed
    }));
    // A waits in TIME-WAIT; let its clock run past it.
    pair.tick = Duration::from_secs(1);
    let mut a_closed = false;
    assert!(pair.run_until(300, |p| {
        a_closed |= has(
            &take(&mut p.a.stack),
            a,
            CompletionKind::Closed(CloseReason::Graceful),
        );
        a_closed
    }));
    pair.drive(2);
    assert_eq!(pair.a.stack.connections(), 0);
    assert_eq!(pair.b.stack.connections(), 0);
    assert!(pair.a.stack.flow_of(a).is_none());
    assert!(
        pair.a.stack.nic().flow(fa).is_none(),
        "A's flow not retired"
    );
    assert!(
        pair.b.stack.nic().flow(fb).is_none(),
        "B's flow not retired"
    );
}

/// A connected pair with 500 bytes in A's send memory and room for them
/// (and more, so the scaled window covers them) posted at B.
fn ready_to_send(pair: &mut Pair) -> (ConnId, ConnId, datapath::mr::MrId) {
    let (a, b) = connected(pair);
    let send = pair
        .a
        .stack
        .register_memory(4096, Access::SEND)
        .expect("mr");
    let recv = pair
        .b
        .stack
        .register_memory(4096, Access::RECV)
        .expect("mr");
    pair.b.stack.post_recv(b, recv, 0, 500, 1).expect("recv");
    // More space behind it: the window (in units of the window scale)
    // then covers all 500 bytes.
    pair.b.stack.post_recv(b, recv, 500, 3000, 2).expect("recv");
    // The window update reaches A.
    pair.drive(5);
    (a, b, send)
}

#[test]
fn a_send_completes_only_after_the_peer_acked_it() {
    let mut pair = Pair::new();
    let (a, b, send) = ready_to_send(&mut pair);
    // No ACK comes back: the send stays posted though B has the bytes.
    pair.cut = Some(From::B);
    pair.a.stack.post_send(a, send, 0, 500, 7).expect("send");
    pair.drive(20);
    let cs = take(&mut pair.b.stack);
    assert!(has(&cs, b, CompletionKind::Recv), "{cs:?} {:?}", pair.log);
    assert!(!has(&take(&mut pair.a.stack), a, CompletionKind::Send));
    assert_eq!(pair.a.stack.acked(a).expect("acked"), 0);
    // The link heals; B's ACK of the retransmission completes the send.
    pair.cut = None;
    pair.tick = Duration::from_millis(100);
    let mut cs = Vec::new();
    assert!(pair.run_until(100, |p| {
        cs.extend(take(&mut p.a.stack));
        has(&cs, a, CompletionKind::Send)
    }));
    assert_eq!(pair.a.stack.acked(a).expect("acked"), 500);
    let c = cs
        .iter()
        .find(|c| c.kind == CompletionKind::Send)
        .expect("send");
    assert_eq!((c.wr_id, c.len), (7, 500));
}

/// With the zero-copy chain strategy a TX descriptor points into the
/// application's send memory: the send completes only once the ACK came
/// and the NIC gave every descriptor back. (The copy strategy copies the
/// payload next to the header, so there the ACK alone completes it.)
#[test]
fn a_zero_copy_send_completes_only_after_the_nic_sent_it() {
    let mut config = Pair::config();
    config.nic.xsk.multi_buffer = true;
    config.nic.tx_strategy = Some(datapath::nic::TxStrategy::Chain);
    let mut pair = Pair::with_config(&config);
    let (a, _, send) = ready_to_send(&mut pair);
    // The NIC holds A's frames (delivered, never reported sent).
    pair.a.hold_tx = true;
    pair.a.stack.post_send(a, send, 0, 500, 7).expect("send");
    // B's ACK of all 500 bytes reaches A.
    let acked_all = |p: &Pair| {
        let data = p.sent_by(From::A).find(|s| s.len == 500);
        data.is_some_and(|d| {
            p.sent_by(From::B).any(|s| {
                s.ack == d.seq.wrapping_add(500)
                    && matches!(s.delivery, Some(Delivery::Received { .. }))
            })
        })
    };
    assert!(pair.run_until(20, |p| acked_all(p)), "{:?}", pair.log);
    pair.drive(5);
    assert!(!has(&take(&mut pair.a.stack), a, CompletionKind::Send));
    assert_eq!(pair.a.stack.send_memory_in_flight(send, 0, 500), Some(true));
    // The NIC reports them sent: the send completes, the memory is free.
    pair.a.hold_tx = false;
    let mut cs = Vec::new();
    assert!(pair.run_until(5, |p| {
        cs.extend(take(&mut p.a.stack));
        has(&cs, a, CompletionKind::Send)
    }));
    assert_eq!(
        pair.a.stack.send_memory_in_flight(send, 0, 500),
        Some(false)
    );
}

/// The copy counters `zerosplit bench` reads per byte: every payload byte
/// A sends is copied into a TX frame once (the copy strategy of a
/// single-buffer queue), every byte B receives is placed once, and the
/// header-only transport touches none; after B's connection is gone, its
/// placed bytes still count.
#[test]
fn payload_copies_count_each_sent_and_placed_byte_once() {
    const LEN: usize = 64 << 10;
    let mut pair = Pair::new();
    let (a, b) = connected(&mut pair);
    let tx = pair
        .a
        .stack
        .register_memory(LEN, Access::SEND)
        .expect("send region");
    pair.a.stack.memory_mut(tx).expect("memory").fill(7);
    let rx = pair
        .b
        .stack
        .register_memory(LEN, Access::RECV)
        .expect("recv region");
    pair.b.stack.post_recv(b, rx, 0, LEN, 1).expect("post recv");
    pair.a.stack.post_send(a, tx, 0, LEN, 2).expect("post send");
    assert!(
        pair.run_until(500, |p| p.b.stack.received(b).ok() == Some(LEN as u64)
            && p.a.stack.acked(a).ok() == Some(LEN as u64)),
        "transfer did not finish"
    );
    let sent = pair.a.stack.payload_copies();
    let got = pair.b.stack.payload_copies();
    assert_eq!(sent.tx_copied, LEN as u64, "{sent:?}");
    assert_eq!(sent.tx_chained, 0);
    assert_eq!(sent.transport_touched, 0);
    assert_eq!(got.rx_placed, LEN as u64, "{got:?}");
    assert_eq!(got.copied(), LEN as u64);
    pair.b.stack.abort(b).expect("abort");
    pair.drive(20);
    assert_eq!(pair.b.stack.payload_copies().rx_placed, LEN as u64);
}

/// A connection's memory moved mid-transfer on both ends (what a forked
/// child taking up a used connection asks of the daemon): the bytes B had
/// not completed and those A had not yet had acknowledged travel with the
/// copy, the rest arrives in and leaves from the new memory, byte-exact.
#[test]
fn a_connection_rehomed_mid_transfer_on_both_ends_stays_byte_exact() {
    use datapath::ms::MrMove;
    const LEN: usize = 64 << 10;
    const WR: usize = LEN / 4;
    let pattern: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let mut pair = Pair::new();
    let (a, b) = connected(&mut pair);
    let tx = pair.a.stack.register_memory(LEN, Access::SEND).expect("tx");
    pair.a
        .stack
        .memory_mut(tx)
        .expect("tx")
        .copy_from_slice(&pattern);
    let rx = pair.b.stack.register_memory(LEN, Access::RECV).expect("rx");
    for i in 0..4 {
        pair.b
            .stack
            .post_recv(b, rx, i * WR, WR, i as u64)
            .expect("recv");
        pair.a
            .stack
            .post_send(a, tx, i * WR, WR, i as u64)
            .expect("send");
    }
    assert!(
        pair.run_until(500, |p| p.b.stack.received(b).ok() >= Some(LEN as u64 / 3)),
        "the transfer did not start"
    );
    let (got, acked) = (
        pair.b.stack.received(b).expect("b"),
        pair.a.stack.acked(a).expect("a"),
    );
    assert!(got < LEN as u64 && acked < LEN as u64, "moved mid-transfer");

    let tx2 = pair
        .a
        .stack
        .register_memory(LEN, Access::SEND)
        .expect("tx2");
    let rx2 = pair
        .b
        .stack
        .register_memory(LEN, Access::RECV)
        .expect("rx2");
    let moved = pair.a.stack.rehome(a, &[MrMove { from: tx, to: tx2 }]);
    assert_eq!(moved.expect("A moves"), (0, LEN as u64), "posted ends");
    let moved = pair.b.stack.rehome(b, &[MrMove { from: rx, to: rx2 }]);
    assert_eq!(moved.expect("B moves"), (LEN as u64, 0), "posted ends");
    // The old memory goes back to its owner, who may scribble on it.
    pair.a.stack.memory_mut(tx).expect("old tx").fill(0xee);
    pair.b.stack.memory_mut(rx).expect("old rx").fill(0xee);

    let mut done = (Vec::new(), Vec::new());
    assert!(
        pair.run_until(2000, |p| {
            done.0.extend(take(&mut p.a.stack));
            done.1.extend(take(&mut p.b.stack));
            let complete = |cs: &[Completion], kind| cs.iter().filter(|c| c.kind == kind).count();
            complete(&done.0, CompletionKind::Send) == 4
                && complete(&done.1, CompletionKind::Recv) == 4
        }),
        "the transfer did not finish: {done:?}"
    );
    assert!(
        pair.b.stack.memory(rx2).expect("rx2") == &pattern[..],
        "B's new memory holds the stream"
    );
    pair.a
        .stack
        .deregister_memory(tx)
        .expect("A's old memory is free");
    pair.b
        .stack
        .deregister_memory(rx)
        .expect("B's old memory is free");
}
