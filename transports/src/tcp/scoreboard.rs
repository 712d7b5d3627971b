//! The send side without bytes: every segment in flight, as a range of
//! sequence offsets with its send time and SACK/loss marks. Loss marking
//! follows RFC 6675 (IsLost with DupThresh = 3); `pipe` is RFC 6675 2's.

use std::collections::VecDeque;

use super::rate::{DeliveryRate, RateSnapshot};
use crate::time::Instant;

/// RFC 6675 2: DupThresh.
pub const DUP_THRESH: u64 = 3;

/// A segment sent and not yet cumulatively acknowledged. Offsets are
/// sequence offsets from the ISS (1 is the first data byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentSeg {
    /// First sequence offset.
    pub start: u64,
    /// One past the last sequence offset (FIN included).
    pub end: u64,
    /// The segment carries our FIN as its last sequence number.
    pub fin: bool,
    /// Last (re)transmission time.
    pub sent: Instant,
    /// Sent more than once (Karn's algorithm skips it for RTT).
    pub retransmitted: bool,
    /// The peer SACKed all of it.
    pub sacked: bool,
    /// Declared lost (RFC 6675 IsLost, NewReno, or RTO).
    pub lost: bool,
    /// Lost and not yet retransmitted since.
    pub needs_rtx: bool,
    /// Delivery state when sent.
    pub rate: RateSnapshot,
}

impl SentSeg {
    /// Sequence-space length.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the segment is empty (never true for a stored segment).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// What a cumulative ACK removed.
#[derive(Debug, Clone, Copy, Default)]
pub struct CumAck {
    /// Bytes newly delivered (not counting those SACKed before).
    pub delivered: u64,
    /// Send time of the most recently sent segment it acknowledged.
    pub newest_sent: Option<Instant>,
    /// Latest transmission time of the lowest segment it acknowledged.
    pub oldest_sent: Option<Instant>,
    /// Karn's RTT sample point (RFC 6298 3): the send time of the oldest
    /// newly acknowledged segment that was not SACKed before, but only when
    /// none of the acknowledged segments was ever retransmitted (an ACK
    /// covering a retransmission is ambiguous, as in Linux).
    pub rtt_candidate: Option<Instant>,
    /// Some acknowledged segment was retransmitted.
    pub any_retransmitted: bool,
}

/// Segments in flight, ordered by sequence offset. `pipe` is kept as a
/// running sum so the per-ACK and per-segment paths stay O(1) outside loss
/// recovery.
#[derive(Debug, Clone, Default)]
pub struct Scoreboard {
    segs: VecDeque<SentSeg>,
    /// Sum of lengths of segments counted by `pipe`.
    pipe: u64,
    /// Number of SACKed segments held.
    sacked: usize,
    /// Number of segments waiting for retransmission (`needs_rtx`).
    pending_rtx: usize,
}

/// Whether a segment counts towards `pipe`.
fn in_pipe(s: &SentSeg) -> bool {
    !s.sacked && !s.needs_rtx
}

impl Scoreboard {
    /// SACK holes: runs of segments not SACKed that lie below a SACKed
    /// one (what the receiver is missing, as far as SACK tells). Walks the
    /// board: for reports, not the per-ACK path.
    pub fn holes(&self) -> u64 {
        if self.sacked == 0 {
            return 0;
        }
        let (mut holes, mut in_gap) = (0, false);
        for s in &self.segs {
            if s.sacked {
                holes += u64::from(in_gap);
                in_gap = false;
            } else {
                in_gap = true;
            }
        }
        holes
    }

    /// Records a newly sent segment (its start is the previous end).
    pub fn push(&mut self, seg: SentSeg) {
        if in_pipe(&seg) {
            self.pipe += seg.len();
        }
        self.sacked += usize::from(seg.sacked);
        self.pending_rtx += usize::from(seg.needs_rtx);
        self.segs.push_back(seg);
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// The oldest segment.
    pub fn first(&self) -> Option<&SentSeg> {
        self.segs.front()
    }

    /// Segment `i`.
    pub fn get(&self, i: usize) -> Option<&SentSeg> {
        self.segs.get(i)
    }

    /// Segment `i` was sent again at `now`.
    pub fn mark_retransmitted(&mut self, i: usize, now: Instant, snap: RateSnapshot) {
        let Some(s) = self.segs.get_mut(i) else {
            return;
        };
        let was = in_pipe(s);
        self.pending_rtx -= usize::from(s.needs_rtx);
        s.needs_rtx = false;
        s.retransmitted = true;
        s.sent = now;
        s.rate = snap;
        if !was && in_pipe(s) {
            self.pipe += s.len();
        }
    }

    /// Iterates in sequence order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &SentSeg> + ExactSizeIterator {
        self.segs.iter()
    }

    /// Removes everything at or below `ack` and trims a partially acknowledged
    /// segment, feeding delivered bytes to the rate estimator.
    pub fn ack_cumulative(&mut self, now: Instant, ack: u64, rate: &mut DeliveryRate) -> CumAck {
        let mut out = CumAck::default();
        for _ in 0..self.segs.len() {
            let Some(seg) = self.segs.front_mut() else {
                break;
            };
            if seg.start >= ack {
                break;
            }
            let acked_end = seg.end.min(ack);
            let bytes = acked_end - seg.start;
            if in_pipe(seg) {
                self.pipe -= bytes;
            }
            if !seg.sacked {
                rate.on_delivered(now, bytes, seg.sent, &seg.rate);
                out.delivered += bytes;
            }
            out.newest_sent = Some(out.newest_sent.map_or(seg.sent, |t| t.max(seg.sent)));
            out.oldest_sent.get_or_insert(seg.sent);
            out.any_retransmitted |= seg.retransmitted;
            if !seg.sacked {
                out.rtt_candidate.get_or_insert(seg.sent);
            }
            if acked_end == seg.end {
                self.sacked -= usize::from(seg.sacked);
                self.pending_rtx -= usize::from(seg.needs_rtx);
                self.segs.pop_front();
            } else {
                seg.start = acked_end;
                break;
            }
        }
        if out.any_retransmitted {
            out.rtt_candidate = None;
        }
        out
    }

    /// Marks segments wholly inside `[left, right)` as SACKed. Returns newly
    /// SACKed bytes and the newest send time among them.
    pub fn sack(
        &mut self,
        now: Instant,
        left: u64,
        right: u64,
        rate: &mut DeliveryRate,
    ) -> (u64, Option<Instant>) {
        let mut bytes = 0;
        let mut newest = None;
        let from = self.segs.partition_point(|s| s.end <= left);
        for seg in self.segs.iter_mut().skip(from) {
            if seg.start >= right {
                break;
            }
            if seg.sacked || seg.start < left || seg.end > right {
                continue;
            }
            if in_pipe(seg) {
                self.pipe -= seg.len();
            }
            self.pending_rtx -= usize::from(seg.needs_rtx);
            seg.sacked = true;
            seg.needs_rtx = false;
            self.sacked += 1;
            bytes += seg.len();
            rate.on_delivered(now, seg.len(), seg.sent, &seg.rate);
            newest = Some(newest.map_or(seg.sent, |t: Instant| t.max(seg.sent)));
        }
        (bytes, newest)
    }

    /// RFC 6675 4 IsLost: a segment is lost when at least DupThresh SACKed
    /// segments, or more than (DupThresh - 1) × `mss` SACKed bytes, lie above
    /// it. Marks such segments; returns newly lost bytes and the send time
    /// of the earliest one.
    pub fn mark_lost_by_sack(&mut self, mss: u64) -> (u64, Option<Instant>) {
        if self.sacked == 0 {
            return (0, None);
        }
        let mut sacked_segs = 0u64;
        let mut sacked_bytes = 0u64;
        let mut lost_bytes = 0;
        let mut earliest = None;
        for seg in self.segs.iter_mut().rev() {
            if seg.sacked {
                sacked_segs += 1;
                sacked_bytes += seg.len();
                continue;
            }
            if seg.lost {
                continue;
            }
            if sacked_segs >= DUP_THRESH || sacked_bytes > (DUP_THRESH - 1) * mss {
                if in_pipe(seg) {
                    self.pipe -= seg.len();
                }
                self.pending_rtx += usize::from(!seg.needs_rtx);
                seg.lost = true;
                seg.needs_rtx = true;
                lost_bytes += seg.len();
                earliest = Some(seg.sent);
            }
        }
        (lost_bytes, earliest)
    }

    /// Lost-retransmission detection (the idea of RACK, RFC 8985 6.2, kept
    /// to retransmissions): a retransmitted segment is lost again when a
    /// segment sent after it was delivered (`newest_delivered` is that
    /// segment's send time) and it was sent at or before `older_than` (an
    /// RTT and a reordering allowance ago). Returns how many were marked.
    pub fn mark_lost_retransmissions(
        &mut self,
        newest_delivered: Instant,
        older_than: Instant,
    ) -> u64 {
        if self.segs.len() == self.pending_rtx + self.sacked {
            return 0;
        }
        let mut n = 0;
        for seg in self.segs.iter_mut() {
            if seg.retransmitted
                && seg.lost
                && !seg.needs_rtx
                && !seg.sacked
                && seg.sent < newest_delivered
                && seg.sent <= older_than
            {
                self.pipe -= seg.len();
                self.pending_rtx += 1;
                seg.needs_rtx = true;
                n += 1;
            }
        }
        n
    }

    /// Marks the first unSACKed segment lost (NewReno, RFC 6582 3.2), unless
    /// it already is. Returns its length and send time.
    pub fn mark_first_lost(&mut self) -> Option<(u64, Instant)> {
        let seg = self.segs.iter_mut().find(|s| !s.sacked)?;
        if seg.lost {
            return None;
        }
        if in_pipe(seg) {
            self.pipe -= seg.len();
        }
        self.pending_rtx += usize::from(!seg.needs_rtx);
        seg.lost = true;
        seg.needs_rtx = true;
        Some((seg.len(), seg.sent))
    }

    /// RTO (RFC 6675 5.1, RFC 5681 3.1): every unSACKed segment is lost.
    /// Returns the lost bytes and the send time of the first.
    pub fn mark_all_lost(&mut self) -> (u64, Option<Instant>) {
        let mut bytes = 0;
        let mut first = None;
        for seg in self.segs.iter_mut().filter(|s| !s.sacked) {
            if in_pipe(seg) {
                self.pipe -= seg.len();
            }
            self.pending_rtx += usize::from(!seg.needs_rtx);
            seg.lost = true;
            seg.needs_rtx = true;
            bytes += seg.len();
            first.get_or_insert(seg.sent);
        }
        (bytes, first)
    }

    /// RFC 6675 2 pipe: bytes believed in the network — unSACKed segments
    /// that are not lost, plus lost ones already retransmitted.
    pub fn pipe(&self) -> u64 {
        self.pipe
    }

    /// `pipe` recomputed from scratch (for invariant checks in tests).
    pub fn pipe_recount(&self) -> u64 {
        self.segs
            .iter()
            .filter(|s| in_pipe(s))
            .map(SentSeg::len)
            .sum()
    }

    /// RFC 6675 NextSeg rule 1: the first lost segment not yet retransmitted.
    pub fn next_lost(&self) -> Option<usize> {
        if self.pending_rtx == 0 {
            return None;
        }
        self.segs.iter().position(|s| s.needs_rtx && !s.sacked)
    }

    /// Splits segment `i` so that it holds at most `len` sequence numbers.
    pub fn split(&mut self, i: usize, len: u64) {
        let Some(seg) = self.segs.get_mut(i) else {
            return;
        };
        if len == 0 || seg.len() <= len {
            return;
        }
        let mut tail = *seg;
        seg.end = seg.start + len;
        seg.fin = false;
        tail.start = seg.end;
        self.sacked += usize::from(tail.sacked);
        self.pending_rtx += usize::from(tail.needs_rtx);
        self.segs.insert(i + 1, tail);
    }

    /// Whether any segment is SACKed.
    pub fn any_sacked(&self) -> bool {
        self.sacked > 0
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.segs.clear();
        self.pipe = 0;
        self.sacked = 0;
        self.pending_rtx = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: u64, end: u64, t: u64) -> SentSeg {
        SentSeg {
            start,
            end,
            fin: false,
            sent: Instant::from_millis(t),
            retransmitted: false,
            sacked: false,
            lost: false,
            needs_rtx: false,
            rate: RateSnapshot {
                delivered: 0,
                delivered_time: Instant::ZERO,
                first_sent_time: Instant::ZERO,
                app_limited: false,
            },
        }
    }

    #[test]
    fn three_sacked_segments_above_mark_a_loss() {
        let now = Instant::from_millis(10);
        let mut rate = DeliveryRate::new(Instant::ZERO);
        let mut sb = Scoreboard::default();
        for i in 0..5 {
            sb.push(seg(1 + i * 100, 101 + i * 100, i));
        }
        assert_eq!(sb.pipe(), 500);
        // SACK the 2nd and 3rd: two segments, 200 bytes > 2 * 90 bytes of mss.
        sb.sack(now, 101, 301, &mut rate);
        assert_eq!(sb.mark_lost_by_sack(100), (0, None));
        sb.sack(now, 301, 401, &mut rate);
        let (lost, t) = sb.mark_lost_by_sack(100);
        assert_eq!((lost, t), (100, Some(Instant::from_millis(0))));
        assert_eq!(sb.next_lost(), Some(0));
        assert_eq!(sb.pipe(), 100);
        let c = sb.ack_cumulative(now, 401, &mut rate);
        // Only the first segment's bytes are new; the SACKed ones counted before.
        assert_eq!(c.delivered, 100);
        assert_eq!(sb.first().map(|s| s.start), Some(401));
    }

    #[test]
    fn holes_count_the_gaps_below_sacked_segments() {
        let now = Instant::from_millis(10);
        let mut rate = DeliveryRate::new(Instant::ZERO);
        let mut sb = Scoreboard::default();
        for i in 0..6 {
            sb.push(seg(1 + i * 100, 101 + i * 100, i));
        }
        assert_eq!(sb.holes(), 0);
        // Segments: [0 missing][1 sacked][2 missing][3 missing][4 sacked][5 in flight]
        sb.sack(now, 101, 201, &mut rate);
        assert_eq!(sb.holes(), 1);
        sb.sack(now, 401, 501, &mut rate);
        assert_eq!(
            sb.holes(),
            2,
            "the unsacked tail above the highest SACK is no hole"
        );
        sb.ack_cumulative(now, 201, &mut rate);
        assert_eq!(sb.holes(), 1);
    }

    proptest::proptest! {
        /// Random pushes, ACKs, SACKs, loss marks, retransmissions and
        /// splits: the running `pipe` always equals a recount.
        #[test]
        fn pipe_counter_matches_a_recount(ops in proptest::collection::vec((0u8..7, 0u64..40, 0u64..40), 1..200)) {
            let mut rate = DeliveryRate::new(Instant::ZERO);
            let mut sb = Scoreboard::default();
            let mut next = 1u64;
            let mut una = 1u64;
            for (op, a, b) in ops {
                let now = Instant::from_micros(next);
                match op {
                    0 | 1 => {
                        let len = 1 + a * 10;
                        sb.push(seg(next, next + len, 0));
                        next += len;
                    }
                    2 => {
                        una = (una + a * 10).min(next);
                        sb.ack_cumulative(now, una, &mut rate);
                    }
                    3 => {
                        let l = una + a * 10;
                        sb.sack(now, l, l + b * 10, &mut rate);
                    }
                    4 => {
                        sb.mark_lost_by_sack(10 + b);
                        sb.mark_first_lost();
                        sb.mark_lost_retransmissions(now, Instant::from_micros(a * 5));
                    }
                    5 => {
                        if a % 5 == 0 {
                            sb.mark_all_lost();
                        }
                        if let Some(i) = sb.next_lost() {
                            sb.split(i, 1 + b);
                            let snap = rate.on_send(now, false);
                            sb.mark_retransmitted(i, now, snap);
                        }
                    }
                    _ => {}
                }
                proptest::prop_assert_eq!(sb.pipe(), sb.pipe_recount());
                proptest::prop_assert_eq!(sb.any_sacked(), sb.iter().any(|s| s.sacked));
                proptest::prop_assert_eq!(
                    sb.next_lost(),
                    sb.iter().position(|s| s.needs_rtx && !s.sacked)
                );
                proptest::prop_assert_eq!(sb.pending_rtx, sb.iter().filter(|s| s.needs_rtx).count());
            }
        }
    }

    #[test]
    fn partial_ack_trims_and_split_keeps_fin_last() {
        let mut rate = DeliveryRate::new(Instant::ZERO);
        let mut sb = Scoreboard::default();
        let mut s = seg(1, 1001, 0);
        s.fin = true;
        sb.push(s);
        sb.split(0, 400);
        let v: Vec<_> = sb.iter().map(|s| (s.start, s.end, s.fin)).collect();
        assert_eq!(v, vec![(1, 401, false), (401, 1001, true)]);
        sb.ack_cumulative(Instant::ZERO, 201, &mut rate);
        assert_eq!(sb.first().map(|s| s.start), Some(201));
    }
}
