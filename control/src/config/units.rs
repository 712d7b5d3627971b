//! Value types with a human spelling in TOML: byte sizes (`"64MiB"` or a
//! plain integer), durations (`"5ms"`, `"1s"`, `"200us"`), port ranges
//! (`"40000-40999"`), CPU core choices (`"any"` or an id) and switches that
//! are either `"off"` or a value.
//!
//! Each type parses with a message that says what was expected, so that the
//! loader can put the dotted key in front of it, and serializes back to the
//! same spelling, so a loaded file round-trips.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, IntoDeserializer};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Splits `"12.5 MiB"` into the number and the unit and scales the number by
/// the unit's factor, exactly (no floating point). `units` maps unit names
/// to factors; an empty unit is looked up like any other.
fn scaled(s: &str, units: &[(&str, u128)], what: &str) -> Result<u128, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim_start());
    let known = || {
        units
            .iter()
            .map(|(u, _)| format!("{u:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{s:?} is not a {what}: expected a non-negative number followed by a unit (one of {})",
            known()
        ));
    }
    let factor = units
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            format!(
                "{s:?} is not a {what}: unknown unit {unit:?} (use {})",
                known()
            )
        })?;
    if !frac.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 18 {
        return Err(format!("{s:?} is not a {what}: bad fraction"));
    }
    let too_large = || format!("{s:?} is too large");
    let int: u128 = int.parse().map_err(|_| too_large())?;
    let whole = int.checked_mul(factor).ok_or_else(too_large)?;
    if frac.is_empty() {
        return Ok(whole);
    }
    let denom = 10u128.pow(frac.len() as u32);
    let frac_val: u128 = frac.parse().map_err(|_| too_large())?;
    let part = frac_val.checked_mul(factor).ok_or_else(too_large)?;
    if part % denom != 0 {
        return Err(format!(
            "{s:?} is not a whole number of the smallest unit {:?}",
            units.iter().find(|(_, f)| *f == 1).map_or("", |(u, _)| u)
        ));
    }
    whole.checked_add(part / denom).ok_or_else(too_large)
}

const SIZE_UNITS: &[(&str, u128)] = &[
    ("", 1),
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("kB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

/// A number of bytes. In TOML either a non-negative integer or a string with
/// a unit: `B`, binary `KiB` `MiB` `GiB` `TiB`, or decimal `kB` `MB` `GB`
/// `TB` (`"64MiB"`, `"1.5GiB"`, `"4096"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v = scaled(s, SIZE_UNITS, "byte size")?;
        u64::try_from(v)
            .map(ByteSize)
            .map_err(|_| format!("{s:?} is too large"))
    }
}

impl fmt::Display for ByteSize {
    /// The largest binary unit that divides the size exactly, else bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, factor) in [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ] {
            if self.0 != 0 && self.0.is_multiple_of(factor) {
                return write!(f, "{}{unit}", self.0 / factor);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count (integer) or a size string like \"64MiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("a size cannot be negative ({v})")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

const DURATION_UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// A duration. In TOML a string with a unit: `ns`, `us` (or `µs`), `ms`,
/// `s`, `min`, `h` (`"5ms"`, `"1.5s"`, `"200us"`). Bare numbers are refused
/// because their unit would be a guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Dur(pub Duration);

impl Dur {
    /// A duration of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Dur {
        Dur(Duration::from_millis(ms))
    }

    /// A duration of `s` seconds.
    pub const fn from_secs(s: u64) -> Dur {
        Dur(Duration::from_secs(s))
    }

    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(format!(
                "{s:?} has no unit: write a duration like \"5ms\", \"1s\" or \"200us\""
            ));
        }
        let ns = scaled(s, DURATION_UNITS, "duration")?;
        let secs = u64::try_from(ns / 1_000_000_000).map_err(|_| format!("{s:?} is too long"))?;
        Ok(Dur(Duration::new(secs, (ns % 1_000_000_000) as u32)))
    }
}

impl fmt::Display for Dur {
    /// The largest of `s`, `ms`, `us`, `ns` that divides the duration exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        for (unit, factor) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
            if ns.is_multiple_of(factor) {
                return write!(f, "{}{unit}", ns / factor);
            }
        }
        write!(f, "{ns}ns")
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string like \"5ms\", \"1s\" or \"200us\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// Either `"off"` (also `false`) or a value: used for features that are
/// disabled or configured, like `delayed_ack = "1ms"` / `delayed_ack = "off"`
/// or `busy_poll = { usecs = 50, budget = 64 }` / `busy_poll = "off"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Switch<T> {
    /// Disabled.
    Off,
    /// Enabled with this value.
    On(T),
}

impl<T> Switch<T> {
    /// The value when on.
    pub fn on(&self) -> Option<&T> {
        match self {
            Switch::Off => None,
            Switch::On(v) => Some(v),
        }
    }

    /// Whether this is on.
    pub fn is_on(&self) -> bool {
        matches!(self, Switch::On(_))
    }
}

impl<T: Copy> Switch<T> {
    /// The value when on, by value.
    pub fn get(&self) -> Option<T> {
        self.on().copied()
    }
}

impl<T> From<Option<T>> for Switch<T> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Switch::Off, Switch::On)
    }
}

impl<T: Serialize> Serialize for Switch<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Switch::Off => s.serialize_str("off"),
            Switch::On(v) => v.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Switch<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for V<T> {
            type Value = Switch<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"off\" or a value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Switch<T>, E> {
                if v {
                    Err(E::custom(
                        "`true` does not say how: give a value, or \"off\"/false",
                    ))
                } else {
                    Ok(Switch::Off)
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Switch<T>, E> {
                if v == "off" {
                    return Ok(Switch::Off);
                }
                T::deserialize(v.into_deserializer())
                    .map(Switch::On)
                    .map_err(|e: E| E::custom(format!("{e} (or \"off\")")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Switch<T>, E> {
                T::deserialize(v.into_deserializer()).map(Switch::On)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Switch<T>, E> {
                T::deserialize(v.into_deserializer()).map(Switch::On)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Switch<T>, E> {
                T::deserialize(v.into_deserializer()).map(Switch::On)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Switch<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Switch::On)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An inclusive range of TCP ports, written `"40000-40999"` (or a single
/// port `"40000"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// First port in the range.
    pub first: u16,
    /// Last port in the range (inclusive).
    pub last: u16,
}

impl PortRange {
    /// Whether `port` lies in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }

    /// Number of ports in the range (0 when `last < first`).
    pub fn len(&self) -> u32 {
        (u32::from(self.last) + 1).saturating_sub(u32::from(self.first))
    }

    /// Whether the range holds no port (`last < first`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let port = |p: &str| {
            p.trim().parse::<u16>().map_err(|_| {
                format!(
                    "{s:?} is not a port range: {:?} is not a port number 0..=65535",
                    p.trim()
                )
            })
        };
        match s.split_once('-') {
            Some((a, b)) => Ok(PortRange {
                first: port(a)?,
                last: port(b)?,
            }),
            None => {
                let p = port(s)?;
                Ok(PortRange { first: p, last: p })
            }
        }
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl Serialize for PortRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = PortRange;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a port range string like \"40000-40999\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PortRange, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// Where a thread runs: `"any"` (not pinned) or a CPU core id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Core {
    /// Not pinned; the scheduler chooses.
    #[default]
    Any,
    /// Pinned to this core.
    Id(usize),
}

impl Core {
    /// The core id when pinned.
    pub fn id(self) -> Option<usize> {
        match self {
            Core::Any => None,
            Core::Id(c) => Some(c),
        }
    }
}

impl Serialize for Core {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Core::Any => s.serialize_str("any"),
            Core::Id(c) => s.serialize_u64(*c as u64),
        }
    }
}

impl<'de> Deserialize<'de> for Core {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Core;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a CPU core id (integer) or \"any\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Core, E> {
                usize::try_from(v)
                    .map(Core::Id)
                    .map_err(|_| E::custom(format!("core id {v} is too large")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Core, E> {
                usize::try_from(v)
                    .map(Core::Id)
                    .map_err(|_| E::custom(format!("core id {v} is negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Core, E> {
                if v == "any" {
                    Ok(Core::Any)
                } else {
                    Err(E::custom(format!(
                        "{v:?} is not a core: give a core id (integer) or \"any\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_and_exactly() {
        assert_eq!("64MiB".parse(), Ok(ByteSize(64 << 20)));
        assert_eq!("1.5 GiB".parse(), Ok(ByteSize(3 << 29)));
        assert_eq!("4096".parse(), Ok(ByteSize(4096)));
        assert_eq!("2kB".parse(), Ok(ByteSize(2000)));
        assert!("1.5B"
            .parse::<ByteSize>()
            .unwrap_err()
            .contains("whole number"));
        assert!("64 mb"
            .parse::<ByteSize>()
            .unwrap_err()
            .contains("unknown unit"));
        assert!("MiB".parse::<ByteSize>().is_err());
        assert!("-1MiB"
            .parse::<ByteSize>()
            .unwrap_err()
            .contains("non-negative number"));
        assert!("99999999999TiB"
            .parse::<ByteSize>()
            .unwrap_err()
            .contains("too large"));
        assert_eq!(ByteSize(64 << 20).to_string(), "64MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
        assert_eq!(ByteSize(0).to_string(), "0B");
    }

    #[test]
    fn durations_parse_with_units_and_print_back() {
        assert_eq!("5ms".parse(), Ok(Dur::from_millis(5)));
        assert_eq!("200us".parse(), Ok(Dur(Duration::from_micros(200))));
        assert_eq!("200µs".parse(), Ok(Dur(Duration::from_micros(200))));
        assert_eq!("1.5s".parse(), Ok(Dur::from_millis(1500)));
        assert_eq!("2min".parse(), Ok(Dur::from_secs(120)));
        assert!("5".parse::<Dur>().unwrap_err().contains("no unit"));
        assert!("5 parsecs"
            .parse::<Dur>()
            .unwrap_err()
            .contains("unknown unit"));
        assert!("0.5ns".parse::<Dur>().is_err());
        for s in ["5ms", "1s", "200us", "7ns", "0s", "60s"] {
            assert_eq!(s.parse::<Dur>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn port_ranges_parse() {
        let r: PortRange = "40000-40999".parse().unwrap();
        assert_eq!((r.first, r.last, r.len()), (40000, 40999, 1000));
        assert!(r.contains(40000) && r.contains(40999) && !r.contains(41000));
        let empty: PortRange = "5-4".parse().unwrap();
        assert!(empty.is_empty());
        assert!("40000-70000".parse::<PortRange>().is_err());
        assert!("a-b".parse::<PortRange>().is_err());
        assert_eq!(r.to_string(), "40000-40999");
    }
}
