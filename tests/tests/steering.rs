//! The XDP steering program on a veth pair, without any AF_XDP socket:
//! what it passes to the kernel, what it drops for lack of a socket, and
//! that it detaches on drop and on SIGKILL.
//!
//! Each test builds its own two namespaces — "stack" (where the program is
//! attached, on veth end `a`) and "peer" (kernel TCP/ICMP, end `b`) — and
//! needs root.

use std::{
    io::{self, BufRead, BufReader},
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::Duration,
};

use datapath::steer::{
    Proto, SteerCounters, SteerError, SteerKey, Steering, XdpMode, FIRST_FLOW_SLOT,
};
use socket2::{Domain, Socket, Type};
use zerosplit_lab::{NetNs, VethPair};
use zerosplit_tests::{in_netns, require_root, wait_until, xdp_attachment};

/// Two fresh namespaces joined by a veth pair (MTU 1500). Field order
/// makes the pair go before the namespaces.
struct Lab {
    pair: VethPair,
    peer: NetNs,
    stack: NetNs,
}

fn lab() -> Lab {
    require_root();
    let stack = NetNs::new("zst").expect("stack netns");
    let peer = NetNs::new("zsp").expect("peer netns");
    let pair = VethPair::create(&stack, &peer, 1500).expect("veth pair");
    Lab { pair, peer, stack }
}

impl Lab {
    fn attach(&self, mode: XdpMode) -> Result<Steering, SteerError> {
        in_netns(&self.stack, || Steering::attach(&self.pair.a.ifname, mode))
    }

    fn xdp(&self) -> Option<String> {
        xdp_attachment(&self.stack, &self.pair.a.ifname)
    }

    /// Kernel TCP connect from the peer namespace to the stack's address,
    /// optionally from a fixed source port.
    fn connect(&self, sport: Option<u16>, dport: u16, timeout: Duration) -> io::Result<()> {
        let (src, dst) = (self.pair.b.addr, self.pair.a.addr);
        let once = || {
            in_netns(&self.peer, || {
                let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
                if let Some(port) = sport {
                    socket.set_reuse_address(true)?;
                    socket.bind(&SocketAddr::V4(SocketAddrV4::new(src, port)).into())?;
                }
                socket.connect_timeout(
                    &SocketAddr::V4(SocketAddrV4::new(dst, dport)).into(),
                    timeout,
                )
            })
        };
        // The same source port again: the kernel may not have let go of
        // the last attempt's (a CI run once saw EADDRINUSE here).
        for _ in 0..3 {
            match once() {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                r => return r,
            }
        }
        once()
    }

    /// Kernel TCP listeners on 0.0.0.0 in the stack namespace.
    fn listen(&self, ports: &[u16]) -> Vec<TcpListener> {
        in_netns(&self.stack, || {
            ports
                .iter()
                .map(|&p| {
                    TcpListener::bind((Ipv4Addr::UNSPECIFIED, p))
                        .unwrap_or_else(|e| panic!("listen on {p}: {e}"))
                })
                .collect()
        })
    }
}

/// Whether `count` echoes from the peer (0.2 s apart, 2 s each) got any
/// answer, as `ping -c COUNT` exits 0.
fn ping(lab: &Lab, count: u32) -> bool {
    zerosplit_tests::pings(
        &lab.peer,
        lab.pair.a.addr,
        count,
        Duration::from_millis(200),
        Duration::from_secs(2),
    ) > 0
}

fn counters(s: &Steering) -> SteerCounters {
    s.counters().expect("read counters")
}

/// (a) ARP and ICMP still reach the kernel with the program attached, in
/// both modes, and are counted as passed.
#[test]
fn kernel_keeps_arp_and_icmp_in_native_and_generic_mode() {
    for (mode, shown) in [(XdpMode::Native, "xdp"), (XdpMode::Generic, "xdpgeneric")] {
        let lab = lab();
        let steering = lab.attach(mode).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            lab.xdp().as_deref(),
            Some(shown),
            "{mode} attach as seen by ip link"
        );
        assert_eq!(steering.mode(), mode);
        assert_eq!(counters(&steering), SteerCounters::default());

        assert!(
            ping(&lab, 3),
            "ping through a {mode} steering program failed"
        );
        let after = counters(&steering);
        // 3 echo requests + at least one ARP packet (the peer's request or
        // the reply to the stack's own request).
        assert!(after.passed >= 4, "{mode}: {after:?}");
        assert_eq!(
            (after.steered, after.no_socket, after.malformed),
            (0, 0, 0),
            "{mode}: {after:?}"
        );
    }
}

/// The program is multi-buffer aware (`xdp.frags`): native attach works
/// with a peer MTU of 9000 (a plain `xdp` program is refused above 3506 on
/// veth) and 8 KB pings, which arrive as multi-buffer frames, still pass.
#[test]
fn frags_aware_program_attaches_with_jumbo_mtu() {
    require_root();
    let stack = NetNs::new("zst").expect("stack netns");
    let peer = NetNs::new("zsp").expect("peer netns");
    let pair = VethPair::create(&stack, &peer, 9000).expect("veth pair, MTU 9000");
    let steering = in_netns(&stack, || Steering::attach(&pair.a.ifname, XdpMode::Native))
        .unwrap_or_else(|e| panic!("native attach with peer MTU 9000: {e}"));
    // `ping -c 2 -s 8000 -M do`: 8028-byte datagrams with DF, whole.
    let mut answered = 0;
    for _ in 0..2 {
        match zerosplit_lab::ping_sized(&peer, pair.a.addr, 8000, Duration::from_secs(2)) {
            Ok(_) => answered += 1,
            Err(e) => eprintln!("{e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(answered > 0, "no 8000-byte echo answered");
    let c = counters(&steering);
    assert!(c.passed >= 2 && c.malformed == 0, "{c:?}");
}

/// A TCP segment too short to hold a TCP header is counted `malformed`
/// and left to the kernel (which drops it).
#[test]
fn truncated_tcp_header_is_counted_malformed() {
    let lab = lab();
    let steering = lab
        .attach(XdpMode::Native)
        .unwrap_or_else(|e| panic!("{e}"));
    let dst = SocketAddr::V4(SocketAddrV4::new(lab.pair.a.addr, 0));
    in_netns(&lab.peer, || -> io::Result<()> {
        // A raw IPv4 socket: the kernel writes the IP header, we write 10
        // bytes of "TCP" (a real header has at least 20, RFC 9293 §3.1).
        let raw = Socket::new(Domain::IPV4, Type::RAW, Some(socket2::Protocol::TCP))?;
        raw.send_to(&[0x9c, 0x40, 0x1b, 0x58, 0, 0, 0, 1, 0, 0], &dst.into())?;
        Ok(())
    })
    .expect("send a truncated TCP segment from the peer");
    assert!(
        wait_until(Duration::from_secs(3), || counters(&steering).malformed
            == 1),
        "{:?}",
        counters(&steering)
    );
    assert_eq!(counters(&steering).no_socket, 0);
}

/// (b) Ports we claim (listen entry, flow entry) with no socket in the
/// slot are dropped — the kernel listener behind them must not answer —
/// while other ports and other 5-tuples still reach the kernel.
#[test]
fn claimed_ports_without_socket_are_dropped_and_others_pass() {
    const LISTEN_PORT: u16 = 7000;
    const FLOW_PORT: u16 = 7002;
    const OPEN_PORT: u16 = 7003;
    const FLOW_SPORT: u16 = 40000;
    const OTHER_SPORT: u16 = 40001;
    const BLOCKED: Duration = Duration::from_millis(1500);
    const OPEN: Duration = Duration::from_secs(5);

    let lab = lab();
    let _listeners = lab.listen(&[LISTEN_PORT, FLOW_PORT, OPEN_PORT]);
    let mut steering = lab
        .attach(XdpMode::Native)
        .unwrap_or_else(|e| panic!("{e}"));
    // Without entries the kernel listener answers: the drops below are the
    // program's doing.
    lab.connect(None, LISTEN_PORT, OPEN)
        .expect("kernel listener reachable before claiming");

    let (a, b) = (lab.pair.a.addr, lab.pair.b.addr);
    steering
        .insert_listen(a, LISTEN_PORT, Proto::Tcp)
        .expect("insert listen");
    let flow = SteerKey {
        flow: proto::FlowKey {
            remote_ip: b.into(),
            local_ip: a.into(),
            remote_port: FLOW_SPORT,
            local_port: FLOW_PORT,
        },
        proto: Proto::Tcp,
    };
    steering
        .insert_flow(&flow, FIRST_FLOW_SLOT + 1, 0)
        .expect("insert flow");
    let before = counters(&steering);

    let e = lab
        .connect(None, LISTEN_PORT, BLOCKED)
        .expect_err("listen-claimed port must not answer");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "no RST either: {e}");
    let e = lab
        .connect(Some(FLOW_SPORT), FLOW_PORT, BLOCKED)
        .expect_err("flow-claimed 5-tuple must not answer");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "no RST either: {e}");
    let mid = counters(&steering);
    assert!(
        mid.no_socket >= before.no_socket + 2,
        "{before:?} -> {mid:?}"
    );
    assert_eq!(mid.steered, 0);

    // A flow entry is an exact 5-tuple: another source port is not ours.
    lab.connect(Some(OTHER_SPORT), FLOW_PORT, OPEN)
        .expect("other source port reaches the kernel");
    lab.connect(None, OPEN_PORT, OPEN)
        .expect("unclaimed port reaches the kernel");
    let after = counters(&steering);
    assert!(after.passed > mid.passed, "{mid:?} -> {after:?}");

    // Removing the entries gives the ports back to the kernel.
    steering
        .remove_listen(a, LISTEN_PORT, Proto::Tcp)
        .expect("remove listen");
    steering.remove_flow(&flow).expect("remove flow");
    assert!(
        matches!(steering.remove_flow(&flow), Err(SteerError::Map { .. })),
        "second remove must fail"
    );
    lab.connect(None, LISTEN_PORT, OPEN)
        .expect("released listen port reaches the kernel");
    lab.connect(Some(FLOW_SPORT), FLOW_PORT, OPEN)
        .expect("released flow reaches the kernel");
    assert_eq!(counters(&steering).no_socket, after.no_socket);
}

/// UDP is parsed too, and a listen entry on 0.0.0.0 claims the port on
/// every address: a kernel UDP socket behind it stops receiving.
#[test]
fn wildcard_udp_listen_claims_the_port() {
    const PORT: u16 = 7100;
    let lab = lab();
    let a = lab.pair.a.addr;
    let receiver = in_netns(&lab.stack, || {
        std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, PORT))
    })
    .expect("kernel UDP socket in the stack namespace");
    receiver
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    let sender = in_netns(&lab.peer, || {
        std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
    })
    .expect("peer UDP");
    let mut steering = lab
        .attach(XdpMode::Native)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut buf = [0u8; 16];

    sender.send_to(b"before", (a, PORT)).expect("send");
    let (n, _) = receiver
        .recv_from(&mut buf)
        .expect("unclaimed datagram reaches the kernel");
    assert_eq!(&buf[..n], b"before");

    steering
        .insert_listen(Ipv4Addr::UNSPECIFIED, PORT, Proto::Udp)
        .expect("insert wildcard listen");
    let before = counters(&steering);
    for _ in 0..3 {
        sender.send_to(b"claimed", (a, PORT)).expect("send");
    }
    let e = receiver
        .recv_from(&mut buf)
        .expect_err("claimed datagrams must not reach the kernel");
    assert!(
        matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "{e}"
    );
    let after = counters(&steering);
    assert_eq!(
        after.no_socket,
        before.no_socket + 3,
        "{before:?} -> {after:?}"
    );
}

/// A kernel TCP connect from the peer namespace to `[dst]:port` over IPv6,
/// its SYN carrying a hop-by-hop header (8 bytes of PadN) when `hop_by_hop`:
/// "ok", "refused" or "timeout".
fn connect6(lab: &Lab, dst: &str, port: u16, hop_by_hop: bool, timeout: Duration) -> String {
    const SCRIPT: &str = r#"
import socket, sys
dst, port, hbh, t = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", float(sys.argv[4])
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
if hbh:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_HOPOPTS, bytes([0, 0, 1, 4, 0, 0, 0, 0]))
s.settimeout(t)
try:
    s.connect((dst, port))
    print("ok")
except ConnectionRefusedError:
    print("refused")
except (TimeoutError, socket.timeout):
    print("timeout")
"#;
    let out = lab
        .peer
        .command(
            "python3",
            [
                "-c",
                SCRIPT,
                dst,
                &port.to_string(),
                if hop_by_hop { "1" } else { "0" },
                &timeout.as_secs_f64().to_string(),
            ],
        )
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// IPv6: neighbour discovery and unclaimed ports reach the kernel; a
/// listen entry (the address's, then `::`'s) and an exact flow entry
/// claim theirs, dropped without a socket; a SYN of ours behind an
/// extension header is dropped and counted `ipv6_ext` (the kernel must
/// not answer for our port), another port's passes.
#[test]
fn ipv6_flows_and_listeners_are_claimed_and_the_rest_passes() {
    const CLAIMED: u16 = 7200;
    const FLOW: u16 = 7201;
    const OPEN: u16 = 7202;
    const ANY: u16 = 7203;
    const FLOW_SPORT: u16 = 40200;
    const BLOCKED: Duration = Duration::from_millis(1500);
    const OPEN_WAIT: Duration = Duration::from_secs(5);
    let lab = lab();
    let (six_a, six_b) = ("2001:2::1", "2001:2::2");
    lab.stack
        .add_ipv6(&lab.pair.a.ifname, six_a.parse().unwrap(), 64)
        .expect("IPv6 on the stack's end");
    lab.peer
        .add_ipv6(&lab.pair.b.ifname, six_b.parse().unwrap(), 64)
        .expect("IPv6 on the peer's end");
    let _listeners = in_netns(&lab.stack, || {
        [CLAIMED, FLOW, OPEN, ANY]
            .iter()
            .map(|&p| TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, p)).expect("listen"))
            .collect::<Vec<_>>()
    });
    let mut steering = lab
        .attach(XdpMode::Native)
        .unwrap_or_else(|e| panic!("{e}"));
    // Neighbour discovery passes: the kernel resolves and answers.
    assert_eq!(connect6(&lab, six_a, CLAIMED, false, OPEN_WAIT), "ok");

    let a: std::net::IpAddr = six_a.parse().unwrap();
    steering
        .insert_listen(a, CLAIMED, Proto::Tcp)
        .expect("insert listen6");
    steering
        .insert_listen(std::net::Ipv6Addr::UNSPECIFIED, ANY, Proto::Tcp)
        .expect("insert listen6 on ::");
    let flow = SteerKey {
        flow: proto::FlowKey {
            remote_ip: six_b.parse().unwrap(),
            local_ip: a,
            remote_port: FLOW_SPORT,
            local_port: FLOW,
        },
        proto: Proto::Tcp,
    };
    steering
        .insert_flow(&flow, FIRST_FLOW_SLOT + 2, 0)
        .expect("insert flow6");
    let before = counters(&steering);
    assert_eq!(connect6(&lab, six_a, CLAIMED, false, BLOCKED), "timeout");
    assert_eq!(connect6(&lab, six_a, ANY, false, BLOCKED), "timeout");
    let flow_connect = in_netns(&lab.peer, || {
        let socket = Socket::new(Domain::IPV6, Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        let src: SocketAddr = format!("[{six_b}]:{FLOW_SPORT}").parse().unwrap();
        socket.bind(&src.into())?;
        let dst: SocketAddr = format!("[{six_a}]:{FLOW}").parse().unwrap();
        socket.connect_timeout(&dst.into(), BLOCKED)
    });
    assert_eq!(
        flow_connect.map_err(|e| e.kind()),
        Err(io::ErrorKind::TimedOut)
    );
    let mid = counters(&steering);
    assert!(
        mid.no_socket >= before.no_socket + 3 && mid.steered == 0,
        "{before:?} -> {mid:?}"
    );
    // Another source port, another destination port: the kernel's.
    assert_eq!(connect6(&lab, six_a, FLOW, false, OPEN_WAIT), "ok");
    assert_eq!(connect6(&lab, six_a, OPEN, false, OPEN_WAIT), "ok");

    // Behind a hop-by-hop header: ours is dropped, counted; others pass.
    assert_eq!(connect6(&lab, six_a, CLAIMED, true, BLOCKED), "timeout");
    let ext = counters(&steering);
    assert!(ext.ipv6_ext >= 1, "{mid:?} -> {ext:?}");
    assert_eq!(ext.no_socket, mid.no_socket, "{mid:?} -> {ext:?}");
    assert_eq!(connect6(&lab, six_a, OPEN, true, OPEN_WAIT), "ok");
    assert_eq!(counters(&steering).ipv6_ext, ext.ipv6_ext);

    // Released, the ports are the kernel's again.
    steering
        .remove_listen(a, CLAIMED, Proto::Tcp)
        .expect("remove listen6");
    steering.remove_flow(&flow).expect("remove flow6");
    assert_eq!(connect6(&lab, six_a, CLAIMED, false, OPEN_WAIT), "ok");
}

/// Kills the child with SIGKILL when dropped (also on a failed assert).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (c) A process that attached and dies by SIGKILL (no destructor runs)
/// leaves no program on the interface: the kernel closes the link fd.
#[test]
fn sigkill_of_the_attaching_process_detaches() {
    let lab = lab();
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_zs-steer-hold"))
            .args([lab.stack.name(), lab.pair.a.ifname.as_str(), "native"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn zs-steer-hold"),
    );
    let stdout = child.0.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
    if !line.starts_with("attached ") {
        let _ = child.0.kill();
        let _ = child.0.wait();
        let mut stderr = String::new();
        if let Some(mut pipe) = child.0.stderr.take() {
            let _ = io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        panic!("zs-steer-hold did not attach: stdout {line:?}, stderr {stderr:?}");
    }
    assert_eq!(
        lab.xdp().as_deref(),
        Some("xdp"),
        "attached before the kill"
    );

    child.0.kill().expect("SIGKILL");
    let status = child.0.wait().expect("reap");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc_sigkill()),
        "{status}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || lab.xdp().is_none()),
        "program still attached 5 s after SIGKILL: {:?}",
        lab.xdp()
    );
    // The interface is free again.
    drop(
        lab.attach(XdpMode::Native)
            .unwrap_or_else(|e| panic!("re-attach after kill: {e}")),
    );
}

/// SIGKILL's number on Linux (signal(7)).
const fn libc_sigkill() -> i32 {
    9
}

/// (d) Dropping the `Steering` detaches; while attached, a second attach
/// on the same interface is refused (one XDP program per interface).
#[test]
fn drop_detaches_and_a_second_attach_is_refused() {
    let lab = lab();
    for mode in [XdpMode::Native, XdpMode::Generic] {
        let steering = lab.attach(mode).unwrap_or_else(|e| panic!("{e}"));
        assert!(lab.xdp().is_some(), "{mode}: attached");
        let ifindex = steering.ifindex();
        assert!(ifindex > 0);
        let second = lab
            .attach(mode)
            .expect_err("second program on the same interface");
        assert!(
            matches!(second, SteerError::Program { op: "attach", .. }),
            "{second}"
        );
        assert!(second.to_string().contains(&lab.pair.a.ifname), "{second}");
        drop(steering);
        assert_eq!(lab.xdp(), None, "{mode}: detached on drop");
        assert!(ping(&lab, 1), "{mode}: kernel path intact after detach");
    }
}

/// Map edits are checked: out-of-range slots and missing entries give a
/// typed error naming the interface.
#[test]
fn bad_slots_and_missing_entries_are_errors() {
    let lab = lab();
    let mut steering = lab
        .attach(XdpMode::Generic)
        .unwrap_or_else(|e| panic!("{e}"));
    let key = SteerKey {
        flow: proto::FlowKey {
            remote_ip: lab.pair.b.addr.into(),
            local_ip: lab.pair.a.addr.into(),
            remote_port: 1,
            local_port: 2,
        },
        proto: Proto::Udp,
    };
    let e = steering
        .insert_flow(&key, datapath::steer::XSKS_MAX, 0)
        .expect_err("slot out of range");
    assert!(matches!(e, SteerError::SlotOutOfRange { .. }), "{e}");
    assert!(e.to_string().contains(&lab.pair.a.ifname), "{e}");
    // Clearing an empty XSKMAP slot is not an error (the kernel's delete is
    // an exchange with NULL), but a slot past the map is.
    steering
        .clear_socket(5)
        .expect("clearing an empty slot is idempotent");
    let e = steering
        .clear_socket(datapath::steer::XSKS_MAX)
        .expect_err("slot out of range");
    assert!(
        matches!(
            e,
            SteerError::SlotOutOfRange {
                op: "clear_socket",
                ..
            }
        ),
        "{e}"
    );
    // Only AF_XDP sockets go into an XSKMAP.
    let udp = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("udp socket");
    let e = steering
        .set_socket(FIRST_FLOW_SLOT, std::os::fd::AsFd::as_fd(&udp))
        .expect_err("a UDP socket is not an AF_XDP socket");
    assert!(
        matches!(
            e,
            SteerError::Map {
                map: "xsks",
                op: "set_socket",
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        steering.remove_listen(lab.pair.a.addr, 9, Proto::Udp),
        Err(SteerError::Map { map: "listen", .. })
    ));
    steering
        .insert_flow(&key, FIRST_FLOW_SLOT, 0)
        .expect("insert");
    steering
        .insert_flow(&key, FIRST_FLOW_SLOT + 7, 0)
        .expect("replace");
    steering.remove_flow(&key).expect("remove");
}
