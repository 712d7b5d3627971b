//! Connection parameters.

use core::time::Duration;

use crate::cc::{Algorithm, CcConfig};

/// Keepalive probing (RFC 9293 3.8.4; RFC 1122 4.2.3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time (nothing received) before the first probe.
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes after which the connection is closed as timed out.
    pub probes: u32,
}

/// How the receiver echoes CE marks back to the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EcnEcho {
    /// Per-packet echo when our own controller wants ECN (DCTCP), classic
    /// otherwise: right when both ends run the same algorithm.
    #[default]
    Auto,
    /// RFC 3168 6.1.3: set ECE on every ACK from a CE mark until CWR.
    Classic,
    /// RFC 8257 3.2: ECE mirrors the CE state of the latest segment, with
    /// an immediate ACK when it changes (what a DCTCP sender needs).
    PerPacket,
}

/// Everything a [`TcpConnection`](super::TcpConnection) can be tuned with.
///
/// The defaults suit a datacenter path (tens of microseconds of RTT): a
/// 5 ms RTO floor instead of RFC 6298's 1 s, a 1 ms delayed-ACK timer, and
/// SACK, timestamps and window scaling on as Linux has them.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpConfig {
    /// Largest payload per segment we accept (announced in our SYN) and send.
    /// The payload actually sent is further bounded by the peer's MSS option
    /// and reduced by the size of the options each segment carries.
    pub mss: u16,
    /// RTO before the first RTT sample (RFC 6298 2.1).
    pub initial_rto: Duration,
    /// Floor of the RTO's variance term, as Linux's `rto_min`: the RTO is
    /// at least SRTT + `min_rto` (RFC 6298 2.4 puts a 1 s floor on the
    /// whole; datacenters use far less).
    pub min_rto: Duration,
    /// Ceiling of the RTO and of its exponential backoff (RFC 6298 5.5).
    pub max_rto: Duration,
    /// Consecutive retransmission timeouts (of data, SYN or FIN) after which
    /// the connection gives up with `CloseReason::TimedOut`.
    pub max_retransmissions: u32,
    /// SYN-ACK retransmissions after which a passive open that never
    /// completes gives up (Linux's `tcp_synack_retries`): a handshake under
    /// way holds a flow-table entry, so a SYN flood's must go soon. Never
    /// more than `max_retransmissions`.
    pub syn_ack_retries: u32,
    /// Zero-window probes (RFC 9293 3.8.6.1) sent while the peer's window
    /// stays closed, after which the connection gives up with
    /// `CloseReason::ZeroWindow`. RFC 1122 4.2.2.17 lets a sender probe for
    /// ever while the peer answers; bounding it keeps a peer that never
    /// reads from holding a connection (and its posted memory) for ever.
    /// The probes back off to `max_rto`, so the default of 15 (Linux's
    /// `tcp_retries2`) gives up after about ten minutes.
    pub max_persist_probes: u32,
    /// Optional user timeout (RFC 9293 3.8.3): give up when data stays
    /// unacknowledged this long, whatever the retransmission count.
    pub user_timeout: Option<Duration>,
    /// Delayed-ACK timer (RFC 9293 3.8.6.3 allows up to 500 ms; RFC 5681 4.2
    /// asks for an ACK at least every second full-sized segment). 1 ms by
    /// default: below the RTO floor, so it never causes a spurious timeout.
    pub delayed_ack: Duration,
    /// Segments acknowledged immediately at the start of the connection
    /// (quick-ack), before delayed ACKs start.
    pub quick_ack_segments: u32,
    /// Window scale shift we offer (RFC 7323 2); `None` disables the option.
    /// Values above 14 are refused.
    pub window_scale: Option<u8>,
    /// Offer and use SACK (RFC 2018).
    pub sack: bool,
    /// Offer and use timestamps (RFC 7323 3) for RTTM and PAWS.
    pub timestamps: bool,
    /// Offer and use ECN (RFC 3168 6.1.1).
    pub ecn: bool,
    /// How CE marks are echoed; the echo must suit the *peer's* sender.
    pub ecn_echo: EcnEcho,
    /// Send a tail loss probe (RFC 8985 7) 2 × SRTT after the last
    /// transmission when no ACK came, so a lost tail is repaired by SACK or
    /// fast recovery instead of waiting for the RTO.
    pub tail_loss_probe: bool,
    /// Keepalive probing; `None` disables it.
    pub keepalive: Option<Keepalive>,
    /// How long TIME-WAIT lasts (2 MSL in RFC 9293 3.4.2, 60 s in Linux;
    /// 1 s by default for a datacenter: long enough to answer a peer's FIN
    /// retransmitted after several backed-off RTOs).
    pub time_wait: Duration,
    /// The congestion controller.
    pub algorithm: Algorithm,
    /// Parameters for the congestion controller; its `mss` is replaced by
    /// the negotiated one.
    pub cc: CcConfig,
    /// Pace at `pacing_gain` × window / SRTT when the controller gives no
    /// pacing rate of its own.
    pub pacing: bool,
    /// Gain applied to window / SRTT when pacing without a controller rate.
    pub pacing_gain: f64,
    /// At most this many challenge ACKs (RFC 5961 7) per second.
    pub challenge_ack_limit: u32,
    /// Software TSO: new data may leave as one send segment of up to this
    /// many wire segments (MSS-sized), which the datapath slices
    /// ([`crate::segment::TxSegment::slices`]); 1 = one wire segment per
    /// send segment. Retransmissions and probes stay one wire segment.
    pub tso_segments: u32,
}

/// Largest `tso_segments` accepted.
pub const MAX_TSO_SEGMENTS: u32 = 64;

/// The `tso_segments` a stack runs with unless configured: 16 wire
/// segments (23 KB at MSS 1460). [`TcpConfig::default`] keeps 1, one wire
/// segment per send segment, which segment-level tests and hand-driven
/// peers expect.
pub const DEFAULT_TSO_SEGMENTS: u32 = 16;

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            mss: 1460,
            initial_rto: Duration::from_millis(200),
            min_rto: Duration::from_millis(5),
            max_rto: Duration::from_secs(60),
            max_retransmissions: 15,
            syn_ack_retries: 5,
            max_persist_probes: 15,
            user_timeout: None,
            delayed_ack: Duration::from_millis(1),
            quick_ack_segments: 16,
            window_scale: Some(7),
            sack: true,
            timestamps: true,
            ecn: false,
            ecn_echo: EcnEcho::Auto,
            tail_loss_probe: true,
            keepalive: None,
            time_wait: Duration::from_secs(1),
            algorithm: Algorithm::NewReno,
            cc: CcConfig::default(),
            pacing: false,
            pacing_gain: 1.25,
            challenge_ack_limit: 100,
            tso_segments: 1,
        }
    }
}

/// A configuration value is out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The MSS cannot carry the options a segment may need.
    #[error("tcp config: mss {0} is below 64 bytes")]
    MssTooSmall(u16),
    /// RFC 7323 2.3 caps the shift at 14.
    #[error("tcp config: window_scale {0} is above 14 (RFC 7323 2.3)")]
    WindowScale(u8),
    /// The RTO bounds are inverted or zero.
    #[error(
        "tcp config: need 0 < min_rto <= initial_rto <= max_rto, got {min:?}, {initial:?}, {max:?}"
    )]
    RtoBounds {
        /// `min_rto`.
        min: Duration,
        /// `initial_rto`.
        initial: Duration,
        /// `max_rto`.
        max: Duration,
    },
    /// A keepalive with zero probes or a zero interval.
    #[error("tcp config: keepalive needs probes >= 1 and a non-zero idle and interval")]
    Keepalive,
    /// Zero persist probes would give up the moment the window closes.
    #[error("tcp config: max_persist_probes must be at least 1")]
    PersistProbes,
    /// Pacing gain not a positive finite number.
    #[error("tcp config: pacing_gain {0} must be positive and finite")]
    PacingGain(f64),
    /// `tso_segments` outside 1..=[`MAX_TSO_SEGMENTS`].
    #[error("tcp config: tso_segments {0} must be between 1 and {MAX_TSO_SEGMENTS}")]
    TsoSegments(u32),
}

impl TcpConfig {
    /// Checks every field.
    ///
    /// # Errors
    /// The first field out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mss < 64 {
            return Err(ConfigError::MssTooSmall(self.mss));
        }
        if let Some(ws) = self.window_scale {
            if ws > 14 {
                return Err(ConfigError::WindowScale(ws));
            }
        }
        if self.min_rto.is_zero()
            || self.min_rto > self.initial_rto
            || self.initial_rto > self.max_rto
        {
            return Err(ConfigError::RtoBounds {
                min: self.min_rto,
                initial: self.initial_rto,
                max: self.max_rto,
            });
        }
        if let Some(k) = self.keepalive {
            if k.probes == 0 || k.idle.is_zero() || k.interval.is_zero() {
                return Err(ConfigError::Keepalive);
            }
        }
        if self.max_persist_probes == 0 {
            return Err(ConfigError::PersistProbes);
        }
        if !(self.pacing_gain.is_finite() && self.pacing_gain > 0.0) {
            return Err(ConfigError::PacingGain(self.pacing_gain));
        }
        if !(1..=MAX_TSO_SEGMENTS).contains(&self.tso_segments) {
            return Err(ConfigError::TsoSegments(self.tso_segments));
        }
        Ok(())
    }
}
