//! IPv6 end to end: `zerosplit nc` against Linux TCP over IPv6, both
//! ways, at MTU 1500 and 9000, on a veth pair whose ends have addresses of
//! the benchmarking prefix 2001:2::/48 (RFC 5180). Every byte arrives
//! (length and a hash), and the kernel of zerosplit's namespace opened no
//! TCP connection of its own: the segments went through the XDP program's
//! IPv6 maps, the datapath's IPv6 parser and builder, and neighbour
//! discovery through the kernel's table.

mod common;

use std::hash::{DefaultHasher, Hasher};
use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use zerosplit_lab::{NetNs, Offloads, VethPair};
use zerosplit_tests::{in_netns, require_root};

const A6: Ipv6Addr = zerosplit_lab::IPV6_A;
const B6: Ipv6Addr = zerosplit_lab::IPV6_B;

/// Namespaces joined by a veth of `mtu`, with IPv4 (the lab's) and IPv6
/// addresses on both ends.
fn lab6(prefix: &str, mtu: u32) -> (NetNs, NetNs, VethPair) {
    require_root();
    let a = NetNs::new(&format!("{prefix}a")).expect("netns");
    let b = NetNs::new(&format!("{prefix}b")).expect("netns");
    let pair = VethPair::create_with_offloads(&a, &b, mtu, 1, Offloads::Default).expect("veth");
    pair.add_ipv6(&a, &b).expect("IPv6 addresses");
    (a, b, pair)
}

/// Deterministic bytes and their hash.
fn payload(len: usize, seed: u64) -> (Vec<u8>, u64) {
    let mut x = seed | 1;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let h = hash(&data);
    (data, h)
}

fn hash(b: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(b);
    h.finish()
}

/// Linux connects to zerosplit's `nc -l` over IPv6 and sends `len` bytes;
/// then zerosplit's `nc` connects to a Linux listener over IPv6 and sends
/// as many. Both receivers get every byte.
fn both_ways(prefix: &str, mtu: u32, len: usize) {
    let _serial = serial();
    let (a, b, pair) = lab6(prefix, mtu);
    let mtu_arg = mtu.to_string();
    let nc = |extra: &[&str]| {
        let mut args = vec![
            "30",
            BIN,
            "nc",
            "--iface",
            &pair.a.ifname,
            "--mtu",
            &mtu_arg,
        ];
        args.extend_from_slice(extra);
        a.command("timeout", args)
    };

    // Linux → zerosplit.
    let (data, want) = payload(len, 7);
    // Its output to a file: a pipe nobody reads until the sender is done
    // would stop it at 64 KiB.
    let dir = tempdir();
    let received = dir.join("received");
    let server = nc(&["-l", ":5000"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&received).expect("output file"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("nc -l");
    let to: SocketAddr = format!("[{A6}]:5000").parse().unwrap();
    let sent = in_netns(&b, || {
        let start = Instant::now();
        let mut s = loop {
            match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(e) if start.elapsed() > Duration::from_secs(15) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        s.write_all(&data)
    });
    let out = server.wait_with_output().expect("nc -l exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(sent.is_ok(), "sending: {sent:?}; nc -l: {stderr}");
    assert!(out.status.success(), "nc -l: {stderr}");
    let got = std::fs::read(&received).expect("nc's output");
    assert_eq!(got.len(), len, "{stderr}");
    assert_eq!(hash(&got), want, "the bytes Linux sent");

    // zerosplit → Linux.
    let (data, want) = payload(len, 11);
    let listener = in_netns(&b, || TcpListener::bind((B6, 5001)).expect("listen"));
    let reader = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("read");
        (peer, got)
    });
    let mut client = nc(&[&format!("[{B6}]:5001")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nc");
    let mut stdin = client.stdin.take().expect("stdin");
    stdin.write_all(&data).expect("to nc");
    drop(stdin);
    let out = client.wait_with_output().expect("nc exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "nc: {stderr}");
    let (peer, got) = reader.join().expect("reader");
    assert_eq!(peer.ip(), std::net::IpAddr::V6(A6), "the client's address");
    assert_eq!(got.len(), len, "{stderr}");
    assert_eq!(hash(&got), want, "the bytes zerosplit sent");

    assert_no_kernel_opens(&a);
}

#[test]
fn nc_and_linux_over_ipv6_both_ways_at_mtu_1500() {
    both_ways("zv6", 1500, 4 << 20);
}

#[test]
fn nc_and_linux_over_ipv6_both_ways_at_mtu_9000() {
    both_ways("zv9", 9000, 8 << 20);
}
