//! `zerosplit demo`: two fresh namespaces joined by a veth pair, and the
//! same transfer four ways — Linux → Linux (the baseline), Linux →
//! zerosplit, zerosplit → Linux, zerosplit → zerosplit — each checked
//! byte-exact and timed at the receiver, in one run on one pair.
//!
//! That pair has TX checksum offload off (hence no TSO), which the AF_XDP
//! ends need; Linux as a user has it — a fresh veth's default offloads —
//! runs once more on a second pair of namespaces, and zerosplit's rows are
//! compared with both Linux baselines.
//!
//! Every endpoint is a thread of this process that entered its namespace,
//! so senders and receivers share the pattern buffer: the receiver compares
//! what arrives with it instead of hashing.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use transports::cc::Algorithm;
use zerosplit_lab::{in_netns, NetNs, Offloads, VethPair, IPV6_A, IPV6_B};

use zerosplit::host::{HostConfig, Threads};
use zerosplit::provider::Provider;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};

/// What to run.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Bytes per transfer.
    pub bytes: usize,
    /// MTU of the veth pair.
    pub mtu: u32,
    /// Congestion controller for zerosplit.
    pub algorithm: Algorithm,
    /// Where zerosplit's transport runs.
    pub threads: Threads,
    /// Every transfer over IPv6 (2001:2::/48) instead of IPv4.
    pub ipv6: bool,
}

/// The two ends' addresses in the family the demo runs: `pair`'s IPv4 ones,
/// or IPv6 ones added to its ends.
fn addresses(pair: &VethPair, a: &NetNs, b: &NetNs, ipv6: bool) -> Result<(IpAddr, IpAddr)> {
    if !ipv6 {
        return Ok((pair.a.addr.into(), pair.b.addr.into()));
    }
    pair.add_ipv6(a, b).context("IPv6 addresses")?;
    Ok((IPV6_A.into(), IPV6_B.into()))
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct DemoRow {
    /// Which way.
    pub scenario: &'static str,
    /// Goodput in Gbit/s, measured at the receiver.
    pub gbps: f64,
    /// zerosplit's retransmitted segments (both ends), `None` for Linux only.
    pub retransmits: Option<u64>,
    /// Datapath drops by reason on the zerosplit ends (empty when none).
    pub drops: Vec<(&'static str, u64)>,
    /// Bytes arrived equal bytes sent.
    pub exact: bool,
}

/// Compares incoming bytes with the pattern as they arrive.
pub(crate) struct Checker<'a> {
    pub(crate) want: &'a [u8],
    pub(crate) at: usize,
    pub(crate) exact: bool,
    pub(crate) last_byte: Option<Instant>,
}

impl Write for Checker<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let end = self.at + buf.len();
        self.exact &= end <= self.want.len() && self.want[self.at..end] == *buf;
        self.at = end;
        self.last_byte = Some(Instant::now());
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(crate) fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes()[..8.min(len - v.len())]);
    }
    v
}

fn stack_config(opts: &DemoOptions) -> HostConfig {
    let mut c = HostConfig::default();
    c.nic.mtu = opts.mtu as usize;
    c.nic.xsk.multi_buffer = opts.mtu > 4000;
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    c.tcp.mss = (opts.mtu - 40) as u16;
    c.tcp.algorithm = opts.algorithm;
    c.threads = opts.threads;
    c
}

pub(crate) fn gbps(bytes: usize, start: Instant, end: Option<Instant>) -> f64 {
    let secs = end.map_or(f64::INFINITY, |e| e.duration_since(start).as_secs_f64());
    bytes as f64 * 8.0 / secs / 1e9
}

pub(crate) fn kernel_receive(
    listener: &TcpListener,
    want: &[u8],
) -> Result<(bool, Option<Instant>)> {
    let (mut conn, _) = listener.accept().context("kernel accept")?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut check = Checker {
        want,
        at: 0,
        exact: true,
        last_byte: None,
    };
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = conn.read(&mut buf).context("kernel read")?;
        if n == 0 {
            break;
        }
        check.write_all(&buf[..n])?;
    }
    Ok((check.exact && check.at == want.len(), check.last_byte))
}

pub(crate) fn kernel_send(to: impl Into<SocketAddr>, data: &[u8]) -> Result<Instant> {
    let to = to.into();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e).with_context(|| format!("kernel connect to {to}")),
        }
    };
    let start = Instant::now();
    s.write_all(data).context("kernel send")?;
    s.shutdown(std::net::Shutdown::Write)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let _ = s.read_to_end(&mut Vec::new());
    Ok(start)
}

fn transfer_options() -> TransferOptions {
    TransferOptions {
        idle_timeout: Duration::from_secs(20),
    }
}

/// Waits (bounded) until the receiving stack is up.
pub(crate) fn wait_ready(ready: &AtomicBool) {
    let waited = Instant::now();
    while !ready.load(Ordering::Acquire) && waited.elapsed() < Duration::from_secs(20) {
        thread::sleep(Duration::from_millis(5));
    }
}

/// A zerosplit receiver in `ns` on `port`: returns (bytes exact, time of
/// the last byte, its retransmissions).
type Drops = Vec<(&'static str, u64)>;

fn zs_receive(
    ns: &NetNs,
    ifname: &str,
    port: u16,
    data: &[u8],
    opts: &DemoOptions,
    ready: &AtomicBool,
) -> Result<(bool, Option<Instant>, u64, Drops)> {
    in_netns(ns, || {
        let mut stack = Stack::new(ifname, stack_config(opts))?;
        ready.store(true, Ordering::Release);
        let mut check = Checker {
            want: data,
            at: 0,
            exact: true,
            last_byte: None,
        };
        transfer::listen(&mut stack, port, &mut check, &transfer_options())?;
        Ok((
            check.exact && check.at == data.len(),
            check.last_byte,
            stack.retransmissions().0,
            stack.drops(),
        ))
    })
}

/// A zerosplit sender in `ns` to `to`: returns (start time, its
/// retransmissions).
fn zs_send(
    ns: &NetNs,
    ifname: &str,
    to: SocketAddr,
    data: &[u8],
    opts: &DemoOptions,
) -> Result<(Instant, u64, Drops)> {
    in_netns(ns, || {
        let mut stack = Stack::new(ifname, stack_config(opts))?;
        let start = Instant::now();
        transfer::connect(&mut stack, to, &mut &data[..], &transfer_options())?;
        Ok((start, stack.retransmissions().0, stack.drops()))
    })
}

/// The baseline row with a fresh veth's default offloads (TX checksum
/// offload, TSO, GRO): Linux as a user has it.
pub const LINUX_SHIPPED: &str = "Linux -> Linux (as shipped)";
/// The baseline row on the zerosplit rows' pair: TX checksum offload off,
/// hence no TSO.
pub const LINUX_OFFLOADS_OFF: &str = "Linux -> Linux (offloads off)";

/// A kernel receiver in `rx_ns` on `port` and a kernel sender in `tx_ns`
/// to `rx_ip`: returns (byte-exact, start, last byte).
fn kernel_transfer(
    rx_ns: &NetNs,
    tx_ns: &NetNs,
    rx_ip: IpAddr,
    port: u16,
    data: &[u8],
) -> Result<(bool, Instant, Option<Instant>)> {
    let listener = in_netns(rx_ns, || TcpListener::bind((rx_ip, port)))?;
    thread::scope(|s| -> Result<_> {
        let rx = s.spawn(|| kernel_receive(&listener, data));
        let start = in_netns(tx_ns, || kernel_send(SocketAddr::new(rx_ip, port), data))?;
        let (exact, end) = rx.join().map_err(|_| anyhow!("receiver panicked"))??;
        Ok((exact, start, end))
    })
}

/// Runs the two Linux baselines and the three transfers with zerosplit
/// ends, and returns the table rows (the baselines first).
///
/// # Errors
/// Setup failed or a transfer failed.
pub fn measure(opts: &DemoOptions) -> Result<Vec<DemoRow>> {
    let a = NetNs::new("zda").context("namespace")?;
    let b = NetNs::new("zdb").context("namespace")?;
    let pair = VethPair::create(&a, &b, opts.mtu).context("veth pair")?;
    let data = pattern(opts.bytes);
    let (ip_a, ip_b) = addresses(&pair, &a, &b, opts.ipv6)?;
    let mut rows = Vec::new();

    // Linux → Linux as shipped, on a pair of its own with default offloads.
    let (exact, start, end) = {
        let c = NetNs::new("zdc").context("namespace")?;
        let d = NetNs::new("zdd").context("namespace")?;
        let shipped = VethPair::create_with_offloads(&c, &d, opts.mtu, 1, Offloads::Default)
            .context("veth pair with default offloads")?;
        let (ip_c, _) = addresses(&shipped, &c, &d, opts.ipv6)?;
        kernel_transfer(&c, &d, ip_c, 5200, &data)?
    };
    rows.push(DemoRow {
        scenario: LINUX_SHIPPED,
        gbps: gbps(opts.bytes, start, end),
        retransmits: None,
        drops: Vec::new(),
        exact,
    });

    // Linux → Linux with TX checksum offload off, as the zerosplit rows.
    let (exact, start, end) = kernel_transfer(&a, &b, ip_a, 5201, &data)?;
    rows.push(DemoRow {
        scenario: LINUX_OFFLOADS_OFF,
        gbps: gbps(opts.bytes, start, end),
        retransmits: None,
        drops: Vec::new(),
        exact,
    });

    // Linux → zerosplit.
    let ready = AtomicBool::new(false);
    let (exact, start, end, retx, drops) = thread::scope(|s| -> Result<_> {
        let rx = s.spawn(|| zs_receive(&a, &pair.a.ifname, 5202, &data, opts, &ready));
        wait_ready(&ready);
        let start = in_netns(&b, || kernel_send(SocketAddr::new(ip_a, 5202), &data))?;
        let (exact, end, retx, drops) = rx.join().map_err(|_| anyhow!("receiver panicked"))??;
        Ok((exact, start, end, retx, drops))
    })?;
    rows.push(DemoRow {
        scenario: "Linux -> zerosplit",
        gbps: gbps(opts.bytes, start, end),
        retransmits: Some(retx),
        drops,
        exact,
    });

    // zerosplit → Linux.
    let listener = in_netns(&b, || TcpListener::bind((ip_b, 5203)))?;
    let (exact, start, end, retx, drops) = thread::scope(|s| -> Result<_> {
        let rx = s.spawn(|| kernel_receive(&listener, &data));
        let (start, retx, drops) =
            zs_send(&a, &pair.a.ifname, SocketAddr::new(ip_b, 5203), &data, opts)?;
        let (exact, end) = rx.join().map_err(|_| anyhow!("receiver panicked"))??;
        Ok((exact, start, end, retx, drops))
    })?;
    rows.push(DemoRow {
        scenario: "zerosplit -> Linux",
        gbps: gbps(opts.bytes, start, end),
        retransmits: Some(retx),
        drops,
        exact,
    });

    // zerosplit → zerosplit.
    let ready = AtomicBool::new(false);
    let (exact, start, end, retx, drops) = thread::scope(|s| -> Result<_> {
        let rx = s.spawn(|| zs_receive(&a, &pair.a.ifname, 5204, &data, opts, &ready));
        wait_ready(&ready);
        let (start, tx_retx, mut drops) =
            zs_send(&b, &pair.b.ifname, SocketAddr::new(ip_a, 5204), &data, opts)?;
        let (exact, end, rx_retx, rx_drops) =
            rx.join().map_err(|_| anyhow!("receiver panicked"))??;
        drops.extend(rx_drops);
        Ok((exact, start, end, tx_retx + rx_retx, drops))
    })?;
    rows.push(DemoRow {
        scenario: "zerosplit -> zerosplit",
        gbps: gbps(opts.bytes, start, end),
        retransmits: Some(retx),
        drops,
        exact,
    });

    if let Some(bad) = rows.iter().find(|r| !r.exact) {
        bail!("{}: bytes received differ from bytes sent", bad.scenario);
    }
    Ok(rows)
}

/// Options of `zerosplit demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// MTU of the veth pair (9000 exercises multi-buffer frames).
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// MiB per transfer.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// zerosplit's congestion controller.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Where zerosplit's transport runs: rtc (one loop) or dedicated
    /// (its own thread).
    #[arg(long, default_value = "rtc", value_parser = ["rtc", "dedicated"])]
    threads: String,
    /// Every transfer over IPv6 (addresses of 2001:2::/48 on the same
    /// veth pairs) instead of IPv4.
    #[arg(long)]
    ipv6: bool,
}

/// Runs `zerosplit demo` and prints its table.
///
/// # Errors
/// Bad options, not root, or a transfer failed.
pub fn run(args: Args) -> Result<()> {
    let Args {
        mtu,
        mib,
        cc,
        threads,
        ipv6,
    } = args;
    super::require_root()?;
    let algorithm: transports::cc::Algorithm = cc.parse().with_context(|| format!("--cc {cc}"))?;
    if !(576..=9000).contains(&mtu) {
        bail!("--mtu must be between 576 and 9000, got {mtu}");
    }
    if !(1..=4096).contains(&mib) {
        bail!("--mib must be between 1 and 4096, got {mib}");
    }
    let family = if ipv6 {
        "IPv6, 2001:2::/48"
    } else {
        "198.18.0.0/15"
    };
    println!("zerosplit demo: two fresh namespaces joined by veth ({family}), MTU {mtu}, {mib} MiB each way, cc {algorithm}");
    let threads = if threads == "dedicated" {
        zerosplit::host::Threads::Dedicated {
            datapath_core: None,
            transport_core: None,
            queue: 4096,
        }
    } else {
        zerosplit::host::Threads::RunToCompletion
    };
    let rows = measure(&DemoOptions {
        bytes: mib << 20,
        mtu,
        algorithm,
        threads,
        ipv6,
    })
    .context("demo")?;
    let shipped = rows[0].gbps;
    let off = rows[1].gbps;
    println!(
        "\n{:<30} {:>12} {:>11} {:>13} {:>12} {:>8}",
        "transfer", "goodput", "vs shipped", "vs offl. off", "retransmits", "bytes"
    );
    let drops = |d: &[(&str, u64)]| {
        if d.is_empty() {
            "none".to_string()
        } else {
            d.iter()
                .map(|(n, v)| format!("{n} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    for r in &rows {
        println!(
            "{:<30} {:>7.2} Gb/s {:>10.2}x {:>12.2}x {:>12} {:>8}",
            r.scenario,
            r.gbps,
            r.gbps / shipped,
            r.gbps / off,
            r.retransmits.map_or("-".to_string(), |n| n.to_string()),
            if r.exact { "exact" } else { "DIFFER" }
        );
    }
    println!(
        "\nas shipped: a fresh veth's default offloads (TX checksum, TSO, GRO), on a pair of its own;\n\
         offloads off: TX checksum offload off (hence no TSO) on both ends, as the zerosplit rows' pair needs for AF_XDP."
    );
    println!("\ndatapath drops by reason (zerosplit ends):");
    for r in rows.iter().filter(|r| r.retransmits.is_some()) {
        println!("  {:<30} {}", r.scenario, drops(&r.drops));
    }
    println!("\nnamespaces and veth removed; the XDP program detached with its link.");
    Ok(())
}
