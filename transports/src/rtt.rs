//! Round-trip time estimation and the retransmission timeout, RFC 6298.

use core::time::Duration;

/// Smoothed RTT, RTT variance, minimum RTT and the RTO derived from them
/// (RFC 6298 section 2), with a configurable floor and ceiling so that a
/// datacenter deployment can use a minimum far below RFC 6298's 1 s.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    latest: Duration,
    smoothed: Option<Duration>,
    var: Duration,
    min: Duration,
    min_rto: Duration,
    max_rto: Duration,
    initial_rto: Duration,
}

impl RttEstimator {
    /// A new estimator with no sample yet. Until the first sample the RTO is
    /// `initial_rto` (RFC 6298 2.1 says 1 s; datacenters use less).
    pub fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        Self {
            latest: Duration::ZERO,
            smoothed: None,
            var: Duration::ZERO,
            min: Duration::MAX,
            min_rto,
            max_rto,
            initial_rto,
        }
    }

    /// Feeds one RTT measurement (RFC 6298 2.2 and 2.3; alpha = 1/8, beta = 1/4).
    pub fn update(&mut self, sample: Duration) {
        self.latest = sample;
        self.min = self.min.min(sample);
        match self.smoothed {
            None => {
                self.smoothed = Some(sample);
                self.var = sample / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(sample);
                self.var = (self.var * 3 + diff) / 4;
                self.smoothed = Some((srtt * 7 + sample) / 8);
            }
        }
    }

    /// The most recent sample (zero before the first).
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// SRTT, or the initial RTO before any sample (a conservative stand-in).
    pub fn get(&self) -> Duration {
        self.smoothed.unwrap_or(self.initial_rto)
    }

    /// SRTT if at least one sample was taken.
    pub fn smoothed(&self) -> Option<Duration> {
        self.smoothed
    }

    /// RTTVAR.
    pub fn var(&self) -> Duration {
        self.var
    }

    /// The smallest sample seen, `None` before the first.
    pub fn min(&self) -> Option<Duration> {
        (self.min != Duration::MAX).then_some(self.min)
    }

    /// The retransmission timeout before backoff: SRTT + max(G, 4 * RTTVAR,
    /// min_rto), at most max_rto (RFC 6298 2.3, 2.5). The floor applies to
    /// the variance term, as Linux's `rto_min` does, not to the whole (RFC
    /// 6298 2.4): behind a steadily full queue RTTVAR decays to almost
    /// nothing, and an RTO barely above SRTT then fires for a
    /// retransmission that is merely queued behind the buffer (cc-lab
    /// measured half the loss episodes at a drop-tail bottleneck ending in
    /// such a spurious timeout). The clock granularity G is taken as 1 µs.
    pub fn rto(&self) -> Duration {
        let raw = match self.smoothed {
            None => self.initial_rto,
            Some(srtt) => srtt + (self.var * 4).max(self.min_rto),
        };
        raw.clamp(self.min_rto, self.max_rto)
    }

    /// The configured ceiling, used to bound exponential backoff (RFC 6298 5.5).
    pub fn max_rto(&self) -> Duration {
        self.max_rto
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(5),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn first_sample_sets_srtt_and_half_var() {
        let mut e = est();
        assert_eq!(e.rto(), Duration::from_secs(1));
        e.update(Duration::from_millis(10));
        assert_eq!(e.smoothed(), Some(Duration::from_millis(10)));
        assert_eq!(e.var(), Duration::from_millis(5));
        // 10 + 4 * 5 = 30 ms
        assert_eq!(e.rto(), Duration::from_millis(30));
    }

    #[test]
    fn later_samples_are_smoothed() {
        let mut e = est();
        e.update(Duration::from_millis(10));
        e.update(Duration::from_millis(18));
        // var = (3*5 + 8)/4 = 5.75 ms, srtt = (70 + 18)/8 = 11 ms
        assert_eq!(e.var(), Duration::from_micros(5750));
        assert_eq!(e.smoothed(), Some(Duration::from_millis(11)));
        assert_eq!(e.min(), Some(Duration::from_millis(10)));
    }

    #[test]
    fn the_floor_applies_to_the_variance_term() {
        let mut e = est();
        for _ in 0..50 {
            e.update(Duration::from_micros(100));
        }
        // RTTVAR has decayed far below min_rto / 4: SRTT + min_rto.
        assert_eq!(e.rto(), Duration::from_micros(5_100));
        let mut steady = est();
        for _ in 0..200 {
            steady.update(Duration::from_millis(20));
        }
        assert!(
            steady.rto() >= Duration::from_millis(25),
            "a steady 20 ms RTT keeps a 5 ms margin: {:?}",
            steady.rto()
        );
    }
}
