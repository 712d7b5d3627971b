//! zerosplit's stack (datapath + header-only TCP) talking TCP with Linux
//! and with itself over veth, byte-exact.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use datapath::mr::Access;
use transports::cc::Algorithm;
use zerosplit::host::{HostConfig, Threads};
use zerosplit::provider::CompletionKind;
use zerosplit::provider::Provider;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{connect_retrying, heavy, pattern, require_root, wait_for};

const LEN: usize = 256 << 20;

fn stack_config(mtu: u32, algorithm: Algorithm) -> HostConfig {
    stack_config_in(mtu, algorithm, Threads::RunToCompletion)
}

const DEDICATED: Threads = Threads::Dedicated {
    datapath_core: None,
    transport_core: None,
    queue: 4096,
};

fn stack_config_in(mtu: u32, algorithm: Algorithm, threads: Threads) -> HostConfig {
    let mut c = HostConfig {
        threads,
        ..HostConfig::default()
    };
    c.nic.mtu = mtu as usize;
    c.nic.xsk.multi_buffer = mtu > 4000;
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    c.tcp.mss = (mtu - 40) as u16;
    c.tcp.algorithm = algorithm;
    c
}

struct Lab {
    pair: VethPair,
    b: NetNs,
    a: NetNs,
}

fn lab(mtu: u32) -> Lab {
    require_root();
    let a = NetNs::new("zia").expect("netns");
    let b = NetNs::new("zib").expect("netns");
    let pair = VethPair::create(&a, &b, mtu).expect("veth");
    Lab { pair, b, a }
}

fn opts() -> TransferOptions {
    TransferOptions {
        idle_timeout: Duration::from_secs(20),
    }
}

fn linux_to_zerosplit(mtu: u32, algorithm: Algorithm, threads: Threads) {
    let _serial = heavy();
    let lab = lab(mtu);
    let payload = pattern(LEN, 1);
    let ready = AtomicBool::new(false);
    let received = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let mut stack =
                    Stack::new(&lab.pair.a.ifname, stack_config_in(mtu, algorithm, threads))
                        .expect("stack");
                let mut out = Vec::with_capacity(LEN);
                // transfer::listen installs the listener; signal once the stack is up.
                ready.store(true, Ordering::Release);
                let (n, (placed, segments, crossed, coalesced)) =
                    transfer::listen_with(&mut stack, 5001, &mut out, &opts(), |stack| {
                        // Sampled while the connection is open: the datapath
                        // placed the payload; only fixed-size header records
                        // (no payload field) crossed to the transport.
                        let c = stack.counters();
                        (
                            stack.payload_bytes_placed(),
                            c.segments_to_transport,
                            c.bytes_to_transport,
                            stack.nic_counters().rx_coalesced,
                        )
                    })
                    .expect("zerosplit receives");
                assert_eq!(n as usize, out.len());
                assert!(
                    placed >= LEN as u64,
                    "the datapath placed every payload byte: {placed}"
                );
                let mss = usize::from(stack_config(mtu, algorithm).tcp.mss);
                // Software GRO (issue 13, item 4) hands the transport one
                // record per run of in-order segments: every segment is a
                // record of its own or merged into one.
                assert!(
                    (segments + coalesced) as usize >= LEN / mss,
                    "one record per segment, or merged into one: {segments} + {coalesced}"
                );
                assert!(
                    coalesced > 0,
                    "in-order segments of one poll were coalesced"
                );
                // What crossed is records, not payload: far fewer bytes
                // than arrived (the types that cross are checked in
                // transports/tests/no_payload.rs).
                assert!(
                    crossed < LEN as u64 / 8,
                    "{crossed} bytes of records for {LEN} payload bytes"
                );
                out
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        in_netns(&lab.b, || {
            let addr = SocketAddrV4::new(lab.pair.a.addr, 5001);
            let mut stream = connect_retrying(addr, Duration::from_secs(10));
            stream.write_all(&payload).expect("kernel send");
            stream.shutdown(std::net::Shutdown::Write).expect("FIN");
            let mut rest = Vec::new();
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            stream
                .read_to_end(&mut rest)
                .expect("zerosplit closes after our FIN");
        });
        server.join().expect("server")
    });
    assert!(
        received == payload,
        "Linux → zerosplit: {} of {LEN} bytes, byte-exact",
        received.len()
    );
}

fn zerosplit_to_linux(mtu: u32, config: HostConfig) {
    let _serial = heavy();
    let lab = lab(mtu);
    let payload = pattern(LEN, 2);
    let listener = in_netns(&lab.b, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 6001)).expect("kernel listen")
    });
    let received = thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut c, _) = listener.accept().expect("kernel accept");
            c.set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            let mut got = Vec::with_capacity(LEN);
            c.read_to_end(&mut got).expect("read until FIN");
            got
        });
        in_netns(&lab.a, || {
            let mut stack = Stack::new(&lab.pair.a.ifname, config).expect("stack");
            let n = transfer::connect(
                &mut stack,
                SocketAddrV4::new(lab.pair.b.addr, 6001).into(),
                &mut payload.as_slice(),
                &opts(),
            )
            .expect("zerosplit sends");
            assert_eq!(n as usize, LEN);
            let counters = stack.counters();
            assert_eq!(counters.tx_refused, 0, "segments the datapath refused");
            assert_eq!(counters.retire_refused, 0, "retirements refused");
        });
        reader.join().expect("reader")
    });
    assert!(
        received == payload,
        "zerosplit → Linux: {} of {LEN} bytes, byte-exact",
        received.len()
    );
}

#[test]
fn linux_to_zerosplit_mtu_1500() {
    linux_to_zerosplit(1500, Algorithm::Cubic, Threads::RunToCompletion);
}

#[test]
fn zerosplit_to_linux_mtu_1500() {
    zerosplit_to_linux(
        1500,
        stack_config_in(1500, Algorithm::Cubic, Threads::RunToCompletion),
    );
}

#[test]
fn linux_to_zerosplit_mtu_9000() {
    linux_to_zerosplit(9000, Algorithm::NewReno, Threads::RunToCompletion);
}

#[test]
fn zerosplit_to_linux_mtu_9000() {
    zerosplit_to_linux(
        9000,
        stack_config_in(9000, Algorithm::NewReno, Threads::RunToCompletion),
    );
}

fn zerosplit_to_zerosplit_in(mtu: u32, threads: Threads) {
    let _serial = heavy();
    let lab = lab(mtu);
    let payload = pattern(LEN, 3);
    let ready = AtomicBool::new(false);
    let received = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let mut stack = Stack::new(
                    &lab.pair.a.ifname,
                    stack_config_in(mtu, Algorithm::Cubic, threads),
                )
                .expect("stack a");
                let mut out = Vec::with_capacity(LEN);
                ready.store(true, Ordering::Release);
                transfer::listen(&mut stack, 5002, &mut out, &opts()).expect("zerosplit receives");
                out
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        thread::sleep(Duration::from_millis(200));
        in_netns(&lab.b, || {
            let mut stack = Stack::new(
                &lab.pair.b.ifname,
                stack_config_in(mtu, Algorithm::Cubic, threads),
            )
            .expect("stack b");
            transfer::connect(
                &mut stack,
                SocketAddrV4::new(lab.pair.a.addr, 5002).into(),
                &mut payload.as_slice(),
                &opts(),
            )
            .expect("zerosplit sends");
        });
        server.join().expect("server")
    });
    assert!(
        received == payload,
        "zerosplit ↔ zerosplit: {} of {LEN} bytes, byte-exact",
        received.len()
    );
}

#[test]
fn zerosplit_to_zerosplit() {
    zerosplit_to_zerosplit_in(1500, Threads::RunToCompletion);
}

#[test]
fn zerosplit_to_zerosplit_mtu_9000() {
    zerosplit_to_zerosplit_in(9000, Threads::RunToCompletion);
}

#[test]
fn zerosplit_to_zerosplit_dedicated() {
    zerosplit_to_zerosplit_in(1500, DEDICATED);
}

#[test]
fn sixty_four_concurrent_connections_to_one_listener_are_each_byte_exact() {
    const CONNS: usize = 64;
    const EACH: usize = 256 << 10;
    let _serial = heavy();
    let lab = lab(1500);
    let ready = AtomicBool::new(false);
    let results = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let mut cfg = stack_config(1500, Algorithm::Cubic);
                cfg.nic.max_flows = 256;
                let mut stack = Stack::new(&lab.pair.a.ifname, cfg).expect("stack");
                stack.listen(5003).expect("listen");
                let mr = stack
                    .register_memory(CONNS * EACH, Access::RECV)
                    .expect("memory");
                ready.store(true, Ordering::Release);
                let mut conns = Vec::new();
                let mut done = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                while done.len() < CONNS && Instant::now() < deadline {
                    stack.poll();
                    while let Some(c) = stack.accept(5003).expect("accept") {
                        let slot = conns.len();
                        stack
                            .post_recv(c, mr, slot * EACH, EACH, slot as u64)
                            .expect("post");
                        conns.push(c);
                    }
                    while let Some(c) = stack.poll_completion() {
                        if c.kind == CompletionKind::Recv {
                            done.push(c.wr_id as usize);
                            stack.close(c.conn).ok();
                        }
                    }
                }
                // Let the FINs go out.
                let until = Instant::now() + Duration::from_millis(300);
                while Instant::now() < until {
                    stack.poll();
                }
                let memory = stack.memory(mr).expect("memory").to_vec();
                (conns.len(), done, memory, stack.connections())
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        in_netns(&lab.b, || {
            thread::scope(|c| {
                for i in 0..CONNS {
                    let addr = SocketAddrV4::new(lab.pair.a.addr, 5003);
                    c.spawn(move || {
                        let mut s = connect_retrying(addr, Duration::from_secs(10));
                        s.write_all(&pattern(EACH, 100 + i as u64)).expect("send");
                        s.set_read_timeout(Some(Duration::from_secs(30)))
                            .expect("timeout");
                        let mut rest = Vec::new();
                        let _ = s.read_to_end(&mut rest);
                    });
                }
            });
        });
        server.join().expect("server")
    });
    let (accepted, mut done, memory, _) = results;
    assert_eq!(accepted, CONNS, "every connection accepted");
    done.sort_unstable();
    assert_eq!(
        done,
        (0..CONNS).collect::<Vec<_>>(),
        "every connection's buffer completed"
    );
    // Each connection's slot holds one client's stream; which client got
    // which slot depends on accept order, so match by content.
    let mut seen = [false; CONNS];
    for slot in 0..CONNS {
        let got = &memory[slot * EACH..(slot + 1) * EACH];
        let who = (0..CONNS).find(|&i| !seen[i] && got == pattern(EACH, 100 + i as u64).as_slice());
        let who = who.unwrap_or_else(|| panic!("slot {slot} matches no client's bytes"));
        seen[who] = true;
    }
}

#[test]
fn ping_and_kernel_tcp_keep_working_beside_zerosplit() {
    let _serial = heavy();
    let lab = lab(1500);
    let stop = AtomicBool::new(false);
    let ready = AtomicBool::new(false);
    let kernel = in_netns(&lab.a, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 8080)).expect("kernel listener")
    });
    thread::scope(|s| {
        s.spawn(|| {
            in_netns(&lab.a, || {
                let mut stack =
                    Stack::new(&lab.pair.a.ifname, stack_config(1500, Algorithm::Cubic))
                        .expect("stack");
                stack.listen(5004).expect("listen");
                ready.store(true, Ordering::Release);
                let deadline = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    stack.poll();
                }
            })
        });
        s.spawn(|| {
            let (mut c, _) = kernel.accept().expect("kernel accept");
            let mut buf = [0u8; 5];
            c.read_exact(&mut buf).expect("kernel read");
            c.write_all(&buf).expect("kernel echo");
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit running");
        in_netns(&lab.b, || {
            let answered = zerosplit_tests::pings(
                &lab.b,
                lab.pair.a.addr,
                3,
                Duration::from_millis(200),
                Duration::from_secs(1),
            );
            assert!(answered > 0, "ping through the kernel while zerosplit runs");
            let mut c = TcpStream::connect_timeout(
                &SocketAddrV4::new(lab.pair.a.addr, 8080).into(),
                Duration::from_secs(5),
            )
            .expect("kernel TCP on a port zerosplit does not own");
            c.write_all(b"hello").expect("write");
            let mut back = [0u8; 5];
            c.read_exact(&mut back).expect("echo");
            assert_eq!(&back, b"hello");
        });
        stop.store(true, Ordering::Relaxed);
    });
}

#[test]
fn linux_to_zerosplit_dedicated_mtu_1500() {
    linux_to_zerosplit(1500, Algorithm::Cubic, DEDICATED);
}

#[test]
fn zerosplit_to_linux_dedicated_mtu_1500() {
    zerosplit_to_linux(1500, stack_config_in(1500, Algorithm::Cubic, DEDICATED));
}

#[test]
fn linux_to_zerosplit_dedicated_mtu_9000() {
    linux_to_zerosplit(9000, Algorithm::NewReno, DEDICATED);
}

#[test]
fn zerosplit_to_linux_dedicated_mtu_9000() {
    zerosplit_to_linux(9000, stack_config_in(9000, Algorithm::NewReno, DEDICATED));
}

#[test]
fn zerosplit_to_zerosplit_dedicated_mtu_9000() {
    zerosplit_to_zerosplit_in(9000, DEDICATED);
}
