//! The ceilings measured in the same run as the rows: raw AF_XDP RX
//! ([`crate::rx_rate::run_raw`]: receive and recycle, no protocol), raw
//! AF_XDP TX (an AF_XDP sender with no protocol into a kernel that only
//! counts the frames and drops them: an unassigned EtherType, so the
//! receiving veth's `rx_packets` counts them and the stack discards them
//! as `rx_nohandler` without any protocol work), and memcpy bandwidth.

use std::thread;
use std::time::{Duration, Instant};

use datapath::sys::xsk::{XskConfig, XskPort};

use crate::netns::{in_netns, HarnessError, NetNs, VethPair};
use crate::rx_rate::Rate;

/// EtherType of the raw TX frames: IEEE 802 "local experimental" 1, which
/// no kernel protocol handles.
const ETHERTYPE_EXPERIMENTAL: u16 = 0x88b5;

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

/// Interface counters from `ip -s -j link show`.
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

/// Counters of `ifname` in namespace `netns`.
///
/// # Errors
/// `ip` failed or printed something else.
pub fn link_stats(netns: &str, ifname: &str) -> Result<LinkStats, CeilingError> {
    let out = std::process::Command::new("ip")
        .args(["-n", netns, "-s", "-j", "link", "show", "dev", ifname])
        .output()
        .map_err(|e| CeilingError::Counters {
            ifname: ifname.into(),
            detail: e.to_string(),
        })?;
    parse_link_stats(&String::from_utf8_lossy(&out.stdout)).map_err(|detail| {
        CeilingError::Counters {
            ifname: ifname.into(),
            detail: format!(
                "{detail}; stderr: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }
    })
}

/// Writes the raw frame's Ethernet header (and zero payload) into `frame`.
fn ethernet_header(frame: &mut [u8], dst: [u8; 6], src: [u8; 6]) {
    frame[..6].copy_from_slice(&dst);
    frame[6..12].copy_from_slice(&src);
    frame[12..14].copy_from_slice(&ETHERTYPE_EXPERIMENTAL.to_be_bytes());
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
    let sent = in_netns(&tx_ns, || {
        send_raw(tx.ifname.as_str(), rx.mac, tx.mac, mtu, duration)
    })?;
    thread::sleep(Duration::from_millis(50));
    let after = link_stats(&rx.netns, &rx.ifname)?;
    Ok(Rate {
        packets: after.rx_packets - before.rx_packets,
        bytes: after.rx_bytes - before.rx_bytes,
        seconds: sent.as_secs_f64(),
    })
}

/// The sender: returns how long it sent.
fn send_raw(
    ifname: &str,
    dst: [u8; 6],
    src: [u8; 6],
    mtu: u32,
    duration: Duration,
) -> Result<Duration, CeilingError> {
    let fail = |d: String| CeilingError::Sender {
        ifname: ifname.into(),
        detail: d,
    };
    let mut config = XskConfig {
        multi_buffer: mtu > 3000,
        tx_budget: Some(256),
        ..XskConfig::default()
    };
    config.umem.mr_bytes = 1 << 20;
    let mut port = XskPort::open(ifname, 0, &config).map_err(|e| fail(format!("socket: {e}")))?;
    let len = mtu as usize + 14;
    let jumbo = len > port.umem().frame_size() as usize;
    let started = Instant::now();
    let deadline = started + duration;
    let mut queued_since_flush = 0u32;
    while Instant::now() < deadline {
        let queued = if jumbo {
            port.transmit_chain(|frame, _mr, parts| {
                ethernet_header(frame, dst, src);
                parts.push((0, len - 14));
                14
            })
        } else {
            port.transmit(|frame, _mr| {
                ethernet_header(frame, dst, src);
                frame[14..len].fill(0);
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
        let mut f = [0xffu8; 20];
        ethernet_header(&mut f, [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]);
        assert_eq!(
            &f[..14],
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x88, 0xb5]
        );
    }

    #[test]
    fn memcpy_rate_is_plausible() {
        let g = memcpy_gbps(2);
        assert!(g > 1.0 && g < 10_000.0, "{g}");
    }
}
