//! ACK processing and loss recovery: cumulative and selective
//! acknowledgements, RTT samples (RFC 7323 4 RTTM or Karn's algorithm,
//! RFC 6298 3), duplicate-ACK counting (RFC 5681 2), SACK-based recovery
//! (RFC 6675) or NewReno fast retransmit without SACK (RFC 6582), and the
//! feedback the congestion controller gets (RFC 3168 6.1.2 for ECE).

use core::time::Duration;

use super::connection::TcpConnection;
use super::options::ParsedOptions;
use super::scoreboard::DUP_THRESH;
use super::state::State;
use crate::cc::{AckEvent, CongestionEvent, Controller, EcnEvent};
use crate::segment::{CloseReason, Flags, RxSegment};
use crate::time::Instant;
use proto::SeqNum;

impl TcpConnection {
    /// The fifth check of RFC 9293 3.10.7.4. Returns `false` when the
    /// segment must be dropped.
    pub(super) fn process_ack(
        &mut self,
        now: Instant,
        seg: &RxSegment,
        opts: &ParsedOptions,
    ) -> bool {
        let h = &seg.header;
        let Some((ack, old_ack)) = self.acceptable_ack(now, h.ack) else {
            return false;
        };
        let window_changed = !old_ack && self.update_send_window(SeqNum(h.seq), h.window, ack);

        let prior_una = self.snd_una;
        let (mut delivered, mut newest_sent) = (0, None);
        if ack > self.snd_una {
            (delivered, newest_sent) = self.on_cumulative_ack(now, ack, opts);
        }
        let (newly_sacked, dsack) = if self.neg.sack {
            self.on_sack_blocks(now, opts, &mut newest_sent)
        } else {
            (0, false)
        };
        delivered += newly_sacked;
        if delivered > 0 {
            // An ACK of new data ends a probe episode and restarts the PTO.
            self.tlp_out = false;
            self.tlp_deadline = None;
        }
        self.check_probe_repair(now, ack, prior_una, delivered, dsack);

        // Duplicate ACK: RFC 5681 2 for the classic case; with SACK, RFC 6675 2
        // counts ACKs that SACK new data.
        let f = h.flags;
        let classic = seg.payload_len == 0
            && !f.contains(Flags::SYN)
            && !f.contains(Flags::FIN)
            && !window_changed;
        if !old_ack
            && ack == prior_una
            && self.snd_nxt > self.snd_una
            && (classic || newly_sacked > 0)
        {
            self.dupacks += 1;
            self.stats.dup_acks += 1;
        }
        if ack > prior_una && (!self.in_recovery || !self.neg.sack) {
            self.dupacks = 0;
        }
        if self.in_recovery && self.snd_una >= self.recovery_point {
            // RFC 6675 5 / RFC 6582 3.2 step 3: a full ACK ends recovery.
            self.in_recovery = false;
            self.dupacks = 0;
            self.rtx_allowance = 0;
            self.prr = None;
        }
        self.detect_loss(now, ack > prior_una, newest_sent);
        if self.prr.is_some() {
            let (pipe, ssthresh, mss) = (self.flight(), self.cc.window(), u64::from(self.smss()));
            if let Some(prr) = &mut self.prr {
                prr.on_ack(delivered, pipe, ssthresh, mss);
            }
        }
        self.report_delivery(now, delivered, newest_sent, f.contains(Flags::ECE));
        self.on_fin_acked(now);
        true
    }

    /// Where the ACK field points, as a send offset, and whether it is old
    /// (below SND.UNA); `None` when the segment must be dropped.
    fn acceptable_ack(&mut self, now: Instant, ack_field: u32) -> Option<(u64, bool)> {
        let una_seq = self.snd_seq(self.snd_una);
        let diff = i64::from(SeqNum(ack_field).diff(una_seq));
        let outstanding = (self.snd_nxt - self.snd_una) as i64;
        if diff > outstanding {
            // RFC 9293 3.10.7.4: an ACK of something not yet sent is
            // answered with an ACK and the segment dropped; RFC 5961 5.2
            // makes that ACK a rate-limited challenge ACK.
            self.stats.drops.bad_ack += 1;
            self.challenge_ack(now);
            return None;
        }
        if diff < -(self.max_snd_wnd.min(i64::MAX as u64) as i64) {
            // RFC 5961 5.2: too old to come from this connection's peer.
            self.stats.drops.bad_ack += 1;
            self.challenge_ack(now);
            return None;
        }
        // An old ACK (below SND.UNA) moves nothing but the segment stays.
        Some((self.snd_una + diff.max(0) as u64, diff < 0))
    }

    /// Window update (RFC 9293 3.10.7.4, SND.WL1/SND.WL2 rule). Returns
    /// whether the window changed.
    fn update_send_window(&mut self, seq: SeqNum, window: u16, ack: u64) -> bool {
        let wnd = u64::from(window) << self.neg.snd_wscale;
        if !(self.snd_wl1.lt(seq) || (self.snd_wl1 == seq && self.snd_wl2 <= ack)) {
            return false;
        }
        let changed = wnd != self.snd_wnd;
        self.snd_wnd = wnd;
        self.snd_wl1 = seq;
        self.snd_wl2 = ack;
        self.max_snd_wnd = self.max_snd_wnd.max(wnd);
        changed
    }

    /// SND.UNA advances to `ack`: the newly acknowledged bytes leave the
    /// scoreboard, an RTT sample is taken, the RTO restarts. Returns the
    /// bytes delivered and the send time of the newest of them.
    fn on_cumulative_ack(
        &mut self,
        now: Instant,
        ack: u64,
        opts: &ParsedOptions,
    ) -> (u64, Option<Instant>) {
        let cum = self.sent.ack_cumulative(now, ack, &mut self.rate);
        self.snd_una = ack;
        // RTTM (RFC 7323 4) when the echo is unambiguous: not older than
        // the latest transmission of the lowest segment acknowledged.
        // An older echo means the receiver answered a retransmission
        // with the TS.Recent of an earlier transmission (RFC 7323 4.2's
        // lost-ACK case); using it would inflate SRTT by the whole RTO
        // and, repeated, let the RTO run away. Otherwise Karn.
        let ts = match (self.neg.timestamps, opts.timestamp, cum.oldest_sent) {
            (true, Some((_, tsecr)), Some(oldest)) => {
                let since = self.ts_clock(oldest).wrapping_sub(tsecr) as i32;
                if since <= 0 {
                    self.ts_sample(now, tsecr)
                } else {
                    None
                }
            }
            _ => None,
        };
        let sample = ts.or(cum.rtt_candidate.map(|sent| now - sent));
        if let Some(s) = sample {
            self.rtt.update(s);
        }
        // RFC 6298 5.3: restart the timer for what is still out.
        self.backoff = 0;
        self.consecutive_rtos = 0;
        self.rto_deadline = None;
        self.unacked_since = (self.snd_una < self.snd_nxt).then_some(now);
        (cum.delivered, cum.newest_sent)
    }

    /// Applies the SACK blocks (RFC 2018) to the scoreboard. Returns the
    /// bytes newly SACKed and whether the first block was a D-SACK; moves
    /// `newest_sent` to the newest send time among them.
    fn on_sack_blocks(
        &mut self,
        now: Instant,
        opts: &ParsedOptions,
        newest_sent: &mut Option<Instant>,
    ) -> (u64, bool) {
        let mut newly_sacked = 0;
        let mut dsack = false;
        let una_seq = self.snd_seq(self.snd_una);
        let block = |b: Option<(u32, u32)>| {
            let (l, r) = b?;
            Some((
                SeqNum(l).to_offset(self.snd_una, una_seq)?,
                SeqNum(r).to_offset(self.snd_una, una_seq)?,
            ))
        };
        // RFC 2883 4: the first block is a D-SACK if it lies below the
        // cumulative ACK or inside the second block.
        if let Some((lo, hi)) = block(opts.sack[0]) {
            let inside_second = block(opts.sack[1]).is_some_and(|(l2, h2)| l2 <= lo && hi <= h2);
            if lo < hi && (hi <= self.snd_una || inside_second) {
                dsack = true;
                self.stats.dsacks_received += 1;
            }
        }
        for &(l, r) in opts.sack.iter().flatten() {
            self.stats.sack_blocks_received += 1;
            let una_seq = self.snd_seq(self.snd_una);
            let lo = SeqNum(l).to_offset(self.snd_una, una_seq);
            let hi = SeqNum(r).to_offset(self.snd_una, una_seq);
            let (Some(lo), Some(hi)) = (lo, hi) else {
                continue;
            };
            // Blocks below SND.UNA (D-SACK) or beyond SND.NXT are not
            // used (RFC 2018 does not let them change the scoreboard).
            if lo >= hi || lo < self.snd_una || hi > self.snd_nxt {
                continue;
            }
            let (bytes, t) = self.sent.sack(now, lo, hi, &mut self.rate);
            newly_sacked += bytes;
            if let Some(t) = t {
                *newest_sent = Some(newest_sent.map_or(t, |n| n.max(t)));
            }
        }
        (newly_sacked, dsack)
    }

    /// RFC 8985 7.4: did the tail loss probe repair a loss? A D-SACK says
    /// the original arrived too: no loss. With SACK, an ACK reaching what
    /// was outstanding at the probe without one means the probe filled the
    /// hole; without SACK only an ACK beyond it (Linux's rule). A loss the
    /// probe repaired must reach the controller.
    fn check_probe_repair(
        &mut self,
        now: Instant,
        ack: u64,
        prior_una: u64,
        delivered: u64,
        dsack: bool,
    ) {
        let Some((high, sent)) = self.tlp_rtx else {
            return;
        };
        let repaired = if self.neg.sack {
            ack >= high
        } else {
            ack > high
        };
        if dsack {
            self.tlp_rtx = None;
        } else if repaired {
            self.tlp_rtx = None;
            if !self.in_recovery {
                let flight = self.flight();
                self.cc.on_congestion_event(&CongestionEvent {
                    now,
                    sent,
                    lost_bytes: 0,
                    bytes_in_flight: flight,
                    timeout: false,
                });
                self.stats.tlp_repairs += 1;
            }
        } else if ack == prior_una && delivered == 0 {
            self.tlp_rtx = None;
        }
    }

    /// Tells the controller what this ACK delivered: its ECN feedback
    /// first, then the ACK with the delivery-rate sample.
    fn report_delivery(
        &mut self,
        now: Instant,
        delivered: u64,
        newest_sent: Option<Instant>,
        ece: bool,
    ) {
        let sample = self.rate.take_sample();
        if delivered == 0 {
            return;
        }
        if self.neg.ecn {
            // Before on_ack, so an ACK that reports congestion does not
            // also grow the window.
            self.on_ece(now, ece, delivered, newest_sent);
        }
        let flight = self.flight();
        let (rate, app_limited) = sample.map_or((None, false), |s| (s.rate, s.app_limited));
        if rate.is_some() {
            self.last_delivery_rate = rate;
        }
        self.cc.on_ack(&AckEvent {
            now,
            sent: newest_sent.unwrap_or(now),
            bytes_acked: delivered,
            bytes_in_flight: flight,
            app_limited,
            delivery_rate: rate,
            in_recovery: self.in_recovery,
            rtt: &self.rtt,
        });
    }

    /// Our FIN (at send offset send_len + 1) acknowledged?
    fn on_fin_acked(&mut self, now: Instant) {
        if self.fin_sent && self.snd_una > self.fin_offset() {
            match self.state {
                State::FinWait1 => self.state = State::FinWait2,
                State::Closing => self.enter_time_wait(now),
                State::LastAck => self.enter_closed(CloseReason::Graceful),
                _ => {}
            }
        }
    }

    /// Marks losses and enters recovery when the evidence is there.
    fn detect_loss(&mut self, now: Instant, advanced: bool, newest_delivered: Option<Instant>) {
        if self.neg.sack {
            let smss = u64::from(self.smss());
            if let (true, Some(newest), Some(srtt)) =
                (self.in_recovery, newest_delivered, self.rtt.smoothed())
            {
                // A retransmission unanswered for an RTT and a quarter
                // while later data got through was lost too; without this
                // only the RTO would find it.
                let wait = srtt + srtt / 4;
                let older_than =
                    Instant::from_nanos(now.as_nanos().saturating_sub(wait.as_nanos() as u64));
                let n = self.sent.mark_lost_retransmissions(newest, older_than);
                self.stats.lost_retransmits += n;
            }
            let (lost, earliest) = self.sent.mark_lost_by_sack(smss);
            if !self.in_recovery && (self.dupacks >= DUP_THRESH || lost > 0) {
                // RFC 6675 5 step 4.3: the first unacknowledged segment is
                // retransmitted whatever IsLost says.
                let first = self.sent.mark_first_lost();
                let sent = first.map(|(_, t)| t).or(earliest).unwrap_or(now);
                let bytes = lost + first.map_or(0, |(b, _)| b);
                self.enter_recovery(now, sent, bytes);
            }
        } else if !self.in_recovery && self.dupacks >= DUP_THRESH {
            // RFC 6582 3.2 step 2: three duplicate ACKs.
            if let Some((bytes, sent)) = self.sent.mark_first_lost() {
                self.enter_recovery(now, sent, bytes);
            }
        } else if self.in_recovery && advanced {
            // RFC 6582 3.2 step 5: a partial ACK exposes the next hole,
            // which is retransmitted at once.
            if self.sent.mark_first_lost().is_some() {
                self.rtx_allowance = 1;
            }
        }
    }

    fn enter_recovery(&mut self, now: Instant, sent: Instant, lost_bytes: u64) {
        self.in_recovery = true;
        self.recovery_point = self.snd_nxt;
        self.rtx_allowance = 1;
        self.stats.fast_recoveries += 1;
        let flight = self.flight();
        self.cc.on_congestion_event(&CongestionEvent {
            now,
            sent,
            lost_bytes,
            bytes_in_flight: flight,
            timeout: false,
        });
        self.prr = (!self.cc.governs_recovery())
            .then(|| super::prr::Prr::start(self.snd_nxt.saturating_sub(self.snd_una)));
    }

    /// ECN feedback (RFC 3168 6.1.2): a controller that wants per-ACK
    /// feedback (DCTCP) gets it through `on_ecn`; otherwise ECE reduces the
    /// window once per window of data, like a loss, and the next new data
    /// segment carries CWR.
    fn on_ece(&mut self, now: Instant, ece: bool, acked: u64, newest_sent: Option<Instant>) {
        self.cc.on_ecn(&EcnEvent {
            now,
            acked_bytes: acked,
            ce_bytes: if ece { acked } else { 0 },
        });
        if self.cc_wants_ecn() || !ece {
            return;
        }
        if self.snd_una > self.ecn_recovery_point && !self.in_recovery {
            self.ecn_recovery_point = self.snd_nxt;
            self.cwr_pending = true;
            let flight = self.flight();
            self.cc.on_congestion_event(&CongestionEvent {
                now,
                sent: newest_sent.unwrap_or(now),
                lost_bytes: 0,
                bytes_in_flight: flight,
                timeout: false,
            });
        }
    }

    /// RTTM (RFC 7323 4.1): the echoed timestamp is our own clock.
    pub(super) fn ts_sample(&self, now: Instant, tsecr: u32) -> Option<Duration> {
        let elapsed = self.ts_clock(now).wrapping_sub(tsecr);
        (elapsed as i32 >= 0).then(|| Duration::from_micros(u64::from(elapsed)))
    }

    /// Bytes believed in the network. Without SACK, each duplicate ACK
    /// stands for one segment that left the network (RFC 5681 3.2 step 4's
    /// window inflation, expressed as a smaller pipe).
    pub(super) fn flight(&self) -> u64 {
        let pipe = self.sent.pipe();
        if self.neg.sack {
            pipe
        } else {
            pipe.saturating_sub(self.dupacks * u64::from(self.smss()))
        }
    }
}
