//! `[transport]`: which transport runs the connections and how it is tuned.
//!
//! The fields mirror the header-only TCP's connection parameters (RFC 9293,
//! RFC 6298 RTO, RFC 7323 window scale and timestamps, RFC 2018 SACK,
//! RFC 3168 ECN, RFC 8985 tail loss probe) plus the congestion controller
//! and its parameters ([`transports::cc::CcConfig`]): the window sizes in
//! `[transport]`, each algorithm's own in `[transport.cc.<name>]`
//! ([`transports::cc::CcParams`], validated by the algorithm's own
//! [`Params::validate`](transports::cc::Params::validate)).
//!
//! CONVERSION POINT: the TCP transport's `TcpConfig` is being written on
//! another branch; once it lands, `TransportConfig::to_tcp_config` maps
//! these fields one to one (names differ only in word order:
//! `rto_min` → `min_rto`, `congestion` → `algorithm`, the `cc` fields from
//! [`Config::cc_config`](super::Config::cc_config)).

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use transports::cc::{Algorithm, CcParams};

use super::units::{Dur, Switch};

/// Which transport runs the connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// zerosplit's header-only TCP: payload is placed by the datapath.
    #[default]
    Tcp,
    /// smoltcp over the datapath's rings: payload copied through smoltcp's
    /// buffers; the baseline. Supports congestion control none, reno, cubic.
    Smoltcp,
}

/// The congestion controller: `"none"` or a name
/// [`Algorithm::from_str`](std::str::FromStr) knows (`newreno`/`reno`, and
/// whatever else the transports crate ships).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Congestion {
    /// No congestion control (smoltcp only).
    None,
    /// This algorithm.
    Algorithm(Algorithm),
}

impl Congestion {
    /// The name as written in config.
    pub fn name(self) -> &'static str {
        match self {
            Congestion::None => "none",
            Congestion::Algorithm(a) => a.name(),
        }
    }

    /// The algorithm, unless none.
    pub fn algorithm(self) -> Option<Algorithm> {
        match self {
            Congestion::None => None,
            Congestion::Algorithm(a) => Some(a),
        }
    }
}

impl fmt::Display for Congestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Congestion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Congestion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Congestion;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a congestion controller name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Congestion, E> {
                if v.trim().eq_ignore_ascii_case("none") {
                    return Ok(Congestion::None);
                }
                v.parse::<Algorithm>()
                    .map(Congestion::Algorithm)
                    .map_err(|e| E::custom(format!("{e} (or \"none\", smoltcp only)")))
            }
        }
        d.deserialize_str(V)
    }
}

/// How the receiver echoes CE marks (RFC 3168 6.1.3 or RFC 8257 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EcnEchoName {
    /// Per-packet when our controller wants ECN (DCTCP), classic otherwise.
    #[default]
    Auto,
    /// RFC 3168: ECE on every ACK from a CE mark until CWR.
    Classic,
    /// RFC 8257 3.2: ECE mirrors the latest segment's CE state.
    PerPacket,
}

/// Keepalive probing (RFC 9293 3.8.4, RFC 1122 4.2.3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeepaliveConfig {
    /// Idle time before the first probe.
    pub idle: Dur,
    /// Time between unanswered probes.
    pub interval: Dur,
    /// Unanswered probes after which the connection is closed.
    pub probes: u32,
}

/// `[transport]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// Which transport.
    pub kind: TransportKind,
    /// Congestion controller.
    pub congestion: Congestion,
    /// Old name of `cc.cubic.beta`, still read (see [`TransportConfig::cc_params`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cubic_beta: Option<f64>,
    /// Old name of `cc.cubic.c`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cubic_c: Option<f64>,
    /// Old name of `cc.cubic.hystart`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hystart: Option<bool>,
    /// Old name of `cc.dctcp.gain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dctcp_gain: Option<f64>,
    /// Initial window, segments (RFC 6928: 10).
    pub initial_window_segments: u32,
    /// Minimum window, segments.
    pub minimum_window_segments: u32,
    /// Largest payload per segment, bytes.
    pub mss: u16,
    /// RTO floor (RFC 6298 2.4).
    pub rto_min: Dur,
    /// RTO before the first RTT sample (RFC 6298 2.1).
    pub rto_initial: Dur,
    /// RTO ceiling and backoff cap (RFC 6298 5.5).
    pub rto_max: Dur,
    /// Consecutive RTOs after which the connection gives up.
    pub max_retransmissions: u32,
    /// SYN-ACK retransmissions after which a passive open gives up.
    pub syn_ack_retries: u32,
    /// Zero-window probes after which a connection whose peer keeps its
    /// window closed gives up.
    pub max_persist_probes: u32,
    /// RFC 9293 3.8.3 user timeout, or off.
    pub user_timeout: Switch<Dur>,
    /// Delayed-ACK timer (RFC 9293 3.8.6.3), or off (ACK every segment).
    pub delayed_ack: Switch<Dur>,
    /// Segments acknowledged at once at the start of a connection.
    pub quick_ack_segments: u32,
    /// SACK (RFC 2018).
    pub sack: bool,
    /// Timestamps (RFC 7323 3).
    pub timestamps: bool,
    /// ECN (RFC 3168).
    pub ecn: bool,
    /// How CE marks are echoed.
    pub ecn_echo: EcnEchoName,
    /// Window scale shift offered (RFC 7323 2, at most 14), or off.
    pub window_scale: Switch<u8>,
    /// Tail loss probe (RFC 8985 7).
    pub tail_loss_probe: bool,
    /// Keepalive probing, or off.
    pub keepalive: Switch<KeepaliveConfig>,
    /// TIME-WAIT length (RFC 9293 3.4.2: 2 MSL).
    pub time_wait: Dur,
    /// Pace at `pacing_gain` × window / SRTT when the controller has no rate.
    pub pacing: bool,
    /// Gain of that pacing rate.
    pub pacing_gain: f64,
    /// Challenge ACKs (RFC 5961 7) per second at most.
    pub challenge_ack_limit: u32,
    /// Software TSO: new data leaves the transport in send segments of up
    /// to this many MSS-sized wire segments, which the datapath slices
    /// (1 = off; kind = "tcp" only).
    pub tso_segments: u32,
    /// Each congestion controller's own parameters, `[transport.cc.<name>]`
    /// (e.g. `[transport.cc.cubic] beta = 0.7`).
    pub cc: CcParams,
}

/// The `[transport]` keys that held controller parameters before each
/// algorithm got its own table: `(old key, algorithm, key)`. They still load
/// (a file may not write both names for one parameter); the new name is
/// `transport.cc.<algorithm>.<key>`.
const OLD_CC_KEYS: [(&str, &str, &str); 4] = [
    ("cubic_beta", "cubic", "beta"),
    ("cubic_c", "cubic", "c"),
    ("hystart", "cubic", "hystart"),
    ("dctcp_gain", "dctcp", "gain"),
];

impl TransportConfig {
    /// The controllers' parameters: `[transport.cc]` with any old
    /// `[transport]` key (`cubic_beta`, `cubic_c`, `hystart`, `dctcp_gain`)
    /// written over it; a file may not write both names of one parameter.
    pub fn cc_params(&self) -> CcParams {
        let mut cc = self.cc.clone();
        if let Some(beta) = self.cubic_beta {
            cc.cubic.beta = beta;
        }
        if let Some(c) = self.cubic_c {
            cc.cubic.c = c;
        }
        if let Some(hystart) = self.hystart {
            cc.cubic.hystart = hystart;
        }
        if let Some(gain) = self.dctcp_gain {
            cc.dctcp.gain = gain;
        }
        cc
    }

    /// The old keys this file wrote, as `(old key, algorithm, key)`.
    pub(crate) fn old_cc_keys_written(
        &self,
    ) -> impl Iterator<Item = (&'static str, &'static str, &'static str)> + '_ {
        let written = [
            self.cubic_beta.is_some(),
            self.cubic_c.is_some(),
            self.hystart.is_some(),
            self.dctcp_gain.is_some(),
        ];
        OLD_CC_KEYS
            .into_iter()
            .zip(written)
            .filter_map(|(keys, written)| written.then_some(keys))
    }
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            kind: TransportKind::Tcp,
            congestion: Congestion::Algorithm(Algorithm::NewReno),
            cubic_beta: None,
            cubic_c: None,
            hystart: None,
            dctcp_gain: None,
            initial_window_segments: 10,
            minimum_window_segments: 2,
            mss: 1460,
            rto_min: Dur::from_millis(5),
            rto_initial: Dur::from_millis(200),
            rto_max: Dur::from_secs(60),
            max_retransmissions: 15,
            syn_ack_retries: 5,
            max_persist_probes: 15,
            user_timeout: Switch::Off,
            delayed_ack: Switch::On(Dur::from_millis(1)),
            quick_ack_segments: 16,
            sack: true,
            timestamps: true,
            ecn: false,
            ecn_echo: EcnEchoName::Auto,
            window_scale: Switch::On(7),
            tail_loss_probe: true,
            keepalive: Switch::Off,
            time_wait: Dur::from_secs(1),
            pacing: false,
            pacing_gain: 1.25,
            challenge_ack_limit: 100,
            tso_segments: transports::tcp::DEFAULT_TSO_SEGMENTS,
            cc: CcParams::default(),
        }
    }
}
