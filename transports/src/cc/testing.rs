//! What the controllers' unit tests share: an RTT estimator, an ACK and
//! earlier instants.

use core::time::Duration;

use super::AckEvent;
use crate::rtt::RttEstimator;
use crate::time::Instant;

/// `t - d` (the crate's `Instant` only adds durations).
pub(crate) fn earlier(t: Instant, d: Duration) -> Instant {
    Instant::from_nanos(t.as_nanos() - d.as_nanos() as u64)
}

/// An estimator (1 s initial RTO, 1 ms floor, 60 s ceiling) that has taken
/// `sample`, if any.
pub(crate) fn rtt_after(sample: Option<Duration>) -> RttEstimator {
    let mut r = RttEstimator::new(
        Duration::from_secs(1),
        Duration::from_millis(1),
        Duration::from_secs(60),
    );
    if let Some(sample) = sample {
        r.update(sample);
    }
    r
}

/// An ACK of `bytes` sent at `sent`, arriving at `now`, nothing in flight,
/// not application-limited, outside recovery.
pub(crate) fn ack(rtt: &RttEstimator, now: Instant, sent: Instant, bytes: u64) -> AckEvent<'_> {
    AckEvent {
        now,
        sent,
        bytes_acked: bytes,
        bytes_in_flight: 0,
        app_limited: false,
        delivery_rate: None,
        in_recovery: false,
        rtt,
    }
}
