//! Chaos soak (issue 12): zerosplit ↔ Linux TCP through the impairment hop
//! under 2 % loss, 1 % duplication, 5 % reordering and 0.1 % corruption in
//! both directions, while the R—B wire flaps (link down/up over rtnetlink).
//! Linux → zerosplit, then zerosplit → Linux: the SHA-256 of what arrived
//! equals the sender's, and no stall (no received byte) lasts longer than
//! 2 s after the link is back up (progress is sampled at the receiver).
//!
//! Short form by default (96 MiB each way, a flap every 500 ms for 100 ms,
//! at least two flaps in each direction's transfer; well under a minute). The full soak, 1 GiB each way with a flap every 2 s
//! for 500 ms: `ZEROSPLIT_SOAK=full cargo test -p zerosplit-tests --test
//! chaos_soak -- --nocapture`. Needs root.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddrV4, TcpListener},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use bench::impair::{longest_stall_after_link_up, Flap, FlapConfig, ImpairConfig, ImpairedPath};
use zerosplit::host::HostConfig;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::in_netns;
use zerosplit_tests::{connect_retrying, heavy, require_root, wait_for, Pattern, Sha256Pipe};

const PROFILE: &str = "loss=2%,dup=1%,reorder=5%:200us,corrupt=0.1%,seed=41";
const MAX_STALL: Duration = Duration::from_secs(2);

struct Soak {
    bytes: u64,
    flap: FlapConfig,
    /// Flaps each direction's transfer must have seen.
    min_flaps: usize,
    bound: Duration,
}

fn soak() -> Soak {
    if std::env::var("ZEROSPLIT_SOAK").as_deref() == Ok("full") {
        Soak {
            bytes: 1 << 30,
            flap: "2s:500ms".parse().expect("flap spec"),
            min_flaps: 4,
            bound: Duration::from_secs(3600),
        }
    } else {
        Soak {
            bytes: 96 << 20,
            flap: "500ms:100ms".parse().expect("flap spec"),
            min_flaps: 2,
            bound: Duration::from_secs(150),
        }
    }
}

/// Hashes what it is given and notes when bytes arrived (at most one
/// instant per 5 ms, so a gigabyte keeps a small record).
struct Progress {
    hash: Sha256Pipe,
    bytes: u64,
    at: Vec<Instant>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            hash: Sha256Pipe::new(),
            bytes: 0,
            at: vec![Instant::now()],
        }
    }

    fn note(&mut self, n: usize) {
        self.bytes += n as u64;
        let now = Instant::now();
        if n > 0
            && self
                .at
                .last()
                .is_none_or(|t| now - *t >= Duration::from_millis(5))
        {
            self.at.push(now);
        }
    }
}

impl Write for Progress {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.hash.write_all(buf)?;
        self.note(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The sender's stream, hashed as it is handed out.
struct Source {
    pattern: Pattern,
    hash: Sha256Pipe,
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.pattern.read(buf)?;
        self.hash.write_all(&buf[..n])?;
        Ok(n)
    }
}

fn source(bytes: u64, seed: u64) -> Source {
    Source {
        pattern: Pattern::new(bytes, seed),
        hash: Sha256Pipe::new(),
    }
}

fn config() -> HostConfig {
    let mut c = HostConfig::default();
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    c
}

fn opts() -> TransferOptions {
    TransferOptions {
        idle_timeout: Duration::from_secs(30),
    }
}

/// Linux in B sends to zerosplit in A; returns (sent hash, received hash,
/// received progress).
fn linux_to_zerosplit(path: &ImpairedPath, bytes: u64) -> (String, Progress) {
    let ready = AtomicBool::new(false);
    thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(path.ns_a(), || {
                let mut stack = Stack::new(&path.a.ifname, config()).expect("stack");
                ready.store(true, Ordering::Release);
                let mut got = Progress::new();
                let n = transfer::listen(&mut stack, 5301, &mut got, &opts())
                    .expect("zerosplit receives");
                assert_eq!(n, bytes);
                got
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        let sent = in_netns(path.ns_b(), || {
            let to = SocketAddrV4::new(path.a.addr, 5301);
            let mut c = connect_retrying(to, Duration::from_secs(15));
            let mut src = source(bytes, 51);
            std::io::copy(&mut src, &mut c).expect("kernel send");
            c.shutdown(std::net::Shutdown::Write).expect("FIN");
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let _ = c.read_to_end(&mut Vec::new());
            src.hash.finish()
        });
        (sent, server.join().expect("server"))
    })
}

/// zerosplit in A sends to a Linux listener in B.
fn zerosplit_to_linux(path: &ImpairedPath, bytes: u64) -> (String, Progress) {
    let listener = in_netns(path.ns_b(), || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 6301)).expect("kernel listen")
    });
    thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut c, _) = listener.accept().expect("accept");
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut got = Progress::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = c.read(&mut buf).expect("kernel read");
                if n == 0 {
                    break;
                }
                got.write_all(&buf[..n]).expect("hash");
            }
            got
        });
        let sent = in_netns(path.ns_a(), || {
            let mut stack = Stack::new(&path.a.ifname, config()).expect("stack");
            let mut src = source(bytes, 52);
            let to = SocketAddrV4::new(path.b.addr, 6301);
            let n = transfer::connect(&mut stack, to.into(), &mut src, &opts())
                .expect("zerosplit sends");
            assert_eq!(n, bytes);
            src.hash.finish()
        });
        (sent, reader.join().expect("reader"))
    })
}

fn check(dir: &str, bytes: u64, sent: String, got: Progress, flaps: &[Flap]) -> Duration {
    let stall = longest_stall_after_link_up(&got.at, flaps);
    println!(
        "{dir}: {} bytes, longest stall after the link returned {stall:?}",
        got.bytes
    );
    assert_eq!(got.bytes, bytes, "{dir}: every byte arrived");
    assert_eq!(got.hash.finish(), sent, "{dir}: SHA-256 of what arrived");
    assert!(
        stall <= MAX_STALL,
        "{dir}: stalled {stall:?} after the link returned"
    );
    stall
}

#[test]
fn both_ways_through_loss_duplication_reordering_corruption_and_link_flaps() {
    require_root();
    let _serial = heavy();
    let soak = soak();
    let spec: ImpairConfig = PROFILE.parse().expect("impairment spec");
    let path = ImpairedPath::create(1500, &spec).expect("impaired path");
    let started = Instant::now();
    let flapper = path.flap(soak.flap);
    let (sent, got) = linux_to_zerosplit(&path, soak.bytes);
    let first = flapper.flaps();
    let (sent2, got2) = zerosplit_to_linux(&path, soak.bytes);
    let flaps = flapper.stop().expect("flapper");
    let elapsed = started.elapsed();
    let s1 = check("Linux → zerosplit", soak.bytes, sent, got, &first);
    let s2 = check("zerosplit → Linux", soak.bytes, sent2, got2, &flaps);
    let c = path.counters();
    println!(
        "chaos soak: {} bytes each way in {elapsed:?}, {} flaps, longest stall {:?}\n  A→B {}\n  B→A {}",
        soak.bytes,
        flaps.len(),
        s1.max(s2),
        c.a_to_b,
        c.b_to_a
    );
    let each = (first.len(), flaps.len() - first.len());
    assert!(
        each.0 >= soak.min_flaps && each.1 >= soak.min_flaps,
        "the link flapped {each:?} times during the two transfers, want at least {} each",
        soak.min_flaps
    );
    assert!(
        elapsed < soak.bound,
        "finished within {:?}: {elapsed:?}",
        soak.bound
    );
    for d in [&c.a_to_b, &c.b_to_a] {
        assert!(
            d.dropped_loss > 0 && d.duplicated > 0 && d.reordered > 0,
            "impaired: {d:?}"
        );
    }
    assert!(
        c.a_to_b.corrupted + c.b_to_a.corrupted > 0,
        "corruption happened: {c:?}"
    );
}
