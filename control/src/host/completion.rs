//! The completion queue's bound. Its entries are the provider API's
//! [`Completion`](crate::provider::Completion)s.
//!
//! The queue is bounded, like an RDMA completion queue, and full means
//! back-pressure on the application rather than growth: while it holds
//! [`HostConfig::completion_queue`](super::HostConfig::completion_queue)
//! entries, posting a work request is refused
//! ([`HostError::CompletionQueueFull`](super::HostError::CompletionQueueFull))
//! and the engine reads no received packets, so nothing is placed or
//! retired (and the peer, seeing no ACKs and a window that does not open,
//! slows down) until the application takes completions. Events that do not
//! come from received packets (a connection timing out) are still queued,
//! so the bound can be passed by at most one receive batch's completions
//! and one close per connection.

/// Default capacity of the completion queue.
pub const COMPLETION_QUEUE_CAPACITY: usize = 1 << 16;
