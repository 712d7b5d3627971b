//! The echo service at its limits: one connection too many for the memory
//! area, and a per-flow list of posted sends much shorter than what echo
//! posts. Neither may take the service down or lose a byte.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::Duration;

use zerosplit::config::{ListenConfig, Service};
use zerosplit::host::HostConfig;
use zerosplit::service::serve;
use zerosplit::stack::Stack;
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{connect_retrying, heavy, pattern, require_root, wait_until, RaiseOnDrop};

/// Each echo connection registers a 2 MiB ring: 5 MiB hold two.
const MR_BYTES: usize = 5 << 20;
const LEN: usize = 1 << 20;

fn config() -> HostConfig {
    let mut c = HostConfig::default();
    c.nic.xsk.umem.mr_bytes = MR_BYTES;
    // Echo posts a send for every run of newly arrived bytes; two at a
    // time forces it to wait for completions over and over.
    c.nic.max_send_segments = 2;
    c
}

/// Sends `len` bytes and reads the echo back on one connection.
fn echo_round_trip(mut s: TcpStream, len: usize, seed: u64) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut w = s.try_clone().expect("clone");
    // A reset connection fails its writes; what came back tells.
    let writer = thread::spawn(move || {
        let _ = w.write_all(&pattern(len, seed));
        let _ = w.shutdown(Shutdown::Write);
    });
    let mut back = Vec::with_capacity(len);
    let _ = s.read_to_end(&mut back);
    writer.join().expect("writer");
    back
}

#[test]
fn echo_resets_a_connection_without_memory_and_keeps_serving_the_rest() {
    let _serial = heavy();
    require_root();
    let a = NetNs::new("zla").expect("netns");
    let b = NetNs::new("zlb").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let stop = AtomicBool::new(false);
    let listeners = [ListenConfig {
        address: Ipv4Addr::UNSPECIFIED,
        port: 7,
        service: Service::Echo,
    }];
    let addr = SocketAddrV4::new(pair.a.addr, 7);
    let (report, backs, third) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&a, || {
                let mut stack = Stack::new(&pair.a.ifname, config()).expect("stack");
                serve(&mut stack, &listeners, &stop).expect("the service keeps running")
            })
        });
        let stop_service = RaiseOnDrop(&stop);
        let (backs, third) = in_netns(&b, || {
            // Two connections take the memory; the third finds none.
            let first = connect_retrying(addr, Duration::from_secs(20));
            let second = connect_retrying(addr, Duration::from_secs(5));
            let mut third = connect_retrying(addr, Duration::from_secs(5));
            third
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut byte = [0u8; 1];
            let third = third.read(&mut byte).map_err(|e| e.kind());
            let backs: Vec<Vec<u8>> = thread::scope(|c| {
                let hs = [(first, 1u64), (second, 2)]
                    .map(|(sock, seed)| c.spawn(move || echo_round_trip(sock, LEN, seed)));
                hs.into_iter().map(|h| h.join().expect("client")).collect()
            });
            // Their memory is free again once they have closed: a fourth
            // connection is served.
            let mut fourth = None;
            let freed = wait_until(Duration::from_secs(10), || {
                let back =
                    echo_round_trip(connect_retrying(addr, Duration::from_secs(5)), LEN / 4, 4);
                let ok = back == pattern(LEN / 4, 4);
                fourth = Some(back);
                ok
            });
            assert!(
                freed,
                "a connection after the first two closed: {:?} bytes back",
                fourth.map(|b| b.len())
            );
            (backs, third)
        });
        drop(stop_service);
        (server.join().expect("server"), backs, third)
    });
    eprintln!("{report:?}");
    for (i, back) in backs.iter().enumerate() {
        assert!(
            back.as_slice() == pattern(LEN, i as u64 + 1).as_slice(),
            "connection {}: {} bytes came back, not its own {LEN}",
            i + 1,
            back.len()
        );
    }
    assert_eq!(
        third,
        Err(ErrorKind::ConnectionReset),
        "the connection without memory is reset"
    );
    assert!(report.refused >= 1, "{report:?}");
    assert!(
        report.posts_deferred > 0,
        "two posted sends at a time made echo wait: {report:?}"
    );
    assert_eq!(
        report.bytes_echoed,
        (2 * LEN + LEN / 4 * (report.connections - report.refused - 2) as usize) as u64,
        "{report:?}"
    );
}
