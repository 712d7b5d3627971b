//! [`TcpCounters`]: what the header-only TCP engine counts beside its
//! connections' own counters.

use crate::idle::IdleCounters;

/// The header-only TCP engine's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Connections accepted from a listener.
    pub accepted: u64,
    /// Connections opened actively.
    pub connected: u64,
    /// SYNs refused: malformed, backlog full, or the flow table full.
    pub syn_refused: u64,
    /// Segments for no connection and no listener (dropped).
    pub stray_segments: u64,
    /// Handshakes given up for a newer SYN because the listener had
    /// `max_half_open` under way.
    pub half_open_evicted: u64,
    /// Connection requests (SYNs) that reached a connection which had
    /// ended, or which a newer SYN ended in TIME-WAIT (RFC 6191, as on
    /// Linux), and went on to the port's listener.
    pub syns_passed_on: u64,
    /// Segments the datapath refused to build (a transport bug; dropped).
    pub tx_refused: u64,
    /// Retirements the datapath refused (a transport bug; logged).
    pub retire_refused: u64,
    /// Segments handed to a transport (each a fixed-size
    /// [`proto::RxSegment`]: header fields and a stream range, no payload
    /// bytes).
    pub segments_to_transport: u64,
    /// Bytes of those records: what actually crossed from the datapath to
    /// the transport. Compare with the payload bytes the datapath placed.
    pub bytes_to_transport: u64,
    /// Retransmitted segments of connections that have closed.
    pub closed_retransmits: u64,
    /// Retransmission timeouts of connections that have closed.
    pub closed_rtos: u64,
    /// Tail loss probes of connections that have closed.
    pub closed_tail_loss_probes: u64,
    /// Polls that read no received packets because outputs were waiting
    /// for the TX ring or the completion queue was full (back-pressure).
    pub rx_paused: u64,
    /// How often and how long the loop the application's `poll()` runs
    /// slept (see [`crate::idle`]).
    pub loop_idle: IdleCounters,
    /// The same for the transport thread (dedicated mode; zero otherwise).
    pub transport_idle: IdleCounters,
}
