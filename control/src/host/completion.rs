//! The completion queue's entries: what finished, on which connection.
//!
//! The queue is bounded, like an RDMA completion queue, and full means
//! back-pressure on the application rather than growth: while it holds
//! [`StackConfig::completion_queue`](crate::stack::StackConfig::completion_queue)
//! entries, posting a work request is refused
//! ([`StackError::CompletionQueueFull`](crate::stack::StackError::CompletionQueueFull))
//! and the engine reads no received packets, so nothing is placed or
//! retired (and the peer, seeing no ACKs and a window that does not open,
//! slows down) until the application takes completions. Events that do not
//! come from received packets (a connection timing out) are still queued,
//! so the bound can be passed by at most one receive batch's completions
//! and one close per connection.

use transports::segment::CloseReason;

use crate::idmap::ConnId;

/// Default capacity of the completion queue.
pub const COMPLETION_QUEUE_CAPACITY: usize = 1 << 16;

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
