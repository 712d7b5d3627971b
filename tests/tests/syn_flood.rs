//! A SYN flood (issue 12, item 4): thousands of SYNs from spoofed sources
//! at a zerosplit listener. Handshakes under way are bounded per listener
//! (the oldest is evicted), hold a flow-table entry but no AF_XDP socket or
//! steering entry, and a genuine client still connects and transfers
//! byte-exact afterwards.
//!
//! Builds its own namespaces joined by veth; the flood is sent with an
//! IP_HDRINCL raw socket from the peer namespace, from addresses in
//! 198.19.0.0/16 that nobody owns (so the SYN-ACKs are dropped, as they
//! would be in a real flood). Needs root.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use datapath::checksum::{ipv4_pseudo_header, sum};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use zerosplit::engine::smol::SmolConfig;
use zerosplit::host::HostConfig;
use zerosplit::provider::Provider;
use zerosplit::stack::SmolStack;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{connect_retrying, heavy, pattern, require_root, wait_for};

const PORT: u16 = 5201;
const FLOOD: u32 = 3000;
const MAX_HALF_OPEN: usize = 64;
const LEN: usize = 2 << 20;

/// An IPv4 SYN from `src:sport` to `dst:PORT`, checksums filled in.
fn syn(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 40];
    f[0] = 0x45;
    f[2..4].copy_from_slice(&40u16.to_be_bytes());
    f[8] = 64;
    f[9] = 6;
    f[12..16].copy_from_slice(&src.octets());
    f[16..20].copy_from_slice(&dst.octets());
    let ip_sum = sum(&f[..20]).checksum();
    f[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let t = &mut f[20..];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&PORT.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x02;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    let tcp_sum = ipv4_pseudo_header(src.octets(), dst.octets(), 6, 20)
        .then(sum(t))
        .checksum();
    t[16..18].copy_from_slice(&tcp_sum.to_be_bytes());
    f
}

/// Sends [`FLOOD`] SYNs; returns how many the kernel took (a full socket
/// buffer on a loaded machine can refuse some).
fn flood(to: Ipv4Addr) -> u64 {
    let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255)))
        .expect("raw socket (IPPROTO_RAW)");
    let addr = SockAddr::from(SocketAddrV4::new(to, 0));
    let mut sent = 0;
    for i in 0..FLOOD {
        let src = Ipv4Addr::new(198, 19, (i >> 8) as u8, i as u8);
        let frame = syn(src, 10_000 + (i % 50_000) as u16, to, i.wrapping_mul(7919));
        // A full socket buffer is back-pressure, not failure: retry a
        // little, bounded.
        for _ in 0..100 {
            if sock.send_to(&frame, &addr).is_ok() {
                sent += 1;
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
    }
    sent
}

/// A kernel client that connects to `to` (retrying for a while), sends
/// `payload`, and waits for the server to close.
fn genuine_client(to: Ipv4Addr, payload: &[u8]) {
    let mut stream = connect_retrying(SocketAddrV4::new(to, PORT), Duration::from_secs(15));
    stream.write_all(payload).expect("kernel send");
    stream.shutdown(std::net::Shutdown::Write).expect("FIN");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).expect("closed by zerosplit");
}

#[test]
fn a_syn_flood_is_bounded_and_a_real_client_still_gets_through() {
    require_root();
    let _serial = heavy();
    let a = NetNs::new("zsfa").expect("netns");
    let b = NetNs::new("zsfb").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let payload = pattern(LEN, 7);
    let ready = AtomicBool::new(false);
    // SYNs sent, once the flood is over.
    let flooded = AtomicU64::new(u64::MAX);
    let taken = AtomicBool::new(false);
    let ((received, probe), sent) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&a, || {
                let config = HostConfig {
                    max_half_open: MAX_HALF_OPEN,
                    ..HostConfig::default()
                };
                let mut stack = Stack::new(&pair.a.ifname, config).expect("stack");
                stack.listen(PORT).expect("listen");
                ready.store(true, Ordering::Release);
                // Take the flood in before the genuine client comes, with a
                // bounded number of polls: every SYN sent is evicted in
                // turn, held, or dropped under a named reason (a full RX
                // ring on a loaded machine).
                let mut most = 0;
                for _ in 0..2_000_000 {
                    stack.poll();
                    most = most.max(stack.connections());
                    let sent = flooded.load(Ordering::Acquire);
                    let dropped: u64 = stack.drops().iter().map(|(_, n)| n).sum();
                    if sent != u64::MAX && dropped + MAX_HALF_OPEN as u64 >= sent {
                        break;
                    }
                }
                let sockets_in_flood = stack.nic_counters().flow_sockets_opened;
                let drops = stack.drops();
                taken.store(true, Ordering::Release);
                let mut out = Vec::with_capacity(LEN);
                let opts = TransferOptions {
                    idle_timeout: Duration::from_secs(20),
                };
                let (_, after) = transfer::listen_with(&mut stack, PORT, &mut out, &opts, |s| {
                    (s.counters(), s.nic_counters().flow_sockets_opened)
                })
                .expect("the genuine client is served");
                (out, (most, sockets_in_flood, drops, after))
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        let sent = in_netns(&b, || flood(pair.a.addr));
        flooded.store(sent, Ordering::Release);
        wait_for(&taken, Duration::from_secs(60), "the flood taken in");
        in_netns(&b, || genuine_client(pair.a.addr, &payload));
        (server.join().expect("server"), sent)
    });
    let (most, sockets_in_flood, drops, (counters, sockets_after)) = probe;
    println!(
        "flood of {sent} SYNs: at most {most} connections held, {} handshakes evicted, \
         {sockets_in_flood} flow sockets opened during the flood, drops {drops:?}",
        counters.half_open_evicted
    );
    let dropped: u64 = drops.iter().map(|(_, n)| n).sum();
    assert!(sent >= u64::from(FLOOD) / 2, "the flood was sent: {sent}");
    assert!(
        most <= MAX_HALF_OPEN,
        "handshakes under way stay within max_half_open: {most}"
    );
    assert!(
        counters.half_open_evicted > 0 && dropped + MAX_HALF_OPEN as u64 >= sent,
        "every SYN beyond the bound evicted an older handshake or was dropped under a \
         named reason: {drops:?}"
    );
    assert_eq!(
        sockets_in_flood, 0,
        "no AF_XDP socket before a handshake completes"
    );
    assert_eq!(
        sockets_after, 1,
        "the genuine connection got its own socket"
    );
    assert!(
        received == payload,
        "{} of {LEN} bytes, byte-exact",
        received.len()
    );
}

/// The smoltcp transport takes the same limits: SYNs beyond
/// `max_half_open` handshakes under way are not lent to smoltcp (each
/// would cost a socket and its buffers); the flood's handshakes end with
/// smoltcp's timeout (there is no eviction on this path), and then a
/// genuine client gets through.
#[test]
fn the_smoltcp_transport_bounds_a_syn_flood_too() {
    require_root();
    let _serial = heavy();
    let a = NetNs::new("zsfc").expect("netns");
    let b = NetNs::new("zsfd").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let payload = pattern(LEN, 9);
    let ready = AtomicBool::new(false);
    // SYNs sent, once the flood is over.
    let flooded = AtomicU64::new(u64::MAX);
    let drained = AtomicBool::new(false);
    let ((received, (most, refused, drops)), sent) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&a, || {
                let config = SmolConfig {
                    stack: HostConfig {
                        max_half_open: MAX_HALF_OPEN,
                        ..SmolConfig::default().stack
                    },
                    socket_buffer: 256 << 10,
                    timeout: Some(Duration::from_secs(5)),
                    ..SmolConfig::default()
                };
                let mut stack = SmolStack::new(&pair.a.ifname, config).expect("smoltcp stack");
                stack.listen(PORT).expect("listen");
                ready.store(true, Ordering::Release);
                let mut most = 0;
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                while std::time::Instant::now() < deadline {
                    stack.poll();
                    most = most.max(stack.connections());
                    // SYNs the AF_XDP ring had no room for are dropped
                    // (and counted) before smoltcp's loop sees them.
                    let dropped: u64 = stack.drops().iter().map(|(_, n)| n).sum();
                    let sent = flooded.load(Ordering::Acquire);
                    if sent != u64::MAX && dropped + MAX_HALF_OPEN as u64 >= sent {
                        break;
                    }
                }
                let refused = stack.counters().syn_refused;
                let drops = stack.drops();
                // The flood's handshakes end with smoltcp's timeout.
                while stack.connections() > 0 && std::time::Instant::now() < deadline {
                    stack.poll();
                }
                drained.store(true, Ordering::Release);
                let mut out = Vec::with_capacity(LEN);
                let opts = TransferOptions {
                    idle_timeout: Duration::from_secs(20),
                };
                transfer::listen(&mut stack, PORT, &mut out, &opts)
                    .expect("the genuine client is served");
                (out, (most, refused, drops))
            })
        });
        wait_for(&ready, Duration::from_secs(20), "smoltcp listening");
        let sent = in_netns(&b, || flood(pair.a.addr));
        flooded.store(sent, Ordering::Release);
        wait_for(
            &drained,
            Duration::from_secs(30),
            "the flood's handshakes timed out",
        );
        in_netns(&b, || genuine_client(pair.a.addr, &payload));
        (server.join().expect("server"), sent)
    });
    println!(
        "smoltcp, flood of {sent} SYNs: at most {most} connections held, {refused} SYNs refused, \
         drops {drops:?}"
    );
    let dropped: u64 = drops.iter().map(|(_, n)| n).sum();
    assert!(sent >= u64::from(FLOOD) / 2, "the flood was sent: {sent}");
    assert!(
        most <= MAX_HALF_OPEN,
        "handshakes under way stay within max_half_open: {most}"
    );
    assert!(
        refused > 0 && dropped + MAX_HALF_OPEN as u64 >= sent,
        "every SYN beyond the bound is refused or dropped under a named reason: {drops:?}"
    );
    assert!(
        received == payload,
        "{} of {LEN} bytes, byte-exact",
        received.len()
    );
}
