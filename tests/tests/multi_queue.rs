//! Several receive queues: one stack per queue of a two-queue veth, each on
//! its own thread, sharing one steering program (`zerosplit::shards`).
//!
//! veth hands a packet to the receive queue the peer transmitted it on, and
//! Linux picks a transmit queue per socket by hash, so Linux connections
//! spread over both queues the way RSS spreads them on a NIC. Flows whose
//! packets land on the queue that does not own them (the reply to an
//! outgoing SYN hashed elsewhere) are handed over between queues.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use datapath::mr::Access;
use transports::cc::Algorithm;
use zerosplit::config::{ListenConfig, Service};
use zerosplit::host::{HostConfig, Threads};
use zerosplit::provider::CompletionKind;
use zerosplit::provider::Provider;
use zerosplit::service::serve;
use zerosplit::shards::run_sharded;
use zerosplit::stack::Stack;
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{connect_retrying, heavy, pattern, require_root, wait_for, RaiseOnDrop};

const QUEUES: u32 = 2;

struct Lab {
    pair: VethPair,
    b: NetNs,
    a: NetNs,
}

fn lab() -> Lab {
    require_root();
    let a = NetNs::new("zqa").expect("netns");
    let b = NetNs::new("zqb").expect("netns");
    let pair = VethPair::create_with_queues(&a, &b, 1500, QUEUES).expect("veth");
    Lab { pair, b, a }
}

fn configs(threads: Threads) -> Vec<HostConfig> {
    (0..QUEUES)
        .map(|queue| {
            let mut c = HostConfig {
                threads,
                ..HostConfig::default()
            };
            c.nic.queue = queue;
            // 16 echo connections may all land on one queue: 2 MiB each.
            c.nic.xsk.umem.mr_bytes = 40 << 20;
            c.tcp.algorithm = Algorithm::Cubic;
            c
        })
        .collect()
}

/// One Linux client of the echo service: sends `len` bytes while reading
/// the echo back, half-closes, and returns what came back.
fn echo_client(addr: SocketAddrV4, len: usize, seed: u64) -> Vec<u8> {
    let mut s = connect_retrying(addr, Duration::from_secs(10));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut w = s.try_clone().expect("clone");
    let writer = thread::spawn(move || {
        w.write_all(&pattern(len, seed)).expect("send");
        w.shutdown(Shutdown::Write).expect("FIN");
    });
    let mut back = Vec::with_capacity(len);
    let _ = s.read_to_end(&mut back);
    writer.join().expect("writer");
    back
}

fn echo_service_serves_linux_clients_on_every_queue(threads: Threads, clients: usize, each: usize) {
    let _serial = heavy();
    let lab = lab();
    let stop = AtomicBool::new(false);
    let listening = std::sync::atomic::AtomicUsize::new(0);
    let listeners = [ListenConfig {
        address: std::net::Ipv4Addr::UNSPECIFIED,
        port: 7,
        service: Service::Echo,
    }];
    let (sharded, echoes) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                run_sharded(&lab.pair.a.ifname, configs(threads), |_, stack| {
                    listening.fetch_add(1, Ordering::AcqRel);
                    serve(stack, &listeners, &stop).expect("serve")
                })
                .expect("sharded stacks")
            })
        });
        // Stops the service however the client side below ends.
        let stop_service = RaiseOnDrop(&stop);
        let deadline = Instant::now() + Duration::from_secs(20);
        while listening.load(Ordering::Acquire) < QUEUES as usize && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        // The listeners install before the first poll; give them a moment.
        thread::sleep(Duration::from_millis(100));
        let addr = SocketAddrV4::new(lab.pair.a.addr, 7);
        let echoes: Vec<Vec<u8>> = in_netns(&lab.b, || {
            thread::scope(|c| {
                let hs: Vec<_> = (0..clients)
                    .map(|i| c.spawn(move || echo_client(addr, each, 500 + i as u64)))
                    .collect();
                hs.into_iter().map(|h| h.join().expect("client")).collect()
            })
        });
        drop(stop_service);
        (server.join().expect("server"), echoes)
    });
    for (i, back) in echoes.iter().enumerate() {
        assert!(
            back.as_slice() == pattern(each, 500 + i as u64).as_slice(),
            "client {i}: {} bytes came back, not its own {each}",
            back.len()
        );
    }
    let per_queue: Vec<(u32, u64)> = sharded
        .results
        .iter()
        .map(|(q, r)| (*q, r.connections))
        .collect();
    let total: u64 = per_queue.iter().map(|(_, n)| n).sum();
    assert_eq!(total, clients as u64, "every connection accepted once");
    let echoed: u64 = sharded.results.iter().map(|(_, r)| r.bytes_echoed).sum();
    assert_eq!(echoed, (clients * each) as u64);
    // Linux hashes each socket to a transmit queue at random: with this
    // many clients, both queues get some (all on one: p = 2^(1-clients)).
    assert!(
        per_queue.iter().all(|&(_, n)| n > 0),
        "connections per queue {per_queue:?}: one queue served none"
    );
    eprintln!(
        "connections per queue {per_queue:?}; handed between queues: {:?}; steering {:?}",
        sharded.group, sharded.steering
    );
}

#[test]
fn echo_service_on_two_queues_serves_linux_clients_on_both() {
    echo_service_serves_linux_clients_on_every_queue(Threads::RunToCompletion, 16, 2 << 20);
}

#[test]
fn echo_service_on_two_queues_in_dedicated_mode() {
    // Two queues × (datapath + transport thread) on a 2-core machine, next
    // to 16 Linux clients: smaller transfers keep it inside its bound.
    let threads = Threads::Dedicated {
        datapath_core: None,
        transport_core: None,
        queue: 4096,
    };
    echo_service_serves_linux_clients_on_every_queue(threads, 16, 256 << 10);
}

/// Opens `conns` connections from `stack` to `remote`, sends each `each`
/// bytes, and checks that the Linux echo server's replies land byte-exact.
fn zerosplit_echo_clients(
    stack: &mut Stack,
    remote: SocketAddrV4,
    conns: usize,
    each: usize,
    seed: u64,
) -> Result<usize, String> {
    let send = stack
        .register_memory(conns * each, Access::SEND)
        .map_err(|e| e.to_string())?;
    let recv = stack
        .register_memory(conns * each, Access::RECV)
        .map_err(|e| e.to_string())?;
    for i in 0..conns {
        let bytes = pattern(each, seed + i as u64);
        stack.memory_mut(send).map_err(|e| e.to_string())?[i * each..(i + 1) * each]
            .copy_from_slice(&bytes);
    }
    for i in 0..conns {
        let c = stack.connect(remote.into()).map_err(|e| e.to_string())?;
        stack
            .post_recv(c, recv, i * each, each, i as u64)
            .map_err(|e| e.to_string())?;
        stack
            .post_send(c, send, i * each, each, i as u64)
            .map_err(|e| e.to_string())?;
    }
    let mut received = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while received < conns && Instant::now() < deadline {
        stack.poll();
        while let Some(c) = stack.poll_completion() {
            match c.kind {
                // FIN after the posted bytes: the server echoes until it.
                CompletionKind::Connected => stack.close(c.conn).map_err(|e| e.to_string())?,
                CompletionKind::Recv => received += 1,
                CompletionKind::Closed(reason)
                    if reason != transports::segment::CloseReason::Graceful =>
                {
                    return Err(format!("connection {:?} closed: {reason:?}", c.conn));
                }
                _ => {}
            }
        }
    }
    if received < conns {
        return Err(format!("{received} of {conns} echoes completed in 60 s"));
    }
    let memory = stack.memory(recv).map_err(|e| e.to_string())?;
    for i in 0..conns {
        if memory[i * each..(i + 1) * each] != pattern(each, seed + i as u64)[..] {
            return Err(format!("connection {i}: echo differs from what was sent"));
        }
    }
    // Let the last ACKs and FINs go out.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        stack.poll();
    }
    Ok(conns)
}

#[test]
fn outgoing_connections_from_both_queues_survive_replies_on_the_other_queue() {
    const CONNS: usize = 8;
    const EACH: usize = 1 << 20;
    let _serial = heavy();
    let lab = lab();
    let ready = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let remote = SocketAddrV4::new(lab.pair.b.addr, 5007);
    let sharded = thread::scope(|s| {
        // A Linux echo server in the other namespace.
        let server = s.spawn(|| {
            in_netns(&lab.b, || {
                let l = TcpListener::bind(remote).expect("bind");
                l.set_nonblocking(true).expect("nonblocking");
                ready.store(true, Ordering::Release);
                thread::scope(|c| {
                    let deadline = Instant::now() + Duration::from_secs(90);
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        match l.accept() {
                            Ok((mut sock, _)) => {
                                c.spawn(move || {
                                    sock.set_nonblocking(false).ok();
                                    sock.set_read_timeout(Some(Duration::from_secs(30))).ok();
                                    let mut buf = vec![0; 64 << 10];
                                    while let Ok(n @ 1..) = sock.read(&mut buf) {
                                        if sock.write_all(&buf[..n]).is_err() {
                                            break;
                                        }
                                    }
                                    sock.shutdown(Shutdown::Write).ok();
                                });
                            }
                            Err(_) => thread::sleep(Duration::from_millis(5)),
                        }
                    }
                });
            })
        });
        wait_for(&ready, Duration::from_secs(20), "Linux echo server");
        let result = in_netns(&lab.a, || {
            run_sharded(
                &lab.pair.a.ifname,
                configs(Threads::RunToCompletion),
                |queue, stack| {
                    zerosplit_echo_clients(stack, remote, CONNS, EACH, 900 + 100 * u64::from(queue))
                },
            )
            .expect("sharded stacks")
        });
        stop.store(true, Ordering::Relaxed);
        server.join().expect("server");
        result
    });
    for (queue, r) in &sharded.results {
        assert_eq!(
            r.as_ref().map_err(String::as_str),
            Ok(&CONNS),
            "queue {queue}"
        );
    }
    // Replies pick their queue by Linux's hash, not by which queue sent
    // the SYN: about half of the 16 connections get their replies on the
    // other queue (none: p = 2^-16).
    let steering = sharded.steering.expect("steering counters");
    assert!(
        sharded.group.forwarded > 0 && steering.other_queue > 0,
        "no reply crossed queues: {:?} {steering:?}",
        sharded.group
    );
    eprintln!(
        "handed between queues: {:?}; steering {steering:?}",
        sharded.group
    );
}
