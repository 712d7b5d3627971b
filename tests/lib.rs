//! Shared helpers for the integration tests: root check, running code
//! inside a network namespace, and reading an interface's XDP state.
//!
//! The tests need root (namespaces, XDP). Without it they fail with a
//! message that says so instead of passing silently.

use std::{
    thread,
    time::{Duration, Instant},
};

use zerosplit_lab::NetNs;

/// Panics with a clear message unless the process runs as root (effective
/// uid 0), which namespaces and XDP need.
pub fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u32>().ok());
    assert_eq!(
        euid,
        Some(0),
        "these tests create network namespaces and attach XDP programs: run them as root"
    );
}

pub use zerosplit_lab::in_netns;

/// How XDP is attached to `ifname` in `ns`, from the link's `IFLA_XDP`
/// over rtnetlink, in `ip -d link show`'s words: `Some("xdp")` (native),
/// `Some("xdpgeneric")`, `Some("xdpoffload")`, `Some("xdpmulti")`, or
/// `None` when no program is attached.
///
/// # Panics
///
/// If the lookup fails (e.g. the interface does not exist).
pub fn xdp_attachment(ns: &NetNs, ifname: &str) -> Option<String> {
    ns.link(ifname)
        .unwrap_or_else(|e| panic!("{e}"))
        .xdp
        .map(str::to_owned)
}

/// Sends `count` ICMP echoes from `ns` to `to`, `interval` apart, each
/// waiting up to `timeout` for its reply (`ping -c COUNT -i INTERVAL -W
/// TIMEOUT`, without the binary); returns how many were answered.
pub fn pings(
    ns: &NetNs,
    to: std::net::Ipv4Addr,
    count: u32,
    interval: Duration,
    timeout: Duration,
) -> u32 {
    let mut answered = 0;
    for i in 0..count {
        if i > 0 {
            thread::sleep(interval);
        }
        match zerosplit_lab::ping(ns, to, timeout) {
            Ok(_) => answered += 1,
            Err(zerosplit_lab::PingError::NoReply { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    answered
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes; returns
/// whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until another thread raises `flag`, e.g. "the steering
/// entries are installed", instead of sleeping for a guessed time.
///
/// # Panics
/// If the flag is not raised within `timeout`.
pub fn wait_for(flag: &std::sync::atomic::AtomicBool, timeout: Duration, what: &str) {
    let ok = wait_until(timeout, || flag.load(std::sync::atomic::Ordering::Acquire));
    assert!(ok, "timed out after {timeout:?} waiting for: {what}");
}

/// A kernel TCP connection to `to`, retried every 50 ms while it is
/// refused or times out (the listener may still be coming up), for at most
/// `within`.
///
/// # Panics
/// If no attempt succeeded within `within`.
pub fn connect_retrying(
    to: impl Into<std::net::SocketAddr>,
    within: Duration,
) -> std::net::TcpStream {
    let to = to.into();
    let deadline = Instant::now() + within;
    loop {
        match std::net::TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
            Ok(c) => return c,
            Err(e) if Instant::now() >= deadline => panic!("connect to {to}: {e}"),
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Kernel side of a transfer: connects to `to` (retrying while the stack
/// comes up), sends `payload`, half-closes and reads until the peer's FIN.
///
/// # Panics
/// If the connection or the send fails.
pub fn linux_sends(to: std::net::SocketAddrV4, payload: &[u8]) {
    use std::io::{Read, Write};
    let mut c = connect_retrying(to, Duration::from_secs(15));
    c.write_all(payload).expect("kernel send");
    c.shutdown(std::net::Shutdown::Write).expect("FIN");
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    let _ = c.read_to_end(&mut Vec::new());
}

/// Kernel side of a transfer: accepts one connection on `listener` and
/// reads it until its FIN.
///
/// # Panics
/// If the accept or a read fails.
pub fn linux_receives(listener: &std::net::TcpListener, len: usize) -> Vec<u8> {
    use std::io::Read;
    let (mut c, _) = listener.accept().expect("kernel accept");
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    let mut got = Vec::with_capacity(len);
    c.read_to_end(&mut got).expect("read until FIN");
    got
}

/// Raises its flag when dropped. The client side of a test holds one while
/// a server loop runs until that flag: if the client side panics, the
/// server still stops, and the test fails instead of hanging.
#[derive(Debug)]
pub struct RaiseOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Serialises the heavy busy-polling transfers of one test binary: on a
/// 2-core CI machine, several at once would make results depend on
/// scheduling. Hold the guard for the whole test; a panicking holder does
/// not block the others.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `len` pseudo-random bytes (xorshift64) from `seed`: payloads that differ
/// per connection and per offset, so a misplaced or mixed-up byte shows.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Pattern::new(len as u64, seed).fill(&mut v);
    v
}

/// The bytes of [`pattern`] as a `Read`er, for streams too long to hold
/// in memory (the chaos soak's gigabytes).
#[derive(Debug, Clone)]
pub struct Pattern {
    x: u64,
    left: u64,
}

impl Pattern {
    /// The first `len` bytes of `pattern(.., seed)`.
    pub fn new(len: u64, seed: u64) -> Self {
        Pattern {
            x: seed | 1,
            left: len,
        }
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            *b = self.x as u8;
        }
    }
}

impl std::io::Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        self.fill(&mut buf[..n]);
        self.left -= n as u64;
        Ok(n)
    }
}

/// SHA-256 of a stream, computed by `sha256sum` fed through a pipe (no
/// hashing crate in the workspace; coreutils is everywhere the tests run).
#[derive(Debug)]
pub struct Sha256Pipe {
    child: std::process::Child,
}

impl Sha256Pipe {
    /// Starts `sha256sum`.
    ///
    /// # Panics
    /// If it cannot be started.
    pub fn new() -> Self {
        let child = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start sha256sum (coreutils)");
        Sha256Pipe { child }
    }

    /// The hex digest of everything written.
    ///
    /// # Panics
    /// If `sha256sum` fails.
    pub fn finish(mut self) -> String {
        drop(self.child.stdin.take());
        let out = self.child.wait_with_output().expect("sha256sum");
        assert!(out.status.success(), "sha256sum failed");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned()
    }
}

impl Default for Sha256Pipe {
    fn default() -> Self {
        Self::new()
    }
}

impl std::io::Write for Sha256Pipe {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.child.stdin.as_mut() {
            Some(stdin) => stdin.write(buf),
            None => Err(std::io::Error::other("sha256sum finished")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `GET path` on `to` (HTTP/1.0, 5 s timeouts): the whole response, head
/// and body.
///
/// # Errors
/// Connecting, writing or reading failed.
pub fn http_get(to: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: zs\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text)
}
