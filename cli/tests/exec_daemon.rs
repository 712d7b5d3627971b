//! `zerosplit exec` over the daemon: stock programs (iperf3, two redis,
//! nginx with its workers) attached to one `zerosplit daemon` on one
//! interface at once, each driven from the peer namespace, the namespace
//! kernel's TCP counters proving that none of their connections went
//! through the kernel, and a program killed with SIGKILL taking nothing
//! but its own connections with it.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;
use zerosplit_lab::NetNs;

/// Slots for iperf3, two redis, nginx (the process exec starts, its
/// master, two workers) and the attach `exec` tries first; 256 MiB each
/// hold the shim's rings of 128 connections, as exec's standalone
/// default: redis-benchmark's 50 of one test, and the 50 of the test
/// before that are still closing.
/// A flow table for nginx's connection churn (TIME-WAIT lasts a second).
const DAEMON: &str = "[flows]\nmax_flows = 8192\n\n[daemon]\nmax_attachments = 9\nmemory_per_attachment = \"256MiB\"\n";

/// `redis-benchmark` against `host:port` with `size`-byte values: the
/// requests it sent, or its failure.
fn benchmark(b: &NetNs, host: &str, port: &str, n: u64, size: &str) -> Result<u64, String> {
    let n_arg = n.to_string();
    let out = run_in(
        b,
        60,
        &[
            "redis-benchmark",
            "-h",
            host,
            "-p",
            port,
            "-t",
            "set,get",
            "-n",
            &n_arg,
            "-c",
            "50",
            "-P",
            "16",
            "-d",
            size,
            "--csv",
        ],
    );
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let csv = String::from_utf8_lossy(&out.stdout);
    for test in ["SET", "GET"] {
        if !csv.lines().any(|l| l.starts_with(&format!("\"{test}\""))) {
            return Err(format!("no {test} row:\n{csv}"));
        }
    }
    Ok(2 * n)
}

/// Commands redis at `host:port` processed.
fn processed(b: &NetNs, host: &str, port: &str) -> u64 {
    let info = ok_stdout(
        &run_in(
            b,
            20,
            &["redis-cli", "-h", host, "-p", port, "info", "stats"],
        ),
        "redis-cli",
    );
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn several_programs_share_the_daemon_and_a_killed_one_takes_only_its_own() {
    let _serial = serial();
    for p in [
        "iperf3",
        "redis-server",
        "redis-benchmark",
        "redis-cli",
        "nginx",
        "ab",
    ] {
        require_program(p);
    }
    let (a, b, pair) = lab("zxd");
    let dir = tempdir();
    let iface = &pair.a.ifname;
    let mut daemon = start_daemon(&a, iface, &dir, DAEMON);
    let before = kernel_tcp(&a);

    let iperf_log = dir.join("iperf.log");
    let mut iperf = attached(
        &a,
        iface,
        &dir,
        &iperf_log,
        &["iperf3", "-s", "-4", "-1", "-J"],
    );
    let (one, two) = (dir.join("redis-one.log"), dir.join("redis-two.log"));
    let (one_dir, two_dir) = (dir.join("one"), dir.join("two"));
    for d in [&one_dir, &two_dir] {
        std::fs::create_dir_all(d).expect("redis dir");
    }
    let redis_one = redis_server("6379", &one_dir);
    let redis_two = redis_server("6380", &two_dir);
    let _one = attached(&a, iface, &dir, &one, &redis_one);
    let two_proc = attached(&a, iface, &dir, &two, &redis_two);
    for log in [&one, &two] {
        let text = wait_log(log, "Ready to accept connections");
        assert!(
            text.contains("), attached to the daemon at"),
            "the program says it attached:\n{text}"
        );
    }
    wait_log(&iperf_log, "zerosplit exec: TCP over");
    let (_nginx_exec, _nginx) = start_nginx(&a, iface, &dir, &dir.join("nginx-exec.log"));
    thread::sleep(Duration::from_millis(300));

    // The three at once; redis two is killed -9 while it is being driven.
    let host = pair.a.addr.to_string();
    let nginx_url = format!("http://{host}:8080/index.html");
    let (iperf_out, one_sent, two_result, nginx_result) = thread::scope(|s| {
        let client = s.spawn(|| {
            let out = run_in(&b, 60, &["iperf3", "-c", &host, "-n", "256M", "-J"]);
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        });
        // 16 KiB values, 50 clients, 16 deep: more sends outstanding than
        // the daemon's default max_posted, which the shim must meet with
        // back-pressure, not a failed write.
        let bench_one = s.spawn(|| benchmark(&b, &host, "6379", 20_000, "16384"));
        let bench_two = s.spawn(|| benchmark(&b, &host, "6380", 2_000_000, "1024"));
        let web = s.spawn(|| ab_all_ok(&b, 20, 3_000, &nginx_url));
        thread::sleep(Duration::from_millis(700));
        let victim = child_of(two_proc.0.id()).expect("redis two under timeout");
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &victim.to_string()])
            .status();
        (
            client.join().expect("iperf3 client"),
            bench_one.join().expect("benchmark one"),
            bench_two.join().expect("benchmark two"),
            web.join().expect("ab"),
        )
    });
    drop(two_proc);

    let logs = || {
        [
            "daemon.log",
            "redis-one.log",
            "iperf.log",
            "nginx-error.log",
        ]
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            format!(
                "--- {f}:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    };
    let iperf_out = iperf_out.unwrap_or_else(|e| panic!("iperf3 client: {e}\n{}", logs()));
    let (sent, received) = iperf_bytes(&iperf_out, "iperf3 client");
    assert!(
        sent >= 256 << 20 && received <= sent && received + in_flight(1) >= sent,
        "iperf3 beside a killed program: sent {sent}, received {received}"
    );
    assert_eq!(
        wait_exit(&mut iperf.0, Duration::from_secs(20)),
        Some(0),
        "iperf3 -s -1 exits after its test"
    );
    let expected = one_sent.unwrap_or_else(|e| {
        panic!(
            "redis one's benchmark beside a killed program: {e}\n{}",
            logs()
        )
    });
    let got = processed(&b, &host, "6379");
    assert!(
        got >= expected,
        "redis one processed {got} commands, the benchmark sent {expected}"
    );
    if let Err(ab) = nginx_result {
        panic!("nginx beside a killed program: every request a 200:\n{ab}");
    }
    assert!(
        two_result.is_err(),
        "the benchmark of the killed redis cannot finish: {two_result:?}"
    );
    let daemon_log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    assert!(
        matches!(daemon.0.try_wait(), Ok(None)),
        "the daemon runs on:\n{daemon_log}"
    );
    assert_eq!(
        kernel_tcp(&a),
        before,
        "the exec namespace's kernel TCP saw none of it"
    );
    // A program started after the kill attaches and serves at once.
    let late = dir.join("redis-late.log");
    let _late = attached(&a, iface, &dir, &late, &redis_server("6381", &one_dir));
    wait_log(&late, "Ready to accept connections");
    let start = Instant::now();
    let n =
        benchmark(&b, &host, "6381", 20_000, "1024").expect("a program attached after the kill");
    assert!(
        processed(&b, &host, "6381") >= n,
        "within {:?}",
        start.elapsed()
    );
}
