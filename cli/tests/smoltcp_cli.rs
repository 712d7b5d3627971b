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

/// `zerosplit nc -l --transport smoltcp` receives from Linux, and
/// `zerosplit nc --transport smoltcp` sends to Linux, byte-exact.
#[test]
fn nc_with_smoltcp_moves_bytes_both_ways() {
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    use zerosplit_lab::{in_netns, NetNs, VethPair};
    require_root();
    let a = NetNs::new("zsc").expect("netns");
    let b = NetNs::new("zsd").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let payload: Vec<u8> = (0..(4u32 << 20)).map(|i| (i * 13 + 5) as u8).collect();
    let ifname = pair.a.ifname.as_str();

    // Linux → nc -l --transport smoltcp.
    let child = a
        .command(
            "timeout",
            [
                "30",
                BIN,
                "nc",
                "-l",
                ":5020",
                "--iface",
                ifname,
                "--transport",
                "smoltcp",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nc -l");
    // Read nc's stdout while sending: a full pipe would stall it.
    let out = std::thread::scope(|s| {
        let waiter = s.spawn(|| child.wait_with_output().expect("nc -l exits"));
        in_netns(&b, || {
            let to = SocketAddrV4::new(pair.a.addr, 5020);
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut s = loop {
                match TcpStream::connect_timeout(&to.into(), Duration::from_secs(1)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() >= deadline => panic!("connect: {e}"),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            };
            s.write_all(&payload).expect("send");
            s.shutdown(std::net::Shutdown::Write).expect("FIN");
        });
        waiter.join().expect("waiter")
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "nc -l: {:?}; {stderr}", out.status);
    assert!(
        out.stdout == payload,
        "stdout byte-exact ({} bytes)",
        out.stdout.len()
    );
    assert!(
        stderr.contains(&format!("{} out of its socket buffers", payload.len())),
        "{stderr}"
    );

    // nc --transport smoltcp → Linux.
    let listener = in_netns(&b, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 6020)).expect("listen")
    });
    let target = format!("{}:6020", pair.b.addr);
    let mut child = a
        .command(
            "timeout",
            [
                "30",
                BIN,
                "nc",
                target.as_str(),
                "--iface",
                ifname,
                "--transport",
                "smoltcp",
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nc");
    let mut stdin = child.stdin.take().expect("stdin");
    let (got, ()) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut c, _) = listener.accept().expect("accept");
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).expect("read to FIN");
            got
        });
        stdin.write_all(&payload).expect("feed nc");
        drop(stdin);
        (reader.join().expect("reader"), ())
    });
    let out = child.wait_with_output().expect("nc exits");
    assert!(
        out.status.success(),
        "nc: {:?}; {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        got == payload,
        "Linux received {} bytes, byte-exact",
        got.len()
    );
}
