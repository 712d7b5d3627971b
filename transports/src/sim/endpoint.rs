//! An endpoint: a transport plus a model of the application and of the
//! datapath around it.
//!
//! The application posts its whole send stream at once, keeps a bounded
//! number of receive buffers posted and re-posts one each time the
//! transport completes one (as an RDMA-style application re-posts receive
//! work requests), and closes when its [`CloseWhen`] says. The datapath model
//! places received payload ([`Placement`]), holds paced segments until their
//! departure time, and feeds the [`Scoreboard`].

use core::time::Duration;
use std::collections::VecDeque;

use super::error::{Side, SimError};
use super::packet::Packet;
use super::placement::{Placement, PlacementStats};
use super::scoreboard::Scoreboard;
use crate::segment::{CloseReason, Event, Flags, RxSegment, SegmentOut, Transport};
use crate::time::Instant;

/// When the application closes its side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseWhen {
    /// Right after the handshake (FIN follows the posted data).
    AfterConnected,
    /// After the peer's FIN arrived.
    AfterPeerClosed,
    /// Never.
    Never,
}

/// What the application on one endpoint does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppConfig {
    /// Bytes posted to the send stream when the transport is created.
    pub send_bytes: u64,
    /// Size of each posted receive buffer.
    pub recv_chunk: u64,
    /// Receive buffers kept posted (at least 1).
    pub recv_outstanding: u32,
    /// When to call [`Transport::close`].
    pub close: CloseWhen,
}

impl AppConfig {
    /// An application that sends `bytes` and closes after connecting, with
    /// four 1 MiB receive buffers posted.
    pub fn sender(bytes: u64) -> Self {
        AppConfig {
            send_bytes: bytes,
            recv_chunk: 1 << 20,
            recv_outstanding: 4,
            close: CloseWhen::AfterConnected,
        }
    }

    /// An application that only receives, with four 1 MiB receive buffers
    /// posted, and closes once the peer has.
    pub fn receiver() -> Self {
        AppConfig {
            send_bytes: 0,
            recv_chunk: 1 << 20,
            recv_outstanding: 4,
            close: CloseWhen::AfterPeerClosed,
        }
    }
}

/// What an endpoint sent, counted by the simulated datapath.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Segments handed to the path.
    pub segments: u64,
    /// Segments carrying payload.
    pub data_segments: u64,
    /// Payload bytes handed to the path, retransmissions included.
    pub payload_bytes: u64,
    /// Data segments that repeated send-stream bytes already sent.
    pub retransmitted_segments: u64,
    /// Send-stream bytes sent again.
    pub retransmitted_bytes: u64,
    /// Segments with the SYN flag.
    pub syn_segments: u64,
    /// Segments held back for pacing before they went out.
    pub paced_segments: u64,
    /// Most segments ever waiting in the pacing queue at once (how far ahead
    /// of their departure times the transport hands segments over).
    pub max_paced_backlog: u64,
}

/// One endpoint of a flow.
#[derive(Debug)]
pub struct Endpoint<T> {
    flow: usize,
    side: Side,
    transport: Option<T>,
    app: AppConfig,
    placement: Placement,
    scoreboard: Scoreboard,
    /// End offsets of posted receive buffers not yet completed.
    posted: VecDeque<u64>,
    pacing: VecDeque<SegmentOut>,
    /// (local, remote) ports, learned from the first segment it sends.
    ports: Option<(u16, u16)>,
    sent: SendStats,
    max_sent_end: u64,
    received_segments: u64,
    misdirected_segments: u64,
    connected_at: Option<Instant>,
    closed: Option<(Instant, CloseReason)>,
    peer_closed: Option<u64>,
    close_called: bool,
    acked: u64,
    origin: Instant,
    window: Option<Duration>,
    delivered_per_window: Vec<u64>,
}

impl<T: Transport> Endpoint<T> {
    /// An endpoint without a transport yet; its peer sends `peer_sends` bytes.
    pub(crate) fn new(
        flow: usize,
        side: Side,
        app: AppConfig,
        peer_sends: u64,
        origin: Instant,
        window: Option<Duration>,
    ) -> Self {
        Endpoint {
            flow,
            side,
            transport: None,
            app,
            placement: Placement::default(),
            scoreboard: Scoreboard::new(peer_sends),
            posted: VecDeque::new(),
            pacing: VecDeque::new(),
            ports: None,
            sent: SendStats::default(),
            max_sent_end: 0,
            received_segments: 0,
            misdirected_segments: 0,
            connected_at: None,
            closed: None,
            peer_closed: None,
            close_called: false,
            acked: 0,
            origin,
            window,
            delivered_per_window: Vec::new(),
        }
    }

    /// Installs the transport and lets the application post its buffers.
    pub(crate) fn attach(&mut self, now: Instant, mut transport: T) {
        for _ in 0..self.app.recv_outstanding.max(1) {
            transport.recv_posted(now, self.app.recv_chunk);
            self.placement.post(self.app.recv_chunk);
            self.posted.push_back(self.placement.posted_end());
        }
        if self.app.send_bytes > 0 {
            transport.send_posted(now, self.app.send_bytes);
        }
        self.transport = Some(transport);
    }

    /// The transport, once created.
    pub fn transport(&self) -> Option<&T> {
        self.transport.as_ref()
    }

    /// Mutable access to the transport, once created.
    pub fn transport_mut(&mut self) -> Option<&mut T> {
        self.transport.as_mut()
    }

    /// The receive scoreboard.
    pub fn scoreboard(&self) -> &Scoreboard {
        &self.scoreboard
    }

    /// What placement did with received payload.
    pub fn placement_stats(&self) -> &PlacementStats {
        self.placement.stats()
    }

    /// What this endpoint sent.
    pub fn send_stats(&self) -> &SendStats {
        &self.sent
    }

    /// Segments delivered to this endpoint.
    pub fn received_segments(&self) -> u64 {
        self.received_segments
    }

    /// Segments dropped because their ports did not match this endpoint.
    pub fn misdirected_segments(&self) -> u64 {
        self.misdirected_segments
    }

    /// When the transport reported `Connected`.
    pub fn connected_at(&self) -> Option<Instant> {
        self.connected_at
    }

    /// When and why the transport reported `Closed`.
    pub fn closed(&self) -> Option<(Instant, CloseReason)> {
        self.closed
    }

    /// The length the peer's FIN reported.
    pub fn peer_closed(&self) -> Option<u64> {
        self.peer_closed
    }

    /// Send-stream bytes acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// In-order bytes received per throughput window, if windows are on.
    pub fn delivered_per_window(&self) -> &[u64] {
        &self.delivered_per_window
    }

    /// The peer's ISN, once its SYN was seen (the datapath model's IRS).
    pub fn irs(&self) -> Option<u32> {
        self.placement.irs()
    }

    fn error(&self, now: Instant, source: super::scoreboard::ScoreboardError) -> SimError {
        SimError::Scoreboard {
            flow: self.flow,
            side: self.side,
            at: now,
            source,
        }
    }

    /// Turns a packet into the `RxSegment` the datapath would hand over,
    /// placing its payload. `None` if the ports say it is not for us.
    pub(crate) fn receive(
        &mut self,
        now: Instant,
        packet: &Packet,
    ) -> Result<Option<RxSegment>, SimError> {
        let header = &packet.segment.header;
        if let Some((local, remote)) = self.ports {
            if (header.dst_port, header.src_port) != (local, remote) {
                self.misdirected_segments += 1;
                return Ok(None);
            }
        }
        self.received_segments += 1;
        if header.flags.contains(Flags::SYN) {
            self.placement.observe_syn(header.seq);
        }
        let len = packet.segment.payload_len();
        let (accepted, seq_offset) = self.placement.place(header, len);
        if let (Some(seq_offset), Some(payload)) = (seq_offset, &packet.segment.payload) {
            self.scoreboard
                .on_placed(accepted.clone(), seq_offset, payload.start)
                .map_err(|e| self.error(now, e))?;
        }
        Ok(Some(RxSegment {
            header: *header,
            payload_len: u32::try_from(len).unwrap_or(u32::MAX),
            accepted,
            ecn: packet.ecn,
            segment_size: 0,
        }))
    }

    /// Feeds a received segment to the transport.
    pub(crate) fn deliver(&mut self, now: Instant, packet: &Packet) -> Result<(), SimError> {
        if self.transport.is_none() {
            return Ok(());
        }
        if let Some(segment) = self.receive(now, packet)? {
            if let Some(t) = self.transport.as_mut() {
                t.handle_segment(now, &segment);
            }
        }
        Ok(())
    }

    /// The transport's next timer.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        self.transport.as_ref().and_then(|t| t.poll_timeout())
    }

    /// When the oldest paced segment may leave.
    pub(crate) fn next_paced(&self) -> Option<Instant> {
        self.pacing
            .front()
            .map(|s| s.not_before.unwrap_or(Instant::ZERO))
    }

    /// Fires the transport's timer if it is due. Returns whether it fired.
    pub(crate) fn fire_timeout(&mut self, now: Instant) -> bool {
        let Some(t) = self.transport.as_mut() else {
            return false;
        };
        match t.poll_timeout() {
            Some(at) if at <= now => {
                t.handle_timeout(now);
                true
            }
            _ => false,
        }
    }

    /// Drains the transport's events (playing the application) and its
    /// segments; segments whose departure time has come go to `out`.
    pub(crate) fn service(
        &mut self,
        now: Instant,
        max_burst: usize,
        out: &mut Vec<SegmentOut>,
    ) -> Result<(), SimError> {
        if self.transport.is_none() {
            return Ok(());
        }
        self.drain_events(now, max_burst)?;
        let mut polled = 0usize;
        while let Some(segment) = self.transport.as_mut().and_then(|t| t.poll_transmit(now)) {
            polled += 1;
            if polled > max_burst {
                return Err(SimError::Burst {
                    flow: self.flow,
                    side: self.side,
                    at: now,
                    what: "segments from poll_transmit",
                    limit: max_burst,
                });
            }
            if let Some(payload) = &segment.payload {
                if payload.start > payload.end {
                    return Err(SimError::BadSegment {
                        flow: self.flow,
                        side: self.side,
                        at: now,
                        reason: format!(
                            "payload range {}..{} ends before it starts",
                            payload.start, payload.end
                        ),
                    });
                }
            }
            if segment.not_before.is_some_and(|at| at > now) {
                self.sent.paced_segments += 1;
            }
            self.pacing.push_back(segment);
            self.sent.max_paced_backlog = self.sent.max_paced_backlog.max(self.pacing.len() as u64);
        }
        // Sending can produce events (e.g. a close completing).
        self.drain_events(now, max_burst)?;
        while self
            .pacing
            .front()
            .is_some_and(|s| s.not_before.is_none_or(|at| at <= now))
        {
            if let Some(segment) = self.pacing.pop_front() {
                // The datapath's part: a super-segment leaves as its wire
                // segments (software TSO).
                for slice in segment.slices() {
                    let wire = SegmentOut {
                        segment: slice,
                        not_before: segment.not_before,
                    };
                    self.count_sent(&wire);
                    out.push(wire);
                }
            }
        }
        Ok(())
    }

    fn count_sent(&mut self, segment: &SegmentOut) {
        if self.ports.is_none() {
            self.ports = Some((segment.header.src_port, segment.header.dst_port));
        }
        self.sent.segments += 1;
        if segment.header.flags.contains(Flags::SYN) {
            self.sent.syn_segments += 1;
        }
        if let Some(payload) = &segment.payload {
            if payload.is_empty() {
                return;
            }
            self.sent.data_segments += 1;
            self.sent.payload_bytes += payload.end - payload.start;
            if payload.start < self.max_sent_end {
                self.sent.retransmitted_segments += 1;
                self.sent.retransmitted_bytes += payload.end.min(self.max_sent_end) - payload.start;
            }
            self.max_sent_end = self.max_sent_end.max(payload.end);
        }
    }

    fn drain_events(&mut self, now: Instant, max_events: usize) -> Result<(), SimError> {
        let mut drained = 0usize;
        while let Some(event) = self.transport.as_mut().and_then(|t| t.poll_event()) {
            drained += 1;
            if drained > max_events {
                return Err(SimError::Burst {
                    flow: self.flow,
                    side: self.side,
                    at: now,
                    what: "events from poll_event",
                    limit: max_events,
                });
            }
            match event {
                Event::Connected => {
                    self.connected_at.get_or_insert(now);
                    if self.app.close == CloseWhen::AfterConnected {
                        self.close(now);
                    }
                }
                Event::Received { upto } => {
                    let before = self.scoreboard.upto();
                    self.scoreboard
                        .on_received(now, upto)
                        .map_err(|e| self.error(now, e))?;
                    self.record_window(now, upto - before);
                    self.complete_receive_buffers(now, upto);
                }
                Event::Acked { upto } => self.acked = self.acked.max(upto),
                Event::Discarded { range } => {
                    self.placement.discard(range.clone());
                    self.scoreboard.on_discarded(range);
                }
                Event::PeerClosed { len } => {
                    self.scoreboard
                        .on_peer_closed(len)
                        .map_err(|e| self.error(now, e))?;
                    self.peer_closed = Some(len);
                    if self.app.close == CloseWhen::AfterPeerClosed {
                        self.close(now);
                    }
                }
                Event::Closed { reason } => {
                    self.closed.get_or_insert((now, reason));
                }
                // Each simulated flow is one connection on its 4-tuple:
                // no listener waits for another.
                Event::SynForListener => {}
            }
        }
        Ok(())
    }

    fn close(&mut self, now: Instant) {
        if !self.close_called {
            self.close_called = true;
            if let Some(t) = self.transport.as_mut() {
                t.close(now);
            }
        }
    }

    /// Buffers ending at or before `upto` are complete: the datapath retires
    /// them (raising the placement floor) and the application re-posts one
    /// buffer for each.
    fn complete_receive_buffers(&mut self, now: Instant, upto: u64) {
        let mut completed = 0;
        while self.posted.front().is_some_and(|&end| end <= upto) {
            if let Some(end) = self.posted.pop_front() {
                self.placement.complete_to(end);
                completed += 1;
            }
        }
        for _ in 0..completed {
            self.placement.post(self.app.recv_chunk);
            self.posted.push_back(self.placement.posted_end());
            if let Some(t) = self.transport.as_mut() {
                t.recv_posted(now, self.app.recv_chunk);
            }
        }
    }

    fn record_window(&mut self, now: Instant, bytes: u64) {
        let Some(window) = self.window else { return };
        let width = window.as_nanos().max(1);
        let Ok(index) = usize::try_from((now - self.origin).as_nanos() / width) else {
            return;
        };
        if self.delivered_per_window.len() <= index {
            self.delivered_per_window.resize(index + 1, 0);
        }
        self.delivered_per_window[index] += bytes;
    }
}
