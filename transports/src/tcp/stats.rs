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

impl Drops {
    /// Every reason as `(name, count)`, each name prefixed `tcp_` so it
    /// reads apart from the datapath's reasons in a stack's `drops()`.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("tcp_bad_options", self.bad_options),
            ("tcp_out_of_window", self.out_of_window),
            ("tcp_bad_ack", self.bad_ack),
            ("tcp_no_ack", self.no_ack),
            ("tcp_paws", self.paws),
            ("tcp_bad_rst", self.bad_rst),
            ("tcp_unexpected", self.unexpected),
            ("tcp_bad_placement", self.bad_placement),
            ("tcp_closed", self.closed),
            ("tcp_wrong_ports", self.wrong_ports),
            ("tcp_syn_in_window", self.syn_in_window),
            ("tcp_payload_discarded", self.payload_discarded),
        ]
        .into_iter()
    }
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
    /// RSTs that ended TIME-WAIT early (the peer had forgotten the
    /// connection): a graceful close, not a reset.
    pub time_wait_resets: u64,
    /// Newer SYNs that ended TIME-WAIT to open a new connection on the
    /// same 4-tuple ([`crate::Event::SynForListener`]).
    pub time_wait_reopened: u64,
    /// Dropped input, by reason.
    pub drops: Drops,
}

#[cfg(test)]
mod tests {
    use super::Drops;

    #[test]
    fn every_drop_reason_is_named_once_with_its_count() {
        let d = Drops {
            bad_options: 1,
            out_of_window: 2,
            bad_ack: 3,
            no_ack: 4,
            paws: 5,
            bad_rst: 6,
            unexpected: 7,
            bad_placement: 8,
            closed: 9,
            wrong_ports: 10,
            syn_in_window: 11,
            payload_discarded: 12,
        };
        let v: Vec<_> = d.iter().collect();
        assert_eq!(v.len(), 12);
        assert_eq!(v.iter().map(|(_, n)| n).sum::<u64>(), 78);
        assert!(v.contains(&("tcp_paws", 5)) && v.contains(&("tcp_no_ack", 4)));
        let mut names: Vec<_> = v.iter().map(|(n, _)| *n).collect();
        names.dedup();
        assert!(names.iter().all(|n| n.starts_with("tcp_")) && names.len() == 12);
    }
}
