//! The smoltcp transport (`SmolStack`) over the same datapath talking TCP
//! with Linux, byte-exact both ways, at MTU 1500 and 9000 and through the
//! impairment hop; and the counter of payload bytes the transport touched:
//! about every byte for smoltcp. (The header-only `tcp` moves the same
//! bytes on the same kind of veth; that its transport touches none is
//! checked in `transports/tests/no_payload.rs`.)
//!
//! Sizes are smaller than the header-only TCP's 256 MiB: smoltcp copies
//! every byte twice more (into and out of its socket buffers) and recovers
//! from loss with a 1 s minimum RTO, so 64 MiB clean and 16 MiB impaired
//! keep each test within a few seconds to tens of seconds on a 2-core CI
//! machine while still moving thousands of windows.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddrV4, TcpListener},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use bench::impair::{ImpairConfig, ImpairedPath};
use transports::cc::Algorithm;
use zerosplit::engine::smol::{SmolConfig, SmolCongestion};
use zerosplit::host::HostConfig;
use zerosplit::provider::Provider;
use zerosplit::stack::SmolStack;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{
    connect_retrying, heavy, linux_receives, linux_sends, pattern, require_root, wait_for,
};

const LEN: usize = 256 << 20;
const IMPAIRED_LEN: usize = 16 << 20;
const PROFILE: &str = "loss=1%,reorder=5%:200us,dup=0.5%,seed=13";
/// Generous for 16 MiB: every tail loss costs smoltcp at least its 1 s RTO.
const IMPAIRED_BOUND: Duration = Duration::from_secs(150);

fn stack_config(mtu: u32) -> HostConfig {
    let mut c = HostConfig::default();
    c.nic.mtu = mtu as usize;
    c.nic.xsk.multi_buffer = mtu > 4000;
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    c.tcp.mss = (mtu - 40) as u16;
    c.tcp.algorithm = Algorithm::Cubic;
    c
}

fn smol_config(mtu: u32, congestion: SmolCongestion) -> SmolConfig {
    SmolConfig {
        stack: stack_config(mtu),
        congestion,
        ..SmolConfig::default()
    }
}

fn opts() -> TransferOptions {
    TransferOptions {
        idle_timeout: Duration::from_secs(30),
    }
}

struct Lab {
    pair: VethPair,
    b: NetNs,
    a: NetNs,
}

fn lab(mtu: u32) -> Lab {
    require_root();
    let a = NetNs::new("zsa").expect("netns");
    let b = NetNs::new("zsb").expect("netns");
    let pair = VethPair::create(&a, &b, mtu).expect("veth");
    Lab { pair, b, a }
}

/// What a receiver saw: the bytes and, sampled before the close, the
/// payload bytes its transport touched.
struct Received {
    bytes: Vec<u8>,
    touched: u64,
}

/// Runs `transfer::listen` on `stack`, raising `ready` once it is up.
fn provider_receives<P: Provider>(
    stack: &mut P,
    port: u16,
    len: usize,
    ready: &AtomicBool,
) -> Received {
    let mut out = Vec::with_capacity(len);
    ready.store(true, Ordering::Release);
    let (n, touched) = transfer::listen_with(stack, port, &mut out, &opts(), |s| {
        s.payload_bytes_touched_by_transport()
    })
    .expect("zerosplit receives");
    assert_eq!(n as usize, out.len());
    Received {
        bytes: out,
        touched,
    }
}

fn linux_to_smoltcp(mtu: u32, congestion: SmolCongestion) {
    let _serial = heavy();
    let lab = lab(mtu);
    let payload = pattern(LEN, 41);
    let ready = AtomicBool::new(false);
    let got = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let mut stack = SmolStack::new(&lab.pair.a.ifname, smol_config(mtu, congestion))
                    .expect("smoltcp stack");
                let r = provider_receives(&mut stack, 5201, LEN, &ready);
                let c = stack.counters();
                assert!(c.frames_in as usize >= LEN / (mtu as usize), "{c:?}");
                if mtu > 4000 {
                    assert!(
                        stack.nic().counters().rx_multi_buffer > 0,
                        "jumbo frames arrived as chains and were linearised"
                    );
                }
                r
            })
        });
        wait_for(&ready, Duration::from_secs(20), "smoltcp listening");
        in_netns(&lab.b, || {
            linux_sends(SocketAddrV4::new(lab.pair.a.addr, 5201), &payload)
        });
        server.join().expect("server")
    });
    assert!(
        got.bytes == payload,
        "Linux → smoltcp: {} of {LEN} bytes, byte-exact",
        got.bytes.len()
    );
    assert_eq!(
        got.touched, LEN as u64,
        "smoltcp's buffers held every payload byte, copied out once"
    );
}

fn smoltcp_to_linux(mtu: u32, congestion: SmolCongestion) {
    let _serial = heavy();
    let lab = lab(mtu);
    let payload = pattern(LEN, 42);
    let listener = in_netns(&lab.b, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 6201)).expect("kernel listen")
    });
    let received = thread::scope(|s| {
        let reader = s.spawn(|| linux_receives(&listener, LEN));
        in_netns(&lab.a, || {
            let mut stack = SmolStack::new(&lab.pair.a.ifname, smol_config(mtu, congestion))
                .expect("smoltcp stack");
            let n = transfer::connect(
                &mut stack,
                SocketAddrV4::new(lab.pair.b.addr, 6201).into(),
                &mut payload.as_slice(),
                &opts(),
            )
            .expect("smoltcp sends");
            assert_eq!(n as usize, LEN);
            let c = stack.counters();
            assert_eq!(c.payload_copied_in, LEN as u64, "{c:?}");
            assert_eq!(stack.payload_bytes_touched_by_transport(), LEN as u64);
            assert_eq!(c.frames_refused, 0, "{c:?}");
            if mtu > 4000 {
                assert!(
                    c.frames_out_chained as usize >= LEN / 9000,
                    "jumbo segments left as frame chains: {c:?}"
                );
            }
        });
        reader.join().expect("reader")
    });
    assert!(
        received == payload,
        "smoltcp → Linux: {} of {LEN} bytes, byte-exact",
        received.len()
    );
}

#[test]
fn linux_to_smoltcp_mtu_1500() {
    linux_to_smoltcp(1500, SmolCongestion::Cubic);
}

#[test]
fn smoltcp_to_linux_mtu_1500() {
    smoltcp_to_linux(1500, SmolCongestion::Cubic);
}

#[test]
fn linux_to_smoltcp_mtu_9000() {
    linux_to_smoltcp(9000, SmolCongestion::Reno);
}

#[test]
fn smoltcp_to_linux_mtu_9000() {
    smoltcp_to_linux(9000, SmolCongestion::Reno);
}

#[test]
fn smoltcp_to_linux_without_congestion_control() {
    smoltcp_to_linux(1500, SmolCongestion::None);
}

/// The header-only TCP moves the same bytes into the same kind of posted
/// memory. That its transport touches no payload byte is not measured here
/// (its counter is 0 by construction): `transports/tests/no_payload.rs`
/// checks what the claim rests on (the types that cross, the crate's
/// dependencies, and a run with poisoned payload memory).
#[test]
fn header_only_tcp_moves_the_same_bytes() {
    let _serial = heavy();
    let lab = lab(1500);
    let payload = pattern(LEN, 43);
    let ready = AtomicBool::new(false);
    let got = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let mut stack =
                    Stack::new(&lab.pair.a.ifname, stack_config(1500)).expect("tcp stack");
                provider_receives(&mut stack, 5202, LEN, &ready)
            })
        });
        wait_for(&ready, Duration::from_secs(20), "tcp listening");
        in_netns(&lab.b, || {
            linux_sends(SocketAddrV4::new(lab.pair.a.addr, 5202), &payload)
        });
        server.join().expect("server")
    });
    assert!(got.bytes == payload, "Linux → tcp byte-exact");
}

fn impaired_path() -> ImpairedPath {
    require_root();
    let spec: ImpairConfig = PROFILE.parse().expect("impairment spec");
    ImpairedPath::create(1500, &spec).expect("impaired path")
}

#[test]
fn linux_to_smoltcp_impaired() {
    let _serial = heavy();
    let path = impaired_path();
    let payload = pattern(IMPAIRED_LEN, 51);
    let ready = AtomicBool::new(false);
    let started = Instant::now();
    let got = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(path.ns_a(), || {
                let mut stack =
                    SmolStack::new(&path.a.ifname, smol_config(1500, SmolCongestion::Cubic))
                        .expect("smoltcp stack");
                provider_receives(&mut stack, 5301, IMPAIRED_LEN, &ready)
            })
        });
        wait_for(&ready, Duration::from_secs(20), "smoltcp listening");
        in_netns(path.ns_b(), || {
            linux_sends(SocketAddrV4::new(path.a.addr, 5301), &payload)
        });
        server.join().expect("server")
    });
    let counters = path.counters();
    assert!(
        got.bytes == payload,
        "{} of {IMPAIRED_LEN} bytes, byte-exact",
        got.bytes.len()
    );
    assert!(
        started.elapsed() < IMPAIRED_BOUND,
        "took {:?}",
        started.elapsed()
    );
    let (fwd, rev) = (&counters.a_to_b, &counters.b_to_a);
    assert!(
        rev.dropped_loss > 0 && rev.reordered > 0 && rev.duplicated > 0,
        "the data direction was impaired: {rev:?}"
    );
    assert!(
        fwd.dropped_loss > 0,
        "the ACK direction was impaired: {fwd:?}"
    );
}

#[test]
fn smoltcp_to_linux_impaired() {
    let _serial = heavy();
    let path = impaired_path();
    let payload = pattern(IMPAIRED_LEN, 52);
    let listener = in_netns(path.ns_b(), || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 6301)).expect("kernel listen")
    });
    let started = Instant::now();
    let received = thread::scope(|s| {
        let reader = s.spawn(|| linux_receives(&listener, IMPAIRED_LEN));
        in_netns(path.ns_a(), || {
            let mut stack =
                SmolStack::new(&path.a.ifname, smol_config(1500, SmolCongestion::Cubic))
                    .expect("smoltcp stack");
            transfer::connect(
                &mut stack,
                SocketAddrV4::new(path.b.addr, 6301).into(),
                &mut payload.as_slice(),
                &opts(),
            )
            .expect("smoltcp sends");
        });
        reader.join().expect("reader")
    });
    let counters = path.counters();
    assert!(
        received == payload,
        "{} of {IMPAIRED_LEN} bytes, byte-exact",
        received.len()
    );
    assert!(
        started.elapsed() < IMPAIRED_BOUND,
        "took {:?}",
        started.elapsed()
    );
    let (fwd, rev) = (&counters.a_to_b, &counters.b_to_a);
    assert!(
        fwd.dropped_loss > 0 && fwd.reordered > 0 && fwd.duplicated > 0,
        "the data direction was impaired: {fwd:?}"
    );
    assert!(
        rev.dropped_loss > 0,
        "the ACK direction was impaired: {rev:?}"
    );
}

/// Sixteen Linux clients connect at once to one smoltcp listener; each
/// stream lands whole in its own posted slot.
#[test]
fn sixteen_concurrent_connections_to_one_smoltcp_listener() {
    use datapath::mr::Access;
    use zerosplit::provider::CompletionKind;
    const CONNS: usize = 16;
    const EACH: usize = 256 << 10;
    let _serial = heavy();
    let lab = lab(1500);
    let ready = AtomicBool::new(false);
    let (accepted, mut done, memory) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let mut cfg = smol_config(1500, SmolCongestion::Cubic);
                // Sixteen connections' buffers: keep them small.
                cfg.socket_buffer = 256 << 10;
                let mut stack = SmolStack::new(&lab.pair.a.ifname, cfg).expect("stack");
                stack.listen(5203).expect("listen");
                let mr = stack
                    .register_memory(CONNS * EACH, Access::RECV)
                    .expect("memory");
                ready.store(true, Ordering::Release);
                let (mut conns, mut done) = (Vec::new(), Vec::new());
                let deadline = Instant::now() + Duration::from_secs(60);
                while done.len() < CONNS && Instant::now() < deadline {
                    stack.poll();
                    while let Some(c) = stack.accept(5203).expect("accept") {
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
                let until = Instant::now() + Duration::from_millis(300);
                while Instant::now() < until {
                    stack.poll();
                }
                (
                    conns.len(),
                    done,
                    stack.memory(mr).expect("memory").to_vec(),
                )
            })
        });
        wait_for(&ready, Duration::from_secs(20), "smoltcp listening");
        in_netns(&lab.b, || {
            thread::scope(|c| {
                for i in 0..CONNS {
                    let addr = SocketAddrV4::new(lab.pair.a.addr, 5203);
                    c.spawn(move || {
                        let mut s = connect_retrying(addr, Duration::from_secs(10));
                        s.write_all(&pattern(EACH, 200 + i as u64)).expect("send");
                        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                        let _ = s.read_to_end(&mut Vec::new());
                    });
                }
            });
        });
        server.join().expect("server")
    });
    assert_eq!(accepted, CONNS, "every connection accepted");
    done.sort_unstable();
    assert_eq!(done, (0..CONNS).collect::<Vec<_>>(), "every slot completed");
    let mut seen = [false; CONNS];
    for slot in 0..CONNS {
        let got = &memory[slot * EACH..(slot + 1) * EACH];
        let who = (0..CONNS)
            .find(|&i| !seen[i] && got == pattern(EACH, 200 + i as u64).as_slice())
            .unwrap_or_else(|| panic!("slot {slot} matches no client's bytes"));
        seen[who] = true;
    }
}

/// The two transports talk to each other over the same kind of datapath:
/// smoltcp sends, the header-only TCP receives, byte-exact.
#[test]
fn smoltcp_to_header_only_tcp() {
    let _serial = heavy();
    let lab = lab(1500);
    let payload = pattern(LEN / 2, 44);
    let ready = AtomicBool::new(false);
    let got = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let mut stack =
                    Stack::new(&lab.pair.a.ifname, stack_config(1500)).expect("tcp stack");
                provider_receives(&mut stack, 5204, LEN / 2, &ready)
            })
        });
        wait_for(&ready, Duration::from_secs(20), "tcp listening");
        thread::sleep(Duration::from_millis(200));
        in_netns(&lab.b, || {
            let mut stack =
                SmolStack::new(&lab.pair.b.ifname, smol_config(1500, SmolCongestion::Cubic))
                    .expect("smoltcp stack");
            transfer::connect(
                &mut stack,
                SocketAddrV4::new(lab.pair.a.addr, 5204).into(),
                &mut payload.as_slice(),
                &opts(),
            )
            .expect("smoltcp sends");
        });
        server.join().expect("server")
    });
    assert!(got.bytes == payload, "smoltcp → tcp byte-exact");
}
