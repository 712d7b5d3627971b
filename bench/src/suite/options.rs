//! What `zerosplit bench` runs ([`SuiteOptions`]: the full matrix or the
//! quick CI subset) and the errors that stop it before anything runs.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::impair::ImpairConfig;
use zerosplit_lab::HarnessError;

use super::peer::PollMode;
use super::scenario::{Family, Scenario, ThreadMode};

/// The flow counts of the full and quick runs.
pub const FLOW_COUNTS: [usize; 4] = [1, 16, 256, 1024];
/// The queue counts of the full run (the quick run: one queue).
pub const FLOW_QUEUES: [u32; 2] = [1, 2];
/// Most queues one point may ask for (`bench-peer --queues` bound).
pub const MAX_FLOW_QUEUES: u32 = 8;
/// Most connections one point may ask for (`bench-peer --flows` bound).
pub const MAX_FLOWS_POINT: usize = 4096;

/// MTUs the bench can run: up to veth's largest, which zerosplit carries
/// as multi-buffer frames (the steering program is `xdp.frags`-aware).
pub const MTUS: std::ops::RangeInclusive<u32> = 576..=65_535;

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
    /// Every case of the main rows runs over IPv6 too (`--ipv6`), beside
    /// its IPv4 twin in the same rounds; the sections after the main rows
    /// stay IPv4.
    pub ipv6: bool,
    /// The zerosplit ends' idle policy in the main rows.
    pub poll: PollMode,
    /// How an attached end waits for completions (`None`: the provider
    /// library's default, [`zerosplit::attach::default_poll`]); `--poll`
    /// sets it too.
    pub attached_poll: Option<PollMode>,
    /// Run the poll section (idle CPU, goodput and ping-pong per mode).
    pub poll_modes: bool,
    /// Run the apps section (iperf3 and redis under `zerosplit exec`
    /// beside kernel TCP).
    pub apps: bool,
    /// Run the attached section (zerosplit attached to a daemon beside
    /// zerosplit in-process).
    pub attached: bool,
    /// How long the poll section's idle stack sits without traffic.
    pub idle_seconds: f64,
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
    /// Connection counts of the flows section (empty: no section).
    pub flow_counts: Vec<usize>,
    /// Queue counts of the flows section (each count runs on each).
    pub flow_queues: Vec<u32>,
    /// Rounds of the flows section.
    pub flow_runs: usize,
    /// `--quick` (recorded in the report).
    pub quick: bool,
    /// zerosplit ends publish metrics and a scraper reads them every
    /// 100 ms, to price the metrics path.
    pub metrics: bool,
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
    /// The full matrix: every scenario, MTU 1500, 9000 and 65535, both thread
    /// modes, 3 rounds of 3-second transfers (≈ 5–6 minutes on 2 vCPUs).
    pub fn full(peer_program: PathBuf) -> Self {
        SuiteOptions {
            peer_program,
            scenarios: Scenario::ALL.to_vec(),
            mtus: vec![1500, 9000, 65_535],
            threads: vec![ThreadMode::Rtc, ThreadMode::Dedicated],
            ipv6: false,
            poll: PollMode::default(),
            attached_poll: None,
            poll_modes: true,
            apps: true,
            attached: true,
            idle_seconds: 3.0,
            runs: 3,
            bytes: 64 << 30,
            seconds: 3.0,
            pingpong_rounds: 20_000,
            message: 64,
            ceiling_seconds: 2.0,
            ceilings: true,
            impair: None,
            flow_counts: FLOW_COUNTS.to_vec(),
            flow_queues: FLOW_QUEUES.to_vec(),
            flow_runs: 3,
            quick: false,
            metrics: false,
            progress: true,
            tool: String::new(),
            stop: None,
        }
    }

    /// The CI smoke subset: MTU 1500, run-to-completion, no iperf3, 2
    /// rounds of 1-second transfers (≈ 25 s on 2 vCPUs, ≈ 20 s more for the poll
    /// section; under 2 minutes).
    pub fn quick(peer_program: PathBuf) -> Self {
        SuiteOptions {
            scenarios: vec![
                Scenario::LinuxLinux,
                Scenario::LinuxLinuxOffload,
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
            // /proc counts CPU in 10 ms ticks: 2 s resolve 0.5 % of a core.
            idle_seconds: 2.0,
            flow_runs: 1,
            flow_queues: vec![1],
            quick: true,
            ..Self::full(peer_program)
        }
    }

    /// The families the main rows run over: IPv4, and IPv6 with `--ipv6`.
    pub fn families(&self) -> Vec<Family> {
        if self.ipv6 {
            vec![Family::Ipv4, Family::Ipv6]
        } else {
            vec![Family::Ipv4]
        }
    }

    pub(super) fn check(&self) -> Result<(), SuiteError> {
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
        if let Some(m) = self.mtus.iter().find(|m| !MTUS.contains(*m)) {
            return bad(
                "--mtu",
                format!("{m} is outside {}..={}", MTUS.start(), MTUS.end()),
            );
        }
        if self.scenarios.is_empty() || self.mtus.is_empty() || self.threads.is_empty() {
            return bad("--scenario/--mtu/--threads", "nothing left to run".into());
        }
        if !(self.idle_seconds > 0.0 && self.idle_seconds <= 60.0) {
            return bad(
                "idle seconds",
                format!("{} is outside (0, 60]", self.idle_seconds),
            );
        }
        if !(1..=1400).contains(&self.message) {
            return bad(
                "message size",
                format!("{} is outside 1..=1400", self.message),
            );
        }
        if let Some(n) = self
            .flow_counts
            .iter()
            .find(|n| !(1..=MAX_FLOWS_POINT).contains(*n))
        {
            return bad("--flows", format!("{n} is outside 1..={}", MAX_FLOWS_POINT));
        }
        if let Some(q) = self
            .flow_queues
            .iter()
            .find(|q| !(1..=MAX_FLOW_QUEUES).contains(*q))
        {
            return bad(
                "--flow-queues",
                format!("{q} is outside 1..={}", MAX_FLOW_QUEUES),
            );
        }
        if !self.flow_counts.is_empty() && !(1..=100).contains(&self.flow_runs) {
            return bad(
                "flow rounds",
                format!("{} is outside 1..=100", self.flow_runs),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::scenario::{matrix, Case};

    fn keys(o: &SuiteOptions) -> Vec<String> {
        matrix(&o.scenarios, &o.mtus, &o.threads, &o.families())
            .iter()
            .map(Case::key)
            .collect()
    }

    #[test]
    fn the_quick_subset_gains_ipv6_rows_only_with_ipv6() {
        let mut o = SuiteOptions::quick(PathBuf::from("/nonexistent"));
        let quick = [
            "linux-linux/1500/-",
            "linux-linux-offload/1500/-",
            "linux-zs/1500/rtc",
            "zs-linux/1500/rtc",
            "zs-zs-tcp/1500/rtc",
            "zs-zs-smoltcp/1500/rtc",
        ];
        assert!(!o.ipv6);
        assert_eq!(keys(&o), quick);
        o.ipv6 = true;
        let both = keys(&o);
        assert_eq!(both.len(), 2 * quick.len());
        // The IPv4 rows are unchanged and in order; each IPv6 row follows
        // its twin.
        for (i, k) in quick.iter().enumerate() {
            assert_eq!(both[2 * i], *k);
            assert_eq!(both[2 * i + 1], format!("{k}/v6"));
        }
        assert!(!SuiteOptions::full(PathBuf::from("/nonexistent")).ipv6);
    }
}
