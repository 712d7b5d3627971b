//! Summaries of repeated measurements: median and min–max.

use serde::{Deserialize, Serialize};

/// The median and range of one figure over several runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Middle value (the mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// How many values (non-finite ones are left out).
    pub n: usize,
}

impl Summary {
    /// Summarises `samples`, leaving out NaN and infinities; `None` when no
    /// finite value is left.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_count_takes_the_middle_value() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).expect("finite");
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
    }

    #[test]
    fn even_count_averages_the_two_middle_values() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 10.0]).expect("finite");
        assert_eq!((s.median, s.min, s.max, s.n), (3.5, 1.0, 10.0, 4));
    }

    #[test]
    fn non_finite_values_are_left_out() {
        let s = Summary::of(&[f64::NAN, 5.0, f64::INFINITY]).expect("one finite");
        assert_eq!((s.median, s.min, s.max, s.n), (5.0, 5.0, 5.0, 1));
        assert_eq!(Summary::of(&[f64::NAN]), None);
        assert_eq!(Summary::of(&[]), None);
    }
}
