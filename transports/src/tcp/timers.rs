//! Timers: retransmission (RFC 6298), persist (RFC 9293 3.8.6.1; bounded
//! by `max_persist_probes`), delayed ACK, TIME-WAIT and keepalive. Each is a deadline; `update_timers` arms
//! and disarms them after every call so they always match the state.

use core::time::Duration;

use super::connection::TcpConnection;
use super::state::State;
use crate::cc::{CongestionEvent, Controller};
use crate::segment::CloseReason;
use crate::time::Instant;

impl TcpConnection {
    /// Re-derives which timers must run from the current state.
    pub(super) fn update_timers(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        let handshake = matches!(self.state, State::SynSent | State::SynReceived);
        let outstanding = !self.sent.is_empty() || (handshake && self.syn_sent_at.is_some());
        if outstanding {
            if self.rto_deadline.is_none() {
                self.rto_deadline = Some(now + self.current_rto());
            }
        } else {
            self.rto_deadline = None;
        }

        // RFC 8985 7.2: PTO = 2 SRTT, plus the peer's delayed-ACK time when
        // it may hold its ACK, and never after the RTO. RFC 8985 adds it for
        // a single segment in flight; a receiver that ACKs every second full
        // segment (as ours does) also holds it for anything under two.
        let tlp_ok = self.config.tail_loss_probe
            && !handshake
            && !self.in_recovery
            && !self.tlp_out
            && !self.sent.is_empty();
        match (tlp_ok, self.rtt.smoothed()) {
            (true, Some(srtt)) => {
                if self.tlp_deadline.is_none() {
                    let mut pto = srtt * 2;
                    if self.sent.pipe() < 2 * u64::from(self.smss()) {
                        pto += self.config.delayed_ack;
                    }
                    let at = now + pto;
                    if self.rto_deadline.is_none_or(|r| at < r) {
                        self.tlp_deadline = Some(at);
                    }
                }
            }
            _ => self.tlp_deadline = None,
        }

        let waiting = self.state.can_send() && self.send_len + 1 > self.snd_nxt;
        if self.snd_wnd == 0 && waiting && self.sent.is_empty() {
            if self.persist_deadline.is_none() {
                let factor = 1u32
                    .checked_shl(self.persist_backoff.min(31))
                    .unwrap_or(u32::MAX);
                let d = self
                    .rtt
                    .rto()
                    .saturating_mul(factor)
                    .min(self.config.max_rto);
                self.persist_deadline = Some(now + d);
            }
        } else {
            self.persist_deadline = None;
            if self.snd_wnd > 0 {
                self.persist_backoff = 0;
            }
        }

        let idle_state = matches!(
            self.state,
            State::Established | State::CloseWait | State::FinWait2
        );
        self.keepalive_deadline = match self.config.keepalive {
            Some(k) if idle_state && self.sent.is_empty() => Some(
                self.last_recv + k.idle + k.interval.saturating_mul(self.keepalives_unanswered),
            ),
            _ => None,
        };
    }

    /// Runs every timer whose deadline has passed.
    pub(super) fn on_timeout(&mut self, now: Instant) {
        let due = |d: Option<Instant>| d.is_some_and(|d| d <= now);
        if due(self.time_wait_deadline) {
            self.time_wait_deadline = None;
            self.enter_closed(CloseReason::Graceful);
            return;
        }
        if due(self.rto_deadline) {
            self.rto_deadline = None;
            self.on_rto(now);
            if self.state == State::Closed {
                return;
            }
        }
        if due(self.tlp_deadline) {
            self.tlp_deadline = None;
            self.tlp_pending = true;
            self.tlp_out = true;
        }
        if due(self.persist_deadline) {
            self.persist_deadline = None;
            // The window stayed closed through every probe allowed: give up
            // rather than hold the connection for a peer that never reads.
            if self.persist_backoff >= self.config.max_persist_probes {
                self.enter_closed(CloseReason::ZeroWindow);
                return;
            }
            self.probe_pending = true;
            self.persist_backoff = self.persist_backoff.saturating_add(1);
        }
        if due(self.pacing_deadline) {
            self.pacing_deadline = None;
        }
        if due(self.delack_deadline) {
            self.delack_deadline = None;
            self.ack_now = true;
        }
        if due(self.keepalive_deadline) {
            self.keepalive_deadline = None;
            let probes = self.config.keepalive.map_or(0, |k| k.probes);
            if self.keepalives_unanswered >= probes {
                self.enter_closed(CloseReason::TimedOut);
                return;
            }
            self.keepalives_unanswered += 1;
            self.keepalive_pending = true;
        }
    }

    /// RFC 6298 5.4-5.7: retransmit, back off, and give up after the limit.
    fn on_rto(&mut self, now: Instant) {
        self.consecutive_rtos += 1;
        let since = self.unacked_since.or(self.syn_sent_at);
        let user_timeout = self
            .config
            .user_timeout
            .zip(since)
            .is_some_and(|(limit, t)| now - t >= limit);
        let limit = if self.state == State::SynReceived {
            self.config
                .syn_ack_retries
                .min(self.config.max_retransmissions)
        } else {
            self.config.max_retransmissions
        };
        if self.consecutive_rtos > limit || user_timeout {
            self.enter_closed(CloseReason::TimedOut);
            return;
        }
        self.backoff = self.backoff.saturating_add(1);
        self.stats.rtos += 1;
        if matches!(self.state, State::SynSent | State::SynReceived) && self.snd_una == 0 {
            self.syn_pending = true;
            return;
        }
        if self.sent.is_empty() {
            return;
        }
        // RFC 5681 3.1 equation 4 halves the FlightSize before the timeout;
        // after marking everything lost the pipe would be empty, so report
        // the flight as it was.
        let flight = self.flight();
        self.tlp_rtx = None;
        let (bytes, first) = self.sent.mark_all_lost();
        self.in_recovery = true;
        self.recovery_point = self.snd_nxt;
        self.dupacks = 0;
        self.rtx_allowance = 1;
        // After a timeout the window slow-starts from the loss window.
        self.prr = None;
        self.cc.on_congestion_event(&CongestionEvent {
            now,
            sent: first.unwrap_or(now),
            lost_bytes: bytes,
            bytes_in_flight: flight,
            timeout: true,
        });
    }

    /// A duration helper for tests and callers: the RTO floor in use.
    pub fn min_rto(&self) -> Duration {
        self.config.min_rto
    }
}
