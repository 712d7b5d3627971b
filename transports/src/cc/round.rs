//! Round-trip "rounds" counted from send times.
//!
//! HyStart++ (RFC 9406 section 4.2), DCTCP's observation window (RFC 8257
//! section 3.3) and BBR's round counter all need to know when one window of
//! data has made the round trip. RFC 9406 marks a round with
//! `windowEnd = SND.NXT` and ends it when an ACK covers `windowEnd`; BBR uses
//! delivered-byte counts. A controller here sees neither sequence numbers nor
//! per-packet state, only each ACK's [`AckEvent::sent`](super::AckEvent)
//! (the send time of the newest segment it acknowledged). So a round that
//! starts at time `T` (the arrival time of the ACK that ended the previous
//! round) ends with the first ACK that acknowledges data sent at or after
//! `T`: exactly the data that was not yet in flight when the round began.
//! That matches `windowEnd = SND.NXT` except for segments sent in the same
//! nanosecond as the ACK that opened the round.

use crate::time::Instant;

/// Counts rounds from ACK arrival and send times.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoundTracker {
    /// When the current round began; `None` before the first ACK.
    start: Option<Instant>,
    /// Rounds completed so far.
    count: u64,
}

impl RoundTracker {
    /// Feeds one ACK: `now` is its arrival time, `sent` the send time of the
    /// newest segment it acknowledged. Returns `true` when this ACK ends the
    /// current round (and so starts the next one). The very first ACK starts
    /// round 1 and also returns `true`.
    pub(crate) fn on_ack(&mut self, now: Instant, sent: Instant) -> bool {
        let ends = match self.start {
            None => true,
            Some(start) => sent >= start,
        };
        if ends {
            self.start = Some(now);
            self.count = self.count.saturating_add(1);
        }
        ends
    }

    /// Rounds started so far (1 after the first ACK).
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Moves the start of the current round to `now`, so that it ends only
    /// once data sent from now on is acknowledged (BBR's ProbeRTT sets
    /// `next_round_delivered = delivered` the same way). The count does not
    /// change: the round is stretched, not ended.
    pub(crate) fn restart(&mut self, now: Instant) {
        self.start = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_ends_when_data_sent_after_its_start_is_acked() {
        let mut r = RoundTracker::default();
        assert!(r.on_ack(Instant::from_millis(10), Instant::from_millis(0)));
        assert_eq!(r.count(), 1);
        // Data sent before 10 ms is still the first round's.
        assert!(!r.on_ack(Instant::from_millis(11), Instant::from_millis(1)));
        assert!(!r.on_ack(Instant::from_millis(19), Instant::from_millis(9)));
        // Data sent at 10 ms comes back: one round trip has passed.
        assert!(r.on_ack(Instant::from_millis(20), Instant::from_millis(10)));
        assert_eq!(r.count(), 2);
        assert!(!r.on_ack(Instant::from_millis(21), Instant::from_millis(12)));
        r.restart(Instant::from_millis(22));
        assert_eq!(r.count(), 2);
        // Data sent between 20 and 22 ms no longer ends the round.
        assert!(!r.on_ack(Instant::from_millis(23), Instant::from_millis(21)));
        assert!(r.on_ack(Instant::from_millis(32), Instant::from_millis(22)));
        assert_eq!(r.count(), 3);
    }
}
