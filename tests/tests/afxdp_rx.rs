//! AF_XDP receive on veth through the steering program: a listening port's
//! SYN reaches the catch-all socket, a steered flow reaches its own socket
//! (and only it), the kernel keeps ICMP and ARP, and jumbo frames arrive as
//! multi-buffer chains.
//!
//! Each test builds its own "stack" and "peer" namespaces joined by veth
//! and needs root.

use std::{
    net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use datapath::steer::{Proto, SteerKey, Steering, XdpMode, FIRST_FLOW_SLOT};
use datapath::{
    config::{BindMode, XskConfig},
    raw::XskPort,
};
use zerosplit_lab::{NetNs, VethPair};
use zerosplit_tests::{in_netns, require_root, wait_for};

struct Lab {
    pair: VethPair,
    peer: NetNs,
    stack: NetNs,
}

fn lab(mtu: u32) -> Lab {
    require_root();
    let stack = NetNs::new("zxs").expect("stack netns");
    let peer = NetNs::new("zxp").expect("peer netns");
    let pair = VethPair::create(&stack, &peer, mtu).expect("veth pair");
    Lab { pair, peer, stack }
}

/// The few header fields these tests check, parsed by hand from the frame.
#[derive(Debug, PartialEq)]
struct Seen {
    proto: u8,
    sport: u16,
    dport: u16,
    tcp_flags: u8,
    payload: Vec<u8>,
}

fn parse(frame: &[u8]) -> Option<Seen> {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let proto = ip[9];
    let l4 = ip.get(ihl..total)?;
    let (sport, dport) = (
        u16::from_be_bytes([l4[0], l4[1]]),
        u16::from_be_bytes([l4[2], l4[3]]),
    );
    let (tcp_flags, payload) = match proto {
        6 => (l4[13], l4[usize::from(l4[12] >> 4) * 4..].to_vec()),
        17 => (0, l4[8..].to_vec()),
        _ => return None,
    };
    Some(Seen {
        proto,
        sport,
        dport,
        tcp_flags,
        payload,
    })
}

fn config(multi_buffer: bool) -> XskConfig {
    let mut c = XskConfig {
        bind: BindMode::Auto,
        multi_buffer,
        tx_frames: 256,
        ..XskConfig::default()
    };
    c.umem.frame_count = 2048;
    c.umem.mr_bytes = 1 << 20;
    c
}

#[test]
fn syn_to_listen_port_hits_catch_all_and_a_flow_hits_only_its_socket() {
    let lab = lab(1500);
    let (a, b) = (lab.pair.a.clone(), lab.pair.b.clone());
    const TCP_PORT: u16 = 5001;
    const UDP_PORT: u16 = 6001;
    const UDP_SPORT: u16 = 40001;
    const DATAGRAMS: usize = 200;
    let stop = AtomicBool::new(false);
    let ready = AtomicBool::new(false);

    let (catch_all, flow, ping_ok) = thread::scope(|s| {
        let receiver = s.spawn(|| {
            in_netns(&lab.stack, || {
                let mut steering = Steering::attach(&a.ifname, XdpMode::Native).expect("attach");
                let mut port = XskPort::open(&a.ifname, 0, &config(false)).expect("open port");
                let mut flow_sock = port.open_flow_socket().expect("flow socket");
                steering.set_socket(0, port.fd()).expect("catch-all slot");
                steering
                    .set_socket(FIRST_FLOW_SLOT, flow_sock.fd())
                    .expect("flow slot");
                steering
                    .insert_listen(a.addr, TCP_PORT, Proto::Tcp)
                    .expect("listen");
                let key = SteerKey {
                    flow: proto::FlowKey {
                        remote_ip: b.addr.into(),
                        local_ip: a.addr.into(),
                        remote_port: UDP_SPORT,
                        local_port: UDP_PORT,
                    },
                    proto: Proto::Udp,
                };
                steering
                    .insert_flow(&key, FIRST_FLOW_SLOT, 0)
                    .expect("flow");
                ready.store(true, Ordering::Release);
                let (mut on_catch_all, mut on_flow) = (Vec::new(), Vec::new());
                let deadline = Instant::now() + Duration::from_secs(20);
                // After the stop, drain what is still in the rings (a
                // receiver starved by a loaded machine may lag behind).
                let mut stopped = 0;
                while stopped < 100 && Instant::now() < deadline {
                    let n = port
                        .receive(64, |pkt, _| on_catch_all.extend(parse(pkt.fragments()[0])))
                        + port.receive_flow(&mut flow_sock, 64, |pkt, _| {
                            on_flow.extend(parse(pkt.fragments()[0]))
                        });
                    if stop.load(Ordering::Acquire) {
                        if n == 0 {
                            break;
                        }
                        stopped += 1;
                    }
                    thread::sleep(Duration::from_micros(200));
                }
                let counters = steering.counters().expect("counters");
                assert!(
                    counters.steered > DATAGRAMS as u64,
                    "steered counter {counters:?}"
                );
                (on_catch_all, on_flow)
            })
        });
        // Give the receiver time to attach, then act from the peer.
        wait_for(
            &ready,
            Duration::from_secs(30),
            "steering and sockets in place",
        );
        let ping_ok = in_netns(&lab.peer, || {
            let _ = TcpStream::connect_timeout(
                &SocketAddrV4::new(a.addr, TCP_PORT).into(),
                Duration::from_millis(300),
            );
            let udp = UdpSocket::bind((b.addr, UDP_SPORT)).expect("udp bind");
            let other = UdpSocket::bind((b.addr, 0)).expect("udp bind");
            for i in 0..DATAGRAMS {
                udp.send_to(&[i as u8; 100], (a.addr, UDP_PORT))
                    .expect("send");
                // Same destination, other source port: not the steered flow,
                // and no listen entry for UDP, so the kernel gets it.
                if i % 50 == 0 {
                    other
                        .send_to(b"not ours", (a.addr, UDP_PORT))
                        .expect("send");
                }
                if i % 16 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
            }
            zerosplit_tests::pings(
                &lab.peer,
                a.addr,
                2,
                Duration::from_millis(200),
                Duration::from_secs(1),
            ) > 0
        });
        thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Release);
        let (c, f) = receiver.join().expect("receiver");
        (c, f, ping_ok)
    });

    assert!(
        ping_ok,
        "ping through the kernel must keep working while zerosplit is attached"
    );
    let syns: Vec<_> = catch_all
        .iter()
        .filter(|p| p.proto == 6 && p.dport == TCP_PORT)
        .collect();
    assert!(
        !syns.is_empty(),
        "the SYN to the listening port reached the catch-all socket: {catch_all:?}"
    );
    assert!(
        syns.iter().all(|p| p.tcp_flags & 0x02 != 0),
        "what arrived is a SYN"
    );
    assert!(
        catch_all.iter().all(|p| p.proto != 17),
        "no UDP on the catch-all socket: {catch_all:?}"
    );
    assert_eq!(
        flow.len(),
        DATAGRAMS,
        "every datagram of the steered flow, and only those, on the flow socket"
    );
    for (i, p) in flow.iter().enumerate() {
        assert_eq!((p.proto, p.sport, p.dport), (17, UDP_SPORT, UDP_PORT));
        assert_eq!(
            p.payload,
            vec![i as u8; 100],
            "datagram {i} in order and intact"
        );
    }
}

#[test]
fn jumbo_frames_arrive_as_multi_buffer_chains() {
    let lab = lab(9000);
    let (a, b) = (lab.pair.a.clone(), lab.pair.b.clone());
    const UDP_PORT: u16 = 6002;
    const COUNT: usize = 50;
    const SIZE: usize = 8000;
    let stop = AtomicBool::new(false);
    let ready = AtomicBool::new(false);

    let received = thread::scope(|s| {
        let receiver = s.spawn(|| {
            in_netns(&lab.stack, || {
                let mut steering = Steering::attach(&a.ifname, XdpMode::Native).expect("attach");
                let mut port =
                    XskPort::open(&a.ifname, 0, &config(true)).expect("open port with XDP_USE_SG");
                steering.set_socket(0, port.fd()).expect("slot");
                steering
                    .insert_listen(Ipv4Addr::UNSPECIFIED, UDP_PORT, Proto::Udp)
                    .expect("listen");
                ready.store(true, Ordering::Release);
                let mut got: Vec<(usize, Vec<u8>)> = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(20);
                // After the stop, drain what is still in the ring.
                while got.len() < COUNT && Instant::now() < deadline {
                    let n = port.receive(64, |pkt, _| {
                        let whole: Vec<u8> = pkt.fragments().concat();
                        if let Some(seen) = parse(&whole) {
                            got.push((pkt.fragments().len(), seen.payload));
                        }
                    });
                    if n == 0 && stop.load(Ordering::Acquire) {
                        break;
                    }
                    thread::sleep(Duration::from_micros(200));
                }
                assert_eq!(port.counters().rx_too_many_frags, 0);
                got
            })
        });
        wait_for(
            &ready,
            Duration::from_secs(30),
            "steering and sockets in place",
        );
        in_netns(&lab.peer, || {
            let udp = UdpSocket::bind((b.addr, 0)).expect("bind");
            for i in 0..COUNT {
                let payload: Vec<u8> = (0..SIZE).map(|k| (k * 7 + i) as u8).collect();
                udp.send_to(&payload, (a.addr, UDP_PORT))
                    .expect("send jumbo");
                thread::sleep(Duration::from_millis(2));
            }
        });
        thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Release);
        receiver.join().expect("receiver")
    });

    assert_eq!(received.len(), COUNT, "every jumbo datagram arrived");
    for (i, (frags, payload)) in received.iter().enumerate() {
        assert!(
            *frags >= 2,
            "an {SIZE}-byte datagram spans several 4 KiB frames, got {frags}"
        );
        let want: Vec<u8> = (0..SIZE).map(|k| (k * 7 + i) as u8).collect();
        assert_eq!(
            payload, &want,
            "datagram {i} reassembled byte-exact from its fragments"
        );
    }
}
