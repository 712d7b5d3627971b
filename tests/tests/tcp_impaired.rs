//! zerosplit ↔ Linux TCP through the impairment hop (`bench::impair`):
//! 1 % loss, 5 % reordering, 0.5 % duplication and 0.1 % corruption in
//! both directions. Every byte must arrive exactly, within a time bound.
//! Corrupted frames exercise the datapath's checksum path (a bad segment
//! may have been copied into a gap, but never over verified bytes). Over
//! IPv4, and over IPv6 between addresses of 2001:2::/48 on the same ends.

use std::{
    io::{Read, Write},
    net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use bench::impair::{ImpairConfig, ImpairedPath};
use transports::cc::Algorithm;
use zerosplit::host::{HostConfig, Threads};
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, IPV6_A as A6, IPV6_B as B6};
use zerosplit_tests::{connect_retrying, heavy, pattern, require_root, wait_for};

const LEN: usize = 256 << 20;
const PROFILE: &str = "loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%,seed=11";
const BOUND: Duration = Duration::from_secs(120);

fn config(threads: Threads) -> HostConfig {
    let mut c = HostConfig {
        threads,
        ..HostConfig::default()
    };
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    c.tcp.algorithm = Algorithm::Cubic;
    c
}

fn path() -> ImpairedPath {
    require_root();
    let spec: ImpairConfig = PROFILE.parse().expect("impairment spec");
    ImpairedPath::create(1500, &spec).expect("impaired path")
}

/// [`path`] with IPv6 on both ends.
fn path6() -> ImpairedPath {
    let path = path();
    path.ns_a()
        .add_ipv6(&path.a.ifname, A6, 64)
        .expect("IPv6 on A");
    path.ns_b()
        .add_ipv6(&path.b.ifname, B6, 64)
        .expect("IPv6 on B");
    path
}

/// A zerosplit receiver on side A: raises `ready` once its stack is up and
/// returns every byte that arrived on `port`.
fn zerosplit_receives(
    path: &ImpairedPath,
    threads: Threads,
    port: u16,
    len: usize,
    ready: &AtomicBool,
) -> Vec<u8> {
    in_netns(path.ns_a(), || {
        let mut stack = Stack::new(&path.a.ifname, config(threads)).expect("stack");
        ready.store(true, Ordering::Release);
        let mut out = Vec::with_capacity(len);
        let opts = TransferOptions {
            idle_timeout: Duration::from_secs(30),
        };
        transfer::listen(&mut stack, port, &mut out, &opts).expect("zerosplit receives");
        out
    })
}

fn linux_to_zerosplit_impaired(threads: Threads) {
    let _serial = heavy();
    let path = path();
    let payload = pattern(LEN, 21);
    let ready = AtomicBool::new(false);
    let started = Instant::now();
    let received = thread::scope(|s| {
        let server = s.spawn(|| zerosplit_receives(&path, threads, 5101, LEN, &ready));
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        in_netns(path.ns_b(), || {
            let to = SocketAddrV4::new(path.a.addr, 5101);
            let mut c = connect_retrying(to, Duration::from_secs(15));
            c.write_all(&payload).expect("kernel send");
            c.shutdown(std::net::Shutdown::Write).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let _ = c.read_to_end(&mut Vec::new());
        });
        server.join().expect("server")
    });
    let counters = path.counters();
    assert!(
        received == payload,
        "{} of {LEN} bytes, byte-exact",
        received.len()
    );
    assert!(
        started.elapsed() < BOUND,
        "finished within {BOUND:?}: {:?}",
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

fn zerosplit_to_linux_impaired(config: HostConfig) {
    let _serial = heavy();
    let path = path();
    let payload = pattern(LEN, 22);
    let listener = in_netns(path.ns_b(), || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 6101)).expect("kernel listen")
    });
    let started = Instant::now();
    let received = thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut c, _) = listener.accept().expect("accept");
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut got = Vec::with_capacity(LEN);
            c.read_to_end(&mut got).expect("read until FIN");
            got
        });
        in_netns(path.ns_a(), || {
            let mut stack = Stack::new(&path.a.ifname, config).expect("stack");
            let opts = TransferOptions {
                idle_timeout: Duration::from_secs(30),
            };
            transfer::connect(
                &mut stack,
                SocketAddrV4::new(path.b.addr, 6101).into(),
                &mut payload.as_slice(),
                &opts,
            )
            .expect("zerosplit sends");
            let (retx, _) = stack.retransmissions();
            assert!(retx > 0, "losses were repaired by retransmission");
            let counters = stack.counters();
            assert_eq!(counters.tx_refused, 0, "segments the datapath refused");
            assert_eq!(counters.retire_refused, 0, "retirements refused");
        });
        reader.join().expect("reader")
    });
    let counters = path.counters();
    assert!(
        received == payload,
        "{} of {LEN} bytes, byte-exact",
        received.len()
    );
    assert!(
        started.elapsed() < BOUND,
        "finished within {BOUND:?}: {:?}",
        started.elapsed()
    );
    assert!(
        counters.a_to_b.corrupted + counters.b_to_a.corrupted > 0,
        "corruption happened: {counters:?}"
    );
}

const DEDICATED: Threads = Threads::Dedicated {
    datapath_core: None,
    transport_core: None,
    queue: 4096,
};

#[test]
fn linux_to_zerosplit_under_loss_reorder_duplication_corruption() {
    linux_to_zerosplit_impaired(Threads::RunToCompletion);
}

#[test]
fn zerosplit_to_linux_under_loss_reorder_duplication_corruption() {
    zerosplit_to_linux_impaired(config(Threads::RunToCompletion));
}

#[test]
fn linux_to_zerosplit_impaired_dedicated() {
    linux_to_zerosplit_impaired(DEDICATED);
}

#[test]
fn zerosplit_to_linux_impaired_dedicated() {
    zerosplit_to_linux_impaired(config(DEDICATED));
}

/// A TX ring a few frames deep keeps segments, retransmissions among
/// them, waiting for ring space while ACKs arrive for the data they carry
/// (reordering makes some retransmissions spurious). The stack must carry
/// out the transport's outputs in order: a retirement of acknowledged data
/// never overtakes a segment of that data still waiting to go out.
fn small_tx_ring(threads: Threads) -> HostConfig {
    let mut c = config(threads);
    c.nic.xsk.tx_frames = 8;
    c.nic.xsk.tx_ring = 8;
    c.nic.xsk.comp_ring = 8;
    c
}

#[test]
fn zerosplit_to_linux_impaired_through_a_small_tx_ring() {
    zerosplit_to_linux_impaired(small_tx_ring(Threads::RunToCompletion));
}

#[test]
fn zerosplit_to_linux_impaired_dedicated_through_a_small_tx_ring() {
    zerosplit_to_linux_impaired(small_tx_ring(DEDICATED));
}

/// Both ends zerosplit: each side's datapath sees the other's losses,
/// duplicates, reordering and corruption.
fn zerosplit_to_zerosplit_impaired(threads: Threads) {
    let len = LEN;
    let _serial = heavy();
    let path = path();
    let payload = pattern(len, 23);
    let ready = AtomicBool::new(false);
    let started = Instant::now();
    let received = thread::scope(|s| {
        let server = s.spawn(|| zerosplit_receives(&path, threads, 5102, len, &ready));
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        in_netns(path.ns_b(), || {
            let mut stack = Stack::new(&path.b.ifname, config(threads)).expect("stack b");
            let opts = TransferOptions {
                idle_timeout: Duration::from_secs(30),
            };
            let to = SocketAddrV4::new(path.a.addr, 5102);
            let deadline = Instant::now() + Duration::from_secs(20);
            // The listener may not be steered yet: retry a refused connect.
            loop {
                match transfer::connect(&mut stack, to.into(), &mut payload.as_slice(), &opts) {
                    Ok(_) => break,
                    Err(e) if Instant::now() < deadline && e.to_string().contains("refused") => {
                        thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) => panic!("zerosplit sends: {e:#}"),
                }
            }
        });
        server.join().expect("server")
    });
    assert!(
        received == payload,
        "{} of {len} bytes, byte-exact",
        received.len()
    );
    assert!(
        started.elapsed() < BOUND,
        "finished within {BOUND:?}: {:?}",
        started.elapsed()
    );
    let c = path.counters();
    assert!(
        c.a_to_b.dropped_loss + c.b_to_a.dropped_loss > 0
            && c.a_to_b.corrupted + c.b_to_a.corrupted > 0,
        "{c:?}"
    );
}

#[test]
fn zerosplit_to_zerosplit_under_loss_reorder_duplication_corruption() {
    zerosplit_to_zerosplit_impaired(Threads::RunToCompletion);
}

#[test]
fn zerosplit_to_zerosplit_impaired_dedicated() {
    zerosplit_to_zerosplit_impaired(DEDICATED);
}

/// Linux → zerosplit and zerosplit → Linux over IPv6 through the same
/// impairment: every byte, within the bound, the losses repaired.
#[test]
fn ipv6_both_ways_under_loss_reorder_duplication_corruption() {
    const LEN6: usize = 64 << 20;
    let _serial = heavy();
    let path = path6();
    let payload = pattern(LEN6, 24);
    let ready = AtomicBool::new(false);
    let started = Instant::now();
    let threads = Threads::RunToCompletion;
    let received = thread::scope(|s| {
        let server = s.spawn(|| zerosplit_receives(&path, threads, 5103, LEN6, &ready));
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        in_netns(path.ns_b(), || {
            let mut c = connect_retrying(SocketAddr::new(A6.into(), 5103), Duration::from_secs(15));
            assert_eq!(c.peer_addr().expect("peer").ip(), IpAddr::V6(A6));
            c.write_all(&payload).expect("kernel send");
            c.shutdown(std::net::Shutdown::Write).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let _ = c.read_to_end(&mut Vec::new());
        });
        server.join().expect("server")
    });
    assert!(
        received == payload,
        "Linux → zerosplit: {} of {LEN6} bytes",
        received.len()
    );

    let payload = pattern(LEN6, 25);
    let listener = in_netns(path.ns_b(), || {
        TcpListener::bind((B6, 6103)).expect("kernel listen")
    });
    let received = thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut c, peer) = listener.accept().expect("accept");
            assert_eq!(peer.ip(), IpAddr::V6(A6), "zerosplit's IPv6 address");
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut got = Vec::with_capacity(LEN6);
            c.read_to_end(&mut got).expect("read until FIN");
            got
        });
        in_netns(path.ns_a(), || {
            let mut stack =
                Stack::new(&path.a.ifname, config(Threads::RunToCompletion)).expect("stack");
            let opts = TransferOptions {
                idle_timeout: Duration::from_secs(30),
            };
            let to = SocketAddr::new(B6.into(), 6103);
            transfer::connect(&mut stack, to, &mut payload.as_slice(), &opts)
                .expect("zerosplit sends");
            let (retx, _) = stack.retransmissions();
            assert!(retx > 0, "losses were repaired by retransmission");
        });
        reader.join().expect("reader")
    });
    assert!(
        received == payload,
        "zerosplit → Linux: {} of {LEN6} bytes",
        received.len()
    );
    assert!(
        started.elapsed() < BOUND,
        "finished within {BOUND:?}: {:?}",
        started.elapsed()
    );
    let c = path.counters();
    assert!(
        c.a_to_b.dropped_loss > 0
            && c.b_to_a.dropped_loss > 0
            && c.a_to_b.corrupted + c.b_to_a.corrupted > 0,
        "both directions impaired: {c:?}"
    );
}
