//! Scoreboard exactness: the header-only receiver's equivalent of checking
//! that the received bytes equal the sent bytes.
//!
//! The simulator knows every byte range the datapath model placed and from
//! which send-stream offsets it came. A transport's `Received { upto }`
//! events must then move strictly forward, cover only bytes that were
//! actually placed from the matching send-stream offsets, and end at exactly
//! the length the peer sent. Together that means every stream offset was
//! delivered to the application once, in order, with the right content.

use core::ops::Range;
use std::collections::BTreeMap;

use crate::time::Instant;

/// A violation of scoreboard exactness.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScoreboardError {
    /// `Received { upto }` did not move forward.
    #[error("in-order point went from {previous} to {reported}; it must strictly increase")]
    NotIncreasing {
        /// The previous in-order point.
        previous: u64,
        /// What the transport reported.
        reported: u64,
    },
    /// The transport reported bytes in order that were never placed.
    #[error("in-order point {reported} covers bytes {missing:?} that were never placed")]
    NeverPlaced {
        /// What the transport reported.
        reported: u64,
        /// The first unplaced range below it.
        missing: Range<u64>,
    },
    /// A segment's sequence number and its payload disagree: the datapath
    /// would write send-stream bytes at the wrong receive offsets.
    #[error(
        "segment with sequence number for stream offset {seq_offset} carried send-stream bytes from {payload_offset}"
    )]
    Misplaced {
        /// Offset the sequence number maps to.
        seq_offset: u64,
        /// First send-stream offset of the payload.
        payload_offset: u64,
    },
    /// The in-order point went past the end of what the peer sent.
    #[error("in-order point {reported} is beyond the {len} bytes the peer sent")]
    Overrun {
        /// What the transport reported.
        reported: u64,
        /// Bytes the peer sent.
        len: u64,
    },
    /// The transport reported the peer's FIN at a different length.
    #[error("peer closed at length {reported} but sent {len} bytes")]
    WrongFinLength {
        /// What the transport reported.
        reported: u64,
        /// Bytes the peer sent.
        len: u64,
    },
    /// The transfer ended short of the bytes the peer sent.
    #[error("in-order point ended at {reported}, short of the {len} bytes the peer sent")]
    Short {
        /// Final in-order point.
        reported: u64,
        /// Bytes the peer sent.
        len: u64,
    },
}

/// What one receiver got, checked as it goes.
#[derive(Debug, Clone, Default)]
pub struct Scoreboard {
    /// Bytes the peer will send (the check's target).
    expected: u64,
    upto: u64,
    /// Placed ranges at or above `upto`, coalesced: start → end.
    placed: BTreeMap<u64, u64>,
    last_received_at: Option<Instant>,
}

impl Scoreboard {
    /// A scoreboard for a receiver whose peer sends `expected` bytes.
    pub fn new(expected: u64) -> Self {
        Scoreboard {
            expected,
            ..Scoreboard::default()
        }
    }

    /// Bytes the peer sends.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// The in-order point reported so far.
    pub fn upto(&self) -> u64 {
        self.upto
    }

    /// When the last `Received` event came.
    pub fn last_received_at(&self) -> Option<Instant> {
        self.last_received_at
    }

    /// Whether every byte the peer sends was reported in order.
    pub fn is_complete(&self) -> bool {
        self.upto == self.expected
    }

    /// The datapath placed `accepted`, from a segment whose sequence number
    /// maps to `seq_offset` and whose payload starts at send-stream offset
    /// `payload_offset`.
    ///
    /// # Errors
    /// [`ScoreboardError::Misplaced`] if the two offsets differ.
    pub fn on_placed(
        &mut self,
        accepted: Range<u64>,
        seq_offset: u64,
        payload_offset: u64,
    ) -> Result<(), ScoreboardError> {
        if seq_offset != payload_offset {
            return Err(ScoreboardError::Misplaced {
                seq_offset,
                payload_offset,
            });
        }
        let (mut start, mut end) = (accepted.start.max(self.upto), accepted.end);
        if start >= end {
            return Ok(());
        }
        // Merge with an overlapping or adjacent range that starts before.
        if let Some((&s, &e)) = self.placed.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        // Absorb ranges that start inside the new one.
        let inside: Vec<u64> = self.placed.range(start..=end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some(e) = self.placed.remove(&s) {
                end = end.max(e);
            }
        }
        self.placed.insert(start, end);
        Ok(())
    }

    /// The transport refused the bytes placed at `range`: they no longer
    /// count as placed (the datapath forgets them too).
    pub fn on_discarded(&mut self, range: Range<u64>) {
        let (start, end) = (range.start.max(self.upto), range.end);
        if start >= end {
            return;
        }
        let hit: Vec<(u64, u64)> = self
            .placed
            .range(..end)
            .filter(|(_, &e)| e > start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in hit {
            self.placed.remove(&s);
            if s < start {
                self.placed.insert(s, start);
            }
            if e > end {
                self.placed.insert(end, e);
            }
        }
    }

    /// The transport reported `Received { upto }` at `now`.
    ///
    /// # Errors
    /// If `upto` does not increase, covers unplaced bytes, or passes the end.
    pub fn on_received(&mut self, now: Instant, upto: u64) -> Result<(), ScoreboardError> {
        if upto <= self.upto {
            return Err(ScoreboardError::NotIncreasing {
                previous: self.upto,
                reported: upto,
            });
        }
        if upto > self.expected {
            return Err(ScoreboardError::Overrun {
                reported: upto,
                len: self.expected,
            });
        }
        // [self.upto, upto) must lie inside one placed range.
        let covered = self
            .placed
            .range(..=self.upto)
            .next_back()
            .filter(|(_, &e)| e >= upto)
            .map(|(&s, &e)| (s, e));
        let Some((s, e)) = covered else {
            let hole_start = self
                .placed
                .range(..=self.upto)
                .next_back()
                .map_or(self.upto, |(_, &e)| e.max(self.upto));
            let hole_end = self
                .placed
                .range(hole_start..)
                .next()
                .map_or(upto, |(&s, _)| s.min(upto));
            return Err(ScoreboardError::NeverPlaced {
                reported: upto,
                missing: hole_start..hole_end.max(hole_start.saturating_add(1)),
            });
        };
        self.placed.remove(&s);
        if e > upto {
            self.placed.insert(upto, e);
        }
        self.upto = upto;
        self.last_received_at = Some(now);
        Ok(())
    }

    /// The transport reported the peer's FIN after `len` bytes.
    ///
    /// # Errors
    /// [`ScoreboardError::WrongFinLength`] if `len` is not what the peer sent.
    pub fn on_peer_closed(&self, len: u64) -> Result<(), ScoreboardError> {
        if len == self.expected {
            Ok(())
        } else {
            Err(ScoreboardError::WrongFinLength {
                reported: len,
                len: self.expected,
            })
        }
    }

    /// Final check.
    ///
    /// # Errors
    /// [`ScoreboardError::Short`] unless every byte was reported in order.
    pub fn finish(&self) -> Result<(), ScoreboardError> {
        if self.is_complete() {
            Ok(())
        } else {
            Err(ScoreboardError::Short {
                reported: self.upto,
                len: self.expected,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Instant = Instant::ZERO;

    #[test]
    fn in_order_and_out_of_order_placement_is_accepted() {
        let mut s = Scoreboard::new(300);
        s.on_placed(100..200, 100, 100).unwrap();
        s.on_placed(0..100, 0, 0).unwrap();
        s.on_received(T, 150).unwrap();
        s.on_placed(200..300, 200, 200).unwrap();
        s.on_received(T, 300).unwrap();
        s.finish().unwrap();
    }

    #[test]
    fn catches_skips_repeats_and_overruns() {
        let mut s = Scoreboard::new(300);
        s.on_placed(0..100, 0, 0).unwrap();
        s.on_placed(150..300, 150, 150).unwrap();
        assert_eq!(
            s.on_received(T, 200),
            Err(ScoreboardError::NeverPlaced {
                reported: 200,
                missing: 100..150
            })
        );
        s.on_received(T, 100).unwrap();
        assert!(matches!(
            s.on_received(T, 100),
            Err(ScoreboardError::NotIncreasing { .. })
        ));
        assert!(matches!(
            s.on_received(T, 400),
            Err(ScoreboardError::Overrun { .. })
        ));
        assert!(matches!(s.finish(), Err(ScoreboardError::Short { .. })));
        assert!(matches!(
            s.on_placed(0..10, 5, 0),
            Err(ScoreboardError::Misplaced { .. })
        ));
    }
}
