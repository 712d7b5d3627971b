//! The completion queue's entries: what finished, on which connection.

use transports::segment::CloseReason;

use crate::idmap::ConnId;

/// What completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionKind {
    /// A receive work request is full of in-order bytes.
    Recv,
    /// A send work request is acknowledged.
    Send,
    /// The handshake completed (active or passive open).
    Connected,
    /// The peer sent FIN after `len` stream bytes.
    PeerClosed {
        /// Receive-stream length.
        len: u64,
    },
    /// The connection ended; its id is no longer valid after this.
    Closed(CloseReason),
}

/// An entry of the completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The connection.
    pub conn: ConnId,
    /// What completed.
    pub kind: CompletionKind,
    /// The work request's id (`Recv`/`Send`), else 0.
    pub wr_id: u64,
    /// Bytes of the work request (`Recv`/`Send`), else 0.
    pub len: u64,
}
