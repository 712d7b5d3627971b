//! A tiny test-only transport for exercising the simulator: go-back-N with a
//! fixed window, cumulative ACKs on every data segment, a fixed RTO, an
//! optional pacing interval, and switchable bugs so the simulator's checks
//! can be shown to catch them. Not TCP; just enough to move a stream.

#![allow(
    dead_code,
    reason = "each sim_*.rs test crate uses a different part of this module"
)]

use core::time::Duration;
use std::collections::VecDeque;

use transports::segment::{CloseReason, Ecn, Event, Flags, TcpHeader, TxSegment};
use transports::{Instant, RxSegment, SegmentOut, Transport};

/// Deliberate misbehaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// Behaves.
    None,
    /// Once past 10 segments, reports one segment more in order than it has.
    SkipAhead,
    /// Once past 10 segments, reports an in-order point below the last one.
    Backwards,
    /// The 5th data segment's sequence number is one byte off its payload.
    WrongSeq,
    /// Never retransmits.
    NoRetransmit,
    /// Asks for a timeout in the past and never clears it.
    StuckTimer,
    /// Reports Closed(Aborted) after 10 segments.
    Abort,
    /// The 3rd data segment names its payload range backwards.
    ReversedRange,
    /// `poll_event` never runs dry once connected.
    EventFlood,
}

/// Go-back-N settings.
#[derive(Debug, Clone, Copy)]
pub struct GbnConfig {
    pub mss: u64,
    /// Window in segments.
    pub window: u64,
    pub rto: Duration,
    /// Gap between departures (`not_before`), if pacing.
    pub pace: Option<Duration>,
    /// Mark data ECT(0).
    pub ect: bool,
    pub bug: Bug,
}

impl Default for GbnConfig {
    fn default() -> Self {
        GbnConfig {
            mss: 1460,
            window: 64,
            rto: Duration::from_millis(1),
            pace: None,
            ect: false,
            bug: Bug::None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    SynSent,
    SynReceived,
    Established,
    Closed,
}

#[derive(Debug)]
pub struct Gbn {
    cfg: GbnConfig,
    local_port: u16,
    remote_port: u16,
    iss: u32,
    irs: u32,
    state: State,
    handshake_due: bool,
    // Sender.
    send_total: u64,
    snd_una: u64,
    snd_nxt: u64,
    data_segments_sent: u64,
    close_requested: bool,
    fin_sent: bool,
    fin_acked: bool,
    rto_at: Option<Instant>,
    next_departure: Instant,
    // Receiver.
    rcv_nxt: u64,
    reported: u64,
    received_data_segments: u64,
    peer_fin: Option<u64>,
    ack_due: bool,
    /// CE-marked segments received.
    pub ce_received: u64,
    events: VecDeque<Event>,
    bug_fired: bool,
}

impl Gbn {
    fn new(cfg: GbnConfig, local_port: u16, remote_port: u16, iss: u32, state: State) -> Self {
        Gbn {
            cfg,
            local_port,
            remote_port,
            iss,
            irs: 0,
            state,
            handshake_due: true,
            send_total: 0,
            snd_una: 0,
            snd_nxt: 0,
            data_segments_sent: 0,
            close_requested: false,
            fin_sent: false,
            fin_acked: false,
            rto_at: None,
            next_departure: Instant::ZERO,
            rcv_nxt: 0,
            reported: 0,
            received_data_segments: 0,
            peer_fin: None,
            ack_due: false,
            ce_received: 0,
            events: VecDeque::new(),
            bug_fired: false,
        }
    }

    pub fn connect(
        _now: Instant,
        cfg: GbnConfig,
        local_port: u16,
        remote_port: u16,
        iss: u32,
    ) -> Self {
        Gbn::new(cfg, local_port, remote_port, iss, State::SynSent)
    }

    pub fn accept(_now: Instant, cfg: GbnConfig, syn: &RxSegment, iss: u32) -> Self {
        let mut g = Gbn::new(
            cfg,
            syn.header.dst_port,
            syn.header.src_port,
            iss,
            State::SynReceived,
        );
        g.irs = syn.header.seq;
        g
    }

    /// Current window in bytes (the "cwnd" a trace probe reads).
    pub fn window_bytes(&self) -> u64 {
        self.cfg.window * self.cfg.mss
    }

    fn seq_of(&self, offset: u64) -> u32 {
        self.iss.wrapping_add(1).wrapping_add(offset as u32)
    }

    fn ack_number(&self) -> u32 {
        let fin = u32::from(self.peer_fin.is_some());
        self.irs
            .wrapping_add(1)
            .wrapping_add(self.rcv_nxt as u32)
            .wrapping_add(fin)
    }

    fn header(&self, seq: u32, flags: Flags) -> TcpHeader {
        TcpHeader {
            urgent: 0,
            src_port: self.local_port,
            dst_port: self.remote_port,
            seq,
            ack: if flags.contains(Flags::ACK) {
                self.ack_number()
            } else {
                0
            },
            flags,
            window: u16::MAX,
            ..TcpHeader::default()
        }
    }

    fn segment(
        &mut self,
        now: Instant,
        header: TcpHeader,
        payload: Option<core::ops::Range<u64>>,
    ) -> SegmentOut {
        let not_before = self.cfg.pace.map(|gap| {
            let at = self.next_departure.max(now);
            self.next_departure = at + gap;
            at
        });
        let ecn = if self.cfg.ect && payload.is_some() {
            Ecn::Ect0
        } else {
            Ecn::NotEct
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

    fn arm_rto(&mut self, now: Instant) {
        if self.cfg.bug != Bug::NoRetransmit {
            self.rto_at = Some(now + self.cfg.rto);
        }
    }

    fn maybe_closed(&mut self) {
        if self.fin_acked && self.peer_fin.is_some() && self.state != State::Closed {
            self.state = State::Closed;
            self.rto_at = None;
            self.events.push_back(Event::Closed {
                reason: CloseReason::Graceful,
            });
        }
    }

    fn on_ack(&mut self, now: Instant, ack: u32) {
        let base = self.seq_of(self.snd_una);
        let advance = u64::from(ack.wrapping_sub(base));
        let fin_extra = u64::from(self.fin_sent);
        let limit = self.snd_nxt - self.snd_una + fin_extra;
        if advance == 0 || advance > limit {
            return;
        }
        let new_una = (self.snd_una + advance).min(self.snd_nxt);
        if self.fin_sent && advance == limit {
            self.fin_acked = true;
        }
        if new_una > self.snd_una {
            self.snd_una = new_una;
            self.events.push_back(Event::Acked { upto: new_una });
        }
        if self.snd_una < self.snd_nxt || (self.fin_sent && !self.fin_acked) {
            self.arm_rto(now);
        } else {
            self.rto_at = None;
        }
        self.maybe_closed();
    }

    fn on_data(&mut self, segment: &RxSegment) {
        if segment.payload_len > 0 {
            self.received_data_segments += 1;
            self.ack_due = true;
        }
        if segment.ecn == Ecn::Ce {
            self.ce_received += 1;
        }
        let acc = &segment.accepted;
        if !acc.is_empty() && acc.start > self.rcv_nxt {
            // Go-back-N keeps only in-order data: the datapath must forget
            // what it placed ahead, or the retransmission finds those bytes
            // placed already and is not placed again.
            self.events
                .push_back(Event::Discarded { range: acc.clone() });
        }
        if !acc.is_empty() && acc.start <= self.rcv_nxt && acc.end > self.rcv_nxt {
            self.rcv_nxt = acc.end;
            let mut report = self.rcv_nxt;
            if !self.bug_fired && self.received_data_segments > 10 {
                match self.cfg.bug {
                    Bug::SkipAhead => {
                        self.bug_fired = true;
                        report += self.cfg.mss;
                    }
                    Bug::Backwards => {
                        self.bug_fired = true;
                        report = self.reported.saturating_sub(1);
                    }
                    Bug::Abort => {
                        self.bug_fired = true;
                        self.events.push_back(Event::Closed {
                            reason: CloseReason::Aborted,
                        });
                    }
                    _ => {}
                }
            }
            self.reported = report;
            self.events.push_back(Event::Received { upto: report });
        }
        if segment.header.flags.contains(Flags::FIN) {
            let fin_offset = u64::from(
                segment
                    .header
                    .seq
                    .wrapping_add(segment.payload_len)
                    .wrapping_sub(self.irs.wrapping_add(1)),
            );
            if self.peer_fin.is_none() && fin_offset == self.rcv_nxt {
                self.peer_fin = Some(self.rcv_nxt);
                self.events
                    .push_back(Event::PeerClosed { len: self.rcv_nxt });
            }
            self.ack_due = true;
        }
    }
}

impl Transport for Gbn {
    fn handle_segment(&mut self, now: Instant, segment: &RxSegment) {
        let h = &segment.header;
        match self.state {
            State::SynSent => {
                if h.flags.contains(Flags::SYN | Flags::ACK) && h.ack == self.iss.wrapping_add(1) {
                    self.irs = h.seq;
                    self.state = State::Established;
                    self.rto_at = None;
                    self.ack_due = true;
                    self.events.push_back(Event::Connected);
                }
            }
            State::SynReceived => {
                if h.flags.contains(Flags::SYN) {
                    // Our SYN-ACK was lost: send it again.
                    self.handshake_due = true;
                } else if h.flags.contains(Flags::ACK) && h.ack == self.iss.wrapping_add(1) {
                    self.state = State::Established;
                    self.rto_at = None;
                    self.events.push_back(Event::Connected);
                    self.on_data(segment);
                }
            }
            State::Established | State::Closed => {
                if h.flags.contains(Flags::SYN) {
                    // A retransmitted SYN-ACK: our ACK was lost.
                    self.ack_due = true;
                    return;
                }
                if h.flags.contains(Flags::ACK) {
                    self.on_ack(now, h.ack);
                }
                self.on_data(segment);
                self.maybe_closed();
            }
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<SegmentOut> {
        match self.state {
            State::SynSent | State::SynReceived if self.handshake_due => {
                self.handshake_due = false;
                self.arm_rto(now);
                let flags = if self.state == State::SynSent {
                    Flags::SYN
                } else {
                    Flags::SYN | Flags::ACK
                };
                let header = self.header(self.iss, flags);
                return Some(self.segment(now, header, None));
            }
            State::Established => {}
            // Closed: still acknowledge the peer's FIN (our TIME-WAIT).
            State::Closed if self.ack_due => {
                self.ack_due = false;
                let seq = self
                    .seq_of(self.snd_nxt)
                    .wrapping_add(u32::from(self.fin_sent));
                let header = self.header(seq, Flags::ACK);
                return Some(self.segment(now, header, None));
            }
            _ => return None,
        }
        let in_flight = self.snd_nxt - self.snd_una;
        if self.snd_nxt < self.send_total && in_flight < self.window_bytes() {
            let start = self.snd_nxt;
            let end = (start + self.cfg.mss).min(self.send_total);
            self.snd_nxt = end;
            self.data_segments_sent += 1;
            let mut seq = self.seq_of(start);
            let payload = if self.cfg.bug == Bug::ReversedRange && self.data_segments_sent == 3 {
                end..start
            } else {
                start..end
            };
            if self.cfg.bug == Bug::WrongSeq && self.data_segments_sent == 5 {
                seq = seq.wrapping_add(1);
            }
            if self.rto_at.is_none() {
                self.arm_rto(now);
            }
            self.ack_due = false;
            let header = self.header(seq, Flags::ACK);
            return Some(self.segment(now, header, Some(payload)));
        }
        if self.close_requested
            && !self.fin_sent
            && self.snd_nxt == self.send_total
            && self.snd_una == self.send_total
        {
            self.fin_sent = true;
            self.arm_rto(now);
            self.ack_due = false;
            let header = self.header(self.seq_of(self.send_total), Flags::FIN | Flags::ACK);
            return Some(self.segment(now, header, None));
        }
        if self.ack_due {
            self.ack_due = false;
            let seq = self
                .seq_of(self.snd_nxt)
                .wrapping_add(u32::from(self.fin_sent));
            let header = self.header(seq, Flags::ACK);
            return Some(self.segment(now, header, None));
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.cfg.bug == Bug::StuckTimer {
            return Some(Instant::ZERO);
        }
        self.rto_at
    }

    fn handle_timeout(&mut self, now: Instant) {
        let Some(at) = self.rto_at else { return };
        if at > now {
            return;
        }
        self.rto_at = None;
        match self.state {
            State::SynSent | State::SynReceived => self.handshake_due = true,
            State::Established => {
                // Go back N: resend everything from the first unacked byte.
                self.snd_nxt = self.snd_una;
                if self.fin_sent && !self.fin_acked {
                    self.fin_sent = false;
                }
                self.next_departure = now;
            }
            State::Closed => {}
        }
    }

    fn poll_event(&mut self) -> Option<Event> {
        if self.cfg.bug == Bug::EventFlood && self.state == State::Established {
            return Some(Event::Acked { upto: self.snd_una });
        }
        self.events.pop_front()
    }

    fn send_posted(&mut self, _now: Instant, bytes: u64) {
        self.send_total += bytes;
    }

    fn recv_posted(&mut self, _now: Instant, _bytes: u64) {}

    fn close(&mut self, _now: Instant) {
        self.close_requested = true;
    }

    fn abort(&mut self, _now: Instant) {
        self.state = State::Closed;
        self.events.push_back(Event::Closed {
            reason: CloseReason::Aborted,
        });
    }
}

/// Client factory for flow `flow` (distinct port per flow).
pub fn client(cfg: GbnConfig) -> impl FnMut(usize, Instant) -> Gbn {
    move |flow, now| {
        Gbn::connect(
            now,
            cfg,
            40_000 + flow as u16,
            5_000,
            1_000 + flow as u32 * 7_919,
        )
    }
}

/// Server factory.
pub fn server(cfg: GbnConfig) -> impl FnMut(usize, Instant, &RxSegment) -> Option<Gbn> {
    move |_, now, syn| Some(Gbn::accept(now, cfg, syn, u32::MAX - 5_000))
}
