//! `zerosplit nc` fails with a non-zero exit and a message that says what
//! is wrong: no such interface, not root, port already owned, connection
//! refused, bad options. Each case runs the real binary in a namespace the
//! test creates.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Output};

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

fn run_in(ns: &NetNs, args: &[&str]) -> Output {
    let mut cmd = ns.command("timeout", ["20", BIN]);
    cmd.args(args);
    cmd.stdin(std::process::Stdio::null());
    cmd.output().expect("run zerosplit")
}

fn assert_fails_with(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {stderr}"
    );
    assert_ne!(
        out.status.code(),
        Some(124),
        "timed out instead of failing; stderr: {stderr}"
    );
    assert!(
        stderr.contains(needle),
        "stderr should mention {needle:?}: {stderr}"
    );
}

#[test]
fn no_such_interface() {
    require_root();
    let ns = NetNs::new("zcn").expect("netns");
    let out = run_in(&ns, &["nc", "-l", ":5000", "--iface", "zs-none0"]);
    assert_fails_with(&out, "no network interface named \"zs-none0\"");
}

#[test]
fn not_root() {
    require_root();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            BIN,
            "nc",
            "-l",
            ":5000",
            "--iface",
            "lo",
        ])
        .output()
        .expect("run setpriv (util-linux)");
    assert_fails_with(&out, "run it as root");
}

#[test]
fn port_owned_by_a_kernel_socket() {
    require_root();
    let a = NetNs::new("zco").expect("netns");
    let b = NetNs::new("zcp").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let _kernel = in_netns(&a, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 5005)).expect("kernel listener")
    });
    let out = run_in(&a, &["nc", "-l", ":5005", "--iface", &pair.a.ifname]);
    assert_fails_with(&out, "port 5005 is already owned by a kernel socket");
}

/// A dual-stack kernel listener (`[::]:P`, IPV6_V6ONLY off: the default
/// of iperf3, nginx `listen [::]`, Java, Node.js) takes IPv4 connections
/// too: zerosplit does not take its port.
#[test]
fn port_owned_by_a_dual_stack_kernel_socket() {
    require_root();
    let a = NetNs::new("zcv").expect("netns");
    let b = NetNs::new("zcw").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let _kernel = in_netns(&a, || {
        TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, 5007)).expect("kernel listener")
    });
    let out = run_in(&a, &["nc", "-l", ":5007", "--iface", &pair.a.ifname]);
    assert_fails_with(&out, "port 5007 is already owned by a kernel socket");
}

#[test]
fn connection_refused_by_the_peer() {
    require_root();
    let a = NetNs::new("zcr").expect("netns");
    let b = NetNs::new("zcs").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    // Nothing listens on the peer's port 6006: Linux answers the SYN with RST.
    let target = format!("{}:6006", pair.b.addr);
    let out = run_in(&a, &["nc", &target, "--iface", &pair.a.ifname]);
    assert_fails_with(&out, "connection refused by the peer (RST)");
}

#[test]
fn bad_options_name_what_is_wrong() {
    require_root();
    let ns = NetNs::new("zcb").expect("netns");
    let out = run_in(
        &ns,
        &["nc", "-l", ":5000", "--iface", "lo", "--cc", "no-such-cc"],
    );
    assert_fails_with(&out, "unknown congestion controller \"no-such-cc\"");
    let out = run_in(&ns, &["nc", "-l", ":5000", "--iface", "lo", "--mtu", "100"]);
    assert_fails_with(&out, "--mtu must be between 576 and 9000");
    let out = run_in(&ns, &["nc", "198.18.0.1", "--iface", "lo"]);
    assert_fails_with(&out, "want IPv4:PORT");
    let out = run_in(
        &ns,
        &[
            "nc",
            "-l",
            ":5000",
            "--iface",
            "lo",
            "--xdp-mode",
            "offload",
        ],
    );
    assert_fails_with(&out, "invalid value 'offload'");
}

#[test]
fn config_file_errors_name_the_key() {
    require_root();
    let ns = NetNs::new("zck").expect("netns");
    let path = std::env::temp_dir().join(format!("zs-nc-bad-{}.toml", std::process::id()));
    std::fs::write(&path, "[umem]\nframe_sise = 4096\n").expect("write config");
    let out = run_in(
        &ns,
        &[
            "nc",
            "-l",
            ":5000",
            "--iface",
            "lo",
            "--config",
            path.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_file(&path);
    assert_fails_with(&out, "umem.frame_sise");
}

#[test]
fn listens_with_the_default_config_file_and_writes_what_arrives() {
    use std::io::Write;
    require_root();
    let a = NetNs::new("zcd").expect("netns");
    let b = NetNs::new("zce").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/default.toml");
    let child = a
        .command(
            "timeout",
            [
                "30",
                BIN,
                "nc",
                "-l",
                ":5010",
                "--iface",
                pair.a.ifname.as_str(),
                "--config",
                config,
            ],
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start nc -l");
    let payload: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i * 7 + 3) as u8).collect();
    in_netns(&b, || {
        let to = std::net::SocketAddrV4::new(pair.a.addr, 5010);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        let mut s = loop {
            match std::net::TcpStream::connect_timeout(
                &to.into(),
                std::time::Duration::from_secs(1),
            ) {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() >= deadline => panic!("connect: {e}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        };
        s.write_all(&payload).expect("send");
        s.shutdown(std::net::Shutdown::Write).expect("FIN");
    });
    let out = child.wait_with_output().expect("nc -l exits");
    assert!(
        out.status.success(),
        "nc -l exit: {:?}; {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == payload,
        "stdout holds the {} bytes sent, byte-exact (got {})",
        payload.len(),
        out.stdout.len()
    );
}
