//! Congestion control behind one trait.
//!
//! The shape follows quinn-proto's `Controller`: the transport reports what
//! it sent, what was acknowledged, what was lost and what was ECN-marked; the
//! controller answers with a congestion window and, optionally, a pacing
//! rate. Loss detection and recovery live in the transport, written once.
//! Among the controllers, RFC 5681 slow start, congestion avoidance and the
//! once-per-window recovery epoch are written once too, in [`Classic`]; a
//! loss-based algorithm is only a [`WindowAdjust`] over it (as in neqo's
//! `classic_cc`).
//!
//! Files: `registry.rs` (the `registry!` macro), `config.rs` ([`CcConfig`],
//! [`Params`]), `classic.rs` ([`Classic`]), `round.rs` (round counting from
//! send times), and one file per algorithm: [`NewReno`] (RFC 5681/6582,
//! `new_reno.rs`), [`Cubic`] (RFC 9438 with HyStart++ from RFC 9406,
//! `cubic.rs`), [`Dctcp`] (RFC 8257, `dctcp.rs`), [`Vegas`] (Brakmo and
//! Peterson 1995, delay-based, `vegas.rs`), all `Classic`, and [`Bbr`] (BBR v1, draft-cardwell-iccrg-bbr-congestion-control-00,
//! `bbr/`), a model-based controller of its own.
//!
//! One `registry!` row per algorithm generates [`Algorithm`] (parsed from
//! the config name, [`Algorithm::build`] makes the controller), [`Cc`] and
//! [`CcParams`]. On the per-segment path the transport holds a [`Cc`] enum,
//! so calls are a `match`, not a virtual call.
//!
//! # Adding a congestion controller
//!
//! One file, one registry row, one test file:
//!
//! 1. **One file**, `transports/src/cc/<name>.rs`, with the controller and
//!    its parameter struct `<Name>Params`, declared with `cc_params!` (the
//!    derives, and serde's under the `serde` feature), `Default` = the
//!    specification's values, [`Params::validate`] naming the bad key; or
//!    [`NoParams`] if it has none. A loss-based algorithm is
//!    `pub type <Name> = Classic<<Name>Window>` and implements only
//!    [`WindowAdjust`] (growth in avoidance, the reduction on loss, any ECN
//!    reaction); [`Classic`] already does slow start, the recovery epoch,
//!    timeouts and the window bounds. Anything else implements
//!    [`Controller`] directly with `new(&CcConfig)`, as [`Bbr`] does,
//!    using `round.rs` to count round trips. A controller never reads a
//!    clock, keeps `minimum_window() <= window() <= MAX_WINDOW` after every
//!    call and never panics or overflows, whatever the inputs. Unit tests
//!    with the specification's numbers go in the file.
//! 2. **One registry row** in the `registry!` call below, plus `mod <name>;`
//!    and its `pub use`: `/// doc citing the spec` then
//!    `<name> ["alias", ...] => <Variant>(<Type>, <Name>Params)`. The row
//!    generates the [`Algorithm`] and [`Cc`] variants, the config name and
//!    aliases, [`Algorithm::ALL`], `build`, the dispatch, and the
//!    [`CcParams`] field, which is the `[transport.cc.<name>]` table of the
//!    config file (document its keys in `config/reference.toml`).
//! 3. **One test file**, `transports/tests/cc_<name>.rs`, with a fluid check
//!    (`cc_support`: ACKs at a fixed RTT with periodic losses, asserting the
//!    window's range). The model-based fuzz (`tests/cc_fuzz.rs`), the
//!    simulator matrix (`tests/sim_tcp_matrix.rs`) and the name round-trip
//!    test below pick the algorithm up from [`Algorithm::ALL`] unedited.
//!    Two tests pin the shipped list on purpose and take the new name: the
//!    count in `every_algorithm_parses_from_its_name_and_builds_itself` and
//!    the message in `unknown_name_lists_the_known_ones` (below).
//!
//! Run `cargo test -p zerosplit-transports` and
//! `cargo clippy -p zerosplit-transports --all-targets -- -D warnings`.
//!
//! A controller that is not shipped (an experiment, a test) needs no row:
//! a `static` [`CustomAlgorithm`] with a constructor, selected as
//! [`Algorithm::Custom`], runs in the TCP transport and the simulator
//! behind one virtual call (`tests/cc_custom.rs` does this). That is the
//! research hook; shipped algorithms stay on enum dispatch.

use core::fmt;
use core::str::FromStr;

use crate::rtt::RttEstimator;
use crate::time::Instant;

#[macro_use]
mod registry;
#[macro_use]
mod config;
mod bbr;
mod classic;
mod cubic;
mod dctcp;
mod new_reno;
mod round;
#[cfg(test)]
mod testing;
mod vegas;

pub use bbr::{Bbr, BbrMode};
pub use classic::{Classic, Window, WindowAdjust, ABC_L};
pub use config::{CcConfig, InvalidCcConfig, NoParams, ParamError, Params};
pub use cubic::{Cubic, CubicParams, CubicWindow, CSS_GROWTH_DIVISOR, CSS_ROUNDS};
pub use dctcp::{Dctcp, DctcpParams, DctcpWindow};
pub use new_reno::{NewReno, Reno};
pub use vegas::{Vegas, VegasParams, VegasWindow};

/// The largest window a shipped controller reports, in bytes (1 TiB): far
/// above any real bandwidth-delay product, far below where `u64` byte
/// arithmetic could overflow. Controllers clamp to it so that nonsense input
/// (a huge ACK, an absurd delivery rate) cannot produce an absurd window.
pub const MAX_WINDOW: u64 = 1 << 40;

/// The largest `minimum_window_segments` controllers honour (larger values
/// are clamped, and [`CcConfig::validate`] rejects them): even at the
/// largest MSS the minimum window then stays far below [`MAX_WINDOW`].
pub const MAX_MINIMUM_WINDOW_SEGMENTS: u32 = 1 << 16;

/// An acknowledgement, as the controller sees it. Fields are reported once
/// per ACK segment that acknowledged new data (cumulatively or by SACK).
#[derive(Debug, Clone, Copy)]
pub struct AckEvent<'a> {
    /// When the ACK arrived.
    pub now: Instant,
    /// When the most recently sent of the newly acknowledged segments was sent.
    pub sent: Instant,
    /// Bytes newly acknowledged by this ACK (cumulative advance plus newly SACKed).
    pub bytes_acked: u64,
    /// Bytes in flight after this ACK was processed.
    pub bytes_in_flight: u64,
    /// The sender had nothing more to send when the acknowledged data went
    /// out, so the sample says little about the path's capacity.
    pub app_limited: bool,
    /// Delivery-rate sample in bytes per second, when the transport computed
    /// one (delivered bytes over the interval they took), as BBR needs.
    pub delivery_rate: Option<u64>,
    /// The transport is in loss recovery (fast recovery or after an RTO).
    pub in_recovery: bool,
    /// RTT state after this ACK's sample (if any) was taken.
    pub rtt: &'a RttEstimator,
}

/// Loss detected by the transport (duplicate ACKs/SACK, RACK, or an RTO).
#[derive(Debug, Clone, Copy)]
pub struct CongestionEvent {
    /// When the loss was detected.
    pub now: Instant,
    /// When the lost segment was sent. Controllers react at most once per
    /// window: a loss of a segment sent before the start of the current
    /// recovery period must not reduce the window again.
    pub sent: Instant,
    /// Bytes declared lost.
    pub lost_bytes: u64,
    /// Bytes in flight: after the lost bytes were removed for a fast-recovery
    /// loss; for a timeout (`timeout = true`), the flight when the timer
    /// fired, before everything outstanding is marked lost — RFC 5681
    /// equation 4's FlightSize, which sets ssthresh.
    pub bytes_in_flight: u64,
    /// The loss was found by a retransmission timeout (RFC 5681 3.1: the
    /// window collapses to the loss window), not by fast recovery.
    pub timeout: bool,
}

/// ECN feedback from one ACK (RFC 3168 ECE, or accurate counts).
#[derive(Debug, Clone, Copy)]
pub struct EcnEvent {
    /// When the ACK arrived.
    pub now: Instant,
    /// Bytes newly acknowledged by this ACK.
    pub acked_bytes: u64,
    /// Of those, bytes the receiver reported as CE-marked.
    pub ce_bytes: u64,
}

/// What a controller reports for traces and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ControllerMetrics {
    /// Congestion window in bytes.
    pub window: u64,
    /// Slow-start threshold in bytes, if the algorithm has one.
    pub ssthresh: Option<u64>,
    /// Pacing rate in bytes per second, if the algorithm paces.
    pub pacing_rate: Option<u64>,
    /// The controller's own phase, in snake case (`slow_start`,
    /// `congestion_avoidance`; BBR's `startup`, `drain`, `probe_bw`,
    /// `probe_rtt`); empty for a controller that has none.
    pub phase: &'static str,
}

/// A congestion control algorithm.
///
/// All methods take the time as a parameter; none may read a clock.
/// Invariant every implementation keeps: `window() >= minimum_window()`,
/// whatever the sequence of calls.
pub trait Controller: Send + fmt::Debug {
    /// `bytes` were sent at `now`; `bytes_in_flight` includes them.
    fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64);

    /// New data was acknowledged.
    fn on_ack(&mut self, ack: &AckEvent<'_>);

    /// The transport detected loss.
    fn on_congestion_event(&mut self, event: &CongestionEvent);

    /// ECN feedback arrived. The default ignores it; DCTCP uses it, and an
    /// algorithm that treats CE as loss (RFC 3168) may too. Report an ACK's
    /// ECN feedback before its [`Controller::on_ack`] (DCTCP then counts its
    /// marks in the observation window that ACK closes); calling it for
    /// every ACK or only for ACKs with CE bytes both work.
    fn on_ecn(&mut self, _event: &EcnEvent) {}

    /// The path MSS changed (the transport calls this once the handshake
    /// settled the MSS, and on later changes).
    fn on_mss_update(&mut self, mss: u16);

    /// Congestion window in bytes.
    fn window(&self) -> u64;

    /// The smallest window this controller ever reports.
    fn minimum_window(&self) -> u64;

    /// Pacing rate in bytes per second, if this algorithm paces. Algorithms
    /// that do not return `None`, and the transport paces at a multiple of
    /// window/SRTT if configured to.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }

    /// Whether the sender should mark its packets ECN-capable (ECT(0)).
    fn wants_ecn(&self) -> bool {
        false
    }

    /// Whether this controller sets the window itself through fast
    /// recovery (BBR's packet conservation). If not (the default), the
    /// transport paces the reduction with RFC 6937 PRR, as Linux does for
    /// every controller without its own `cong_control`.
    fn governs_recovery(&self) -> bool {
        false
    }

    /// Current values for traces.
    fn metrics(&self) -> ControllerMetrics;
}

registry! {
    /// RFC 5681 / RFC 6582 NewReno (config name `newreno`, alias `reno`).
    newreno ["reno"] => NewReno(NewReno, NoParams),
    /// RFC 9438 CUBIC with RFC 9406 HyStart++ (`cubic`).
    cubic [] => Cubic(Cubic, CubicParams),
    /// RFC 8257 DCTCP (`dctcp`); marks its packets ECN-capable.
    dctcp [] => Dctcp(Dctcp, DctcpParams),
    /// BBR v1, draft-cardwell-iccrg-bbr-congestion-control-00 (`bbr`).
    bbr [] => Bbr(Bbr, NoParams),
    /// TCP Vegas, Brakmo and Peterson, IEEE JSAC 13(8), 1995 (`vegas`).
    vegas [] => Vegas(Vegas, VegasParams),
}

/// A controller defined outside the registry (an experiment, a test),
/// selected as [`Algorithm::Custom`]: the research hook. Its controller
/// runs behind a virtual call; shipped algorithms do not.
///
/// ```
/// use transports::cc::{Algorithm, CcConfig, CustomAlgorithm, NewReno};
/// static MINE: CustomAlgorithm = CustomAlgorithm {
///     name: "mine",
///     build: |config| Box::new(NewReno::new(config)),
/// };
/// let cc = Algorithm::Custom(&MINE).build(&CcConfig::default());
/// assert_eq!(cc.algorithm().name(), "mine");
/// ```
#[derive(Debug)]
pub struct CustomAlgorithm {
    /// Its name, for traces and reports (never parsed from config).
    pub name: &'static str,
    /// Builds the controller.
    pub build: fn(&CcConfig) -> Box<dyn Controller>,
}

impl PartialEq for Algorithm {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Algorithm::Custom(a), Algorithm::Custom(b)) => a.name == b.name,
            (Algorithm::Custom(_), _) | (_, Algorithm::Custom(_)) => false,
            _ => core::mem::discriminant(self) == core::mem::discriminant(other),
        }
    }
}

impl Eq for Algorithm {}

impl core::hash::Hash for Algorithm {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name in config matched no algorithm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown congestion controller {name:?}; known: {known}")]
pub struct UnknownAlgorithm {
    /// What was asked for.
    pub name: String,
    /// The names that exist, comma-separated.
    pub known: String,
}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Algorithm::ALL
            .iter()
            .copied()
            .find(|a| a.name() == lower || a.aliases().contains(&lower.as_str()))
            .ok_or_else(|| UnknownAlgorithm {
                name: s.to_string(),
                known: Algorithm::ALL
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_parses_from_its_name_and_builds_itself() {
        // Pins the shipped list: update when adding an algorithm.
        assert_eq!(Algorithm::ALL.len(), 5);
        for &a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
            assert_eq!(a.to_string().to_uppercase().parse::<Algorithm>(), Ok(a));
            let cc = a.build(&CcConfig::default());
            assert_eq!(cc.algorithm(), a);
            assert_eq!(cc.window(), CcConfig::default().initial_window());
            assert!(cc.window() >= cc.minimum_window());
        }
        assert_eq!(" reno ".parse::<Algorithm>(), Ok(Algorithm::NewReno));
        assert!(Algorithm::Dctcp.build(&CcConfig::default()).wants_ecn());
        assert!(Algorithm::Bbr
            .build(&CcConfig::default())
            .pacing_rate()
            .is_some());
        assert!(!Algorithm::Cubic.build(&CcConfig::default()).wants_ecn());
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let err = "no-such-cc".parse::<Algorithm>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown congestion controller \"no-such-cc\"; known: newreno, cubic, dctcp, bbr, vegas"
        );
    }

    #[test]
    fn validate_names_the_bad_field() {
        assert_eq!(CcConfig::default().validate(), Ok(()));
        let bad = |f: fn(&mut CcConfig)| {
            let mut c = CcConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(bad(|c| c.mss = 0), InvalidCcConfig::ZeroMss);
        let param = |algorithm, key, value: &str, expected| InvalidCcConfig::Param {
            algorithm,
            key,
            value: value.to_string(),
            expected,
        };
        let gain = "must be in (0, 1] (RFC 8257 suggests 1/16)";
        assert_eq!(
            bad(|c| c.params.dctcp.gain = 0.0),
            param("dctcp", "gain", "0", gain)
        );
        assert!(matches!(
            bad(|c| c.params.dctcp.gain = f64::NAN),
            InvalidCcConfig::Param { key: "gain", value, .. } if value == "NaN"
        ));
        assert_eq!(
            bad(|c| c.params.cubic.c = -1.0),
            param(
                "cubic",
                "c",
                "-1",
                "must be a positive finite number (RFC 9438: 0.4)"
            )
        );
        assert_eq!(
            bad(|c| c.params.cubic.beta = 1.0),
            param("cubic", "beta", "1", "must be in (0, 1) (RFC 9438: 0.7)")
        );
        assert!(bad(|c| c.params.cubic.beta = 1.5)
            .to_string()
            .contains("cubic.beta"));
        assert_eq!(
            bad(|c| c.minimum_window_segments = u32::MAX),
            InvalidCcConfig::MinimumWindowSegments(u32::MAX)
        );
    }

    #[test]
    fn bad_config_values_fall_back_instead_of_panicking() {
        let config = CcConfig {
            mss: 0,
            initial_window_segments: 0,
            minimum_window_segments: 0,
            params: CcParams {
                dctcp: DctcpParams { gain: f64::NAN },
                cubic: CubicParams {
                    c: f64::INFINITY,
                    beta: -3.0,
                    hystart: true,
                },
                ..CcParams::default()
            },
        };
        for &a in Algorithm::ALL {
            let cc = a.build(&config);
            assert!(cc.minimum_window() >= 1, "{a}");
            assert!(cc.window() >= cc.minimum_window(), "{a}");
        }
    }
}
