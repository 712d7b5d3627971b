//! Building segments: SYN/SYN-ACK, retransmissions (RFC 6675 NextSeg rule
//! 1), new data within the congestion and receive windows with sender SWS
//! avoidance (RFC 9293 3.8.6.2.1), FIN, window probes, keepalives and pure
//! ACKs; options (RFC 7323 timestamps, RFC 2018 SACK blocks), the
//! advertised window, ECN marks and pacing.

use core::time::Duration;

use smoltcp::wire::TcpOption;

use super::config::EcnEcho;
use super::connection::TcpConnection;
use super::options::OptionWriter;
use super::scoreboard::SentSeg;
use super::state::State;
use crate::cc::Controller;
use crate::segment::{Ecn, Flags, SegmentOut, TcpHeader, TcpOptions, TxSegment};
use crate::time::Instant;

impl TcpConnection {
    /// Our timestamp clock (RFC 7323 5.4): microseconds, offset by the ISS
    /// so the values do not reveal the host's clock. Microseconds because
    /// datacenter RTTs are far below the 1 ms tick Linux uses by default.
    pub(super) fn ts_clock(&self, now: Instant) -> u32 {
        ((now.as_nanos() / 1_000) as u32).wrapping_add(self.iss.0)
    }

    pub(super) fn cc_wants_ecn(&self) -> bool {
        self.cc.wants_ecn()
    }

    /// Whether CE marks are echoed per packet (RFC 8257 3.2).
    pub(super) fn per_packet_echo(&self) -> bool {
        match self.config.ecn_echo {
            EcnEcho::Auto => self.cc_wants_ecn(),
            EcnEcho::Classic => false,
            EcnEcho::PerPacket => true,
        }
    }

    /// The window to put in the next segment: `(field, bytes)`. It is the
    /// posted receive space above RCV.NXT, rounded down to the scale
    /// granularity, so we never offer space the application did not post.
    /// Rounding can retract the right edge by less than 2^shift bytes
    /// (RFC 7323 2.4 allows it); that space is still posted, so data the
    /// peer sends into it is placed and accepted.
    ///
    /// One exception keeps the connection live: posted space smaller than
    /// one scale unit would round to a zero window forever if the
    /// application keeps posting small buffers, so it is offered as one
    /// unit. The peer may then send up to 2^shift - 1 bytes the datapath
    /// cannot place; they are dropped there and sent again later.
    pub(super) fn window_to_advertise(&self) -> (u16, u64) {
        let rcv = self.rcv_nxt.saturating_sub(1);
        let space = self.recv_posted_end.saturating_sub(rcv);
        let shift = self.neg.rcv_wscale;
        let mut field = (space >> shift).min(u64::from(u16::MAX));
        if field == 0 && space > 0 {
            field = 1;
        }
        (field as u16, field << shift)
    }

    /// Right edge (stream offset) the next segment would advertise.
    pub(super) fn advertisable_edge(&self) -> u64 {
        self.rcv_nxt.saturating_sub(1) + self.window_to_advertise().1
    }

    /// The next segment to hand to the datapath, in priority order.
    pub(super) fn next_segment(&mut self, now: Instant) -> Option<SegmentOut> {
        if let Some(header) = self.control_out.pop_front() {
            self.stats.segments_sent += 1;
            if header.flags.contains(Flags::RST) {
                self.stats.resets_sent += 1;
            } else {
                self.stats.acks_sent += 1;
            }
            return Some(SegmentOut::control(header));
        }
        match self.state {
            State::Closed => return None,
            State::SynSent | State::SynReceived if self.syn_pending => {
                return Some(self.emit_syn(now));
            }
            State::SynSent => return None,
            State::SynReceived => {
                return self.ack_now.then(|| self.emit_control(now, self.snd_nxt));
            }
            _ => {}
        }
        if self.pacing_next > now {
            // Paced: data leaves at its departure time and not before, so
            // the send time that RTT and delivery-rate samples start from
            // is when the segment really leaves (the EDT model of Linux,
            // where TCP Small Queues keeps the host queue short).
            self.pacing_deadline = Some(self.pacing_next);
        } else {
            self.pacing_deadline = None;
            if let Some(s) = self.emit_retransmission(now) {
                return Some(s);
            }
            if self.tlp_pending {
                self.tlp_pending = false;
                if let Some(s) = self.emit_probe(now) {
                    return Some(s);
                }
            }
            if let Some(s) = self.emit_new_data(now) {
                return Some(s);
            }
        }
        if self.probe_pending || self.keepalive_pending {
            // Linux-style probe: SEG.SEQ = SND.UNA - 1 and no data; the peer
            // finds it outside its window and answers with an ACK carrying
            // its current window (RFC 9293 3.8.6.1, RFC 1122 4.2.3.6).
            if self.probe_pending {
                self.stats.window_probes += 1;
            } else {
                self.stats.keepalives += 1;
            }
            self.probe_pending = false;
            self.keepalive_pending = false;
            let seq = self.snd_una.saturating_sub(1);
            return Some(self.emit_control(now, seq));
        }
        let delack_due = self.delack_deadline.is_some_and(|d| d <= now);
        if self.ack_now || delack_due {
            return Some(self.emit_control(now, self.snd_nxt));
        }
        None
    }

    /// A pure ACK (or probe) with sequence offset `seq`.
    fn emit_control(&mut self, now: Instant, seq: u64) -> SegmentOut {
        let (options, _, sacks) = self.data_options(now);
        self.stats.acks_sent += 1;
        self.finish(now, seq, Flags::ACK, None, options, sacks, Ecn::NotEct)
    }

    /// SYN (active open) or SYN-ACK (passive or simultaneous open).
    fn emit_syn(&mut self, now: Instant) -> SegmentOut {
        self.syn_pending = false;
        let active = self.state == State::SynSent;
        let mut flags = Flags::SYN;
        if !active {
            flags = flags | Flags::ACK;
        }
        if active && self.config.ecn {
            // RFC 3168 6.1.1: an ECN-setup SYN.
            flags = flags | Flags::ECE | Flags::CWR;
        } else if !active && self.neg.ecn {
            flags = flags | Flags::ECE;
        }
        let offer_ws = if active {
            self.config.window_scale
        } else {
            // RFC 7323 2.2: reply with the option only if the SYN had it.
            (self.peer_sent_ws && self.config.window_scale.is_some()).then_some(self.neg.rcv_wscale)
        };
        let offer_sack = if active {
            self.config.sack
        } else {
            self.neg.sack
        };
        let offer_ts = if active {
            self.config.timestamps
        } else {
            self.neg.timestamps
        };
        let mut w = OptionWriter::default();
        w.push(TcpOption::MaxSegmentSize(self.config.mss));
        if offer_sack {
            if !offer_ts {
                w.push(TcpOption::NoOperation);
                w.push(TcpOption::NoOperation);
            }
            w.push(TcpOption::SackPermitted);
        }
        if offer_ts {
            if !offer_sack {
                w.push(TcpOption::NoOperation);
                w.push(TcpOption::NoOperation);
            }
            let tsecr = if active {
                0
            } else {
                self.ts_recent.map_or(0, |(t, _)| t)
            };
            w.push(TcpOption::TimeStamp {
                tsval: self.ts_clock(now),
                tsecr,
            });
        }
        if let Some(ws) = offer_ws {
            w.push(TcpOption::NoOperation);
            w.push(TcpOption::WindowScale(ws));
        }
        if self.syn_sent_at.is_some() {
            self.syn_retransmitted = true;
            self.stats.retransmits += 1;
        }
        self.syn_sent_at = Some(now);
        self.snd_nxt = self.snd_nxt.max(1);
        // RFC 7323 2.2: the window in a SYN is never scaled.
        let rcv = self.rcv_nxt.saturating_sub(1);
        let space = self.recv_posted_end.saturating_sub(rcv);
        let window = space.min(u64::from(u16::MAX)) as u16;
        let header = TcpHeader {
            urgent: 0,
            src_port: self.local_port,
            dst_port: self.remote_port,
            seq: self.iss.0,
            ack: if active {
                0
            } else {
                self.rcv_seq(self.rcv_nxt).0
            },
            flags,
            window,
            options: w.finish(),
        };
        self.rcv_wnd_sent = u64::from(window);
        self.rcv_adv_max = self.rcv_adv_max.max(rcv + u64::from(window));
        self.stats.segments_sent += 1;
        SegmentOut::control(header)
    }

    /// Options every non-SYN segment carries: timestamps and SACK blocks
    /// (RFC 2018 4: up to 3 with timestamps, 4 without, newest first).
    /// Returns the bytes, their length and the number of SACK blocks.
    fn data_options(&self, now: Instant) -> (TcpOptions, u64, u64) {
        let mut w = OptionWriter::default();
        if self.neg.timestamps {
            w.push(TcpOption::NoOperation);
            w.push(TcpOption::NoOperation);
            w.push(TcpOption::TimeStamp {
                tsval: self.ts_clock(now),
                tsecr: self.ts_recent.map_or(0, |(t, _)| t),
            });
        }
        let mut sacks = 0;
        if self.neg.sack && (self.reasm.has_holes() || self.dsack.is_some()) {
            let max = if self.neg.timestamps { 3 } else { 4 };
            // RFC 2883 4: a D-SACK block goes first, then the usual ones.
            let dsack = self.dsack.map(|(l, r)| l..r);
            let blocks: Vec<(u32, u32)> = dsack
                .into_iter()
                .chain(self.reasm.sack_blocks(max))
                .take(max)
                .map(|r| (self.rcv_seq(r.start + 1).0, self.rcv_seq(r.end + 1).0))
                .collect();
            if w.push_sack(&blocks) {
                sacks = blocks.len() as u64;
            }
        }
        (w.finish(), w.len() as u64, sacks)
    }

    /// Largest payload a segment with `opt_len` option bytes may carry.
    fn max_payload(&self, opt_len: u64) -> u64 {
        let base = u64::from(self.config.mss.min(self.neg.peer_mss));
        base.saturating_sub(opt_len).max(1)
    }

    /// RFC 6675 NextSeg rule 1 (and retransmission after an RTO): the first
    /// lost segment, when the window has room (or once on entering recovery).
    fn emit_retransmission(&mut self, now: Instant) -> Option<SegmentOut> {
        let idx = self.sent.next_lost()?;
        let (options, opt_len, sacks) = self.data_options(now);
        let max = self.max_payload(opt_len);
        self.sent.split(idx, max);
        let seg = *self.sent.get(idx)?;
        if self.rtx_allowance == 0 && self.send_room() < seg.len().min(u64::from(self.smss())) {
            return None;
        }
        self.rtx_allowance = self.rtx_allowance.saturating_sub(1);
        if let Some(prr) = &mut self.prr {
            prr.on_sent(seg.len());
        }
        Some(self.resend(now, idx, options, sacks))
    }

    /// Bytes the congestion window lets leave now: the window less the
    /// flight, or in fast recovery what RFC 6937's PRR allows.
    fn send_room(&self) -> u64 {
        match &self.prr {
            Some(prr) => prr.allowance(),
            None => self.cc.window().saturating_sub(self.flight()),
        }
    }

    /// Sends segment `idx` of the scoreboard again.
    fn resend(&mut self, now: Instant, idx: usize, options: TcpOptions, sacks: u64) -> SegmentOut {
        let nothing_in_flight = self.flight() == 0;
        let snap = self.rate.on_send(now, nothing_in_flight);
        self.sent.mark_retransmitted(idx, now, snap);
        let seg = self.sent.get(idx).copied().unwrap_or(SentSeg {
            start: self.snd_una,
            end: self.snd_una,
            fin: false,
            sent: now,
            retransmitted: true,
            sacked: false,
            lost: false,
            needs_rtx: false,
            rate: snap,
        });
        let data_end = if seg.fin { seg.end - 1 } else { seg.end };
        let payload = (data_end > seg.start).then(|| (seg.start - 1)..(data_end - 1));
        let mut flags = Flags::ACK;
        if seg.fin {
            flags = flags | Flags::FIN;
        }
        let bytes = data_end.saturating_sub(seg.start);
        self.stats.retransmits += 1;
        self.stats.retransmitted_bytes += bytes;
        let flight = self.flight();
        self.cc.on_sent(now, bytes, flight);
        // RFC 3168 6.1.5: retransmissions are not ECN-capable.
        self.finish(now, seg.start, flags, payload, options, sacks, Ecn::NotEct)
    }

    /// Tail loss probe (RFC 8985 7.3): one segment of new data if the peer's
    /// window allows, else the highest unSACKed segment again, whatever the
    /// congestion window says. The RTO restarts after it.
    fn emit_probe(&mut self, now: Instant) -> Option<SegmentOut> {
        self.rto_deadline = None;
        if let Some(s) = self.emit_new_data_inner(now, true) {
            self.stats.tail_loss_probes += 1;
            return Some(s);
        }
        let idx = self.sent.iter().rposition(|s| !s.sacked)?;
        let (options, opt_len, sacks) = self.data_options(now);
        let max = self.max_payload(opt_len);
        let len = self.sent.get(idx)?.len();
        if len > max {
            // Keep the probe one segment long: resend the tail part.
            self.sent.split(idx, len - max);
            return self.probe_resend(now, idx + 1, options, sacks);
        }
        self.probe_resend(now, idx, options, sacks)
    }

    fn probe_resend(
        &mut self,
        now: Instant,
        idx: usize,
        options: TcpOptions,
        sacks: u64,
    ) -> Option<SegmentOut> {
        self.sent.get(idx)?;
        self.stats.tail_loss_probes += 1;
        // RFC 8985 7.4: remember the probe so its ACK can tell whether it
        // repaired a loss.
        self.tlp_rtx = Some((self.snd_nxt, now));
        Some(self.resend(now, idx, options, sacks))
    }

    /// New data (and FIN) within the congestion and peer windows.
    fn emit_new_data(&mut self, now: Instant) -> Option<SegmentOut> {
        self.emit_new_data_inner(now, false)
    }

    /// New data; a probe ignores the congestion window and sender SWS
    /// avoidance but never the peer's window.
    fn emit_new_data_inner(&mut self, now: Instant, probe: bool) -> Option<SegmentOut> {
        if !self.state.can_send() || self.snd_nxt == 0 {
            return None;
        }
        let stream_next = self.snd_nxt - 1;
        let avail = self.send_len.saturating_sub(stream_next);
        let fin_now = self.fin_queued && !self.fin_sent;
        if avail == 0 && !fin_now {
            return None;
        }
        let (options, opt_len, sacks) = self.data_options(now);
        let max = self.max_payload(opt_len);
        let wnd_room = (self.snd_una + self.snd_wnd).saturating_sub(self.snd_nxt);
        let cwnd_room = if probe { u64::MAX } else { self.send_room() };
        let burst = if probe { max } else { self.tso_burst(max) };
        let mut len = avail.min(burst).min(wnd_room).min(cwnd_room);
        if avail > 0 {
            if len == 0 {
                return None;
            }
            let outstanding = self.snd_nxt > self.snd_una;
            if !probe && len < avail && len < max && outstanding && len < self.max_snd_wnd / 2 {
                // Sender SWS avoidance: wait for a fuller segment.
                return None;
            }
        }
        if len > max && len < avail {
            // A super-segment cut short by a window or the bound ends on a
            // whole wire segment: the rest is what SWS avoidance above
            // decides about, next time, as it did one segment at a time.
            len -= len % max;
        }
        let fin = fin_now && stream_next + len == self.send_len;
        if len == 0 && !fin {
            return None;
        }
        let mut flags = Flags::ACK;
        if len > 0 && stream_next + len == self.send_len {
            flags = flags | Flags::PSH;
        }
        if fin {
            flags = flags | Flags::FIN;
        }
        if len > 0 && self.cwr_pending {
            flags = flags | Flags::CWR;
            self.cwr_pending = false;
        }
        let start = self.snd_nxt;
        let end = start + len + u64::from(fin);
        let snap = self.rate.on_send(now, self.sent.is_empty());
        // One scoreboard entry per wire segment, so SACK, loss marking,
        // RACK and retransmission see exactly what the wire carried.
        let wire_segments = len.div_ceil(max).max(1);
        for k in 0..wire_segments {
            let from = start + k * max;
            let last = k + 1 == wire_segments;
            self.sent.push(SentSeg {
                start: from,
                end: if last { end } else { from + max },
                fin: fin && last,
                sent: now,
                retransmitted: false,
                sacked: false,
                lost: false,
                needs_rtx: false,
                rate: snap,
            });
        }
        self.snd_nxt = end;
        if let Some(prr) = &mut self.prr {
            prr.on_sent(len);
        }
        // New data restarts the probe timeout (RFC 8985 7.2).
        self.tlp_deadline = None;
        if self.unacked_since.is_none() {
            self.unacked_since = Some(now);
        }
        if fin {
            self.fin_sent = true;
            self.state = match self.state {
                State::CloseWait => State::LastAck,
                _ => State::FinWait1,
            };
        }
        let flight = self.flight();
        self.cc.on_sent(now, len, flight);
        if stream_next + len == self.send_len && flight < self.cc.window() {
            self.rate.mark_app_limited(flight);
        }
        let ecn = if self.neg.ecn && len > 0 {
            Ecn::Ect0
        } else {
            Ecn::NotEct
        };
        let payload = (len > 0).then(|| stream_next..stream_next + len);
        let mut out = self.finish(now, start, flags, payload, options, sacks, ecn);
        if wire_segments > 1 {
            out.segment.segment_size = max as u32;
            self.stats.segments_sent += wire_segments - 1;
        }
        Some(out)
    }

    /// Most new-data bytes one send segment may carry: `tso_segments` wire
    /// segments of `max` bytes, and when pacing, about a millisecond's
    /// worth at the pacing rate but at least two segments (Linux's
    /// `tcp_tso_autosize`), so a super-segment is not a burst pacing
    /// would have spread.
    fn tso_burst(&self, max: u64) -> u64 {
        let segments = u64::from(self.config.tso_segments.max(1));
        if segments == 1 {
            return max;
        }
        let paced = self
            .pacing_rate()
            .map_or(segments, |rate| (rate / 1_000 / max).clamp(2, segments));
        max * paced
    }

    /// Fills in ACK, window and ECE, updates what the last segment told the
    /// peer, and applies pacing.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        now: Instant,
        seq: u64,
        mut flags: Flags,
        payload: Option<core::ops::Range<u64>>,
        options: TcpOptions,
        sacks: u64,
        ecn: Ecn,
    ) -> SegmentOut {
        let echo = if self.per_packet_echo() {
            self.ce_state
        } else {
            self.ece_latched
        };
        if self.neg.ecn && echo {
            flags = flags | Flags::ECE;
        }
        let (window, bytes) = self.window_to_advertise();
        let rcv = self.rcv_nxt.saturating_sub(1);
        self.rcv_wnd_sent = bytes;
        self.rcv_adv_max = self.rcv_adv_max.max(rcv + bytes);
        self.last_ack_sent = self.rcv_nxt;
        self.ack_now = false;
        self.delack_deadline = None;
        self.unacked_bytes = 0;
        if sacks > 0 {
            self.dsack = None;
        }
        self.stats.segments_sent += 1;
        self.stats.sack_blocks_sent += sacks;
        let len = payload.as_ref().map_or(0, |r| r.end - r.start);
        self.stats.bytes_sent += len;
        let not_before = if len > 0 { self.pace(now, len) } else { None };
        let header = TcpHeader {
            urgent: 0,
            src_port: self.local_port,
            dst_port: self.remote_port,
            seq: self.snd_seq(seq).0,
            ack: self.rcv_seq(self.rcv_nxt).0,
            flags,
            window,
            options,
        };
        SegmentOut {
            segment: TxSegment {
                header,
                payload,
                ecn,
                segment_size: 0,
            },
            not_before,
        }
    }

    /// Earliest departure time for `bytes`: the controller's pacing rate,
    /// or `pacing_gain` × window / SRTT when configured; `None` to send now.
    fn pace(&mut self, now: Instant, bytes: u64) -> Option<Instant> {
        let rate = self.pacing_rate()?;
        let start = self.pacing_next.max(now);
        let gap = u128::from(bytes) * 1_000_000_000 / u128::from(rate);
        self.pacing_next = start + Duration::from_nanos(u64::try_from(gap).unwrap_or(u64::MAX));
        (start > now).then_some(start)
    }

    /// The pacing rate in bytes per second, if pacing: the controller's,
    /// or `pacing_gain` × window / SRTT when configured.
    fn pacing_rate(&self) -> Option<u64> {
        let rate = self.cc.pacing_rate().or_else(|| {
            if !self.config.pacing {
                return None;
            }
            let srtt = self.rtt.smoothed()?.as_secs_f64();
            (srtt > 0.0).then(|| (self.cc.window() as f64 / srtt * self.config.pacing_gain) as u64)
        })?;
        (rate > 0).then_some(rate)
    }

    /// Queues a pure ACK built now (RFC 8257 3.2: acknowledge what came
    /// before a CE change with the old ECE state).
    pub(super) fn queue_ack_now(&mut self, now: Instant) {
        if self.control_out.len() >= super::connection::MAX_CONTROL_QUEUE {
            return;
        }
        let seg = self.emit_control(now, self.snd_nxt);
        // Counted when popped again.
        self.stats.segments_sent -= 1;
        self.stats.acks_sent -= 1;
        self.control_out.push_back(seg.header);
    }
}
