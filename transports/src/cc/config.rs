//! What configures a controller: [`CcConfig`] (the parameters every
//! algorithm shares, plus each algorithm's own in [`CcParams`]) and the
//! [`Params`] trait each algorithm's parameter struct implements.

use core::fmt;

use super::{CcParams, MAX_MINIMUM_WINDOW_SEGMENTS, MAX_WINDOW};

/// Parameters every algorithm understands, and each algorithm's own.
#[derive(Debug, Clone, PartialEq)]
pub struct CcConfig {
    /// Maximum segment size in bytes (payload per segment).
    pub mss: u16,
    /// Initial window in segments (RFC 6928: 10).
    pub initial_window_segments: u32,
    /// Minimum window in segments (RFC 5681 loss window: 1; 2 is common).
    pub minimum_window_segments: u32,
    /// Each algorithm's own parameters (`[transport.cc.<name>]`).
    pub params: CcParams,
}

impl Default for CcConfig {
    fn default() -> Self {
        Self {
            mss: 1460,
            initial_window_segments: 10,
            minimum_window_segments: 2,
            params: CcParams::default(),
        }
    }
}

/// Declares an algorithm's parameter struct (`[transport.cc.<name>]`) with
/// the derives every one has: serde's under the `serde` feature, keys named
/// as the fields, every key optional, unknown keys refused.
macro_rules! cc_params {
    ($(#[$meta:meta])* pub struct $name:ident { $($body:tt)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        #[cfg_attr(
            feature = "serde",
            derive(serde::Serialize, serde::Deserialize),
            serde(default, deny_unknown_fields)
        )]
        pub struct $name { $($body)* }
    };
}

cc_params! {
    /// The parameters of an algorithm that has none of its own (an empty
    /// `[transport.cc.<name>]` table).
    #[derive(Default)]
    pub struct NoParams {}
}

impl Params for NoParams {
    fn validate(&self) -> Result<(), ParamError> {
        Ok(())
    }
}

/// One algorithm's parameter struct (`[transport.cc.<name>]`).
///
/// A controller never panics on a bad value (it falls back to its
/// specification's default); `validate` lets a config loader reject it.
pub trait Params: Default + Clone + PartialEq + fmt::Debug {
    /// Checks every field.
    ///
    /// # Errors
    /// The first field out of range, as a [`ParamError`] naming it.
    fn validate(&self) -> Result<(), ParamError>;
}

/// A parameter of one algorithm is out of range.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamError {
    /// The field, as named in config (`beta`).
    pub key: &'static str,
    /// The value given.
    pub value: String,
    /// What would be right (`must be in (0, 1)`).
    pub expected: &'static str,
}

impl ParamError {
    /// `key = value` is wrong; `expected` says what is right.
    pub fn new(key: &'static str, value: impl fmt::Display, expected: &'static str) -> Self {
        Self {
            key,
            value: value.to_string(),
            expected,
        }
    }
}

/// A [`CcConfig`] field holds a value no algorithm can use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidCcConfig {
    /// `mss` is zero.
    #[error("cc config: mss must be at least 1 byte, got 0")]
    ZeroMss,
    /// `minimum_window_segments` is above [`MAX_MINIMUM_WINDOW_SEGMENTS`].
    #[error(
        "cc config: minimum_window_segments must be at most {MAX_MINIMUM_WINDOW_SEGMENTS}, got {0}"
    )]
    MinimumWindowSegments(u32),
    /// One algorithm's parameter (`[transport.cc.<algorithm>] <key>`).
    #[error("cc config: {algorithm}.{key} {expected}, got {value}")]
    Param {
        /// The algorithm's config name.
        algorithm: &'static str,
        /// The parameter's name.
        key: &'static str,
        /// The value given.
        value: String,
        /// What would be right.
        expected: &'static str,
    },
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
    pub fn min_segments(&self) -> u64 {
        u64::from(
            self.minimum_window_segments
                .clamp(1, MAX_MINIMUM_WINDOW_SEGMENTS),
        )
    }

    /// `initial_window_segments` as every controller uses it: never below
    /// the minimum window.
    pub fn initial_segments(&self) -> u64 {
        u64::from(self.initial_window_segments).max(self.min_segments())
    }

    /// The MSS as every controller uses it: at least 1 byte.
    pub fn mss_bytes(&self) -> u64 {
        u64::from(self.mss.max(1))
    }

    /// The window every controller starts with, in bytes:
    /// [`initial_segments`](Self::initial_segments) × [`mss_bytes`](Self::mss_bytes),
    /// at most [`MAX_WINDOW`].
    pub fn starting_window(&self) -> u64 {
        self.initial_segments()
            .saturating_mul(self.mss_bytes())
            .min(MAX_WINDOW)
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
        if self.minimum_window_segments > MAX_MINIMUM_WINDOW_SEGMENTS {
            return Err(InvalidCcConfig::MinimumWindowSegments(
                self.minimum_window_segments,
            ));
        }
        self.params.validate()
    }
}
