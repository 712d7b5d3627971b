//! Model-based fuzzing of every congestion controller in `Algorithm::ALL`.
//!
//! proptest generates a config and a sequence of operations: segments sent,
//! ACKs (any byte count up to `u64::MAX`, RTT samples from zero to minutes,
//! application-limited or not, delivery rates including 0 and `u64::MAX`),
//! losses and timeouts, ECN feedback, MSS changes (536..=9000) and time
//! jumps (zero, small, and up to centuries, so the clock saturates). A small
//! model keeps the inputs coherent: time never goes backwards, `sent` is
//! never after `now`, and bytes in flight follow what was sent, acknowledged
//! and lost. After every operation the controller must keep its invariants:
//!
//! * `minimum_window()` is what [`CcConfig::minimum_window`] says for the
//!   current MSS, and `window() >= minimum_window()`;
//! * `window() <= 2^48` (no runaway growth, no wrapped arithmetic; the test
//!   profile keeps overflow checks on, so an overflow is a panic);
//! * a pacing rate, when there is one, is positive; `metrics()` agrees with
//!   `window()` and `pacing_rate()`;
//! * the same inputs give the same outputs (controllers read no clock and no
//!   randomness of their own).

use core::time::Duration;

use proptest::prelude::*;
use transports::cc::{
    AckEvent, Algorithm, Cc, CcConfig, CcParams, CongestionEvent, Controller, CubicParams,
    DctcpParams, EcnEvent, MAX_WINDOW,
};
use transports::rtt::RttEstimator;
use transports::Instant;

/// The bound every window must stay under.
const SANE_WINDOW: u64 = 1 << 48;

#[derive(Debug, Clone)]
enum Op {
    Sent {
        bytes: u64,
    },
    Ack {
        bytes: u64,
        /// How long before `now` the newest acknowledged data was sent.
        age: Duration,
        rtt_sample: Option<Duration>,
        app_limited: bool,
        in_recovery: bool,
        delivery_rate: Option<u64>,
    },
    Loss {
        bytes: u64,
        age: Duration,
        timeout: bool,
    },
    Ecn {
        acked: u64,
        ce: u64,
    },
    Mss(u16),
    Advance(Duration),
}

fn bytes() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..=100_000,
        2 => 0u64..=(1 << 32),
        1 => Just(0u64),
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        2 => Just(Duration::ZERO),
        4 => (0u64..=200_000_000).prop_map(Duration::from_nanos),
        2 => (0u64..=120_000).prop_map(Duration::from_millis),
        1 => (0u64..=(1 << 62)).prop_map(Duration::from_nanos),
    ]
}

fn rate() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(0)),
        4 => (1u64..=10_000_000_000).prop_map(Some),
        1 => Just(Some(u64::MAX)),
        1 => any::<u64>().prop_map(Some),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => bytes().prop_map(|bytes| Op::Sent { bytes }),
        8 => (bytes(), duration(), proptest::option::of(duration()), any::<bool>(), any::<bool>(), rate())
            .prop_map(|(bytes, age, rtt_sample, app_limited, in_recovery, delivery_rate)| Op::Ack {
                bytes,
                age,
                rtt_sample,
                app_limited,
                in_recovery,
                delivery_rate,
            }),
        2 => (bytes(), duration(), any::<bool>())
            .prop_map(|(bytes, age, timeout)| Op::Loss { bytes, age, timeout }),
        2 => (bytes(), bytes()).prop_map(|(acked, ce)| Op::Ecn { acked, ce }),
        1 => (536u16..=9000).prop_map(Op::Mss),
        3 => duration().prop_map(Op::Advance),
    ]
}

fn config() -> impl Strategy<Value = CcConfig> {
    (
        536u16..=9000,
        prop_oneof![8 => 0u32..=100, 1 => any::<u32>()],
        prop_oneof![8 => 0u32..=4, 1 => any::<u32>()],
        // Mostly sensible values, sometimes anything (NaN, infinities,
        // negatives): controllers must fall back, not panic.
        prop_oneof![8 => 0.001f64..=1.0, 1 => any::<f64>()],
        prop_oneof![8 => 0.01f64..=4.0, 1 => any::<f64>()],
        prop_oneof![8 => 0.05f64..0.95, 1 => any::<f64>()],
        any::<bool>(),
    )
        .prop_map(|(mss, iw, min, gain, c, beta, hystart)| CcConfig {
            mss,
            initial_window_segments: iw,
            minimum_window_segments: min,
            params: CcParams {
                dctcp: DctcpParams { gain },
                cubic: CubicParams { beta, c, hystart },
                ..CcParams::default()
            },
        })
}

/// The coherent world around a controller.
struct Model {
    now: Instant,
    in_flight: u64,
    mss: u64,
    rtt: RttEstimator,
}

impl Model {
    fn new(mss: u16) -> Self {
        Self {
            now: Instant::from_millis(1),
            in_flight: 0,
            mss: u64::from(mss),
            rtt: RttEstimator::new(
                Duration::from_secs(1),
                Duration::from_micros(1),
                Duration::from_secs(60),
            ),
        }
    }

    fn before_now(&self, age: Duration) -> Instant {
        let age = u64::try_from(age.as_nanos()).unwrap_or(u64::MAX);
        Instant::from_nanos(self.now.as_nanos().saturating_sub(age))
    }

    fn apply(&mut self, cc: &mut Cc, op: &Op) {
        match *op {
            Op::Sent { bytes } => {
                self.in_flight = self.in_flight.saturating_add(bytes);
                cc.on_sent(self.now, bytes, self.in_flight);
            }
            Op::Ack {
                bytes,
                age,
                rtt_sample,
                app_limited,
                in_recovery,
                delivery_rate,
            } => {
                if let Some(sample) = rtt_sample {
                    self.rtt.update(sample);
                }
                self.in_flight = self.in_flight.saturating_sub(bytes);
                cc.on_ack(&AckEvent {
                    now: self.now,
                    sent: self.before_now(age),
                    bytes_acked: bytes,
                    bytes_in_flight: self.in_flight,
                    app_limited,
                    delivery_rate,
                    in_recovery,
                    rtt: &self.rtt,
                });
            }
            Op::Loss {
                bytes,
                age,
                timeout,
            } => {
                self.in_flight = self.in_flight.saturating_sub(bytes);
                cc.on_congestion_event(&CongestionEvent {
                    now: self.now,
                    sent: self.before_now(age),
                    lost_bytes: bytes,
                    bytes_in_flight: self.in_flight,
                    timeout,
                });
            }
            Op::Ecn { acked, ce } => cc.on_ecn(&EcnEvent {
                now: self.now,
                acked_bytes: acked,
                ce_bytes: ce,
            }),
            Op::Mss(mss) => {
                self.mss = u64::from(mss);
                cc.on_mss_update(mss);
            }
            Op::Advance(d) => self.now += d,
        }
    }
}

/// Runs `ops` and returns the metrics after each, checking the invariants.
fn run(
    algorithm: Algorithm,
    config: &CcConfig,
    ops: &[Op],
) -> Result<Vec<(u64, Option<u64>)>, TestCaseError> {
    let mut cc = algorithm.build(config);
    let mut model = Model::new(config.mss);
    let mut trace = Vec::with_capacity(ops.len() + 1);
    let check =
        |cc: &Cc, model: &Model, step: usize| -> Result<(u64, Option<u64>), TestCaseError> {
            let (window, min) = (cc.window(), cc.minimum_window());
            let at_mss = CcConfig {
                mss: model.mss as u16,
                ..config.clone()
            };
            prop_assert_eq!(
                min,
                at_mss.minimum_window(),
                "{} step {}: minimum window",
                algorithm,
                step
            );
            prop_assert!(
                window >= min,
                "{} step {}: window {} < minimum {}",
                algorithm,
                step,
                window,
                min
            );
            prop_assert!(
                window <= SANE_WINDOW,
                "{} step {}: window {}",
                algorithm,
                step,
                window
            );
            prop_assert!(
                window <= MAX_WINDOW,
                "{} step {}: window {}",
                algorithm,
                step,
                window
            );
            let pacing = cc.pacing_rate();
            prop_assert!(
                pacing.is_none_or(|p| p > 0),
                "{} step {}: pacing 0",
                algorithm,
                step
            );
            let m = cc.metrics();
            prop_assert_eq!(
                m.window,
                window,
                "{} step {}: metrics window",
                algorithm,
                step
            );
            prop_assert_eq!(
                m.pacing_rate,
                pacing,
                "{} step {}: metrics pacing",
                algorithm,
                step
            );
            Ok((window, pacing))
        };
    trace.push(check(&cc, &model, 0)?);
    for (i, op) in ops.iter().enumerate() {
        model.apply(&mut cc, op);
        trace.push(check(&cc, &model, i + 1)?);
    }
    Ok(trace)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2048,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_controller_keeps_its_invariants(
        config in config(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        for &algorithm in Algorithm::ALL {
            let first = run(algorithm, &config, &ops)?;
            let second = run(algorithm, &config, &ops)?;
            prop_assert_eq!(first, second, "{} is not deterministic", algorithm);
        }
    }
}

/// Steady, well-formed traffic must keep windows moving: a guard against a
/// fuzz model so hostile that every controller just sits at its minimum.
#[test]
fn well_formed_traffic_grows_every_window() {
    for &algorithm in Algorithm::ALL {
        let config = CcConfig::default();
        let mut cc = algorithm.build(&config);
        let mut model = Model::new(config.mss);
        let start = cc.window();
        for _ in 0..200 {
            model.apply(&mut cc, &Op::Sent { bytes: 1460 });
            model.apply(&mut cc, &Op::Advance(Duration::from_millis(1)));
            model.apply(
                &mut cc,
                &Op::Ack {
                    bytes: 1460,
                    age: Duration::from_millis(10),
                    rtt_sample: Some(Duration::from_millis(10)),
                    app_limited: false,
                    in_recovery: false,
                    delivery_rate: Some(10_000_000),
                },
            );
        }
        assert!(
            cc.window() > start,
            "{algorithm}: {} <= {start}",
            cc.window()
        );
    }
}
