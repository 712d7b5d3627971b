//! A Linux peer on a veth as it comes: TX checksum offload on (every
//! container's default), so its segments carry partial checksums (the
//! field holds only the pseudo-header sum; no NIC finishes it on a veth).
//! zerosplit takes them on a veth, with either transport, and counts them
//! (`csum_partial`); every other bad checksum is still refused (the
//! datapath's placement and wire tests).

use std::{
    net::SocketAddrV4,
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::Duration,
};

use zerosplit::engine::smol::SmolConfig;
use zerosplit::host::HostConfig;
use zerosplit::metrics::QueueSnapshot;
use zerosplit::provider::Provider;
use zerosplit::stack::SmolStack;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, NetNs, Offload, Offloads, VethPair};
use zerosplit_tests::{heavy, linux_receives, linux_sends, pattern, require_root, wait_for};

const LEN: usize = 8 << 20;

/// A Linux client with default offloads sends `LEN` bytes to a zerosplit
/// listener made by `open`; returns what arrived and the listener's
/// snapshot after the transfer.
fn linux_sends_to<P: Provider>(
    prefix: &str,
    open: impl FnOnce(&str) -> P + Send,
    snapshot: impl FnOnce(&mut P) -> QueueSnapshot + Send,
) -> (Vec<u8>, QueueSnapshot) {
    require_root();
    let _serial = heavy();
    let a = NetNs::new(&format!("{prefix}a")).expect("netns");
    let b = NetNs::new(&format!("{prefix}b")).expect("netns");
    let pair = VethPair::create_with_offloads(&a, &b, 1500, 1, Offloads::Default).expect("veth");
    // The peer is as a user has it: TX checksum offload on.
    assert!(b
        .offload(&pair.b.ifname, Offload::TxChecksum)
        .expect("read offload"));
    let payload = pattern(LEN, 7);
    let ready = AtomicBool::new(false);
    let (received, snap) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&a, || {
                let mut stack = open(&pair.a.ifname);
                ready.store(true, Ordering::Release);
                let mut out = Vec::with_capacity(LEN);
                let opts = TransferOptions {
                    idle_timeout: Duration::from_secs(20),
                };
                transfer::listen_with(&mut stack, 5001, &mut out, &opts, |_| ())
                    .expect("zerosplit receives from a Linux peer with default offloads");
                (out, snapshot(&mut stack))
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        in_netns(&b, || {
            linux_sends(SocketAddrV4::new(pair.a.addr, 5001), &payload)
        });
        server.join().expect("server")
    });
    assert!(
        received == payload,
        "Linux (default offloads) → zerosplit: {} of {LEN} bytes, byte-exact",
        received.len()
    );
    (received, snap)
}

/// Every data segment of the transfer came with a partial checksum and
/// was counted; none was refused.
fn assert_counted(snap: &QueueSnapshot) {
    let partial = snap.verdicts.get("csum_partial").copied().unwrap_or(0);
    // At most 1460 payload bytes a segment at MTU 1500 (1448 with
    // timestamps, which smoltcp does not use).
    let segments = (LEN / 1460) as u64;
    assert!(
        partial >= segments,
        "csum_partial counts the peer's segments: {partial} < {segments}"
    );
    let bad = snap.drops.get("bad_checksum").copied().unwrap_or(0);
    assert_eq!(bad, 0, "no segment was refused as a bad checksum");
}

#[test]
fn linux_with_default_offloads_reaches_the_header_only_tcp() {
    let (_, snap) = linux_sends_to(
        "zpct",
        |ifname| Stack::new(ifname, HostConfig::default()).expect("stack"),
        |s| s.snapshot(),
    );
    assert_counted(&snap);
}

#[test]
fn linux_with_default_offloads_reaches_smoltcp() {
    let (_, snap) = linux_sends_to(
        "zpcs",
        |ifname| SmolStack::new(ifname, SmolConfig::default()).expect("smoltcp stack"),
        |s| s.snapshot(),
    );
    assert_counted(&snap);
}

/// zerosplit opens the connection: the Linux listener's SYN-ACK and ACKs
/// carry partial checksums too.
#[test]
fn zerosplit_reaches_linux_with_default_offloads() {
    require_root();
    let _serial = heavy();
    let a = NetNs::new("zpcca").expect("netns");
    let b = NetNs::new("zpccb").expect("netns");
    let pair = VethPair::create_with_offloads(&a, &b, 1500, 1, Offloads::Default).expect("veth");
    let payload = pattern(LEN, 9);
    let listener = in_netns(&b, || {
        std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, 6001)).expect("listen")
    });
    let (received, snap) = thread::scope(|s| {
        let reader = s.spawn(|| linux_receives(&listener, LEN));
        let snap = in_netns(&a, || {
            let mut stack = Stack::new(&pair.a.ifname, HostConfig::default()).expect("stack");
            let opts = TransferOptions {
                idle_timeout: Duration::from_secs(20),
            };
            let n = transfer::connect(
                &mut stack,
                SocketAddrV4::new(pair.b.addr, 6001).into(),
                &mut payload.as_slice(),
                &opts,
            )
            .expect("zerosplit sends to a Linux peer with default offloads");
            assert_eq!(n as usize, LEN);
            stack.snapshot()
        });
        (reader.join().expect("reader"), snap)
    });
    assert!(received == payload, "zerosplit → Linux, byte-exact");
    let partial = snap.verdicts.get("csum_partial").copied().unwrap_or(0);
    assert!(
        partial > 0,
        "the peer's SYN-ACK and ACKs were partial: {partial}"
    );
    assert_eq!(snap.drops.get("bad_checksum").copied().unwrap_or(0), 0);
}
