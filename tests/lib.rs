//! Shared helpers for the integration tests: root check, running code
//! inside a network namespace, and reading an interface's XDP state.
//!
//! The tests need root (namespaces, XDP). Without it they fail with a
//! message that says so instead of passing silently.

use std::{
    thread,
    time::{Duration, Instant},
};

use bench::NetNs;

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

pub use bench::netns::in_netns;

/// How XDP is attached to `ifname` in `ns`, from `ip -d link show`:
/// `Some("xdp")` (native), `Some("xdpgeneric")`, `Some("xdpoffload")`, or
/// `None` when no program is attached.
///
/// # Panics
///
/// If `ip` fails (e.g. the interface does not exist).
pub fn xdp_attachment(ns: &NetNs, ifname: &str) -> Option<String> {
    let out = ns
        .exec_ok("ip", ["-d", "link", "show", "dev", ifname])
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or_default();
    first
        .split_whitespace()
        .find(|w| matches!(*w, "xdp" | "xdpgeneric" | "xdpoffload" | "xdpmulti"))
        .map(str::to_owned)
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
pub fn connect_retrying(to: std::net::SocketAddrV4, within: Duration) -> std::net::TcpStream {
    let deadline = Instant::now() + within;
    loop {
        match std::net::TcpStream::connect_timeout(&to.into(), Duration::from_secs(2)) {
            Ok(c) => return c,
            Err(e) if Instant::now() >= deadline => panic!("connect to {to}: {e}"),
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
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
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
