//! The rules of `[transport]`: the controller and its parameters
//! (`[transport.cc.<name>]`), window sizes and MSS, the timers, and the
//! remaining options.

use std::time::Duration;

use transports::cc::InvalidCcConfig;
use transports::tcp::MAX_TSO_SEGMENTS;

use super::super::{Config, Congestion, TransportConfig, TransportKind};
use super::Problems;

/// IPv4 and TCP headers without options, RFC 9293 3.7.1 (MSS excludes them).
const IP_TCP_HEADERS: u32 = 40;
/// Smallest MSS: room for a segment that also carries options.
const MIN_MSS: u16 = 64;
/// Congestion controllers smoltcp implements.
const SMOLTCP_CC: &[&str] = &["none", "newreno", "cubic"];

pub(super) fn transport(c: &Config, p: &mut Problems) {
    let t = &c.transport;
    congestion(t, p);
    cc_params(t, p);
    windows_and_mss(c, p);
    timers(t, p);
    if let Some(ws) = t.window_scale.get() {
        if ws > 14 {
            p.add(
                "transport.window_scale",
                format!("{ws} is above 14 (RFC 7323 2.3)"),
            );
        }
    }
    if !(t.pacing_gain.is_finite() && t.pacing_gain > 0.0) {
        p.add(
            "transport.pacing_gain",
            format!("{} must be positive", t.pacing_gain),
        );
    }
    if !(1..=MAX_TSO_SEGMENTS).contains(&t.tso_segments) {
        p.add(
            "transport.tso_segments",
            format!(
                "{} must be between 1 (off) and {MAX_TSO_SEGMENTS}",
                t.tso_segments
            ),
        );
    }
}

/// The controller fits the transport kind and the ECN setting.
fn congestion(t: &TransportConfig, p: &mut Problems) {
    match (t.kind, t.congestion) {
        (TransportKind::Smoltcp, cc) if !SMOLTCP_CC.contains(&cc.name()) => p.add(
            "transport.congestion",
            format!(
                "kind = \"smoltcp\" supports only {}; {:?} needs kind = \"tcp\"",
                SMOLTCP_CC.join(", "),
                cc.name()
            ),
        ),
        (TransportKind::Tcp, Congestion::None) => p.add(
            "transport.congestion",
            "kind = \"tcp\" needs a congestion controller (\"none\" is for smoltcp only)",
        ),
        _ => {}
    }
    if t.congestion.name() == "dctcp" && !t.ecn {
        p.add(
            "transport.ecn",
            "congestion = \"dctcp\" reacts to ECN marks: set ecn = true (RFC 8257 3)",
        );
    }
}

/// Each algorithm's parameters, by its own validation; a bad value given
/// under an old `[transport]` name is reported under that name.
fn cc_params(t: &TransportConfig, p: &mut Problems) {
    let written: Vec<_> = t.old_cc_keys_written().collect();
    let value_of = |params: &transports::cc::CcParams, algorithm: &str, key: &str| {
        toml::Value::try_from(params)
            .ok()
            .and_then(|v| v.get(algorithm)?.get(key).cloned())
    };
    let defaults = transports::cc::CcParams::default();
    for &(old, algorithm, key) in &written {
        // The new key holds its default unless the file wrote it.
        if value_of(&t.cc, algorithm, key) != value_of(&defaults, algorithm, key) {
            p.add(
                format!("transport.{old}"),
                format!(
                    "is the old name of transport.cc.{algorithm}.{key}, which is also set: keep only transport.cc.{algorithm}.{key}"
                ),
            );
        }
    }
    for problem in t.cc_params().problems() {
        let InvalidCcConfig::Param {
            algorithm,
            key,
            value,
            expected,
        } = problem
        else {
            continue;
        };
        let old = written
            .iter()
            .find(|&&(_, a, k)| a == algorithm && k == key)
            .map(|&(old, _, _)| old);
        let dotted = match old {
            Some(old) => format!("transport.{old}"),
            None => format!("transport.cc.{algorithm}.{key}"),
        };
        p.add(dotted, format!("{value} {expected}"));
    }
}

/// Window sizes in segments and the MSS against the MTU.
fn windows_and_mss(c: &Config, p: &mut Problems) {
    let t = &c.transport;
    p.at_least(
        "transport.initial_window_segments",
        t.initial_window_segments,
        1,
    );
    p.at_least(
        "transport.minimum_window_segments",
        t.minimum_window_segments,
        1,
    );
    if t.minimum_window_segments > t.initial_window_segments {
        p.add(
            "transport.minimum_window_segments",
            format!(
                "{} exceeds transport.initial_window_segments ({})",
                t.minimum_window_segments, t.initial_window_segments
            ),
        );
    }
    if t.mss < MIN_MSS {
        p.add(
            "transport.mss",
            format!("{} is below {MIN_MSS} bytes", t.mss),
        );
    } else if u32::from(t.mss) + IP_TCP_HEADERS > c.umem.mtu {
        p.add(
            "transport.mss",
            format!(
                "{} plus {IP_TCP_HEADERS} bytes of IPv4 and TCP headers exceeds umem.mtu ({}): at most {}",
                t.mss,
                c.umem.mtu,
                c.umem.mtu.saturating_sub(IP_TCP_HEADERS)
            ),
        );
    }
}

/// RTO bounds, user timeout, delayed ACK and keepalive.
fn timers(t: &TransportConfig, p: &mut Problems) {
    let (min, init, max) = (t.rto_min.get(), t.rto_initial.get(), t.rto_max.get());
    if min.is_zero() {
        p.add("transport.rto_min", "must be above 0 (RFC 6298 2.4)");
    }
    if min > init {
        p.add(
            "transport.rto_min",
            format!(
                "{} exceeds transport.rto_initial ({}): need rto_min <= rto_initial <= rto_max",
                t.rto_min, t.rto_initial
            ),
        );
    }
    if init > max {
        p.add(
            "transport.rto_initial",
            format!(
                "{} exceeds transport.rto_max ({}): need rto_min <= rto_initial <= rto_max",
                t.rto_initial, t.rto_max
            ),
        );
    }
    p.at_least("transport.max_retransmissions", t.max_retransmissions, 1);
    p.at_least("transport.max_persist_probes", t.max_persist_probes, 1);
    if let Some(u) = t.user_timeout.get() {
        if u.get().is_zero() {
            p.add(
                "transport.user_timeout",
                "0s would give up at once: write \"off\" to disable",
            );
        }
    }
    if let Some(d) = t.delayed_ack.get() {
        if d.get().is_zero() {
            p.add(
                "transport.delayed_ack",
                "0s: write \"off\" to acknowledge every segment at once",
            );
        } else if d.get() > Duration::from_millis(500) {
            p.add(
                "transport.delayed_ack",
                format!("{d} exceeds 500ms (RFC 9293 3.8.6.3)"),
            );
        } else if d.get() >= min && !min.is_zero() {
            p.add(
                "transport.delayed_ack",
                format!(
                    "{d} is not below transport.rto_min ({}): a peer with the same RTO floor would time out before our ACK",
                    t.rto_min
                ),
            );
        }
    }
    if let Some(k) = t.keepalive.on() {
        if k.idle.get().is_zero() {
            p.add("transport.keepalive.idle", "must be above 0");
        }
        if k.interval.get().is_zero() {
            p.add("transport.keepalive.interval", "must be above 0");
        }
        p.at_least("transport.keepalive.probes", k.probes, 1);
    }
}
