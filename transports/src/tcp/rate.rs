//! Delivery-rate estimation after draft-cheng-iccrg-delivery-rate-estimation:
//! each sent segment remembers how much had been delivered when it left; an
//! ACK that delivers it yields delivered bytes over the longer of the send
//! and the ACK intervals.

use crate::time::Instant;

/// What a segment remembers about the connection's delivery state when sent
/// (the draft's P.delivered, P.delivered_time, P.first_sent_time,
/// P.is_app_limited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSnapshot {
    /// Bytes delivered when the segment was sent.
    pub delivered: u64,
    /// When `delivered` last grew, as of the send.
    pub delivered_time: Instant,
    /// Send time of the segment that started the current flight.
    pub first_sent_time: Instant,
    /// Sent while the application had nothing more to send.
    pub app_limited: bool,
}

/// One ACK's delivery-rate sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSample {
    /// Bytes per second, if the interval was non-zero.
    pub rate: Option<u64>,
    /// The newest delivered segment was sent app-limited.
    pub app_limited: bool,
}

/// The connection-wide delivery state (the draft's C.* variables).
#[derive(Debug, Clone, Copy)]
pub struct DeliveryRate {
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    /// Non-zero while app-limited: the `delivered` value at which the
    /// app-limited period ends.
    app_limited_until: u64,
    // Sample being built for the current ACK.
    prior_delivered: Option<u64>,
    prior_time: Instant,
    send_elapsed: core::time::Duration,
    ack_elapsed: core::time::Duration,
    sample_app_limited: bool,
}

impl DeliveryRate {
    /// Fresh state.
    pub fn new(now: Instant) -> Self {
        Self {
            delivered: 0,
            delivered_time: now,
            first_sent_time: now,
            app_limited_until: 0,
            prior_delivered: None,
            prior_time: now,
            send_elapsed: core::time::Duration::ZERO,
            ack_elapsed: core::time::Duration::ZERO,
            sample_app_limited: false,
        }
    }

    /// Total bytes delivered (cumulatively acknowledged or SACKed).
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// A segment leaves at `now`; `nothing_in_flight` restarts the flight.
    pub fn on_send(&mut self, now: Instant, nothing_in_flight: bool) -> RateSnapshot {
        if nothing_in_flight {
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        RateSnapshot {
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            first_sent_time: self.first_sent_time,
            app_limited: self.app_limited_until != 0,
        }
    }

    /// The sender ran out of application data with window to spare.
    pub fn mark_app_limited(&mut self, bytes_in_flight: u64) {
        self.app_limited_until = (self.delivered + bytes_in_flight).max(1);
    }

    /// A segment of `bytes`, sent at `sent` with `snap`, was delivered.
    pub fn on_delivered(&mut self, now: Instant, bytes: u64, sent: Instant, snap: &RateSnapshot) {
        self.delivered += bytes;
        self.delivered_time = now;
        let newer = self.prior_delivered.is_none_or(|p| snap.delivered >= p);
        if newer {
            self.prior_delivered = Some(snap.delivered);
            self.prior_time = snap.delivered_time;
            self.sample_app_limited = snap.app_limited;
            self.send_elapsed = sent - snap.first_sent_time;
            self.ack_elapsed = self.delivered_time - snap.delivered_time;
            self.first_sent_time = sent;
        }
    }

    /// Finishes the sample for this ACK, if anything was delivered.
    pub fn take_sample(&mut self) -> Option<RateSample> {
        let prior = self.prior_delivered.take()?;
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        let interval = self.send_elapsed.max(self.ack_elapsed);
        let bytes = self.delivered - prior;
        let nanos = interval.as_nanos();
        let rate = (nanos > 0)
            .then(|| u64::try_from(u128::from(bytes) * 1_000_000_000 / nanos).unwrap_or(u64::MAX));
        Some(RateSample {
            rate,
            app_limited: self.sample_app_limited,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_bytes_over_the_longer_interval() {
        let t = Instant::from_millis;
        let mut d = DeliveryRate::new(t(0));
        let s1 = d.on_send(t(0), true);
        let s2 = d.on_send(t(1), false);
        d.on_delivered(t(10), 1000, t(0), &s1);
        let r = d.take_sample().unwrap();
        // 1000 bytes over max(send 0 ms, ack 10 ms) = 100 kB/s.
        assert_eq!(r.rate, Some(100_000));
        d.on_delivered(t(12), 1000, t(1), &s2);
        let r = d.take_sample().unwrap();
        // 2000 bytes delivered since s2's prior 0, over max(1 ms, 12 ms).
        assert_eq!(r.rate, Some(166_666));
        assert!(d.take_sample().is_none());
    }
}
