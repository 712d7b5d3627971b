//! Many concurrent connections between two zerosplit stacks (issue 13,
//! item 6): 256 connections on one queue each carry their own payload
//! from one stack to the other, and every byte of every connection
//! arrives where its connection's receive buffer says (no connection
//! starves, none gets another's bytes).
//!
//! Builds its own namespaces joined by veth. Needs root.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use datapath::mr::Access;
use transports::segment::CloseReason;
use zerosplit::host::HostConfig;
use zerosplit::provider::Provider;
use zerosplit::provider::{CompletionKind, ConnId};
use zerosplit::stack::Stack;
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{heavy, pattern, require_root, wait_for};

const PORT: u16 = 5088;
const FLOWS: usize = 256;
/// Payload per connection.
const LEN: usize = 48 << 10;
const LIMIT: Duration = Duration::from_secs(60);

/// Connection `i`'s payload: a pattern seeded by `i`, its first four
/// bytes `i` itself, so the receiver knows what to expect.
fn payload(i: usize) -> Vec<u8> {
    let mut p = pattern(LEN, 1000 + i as u64);
    p[..4].copy_from_slice(&(i as u32).to_le_bytes());
    p
}

fn config() -> HostConfig {
    HostConfig {
        backlog: 2 * FLOWS,
        max_half_open: 2 * FLOWS,
        ..HostConfig::default()
    }
}

/// Accepts `FLOWS` connections, each receiving into its own `LEN` slice,
/// until every FIN; returns each slice.
fn receive(stack: &mut Stack, ready: &AtomicBool) -> Vec<Vec<u8>> {
    stack.listen(PORT).expect("listen");
    let mr = stack
        .register_memory(FLOWS * LEN, Access::RECV)
        .expect("receive memory");
    ready.store(true, Ordering::Release);
    let mut slot: HashMap<ConnId, usize> = HashMap::new();
    let mut conns = Vec::new();
    let mut pending_fin: Vec<(ConnId, u64)> = Vec::new();
    let mut finished = HashSet::new();
    let deadline = Instant::now() + LIMIT;
    while finished.len() < FLOWS {
        assert!(
            Instant::now() < deadline,
            "{} accepted, {} of {FLOWS} complete",
            conns.len(),
            finished.len()
        );
        stack.poll();
        while let Some(c) = stack.accept(PORT).expect("accept") {
            let i = conns.len();
            assert!(i < FLOWS, "more connections than were opened");
            stack
                .post_recv(c, mr, i * LEN, LEN, i as u64)
                .expect("post receive");
            slot.insert(c, i);
            conns.push(c);
        }
        while let Some(c) = stack.poll_completion() {
            match c.kind {
                CompletionKind::PeerClosed { len } => pending_fin.push((c.conn, len)),
                // Only a connection this side closed (after its FIN and
                // every byte) may end.
                CompletionKind::Closed(r) => assert!(
                    finished.contains(&c.conn),
                    "connection {:?} closed early: {r:?}",
                    slot.get(&c.conn)
                ),
                _ => {}
            }
        }
        pending_fin.retain(|&(c, len)| {
            assert_eq!(len, LEN as u64, "stream length");
            if stack.received(c).is_ok_and(|r| r >= len) {
                stack.close(c).ok();
                finished.insert(c);
                false
            } else {
                true
            }
        });
    }
    for _ in 0..200 {
        stack.poll();
    }
    let memory = stack.memory(mr).expect("memory");
    (0..FLOWS)
        .map(|i| memory[i * LEN..(i + 1) * LEN].to_vec())
        .collect()
}

/// Opens `FLOWS` connections and sends connection `i` its payload.
fn send(stack: &mut Stack, to: SocketAddrV4) {
    let mr = stack
        .register_memory(FLOWS * LEN, Access::SEND)
        .expect("send memory");
    {
        let memory = stack.memory_mut(mr).expect("memory");
        for i in 0..FLOWS {
            memory[i * LEN..(i + 1) * LEN].copy_from_slice(&payload(i));
        }
    }
    let conns: Vec<ConnId> = (0..FLOWS)
        .map(|_| stack.connect(to.into()).expect("connect"))
        .collect();
    let index: HashMap<ConnId, usize> = conns.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    let (mut connected, mut acked) = (0, 0);
    let mut ended = vec![false; FLOWS];
    let deadline = Instant::now() + LIMIT;
    while acked < FLOWS {
        assert!(
            Instant::now() < deadline,
            "{connected} connected, {acked} of {FLOWS} acknowledged"
        );
        stack.poll();
        while let Some(c) = stack.poll_completion() {
            let Some(&i) = index.get(&c.conn) else {
                continue;
            };
            match c.kind {
                CompletionKind::Connected => {
                    connected += 1;
                    stack
                        .post_send(c.conn, mr, i * LEN, LEN, i as u64)
                        .expect("post send");
                    stack.close(c.conn).expect("close after the payload");
                }
                // A graceful close means the FIN after the payload was
                // acknowledged, so the payload was too (its completion
                // may come after the close's).
                CompletionKind::Send | CompletionKind::Closed(CloseReason::Graceful)
                    if !ended[i] =>
                {
                    ended[i] = true;
                    acked += 1;
                }
                CompletionKind::Send | CompletionKind::Closed(CloseReason::Graceful) => {}
                CompletionKind::Closed(r) => {
                    panic!("connection {i} closed before its payload was acknowledged: {r:?}")
                }
                _ => {}
            }
        }
    }
    for _ in 0..200 {
        stack.poll();
    }
}

#[test]
fn two_hundred_fifty_six_connections_carry_every_byte_to_its_own_buffer() {
    require_root();
    let _serial = heavy();
    let a = NetNs::new("zmfa").expect("netns");
    let b = NetNs::new("zmfb").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let ready = AtomicBool::new(false);
    let (buffers, receiver, sender) = thread::scope(|s| {
        let rx = s.spawn(|| {
            in_netns(&a, || {
                let mut stack = Stack::new(&pair.a.ifname, config()).expect("receiver stack");
                let buffers = receive(&mut stack, &ready);
                (buffers, stack.counters())
            })
        });
        wait_for(&ready, Duration::from_secs(20), "receiver listening");
        let sender = in_netns(&b, || {
            let mut stack = Stack::new(&pair.b.ifname, config()).expect("sender stack");
            send(&mut stack, SocketAddrV4::new(pair.a.addr, PORT));
            stack.counters()
        });
        let (buffers, receiver) = rx.join().expect("receiver thread");
        (buffers, receiver, sender)
    });
    assert_eq!(receiver.accepted, FLOWS as u64, "{receiver:?}");
    assert_eq!(sender.connected, FLOWS as u64, "{sender:?}");
    let mut seen = vec![false; FLOWS];
    for (slot, got) in buffers.iter().enumerate() {
        let i = u32::from_le_bytes([got[0], got[1], got[2], got[3]]) as usize;
        assert!(
            i < FLOWS,
            "slot {slot} starts with {i}: not a connection's payload"
        );
        assert!(!seen[i], "connection {i}'s payload arrived twice");
        seen[i] = true;
        assert!(
            *got == payload(i),
            "slot {slot}: connection {i}'s bytes differ"
        );
    }
}
