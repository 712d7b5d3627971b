//! Crash safety (issue 12, item 7): `zerosplit run` and `zerosplit nc`
//! killed with SIGKILL in the middle of a transfer with a Linux peer leave
//! nothing behind. After the kill: the XDP program is gone from the
//! interface, kernel TCP to the port the stack served and ping work again
//! within 1 s (the time is measured and printed), and a restarted stack
//! attaches at once and carries a transfer. The ports the dead stack
//! reserved from the kernel are taken back by the next start: after the
//! restarted stack stops, `ip_local_reserved_ports` is what it was before
//! either ran (a port reserved by hand included).
//!
//! The tests live in the cli crate because they run the `zerosplit`
//! binary (`CARGO_BIN_EXE_zerosplit`). Run them under the shared lock:
//! `flock /work/netlock cargo test -p zerosplit-cli --test crash`.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{connect_retrying, pattern, require_root, wait_until, xdp_attachment};

const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");

/// A port reserved by hand before any stack runs: it must stay reserved.
const ADMIN_PORT: &str = "5555";

/// Bytes that must have moved before the kill (so it is mid-transfer).
const BEFORE_KILL: u64 = 4 << 20;

/// The longest kernel traffic may take to work again after the kill.
const RECOVERY: Duration = Duration::from_secs(1);

/// Kills (SIGKILL) and reaps the child when dropped, also on a failed
/// assertion.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The namespace's own sysctl (`/proc/sys/net` shows the namespace of the
/// thread that opens it).
const RESERVED_PORTS: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";

fn reserved(ns: &NetNs) -> String {
    ns.run("reading ip_local_reserved_ports", || {
        std::fs::read_to_string(RESERVED_PORTS)
    })
    .expect("read ip_local_reserved_ports")
    .trim()
    .to_string()
}

fn set_reserved(ns: &NetNs, list: &str) {
    ns.run("writing ip_local_reserved_ports", || {
        std::fs::write(RESERVED_PORTS, list)
    })
    .expect("set ip_local_reserved_ports");
    assert_eq!(reserved(ns), list);
}

/// SIGKILLs the child and waits for it; returns when the kill was sent.
fn kill9(child: &mut Child) -> Instant {
    let at = Instant::now();
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("reap");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{status:?}"
    );
    at
}

/// After the kill at `killed`: no XDP program on `a`'s end, a kernel
/// listener on `port` in `a` reachable from `b`, ping from `b` answered.
/// Returns how long after the kill kernel TCP worked.
fn kernel_recovers(a: &NetNs, b: &NetNs, pair: &VethPair, port: u16, killed: Instant) -> Duration {
    let listener = in_netns(a, || TcpListener::bind((pair.a.addr, port)))
        .unwrap_or_else(|e| panic!("kernel listener on port {port}: {e}"));
    let to = SocketAddrV4::new(pair.a.addr, port);
    let recovered = in_netns(b, || {
        let deadline = killed + Duration::from_secs(5);
        loop {
            if TcpStream::connect_timeout(&to.into(), Duration::from_millis(50)).is_ok() {
                return Some(killed.elapsed());
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    });
    drop(listener);
    let recovered = recovered.expect("kernel TCP to the dead stack's port within 5 s");
    assert_eq!(
        xdp_attachment(a, &pair.a.ifname),
        None,
        "no XDP program after the kill"
    );
    let ping = zerosplit_lab::ping(b, pair.a.addr, Duration::from_secs(1));
    assert!(ping.is_ok(), "ping after the kill: {ping:?}");
    eprintln!("kernel TCP to port {port} worked {recovered:?} after SIGKILL");
    assert!(
        recovered <= RECOVERY,
        "kernel TCP took {recovered:?} after the kill (limit {RECOVERY:?})"
    );
    recovered
}

/// Writes to `stream` until told to stop or it fails; counts the bytes.
fn pump(mut out: impl Write + Send + 'static, sent: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    thread::spawn(move || {
        let chunk = pattern(64 << 10, 7);
        while !stop.load(Ordering::Acquire) {
            match out.write(&chunk) {
                Ok(n) => sent.fetch_add(n as u64, Ordering::Relaxed),
                Err(_) => return,
            };
        }
    });
}

fn spawn_run(a: &NetNs, config: &std::path::Path, ifname: &str) -> Reaped {
    Reaped(
        a.command(
            BIN,
            [
                "run",
                "--config",
                config.to_str().expect("utf-8 path"),
                "--iface",
                ifname,
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zerosplit run"),
    )
}

#[test]
fn sigkill_of_run_mid_transfer_leaves_nothing_behind() {
    require_root();
    let a = NetNs::new("zkra").expect("netns");
    let b = NetNs::new("zkrb").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    set_reserved(&a, ADMIN_PORT);
    let dir = std::env::temp_dir().join(format!("zs-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("run.toml");
    std::fs::write(
        &config,
        "[[listen]]\nport = 7\nservice = \"echo\"\n\n[[listen]]\nport = 9\nservice = \"discard\"\n",
    )
    .expect("write config");

    let mut run = spawn_run(&a, &config, &pair.a.ifname);
    let discard = SocketAddrV4::new(pair.a.addr, 9);
    let stream = in_netns(&b, || connect_retrying(discard, Duration::from_secs(15)));
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    assert_eq!(reserved(&a), format!("{ADMIN_PORT},40000-40999"));
    let (sent, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    pump(stream, sent.clone(), stop.clone());
    assert!(
        wait_until(Duration::from_secs(15), || sent.load(Ordering::Relaxed)
            >= BEFORE_KILL),
        "the transfer got going: {} bytes",
        sent.load(Ordering::Relaxed)
    );
    let killed = kill9(&mut run.0);
    stop.store(true, Ordering::Release);
    eprintln!(
        "killed zerosplit run after {} bytes into discard",
        sent.load(Ordering::Relaxed)
    );
    kernel_recovers(&a, &b, &pair, 9, killed);
    assert_eq!(
        reserved(&a),
        format!("{ADMIN_PORT},40000-40999"),
        "a killed stack cannot undo its own reservation"
    );

    // A restarted stack attaches at once and carries an echo transfer.
    let started = Instant::now();
    let mut again = spawn_run(&a, &config, &pair.a.ifname);
    let payload = pattern(2 << 20, 11);
    let echoed = in_netns(&b, || {
        let mut echo = connect_retrying(SocketAddrV4::new(pair.a.addr, 7), Duration::from_secs(15));
        eprintln!(
            "restarted zerosplit run served after {:?}",
            started.elapsed()
        );
        echo.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut reader = echo.try_clone().expect("clone");
        let back = thread::spawn(move || {
            let mut got = Vec::new();
            let _ = reader.read_to_end(&mut got);
            got
        });
        echo.write_all(&payload).expect("echo write");
        echo.shutdown(std::net::Shutdown::Write).expect("shutdown");
        back.join().expect("reader")
    });
    assert!(
        echoed == payload,
        "echo after restart: {} of {} bytes",
        echoed.len(),
        payload.len()
    );
    assert_eq!(again.0.try_wait().expect("poll"), None, "still running");
    stop_with_sigterm(&mut again.0);
    assert_eq!(
        reserved(&a),
        ADMIN_PORT,
        "after the restarted stack stops, the dead one's reservation is gone too"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigkill_of_nc_mid_transfer_leaves_nothing_behind() {
    require_root();
    let a = NetNs::new("zkna").expect("netns");
    let b = NetNs::new("zknb").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    set_reserved(&a, ADMIN_PORT);
    let sink = in_netns(&b, || TcpListener::bind((pair.b.addr, 5001))).expect("listener");
    let target = SocketAddrV4::new(pair.b.addr, 5001).to_string();
    let spawn_nc = || {
        Reaped(
            a.command(BIN, ["nc", target.as_str(), "--iface", &pair.a.ifname])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start zerosplit nc"),
        )
    };

    let mut nc = spawn_nc();
    let (sent, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    pump(
        nc.0.stdin.take().expect("stdin"),
        sent.clone(),
        stop.clone(),
    );
    let (mut conn, from) = accept_within(&sink, Duration::from_secs(15));
    let got = Arc::new(AtomicU64::new(0));
    {
        let got = got.clone();
        thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n @ 1..) = conn.read(&mut buf) {
                got.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
    }
    assert!(
        wait_until(Duration::from_secs(15), || got.load(Ordering::Relaxed)
            >= BEFORE_KILL),
        "the transfer got going: {} bytes",
        got.load(Ordering::Relaxed)
    );
    assert_eq!(reserved(&a), format!("{ADMIN_PORT},40000-40999"));
    let killed = kill9(&mut nc.0);
    stop.store(true, Ordering::Release);
    eprintln!(
        "killed zerosplit nc (local port {}) after {} bytes received by Linux",
        from.port(),
        got.load(Ordering::Relaxed)
    );
    // The port the dead connection used is the kernel's again.
    kernel_recovers(&a, &b, &pair, from.port(), killed);

    // A restarted nc attaches at once and moves a stream byte-exact.
    let started = Instant::now();
    let mut again = spawn_nc();
    let payload = pattern(4 << 20, 13);
    let mut stdin = again.0.stdin.take().expect("stdin");
    let feeder = {
        let payload = payload.clone();
        thread::spawn(move || stdin.write_all(&payload))
    };
    let (mut conn, _) = accept_within(&sink, Duration::from_secs(15));
    eprintln!(
        "restarted zerosplit nc connected after {:?}",
        started.elapsed()
    );
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut received = Vec::new();
    conn.read_to_end(&mut received).expect("read the stream");
    drop(conn);
    feeder.join().expect("feeder").expect("write stdin");
    assert!(
        received == payload,
        "{} of {} bytes, byte-exact",
        received.len(),
        payload.len()
    );
    let exited = wait_until(Duration::from_secs(15), || {
        matches!(again.0.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "nc exits after its stream");
    let status = again.0.wait().expect("reap");
    assert!(status.success(), "{status:?}: {}", stderr_of(&mut again.0));
    assert_eq!(
        reserved(&a),
        ADMIN_PORT,
        "the dead nc's reservation is gone"
    );
}

/// The next connection on `listener`, waiting at most `within`.
fn accept_within(listener: &TcpListener, within: Duration) -> (TcpStream, SocketAddrV4) {
    listener.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + within;
    loop {
        match listener.accept() {
            Ok((s, std::net::SocketAddr::V4(from))) => {
                s.set_nonblocking(false).expect("blocking");
                return (s, from);
            }
            Ok((_, from)) => panic!("IPv6 peer {from}"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept within {within:?}: {e}"),
        }
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

/// Stops `zerosplit run` with SIGTERM (bounded) and checks it exits 0.
fn stop_with_sigterm(child: &mut Child) {
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let exited = wait_until(Duration::from_secs(10), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "zerosplit run did not stop on SIGTERM");
    let status = child.wait().expect("reap");
    assert!(status.success(), "{status:?}: {}", stderr_of(child));
}
