//! The event loop: a virtual clock that jumps to the earliest scheduled
//! thing (a packet leaving a node, a transport timer, a paced segment's
//! departure time, a flow's start, a trace sample) and runs everything due
//! then. No real clock, no sleeping, no I/O.

use core::time::Duration;

use super::endpoint::{AppConfig, Endpoint};
use super::error::{Side, SimError};
use super::node::{Delay, Node, NodeStats};
use super::packet::{Direction, Packet};
use super::path::{Path, PathConfig};
use super::trace::{Trace, TraceSample};
use crate::segment::{Flags, RxSegment, SegmentOut, Transport};
use crate::time::Instant;

/// One connection pair to simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSpec {
    /// When the client is created (and connects).
    pub start: Instant,
    /// The client's application.
    pub client: AppConfig,
    /// The server's application.
    pub server: AppConfig,
    /// Extra one-way delay between this flow's client and the shared path
    /// (an access link), so flows sharing a bottleneck can have different
    /// RTTs. Applied to what the client sends; the RTT grows by this much.
    pub access_delay: Duration,
}

impl FlowSpec {
    /// A flow that starts at `start` and sends `bytes` from client to server.
    pub fn upload(start: Instant, bytes: u64) -> Self {
        FlowSpec {
            start,
            client: AppConfig::sender(bytes),
            server: AppConfig::receiver(),
            access_delay: Duration::ZERO,
        }
    }
}

/// Limits and options of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Upper bound on loop iterations plus segments sent plus timers fired.
    pub max_events: u64,
    /// Most segments one endpoint may emit in one round of `poll_transmit`.
    pub max_burst: usize,
    /// A flow counts as finished only when both transports also reported
    /// `Closed`, not just when every byte was delivered.
    pub require_close: bool,
    /// Width of the windows in which delivered bytes are counted per flow
    /// (for fairness), or `None` for no windows.
    pub window: Option<Duration>,
    /// Interval between trace samples, or `None` for no trace.
    pub trace_interval: Option<Duration>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            max_events: 200_000_000,
            max_burst: 1 << 16,
            require_close: false,
            window: None,
            trace_interval: None,
        }
    }
}

/// How a run that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every flow finished.
    Finished,
    /// The time limit came first.
    TimeReached,
}

type Connect<'f, A> = Box<dyn FnMut(usize, Instant) -> A + 'f>;
type Accept<'f, B> = Box<dyn FnMut(usize, Instant, &RxSegment) -> Option<B> + 'f>;
type Probe<'f, A> = Box<dyn FnMut(&A) -> Option<u64> + 'f>;

/// One connection pair in a simulation.
#[derive(Debug)]
pub struct Flow<A, B> {
    spec: FlowSpec,
    started: bool,
    /// The connecting endpoint.
    pub client: Endpoint<A>,
    /// The accepting endpoint.
    pub server: Endpoint<B>,
    /// Segments that reached the server before it accepted and were not SYNs,
    /// or SYNs the accept callback refused.
    pub unaccepted_segments: u64,
    /// The client's access link, when `access_delay` is not zero.
    access: Option<Delay>,
}

impl<A: Transport, B: Transport> Flow<A, B> {
    /// Whether the flow did everything it was set up to do.
    fn finished(&self, require_close: bool) -> bool {
        self.started
            && self.server.transport().is_some()
            && self.server.scoreboard().is_complete()
            && self.client.scoreboard().is_complete()
            && (!require_close
                || (self.client.closed().is_some() && self.server.closed().is_some()))
    }

    /// The flow's start time.
    pub fn start(&self) -> Instant {
        self.spec.start
    }
}

/// A deterministic simulation of one or more connection pairs over a shared
/// path.
pub struct Simulation<'f, A, B> {
    now: Instant,
    config: SimConfig,
    flows: Vec<Flow<A, B>>,
    forward: Path,
    reverse: Path,
    connect: Connect<'f, A>,
    accept: Accept<'f, B>,
    probe: Option<Probe<'f, A>>,
    trace: Trace,
    next_sample: Option<Instant>,
    next_id: u64,
    events: u64,
    scratch_packets: Vec<Packet>,
    scratch_segments: Vec<SegmentOut>,
}

impl<A, B> core::fmt::Debug for Simulation<'_, A, B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Simulation")
            .field("now", &self.now)
            .field("flows", &self.flows.len())
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

impl<'f, A: Transport, B: Transport> Simulation<'f, A, B> {
    /// A simulation of `flows` over `path`, whose nodes draw from `seed`.
    /// `connect(flow, now)` creates each client at its start time;
    /// `accept(flow, now, syn)` creates the server from the first SYN that
    /// reaches it (it consumes that SYN: the simulator does not pass it to
    /// `handle_segment` again), or refuses it with `None`.
    ///
    /// # Errors
    /// [`SimError::Config`] for a bad path, [`SimError::NoFlows`] for none.
    pub fn new(
        path: &PathConfig,
        flows: Vec<FlowSpec>,
        config: SimConfig,
        seed: u64,
        connect: impl FnMut(usize, Instant) -> A + 'f,
        accept: impl FnMut(usize, Instant, &RxSegment) -> Option<B> + 'f,
    ) -> Result<Self, SimError> {
        let (forward, reverse) = path.build(seed)?;
        Self::with_paths(forward, reverse, flows, config, connect, accept)
    }

    /// As [`Simulation::new`] with already built paths (for custom nodes).
    ///
    /// # Errors
    /// [`SimError::NoFlows`] for no flows.
    pub fn with_paths(
        forward: Path,
        reverse: Path,
        flows: Vec<FlowSpec>,
        config: SimConfig,
        connect: impl FnMut(usize, Instant) -> A + 'f,
        accept: impl FnMut(usize, Instant, &RxSegment) -> Option<B> + 'f,
    ) -> Result<Self, SimError> {
        if flows.is_empty() {
            return Err(SimError::NoFlows);
        }
        let origin = flows.iter().map(|f| f.start).min().unwrap_or(Instant::ZERO);
        let flows = flows
            .into_iter()
            .enumerate()
            .map(|(i, spec)| Flow {
                client: Endpoint::new(
                    i,
                    Side::Client,
                    spec.client.clone(),
                    spec.server.send_bytes,
                    origin,
                    config.window,
                ),
                server: Endpoint::new(
                    i,
                    Side::Server,
                    spec.server.clone(),
                    spec.client.send_bytes,
                    origin,
                    config.window,
                ),
                access: (spec.access_delay > Duration::ZERO).then(|| Delay::new(spec.access_delay)),
                spec,
                started: false,
                unaccepted_segments: 0,
            })
            .collect();
        Ok(Simulation {
            now: origin,
            next_sample: config.trace_interval.map(|_| origin),
            config,
            flows,
            forward,
            reverse,
            connect: Box::new(connect),
            accept: Box::new(accept),
            probe: None,
            trace: Trace::default(),
            next_id: 0,
            events: 0,
            scratch_packets: Vec::new(),
            scratch_segments: Vec::new(),
        })
    }

    /// Samples `probe(client)` (e.g. the congestion window) into the trace
    /// at every trace interval, next to the delivered bytes.
    pub fn set_probe(&mut self, probe: impl FnMut(&A) -> Option<u64> + 'f) {
        self.probe = Some(Box::new(probe));
    }

    /// Simulated time now.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The flows.
    pub fn flows(&self) -> &[Flow<A, B>] {
        &self.flows
    }

    /// The flows, mutable: to drain what their transports record between
    /// [`Simulation::run`] steps.
    pub fn flows_mut(&mut self) -> &mut [Flow<A, B>] {
        &mut self.flows
    }

    /// Counters of the forward path's nodes.
    pub fn forward_stats(&self) -> Vec<NodeStats> {
        self.forward.stats()
    }

    /// Counters of the reverse path's nodes.
    pub fn reverse_stats(&self) -> Vec<NodeStats> {
        self.reverse.stats()
    }

    /// The trace recorded so far.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    fn delivered(&self) -> Vec<u64> {
        self.flows
            .iter()
            .map(|f| f.server.scoreboard().upto())
            .collect()
    }

    fn finished(&self) -> bool {
        let require_close = self.config.require_close;
        self.flows.iter().all(|f| f.finished(require_close))
    }

    /// Runs until every flow finished or simulated time reaches `until`.
    ///
    /// # Errors
    /// A broken scoreboard, a premature close, a stall, a runaway transport
    /// (burst or event limit).
    pub fn run(&mut self, until: Instant) -> Result<Outcome, SimError> {
        loop {
            self.events += 1;
            if self.events > self.config.max_events {
                return Err(SimError::EventLimit {
                    events: self.events,
                    at: self.now,
                    delivered: self.delivered(),
                });
            }
            self.step()?;
            if self.finished() {
                self.sample(true);
                return Ok(Outcome::Finished);
            }
            let Some(next) = self.next_event() else {
                return Err(SimError::Stalled {
                    at: self.now,
                    delivered: self.delivered(),
                });
            };
            if next > until {
                self.now = self.now.max(until);
                self.sample(true);
                return Ok(Outcome::TimeReached);
            }
            self.now = self.now.max(next);
        }
    }

    /// The earliest scheduled time.
    fn next_event(&self) -> Option<Instant> {
        let paths = [self.forward.next_ready(), self.reverse.next_ready()];
        let flows = self.flows.iter().flat_map(|flow| {
            if flow.started {
                [
                    flow.client.next_timeout(),
                    flow.server.next_timeout(),
                    flow.client.next_paced(),
                    flow.server.next_paced(),
                ]
            } else {
                [Some(flow.spec.start), None, None, None]
            }
        });
        let access = self
            .flows
            .iter()
            .filter_map(|f| f.access.as_ref().and_then(|a| a.next_ready()));
        let next = paths.into_iter().chain(flows).flatten().chain(access).min();
        // Sampling alone must not keep a stalled simulation alive.
        match (next, self.next_sample) {
            (Some(n), Some(s)) => Some(n.min(s)),
            _ => next,
        }
    }

    /// Everything due at `self.now`.
    fn step(&mut self) -> Result<(), SimError> {
        let now = self.now;
        for i in 0..self.flows.len() {
            if !self.flows[i].started && self.flows[i].spec.start <= now {
                let client = (self.connect)(i, now);
                let flow = &mut self.flows[i];
                flow.started = true;
                flow.client.attach(now, client);
            }
        }
        for flow in &mut self.flows {
            if let Some(access) = flow.access.as_mut() {
                while let Some(packet) = access.pop(now) {
                    self.forward.push(now, packet);
                }
            }
        }
        let mut packets = core::mem::take(&mut self.scratch_packets);
        self.forward.advance(now, &mut packets);
        self.reverse.advance(now, &mut packets);
        for packet in packets.drain(..) {
            self.deliver(now, &packet)?;
        }
        self.scratch_packets = packets;

        for flow in &mut self.flows {
            if flow.client.fire_timeout(now) {
                self.events += 1;
            }
            if flow.server.fire_timeout(now) {
                self.events += 1;
            }
        }

        let mut segments = core::mem::take(&mut self.scratch_segments);
        for i in 0..self.flows.len() {
            let max_burst = self.config.max_burst;
            self.flows[i]
                .client
                .service(now, max_burst, &mut segments)?;
            self.send(now, i, Direction::ToServer, &mut segments);
            self.flows[i]
                .server
                .service(now, max_burst, &mut segments)?;
            self.send(now, i, Direction::ToClient, &mut segments);
            self.check_closed(now, i)?;
        }
        self.scratch_segments = segments;
        self.sample(false);
        Ok(())
    }

    fn send(
        &mut self,
        now: Instant,
        flow: usize,
        direction: Direction,
        segments: &mut Vec<SegmentOut>,
    ) {
        for segment in segments.drain(..) {
            self.events += 1;
            self.next_id += 1;
            let packet = Packet {
                id: self.next_id,
                flow,
                direction,
                ecn: segment.ecn,
                segment,
                sent: now,
            };
            let access = self.flows.get_mut(flow).and_then(|f| f.access.as_mut());
            match (direction, access) {
                (Direction::ToServer, Some(access)) => access.push(now, packet),
                (Direction::ToServer, None) => self.forward.push(now, packet),
                (Direction::ToClient, _) => self.reverse.push(now, packet),
            }
        }
    }

    fn deliver(&mut self, now: Instant, packet: &Packet) -> Result<(), SimError> {
        let Some(flow) = self.flows.get_mut(packet.flow) else {
            return Ok(());
        };
        match packet.direction {
            Direction::ToClient => flow.client.deliver(now, packet),
            Direction::ToServer if flow.server.transport().is_some() => {
                flow.server.deliver(now, packet)
            }
            Direction::ToServer => {
                let flags = packet.segment.header.flags;
                if !flags.contains(Flags::SYN) || flags.contains(Flags::ACK) {
                    flow.unaccepted_segments += 1;
                    return Ok(());
                }
                let Some(syn) = flow.server.receive(now, packet)? else {
                    flow.unaccepted_segments += 1;
                    return Ok(());
                };
                match (self.accept)(packet.flow, now, &syn) {
                    Some(server) => flow.server.attach(now, server),
                    None => flow.unaccepted_segments += 1,
                }
                Ok(())
            }
        }
    }

    fn check_closed(&self, now: Instant, i: usize) -> Result<(), SimError> {
        let flow = &self.flows[i];
        let data_done =
            flow.server.scoreboard().is_complete() && flow.client.scoreboard().is_complete();
        if data_done {
            return Ok(());
        }
        for (side, closed) in [
            (Side::Client, flow.client.closed()),
            (Side::Server, flow.server.closed()),
        ] {
            if let Some((_, reason)) = closed {
                return Err(SimError::Closed {
                    flow: i,
                    side,
                    reason,
                    at: now,
                    delivered: flow.server.scoreboard().upto(),
                });
            }
        }
        Ok(())
    }

    /// Records a trace sample if one is due (or, with `last`, a final one
    /// at the current time unless one was just taken).
    fn sample(&mut self, last: bool) {
        let (Some(interval), Some(at)) = (self.config.trace_interval, self.next_sample) else {
            return;
        };
        let taken_now = self
            .trace
            .samples()
            .last()
            .is_some_and(|s| s.time == self.now);
        let due = at <= self.now || (last && !taken_now);
        if !due {
            return;
        }
        for (i, flow) in self.flows.iter().enumerate() {
            if !flow.started {
                continue;
            }
            let cwnd = match (&mut self.probe, flow.client.transport()) {
                (Some(probe), Some(t)) => probe(t),
                _ => None,
            };
            self.trace.push(TraceSample {
                time: self.now,
                flow: i,
                cwnd,
                delivered: flow.server.scoreboard().upto(),
                acked: flow.client.acked(),
            });
        }
        // Next sample on the grid after now.
        if at <= self.now {
            let step = interval.as_nanos().max(1);
            let behind = (self.now - at).as_nanos();
            let steps = behind / step + 1;
            let offset = u64::try_from(steps * step).unwrap_or(u64::MAX);
            self.next_sample = Some(at + Duration::from_nanos(offset));
        }
    }
}
