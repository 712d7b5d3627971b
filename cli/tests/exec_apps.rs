//! `zerosplit exec` runs stock programs with their TCP over zerosplit, in
//! namespaces the tests build, against Linux TCP in the peer namespace:
//!
//! - a Python probe of the socket calls programs make (poll, select,
//!   epoll in every mode over mixed sets, non-blocking connect, options,
//!   `TCP_INFO`, dup, shutdown, resets, threads, fork);
//! - iperf3 both ways (`-R`), eight streams (`-P 8`), and zerosplit's
//!   iperf3 client against a Linux server: the byte counts of both ends
//!   agree;
//! - redis-server under exec against redis-benchmark
//!   (`-t set,get,lpush,lpop -c 50 -P 16`, and 16 KiB values): every
//!   request answered.
//!
//! Each proves the connections were zerosplit's: the kernel of the exec
//! namespace counts no TCP opens of its own.
//!
//! The programs come from Debian (`apt-get install iperf3 redis-server
//! redis-tools python3`, as `.ci/run` does); a missing one fails the test
//! with its package name.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use zerosplit_lab::NetNs;
use zerosplit_tests::require_root;

#[test]
fn the_socket_calls_of_a_python_program_behave_as_on_linux() {
    let _serial = serial();
    require_program("python3");
    let (a, b, pair) = lab("zxp");
    let peer_addr = pair.b.addr.to_string();
    let _peer = shim_peer(&b, &peer_addr, "9000", "100");
    let dir = tempdir();
    let log = dir.join("probe.log");
    let mut probe = exec_in(
        &a,
        &pair.a.ifname,
        &log,
        &[
            "python3",
            &data("shim_probe.py"),
            &peer_addr,
            "9000",
            "9100",
        ],
    );
    let status = wait_exit(&mut probe.0, Duration::from_secs(100));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status == Some(0) && !text.contains("FAIL"),
        "probe failed ({status:?}):\n{text}"
    );
    assert_eq!(
        text.matches("\nok ").count() + usize::from(text.starts_with("ok ")),
        16,
        "{text}"
    );
    assert!(text.contains("zerosplit exec: TCP over"), "{text}");
    // The fork check's child tries a loopback connection (the kernel's):
    // at most that one active open; everything else was zerosplit's.
    let (active, passive) = kernel_opens(&a);
    assert!(
        active <= 1 && passive == 0,
        "kernel opens in the exec namespace: {active} active, {passive} passive"
    );
}

#[test]
fn iperf3_under_exec_both_ways_and_eight_streams() {
    let _serial = serial();
    require_program("iperf3");
    let (a, b, pair) = lab("zxi");
    let server = pair.a.addr.to_string();
    let dir = tempdir();
    for (name, extra) in [
        ("forward", vec![]),
        ("reverse", vec!["-R"]),
        ("eight", vec!["-P", "8"]),
    ] {
        let log = dir.join(&format!("iperf-{name}.log"));
        let mut srv = exec_in(
            &a,
            &pair.a.ifname,
            &log,
            &["iperf3", "-s", "-4", "-1", "-J"],
        );
        wait_log(&log, "zerosplit exec: TCP over");
        std::thread::sleep(Duration::from_millis(300));
        let mut args = vec!["iperf3", "-c", &server, "-n", "256M", "-J"];
        args.extend(extra.iter().copied());
        let client = ok_stdout(&run_in(&b, 60, &args), &format!("iperf3 client ({name})"));
        let (sent, received) = iperf_bytes(&client, name);
        assert!(sent >= 256 << 20, "{name}: sent {sent}");
        let streams = if name == "eight" { 8 } else { 1 };
        assert!(
            received + in_flight(streams) >= sent && received <= sent,
            "{name}: sent {sent}, received {received}"
        );
        assert_eq!(
            wait_exit(&mut srv.0, Duration::from_secs(20)),
            Some(0),
            "{name}: server exit"
        );
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let json = &text[text.find('{').expect("server JSON")..];
        // The server's report counts its own direction.
        let (s_sent, s_received) = iperf_bytes(json, name);
        if name == "reverse" {
            assert_eq!(s_sent, sent, "{name}: both ends' sent counts");
        } else {
            assert_eq!(s_received, received, "{name}: both ends' received counts");
        }
    }
    // zerosplit's iperf3 client against a Linux server, eight streams.
    let mut linux = Running(
        b.spawn("timeout", ["60", "iperf3", "-s", "-4", "-1", "-J"])
            .expect("iperf3 -s"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let peer = pair.b.addr.to_string();
    let log = dir.join("iperf-client.log");
    let mut cli = exec_in(
        &a,
        &pair.a.ifname,
        &log,
        &["iperf3", "-c", &peer, "-n", "256M", "-P", "8", "-J"],
    );
    assert_eq!(
        wait_exit(&mut cli.0, Duration::from_secs(60)),
        Some(0),
        "client exit"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let (sent, received) = iperf_bytes(&text[text.find('{').expect("client JSON")..], "client");
    assert!(
        sent >= 256 << 20 && received + in_flight(8) >= sent && received <= sent,
        "client: sent {sent}, received {received}"
    );
    let mut out = String::new();
    linux
        .0
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("server output");
    assert_eq!(
        iperf_bytes(&out, "linux server").1,
        received,
        "the Linux server's counts"
    );
    assert_no_kernel_opens(&a);
}

#[test]
fn redis_under_exec_answers_every_request() {
    let _serial = serial();
    require_program("redis-server");
    require_program("redis-benchmark");
    let (a, b, pair) = lab("zxr");
    let dir = tempdir();
    let log = dir.join("redis.log");
    let _srv = exec_in(&a, &pair.a.ifname, &log, &redis_server("6379", &dir.0));
    wait_log(&log, "Ready to accept connections");
    let host = pair.a.addr.to_string();
    let mut expected = 0u64;
    for (n, size) in [("200000", "3"), ("20000", "16384")] {
        let started = std::time::Instant::now();
        let out = run_in(
            &b,
            120,
            &[
                "redis-benchmark",
                "-h",
                &host,
                "-t",
                "set,get,lpush,lpop",
                "-n",
                n,
                "-c",
                "50",
                "-P",
                "16",
                "-d",
                size,
                "--csv",
            ],
        );
        let wall = started.elapsed().as_secs_f64();
        let csv = ok_stdout(&out, "redis-benchmark");
        // The rates redis-benchmark reports must account for no more time
        // than its run took by our clock: n requests per test at the
        // reported rate, the four tests one after the other.
        let mut implied = 0.0;
        for test in ["SET", "GET", "LPUSH", "LPOP"] {
            let row = csv
                .lines()
                .find(|l| l.starts_with(&format!("\"{test}\"")))
                .unwrap_or_else(|| panic!("no {test} row (-d {size}):\n{csv}"));
            let rps: f64 = row
                .split(',')
                .nth(1)
                .and_then(|v| v.trim_matches('"').parse().ok())
                .unwrap_or_else(|| panic!("{test} -d {size}: no rate in {row}"));
            assert!(rps.is_finite() && rps > 0.0, "{test} -d {size}: {row}");
            implied += n.parse::<f64>().expect("n") / rps;
        }
        assert!(
            implied <= wall,
            "-d {size}: the reported rates imply {implied:.2} s of requests, the run took {wall:.2} s"
        );
        expected += 4 * n.parse::<u64>().expect("n");
    }
    let info = ok_stdout(
        &run_in(&b, 20, &["redis-cli", "-h", &host, "info", "stats"]),
        "redis-cli",
    );
    let processed: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    // redis-benchmark also sends a CONFIG GET per run and each client its
    // handshake: at least every request was processed.
    assert!(
        processed >= expected,
        "redis processed {processed} commands, the benchmarks sent {expected}"
    );
    assert_no_kernel_opens(&a);
    // Idle (redis wakes ten times a second for its cron), the program and
    // the stack's polling thread together stay far from a core.
    let redis = child_of(_srv.0.id()).expect("redis-server under timeout");
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ticks(redis);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(redis) - before;
    assert!(
        used <= 10,
        "an idle redis-server under exec used {used} ticks (1/100 s) of CPU in 2 s"
    );
}

/// User + system CPU of process `pid`, all threads, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').expect("stat") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

#[test]
fn exec_says_what_is_wrong() {
    let _serial = serial();
    require_root();
    let ns = NetNs::new("zxe").expect("netns");
    let cases: [(&[&str], &str); 3] = [
        (&["exec", "--iface", "zs-none0", "--", "true"], "zs-none0"),
        (
            &["exec", "--iface", "lo", "--queue", "7", "--", "true"],
            "--queue 7",
        ),
        (
            &["exec", "--iface", "lo", "--", "/nonexistent/program"],
            "running /nonexistent/program",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["20", BIN];
        all.extend_from_slice(args);
        // An ordinary error is one line, even where backtraces are asked for.
        let out = ns
            .command("timeout", all)
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.trim().lines().count() == 1 && !stderr.contains("acktrace"),
            "{args:?}: not one line: {stderr}"
        );
        assert!(
            !out.status.success() && out.status.code() != Some(124),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(needle),
            "{args:?}: stderr should name {needle:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
