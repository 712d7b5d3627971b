//! `zerosplit bench`: the scenario matrix run side by side on fresh veth
//! pairs in namespaces this module builds and deletes.
//!
//! Each measurement gets its own namespaces and veth pair (or an impaired
//! A–R–B path, [`crate::impair::ImpairedPath`]), with TX checksum offload
//! off on both ends and one queue. Each endpoint is a separate process
//! (`zerosplit bench-peer`, see [`peer`]) inside its namespace, so its CPU
//! time is its own. Every case runs once per round, rounds alternate
//! direction ([`schedule`]), and the table shows medians with min–max
//! ([`stats`]). The ceilings of the machine are measured in every round:
//! raw AF_XDP RX and TX on the same kind of veth pair with a protocol-free
//! generator, and memcpy ([`ceilings`]).
//!
//! Outputs: a table ([`table`]), JSON with a versioned schema
//! ([`report`]), SVG charts ([`svg`]), and a regression gate against a
//! stored report ([`baseline`]).

pub mod baseline;
pub mod ceilings;
pub mod endpoint;
pub mod iperf;
pub mod peer;
pub mod procfs;
pub mod report;
pub mod scenario;
pub mod schedule;
pub mod stats;
pub mod svg;
pub mod table;
pub mod targets;

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::impair::{ImpairConfig, ImpairedPath};
use crate::netns::{HarnessError, NetNs, VethEnd, VethPair};
use crate::rx_rate;
use peer::{LatencyReport, PeerProcess, PeerReport, PeerSpec, Role};
use report::{Ceiling, CpuPerGb, Latency, Machine, Ratios, Report, ReportOptions, Row, Status};
use scenario::{Case, Endpoint, Scenario, ThreadMode};
use stats::Summary;

/// What to run.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// The `zerosplit` binary (run as `… bench-peer`).
    pub peer_program: PathBuf,
    /// Scenarios to run.
    pub scenarios: Vec<Scenario>,
    /// MTUs.
    pub mtus: Vec<u32>,
    /// Thread modes for rows with a zerosplit end.
    pub threads: Vec<ThreadMode>,
    /// Rounds.
    pub runs: usize,
    /// Sender byte limit per transfer.
    pub bytes: u64,
    /// Sender time limit per transfer (and per ping-pong).
    pub seconds: f64,
    /// Ping-pong rounds per measurement.
    pub pingpong_rounds: u64,
    /// Ping-pong message size.
    pub message: usize,
    /// How long each ceiling measurement sends.
    pub ceiling_seconds: f64,
    /// Measure the ceilings.
    pub ceilings: bool,
    /// Impairment of the path between the two ends (both directions).
    pub impair: Option<ImpairConfig>,
    /// `--quick` (recorded in the report).
    pub quick: bool,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// `zerosplit <version>`, recorded in the report.
    pub tool: String,
    /// Set (e.g. by a SIGINT/SIGTERM handler) to stop after the current
    /// measurement; the namespaces are still removed and the report covers
    /// what ran.
    pub stop: Option<Arc<AtomicBool>>,
}

impl SuiteOptions {
    /// The full matrix: every scenario, MTU 1500 and 9000, both thread
    /// modes, 3 rounds of 3-second transfers (≈ 5–6 minutes on 2 vCPUs).
    pub fn full(peer_program: PathBuf) -> Self {
        SuiteOptions {
            peer_program,
            scenarios: Scenario::ALL.to_vec(),
            mtus: vec![1500, 9000],
            threads: vec![ThreadMode::Rtc, ThreadMode::Dedicated],
            runs: 3,
            bytes: 64 << 30,
            seconds: 3.0,
            pingpong_rounds: 20_000,
            message: 64,
            ceiling_seconds: 2.0,
            ceilings: true,
            impair: None,
            quick: false,
            progress: true,
            tool: String::new(),
            stop: None,
        }
    }

    /// The CI smoke subset: MTU 1500, run-to-completion, no iperf3, 2
    /// rounds of 1-second transfers (≈ 25 s on 2 vCPUs; under 2 minutes).
    pub fn quick(peer_program: PathBuf) -> Self {
        SuiteOptions {
            scenarios: vec![
                Scenario::LinuxLinux,
                Scenario::LinuxZs,
                Scenario::ZsLinux,
                Scenario::ZsZsTcp,
                Scenario::ZsZsSmoltcp,
            ],
            mtus: vec![1500],
            threads: vec![ThreadMode::Rtc],
            runs: 2,
            seconds: 1.0,
            pingpong_rounds: 2_000,
            ceiling_seconds: 0.5,
            quick: true,
            ..Self::full(peer_program)
        }
    }

    fn check(&self) -> Result<(), SuiteError> {
        let bad = |what: &'static str, detail: String| Err(SuiteError::Options { what, detail });
        if self.runs == 0 || self.runs > 100 {
            return bad("--runs", format!("{} is outside 1..=100", self.runs));
        }
        if !(self.seconds > 0.0 && self.seconds <= 600.0) {
            return bad("--seconds", format!("{} is outside (0, 600]", self.seconds));
        }
        if self.bytes == 0 {
            return bad("--bytes", "must be above 0".into());
        }
        if let Some(m) = self.mtus.iter().find(|m| !(576..=9000).contains(*m)) {
            return bad("--mtu", format!("{m} is outside 576..=9000"));
        }
        if self.scenarios.is_empty() || self.mtus.is_empty() || self.threads.is_empty() {
            return bad("--scenario/--mtu/--threads", "nothing left to run".into());
        }
        if !(1..=1400).contains(&self.message) {
            return bad(
                "message size",
                format!("{} is outside 1..=1400", self.message),
            );
        }
        Ok(())
    }
}

/// The suite could not run at all (a single failed measurement is a row
/// status instead).
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// An option is out of range.
    #[error("{what}: {detail}")]
    Options {
        /// The option.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// Namespaces cannot be created at all (e.g. not root).
    #[error("cannot build namespaces: {0}")]
    Harness(#[from] HarnessError),
}

/// One measurement's figures.
#[derive(Debug, Clone, Default)]
struct Sample {
    goodput_gbps: f64,
    snd_cpu_per_gb: f64,
    rcv_cpu_per_gb: f64,
    softirq_per_gb: f64,
    retransmits: f64,
    drops: BTreeMap<String, u64>,
    latency: Option<LatencyReport>,
    notes: Vec<String>,
}

#[derive(Debug)]
enum Outcome {
    Measured(Box<Sample>),
    Unavailable(String),
    Failed(String),
}

/// The path one measurement runs over: a plain veth pair or the impaired
/// A–R–B lab; receivers run in A, senders in B.
enum Path {
    Plain {
        pair: VethPair,
        _a: NetNs,
        _b: NetNs,
    },
    Impaired(Box<ImpairedPath>),
}

impl Path {
    fn build(mtu: u32, impair: Option<&ImpairConfig>) -> Result<Path, String> {
        match impair {
            None => {
                let a = NetNs::new("zba").map_err(|e| e.to_string())?;
                let b = NetNs::new("zbb").map_err(|e| e.to_string())?;
                let pair = VethPair::create(&a, &b, mtu).map_err(|e| e.to_string())?;
                Ok(Path::Plain { pair, _a: a, _b: b })
            }
            Some(cfg) => ImpairedPath::create(mtu, cfg)
                .map(|p| Path::Impaired(Box::new(p)))
                .map_err(|e| e.to_string()),
        }
    }

    fn ends(&self) -> (&VethEnd, &VethEnd) {
        match self {
            Path::Plain { pair, .. } => (&pair.a, &pair.b),
            Path::Impaired(p) => (&p.a, &p.b),
        }
    }
}

const READY_TIMEOUT: Duration = Duration::from_secs(20);

fn peer_failure(r: &PeerReport) -> Option<Outcome> {
    let e = r.error.as_ref()?;
    Some(if r.unavailable {
        Outcome::Unavailable(e.clone())
    } else {
        Outcome::Failed(format!("{} peer ({}): {e}", r.role, r.stack))
    })
}

/// Runs a listener and then a connector over `path`; returns both reports.
fn run_pair(
    opts: &SuiteOptions,
    path: &Path,
    listener: PeerSpec,
    connector: PeerSpec,
) -> Result<(PeerReport, PeerReport), Outcome> {
    let (a, b) = path.ends();
    let fail = |e: peer::PeerError| Outcome::Failed(e.to_string());
    let mut l = PeerProcess::start(&opts.peer_program, &a.netns, &listener).map_err(fail)?;
    if let Some(early) = l.wait_ready(READY_TIMEOUT).map_err(fail)? {
        return Err(peer_failure(&early).unwrap_or(Outcome::Failed(format!(
            "{} peer exited before listening",
            listener.role.name()
        ))));
    }
    let limit = Duration::from_secs_f64(opts.seconds * 3.0 + 40.0);
    let mut c = PeerProcess::start(&opts.peer_program, &b.netns, &connector).map_err(fail)?;
    let cr = c.finish(limit);
    let lr = l.finish(if cr.is_ok() {
        limit
    } else {
        Duration::from_secs(3)
    });
    let cr = cr.map_err(fail)?;
    if let Some(o) = peer_failure(&cr) {
        return Err(o);
    }
    let lr = lr.map_err(fail)?;
    if let Some(o) = peer_failure(&lr) {
        return Err(o);
    }
    Ok((lr, cr))
}

fn spec(
    case: &Case,
    role: Role,
    end: Endpoint,
    iface: &VethEnd,
    addr: SocketAddrV4,
    opts: &SuiteOptions,
) -> PeerSpec {
    PeerSpec {
        role,
        stack: end.stack_name(),
        iface: iface.ifname.clone(),
        addr,
        mtu: case.mtu,
        threads: case.threads.unwrap_or(ThreadMode::Rtc),
        bytes: opts.bytes,
        seconds: opts.seconds,
        rounds: opts.pingpong_rounds,
        message: opts.message,
    }
}

fn merge_drops(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn veth_drops(
    end: &VethEnd,
    before: Option<ceilings::LinkStats>,
    into: &mut BTreeMap<String, u64>,
) {
    let (Some(before), Ok(after)) = (before, ceilings::link_stats(&end.netns, &end.ifname)) else {
        return;
    };
    for (name, d) in [
        ("veth_rx_dropped", after.rx_dropped - before.rx_dropped),
        ("veth_tx_dropped", after.tx_dropped - before.tx_dropped),
    ] {
        if d > 0 {
            *into.entry(name.into()).or_default() += d;
        }
    }
}

/// One measurement of `case` on a fresh path: the transfer, then the
/// ping-pong.
fn measure(case: &Case, opts: &SuiteOptions) -> Outcome {
    let path = match Path::build(case.mtu, opts.impair.as_ref()) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(format!("building the path: {e}")),
    };
    let (a, b) = path.ends();
    if case.scenario == Scenario::LinuxLinuxIperf3 {
        return match iperf::run(&a.netns, &b.netns, a.addr, opts.seconds) {
            Ok(r) => {
                let gb = r.bytes as f64 / 1e9;
                Outcome::Measured(Box::new(Sample {
                    goodput_gbps: r.bytes as f64 * 8.0 / r.seconds / 1e9,
                    snd_cpu_per_gb: r.sender_cpu_s / gb,
                    rcv_cpu_per_gb: r.receiver_cpu_s / gb,
                    softirq_per_gb: f64::NAN,
                    retransmits: r.retransmits as f64,
                    ..Sample::default()
                }))
            }
            Err(e) => Outcome::Failed(e),
        };
    }
    let sc = case.scenario;
    let data = SocketAddrV4::new(a.addr, 5301);
    let before = (
        ceilings::link_stats(&a.netns, &a.ifname).ok(),
        ceilings::link_stats(&b.netns, &b.ifname).ok(),
    );
    let soft0 = procfs::softirq_seconds().unwrap_or(f64::NAN);
    let (rcv, snd) = match run_pair(
        opts,
        &path,
        spec(case, Role::Recv, sc.receiver(), a, data, opts),
        spec(case, Role::Send, sc.sender(), b, data, opts),
    ) {
        Ok(r) => r,
        Err(o) => return o,
    };
    let soft = procfs::softirq_seconds().unwrap_or(f64::NAN) - soft0;
    if rcv.bytes != snd.bytes || rcv.bytes == 0 {
        return Outcome::Failed(format!(
            "the receiver got {} bytes, the sender sent {}",
            rcv.bytes, snd.bytes
        ));
    }
    let gb = rcv.bytes as f64 / 1e9;
    let mut s = Sample {
        goodput_gbps: rcv.bytes as f64 * 8.0 / rcv.seconds.max(1e-9) / 1e9,
        snd_cpu_per_gb: snd.cpu_s / gb,
        rcv_cpu_per_gb: rcv.cpu_s / gb,
        softirq_per_gb: soft / gb,
        retransmits: (snd.retransmits + rcv.retransmits) as f64,
        ..Sample::default()
    };
    merge_drops(&mut s.drops, &snd.drops);
    merge_drops(&mut s.drops, &rcv.drops);
    veth_drops(a, before.0, &mut s.drops);
    veth_drops(b, before.1, &mut s.drops);
    let pp = SocketAddrV4::new(a.addr, 5302);
    match run_pair(
        opts,
        &path,
        spec(case, Role::PingpongServer, sc.receiver(), a, pp, opts),
        spec(case, Role::PingpongClient, sc.sender(), b, pp, opts),
    ) {
        Ok((_, client)) => s.latency = client.latency,
        Err(Outcome::Failed(e) | Outcome::Unavailable(e)) => {
            s.notes.push(format!("ping-pong: {e}"));
        }
        Err(Outcome::Measured(_)) => {}
    }
    Outcome::Measured(Box::new(s))
}

/// One round's ceilings at one MTU.
#[derive(Debug, Default)]
struct CeilingSample {
    rx: Option<rx_rate::Rate>,
    tx: Option<rx_rate::Rate>,
    errors: Vec<String>,
}

fn measure_ceilings(mtu: u32, opts: &SuiteOptions) -> CeilingSample {
    let mut c = CeilingSample::default();
    let duration = Duration::from_secs_f64(opts.ceiling_seconds);
    match ceilings::raw_rx(mtu, duration) {
        Ok(r) => c.rx = Some(r),
        Err(e) => c.errors.push(format!("raw RX: {e}")),
    }
    match ceilings::raw_tx(mtu, duration) {
        Ok(r) => c.tx = Some(r),
        Err(e) => c.errors.push(format!("raw TX: {e}")),
    }
    c
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
    let cases = scenario::matrix(&scenarios, &opts.mtus, &opts.threads);
    let order = schedule::alternating(cases.len(), opts.runs);
    let ceiling_steps = if opts.ceilings {
        opts.mtus.len() * opts.runs
    } else {
        0
    };
    let bar = progress_bar(opts, (order.len() + ceiling_steps) as u64);

    let mut outcomes: Vec<Vec<Outcome>> = cases.iter().map(|_| Vec::new()).collect();
    let mut ceiling_samples: BTreeMap<u32, Vec<CeilingSample>> = BTreeMap::new();
    let mut memcpy = Vec::new();
    let mut current_round = usize::MAX;
    let mut interrupted = false;
    for (round, idx) in order {
        if opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            interrupted = true;
            break;
        }
        if round != current_round {
            current_round = round;
            if opts.ceilings {
                memcpy.push(ceilings::memcpy_gbps(8));
                for &mtu in &opts.mtus {
                    bar.set_message(format!(
                        "round {}/{}: ceilings at MTU {mtu}",
                        round + 1,
                        opts.runs
                    ));
                    ceiling_samples
                        .entry(mtu)
                        .or_default()
                        .push(measure_ceilings(mtu, opts));
                    bar.inc(1);
                }
            }
        }
        let case = &cases[idx];
        bar.set_message(format!("round {}/{}: {}", round + 1, opts.runs, case.key()));
        // A case the build cannot run is not retried every round.
        let skip = matches!(outcomes[idx].first(), Some(Outcome::Unavailable(_)));
        if !skip {
            let o = measure(case, opts);
            if let Outcome::Failed(e) = &o {
                bar.suspend(|| eprintln!("{}: {e}", case.key()));
            }
            outcomes[idx].push(o);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();

    let memcpy_summary = Summary::of(&memcpy);
    let ceilings: Vec<Ceiling> = opts
        .mtus
        .iter()
        .filter(|_| opts.ceilings)
        .map(|&mtu| {
            let samples = ceiling_samples.remove(&mtu).unwrap_or_default();
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
        .collect();

    let mut rows: Vec<Row> = cases
        .iter()
        .zip(outcomes)
        .map(|(case, outs)| aggregate(case, outs))
        .collect();
    if iperf_missing {
        for &mtu in &opts.mtus {
            rows.push(Row {
                status: Status::Unavailable,
                notes: vec!["iperf3 is not installed (apt-get install -y iperf3)".into()],
                ..aggregate(
                    &Case {
                        scenario: Scenario::LinuxLinuxIperf3,
                        mtu,
                        threads: None,
                    },
                    Vec::new(),
                )
            });
        }
    }
    fill_ratios(&mut rows, &ceilings);
    let targets = targets::judge(&rows, &ceilings);
    if interrupted {
        for r in &mut rows {
            r.notes
                .push(if r.goodput_gbps.is_none() && r.notes.is_empty() {
                    "not run: interrupted".into()
                } else {
                    "interrupted: fewer rounds than asked".into()
                });
        }
    }
    Ok(Report {
        schema: report::SCHEMA,
        tool: opts.tool.clone(),
        started_unix,
        wall_seconds: started.elapsed().as_secs_f64(),
        machine: machine(),
        options: ReportOptions {
            quick: opts.quick,
            runs: opts.runs,
            bytes: opts.bytes,
            seconds: opts.seconds,
            pingpong_rounds: opts.pingpong_rounds,
            message: opts.message,
            impair: opts
                .impair
                .as_ref()
                .map_or("none".into(), ToString::to_string),
        },
        ceilings,
        rows,
        targets,
    })
}

/// Turns one case's outcomes into its row (ratios filled in later).
fn aggregate(case: &Case, outcomes: Vec<Outcome>) -> Row {
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
        status,
        notes,
        goodput_gbps: sum(|s| s.goodput_gbps),
        cpu_s_per_gb: CpuPerGb {
            sender: sum(|s| s.snd_cpu_per_gb),
            receiver: sum(|s| s.rcv_cpu_per_gb),
            softirq: sum(|s| s.softirq_per_gb),
        },
        retransmits: sum(|s| s.retransmits),
        drops,
        latency,
        ratios: Ratios {
            vs_linux: None,
            vs_raw: None,
        },
    }
}

/// Ratios of each row's median goodput to linux-linux's and to the raw
/// ceiling at the same MTU.
fn fill_ratios(rows: &mut [Row], ceilings: &[Ceiling]) {
    let linux: BTreeMap<u32, f64> = rows
        .iter()
        .filter(|r| r.scenario == Scenario::LinuxLinux)
        .filter_map(|r| r.goodput_gbps.map(|g| (r.mtu, g.median)))
        .collect();
    for r in rows.iter_mut() {
        let Some(g) = r.goodput_gbps.map(|g| g.median) else {
            continue;
        };
        r.ratios.vs_linux = linux.get(&r.mtu).filter(|l| **l > 0.0).map(|l| g / l);
        r.ratios.vs_raw = ceilings
            .iter()
            .find(|c| c.mtu == r.mtu)
            .and_then(|c| c.raw_payload_gbps)
            .filter(|c| *c > 0.0)
            .map(|c| g / c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

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
    }
}
