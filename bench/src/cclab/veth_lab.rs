//! The veth scenarios of `zerosplit cc-lab`, on one [`BottleneckPath`]:
//!
//! - **conformance**: our CUBIC / NewReno / BBR alone, then Linux's
//!   cubic / reno / bbr alone, on the same path: goodput, queueing delay,
//!   retransmissions and cwnd side by side, and both cwnd traces on one
//!   plot;
//! - **inter-protocol**: a zerosplit flow against a Linux flow, started
//!   together: each one's share of the second half;
//! - **intra-protocol**: three zerosplit flows of one controller starting
//!   a sixth of the run apart: Jain's index over time, over the last
//!   third, and the convergence time.
//!
//! RTT fairness stays in the simulator: the impairment hop delays a
//! direction, not a flow.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use transports::cc::Algorithm;

use super::veth::{self, FlowPlan, FlowResult, Sender, VethRun, BUCKET};
use super::{converged_at, Check};
use crate::impair::{BottleneckConfig, BottleneckPath};
use crate::suite::svg::{xy_chart, Series};

/// The veth bottleneck and run lengths.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct VethSetup {
    /// The path.
    pub path: BottleneckConfig,
    /// Length of each conformance run, s.
    pub single_s: f64,
    /// Length of each two- and three-flow run, s.
    pub shared_s: f64,
}

impl VethSetup {
    /// 50 Mbit/s, 20 ms, one BDP of drop-tail queue: slow enough that the
    /// 2-vCPU test machine's CPUs are never the bottleneck (zerosplit and
    /// Linux both reach 1+ Gbit/s through the impairment hop), long
    /// enough an RTT that the controllers' dynamics show.
    pub fn new(quick: bool) -> VethSetup {
        let mut path = BottleneckConfig {
            rate_bps: 50_000_000,
            queue_bytes: 0,
            rtt: Duration::from_millis(20),
            loss: 0.0,
            mtu: 1500,
        };
        path.queue_bytes = path.bdp_bytes();
        VethSetup {
            path,
            single_s: if quick { 10.0 } else { 30.0 },
            // 30 s shared when quick: the share is read over the second
            // half, and 10 s of it let zs-cubic's share against Linux's
            // cubic fall to 0.29 once in CI (0.41 in the next run).
            shared_s: if quick { 30.0 } else { 60.0 },
        }
    }

    fn rate_mbps(&self) -> f64 {
        self.path.rate_bps as f64 / 1e6
    }
}

/// One flow alone on the path.
#[derive(Debug, Clone, Serialize)]
pub struct Alone {
    /// `zs-cubic`, `linux-cubic`, …
    pub label: String,
    /// Goodput over the run, Mbit/s.
    pub goodput_mbps: f64,
    /// Share of the bottleneck rate.
    pub utilisation: f64,
    /// 95th-percentile queueing delay over the second half, ms.
    pub p95_queue_ms: f64,
    /// Retransmitted segments, %.
    pub retrans_pct: f64,
    /// Packets the bottleneck queue dropped.
    pub queue_drops: u64,
    /// Mean cwnd over the second half, kB.
    pub mean_cwnd_kb: f64,
}

impl Alone {
    fn of(run: &VethRun, setup: &VethSetup) -> Alone {
        let f = &run.flows[0];
        let g = f.goodput_mbps(f.start_s, f.stop_s);
        Alone {
            label: f.label.clone(),
            goodput_mbps: g,
            utilisation: g / setup.rate_mbps(),
            p95_queue_ms: f.p95_queue_ms(),
            retrans_pct: f.loss_pct(),
            queue_drops: run.queue.drops,
            mean_cwnd_kb: f.mean_cwnd_kb(),
        }
    }
}

/// Ours beside Linux's, one controller.
#[derive(Debug, Clone, Serialize)]
pub struct Conformance {
    /// Our controller.
    pub cc: String,
    /// Ours alone.
    pub ours: Alone,
    /// Linux's alone.
    pub linux: Alone,
}

impl Conformance {
    /// Our goodput over Linux's.
    pub fn goodput_ratio(&self) -> f64 {
        self.ours.goodput_mbps / self.linux.goodput_mbps.max(1e-9)
    }
}

/// A zerosplit flow against a Linux flow.
#[derive(Debug, Clone, Serialize)]
pub struct Inter {
    /// Our controller.
    pub ours: String,
    /// Linux's.
    pub linux: String,
    /// Our goodput over the second half, Mbit/s.
    pub ours_mbps: f64,
    /// Linux's.
    pub linux_mbps: f64,
    /// Our share of what both got.
    pub ours_share: f64,
    /// Whether Linux's is our controller's twin (the pairs whose share
    /// has a bound).
    pub twins: bool,
}

/// Three zerosplit flows of one controller.
#[derive(Debug, Clone, Serialize)]
pub struct IntraVeth {
    /// The controller.
    pub cc: String,
    /// Jain's index over the last third.
    pub jain_last_third: f64,
    /// Seconds from the last start until the index averaged over a second
    /// first reached 0.9.
    pub convergence_s: Option<f64>,
    /// Goodput of all three over the last third, Mbit/s.
    pub total_mbps: f64,
}

/// Everything the veth part found.
#[derive(Debug, Clone, Serialize)]
pub struct VethReport {
    /// The path and run lengths.
    pub setup: VethSetup,
    /// Per controller with a Linux twin.
    pub conformance: Vec<Conformance>,
    /// zerosplit against Linux.
    pub inter: Vec<Inter>,
    /// Three zerosplit flows.
    pub intra: Vec<IntraVeth>,
}

/// Writes a file of the lab's output directory.
pub(super) type Write<'a> = &'a dyn Fn(&str, &str) -> Result<(), super::LabError>;

/// Runs the veth scenarios for `ccs`, writing traces and plots.
///
/// # Errors
/// The path could not be built (not root, no `tc`), a run failed, or an
/// output could not be written.
pub fn run(
    quick: bool,
    ccs: &[Algorithm],
    write: Write<'_>,
    say: &dyn Fn(String),
) -> Result<VethReport> {
    let setup = VethSetup::new(quick);
    let path = BottleneckPath::create(setup.path).context(
        "building the veth bottleneck (root and iproute2 needed; --sim-only skips the veth part)",
    )?;
    say(format!(
        "veth: bottleneck {} Mbit/s tbf, base RTT {} ms, queue {} kB",
        setup.rate_mbps(),
        setup.path.rtt.as_millis(),
        setup.path.queue_bytes / 1000
    ));
    let alone = |sender: Sender| -> Result<VethRun> {
        say(format!(
            "veth: {} alone, {} s",
            sender.label(),
            setup.single_s
        ));
        veth::run(
            &path,
            &[FlowPlan {
                sender,
                start: Duration::ZERO,
                stop: Duration::from_secs_f64(setup.single_s),
            }],
        )
        .with_context(|| format!("{} alone", sender.label()))
    };
    let mut report = VethReport {
        setup,
        conformance: vec![],
        inter: vec![],
        intra: vec![],
    };
    let mut scatter: Vec<Series> = vec![];
    for &cc in ccs {
        let Some(twin) = Sender::linux_twin(cc) else {
            continue;
        };
        let ours = alone(Sender::Zerosplit(cc))?;
        let theirs = alone(twin)?;
        let mut cwnd: Vec<Series> = vec![];
        for r in [&ours, &theirs] {
            let f = &r.flows[0];
            write(&format!("veth-alone-{}.csv", f.label), &samples_csv(f))?;
            cwnd.push((f.label.clone(), cwnd_series(f)));
        }
        write(
            &format!("veth-cwnd-{cc}.svg"),
            &xy_chart(
                &format!("cwnd, alone on veth: ours vs Linux ({cc})"),
                "time (s)",
                "cwnd (kB)",
                &cwnd,
                true,
            ),
        )?;
        let row = Conformance {
            cc: cc.name().to_owned(),
            ours: Alone::of(&ours, &setup),
            linux: Alone::of(&theirs, &setup),
        };
        for a in [&row.ours, &row.linux] {
            scatter.push((a.label.clone(), vec![(a.p95_queue_ms, a.goodput_mbps)]));
        }
        report.conformance.push(row);
    }
    if !scatter.is_empty() {
        write(
            "veth-throughput-delay.svg",
            &xy_chart(
                "throughput vs 95th-percentile queueing delay, alone on veth",
                "queueing delay p95 (ms)",
                "goodput (Mbit/s)",
                &scatter,
                false,
            ),
        )?;
    }
    for (ours, linux) in inter_pairs(quick, ccs) {
        let label = format!("{} vs {}", ours.label(), linux.label());
        say(format!("veth: {label}, {} s", setup.shared_s));
        let both = |sender| FlowPlan {
            sender,
            start: Duration::ZERO,
            stop: Duration::from_secs_f64(setup.shared_s),
        };
        let r = veth::run(&path, &[both(ours), both(linux)]).with_context(|| label.clone())?;
        let (h, e) = (setup.shared_s / 2.0, setup.shared_s);
        let (a, b) = (r.flows[0].goodput_mbps(h, e), r.flows[1].goodput_mbps(h, e));
        write(
            &format!("veth-inter-{}-{}.svg", ours.label(), linux.label()),
            &throughput_chart(&format!("throughput on veth: {label}"), &r),
        )?;
        let name = format!("veth-inter-{}-{}", ours.label(), linux.label());
        write(&format!("{name}.csv"), &throughput_csv(&r))?;
        for f in &r.flows {
            write(&format!("{name}.{}.csv", f.label), &samples_csv(f))?;
        }
        report.inter.push(Inter {
            ours: ours.label(),
            linux: linux.label(),
            ours_mbps: a,
            linux_mbps: b,
            ours_share: a / (a + b).max(1e-9),
            twins: matches!(ours, Sender::Zerosplit(cc) if Sender::linux_twin(cc) == Some(linux)),
        });
    }
    let mut jain: Vec<Series> = vec![];
    for &cc in ccs {
        say(format!(
            "veth: three zs-{cc} flows, staggered, {} s",
            setup.shared_s
        ));
        let stagger = setup.shared_s / 6.0;
        let plans: Vec<FlowPlan> = (0..3)
            .map(|k| FlowPlan {
                sender: Sender::Zerosplit(cc),
                start: Duration::from_secs_f64(stagger * f64::from(k)),
                stop: Duration::from_secs_f64(setup.shared_s),
            })
            .collect();
        let r = veth::run(&path, &plans).with_context(|| format!("three zs-{cc} flows"))?;
        let over_time = r.jain_over_time();
        let third = setup.shared_s * 2.0 / 3.0;
        let last: Vec<f64> = r
            .flows
            .iter()
            .map(|f| f.goodput_mbps(third, setup.shared_s))
            .collect();
        let last_start = stagger * 2.0;
        write(
            &format!("veth-intra-{cc}.svg"),
            &throughput_chart(&format!("throughput on veth: three zs-{cc} flows"), &r),
        )?;
        write(&format!("veth-intra-{cc}.csv"), &throughput_csv(&r))?;
        for (k, f) in r.flows.iter().enumerate() {
            write(&format!("veth-intra-{cc}.{}.csv", k + 1), &samples_csv(f))?;
        }
        jain.push((format!("zs-{cc}"), over_time.clone()));
        report.intra.push(IntraVeth {
            cc: cc.name().to_owned(),
            jain_last_third: veth::jain(&last),
            convergence_s: converged_at(&over_time, last_start, BUCKET.as_secs_f64())
                .map(|t| t - last_start),
            total_mbps: last.iter().sum(),
        });
    }
    if !jain.is_empty() {
        write(
            "veth-fairness.svg",
            &xy_chart(
                "Jain's index on veth, three flows starting staggered",
                "time (s)",
                "Jain's index",
                &jain,
                true,
            ),
        )?;
    }
    Ok(report)
}

/// Quick: each of our controllers against its Linux twin. Full: each of
/// ours against each of Linux's.
fn inter_pairs(quick: bool, ccs: &[Algorithm]) -> Vec<(Sender, Sender)> {
    let linux = [
        Sender::Linux("reno"),
        Sender::Linux("cubic"),
        Sender::Linux("bbr"),
    ];
    let mut v = vec![];
    for &cc in ccs {
        let ours = Sender::Zerosplit(cc);
        if quick {
            v.extend(Sender::linux_twin(cc).map(|l| (ours, l)));
        } else {
            v.extend(linux.iter().map(|&l| (ours, l)));
        }
    }
    v
}

fn cwnd_series(f: &FlowResult) -> Vec<(f64, f64)> {
    f.samples
        .iter()
        .map(|s| (s.t_s, s.cwnd as f64 / 1e3))
        .collect()
}

fn throughput_chart(title: &str, r: &VethRun) -> String {
    let series: Vec<Series> = r
        .flows
        .iter()
        .enumerate()
        .map(|(i, f)| (format!("{} #{}", f.label, i + 1), f.throughput_series()))
        .collect();
    xy_chart(title, "time (s)", "Mbit/s (100 ms buckets)", &series, true)
}

fn throughput_csv(r: &VethRun) -> String {
    let mut out = String::from("time_s");
    for (i, f) in r.flows.iter().enumerate() {
        let _ = write!(out, ",{}_{}_mbps", f.label, i + 1);
    }
    out.push('\n');
    let n = r.flows.iter().map(|f| f.buckets.len()).min().unwrap_or(0);
    let series: Vec<Vec<(f64, f64)>> = r.flows.iter().map(FlowResult::throughput_series).collect();
    for i in 0..n {
        let _ = write!(out, "{:.2}", series[0][i].0);
        for s in &series {
            let _ = write!(out, ",{:.3}", s[i].1);
        }
        out.push('\n');
    }
    out
}

/// A flow's controller samples as CSV.
pub fn samples_csv(f: &FlowResult) -> String {
    let mut out = String::from(
        "time_s,state,cwnd_bytes,ssthresh_bytes,srtt_us,min_rtt_us,pacing_rate_bps,bytes_in_flight,retransmitted_segments\n",
    );
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for s in &f.samples {
        let _ = writeln!(
            out,
            "{:.3},{},{},{},{},{},{},{},{}",
            s.t_s,
            s.state,
            s.cwnd,
            opt(s.ssthresh),
            s.srtt_us,
            s.min_rtt_us,
            opt(s.pacing_bps),
            s.in_flight,
            s.retrans
        );
    }
    out
}

/// The veth bounds; see the README's CC lab section for why each is what
/// it is. The run-alone bounds hold for `--quick`'s 10 s runs, where the
/// start (slow start, its overshoot and recovery) weighs a third more
/// than in 30 s: measured 0.86–0.95 utilisation and 0.91–1.01 of Linux's
/// goodput there, 0.91–0.95 and 0.97–1.00 in 30 s runs.
pub fn checks(r: &VethReport) -> Vec<Check> {
    let mut v = vec![];
    let mut check = |what: String, value: f64, lo: f64, hi: f64, exempt: Option<&str>| {
        v.push(Check {
            what,
            value,
            bound: if hi.is_finite() {
                format!("{lo:.2}..={hi:.2}")
            } else {
                format!("≥ {lo:.2}")
            } + &exempt.map_or(String::new(), |why| format!(", not enforced: {why}")),
            ok: (lo..=hi).contains(&value),
            enforced: exempt.is_none(),
        });
    };
    for c in &r.conformance {
        check(
            format!("veth {}: utilisation alone", c.ours.label),
            c.ours.utilisation,
            0.80,
            f64::INFINITY,
            None,
        );
        check(
            format!("veth {}: goodput / Linux's", c.cc),
            c.goodput_ratio(),
            0.85,
            1.15,
            None,
        );
    }
    for i in &r.inter {
        if i.twins {
            check(
                format!("veth {} vs {}: our share", i.ours, i.linux),
                i.ours_share,
                0.3,
                0.7,
                super::sharing_exemption(i.ours.trim_start_matches("zs-")),
            );
        }
    }
    for i in &r.intra {
        check(
            format!("veth 3 zs-{}: Jain, last third", i.cc),
            i.jain_last_third,
            0.8,
            f64::INFINITY,
            super::sharing_exemption(&i.cc),
        );
    }
    v
}

/// The veth tables.
pub fn table(r: &VethReport) -> String {
    let mut out = String::new();
    let s = &r.setup;
    let _ = writeln!(
        out,
        "cc-lab (veth): tbf {} Mbit/s on a kernel-forwarded hop, base RTT {} ms from the impairment hop, queue {} kB (1 BDP); {} s alone, {} s shared",
        s.rate_mbps(),
        s.path.rtt.as_millis(),
        s.path.queue_bytes / 1000,
        s.single_s,
        s.shared_s
    );
    if !r.conformance.is_empty() {
        let _ = writeln!(out, "conformance, alone on the path (ours | Linux):");
        let _ = writeln!(
            out,
            "{:<8} {:>15} {:>7} {:>15} {:>15} {:>15} {:>15}",
            "cc", "Mbit/s", "ratio", "q p95 ms", "retrans %", "cwnd kB", "queue drops"
        );
        for c in &r.conformance {
            let (o, l) = (&c.ours, &c.linux);
            let _ = writeln!(
                out,
                "{:<8} {:>7.1}|{:<7.1} {:>7.3} {:>7.2}|{:<7.2} {:>7.3}|{:<7.3} {:>7.1}|{:<7.1} {:>7}|{:<7}",
                c.cc,
                o.goodput_mbps,
                l.goodput_mbps,
                c.goodput_ratio(),
                o.p95_queue_ms,
                l.p95_queue_ms,
                o.retrans_pct,
                l.retrans_pct,
                o.mean_cwnd_kb,
                l.mean_cwnd_kb,
                o.queue_drops,
                l.queue_drops
            );
        }
    }
    if !r.inter.is_empty() {
        let _ = writeln!(out, "zerosplit vs Linux, started together (second half):");
        for i in &r.inter {
            let _ = writeln!(
                out,
                "  {:<12} {:>6.1} Mbit/s  vs {:<12} {:>6.1} Mbit/s   our share {:>5.1} %",
                i.ours,
                i.ours_mbps,
                i.linux,
                i.linux_mbps,
                100.0 * i.ours_share
            );
        }
    }
    if !r.intra.is_empty() {
        let _ = writeln!(out, "three zerosplit flows, staggered:");
        for i in &r.intra {
            let _ = writeln!(
                out,
                "  zs-{:<8} Jain last third {:.3}   converged {}   together {:.1} Mbit/s",
                i.cc,
                i.jain_last_third,
                i.convergence_s
                    .map_or("never".to_owned(), |c| format!("after {c:.1} s")),
                i.total_mbps
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alone(label: &str, mbps: f64) -> Alone {
        Alone {
            label: label.into(),
            goodput_mbps: mbps,
            utilisation: mbps / 50.0,
            p95_queue_ms: 19.0,
            retrans_pct: 0.4,
            queue_drops: 100,
            mean_cwnd_kb: 180.0,
        }
    }

    fn inter(ours: Algorithm, linux: Sender, share: f64) -> Inter {
        Inter {
            ours: Sender::Zerosplit(ours).label(),
            linux: linux.label(),
            ours_mbps: 50.0 * share,
            linux_mbps: 50.0 * (1.0 - share),
            ours_share: share,
            twins: Sender::linux_twin(ours) == Some(linux),
        }
    }

    #[test]
    fn quick_pairs_each_controller_with_its_twin_and_full_with_all_three() {
        let ccs = [Algorithm::Cubic, Algorithm::Dctcp];
        let quick = inter_pairs(true, &ccs);
        assert_eq!(
            quick,
            vec![(Sender::Zerosplit(Algorithm::Cubic), Sender::Linux("cubic"))]
        );
        assert_eq!(inter_pairs(false, &ccs).len(), 6);
    }

    #[test]
    fn bounds_fail_an_unfair_or_slow_controller_and_leave_bbr_open() {
        let report = VethReport {
            setup: VethSetup::new(true),
            conformance: vec![Conformance {
                cc: "cubic".into(),
                ours: alone("zs-cubic", 30.0),
                linux: alone("linux-cubic", 47.0),
            }],
            inter: vec![
                inter(Algorithm::NewReno, Sender::Linux("reno"), 0.2),
                inter(Algorithm::NewReno, Sender::Linux("bbr"), 0.05),
                inter(Algorithm::Bbr, Sender::Linux("bbr"), 0.1),
            ],
            intra: vec![],
        };
        let checks = checks(&report);
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| !c.ok && c.enforced)
            .map(|c| c.what.as_str())
            .collect();
        assert_eq!(
            failed,
            vec![
                "veth zs-cubic: utilisation alone",
                "veth cubic: goodput / Linux's",
                "veth zs-newreno vs linux-reno: our share",
            ]
        );
        // Reno against BBR has no bound (BBR takes more by design); BBR
        // against BBR is reported, not enforced.
        assert_eq!(checks.len(), 4);
        assert!(checks.iter().any(|c| !c.ok && !c.enforced));
        let text = table(&report);
        assert!(text.contains("our share  20.0 %"), "{text}");
    }
}
