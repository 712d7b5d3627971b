//! One-call harnesses: a single transfer, and N flows sharing a bottleneck
//! for fairness.

use core::time::Duration;

use super::driver::{FlowSpec, Outcome, SimConfig, Simulation};
use super::endpoint::AppConfig;
use super::error::SimError;
use super::path::PathConfig;
use super::report::{FairnessReport, FlowReport, TransferReport};
use crate::segment::{RxSegment, Transport};
use crate::time::Instant;

/// Knobs of [`transfer_with`] beyond path, size and seed.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferOptions {
    /// Simulated time limit.
    pub time_limit: Duration,
    /// Loop limits, windows, trace and whether to wait for both closes.
    pub config: SimConfig,
    /// Size of each receive buffer the server posts.
    pub recv_chunk: u64,
    /// Receive buffers the server keeps posted.
    pub recv_outstanding: u32,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            time_limit: Duration::from_secs(60),
            config: SimConfig::default(),
            recv_chunk: 1 << 20,
            recv_outstanding: 4,
        }
    }
}

/// Sends `bytes` from a client made by `connect(now)` to a server made by
/// `accept(now, syn)` over `path`, checking scoreboard exactness, with the
/// default [`TransferOptions`].
///
/// ```text
/// let report = sim::transfer(connect, accept,
///     &PathConfig::link(10_000_000_000, Duration::from_micros(100)).with_loss(0.01),
///     100_000_000, 1)?;
/// println!("{:.2} Gbit/s", report.goodput_gbps());
/// ```
///
/// # Errors
/// Any [`SimError`]; [`SimError::TimedOut`] if the time limit passed first.
pub fn transfer<A: Transport, B: Transport>(
    mut connect: impl FnMut(Instant) -> A,
    mut accept: impl FnMut(Instant, &RxSegment) -> Option<B>,
    path: &PathConfig,
    bytes: u64,
    seed: u64,
) -> Result<TransferReport, SimError> {
    transfer_with(
        &TransferOptions::default(),
        |_, now| connect(now),
        |_, now, syn| accept(now, syn),
        path,
        bytes,
        seed,
    )
}

/// [`transfer`] with explicit options; the factories also get the flow
/// index (always 0).
///
/// # Errors
/// Any [`SimError`]; [`SimError::TimedOut`] if the time limit passed first.
pub fn transfer_with<A: Transport, B: Transport>(
    options: &TransferOptions,
    connect: impl FnMut(usize, Instant) -> A,
    accept: impl FnMut(usize, Instant, &RxSegment) -> Option<B>,
    path: &PathConfig,
    bytes: u64,
    seed: u64,
) -> Result<TransferReport, SimError> {
    let mut spec = FlowSpec::upload(Instant::ZERO, bytes);
    spec.server.recv_chunk = options.recv_chunk;
    spec.server.recv_outstanding = options.recv_outstanding;
    let mut sim = Simulation::new(
        path,
        vec![spec],
        options.config.clone(),
        seed,
        connect,
        accept,
    )?;
    let until = Instant::ZERO + options.time_limit;
    match sim.run(until)? {
        Outcome::Finished => {}
        Outcome::TimeReached => {
            return Err(SimError::TimedOut {
                at: sim.now(),
                delivered: sim
                    .flows()
                    .iter()
                    .map(|f| f.server.scoreboard().upto())
                    .collect(),
            })
        }
    }
    let flow = FlowReport::of(0, &sim.flows()[0]);
    let completion = flow.completion().unwrap_or_default();
    let secs = completion.as_secs_f64();
    Ok(TransferReport {
        seed,
        bytes,
        completion,
        goodput_bps: if secs > 0.0 {
            bytes as f64 * 8.0 / secs
        } else {
            0.0
        },
        flow,
        forward: sim.forward_stats(),
        reverse: sim.reverse_stats(),
        events: sim.events(),
        end: sim.now(),
    })
}

/// How [`fairness`] sets its flows up and measures them.
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessConfig {
    /// Number of flows.
    pub flows: usize,
    /// Bytes each flow sends (make it larger than the run can carry to keep
    /// every flow backlogged).
    pub bytes_per_flow: u64,
    /// Flow *i* starts at `i × stagger`.
    pub stagger: Duration,
    /// Simulated time to run.
    pub duration: Duration,
    /// Width of the throughput windows.
    pub window: Duration,
    /// Start of the interval over which the overall Jain index is taken
    /// (let the flows converge first).
    pub measure_from: Duration,
    /// Extra one-way delay of flow *i*'s access link (missing entries: none),
    /// for RTT-unfairness experiments.
    pub access_delays: Vec<Duration>,
    /// Loop limits and trace.
    pub config: SimConfig,
}

impl FairnessConfig {
    /// `flows` backlogged flows started together, run for `duration`, with
    /// 1 ms windows and the index measured over the second half.
    pub fn new(flows: usize, duration: Duration) -> Self {
        FairnessConfig {
            flows,
            bytes_per_flow: u64::MAX / 4,
            stagger: Duration::ZERO,
            duration,
            window: Duration::from_millis(1),
            measure_from: duration / 2,
            access_delays: Vec::new(),
            config: SimConfig::default(),
        }
    }
}

/// Runs `config.flows` flows over one shared `path` for `config.duration`
/// and reports each flow's delivered bytes per window and Jain's index.
/// Flows are told apart by their ports: give each flow distinct ones.
///
/// # Errors
/// Any [`SimError`] except the time limit, which is the normal end.
pub fn fairness<A: Transport, B: Transport>(
    connect: impl FnMut(usize, Instant) -> A,
    accept: impl FnMut(usize, Instant, &RxSegment) -> Option<B>,
    path: &PathConfig,
    config: &FairnessConfig,
    seed: u64,
) -> Result<FairnessReport, SimError> {
    let flows = (0..config.flows)
        .map(|i| {
            let offset = u32::try_from(i)
                .ok()
                .and_then(|i| config.stagger.checked_mul(i))
                .unwrap_or(Duration::MAX);
            let start = Instant::ZERO + offset;
            FlowSpec {
                start,
                client: AppConfig::sender(config.bytes_per_flow),
                server: AppConfig::receiver(),
                access_delay: config.access_delays.get(i).copied().unwrap_or_default(),
            }
        })
        .collect();
    let mut sim_config = config.config.clone();
    sim_config.window = Some(config.window);
    let mut sim = Simulation::new(path, flows, sim_config, seed, connect, accept)?;
    sim.run(Instant::ZERO + config.duration)?;
    let flows: Vec<FlowReport> = sim
        .flows()
        .iter()
        .enumerate()
        .map(|(i, f)| FlowReport::of(i, f))
        .collect();
    let mut report = FairnessReport {
        seed,
        jain_per_window: FairnessReport::per_window(&flows),
        flows,
        window: config.window,
        jain: None,
        measured_from: config.measure_from,
        measured_to: config.duration,
        forward: sim.forward_stats(),
        reverse: sim.reverse_stats(),
        events: sim.events(),
    };
    report.jain = report.jain_between(config.measure_from, config.duration);
    Ok(report)
}
