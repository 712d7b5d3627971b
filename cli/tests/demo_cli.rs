//! `zerosplit demo` needs nothing but the binary: run with a `PATH` that
//! holds no program at all (no `ip`, `ethtool`, `ping`, `sysctl`), it
//! builds its namespaces and veth pairs, runs the transfers byte-exact
//! (Linux as shipped and with offloads off beside the zerosplit rows, with
//! zerosplit's ratio against both) and leaves no namespace behind. Needs
//! root.

use std::{
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");

#[test]
fn demo_runs_with_an_empty_path() {
    let empty = std::env::temp_dir().join(format!("zs-empty-path-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("empty PATH dir");
    assert_eq!(
        std::fs::read_dir(&empty).expect("read dir").count(),
        0,
        "{} must be empty",
        empty.display()
    );
    let mut child = Command::new(BIN)
        .args(["demo", "--mib", "2"])
        .env_clear()
        .env("PATH", &empty)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zerosplit demo");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zerosplit demo ran past 120 s");
        }
        thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("demo output");
    let _ = std::fs::remove_dir(&empty);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed without ip/ethtool/ping/sysctl in PATH:\n{stdout}\n{stderr}"
    );
    let header = stdout
        .lines()
        .find(|l| l.starts_with("transfer"))
        .unwrap_or_else(|| panic!("no table header:\n{stdout}"));
    assert!(
        header.contains("vs shipped") && header.contains("vs offl. off"),
        "{header}"
    );
    for scenario in [
        "Linux -> Linux (as shipped)",
        "Linux -> Linux (offloads off)",
        "Linux -> zerosplit",
        "zerosplit -> Linux",
        "zerosplit -> zerosplit",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(scenario) && l.contains("Gb/s"))
            .unwrap_or_else(|| panic!("no row for {scenario}:\n{stdout}"));
        assert!(row.trim_end().ends_with("exact"), "{row}");
        // Goodput, then a ratio against each Linux baseline.
        let ratios: Vec<&str> = row
            .split_whitespace()
            .filter(|t| {
                t.strip_suffix('x')
                    .is_some_and(|v| v.parse::<f64>().is_ok())
            })
            .collect();
        assert_eq!(ratios.len(), 2, "{row}");
        if scenario == "Linux -> Linux (as shipped)" {
            assert_eq!(ratios[0], "1.00x", "{row}");
        }
    }
    // Its namespaces are `zd{a,b,c,d}<pid>-N`: all gone.
    let left: Vec<String> = std::fs::read_dir(Path::new("/var/run/netns"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    ["zda", "zdb", "zdc", "zdd"]
                        .iter()
                        .any(|p| n.starts_with(&format!("{p}{pid}-")))
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

/// `--ipv6`: the same five rows over IPv6 (2001:2::/48 on the same pairs),
/// each byte-exact.
#[test]
fn demo_runs_over_ipv6() {
    let out = Command::new("timeout")
        .args(["120", BIN, "demo", "--mib", "2", "--ipv6"])
        .stdin(Stdio::null())
        .output()
        .expect("zerosplit demo --ipv6");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo --ipv6 failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.lines().next().is_some_and(|l| l.contains("IPv6")),
        "{stdout}"
    );
    let rows = stdout
        .lines()
        .filter(|l| l.contains("Gb/s") && l.trim_end().ends_with("exact"))
        .count();
    assert_eq!(rows, 5, "{stdout}");
}
