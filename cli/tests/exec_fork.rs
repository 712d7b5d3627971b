//! Processes sharing sockets under `zerosplit exec` over the daemon, with
//! stock programs in their default process models: nginx (it daemonizes;
//! a master that listens, two workers that accept on the inherited socket
//! with epoll; also with `listen … reuseport` and with `accept_mutex
//! on`), `socat TCP-LISTEN:P,fork` (a child per connection, which execs
//! `cat`), an inetd-style server whose sockets cross `execve`, two
//! programs sharing a port with `SO_REUSEPORT`, and one program holding
//! two such sockets (standalone and attached). The namespace kernel's TCP
//! counters prove that none of their connections went through the
//! kernel.

mod common;

use std::io::Write;
use std::path::Path;
use std::thread;
use std::time::Duration;

use common::*;
use zerosplit_lab::{NetNs, VethPair};

/// Asserts that `n` connections spread over the `shares.len()` (≥ 2)
/// sockets of a reuseport group, and prints how: a fair hash gives each
/// about `n / len`; half of that is far outside chance.
fn assert_spread(what: &str, shares: &[usize], n: usize) {
    eprintln!("{what}: {n} connections spread {shares:?}");
    let fair = n / shares.len().max(1);
    assert!(
        shares.len() >= 2 && shares.iter().all(|&s| s >= fair / 2),
        "{what}: spread over every socket: {shares:?}"
    );
}

/// The exec and peer namespaces on a veth pair named after `prefix`, a
/// directory, and a daemon serving the pair with `max_attachments` of 32
/// MiB each (dropped first: it stops before its namespace goes).
fn daemon_lab(prefix: &str, max_attachments: u32) -> (NetNs, NetNs, VethPair, TempDir, Running) {
    let (a, b, pair) = lab(prefix);
    let dir = tempdir();
    let config = format!(
        "[daemon]\nmax_attachments = {max_attachments}\nmemory_per_attachment = \"32MiB\"\n"
    );
    let daemon = start_daemon(&a, &pair.a.ifname, &dir, &config);
    (a, b, pair, dir, daemon)
}

/// A Python server under `zerosplit exec` over a daemon in a lab of its
/// own, listening (it printed `listening`), and the exec namespace's
/// kernel TCP counters from before it started. Fields drop in order: the
/// server and the daemon stop before their namespace goes.
struct PyLab {
    _server: Running,
    _daemon: Running,
    dir: TempDir,
    pair: VethPair,
    b: NetNs,
    a: NetNs,
    log: std::path::PathBuf,
    before: KernelTcp,
}

impl PyLab {
    /// Runs `script` with `args` in a lab named after `prefix`.
    fn start(prefix: &str, script: &str, args: &[&str]) -> PyLab {
        require_program("python3");
        let (a, b, pair, dir, daemon) = daemon_lab(prefix, 16);
        let server = dir.join("server.py");
        std::fs::write(&server, script).expect("script");
        let before = kernel_tcp(&a);
        let log = dir.join("server.log");
        let mut program = vec!["python3", server.to_str().expect("utf-8")];
        program.extend_from_slice(args);
        let server = attached(&a, &pair.a.ifname, &dir, &log, &program);
        wait_log(&log, "listening");
        PyLab {
            _server: server,
            _daemon: daemon,
            dir,
            pair,
            b,
            a,
            log,
            before,
        }
    }

    /// Runs Python `code` in the peer namespace with `args` (at most 60
    /// s).
    fn client(&self, code: &str, args: &[&str]) -> std::process::Output {
        let path = self.dir.join("client.py");
        std::fs::write(&path, code).expect("client script");
        let mut all = vec!["60", "python3", path.to_str().expect("utf-8")];
        all.extend_from_slice(args);
        self.b.command("timeout", all).output().expect("client")
    }

    /// The server's log once it says `done`, asserted free of anything
    /// unsupported or reset, with the kernel's TCP counters unmoved.
    fn finish(&self, done: &str) -> String {
        let server_log = wait_log(&self.log, done);
        for bad in ["unsupported", "reset", "could not"] {
            assert!(!server_log.contains(bad), "{bad}:\n{server_log}");
        }
        assert_eq!(
            kernel_tcp(&self.a),
            self.before,
            "the exec namespace's kernel TCP saw none of it"
        );
        server_log
    }
}

/// A file of `len` bytes no two 8-byte words of which repeat.
fn pattern_file(path: &Path, len: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..len / 8 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        f.write_all(&x.to_le_bytes()).expect("write");
    }
}

#[test]
fn nginx_master_and_workers_serve_every_request_over_the_daemon() {
    let _serial = serial();
    for p in ["nginx", "ab", "curl"] {
        require_program(p);
    }
    let (a, b, pair) = lab("zxf");
    let dir = tempdir();
    let iface = &pair.a.ifname;
    // The original process, the master it forks, two workers, and the
    // probe `exec` attaches first; 256 MiB each: a worker may hold all
    // of ab's 50 connections (2 MiB of rings each) and the download.
    let _daemon = start_daemon(
        &a,
        iface,
        &dir,
        // A connection lingers a second in TIME-WAIT: ab's churn
        // (~1000 a second) needs a flow table larger than the default
        // 1024 entries, or SYNs are refused, as a web server's operator
        // sizes it.
        "[flows]\nmax_flows = 8192\n\n[daemon]\nmax_attachments = 6\nmemory_per_attachment = \"256MiB\"\n",
    );
    let before = kernel_tcp(&a);
    let log = dir.join("exec.log");
    let (_exec, _nginx) = start_nginx(&a, iface, &dir, &log);
    let root = dir.join("www");
    pattern_file(&root.join("big.bin"), 256 << 20);
    let err_log = dir.join("nginx-error.log");
    let host = pair.a.addr.to_string();
    let url = format!("http://{host}:8080/index.html");
    if let Err(ab) = ab_all_ok(&b, 50, 10_000, &url) {
        panic!("10,000 requests, 50 at once, every one a 200:\n{ab}");
    }

    let got = dir.join("got.bin");
    let url = format!("http://{host}:8080/big.bin");
    let out = run_in(
        &b,
        60,
        &[
            "curl",
            "-sS",
            "-o",
            got.to_str().expect("utf-8"),
            "-w",
            "%{http_code} %{size_download}",
            &url,
        ],
    );
    let status = ok_stdout(&out, "curl");
    assert_eq!(status.trim(), format!("200 {}", 256 << 20));
    let same = std::process::Command::new("cmp")
        .arg(root.join("big.bin"))
        .arg(&got)
        .status()
        .expect("cmp");
    assert!(same.success(), "the 256 MiB download is byte-exact");

    // Both workers took connections from the one accept queue.
    let errors = std::fs::read_to_string(&err_log).unwrap_or_default();
    assert!(
        !errors.contains("accept4() failed") && !errors.contains("[alert]"),
        "nginx logged no accept failure:\n{errors}"
    );
    // The workers' stderr is nginx's error log once it daemonized.
    let exec_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !errors.contains("unsupported") && !exec_log.contains("unsupported"),
        "no call the shim does not support:\n{exec_log}\n{errors}"
    );
    assert_eq!(
        kernel_tcp(&a),
        before,
        "the exec namespace's kernel TCP saw none of it"
    );
}

#[test]
fn socat_forks_a_child_per_connection_and_each_serves_its_own() {
    let _serial = serial();
    require_program("socat");
    // socat, a child per connection and its `cat` (which execs: it maps
    // nothing of the daemon's then) for 20 at once.
    let (a, b, pair, dir, _daemon) = daemon_lab("zxs", 24);
    let iface = &pair.a.ifname;
    let before = kernel_tcp(&a);
    let log = dir.join("socat.log");
    let _socat = attached(
        &a,
        iface,
        &dir,
        &log,
        &["socat", "TCP-LISTEN:9000,fork,reuseaddr", "EXEC:cat"],
    );
    wait_log(&log, "attached to the daemon at");
    thread::sleep(Duration::from_millis(300));

    let host = pair.a.addr.to_string();
    let target = format!("TCP:{host}:9000");
    let results: Vec<Result<(), String>> = thread::scope(|s| {
        let clients: Vec<_> = (0..20)
            .map(|i| {
                let (b, dir, target) = (&b, &dir, &target);
                s.spawn(move || {
                    let input = dir.join(&format!("in{i}"));
                    let output = dir.join(&format!("out{i}"));
                    let data: Vec<u8> = (0..200_000u32)
                        .map(|k| (k.wrapping_mul(31).wrapping_add(i * 7)) as u8)
                        .collect();
                    std::fs::write(&input, &data).expect("input");
                    let out = b
                        .command("timeout", ["30", "socat", "-t", "5", "-", target.as_str()])
                        .stdin(std::fs::File::open(&input).expect("input"))
                        .stdout(std::fs::File::create(&output).expect("output"))
                        .output()
                        .expect("socat client");
                    let back = std::fs::read(&output).unwrap_or_default();
                    if !out.status.success() {
                        return Err(format!(
                            "client {i}: {}",
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                    if back != data {
                        return Err(format!(
                            "client {i}: {} bytes back of {}",
                            back.len(),
                            data.len()
                        ));
                    }
                    Ok(())
                })
            })
            .collect();
        clients
            .into_iter()
            .map(|c| c.join().expect("client"))
            .collect()
    });
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let server_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        failed.is_empty(),
        "every connection echoed byte-exact: {failed:?}\n{server_log}"
    );
    assert_eq!(
        kernel_tcp(&a),
        before,
        "the exec namespace's kernel TCP saw none of it"
    );
}

/// An inetd-style server in Python: the program listens and execs
/// another with the listener (inheritable: no `FD_CLOEXEC`), which
/// accepts, forks a child per connection that makes the connection its
/// standard input and output and execs an echo program on it, and closes
/// its own copy. The listener and every connection cross both `execve`s
/// and the fork; the namespace kernel's TCP counters prove they stayed
/// ours.
const INETD_PY: &str = r#"
import os, socket, sys
port, n, stage = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
me = [sys.executable, __file__]
if stage == "listen":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    s.set_inheritable(True)
    os.execv(sys.executable, me + [str(port), str(n), "serve", str(s.fileno())])
elif stage == "serve":
    s = socket.socket(fileno=int(sys.argv[4]))
    print("serving", flush=True)
    for _ in range(n):
        c, _ = s.accept()
        if os.fork() == 0:
            s.close()
            os.dup2(c.fileno(), 0)
            os.dup2(c.fileno(), 1)
            os.execv(sys.executable, me + ["0", "0", "echo"])
        c.close()
    for _ in range(n):
        os.wait()
    print("served", n, flush=True)
else:
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        while data:
            data = data[os.write(1, data):]
"#;

#[test]
fn an_inetd_style_server_keeps_its_sockets_across_execve() {
    let _serial = serial();
    for p in ["socat", "python3"] {
        require_program(p);
    }
    let (a, b, pair, dir, _daemon) = daemon_lab("zxe", 16);
    let iface = &pair.a.ifname;
    let script = dir.join("inetd.py");
    std::fs::write(&script, INETD_PY).expect("script");
    let before = kernel_tcp(&a);
    let log = dir.join("inetd.log");
    const N: usize = 6;
    let n = N.to_string();
    let _server = attached(
        &a,
        iface,
        &dir,
        &log,
        &[
            "python3",
            script.to_str().expect("utf-8"),
            "9001",
            &n,
            "listen",
        ],
    );
    wait_log(&log, "serving");

    let target = format!("TCP:{}:9001", pair.a.addr);
    for i in 0..N {
        let input = dir.join(&format!("in{i}"));
        let output = dir.join(&format!("out{i}"));
        let data: Vec<u8> = (0..300_000u32)
            .map(|k| (k.wrapping_mul(13).wrapping_add(i as u32 * 5)) as u8)
            .collect();
        std::fs::write(&input, &data).expect("input");
        let out = b
            .command("timeout", ["30", "socat", "-t", "5", "-", target.as_str()])
            .stdin(std::fs::File::open(&input).expect("input"))
            .stdout(std::fs::File::create(&output).expect("output"))
            .output()
            .expect("socat client");
        let back = std::fs::read(&output).unwrap_or_default();
        let server_log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            out.status.success() && back == data,
            "connection {i}: {} bytes back of {} ({}){}\n{server_log}",
            back.len(),
            data.len(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let server_log = wait_log(&log, &format!("served {N}"));
    assert!(
        !server_log.contains("unsupported"),
        "every socket call was served:\n{server_log}"
    );
    assert_eq!(
        kernel_tcp(&a),
        before,
        "the exec namespace's kernel TCP saw none of it"
    );
}

/// A server that reads and writes two connections, then execs itself with
/// one of them (made inheritable) while its client is still sending: the
/// new program echoes the rest of the stream on the same connection. The
/// other (Python's default: `FD_CLOEXEC`) closes at the exec. The
/// options set before the exec read back after it; an exec that fails
/// first leaves both sockets working.
const CARRY_PY: &str = r#"
import os, socket, struct, sys
stage = sys.argv[1]
if stage == "first":
    port, first = int(sys.argv[2]), int(sys.argv[3])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(8)
    print("listening", flush=True)
    c1, _ = s.accept()
    c2, _ = s.accept()
    ping = b""
    while len(ping) < 5:
        ping += c2.recv(5 - len(ping))
    assert ping == b"ping\n", ping
    c2.sendall(b"pong\n")
    got = 0
    while got < first:
        d = c1.recv(min(65536, first - got))
        if not d:
            break
        c1.sendall(d)
        got += len(d)
    c1.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    c1.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c1.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 7, 0))
    c1.set_inheritable(True)
    print("first echoed", got, flush=True)
    try:
        os.execv("/nonexistent/zs", ["zs"])
    except OSError as e:
        c2.sendall(b"after\n")
        print("exec failed", e.errno, flush=True)
    os.execv(sys.executable, [sys.executable, __file__, "second", str(c1.fileno()), str(got)])
else:
    c = socket.socket(fileno=int(sys.argv[2]))
    keep = c.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
    nodelay = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    rcvtimeo = struct.unpack("ll", c.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16))[0]
    print("options", keep, nodelay, rcvtimeo, flush=True)
    total = int(sys.argv[3])
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
        total += len(d)
    c.close()
    print("second echoed", total, flush=True)
"#;

#[test]
fn a_connection_read_and_written_before_execve_goes_on_in_the_new_program() {
    let _serial = serial();
    const LEN: usize = 4 << 20;
    let lab = PyLab::start("zxc", CARRY_PY, &["first", "9003", "300000"]);
    let addr = lab.pair.a.addr.to_string();
    let out = lab.client(ECHO_CLIENT_PY, &[&addr, "9003", &LEN.to_string(), "ping"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains(&format!("echo exact {LEN} of {LEN}")),
        "the stream came back whole across the exec: {said}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&lab.log).unwrap_or_default()
    );
    assert!(
        said.contains("other b'pong\\nafter\\n'"),
        "the FD_CLOEXEC connection answered, then closed at the exec: {said}"
    );
    let server_log = lab.finish(&format!("second echoed {LEN}"));
    assert!(
        server_log.contains("first echoed 300000"),
        "the first program read and wrote before the exec:\n{server_log}"
    );
    assert!(
        server_log.contains("options 1 1 7"),
        "SO_KEEPALIVE, TCP_NODELAY and SO_RCVTIMEO set before the exec read back after it:\n{server_log}"
    );
    assert!(
        server_log.contains("exec failed 2"),
        "an exec that fails leaves every socket as it was:\n{server_log}"
    );
}

/// A server that listens with `SO_REUSEPORT`, accepts `n` connections and
/// answers each with its name (one line), then prints what it served.
const REUSEPORT_PY: &str = r#"
import socket, sys
name, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("0.0.0.0", port))
s.listen(64)
print("listening", flush=True)
s.settimeout(20)
served = 0
try:
    while served < n:
        c, _ = s.accept()
        c.sendall(name.encode() + b"\n")
        c.close()
        served += 1
except socket.timeout:
    pass
print("served", served, flush=True)
"#;

/// Connects `n` times and prints each answer's first line.
const CLIENT_PY: &str = r#"
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    c = socket.create_connection((host, port), timeout=10)
    print(c.makefile().readline().strip(), flush=True)
    c.close()
"#;

/// Two programs, each under its own `exec` on the daemon, listen on one
/// port with `SO_REUSEPORT`: the daemon spreads the connections over
/// both (each gets a share, every connection exactly one), as Linux
/// does; a third program without it is refused the port (`EADDRINUSE`).
#[test]
fn reuseport_listeners_of_two_programs_share_the_connections() {
    let _serial = serial();
    require_program("python3");
    let (a, b, pair) = lab("zxr");
    let dir = tempdir();
    let iface = &pair.a.ifname;
    let _daemon = start_daemon(&a, iface, &dir, "[daemon]\nmax_attachments = 8\n");
    let server = dir.join("reuseport.py");
    std::fs::write(&server, REUSEPORT_PY).expect("script");
    let client = dir.join("client.py");
    std::fs::write(&client, CLIENT_PY).expect("script");
    let before = kernel_tcp(&a);
    const N: usize = 120;
    let logs = [dir.join("one.log"), dir.join("two.log")];
    let _servers: Vec<Running> = ["one", "two"]
        .iter()
        .zip(&logs)
        .map(|(name, log)| {
            let s = attached(
                &a,
                iface,
                &dir,
                log,
                &[
                    "python3",
                    server.to_str().expect("utf-8"),
                    name,
                    "9002",
                    &N.to_string(),
                ],
            );
            wait_log(log, "listening");
            s
        })
        .collect();
    // Without SO_REUSEPORT the port is refused.
    let plain = b"import socket\ns = socket.socket()\ns.bind(('0.0.0.0', 9002))\ns.listen()\n";
    let plain_py = dir.join("plain.py");
    std::fs::write(&plain_py, plain).expect("script");
    let plain_log = dir.join("plain.log");
    let mut third = attached(
        &a,
        iface,
        &dir,
        &plain_log,
        &["python3", plain_py.to_str().expect("utf-8")],
    );
    let start = std::time::Instant::now();
    let status = loop {
        if let Ok(Some(s)) = third.0.try_wait() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(20) {
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    // Exited (and reaped): nothing for the guard to stop.
    std::mem::forget(third);
    let plain_text = std::fs::read_to_string(&plain_log).unwrap_or_default();
    assert!(
        status.is_some_and(|s| !s.success()) && plain_text.contains("Address already in use"),
        "{plain_text}"
    );

    let out = b
        .command(
            "timeout",
            [
                "60",
                "python3",
                client.to_str().expect("utf-8"),
                &pair.a.addr.to_string(),
                "9002",
                &N.to_string(),
            ],
        )
        .output()
        .expect("client");
    let answers = String::from_utf8_lossy(&out.stdout).to_string();
    let one = answers.lines().filter(|l| *l == "one").count();
    let two = answers.lines().filter(|l| *l == "two").count();
    let server_logs: Vec<String> = logs
        .iter()
        .map(|l| std::fs::read_to_string(l).unwrap_or_default())
        .collect();
    assert_eq!(
        one + two,
        N,
        "every connection answered once: {one} + {two}\n{}\n{server_logs:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_spread("two programs", &[one, two], N);
    assert_eq!(
        kernel_tcp(&a),
        before,
        "the exec namespace's kernel TCP saw none of it"
    );
}

/// nginx with `listen 8080 reuseport`: the master opens one socket per
/// worker on the port (a reuseport group inside one process); each worker
/// inherits both and accepts on its own (stock nginx keeps the other
/// open, unwatched). The daemon spreads connections over the two sockets
/// by the peer's address, as Linux does: each worker serves a share.
/// Then nginx with `accept_mutex on` (workers take turns adding the
/// shared listener to their epoll and removing it).
#[test]
fn nginx_reuseport_and_accept_mutex_serve_every_request() {
    let _serial = serial();
    for p in ["nginx", "ab", "curl"] {
        require_program(p);
    }
    let metrics = "127.0.0.1:9472";
    let config = format!(
        "[flows]\nmax_flows = 8192\n\n[daemon]\nmax_attachments = 6\nmemory_per_attachment = \"128MiB\"\n\n[metrics]\nlisten = \"{metrics}\"\n"
    );
    for reuseport in [true, false] {
        let (a, b, pair) = lab(if reuseport { "zxn" } else { "zxm" });
        let dir = tempdir();
        let iface = &pair.a.ifname;
        let _daemon = start_daemon(&a, iface, &dir, &config);
        let before = kernel_tcp(&a);
        let log = dir.join("exec.log");
        let access = dir.join("access.log");
        let opts = NginxOpts {
            listen: if reuseport { "8080 reuseport" } else { "8080" }.into(),
            access_log: format!("{} worker", access.display()),
            accept_mutex: !reuseport,
        };
        let what = if reuseport {
            "reuseport"
        } else {
            "accept_mutex on"
        };
        let (_exec, _nginx) = start_nginx_with(&a, iface, &dir, &log, &opts);
        const N: usize = 3000;
        let url = format!("http://{}:8080/index.html", pair.a.addr);
        if let Err(ab) = ab_all_ok(&b, 20, N as u32, &url) {
            panic!("{what}: {N} requests, 20 at once, every one a 200:\n{ab}");
        }
        assert_eq!(
            kernel_tcp(&a),
            before,
            "{what}: the exec namespace's kernel TCP saw none of it"
        );
        let errors = std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default();
        assert!(
            !errors.contains("accept4() failed")
                && !errors.contains("[alert]")
                && !errors.contains("[emerg]"),
            "{what}: nginx logged no failure:\n{errors}"
        );
        let exec_log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !errors.contains("unsupported") && !exec_log.contains("unsupported"),
            "{what}: no call the shim does not support:\n{exec_log}\n{errors}"
        );
        // Which worker served each request (nginx logs its pid).
        let mut served = std::collections::BTreeMap::<u32, usize>::new();
        for line in std::fs::read_to_string(&access)
            .expect("access log")
            .lines()
        {
            *served
                .entry(line.trim().parse().expect("a pid"))
                .or_default() += 1;
        }
        assert_eq!(served.values().sum::<usize>(), N, "{what}: {served:?}");
        eprintln!("{what}: {N} requests over the workers: {served:?}");
        if !reuseport {
            // The mutex decides who accepts: no share to expect.
            continue;
        }
        assert_spread(what, &served.values().copied().collect::<Vec<_>>(), N);
        // The daemon's view (read last: the request goes through the
        // namespace's kernel): two sockets on the port, held by the
        // master and by each worker.
        let out = run_in(&a, 10, &["curl", "-sS", &format!("http://{metrics}/stats")]);
        let stats: serde_json::Value =
            serde_json::from_str(ok_stdout(&out, "curl /stats").trim()).expect("/stats is JSON");
        let attachments = stats["daemon"]["attachments"]
            .as_array()
            .expect("the daemon's attachments");
        let listening = |pid: u32| -> Vec<u64> {
            let a = attachments
                .iter()
                .find(|a| a["pid"] == pid)
                .unwrap_or_else(|| panic!("pid {pid} is attached: {attachments:?}"));
            let ports = a["listening"].as_array().expect("listening");
            ports.iter().filter_map(serde_json::Value::as_u64).collect()
        };
        let master: u32 = std::fs::read_to_string(dir.join("nginx.pid"))
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid");
        for pid in served.keys().copied().chain([master]) {
            assert_eq!(listening(pid), vec![8080, 8080], "pid {pid}: both sockets");
        }
    }
}

/// One process, two `SO_REUSEPORT` sockets on one port, both polled:
/// prints which socket accepted each of `n` connections.
const GROUP_PY: &str = r#"
import select, socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
group = []
for _ in range(2):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    group.append(s)
plain = socket.socket()
try:
    plain.bind(("0.0.0.0", port))
    plain.listen()
    print("a socket without SO_REUSEPORT listened", flush=True)
except OSError as e:
    print("refused:", e.strerror, flush=True)
print("listening", flush=True)
served = [0, 0]
while sum(served) < n:
    ready, _, _ = select.select(group, [], [], 20)
    if not ready:
        break
    for s in ready:
        c, _ = s.accept()
        i = group.index(s)
        c.sendall(str(i).encode() + b"\n")
        c.close()
        served[i] += 1
print("served", served[0], served[1], flush=True)
"#;

/// A reuseport group inside one program, on a stack of its own
/// (`--standalone`) and over the daemon: connections spread over both
/// sockets by the peer's address, a third socket without the option is
/// refused (`EADDRINUSE`), and the kernel sees none of it.
#[test]
fn one_programs_reuseport_sockets_share_the_connections() {
    let _serial = serial();
    require_program("python3");
    for attach in [false, true] {
        let (a, b, pair) = lab(if attach { "zxa" } else { "zxs" });
        let dir = tempdir();
        let iface = &pair.a.ifname;
        let _daemon = attach.then(|| start_daemon(&a, iface, &dir, "[daemon]\n"));
        let server = dir.join("group.py");
        std::fs::write(&server, GROUP_PY).expect("script");
        let client = dir.join("client.py");
        std::fs::write(&client, CLIENT_PY).expect("script");
        let before = kernel_tcp(&a);
        const N: usize = 120;
        let log = dir.join("group.log");
        let program = ["python3", server.to_str().expect("utf-8"), "9003", "120"];
        let _server = if attach {
            attached(&a, iface, &dir, &log, &program)
        } else {
            exec_with(&a, iface, &["--standalone"], &log, &program)
        };
        let text = wait_log(&log, "listening");
        assert!(text.contains("refused: Address already in use"), "{text}");
        let out = run_in(
            &b,
            60,
            &[
                "python3",
                client.to_str().expect("utf-8"),
                &pair.a.addr.to_string(),
                "9003",
                &N.to_string(),
            ],
        );
        if !out.status.success() {
            thread::sleep(Duration::from_secs(1));
            eprintln!(
                "server: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        let answers = ok_stdout(&out, "client");
        let zero = answers.lines().filter(|l| *l == "0").count();
        let one = answers.lines().filter(|l| *l == "1").count();
        let mode = if attach { "attached" } else { "standalone" };
        assert_eq!(zero + one, N, "{mode}: every connection answered once");
        let server_log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !server_log.contains("unsupported"),
            "{mode}: no call the shim does not support:\n{server_log}"
        );
        assert_spread(mode, &[zero, one], N);
        assert_eq!(
            kernel_tcp(&a),
            before,
            "{mode}: the exec namespace's kernel TCP saw none of it"
        );
    }
}

/// A server that reads and echoes part of a connection, forks, echoes
/// some more in the parent, and exits without closing it (the exit
/// closes it); the child echoes the rest. Linux: the connection is the
/// child's once the parent's descriptor is gone.
const FORK_USED_PY: &str = r#"
import os, socket, sys
port, first, more = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen(8)
print("listening", flush=True)
c, _ = s.accept()
def echo(n):
    got = 0
    while n is None or got < n:
        d = c.recv(65536 if n is None else min(65536, n - got))
        if not d:
            break
        c.sendall(d)
        got += len(d)
    return got
got = echo(first)
print("parent echoed", got, flush=True)
pid = os.fork()
if pid == 0:
    s.close()
    total = echo(None)
    c.close()
    print("child echoed", total, flush=True)
    os._exit(0)
got += echo(more)
print("parent echoed after the fork", got, flush=True)
sys.exit(0)
"#;

/// The peer of [`FORK_USED_PY`] and the like: streams `n` bytes on one
/// connection while reading the echo, and prints whether it came back
/// whole; with a fourth argument, a second connection pings once and
/// prints what came back on it (for [`CARRY_PY`]).
const ECHO_CLIENT_PY: &str = r#"
import socket, sys, threading
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = bytes((k * 7 + k // 251) % 256 for k in range(n))
c = socket.create_connection((host, port), timeout=30)
if len(sys.argv) > 4:
    c2 = socket.create_connection((host, port), timeout=30)
    c2.sendall(b"ping\n")
back = bytearray()
def read():
    while True:
        d = c.recv(65536)
        if not d:
            return
        back.extend(d)
t = threading.Thread(target=read)
t.start()
for i in range(0, n, 4096):
    c.sendall(data[i:i + 4096])
c.shutdown(socket.SHUT_WR)
t.join(30)
print("echo", "exact" if bytes(back) == data else "differs", len(back), "of", n)
if len(sys.argv) > 4:
    other = bytearray()
    while True:
        d = c2.recv(100)
        if not d:
            break
        other.extend(d)
    print("other", bytes(other))
"#;

/// Runs the Python server `script` (arguments `args`, its port first)
/// under `zerosplit exec` over a daemon in a lab named after `prefix`,
/// and [`ECHO_CLIENT_PY`] streaming `len` bytes to that port from the
/// peer: asserts the echo came back whole, that the server logged nothing
/// unsupported and reset nothing, and that the exec namespace's kernel TCP
/// saw none of it. Returns the server's log once it says `done`.
fn echo_through(prefix: &str, script: &str, args: &[&str], len: usize, done: &str) -> String {
    let lab = PyLab::start(prefix, script, args);
    let addr = lab.pair.a.addr.to_string();
    let out = lab.client(ECHO_CLIENT_PY, &[&addr, args[0], &len.to_string()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains(&format!("echo exact {len} of {len}")),
        "the stream came back whole: {said}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&lab.log).unwrap_or_default()
    );
    lab.finish(done)
}

#[test]
fn a_connection_read_and_written_before_fork_goes_on_in_the_child() {
    let _serial = serial();
    const LEN: usize = 4 << 20;
    let done = format!("child echoed {}", LEN - 500_000);
    let args = ["9004", "300000", "200000"];
    let server_log = echo_through("zxf", FORK_USED_PY, &args, LEN, &done);
    assert!(
        server_log.contains("parent echoed 300000")
            && server_log.contains("parent echoed after the fork 500000"),
        "the parent read and wrote before and after the fork:\n{server_log}"
    );
}

/// A CGI-style server: it reads and echoes the start of a connection,
/// forks, and the child makes the connection its standard input and
/// output and execs an echo program, while the parent closes its copy and
/// waits.
const FORK_EXEC_PY: &str = r#"
import os, socket, sys
port, first = int(sys.argv[1]), int(sys.argv[2])
ECHO = """
import os
total = 0
while True:
    d = os.read(0, 65536)
    if not d:
        break
    n = 0
    while n < len(d):
        n += os.write(1, d[n:])
    total += len(d)
os.write(2, b"exec'd echoed %d\\n" % total)
"""
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen(8)
print("listening", flush=True)
c, _ = s.accept()
got = 0
while got < first:
    d = c.recv(min(65536, first - got))
    if not d:
        break
    c.sendall(d)
    got += len(d)
print("parent echoed", got, flush=True)
pid = os.fork()
if pid == 0:
    s.close()
    os.dup2(c.fileno(), 0)
    os.dup2(c.fileno(), 1)
    c.close()
    os.execv(sys.executable, [sys.executable, "-c", ECHO])
c.close()
os.waitpid(pid, 0)
print("child done", flush=True)
"#;

#[test]
fn a_connection_read_before_fork_goes_on_in_the_program_the_child_execs() {
    let _serial = serial();
    const LEN: usize = 2 << 20;
    let server_log = echo_through("zxg", FORK_EXEC_PY, &["9005", "100000"], LEN, "child done");
    assert!(
        server_log.contains("parent echoed 100000")
            && server_log.contains(&format!("exec'd echoed {}", LEN - 100_000)),
        "the parent read and wrote before the fork, the exec'd program the rest:\n{server_log}"
    );
}

/// A server that reads a request and forks. The first two times the
/// child is a helper that never touches the connection (it exits, with
/// `_exit` the first time and `sys.exit` the second) while the parent
/// answers and closes its copy first: the connection ends as the parent
/// closed it, with every byte and a FIN (Linux: the helper's descriptor
/// only delays the close). The third time the parent, which only read,
/// closes at once and the child answers.
const HELPER_PY: &str = r#"
import os, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen(8)
print("listening", flush=True)
answer = bytes((k * 13) % 256 for k in range(n))
for way in ("_exit", "exit", "child answers"):
    c, _ = s.accept()
    req = b""
    while len(req) < 5:
        req += c.recv(5 - len(req))
    pid = os.fork()
    if pid == 0:
        if way == "child answers":
            c.sendall(answer)
            c.close()
            os._exit(0)
        time.sleep(0.3)
        if way == "_exit":
            os._exit(0)
        sys.exit(0)
    if way != "child answers":
        c.sendall(answer)
    c.close()
    os.waitpid(pid, 0)
    print("served", way, flush=True)
"#;

#[test]
fn a_used_connection_a_helper_child_never_touches_closes_as_the_parent_closed_it() {
    let _serial = serial();
    const LEN: usize = 4 << 20;
    let lab = PyLab::start("zxh", HELPER_PY, &["9006", &LEN.to_string()]);
    let client = "import socket, sys, time\n\
         want = bytes((k * 13) % 256 for k in range(int(sys.argv[2])))\n\
         for i in range(3):\n\
         \x20   c = socket.create_connection((sys.argv[1], 9006), timeout=30)\n\
         \x20   c.sendall(b'ping\\n')\n\
         \x20   if i == 2:\n\
         \x20       time.sleep(1)\n\
         \x20   got = bytearray()\n\
         \x20   while True:\n\
         \x20       d = c.recv(65536)\n\
         \x20       if not d:\n\
         \x20           break\n\
         \x20       got.extend(d)\n\
         \x20   print('answer', i, 'exact' if bytes(got) == want else 'differs', len(got))\n";
    let out = lab.client(client, &[&lab.pair.a.addr.to_string(), &LEN.to_string()]);
    let said = String::from_utf8_lossy(&out.stdout);
    let server_log = lab.finish("served child answers");
    assert!(
        out.status.success() && (0..3).all(|i| said.contains(&format!("answer {i} exact {LEN}"))),
        "each answer whole and then a FIN: {said}{}\n{server_log}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `execl`, `execlp` and `execle` (variadic in C, so their argument lists
/// reach the shim through a naked entry point): a C program
/// (`data/exec_list.c`) echoes on a connection, then execs itself with
/// each, eight list arguments (four on the stack) and the socket without
/// `FD_CLOEXEC`; the new image echoes on the same connection. Natively
/// first (the program's expectations are Linux's), then attached.
#[test]
fn execl_execlp_and_execle_keep_a_used_connection_in_the_new_image() {
    let _serial = serial();
    require_program("python3");
    let probe = compile_c(env!("CARGO_TARGET_TMPDIR"), "exec_list");
    let (a, b, pair, dir, _daemon) = daemon_lab("zxl", 16);
    let peer_addr = pair.b.addr.to_string();
    let _peer = shim_peer(&b, &peer_addr, "9007", "110");
    for mode in ["execl", "execlp", "execle"] {
        let native = run_in(&a, 30, &[&probe, mode, &peer_addr, "9007"]);
        let text = String::from_utf8_lossy(&native.stdout);
        assert!(
            native.status.success() && text.contains(&format!("ok {mode}")),
            "{mode} natively: {text}{}",
            String::from_utf8_lossy(&native.stderr)
        );
    }
    let before = kernel_tcp(&a);
    for mode in ["execl", "execlp", "execle"] {
        let log = dir.join(&format!("{mode}.log"));
        let mut run = attached(
            &a,
            &pair.a.ifname,
            &dir,
            &log,
            &[&probe, mode, &peer_addr, "9007"],
        );
        let status = wait_exit(&mut run.0, Duration::from_secs(60));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            status == Some(0) && text.contains(&format!("ok {mode}")),
            "{mode} under exec ({status:?}):\n{text}"
        );
        for bad in ["unsupported", "reset", "could not"] {
            assert!(!text.contains(bad), "{bad}:\n{text}");
        }
    }
    assert_eq!(
        kernel_tcp(&a),
        before,
        "the exec namespace's kernel TCP saw none of it"
    );
}
