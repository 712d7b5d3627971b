//! The apps section: stock programs under `zerosplit exec` — standalone
//! (a stack of the program's own) and attached to a `zerosplit daemon` on
//! the interface — beside the same programs on kernel TCP, each
//! measurement on a fresh veth pair (MTU
//! 1500, TX checksum offload off as in the main rows, a `pfifo` queue on
//! the client's veth), Linux clients in the peer namespace:
//!
//! - iperf3: `iperf3 -s` under exec (or plain) with Linux's `iperf3 -c`,
//!   both directions; goodput, compared with the kernel server and with
//!   the main table's native-API rows of the same run (`linux-zs`,
//!   `zs-linux`, MTU 1500, rtc);
//! - redis: `redis-server` (persistence off) under exec (or plain) with
//!   `redis-benchmark -t set,get -c 50 -P 16`, 16 KiB and 3-byte values;
//!   ops/s;
//! - ping-pong: `redis-benchmark -t ping_inline -c 1 -P 1`, one request at
//!   a time: p50 round trip, beside the `linux-zs` row's ping-pong (a Linux
//!   client, a zerosplit server on the native API).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::options::SuiteOptions;
use super::report::{AppPoint, AppsSection, Row, Target};
use super::scenario::{Family, Scenario, ThreadMode};
use super::stats::Summary;
use zerosplit_lab::{require_tool, NetNs, VethPair};

/// The MTU of the section.
pub const APPS_MTU: u32 = 1500;
const IPERF_PORT: &str = "5398";
const REDIS_PORT: &str = "6398";

/// Where the program's sockets live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// `zerosplit exec --standalone`.
    Exec,
    /// `zerosplit exec --daemon` with a daemon on the interface.
    Attached,
    /// Kernel TCP.
    Kernel,
}

impl Side {
    const ALL: [Side; 3] = [Side::Exec, Side::Attached, Side::Kernel];

    fn label(self) -> &'static str {
        match self {
            Side::Exec => "exec",
            Side::Attached => "attached",
            Side::Kernel => "kernel",
        }
    }
}

/// A child killed (SIGTERM, then SIGKILL) when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let end = Instant::now() + Duration::from_secs(5);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One fresh pair: A serves, B is the Linux client; `dir` holds a
/// daemon's configuration, socket and log (removed when dropped).
struct Lab {
    a: NetNs,
    b: NetNs,
    pair: VethPair,
    dir: std::path::PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The daemon's configuration: room for the program and exec's check,
/// and the frames and rings `zerosplit exec` takes standalone (its
/// defaults), so both modes run on the same datapath sizes.
const DAEMON_CONFIG: &str = "[daemon]\nmax_attachments = 2\nmemory_per_attachment = \"256MiB\"\nmax_posted = 4096\n\n[umem]\nframe_count = 16384\ntx_frames = 2048\nfill_ring = 16384\nrx_ring = 8192\n";

impl Lab {
    fn new() -> Result<Lab, String> {
        let a = NetNs::new("zbxa").map_err(|e| e.to_string())?;
        let b = NetNs::new("zbxb").map_err(|e| e.to_string())?;
        let pair = VethPair::create(&a, &b, APPS_MTU).map_err(|e| e.to_string())?;
        // The Linux client's veth gets a queue, as a NIC's TX has: when the
        // receiving veth's XDP ring (256 entries, fixed) is full, the
        // sender waits instead of dropping. A receiver without XDP (kernel
        // TCP) never fills it, so both sides get the same path.
        b.exec_ok(
            "tc",
            [
                "qdisc",
                "replace",
                "dev",
                &pair.b.ifname,
                "root",
                "pfifo",
                "limit",
                "10000",
            ],
        )
        .map_err(|e| format!("adding a qdisc to the client's veth: {e}"))?;
        let dir = std::env::temp_dir().join(format!("zs-bench-apps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Lab { a, b, pair, dir })
    }

    /// `zerosplit daemon` on A's veth, up.
    fn daemon(&self, opts: &SuiteOptions) -> Result<Server, String> {
        let config = self.dir.join("daemon.toml");
        let log = self.dir.join("daemon.log");
        std::fs::write(&config, DAEMON_CONFIG).map_err(|e| e.to_string())?;
        let err = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let bin = opts.peer_program.display().to_string();
        let daemon = self
            .a
            .command(
                &bin,
                [
                    "daemon".as_ref(),
                    "--config".as_ref(),
                    config.as_os_str(),
                    "--iface".as_ref(),
                    self.pair.a.ifname.as_ref(),
                    "--socket".as_ref(),
                    self.dir.join("daemon.sock").as_os_str(),
                    "--drain".as_ref(),
                    "0".as_ref(),
                ],
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map(Server)
            .map_err(|e| format!("starting zerosplit daemon: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("zerosplit daemon: serving") {
                return Ok(daemon);
            }
            if Instant::now() > deadline {
                return Err(format!("the daemon did not come up within 20 s: {text}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `program` in A as `side` says; the servers to stop, the
    /// program first.
    fn serve(
        &self,
        opts: &SuiteOptions,
        side: Side,
        program: &[&str],
    ) -> Result<Vec<Server>, String> {
        let mut servers = Vec::new();
        let socket = self.dir.join("daemon.sock");
        let bin = opts.peer_program.display().to_string();
        let mut cmd = match side {
            Side::Kernel => self.a.command(program[0], &program[1..]),
            Side::Exec | Side::Attached => {
                let mut args: Vec<&std::ffi::OsStr> = vec![
                    "exec".as_ref(),
                    "--iface".as_ref(),
                    self.pair.a.ifname.as_ref(),
                ];
                if side == Side::Attached {
                    servers.push(self.daemon(opts)?);
                    args.extend(["--daemon".as_ref(), socket.as_os_str()]);
                } else {
                    args.push("--standalone".as_ref());
                }
                args.push("--".as_ref());
                args.extend(program.iter().map(std::ffi::OsStr::new));
                self.a.command(&bin, args)
            }
        };
        let program = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Server)
            .map_err(|e| format!("starting {}: {e}", program[0]))?;
        servers.insert(0, program);
        Ok(servers)
    }

    fn server_addr(&self) -> String {
        self.pair.a.addr.to_string()
    }
}

/// iperf3 goodput (Gbit/s at the receiver), Linux client in B.
fn iperf(opts: &SuiteOptions, side: Side, reverse: bool) -> Result<f64, String> {
    let lab = Lab::new()?;
    let _srv = lab.serve(opts, side, &["iperf3", "-s", "-4", "-1", "-p", IPERF_PORT])?;
    let addr = lab.server_addr();
    let secs = format!("{:.1}", opts.seconds.max(1.0));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut args = vec![
            "60", "iperf3", "-c", &addr, "-p", IPERF_PORT, "-t", &secs, "-J",
        ];
        if reverse {
            args.push("-R");
        }
        let out = lab
            .b
            .command("timeout", &args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("iperf3 client: {e}"))?;
        match super::iperf::parse(&String::from_utf8_lossy(&out.stdout)) {
            Ok(r) if r.seconds > 0.0 => return Ok(r.bytes as f64 * 8.0 / r.seconds / 1e9),
            Ok(_) => return Err("iperf3 measured no time".into()),
            Err(e) if e.contains("refused") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
}

/// `redis-benchmark --csv` rows: test name → (rps, p50 ms).
fn redis_csv(csv: &str) -> Vec<(String, f64, f64)> {
    csv.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(|v| v.trim_matches('"')).collect();
            let rps = f.get(1)?.parse().ok()?;
            let p50 = f.get(4).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
            Some((f[0].to_string(), rps, p50))
        })
        .collect()
}

/// Redis figures: SET/GET ops/s at 16 KiB and 3 B, PING p50 µs.
fn redis(opts: &SuiteOptions, side: Side) -> Result<[f64; 5], String> {
    let lab = Lab::new()?;
    let dir = std::env::temp_dir();
    let dir = dir.to_str().unwrap_or("/tmp");
    let _srv = lab.serve(
        opts,
        side,
        &[
            "redis-server",
            "--port",
            REDIS_PORT,
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir,
        ],
    )?;
    let addr = lab.server_addr();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = lab
            .b
            .command(
                "timeout",
                ["5", "redis-cli", "-h", &addr, "-p", REDIS_PORT, "ping"],
            )
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-cli: {e}"))?;
        if String::from_utf8_lossy(&out.stdout).contains("PONG") {
            break;
        }
        if Instant::now() > deadline {
            return Err("redis-server did not answer PING within 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (big, small) = if opts.quick {
        ("20000", "100000")
    } else {
        ("100000", "400000")
    };
    let bench = |args: &[&str]| -> Result<Vec<(String, f64, f64)>, String> {
        let mut all = vec![
            "120",
            "redis-benchmark",
            "-h",
            &addr,
            "-p",
            REDIS_PORT,
            "--csv",
        ];
        all.extend_from_slice(args);
        let out = lab
            .b
            .command("timeout", &all)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-benchmark: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-benchmark {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(redis_csv(&String::from_utf8_lossy(&out.stdout)))
    };
    let rps = |rows: &[(String, f64, f64)], t: &str| {
        rows.iter()
            .find(|r| r.0 == t)
            .map(|r| r.1)
            .ok_or(format!("redis-benchmark printed no {t} row"))
    };
    let large = bench(&[
        "-t", "set,get", "-n", big, "-c", "50", "-P", "16", "-d", "16384",
    ])?;
    let tiny = bench(&[
        "-t", "set,get", "-n", small, "-c", "50", "-P", "16", "-d", "3",
    ])?;
    let ping = bench(&["-t", "ping_inline", "-n", "20000", "-c", "1", "-P", "1"])?;
    let p50 = ping
        .iter()
        .find(|r| r.0 == "PING_INLINE")
        .map(|r| r.2 * 1000.0)
        .ok_or("redis-benchmark printed no PING_INLINE row")?;
    Ok([
        rps(&large, "SET")?,
        rps(&large, "GET")?,
        rps(&tiny, "SET")?,
        rps(&tiny, "GET")?,
        p50,
    ])
}

/// Runs the section (`None` when `opts.apps` is off).
pub fn run(opts: &SuiteOptions, rows: &[Row]) -> Option<AppsSection> {
    if !opts.apps {
        return None;
    }
    let native = |sc: Scenario| {
        rows.iter()
            .find(|r| {
                r.scenario == sc
                    && r.mtu == APPS_MTU
                    && r.threads == Some(ThreadMode::Rtc)
                    && r.family == Family::Ipv4
            })
            .and_then(|r| r.goodput_gbps)
            .map(|s| s.median)
    };
    // The native counterpart of one request at a time: the linux-zs row's
    // ping-pong (a Linux client, a zerosplit server on the provider API).
    let native_rtt = rows
        .iter()
        .find(|r| {
            r.scenario == Scenario::LinuxZs
                && r.mtu == APPS_MTU
                && r.threads == Some(ThreadMode::Rtc)
                && r.family == Family::Ipv4
        })
        .and_then(|r| r.latency.as_ref())
        .and_then(|l| l.p50_us)
        .map(|s| s.median);
    let names: [(&str, &str, bool, Option<f64>); 7] = [
        (
            "iperf3 linux→server",
            "Gbit/s",
            true,
            native(Scenario::LinuxZs),
        ),
        (
            "iperf3 -R server→linux",
            "Gbit/s",
            true,
            native(Scenario::ZsLinux),
        ),
        ("redis SET 16KiB -c 50 -P 16", "ops/s", true, None),
        ("redis GET 16KiB -c 50 -P 16", "ops/s", true, None),
        ("redis SET 3B -c 50 -P 16", "ops/s", true, None),
        ("redis GET 3B -c 50 -P 16", "ops/s", true, None),
        ("redis PING -c 1 p50", "µs", false, native_rtt),
    ];
    let mut samples: Vec<[Vec<f64>; 3]> = names.iter().map(|_| Default::default()).collect();
    let mut errors = Vec::new();
    let mut have = |tools: &[&'static str]| {
        tools.iter().all(|&tool| {
            require_tool(tool)
                .map_err(|e| errors.push(e.to_string()))
                .is_ok()
        })
    };
    let have_iperf = have(&["iperf3"]);
    let have_redis = have(&["redis-server", "redis-benchmark", "redis-cli"]);
    'rounds: for round in 0..opts.runs {
        // Rotate which side goes first, as the main rows alternate.
        let mut order = Side::ALL;
        order.rotate_left(round % Side::ALL.len());
        for side in order {
            if opts
                .stop
                .as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
            {
                break 'rounds;
            }
            let label = side.label();
            let at = side as usize;
            if opts.progress {
                eprintln!("apps round {}/{}: {label}", round + 1, opts.runs);
            }
            if have_iperf {
                for (i, reverse) in [(0, false), (1, true)] {
                    match iperf(opts, side, reverse) {
                        Ok(v) => samples[i][at].push(v),
                        Err(e) => errors.push(format!("{} ({label}): {e}", names[i].0)),
                    }
                }
            }
            if have_redis {
                match redis(opts, side) {
                    Ok(v) => {
                        for (k, x) in v.into_iter().enumerate() {
                            samples[2 + k][at].push(x);
                        }
                    }
                    Err(e) => errors.push(format!("redis ({label}): {e}")),
                }
            }
        }
    }
    let points = names
        .iter()
        .zip(samples)
        .map(|(&(name, unit, higher, native), [e, d, k])| AppPoint {
            name: name.to_string(),
            unit: unit.to_string(),
            higher_is_better: higher,
            exec: Summary::of(&e),
            attached: Summary::of(&d),
            kernel: Summary::of(&k),
            native,
        })
        .collect();
    Some(AppsSection {
        runs: opts.runs,
        points,
        errors,
    })
}

/// The section's targets: iperf3 under exec ≥ 0.9× the native-API row in
/// the same direction, redis SET/GET with 16 KiB values ≥ 1.0× kernel TCP.
pub fn targets(section: &AppsSection) -> Vec<Target> {
    let mut out = Vec::new();
    for p in &section.points {
        let (value, goal, what) = if p.name.starts_with("iperf3") {
            (p.vs_native(), 0.9, "÷ the native-API row, same direction")
        } else if p.name.contains("16KiB") {
            (p.vs_kernel(), 1.0, "÷ the same program on kernel TCP")
        } else {
            continue;
        };
        out.push(Target {
            name: format!("{} under exec {what}, MTU {APPS_MTU}", p.name),
            met: value.map(|v| v >= goal),
            value,
            goal,
            at_most: false,
        });
    }
    out
}

/// The section as text.
pub fn render(section: &AppsSection) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "\napps (stock programs, MTU {APPS_MTU}, medians of {} run(s); Linux clients in the peer namespace)\n",
        section.runs
    );
    let _ = writeln!(
        out,
        "{:<30} {:>8} {:>12} {:>12} {:>9} {:>12} {:>9} {:>10} {:>9}",
        "measure", "unit", "exec", "attached", "xExec", "kernel", "xKernel", "native", "xNative"
    );
    let num = |v: Option<f64>| match v {
        Some(v) if v >= 1000.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
        None => "-".into(),
    };
    for p in &section.points {
        let _ = writeln!(
            out,
            "{:<30} {:>8} {:>12} {:>12} {:>9} {:>12} {:>9} {:>10} {:>9}",
            p.name,
            p.unit,
            num(p.exec.map(|s| s.median)),
            num(p.attached.map(|s| s.median)),
            num(p.attached_vs_exec()),
            num(p.kernel.map(|s| s.median)),
            num(p.vs_kernel()),
            num(p.native),
            num(p.vs_native()),
        );
    }
    for e in &section.errors {
        let _ = writeln!(out, "  error: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(name: &str, higher: bool, exec: f64, kernel: f64, native: Option<f64>) -> AppPoint {
        AppPoint {
            name: name.into(),
            unit: "u".into(),
            higher_is_better: higher,
            exec: Summary::of(&[exec]),
            attached: Summary::of(&[exec * 0.5]),
            kernel: Summary::of(&[kernel]),
            native,
        }
    }

    #[test]
    fn ratios_and_targets_read_the_right_figures() {
        let s = AppsSection {
            runs: 1,
            points: vec![
                point("iperf3 linux→server", true, 1.8, 4.0, Some(2.0)),
                point("redis SET 16KiB -c 50 -P 16", true, 150.0, 100.0, None),
                point("redis PING -c 1 p50", false, 40.0, 30.0, None),
            ],
            errors: vec!["redis (kernel): boom".into()],
        };
        assert!((s.points[0].vs_native().expect("native") - 0.9).abs() < 1e-9);
        assert!((s.points[2].vs_kernel().expect("latency") - 0.75).abs() < 1e-9);
        assert!((s.points[0].attached_vs_exec().expect("attached") - 0.5).abs() < 1e-9);
        assert!((s.points[2].attached_vs_exec().expect("latency") - 2.0).abs() < 1e-9);
        let t = targets(&s);
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(t[0].met, Some(true));
        assert!((t[1].value.expect("redis") - 1.5).abs() < 1e-9);
        let text = render(&s);
        assert!(
            text.contains("redis PING -c 1 p50") && text.contains("error: redis (kernel): boom"),
            "{text}"
        );
    }

    #[test]
    fn redis_csv_rows_give_rps_and_p50() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"SET\",\"396039.59\",\"1.9\",\"0.3\",\"1.855\",\"3\",\"4\",\"9\"\n";
        let rows = redis_csv(csv);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, "SET");
        assert!((rows[0].1 - 396_039.59).abs() < 1e-6 && (rows[0].2 - 1.855).abs() < 1e-9);
    }
}
