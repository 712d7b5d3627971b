//! What crosses between the datapath and a transport: received segments
//! ([`RxSegment`]: the header and where the payload went) and segments to
//! send ([`TxSegment`]: header descriptors), both the one definition in
//! `proto`, re-exported here. No payload bytes, ever.

use crate::time::Instant;

pub use proto::{Ecn, Flags, RxSegment, TcpHeader, TcpOptions, TxSegment};

/// A segment the transport wants sent ([`TxSegment`]: the datapath builds
/// the packet from it) and, for pacing, when it may leave. It derefs to its
/// [`TxSegment`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentOut {
    /// What the datapath builds.
    pub segment: TxSegment,
    /// Earliest departure time, for pacing (`None`: send now).
    pub not_before: Option<Instant>,
}

impl SegmentOut {
    /// A segment without payload (ACK, RST, FIN…), not ECN-capable, sent
    /// now.
    pub fn control(header: TcpHeader) -> SegmentOut {
        SegmentOut {
            segment: TxSegment {
                header,
                payload: None,
                ecn: Ecn::NotEct,
                segment_size: 0,
            },
            not_before: None,
        }
    }
}

impl core::ops::Deref for SegmentOut {
    type Target = TxSegment;
    fn deref(&self) -> &TxSegment {
        &self.segment
    }
}

impl core::ops::DerefMut for SegmentOut {
    fn deref_mut(&mut self) -> &mut TxSegment {
        &mut self.segment
    }
}

/// What a connection reports to the control stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Connected,
    /// Every receive-stream byte below `upto` has arrived in order: the
    /// datapath may retire and complete receive segments ending at or
    /// before it.
    Received {
        /// New in-order point (receive-stream offset).
        upto: u64,
    },
    /// Every send-stream byte below `upto` is acknowledged: send segments
    /// ending at or before it may be completed.
    Acked {
        /// New cumulative acknowledgment point (send-stream offset).
        upto: u64,
    },
    /// The datapath placed `range` (receive-stream offsets) for a segment
    /// this connection refused, or for the part of one it did not keep
    /// (outside the window, beyond what it can track): the datapath must
    /// forget those bytes, so the genuine ones are placed over them. They
    /// lie above every `Received { upto }` reported, so the application
    /// never saw them.
    Discarded {
        /// Receive-stream offsets to forget.
        range: core::ops::Range<u64>,
    },
    /// The peer sent FIN after `len` stream bytes: no more data will come.
    PeerClosed {
        /// Length of the receive stream.
        len: u64,
    },
    /// The connection ended; no more segments will be sent or accepted.
    Closed {
        /// Why.
        reason: CloseReason,
    },
    /// After it ended, the connection received a SYN opening a new one on
    /// its 4-tuple: a newer SYN ended TIME-WAIT (RFC 6191, RFC 1122
    /// 4.2.2.13, as Linux does), or a SYN reached it after it closed.
    /// Always after [`Event::Closed`]. The owner hands that SYN to a
    /// listener on the port, or answers it with a RST (RFC 9293
    /// 3.10.7.1); the connection sent nothing for it.
    SynForListener,
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Both sides sent FIN and everything was acknowledged.
    Graceful,
    /// The peer reset the connection.
    Reset,
    /// The peer refused the connection (RST in answer to our SYN).
    Refused,
    /// We aborted (sent RST).
    Aborted,
    /// Retransmissions or keepalives went unanswered for too long.
    TimedOut,
    /// The peer kept its receive window closed through every zero-window
    /// probe allowed (`TcpConfig::max_persist_probes`).
    ZeroWindow,
}

/// The sans-IO interface every transport implements.
///
/// Methods are grouped as in quinn-proto: `handle_*` feed input, `poll_*`
/// drain output, and the application calls report what the application
/// posted. Time is always a parameter.
pub trait Transport {
    /// A segment for this connection arrived.
    fn handle_segment(&mut self, now: Instant, segment: &RxSegment);

    /// The next segment to send, if any. Call until it returns `None`.
    fn poll_transmit(&mut self, now: Instant) -> Option<SegmentOut>;

    /// When [`Transport::handle_timeout`] must next be called, if ever.
    fn poll_timeout(&self) -> Option<Instant>;

    /// The time returned by [`Transport::poll_timeout`] was reached.
    fn handle_timeout(&mut self, now: Instant);

    /// The next event for the control stack, if any.
    fn poll_event(&mut self) -> Option<Event>;

    /// The application posted `bytes` more bytes to the end of the send stream.
    fn send_posted(&mut self, now: Instant, bytes: u64);

    /// The application posted `bytes` more bytes of receive space after the
    /// end of what was posted before; the advertised window grows.
    fn recv_posted(&mut self, now: Instant, bytes: u64);

    /// Send FIN once every posted byte is sent.
    fn close(&mut self, now: Instant);

    /// Reset the connection now.
    fn abort(&mut self, now: Instant);
}
