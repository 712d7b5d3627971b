//! The bounded fuzz loop: seeded inputs, a time and count budget, panics
//! caught and reported with the input seed that reproduces them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use transports::sim::rng::{derive_seed, Rng};

use crate::targets::{Reached, Target};

/// How long and on what a target runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Stop after this much wall time.
    pub time: Duration,
    /// Stop after this many executions, if set.
    pub max_execs: Option<u64>,
    /// Seed of the run: input `i` comes from `derive_seed(seed, i)`.
    pub seed: u64,
    /// Largest input, in bytes.
    pub max_len: usize,
    /// Count failing inputs and go on instead of stopping at the first.
    pub keep_going: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            time: Duration::from_secs(10),
            max_execs: None,
            seed: 1,
            max_len: DEFAULT_MAX_LEN,
            keep_going: false,
        }
    }
}

/// Default largest input: enough for a few dozen frames or a config file.
pub const DEFAULT_MAX_LEN: usize = 4096;

/// An input that broke an invariant or panicked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Seed the input was generated from (`--replay` regenerates it).
    pub input_seed: u64,
    /// The input bytes.
    pub input: Vec<u8>,
    /// The broken invariant, or the panic message.
    pub message: String,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Target name.
    pub target: &'static str,
    /// Inputs executed.
    pub execs: u64,
    /// Wall time spent.
    pub elapsed: Duration,
    /// The first failure (which ends the run unless `keep_going`).
    pub failure: Option<Failure>,
    /// Inputs that failed.
    pub failed: u64,
    /// Passing inputs that got past the target's setup
    /// ([`Reached::Engine`]).
    pub reached: u64,
}

impl Report {
    /// Executions per second.
    pub fn rate(&self) -> f64 {
        self.execs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Whether at least `target.min_reached` of the executions got past
    /// the setup (a run with no executions did not).
    pub fn reached_enough(&self, target: &Target) -> bool {
        self.execs > 0 && self.reached as f64 >= target.min_reached * self.execs as f64
    }
}

/// The input generated from `input_seed`: a length below `max_len + 1`
/// biased towards short inputs, then that many random bytes.
pub fn input_from_seed(input_seed: u64, max_len: usize) -> Vec<u8> {
    let mut rng = Rng::new(input_seed);
    // Half the inputs are at most an eighth of the maximum: short inputs
    // run faster and shrink failures for free.
    let cap = if rng.below(2) == 0 {
        max_len / 8
    } else {
        max_len
    };
    let len = rng.below(cap as u64 + 1) as usize;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Runs `target` on one input, turning a panic into a message.
pub fn execute(target: &Target, input: &[u8]) -> Result<Reached, String> {
    match catch_unwind(AssertUnwindSafe(|| (target.run)(input))) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            Err(format!("panic: {msg}"))
        }
    }
}

/// Runs `target` on seeded inputs until the budget is spent or an input
/// fails.
pub fn run(target: &Target, budget: &Budget) -> Report {
    let start = Instant::now();
    let mut execs = 0u64;
    let mut failure = None;
    let mut failed = 0;
    let mut reached = 0;
    while budget.max_execs.is_none_or(|m| execs < m) {
        // Reading the clock every 64 inputs keeps its cost out of the rate.
        if execs.is_multiple_of(64) && start.elapsed() >= budget.time {
            break;
        }
        let input_seed = derive_seed(budget.seed, execs);
        let input = input_from_seed(input_seed, budget.max_len);
        execs += 1;
        match execute(target, &input) {
            Ok(Reached::Engine) => reached += 1,
            Ok(Reached::SetupOnly) => {}
            Err(message) => {
                failed += 1;
                failure.get_or_insert(Failure {
                    input_seed,
                    input,
                    message,
                });
                if !budget.keep_going {
                    break;
                }
            }
        }
    }
    Report {
        target: target.name,
        execs,
        elapsed: start.elapsed(),
        failure,
        failed,
        reached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_fixed_by_their_seed_and_bounded() {
        for s in 0..200 {
            let a = input_from_seed(s, 100);
            assert!(a.len() <= 100);
            assert_eq!(a, input_from_seed(s, 100));
        }
        assert_ne!(input_from_seed(1, 4096), input_from_seed(2, 4096));
    }

    #[test]
    fn a_panicking_target_is_reported_with_its_seed() {
        let t = Target {
            name: "boom",
            about: "panics on inputs longer than 10 bytes",
            ci: false,
            min_reached: 0.0,
            run: |data| {
                assert!(data.len() <= 10, "long input");
                Ok(Reached::Engine)
            },
        };
        let r = run(
            &t,
            &Budget {
                max_execs: Some(1000),
                ..Budget::default()
            },
        );
        let f = r.failure.expect("some input is longer than 10 bytes");
        assert!(f.message.contains("long input"), "{}", f.message);
        assert_eq!(f.input, input_from_seed(f.input_seed, DEFAULT_MAX_LEN));
        assert!(execute(&t, &f.input).is_err());
        assert_eq!(r.failed, 1);
        let all = run(
            &t,
            &Budget {
                max_execs: Some(1000),
                keep_going: true,
                ..Budget::default()
            },
        );
        assert_eq!(all.execs, 1000);
        assert!(all.failed > 1 && all.failed < 1000, "{}", all.failed);
        assert_eq!(all.failure, Some(f));
    }
}
