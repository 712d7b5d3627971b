//! Sleeping until this queue has something to receive: the queue's
//! catch-all socket, every per-flow socket and a caller's wakeup event,
//! watched in one `ppoll` (see [`crate::sys::wait`]).

use std::os::fd::BorrowedFd;
use std::time::Duration;

use super::Nic;
use crate::sys::wait::wait_readable;
pub use crate::sys::wait::EventFd;

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
        let timeout = if self.group.queues() > 1 {
            timeout.min(GROUP_WAIT_CAP)
        } else {
            timeout
        };
        let mut fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(self.open_sockets.len() + 2);
        fds.push(self.port.fd());
        fds.extend(
            self.open_sockets
                .iter()
                .filter_map(|&i| self.flow_sockets.get(i).and_then(Option::as_ref))
                .map(|(_, sock)| sock.fd()),
        );
        fds.extend(wake);
        let ready = wait_readable(&fds, timeout)?;
        Ok(ready > 0)
    }
}
