//! [`ConnInfo`]: the transport's own view of one connection (state,
//! congestion control, RTT, counters), as an engine reports it.

/// One connection as its transport sees it ([`Host::conn_info`](super::Host::conn_info)),
/// where the engine reports one ([`Engine::conn_info`](super::Engine::conn_info)).
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    /// The TCP state.
    pub state: transports::tcp::State,
    /// The congestion controller.
    pub algorithm: transports::cc::Algorithm,
    /// Its phase ([`transports::cc::ControllerMetrics::phase`]).
    pub cc_phase: &'static str,
    /// In loss recovery (fast recovery or after an RTO).
    pub in_recovery: bool,
    /// The peer's MSS.
    pub mss: u16,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes, if the controller has one.
    pub ssthresh: Option<u64>,
    /// Pacing rate, bytes per second, if the controller paces.
    pub pacing_rate: Option<u64>,
    /// Smoothed RTT, once measured.
    pub srtt: Option<std::time::Duration>,
    /// RTT variation.
    pub rttvar: std::time::Duration,
    /// Smallest RTT seen.
    pub min_rtt: Option<std::time::Duration>,
    /// Current retransmission timeout (with backoff).
    pub rto: std::time::Duration,
    /// Bytes sent and not acknowledged.
    pub bytes_in_flight: u64,
    /// The peer's receive window.
    pub send_window: u64,
    /// Send-stream bytes acknowledged.
    pub acked: u64,
    /// Receive-stream bytes in order.
    pub received: u64,
    /// Segments sent.
    pub segments_sent: u64,
    /// Segments received.
    pub segments_received: u64,
    /// Retransmitted segments.
    pub retransmits: u64,
    /// Retransmission timeouts.
    pub rtos: u64,
    /// Tail loss probes sent.
    pub tail_loss_probes: u64,
    /// SACK holes in flight now.
    pub sack_holes: u64,
    /// What the handshake negotiated.
    pub negotiated: transports::tcp::Negotiated,
}
