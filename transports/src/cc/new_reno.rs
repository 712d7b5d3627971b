//! NewReno: slow start, congestion avoidance and multiplicative decrease as
//! in RFC 5681; the recovery period (RFC 6582) is tracked by send time so a
//! window of losses reduces the window once. All of that is [`Classic`];
//! NewReno's adjustment is RFC 5681's: one segment per window of ACKed
//! bytes in avoidance, half the window on loss.

use super::classic::{Classic, WindowAdjust};
use super::CcConfig;

/// RFC 5681 congestion control.
pub type NewReno = Classic<Reno>;

/// NewReno's window adjustment: [`WindowAdjust`]'s defaults, which are
/// RFC 5681's rules; see [`NewReno`].
#[derive(Debug, Clone)]
pub struct Reno;

impl WindowAdjust for Reno {
    /// NewReno grows on ACKs of data sent after the recovery began, even
    /// while the transport is still recovering.
    const FREEZE_IN_TRANSPORT_RECOVERY: bool = false;

    fn new(_config: &CcConfig) -> Self {
        Reno
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing;
    use crate::cc::{AckEvent, CongestionEvent, Controller};
    use crate::rtt::RttEstimator;
    use crate::time::Instant;

    fn ack(rtt: &RttEstimator, now: u64, sent: u64, bytes: u64) -> AckEvent<'_> {
        testing::ack(
            rtt,
            Instant::from_millis(now),
            Instant::from_millis(sent),
            bytes,
        )
    }

    #[test]
    fn slow_start_then_halving_once_per_window() {
        let r = testing::rtt_after(None);
        let mut cc = NewReno::new(&CcConfig::default());
        assert_eq!(cc.window(), 14_600);
        cc.on_ack(&ack(&r, 10, 1, 1460));
        assert_eq!(cc.window(), 16_060);
        let loss = |now, sent| CongestionEvent {
            now: Instant::from_millis(now),
            sent: Instant::from_millis(sent),
            lost_bytes: 1460,
            bytes_in_flight: 10_000,
            timeout: false,
        };
        cc.on_congestion_event(&loss(20, 15));
        assert_eq!(cc.window(), 8_030);
        // A second loss from the same flight does not reduce again.
        cc.on_congestion_event(&loss(21, 16));
        assert_eq!(cc.window(), 8_030);
        // A loss of data sent after recovery started does.
        cc.on_congestion_event(&loss(40, 30));
        assert_eq!(cc.window(), 4_015);
    }

    #[test]
    fn timeout_collapses_to_minimum() {
        let mut cc = NewReno::new(&CcConfig::default());
        cc.on_congestion_event(&CongestionEvent {
            now: Instant::from_millis(5),
            sent: Instant::from_millis(1),
            lost_bytes: 1460,
            bytes_in_flight: 14_600,
            timeout: true,
        });
        assert_eq!(cc.window(), cc.minimum_window());
        assert_eq!(cc.metrics().ssthresh, Some(7_300));
    }
}
