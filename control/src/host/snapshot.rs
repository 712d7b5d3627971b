//! [`Host::snapshot`]: the queue's counters and connections as the
//! metrics endpoint and `zerosplit stats` show them.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use transports::tcp::State;

use super::{ConnInfo, Engine, Host};
use crate::metrics::{ConnSnapshot, QueueSnapshot, TcpSnapshot};
use crate::provider::Provider;

/// The payload copies this queue's datapath and transport made, over
/// every flow, open or closed: what `zerosplit bench` counts per byte to
/// show that an attached application pays the same copies as an
/// in-process one (`zerosplit daemon --report`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PayloadCopies {
    /// Payload bytes placed from RX frames into registered memory (one
    /// copy each).
    pub rx_placed: u64,
    /// Payload bytes copied from registered memory into TX frames.
    pub tx_copied: u64,
    /// Payload bytes sent straight from registered memory (no copy).
    pub tx_chained: u64,
    /// Payload bytes the transport read or wrote (0 for the header-only
    /// TCP; smoltcp copies through its socket buffers).
    pub transport_touched: u64,
}

impl PayloadCopies {
    /// Payload bytes copied, all kinds together.
    pub fn copied(&self) -> u64 {
        self.rx_placed + self.tx_copied + self.transport_touched
    }
}

impl std::ops::Add for PayloadCopies {
    type Output = PayloadCopies;
    /// Two queues' copies together.
    fn add(self, o: PayloadCopies) -> PayloadCopies {
        PayloadCopies {
            rx_placed: self.rx_placed + o.rx_placed,
            tx_copied: self.tx_copied + o.tx_copied,
            tx_chained: self.tx_chained + o.tx_chained,
            transport_touched: self.transport_touched + o.transport_touched,
        }
    }
}

impl<E: Engine> Host<E> {
    /// The payload copies so far ([`PayloadCopies`]).
    pub fn payload_copies(&self) -> PayloadCopies {
        let core = &self.core;
        let mut flows = self.engine.closed_flow_counters();
        for c in core.conns.values() {
            if let Some(f) = core.nic.flow(c.flow) {
                flows.add(&f.counters);
            }
        }
        let nic = core.nic.counters();
        PayloadCopies {
            rx_placed: flows.bytes_placed,
            tx_copied: nic.tx_payload_copied,
            tx_chained: nic.tx_payload_chained,
            transport_touched: self.engine.payload_bytes_touched(),
        }
    }

    /// Takes a snapshot of this queue: counters it owns, the kernel's
    /// `XDP_STATISTICS` of its sockets (a `getsockopt` each) and every
    /// open connection. For a loop to call now and then, not per packet.
    pub fn snapshot(&mut self) -> QueueSnapshot {
        let frames = self.core.nic.rx_frame_count();
        let core = &self.core;
        let nic = core.nic.counters();
        let port = core.nic.port_counters();
        let (retransmits, rtos) = self.engine.retransmissions(core).unwrap_or_default();
        // Every verdict of every flow, open or closed, and of packets that
        // matched none.
        let mut flows = self.engine.closed_flow_counters();
        flows.add(&nic.rx);
        for c in core.conns.values() {
            if let Some(f) = core.nic.flow(c.flow) {
                flows.add(&f.counters);
            }
        }
        let verdicts = [
            "placed",
            "trimmed",
            "duplicate",
            "beyond_posted",
            "no_payload",
            "discarded",
            "csum_partial",
        ];
        let mut drops: BTreeMap<String, u64> = flows
            .drops()
            .chain(port.drops())
            .chain(core.nic.kernel_stats().drops())
            .map(|(name, _)| name)
            .chain(["udp_dropped"])
            .chain(self.engine.drop_reasons())
            .map(|name| (name.to_owned(), 0))
            .collect();
        for (name, n) in self.engine.drops(core) {
            *drops.entry(name.to_owned()).or_default() = n;
        }
        let uptime = core.epoch.elapsed();
        let connections = core
            .conns
            .iter()
            .filter(|(_, c)| !c.closed)
            .map(|(&id, c)| {
                let flow = core.nic.flow(c.flow);
                let (local, peer) = self
                    .endpoints(id)
                    .map(|(l, r)| (l.to_string(), r.to_string()))
                    .unwrap_or_default();
                ConnSnapshot {
                    id: u64::from(id.0.index()),
                    local,
                    peer,
                    state: state_name(c.state).to_owned(),
                    bytes_acked: c.acked,
                    bytes_received: c.received,
                    posted_recv: flow.map_or(0, |f| f.recv.posted_end().saturating_sub(c.received)),
                    posted_send: flow.map_or(0, |f| f.send.posted_end().saturating_sub(c.acked)),
                    tcp: self.engine.conn_info(core, id).as_ref().map(tcp_snapshot),
                }
            })
            .collect();
        QueueSnapshot {
            interface: core.iface.name.clone(),
            queue: core.nic.queue(),
            transport: self.transport_name().to_owned(),
            taken_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            uptime_seconds: uptime.as_secs_f64(),
            loop_idle_seconds: Duration::from_nanos(self.engine.slept_ns())
                .min(uptime)
                .as_secs_f64(),
            rx_packets: port.rx_packets,
            rx_bytes: port.rx_bytes,
            tx_packets: port.tx_packets,
            tx_bytes: port.tx_bytes,
            drops,
            verdicts: flows
                .iter()
                .filter(|(name, _)| verdicts.contains(name))
                .map(|(name, n)| (name.to_owned(), n))
                .collect(),
            bytes_placed: flows.bytes_placed,
            retransmits,
            rtos,
            tail_loss_probes: self.engine.tail_loss_probes(core),
            xdp: core
                .nic
                .kernel_stats()
                .iter()
                .into_iter()
                .map(|(name, n)| (name.to_owned(), n))
                .collect(),
            umem_frames_free: u64::from(frames.free + frames.fill),
            umem_frames_in_use: u64::from(frames.rx),
            connections,
        }
    }
}

fn tcp_snapshot(i: &ConnInfo) -> TcpSnapshot {
    let us = |d: Duration| d.as_micros() as u64;
    TcpSnapshot {
        cc: i.algorithm.name().to_owned(),
        cc_phase: i.cc_phase.to_owned(),
        ca_state: if i.in_recovery { "recovery" } else { "open" }.to_owned(),
        mss: i.mss,
        cwnd: i.cwnd,
        ssthresh: i.ssthresh,
        pacing_rate: i.pacing_rate,
        rtt_us: i.srtt.map(us),
        rttvar_us: us(i.rttvar),
        minrtt_us: i.min_rtt.map(us),
        rto_ms: i.rto.as_millis() as u64,
        unacked: i.bytes_in_flight,
        snd_wnd: i.send_window,
        retrans: i.retransmits,
        rtos: i.rtos,
        tlps: i.tail_loss_probes,
        sack_holes: i.sack_holes,
        segs_out: i.segments_sent,
        segs_in: i.segments_received,
    }
}

/// The state as `ss` prints it.
pub(crate) fn state_name(s: State) -> &'static str {
    match s {
        State::SynSent => "SYN-SENT",
        State::SynReceived => "SYN-RECV",
        State::Established => "ESTABLISHED",
        State::FinWait1 => "FIN-WAIT-1",
        State::FinWait2 => "FIN-WAIT-2",
        State::CloseWait => "CLOSE-WAIT",
        State::Closing => "CLOSING",
        State::LastAck => "LAST-ACK",
        State::TimeWait => "TIME-WAIT",
        State::Closed => "CLOSED",
    }
}
