//! A bottleneck on veth: a rate limit from a kernel qdisc on a
//! kernel-forwarded hop, then delay and loss from the impairment hop.
//!
//! ```text
//!   ns A            ns K (bridge)                 ns R                  ns B
//!  [a] ─── [ka] ⇄ br ⇄ [kr]:tbf ─── [ra] ⇄ forwarder ⇄ [rb] ─── [b]
//! ```
//!
//! - **Why a kernel hop.** AF_XDP TX leaves through the driver and skips
//!   the sender's qdisc, so a rate limit on A's own veth would not apply
//!   to zerosplit. K bridges `ka` and `kr` in the kernel (layer 2, as the
//!   impairment hop is: A and B share one /30), and the token bucket on
//!   `kr`'s egress is the bottleneck queue for A→B, for a zerosplit and a
//!   Linux sender alike.
//! - **Why tbf.** This kernel has tbf and htb but no netem, fq or codel
//!   (FACTS.md). tbf is a rate plus a byte-limited drop-tail queue: the
//!   classic bottleneck the controllers are specified against.
//! - **Delay and loss** come from the forwarder in R (one-way delay in
//!   each direction, loss on A→B only), after the queue, as a long wire
//!   after a router would.
//!
//! All six veth ends have TX checksum, GRO, GSO and TSO off (every frame
//! MTU-sized, as [`super::ImpairedPath`]). Dropping the path stops the
//! forwarder and deletes the four namespaces.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::forwarder::{Forwarder, ForwarderConfig, PathCounters};
use super::path::{lab_ends, wire_offloads_off, PathError};
use super::spec::ImpairConfig;
use zerosplit_lab::VethSpec;
use zerosplit_lab::{HarnessError, NetNs, VethEnd};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The bottleneck: rate, queue, base RTT, random loss.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BottleneckConfig {
    /// Rate of the token bucket, bit/s.
    pub rate_bps: u64,
    /// The drop-tail queue in front of it, bytes (tbf `limit`).
    pub queue_bytes: u64,
    /// Base round-trip time added by the impairment hop (half each way).
    pub rtt: Duration,
    /// Random loss on A→B after the queue, 0..=1.
    pub loss: f64,
    /// MTU of every end.
    pub mtu: u32,
}

impl BottleneckConfig {
    /// One bandwidth-delay product, bytes.
    pub fn bdp_bytes(&self) -> u64 {
        (self.rate_bps as f64 / 8.0 * self.rtt.as_secs_f64()) as u64
    }

    /// tbf's bucket: 1 ms of the rate, at least two full frames.
    fn burst_bytes(&self) -> u64 {
        (self.rate_bps / 8 / 1000).max(2 * (u64::from(self.mtu) + 14))
    }

    fn validate(&self) -> Result<(), HarnessError> {
        let bad = |detail: String| {
            Err(HarnessError::Invalid {
                what: "bottleneck",
                detail,
            })
        };
        if !(1_000_000..=10_000_000_000).contains(&self.rate_bps) {
            return bad(format!(
                "rate {} bit/s is outside 1 Mbit/s..=10 Gbit/s",
                self.rate_bps
            ));
        }
        if self.queue_bytes < 2 * u64::from(self.mtu) {
            return bad(format!(
                "queue {} B holds fewer than two {}-byte frames",
                self.queue_bytes, self.mtu
            ));
        }
        if !(0.0..1.0).contains(&self.loss) {
            return bad(format!("loss {} is outside [0, 1)", self.loss));
        }
        if self.rtt > Duration::from_secs(2) {
            return bad(format!("base RTT {:?} is above 2 s", self.rtt));
        }
        Ok(())
    }
}

/// What the bottleneck queue did (tbf's counters, `tc -s qdisc`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueCounters {
    /// Packets sent on through the bottleneck.
    pub packets: u64,
    /// Bytes sent on.
    pub bytes: u64,
    /// Packets dropped because the queue was full.
    pub drops: u64,
    /// Bytes queued now.
    pub backlog_bytes: u64,
}

/// Namespaces A, K, R, B wired as the module documentation shows.
#[derive(Debug)]
pub struct BottleneckPath {
    forwarder: Option<Forwarder>,
    /// The sender's end, in A (`.1` of the /30).
    pub a: VethEnd,
    /// The receiver's end, in B (`.2`).
    pub b: VethEnd,
    /// The bottleneck's settings.
    pub config: BottleneckConfig,
    shaped_if: String,
    // Dropped after the forwarder (see Drop).
    ns_a: NetNs,
    ns_k: NetNs,
    ns_r: NetNs,
    ns_b: NetNs,
}

impl BottleneckPath {
    /// Builds the path and starts the forwarder.
    ///
    /// # Errors
    ///
    /// [`PathError::Setup`] for a bad config or a refused operation (it
    /// names it: not root, no `tc` (iproute2), a kernel without tbf or
    /// bridges);
    /// [`PathError::Forwarder`].
    pub fn create(config: BottleneckConfig) -> Result<Self, PathError> {
        config.validate()?;
        if !(576..=9000).contains(&config.mtu) {
            return Err(PathError::Mtu(config.mtu));
        }
        zerosplit_lab::require_tool("tc")?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % 8192;
        let ns_a = NetNs::new("zsba")?;
        let ns_k = NetNs::new("zsbk")?;
        let ns_r = NetNs::new("zsbr")?;
        let ns_b = NetNs::new("zsbb")?;
        let (a, b, mac) = lab_ends(&ns_a, &ns_b, "zsb", n, Ipv4Addr::new(198, 19, 128, 0), 0x5c);
        let (ka, kr) = (format!("zsb{n}ka"), format!("zsb{n}kr"));
        let (ra, rb) = (format!("zsb{n}ra"), format!("zsb{n}rb"));
        let mtu = config.mtu;
        fn spec(name: &str, m: [u8; 6], mtu: u32) -> VethSpec<'_> {
            VethSpec {
                name,
                mac: Some(m),
                mtu: Some(mtu),
                queues: None,
            }
        }
        ns_k.add_veth(&spec(&ka, mac(2), mtu), &ns_a, &spec(&a.ifname, a.mac, mtu))?;
        ns_k.add_veth(&spec(&kr, mac(3), mtu), &ns_r, &spec(&ra, mac(4), mtu))?;
        ns_r.add_veth(&spec(&rb, mac(5), mtu), &ns_b, &spec(&b.ifname, b.mac, mtu))?;
        for (ns, end) in [(&ns_a, &a), (&ns_b, &b)] {
            ns.add_ipv4(&end.ifname, end.addr, 30)?;
            wire_offloads_off(ns, &end.ifname)?;
        }
        for (ns, dev) in [(&ns_k, &ka), (&ns_k, &kr), (&ns_r, &ra), (&ns_r, &rb)] {
            wire_offloads_off(ns, dev)?;
        }
        // The kernel hop: a bridge (no STP: ports forward at once).
        ns_k.add_bridge("zsbr", &[&ka, &kr])?;
        ns_k.exec_ok(
            "tc",
            [
                "qdisc".to_owned(),
                "replace".into(),
                "dev".into(),
                kr.clone(),
                "root".into(),
                "tbf".into(),
                "rate".into(),
                format!("{}bit", config.rate_bps),
                "burst".into(),
                config.burst_bytes().to_string(),
                "limit".into(),
                config.queue_bytes.to_string(),
            ],
        )?;
        let one_way = config.rtt / 2;
        let forward = ImpairConfig {
            delay: one_way,
            loss: config.loss,
            ..ImpairConfig::default()
        };
        let reverse = ImpairConfig {
            delay: one_way,
            ..ImpairConfig::default()
        }
        .with_seed(forward.seed.wrapping_add(1));
        let cfg = ForwarderConfig {
            a_to_b: forward,
            b_to_a: reverse,
            max_frame: config.mtu as usize + 18,
            ..ForwarderConfig::default()
        };
        let forwarder = Forwarder::start(&ra, &rb, Some(ns_r.name()), &cfg)?;
        Ok(Self {
            forwarder: Some(forwarder),
            a,
            b,
            config,
            shaped_if: kr,
            ns_a,
            ns_k,
            ns_r,
            ns_b,
        })
    }

    /// Namespace A (the senders).
    pub fn ns_a(&self) -> &NetNs {
        &self.ns_a
    }

    /// Namespace B (the receivers).
    pub fn ns_b(&self) -> &NetNs {
        &self.ns_b
    }

    /// The bottleneck queue's counters now.
    ///
    /// # Errors
    ///
    /// `tc` failed or printed something other than its JSON.
    pub fn queue(&self) -> Result<QueueCounters, HarnessError> {
        let out = self.ns_k.exec_ok(
            "tc",
            ["-s", "-j", "qdisc", "show", "dev", self.shaped_if.as_str()],
        )?;
        parse_tc_json(&out.stdout).ok_or_else(|| HarnessError::Invalid {
            what: "tc -s -j qdisc output",
            detail: String::from_utf8_lossy(&out.stdout).into_owned(),
        })
    }

    /// The impairment hop's counters now (A→B: random losses).
    pub fn hop(&self) -> PathCounters {
        self.forwarder
            .as_ref()
            .map(Forwarder::counters)
            .unwrap_or_default()
    }

    /// The impairment hop's namespace.
    pub fn ns_r(&self) -> &NetNs {
        &self.ns_r
    }

    /// One-way delay of each direction, as configured.
    pub fn one_way(&self) -> Duration {
        self.config.rtt / 2
    }
}

/// The root tbf's counters from `tc -s -j qdisc show dev DEV`.
fn parse_tc_json(out: &[u8]) -> Option<QueueCounters> {
    let v: serde_json::Value = serde_json::from_slice(out).ok()?;
    let q = v.as_array()?.iter().find(|q| q["kind"] == "tbf")?;
    let n = |k: &str| q[k].as_u64();
    Some(QueueCounters {
        packets: n("packets")?,
        bytes: n("bytes")?,
        drops: n("drops")?,
        backlog_bytes: n("backlog").unwrap_or(0),
    })
}

impl Drop for BottleneckPath {
    fn drop(&mut self) {
        if let Some(f) = self.forwarder.take() {
            if let Err(e) = f.stop() {
                log::error!("bottleneck path: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_json_counters_parse() {
        let out = br#"[{"kind":"tbf","handle":"8001:","root":true,"refcnt":2,"rate":6250000,"burst":6250,"lat":0,"bytes":1514000,"packets":1000,"drops":7,"overlimits":90,"requeues":0,"backlog":3028,"qlen":2}]"#;
        assert_eq!(
            parse_tc_json(out),
            Some(QueueCounters {
                packets: 1000,
                bytes: 1_514_000,
                drops: 7,
                backlog_bytes: 3028
            })
        );
        assert_eq!(parse_tc_json(br#"[{"kind":"noqueue"}]"#), None);
        assert_eq!(parse_tc_json(b"not json"), None);
    }

    #[test]
    fn bad_configs_are_refused_by_name() {
        let ok = BottleneckConfig {
            rate_bps: 50_000_000,
            queue_bytes: 125_000,
            rtt: Duration::from_millis(20),
            loss: 0.0,
            mtu: 1500,
        };
        assert!(ok.validate().is_ok());
        assert_eq!(ok.bdp_bytes(), 125_000);
        for (bad, word) in [
            (BottleneckConfig { rate_bps: 10, ..ok }, "rate"),
            (
                BottleneckConfig {
                    queue_bytes: 100,
                    ..ok
                },
                "queue",
            ),
            (BottleneckConfig { loss: 1.5, ..ok }, "loss"),
        ] {
            let e = bad.validate().expect_err("refused").to_string();
            assert!(e.contains(word), "{e}");
        }
    }
}
