//! Issue 27's proofs with `zerosplit daemon` as a real process: the daemon
//! runs as a child (`zerosplit daemon --config F --iface VETH --socket
//! PATH`) in namespace `a`, Linux TCP peers live in namespace `b`, and
//! applications attach from this process (`zerosplit::attach`, the Unix
//! socket reaches across namespaces) or as `zerosplit nc --daemon` children.
//!
//! - two attached applications at once, each 256 MiB to and from Linux;
//! - kill -9 of one mid-transfer: the other stays byte-exact, the loss is
//!   noticed within 1 s, the slot and its memory come back;
//! - a hostile raw client (forged ids, ranges outside its memory, garbage
//!   floods, a descriptor, wild ring indices, completions never read)
//!   beside a well-behaved one: nothing written outside, the good one
//!   byte-exact;
//! - kill -9 of the daemon: blocked clients fail within 1 s, kernel TCP
//!   works on the veth again, a restarted daemon serves at once.
//!
//! Run: `cargo test -p zerosplit-cli --test daemon` (root; one test at a
//! time through `heavy()`).

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use datapath::mr::{Access, MrId};
use datapath::shm::{ChannelLayout, SharedMemory};
use zerosplit::ipc::channel::{AppEnd, Layout};
use zerosplit::ipc::desc::{CompletionDesc, PostDesc, DIR_RECV, DIR_SEND};
use zerosplit::ipc::msg::{ErrorCode, Reply, Request, Welcome, MAX_MESSAGE};
use zerosplit::ipc::sock::{self, Received};
use zerosplit::provider::{ConnId, Provider};
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{connect_retrying, heavy, require_root, wait_until, xdp_attachment, Pattern};

const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");
const MIB: u64 = 1 << 20;
/// The longest the daemon or a client may take to notice a death.
const NOTICE: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------- the rig

/// Two namespaces joined by a veth, and a scratch directory for the
/// daemon's configuration, socket and log (removed when dropped).
struct Lab {
    a: NetNs,
    b: NetNs,
    pair: VethPair,
    dir: PathBuf,
}

impl Lab {
    fn new(prefix: &str) -> Lab {
        require_root();
        let a = NetNs::new(&format!("{prefix}a")).expect("netns");
        let b = NetNs::new(&format!("{prefix}b")).expect("netns");
        let pair = VethPair::create(&a, &b, 1500).expect("veth");
        let dir = std::env::temp_dir().join(format!("zs-daemon-{prefix}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Lab { a, b, pair, dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("daemon.sock")
    }

    /// A daemon on `a`'s end with `[daemon]` = `daemon_toml`.
    fn daemon(&self, daemon_toml: &str, log: &str) -> DaemonProc {
        let config = self.dir.join("daemon.toml");
        std::fs::write(&config, format!("[daemon]\n{daemon_toml}\n")).expect("write config");
        DaemonProc::start(self, &config, &self.dir.join(log))
    }

    /// An address of `b` (the Linux side) at `port`.
    fn linux(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(self.pair.b.addr, port)
    }

    /// The daemon's address at `port`.
    fn stack(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(self.pair.a.addr, port)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A child process killed (SIGKILL) and reaped when dropped, also on a
/// failed assertion.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// SIGKILLs `child`, reaps it and checks it died of the signal; returns
/// when the kill was sent.
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

/// `zerosplit daemon` running in namespace `a`.
struct DaemonProc {
    child: Reaped,
    log: PathBuf,
    /// When its "serving" line appeared.
    up: Instant,
}

impl DaemonProc {
    fn start(lab: &Lab, config: &Path, log: &Path) -> DaemonProc {
        let err = std::fs::File::create(log).expect("log file");
        let socket = lab.socket();
        let args = [
            "daemon",
            "--config",
            config.to_str().expect("utf-8"),
            "--iface",
            &lab.pair.a.ifname,
            "--socket",
            socket.to_str().expect("utf-8"),
            "--drain",
            "0",
        ];
        let child = lab
            .a
            .command(BIN, args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start zerosplit daemon");
        let mut d = DaemonProc {
            child: Reaped(child),
            log: log.to_path_buf(),
            up: Instant::now(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if d.log_text().contains("zerosplit daemon: serving") {
                break;
            }
            if let Ok(Some(s)) = d.child.0.try_wait() {
                panic!("the daemon exited ({s}):\n{}", d.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not come up within 20 s:\n{}",
                d.log_text()
            );
            thread::sleep(Duration::from_millis(10));
        }
        d.up = Instant::now();
        d
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// The daemon's resident memory (`VmRSS`), KiB.
    fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("daemon status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS")
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.0.try_wait(), Ok(None))
    }
}

fn opts() -> TransferOptions {
    TransferOptions {
        idle_timeout: Duration::from_secs(30),
    }
}

/// A `Write` that checks everything written against `pattern(len, seed)`
/// as it comes, without holding the stream.
struct Verify {
    expect: Pattern,
    at: u64,
    first_bad: Option<u64>,
    /// From the first wrong byte: (got, expected), up to 16 bytes.
    seen: Vec<(u8, u8)>,
    scratch: Vec<u8>,
}

impl Verify {
    fn new(len: u64, seed: u64) -> Verify {
        Verify {
            expect: Pattern::new(len, seed),
            at: 0,
            first_bad: None,
            seen: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Panics unless exactly `len` bytes came, all as expected.
    fn check(&self, len: u64, what: &str) {
        assert_eq!(
            self.first_bad, None,
            "{what}: first wrong byte (got, expected from there: {:?})",
            self.seen
        );
        assert_eq!(self.at, len, "{what}: bytes");
    }
}

impl Write for Verify {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.scratch.resize(buf.len(), 0);
        let n = self.expect.read(&mut self.scratch)?;
        if self.first_bad.is_none() {
            if let Some(i) = (0..buf.len()).find(|&i| i >= n || buf[i] != self.scratch[i]) {
                self.first_bad = Some(self.at + i as u64);
                let end = n.min(i + 16);
                self.seen = (i..end).map(|j| (buf[j], self.scratch[j])).collect();
            }
        }
        self.at += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Linux (in `b`) connects to `to` and sends `pattern(len, seed)`, then
/// FIN; counts what it wrote into `sent`.
fn linux_sends_pattern(lab: &Lab, to: SocketAddrV4, len: u64, seed: u64, sent: &AtomicU64) {
    in_netns(&lab.b, || {
        let mut c = connect_retrying(to, Duration::from_secs(15));
        c.set_write_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut p = Pattern::new(len, seed);
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = p.read(&mut buf).expect("pattern");
            if n == 0 {
                break;
            }
            if c.write_all(&buf[..n]).is_err() {
                return;
            }
            sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        c.shutdown(std::net::Shutdown::Write).ok();
        c.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let _ = c.read_to_end(&mut Vec::new());
    });
}

/// Linux accepts one connection on `listener` and checks it carries
/// `pattern(len, seed)` until FIN.
fn linux_receives_pattern(listener: &TcpListener, len: u64, seed: u64, what: &str) {
    let (mut c, _) = listener.accept().expect("kernel accept");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut v = Verify::new(len, seed);
    std::io::copy(&mut c, &mut v).expect("read until FIN");
    v.check(len, what);
}

/// One attached application's two transfers, one after the other:
/// `len` bytes to Linux on `up_port`, then `len` from Linux on
/// `down_port`; all byte-exact.
fn both_ways(lab: &Lab, app: &mut zerosplit::Attached, up_port: u16, down_port: u16, len: u64) {
    let seed = u64::from(up_port);
    let listener = in_netns(&lab.b, || {
        TcpListener::bind((lab.pair.b.addr, up_port)).expect("bind")
    });
    thread::scope(|s| {
        let got = s.spawn(|| linux_receives_pattern(&listener, len, seed, "attached → Linux"));
        let n = transfer::connect(
            app,
            lab.linux(up_port),
            &mut Pattern::new(len, seed),
            &opts(),
        )
        .expect("attached → Linux");
        assert_eq!(n, len);
        got.join().expect("linux receives");
    });
    let sent = AtomicU64::new(0);
    thread::scope(|s| {
        s.spawn(|| linux_sends_pattern(lab, lab.stack(down_port), len, seed + 1, &sent));
        let mut v = Verify::new(len, seed + 1);
        transfer::listen(app, down_port, &mut v, &opts()).expect("Linux → attached");
        v.check(len, "Linux → attached");
    });
}

// ---------------------------------------------------------------- 1

#[test]
fn two_applications_share_one_interface() {
    let _serial = heavy();
    let lab = Lab::new("zdt1");
    let daemon = lab.daemon(
        "max_attachments = 2\nmemory_per_attachment = \"64MiB\"",
        "daemon.log",
    );
    const LEN: u64 = 256 * MIB;
    let start = Instant::now();
    let mut one = zerosplit::attach(lab.socket()).expect("attach one");
    let mut two = zerosplit::attach(lab.socket()).expect("attach two");
    assert_ne!(one.attachment(), two.attachment());
    thread::scope(|s| {
        let first = s.spawn(|| both_ways(&lab, &mut one, 5101, 5102, LEN));
        let second = s.spawn(|| both_ways(&lab, &mut two, 5201, 5202, LEN));
        first.join().expect("application one");
        second.join().expect("application two");
    });
    eprintln!(
        "two applications moved 4 × {} MiB in {:?}",
        LEN / MIB,
        start.elapsed()
    );
    drop((one, two));
    assert!(
        wait_until(Duration::from_secs(2), || zerosplit::attach(lab.socket())
            .and_then(|a| {
                let b = zerosplit::attach(lab.socket())?;
                Ok((a, b))
            })
            .is_ok()),
        "both slots free again after the two detached:\n{}",
        daemon.log_text()
    );
}

// ---------------------------------------------------------------- 2

#[test]
fn kill_9_of_one_application_leaves_the_other_whole() {
    let _serial = heavy();
    let lab = Lab::new("zdt2");
    let daemon = lab.daemon(
        "max_attachments = 2\nmemory_per_attachment = \"64MiB\"",
        "daemon.log",
    );
    const LEN: u64 = 256 * MIB;
    let (a_port, b_port) = (5301, 5302);
    let a_sent = AtomicU64::new(0);
    let b_sent = AtomicU64::new(0);
    let mut app = zerosplit::attach(lab.socket()).expect("attach A");
    thread::scope(|s| {
        // A: 256 MiB from Linux, checked as it comes.
        let a_linux = s.spawn(|| linux_sends_pattern(&lab, lab.stack(a_port), LEN, 21, &a_sent));
        let a = s.spawn(|| {
            let mut v = Verify::new(LEN, 21);
            transfer::listen(&mut app, a_port, &mut v, &opts()).expect("Linux → A");
            v.check(LEN, "Linux → A");
        });
        assert!(
            wait_until(Duration::from_secs(20), || a_sent.load(Ordering::Relaxed)
                >= 8 * MIB),
            "A's transfer got going"
        );
        let rss_with_a = daemon.rss_kib();

        // B: `zerosplit nc --daemon` receiving from Linux, killed mid-way.
        let target = format!(":{b_port}");
        let sock_path = lab.socket();
        let mut nc = Reaped(
            std::process::Command::new(BIN)
                .args([
                    "nc",
                    "--daemon",
                    sock_path.to_str().expect("utf-8"),
                    "-l",
                    &target,
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nc"),
        );
        let b_linux = s.spawn(|| linux_sends_pattern(&lab, lab.stack(b_port), LEN, 22, &b_sent));
        assert!(
            wait_until(Duration::from_secs(20), || b_sent.load(Ordering::Relaxed)
                >= 16 * MIB),
            "B's transfer got going"
        );
        assert!(
            a_sent.load(Ordering::Relaxed) < LEN,
            "A is still mid-transfer when B dies"
        );
        assert!(
            zerosplit::attach(lab.socket()).is_err(),
            "both slots are taken while A and B live"
        );
        let killed = kill9(&mut nc.0);

        // The daemon notices within 1 s: B's slot serves a new attachment.
        let mut again = None;
        while killed.elapsed() < NOTICE {
            if let Ok(c) = zerosplit::attach(lab.socket()) {
                again = Some(c);
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let noticed = killed.elapsed();
        let mut c = again.unwrap_or_else(|| {
            panic!(
                "no new attachment within {NOTICE:?} of B's kill:\n{}",
                daemon.log_text()
            )
        });
        eprintln!("B's slot served a new attachment {noticed:?} after its SIGKILL");
        // The whole slot: none of B's regions is left in it.
        let mr = c
            .register_memory(64 << 20, Access::BOTH)
            .expect("the new attachment registers the full 64 MiB");
        assert!(
            c.memory(mr).expect("memory").iter().all(|&b| b == 0),
            "B's bytes do not reach the next application"
        );
        drop(c);
        b_linux.join().expect("B's Linux sender");
        a.join().expect("A");
        a_linux.join().expect("A's Linux sender");
        let rss_after = daemon.rss_kib();
        eprintln!("daemon VmRSS: {rss_with_a} KiB with A, {rss_after} KiB after B's death");
        assert!(
            rss_after <= rss_with_a + 16 * 1024,
            "the daemon's memory came back: VmRSS {rss_with_a} KiB with A, {rss_after} KiB after"
        );
    });
    drop(app);
}

// ---------------------------------------------------------------- 4

#[test]
fn kill_9_of_the_daemon_fails_clients_fast() {
    let _serial = heavy();
    let lab = Lab::new("zdt4");
    let mut daemon = lab.daemon(
        "max_attachments = 2\nmemory_per_attachment = \"64MiB\"",
        "daemon.log",
    );
    let (a_port, b_port) = (5401, 5402);
    let stop = AtomicBool::new(false);
    let (a_sent, b_sent) = (AtomicU64::new(0), AtomicU64::new(0));
    // Linux sends a little to each client, then pauses, connection open.
    let trickle = |port: u16, sent: &AtomicU64| {
        in_netns(&lab.b, || {
            let mut c = connect_retrying(lab.stack(port), Duration::from_secs(15));
            c.write_all(&[7u8; 64 << 10]).expect("send a little");
            sent.store(64 << 10, Ordering::Release);
            let deadline = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(10));
            }
        });
    };
    let mut app = zerosplit::attach(lab.socket()).expect("attach A");
    let sock_path = lab.socket();
    let target = format!(":{b_port}");
    let mut nc = Reaped(
        std::process::Command::new(BIN)
            .args([
                "nc",
                "--daemon",
                sock_path.to_str().expect("utf-8"),
                "-l",
                &target,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nc"),
    );
    let killed = thread::scope(|s| {
        let _stop = zerosplit_tests::RaiseOnDrop(&stop);
        s.spawn(|| trickle(a_port, &a_sent));
        s.spawn(|| trickle(b_port, &b_sent));
        let a = s.spawn(|| {
            let mut out = Vec::new();
            let r = transfer::listen(&mut app, a_port, &mut out, &opts());
            (r.map_err(|e| e.to_string()), out.len(), Instant::now())
        });
        assert!(
            wait_until(Duration::from_secs(20), || a_sent.load(Ordering::Acquire)
                > 0
                && b_sent.load(Ordering::Acquire) > 0),
            "both clients receive"
        );
        // Both clients are blocked in receive, the stream paused.
        thread::sleep(Duration::from_millis(300));
        assert!(!a.is_finished(), "A waits for more");
        assert_eq!(nc.0.try_wait().expect("poll nc"), None, "nc waits for more");
        let killed = kill9(&mut daemon.child.0);
        let (result, got, failed_at) = a.join().expect("A");
        let a_took = failed_at.duration_since(killed);
        eprintln!("A failed {a_took:?} after the daemon's SIGKILL: {result:?} ({got} bytes)");
        assert!(result.is_err(), "A's receive fails: {result:?}");
        assert!(a_took <= NOTICE, "A failed after {a_took:?}");
        let exited = wait_until(NOTICE.saturating_sub(killed.elapsed()), || {
            matches!(nc.0.try_wait(), Ok(Some(_)))
        });
        let nc_took = killed.elapsed();
        assert!(
            exited,
            "nc still blocked {nc_took:?} after the daemon's SIGKILL"
        );
        let status = nc.0.wait().expect("reap nc");
        let mut err = String::new();
        if let Some(mut e) = nc.0.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        eprintln!("nc exited {nc_took:?} after the daemon's SIGKILL ({status}): {err}");
        assert!(!status.success(), "nc fails: {status}");
        killed
    });
    // Later calls fail at once, with a clear error.
    let t = Instant::now();
    let e = app.listen(5403).expect_err("a call after the daemon died");
    assert!(t.elapsed() < NOTICE, "{:?}", t.elapsed());
    assert!(matches!(e, zerosplit::AttachError::Lost), "{e}");
    drop(app);

    // The XDP program went with the daemon: kernel TCP on the same veth.
    assert_eq!(xdp_attachment(&lab.a, &lab.pair.a.ifname), None, "XDP gone");
    let listener = in_netns(&lab.a, || TcpListener::bind((lab.pair.a.addr, a_port)))
        .expect("kernel listener on the port the daemon served");
    let to = lab.stack(a_port);
    let worked = in_netns(&lab.b, || {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(mut c) = TcpStream::connect_timeout(&to.into(), Duration::from_millis(100)) {
                c.write_all(b"kernel").expect("kernel write");
                return Some(killed.elapsed());
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    });
    let (mut k, _) = listener.accept().expect("kernel accept");
    let mut word = [0u8; 6];
    k.read_exact(&mut word).expect("kernel read");
    assert_eq!(&word, b"kernel");
    let worked = worked.expect("kernel TCP between the namespaces within 5 s");
    eprintln!("kernel TCP worked {worked:?} after the daemon's SIGKILL");
    assert!(worked <= NOTICE, "kernel TCP took {worked:?}");
    drop((k, listener));

    // A restarted daemon on the same socket path serves at once.
    assert!(!daemon.alive());
    let again = lab.daemon(
        "max_attachments = 2\nmemory_per_attachment = \"64MiB\"",
        "daemon2.log",
    );
    let mut app = None;
    while again.up.elapsed() < NOTICE {
        if let Ok(a) = zerosplit::attach(lab.socket()) {
            app = Some(a);
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let served = again.up.elapsed();
    let mut app = app.unwrap_or_else(|| {
        panic!(
            "the restarted daemon did not serve within {NOTICE:?}:\n{}",
            again.log_text()
        )
    });
    eprintln!("the restarted daemon served an attachment {served:?} after it came up");
    // And carries a transfer.
    let listener = in_netns(&lab.b, || {
        TcpListener::bind((lab.pair.b.addr, 5404)).expect("bind")
    });
    thread::scope(|s| {
        let got = s.spawn(|| linux_receives_pattern(&listener, 4 * MIB, 44, "after restart"));
        transfer::connect(
            &mut app,
            lab.linux(5404),
            &mut Pattern::new(4 * MIB, 44),
            &opts(),
        )
        .expect("attached → Linux after restart");
        got.join().expect("linux");
    });
}
