//! Connection states (RFC 9293 3.3.2). LISTEN lives outside a connection:
//! [`TcpConnection::accept`](super::TcpConnection::accept) starts in
//! SYN-RECEIVED from a received SYN.

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Our SYN is out; waiting for the peer's.
    SynSent,
    /// Both SYNs seen; waiting for the ACK of ours.
    SynReceived,
    /// Data flows both ways.
    Established,
    /// We sent FIN; it is not yet acknowledged.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's.
    FinWait2,
    /// The peer sent FIN; we may still send.
    CloseWait,
    /// Both sent FIN at once; waiting for the ACK of ours.
    Closing,
    /// The peer closed first and we sent FIN; waiting for its ACK.
    LastAck,
    /// Both FINs acknowledged; waiting out old duplicates.
    TimeWait,
    /// Nothing more will be sent or accepted (except RST replies).
    Closed,
}

impl State {
    /// Whether the handshake has completed (RFC 9293 "synchronized" states,
    /// SYN-RECEIVED included as the RFC does).
    pub fn is_synchronized(self) -> bool {
        !matches!(self, State::SynSent | State::Closed)
    }

    /// States in which the peer may still send us data.
    pub fn can_receive(self) -> bool {
        matches!(
            self,
            State::SynReceived | State::Established | State::FinWait1 | State::FinWait2
        )
    }

    /// States in which we may still send new data.
    pub fn can_send(self) -> bool {
        matches!(self, State::Established | State::CloseWait)
    }
}
