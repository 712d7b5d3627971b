//! Every TCP socket a program opens under `zerosplit exec`, and no silent
//! fallback to the kernel:
//!
//! - IPv6-family sockets serve IPv4 peers over zerosplit: `iperf3 -s`
//!   without `-4` (a dual-stack socket on `::`), a Python dual-stack
//!   server (`socket.create_server(..., family=AF_INET6,
//!   dualstack_ipv6=True)`), and an `AF_INET6` client of a v4-mapped
//!   address, each named as Linux names them (`::ffff:a.b.c.d`); the exec
//!   namespace's kernel counts no TCP opens;
//! - with IPv6 on the interface, IPv6 sockets run over zerosplit too:
//!   `iperf3 -s` (no `-4`) with Linux clients over IPv6 and IPv4, a
//!   dual-stack server taking both, a client of an IPv6 peer, nginx with
//!   `listen 8080; listen [::]:8080` over the daemon; an IPv4 listener's
//!   IPv6 peer is refused at its SYN, as by Linux;
//! - what zerosplit does not carry (IPv6 with `interface.ipv6 = false`,
//!   `MSG_FASTOPEN`) goes to the kernel said once per reason on stderr and
//!   counted at exit (the kernel's counters show it did), or under
//!   `--strict` fails with `EAFNOSUPPORT` / `EOPNOTSUPP` and the kernel
//!   opens nothing.
//!
//! Addresses: 198.18.0.0/15 and, for IPv6, the benchmarking prefix
//! 2001:2::/48 (RFC 5180).

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use zerosplit_lab::{NetNs, IPV6_A, IPV6_B};

/// Linux's numbers, as Python prints them.
const AF_INET6: i32 = 10;
const EAFNOSUPPORT: i32 = 97;
const EOPNOTSUPP: i32 = 95;

/// Starts `families.py ARGS` in `ns` (the Linux side) and waits for its
/// "ready" line.
fn linux_side(ns: &NetNs, args: &[&str]) -> Running {
    let script = data("families.py");
    let mut all = vec!["60", "python3", script.as_str()];
    all.extend_from_slice(args);
    let mut p = Running(
        ns.command("timeout", all)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3"),
    );
    let mut line = String::new();
    BufReader::new(p.0.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("ready line");
    assert_eq!(line.trim(), "ready", "the Linux side did not start");
    p
}

/// A Python dual-stack server on port 7001 under `exec`, and a Linux
/// client of each address of `to` in turn, each echoed; what the server
/// said.
fn dual_stack_server(a: &NetNs, b: &NetNs, iface: &str, dir: &TempDir, to: &[&str]) -> String {
    let script = data("families.py");
    let log = dir.join("dual.log");
    let n = to.len().to_string();
    let mut srv = exec_in(a, iface, &log, &["python3", &script, "dual", "7001", &n]);
    wait_log(&log, "listening on");
    for to in to {
        let out = ok_stdout(
            &run_in(b, 30, &["python3", &script, "client", to, "7001"]),
            "Linux client",
        );
        assert!(
            out.contains("client got 'ping from the peer, thirty byt'"),
            "{out}"
        );
    }
    assert_eq!(wait_exit(&mut srv.0, Duration::from_secs(20)), Some(0));
    std::fs::read_to_string(&log).unwrap_or_default()
}

#[test]
fn ipv6_family_sockets_serve_ipv4_peers_over_zerosplit() {
    let _serial = serial();
    require_program("iperf3");
    require_program("python3");
    let (a, b, pair) = lab("zxf");
    let (addr_a, addr_b) = (pair.a.addr.to_string(), pair.b.addr.to_string());
    let dir = tempdir();

    // iperf3 as its users start it: no -4, so a dual-stack socket on `::`.
    let log = dir.join("iperf3.log");
    let mut srv = exec_in(&a, &pair.a.ifname, &log, &["iperf3", "-s", "-1", "-J"]);
    wait_log(&log, "zerosplit exec: TCP over");
    std::thread::sleep(Duration::from_millis(300));
    let client = ok_stdout(
        &run_in(&b, 60, &["iperf3", "-c", &addr_a, "-n", "128M", "-J"]),
        "iperf3 client",
    );
    let (sent, received) = iperf_bytes(&client, "iperf3 -s without -4");
    assert!(
        sent >= 128 << 20 && received + in_flight(1) >= sent && received <= sent,
        "sent {sent}, received {received}"
    );
    assert_eq!(
        wait_exit(&mut srv.0, Duration::from_secs(20)),
        Some(0),
        "iperf3 -s exit"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !text.contains("left to the kernel"),
        "nothing was the kernel's:\n{text}"
    );

    // A Python dual-stack server, a Linux IPv4 client.
    let text = dual_stack_server(&a, &b, &pair.a.ifname, &dir, &[&addr_a]);
    let v6 = AF_INET6;
    for line in [
        "listening on :: port 7001".to_string(),
        format!("accept returned ::ffff:{addr_b}"),
        format!("accepted local=::ffff:{addr_a} peer=::ffff:{addr_b} domain={v6}"),
        "done".to_string(),
    ] {
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }

    // An AF_INET6 client of a v4-mapped address, a Linux IPv4 server.
    let script = data("families.py");
    let _echo = linux_side(&b, &["echo", &addr_b, "7002"]);
    let log = dir.join("mapped.log");
    let mut cli = exec_in(
        &a,
        &pair.a.ifname,
        &log,
        &["python3", &script, "mapped", &addr_b, "7002"],
    );
    assert_eq!(wait_exit(&mut cli.0, Duration::from_secs(30)), Some(0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    for line in [
        format!("connected local=::ffff:{addr_a} peer=::ffff:{addr_b} domain={v6}"),
        "echoed ping over a v4-mapped address".to_string(),
    ] {
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }

    assert_no_kernel_opens(&a);
}

#[test]
fn what_zerosplit_leaves_to_the_kernel_is_said_and_strict_refuses_it() {
    let _serial = serial();
    require_program("python3");
    let (a, b, pair) = lab6("zxk");
    let (six_a, six_b) = (IPV6_A.to_string(), IPV6_B.to_string());
    let (six_a, six_b) = (six_a.as_str(), six_b.as_str());
    let addr_b = pair.b.addr.to_string();
    let script = data("families.py");
    let dir = tempdir();
    // The operator keeps IPv6 the kernel's.
    let config = dir.join("no-ipv6.toml");
    std::fs::write(&config, "[interface]\nipv6 = false\n").expect("config");
    let config = ["--config", config.to_str().expect("utf-8")];

    // Left to the kernel: it works, each reason is said once, the
    // connections are counted, and the kernel's counters move.
    let _peer = linux_side(&b, &["peer", six_b, &addr_b, "7000"]);
    let log = dir.join("calls.log");
    let calls = ["python3", &script, "calls", six_a, six_b, &addr_b, "7000"];
    let mut prog = exec_with(&a, &pair.a.ifname, &config, &log, &calls);
    wait_log(&log, "waiting");
    let out = ok_stdout(
        &run_in(&b, 30, &["python3", &script, "client", six_a, "7000"]),
        "IPv6 client",
    );
    assert!(out.contains("client got"), "{out}");
    assert_eq!(wait_exit(&mut prog.0, Duration::from_secs(30)), Some(0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    for line in [
        "listen6 ok",
        "dual ok",
        "connect6 ok",
        "fastopen ok",
        "accept6 ok",
        "left to the kernel: listen on [2001:2::1]:7000: zerosplit's stack here serves no IPv6",
        "left to the kernel: listen on [::]:7001: the interface has IPv6 addresses",
        "left to the kernel: sendto with MSG_FASTOPEN to ",
        "at exit: connections: 0 over zerosplit, 3 over the kernel",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    assert!(
        !text.contains("connect to [2001:2::2]"),
        "one note per reason (the IPv6 connect's is the IPv6 listener's):\n{text}"
    );
    let kernel = kernel_opens(&a);
    assert!(
        kernel.0 >= 2 && kernel.1 >= 1,
        "the kernel carried them: {kernel:?} active, passive opens"
    );

    // --strict: each call fails with the errno, the kernel opens nothing.
    let log = dir.join("strict.log");
    let calls = ["python3", &script, "calls", six_a, six_b, &addr_b, "7100"];
    let strict = [config[0], config[1], "--strict"];
    let mut prog = exec_with(&a, &pair.a.ifname, &strict, &log, &calls);
    assert_eq!(wait_exit(&mut prog.0, Duration::from_secs(30)), Some(0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let (af, op) = (EAFNOSUPPORT, EOPNOTSUPP);
    for line in [
        format!("listen6 errno {af}"),
        format!("dual errno {af}"),
        format!("connect6 errno {af}"),
        format!("fastopen errno {op}"),
        "refused (--strict): listen on [2001:2::1]:7100".to_string(),
        "refused (--strict): sendto with MSG_FASTOPEN".to_string(),
    ] {
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }
    assert!(!text.contains("waiting"), "{text}");
    assert_eq!(kernel_opens(&a), kernel, "no kernel opens under --strict");
}

/// A lab whose veth ends have IPv6 addresses too ([`IPV6_A`] on A, the
/// zerosplit side; [`IPV6_B`] on B, Linux).
fn lab6(prefix: &str) -> (NetNs, NetNs, zerosplit_lab::VethPair) {
    let (a, b, pair) = lab(prefix);
    pair.add_ipv6(&a, &b).expect("IPv6 addresses");
    (a, b, pair)
}

/// `iperf3 -s -1` under `exec` (`opts`), a Linux client of `to`: the
/// bytes all arrived and the server exited cleanly.
fn iperf_through(
    a: &NetNs,
    b: &NetNs,
    iface: &str,
    opts: &[&str],
    log: &std::path::Path,
    to: &str,
) {
    let mut srv = exec_with(a, iface, opts, log, &["iperf3", "-s", "-1", "-J"]);
    wait_log(log, "zerosplit exec: TCP over");
    std::thread::sleep(Duration::from_millis(300));
    let client = ok_stdout(
        &run_in(b, 60, &["iperf3", "-c", to, "-n", "64M", "-J"]),
        "iperf3 client",
    );
    let (sent, received) = iperf_bytes(&client, &format!("iperf3 -s, a client of {to}"));
    assert!(
        sent >= 64 << 20 && received + in_flight(1) >= sent && received <= sent,
        "to {to}: sent {sent}, received {received}"
    );
    assert_eq!(
        wait_exit(&mut srv.0, Duration::from_secs(20)),
        Some(0),
        "iperf3 -s exit"
    );
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(!text.contains("left to the kernel"), "{text}");
}

#[test]
fn ipv6_sockets_run_over_zerosplit_on_an_interface_with_ipv6() {
    let _serial = serial();
    require_program("iperf3");
    require_program("python3");
    let (a, b, pair) = lab6("zx6");
    let (six_a, six_b) = (IPV6_A.to_string(), IPV6_B.to_string());
    let (six_a, six_b) = (six_a.as_str(), six_b.as_str());
    let iface = &pair.a.ifname;
    let (addr_a, addr_b) = (pair.a.addr.to_string(), pair.b.addr.to_string());
    let script = data("families.py");
    let dir = tempdir();

    // iperf3 as its users start it (no -4): Linux clients over IPv6, then
    // over IPv4, of the one dual-stack socket.
    iperf_through(&a, &b, iface, &[], &dir.join("iperf6.log"), six_a);
    iperf_through(&a, &b, iface, &[], &dir.join("iperf4.log"), &addr_a);

    // A Python dual-stack server: an IPv6 peer, then an IPv4 one, each
    // named as Linux names it.
    let text = dual_stack_server(&a, &b, iface, &dir, &[six_a, &addr_a]);
    let v6 = AF_INET6;
    for line in [
        "listening on :: port 7001".to_string(),
        format!("accept returned {six_b}"),
        format!("accepted local={six_a} peer={six_b} domain={v6}"),
        format!("accepted local=::ffff:{addr_a} peer=::ffff:{addr_b} domain={v6}"),
        "done".to_string(),
    ] {
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }

    // A client of an IPv6 Linux server.
    let _echo = linux_side(&b, &["echo", six_b, "7002"]);
    let log = dir.join("client6.log");
    let mut cli = exec_in(
        &a,
        iface,
        &log,
        &["python3", &script, "client", six_b, "7002"],
    );
    assert_eq!(wait_exit(&mut cli.0, Duration::from_secs(30)), Some(0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("client got 'ping from the peer, thirty byt'"),
        "{text}"
    );

    // An IPv4 listener on 0.0.0.0: its IPv6 peer is refused at the SYN
    // (the stack does not take the port's IPv6 address), as by Linux.
    let log = dir.join("v4only.log");
    let mut srv = exec_in(
        &a,
        iface,
        &log,
        &["python3", &script, "echo", "0.0.0.0", "7200"],
    );
    wait_log(&log, "zerosplit exec: TCP over");
    let six = run_in(&b, 20, &["python3", &script, "client", six_a, "7200"]);
    assert!(
        !six.status.success()
            && String::from_utf8_lossy(&six.stderr).contains("ConnectionRefusedError"),
        "an IPv6 peer of an IPv4 listener: {}",
        String::from_utf8_lossy(&six.stderr)
    );
    let four = ok_stdout(
        &run_in(&b, 20, &["python3", &script, "client", &addr_a, "7200"]),
        "IPv4 client",
    );
    assert!(four.contains("client got 'ping from the peer"), "{four}");
    assert_eq!(wait_exit(&mut srv.0, Duration::from_secs(20)), Some(0));

    assert_no_kernel_opens(&a);
}

/// nginx's own way of serving both families, `listen 8080; listen
/// [::]:8080` (the second IPv6-only, nginx's default): two sockets on
/// one port of the daemon, each taking its family's peers; and `iperf3
/// -s` over the daemon with an IPv6 client.
#[test]
fn nginx_on_both_families_and_iperf3_over_ipv6_through_the_daemon() {
    let _serial = serial();
    for p in ["nginx", "ab", "curl", "iperf3"] {
        require_program(p);
    }
    let (a, b, pair) = lab6("zxn");
    let six_a = IPV6_A.to_string();
    let iface = &pair.a.ifname;
    let dir = tempdir();
    let _daemon = start_daemon(
        &a,
        iface,
        &dir,
        "[flows]\nmax_flows = 8192\n\n[daemon]\nmax_attachments = 6\nmemory_per_attachment = \"256MiB\"\n",
    );
    wait_log(&dir.join("daemon.log"), &six_a);
    let socket = dir.join("daemon.sock");
    let attach = ["--daemon", socket.to_str().expect("utf-8")];
    iperf_through(&a, &b, iface, &attach, &dir.join("iperf6.log"), &six_a);

    let opts = NginxOpts {
        listen: "8080; listen [::]:8080".into(),
        ..NginxOpts::default()
    };
    let log = dir.join("nginx-exec.log");
    let (_exec, _nginx) = start_nginx_with(&a, iface, &dir, &log, &opts);
    let host = pair.a.addr.to_string();
    for url in [
        format!("http://{host}:8080/index.html"),
        format!("http://[{six_a}]:8080/index.html"),
    ] {
        if let Err(ab) = ab_all_ok(&b, 20, 2_000, &url) {
            panic!("{url}: 2,000 requests, 20 at once, every one a 200:\n{ab}");
        }
    }
    let errors = std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default();
    assert!(
        !errors.contains("[emerg]") && !errors.contains("[alert]"),
        "nginx logged no failure:\n{errors}"
    );
    assert_no_kernel_opens(&a);
}
