//! Plain counters a connection keeps for metrics and tests.

/// Segments dropped on input, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// The options area was malformed.
    pub bad_options: u64,
    /// Sequence number outside the receive window (RFC 9293 3.10.7.4).
    pub out_of_window: u64,
    /// ACK of data never sent, or too old (RFC 5961 5.2).
    pub bad_ack: u64,
    /// A synchronized-state segment without ACK.
    pub no_ack: u64,
    /// Timestamp older than TS.Recent (PAWS, RFC 7323 5).
    pub paws: u64,
    /// RST that did not match (out of window, in the window but not at
    /// RCV.NXT: a challenge ACK, RFC 5961 3.2; or unacceptable in SYN-SENT).
    pub bad_rst: u64,
    /// A segment that did not fit the state (e.g. no SYN in SYN-SENT).
    pub unexpected: u64,
    /// A SYN in a synchronized state, answered with a challenge ACK (RFC
    /// 5961 4.2).
    pub syn_in_window: u64,
    /// Payload the datapath placed outside the segment or the posted space.
    pub bad_placement: u64,
    /// Segments whose placed payload was refused, in whole or in part (the
    /// segment failed a check, or lay partly outside the window): the
    /// datapath is told to forget those bytes ([`crate::segment::Event::Discarded`]).
    pub payload_discarded: u64,
    /// Segments arriving after the connection closed.
    pub closed: u64,
    /// Ports that are not this connection's (a demultiplexing error).
    pub wrong_ports: u64,
}

/// Counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Segments handed to the datapath.
    pub segments_sent: u64,
    /// Payload bytes handed to the datapath, retransmissions included.
    pub bytes_sent: u64,
    /// Segments received.
    pub segments_received: u64,
    /// Payload bytes accepted into the receive stream.
    pub bytes_received: u64,
    /// Data or FIN segments sent again.
    pub retransmits: u64,
    /// Payload bytes sent again.
    pub retransmitted_bytes: u64,
    /// Retransmission timeouts.
    pub rtos: u64,
    /// Retransmissions found lost again before the RTO.
    pub lost_retransmits: u64,
    /// Tail loss probes sent (RFC 8985 7).
    pub tail_loss_probes: u64,
    /// Probes whose ACK showed they repaired a loss (RFC 8985 7.4).
    pub tlp_repairs: u64,
    /// Fast recovery episodes entered (SACK or NewReno).
    pub fast_recoveries: u64,
    /// Duplicate ACKs received.
    pub dup_acks: u64,
    /// SACK blocks received.
    pub sack_blocks_received: u64,
    /// D-SACK reports received (RFC 2883).
    pub dsacks_received: u64,
    /// SACK blocks sent.
    pub sack_blocks_sent: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// Challenge ACKs suppressed by the rate limit.
    pub challenge_acks_suppressed: u64,
    /// Answers to unacceptable pure ACKs suppressed by the rate limit.
    pub oow_acks_suppressed: u64,
    /// Zero-window probes sent.
    pub window_probes: u64,
    /// Keepalive probes sent.
    pub keepalives: u64,
    /// Pure ACKs sent.
    pub acks_sent: u64,
    /// RSTs sent.
    pub resets_sent: u64,
    /// RSTs not queued because too many replies were waiting.
    pub resets_suppressed: u64,
    /// Dropped input, by reason.
    pub drops: Drops,
}
