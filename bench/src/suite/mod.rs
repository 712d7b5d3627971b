//! `zerosplit bench`: the scenario matrix run side by side on fresh veth
//! pairs in namespaces this module builds and deletes.
//!
//! Each measurement gets its own namespaces and veth pair (or an impaired
//! A–R–B path, [`crate::impair::ImpairedPath`]), with TX checksum offload
//! off on both ends and one queue (the `linux-linux-offload` row keeps a
//! fresh veth's default offloads: [`scenario::Scenario::offloads`]). Each endpoint is a separate process
//! (`zerosplit bench-peer`, see [`peer`]) inside its namespace, so its CPU
//! time is its own. Every case runs once per round, rounds alternate
//! direction ([`schedule`]), and the table shows medians with min–max
//! ([`stats`]). With `--ipv6` every case also runs over IPv6 beside its
//! IPv4 twin ([`scenario::Family`], compared in [`families`]). The
//! ceilings of the machine are measured in every round:
//! raw AF_XDP RX and TX on the same kind of veth pair with a protocol-free
//! generator, and memcpy ([`ceilings`]).
//!
//! Outputs: a table ([`table`]), JSON with a versioned schema
//! ([`report`]), SVG charts ([`svg`]), and a regression gate against a
//! stored report ([`baseline`]).

mod aggregate;
pub mod apps;
pub mod attached;
pub mod baseline;
pub mod ceilings;
mod cpu;
mod daemon;
pub mod endpoint;
pub mod families;
pub mod flows;
mod handover;
pub mod iperf;
mod measure;
mod options;
pub mod peer;
pub mod poll;
pub mod procfs;
pub mod report;
pub mod scenario;
pub mod schedule;
pub mod stats;
pub mod svg;
pub mod table;
pub mod targets;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use aggregate::{aggregate, fill_ratios, summarise_ceilings};
use measure::{measure, measure_ceilings, CeilingSample, Outcome};
pub use options::{SuiteError, SuiteOptions, MTUS};
use report::{Machine, Report, ReportOptions, Row, Status};
use scenario::{Case, Family, Scenario};
use zerosplit_lab::NetNs;

/// What one run of the matrix produced, before it becomes rows.
struct Measured {
    cases: Vec<Case>,
    outcomes: Vec<Vec<Outcome>>,
    ceilings: BTreeMap<u32, Vec<CeilingSample>>,
    memcpy: Vec<f64>,
    interrupted: bool,
}

/// Runs the suite and returns the report (figures, ratios, targets).
///
/// # Errors
/// [`SuiteError::Options`] for out-of-range options;
/// [`SuiteError::Harness`] when namespaces cannot be created at all.
pub fn run(opts: &SuiteOptions) -> Result<Report, SuiteError> {
    opts.check()?;
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Fail early and clearly when namespaces cannot be made (not root).
    drop(NetNs::new("zbchk")?);
    let mut scenarios = opts.scenarios.clone();
    let iperf_missing = !iperf::installed() && scenarios.contains(&Scenario::LinuxLinuxIperf3);
    if iperf_missing {
        scenarios.retain(|s| *s != Scenario::LinuxLinuxIperf3);
    }
    let ip_families = opts.families();
    let cases = scenario::matrix(&scenarios, &opts.mtus, &opts.threads, &ip_families);
    let measured = run_rounds(opts, cases);
    let ceilings = if opts.ceilings {
        summarise_ceilings(&opts.mtus, measured.ceilings, &measured.memcpy)
    } else {
        Vec::new()
    };
    let mut rows: Vec<Row> = measured
        .cases
        .iter()
        .zip(measured.outcomes)
        .map(|(case, outs)| aggregate(case, outs))
        .collect();
    if iperf_missing {
        rows.extend(opts.mtus.iter().flat_map(|&mtu| {
            ip_families
                .iter()
                .map(move |&family| iperf_unavailable_row(mtu, family))
        }));
    }
    fill_ratios(&mut rows, &ceilings);
    let flows = flows::run(opts);
    let mut targets = targets::judge(&rows, &ceilings);
    targets.extend(families::targets(&rows));
    targets.extend(flows.as_ref().map(flows::targets).unwrap_or_default());
    if measured.interrupted {
        mark_interrupted(&mut rows);
    }
    let poll = (opts.poll_modes && !measured.interrupted).then(|| poll::run(opts));
    targets.extend(poll.iter().flat_map(poll::targets));
    let attached = if measured.interrupted {
        None
    } else {
        attached::run(opts)
    };
    targets.extend(attached.iter().flat_map(attached::targets));
    let apps = if measured.interrupted {
        None
    } else {
        apps::run(opts, &rows)
    };
    targets.extend(apps.iter().flat_map(apps::targets));
    Ok(Report {
        schema: report::SCHEMA,
        tool: opts.tool.clone(),
        started_unix,
        wall_seconds: started.elapsed().as_secs_f64(),
        machine: machine(),
        options: report_options(opts),
        ceilings,
        rows,
        targets,
        poll,
        flows,
        apps,
        attached,
    })
}

/// Every case once per round in the alternating order, the ceilings at the
/// start of each round; stops early when `opts.stop` is raised.
fn run_rounds(opts: &SuiteOptions, cases: Vec<Case>) -> Measured {
    let order = schedule::alternating(cases.len(), opts.runs);
    let ceiling_steps = if opts.ceilings {
        opts.mtus.len() * opts.runs
    } else {
        0
    };
    let bar = progress_bar(opts, (order.len() + ceiling_steps) as u64);
    let mut m = Measured {
        outcomes: cases.iter().map(|_| Vec::new()).collect(),
        cases,
        ceilings: BTreeMap::new(),
        memcpy: Vec::new(),
        interrupted: false,
    };
    let mut current_round = usize::MAX;
    for (round, idx) in order {
        if opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            m.interrupted = true;
            break;
        }
        if round != current_round {
            current_round = round;
            if opts.ceilings {
                m.memcpy.push(ceilings::memcpy_gbps(8));
                for &mtu in &opts.mtus {
                    bar.set_message(format!(
                        "round {}/{}: ceilings at MTU {mtu}",
                        round + 1,
                        opts.runs
                    ));
                    m.ceilings
                        .entry(mtu)
                        .or_default()
                        .push(measure_ceilings(mtu, opts));
                    bar.inc(1);
                }
            }
        }
        let case = &m.cases[idx];
        bar.set_message(format!("round {}/{}: {}", round + 1, opts.runs, case.key()));
        // A case the build cannot run is not retried every round.
        let skip = matches!(m.outcomes[idx].first(), Some(Outcome::Unavailable(_)));
        if !skip {
            let o = measure(case, opts);
            if let Outcome::Failed(e) = &o {
                bar.suspend(|| eprintln!("{}: {e}", case.key()));
            }
            m.outcomes[idx].push(o);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    m
}

/// The iperf3 row of an MTU and family when iperf3 is not installed.
fn iperf_unavailable_row(mtu: u32, family: Family) -> Row {
    Row {
        status: Status::Unavailable,
        notes: vec!["iperf3 is not installed (apt-get install -y iperf3)".into()],
        ..aggregate(
            &Case {
                scenario: Scenario::LinuxLinuxIperf3,
                mtu,
                threads: None,
                family,
            },
            Vec::new(),
        )
    }
}

fn mark_interrupted(rows: &mut [Row]) {
    for r in rows {
        r.notes
            .push(if r.goodput_gbps.is_none() && r.notes.is_empty() {
                "not run: interrupted".into()
            } else {
                "interrupted: fewer rounds than asked".into()
            });
    }
}

fn report_options(opts: &SuiteOptions) -> ReportOptions {
    ReportOptions {
        quick: opts.quick,
        metrics: opts.metrics,
        runs: opts.runs,
        bytes: opts.bytes,
        seconds: opts.seconds,
        pingpong_rounds: opts.pingpong_rounds,
        message: opts.message,
        impair: opts
            .impair
            .as_ref()
            .map_or("none".into(), ToString::to_string),
        ipv6: opts.ipv6,
    }
}

fn machine() -> Machine {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    Machine {
        kernel: read("/proc/sys/kernel/osrelease"),
        cpus: std::thread::available_parallelism().map_or(0, usize::from),
        hostname: read("/proc/sys/kernel/hostname"),
    }
}

fn progress_bar(opts: &SuiteOptions, steps: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(steps),
        if opts.progress {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn out_of_range_options_are_refused_before_anything_runs() {
        let mut o = SuiteOptions::quick(PathBuf::from("/nonexistent"));
        o.runs = 0;
        assert!(matches!(
            run(&o),
            Err(SuiteError::Options { what: "--runs", .. })
        ));
        let mut o = SuiteOptions::quick(PathBuf::from("/nonexistent"));
        o.mtus = vec![100];
        let err = run(&o).expect_err("mtu");
        assert!(err.to_string().contains("--mtu: 100"), "{err}");
        o.mtus = vec![65_536];
        let err = run(&o).expect_err("mtu");
        assert!(
            err.to_string().contains("65536 is outside 576..=65535"),
            "{err}"
        );
        o.mtus = vec![65_535];
        assert!(o.check().is_ok(), "veth's largest MTU is a bench MTU");
    }
}
