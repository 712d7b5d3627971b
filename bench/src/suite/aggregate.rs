//! From measurements to report rows: medians with min–max per case, drops
//! summed by reason, the latency CDF of the median run, the ceilings of
//! each MTU, and ratios against Linux (of the row's own family) and the raw
//! ceiling.

use std::collections::BTreeMap;

use crate::rx_rate;

use super::cpu;
use super::measure::{CeilingSample, Outcome, Sample};
use super::peer::LatencyReport;
use super::report::merge_drops;
use super::report::{Ceiling, CpuPerGb, Latency, Ratios, Row, Status};
use super::scenario::{Case, Family, Scenario};
use super::stats::Summary;

/// Turns one case's outcomes into its row (ratios filled in later).
pub(super) fn aggregate(case: &Case, outcomes: Vec<Outcome>) -> Row {
    let mut samples = Vec::new();
    let mut notes = Vec::new();
    let mut unavailable = None;
    for o in outcomes {
        match o {
            Outcome::Measured(s) => samples.push(*s),
            Outcome::Failed(e) => notes.push(e),
            Outcome::Unavailable(e) => unavailable = Some(e),
        }
    }
    let status = match (&unavailable, samples.is_empty(), notes.is_empty()) {
        (Some(_), true, _) => Status::Unavailable,
        (_, true, _) => Status::Failed,
        (_, false, true) => Status::Ok,
        (_, false, false) => Status::Partial,
    };
    if let Some(u) = unavailable {
        notes.insert(0, u);
    }
    for s in &samples {
        notes.extend(s.notes.iter().cloned());
    }
    let sum = |f: fn(&Sample) -> f64| Summary::of(&samples.iter().map(f).collect::<Vec<_>>());
    let mut drops = BTreeMap::new();
    for s in &samples {
        merge_drops(&mut drops, &s.drops);
    }
    let lats: Vec<&LatencyReport> = samples.iter().filter_map(|s| s.latency.as_ref()).collect();
    let latency = (!lats.is_empty()).then(|| {
        let lsum = |f: fn(&LatencyReport) -> f64| {
            Summary::of(&lats.iter().map(|l| f(l)).collect::<Vec<_>>())
        };
        let p50 = lsum(|l| l.p50_us);
        // The CDF of the run whose p50 is the median one.
        let cdf = p50
            .and_then(|m| {
                lats.iter().min_by(|x, y| {
                    (x.p50_us - m.median)
                        .abs()
                        .total_cmp(&(y.p50_us - m.median).abs())
                })
            })
            .map(|l| l.cdf.clone())
            .unwrap_or_default();
        Latency {
            p50_us: p50,
            p99_us: lsum(|l| l.p99_us),
            p999_us: lsum(|l| l.p999_us),
            cdf,
        }
    });
    Row {
        key: case.key(),
        scenario: case.scenario,
        mtu: case.mtu,
        threads: case.threads,
        family: case.family,
        status,
        notes,
        goodput_gbps: sum(|s| s.goodput_gbps),
        cpu_s_per_gb: CpuPerGb {
            sender: sum(|s| s.snd_cpu_per_gb),
            receiver: sum(|s| s.rcv_cpu_per_gb),
            softirq: sum(|s| s.softirq_per_gb),
        },
        cpu_breakdown: cpu::summarise(&samples.iter().map(|s| &s.cpu).collect::<Vec<_>>()),
        retransmits: sum(|s| s.retransmits),
        drops,
        latency,
        ratios: Ratios {
            vs_linux: None,
            vs_linux_offload: None,
            vs_raw: None,
        },
    }
}

/// Median goodput of `scenario`'s row at each MTU and family.
fn goodput_by_mtu(rows: &[Row], scenario: Scenario) -> BTreeMap<(u32, Family), f64> {
    rows.iter()
        .filter(|r| r.scenario == scenario)
        .filter_map(|r| r.goodput_gbps.map(|g| ((r.mtu, r.family), g.median)))
        .collect()
}

/// The raw ceiling as TCP payload of `family`: the same packets per
/// second, each carrying the MTU less that family's headers (the
/// ceiling's own figure is IPv4's).
fn raw_payload(c: &Ceiling, family: Family) -> Option<f64> {
    let payload = |f: Family| f64::from(c.mtu.saturating_sub(f.header_bytes()));
    c.raw_payload_gbps
        .map(|g| g * payload(family) / payload(Family::Ipv4))
}

/// Ratios of each row's median goodput to linux-linux's (offloads off), to
/// linux-linux-offload's (default offloads), both of the row's family, and
/// to the raw ceiling at the same MTU.
pub(super) fn fill_ratios(rows: &mut [Row], ceilings: &[Ceiling]) {
    let linux = goodput_by_mtu(rows, Scenario::LinuxLinux);
    let offload = goodput_by_mtu(rows, Scenario::LinuxLinuxOffload);
    for r in rows.iter_mut() {
        let Some(g) = r.goodput_gbps.map(|g| g.median) else {
            continue;
        };
        let at = (r.mtu, r.family);
        r.ratios.vs_linux = linux.get(&at).filter(|l| **l > 0.0).map(|l| g / l);
        r.ratios.vs_linux_offload = offload.get(&at).filter(|l| **l > 0.0).map(|l| g / l);
        r.ratios.vs_raw = ceilings
            .iter()
            .find(|c| c.mtu == r.mtu)
            .and_then(|c| raw_payload(c, r.family))
            .filter(|c| *c > 0.0)
            .map(|c| g / c);
    }
}

/// Summarises each MTU's ceiling samples over the rounds.
pub(super) fn summarise_ceilings(
    mtus: &[u32],
    mut samples_by_mtu: BTreeMap<u32, Vec<CeilingSample>>,
    memcpy: &[f64],
) -> Vec<Ceiling> {
    let memcpy_summary = Summary::of(memcpy);
    mtus.iter()
        .map(|&mtu| {
            let samples = samples_by_mtu.remove(&mtu).unwrap_or_default();
            let gbps = |f: fn(&CeilingSample) -> Option<rx_rate::Rate>| {
                Summary::of(
                    &samples
                        .iter()
                        .filter_map(f)
                        .map(|r| r.gbps())
                        .collect::<Vec<_>>(),
                )
            };
            let pps = |f: fn(&CeilingSample) -> Option<rx_rate::Rate>| {
                Summary::of(
                    &samples
                        .iter()
                        .filter_map(f)
                        .map(|r| r.packets as f64 / r.seconds)
                        .collect::<Vec<_>>(),
                )
            };
            let raw_pps = match (pps(|s| s.rx), pps(|s| s.tx)) {
                (Some(r), Some(t)) => Some(r.median.min(t.median)),
                (Some(x), None) | (None, Some(x)) => Some(x.median),
                (None, None) => None,
            };
            Ceiling {
                mtu,
                raw_rx_gbps: gbps(|s| s.rx),
                raw_tx_gbps: gbps(|s| s.tx),
                raw_payload_gbps: raw_pps.map(|p| p * f64::from(mtu - 40) * 8.0 / 1e9),
                memcpy_gbps: memcpy_summary,
                errors: samples.iter().flat_map(|s| s.errors.clone()).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::scenario::ThreadMode;

    fn sample(gbps: f64) -> Outcome {
        Outcome::Measured(Box::new(Sample {
            goodput_gbps: gbps,
            snd_cpu_per_gb: 1.0,
            rcv_cpu_per_gb: 2.0,
            softirq_per_gb: 0.5,
            retransmits: 1.0,
            drops: BTreeMap::from([("beyond_posted".to_string(), 2)]),
            ..Sample::default()
        }))
    }

    fn case(scenario: Scenario) -> Case {
        Case {
            scenario,
            mtu: 1500,
            threads: scenario.has_zerosplit().then_some(ThreadMode::Rtc),
            family: Family::Ipv4,
        }
    }

    fn case6(scenario: Scenario) -> Case {
        Case {
            family: Family::Ipv6,
            ..case(scenario)
        }
    }

    #[test]
    fn aggregation_summarises_runs_and_sums_drops() {
        let row = aggregate(
            &case(Scenario::ZsZsTcp),
            vec![sample(8.0), sample(10.0), sample(9.0)],
        );
        assert_eq!(row.status, Status::Ok);
        let g = row.goodput_gbps.expect("goodput");
        assert_eq!((g.median, g.min, g.max, g.n), (9.0, 8.0, 10.0, 3));
        assert_eq!(row.drops.get("beyond_posted"), Some(&6));
    }

    #[test]
    fn failures_and_unavailability_set_the_status() {
        let partial = aggregate(
            &case(Scenario::ZsLinux),
            vec![sample(5.0), Outcome::Failed("peer timed out".into())],
        );
        assert_eq!(partial.status, Status::Partial);
        assert_eq!(partial.notes, ["peer timed out"]);
        let na = aggregate(
            &case(Scenario::ZsZsSmoltcp),
            vec![Outcome::Unavailable(
                "transport smoltcp is not available".into(),
            )],
        );
        assert_eq!(na.status, Status::Unavailable);
        assert!(na.goodput_gbps.is_none());
        let failed = aggregate(&case(Scenario::LinuxZs), vec![Outcome::Failed("x".into())]);
        assert_eq!(failed.status, Status::Failed);
    }

    #[test]
    fn ratios_refer_to_linux_and_the_raw_ceiling_at_the_same_mtu() {
        let mut rows = vec![
            aggregate(&case(Scenario::LinuxLinux), vec![sample(5.0)]),
            aggregate(&case(Scenario::ZsZsTcp), vec![sample(10.0)]),
            aggregate(&case(Scenario::LinuxLinuxOffload), vec![sample(8.0)]),
        ];
        let ceilings = [Ceiling {
            mtu: 1500,
            raw_rx_gbps: None,
            raw_tx_gbps: None,
            raw_payload_gbps: Some(20.0),
            memcpy_gbps: None,
            errors: vec![],
        }];
        fill_ratios(&mut rows, &ceilings);
        assert_eq!(rows[1].ratios.vs_linux, Some(2.0));
        assert_eq!(rows[1].ratios.vs_raw, Some(0.5));
        assert_eq!(rows[0].ratios.vs_linux, Some(1.0));
        assert_eq!(rows[1].ratios.vs_linux_offload, Some(1.25));
        assert_eq!(rows[2].ratios.vs_linux_offload, Some(1.0));
        assert_eq!(rows[0].ratios.vs_linux_offload, Some(5.0 / 8.0));
        // Without an offload row at that MTU the ratio is absent, not 0.
        let mut alone = vec![aggregate(&case(Scenario::ZsZsTcp), vec![sample(10.0)])];
        fill_ratios(&mut alone, &ceilings);
        assert_eq!(alone[0].ratios.vs_linux_offload, None);
    }

    #[test]
    fn each_family_is_compared_with_linux_over_the_same_family() {
        let mut rows = vec![
            aggregate(&case(Scenario::LinuxLinux), vec![sample(5.0)]),
            aggregate(&case6(Scenario::LinuxLinux), vec![sample(4.0)]),
            aggregate(&case(Scenario::ZsZsTcp), vec![sample(10.0)]),
            aggregate(&case6(Scenario::ZsZsTcp), vec![sample(9.0)]),
        ];
        assert_eq!(rows[3].family, Family::Ipv6);
        assert_eq!(rows[3].key, "zs-zs-tcp/1500/rtc/v6");
        let ceilings = [Ceiling {
            mtu: 1500,
            raw_rx_gbps: None,
            raw_tx_gbps: None,
            raw_payload_gbps: Some(14.6),
            memcpy_gbps: None,
            errors: vec![],
        }];
        fill_ratios(&mut rows, &ceilings);
        // IPv4 against IPv4 Linux, though an IPv6 Linux row follows it.
        assert_eq!(rows[2].ratios.vs_linux, Some(2.0));
        assert_eq!(rows[3].ratios.vs_linux, Some(9.0 / 4.0));
        assert_eq!(rows[1].ratios.vs_linux, Some(1.0));
        // The raw ceiling's packets carry 1460 payload bytes over IPv4,
        // 1440 over IPv6: 14.6 and 14.4 Gbit/s.
        assert!((rows[2].ratios.vs_raw.expect("raw") - 10.0 / 14.6).abs() < 1e-12);
        assert!((rows[3].ratios.vs_raw.expect("raw") - 9.0 / 14.4).abs() < 1e-12);
    }
}
