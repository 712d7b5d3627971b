//! The connection: state, constructors, getters and the [`Transport`]
//! implementation. Input processing lives in `input.rs`, ACK processing and
//! loss recovery in `ack.rs`, segment building in `output.rs`, timers in
//! `timers.rs`; they are all `impl TcpConnection` blocks over this struct.

use std::collections::VecDeque;

use core::time::Duration;

use super::config::{ConfigError, TcpConfig};
use super::options::{self, ParsedOptions};
use super::rate::DeliveryRate;
use super::reassembly::Reassembly;
use super::scoreboard::Scoreboard;
use super::state::State;
use super::stats::TcpStats;
use crate::cc::{Cc, Controller};
use crate::rtt::RttEstimator;
use crate::segment::{CloseReason, Event, Flags, RxSegment, SegmentOut, TcpHeader, Transport};
use crate::time::Instant;
use proto::SeqNum;

/// Replies (RSTs, CE-change ACKs) waiting for `poll_transmit`, at most.
pub(super) const MAX_CONTROL_QUEUE: usize = 16;

/// Default MSS when the peer sends no MSS option (RFC 9293 3.7.1, IPv4).
pub(super) const DEFAULT_PEER_MSS: u16 = 536;

/// `accept` was given something other than an opening SYN.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AcceptError {
    /// The segment has no SYN, or also carries ACK, RST or FIN.
    #[error("tcp accept: segment from port {src_port} is not a bare SYN (flags {flags:?})")]
    NotSyn {
        /// Source port of the segment.
        src_port: u16,
        /// Its flags.
        flags: Flags,
    },
    /// The SYN's options are malformed.
    #[error("tcp accept: SYN from port {src_port}: {source}")]
    BadOptions {
        /// Source port of the segment.
        src_port: u16,
        /// What was wrong.
        source: options::OptionsError,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// What the handshake settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's MSS option (536 if absent).
    pub peer_mss: u16,
    /// Shift applied to the peer's window fields.
    pub snd_wscale: u8,
    /// Shift applied to our window fields.
    pub rcv_wscale: u8,
    /// Both sides sent SACK-permitted.
    pub sack: bool,
    /// Both sides sent timestamps.
    pub timestamps: bool,
    /// ECN was negotiated (RFC 3168 6.1.1).
    pub ecn: bool,
}

/// A header-only TCP connection (RFC 9293) with SACK (RFC 2018, 6675),
/// window scaling and timestamps (RFC 7323), RTO (RFC 6298), RFC 5961
/// hardening, ECN (RFC 3168, RFC 8257 3.2) and pluggable congestion control.
///
/// Positions are kept as 64-bit offsets from the initial sequence numbers:
/// send offset 0 is our SYN, offset `1 + n` is send-stream byte `n`;
/// likewise for receive offsets from the peer's ISN.
#[derive(Debug)]
pub struct TcpConnection {
    pub(super) config: TcpConfig,
    pub(super) state: State,
    pub(super) local_port: u16,
    pub(super) remote_port: u16,
    pub(super) iss: SeqNum,
    pub(super) irs: SeqNum,
    pub(super) neg: Negotiated,
    pub(super) peer_sent_ws: bool,

    // ---- send side (sequence offsets from iss) ----
    pub(super) snd_una: u64,
    pub(super) snd_nxt: u64,
    pub(super) snd_wnd: u64,
    pub(super) max_snd_wnd: u64,
    pub(super) snd_wl1: SeqNum,
    pub(super) snd_wl2: u64,
    /// Send-stream bytes the application posted.
    pub(super) send_len: u64,
    pub(super) fin_queued: bool,
    pub(super) fin_sent: bool,
    pub(super) syn_pending: bool,
    pub(super) syn_sent_at: Option<Instant>,
    pub(super) syn_retransmitted: bool,
    pub(super) acked_reported: u64,
    pub(super) sent: Scoreboard,
    pub(super) rtt: RttEstimator,
    pub(super) cc: Cc,
    pub(super) rate: DeliveryRate,
    /// The latest delivery-rate sample, bytes per second (for traces).
    pub(super) last_delivery_rate: Option<u64>,
    /// The congestion-control trace, when on (boxed: most connections
    /// have none).
    pub(super) trace: Option<Box<super::trace::Tracer>>,
    pub(super) dupacks: u64,
    pub(super) in_recovery: bool,
    pub(super) recovery_point: u64,
    pub(super) rtx_allowance: u32,
    /// RFC 6937 state while in fast recovery (not after an RTO, not for
    /// controllers that govern recovery themselves).
    pub(super) prr: Option<super::prr::Prr>,
    pub(super) backoff: u32,
    pub(super) consecutive_rtos: u32,
    pub(super) rto_deadline: Option<Instant>,
    pub(super) unacked_since: Option<Instant>,
    pub(super) persist_deadline: Option<Instant>,
    pub(super) persist_backoff: u32,
    pub(super) tlp_deadline: Option<Instant>,
    pub(super) tlp_pending: bool,
    pub(super) tlp_out: bool,
    /// A retransmitting probe is out: SND.NXT and time when it was sent.
    pub(super) tlp_rtx: Option<(u64, Instant)>,
    pub(super) probe_pending: bool,
    pub(super) pacing_next: Instant,
    /// Data was held back because its pacing departure time had not come:
    /// wake up then to send it.
    pub(super) pacing_deadline: Option<Instant>,
    pub(super) cwr_pending: bool,
    pub(super) ecn_recovery_point: u64,

    // ---- receive side (sequence offsets from irs) ----
    pub(super) rcv_nxt: u64,
    /// End of the receive space the application posted (stream offset).
    pub(super) recv_posted_end: u64,
    /// Largest right edge ever advertised (stream offset).
    pub(super) rcv_adv_max: u64,
    /// Window (bytes) in the last segment sent.
    pub(super) rcv_wnd_sent: u64,
    pub(super) reasm: Reassembly,
    /// The part of the segment being handled that this connection took
    /// into its receive stream (receive-stream offsets); the rest of what
    /// the datapath placed for it is discarded.
    pub(super) kept: core::ops::Range<u64>,
    /// A duplicate range (receive-stream offsets) to report as D-SACK.
    pub(super) dsack: Option<(u64, u64)>,
    pub(super) peer_fin: Option<u64>,
    /// The receive-stream offset of the urgent byte the peer marked last
    /// (URG and its pointer), if it ever marked one.
    pub(super) urgent: Option<u64>,
    pub(super) fin_received: bool,
    pub(super) ts_recent: Option<(u32, Instant)>,
    pub(super) last_ack_sent: u64,
    pub(super) received_reported: u64,
    pub(super) rcv_mss_est: u64,

    // ---- ACK generation ----
    pub(super) ack_now: bool,
    pub(super) delack_deadline: Option<Instant>,
    pub(super) unacked_bytes: u64,
    pub(super) quick_acks_left: u32,
    pub(super) ece_latched: bool,
    pub(super) ce_state: bool,

    // ---- other timers ----
    pub(super) time_wait_deadline: Option<Instant>,
    pub(super) keepalive_deadline: Option<Instant>,
    pub(super) keepalives_unanswered: u32,
    pub(super) keepalive_pending: bool,
    pub(super) last_recv: Instant,
    pub(super) challenge_window: (Instant, u32),
    /// When we last answered an unacceptable pure ACK.
    pub(super) oow_ack_at: Option<Instant>,

    // ---- output ----
    pub(super) control_out: VecDeque<TcpHeader>,
    pub(super) events: VecDeque<Event>,
    pub(super) stats: TcpStats,
}

impl TcpConnection {
    fn new(
        now: Instant,
        config: TcpConfig,
        local_port: u16,
        remote_port: u16,
        iss: u32,
        state: State,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut cc_config = config.cc.clone();
        cc_config.mss = config.mss;
        let cc = config.algorithm.build(&cc_config);
        let rtt = RttEstimator::new(config.initial_rto, config.min_rto, config.max_rto);
        let quick = config.quick_ack_segments;
        Ok(Self {
            state,
            local_port,
            remote_port,
            iss: SeqNum(iss),
            irs: SeqNum(0),
            neg: Negotiated {
                peer_mss: DEFAULT_PEER_MSS,
                snd_wscale: 0,
                rcv_wscale: 0,
                sack: false,
                timestamps: false,
                ecn: false,
            },
            peer_sent_ws: false,
            snd_una: 0,
            snd_nxt: 0,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: SeqNum(0),
            snd_wl2: 0,
            send_len: 0,
            fin_queued: false,
            fin_sent: false,
            syn_pending: true,
            syn_sent_at: None,
            syn_retransmitted: false,
            acked_reported: 0,
            sent: Scoreboard::default(),
            rtt,
            cc,
            rate: DeliveryRate::new(now),
            last_delivery_rate: None,
            trace: None,
            dupacks: 0,
            in_recovery: false,
            recovery_point: 0,
            rtx_allowance: 0,
            prr: None,
            backoff: 0,
            consecutive_rtos: 0,
            rto_deadline: None,
            unacked_since: None,
            persist_deadline: None,
            persist_backoff: 0,
            tlp_deadline: None,
            tlp_pending: false,
            tlp_out: false,
            tlp_rtx: None,
            probe_pending: false,
            pacing_next: now,
            pacing_deadline: None,
            cwr_pending: false,
            ecn_recovery_point: 0,
            rcv_nxt: 0,
            recv_posted_end: 0,
            rcv_adv_max: 0,
            rcv_wnd_sent: 0,
            reasm: Reassembly::default(),
            kept: 0..0,
            dsack: None,
            peer_fin: None,
            urgent: None,
            fin_received: false,
            ts_recent: None,
            last_ack_sent: 0,
            received_reported: 0,
            rcv_mss_est: u64::from(DEFAULT_PEER_MSS),
            ack_now: false,
            delack_deadline: None,
            unacked_bytes: 0,
            quick_acks_left: quick,
            ece_latched: false,
            ce_state: false,
            time_wait_deadline: None,
            keepalive_deadline: None,
            keepalives_unanswered: 0,
            keepalive_pending: false,
            last_recv: now,
            challenge_window: (now, 0),
            oow_ack_at: None,
            control_out: VecDeque::new(),
            events: VecDeque::new(),
            stats: TcpStats::default(),
            config,
        })
    }

    /// Active open (RFC 9293 3.5): the first [`Transport::poll_transmit`]
    /// yields the SYN, sequence number `iss`.
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid configuration.
    pub fn connect(
        now: Instant,
        config: TcpConfig,
        local_port: u16,
        remote_port: u16,
        iss: u32,
    ) -> Result<Self, ConfigError> {
        Self::new(now, config, local_port, remote_port, iss, State::SynSent)
    }

    /// Passive open from a received SYN: the connection starts in
    /// SYN-RECEIVED and the first [`Transport::poll_transmit`] yields the
    /// SYN-ACK. Payload on the SYN is ignored (not acknowledged), as Linux
    /// does without TCP Fast Open.
    ///
    /// # Errors
    /// [`AcceptError::NotSyn`] unless the segment is a SYN without ACK, RST
    /// or FIN; [`AcceptError::BadOptions`] for malformed options;
    /// [`AcceptError::Config`] for an invalid configuration.
    pub fn accept(
        now: Instant,
        config: TcpConfig,
        syn: &RxSegment,
        iss: u32,
    ) -> Result<Self, AcceptError> {
        let h = &syn.header;
        let f = h.flags;
        if !f.is_connection_request() {
            return Err(AcceptError::NotSyn {
                src_port: h.src_port,
                flags: f,
            });
        }
        let opts = options::parse(&h.options).map_err(|source| AcceptError::BadOptions {
            src_port: h.src_port,
            source,
        })?;
        let mut c = Self::new(now, config, h.dst_port, h.src_port, iss, State::SynReceived)?;
        c.stats.segments_received += 1;
        c.take_peer_syn(now, syn, &opts);
        c.neg.ecn = c.config.ecn && f.contains(Flags::ECE) && f.contains(Flags::CWR);
        c.snd_wnd = u64::from(h.window);
        c.max_snd_wnd = c.snd_wnd;
        c.snd_wl1 = SeqNum(h.seq);
        c.snd_wl2 = 0;
        Ok(c)
    }

    /// Records the peer's SYN: IRS and the options it offered (RFC 7323 2.2
    /// and 3.2, RFC 2018 2: an option is used only when both sides sent it).
    pub(super) fn take_peer_syn(&mut self, now: Instant, syn: &RxSegment, opts: &ParsedOptions) {
        self.irs = SeqNum(syn.header.seq);
        self.rcv_nxt = 1;
        self.last_ack_sent = 1;
        self.neg.peer_mss = opts.mss.unwrap_or(DEFAULT_PEER_MSS).max(64);
        self.peer_sent_ws = opts.window_scale.is_some();
        match (self.config.window_scale, opts.window_scale) {
            (Some(ours), Some(theirs)) => {
                self.neg.rcv_wscale = ours;
                // RFC 7323 2.3: a shift above 14 is used as 14.
                self.neg.snd_wscale = theirs.min(14);
            }
            _ => {
                self.neg.rcv_wscale = 0;
                self.neg.snd_wscale = 0;
            }
        }
        self.neg.sack = self.config.sack && opts.sack_permitted;
        self.neg.timestamps = self.config.timestamps && opts.timestamp.is_some();
        if let (true, Some((tsval, _))) = (self.neg.timestamps, opts.timestamp) {
            self.ts_recent = Some((tsval, now));
        }
        let smss = self.smss();
        self.cc.on_mss_update(smss);
        self.last_recv = now;
    }

    // ---- helpers shared by the other files ----

    /// Sender MSS: payload per full segment after the options every segment
    /// carries (RFC 9293 3.7.1: the MSS excludes options).
    pub(super) fn smss(&self) -> u16 {
        let base = self.config.mss.min(self.neg.peer_mss);
        let ts = if self.neg.timestamps { 12 } else { 0 };
        base.saturating_sub(ts).max(1)
    }

    pub(super) fn peer_fin_stream(&self) -> u64 {
        self.peer_fin.map_or(u64::MAX, |f| f.saturating_sub(1))
    }

    /// Wire sequence number of send offset `off`.
    pub(super) fn snd_seq(&self, off: u64) -> SeqNum {
        SeqNum::from_offset(self.iss, off)
    }

    /// Wire sequence number of receive offset `off`.
    pub(super) fn rcv_seq(&self, off: u64) -> SeqNum {
        SeqNum::from_offset(self.irs, off)
    }

    /// Send-offset of the FIN (valid once `fin_queued`).
    pub(super) fn fin_offset(&self) -> u64 {
        self.send_len + 1
    }

    /// Ends the connection and reports why.
    pub(super) fn enter_closed(&mut self, reason: CloseReason) {
        if self.state == State::Closed {
            return;
        }
        // Progress made by the segment that closed us comes first.
        self.report_progress();
        self.state = State::Closed;
        self.sent.clear();
        self.reasm.clear();
        self.rto_deadline = None;
        self.persist_deadline = None;
        self.tlp_deadline = None;
        self.tlp_pending = false;
        self.tlp_rtx = None;
        self.delack_deadline = None;
        self.time_wait_deadline = None;
        self.keepalive_deadline = None;
        self.ack_now = false;
        self.syn_pending = false;
        self.probe_pending = false;
        self.keepalive_pending = false;
        self.events.push_back(Event::Closed { reason });
    }

    pub(super) fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.rto_deadline = None;
        self.tlp_deadline = None;
        self.persist_deadline = None;
        self.keepalive_deadline = None;
        self.time_wait_deadline = Some(now + self.config.time_wait);
    }

    /// A bare RST with sequence number `seq` (RFC 9293 3.10.7.1). At most
    /// [`MAX_CONTROL_QUEUE`] replies wait; beyond that a flood of bad
    /// segments only costs counters.
    pub(super) fn queue_rst(&mut self, seq: u32, ack: Option<u32>) {
        if self.control_out.len() >= MAX_CONTROL_QUEUE {
            self.stats.resets_suppressed += 1;
            return;
        }
        let mut flags = Flags::RST;
        if ack.is_some() {
            flags = flags | Flags::ACK;
        }
        self.control_out.push_back(TcpHeader {
            urgent: 0,
            src_port: self.local_port,
            dst_port: self.remote_port,
            seq,
            ack: ack.unwrap_or(0),
            flags,
            window: 0,
            options: Default::default(),
        });
    }

    /// Sends an ACK now unless the RFC 5961 7 rate limit is exhausted.
    pub(super) fn challenge_ack(&mut self, now: Instant) {
        let (start, count) = self.challenge_window;
        let (start, count) = if now - start >= Duration::from_secs(1) {
            (now, 0)
        } else {
            (start, count)
        };
        if count < self.config.challenge_ack_limit {
            self.challenge_window = (start, count + 1);
            self.ack_now = true;
            self.stats.challenge_acks += 1;
        } else {
            self.challenge_window = (start, count);
            self.stats.challenge_acks_suppressed += 1;
        }
    }

    /// Queues `Received`/`Acked` for progress since the last report. An
    /// event of the same kind still in the queue is advanced in place, so
    /// the queue stays short however rarely the application polls.
    pub(super) fn report_progress(&mut self) {
        let received = self.received();
        if received > self.received_reported {
            self.received_reported = received;
            let pending = self.events.iter_mut().find_map(|e| match e {
                Event::Received { upto } => Some(upto),
                _ => None,
            });
            match pending {
                Some(upto) => *upto = received,
                None => self.events.push_back(Event::Received { upto: received }),
            }
        }
        let acked = self.acked();
        if acked > self.acked_reported {
            self.acked_reported = acked;
            let pending = self.events.iter_mut().find_map(|e| match e {
                Event::Acked { upto } => Some(upto),
                _ => None,
            });
            match pending {
                Some(upto) => *upto = acked,
                None => self.events.push_back(Event::Acked { upto: acked }),
            }
        }
    }
}

impl Transport for TcpConnection {
    fn handle_segment(&mut self, now: Instant, segment: &RxSegment) {
        self.on_segment(now, segment);
        self.report_progress();
        self.update_timers(now);
        self.trace_tick(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<SegmentOut> {
        let out = self.next_segment(now);
        self.update_timers(now);
        self.trace_tick(now);
        out
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [
            self.rto_deadline,
            self.tlp_deadline,
            self.persist_deadline,
            self.delack_deadline,
            self.time_wait_deadline,
            self.keepalive_deadline,
            self.pacing_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.on_timeout(now);
        self.update_timers(now);
        self.trace_tick(now);
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn send_posted(&mut self, now: Instant, bytes: u64) {
        if self.fin_queued || self.state == State::Closed {
            return;
        }
        self.send_len = self.send_len.saturating_add(bytes);
        self.update_timers(now);
    }

    fn recv_posted(&mut self, now: Instant, bytes: u64) {
        self.recv_posted_end = self.recv_posted_end.saturating_add(bytes);
        if !self.state.is_synchronized() || self.state == State::SynReceived {
            return;
        }
        // A pure window update goes out when the window reopens from zero
        // (so the sender need not wait for its persist timer), when it
        // reaches one MSS from below, or when it at least doubles (Linux's
        // rule; smaller growth rides on the next ACK, and a sender with
        // nothing in flight never waits on it, RFC 9293 3.8.6.2.1).
        let (_, wnd) = self.window_to_advertise();
        let sent = self.rcv_wnd_sent;
        let mss = u64::from(self.smss());
        if self.state.can_receive()
            && wnd > sent
            && (sent == 0 || wnd >= 2 * sent || (sent < mss && wnd >= mss))
        {
            self.ack_now = true;
        }
        self.update_timers(now);
    }

    fn close(&mut self, now: Instant) {
        match self.state {
            State::SynSent => self.enter_closed(CloseReason::Aborted),
            State::SynReceived | State::Established | State::CloseWait => {
                self.fin_queued = true;
            }
            _ => {}
        }
        self.update_timers(now);
    }

    fn abort(&mut self, now: Instant) {
        if self.state.is_synchronized() && self.state != State::TimeWait {
            // RFC 9293 3.10.5: <SEQ=SND.NXT><CTL=RST>.
            let seq = self.snd_seq(self.snd_nxt).0;
            self.queue_rst(seq, None);
        }
        self.enter_closed(CloseReason::Aborted);
        self.update_timers(now);
    }
}
