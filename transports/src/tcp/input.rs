//! Segment arrival: RFC 9293 3.10.7 event processing, with the RFC 5961
//! checks and PAWS (RFC 7323 5).

use core::time::Duration;

use super::connection::TcpConnection;
use super::options::{self, ParsedOptions};
use super::state::State;
use crate::segment::{CloseReason, Ecn, Event, Flags, RxSegment};
use crate::time::Instant;
use proto::SeqNum;

/// PAWS (RFC 7323 5) rejects a segment whose TSval is older than TS.Recent.
/// Taken literally with a microsecond clock (ours, and that of any fast
/// peer) it also rejects every segment merely reordered behind a later one,
/// pure ACKs included. PAWS exists to catch segments from a previous
/// wrap of the sequence space, which are far older than any reordering, so
/// we reject only TSvals more than this many ticks behind TS.Recent: 1 ms
/// of a microsecond clock, 1 s of Linux's millisecond clock (enough to
/// protect sequence wraps below ~34 Gbit/s for such a peer).
const PAWS_TOLERANCE: i32 = 1000;

/// RFC 7323 5.5: TS.Recent older than this is no longer trusted for PAWS.
/// The RFC's 24 days assume a clock of at most 1 kHz; ours ticks in
/// microseconds (see `output.rs`) and wraps its sign in 35.8 minutes, so a
/// shorter idle limit keeps PAWS from rejecting a live peer after a pause.
const PAWS_IDLE: Duration = Duration::from_secs(24 * 60);

impl TcpConnection {
    /// A segment arrived, its payload (if any) already placed by the
    /// datapath at `seg.accepted`. Whatever of that this connection does
    /// not take into its receive stream, because the segment failed a
    /// check or lay partly outside the window, it has the datapath forget
    /// ([`Event::Discarded`]): placed bytes count only once accepted.
    pub(super) fn on_segment(&mut self, now: Instant, seg: &RxSegment) {
        self.kept = 0..0;
        self.judge_segment(now, seg);
        let kept = core::mem::replace(&mut self.kept, 0..0);
        self.discard_unkept(&seg.accepted, kept);
    }

    /// Reports the parts of `placed` outside `kept`.
    fn discard_unkept(&mut self, placed: &core::ops::Range<u64>, kept: core::ops::Range<u64>) {
        // A closed connection's flow is removed with everything placed.
        if placed.is_empty() || self.state == State::Closed {
            return;
        }
        let (ks, ke) = if kept.is_empty() {
            (placed.end, placed.end)
        } else {
            (kept.start.max(placed.start), kept.end.min(placed.end))
        };
        let mut refused = false;
        for range in [placed.start..ks, ke.max(ks)..placed.end] {
            if !range.is_empty() {
                refused = true;
                self.events.push_back(Event::Discarded { range });
            }
        }
        self.stats.drops.payload_discarded += u64::from(refused);
    }

    fn judge_segment(&mut self, now: Instant, seg: &RxSegment) {
        self.stats.segments_received += u64::from(seg.wire_segments());
        let h = &seg.header;
        if h.dst_port != self.local_port || h.src_port != self.remote_port {
            self.stats.drops.wrong_ports += 1;
            return;
        }
        if self.state == State::Closed {
            if h.flags.is_connection_request() {
                // A new connection's: not ours to answer (see `Event`).
                self.events.push_back(Event::SynForListener);
                return;
            }
            self.stats.drops.closed += 1;
            self.reply_rst_when_closed(seg);
            return;
        }
        let opts = match options::parse(&seg.header.options) {
            Ok(o) => o,
            Err(_) => {
                self.stats.drops.bad_options += 1;
                return;
            }
        };
        // Any parsable segment shows the peer is alive (keepalive).
        self.last_recv = now;
        self.keepalives_unanswered = 0;
        if self.state == State::SynSent {
            self.on_segment_syn_sent(now, seg, &opts);
        } else {
            self.on_segment_synchronized(now, seg, &opts);
        }
    }

    /// RFC 9293 3.10.7.1: in CLOSED, answer anything but a RST with a RST.
    fn reply_rst_when_closed(&mut self, seg: &RxSegment) {
        let h = &seg.header;
        if h.flags.contains(Flags::RST) {
            return;
        }
        if h.flags.contains(Flags::ACK) {
            self.queue_rst(h.ack, None);
        } else {
            let len = seg_len(seg);
            self.queue_rst(0, Some(h.seq.wrapping_add(len)));
        }
    }

    /// RFC 9293 3.10.7.3, SYN-SENT.
    fn on_segment_syn_sent(&mut self, now: Instant, seg: &RxSegment, opts: &ParsedOptions) {
        let h = &seg.header;
        let f = h.flags;
        if f.contains(Flags::ACK) {
            let ack = SeqNum(h.ack);
            // Acceptable only if it acknowledges our SYN and nothing more.
            if ack != self.snd_seq(1) {
                self.stats.drops.bad_ack += 1;
                if !f.contains(Flags::RST) {
                    self.queue_rst(h.ack, None);
                }
                return;
            }
        }
        if f.contains(Flags::RST) {
            // RFC 5961 3.2 keeps RFC 9293's rule here: the RST is valid only
            // with an ACK of our SYN.
            if f.contains(Flags::ACK) {
                self.enter_closed(CloseReason::Refused);
            } else {
                self.stats.drops.bad_rst += 1;
            }
            return;
        }
        if !f.contains(Flags::SYN) {
            self.stats.drops.unexpected += 1;
            return;
        }
        self.take_peer_syn(now, seg, opts);
        // Data on a SYN is not accepted: RCV.NXT stays IRS + 1.
        if f.contains(Flags::ACK) {
            // RFC 3168 6.1.1: a SYN-ACK with ECE and without CWR accepts ECN.
            self.neg.ecn = self.config.ecn && f.contains(Flags::ECE) && !f.contains(Flags::CWR);
            self.syn_acked(now, opts);
            // RFC 7323 2.2: the window of a SYN-ACK is never scaled.
            self.snd_wnd = u64::from(h.window);
            self.max_snd_wnd = self.snd_wnd;
            self.snd_wl1 = SeqNum(h.seq);
            self.snd_wl2 = 1;
            self.state = State::Established;
            self.events.push_back(Event::Connected);
            self.ack_now = true;
        } else {
            // Simultaneous open (RFC 9293 3.5, figure 7): answer with
            // SYN-ACK from the same ISS.
            self.neg.ecn = self.config.ecn && f.contains(Flags::ECE) && f.contains(Flags::CWR);
            self.snd_wnd = u64::from(h.window);
            self.max_snd_wnd = self.snd_wnd;
            self.snd_wl1 = SeqNum(h.seq);
            self.state = State::SynReceived;
            self.syn_pending = true;
        }
    }

    /// Our SYN was acknowledged: take an RTT sample (Karn: not from a
    /// retransmitted SYN, unless timestamps say which one) and reset backoff.
    pub(super) fn syn_acked(&mut self, now: Instant, opts: &ParsedOptions) {
        self.snd_una = 1;
        let sample = match (self.neg.timestamps, opts.timestamp) {
            (true, Some((_, tsecr))) => self.ts_sample(now, tsecr),
            _ => match (self.syn_sent_at, self.syn_retransmitted) {
                (Some(t), false) => Some(now - t),
                _ => None,
            },
        };
        if let Some(s) = sample {
            self.rtt.update(s);
        }
        self.backoff = 0;
        self.consecutive_rtos = 0;
        self.rto_deadline = None;
        self.syn_pending = false;
    }

    /// RFC 9293 3.10.7.4: every state after SYN-SENT.
    fn on_segment_synchronized(&mut self, now: Instant, seg: &RxSegment, opts: &ParsedOptions) {
        let f = seg.header.flags;
        if self.state == State::SynReceived && self.on_repeated_syn(now, seg, opts) {
            return;
        }
        if self.state == State::TimeWait && self.syn_opens_anew(seg, opts) {
            self.stats.time_wait_reopened += 1;
            self.enter_closed(CloseReason::Graceful);
            self.events.push_back(Event::SynForListener);
            return;
        }
        if self.paws_rejects(now, f, opts) {
            return;
        }
        // Sequence acceptability (RFC 9293 3.10.7.4, first check).
        let seq = SeqNum(seg.header.seq);
        let Some(seg_off) = seq.to_offset(self.rcv_nxt, self.rcv_seq(self.rcv_nxt)) else {
            self.unacceptable(now, seg);
            return;
        };
        if !self.acceptable(seg_off, seg_len(seg), f.contains(Flags::RST)) {
            self.unacceptable(now, seg);
            return;
        }
        self.update_ts_recent(now, opts, seg_off);

        // Second check: RST (RFC 5961 3.2).
        if f.contains(Flags::RST) {
            if seg_off == self.rcv_nxt && self.state == State::TimeWait {
                // Both FINs and every byte were exchanged; the peer has
                // forgotten the connection (a closed Linux or zerosplit
                // end answers our re-ACK of its FIN with a RST). RFC 9293
                // 3.10.7.4 ends TIME-WAIT on it, as Linux does by default;
                // for the application it was a graceful close.
                self.stats.time_wait_resets += 1;
                self.enter_closed(CloseReason::Graceful);
            } else if seg_off == self.rcv_nxt {
                self.enter_closed(CloseReason::Reset);
            } else {
                self.stats.drops.bad_rst += 1;
                self.challenge_ack(now);
            }
            return;
        }
        // Fourth check: SYN in a synchronized state (RFC 5961 4.2).
        if f.contains(Flags::SYN) {
            self.stats.drops.syn_in_window += 1;
            self.challenge_ack(now);
            return;
        }
        // Fifth check: ACK.
        if !f.contains(Flags::ACK) {
            self.stats.drops.no_ack += 1;
            return;
        }
        let h = &seg.header;
        if self.state == State::SynReceived
            && !self.complete_passive_open(now, opts, h.ack, h.seq, h.window)
        {
            return;
        }
        if !self.process_ack(now, seg, opts) {
            return;
        }
        self.on_text_and_fin(now, seg, seg_off);
    }

    /// In SYN-RECEIVED, the peer's SYN again: a retransmitted SYN (resend
    /// our SYN-ACK) or, in a simultaneous open (RFC 9293 3.5, figure 8), a
    /// SYN-ACK that repeats its SYN and acknowledges ours, completing the
    /// handshake. Returns whether the segment was consumed.
    fn on_repeated_syn(&mut self, now: Instant, seg: &RxSegment, opts: &ParsedOptions) -> bool {
        let h = &seg.header;
        let f = h.flags;
        let seq = SeqNum(h.seq);
        if !f.contains(Flags::SYN) || f.contains(Flags::RST) || seq != self.irs {
            return false;
        }
        if !f.contains(Flags::ACK) {
            self.syn_pending = true;
        } else if SeqNum(h.ack) == self.snd_seq(1) && self.syn_sent_at.is_some() {
            // A SYN's window is never scaled (RFC 7323 2.2).
            self.establish(now, opts, seq, u64::from(h.window));
            self.ack_now = true;
        } else {
            self.stats.drops.bad_ack += 1;
            self.queue_rst(h.ack, None);
        }
        true
    }

    /// In TIME-WAIT, whether a SYN is a new incarnation's rather than an
    /// old duplicate (RFC 6191, RFC 1122 4.2.2.13; Linux's test): not
    /// older than TS.Recent by its timestamp, and either beyond what we
    /// acknowledged or newer by its timestamp. Anything else meets the
    /// challenge ACK of RFC 5961 4.2.
    fn syn_opens_anew(&self, seg: &RxSegment, opts: &ParsedOptions) -> bool {
        let h = &seg.header;
        if !h.flags.is_connection_request() {
            return false;
        }
        let age = match (self.neg.timestamps, opts.timestamp, self.ts_recent) {
            (true, Some((tsval, _)), Some((recent, _))) => Some(tsval.wrapping_sub(recent) as i32),
            _ => None,
        };
        if age.is_some_and(|a| a < 0) {
            return false;
        }
        let beyond = SeqNum(h.seq).gt(self.rcv_seq(self.rcv_nxt));
        beyond || age.is_some_and(|a| a > 0)
    }

    /// PAWS (RFC 7323 5.3 R1), before the sequence check: a segment whose
    /// timestamp is older than TS.Recent is dropped and answered with an
    /// ACK. Returns whether it was.
    fn paws_rejects(&mut self, now: Instant, f: Flags, opts: &ParsedOptions) -> bool {
        if !self.neg.timestamps || f.contains(Flags::RST) {
            return false;
        }
        let (Some((tsval, _)), Some((recent, at))) = (opts.timestamp, self.ts_recent) else {
            return false;
        };
        let stale = (recent.wrapping_sub(tsval) as i32) > PAWS_TOLERANCE;
        if stale && now - at < PAWS_IDLE {
            self.stats.drops.paws += 1;
            self.ack_now = true;
            return true;
        }
        false
    }

    /// RFC 7323 4.3: remember the timestamp of a segment that covers the
    /// point we last acknowledged.
    fn update_ts_recent(&mut self, now: Instant, opts: &ParsedOptions, seg_off: u64) {
        if let (true, Some((tsval, _))) = (self.neg.timestamps, opts.timestamp) {
            if seg_off <= self.last_ack_sent {
                let newer = self
                    .ts_recent
                    .is_none_or(|(r, _)| (tsval.wrapping_sub(r) as i32) >= 0);
                if newer {
                    self.ts_recent = Some((tsval, now));
                }
            }
        }
    }

    /// In SYN-RECEIVED, an ACK of our SYN establishes the connection; any
    /// other ACK is answered with a RST. Returns whether to go on.
    fn complete_passive_open(
        &mut self,
        now: Instant,
        opts: &ParsedOptions,
        ack: u32,
        seq: u32,
        window: u16,
    ) -> bool {
        let acked = SeqNum(ack);
        if acked.gt(self.snd_seq(self.snd_una)) && acked.le(self.snd_seq(self.snd_nxt)) {
            // The window in this ACK is the first scaled one.
            let wnd = u64::from(window) << self.neg.snd_wscale;
            self.establish(now, opts, SeqNum(seq), wnd);
            true
        } else {
            self.stats.drops.bad_ack += 1;
            self.queue_rst(ack, None);
            false
        }
    }

    /// The handshake completed: ESTABLISHED, with the peer's first window
    /// `wnd` (bytes) from its segment at `seq`.
    fn establish(&mut self, now: Instant, opts: &ParsedOptions, seq: SeqNum, wnd: u64) {
        self.syn_acked(now, opts);
        self.state = State::Established;
        self.events.push_back(Event::Connected);
        self.snd_wnd = wnd;
        self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
        self.snd_wl1 = seq;
        self.snd_wl2 = 1;
    }

    /// After the ACK: the ECN codepoint, the sixth and seventh checks
    /// (segment text) and the eighth (FIN).
    fn on_text_and_fin(&mut self, now: Instant, seg: &RxSegment, seg_off: u64) {
        let f = seg.header.flags;
        // ECN (RFC 3168 6.1.3, RFC 8257 3.2): note CE on data segments
        // (pure ACKs are not ECN-capable and say nothing).
        if self.neg.ecn && self.state.can_receive() && seg.payload_len > 0 {
            self.on_ecn_codepoint(now, seg);
        }
        if f.contains(Flags::CWR) {
            self.ece_latched = false;
        }

        // Seventh check: segment text.
        if self.state.can_receive() && seg.payload_len > 0 {
            self.process_data(now, seg, seg_off);
        } else if seg.payload_len > 0 {
            // Data after the peer's FIN: RFC 9293 says ignore.
            self.stats.drops.unexpected += 1;
        }

        // Sixth check's URG part (RFC 9293 3.10.7.4): note the urgent
        // byte. The pointer is the offset from SEG.SEQ of the byte after
        // it (RFC 6093, as Linux reads it with tcp_stdurg off); a mark
        // never moves back (an old segment's is stale).
        if f.contains(Flags::URG) && seg.header.urgent > 0 && self.state.can_receive() {
            let at = (seg_off + u64::from(seg.header.urgent)).saturating_sub(2);
            if self.urgent.is_none_or(|u| at > u) {
                self.urgent = Some(at);
            }
        }

        // Eighth check: FIN.
        if f.contains(Flags::FIN) && self.peer_fin.is_none() {
            let fin_off = seg_off + u64::from(seg.payload_len);
            if fin_off >= self.rcv_nxt {
                self.peer_fin = Some(fin_off);
            }
        }
        self.check_peer_fin(now);
    }

    /// RFC 9293 3.10.7.4 acceptability table, with two allowances: a zero
    /// window still admits a segment starting exactly at RCV.NXT so its
    /// ACK, RST or FIN is seen, and a zero-length segment may sit exactly at
    /// the right edge (as Linux accepts). The latter matters: a peer that
    /// filled our window sends its pure ACKs with SEG.SEQ = the edge, and
    /// refusing them starts an ACK war when both sides do it.
    /// A RST gets no such allowance (RFC 5961 3.2 keeps the strict window).
    fn acceptable(&self, seg_off: u64, len: u32, rst: bool) -> bool {
        let edge = self.rcv_adv_max.max(self.advertisable_edge()) + 1;
        let wnd = edge.saturating_sub(self.rcv_nxt);
        let in_window = |o: u64| o >= self.rcv_nxt && o < self.rcv_nxt + wnd;
        match (len, wnd) {
            (0, 0) => seg_off == self.rcv_nxt,
            (0, _) if rst => in_window(seg_off),
            (0, _) => seg_off >= self.rcv_nxt && seg_off <= self.rcv_nxt + wnd,
            (_, 0) => seg_off == self.rcv_nxt,
            (n, _) => in_window(seg_off) || in_window(seg_off + u64::from(n) - 1),
        }
    }

    /// An unacceptable segment: ACK it unless it is a RST (RFC 9293
    /// 3.10.7.4), and restart TIME-WAIT on a retransmitted FIN (3.10.7.4,
    /// eighth check).
    fn unacceptable(&mut self, now: Instant, seg: &RxSegment) {
        self.stats.drops.out_of_window += 1;
        if seg.header.flags.contains(Flags::RST) {
            self.stats.drops.bad_rst += 1;
            return;
        }
        if self.state == State::TimeWait && seg.header.flags.contains(Flags::FIN) {
            self.time_wait_deadline = Some(now + self.config.time_wait);
        }
        // RFC 2883 4: a duplicate of data already received is reported in a
        // D-SACK block so the sender can tell a spurious retransmission.
        // An unacceptable pure ACK is answered at most once per half
        // minimum RTO (Linux rate-limits these too): two ends that each
        // find the other's ACKs unacceptable would otherwise ping-pong
        // forever. Window and keepalive probes come less often than that.
        let f = seg.header.flags;
        if seg.payload_len == 0 && !f.contains(Flags::SYN) && !f.contains(Flags::FIN) {
            let gap = self.config.min_rto / 2;
            if self.oow_ack_at.is_some_and(|t| now - t < gap) {
                self.stats.oow_acks_suppressed += 1;
                return;
            }
            self.oow_ack_at = Some(now);
        }
        let rcv_seq = self.rcv_seq(self.rcv_nxt);
        if let (true, Some(off)) = (
            self.neg.sack && seg.payload_len > 0,
            SeqNum(seg.header.seq).to_offset(self.rcv_nxt, rcv_seq),
        ) {
            let end = off + u64::from(seg.payload_len);
            if off >= 1 && end <= self.rcv_nxt {
                self.dsack = Some((off - 1, end - 1));
            }
        }
        self.ack_now = true;
    }

    /// Payload the datapath placed: advance the in-order point or record an
    /// out-of-order range, and decide when to acknowledge (RFC 5681 4.2,
    /// RFC 9293 3.8.6.3).
    fn process_data(&mut self, now: Instant, seg: &RxSegment, seg_off: u64) {
        let len = u64::from(seg.payload_len);
        // A coalesced record (software GRO) counts as the wire segments it
        // stands for: the estimate is of one segment's size, so "ACK every
        // second full-sized segment" below holds per wire segment.
        self.rcv_mss_est = self.rcv_mss_est.max(u64::from(seg.wire_segment_len()));
        let seg_start = seg_off.saturating_sub(1);
        let seg_end = seg_start + len;
        let acc = &seg.accepted;
        let start = acc.start.max(seg_start);
        let end = acc.end.min(seg_end).min(self.recv_posted_end);
        if !acc.is_empty() && (start != acc.start || end != acc.end) {
            self.stats.drops.bad_placement += 1;
        }
        // RFC 9293 3.10.7.4: text beyond the window is trimmed, even where
        // the application has posted space for it. The window is the one
        // advertised (its largest right edge), not one we could advertise
        // now: a forger must not gain room we never offered.
        let end = end.min(self.rcv_adv_max);
        let rcv_stream = self.rcv_nxt - 1;
        if start >= end {
            // Nothing kept (beyond the window or a duplicate): tell the
            // sender where we are.
            self.ack_now = true;
            return;
        }
        self.kept = start..end;
        let ins = self.reasm.insert(rcv_stream, start..end);
        if let Some(range) = ins.forgotten.clone() {
            // Too many holes to remember: the datapath forgets the bytes
            // too, and the retransmission places them again.
            self.events.push_back(Event::Discarded { range });
        }
        self.stats.bytes_received += ins.new_bytes;
        if ins.new_bytes == 0 && self.neg.sack {
            self.dsack = Some((start, end));
        }
        if ins.out_of_order || ins.filled_hole || ins.new_bytes == 0 {
            // RFC 5681 4.2: out-of-order data and hole fills are ACKed at once.
            self.ack_now = true;
        }
        if ins.rcv_nxt > rcv_stream {
            self.rcv_nxt = ins.rcv_nxt + 1;
            self.unacked_bytes += ins.rcv_nxt - rcv_stream;
            if self.quick_acks_left > 0 {
                self.quick_acks_left -= 1;
                self.ack_now = true;
            } else if self.unacked_bytes >= 2 * self.rcv_mss_est {
                self.ack_now = true;
            } else if self.delack_deadline.is_none() {
                self.delack_deadline = Some(now + self.config.delayed_ack);
            }
        }
    }

    /// Consumes the peer's FIN once every byte before it arrived.
    fn check_peer_fin(&mut self, now: Instant) {
        let Some(fin) = self.peer_fin else {
            return;
        };
        if self.fin_received || fin != self.rcv_nxt {
            return;
        }
        self.fin_received = true;
        self.rcv_nxt += 1;
        self.ack_now = true;
        self.report_progress();
        self.events.push_back(Event::PeerClosed {
            len: fin.saturating_sub(1),
        });
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_sent && self.snd_una == self.snd_nxt {
                    self.enter_time_wait(now);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
    }

    /// Records the ECN codepoint of a received segment for the echo.
    fn on_ecn_codepoint(&mut self, now: Instant, seg: &RxSegment) {
        let ce = seg.ecn == Ecn::Ce;
        if self.per_packet_echo() {
            // RFC 8257 3.2: ECE mirrors the CE state of the last segment;
            // when it changes, ACK what came before with the old state at once.
            if ce != self.ce_state {
                if self.unacked_bytes > 0 || self.delack_deadline.is_some() {
                    self.queue_ack_now(now);
                }
                self.ce_state = ce;
            }
        } else if ce {
            // RFC 3168 6.1.3: echo ECE until the sender's CWR.
            self.ece_latched = true;
        }
    }
}

/// Sequence space a segment occupies (RFC 9293 3.4: SYN and FIN count).
pub(super) fn seg_len(seg: &RxSegment) -> u32 {
    let f = seg.header.flags;
    seg.payload_len
        .wrapping_add(u32::from(f.contains(Flags::SYN)))
        .wrapping_add(u32::from(f.contains(Flags::FIN)))
}
