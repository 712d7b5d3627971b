//! `zerosplit run`: echo and discard services from a config file, stopped
//! by SIGTERM, leaving no XDP program behind.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use zerosplit_lab::{in_netns, NetNs, VethPair};

const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");

fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    assert!(
        root,
        "these tests create network namespaces: run them as root"
    );
}

fn connect(to: SocketAddrV4) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match TcpStream::connect_timeout(&to.into(), Duration::from_secs(1)) {
            Ok(s) => return s,
            Err(e) if Instant::now() >= deadline => panic!("connect to {to}: {e}"),
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Two namespaces joined by a veth pair, and a config file for `zerosplit
/// run` on the first end; the file's directory goes with it.
struct Rig {
    a: NetNs,
    b: NetNs,
    pair: VethPair,
    dir: std::path::PathBuf,
    config: std::path::PathBuf,
}

impl Rig {
    /// Namespaces `ns.0` (where run runs) and `ns.1`, a pair with `queues`
    /// queues, and `config` written to the file.
    fn new(ns: (&str, &str), queues: u32, config: &str) -> Rig {
        require_root();
        let a = NetNs::new(ns.0).expect("netns");
        let b = NetNs::new(ns.1).expect("netns");
        let pair = VethPair::create_with_queues(&a, &b, 1500, queues).expect("veth");
        let dir = std::env::temp_dir().join(format!("zs-run-{}-{}", std::process::id(), ns.0));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("run.toml");
        std::fs::write(&path, config).expect("write config");
        Rig {
            a,
            b,
            pair,
            dir,
            config: path,
        }
    }

    /// `zerosplit run --config FILE --iface END EXTRA…` in the first
    /// namespace, stderr piped.
    fn spawn(&self, extra: &[&str]) -> std::process::Child {
        let mut args = vec![
            "run",
            "--config",
            self.config.to_str().unwrap(),
            "--iface",
            &self.pair.a.ifname,
        ];
        args.extend_from_slice(extra);
        self.a
            .command(BIN, args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start zerosplit run")
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn echo_and_discard_services_until_sigterm() {
    echo_and_discard_until_sigterm("", ("zra", "zrb"));
}

/// The same services over the smoltcp transport (`transport.kind`).
#[test]
fn echo_and_discard_services_over_smoltcp_until_sigterm() {
    echo_and_discard_until_sigterm(
        "\n[transport]\nkind = \"smoltcp\"\ncongestion = \"cubic\"\n",
        ("zrc", "zrd"),
    );
}

/// Runs `zerosplit run` with an echo and a discard listener (plus `extra`
/// config) in namespace `ns.0`, drives both from `ns.1`, stops it with
/// SIGTERM and checks that nothing stays attached.
fn echo_and_discard_until_sigterm(extra: &str, ns: (&str, &str)) {
    let rig = Rig::new(
        ns,
        1,
        &format!("[[listen]]\nport = 7\nservice = \"echo\"\n\n[[listen]]\nport = 9\nservice = \"discard\"\n{extra}"),
    );
    let (a, b, pair) = (&rig.a, &rig.b, &rig.pair);
    let mut child = rig.spawn(&[]);

    // 16 MiB: long enough for the echo's receive window to close while it
    // waits for its own echoed bytes to be acknowledged.
    let payload: Vec<u8> = (0..16 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let (echoed, discard_closed) = in_netns(b, || {
        let mut echo = connect(SocketAddrV4::new(pair.a.addr, 7));
        echo.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut back = Vec::new();
        thread::scope(|s| {
            let mut reader = echo.try_clone().unwrap();
            let r = s.spawn(move || {
                let mut got = Vec::new();
                reader.read_to_end(&mut got).expect("echo read");
                got
            });
            echo.write_all(&payload).expect("echo write");
            echo.shutdown(std::net::Shutdown::Write).unwrap();
            back = r.join().unwrap();
        });
        let mut discard = connect(SocketAddrV4::new(pair.a.addr, 9));
        discard
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        discard.write_all(&payload).expect("discard write");
        discard.shutdown(std::net::Shutdown::Write).unwrap();
        let mut nothing = Vec::new();
        let closed = discard.read_to_end(&mut nothing).is_ok() && nothing.is_empty();
        (back, closed)
    });
    assert!(
        echoed == payload,
        "echo returned {} of {} bytes, byte-exact",
        echoed.len(),
        payload.len()
    );
    assert!(
        discard_closed,
        "discard read everything, sent nothing, and closed after our FIN"
    );

    let (status, err) = stop_with_sigterm(&mut child);
    assert!(
        status.success(),
        "clean exit after SIGTERM: {status:?}; stderr: {err}"
    );
    assert!(err.contains("2 connections"), "{err}");
    let link = a.link(&pair.a.ifname).expect("link");
    assert_eq!(link.xdp, None, "no XDP program left: {link:?}");
}

/// Connections per queue from `zerosplit run`'s report on stderr.
fn per_queue(stderr: &str, queue: u32) -> Option<u64> {
    let prefix = format!("zerosplit run: queue {queue}: ");
    let line = stderr.lines().find(|l| l.starts_with(&prefix))?;
    line[prefix.len()..].split_whitespace().next()?.parse().ok()
}

#[test]
fn run_serves_every_configured_queue() {
    const CLIENTS: usize = 12;
    let rig = Rig::new(
        ("zrqa", "zrqb"),
        2,
        "[interface]\nqueues = [0, 1]\n\n[[listen]]\nport = 7\nservice = \"echo\"\n",
    );
    let (b, pair) = (&rig.b, &rig.pair);
    let mut child = rig.spawn(&[]);
    let payload = |i: usize| -> Vec<u8> {
        (0..512u32 << 10)
            .map(|k| (k.wrapping_mul(2_654_435_761) >> 11) as u8 ^ i as u8)
            .collect()
    };
    let all_exact = in_netns(b, || {
        thread::scope(|s| {
            let clients: Vec<_> = (0..CLIENTS)
                .map(|i| {
                    let to = SocketAddrV4::new(pair.a.addr, 7);
                    s.spawn(move || {
                        let mut echo = connect(to);
                        echo.set_read_timeout(Some(Duration::from_secs(20)))
                            .unwrap();
                        let mut reader = echo.try_clone().unwrap();
                        let sent = payload(i);
                        let r = thread::spawn(move || {
                            let mut got = Vec::new();
                            let _ = reader.read_to_end(&mut got);
                            got
                        });
                        echo.write_all(&sent).expect("echo write");
                        echo.shutdown(std::net::Shutdown::Write).unwrap();
                        r.join().unwrap() == sent
                    })
                })
                .collect();
            clients
                .into_iter()
                .map(|c| c.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    let (status, err) = stop_with_sigterm(&mut child);
    assert!(status.success(), "{status:?}; stderr: {err}");
    assert!(
        all_exact.iter().all(|&ok| ok),
        "echoes byte-exact: {all_exact:?}"
    );
    assert!(err.contains(&format!("{CLIENTS} connections")), "{err}");
    // Linux hashes each client to one of the two queues: both get some
    // (all twelve on one queue: p = 2^-11).
    let (q0, q1) = (per_queue(&err, 0), per_queue(&err, 1));
    assert!(
        q0.is_some_and(|n| n > 0) && q1.is_some_and(|n| n > 0),
        "both queues served connections: {q0:?} {q1:?}; stderr: {err}"
    );
}

/// Sends SIGTERM to `zerosplit run`, waits (bounded) for it to exit, and
/// returns its exit status and everything it wrote to stderr.
fn stop_with_sigterm(child: &mut std::process::Child) -> (std::process::ExitStatus, String) {
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    wait_for_exit(
        child,
        Duration::from_secs(10),
        "zerosplit run did not stop on SIGTERM",
    )
}

/// Waits (at most `within`) for `zerosplit run` to exit; its exit status
/// and everything it wrote to stderr.
fn wait_for_exit(
    child: &mut std::process::Child,
    within: Duration,
    what: &str,
) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        assert!(Instant::now() < deadline, "{what}");
        thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr piped")
        .read_to_string(&mut err)
        .expect("read stderr");
    (status, err)
}

/// SIGTERM drains: a connection open at the signal finishes its transfer
/// (every byte echoed), one arriving after it is reset, and `run` exits
/// cleanly once the last connection closed.
#[test]
fn sigterm_drains_open_connections_and_resets_new_ones() {
    let rig = Rig::new(
        ("zrda", "zrdb"),
        1,
        "[[listen]]\nport = 7\nservice = \"echo\"\n",
    );
    let (b, pair) = (&rig.b, &rig.pair);
    let mut child = rig.spawn(&["--drain", "20"]);
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let to = SocketAddrV4::new(pair.a.addr, 7);
    let pid = child.id().to_string();
    let (echoed, late) = in_netns(b, || {
        let mut echo = connect(to);
        echo.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut back = vec![0u8; chunk.len()];
        echo.write_all(&chunk).expect("first chunk");
        echo.read_exact(&mut back).expect("first echo");
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(killed.success());
        thread::sleep(Duration::from_millis(300));
        // A connection after the signal: reset (or refused), never served.
        let late = TcpStream::connect_timeout(&to.into(), Duration::from_secs(2)).map(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = s.write_all(b"late");
            let mut buf = [0u8; 4];
            s.read(&mut buf)
        });
        let late_served = matches!(late, Ok(Ok(n)) if n > 0);
        // The open connection carries on.
        let mut all = back;
        let mut reader = echo.try_clone().unwrap();
        let r = thread::spawn(move || {
            let mut got = Vec::new();
            reader.read_to_end(&mut got).expect("echo read");
            got
        });
        echo.write_all(&chunk).expect("second chunk after SIGTERM");
        echo.shutdown(std::net::Shutdown::Write).unwrap();
        all.extend(r.join().unwrap());
        (all, late_served)
    });
    assert!(!late, "a connection made while draining was served");
    assert_eq!(
        echoed.len(),
        2 * chunk.len(),
        "bytes echoed across the signal"
    );
    assert!(
        echoed[chunk.len()..] == chunk[..],
        "second chunk echoed byte-exact"
    );
    let (status, err) = wait_for_exit(
        &mut child,
        Duration::from_secs(15),
        "run did not exit after the drain",
    );
    assert!(status.success(), "{status:?}: {err}");
    assert!(
        err.contains("drained: 1 arriving while draining reset"),
        "{err}"
    );
    assert!(err.contains("0 still open after --drain reset"), "{err}");
}

/// The metrics endpoint of `zerosplit run` during a live transfer: the
/// Prometheus text parses and counts what happened (packets both ways,
/// one established connection, every drop reason and XDP statistic as a
/// series), and `zerosplit stats` shows the connection as `ss -ti` would.
#[test]
fn metrics_endpoint_and_stats_show_a_live_transfer() {
    // The endpoint from the config file; the namespace is the test's own,
    // so the port is free.
    let rig = Rig::new(
        ("zrma", "zrmb"),
        1,
        "[[listen]]\nport = 7\nservice = \"echo\"\n\n[transport]\ncongestion = \"cubic\"\n\n[metrics]\nlisten = \"127.0.0.1:9464\"\n",
    );
    let (a, b, pair) = (&rig.a, &rig.b, &rig.pair);
    let mut child = rig.spawn(&[]);
    let stats = |args: &[&str]| -> String {
        let out = a
            .exec_timeout(BIN, [&["stats"], args].concat(), Duration::from_secs(20))
            .expect("zerosplit stats");
        assert!(
            out.status.success(),
            "zerosplit stats {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 253) as u8).collect();
    let (json, text, prom) = in_netns(b, || {
        let mut echo = connect(SocketAddrV4::new(pair.a.addr, 7));
        echo.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut back = vec![0u8; chunk.len()];
        echo.write_all(&chunk).expect("write");
        echo.read_exact(&mut back).expect("echo");
        assert!(back == chunk, "echo byte-exact");
        // The connection stays open while the figures are read; wait for
        // a publication after the transfer (every 200 ms).
        thread::sleep(Duration::from_millis(500));
        let found = (stats(&["--json"]), stats(&[]), stats(&["--prometheus"]));
        echo.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let _ = echo.read_to_end(&mut rest);
        found
    });
    let (status, err) = stop_with_sigterm(&mut child);
    assert!(status.success(), "{status:?}; stderr: {err}");
    assert!(
        err.contains("metrics on http://127.0.0.1:9464/metrics"),
        "{err}"
    );

    // JSON: the connection as the stack sees it.
    let stats: serde_json::Value = serde_json::from_str(json.trim()).expect("stats --json");
    assert!(stats.get("daemon").is_none(), "run is not a daemon: {json}");
    let conns = stats["queues"][0]["connections"]
        .as_array()
        .expect("connections");
    assert_eq!(conns.len(), 1, "{json}");
    let c = &conns[0];
    assert_eq!(c["state"], "ESTABLISHED", "{json}");
    assert_eq!(
        c["peer"].as_str().unwrap_or_default().split(':').next(),
        Some(pair.b.addr.to_string().as_str())
    );
    assert_eq!(c["bytes_received"], chunk.len() as u64, "{json}");
    assert_eq!(c["bytes_acked"], chunk.len() as u64, "{json}");
    assert!(
        c["posted_recv"].as_u64().unwrap_or(0) > 0,
        "receive space posted: {json}"
    );
    let tcp = &c["tcp"];
    assert_eq!(tcp["cc"], "cubic", "{json}");
    assert!(
        tcp["cwnd"].as_u64().unwrap_or(0) > 0 && tcp["rtt_us"].as_u64().is_some(),
        "{json}"
    );

    // Text: ss -ti's layout and names.
    for want in [
        "ESTAB",
        "cubic",
        "cwnd:",
        "rtt:",
        "bytes_acked:1048576",
        "bytes_received:1048576",
        "sack_holes:0",
        "goodput:",
    ] {
        assert!(
            text.contains(want),
            "{want:?} missing in stats output:\n{text}"
        );
    }

    // Prometheus text, parsed.
    let scrape = prometheus_parse::Scrape::parse(prom.lines().map(|l| Ok(l.to_owned())))
        .expect("parse /metrics");
    let value = |name: &str, label: (&str, &str)| -> Option<f64> {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get(label.0) == Some(label.1))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    let rx = value("zerosplit_packets_total", ("direction", "rx")).expect("rx packets series");
    let tx = value("zerosplit_packets_total", ("direction", "tx")).expect("tx packets series");
    assert!(
        rx >= 700.0 && tx >= 700.0,
        "1 MiB each way is hundreds of packets: rx {rx} tx {tx}"
    );
    let rx_bytes = value("zerosplit_bytes_total", ("direction", "rx")).expect("rx bytes");
    assert!(rx_bytes >= chunk.len() as f64, "rx bytes {rx_bytes}");
    assert_eq!(
        value("zerosplit_connections", ("state", "ESTABLISHED")),
        Some(1.0),
        "{prom}"
    );
    assert!(
        value("zerosplit_placed_bytes_total", ("queue", "0")).unwrap_or(0.0) >= chunk.len() as f64,
        "{prom}"
    );
    for reason in ["bad_checksum", "tcp_out_of_window", "xsk_rx_ring_full"] {
        assert!(
            value("zerosplit_drops_total", ("reason", reason)).is_some(),
            "drop reason {reason} has a series:\n{prom}"
        );
    }
    for stat in [
        "rx_dropped",
        "rx_fill_ring_empty_descs",
        "tx_ring_empty_descs",
    ] {
        assert!(
            value("zerosplit_xdp_total", ("stat", stat)).is_some(),
            "XDP_STATISTICS {stat}:\n{prom}"
        );
    }
    assert!(
        value("zerosplit_umem_frames", ("state", "free")).unwrap_or(0.0) > 0.0,
        "{prom}"
    );
    assert!(
        value("zerosplit_poll_loop_seconds_total", ("mode", "busy")).is_some(),
        "{prom}"
    );
    assert!(
        prom.contains("# TYPE zerosplit_drops counter") && prom.trim_end().ends_with("# EOF"),
        "{prom}"
    );
}

/// The capabilities the shipped systemd unit grants, from its
/// `AmbientCapabilities=` line, in setpriv's spelling (`+net_admin,…`).
fn unit_caps() -> Vec<String> {
    let unit = include_str!("../../deploy/zerosplit.service");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("the unit grants ambient capabilities");
    line.split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect()
}

/// `zerosplit run` as an unprivileged user holding only the unit's
/// capabilities (as systemd would start it) serves; without CAP_PERFMON
/// it refuses to start and names what is missing.
#[test]
fn run_needs_only_the_units_capabilities() {
    require_root();
    let caps = unit_caps();
    assert_eq!(caps.len(), 5, "{caps:?}");
    let rig = Rig::new(
        ("zrka", "zrkb"),
        1,
        "[[listen]]\nport = 7\nservice = \"echo\"\n",
    );
    let (a, b, pair, config) = (&rig.a, &rig.b, &rig.pair, &rig.config);
    let runtime = rig.dir.join("runtime");
    std::fs::create_dir_all(&runtime).expect("temp dir");
    let chown = std::process::Command::new("chown")
        .args(["-R", "65534:65534", runtime.to_str().unwrap()])
        .status()
        .expect("chown");
    assert!(chown.success());
    let start = |caps: &str| {
        let ambient = format!("--ambient-caps={caps}");
        let inheritable = format!("--inh-caps={caps}");
        a.command(
            "setpriv",
            [
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                &inheritable,
                &ambient,
                BIN,
                "run",
                "--config",
                config.to_str().unwrap(),
                "--iface",
                &pair.a.ifname,
            ],
        )
        .env("RUNTIME_DIRECTORY", &runtime)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zerosplit run under setpriv")
    };

    let without_perfmon: Vec<&str> = caps
        .iter()
        .map(String::as_str)
        .filter(|c| *c != "+perfmon")
        .collect();
    let mut refused = start(&without_perfmon.join(","));
    let (status, err) = wait_for_exit(
        &mut refused,
        Duration::from_secs(10),
        "run without CAP_PERFMON did not exit",
    );
    assert!(!status.success(), "{err}");
    assert!(err.contains("missing: CAP_PERFMON"), "{err}");

    let mut child = start(&caps.join(","));
    let payload: Vec<u8> = (0..256 << 10).map(|i: u32| (i % 247) as u8).collect();
    let echoed = in_netns(b, || {
        let mut echo = connect(SocketAddrV4::new(pair.a.addr, 7));
        echo.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut reader = echo.try_clone().unwrap();
        let r = thread::spawn(move || {
            let mut got = Vec::new();
            let _ = reader.read_to_end(&mut got);
            got
        });
        echo.write_all(&payload).expect("write");
        echo.shutdown(std::net::Shutdown::Write).unwrap();
        r.join().unwrap()
    });
    let (status, err) = stop_with_sigterm(&mut child);
    assert!(status.success(), "{status:?}; stderr: {err}");
    assert!(
        echoed == payload,
        "echo as uid 65534: {} bytes back; {err}",
        echoed.len()
    );
}

/// The shipped unit passes `systemd-analyze verify` without a warning.
#[test]
fn systemd_unit_verifies() {
    let unit =
        include_str!("../../deploy/zerosplit.service").replace("/usr/local/bin/zerosplit", BIN);
    let dir = std::env::temp_dir().join(format!("zs-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("zerosplit.service");
    std::fs::write(&path, unit).expect("write unit");
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", path.to_str().unwrap()])
        .output()
        .expect("systemd-analyze (Debian package systemd) is needed for this test");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "systemd-analyze verify: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGHUP re-reads the listeners: a new port is served, a removed one goes
/// back to the kernel (refused), a connection established before the
/// signal keeps working; a broken file on a second SIGHUP is reported and
/// changes nothing. The log has one line per connection event.
#[test]
fn sighup_reloads_listeners_without_dropping_connections() {
    let rig = Rig::new(
        ("zrha", "zrhb"),
        1,
        "[[listen]]\nport = 7\nservice = \"echo\"\n",
    );
    let (b, pair, config) = (&rig.b, &rig.pair, &rig.config);
    let mut child = rig.spawn(&[]);
    let pid = child.id().to_string();
    let hup = || {
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        // The reload thread looks every 50 ms; the queues on their next pass.
        thread::sleep(Duration::from_millis(400));
    };
    let (echo7, discard9, refused7, after_bad) = in_netns(b, || {
        let mut old = connect(SocketAddrV4::new(pair.a.addr, 7));
        old.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 5];
        old.write_all(b"hello").unwrap();
        old.read_exact(&mut buf).expect("echo before SIGHUP");

        std::fs::write(config, "[[listen]]\nport = 9\nservice = \"discard\"\n").unwrap();
        hup();
        // The connection from before the signal still echoes.
        old.write_all(b"again").unwrap();
        let echo7 = old.read_exact(&mut buf).is_ok() && &buf == b"again";
        // Port 9 is served now: discard reads and closes after our FIN.
        let mut d = connect(SocketAddrV4::new(pair.a.addr, 9));
        d.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        d.write_all(&[7u8; 100_000]).unwrap();
        d.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let discard9 = d.read_to_end(&mut rest).is_ok() && rest.is_empty();
        // Port 7 is the kernel's again, where nothing listens.
        let refused7 = matches!(
            TcpStream::connect_timeout(&SocketAddrV4::new(pair.a.addr, 7).into(), Duration::from_secs(2)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        );

        std::fs::write(config, "[[listen]]\nport = \"nine\"\n").unwrap();
        hup();
        let mut d = connect(SocketAddrV4::new(pair.a.addr, 9));
        d.shutdown(std::net::Shutdown::Write).unwrap();
        d.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let after_bad = d.read_to_end(&mut rest).is_ok();
        old.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = old.read_to_end(&mut rest);
        (echo7, discard9, refused7, after_bad)
    });
    let (status, err) = stop_with_sigterm(&mut child);
    assert!(status.success(), "{status:?}; stderr: {err}");
    assert!(
        echo7,
        "the connection from before SIGHUP kept echoing; {err}"
    );
    assert!(discard9, "the new port 9 was served after SIGHUP; {err}");
    assert!(
        refused7,
        "the removed port 7 went back to the kernel; {err}"
    );
    assert!(after_bad, "a broken file left the listeners running; {err}");
    for want in [
        "SIGHUP: listeners now 9/Discard",
        "not reloaded, the running listeners stay",
        "stopped listening on port 7",
        "established (accepted on port 9)",
        "closed: Graceful",
    ] {
        assert!(err.contains(want), "{want:?} missing in the log:\n{err}");
    }
}
