//! `zerosplit impair` as an operator runs it. Needs root (the lab and
//! two-interface forms build namespaces); no iproute2, ethtool or ping.

use std::{
    process::{Command, Output},
    time::{Duration, Instant},
};

fn zerosplit(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zerosplit"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn zerosplit");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("zerosplit {args:?} ran past 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[test]
fn bad_spec_is_refused_naming_key_and_value() {
    let out = zerosplit(&["impair", "--lab", "--forward", "loss=1%,jitter=2ms"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("jitter"), "{err}");
    let out = zerosplit(&[
        "impair",
        "--a-if",
        "x",
        "--b-if",
        "y",
        "--reverse",
        "delay=5",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("delay") && err.contains("\"5\""), "{err}");
}

#[test]
fn missing_interface_is_named() {
    let out = zerosplit(&[
        "impair",
        "--a-if",
        "zs-nope0",
        "--b-if",
        "zs-nope1",
        "--duration",
        "1",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("zs-nope0"), "{err}");
}

#[test]
fn lab_runs_for_its_duration_prints_counters_and_cleans_up() {
    let started = Instant::now();
    let out = zerosplit(&[
        "impair",
        "--lab",
        "--forward",
        "loss=1%,delay=1ms",
        "--duration",
        "1",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(stdout.contains("a->b: loss=1%,delay=1ms"), "{stdout}");
    assert!(stdout.contains("lab up (MTU 1500)"), "{stdout}");
    assert!(stdout.contains("dropped_loss"), "{stdout}");
    let ns: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("A: netns "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ns.len(), 1, "{stdout}");
    assert!(
        !std::path::Path::new("/var/run/netns").join(ns[0]).exists(),
        "{} left behind",
        ns[0]
    );
}

/// The two-interface form inside a namespace the test builds: A and B get
/// addresses in one extra /30 and talk through R's two veth ends.
#[test]
fn bridges_two_existing_interfaces_until_its_duration() {
    use zerosplit_lab::{NetNs, VethPair};
    let a = NetNs::new("zsca").expect("netns (needs root)");
    let r = NetNs::new("zscr").expect("netns");
    let b = NetNs::new("zscb").expect("netns");
    let left = VethPair::create(&a, &r, 1500).expect("veth A-R");
    let right = VethPair::create(&r, &b, 1500).expect("veth R-B");
    let (addr_a, addr_b) = (
        std::net::Ipv4Addr::new(198, 19, 255, 249),
        std::net::Ipv4Addr::new(198, 19, 255, 250),
    );
    a.add_ipv4(&left.a.ifname, addr_a, 30).expect("addr A");
    b.add_ipv4(&right.b.ifname, addr_b, 30).expect("addr B");
    let hop = r
        .spawn(
            env!("CARGO_BIN_EXE_zerosplit"),
            [
                "impair",
                "--a-if",
                &left.b.ifname,
                "--b-if",
                &right.a.ifname,
                "--forward",
                "delay=2ms",
                "--duration",
                "4",
            ],
        )
        .expect("spawn the hop");
    std::thread::sleep(Duration::from_millis(500));
    // Five echoes 100 ms apart, as `ping -c 5 -i 0.1 -W 2` sends them.
    let mut rtts = Vec::new();
    for _ in 0..5 {
        rtts.push(zerosplit_lab::ping(&a, addr_b, Duration::from_secs(2)));
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = hop.wait_with_output().expect("hop exits");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let answered: Vec<Duration> = rtts
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    assert!(!answered.is_empty(), "no echo answered: {rtts:?}");
    // The 2 ms one-way delay shows in every reply.
    let min = answered.iter().min().copied().unwrap_or_default();
    assert!(min >= Duration::from_millis(2), "{rtts:?}");
    let forwarded = stdout
        .lines()
        .find(|l| l.starts_with("forwarded"))
        .unwrap_or_else(|| panic!("no counters: {stdout}"));
    let nums: Vec<u64> = forwarded
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().expect("count"))
        .collect();
    assert!(nums[0] >= 5 && nums[1] >= 5, "{stdout}");
}
