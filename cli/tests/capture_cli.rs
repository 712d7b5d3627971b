//! `--pcap FILE`: what the datapath received and sent, read back by
//! tcpdump (Debian's `tcpdump`, which `.ci/run` installs): the handshake
//! is there both ways and the stream's bytes add up. Through `nc -l`
//! (Linux client) and through `exec` (a Python client against a Linux
//! listener).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::require_root;

const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");

fn lab(prefix: &str) -> (NetNs, NetNs, VethPair) {
    require_root();
    if let Err(e) = zerosplit_lab::require_tool("tcpdump") {
        panic!("{e} (the test reads the capture with it)");
    }
    let a = NetNs::new(&format!("{prefix}a")).expect("netns");
    let b = NetNs::new(&format!("{prefix}b")).expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    (a, b, pair)
}

/// `tcpdump -r FILE -nn` lines.
fn tcpdump(file: &std::path::Path) -> Vec<String> {
    let out: Output = std::process::Command::new("tcpdump")
        .args(["-r", file.to_str().expect("utf-8"), "-nn"])
        .stdin(Stdio::null())
        .output()
        .expect("tcpdump");
    assert!(
        out.status.success(),
        "tcpdump -r failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// What the capture says about the connection from `client` to `server`:
/// (SYNs client→server, SYN-ACKs back, the highest relative sequence
/// number the client's data reached, FINs from the client).
fn summary(lines: &[String], client: Ipv4Addr, server: SocketAddrV4) -> (usize, usize, u64, usize) {
    let to_server = format!(" {client}.");
    // tcpdump writes ADDR.PORT.
    let dst = format!(" > {}.{}:", server.ip(), server.port());
    let from_server = format!(" {}.{} > {client}.", server.ip(), server.port());
    let (mut syn, mut synack, mut top, mut fin) = (0, 0, 0u64, 0);
    for l in lines {
        let fwd = l.contains(&to_server) && l.contains(&dst);
        let back = l.contains(&from_server);
        if fwd && l.contains("Flags [S],") {
            syn += 1;
        }
        if back && l.contains("Flags [S.],") {
            synack += 1;
        }
        if fwd && l.contains("Flags [F") {
            fin += 1;
        }
        if fwd {
            // "seq 1:1449," — relative numbers, the first data byte is 1.
            if let Some(range) = l.split("seq ").nth(1).and_then(|r| r.split(',').next()) {
                if let Some((_, end)) = range.split_once(':') {
                    top = top.max(end.parse().unwrap_or(0));
                }
            }
        }
    }
    (syn, synack, top, fin)
}

fn tempfile(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("zs-capture-{}-{name}", std::process::id()))
}

#[test]
fn nc_writes_a_pcap_tcpdump_reads_with_the_handshake_and_every_byte() {
    let (a, b, pair) = lab("zca");
    let file = tempfile("nc.pcap");
    let len = 300_000usize;
    let nc = a
        .command(
            "timeout",
            [
                "30",
                BIN,
                "nc",
                "-l",
                ":5000",
                "--iface",
                &pair.a.ifname,
                "--pcap",
                file.to_str().expect("utf-8"),
                "--snaplen",
                "128",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nc");
    let server = SocketAddrV4::new(pair.a.addr, 5000);
    in_netns(&b, || {
        let start = Instant::now();
        let mut s = loop {
            match TcpStream::connect_timeout(&server.into(), Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(start.elapsed() < Duration::from_secs(15), "connect: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        s.write_all(&vec![7u8; len]).expect("send");
    });
    let out = nc.wait_with_output().expect("nc exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "nc: {stderr}");
    assert!(stderr.contains("captured"), "{stderr}");
    let lines = tcpdump(&file);
    let _ = std::fs::remove_file(&file);
    let (syn, synack, top, fin) = summary(&lines, pair.b.addr, server);
    assert!(
        syn >= 1 && synack >= 1,
        "handshake: {syn} SYN, {synack} SYN-ACK\n{}",
        lines.join("\n")
    );
    assert_eq!(top, len as u64 + 1, "the client's bytes");
    assert!(fin >= 1, "the client's FIN");
}

#[test]
fn exec_writes_a_pcap_of_the_programs_connection() {
    let (a, b, pair) = lab("zcx");
    let file = tempfile("exec.pcap");
    let listener = in_netns(&b, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 6000)).expect("listen")
    });
    let server = SocketAddrV4::new(pair.b.addr, 6000);
    let script = format!(
        "import socket\ns = socket.create_connection(('{}', 6000))\ns.sendall(b'z' * 5000)\ns.close()\n",
        pair.b.addr
    );
    let receiver = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().expect("accept");
        let mut got = Vec::new();
        c.read_to_end(&mut got).expect("read");
        got.len()
    });
    let out = a
        .command(
            "timeout",
            [
                "30",
                BIN,
                "exec",
                "--iface",
                &pair.a.ifname,
                "--pcap",
                file.to_str().expect("utf-8"),
                "--",
                "python3",
                "-c",
                &script,
            ],
        )
        .stdin(Stdio::null())
        .output()
        .expect("exec");
    assert!(
        out.status.success(),
        "exec: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(receiver.join().expect("receiver"), 5000);
    let lines = tcpdump(&file);
    let _ = std::fs::remove_file(&file);
    let (syn, synack, top, _) = summary(&lines, pair.a.addr, server);
    assert!(
        syn >= 1 && synack >= 1,
        "handshake: {syn} SYN, {synack} SYN-ACK\n{}",
        lines.join("\n")
    );
    assert_eq!(top, 5001, "the program's bytes\n{}", lines.join("\n"));
}

/// `nc` with `--pcap` on a name that exists, on an interface that does
/// not: the capture file is opened first, so what happens to the name is
/// all there is to see.
fn nc_pcap(path: &std::path::Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "nc",
        "-l",
        ":5000",
        "--iface",
        "zs-no-such0",
        "--pcap",
        path.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    std::process::Command::new("timeout")
        .arg("20")
        .arg(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("nc")
}

#[test]
fn an_existing_pcap_or_symlink_is_refused_and_overwrite_replaces_only_the_name() {
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let dir = tempfile("exists");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").expect("victim");
    let exists = dir.join("exists.pcap");
    std::fs::write(&exists, "precious").expect("file");
    let link = dir.join("link.pcap");
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");

    for path in [&exists, &link] {
        let out = nc_pcap(path, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!("{}: exists", path.display()))
                && err.contains("--pcap-overwrite"),
            "{err}"
        );
    }
    assert_eq!(std::fs::read_to_string(&exists).expect("file"), "precious");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );

    let out = nc_pcap(&link, &["--pcap-overwrite"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("zs-no-such0"),
        "fails on the interface after: {err}"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
    let meta = std::fs::symlink_metadata(&link).expect("new file");
    assert!(meta.is_file(), "the link itself was replaced by a file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}
