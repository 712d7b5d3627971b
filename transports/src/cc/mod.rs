//! Congestion control behind one trait.
//!
//! The shape follows quinn-proto's `Controller`: the transport reports what
//! it sent, what was acknowledged, what was lost and what was ECN-marked; the
//! controller answers with a congestion window and, optionally, a pacing
//! rate. Loss detection and recovery live in the transport, written once;
//! an algorithm implements only how the window reacts (as neqo does).
//!
//! On the per-segment path the transport holds a [`Cc`] enum, so calls are a
//! `match`, not a virtual call. [`Algorithm`] parses the name given in config
//! (`"newreno"`, `"cubic"`, `"dctcp"`, `"bbr"`) and [`Algorithm::build`] makes
//! the controller.
//!
//! Shipped: [`NewReno`] (RFC 5681/6582), [`Cubic`] (RFC 9438, with
//! HyStart++ from RFC 9406), [`Dctcp`] (RFC 8257) and [`Bbr`] (BBR v1,
//! draft-cardwell-iccrg-bbr-congestion-control-00).
//!
//! # Adding a congestion controller
//!
//! 1. **One file**: `transports/src/cc/<name>.rs` with a struct implementing
//!    [`Controller`] and a `new(&CcConfig)` constructor. It never reads a
//!    clock (time comes in the events), keeps
//!    `minimum_window() <= window() <= MAX_WINDOW` after every call, and
//!    never panics or overflows, whatever the inputs. Unit tests with
//!    explicit numbers from the algorithm's specification go in the file.
//!    Shared helpers: `round.rs` counts round trips from send times.
//! 2. **One variant** in [`Algorithm`] (doc comment citing the spec) and
//!    one in [`Cc`]; add `mod <name>;` and `pub use` next to the others.
//! 3. **One arm per `match`** in this file: [`Algorithm::ALL`],
//!    [`Algorithm::name`] (the config name, lowercase), [`Algorithm::build`],
//!    [`Cc::algorithm`] and the `each!` dispatch macro. The compiler finds
//!    every `match` you missed; `ALL` is a list, not a `match`, so the unit
//!    test at the end of this file counts its members: bump the count.
//! 4. **One test file**: `transports/tests/cc_<name>.rs` with a fluid check
//!    (ACKs at a fixed RTT with periodic losses, asserting the window's
//!    range). The model-based fuzz in `tests/cc_fuzz.rs` and the name
//!    round-trip test pick the new algorithm up from [`Algorithm::ALL`]
//!    without edits.
//! 5. Run `CARGO_BUILD_JOBS=1 cargo test -p zerosplit-transports` and
//!    `cargo clippy -p zerosplit-transports --all-targets -- -D warnings`.

use core::fmt;
use core::str::FromStr;

use crate::rtt::RttEstimator;
use crate::time::Instant;

mod bbr;
mod cubic;
mod dctcp;
mod new_reno;
mod round;

pub use bbr::{Bbr, BbrMode};
pub use cubic::{Cubic, CSS_GROWTH_DIVISOR, CSS_ROUNDS};
pub use dctcp::Dctcp;
pub use new_reno::NewReno;

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

    /// Current values for traces.
    fn metrics(&self) -> ControllerMetrics;
}

/// Parameters every algorithm understands. Algorithm-specific knobs live in
/// their own structs inside [`CcConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct CcConfig {
    /// Maximum segment size in bytes (payload per segment).
    pub mss: u16,
    /// Initial window in segments (RFC 6928: 10).
    pub initial_window_segments: u32,
    /// Minimum window in segments (RFC 5681 loss window: 1; 2 is common).
    pub minimum_window_segments: u32,
    /// DCTCP's gain g for the CE fraction estimate (RFC 8257: 1/16).
    pub dctcp_gain: f64,
    /// CUBIC's C constant (RFC 9438: 0.4).
    pub cubic_c: f64,
    /// CUBIC's multiplicative decrease factor beta (RFC 9438: 0.7).
    pub cubic_beta: f64,
    /// Enable HyStart++ (RFC 9406) in CUBIC's slow start.
    pub hystart: bool,
}

/// A [`CcConfig`] field holds a value no algorithm can use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidCcConfig {
    /// `mss` is zero.
    #[error("cc config: mss must be at least 1 byte, got 0")]
    ZeroMss,
    /// `dctcp_gain` is not in (0, 1].
    #[error("cc config: dctcp_gain must be in (0, 1] (RFC 8257 suggests 1/16), got {0}")]
    DctcpGain(f64),
    /// `cubic_c` is not a positive finite number.
    #[error("cc config: cubic_c must be a positive finite number (RFC 9438: 0.4), got {0}")]
    CubicC(f64),
    /// `cubic_beta` is not in (0, 1).
    #[error("cc config: cubic_beta must be in (0, 1) (RFC 9438: 0.7), got {0}")]
    CubicBeta(f64),
    /// `minimum_window_segments` is above [`MAX_MINIMUM_WINDOW_SEGMENTS`].
    #[error(
        "cc config: minimum_window_segments must be at most {MAX_MINIMUM_WINDOW_SEGMENTS}, got {0}"
    )]
    MinimumWindowSegments(u32),
}

impl Default for CcConfig {
    fn default() -> Self {
        Self {
            mss: 1460,
            initial_window_segments: 10,
            minimum_window_segments: 2,
            dctcp_gain: 1.0 / 16.0,
            cubic_c: 0.4,
            cubic_beta: 0.7,
            hystart: true,
        }
    }
}

impl CcConfig {
    /// Initial window in bytes.
    pub fn initial_window(&self) -> u64 {
        u64::from(self.initial_window_segments) * u64::from(self.mss)
    }

    /// Minimum window in bytes: `minimum_window_segments` clamped to
    /// `1..=MAX_MINIMUM_WINDOW_SEGMENTS`, times the MSS.
    pub fn minimum_window(&self) -> u64 {
        self.min_segments() * u64::from(self.mss)
    }

    /// `minimum_window_segments` as every controller uses it.
    pub(crate) fn min_segments(&self) -> u64 {
        u64::from(
            self.minimum_window_segments
                .clamp(1, MAX_MINIMUM_WINDOW_SEGMENTS),
        )
    }

    /// `initial_window_segments` as every controller uses it: never below
    /// the minimum window.
    pub(crate) fn initial_segments(&self) -> u64 {
        u64::from(self.initial_window_segments).max(self.min_segments())
    }

    /// Checks the fields a config file can get wrong. Controllers never
    /// panic on a bad value (each falls back to its RFC default), but a
    /// config loader should reject it with this error instead.
    ///
    /// # Errors
    /// The first field out of range, as an [`InvalidCcConfig`] naming it.
    pub fn validate(&self) -> Result<(), InvalidCcConfig> {
        if self.mss == 0 {
            return Err(InvalidCcConfig::ZeroMss);
        }
        if !(self.dctcp_gain > 0.0 && self.dctcp_gain <= 1.0) {
            return Err(InvalidCcConfig::DctcpGain(self.dctcp_gain));
        }
        if !(self.cubic_c.is_finite() && self.cubic_c > 0.0) {
            return Err(InvalidCcConfig::CubicC(self.cubic_c));
        }
        if !(self.cubic_beta > 0.0 && self.cubic_beta < 1.0) {
            return Err(InvalidCcConfig::CubicBeta(self.cubic_beta));
        }
        if self.minimum_window_segments > MAX_MINIMUM_WINDOW_SEGMENTS {
            return Err(InvalidCcConfig::MinimumWindowSegments(
                self.minimum_window_segments,
            ));
        }
        Ok(())
    }
}

/// The algorithms zerosplit ships, selected by name from config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// RFC 5681 / RFC 6582 NewReno (config name `newreno`, alias `reno`).
    NewReno,
    /// RFC 9438 CUBIC with RFC 9406 HyStart++ (`cubic`).
    Cubic,
    /// RFC 8257 DCTCP (`dctcp`); marks its packets ECN-capable.
    Dctcp,
    /// BBR v1, draft-cardwell-iccrg-bbr-congestion-control-00 (`bbr`).
    Bbr,
}

impl Algorithm {
    /// Every algorithm, for help texts and for tests that run each one.
    pub const ALL: &'static [Algorithm] = &[
        Algorithm::NewReno,
        Algorithm::Cubic,
        Algorithm::Dctcp,
        Algorithm::Bbr,
    ];

    /// The name used in config files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::NewReno => "newreno",
            Algorithm::Cubic => "cubic",
            Algorithm::Dctcp => "dctcp",
            Algorithm::Bbr => "bbr",
        }
    }

    /// Builds a controller of this algorithm.
    pub fn build(self, config: &CcConfig) -> Cc {
        match self {
            Algorithm::NewReno => Cc::NewReno(NewReno::new(config)),
            Algorithm::Cubic => Cc::Cubic(Cubic::new(config)),
            Algorithm::Dctcp => Cc::Dctcp(Dctcp::new(config)),
            Algorithm::Bbr => Cc::Bbr(Bbr::new(config)),
        }
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
            .find(|a| a.name() == lower || (lower == "reno" && *a == Algorithm::NewReno))
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

/// A controller of any shipped algorithm; enum dispatch keeps the
/// per-segment path free of virtual calls.
#[derive(Debug, Clone)]
pub enum Cc {
    /// See [`NewReno`].
    NewReno(NewReno),
    /// See [`Cubic`].
    Cubic(Cubic),
    /// See [`Dctcp`].
    Dctcp(Dctcp),
    /// See [`Bbr`].
    Bbr(Bbr),
}

macro_rules! each {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            Cc::NewReno($c) => $body,
            Cc::Cubic($c) => $body,
            Cc::Dctcp($c) => $body,
            Cc::Bbr($c) => $body,
        }
    };
}

impl Cc {
    /// Which algorithm this is.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Cc::NewReno(_) => Algorithm::NewReno,
            Cc::Cubic(_) => Algorithm::Cubic,
            Cc::Dctcp(_) => Algorithm::Dctcp,
            Cc::Bbr(_) => Algorithm::Bbr,
        }
    }
}

impl Controller for Cc {
    fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64) {
        each!(self, c => c.on_sent(now, bytes, bytes_in_flight))
    }
    fn on_ack(&mut self, ack: &AckEvent<'_>) {
        each!(self, c => c.on_ack(ack))
    }
    fn on_congestion_event(&mut self, event: &CongestionEvent) {
        each!(self, c => c.on_congestion_event(event))
    }
    fn on_ecn(&mut self, event: &EcnEvent) {
        each!(self, c => c.on_ecn(event))
    }
    fn on_mss_update(&mut self, mss: u16) {
        each!(self, c => c.on_mss_update(mss))
    }
    fn window(&self) -> u64 {
        each!(self, c => c.window())
    }
    fn minimum_window(&self) -> u64 {
        each!(self, c => c.minimum_window())
    }
    fn pacing_rate(&self) -> Option<u64> {
        each!(self, c => c.pacing_rate())
    }
    fn wants_ecn(&self) -> bool {
        each!(self, c => c.wants_ecn())
    }
    fn metrics(&self) -> ControllerMetrics {
        each!(self, c => c.metrics())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_parses_from_its_name_and_builds_itself() {
        // Update when adding an algorithm: ALL must list every variant.
        assert_eq!(Algorithm::ALL.len(), 4);
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
        let err = "vegas".parse::<Algorithm>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown congestion controller \"vegas\"; known: newreno, cubic, dctcp, bbr"
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
        assert_eq!(bad(|c| c.dctcp_gain = 0.0), InvalidCcConfig::DctcpGain(0.0));
        assert!(matches!(
            bad(|c| c.dctcp_gain = f64::NAN),
            InvalidCcConfig::DctcpGain(g) if g.is_nan()
        ));
        assert_eq!(bad(|c| c.cubic_c = -1.0), InvalidCcConfig::CubicC(-1.0));
        assert_eq!(bad(|c| c.cubic_beta = 1.0), InvalidCcConfig::CubicBeta(1.0));
        assert!(bad(|c| c.cubic_beta = 1.5)
            .to_string()
            .contains("cubic_beta"));
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
            dctcp_gain: f64::NAN,
            cubic_c: f64::INFINITY,
            cubic_beta: -3.0,
            hystart: true,
        };
        for &a in Algorithm::ALL {
            let cc = a.build(&config);
            assert!(cc.minimum_window() >= 1, "{a}");
            assert!(cc.window() >= cc.minimum_window(), "{a}");
        }
    }
}
