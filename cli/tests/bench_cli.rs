//! `zerosplit bench` end to end with a tiny scenario set: it builds its own
//! namespaces, runs the peers as processes, writes a schema-2 JSON report
//! and two SVG charts; then the same run against a fabricated baseline
//! whose ratios are far higher fails with a message naming the row and
//! the ratio.

use std::path::Path;
use std::process::{Command, Output};

use bench::suite::report::{MainThread, Report, Status};
use bench::suite::scenario::Scenario;

const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");

/// The goodput of 16 flows on two queues as a share of the same run's 16
/// flows on one queue it must keep: measured 1.77 (1.89 -> 3.35 Gbit/s)
/// on 2 cores beside a full CI run; a second queue that stalls or
/// serialises its flows behind the first falls below half.
const TWO_QUEUES_VS_ONE: f64 = 0.5;

fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    assert!(
        root,
        "zerosplit bench creates network namespaces: run as root"
    );
}

fn bench(args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .args(["120", BIN, "bench", "--no-progress"])
        .args(args)
        .output()
        .expect("run zerosplit bench");
    assert_ne!(out.status.code(), Some(124), "zerosplit bench timed out");
    out
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("zs-bench-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn check_svg(path: &Path) {
    let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(doc.starts_with("<?xml"), "{}", path.display());
    assert!(doc.contains("<svg "), "{}", path.display());
    assert!(doc.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(doc.trim_end().ends_with("</svg>"), "{}", path.display());
    assert_eq!(doc.matches("<svg").count(), 1);
}

#[test]
fn quick_run_writes_json_and_plots_and_the_gate_fails_on_regression() {
    require_root();
    let dir = scratch("run");
    let json = dir.join("report.json");
    let plots = dir.join("plots");
    let common = [
        "--quick",
        "--scenario",
        "linux-linux,linux-zs,zs-zs-smoltcp",
        "--runs",
        "1",
        "--seconds",
        "0.5",
        "--pingpong-rounds",
        "300",
        // The flows section, short: two counts keep the run within the
        // timeout on a loaded machine.
        "--flows",
        "1,16",
        "--flow-queues",
        "1,2",
    ];
    let mut args: Vec<&str> = common.to_vec();
    let (json_s, plots_s) = (json.to_string_lossy(), plots.to_string_lossy());
    args.extend(["--json", &json_s, "--plot", &plots_s]);
    let out = bench(&args);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("linux-linux/1500/-"), "{}", text(&out));
    assert!(stdout.contains("linux-zs/1500/rtc"), "{}", text(&out));
    assert!(stdout.contains("raw AF_XDP RX"), "{}", text(&out));
    assert!(stdout.contains("flows (MTU 1500"), "{}", text(&out));

    let report = Report::from_json(&std::fs::read_to_string(&json).expect("json written"))
        .expect("schema-2 report");
    assert_eq!(report.schema, 2);
    assert!(report.options.quick);
    assert_eq!(report.rows.len(), 3, "{:?}", report.rows);
    let flows = report.flows.as_ref().expect("flows section");
    // Per scenario: 1 and 16 flows on one queue, 16 on two (one flow
    // cannot spread).
    assert_eq!(flows.points.len(), 6, "{:?}", flows.points);
    assert!(
        flows.points.iter().any(|p| p.goodput_gbps.is_some()),
        "{:?}",
        flows.points
    );
    let two = flows
        .point_on(Scenario::ZsZsTcp, 16, 2)
        .expect("zs-zs-tcp 16 flows on 2 queues");
    assert_eq!(two.status, Status::Ok, "{:?}", two.notes);
    // The same run's 16 flows on one queue are the reference: a second
    // queue must not lose most of the goodput.
    let one = flows
        .point_on(Scenario::ZsZsTcp, 16, 1)
        .expect("zs-zs-tcp 16 flows on 1 queue");
    let (g2, g1) = (
        two.goodput_gbps.expect("2-queue goodput").median,
        one.goodput_gbps.expect("1-queue goodput").median,
    );
    eprintln!("16 flows: 1 queue {g1:.2} Gbit/s, 2 queues {g2:.2} Gbit/s");
    assert!(
        g2 >= TWO_QUEUES_VS_ONE * g1,
        "16 flows on 2 queues {g2:.2} Gbit/s, below {:.0} % of 1 queue's {g1:.2}",
        100.0 * TWO_QUEUES_VS_ONE
    );
    assert!(flows.point_on(Scenario::ZsZsTcp, 1, 2).is_none());
    // The smoltcp transport landed: its row measures like the others.
    let smol = report.row("zs-zs-smoltcp/1500/rtc").expect("smoltcp row");
    assert_eq!(smol.status, Status::Ok, "smoltcp row: {:?}", smol.notes);
    for row in &report.rows {
        assert_eq!(row.status, Status::Ok, "{}: {:?}", row.key, row.notes);
        let g = row.goodput_gbps.expect("goodput");
        assert!(g.median > 0.01 && g.median < 1000.0, "{}: {g:?}", row.key);
        assert!(row.cpu_s_per_gb.sender.is_some() && row.cpu_s_per_gb.receiver.is_some());
        let lat = row.latency.as_ref().expect("ping-pong latency");
        let (p50, p99) = (
            lat.p50_us.expect("p50").median,
            lat.p99_us.expect("p99").median,
        );
        assert!(p50 > 0.0 && p50 <= p99, "{}: p50 {p50} p99 {p99}", row.key);
        assert!(!lat.cdf.is_empty());
        assert!(row.ratios.vs_linux.is_some(), "{}", row.key);
    }
    let linux = report.row("linux-linux/1500/-").expect("linux row");
    assert_eq!(linux.ratios.vs_linux, Some(1.0));
    // CPU by thread: two Linux ends give Linux's total; the zerosplit
    // receiver of linux-zs is one loop whose user time is the stack's own.
    let b = &linux.cpu_breakdown;
    assert_eq!(b.sender.as_ref().map(|e| e.main), Some(MainThread::Process));
    assert!(
        b.linux_total_s_per_gb.is_some_and(|t| t.median > 0.0),
        "{b:?}"
    );
    assert!(!b.softirq_per_cpu.is_empty(), "{b:?}");
    let lz = &report
        .row("linux-zs/1500/rtc")
        .expect("linux-zs")
        .cpu_breakdown;
    let rcv = lz.receiver.as_ref().expect("receiver threads");
    assert_eq!(rcv.main, MainThread::Loop);
    assert!(
        rcv.main_user.is_some() && rcv.transport_user.is_none(),
        "{rcv:?}"
    );
    assert!(lz.stack_own_s_per_gb.is_some() && lz.linux_total_s_per_gb.is_none());
    assert!(stdout.contains("CPU by thread"), "{}", text(&out));
    assert!(stdout.contains("targets:"), "{}", text(&out));
    let ceiling = &report.ceilings[0];
    assert_eq!(ceiling.mtu, 1500);
    assert!(ceiling.raw_rx_gbps.is_some(), "{:?}", ceiling.errors);
    assert!(ceiling.raw_tx_gbps.is_some(), "{:?}", ceiling.errors);
    assert!(ceiling.memcpy_gbps.is_some());
    check_svg(&plots.join("goodput.svg"));
    check_svg(&plots.join("latency-cdf.svg"));

    // A baseline whose ratios are ten times higher: every ratio regressed.
    let mut base = report.clone();
    for row in &mut base.rows {
        row.ratios.vs_linux = row.ratios.vs_linux.map(|r| r * 10.0);
        row.ratios.vs_raw = row.ratios.vs_raw.map(|r| r * 10.0);
    }
    let base_path = dir.join("baseline.json");
    std::fs::write(&base_path, base.to_json()).expect("write baseline");
    let base_s = base_path.to_string_lossy();
    let mut args: Vec<&str> = common.to_vec();
    args.extend(["--baseline", &base_s, "--max-regression", "10"]);
    let out = bench(&args);
    assert!(
        !out.status.success(),
        "expected the gate to fail: {}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("baseline check failed"), "{}", text(&out));
    assert!(
        stderr.contains("linux-zs/1500/rtc: vs_linux"),
        "{}",
        text(&out)
    );
    assert!(stderr.contains("% below the baseline"), "{}", text(&out));

    // The same report as its own baseline passes the gate (no run needed to
    // differ: the stored ratios are the measured ones, 0 % allowed would be
    // flaky, 90 % is not).
    std::fs::write(&base_path, report.to_json()).expect("write baseline");
    let mut args: Vec<&str> = common.to_vec();
    args.extend(["--baseline", &base_s, "--max-regression", "90"]);
    let out = bench(&args);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("baseline check passed"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_options_fail_before_running() {
    require_root();
    let out = bench(&["--quick", "--scenario", "linux-linux,bogus"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown scenario \"bogus\""),
        "{}",
        text(&out)
    );
    for (queues, says) in [
        ("0", "--flow-queues: 0 is outside 1..=8"),
        ("2,x", "\"x\" is not a number"),
    ] {
        let out = bench(&["--quick", "--flow-queues", queues]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{}",
            text(&out)
        );
    }
    let dir = scratch("badbase");
    let p = dir.join("b.json");
    std::fs::write(&p, r#"{"schema": 99}"#).expect("write");
    let p_s = p.to_string_lossy();
    let out = bench(&["--quick", "--baseline", &p_s, "--max-regression", "5"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("schema Some(99)"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
