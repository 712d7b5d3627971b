//! What one direction of the impairment hop does to frames
//! ([`ImpairConfig`]) and its text form, in the spirit of netem's
//! arguments:
//!
//! ```text
//! loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%,delay=50us,rate=2gbit,queue=256k,seed=7
//! ```
//!
//! Keys (each at most once, any order, comma-separated; `none` or an empty
//! string is "no impairment"):
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `loss` | probability | drop the frame |
//! | `dup` | probability | send the frame twice |
//! | `reorder` | probability`:`duration | hold the frame this much longer than the others, so later frames overtake it |
//! | `delay` | duration | hold every frame this long |
//! | `corrupt` | probability | flip one random bit past the L4 header (TCP/UDP payload), so the receiver sees a bad checksum |
//! | `rate` | bit rate | serialise frames at this rate (whole Ethernet frame counted) |
//! | `queue` | size | bytes that may wait for the rate before new frames are tail-dropped (only with `rate`; default 256 KiB) |
//! | `seed` | integer | seed of the random numbers (default 1) |
//!
//! A probability is `1%` or a fraction `0.01`. A duration needs a unit:
//! `ns`, `us`, `ms`, `s` (`1.5ms` is fine). A bit rate uses tc's decimal
//! units `bit`, `kbit`, `mbit`, `gbit` (`2gbit` = 2·10⁹ bit/s). A size is
//! bytes with optional binary suffix `k`/`kb`/`kib`, `m`/`mb`/`mib`
//! (`256k` = 262 144 bytes), as tc counts buffer sizes.

use std::{fmt, str::FromStr, time::Duration};

use thiserror::Error;

/// The default rate-limit queue: 256 KiB.
pub const DEFAULT_QUEUE_BYTES: u64 = 256 * 1024;

/// The longest `delay` or reorder delay accepted: 10 s.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// The default seed.
pub const DEFAULT_SEED: u64 = 1;

/// What one direction of the hop does to the frames it forwards. The
/// default does nothing: every frame is forwarded at once, unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpairConfig {
    /// Probability that a frame is dropped.
    pub loss: f64,
    /// Probability that a frame is sent twice.
    pub duplicate: f64,
    /// Probability that a frame is held [`ImpairConfig::reorder_delay`]
    /// longer than the others.
    pub reorder: f64,
    /// Extra holding time of a reordered frame.
    pub reorder_delay: Duration,
    /// Holding time of every frame.
    pub delay: Duration,
    /// Probability that one bit of the frame's TCP/UDP payload is flipped.
    pub corrupt: f64,
    /// Bottleneck rate in bit/s (whole Ethernet frames), or none.
    pub rate_bps: Option<u64>,
    /// Bytes that may wait for the rate before arrivals are tail-dropped.
    pub queue_bytes: u64,
    /// Seed of the random numbers.
    pub seed: u64,
}

impl Default for ImpairConfig {
    fn default() -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            delay: Duration::ZERO,
            corrupt: 0.0,
            rate_bps: None,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            seed: DEFAULT_SEED,
        }
    }
}

/// A spec string or a config that cannot be used; names the key and value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// A key this tool does not know.
    #[error("unknown impairment key {key:?} (known: loss, dup, reorder, delay, corrupt, rate, queue, seed)")]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// An item without `=value`.
    #[error("impairment item {item:?} has no value: write {item}=VALUE")]
    MissingValue {
        /// The item as written.
        item: String,
    },
    /// A key given twice.
    #[error("impairment key {key:?} given twice")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A value that does not parse or is out of range.
    #[error("bad value {value:?} for {key}: expected {expected}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// Keys that make no sense together or alone.
    #[error("{0}")]
    Conflict(&'static str),
}

impl ImpairConfig {
    /// True when the config changes nothing (no drop, delay, copy or bit
    /// flip, no rate limit).
    pub fn is_identity(&self) -> bool {
        self.loss <= 0.0
            && self.duplicate <= 0.0
            && self.reorder <= 0.0
            && self.delay.is_zero()
            && self.corrupt <= 0.0
            && self.rate_bps.is_none()
    }

    /// The same config with another seed.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Checks ranges: probabilities in `[0, 1]`, delays at most
    /// [`MAX_DELAY`], a reorder probability only with a reorder delay, a
    /// rate above 0 and a queue of at least one byte.
    ///
    /// # Errors
    ///
    /// [`SpecError::BadValue`] or [`SpecError::Conflict`] naming the field.
    pub fn validate(&self) -> Result<(), SpecError> {
        for (key, p) in [
            ("loss", self.loss),
            ("dup", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(SpecError::BadValue {
                    key,
                    value: p.to_string(),
                    expected: "a probability between 0 and 1",
                });
            }
        }
        for (key, d) in [("delay", self.delay), ("reorder", self.reorder_delay)] {
            if d > MAX_DELAY {
                return Err(SpecError::BadValue {
                    key,
                    value: format!("{d:?}"),
                    expected: "a duration of at most 10s",
                });
            }
        }
        if self.reorder > 0.0 && self.reorder_delay.is_zero() {
            return Err(SpecError::Conflict(
                "reorder needs an extra delay for the reordered frames, e.g. reorder=5%:200us",
            ));
        }
        if self.rate_bps == Some(0) {
            return Err(SpecError::BadValue {
                key: "rate",
                value: "0".into(),
                expected: "a rate above 0",
            });
        }
        if self.queue_bytes == 0 {
            return Err(SpecError::BadValue {
                key: "queue",
                value: "0".into(),
                expected: "at least one byte",
            });
        }
        Ok(())
    }
}

impl FromStr for ImpairConfig {
    type Err = SpecError;

    fn from_str(spec: &str) -> Result<Self, SpecError> {
        let mut cfg = Self::default();
        let spec = spec.trim();
        if spec.is_empty() || spec.eq_ignore_ascii_case("none") {
            return Ok(cfg);
        }
        let mut seen: Vec<&str> = Vec::new();
        let mut queue_given = false;
        for item in spec.split(',').map(str::trim) {
            if item.is_empty() {
                continue;
            }
            let Some((key, value)) = item.split_once('=') else {
                return Err(SpecError::MissingValue { item: item.into() });
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(SpecError::DuplicateKey { key: key.into() });
            }
            seen.push(key);
            match key {
                "loss" => cfg.loss = probability("loss", value)?,
                "dup" => cfg.duplicate = probability("dup", value)?,
                "corrupt" => cfg.corrupt = probability("corrupt", value)?,
                "reorder" => {
                    let Some((p, d)) = value.split_once(':') else {
                        return Err(SpecError::BadValue {
                            key: "reorder",
                            value: value.into(),
                            expected: "PROBABILITY:DURATION, e.g. 5%:200us",
                        });
                    };
                    cfg.reorder = probability("reorder", p)?;
                    cfg.reorder_delay = duration("reorder", d)?;
                }
                "delay" => cfg.delay = duration("delay", value)?,
                "rate" => cfg.rate_bps = Some(rate(value)?),
                "queue" => {
                    cfg.queue_bytes = size("queue", value)?;
                    queue_given = true;
                }
                "seed" => {
                    cfg.seed = value.parse().map_err(|_| SpecError::BadValue {
                        key: "seed",
                        value: value.into(),
                        expected: "an unsigned 64-bit integer",
                    })?;
                }
                _ => return Err(SpecError::UnknownKey { key: key.into() }),
            }
        }
        if queue_given && cfg.rate_bps.is_none() {
            return Err(SpecError::Conflict(
                "queue= limits the rate limiter's backlog: give rate= too",
            ));
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

impl fmt::Display for ImpairConfig {
    /// The spec string that parses back to this config (`none` for the
    /// identity with the default seed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = Vec::new();
        let pct = |p: f64| {
            // Six decimals of a percent, trailing zeros trimmed: 0.7 %
            // prints as 0.7%, not 0.7000000000000001%.
            let text = format!("{:.6}", p * 100.0);
            format!("{}%", text.trim_end_matches('0').trim_end_matches('.'))
        };
        if self.loss > 0.0 {
            items.push(format!("loss={}", pct(self.loss)));
        }
        if self.reorder > 0.0 {
            items.push(format!(
                "reorder={}:{}",
                pct(self.reorder),
                show_duration(self.reorder_delay)
            ));
        }
        if self.duplicate > 0.0 {
            items.push(format!("dup={}", pct(self.duplicate)));
        }
        if self.corrupt > 0.0 {
            items.push(format!("corrupt={}", pct(self.corrupt)));
        }
        if !self.delay.is_zero() {
            items.push(format!("delay={}", show_duration(self.delay)));
        }
        if let Some(r) = self.rate_bps {
            items.push(format!(
                "rate={}",
                scaled(r, 1000, &["bit", "kbit", "mbit", "gbit", "tbit"])
            ));
            items.push(format!(
                "queue={}",
                scaled(self.queue_bytes, 1024, &["", "k", "m", "g"])
            ));
        }
        if self.seed != DEFAULT_SEED {
            items.push(format!("seed={}", self.seed));
        }
        if items.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&items.join(","))
        }
    }
}

/// A duration in the largest unit that shows it exactly (`50us`, `2ms`).
fn show_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    for (unit, scale) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= scale && ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// `v` in the largest of `units` (each `base` times the previous) that
/// shows it exactly: `2gbit`, `256k`.
fn scaled(mut v: u64, base: u64, units: &[&str]) -> String {
    let mut unit = 0;
    while unit + 1 < units.len() && v >= base && v.is_multiple_of(base) {
        v /= base;
        unit += 1;
    }
    format!("{v}{}", units[unit])
}

/// Splits `"12.5ms"` into `(12.5, "ms")`.
fn number_and_unit(value: &str) -> Option<(f64, &str)> {
    let end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (num, unit) = value.split_at(end);
    let n: f64 = num.parse().ok()?;
    n.is_finite().then_some((n, unit.trim()))
}

fn probability(key: &'static str, value: &str) -> Result<f64, SpecError> {
    let bad = || SpecError::BadValue {
        key,
        value: value.into(),
        expected: "a probability like 1% or 0.01, between 0 and 1",
    };
    let p = match number_and_unit(value.trim()).ok_or_else(bad)? {
        (n, "%") => n / 100.0,
        (n, "") => n,
        _ => return Err(bad()),
    };
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(bad())
    }
}

pub(crate) fn duration(key: &'static str, value: &str) -> Result<Duration, SpecError> {
    let bad = || SpecError::BadValue {
        key,
        value: value.into(),
        expected: "a duration with unit ns, us, ms or s (at most 10s), e.g. 200us",
    };
    let (n, unit) = number_and_unit(value.trim()).ok_or_else(bad)?;
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(bad()),
    };
    let secs = n * scale;
    if secs > MAX_DELAY.as_secs_f64() {
        return Err(bad());
    }
    Ok(Duration::from_nanos((secs * 1e9).round() as u64))
}

fn rate(value: &str) -> Result<u64, SpecError> {
    let bad = || SpecError::BadValue {
        key: "rate",
        value: value.into(),
        expected: "a bit rate above 0 with unit bit, kbit, mbit or gbit, e.g. 2gbit",
    };
    let (n, unit) = number_and_unit(value.trim()).ok_or_else(bad)?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        _ => return Err(bad()),
    };
    let bps = (n * scale).round();
    if bps >= 1.0 && bps < u64::MAX as f64 {
        Ok(bps as u64)
    } else {
        Err(bad())
    }
}

fn size(key: &'static str, value: &str) -> Result<u64, SpecError> {
    let bad = || SpecError::BadValue {
        key,
        value: value.into(),
        expected: "a size in bytes, optionally with k/kb/kib or m/mb/mib (1024-based), e.g. 256k",
    };
    let (n, unit) = number_and_unit(value.trim()).ok_or_else(bad)?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = (n * scale).round();
    if bytes >= 1.0 && bytes < u64::MAX as f64 {
        Ok(bytes as u64)
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_parses_to_every_field() {
        let c: ImpairConfig =
            "loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%,delay=50us,rate=2gbit,queue=256k,seed=7"
                .parse()
                .expect("parses");
        assert!((c.loss - 0.01).abs() < 1e-12);
        assert!((c.reorder - 0.05).abs() < 1e-12);
        assert_eq!(c.reorder_delay, Duration::from_micros(200));
        assert!((c.duplicate - 0.005).abs() < 1e-12);
        assert!((c.corrupt - 0.001).abs() < 1e-12);
        assert_eq!(c.delay, Duration::from_micros(50));
        assert_eq!(c.rate_bps, Some(2_000_000_000));
        assert_eq!(c.queue_bytes, 262_144);
        assert_eq!(c.seed, 7);
        assert!(!c.is_identity());
    }

    #[test]
    fn empty_and_none_are_the_identity() {
        for s in ["", "none", " NONE ", ","] {
            let c: ImpairConfig = s.parse().expect(s);
            assert_eq!(c, ImpairConfig::default(), "{s:?}");
            assert!(c.is_identity());
        }
    }

    #[test]
    fn fractions_units_and_spaces() {
        let c: ImpairConfig = " loss = 0.1 , delay=1.5ms, rate=100mbit ,queue=2mib"
            .parse()
            .expect("parses");
        assert!((c.loss - 0.1).abs() < 1e-12);
        assert_eq!(c.delay, Duration::from_micros(1500));
        assert_eq!(c.rate_bps, Some(100_000_000));
        assert_eq!(c.queue_bytes, 2 << 20);
        let c: ImpairConfig = "delay=2s,rate=9600bit".parse().expect("parses");
        assert_eq!(c.delay, Duration::from_secs(2));
        assert_eq!(c.rate_bps, Some(9600));
    }

    #[test]
    fn display_uses_readable_units() {
        let c: ImpairConfig = "delay=2ms,reorder=5%:200us,rate=2gbit"
            .parse()
            .expect("parses");
        assert_eq!(
            c.to_string(),
            "reorder=5%:200us,delay=2ms,rate=2gbit,queue=256k"
        );
        let c: ImpairConfig = "loss=0.7%,corrupt=0.1".parse().expect("parses");
        assert_eq!(c.to_string(), "loss=0.7%,corrupt=10%");
    }

    #[test]
    fn display_parses_back_to_the_same_config() {
        for s in [
            "loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%,delay=50us,rate=2gbit,queue=256k,seed=7",
            "none",
            "loss=0.1",
            "rate=10mbit",
            "rate=1234567bit,queue=1000",
            "seed=99",
            "delay=1500ns,reorder=1%:2s",
            "loss=0.7%,dup=0.07%,corrupt=100%",
        ] {
            let c: ImpairConfig = s.parse().expect(s);
            let again: ImpairConfig = c.to_string().parse().expect("display parses");
            assert_eq!(again, c, "{s} -> {c}");
        }
    }

    fn err(s: &str) -> SpecError {
        s.parse::<ImpairConfig>().expect_err(s)
    }

    #[test]
    fn errors_name_the_bad_key_and_value() {
        let e = err("loss=1%,jitter=5ms");
        assert_eq!(
            e,
            SpecError::UnknownKey {
                key: "jitter".into()
            }
        );
        assert!(e.to_string().contains("jitter"));

        let e = err("loss");
        assert!(matches!(e, SpecError::MissingValue { .. }), "{e}");
        assert!(e.to_string().contains("loss=VALUE"), "{e}");

        let e = err("loss=1%,loss=2%");
        assert_eq!(e, SpecError::DuplicateKey { key: "loss".into() });

        for (spec, key, value) in [
            ("loss=150%", "loss", "150%"),
            ("loss=-1%", "loss", "-1%"),
            ("dup=lots", "dup", "lots"),
            ("corrupt=1%%", "corrupt", "1%%"),
            ("delay=50", "delay", "50"),
            ("delay=5min", "delay", "5min"),
            ("delay=11s", "delay", "11s"),
            ("reorder=5%", "reorder", "5%"),
            ("reorder=5%:fast", "reorder", "fast"),
            ("rate=2gbps", "rate", "2gbps"),
            ("rate=0bit", "rate", "0bit"),
            ("rate=1gbit,queue=0", "queue", "0"),
            ("rate=1gbit,queue=3x", "queue", "3x"),
            ("seed=-1", "seed", "-1"),
        ] {
            match err(spec) {
                SpecError::BadValue {
                    key: k, value: v, ..
                } => {
                    assert_eq!((k, v.as_str()), (key, value), "{spec}");
                }
                other => panic!("{spec}: {other}"),
            }
            let text = err(spec).to_string();
            assert!(text.contains(key) && text.contains(value), "{spec}: {text}");
        }
    }

    #[test]
    fn conflicting_keys_are_explained() {
        let e = err("queue=64k");
        assert!(matches!(e, SpecError::Conflict(_)), "{e}");
        assert!(e.to_string().contains("rate="), "{e}");
        let e = ImpairConfig {
            reorder: 0.1,
            ..ImpairConfig::default()
        }
        .validate()
        .expect_err("reorder without delay");
        assert!(e.to_string().contains("reorder=5%:200us"), "{e}");
    }
}
