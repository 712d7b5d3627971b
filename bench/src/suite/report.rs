//! The machine-readable result (`--json FILE`), schema version 2. The
//! fields and their meaning are documented in `bench/README.md`; a change
//! that renames or re-means a field bumps [`SCHEMA`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::scenario::{Case, Family, Scenario, ThreadMode};
use super::stats::Summary;

/// Version of the JSON schema written here.
pub const SCHEMA: u32 = 2;

/// One whole bench run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// `zerosplit <version>`.
    pub tool: String,
    /// Start time, seconds since the Unix epoch.
    pub started_unix: u64,
    /// Wall time of the whole run.
    pub wall_seconds: f64,
    /// Where it ran.
    pub machine: Machine,
    /// The options that shaped it.
    pub options: ReportOptions,
    /// Ceilings per MTU.
    pub ceilings: Vec<Ceiling>,
    /// One per case, in table order.
    pub rows: Vec<Row>,
    /// The project's performance targets, judged on this run.
    pub targets: Vec<Target>,
    /// Idle CPU, goodput and ping-pong per `threads.poll` mode (absent
    /// when not run, and in reports written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<PollSection>,
    /// Aggregate goodput and CPU per packet with many connections
    /// (absent when not run).
    #[serde(default)]
    pub flows: Option<FlowsSection>,
    /// Stock programs under `zerosplit exec` beside kernel TCP (absent
    /// when not run).
    #[serde(default)]
    pub apps: Option<AppsSection>,
    /// zerosplit attached to a daemon beside zerosplit in-process
    /// (absent when not run).
    #[serde(default)]
    pub attached: Option<AttachedSection>,
}

/// The machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `uname -r`.
    pub kernel: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Host name.
    pub hostname: String,
}

/// Options recorded with the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportOptions {
    /// `--quick`.
    pub quick: bool,
    /// `--metrics`: the zerosplit ends published metrics and were scraped.
    #[serde(default)]
    pub metrics: bool,
    /// Rounds (each case runs once per round).
    pub runs: usize,
    /// Sender byte limit.
    pub bytes: u64,
    /// Sender time limit.
    pub seconds: f64,
    /// Ping-pong rounds per measurement.
    pub pingpong_rounds: u64,
    /// Ping-pong message size.
    pub message: usize,
    /// Impairment spec of the path (`none` for a plain veth pair).
    pub impair: String,
    /// `--ipv6`: the main rows ran over IPv6 too.
    #[serde(default)]
    pub ipv6: bool,
}

/// The ceilings measured in this run at one MTU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    /// MTU.
    pub mtu: u32,
    /// Raw AF_XDP receive (no protocol), frame Gbit/s.
    pub raw_rx_gbps: Option<Summary>,
    /// Raw AF_XDP transmit into a receiver that only counts, frame Gbit/s.
    pub raw_tx_gbps: Option<Summary>,
    /// The lower of the two, as TCP payload Gbit/s (packets/s × MSS).
    pub raw_payload_gbps: Option<f64>,
    /// memcpy bandwidth (same for every MTU), Gbit/s.
    pub memcpy_gbps: Option<Summary>,
    /// Why a ceiling is missing.
    pub errors: Vec<String>,
}

/// Outcome of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Every run measured.
    Ok,
    /// Some runs failed; the figures are over the rest.
    Partial,
    /// No run succeeded.
    Failed,
    /// This build lacks what the row needs (said by the peer).
    Unavailable,
}

/// CPU seconds per GB of payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuPerGb {
    /// Sending process, user + system.
    pub sender: Option<Summary>,
    /// Receiving process, user + system.
    pub receiver: Option<Summary>,
    /// Softirq time of the whole machine during the transfer.
    pub softirq: Option<Summary>,
}

/// What one end's main thread is, in [`EndCpu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MainThread {
    /// zerosplit, run-to-completion: one loop runs datapath and transport.
    Loop,
    /// zerosplit, dedicated mode: the thread polling the datapath (the
    /// transport has its own thread).
    Datapath,
    /// A Linux end: every thread of the process.
    Process,
}

/// One end's CPU seconds per GB of payload, by thread and kind (schema 2).
/// `main_*` is every thread but the transport thread; with `transport_*`
/// it adds up to the end's `cpu_s_per_gb` figure (up to /proc's 10 ms
/// ticks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndCpu {
    /// What the main thread is.
    pub main: MainThread,
    /// User time of the main thread (the loop, the datapath thread, or the
    /// Linux process).
    pub main_user: Option<Summary>,
    /// System time of the main thread.
    pub main_system: Option<Summary>,
    /// User time of the transport thread (dedicated mode only).
    pub transport_user: Option<Summary>,
    /// System time of the transport thread (dedicated mode only).
    pub transport_system: Option<Summary>,
    /// The transport thread's share of one core scaled to 10 Gbit/s of
    /// goodput: `(user + system) / transfer seconds × 10 / goodput Gbit/s`
    /// (0.15 = 15 % of a core per 10 Gbit/s; dedicated mode only).
    pub transport_core_per_10gbps: Option<Summary>,
}

/// A row's CPU by thread and kind, and the figures derived from it
/// (schema 2). Per GB figures are CPU seconds per GB of payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuBreakdown {
    /// The sending end (absent for iperf3 rows).
    pub sender: Option<EndCpu>,
    /// The receiving end (absent for iperf3 rows).
    pub receiver: Option<EndCpu>,
    /// Softirq seconds per GB of each CPU (index = CPU number), over the
    /// transfer; they add up to `cpu_s_per_gb.softirq`.
    pub softirq_per_cpu: Vec<Option<Summary>>,
    /// "Stack's own CPU per byte": user time of the zerosplit ends (every
    /// thread) per GB; rows with a zerosplit end only.
    pub stack_own_s_per_gb: Option<Summary>,
    /// Linux's total CPU per byte: user + system of both ends plus the
    /// softirq time of every CPU, per GB; rows with two Linux ends only.
    pub linux_total_s_per_gb: Option<Summary>,
}

/// Request/response latency (round trip) percentiles in µs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Medians over runs of each run's percentile.
    pub p50_us: Option<Summary>,
    /// 99th percentile.
    pub p99_us: Option<Summary>,
    /// 99.9th percentile.
    pub p999_us: Option<Summary>,
    /// CDF points of the run with the median p50.
    pub cdf: Vec<(f64, f64)>,
}

/// Ratios printed next to a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// Goodput ÷ linux-linux goodput at the same MTU (medians).
    pub vs_linux: Option<f64>,
    /// Goodput ÷ linux-linux-offload goodput at the same MTU (medians):
    /// Linux with a veth's default offloads.
    pub vs_linux_offload: Option<f64>,
    /// Goodput ÷ the raw AF_XDP payload ceiling at the same MTU.
    pub vs_raw: Option<f64>,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `scenario/mtu/threads`, and `/v6` for an IPv6 row.
    pub key: String,
    /// Scenario.
    pub scenario: Scenario,
    /// MTU.
    pub mtu: u32,
    /// Thread mode of the zerosplit ends.
    pub threads: Option<ThreadMode>,
    /// IP family (absent in reports before `--ipv6`: IPv4).
    #[serde(default)]
    pub family: Family,
    /// Outcome.
    pub status: Status,
    /// Why a run failed or the row is unavailable.
    pub notes: Vec<String>,
    /// Goodput at the receiver, Gbit/s of payload.
    pub goodput_gbps: Option<Summary>,
    /// CPU per GB.
    pub cpu_s_per_gb: CpuPerGb,
    /// CPU per GB by thread and kind, and the derived figures.
    pub cpu_breakdown: CpuBreakdown,
    /// Retransmitted segments per run (both ends).
    pub retransmits: Option<Summary>,
    /// Drops by reason, summed over runs (both ends, plus the veth counters).
    pub drops: BTreeMap<String, u64>,
    /// Ping-pong latency.
    pub latency: Option<Latency>,
    /// Ratios.
    pub ratios: Ratios,
}

impl Row {
    /// The case this row measured.
    pub fn case(&self) -> Case {
        Case {
            scenario: self.scenario,
            mtu: self.mtu,
            threads: self.threads,
            family: self.family,
        }
    }
}

/// One performance target judged on this run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// What is compared, in words.
    pub name: String,
    /// The measured value (a ratio).
    pub value: Option<f64>,
    /// `>= goal` (or `<= goal` when `at_most`).
    pub goal: f64,
    /// The goal is an upper bound.
    pub at_most: bool,
    /// Met, missed, or `None` when a figure was missing.
    pub met: Option<bool>,
}

impl Target {
    /// `value` judged against `goal` (an upper bound when `at_most`); a
    /// missing or non-finite value is neither met nor missed.
    pub fn judged(name: String, value: Option<f64>, goal: f64, at_most: bool) -> Target {
        let met = value
            .filter(|v| v.is_finite())
            .map(|v| if at_most { v <= goal } else { v >= goal });
        Target {
            name,
            value,
            goal,
            at_most,
            met,
        }
    }
}

impl Report {
    /// The row for `key`, if present.
    pub fn row(&self, key: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == key)
    }

    /// Parses a report and checks the schema version.
    ///
    /// # Errors
    /// Not JSON of this shape, or another schema version.
    pub fn from_json(text: &str) -> Result<Report, ReportError> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(ReportError::Json)?;
        match v.get("schema").and_then(serde_json::Value::as_u64) {
            Some(s) if s == u64::from(SCHEMA) => {}
            other => return Err(ReportError::Schema(other)),
        }
        serde_json::from_value(v).map_err(ReportError::Json)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// A report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Not valid JSON of the report's shape.
    #[error("not a bench report: {0}")]
    Json(serde_json::Error),
    /// Another schema version.
    #[error("bench report has schema {0:?}; this build reads schema {SCHEMA} only{hint}", hint = schema_hint(*.0))]
    Schema(Option<u64>),
}

fn schema_hint(found: Option<u64>) -> &'static str {
    match found {
        Some(v) if v < u64::from(SCHEMA) => {
            " (an older zerosplit wrote it, without the per-thread CPU and the linux-linux-offload ratios): re-run `zerosplit bench --json FILE` with this build to make a new baseline"
        }
        Some(_) => " (a newer zerosplit wrote it)",
        None => "",
    }
}

// The sections' data: each section's runner (`apps`, `flows`, `poll`)
// fills one; the report holds them.

/// What the section measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppsSection {
    /// Rounds.
    pub runs: usize,
    /// One point per measure.
    pub points: Vec<AppPoint>,
    /// Failures (a missing program, a run that failed), in order.
    pub errors: Vec<String>,
}

/// One measure, under exec and on kernel TCP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppPoint {
    /// What was measured (`iperf3 linux→exec`, `redis SET 16KiB`, …).
    pub name: String,
    /// Its unit (`Gbit/s`, `ops/s`, `µs`).
    pub unit: String,
    /// Larger is better (throughput) or smaller (latency).
    pub higher_is_better: bool,
    /// The program under `zerosplit exec`, a stack of its own.
    pub exec: Option<Summary>,
    /// The program under `zerosplit exec` attached to a daemon (reports
    /// before the attached mode have none).
    #[serde(default)]
    pub attached: Option<Summary>,
    /// The same program on kernel TCP.
    pub kernel: Option<Summary>,
    /// The native-API row of the same run, where there is one.
    pub native: Option<f64>,
}

impl AppPoint {
    /// exec ÷ kernel (kernel ÷ exec for latency: above 1 is better).
    pub fn vs_kernel(&self) -> Option<f64> {
        let (e, k) = (self.exec?.median, self.kernel?.median);
        Some(if self.higher_is_better { e / k } else { k / e })
    }

    /// attached ÷ exec (exec ÷ attached for latency: above 1 is better).
    pub fn attached_vs_exec(&self) -> Option<f64> {
        let (d, e) = (self.attached?.median, self.exec?.median);
        Some(if self.higher_is_better { d / e } else { e / d })
    }

    /// exec ÷ the native-API row (native ÷ exec for latency).
    pub fn vs_native(&self) -> Option<f64> {
        let (e, n) = (self.exec?.median, self.native?);
        Some(if self.higher_is_better { e / n } else { n / e })
    }
}

/// The flows section of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowsSection {
    /// MTU of every point.
    pub mtu: u32,
    /// Rounds (each point runs once per round).
    pub runs: usize,
    /// Sender time limit per point.
    pub seconds: f64,
    /// One per (scenario, queues, flow count), scenarios in
    /// [`FLOW_SCENARIOS`](super::flows::FLOW_SCENARIOS) order, then queues and counts ascending; a count
    /// below the queue count is not run.
    pub points: Vec<FlowPoint>,
}

/// One scenario at one flow count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowPoint {
    /// `zs-zs-tcp` or `linux-linux`.
    pub scenario: Scenario,
    /// Concurrent connections.
    pub flows: usize,
    /// Queues per end (absent in reports before queues were measured: 1).
    #[serde(default = "one_queue")]
    pub queues: u32,
    /// Outcome over the rounds.
    pub status: Status,
    /// Why a round failed.
    pub notes: Vec<String>,
    /// Aggregate payload goodput at the receiver, Gbit/s.
    pub goodput_gbps: Option<Summary>,
    /// CPU µs (user + system) of both processes per data packet.
    pub cpu_us_per_packet: Option<Summary>,
    /// Sender process CPU µs per data packet.
    pub snd_cpu_us_per_packet: Option<Summary>,
    /// Receiver process CPU µs per data packet.
    pub rcv_cpu_us_per_packet: Option<Summary>,
    /// CPU seconds of both processes per GB of payload.
    pub cpu_s_per_gb: Option<Summary>,
    /// Fairness: the connection that moved least ÷ the mean, at the
    /// receiver (1.0 = perfectly even).
    pub min_share: Option<Summary>,
    /// Fairness: the connection that moved most ÷ the mean.
    pub max_share: Option<Summary>,
    /// Retransmitted segments per run (both ends).
    pub retransmits: Option<Summary>,
    /// Drops by reason, both ends, summed over the rounds (absent in
    /// reports before they were recorded).
    #[serde(default)]
    pub drops: BTreeMap<String, u64>,
}

fn one_queue() -> u32 {
    1
}

impl FlowsSection {
    /// The point of `sc` with `flows` connections on one queue.
    pub fn point(&self, sc: Scenario, flows: usize) -> Option<&FlowPoint> {
        self.point_on(sc, flows, 1)
    }

    /// The point of `sc` with `flows` connections on `queues` queues.
    pub fn point_on(&self, sc: Scenario, flows: usize, queues: u32) -> Option<&FlowPoint> {
        self.points
            .iter()
            .find(|p| p.scenario == sc && p.flows == flows && p.queues == queues)
    }
}

/// One mode's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PollRow {
    /// `spin`, `adaptive` or `sleep`.
    pub mode: String,
    /// CPU time of the idle stack's process ÷ wall time (1.0 = one core).
    pub idle_cpu_fraction: Option<Summary>,
    /// zs-zs-tcp goodput at the receiver, Gbit/s of payload.
    pub goodput_gbps: Option<Summary>,
    /// Ping-pong round trip, median, µs.
    pub p50_us: Option<Summary>,
    /// Ping-pong round trip, 99th percentile, µs.
    pub p99_us: Option<Summary>,
    /// Why a measurement is missing.
    pub notes: Vec<String>,
}

/// The poll section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PollSection {
    /// MTU of the transfers and ping-pongs.
    pub mtu: u32,
    /// How long each idle stack sat without traffic.
    pub idle_seconds: f64,
    /// The mode the main rows ran in (the default).
    pub default_mode: String,
    /// One row per mode: spin, adaptive, sleep.
    pub rows: Vec<PollRow>,
}

/// Drops as `reason=count …`, or `none`.
pub fn drop_list(drops: &std::collections::BTreeMap<String, u64>) -> String {
    if drops.is_empty() {
        return "none".into();
    }
    drops
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The attached-vs-in-process section ([`super::attached`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachedSection {
    /// In-process, attached and in-process-with-a-spinner rows, per MTU
    /// and direction.
    pub rows: Vec<AttachedRow>,
    /// The channel's own round trip ([`super::handover`]).
    #[serde(default)]
    pub handover: Option<Handover>,
    /// The machine's 1-minute load average when the section began and
    /// when it ended (a busy machine explains scheduler-sized figures).
    #[serde(default)]
    pub load_1min: Option<(f64, f64)>,
    /// How the attached application waited for completions (a
    /// `threads.poll` mode; `None`: the provider library's default).
    #[serde(default)]
    pub app_poll: Option<String>,
}

/// Round trips of one work request through an attachment channel between
/// two threads, over the rounds ([`super::handover::round_trips`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    /// Both ends spinning: median, µs.
    pub spin_p50_us: Option<Summary>,
    /// Both ends spinning: 99th percentile, µs.
    pub spin_p99_us: Option<Summary>,
    /// Both ends spinning, one more thread busy beside: median, µs.
    pub busy_p50_us: Option<Summary>,
    /// Both ends spinning, one more thread busy beside: 99th percentile, µs.
    pub busy_p99_us: Option<Summary>,
    /// Both ends sleeping on their doorbells when idle: median, µs.
    pub sleep_p50_us: Option<Summary>,
    /// Both ends sleeping on their doorbells when idle: 99th percentile, µs.
    pub sleep_p99_us: Option<Summary>,
    /// Round trips timed per round (the fewest over the rounds): spinning,
    /// spinning with a busy thread beside, sleeping.
    pub round_trips: (u64, u64, u64),
    /// The daemon end spinning and answering [`Handover::answer_after_us`]
    /// late, the application spinning: median, µs.
    #[serde(default)]
    pub late_spin_p50_us: Option<Summary>,
    /// The same with the application sleeping on its doorbell (the
    /// attached default): median, µs. Minus the previous: its wake-up.
    #[serde(default)]
    pub late_sleep_p50_us: Option<Summary>,
    /// The late answer's delay, µs.
    #[serde(default)]
    pub answer_after_us: f64,
    /// Failures.
    pub notes: Vec<String>,
}

/// Where an [`AttachedRow`]'s zerosplit end runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachedMode {
    /// Its stack in its own process.
    InProcess,
    /// Attached to a daemon.
    Attached,
    /// In its own process, one busy thread beside (the CPU a daemon
    /// takes, without attachment).
    InProcessSpinner,
}

impl AttachedMode {
    /// The three, in the order a first round measures them.
    pub const ALL: [AttachedMode; 3] = [
        AttachedMode::InProcess,
        AttachedMode::Attached,
        AttachedMode::InProcessSpinner,
    ];

    /// The label in the text report.
    pub fn label(self) -> &'static str {
        match self {
            AttachedMode::InProcess => "in-process",
            AttachedMode::Attached => "attached",
            AttachedMode::InProcessSpinner => "in-process+spinner",
        }
    }
}

/// One mode of one direction at one MTU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachedRow {
    /// `zs-linux` or `linux-zs`.
    pub scenario: Scenario,
    /// MTU.
    pub mtu: u32,
    /// Attached to a daemon (else in-process).
    pub attached: bool,
    /// In-process with one busy thread beside ([`AttachedMode::InProcessSpinner`]).
    #[serde(default)]
    pub spinner: bool,
    /// Goodput at the receiver.
    pub goodput_gbps: Option<Summary>,
    /// Ping-pong round trip median.
    pub p50_us: Option<Summary>,
    /// Ping-pong round trip 99th percentile.
    pub p99_us: Option<Summary>,
    /// CPU seconds per GB of the zerosplit end: its process, plus its
    /// daemon's when attached.
    pub cpu_s_per_gb: Option<Summary>,
    /// The daemon's share of `cpu_s_per_gb`.
    pub daemon_cpu_s_per_gb: Option<Summary>,
    /// Payload copies per payload byte of the zerosplit end's stack.
    pub copies_per_byte: Option<Summary>,
    /// Failures.
    pub notes: Vec<String>,
}

impl AttachedRow {
    /// Where its zerosplit end ran.
    pub fn mode(&self) -> AttachedMode {
        match (self.attached, self.spinner) {
            (true, _) => AttachedMode::Attached,
            (false, true) => AttachedMode::InProcessSpinner,
            (false, false) => AttachedMode::InProcess,
        }
    }
}

impl AttachedSection {
    pub(super) fn row(&self, sc: Scenario, mtu: u32, mode: AttachedMode) -> Option<&AttachedRow> {
        self.rows
            .iter()
            .find(|r| r.scenario == sc && r.mtu == mtu && r.mode() == mode)
    }

    /// Attached ÷ in-process goodput (medians).
    pub fn goodput_ratio(&self, sc: Scenario, mtu: u32) -> Option<f64> {
        let g = |m| self.row(sc, mtu, m).and_then(|r| r.goodput_gbps);
        let (at, inp) = (g(AttachedMode::Attached)?, g(AttachedMode::InProcess)?);
        (inp.median > 0.0).then(|| at.median / inp.median)
    }

    /// Attached p50 − in-process p50, µs (medians).
    pub fn p50_delta(&self, sc: Scenario, mtu: u32) -> Option<f64> {
        self.p50_delta_vs(sc, mtu, AttachedMode::InProcess)
    }

    /// Attached p50 − `base`'s p50, µs (medians).
    pub fn p50_delta_vs(&self, sc: Scenario, mtu: u32, base: AttachedMode) -> Option<f64> {
        let p = |m| self.row(sc, mtu, m).and_then(|r| r.p50_us);
        Some(p(AttachedMode::Attached)?.median - p(base)?.median)
    }

    /// |attached − in-process| payload copies per byte (medians).
    pub fn copies_delta(&self, sc: Scenario, mtu: u32) -> Option<f64> {
        let c = |m| self.row(sc, mtu, m).and_then(|r| r.copies_per_byte);
        Some((c(AttachedMode::Attached)?.median - c(AttachedMode::InProcess)?.median).abs())
    }

    pub(super) fn points(&self) -> Vec<(Scenario, u32)> {
        let mut p: Vec<(Scenario, u32)> = self.rows.iter().map(|r| (r.scenario, r.mtu)).collect();
        p.dedup();
        p
    }
}

/// Adds the drop counts of `from` to `into`, by reason.
pub(super) fn merge_drops(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A CPU breakdown: a zerosplit pair in run-to-completion mode, or two
    /// Linux ends.
    pub(crate) fn breakdown(zerosplit: bool) -> CpuBreakdown {
        let s = |m: f64| Summary::of(&[m * 0.9, m, m * 1.1]);
        let end = EndCpu {
            main: if zerosplit {
                MainThread::Loop
            } else {
                MainThread::Process
            },
            main_user: s(0.3),
            main_system: s(0.1),
            transport_user: None,
            transport_system: None,
            transport_core_per_10gbps: None,
        };
        CpuBreakdown {
            sender: Some(end.clone()),
            receiver: Some(end),
            softirq_per_cpu: vec![s(0.15), s(0.05)],
            stack_own_s_per_gb: if zerosplit { s(0.6) } else { None },
            linux_total_s_per_gb: if zerosplit { None } else { s(1.0) },
        }
    }

    pub(crate) fn sample() -> Report {
        let s = |m: f64| Summary::of(&[m * 0.9, m, m * 1.1]);
        let row = |scenario: Scenario, threads, gbps: f64, vs_linux| Row {
            key: Case {
                scenario,
                mtu: 1500,
                threads,
                family: Family::Ipv4,
            }
            .key(),
            scenario,
            mtu: 1500,
            threads,
            family: Family::Ipv4,
            status: Status::Ok,
            notes: vec![],
            goodput_gbps: s(gbps),
            cpu_s_per_gb: CpuPerGb {
                sender: s(0.4),
                receiver: s(0.6),
                softirq: s(0.2),
            },
            cpu_breakdown: breakdown(scenario.has_zerosplit()),
            retransmits: s(0.0),
            drops: BTreeMap::from([("beyond_posted".into(), 3)]),
            latency: Some(Latency {
                p50_us: s(20.0),
                p99_us: s(60.0),
                p999_us: s(90.0),
                cdf: vec![(0.0, 10.0), (0.5, 20.0), (0.99, 60.0), (1.0, 95.0)],
            }),
            ratios: Ratios {
                vs_linux,
                vs_linux_offload: None,
                vs_raw: Some(gbps / 20.0),
            },
        };
        Report {
            schema: SCHEMA,
            tool: "zerosplit 0.1.0".into(),
            started_unix: 1_795_000_000,
            wall_seconds: 42.0,
            machine: Machine {
                kernel: "6.18.0".into(),
                cpus: 2,
                hostname: "ci".into(),
            },
            options: ReportOptions {
                quick: true,
                metrics: false,
                runs: 3,
                bytes: 1 << 30,
                seconds: 1.0,
                pingpong_rounds: 1000,
                message: 64,
                impair: "none".into(),
                ipv6: false,
            },
            poll: Some(crate::suite::poll::tests::section(0.01, 5.0, 4.9)),
            ceilings: vec![Ceiling {
                mtu: 1500,
                raw_rx_gbps: s(23.0),
                raw_tx_gbps: s(18.0),
                raw_payload_gbps: Some(17.0),
                memcpy_gbps: s(80.0),
                errors: vec![],
            }],
            rows: vec![
                row(Scenario::LinuxLinux, None, 6.0, Some(1.0)),
                row(Scenario::ZsZsTcp, Some(ThreadMode::Rtc), 9.0, Some(1.5)),
                Row {
                    status: Status::Unavailable,
                    notes: vec!["transport not available".into()],
                    goodput_gbps: None,
                    latency: None,
                    cpu_breakdown: CpuBreakdown::default(),
                    ratios: Ratios {
                        vs_linux: None,
                        vs_linux_offload: None,
                        vs_raw: None,
                    },
                    ..row(Scenario::ZsZsSmoltcp, Some(ThreadMode::Rtc), 0.0, None)
                },
            ],
            targets: vec![Target {
                name: "zs-zs-tcp vs linux-linux at MTU 1500".into(),
                value: Some(1.5),
                goal: 1.5,
                at_most: false,
                met: Some(true),
            }],
            flows: Some(super::super::flows::tests::sample()),
            apps: None,
            attached: None,
        }
    }

    #[test]
    fn json_round_trip_keeps_every_field() {
        let r = sample();
        let text = r.to_json();
        assert_eq!(Report::from_json(&text).expect("parses"), r);
        for field in [
            "\"schema\": 2",
            "\"goodput_gbps\"",
            "\"vs_linux_offload\"",
            "\"cpu_breakdown\"",
            "\"softirq_per_cpu\"",
            "\"stack_own_s_per_gb\"",
            "\"linux_total_s_per_gb\"",
            "\"main_user\"",
            "\"transport_core_per_10gbps\"",
            "\"cpu_s_per_gb\"",
            "\"p999_us\"",
            "\"vs_linux\"",
            "\"vs_raw\"",
            "\"raw_tx_gbps\"",
            "\"memcpy_gbps\"",
            "\"zs-zs-tcp/1500/rtc\"",
            "\"unavailable\"",
            "\"cpu_us_per_packet\"",
            "\"min_share\"",
        ] {
            assert!(text.contains(field), "{field} missing");
        }
    }

    #[test]
    fn a_report_from_before_ipv6_rows_reads_as_ipv4() {
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).expect("json");
        for row in v["rows"].as_array_mut().expect("rows") {
            assert_eq!(row["family"], "ipv4");
            row.as_object_mut().expect("row").remove("family");
        }
        v["options"]
            .as_object_mut()
            .expect("options")
            .remove("ipv6");
        let old = Report::from_json(&v.to_string()).expect("an older report parses");
        assert_eq!(old, sample());
        assert!(old.rows.iter().all(|r| r.family == Family::Ipv4));
        assert_eq!(
            old.row("zs-zs-tcp/1500/rtc")
                .map(Row::case)
                .map(|c| c.key()),
            Some("zs-zs-tcp/1500/rtc".into())
        );
    }

    #[test]
    fn other_schema_versions_are_refused() {
        let text = sample().to_json().replace("\"schema\": 2", "\"schema\": 3");
        let err = Report::from_json(&text).expect_err("schema 3");
        assert!(err.to_string().contains("schema Some(3);"), "{err}");
        assert!(err.to_string().contains("newer"), "{err}");
        // A schema-1 baseline (before the per-thread CPU) says what to do.
        let text = sample().to_json().replace("\"schema\": 2", "\"schema\": 1");
        let err = Report::from_json(&text).expect_err("schema 1");
        let msg = err.to_string();
        assert!(
            msg.contains("schema Some(1);") && msg.contains("reads schema 2"),
            "{msg}"
        );
        assert!(msg.contains("re-run `zerosplit bench --json"), "{msg}");
        assert!(Report::from_json("{}").is_err());
        assert!(Report::from_json("not json").is_err());
    }
}
