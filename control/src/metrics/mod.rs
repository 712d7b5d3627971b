//! What an operator sees of a running stack: each queue's loop takes a
//! [`QueueSnapshot`] of its own counters and connections now and then
//! ([`Host::set_metrics`](crate::host::Host::set_metrics)) and leaves it on
//! a shared [`Board`]; the metrics
//! endpoint ([`serve`]) renders the board as Prometheus / OpenMetrics text
//! on `/metrics` and as JSON on `/stats` (what `zerosplit stats` reads).
//!
//! The daemon ([`Daemon::set_metrics`](crate::daemon::Daemon::set_metrics))
//! leaves a [`DaemonSnapshot`] beside them: its counters and every
//! attached application, rendered with an `app` label per application.
//!
//! The datapath never waits for a reader: the loop fills a snapshot from
//! counters it owns, without a lock, and takes the board's lock only to
//! swap one pointer, a few times a second ([`PUBLISH_EVERY`]). A scrape
//! costs the loop nothing but that.

mod attachments;
mod expose;
mod families;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use attachments::{AttachmentCounters, AttachmentView, DaemonCounters, DaemonSnapshot};
pub use expose::{
    serve, serve_with, MetricsError, MetricsServer, DEFAULT_MAX_CONNECTIONS, MAX_REQUEST_HEAD,
    REQUEST_TIMEOUT,
};

/// How often a loop publishes its snapshot.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(200);

/// One queue's counters and connections at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueSnapshot {
    /// The interface.
    pub interface: String,
    /// The receive queue.
    pub queue: u32,
    /// The transport (`tcp`, `smoltcp`).
    pub transport: String,
    /// When it was taken, milliseconds since the Unix epoch.
    pub taken_unix_ms: u64,
    /// Seconds since the queue's stack started.
    pub uptime_seconds: f64,
    /// Seconds of that its loop slept (idle); the rest it ran.
    pub loop_idle_seconds: f64,
    /// Packets received from the kernel.
    pub rx_packets: u64,
    /// Bytes of those packets.
    pub rx_bytes: u64,
    /// Packets queued for sending.
    pub tx_packets: u64,
    /// Bytes of those packets.
    pub tx_bytes: u64,
    /// Packets dropped, by reason (every reason the stack counts, zeros
    /// included, so a series exists before its first drop).
    pub drops: BTreeMap<String, u64>,
    /// Placement verdicts of received segments (`placed`, `trimmed`,
    /// `duplicate`, `beyond_posted`, …).
    pub verdicts: BTreeMap<String, u64>,
    /// Payload bytes written into posted memory.
    pub bytes_placed: u64,
    /// Segments sent again.
    pub retransmits: u64,
    /// Retransmission timeouts.
    pub rtos: u64,
    /// Tail loss probes.
    pub tail_loss_probes: u64,
    /// The kernel's `XDP_STATISTICS`, summed over the queue's sockets
    /// (`rx_dropped`, `rx_invalid_descs`, `tx_invalid_descs`,
    /// `rx_ring_full`, `rx_fill_ring_empty_descs`, `tx_ring_empty_descs`).
    pub xdp: BTreeMap<String, u64>,
    /// UMEM receive frames free (in the free list or on the fill ring).
    pub umem_frames_free: u64,
    /// UMEM receive frames holding a packet not yet read.
    pub umem_frames_in_use: u64,
    /// Open connections.
    pub connections: Vec<ConnSnapshot>,
}

impl QueueSnapshot {
    /// Connections by TCP state name.
    pub fn states(&self) -> BTreeMap<&str, u64> {
        let mut m = BTreeMap::new();
        for c in &self.connections {
            *m.entry(c.state.as_str()).or_default() += 1;
        }
        m
    }
}

/// One connection, named as `ss -ti` names the fields where it has them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnSnapshot {
    /// The connection's slot in the stack (reused after it closes).
    pub id: u64,
    /// Local address.
    pub local: String,
    /// Remote address.
    pub peer: String,
    /// TCP state (`ESTABLISHED`, `FIN-WAIT-1`, …).
    pub state: String,
    /// Send-stream bytes the peer acknowledged (`bytes_acked`).
    pub bytes_acked: u64,
    /// Receive-stream bytes in order (`bytes_received`).
    pub bytes_received: u64,
    /// Receive space posted beyond what arrived, bytes.
    pub posted_recv: u64,
    /// Payload posted and not yet acknowledged, bytes.
    pub posted_send: u64,
    /// What the transport itself reports; absent for a transport that
    /// does not (smoltcp).
    pub tcp: Option<TcpSnapshot>,
}

/// The header-only TCP's view of a connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSnapshot {
    /// Congestion controller (`cubic`, `bbr`, …).
    pub cc: String,
    /// Its phase (`slow_start`, `probe_bw`, …; empty if it has none).
    pub cc_phase: String,
    /// Loss state: `open` or `recovery`.
    pub ca_state: String,
    /// Peer's MSS.
    pub mss: u16,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes.
    pub ssthresh: Option<u64>,
    /// Pacing rate, bytes per second.
    pub pacing_rate: Option<u64>,
    /// Smoothed RTT, microseconds.
    pub rtt_us: Option<u64>,
    /// RTT variation, microseconds.
    pub rttvar_us: u64,
    /// Smallest RTT seen, microseconds.
    pub minrtt_us: Option<u64>,
    /// Retransmission timeout, milliseconds.
    pub rto_ms: u64,
    /// Bytes in flight.
    pub unacked: u64,
    /// Peer's receive window, bytes.
    pub snd_wnd: u64,
    /// Segments sent again (`retrans`).
    pub retrans: u64,
    /// Retransmission timeouts.
    pub rtos: u64,
    /// Tail loss probes.
    pub tlps: u64,
    /// SACK holes now.
    pub sack_holes: u64,
    /// Segments sent.
    pub segs_out: u64,
    /// Segments received.
    pub segs_in: u64,
}

/// What `/stats` answers (and `zerosplit stats --json` prints).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Every queue that published, by queue.
    pub queues: Vec<QueueSnapshot>,
    /// The daemon and its attachments, when the process is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonSnapshot>,
}

/// Where every queue's loop leaves its latest snapshot (and the daemon
/// its own); readers clone it.
#[derive(Debug, Default)]
pub struct Board {
    slots: Mutex<BTreeMap<u32, Arc<QueueSnapshot>>>,
    daemon: Mutex<Option<Arc<DaemonSnapshot>>>,
}

impl Board {
    /// An empty board.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Replaces `snapshot.queue`'s snapshot.
    pub fn publish(&self, snapshot: QueueSnapshot) {
        let s = Arc::new(snapshot);
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(s.queue, s);
    }

    /// The latest snapshot of every queue that published one, by queue.
    pub fn read(&self) -> Vec<Arc<QueueSnapshot>> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Replaces the daemon's snapshot.
    pub fn publish_daemon(&self, snapshot: DaemonSnapshot) {
        *self.daemon.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(snapshot));
    }

    /// The daemon's latest snapshot, if one was published.
    pub fn daemon(&self) -> Option<Arc<DaemonSnapshot>> {
        self.daemon
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Everything on the board, as `/stats` shows it.
    pub fn stats(&self) -> Stats {
        Stats {
            queues: self.read().iter().map(|s| (**s).clone()).collect(),
            daemon: self.daemon().map(|d| (*d).clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn board_keeps_the_latest_snapshot_per_queue() {
        let board = Board::new();
        for (queue, rx) in [(1, 10), (0, 5), (1, 20)] {
            board.publish(QueueSnapshot {
                queue,
                rx_packets: rx,
                ..QueueSnapshot::default()
            });
        }
        let v: Vec<_> = board
            .read()
            .iter()
            .map(|s| (s.queue, s.rx_packets))
            .collect();
        assert_eq!(v, vec![(0, 5), (1, 20)]);
    }

    #[test]
    fn states_count_connections_by_state() {
        let s = QueueSnapshot {
            connections: ["ESTABLISHED", "TIME-WAIT", "ESTABLISHED"]
                .map(|state| ConnSnapshot {
                    state: state.into(),
                    ..ConnSnapshot::default()
                })
                .to_vec(),
            ..QueueSnapshot::default()
        };
        let st = s.states();
        assert_eq!((st["ESTABLISHED"], st["TIME-WAIT"]), (2, 1));
    }
}
