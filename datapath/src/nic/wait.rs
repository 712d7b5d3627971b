//! Sleeping until this queue has something to receive: the queue's
//! catch-all socket, every per-flow socket and a caller's wakeup event,
//! watched in one `ppoll` (see [`crate::sys::wait`]).

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use super::Nic;
pub use crate::sys::wait::{wait_readable, EventFd};

/// Longest sleep of a queue that shares its interface with other queues:
/// frames they forward land in this queue's inbox, which no descriptor
/// signals, so the wait is cut short to look at it.
pub const GROUP_WAIT_CAP: Duration = Duration::from_millis(1);

impl Nic {
    /// Sleeps until a socket of this queue has received something, `wake`
    /// (another thread's event) is signalled, or `timeout` passes; returns
    /// whether something became readable. At most [`GROUP_WAIT_CAP`]
    /// when other queues share the interface.
    ///
    /// # Errors
    /// `ppoll` failed (not for an interruption, which returns `false`).
    pub fn wait(
        &mut self,
        wake: Option<BorrowedFd<'_>>,
        timeout: Duration,
    ) -> Result<bool, std::io::Error> {
        self.wait_also(wake.as_slice(), timeout)
    }

    /// As [`Self::wait`], watching every descriptor of `extra` too (a loop
    /// that serves more than this queue).
    ///
    /// # Errors
    /// `ppoll` failed (not for an interruption, which returns `false`).
    pub fn wait_also(
        &mut self,
        extra: &[BorrowedFd<'_>],
        timeout: Duration,
    ) -> Result<bool, std::io::Error> {
        let timeout = if self.group.queues() > 1 {
            timeout.min(GROUP_WAIT_CAP)
        } else {
            timeout
        };
        let mut fds: Vec<BorrowedFd<'_>> = self.watched().collect();
        fds.extend_from_slice(extra);
        let ready = wait_readable(&fds, timeout)?;
        Ok(ready > 0)
    }

    /// The descriptors [`Self::wait`] watches (the queue's socket and its
    /// per-flow sockets), for a loop that sleeps in a `poll` of its own.
    pub fn wait_fds(&self) -> Vec<RawFd> {
        self.watched().map(|fd| fd.as_raw_fd()).collect()
    }

    /// The descriptors [`Self::wait`] watches, borrowed (for a loop that
    /// sleeps on several queues at once; with more than one queue in the
    /// group, it must not sleep past [`GROUP_WAIT_CAP`]).
    pub fn watched(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        std::iter::once(self.port.fd()).chain(
            self.open_sockets
                .iter()
                .filter_map(|&i| self.flow_sockets.get(i).and_then(Option::as_ref))
                .map(|(_, sock)| sock.fd()),
        )
    }
}
