//! The `attached` section of the report: zerosplit attached to a
//! `zerosplit daemon` beside zerosplit in-process, in the same run. Per
//! MTU and direction (zs-linux: zerosplit sends; linux-zs: zerosplit
//! receives), each round measures the case twice on fresh veth pairs, in
//! an order that alternates between rounds: once with the zerosplit end's
//! stack in its own process, once with that end attached
//! ([`super::daemon`], `bench-peer --daemon`). Both run the same code
//! (the end is generic over the provider) over the same stack
//! configuration ([`super::endpoint::daemon_config`]).
//!
//! Figures: goodput, ping-pong p50/p99, CPU per GB of the zerosplit end
//! (application + daemon when attached; the daemon's share alone beside),
//! and payload copies per payload byte: the copies the zerosplit end's
//! stack counted ([`zerosplit::host::PayloadCopies`]: RX placement, TX
//! frame copies, transport touches), from the in-process stack or from
//! the daemon's report at exit, over the bytes the application moved.
//!
//! Targets ([`targets`]): attached ÷ in-process goodput ≥ 0.9; attached
//! p50 − in-process p50 ≤ 5 µs; copies per byte equal (within 0.01).

use std::fmt::Write as _;

use super::measure::{measure_as, Outcome};
use super::options::SuiteOptions;
use super::report::{AttachedRow, AttachedSection, Row, Target};
use super::scenario::{Case, Scenario, ThreadMode};
use super::stats::Summary;

/// Least attached goodput may be, as a fraction of in-process goodput.
pub const GOODPUT_GOAL: f64 = 0.9;
/// Most attached p50 may exceed in-process p50, in µs.
pub const P50_GOAL_US: f64 = 5.0;
/// Most the copies per byte may differ.
pub const COPIES_GOAL: f64 = 0.01;
/// The directions measured: zerosplit sends, zerosplit receives.
const SCENARIOS: [Scenario; 2] = [Scenario::ZsLinux, Scenario::LinuxZs];

/// Rounds: one in `--quick`, else the suite's.
fn rounds(opts: &SuiteOptions) -> usize {
    if opts.quick {
        1
    } else {
        opts.runs
    }
}

/// One mode's samples over the rounds.
#[derive(Debug, Default)]
struct Samples {
    goodput: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    cpu: Vec<f64>,
    daemon_cpu: Vec<f64>,
    copies: Vec<f64>,
    notes: Vec<String>,
}

impl Samples {
    fn take(&mut self, case: &Case, opts: &SuiteOptions, attached: bool) {
        match measure_as(case, opts, attached) {
            Outcome::Measured(s) => {
                self.goodput.push(s.goodput_gbps);
                if let Some(l) = &s.latency {
                    self.p50.push(l.p50_us);
                    self.p99.push(l.p99_us);
                }
                self.cpu.push(if case.scenario.receiver().is_zerosplit() {
                    s.rcv_cpu_per_gb
                } else {
                    s.snd_cpu_per_gb
                });
                self.daemon_cpu.extend(s.daemon_cpu_per_gb);
                self.copies.extend(s.copies_per_byte);
                self.notes.extend(s.notes.iter().cloned());
            }
            Outcome::Failed(e) | Outcome::Unavailable(e) => self.notes.push(e),
        }
    }

    fn row(self, case: &Case, attached: bool) -> AttachedRow {
        AttachedRow {
            scenario: case.scenario,
            mtu: case.mtu,
            attached,
            goodput_gbps: Summary::of(&self.goodput),
            p50_us: Summary::of(&self.p50),
            p99_us: Summary::of(&self.p99),
            cpu_s_per_gb: Summary::of(&self.cpu),
            daemon_cpu_s_per_gb: Summary::of(&self.daemon_cpu),
            copies_per_byte: Summary::of(&self.copies),
            notes: self.notes,
        }
    }
}

/// Measures both modes of both directions at every MTU of the run (`None`
/// when the section is off or the path is impaired).
pub fn run(opts: &SuiteOptions) -> Option<AttachedSection> {
    if !opts.attached || opts.impair.is_some() {
        return None;
    }
    let cases: Vec<Case> = opts
        .mtus
        .iter()
        .flat_map(|&mtu| {
            SCENARIOS.map(|scenario| Case {
                scenario,
                mtu,
                threads: Some(ThreadMode::Rtc),
            })
        })
        .collect();
    let mut samples: Vec<[Samples; 2]> = cases.iter().map(|_| Default::default()).collect();
    'rounds: for round in 0..rounds(opts) {
        for (case, s) in cases.iter().zip(samples.iter_mut()) {
            // Alternate which mode goes first, so neither always runs on a
            // machine the other just warmed (or heated).
            for k in 0..2 {
                if opts
                    .stop
                    .as_ref()
                    .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
                {
                    break 'rounds;
                }
                let attached = (k + round) % 2 == 1;
                s[usize::from(attached)].take(case, opts, attached);
            }
        }
    }
    let rows = cases
        .iter()
        .zip(samples)
        .flat_map(|(case, [inp, att])| [inp.row(case, false), att.row(case, true)])
        .collect();
    Some(AttachedSection { rows })
}

/// The section's targets, per direction and MTU.
pub fn targets(section: &AttachedSection) -> Vec<Target> {
    let mut t = Vec::new();
    for (sc, mtu) in section.points() {
        t.push(target(
            format!("attached ÷ in-process goodput, {sc}/{mtu}"),
            section.goodput_ratio(sc, mtu),
            GOODPUT_GOAL,
            false,
        ));
        t.push(target(
            format!("attached − in-process ping-pong p50 µs, {sc}/{mtu}"),
            section.p50_delta(sc, mtu),
            P50_GOAL_US,
            true,
        ));
        t.push(target(
            format!("|attached − in-process| payload copies per byte, {sc}/{mtu}"),
            section.copies_delta(sc, mtu),
            COPIES_GOAL,
            true,
        ));
    }
    t
}

fn target(name: String, value: Option<f64>, goal: f64, at_most: bool) -> Target {
    Target {
        met: value.map(|v| if at_most { v <= goal } else { v >= goal }),
        name,
        value,
        goal,
        at_most,
    }
}

/// The section as text, with the Linux rows of the main table at the same
/// MTU (the same run) for scale.
pub fn render(section: &AttachedSection, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nattached vs in-process (same run; the zerosplit end in its own process, or attached to a `zerosplit daemon`; s/GB = the zerosplit end's CPU, daemon included):"
    );
    let _ = writeln!(
        out,
        "  {:<26} {:<11} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8} {:>9} {:>8}",
        "case",
        "mode",
        "Gbit/s",
        "×in-pr",
        "p50 µs",
        "Δp50",
        "p99 µs",
        "s/GB",
        "daemon",
        "copies/B"
    );
    let med = |s: Option<Summary>, prec: usize| {
        s.map_or("-".into(), |s| format!("{:.*}", prec, s.median))
    };
    for (sc, mtu) in section.points() {
        for r in section
            .rows
            .iter()
            .filter(|r| r.scenario == sc && r.mtu == mtu)
        {
            let (ratio, delta) = if r.attached {
                (
                    section
                        .goodput_ratio(sc, mtu)
                        .map_or("-".into(), |v| format!("{v:.2}")),
                    section
                        .p50_delta(sc, mtu)
                        .map_or("-".into(), |v| format!("{v:+.1}")),
                )
            } else {
                (String::new(), String::new())
            };
            let _ = writeln!(
                out,
                "  {:<26} {:<11} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8} {:>9} {:>8}{}",
                format!("{sc}/{mtu}"),
                r.mode(),
                med(r.goodput_gbps, 2),
                ratio,
                med(r.p50_us, 1),
                delta,
                med(r.p99_us, 1),
                med(r.cpu_s_per_gb, 2),
                med(r.daemon_cpu_s_per_gb, 2),
                med(r.copies_per_byte, 3),
                if r.notes.is_empty() {
                    String::new()
                } else {
                    format!("  [{}]", r.notes.join("; "))
                }
            );
        }
        if sc == Scenario::LinuxZs {
            for linux in [Scenario::LinuxLinux, Scenario::LinuxLinuxOffload] {
                if let Some(r) = rows.iter().find(|r| r.scenario == linux && r.mtu == mtu) {
                    let lat = r.latency.as_ref();
                    let _ = writeln!(
                        out,
                        "  {:<26} {:<11} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8}",
                        format!("{linux}/{mtu}"),
                        "main table",
                        med(r.goodput_gbps, 2),
                        "",
                        med(lat.and_then(|l| l.p50_us), 1),
                        "",
                        med(lat.and_then(|l| l.p99_us), 1),
                        med(r.cpu_s_per_gb.receiver, 2),
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sc: Scenario, attached: bool, gbps: f64, p50: f64, copies: f64) -> AttachedRow {
        let s = |v: f64| Summary::of(&[v]);
        AttachedRow {
            scenario: sc,
            mtu: 1500,
            attached,
            goodput_gbps: s(gbps),
            p50_us: s(p50),
            p99_us: s(p50 * 2.0),
            cpu_s_per_gb: s(1.0),
            daemon_cpu_s_per_gb: attached.then_some(0.5).and_then(s),
            copies_per_byte: s(copies),
            notes: Vec::new(),
        }
    }

    #[test]
    fn targets_compare_attached_with_in_process_of_the_same_case() {
        let section = AttachedSection {
            rows: vec![
                row(Scenario::ZsLinux, false, 10.0, 20.0, 1.0),
                row(Scenario::ZsLinux, true, 9.5, 24.0, 1.0),
                row(Scenario::LinuxZs, false, 10.0, 20.0, 1.0),
                row(Scenario::LinuxZs, true, 8.0, 26.0, 2.0),
            ],
        };
        let t = targets(&section);
        assert_eq!(t.len(), 6);
        let met: Vec<Option<bool>> = t.iter().map(|t| t.met).collect();
        assert_eq!(
            met,
            [
                Some(true),
                Some(true),
                Some(true),
                Some(false),
                Some(false),
                Some(false)
            ]
        );
        assert!((t[0].value.expect("ratio") - 0.95).abs() < 1e-9);
        assert!((t[1].value.expect("delta") - 4.0).abs() < 1e-9);
        let text = render(&section, &[]);
        let att = text
            .lines()
            .find(|l| l.contains("zs-linux/1500") && l.contains("attached"))
            .expect("attached row");
        assert!(att.contains("0.95") && att.contains("+4.0"), "{att}");
    }

    #[test]
    fn a_missing_mode_is_not_measured_rather_than_met() {
        let mut r = row(Scenario::ZsLinux, true, 9.5, 24.0, 1.0);
        r.goodput_gbps = None;
        let section = AttachedSection {
            rows: vec![row(Scenario::ZsLinux, false, 10.0, 20.0, 1.0), r],
        };
        let t = targets(&section);
        assert_eq!(t[0].met, None);
        assert_eq!(t[1].met, Some(true));
    }
}
