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
//!   works on the veth again, a restarted daemon serves at once;
//! - every configured queue served (a two-queue veth), and the transport
//!   on a thread of its own (`threads.mode = "dedicated"`) without a lost
//!   wakeup between it and the daemon's loop.
//!
//! Run: `cargo test -p zerosplit-cli --test daemon` (root; one test at a
//! time through `heavy()`).

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use datapath::mr::Access;
use datapath::shm::{ChannelLayout, SharedMemory};
use zerosplit::ipc::channel::{AppEnd, Layout};
use zerosplit::ipc::desc::{CompletionDesc, PostDesc, DIR_RECV, DIR_SEND};
use zerosplit::ipc::msg::{ErrorCode, Reply, Request, Welcome, MAX_MESSAGE};
use zerosplit::ipc::sock::{self, Received};
use zerosplit::provider::Provider;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{
    connect_retrying, heavy, http_get, require_root, wait_until, xdp_attachment, Pattern,
};

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
        Lab::with_queues(prefix, 1)
    }

    /// As [`Lab::new`], the veth with `queues` queues on each end.
    fn with_queues(prefix: &str, queues: u32) -> Lab {
        require_root();
        let a = NetNs::new(&format!("{prefix}a")).expect("netns");
        let b = NetNs::new(&format!("{prefix}b")).expect("netns");
        let pair = VethPair::create_with_queues(&a, &b, 1500, queues).expect("veth");
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
        if std::env::var_os("ZS_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
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
            lab.linux(up_port).into(),
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
            lab.linux(5404).into(),
            &mut Pattern::new(4 * MIB, 44),
            &opts(),
        )
        .expect("attached → Linux after restart");
        got.join().expect("linux");
    });
}

// ---------------------------------------------------------------- 3

/// A client that speaks the protocol by hand and breaks every rule it can.
struct Hostile {
    sock: OwnedFd,
    seq: u32,
    welcome: Welcome,
    /// Its memory slot (read only, to check nothing was written outside
    /// what it registered).
    slot: SharedMemory,
    /// The channel through the protocol's own end (status reads only).
    chan: AppEnd,
    /// The channel mapped a second time: raw ring indices and entries.
    raw: SharedMemory,
    rings: ChannelLayout,
    /// Its own count of posts produced.
    produced: u32,
    doorbell: datapath::shm::EventFd,
    replies: u64,
}

impl Hostile {
    fn attach(path: &Path) -> Hostile {
        let sock = sock::connect(path).expect("connect");
        sock::send(
            sock.as_fd(),
            &Request::Hello {
                name: "hostile".into(),
                parent: 0,
            }
            .encode(0),
            &[],
        )
        .expect("hello");
        let mut buf = vec![0u8; MAX_MESSAGE];
        let (len, fds) = recv_within(&sock, &mut buf, Duration::from_secs(5)).expect("welcome");
        let Ok((Reply::Welcome(welcome), _)) = Reply::decode(&buf[..len]) else {
            panic!("no welcome: {:?}", Reply::decode(&buf[..len]));
        };
        let [memory, channel, wake_daemon, _wake_app]: [OwnedFd; 4] =
            fds.try_into().expect("four descriptors");
        let layout = Layout {
            post_ring: welcome.post_ring,
            completion_ring: welcome.completion_ring,
            status_slots: welcome.max_connections,
        };
        let rings = ChannelLayout::new::<PostDesc, CompletionDesc>(
            layout.post_ring,
            layout.completion_ring,
            layout.status_slots as usize * 32,
        )
        .expect("layout");
        let raw =
            SharedMemory::open(channel.try_clone().expect("dup"), rings.len).expect("raw map");
        let produced = raw
            .atomic_u32(rings.post.producer)
            .expect("producer")
            .load(Ordering::Acquire);
        Hostile {
            slot: SharedMemory::open(memory, welcome.slot_len as usize).expect("slot"),
            chan: AppEnd::open(channel, layout).expect("channel"),
            raw,
            rings,
            produced,
            doorbell: datapath::shm::EventFd::from_received(wake_daemon).expect("doorbell"),
            sock,
            seq: 0,
            welcome,
            replies: 0,
        }
    }

    /// Reads (and forgets) every reply waiting.
    fn drain_replies(&mut self) {
        let mut buf = vec![0u8; MAX_MESSAGE];
        for _ in 0..100_000 {
            match sock::recv(self.sock.as_fd(), &mut buf, true) {
                Ok(Received::Message { .. }) => self.replies += 1,
                _ => return,
            }
        }
    }

    /// Sends `msg` (with `fds`) as request `seq` and waits for its reply.
    fn call_raw(&mut self, msg: &[u8], fds: &[std::os::fd::BorrowedFd<'_>], seq: u32) -> Reply {
        self.drain_replies();
        sock::send(self.sock.as_fd(), msg, fds).expect("send");
        let mut buf = vec![0u8; MAX_MESSAGE];
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some((len, _)) = recv_within(&self.sock, &mut buf, left) else {
                panic!(
                    "no reply to request {seq} ({:?}) within 5 s",
                    Request::decode(msg)
                );
            };
            let (reply, of) = Reply::decode(&buf[..len]).expect("a well-formed reply");
            if of == seq {
                return reply;
            }
        }
    }

    fn call(&mut self, req: Request) -> Reply {
        self.seq += 1;
        let seq = self.seq;
        self.call_raw(&req.encode(seq), &[], seq)
    }

    /// Writes `descs` on the post ring, publishes them at once and rings.
    fn post_raw(&mut self, descs: &[PostDesc]) {
        let size = self.rings.post_size;
        for d in descs {
            let at = self.rings.post.desc + (self.produced & (size - 1)) as usize * 48;
            let mut b = Vec::with_capacity(48);
            for w in [d.wr_id, d.conn, d.mr, d.offset, d.len] {
                b.extend_from_slice(&w.to_le_bytes());
            }
            b.extend_from_slice(&d.dir.to_le_bytes());
            b.extend_from_slice(&d.reserved.to_le_bytes());
            self.raw.bytes_mut()[at..at + 48].copy_from_slice(&b);
            self.produced = self.produced.wrapping_add(1);
        }
        self.index(self.rings.post.producer, self.produced);
        self.doorbell.signal();
    }

    /// Stores `v` at ring index word `offset` of the channel.
    fn index(&self, offset: usize, v: u32) {
        self.raw
            .atomic_u32(offset)
            .expect("index word")
            .store(v, Ordering::Release);
    }

    fn connect(&mut self, to: SocketAddrV4) -> (u64, u32) {
        match self.call(Request::Connect { remote: to.into() }) {
            Reply::Connecting { conn, slot } => (conn, slot),
            other => panic!("connect: {other:?}"),
        }
    }

    /// Waits (bounded) until the status entry `slot` says `pred`.
    fn wait_status(
        &self,
        slot: u32,
        within: Duration,
        pred: impl Fn(&zerosplit::ipc::channel::Status) -> bool,
    ) -> bool {
        wait_until(within, || self.chan.status(slot).is_some_and(|s| pred(&s)))
    }
}

/// Waits up to `within` for one message on `sock`.
fn recv_within(sock: &OwnedFd, buf: &mut [u8], within: Duration) -> Option<(usize, Vec<OwnedFd>)> {
    let deadline = Instant::now() + within;
    loop {
        match sock::recv(sock.as_fd(), buf, true).expect("recv") {
            Received::Message { len, fds, .. } => return Some((len, fds)),
            Received::HangUp => panic!("the daemon hung up"),
            Received::Empty if Instant::now() >= deadline => return None,
            Received::Empty => thread::sleep(Duration::from_micros(200)),
        }
    }
}

fn refused(r: &Reply) -> Option<ErrorCode> {
    match r {
        Reply::Error { code, .. } => Some(*code),
        _ => None,
    }
}

/// Linux listens on `port` in `b`: each connection gets `bytes` at once and
/// is held open until `stop`; the streams are kept in `held`.
fn linux_feeds(
    lab: &Lab,
    port: u16,
    bytes: usize,
    stop: &AtomicBool,
    held: &std::sync::Mutex<Vec<TcpStream>>,
) {
    let listener = in_netns(&lab.b, || {
        TcpListener::bind((lab.pair.b.addr, port)).expect("bind")
    });
    listener.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
        match listener.accept() {
            Ok((mut c, _)) => {
                c.set_nonblocking(false).expect("blocking");
                c.set_write_timeout(Some(Duration::from_millis(500))).ok();
                let _ = c.write_all(&vec![0x5a; bytes]);
                held.lock().expect("held").push(c);
            }
            Err(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
}

#[test]
fn a_hostile_client_cannot_reach_outside_its_memory() {
    let _serial = heavy();
    let lab = Lab::new("zdt3");
    let mut daemon = lab.daemon(
        "max_attachments = 3\nmemory_per_attachment = \"64MiB\"\nmax_posted = 16\nmax_connections = 16",
        "daemon.log",
    );
    const LEN: u64 = 64 * MIB;
    const CANARY: usize = 1 << 20;
    let (g_port, side_port, feed_port) = (5501, 5502, 5503);
    let stop = AtomicBool::new(false);
    let attack_done = AtomicBool::new(false);
    let held = std::sync::Mutex::new(Vec::new());

    // The good client: a canary region (never posted), an idle side
    // connection, a listener; its ids are what the hostile one forges.
    let mut good = zerosplit::attach(lab.socket()).expect("attach good");
    let canary = good.register_memory(CANARY, Access::BOTH).expect("canary");
    let canary_bytes = zerosplit_tests::pattern(CANARY, 99);
    good.memory_mut(canary)
        .expect("canary memory")
        .copy_from_slice(&canary_bytes);
    let side_listener = in_netns(&lab.b, || {
        TcpListener::bind((lab.pair.b.addr, side_port)).expect("bind")
    });
    let side = good
        .connect(lab.linux(side_port).into())
        .expect("side connection");
    let (mut side_peer, _) = side_listener.accept().expect("accept side");
    let g_socket = good
        .listen_socket(g_port, false, zerosplit::daemon::Families::BOTH, None)
        .expect("listen")
        .0;

    thread::scope(|s| {
        let _stop = zerosplit_tests::RaiseOnDrop(&stop);
        s.spawn(|| linux_feeds(&lab, feed_port, 1 << 20, &stop, &held));
        // Linux → good: 8 MiB, then the rest once the attack is over.
        let g_linux = s.spawn(|| {
            in_netns(&lab.b, || {
                let mut c = connect_retrying(lab.stack(g_port), Duration::from_secs(15));
                c.set_write_timeout(Some(Duration::from_secs(30)))
                    .expect("timeout");
                let mut p = Pattern::new(LEN, 31);
                let mut first = vec![0u8; 8 << 20];
                p.read_exact(&mut first).expect("pattern");
                c.write_all(&first).expect("first 8 MiB");
                let ended = wait_until(Duration::from_secs(60), || {
                    attack_done.load(Ordering::Acquire) || stop.load(Ordering::Acquire)
                });
                if !ended || !attack_done.load(Ordering::Acquire) {
                    return; // the test failed: reset, ending the good transfer
                }
                std::io::copy(&mut p, &mut c).expect("the rest");
                c.shutdown(std::net::Shutdown::Write).expect("FIN");
                c.set_read_timeout(Some(Duration::from_secs(30))).ok();
                let _ = c.read_to_end(&mut Vec::new());
            });
        });
        let g = s.spawn(|| {
            let mut v = Verify::new(LEN, 31);
            transfer::listen(&mut good, g_port, &mut v, &opts()).expect("Linux → good");
            v.check(LEN, "Linux → good");
        });

        let mut h = Hostile::attach(&lab.socket());
        let region = match h.call(Request::RegisterMemory {
            len: 1 << 20,
            access: 3,
        }) {
            Reply::Registered { mr, offset, len } => (mr, offset, len),
            other => panic!("register: {other:?}"),
        };
        let (own_mr, own_off, own_len) = region;
        let slot_len = h.welcome.slot_len;

        // Forged names on the socket: each refused, naming why.
        let g_conn = side.to_bits();
        let g_mr = canary.to_bits();
        for (req, want) in [
            (
                Request::Close { conn: g_conn },
                ErrorCode::UnknownConnection,
            ),
            (
                Request::Abort { conn: g_conn },
                ErrorCode::UnknownConnection,
            ),
            (
                Request::DeregisterMemory { mr: g_mr },
                ErrorCode::UnknownRegion,
            ),
            (
                Request::Listen {
                    port: g_port,
                    reuseport: false,
                    families: 3,
                    socket: 0,
                },
                ErrorCode::PortInUse,
            ),
            (
                Request::Listen {
                    port: g_port,
                    reuseport: false,
                    families: 3,
                    socket: g_socket,
                },
                ErrorCode::NotListening,
            ),
            (
                Request::Unlisten { socket: g_socket },
                ErrorCode::NotListening,
            ),
            (
                Request::Accept { socket: g_socket },
                ErrorCode::NotListening,
            ),
            (
                Request::Hello {
                    name: "again".into(),
                    parent: 0,
                },
                ErrorCode::NotAttached,
            ),
            (
                Request::RegisterMemory {
                    len: slot_len,
                    access: 3,
                },
                ErrorCode::Limit,
            ),
        ] {
            let r = h.call(req.clone());
            assert_eq!(refused(&r), Some(want), "{req:?}: {r:?}");
        }
        // A descriptor beside a message; a message too long.
        h.seq += 1;
        let seq = h.seq;
        let passed = std::fs::File::open("/dev/null").expect("a descriptor to pass");
        // Refused, answered under its own sequence number.
        let r = h.call_raw(&Request::Stats.encode(seq), &[passed.as_fd()], seq);
        assert_eq!(refused(&r), Some(ErrorCode::Descriptors), "{r:?}");
        let mut long = Request::Stats.encode(0);
        long.resize(4 * MAX_MESSAGE, 0xee);
        h.drain_replies();
        sock::send(h.sock.as_fd(), &long, &[]).expect("send long");

        // Work requests outside its memory, each on a live connection of
        // its own (a refused post aborts the connection it names), while
        // Linux has bytes waiting to land wherever a post would let them.
        let r = |offset: u64, len: u64| PostDesc {
            wr_id: 1,
            conn: 0,
            mr: own_mr,
            offset,
            len,
            dir: DIR_RECV,
            reserved: 0,
        };
        let bad = [
            PostDesc {
                mr: g_mr,
                ..r(0, CANARY as u64)
            },
            PostDesc {
                mr: g_mr,
                dir: DIR_SEND,
                ..r(0, 4096)
            },
            r(own_len - 100, 4096),
            r(own_len, 4096),
            r(slot_len - own_off, 4096),
            r(slot_len, 4096),
            r(u64::MAX - 10, 100),
            r(0, u64::MAX),
            r(0, own_len + 1),
            PostDesc {
                dir: 7,
                ..r(0, 4096)
            },
            PostDesc {
                reserved: 1,
                ..r(0, 4096)
            },
            PostDesc {
                mr: own_mr ^ 1,
                ..r(0, 4096)
            },
            PostDesc {
                mr: u64::MAX,
                ..r(0, 4096)
            },
        ];
        for chunk in bad.chunks(6) {
            let conns: Vec<(u64, u32)> = chunk
                .iter()
                .map(|_| h.connect(lab.linux(feed_port)))
                .collect();
            for &(_, slot) in &conns {
                assert!(
                    h.wait_status(slot, Duration::from_secs(10), |s| s.state == 3),
                    "the hostile client's connection is established"
                );
            }
            let posts: Vec<PostDesc> = chunk
                .iter()
                .zip(&conns)
                .map(|(d, &(conn, _))| PostDesc { conn, ..*d })
                .collect();
            for p in &posts {
                h.post_raw(std::slice::from_ref(p));
            }
            // Each refused post aborts its connection.
            for (&(_, slot), p) in conns.iter().zip(&posts) {
                assert!(
                    h.wait_status(slot, Duration::from_secs(5), |s| s.conn == 0
                        || s.state == 0),
                    "a bad post ends its connection: {p:?}"
                );
            }
        }
        // Forged connections: the good client's, with its own region and
        // with the good client's canary; never aborts the good one's.
        h.post_raw(&[
            PostDesc {
                conn: g_conn,
                ..r(0, 4096)
            },
            PostDesc {
                conn: g_conn,
                mr: g_mr,
                dir: DIR_SEND,
                ..r(0, 4096)
            },
            PostDesc {
                conn: g_conn,
                mr: g_mr,
                ..r(0, 4096)
            },
        ]);

        // A flood of garbage and forged requests.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let flood_until = Instant::now() + Duration::from_secs(20);
        let mut sent = 0;
        while sent < 10_000 {
            assert!(Instant::now() < flood_until, "flood: {sent} sent in 20 s");
            let msg = match sent % 5 {
                0 => {
                    let n = 1 + (rnd() % MAX_MESSAGE as u64) as usize;
                    (0..n).map(|_| rnd() as u8).collect()
                }
                1 => {
                    let mut m = Request::Stats.encode(sent);
                    m[6] = 0x7f; // an unknown kind
                    m
                }
                2 => Request::Close { conn: g_conn }.encode(sent),
                3 => Request::DeregisterMemory { mr: g_mr }.encode(sent),
                _ => {
                    let mut m = Request::Connect {
                        remote: lab.linux(feed_port).into(),
                    }
                    .encode(sent);
                    m.truncate(m.len() - 1);
                    m
                }
            };
            match sock::send(h.sock.as_fd(), &msg, &[]) {
                Ok(()) => sent += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    h.drain_replies();
                    thread::sleep(Duration::from_micros(500));
                }
                Err(e) => panic!("flood: {e}"),
            }
        }
        eprintln!(
            "hostile: {sent} garbage messages sent, {} replies read",
            h.replies
        );

        // Never draining completions: valid receives on a connection of
        // its own until the completion ring is full and the daemon stops
        // taking its work (back-pressure), which also refuses a connect.
        let (bp_conn, bp_slot) = h.connect(lab.linux(feed_port));
        assert!(h.wait_status(bp_slot, Duration::from_secs(10), |s| s.state == 3));
        let mut expected = 0u64;
        let mut stalled = false;
        for round in 0..16u64 {
            let posts: Vec<PostDesc> = (0..16u64)
                .map(|k| PostDesc {
                    conn: bp_conn,
                    wr_id: round * 16 + k,
                    ..r(((round * 16 + k) % 512) * 1024, 1024)
                })
                .collect();
            h.post_raw(&posts);
            expected += 16 * 1024;
            if !h.wait_status(bp_slot, Duration::from_millis(500), |s| {
                s.received >= expected
            }) {
                stalled = true;
                break;
            }
        }
        assert!(
            stalled,
            "the daemon stops taking the work of a client that does not read its completions"
        );
        let r2 = h.call(Request::Connect {
            remote: lab.linux(feed_port).into(),
        });
        assert_eq!(refused(&r2), Some(ErrorCode::Limit), "{r2:?}");

        // Wild ring indices: an impossible producer, a wild consumer.
        let cons = h
            .raw
            .atomic_u32(h.rings.post.consumer)
            .expect("consumer")
            .load(Ordering::Acquire);
        h.index(h.rings.post.producer, cons.wrapping_add(0x8000_0000));
        h.index(h.rings.completion.consumer, 0xdead_beef);
        h.index(h.rings.completion.producer, 0x1234_5678);
        h.index(h.rings.post.flags, u32::MAX);
        h.doorbell.signal();
        thread::sleep(Duration::from_millis(100));
        h.produced = cons;
        let junk: Vec<PostDesc> = (0..8)
            .map(|_| PostDesc {
                wr_id: rnd(),
                conn: rnd(),
                mr: rnd(),
                offset: rnd(),
                len: rnd(),
                dir: rnd() as u32,
                reserved: rnd() as u32,
            })
            .collect();
        h.post_raw(&junk);
        thread::sleep(Duration::from_millis(100));
        assert!(
            daemon.alive(),
            "the daemon survived:\n{}",
            daemon.log_text()
        );
        attack_done.store(true, Ordering::Release);

        g.join().expect("the good client");
        g_linux.join().expect("Linux → good");

        // Nothing written outside: the hostile slot beyond its region is
        // zero; the good client's canary is whole, its side connection
        // open, its peer sent nothing.
        let (lo, hi) = (own_off as usize, (own_off + own_len) as usize);
        let bytes = h.slot.bytes();
        let stray = bytes[..lo].iter().chain(&bytes[hi..]).position(|&b| b != 0);
        assert_eq!(
            stray, None,
            "a byte written in the hostile slot outside its region"
        );
        drop(h);
    });
    assert!(
        good.memory(canary).expect("canary") == canary_bytes.as_slice(),
        "the good client's canary region is intact"
    );
    assert_eq!(
        good.state(side).expect("side connection"),
        transports::tcp::State::Established,
        "the forged posts and requests left the good client's connection alone"
    );
    side_peer.set_nonblocking(true).expect("nonblocking");
    let mut one = [0u8; 1];
    assert!(
        matches!(side_peer.read(&mut one), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the good client's peer got nothing from the forged sends"
    );
    // The daemon still serves: a new attachment, its full memory.
    let mut fresh = zerosplit::attach(lab.socket()).expect("a new attachment after the attack");
    fresh
        .register_memory(64 << 20, Access::BOTH)
        .expect("its full memory");
    assert!(daemon.alive());
}

// ---------------------------------------------------------------- 5

/// The daemon's `/stats` (its metrics endpoint inside namespace `a`) as
/// JSON, once every queue has published and `done` says the snapshot is
/// recent enough (snapshots are published every second), or after 5 s.
fn daemon_stats(
    lab: &Lab,
    at: std::net::SocketAddr,
    queues: usize,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let text = in_netns(&lab.a, || http_get(at, "/stats")).unwrap_or_default();
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
            if v["queues"].as_array().is_some_and(|q| q.len() == queues) {
                if done(&v) {
                    return v;
                }
                last = v;
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
    assert!(!last.is_null(), "no /stats with {queues} queues from {at}");
    last
}

/// A Linux echo server on `b` at `port`: echoes one connection until FIN.
fn linux_echo(lab: &Lab, port: u16) -> thread::JoinHandle<()> {
    let listener = in_netns(&lab.b, || {
        TcpListener::bind((lab.pair.b.addr, port)).expect("bind")
    });
    thread::spawn(move || {
        let (mut c, _) = listener.accept().expect("accept");
        c.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let mut w = c.try_clone().expect("clone");
        let _ = std::io::copy(&mut c, &mut w);
    })
}

/// Round trips of `len` bytes with a Linux echo server at `to`, through
/// the daemon: at least `rounds` of them and for at least `at_least`
/// (bounded: 100 000 rounds). Returns (rounds, time in all, the slowest).
fn ping_pong(
    app: &mut zerosplit::Attached,
    to: SocketAddrV4,
    rounds: u64,
    at_least: Duration,
    len: usize,
) -> (u64, Duration, Duration) {
    let mr = app.register_memory(2 * len, Access::BOTH).expect("region");
    let conn = app.connect(to.into()).expect("connect");
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.state(conn).expect("state") != transports::tcp::State::Established {
        assert!(Instant::now() < deadline, "no connection within 10 s");
        app.poll();
    }
    let start = Instant::now();
    let mut worst = Duration::ZERO;
    let mut round = 0;
    while (round < rounds || start.elapsed() < at_least) && round < 100_000 {
        let began = Instant::now();
        app.post_recv(conn, mr, 0, len, round).expect("post recv");
        app.post_send(conn, mr, len, len, round).expect("post send");
        let mut back = false;
        while !back {
            let c = app
                .wait_completion(Duration::from_secs(5))
                .unwrap_or_else(|| panic!("round {round}: no completion within 5 s"));
            back = c.kind == zerosplit::provider::CompletionKind::Recv;
        }
        worst = worst.max(began.elapsed());
        round += 1;
    }
    let took = start.elapsed();
    app.close(conn).expect("close");
    (round, took, worst)
}

/// Two queues (a two-queue veth, `interface.queues = [0, 1]`): connections
/// the application opens take turns over the queues, those Linux opens
/// land where Linux hashes them; every stream byte-exact, and each queue
/// sent payload of its own connections.
#[test]
fn the_daemon_serves_every_configured_queue() {
    let _serial = heavy();
    let lab = Lab::with_queues("zdt5", 2);
    let metrics: std::net::SocketAddr = "127.0.0.1:9471".parse().expect("address");
    // Pinned the other way round from the default, so that each queue's
    // thread shows it took its own entry.
    let daemon = lab.daemon(
        &format!("max_attachments = 2\n\n[interface]\nqueues = [0, 1]\n\n[threads]\ndatapath_cores = [1, 0]\n\n[metrics]\nlisten = \"{metrics}\""),
        "queues.log",
    );
    assert!(
        daemon.log_text().contains("queues [0, 1]"),
        "{}",
        daemon.log_text()
    );
    let threads = || tasks(daemon.pid());
    let first = threads()
        .into_iter()
        .find(|t| t.tid == daemon.pid())
        .expect("the main thread");
    assert_eq!(
        first.cpus, "1",
        "queue 0's thread on datapath_cores[0]: {first:?}"
    );
    let second = threads()
        .into_iter()
        .find(|t| t.comm == "zs-queue-1")
        .unwrap_or_else(|| panic!("a thread for queue 1: {:?}", threads()));
    assert_eq!(
        second.cpus, "0",
        "queue 1's thread on datapath_cores[1]: {second:?}"
    );
    const LEN: u64 = 16 * MIB;
    let mut app = zerosplit::attach(lab.socket()).expect("attach");
    // Two connections out (one per queue) and two in, each way byte-exact.
    both_ways(&lab, &mut app, 5501, 5502, LEN);
    both_ways(&lab, &mut app, 5503, 5504, LEN);
    // Each transfer registers a region of its own (16 MiB): a fresh
    // attachment has room for four more. Linux hashes each of these
    // connections to one of the two queues.
    drop(app);
    let mut app = zerosplit::attach(lab.socket()).expect("attach again");
    for port in 5510..5514 {
        let sent = AtomicU64::new(0);
        thread::scope(|s| {
            s.spawn(|| linux_sends_pattern(&lab, lab.stack(port), MIB, u64::from(port), &sent));
            let mut v = Verify::new(MIB, u64::from(port));
            transfer::listen(&mut app, port, &mut v, &opts()).expect("Linux → attached");
            v.check(MIB, "Linux → attached");
        });
    }
    let field = |v: &serde_json::Value, i: usize, f: &str| v["queues"][i][f].as_u64().unwrap_or(0);
    let placed = |v: &serde_json::Value| field(v, 0, "bytes_placed") + field(v, 1, "bytes_placed");
    let expected = 2 * LEN + 4 * MIB;
    let stats = daemon_stats(&lab, metrics, 2, |v| placed(v) >= expected);
    for i in 0..2 {
        assert!(
            field(&stats, i, "tx_bytes") > LEN,
            "queue {i} sent the payload of its own connection: {}",
            stats["queues"][i]
        );
    }
    assert!(
        placed(&stats) >= expected,
        "every received byte was placed by the queue that owns its connection: {} of {expected}",
        placed(&stats)
    );
    eprintln!(
        "placed per queue: {} / {} bytes",
        field(&stats, 0, "bytes_placed"),
        field(&stats, 1, "bytes_placed")
    );
    let now = threads();
    let ticks = |t: &Task| {
        now.iter()
            .find(|n| n.tid == t.tid)
            .map_or(0, |n| n.cpu_ticks.saturating_sub(t.cpu_ticks))
    };
    let (own, home) = (ticks(&second), ticks(&first));
    eprintln!("CPU ticks over the transfers: queue 1's thread {own}, queue 0's {home}");
    // Each queue carried about half the bytes; a thread that left its
    // queue to the first one's took a few ticks of wake-ups (2 of 20 when
    // tried).
    assert!(
        own >= 3 && own * 4 >= home,
        "queue 1's own thread did queue 1's work: {own} ticks of CPU, queue 0's {home}"
    );
}

/// One thread of a process, as `/proc` shows it.
#[derive(Debug, Clone)]
struct Task {
    tid: u32,
    comm: String,
    /// `Cpus_allowed_list`.
    cpus: String,
    /// User and system time, in clock ticks.
    cpu_ticks: u64,
}

/// The threads of process `pid`.
fn tasks(pid: u32) -> Vec<Task> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|t| {
        let path = t.ok()?.path();
        let tid = path.file_name()?.to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(path.join("comm")).ok()?;
        let status = std::fs::read_to_string(path.join("status")).ok()?;
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
            .trim()
            .to_owned();
        // Fields after the command's closing parenthesis: utime and stime
        // are the 12th and 13th.
        let stat = std::fs::read_to_string(path.join("stat")).ok()?;
        let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let cpu_ticks = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
        Some(Task {
            tid,
            comm: comm.trim().to_owned(),
            cpus,
            cpu_ticks,
        })
    })
    .collect()
}

/// `threads.mode = "dedicated"`: the transport runs on a thread of its
/// own; bytes move byte-exact, and a ping-pong whose daemon loop sleeps
/// as soon as it is idle (`poll = "sleep"`) does not wait for the loop's
/// longest sleep (10 ms) on every round: the transport thread's outputs
/// wake it. (Without that wakeup the rounds took 10 ms each.)
#[test]
fn the_daemon_runs_the_transport_on_a_dedicated_thread() {
    let _serial = heavy();
    let lab = Lab::new("zdt6");
    let daemon = lab.daemon(
        "max_attachments = 2\n\n[threads]\nmode = \"dedicated\"\ndatapath_cores = [0]\ntransport_core = 1\npoll = \"sleep\"",
        "dedicated.log",
    );
    let threads = tasks(daemon.pid());
    assert!(
        threads.iter().any(|t| t.comm == "zs-transport"),
        "a transport thread: {threads:?}"
    );
    let mut app = zerosplit::attach(lab.socket()).expect("attach");
    both_ways(&lab, &mut app, 5601, 5602, 32 * MIB);
    let echo = linux_echo(&lab, 5603);
    const ROUNDS: u64 = 200;
    let (_, took, _) = ping_pong(&mut app, lab.linux(5603), ROUNDS, Duration::ZERO, 64);
    echo.join().expect("echo");
    eprintln!(
        "{ROUNDS} round trips through the dedicated daemon in {took:?} ({:?} each)",
        took / ROUNDS as u32
    );
    assert!(
        took < Duration::from_millis(10) * ROUNDS as u32 / 2,
        "{ROUNDS} round trips took {took:?}: the loop sleeps through the transport thread's outputs"
    );
}

/// A `Connect` whose next hop never answers ARP waits in the daemon
/// without stalling its loop: another application's ping-pong runs
/// through the whole wait with no round near the ARP timeout, and the
/// waiting application gets an error naming ARP after the stack's
/// timeout (2 s). (With the loop resolving ARP itself, one round took
/// the whole 2 s.)
#[test]
fn a_connect_waiting_for_arp_stalls_no_other_application() {
    let _serial = heavy();
    let lab = Lab::new("zdt7");
    let daemon = lab.daemon("max_attachments = 2", "arp.log");
    // A subnet on the daemon's link where nobody answers ARP (added after
    // the daemon took the interface's address).
    lab.a
        .add_ipv4(
            &lab.pair.a.ifname,
            std::net::Ipv4Addr::new(198, 19, 250, 1),
            24,
        )
        .expect("second address");
    let nobody = SocketAddrV4::new(std::net::Ipv4Addr::new(198, 19, 250, 7), 9);
    let mut waiting = zerosplit::attach(lab.socket()).expect("attach");
    let mut busy = zerosplit::attach(lab.socket()).expect("attach");
    let echo = linux_echo(&lab, 5701);
    let (refused, (rounds, took, worst)) = thread::scope(|s| {
        let refused = s.spawn(move || {
            thread::sleep(Duration::from_millis(200));
            let asked = Instant::now();
            (waiting.connect(nobody.into()), asked.elapsed())
        });
        let pp = ping_pong(&mut busy, lab.linux(5701), 100, Duration::from_secs(3), 64);
        (refused.join().expect("connect thread"), pp)
    });
    echo.join().expect("echo");
    eprintln!(
        "{rounds} round trips in {took:?} beside a connect waiting for ARP; slowest {worst:?}; the connect: {refused:?}"
    );
    let (result, waited) = refused;
    let e = result.expect_err("nobody answers ARP").to_string();
    assert!(e.contains("ARP"), "{e}");
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_millis(3500),
        "the connect failed after {waited:?}, not after the 2 s ARP timeout"
    );
    assert!(
        worst < Duration::from_millis(500),
        "a round trip took {worst:?} while another application's connect waited for ARP:\n{}",
        daemon.log_text()
    );
}
