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
//! A third mode measures the in-process case once more while one thread
//! of the bench busy-spins ([`super::handover::Spinner`]): attached mode
//! has three runnable parties (application, daemon, Linux peer) where
//! in-process has two; on a machine with few CPUs every hand-over then
//! waits for the scheduler. Each round also times the channel's own round
//! trip ([`super::handover::round_trips`]), spinning and sleeping.
//!
//! Targets ([`targets`]): attached ÷ in-process goodput ≥ 0.9; attached
//! p50 − in-process p50 ≤ 5 µs; copies per byte equal (within 0.01);
//! and the two bounds beside: attached p50 − in-process+spinner p50 ≤
//! 5 µs, the spinning channel round trip p50 ≤ 5 µs.

use std::fmt::Write as _;

use std::time::Duration;

use super::handover::{round_trips, RoundTrips, Spinner, Wake};
use super::measure::{measure_as, Outcome};
use super::options::SuiteOptions;
use super::procfs;
use super::report::{AttachedMode, AttachedRow, AttachedSection, Handover, Row, Target};
use super::scenario::{Case, Family, Scenario, ThreadMode};
use super::stats::Summary;

/// Least attached goodput may be, as a fraction of in-process goodput.
pub const GOODPUT_GOAL: f64 = 0.9;
/// Most attached p50 may exceed in-process p50, in µs.
pub const P50_GOAL_US: f64 = 5.0;
/// Most the copies per byte may differ.
pub const COPIES_GOAL: f64 = 0.01;
/// Most the channel's round trip (both ends spinning) may take, in µs.
pub const HANDOVER_GOAL_US: f64 = 5.0;
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
    fn take(&mut self, case: &Case, opts: &SuiteOptions, mode: AttachedMode) {
        let spinner = match mode {
            AttachedMode::InProcessSpinner => match Spinner::start() {
                Ok(s) => Some(s),
                Err(e) => {
                    self.notes.push(e);
                    return;
                }
            },
            AttachedMode::InProcess | AttachedMode::Attached => None,
        };
        let outcome = measure_as(case, opts, mode == AttachedMode::Attached);
        drop(spinner);
        match outcome {
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

    fn row(self, case: &Case, mode: AttachedMode) -> AttachedRow {
        AttachedRow {
            scenario: case.scenario,
            mtu: case.mtu,
            attached: mode == AttachedMode::Attached,
            spinner: mode == AttachedMode::InProcessSpinner,
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
                family: Family::Ipv4,
            })
        })
        .collect();
    let mut samples: Vec<[Samples; 3]> = cases.iter().map(|_| Default::default()).collect();
    let mut handover = HandoverSamples::default();
    let load_before = procfs::load_1min().ok();
    let stopped = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    };
    'rounds: for round in 0..rounds(opts) {
        for (case, s) in cases.iter().zip(samples.iter_mut()) {
            // Rotate which mode goes first, so none always runs on a
            // machine another just warmed (or heated).
            for k in 0..AttachedMode::ALL.len() {
                if stopped() {
                    break 'rounds;
                }
                let i = mode_index(round, k);
                s[i].take(case, opts, AttachedMode::ALL[i]);
            }
        }
        if stopped() {
            break;
        }
        handover.take(opts.quick);
    }
    let rows = cases
        .iter()
        .zip(samples)
        .flat_map(|(case, s)| {
            s.into_iter()
                .zip(AttachedMode::ALL)
                .map(|(s, mode)| s.row(case, mode))
        })
        .collect();
    Some(AttachedSection {
        rows,
        handover: Some(handover.summary()),
        load_1min: load_before.zip(procfs::load_1min().ok()),
        app_poll: opts.attached_poll.map(|p| p.name().to_owned()),
    })
}

/// Which of [`AttachedMode::ALL`] goes `k`-th in round `round`.
fn mode_index(round: usize, k: usize) -> usize {
    (k + round) % AttachedMode::ALL.len()
}

/// Round trips timed per round, and the time they may take: (spinning,
/// sleeping), (full run, `--quick`).
const HANDOVER_ROUND_TRIPS: (u64, u64) = (200_000, 20_000);
const HANDOVER_BUDGET: (Duration, Duration) =
    (Duration::from_millis(1500), Duration::from_millis(400));
/// The late answer of the handover's wake-up rows: about an in-process
/// ping-pong's round trip on veth, so that a sleeping application is
/// asleep when it comes.
const LATE_ANSWER: Duration = Duration::from_micros(15);

/// The channel's round trips over the rounds.
#[derive(Debug, Default)]
struct HandoverSamples {
    spin: Vec<RoundTrips>,
    busy: Vec<RoundTrips>,
    sleep: Vec<RoundTrips>,
    late_spin: Vec<RoundTrips>,
    late_sleep: Vec<RoundTrips>,
    notes: Vec<String>,
}

impl HandoverSamples {
    fn take(&mut self, quick: bool) {
        let budget = if quick {
            HANDOVER_BUDGET.1
        } else {
            HANDOVER_BUDGET.0
        };
        let (n_spin, n_sleep) = HANDOVER_ROUND_TRIPS;
        let (zero, late) = (Duration::ZERO, LATE_ANSWER);
        for (daemon, app, after, busy, n, into) in [
            (Wake::Spin, Wake::Spin, zero, false, n_spin, &mut self.spin),
            (Wake::Spin, Wake::Spin, zero, true, n_spin, &mut self.busy),
            (
                Wake::Sleep,
                Wake::Sleep,
                zero,
                false,
                n_sleep,
                &mut self.sleep,
            ),
            (
                Wake::Spin,
                Wake::Spin,
                late,
                false,
                n_sleep,
                &mut self.late_spin,
            ),
            (
                Wake::Spin,
                Wake::Sleep,
                late,
                false,
                n_sleep,
                &mut self.late_sleep,
            ),
        ] {
            // Three spinning threads on the CPUs: what the spinning ends
            // pay when a third party wants a CPU too.
            let spinner = busy.then(Spinner::start).transpose();
            match spinner.and_then(|_s| round_trips(daemon, app, after, n, budget)) {
                Ok(r) => into.push(r),
                Err(e) => self.notes.push(format!(
                    "handover (daemon {daemon:?}, application {app:?}, answer after {after:?}, busy thread {busy}): {e}"
                )),
            }
        }
    }

    fn summary(self) -> Handover {
        let of = |v: &[RoundTrips], f: fn(&RoundTrips) -> f64| {
            Summary::of(&v.iter().map(f).collect::<Vec<_>>())
        };
        let n = |v: &[RoundTrips]| v.iter().map(|r| r.n).min().unwrap_or(0);
        Handover {
            spin_p50_us: of(&self.spin, |r| r.p50_us),
            spin_p99_us: of(&self.spin, |r| r.p99_us),
            busy_p50_us: of(&self.busy, |r| r.p50_us),
            busy_p99_us: of(&self.busy, |r| r.p99_us),
            sleep_p50_us: of(&self.sleep, |r| r.p50_us),
            sleep_p99_us: of(&self.sleep, |r| r.p99_us),
            round_trips: (n(&self.spin), n(&self.busy), n(&self.sleep)),
            late_spin_p50_us: of(&self.late_spin, |r| r.p50_us),
            late_sleep_p50_us: of(&self.late_sleep, |r| r.p50_us),
            answer_after_us: LATE_ANSWER.as_secs_f64() * 1e6,
            notes: self.notes,
        }
    }
}

/// The section's targets, per direction and MTU.
pub fn targets(section: &AttachedSection) -> Vec<Target> {
    let mut t = Vec::new();
    for (sc, mtu) in section.points() {
        t.push(Target::judged(
            format!("attached ÷ in-process goodput, {sc}/{mtu}"),
            section.goodput_ratio(sc, mtu),
            GOODPUT_GOAL,
            false,
        ));
        t.push(Target::judged(
            format!("attached − in-process ping-pong p50 µs, {sc}/{mtu}"),
            section.p50_delta(sc, mtu),
            P50_GOAL_US,
            true,
        ));
        t.push(Target::judged(
            format!("|attached − in-process| payload copies per byte, {sc}/{mtu}"),
            section.copies_delta(sc, mtu),
            COPIES_GOAL,
            true,
        ));
        t.push(Target::judged(
            format!(
                "attached − in-process+spinner (one busy thread beside) ping-pong p50 µs, {sc}/{mtu}"
            ),
            section.p50_delta_vs(sc, mtu, AttachedMode::InProcessSpinner),
            P50_GOAL_US,
            true,
        ));
    }
    if let Some(h) = &section.handover {
        t.push(Target::judged(
            "attachment channel round trip p50 µs (both ends spinning)".into(),
            h.spin_p50_us.map(|s| s.median),
            HANDOVER_GOAL_US,
            true,
        ));
    }
    t
}

/// The section as text, with the Linux rows of the main table at the same
/// MTU (the same run) for scale.
pub fn render(section: &AttachedSection, rows: &[Row]) -> String {
    let mut out = String::new();
    let waits = match &section.app_poll {
        Some(mode) => format!("waits as threads.poll = {mode}"),
        None => "sleeps on its doorbell, the provider library's default".to_owned(),
    };
    let _ = writeln!(
        out,
        "\nattached vs in-process (same run; the zerosplit end in its own process, or attached to a `zerosplit daemon`, where the application {waits}; s/GB = the zerosplit end's CPU, daemon included):"
    );
    let _ = writeln!(
        out,
        "  {:<26} {:<18} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8} {:>9} {:>8}",
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
            let delta = |base| {
                section
                    .p50_delta_vs(sc, mtu, base)
                    .map_or("-".into(), |v| format!("{v:+.1}"))
            };
            let (ratio, delta) = match r.mode() {
                AttachedMode::Attached => (
                    section
                        .goodput_ratio(sc, mtu)
                        .map_or("-".into(), |v| format!("{v:.2}")),
                    delta(AttachedMode::InProcess),
                ),
                AttachedMode::InProcessSpinner => {
                    (String::new(), delta(AttachedMode::InProcessSpinner))
                }
                AttachedMode::InProcess => (String::new(), String::new()),
            };
            let _ = writeln!(
                out,
                "  {:<26} {:<18} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8} {:>9} {:>8}{}",
                format!("{sc}/{mtu}"),
                r.mode().label(),
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
                if let Some(r) = rows
                    .iter()
                    .find(|r| r.scenario == linux && r.mtu == mtu && r.family == Family::Ipv4)
                {
                    let lat = r.latency.as_ref();
                    let _ = writeln!(
                        out,
                        "  {:<26} {:<18} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8}",
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
    let _ = writeln!(
        out,
        "  Δp50: attached − in-process on the attached row; attached − in-process+spinner (the in-process case while one bench thread busy-spins: the CPU the daemon takes) on the +spinner row"
    );
    if let Some(h) = &section.handover {
        out.push_str(&render_handover(h));
    }
    if let Some((start, end)) = section.load_1min {
        let cpus = std::thread::available_parallelism().map_or(0, usize::from);
        let _ = writeln!(
            out,
            "  machine load (1-minute average) at the section's start and end: {start:.2} → {end:.2} on {cpus} CPUs"
        );
    }
    out
}

/// The channel's round trip, one line.
fn render_handover(h: &Handover) -> String {
    let us = |p50: Option<Summary>, p99: Option<Summary>| match (p50, p99) {
        (Some(a), Some(b)) => format!("p50 {:.2} µs, p99 {:.2} µs", a.median, b.median),
        _ => "-".into(),
    };
    let mut out = String::from(
        "  handover: one work request through the attachment channel and its completion back (daemon end on another thread, the memfd mapped twice)\n",
    );
    for (what, p50, p99, n) in [
        (
            "both ends spinning",
            h.spin_p50_us,
            h.spin_p99_us,
            h.round_trips.0,
        ),
        (
            "both ends spinning, one busy thread beside",
            h.busy_p50_us,
            h.busy_p99_us,
            h.round_trips.1,
        ),
        (
            "both ends sleeping on eventfd doorbells when idle",
            h.sleep_p50_us,
            h.sleep_p99_us,
            h.round_trips.2,
        ),
    ] {
        let _ = writeln!(out, "    {what:<50} {} ({n} round trips)", us(p50, p99));
    }
    if let (Some(spin), Some(sleep)) = (h.late_spin_p50_us, h.late_sleep_p50_us) {
        let _ = writeln!(
            out,
            "    answered {:.0} µs late, daemon spinning: application spinning p50 {:.2} µs, sleeping on its doorbell p50 {:.2} µs: waking it costs {:+.2} µs",
            h.answer_after_us,
            spin.median,
            sleep.median,
            sleep.median - spin.median
        );
    }
    if !h.notes.is_empty() {
        let _ = writeln!(out, "    [{}]", h.notes.join("; "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sc: Scenario, mode: AttachedMode, gbps: f64, p50: f64, copies: f64) -> AttachedRow {
        let s = |v: f64| Summary::of(&[v]);
        let attached = mode == AttachedMode::Attached;
        AttachedRow {
            scenario: sc,
            mtu: 1500,
            attached,
            spinner: mode == AttachedMode::InProcessSpinner,
            goodput_gbps: s(gbps),
            p50_us: s(p50),
            p99_us: s(p50 * 2.0),
            cpu_s_per_gb: s(1.0),
            daemon_cpu_s_per_gb: attached.then_some(0.5).and_then(s),
            copies_per_byte: s(copies),
            notes: Vec::new(),
        }
    }

    fn handover(spin_p50: f64) -> Handover {
        HandoverSamples {
            spin: vec![RoundTrips {
                p50_us: spin_p50,
                p99_us: spin_p50 * 3.0,
                n: 1000,
            }],
            busy: vec![RoundTrips {
                p50_us: 4000.0,
                p99_us: 8000.0,
                n: 150,
            }],
            sleep: vec![
                RoundTrips {
                    p50_us: 30.0,
                    p99_us: 80.0,
                    n: 700,
                },
                RoundTrips {
                    p50_us: 20.0,
                    p99_us: 60.0,
                    n: 500,
                },
            ],
            late_spin: vec![RoundTrips {
                p50_us: 15.5,
                p99_us: 17.0,
                n: 900,
            }],
            late_sleep: vec![RoundTrips {
                p50_us: 33.5,
                p99_us: 80.0,
                n: 800,
            }],
            notes: Vec::new(),
        }
        .summary()
    }

    use AttachedMode::{Attached, InProcess, InProcessSpinner};

    #[test]
    fn targets_compare_attached_with_in_process_of_the_same_case() {
        let section = AttachedSection {
            rows: vec![
                row(Scenario::ZsLinux, InProcess, 10.0, 20.0, 1.0),
                row(Scenario::ZsLinux, Attached, 9.5, 24.0, 1.0),
                row(Scenario::ZsLinux, InProcessSpinner, 9.0, 21.0, 1.0),
                row(Scenario::LinuxZs, InProcess, 10.0, 20.0, 1.0),
                row(Scenario::LinuxZs, Attached, 8.0, 66.0, 2.0),
                row(Scenario::LinuxZs, InProcessSpinner, 9.0, 62.5, 1.0),
            ],
            handover: Some(handover(0.8)),
            load_1min: Some((0.25, 1.5)),
            app_poll: None,
        };
        let t = targets(&section);
        assert_eq!(t.len(), 9);
        let met: Vec<Option<bool>> = t.iter().map(|t| t.met).collect();
        assert_eq!(
            met,
            [
                Some(true),
                Some(true),
                Some(true),
                Some(true),
                Some(false),
                Some(false),
                Some(false),
                Some(true),
                Some(true),
            ]
        );
        assert!((t[0].value.expect("ratio") - 0.95).abs() < 1e-9);
        assert!((t[1].value.expect("delta") - 4.0).abs() < 1e-9);
        // The bound beside: attached − in-process+spinner.
        assert!((t[3].value.expect("delta") - 3.0).abs() < 1e-9);
        assert!(t[7].name.contains("spinner") && t[7].name.contains("linux-zs"));
        assert!((t[7].value.expect("delta") - 3.5).abs() < 1e-9);
        assert!(t[8].name.contains("channel round trip"));
        assert!((t[8].value.expect("p50") - 0.8).abs() < 1e-9);
        let text = render(&section, &[]);
        let att = text
            .lines()
            .find(|l| l.contains("zs-linux/1500") && l.contains("attached"))
            .expect("attached row");
        assert!(att.contains("0.95") && att.contains("+4.0"), "{att}");
        let spin = text
            .lines()
            .find(|l| l.contains("linux-zs/1500") && l.contains("in-process+spinner"))
            .expect("spinner row");
        assert!(spin.contains("62.5") && spin.contains("+3.5"), "{spin}");
        let line = |what: &str| {
            text.lines()
                .find(|l| l.contains(what))
                .unwrap_or_else(|| panic!("no {what} line in {text}"))
        };
        assert!(line("handover:").contains("attachment channel"));
        assert!(
            line("answered 15 µs late").contains("waking it costs +18.00 µs"),
            "{text}"
        );
        let spin = line("both ends spinning ");
        assert!(
            spin.contains("p50 0.80 µs, p99 2.40 µs (1000 round trips)"),
            "{spin}"
        );
        let busy = line("one busy thread beside");
        assert!(
            busy.contains("p50 4000.00 µs, p99 8000.00 µs (150 "),
            "{busy}"
        );
        let sleep = line("sleeping on eventfd");
        assert!(
            sleep.contains("p50 25.00 µs, p99 70.00 µs (500 "),
            "{sleep}"
        );
        assert!(text.contains("0.25 → 1.50"), "{text}");
    }

    #[test]
    fn a_slow_channel_misses_its_target_and_none_is_not_met() {
        let mut section = AttachedSection {
            rows: Vec::new(),
            handover: Some(handover(5.5)),
            load_1min: None,
            app_poll: None,
        };
        assert_eq!(targets(&section)[0].met, Some(false));
        section.handover = Some(HandoverSamples::default().summary());
        let t = targets(&section);
        assert_eq!((t[0].value, t[0].met), (None, None));
        section.handover = None;
        assert!(targets(&section).is_empty());
    }

    #[test]
    fn the_handover_summary_takes_medians_and_the_fewest_round_trips() {
        let h = handover(1.0);
        let sleep = h.sleep_p50_us.expect("sleep");
        assert_eq!((sleep.median, sleep.n), (25.0, 2));
        assert_eq!(h.round_trips, (1000, 150, 500));
        let none = HandoverSamples::default().summary();
        assert_eq!((none.spin_p50_us, none.round_trips), (None, (0, 0, 0)));
    }

    #[test]
    fn every_mode_goes_first_in_some_round() {
        let firsts: Vec<usize> = (0..3).map(|round| mode_index(round, 0)).collect();
        assert_eq!(firsts, [0, 1, 2]);
        for round in 0..3 {
            let mut order: Vec<usize> = (0..3).map(|k| mode_index(round, k)).collect();
            order.sort_unstable();
            assert_eq!(order, [0, 1, 2], "round {round} measures each mode once");
        }
    }

    #[test]
    fn a_missing_mode_is_not_measured_rather_than_met() {
        let mut r = row(Scenario::ZsLinux, Attached, 9.5, 24.0, 1.0);
        r.goodput_gbps = None;
        let section = AttachedSection {
            rows: vec![row(Scenario::ZsLinux, InProcess, 10.0, 20.0, 1.0), r],
            handover: None,
            load_1min: None,
            app_poll: None,
        };
        let t = targets(&section);
        assert_eq!(t[0].met, None);
        assert_eq!(t[1].met, Some(true));
        // No spinner row: its bound is not measured, not met.
        assert_eq!(t[3].met, None);
    }

    #[test]
    fn old_reports_without_the_new_fields_still_read() {
        let mut v = serde_json::to_value(AttachedSection {
            rows: vec![row(Scenario::ZsLinux, Attached, 9.5, 24.0, 1.0)],
            handover: None,
            load_1min: Some((1.0, 2.0)),
            app_poll: Some("spin".into()),
        })
        .expect("json");
        v["rows"][0].as_object_mut().expect("row").remove("spinner");
        v.as_object_mut().expect("section").remove("handover");
        v.as_object_mut().expect("section").remove("load_1min");
        v.as_object_mut().expect("section").remove("app_poll");
        let back: AttachedSection = serde_json::from_value(v).expect("reads");
        assert_eq!(back.rows[0].mode(), Attached);
    }
}
