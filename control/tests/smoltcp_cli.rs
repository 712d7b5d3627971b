//! `--transport smoltcp` / `transport.kind = "smoltcp"` refuses what
//! smoltcp cannot do, naming the key: congestion controllers outside its
//! closed set (none, reno, cubic) and dedicated threads. Every case fails
//! before any interface is touched.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");

fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    assert!(
        root,
        "zerosplit nc checks for root first: run these tests as root"
    );
}

fn nc(args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["20", BIN, "nc", "--iface", "lo"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run zerosplit")
}

fn assert_fails_with(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure; stderr: {stderr}");
    assert_ne!(out.status.code(), Some(124), "timed out; stderr: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}: {stderr}");
    }
}

#[test]
fn controllers_smoltcp_lacks_are_refused_naming_the_key() {
    require_root();
    for cc in ["bbr", "dctcp"] {
        let out = nc(&["--transport", "smoltcp", "--cc", cc, "198.18.0.1:9"]);
        assert_fails_with(&out, &["transport.congestion", "none, reno", cc]);
    }
}

#[test]
fn dedicated_threads_are_refused_for_smoltcp() {
    require_root();
    let out = nc(&[
        "--transport",
        "smoltcp",
        "--threads",
        "dedicated",
        "198.18.0.1:9",
    ]);
    assert_fails_with(&out, &["run-to-completion only"]);
}

#[test]
fn a_config_file_asking_smoltcp_for_bbr_is_refused_naming_the_key() {
    require_root();
    let dir = std::env::temp_dir().join(format!("zs-smol-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("smol.toml");
    std::fs::write(
        &path,
        "[interface]\nname = \"lo\"\n[transport]\nkind = \"smoltcp\"\ncongestion = \"bbr\"\n",
    )
    .unwrap();
    let out = nc(&["--config", path.to_str().unwrap(), "198.18.0.1:9"]);
    std::fs::remove_dir_all(&dir).ok();
    assert_fails_with(&out, &["transport.congestion", "smoltcp"]);
}
