//! The fuzz targets and their registry.

mod config;
mod daemon;
mod forged;
mod place;
mod tcp_engine;

/// How far a passing input got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// Past the target's setup: the code under test ran on it.
    Engine,
    /// The input ran out or was refused while the target built its
    /// connection or text; the code under test never saw it.
    SetupOnly,
}

/// A fuzz target: a name and a function of one input.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Name used on the command line.
    pub name: &'static str,
    /// One line on what it drives and checks.
    pub about: &'static str,
    /// Whether `.ci/run` runs it (targets that find a known open defect
    /// stay out until it is fixed).
    pub ci: bool,
    /// Fraction of the generated inputs that must get past the setup
    /// ([`Reached::Engine`]); `ci` runs below it fail.
    pub min_reached: f64,
    /// Runs one input: `Err` names the invariant that broke.
    pub run: fn(&[u8]) -> Result<Reached, String>,
}

/// The share of inputs every target must bring past its setup.
pub const MIN_REACHED: f64 = 0.9;

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "place",
        about: "mutated frames through parse_head, place_parts, TcpConnection and advance_floor \
                against arbitrary posted segments; no write outside posted gaps, floor only over placed bytes",
        ci: true,
        min_reached: MIN_REACHED,
        run: place::run,
    },
    Target {
        name: "forged_delivery",
        about: "an honest stream interleaved with hostile frames (wrong/no ACK, RST or SYN with data, \
                stale timestamp, beyond the window); the application must get a prefix of the honest stream",
        ci: true,
        min_reached: MIN_REACHED,
        run: forged::run,
    },
    Target {
        name: "tcp_engine",
        about: "TcpConnection fed arbitrary segments, posts and timer ticks; sequence and event invariants",
        ci: true,
        min_reached: MIN_REACHED,
        run: tcp_engine::run,
    },
    Target {
        name: "config",
        about: "arbitrary and structured TOML through zerosplit::config; Ok or an error naming a key, never a panic",
        ci: true,
        min_reached: MIN_REACHED,
        run: config::run,
    },
    Target {
        name: "daemon",
        about: "a hostile application against the daemon over the fake kernel: arbitrary messages, posts \
                naming others' handles, wild ring indices, undrained completions; no write outside, \
                the good application still served",
        ci: true,
        min_reached: MIN_REACHED,
        run: daemon::run,
    },
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{run, Budget};

    /// Each CI target passes a few hundred inputs (the long runs are
    /// `.ci/run`'s and the command line's).
    #[test]
    fn the_ci_targets_pass_a_short_run() {
        for t in TARGETS.iter().filter(|t| t.ci) {
            let budget = Budget {
                max_execs: Some(300),
                ..Budget::default()
            };
            let r = run(t, &budget);
            assert_eq!(r.failure, None, "{}", t.name);
            assert_eq!(r.execs, 300, "{}", t.name);
            assert!(
                r.reached_enough(t),
                "{}: only {} of {} inputs got past the setup (at least {} % must)",
                t.name,
                r.reached,
                r.execs,
                t.min_reached * 100.0
            );
        }
    }

    #[test]
    fn names_are_unique_and_found() {
        for t in TARGETS {
            assert_eq!(find(t.name).map(|f| f.name), Some(t.name));
        }
        assert!(find("nope").is_none());
    }
}
