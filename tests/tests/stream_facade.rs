//! The `std::io` stream facade over zerosplit, against Linux TCP: connect,
//! then interleaved writes and reads through a kernel echo server; and
//! accept, read to EOF, reply.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::Duration,
};

use zerosplit::host::HostConfig;
use zerosplit::provider::Provider;
use zerosplit::stack::Stack;
use zerosplit::stream::ZsStream;
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{heavy, require_root, wait_for};

fn data(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(131) ^ (i >> 7)) as u8)
        .collect()
}

fn lab() -> (NetNs, NetNs, VethPair) {
    require_root();
    let a = NetNs::new("zsa").expect("netns");
    let b = NetNs::new("zsb").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    (a, b, pair)
}

#[test]
fn connect_write_and_read_through_a_kernel_echo_server() {
    let _serial = heavy();
    let (a, b, pair) = lab();
    let payload = data(3 << 20);
    let listener = in_netns(&b, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 7007)).expect("listen")
    });
    let echoed = thread::scope(|s| {
        s.spawn(|| {
            let (mut c, _) = listener.accept().expect("accept");
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = c.read(&mut buf).expect("echo read");
                if n == 0 {
                    break;
                }
                c.write_all(&buf[..n]).expect("echo write");
            }
        });
        in_netns(&a, || {
            let mut stack = Stack::new(&pair.a.ifname, HostConfig::default()).expect("stack");
            let mut stream = ZsStream::connect(
                &mut stack,
                SocketAddrV4::new(pair.b.addr, 7007).into(),
                Duration::from_secs(10),
            )
            .expect("connect");
            let mut back = Vec::with_capacity(payload.len());
            let mut buf = vec![0u8; 50_000]; // odd size: reads straddle ring buffers
            for chunk in payload.chunks(64 << 10) {
                stream.write_all(chunk).expect("write");
                // Read back what the echo server returned for this chunk.
                let want = back.len() + chunk.len();
                while back.len() < want {
                    let n = stream.read(&mut buf).expect("read");
                    assert!(n > 0, "EOF before the echo arrived");
                    back.extend_from_slice(&buf[..n]);
                }
            }
            stream.flush().expect("everything acknowledged");
            stream.shutdown_write().expect("FIN");
            let n = stream.read(&mut buf).expect("read after FIN");
            assert_eq!(n, 0, "the echo server closed after our FIN");
            back
        })
    });
    assert!(
        echoed == payload,
        "echoed {} of {} bytes, byte-exact",
        echoed.len(),
        payload.len()
    );
}

#[test]
fn accept_read_to_end_and_reply() {
    let _serial = heavy();
    let (a, b, pair) = lab();
    let payload = data(2 << 20);
    let ready = AtomicBool::new(false);
    let reply = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&a, || {
                let mut stack = Stack::new(&pair.a.ifname, HostConfig::default()).expect("stack");
                stack.listen(7008).expect("listen");
                ready.store(true, Ordering::Release);
                let mut stream =
                    ZsStream::accept(&mut stack, 7008, Duration::from_secs(20)).expect("accept");
                let mut got = Vec::new();
                stream.read_to_end(&mut got).expect("read to EOF");
                assert!(
                    got == payload,
                    "received {} of {} bytes, byte-exact",
                    got.len(),
                    payload.len()
                );
                stream
                    .write_all(format!("got {} bytes", got.len()).as_bytes())
                    .expect("reply");
                stream.flush().expect("reply acknowledged");
                stream.shutdown_write().expect("FIN acknowledged");
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        let reply = in_netns(&b, || {
            let mut c = TcpStream::connect_timeout(
                &SocketAddrV4::new(pair.a.addr, 7008).into(),
                Duration::from_secs(10),
            )
            .expect("connect");
            c.write_all(&payload).expect("send");
            c.shutdown(std::net::Shutdown::Write).expect("FIN");
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut r = String::new();
            c.read_to_string(&mut r).expect("reply");
            r
        });
        server.join().expect("server");
        reply
    });
    assert_eq!(reply, format!("got {} bytes", 2 << 20));
}
