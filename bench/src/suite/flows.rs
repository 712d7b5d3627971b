//! The "flows" section of the bench report: aggregate goodput and CPU per
//! packet (and per byte) of both ends with 1, 16, 256 and 1024
//! concurrent connections on one queue, and the same counts spread over
//! several queues (a veth pair with that many queues per end; a zerosplit
//! end serves each queue with a stack of its own, Linux spreads the flows
//! by hash), zs-zs-tcp against linux-linux (the reference) at MTU 1500.
//! Each point is one `bench-peer --flows N --queues Q` pair on a fresh
//! veth pair (see `endpoint/flows.rs` and `endpoint/kernel_flows.rs`).
//!
//! Packets are counted as payload bytes ÷ MSS (the data segments a bulk
//! transfer sends; ACKs and retransmissions are not in the count), so
//! CPU per packet and CPU per byte differ by the constant MSS and the
//! ratio between flow counts is the same for both.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

use zerosplit_lab::Offloads;

use super::measure::{run_pair, Outcome, Path};
use super::options::SuiteOptions;
use super::peer::{PeerSpec, Role};
use super::report::merge_drops;
use super::report::{drop_list, FlowPoint, FlowsSection, Status, Target};
use super::scenario::{Scenario, ThreadMode};
use super::stats::Summary;

/// The MTU the section runs at.
pub const FLOWS_MTU: u32 = 1500;
/// The scenarios of the section.
pub const FLOW_SCENARIOS: [Scenario; 2] = [Scenario::ZsZsTcp, Scenario::LinuxLinux];

/// One round of one point.
#[derive(Debug, Clone, Default)]
struct FlowSample {
    goodput_gbps: f64,
    snd_us_per_packet: f64,
    rcv_us_per_packet: f64,
    s_per_gb: f64,
    min_share: f64,
    max_share: f64,
    retransmits: f64,
    drops: BTreeMap<String, u64>,
}

/// Data packets of `bytes` of payload at `mtu` (IPv4 + TCP without
/// options: MSS = MTU − 40).
fn packets(bytes: u64, mtu: u32) -> f64 {
    (bytes as f64 / f64::from(mtu.saturating_sub(40).max(1))).ceil()
}

fn spec(
    role: Role,
    sc: Scenario,
    flows: usize,
    queues: u32,
    ifname: &str,
    addr: SocketAddr,
    opts: &SuiteOptions,
) -> PeerSpec {
    let end = if role == Role::Recv {
        sc.receiver()
    } else {
        sc.sender()
    };
    PeerSpec {
        role,
        stack: end.stack_name(),
        iface: ifname.to_owned(),
        addr,
        mtu: FLOWS_MTU,
        threads: ThreadMode::Rtc,
        poll: opts.poll,
        bytes: opts.bytes,
        seconds: opts.seconds,
        rounds: 0,
        message: opts.message,
        flows,
        queues,
        metrics: opts.metrics,
        daemon: None,
    }
}

/// One round of `sc` with `flows` connections on a fresh veth pair with
/// `queues` queues per end.
fn measure_point(
    sc: Scenario,
    flows: usize,
    queues: u32,
    opts: &SuiteOptions,
) -> Result<FlowSample, String> {
    let path = Path::build_with_queues(FLOWS_MTU, Offloads::TxChecksumOff, None, queues)?;
    let (a, b) = path.ends();
    let addr = SocketAddr::new(a.addr.into(), 5303);
    let (rcv, snd) = match run_pair(
        opts,
        &path,
        spec(Role::Recv, sc, flows, queues, &a.ifname, addr, opts),
        spec(Role::Send, sc, flows, queues, &b.ifname, addr, opts),
    ) {
        Ok(r) => r,
        Err(Outcome::Failed(e) | Outcome::Unavailable(e)) => return Err(e),
        Err(Outcome::Measured(_)) => return Err("unexpected outcome".into()),
    };
    if rcv.bytes != snd.bytes || rcv.bytes == 0 {
        return Err(format!(
            "the receiver got {} bytes, the sender sent {}",
            rcv.bytes, snd.bytes
        ));
    }
    // A one-flow peer runs the single-connection code and leaves the
    // per-connection figures empty.
    if flows > 1 && rcv.flows != flows as u64 {
        return Err(format!(
            "the receiver ran {} of {flows} connections",
            rcv.flows
        ));
    }
    let pk = packets(rcv.bytes, FLOWS_MTU);
    let mean = rcv.bytes as f64 / flows as f64;
    // A one-flow peer does not fill in the per-connection figures.
    let (lo, hi) = if flows == 1 {
        (rcv.bytes, rcv.bytes)
    } else {
        (rcv.flow_min_bytes, rcv.flow_max_bytes)
    };
    Ok(FlowSample {
        goodput_gbps: rcv.bytes as f64 * 8.0 / rcv.seconds.max(1e-9) / 1e9,
        snd_us_per_packet: snd.cpu_s * 1e6 / pk,
        rcv_us_per_packet: rcv.cpu_s * 1e6 / pk,
        s_per_gb: (snd.cpu_s + rcv.cpu_s) / (rcv.bytes as f64 / 1e9),
        min_share: lo as f64 / mean,
        max_share: hi as f64 / mean,
        retransmits: (snd.retransmits + rcv.retransmits) as f64,
        drops: {
            let mut d = BTreeMap::new();
            merge_drops(&mut d, &snd.drops);
            merge_drops(&mut d, &rcv.drops);
            d
        },
    })
}

fn point(
    (sc, flows, queues): (Scenario, usize, u32),
    samples: &[FlowSample],
    notes: Vec<String>,
) -> FlowPoint {
    let sum = |f: fn(&FlowSample) -> f64| Summary::of(&samples.iter().map(f).collect::<Vec<_>>());
    let mut drops = BTreeMap::new();
    for s in samples {
        merge_drops(&mut drops, &s.drops);
    }
    let status = match (samples.len(), notes.len()) {
        (0, _) => Status::Failed,
        (_, 0) => Status::Ok,
        _ => Status::Partial,
    };
    FlowPoint {
        scenario: sc,
        flows,
        queues,
        status,
        notes,
        goodput_gbps: sum(|s| s.goodput_gbps),
        cpu_us_per_packet: sum(|s| s.snd_us_per_packet + s.rcv_us_per_packet),
        snd_cpu_us_per_packet: sum(|s| s.snd_us_per_packet),
        rcv_cpu_us_per_packet: sum(|s| s.rcv_us_per_packet),
        cpu_s_per_gb: sum(|s| s.s_per_gb),
        min_share: sum(|s| s.min_share),
        max_share: sum(|s| s.max_share),
        retransmits: sum(|s| s.retransmits),
        drops,
    }
}

/// Runs the section: `opts.flow_runs` rounds of every scenario at every
/// count in `opts.flow_counts` on every queue count in `opts.flow_queues`
/// (a count below the queue count is skipped). `None` when no count is
/// asked for.
pub fn run(opts: &SuiteOptions) -> Option<FlowsSection> {
    if opts.flow_counts.is_empty() || opts.flow_queues.is_empty() {
        return None;
    }
    let keys: Vec<(Scenario, usize, u32)> = FLOW_SCENARIOS
        .iter()
        .flat_map(|&sc| {
            opts.flow_queues.iter().flat_map(move |&q| {
                opts.flow_counts
                    .iter()
                    .filter(move |&&n| n >= q as usize)
                    .map(move |&n| (sc, n, q))
            })
        })
        .collect();
    let mut samples: Vec<(Vec<FlowSample>, Vec<String>)> =
        keys.iter().map(|_| Default::default()).collect();
    'rounds: for round in 0..opts.flow_runs {
        for (k, &(sc, n, q)) in keys.iter().enumerate() {
            if opts
                .stop
                .as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
            {
                break 'rounds;
            }
            if opts.progress {
                eprintln!(
                    "flows round {}/{}: {} × {n} on {q} queue(s)",
                    round + 1,
                    opts.flow_runs,
                    sc.name()
                );
            }
            match measure_point(sc, n, q, opts) {
                Ok(s) => samples[k].0.push(s),
                Err(e) => {
                    eprintln!("flows {} × {n} on {q} queue(s): {e}", sc.name());
                    samples[k].1.push(e);
                }
            }
        }
    }
    let points = keys
        .iter()
        .zip(samples)
        .map(|(&key, (s, notes))| point(key, &s, notes))
        .collect();
    Some(FlowsSection {
        mtu: FLOWS_MTU,
        runs: opts.flow_runs,
        seconds: opts.seconds,
        points,
    })
}

/// The section's targets, on zs-zs-tcp on one queue: the most flows
/// measured (1024 in a full run) against one flow — aggregate goodput
/// ≥ 0.8×, and the same CPU per packet within 25 % (≤ 1.25×).
pub fn targets(section: &FlowsSection) -> Vec<Target> {
    let sc = Scenario::ZsZsTcp;
    let Some(most) = section
        .points
        .iter()
        .filter(|p| p.scenario == sc && p.flows > 1 && p.queues == 1)
        .map(|p| p.flows)
        .max()
    else {
        return Vec::new();
    };
    let med = |n: usize, f: fn(&FlowPoint) -> Option<Summary>| {
        section.point(sc, n).and_then(f).map(|s| s.median)
    };
    let ratio =
        |f: fn(&FlowPoint) -> Option<Summary>| med(most, f).zip(med(1, f)).map(|(m, one)| m / one);
    let target = |name: String, value: Option<f64>, goal: f64, at_most: bool| Target {
        met: value.map(|v| if at_most { v <= goal } else { v >= goal }),
        name,
        value,
        goal,
        at_most,
    };
    vec![
        target(
            format!(
                "zs-zs-tcp {most} flows aggregate goodput ÷ 1 flow's, MTU {}",
                section.mtu
            ),
            ratio(|p| p.goodput_gbps),
            0.8,
            false,
        ),
        target(
            format!("zs-zs-tcp same CPU per packet (≤ 1.25×): {most} flows ÷ 1 flow"),
            ratio(|p| p.cpu_us_per_packet),
            1.25,
            true,
        ),
    ]
}

fn med(s: Option<Summary>, prec: usize) -> String {
    s.map_or("-".into(), |s| format!("{:.*}", prec, s.median))
}

/// The section as text, printed after the main table.
pub fn render(section: &FlowsSection) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nflows (MTU {}, {} round(s) of {} s per point):",
        section.mtu, section.runs, section.seconds
    );
    let _ = writeln!(
        out,
        "  {:<13} {:>6} {:>6} {:>8} {:>13} {:>9} {:>9} {:>9} {:>8} {:>11} {:>6}  drops",
        "scenario",
        "queues",
        "flows",
        "Gbit/s",
        "min–max",
        "µs/pkt",
        "snd",
        "rcv",
        "s/GB",
        "share lo–hi",
        "retx"
    );
    for p in &section.points {
        if p.status == Status::Failed {
            let why = p.notes.first().cloned().unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<13} {:>6} {:>6} FAILED: {why}",
                p.scenario.name(),
                p.queues,
                p.flows
            );
            continue;
        }
        let range = p
            .goodput_gbps
            .map_or("-".into(), |s| format!("{:.2}–{:.2}", s.min, s.max));
        let _ = writeln!(
            out,
            "  {:<13} {:>6} {:>6} {:>8} {:>13} {:>9} {:>9} {:>9} {:>8} {:>11} {:>6}  {}{}",
            p.scenario.name(),
            p.queues,
            p.flows,
            med(p.goodput_gbps, 2),
            range,
            med(p.cpu_us_per_packet, 3),
            med(p.snd_cpu_us_per_packet, 3),
            med(p.rcv_cpu_us_per_packet, 3),
            med(p.cpu_s_per_gb, 2),
            format!("{}–{}", med(p.min_share, 2), med(p.max_share, 2)),
            med(p.retransmits, 0),
            drop_list(&p.drops),
            if p.status == Status::Partial {
                format!("  [partial: {}]", p.notes.join("; "))
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(
        out,
        "  µs/pkt = CPU µs (user+system) of both processes per data packet (payload ÷ MSS); snd/rcv = each process's share;\n  share lo–hi = the connection that moved least / most ÷ the mean; drops = both ends, summed over rounds;\n  zs-zs-tcp runs run-to-completion (one stack per queue), linux-linux one epoll thread per end."
    );
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> FlowsSection {
        let s = |m: f64| Summary::of(&[m]);
        let p = |scenario, flows, gbps: f64, us: f64| FlowPoint {
            scenario,
            flows,
            queues: 1,
            status: Status::Ok,
            notes: vec![],
            goodput_gbps: s(gbps),
            cpu_us_per_packet: s(us),
            snd_cpu_us_per_packet: s(us / 2.0),
            rcv_cpu_us_per_packet: s(us / 2.0),
            cpu_s_per_gb: s(us / 1.46),
            min_share: s(0.9),
            max_share: s(1.1),
            retransmits: s(0.0),
            drops: BTreeMap::new(),
        };
        FlowsSection {
            mtu: 1500,
            runs: 1,
            seconds: 1.0,
            points: vec![
                p(Scenario::ZsZsTcp, 1, 4.0, 2.0),
                p(Scenario::ZsZsTcp, 16, 3.9, 2.1),
                p(Scenario::ZsZsTcp, 1024, 3.0, 3.0),
                // Several queues are shown, never judged against one flow.
                FlowPoint {
                    queues: 2,
                    ..p(Scenario::ZsZsTcp, 2048, 9.0, 1.0)
                },
                p(Scenario::LinuxLinux, 1, 5.0, 2.0),
                FlowPoint {
                    status: Status::Failed,
                    notes: vec!["no handshake".into()],
                    ..p(Scenario::LinuxLinux, 1024, 0.0, 0.0)
                },
            ],
        }
    }

    #[test]
    fn targets_compare_the_most_flows_with_one() {
        let t = targets(&sample());
        assert_eq!(t.len(), 2);
        assert!(t[0].name.contains("1024 flows"), "{}", t[0].name);
        assert!((t[0].value.expect("goodput ratio") - 0.75).abs() < 1e-9);
        assert_eq!(t[0].met, Some(false));
        assert!(t[1].name.contains("same CPU per packet"), "{}", t[1].name);
        assert!((t[1].value.expect("cpu ratio") - 1.5).abs() < 1e-9);
        assert_eq!(t[1].met, Some(false));
        let mut only_one = sample();
        only_one.points.retain(|p| p.flows == 1);
        assert!(targets(&only_one).is_empty());
    }

    #[test]
    fn render_shows_every_point_and_failures() {
        let text = render(&sample());
        assert!(text.contains("flows (MTU 1500"), "{text}");
        let two = text
            .lines()
            .find(|l| l.contains("zs-zs-tcp") && l.contains(" 2048 "))
            .expect("two-queue row");
        assert!(two.contains("      2   2048"), "{two}");
        let row = text
            .lines()
            .find(|l| l.contains("zs-zs-tcp") && l.contains(" 1024 "))
            .expect("1024 row");
        assert!(row.contains("3.00"), "{row}");
        assert!(row.contains("0.90–1.10"), "{row}");
        assert!(row.ends_with("none"), "{row}");
        assert!(text.contains("FAILED: no handshake"), "{text}");
    }

    #[test]
    fn a_point_sums_its_rounds_drops_by_reason() {
        let round = |n: u64| FlowSample {
            goodput_gbps: 1.0,
            drops: BTreeMap::from([("xsk_rx_ring_full".to_string(), n)]),
            ..FlowSample::default()
        };
        let p = point((Scenario::ZsZsTcp, 16, 2), &[round(3), round(4)], vec![]);
        assert_eq!((p.status, p.queues), (Status::Ok, 2));
        assert_eq!(p.drops.get("xsk_rx_ring_full"), Some(&7));
    }

    #[test]
    fn packets_count_full_segments() {
        assert_eq!(packets(1460, 1500), 1.0);
        assert_eq!(packets(1461, 1500), 2.0);
        assert_eq!(packets(0, 1500), 0.0);
    }
}
