//! The CI gate: compare this run's ratios (vs Linux with offloads off and
//! with default offloads, vs the raw AF_XDP ceiling) with a stored report and fail when one fell more than a given
//! percentage. Ratios rather than absolute figures, because they are
//! measured side by side in one run and survive a change of machine.

use std::fmt;

use super::report::Report;

/// One ratio that fell too far.
#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    /// Row key (`scenario/mtu/threads`).
    pub key: String,
    /// `vs_linux`, `vs_linux_offload` or `vs_raw`.
    pub ratio: &'static str,
    /// The stored value.
    pub baseline: f64,
    /// This run's value.
    pub current: f64,
}

impl Regression {
    /// How far below the baseline, in percent.
    pub fn drop_pct(&self) -> f64 {
        100.0 * (1.0 - self.current / self.baseline)
    }
}

impl fmt::Display for Regression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} {:.3} is {:.1} % below the baseline {:.3}",
            self.key,
            self.ratio,
            self.current,
            self.drop_pct(),
            self.baseline
        )
    }
}

/// What the comparison found.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Ratios compared (present in both reports).
    pub compared: usize,
    /// Ratios that fell more than the allowed percentage.
    pub regressions: Vec<Regression>,
    /// Baseline rows with a ratio that this run did not measure.
    pub missing: Vec<String>,
}

/// The gate failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GateError {
    /// The allowed percentage is not in 0..100.
    #[error("--max-regression must be a percentage in 0..100, got {0}")]
    BadPercentage(f64),
    /// Some ratios fell too far.
    #[error("{} ratio(s) regressed more than {max_pct} %:\n  {}", regressions.len(), regressions.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Regressed {
        /// The allowed percentage.
        max_pct: f64,
        /// Each one.
        regressions: Vec<Regression>,
    },
    /// Nothing could be compared (no row in common).
    #[error("the baseline and this run have no ratio in common; nothing was compared")]
    NothingCompared,
}

/// Compares `current` with `baseline`: a ratio regresses when it is below
/// `baseline × (1 − max_pct/100)`.
///
/// # Errors
/// [`GateError::BadPercentage`] for a percentage outside 0..100.
pub fn compare(current: &Report, baseline: &Report, max_pct: f64) -> Result<Comparison, GateError> {
    if !(0.0..100.0).contains(&max_pct) {
        return Err(GateError::BadPercentage(max_pct));
    }
    let mut out = Comparison {
        compared: 0,
        regressions: Vec::new(),
        missing: Vec::new(),
    };
    for b in &baseline.rows {
        let cur = current.row(&b.key);
        let pairs = [
            (
                "vs_linux",
                b.ratios.vs_linux,
                cur.and_then(|c| c.ratios.vs_linux),
            ),
            (
                "vs_linux_offload",
                b.ratios.vs_linux_offload,
                cur.and_then(|c| c.ratios.vs_linux_offload),
            ),
            ("vs_raw", b.ratios.vs_raw, cur.and_then(|c| c.ratios.vs_raw)),
        ];
        for (name, base, now) in pairs {
            let Some(base) = base.filter(|v| v.is_finite() && *v > 0.0) else {
                continue;
            };
            match now {
                Some(now) => {
                    out.compared += 1;
                    if now < base * (1.0 - max_pct / 100.0) {
                        out.regressions.push(Regression {
                            key: b.key.clone(),
                            ratio: name,
                            baseline: base,
                            current: now,
                        });
                    }
                }
                None => out.missing.push(format!("{} {name}", b.key)),
            }
        }
    }
    Ok(out)
}

/// [`compare`], then fail on any regression or when nothing was compared.
///
/// # Errors
/// [`GateError`].
pub fn gate(current: &Report, baseline: &Report, max_pct: f64) -> Result<Comparison, GateError> {
    let c = compare(current, baseline, max_pct)?;
    if !c.regressions.is_empty() {
        return Err(GateError::Regressed {
            max_pct,
            regressions: c.regressions,
        });
    }
    if c.compared == 0 {
        return Err(GateError::NothingCompared);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::sample;
    use super::*;

    #[test]
    fn within_the_allowed_drop_passes() {
        let current = sample();
        let mut base = sample();
        // zs-zs-tcp vs_linux 1.5 now, 1.6 stored: 6.25 % down, 10 % allowed.
        base.rows[1].ratios.vs_linux = Some(1.6);
        let c = gate(&current, &base, 10.0).expect("within 10 %");
        assert_eq!(c.compared, 4);
        assert!(c.regressions.is_empty());
    }

    #[test]
    fn a_drop_beyond_the_limit_names_the_row_and_ratio() {
        let current = sample();
        let mut base = sample();
        base.rows[1].ratios.vs_linux = Some(3.0);
        let err = gate(&current, &base, 10.0).expect_err("50 % down");
        let text = err.to_string();
        assert!(text.contains("zs-zs-tcp/1500/rtc"), "{text}");
        assert!(text.contains("vs_linux 1.500"), "{text}");
        assert!(text.contains("50.0 % below the baseline 3.000"), "{text}");
        let GateError::Regressed { regressions, .. } = err else {
            panic!("wrong error")
        };
        assert_eq!(regressions.len(), 1);
    }

    #[test]
    fn rows_missing_from_this_run_are_listed_not_failed() {
        let mut current = sample();
        current.rows.remove(1);
        let c = gate(&current, &sample(), 10.0).expect("the rest compare");
        assert_eq!(
            c.missing,
            ["zs-zs-tcp/1500/rtc vs_linux", "zs-zs-tcp/1500/rtc vs_raw"]
        );
    }

    #[test]
    fn the_default_offload_ratio_is_gated_too() {
        let mut current = sample();
        let mut base = sample();
        base.rows[1].ratios.vs_linux_offload = Some(1.0);
        current.rows[1].ratios.vs_linux_offload = Some(0.5);
        let err = gate(&current, &base, 10.0).expect_err("50 % down");
        assert!(err.to_string().contains("vs_linux_offload 0.500"), "{err}");
        current.rows[1].ratios.vs_linux_offload = None;
        let c = gate(&current, &base, 10.0).expect("the rest compare");
        assert_eq!(c.missing, ["zs-zs-tcp/1500/rtc vs_linux_offload"]);
    }

    #[test]
    fn nothing_in_common_and_bad_percentages_fail() {
        let mut current = sample();
        current.rows.clear();
        assert_eq!(
            gate(&current, &sample(), 5.0),
            Err(GateError::NothingCompared)
        );
        assert_eq!(
            compare(&sample(), &sample(), 100.0),
            Err(GateError::BadPercentage(100.0))
        );
        assert!(compare(&sample(), &sample(), f64::NAN).is_err());
    }
}
