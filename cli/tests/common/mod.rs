//! The rig of the `zerosplit exec` tests: namespaces joined by a veth,
//! programs started under exec (killed when dropped), logs, the namespace
//! kernel's TCP counters that prove a program's connections were
//! zerosplit's, and C programs compiled for a test.
//!
//! Each test file includes it (`mod common;`)
//! and uses what it needs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use zerosplit_lab::{NetNs, Offloads, VethPair};
use zerosplit_tests::require_root;

pub const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");

/// The tests share the two cores: one at a time.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn require_program(program: &'static str) {
    if let Err(e) = zerosplit_lab::require_tool(program) {
        panic!("{e} (the test runs the stock program)");
    }
}

/// Two namespaces `<prefix>a` and `<prefix>b` joined by a veth pair.
pub fn lab(prefix: &str) -> (NetNs, NetNs, VethPair) {
    require_root();
    let a = NetNs::new(&format!("{prefix}a")).expect("netns");
    let b = NetNs::new(&format!("{prefix}b")).expect("netns");
    // Both ends as a user has them: the kernel peer's TX checksum offload
    // on, so its segments reach the program's stack with partial checksums.
    let pair = VethPair::create_with_offloads(&a, &b, 1500, 1, Offloads::Default).expect("veth");
    (a, b, pair)
}

/// A child that is killed when dropped.
pub struct Running(pub Child);

impl Drop for Running {
    /// SIGTERM first: `timeout` passes it on to the program (SIGKILL would
    /// leave the program running without its namespace), then SIGKILL.
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        if wait_exit(&mut self.0, Duration::from_secs(10)).is_none() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Starts `zerosplit exec --iface IF -- program args` in `ns`, its stderr
/// going to `log`.
pub fn exec_in(ns: &NetNs, iface: &str, log: &Path, program: &[&str]) -> Running {
    exec_with(ns, iface, &[], log, program)
}

/// [`exec_in`] with more options of `exec` (`--metrics ADDR`...).
pub fn exec_with(ns: &NetNs, iface: &str, opts: &[&str], log: &Path, program: &[&str]) -> Running {
    let mut args = vec!["90", BIN, "exec", "--iface", iface];
    args.extend_from_slice(opts);
    args.push("--");
    args.extend_from_slice(program);
    let err = std::fs::File::create(log).expect("log file");
    let out = err.try_clone().expect("log file");
    let child = ns
        .command("timeout", args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn zerosplit exec");
    Running(child)
}

/// Waits (at most 20 s) until `log` contains `needle`.
pub fn wait_log(log: &Path, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no {needle:?} in the program's output within 20 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn run_in(ns: &NetNs, secs: u32, args: &[&str]) -> Output {
    let secs = secs.to_string();
    let mut all = vec![secs.as_str()];
    all.extend_from_slice(args);
    ns.command("timeout", all)
        .stdin(Stdio::null())
        .output()
        .expect("run")
}

pub fn ok_stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The namespace kernel's TCP counters of `/proc/net/snmp` that a
/// connection of its own would move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelTcp {
    pub active_opens: u64,
    pub passive_opens: u64,
    pub in_segs: u64,
}

/// The namespace kernel's TCP ActiveOpens, PassiveOpens and InSegs.
pub fn kernel_tcp(ns: &NetNs) -> KernelTcp {
    let out = ns.exec_ok("cat", ["/proc/net/snmp"]).expect("snmp");
    let out = String::from_utf8_lossy(&out.stdout);
    let mut lines = out.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let get = |key: &str| {
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == key)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(u64::MAX)
    };
    KernelTcp {
        active_opens: get("ActiveOpens"),
        passive_opens: get("PassiveOpens"),
        in_segs: get("InSegs"),
    }
}

/// The namespace kernel's TCP ActiveOpens and PassiveOpens.
pub fn kernel_opens(ns: &NetNs) -> (u64, u64) {
    let k = kernel_tcp(ns);
    (k.active_opens, k.passive_opens)
}

/// The kernel of `ns` opened no TCP connection: they were zerosplit's.
pub fn assert_no_kernel_opens(ns: &NetNs) {
    let (active, passive) = kernel_opens(ns);
    assert_eq!(
        (active, passive),
        (0, 0),
        "kernel TCP opens (active, passive) in zerosplit's namespace"
    );
}

pub fn data(file: &str) -> String {
    format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// A directory for the programs' logs, removed when dropped.
pub struct TempDir(pub PathBuf);

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl TempDir {
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn tempdir() -> TempDir {
    let d = std::env::temp_dir().join(format!(
        "zs-exec-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    TempDir(d)
}

/// How far iperf3's received count may trail the sent one: iperf3 stops
/// counting at the client's TEST_END message, and what the sender's kernel
/// still buffers then (per stream: at most its send buffer, 4 MiB, and
/// our 1 MiB receive ring) is written but not counted. With Linux on both ends the
/// receiver keeps up and the buffer is empty at the end; with a receiver
/// slower than the sender it is not.
pub const IN_FLIGHT: u64 = 6 << 20;

/// [`IN_FLIGHT`] for `streams` parallel streams.
pub fn in_flight(streams: u64) -> u64 {
    streams * IN_FLIGHT
}

/// (bytes sent, bytes received) of an iperf3 `-J` report's summary.
pub fn iperf_bytes(json: &str, what: &str) -> (u64, u64) {
    let v: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{what}: iperf3 JSON: {e}\n{json}"));
    let end = &v["end"];
    let get = |k: &str| end[k]["bytes"].as_u64().unwrap_or(0);
    (get("sum_sent"), get("sum_received"))
}

/// `redis-server` on `port` as the tests run it: every interface,
/// persistence off, its files in `dir`.
pub fn redis_server<'a>(port: &'a str, dir: &'a Path) -> [&'a str; 13] {
    [
        "redis-server",
        "--port",
        port,
        "--bind",
        "0.0.0.0",
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        dir.to_str().expect("utf-8 dir"),
    ]
}

/// The first child of process `pid` (the program `timeout` runs).
pub fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Ok(Some(s)) = child.try_wait() {
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Compiles `tests/data/<name>.c` with `cc` into `dir`; the program's path.
pub fn compile_c(dir: impl AsRef<Path>, name: &str) -> String {
    require_program("cc");
    let out = dir.as_ref().join(name);
    let status = std::process::Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&out)
        .arg(data(&format!("{name}.c")))
        .status()
        .expect("run cc");
    assert!(status.success(), "cc {name}.c: {status}");
    out.to_str().expect("utf-8 path").to_owned()
}

/// Starts `tests/data/shim_peer.py` in `ns` on `addr:port` (it serves the
/// probes' ECHO and other requests for `secs` seconds) and waits for its
/// "ready" line; killed when dropped.
pub fn shim_peer(ns: &NetNs, addr: &str, port: &str, secs: &str) -> Running {
    use std::io::Read;
    let mut peer = Running(
        ns.command(
            "timeout",
            ["120", "python3", &data("shim_peer.py"), addr, port, secs],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("peer"),
    );
    let mut ready = [0u8; 6];
    peer.0
        .stdout
        .as_mut()
        .expect("stdout")
        .read_exact(&mut ready)
        .expect("peer ready");
    peer
}

/// `zerosplit daemon` on `iface` in `ns` with configuration `config`, its
/// socket and log in `dir`, up.
pub fn start_daemon(ns: &NetNs, iface: &str, dir: &TempDir, config: &str) -> Running {
    let path = dir.join("daemon.toml");
    std::fs::write(&path, config).expect("daemon config");
    let log = dir.join("daemon.log");
    let socket = dir.join("daemon.sock");
    let err = std::fs::File::create(&log).expect("daemon log");
    let child = ns
        .command(
            "timeout",
            [
                "150",
                BIN,
                "daemon",
                "--config",
                path.to_str().expect("utf-8"),
                "--iface",
                iface,
                "--socket",
                socket.to_str().expect("utf-8"),
                "--drain",
                "0",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("start zerosplit daemon");
    let daemon = Running(child);
    wait_log(&log, "zerosplit daemon: serving");
    daemon
}

/// Starts `program` under `zerosplit exec --daemon SOCKET` (the daemon of
/// [`start_daemon`] in `dir`) in `ns`.
pub fn attached(ns: &NetNs, iface: &str, dir: &TempDir, log: &Path, program: &[&str]) -> Running {
    let socket = dir.join("daemon.sock");
    exec_with(
        ns,
        iface,
        &["--daemon", socket.to_str().expect("utf-8")],
        log,
        program,
    )
}

/// The nginx configuration: the package's style (a master and worker
/// processes, daemonized, epoll and its default `accept_mutex off`,
/// `sendfile` and `tcp_nopush` on as Debian's nginx.conf has them), on
/// port 8080 of every address, files from `root`.
pub fn nginx_conf(dir: &TempDir, root: &Path, o: &NginxOpts) -> String {
    format!(
        "worker_processes 2;\n\
         pid {pid};\n\
         error_log {err} info;\n\
         events {{ worker_connections 1024; accept_mutex {mutex}; }}\n\
         http {{\n\
             sendfile on;\n\
             tcp_nopush on;\n\
             keepalive_timeout 65;\n\
             log_format worker '$pid';\n\
             access_log {access_log};\n\
             client_body_temp_path {tmp};\n\
             server {{ listen {listen}; root {root}; }}\n\
         }}\n",
        mutex = if o.accept_mutex { "on" } else { "off" },
        listen = o.listen,
        access_log = o.access_log,
        pid = dir.join("nginx.pid").display(),
        err = dir.join("nginx-error.log").display(),
        tmp = dir.join("body").display(),
        root = root.display(),
    )
}

/// Stops the daemonized nginx whose pid file this is, however the test
/// ends (its processes outlive exec's child).
pub struct Nginx(pub std::path::PathBuf);

impl Drop for Nginx {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(&self.0).unwrap_or_default();
        let pid = pid.trim();
        if pid.is_empty() {
            return;
        }
        let _ = std::process::Command::new("kill")
            .args(["-TERM", pid])
            .status();
        for _ in 0..50 {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::process::Command::new("pkill")
            .args(["-KILL", "-P", pid])
            .status();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", pid])
            .status();
    }
}

/// nginx as its package runs it, under `zerosplit exec` attached to the
/// daemon in `dir` (the exec log `log`): its configuration, files and
/// logs in `dir`, up with its two workers. The guard stops it.
pub fn start_nginx(ns: &NetNs, iface: &str, dir: &TempDir, log: &Path) -> (Running, Nginx) {
    start_nginx_with(ns, iface, dir, log, &NginxOpts::default())
}

/// What a test changes in [`nginx_conf`].
pub struct NginxOpts {
    /// The `listen` directive's parameters.
    pub listen: String,
    /// The `access_log` directive's (the `worker` format logs the
    /// serving worker's pid).
    pub access_log: String,
    /// `accept_mutex on` (nginx's default is off).
    pub accept_mutex: bool,
}

impl Default for NginxOpts {
    fn default() -> Self {
        NginxOpts {
            listen: "8080".into(),
            access_log: "off".into(),
            accept_mutex: false,
        }
    }
}

/// [`start_nginx`] with `o`'s directives.
pub fn start_nginx_with(
    ns: &NetNs,
    iface: &str,
    dir: &TempDir,
    log: &Path,
    o: &NginxOpts,
) -> (Running, Nginx) {
    let root = dir.join("www");
    std::fs::create_dir_all(&root).expect("www");
    std::fs::create_dir_all(dir.join("body")).expect("body temp");
    // The workers run as nginx's unprivileged user: they read the files.
    for d in [&dir.0, &root] {
        let _ = std::process::Command::new("chmod")
            .arg("755")
            .arg(d)
            .status();
    }
    std::fs::write(root.join("index.html"), "hello from nginx\n").expect("index");
    let conf = dir.join("nginx.conf");
    let text = nginx_conf(dir, &root, o);
    std::fs::write(&conf, text).expect("nginx.conf");
    let conf_arg = conf.to_str().expect("utf-8");
    let exec = attached(ns, iface, dir, log, &["nginx", "-c", conf_arg]);
    // It daemonizes: the master and its workers outlive exec's child.
    let guard = Nginx(dir.join("nginx.pid"));
    let err_log = dir.join("nginx-error.log");
    let text = wait_log(&err_log, "start worker process");
    wait_log(log, "attached to the daemon at");
    std::thread::sleep(Duration::from_millis(500));
    let workers = std::fs::read_to_string(&err_log)
        .unwrap_or_default()
        .matches("start worker process ")
        .count();
    assert_eq!(workers, 2, "two workers:\n{text}");
    (exec, guard)
}

/// What `ab` printed after `label`.
pub fn ab_field<'a>(out: &'a str, label: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .map(|v| v.split_whitespace().next().unwrap_or(""))
}

/// `ab -c C -n N URL` from `ns`: `Ok` if every request completed with a
/// 200, else what ab printed.
pub fn ab_all_ok(ns: &NetNs, c: u32, n: u32, url: &str) -> Result<(), String> {
    let (c_arg, n_arg) = (c.to_string(), n.to_string());
    let out = run_in(ns, 120, &["ab", "-c", &c_arg, "-n", &n_arg, url]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ok = out.status.success()
        && ab_field(&text, "Complete requests:") == Some(n_arg.as_str())
        && ab_field(&text, "Failed requests:") == Some("0")
        && !text.contains("Non-2xx responses");
    if ok {
        Ok(())
    } else {
        Err(text)
    }
}
