//! The ceilings measured in the same run as the rows, all with one
//! protocol-free generator (an AF_XDP socket that sends one prebuilt frame
//! over and over):
//!
//! - raw AF_XDP TX: into a kernel that only counts the frames and drops
//!   them (an unassigned EtherType: the receiving veth's `rx_packets`
//!   counts them, the stack discards them as `rx_nohandler` without any
//!   protocol work);
//! - raw AF_XDP RX: UDP frames to a port the XDP program steers into an
//!   AF_XDP socket that only counts and recycles them;
//! - memcpy bandwidth.
//!
//! On veth, copy-mode AF_XDP TX runs the receiver's XDP program and copy
//! inside the sender's `sendto`, so the RX figure also bounds what any
//! AF_XDP sender can push into an AF_XDP receiver on this pair.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use datapath::steer::{Proto, Steering, XdpMode};
use datapath::{config::XskConfig, raw::XskPort};

use crate::rx_rate::Rate;
use zerosplit_lab::{in_netns, HarnessError, NetNs, VethPair};

/// EtherType of the raw TX frames: IEEE 802 "local experimental" 1, which
/// no kernel protocol handles.
const ETHERTYPE_EXPERIMENTAL: u16 = 0x88b5;
/// UDP port the raw RX frames go to.
const RAW_RX_PORT: u16 = 9101;
/// Size of a raw frame's headers: Ethernet + IPv4 + UDP.
const UDP_HEADERS: usize = 14 + 20 + 8;

/// A ceiling measurement failed.
#[derive(Debug, thiserror::Error)]
pub enum CeilingError {
    /// Namespace or veth setup failed.
    #[error(transparent)]
    Harness(#[from] HarnessError),
    /// The AF_XDP sender failed.
    #[error("raw AF_XDP TX on {ifname}: {detail}")]
    Sender {
        /// Interface.
        ifname: String,
        /// What failed.
        detail: String,
    },
    /// The receiver's counters could not be read.
    #[error("reading the counters of {ifname}: {detail}")]
    Counters {
        /// Interface.
        ifname: String,
        /// What failed.
        detail: String,
    },
}

/// Interface counters (as `ip -s -j link show` prints them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames dropped on receive.
    pub rx_dropped: u64,
    /// Frames dropped on transmit.
    pub tx_dropped: u64,
}

/// Parses the JSON of `ip -s -j link show dev IF`.
///
/// # Errors
/// The text is not that JSON.
pub fn parse_link_stats(json: &str) -> Result<LinkStats, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let s = v
        .get(0)
        .and_then(|l| l.get("stats64"))
        .ok_or("no stats64 in `ip -s -j link` output")?;
    let get = |dir: &str, k: &str| {
        s.get(dir)
            .and_then(|d| d.get(k))
            .and_then(serde_json::Value::as_u64)
            .ok_or(format!("no stats64.{dir}.{k}"))
    };
    Ok(LinkStats {
        rx_packets: get("rx", "packets")?,
        rx_bytes: get("rx", "bytes")?,
        rx_dropped: get("rx", "dropped")?,
        tx_dropped: get("tx", "dropped")?,
    })
}

/// Counters of `ifname` in namespace `netns` (`IFLA_STATS64` over
/// rtnetlink, the numbers `ip -s link show` prints).
///
/// # Errors
/// The namespace or the link is gone, or the kernel sent no 64-bit stats.
pub fn link_stats(netns: &str, ifname: &str) -> Result<LinkStats, CeilingError> {
    let link = zerosplit_lab::run_in(netns, &format!("reading counters of {ifname}"), || {
        datapath::rtnl::Rtnl::open()?.link(ifname)
    })
    .map_err(|e| CeilingError::Counters {
        ifname: ifname.into(),
        detail: e.to_string(),
    })?;
    let s = link.stats.ok_or_else(|| CeilingError::Counters {
        ifname: ifname.into(),
        detail: "no IFLA_STATS64 in the kernel's answer".into(),
    })?;
    Ok(LinkStats {
        rx_packets: s.rx_packets,
        rx_bytes: s.rx_bytes,
        rx_dropped: s.rx_dropped,
        tx_dropped: s.tx_dropped,
    })
}

/// The headers of a raw frame of `mtu + 14` bytes, written once and sent
/// over and over.
#[derive(Debug, Clone)]
struct Template {
    headers: Vec<u8>,
    frame_len: usize,
}

impl Template {
    /// Ethernet only, with an EtherType no kernel protocol handles.
    fn unhandled(dst: [u8; 6], src: [u8; 6], mtu: u32) -> Template {
        let mut h = Vec::with_capacity(14);
        h.extend_from_slice(&dst);
        h.extend_from_slice(&src);
        h.extend_from_slice(&ETHERTYPE_EXPERIMENTAL.to_be_bytes());
        Template {
            headers: h,
            frame_len: mtu as usize + 14,
        }
    }

    /// Ethernet + IPv4 + UDP to `to:RAW_RX_PORT` (IPv4 header checksum
    /// set, RFC 791 §3.1; UDP checksum 0 = none, RFC 768).
    fn udp(dst: [u8; 6], src: [u8; 6], from: Ipv4Addr, to: Ipv4Addr, mtu: u32) -> Template {
        let mut h = Vec::with_capacity(UDP_HEADERS);
        h.extend_from_slice(&dst);
        h.extend_from_slice(&src);
        h.extend_from_slice(&0x0800u16.to_be_bytes());
        let total = mtu as u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[6] = 0x40; // don't fragment
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&from.octets());
        ip[16..20].copy_from_slice(&to.octets());
        let sum = ip
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let folded = (sum & 0xffff) + (sum >> 16);
        let csum = !((folded & 0xffff) + (folded >> 16)) as u16;
        ip[10..12].copy_from_slice(&csum.to_be_bytes());
        h.extend_from_slice(&ip);
        h.extend_from_slice(&40000u16.to_be_bytes());
        h.extend_from_slice(&RAW_RX_PORT.to_be_bytes());
        h.extend_from_slice(&(total - 20).to_be_bytes());
        h.extend_from_slice(&[0, 0]);
        Template {
            headers: h,
            frame_len: mtu as usize + 14,
        }
    }
}

/// Builds a fresh veth pair and sends raw frames of `mtu + 14` bytes from
/// an AF_XDP socket for `duration`; the rate is what the receiving veth
/// counted.
///
/// # Errors
/// Setup, the sender or the counters failed.
pub fn raw_tx(mtu: u32, duration: Duration) -> Result<Rate, CeilingError> {
    let rx_ns = NetNs::new("zcr")?;
    let tx_ns = NetNs::new("zct")?;
    let pair = VethPair::create(&rx_ns, &tx_ns, mtu)?;
    let (rx, tx) = (&pair.a, &pair.b);
    let before = link_stats(&rx.netns, &rx.ifname)?;
    let template = Template::unhandled(rx.mac, tx.mac, mtu);
    let sent = in_netns(&tx_ns, || {
        send_raw(
            tx.ifname.as_str(),
            &template,
            duration,
            &AtomicBool::new(true),
        )
    })?;
    thread::sleep(Duration::from_millis(50));
    let after = link_stats(&rx.netns, &rx.ifname)?;
    Ok(Rate {
        packets: after.rx_packets - before.rx_packets,
        bytes: after.rx_bytes - before.rx_bytes,
        seconds: sent.as_secs_f64(),
    })
}

/// Builds a fresh veth pair, steers UDP frames to one port into an AF_XDP
/// socket (native XDP) that only counts and recycles them, and sends from
/// the raw generator for `duration`; the rate is what the socket received.
///
/// # Errors
/// Setup, the sender or the receiver failed.
pub fn raw_rx(mtu: u32, duration: Duration) -> Result<Rate, CeilingError> {
    let rx_ns = NetNs::new("zcr")?;
    let tx_ns = NetNs::new("zct")?;
    let pair = VethPair::create(&rx_ns, &tx_ns, mtu)?;
    let (rx, tx) = (&pair.a, &pair.b);
    let template = Template::udp(rx.mac, tx.mac, tx.addr, rx.addr, mtu);
    let ready = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let fail = |ifname: &str, d: String| CeilingError::Sender {
        ifname: ifname.into(),
        detail: d,
    };
    thread::scope(|s| {
        let receiver = s.spawn(|| {
            in_netns(&rx_ns, || -> Result<Rate, CeilingError> {
                let f = |d: String| fail(&rx.ifname, d);
                let mut steering = Steering::attach(&rx.ifname, XdpMode::Native)
                    .map_err(|e| f(format!("attach: {e}")))?;
                let mut port = XskPort::open(&rx.ifname, 0, &xsk_config(mtu))
                    .map_err(|e| f(format!("receiver socket: {e}")))?;
                steering
                    .set_socket(0, port.fd())
                    .map_err(|e| f(format!("slot: {e}")))?;
                steering
                    .insert_listen(rx.addr, RAW_RX_PORT, Proto::Udp)
                    .map_err(|e| f(format!("listen: {e}")))?;
                ready.store(true, Ordering::Release);
                let mut rate = Rate::default();
                let limit = Instant::now() + duration * 3 + Duration::from_secs(5);
                let mut first: Option<Instant> = None;
                let mut last = Instant::now();
                while !stop.load(Ordering::Acquire) && Instant::now() < limit {
                    let n = port.receive(256, |pkt, _| rate.bytes += pkt.len() as u64);
                    if n > 0 {
                        rate.packets += u64::from(n);
                        last = Instant::now();
                        first.get_or_insert(last);
                    }
                }
                rate.seconds =
                    first.map_or(1e-9, |f| last.duration_since(f).as_secs_f64().max(1e-9));
                Ok(rate)
            })
        });
        let sent = in_netns(&tx_ns, || {
            send_raw(tx.ifname.as_str(), &template, duration, &ready)
        });
        thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Release);
        let rate = receiver
            .join()
            .map_err(|_| fail(&rx.ifname, "receiver panicked".into()))?;
        sent?;
        rate
    })
}

fn xsk_config(mtu: u32) -> XskConfig {
    let mut config = XskConfig {
        multi_buffer: mtu > 3000,
        tx_budget: Some(256),
        ..XskConfig::default()
    };
    config.umem.mr_bytes = 1 << 20;
    config
}

/// The generator: waits (bounded) for `go`, then sends `template` frames
/// for `duration`; returns how long it sent.
fn send_raw(
    ifname: &str,
    template: &Template,
    duration: Duration,
    go: &AtomicBool,
) -> Result<Duration, CeilingError> {
    let fail = |d: String| CeilingError::Sender {
        ifname: ifname.into(),
        detail: d,
    };
    let mut port = XskPort::open(ifname, 0, &xsk_config(template.frame_len as u32 - 14))
        .map_err(|e| fail(format!("socket: {e}")))?;
    let waited = Instant::now();
    while !go.load(Ordering::Acquire) {
        if waited.elapsed() > Duration::from_secs(10) {
            return Err(fail("the receiver did not come up within 10 s".into()));
        }
        thread::yield_now();
    }
    let (len, hl) = (template.frame_len, template.headers.len());
    let jumbo = len > port.umem().frame_size() as usize;
    let started = Instant::now();
    let deadline = started + duration;
    let mut queued_since_flush = 0u32;
    while Instant::now() < deadline {
        let queued = if jumbo {
            port.transmit_chain(|frame, _mr, parts| {
                frame[..hl].copy_from_slice(&template.headers);
                parts.push((0, len - hl));
                hl
            })
        } else {
            port.transmit(|frame, _mr| {
                frame[..hl].copy_from_slice(&template.headers);
                frame[hl..len].fill(0);
                len
            })
        }
        .map_err(|e| fail(format!("transmit: {e}")))?;
        if queued {
            queued_since_flush += 1;
            if queued_since_flush >= 64 {
                port.flush();
                queued_since_flush = 0;
            }
        } else {
            port.flush();
            queued_since_flush = 0;
        }
    }
    let elapsed = started.elapsed();
    // Let what is queued go out (bounded) so it is counted.
    let drain = Instant::now();
    while port.tx_in_flight() > 0 && drain.elapsed() < Duration::from_millis(200) {
        port.flush();
    }
    Ok(elapsed)
}

/// memcpy bandwidth in Gbit/s: copies a 64 MiB buffer `rounds` times.
pub fn memcpy_gbps(rounds: usize) -> f64 {
    const LEN: usize = 64 << 20;
    let src = vec![0x5au8; LEN];
    let mut dst = vec![0u8; LEN];
    dst.copy_from_slice(&src); // fault the pages in before timing
    let started = Instant::now();
    for _ in 0..rounds.max(1) {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (LEN * rounds.max(1)) as f64 * 8.0 / started.elapsed().as_secs_f64() / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_stats_come_from_stats64() {
        let json = r#"[{"ifindex":7,"ifname":"zs1x0a","stats64":{"rx":{"bytes":1514000,"packets":1000,"errors":0,"dropped":2,"over_errors":0,"multicast":0},"tx":{"bytes":0,"packets":0,"errors":0,"dropped":5,"carrier_errors":0,"collisions":0}}}]"#;
        assert_eq!(
            parse_link_stats(json),
            Ok(LinkStats {
                rx_packets: 1000,
                rx_bytes: 1_514_000,
                rx_dropped: 2,
                tx_dropped: 5
            })
        );
        assert!(parse_link_stats("[]").is_err());
        assert!(parse_link_stats("Device does not exist").is_err());
    }

    #[test]
    fn raw_frames_carry_an_unhandled_ethertype() {
        let t = Template::unhandled([1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], 1500);
        assert_eq!(
            t.headers,
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x88, 0xb5]
        );
        assert_eq!(t.frame_len, 1514);
    }

    #[test]
    fn udp_template_has_valid_ipv4_header_and_lengths() {
        let t = Template::udp(
            [2; 6],
            [4; 6],
            Ipv4Addr::new(198, 18, 0, 2),
            Ipv4Addr::new(198, 18, 0, 1),
            1500,
        );
        assert_eq!(t.headers.len(), UDP_HEADERS);
        assert_eq!(&t.headers[12..14], &[0x08, 0x00]);
        let ip = &t.headers[14..34];
        // The one's-complement sum over a header with its checksum is 0xffff.
        let sum: u32 = ip
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        assert_eq!((folded & 0xffff) + (folded >> 16), 0xffff);
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 1500);
        assert_eq!(ip[9], 17);
        assert_eq!(&ip[16..20], &[198, 18, 0, 1]);
        let udp = &t.headers[34..42];
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), RAW_RX_PORT);
        assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 1480);
    }

    #[test]
    fn memcpy_rate_is_plausible() {
        let g = memcpy_gbps(2);
        assert!(g > 1.0 && g < 10_000.0, "{g}");
    }
}
