//! `zerosplit exec` where a program's threads meet, and where the stack
//! meets the program: C programs the tests compile with `cc`, run under
//! exec in one namespace against Linux TCP in the other.
//!
//! - A blocked call holds its socket, not the descriptor number: a thread
//!   closes the descriptor another one is blocked on (in `recv`, in
//!   `send`) and a third accepts a new connection onto the same number;
//!   the blocked call finishes on its own connection, as on Linux (the
//!   same program run without exec is the reference), and never touches
//!   the new one.
//! - The stack's own sockets (the metrics endpoint) are never claimed:
//!   with `--metrics` the program and the endpoint both serve.
//! - Urgent data (`send(MSG_OOB)` from Linux) is read as on Linux: not
//!   in-band, once with `recv(MSG_OOB)`, in-band with `SO_OOBINLINE`.
//!
//! Each proves the program's connections were zerosplit's: the kernel of
//! the exec namespace counts no TCP opens of its own.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use zerosplit_tests::http_get;

/// Runs `program PORT` (under exec when `iface` is given, else on Linux)
/// in `a` against `peer ADDRESS PORT` in `b`; both outputs, each checked
/// to have passed.
fn program_and_peer(
    a: &zerosplit_lab::NetNs,
    b: &zerosplit_lab::NetNs,
    iface: Option<&str>,
    dir: &TempDir,
    (program, peer): (&str, &str),
    addr: &str,
    port: u16,
) -> (String, String) {
    let port = port.to_string();
    let log = dir.join(&format!("program-{port}.log"));
    let mut prog = match iface {
        Some(iface) => exec_in(a, iface, &log, &[program, &port]),
        None => {
            let out = std::fs::File::create(&log).expect("log");
            Running(
                a.command("timeout", ["60", program, &port])
                    .stdin(Stdio::null())
                    .stdout(out.try_clone().expect("log"))
                    .stderr(out)
                    .spawn()
                    .expect("spawn the program"),
            )
        }
    };
    wait_log(&log, "listening");
    let peer_out = run_in(b, 60, &[peer, addr, &port]);
    let status = wait_exit(&mut prog.0, Duration::from_secs(30));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let peer_text = String::from_utf8_lossy(&peer_out.stdout).into_owned();
    let how = if iface.is_some() {
        "under exec"
    } else {
        "on Linux"
    };
    assert!(
        status == Some(0) && peer_out.status.success(),
        "{how}: program {status:?}, peer {}\nprogram:\n{text}\npeer:\n{peer_text}{}",
        peer_out.status,
        String::from_utf8_lossy(&peer_out.stderr)
    );
    (text, peer_text)
}

/// Runs the C `program` (compiled from `tests/data/<program>.c`) against
/// its `peer` on Linux TCP first, the reference, then under
/// `zerosplit exec` on ports `ports.0` and `ports.1`: the program checks
/// what it gets, and the exec run must leave the namespace's kernel TCP
/// counters as they were.
fn on_linux_then_under_exec(prefix: &str, program: &str, peer: &str, ports: (u16, u16)) {
    let _serial = serial();
    let dir = tempdir();
    let program = compile_c(&dir, program);
    let peer = compile_c(&dir, peer);
    let (a, b, pair) = lab(prefix);
    let addr = pair.a.addr.to_string();
    program_and_peer(&a, &b, None, &dir, (&program, &peer), &addr, ports.0);
    std::thread::sleep(Duration::from_millis(500));
    let before = kernel_tcp(&a);
    let (text, _) = program_and_peer(
        &a,
        &b,
        Some(&pair.a.ifname),
        &dir,
        (&program, &peer),
        &addr,
        ports.1,
    );
    assert!(text.contains("zerosplit exec: TCP over"), "{text}");
    assert_eq!(
        before,
        kernel_tcp(&a),
        "kernel TCP (active opens, passive opens, segments in) of the exec namespace"
    );
}

#[test]
fn a_blocked_call_keeps_its_socket_when_its_number_is_closed_and_reused() {
    on_linux_then_under_exec("zxb", "blocked_close", "blocked_peer", (9201, 9202));
}

/// Connects to `to` (from the calling thread's namespace), writes `msg`
/// and reads back as many bytes, with `timeout` on each step; the
/// connection stays open.
fn round_trip(
    to: SocketAddr,
    msg: &[u8],
    timeout: Duration,
) -> std::io::Result<(TcpStream, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&to, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(msg)?;
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back)?;
    Ok((s, back))
}

#[test]
fn exec_with_metrics_serves_the_program_and_the_endpoint() {
    let _serial = serial();
    let dir = tempdir();
    let echo = compile_c(&dir, "echo_server");
    let (a, b, pair) = lab("zxm");
    let server: SocketAddr = (pair.a.addr, 9300).into();
    for (metrics, port) in [("0.0.0.0:9464", 9464), ("127.0.0.1:9465", 9465)] {
        let log = dir.join(&format!("echo-{port}.log"));
        let before = kernel_opens(&a);
        let mut prog = exec_with(
            &a,
            &pair.a.ifname,
            &["--metrics", metrics],
            &log,
            &[&echo, "9300", "1"],
        );
        // The stack starts at the program's listen, the endpoint with it.
        let text = wait_log(&log, "listening");
        assert!(
            text.contains("zerosplit exec: TCP over") && text.contains("metrics on http://"),
            "--metrics {metrics}:\n{text}"
        );
        let (conn, back) = b
            .run("echo round trip", || {
                round_trip(server, b"over zerosplit", Duration::from_secs(5))
            })
            .expect("the program answers");
        assert_eq!(back, b"over zerosplit", "--metrics {metrics}");
        // Scraped from inside the namespace while the program runs.
        let scrape: SocketAddr = ([127, 0, 0, 1], port).into();
        let page = a
            .run("scrape", || http_get(scrape, "/metrics"))
            .expect("the endpoint answers");
        assert!(
            page.starts_with("HTTP/1.")
                && page.contains(" 200 ")
                && page.contains("zerosplit_packets"),
            "--metrics {metrics}: /metrics answered:\n{page}"
        );
        // The program ends with its connection.
        drop(conn);
        assert_eq!(
            wait_exit(&mut prog.0, Duration::from_secs(20)),
            Some(0),
            "--metrics {metrics}: the program's exit\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // The scrape is the kernel's (one open each way over loopback);
        // the program's connection was zerosplit's.
        let after = kernel_opens(&a);
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (1, 1),
            "--metrics {metrics}: kernel TCP (active, passive) opens in the exec namespace"
        );
    }
}

#[test]
fn urgent_data_is_withheld_from_in_band_reads_as_on_linux() {
    on_linux_then_under_exec("zxu", "urgent_recv", "urgent_peer", (9401, 9402));
}
