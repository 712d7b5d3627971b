//! The calls a [`Host`] over the header-only TCP engine has beyond the
//! [`crate::provider::Provider`] interface: its own loop's pieces (one
//! pass, the next deadline, the descriptors to sleep on) for the socket
//! shim, and the TCP's state (retransmissions, `TCP_INFO`, urgent data,
//! the controller).

use std::os::fd::AsFd;

use super::{next_deadline, ConnId, ConnInfo, DriverMode, Engine, Host, Instant, TcpEngine};

impl Host<TcpEngine> {
    /// TCP retransmissions and retransmission timeouts of every connection
    /// this stack has had, open or closed.
    pub fn retransmissions(&self) -> (u64, u64) {
        self.engine()
            .retransmissions(self.core())
            .unwrap_or_default()
    }

    /// One pass (receive, transport, send) without the idle policy: for a
    /// loop that sleeps by itself, outside a lock it shares with other
    /// threads (the socket shim's), using [`Self::next_deadline`] and
    /// [`Self::wait_fds`].
    pub fn poll_pass(&mut self) -> usize {
        let (core, engine) = self.parts();
        let now = core.now();
        let work = engine.poll_once(core, now);
        self.publish_if_due(now);
        work
    }

    /// When the loop next has something to do without new input (now
    /// while outputs wait for the TX ring, else the inline transport's
    /// next timer); `None` in dedicated mode, whose thread runs its timers.
    pub fn next_deadline(&self) -> Option<Instant> {
        let engine = self.engine();
        next_deadline(
            &engine.driver,
            &engine.waiting,
            !engine.send_waiting.is_empty(),
        )
    }

    /// The descriptors that become readable when this queue receives (the
    /// queue's socket and its per-flow sockets), for a loop that sleeps in
    /// its own `poll`. They stay valid while the flows are open.
    pub fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.core().nic.wait_fds()
    }

    /// Before a loop that serves more than this stack (the daemon's)
    /// sleeps in a `poll` of its own: adds what wakes it for this stack to
    /// `fds` (the queue's sockets and, in dedicated mode, the transport
    /// thread's signal) and says whether it may sleep now (`false`: the
    /// transport thread pushed outputs meanwhile). Call
    /// [`Self::sleep_over`] after, slept or not. Loops over several
    /// queues of a group sleep at most [`datapath::nic::GROUP_WAIT_CAP`].
    pub fn sleep_fds<'a>(&'a self, fds: &mut Vec<std::os::fd::BorrowedFd<'a>>) -> bool {
        fds.extend(self.core().nic.watched());
        match &self.engine().driver {
            DriverMode::Inline(_) => true,
            DriverMode::Thread(t) => {
                fds.push(t.wakeups.datapath.as_fd());
                t.wakeups.datapath_may_sleep(&t.from_driver)
            }
        }
    }

    /// The loop that asked [`Self::sleep_fds`] is awake again.
    pub fn sleep_over(&self) {
        if let DriverMode::Thread(t) = &self.engine().driver {
            t.wakeups.datapath_awake();
        }
    }

    /// The transport's view of connection `id` (as `TCP_INFO` gives it),
    /// when the transport runs inline; `None` for an unknown connection or
    /// in dedicated mode.
    pub fn conn_info(&self, id: ConnId) -> Option<ConnInfo> {
        self.engine().conn_info(self.core(), id)
    }

    /// The receive-stream offset of the urgent byte the peer of `id`
    /// marked last (URG), when the transport runs inline; `None` if it
    /// never marked one, or in dedicated mode.
    pub fn urgent_mark(&self, id: ConnId) -> Option<u64> {
        self.engine().urgent_mark(self.core(), id)
    }

    /// The congestion controller of the connections [`Provider::connect`](crate::provider::Provider::connect)
    /// opens from now on (and of passive opens): a socket's
    /// `TCP_CONGESTION` before `connect`.
    pub fn set_algorithm(&mut self, algorithm: transports::cc::Algorithm) {
        self.parts().1.tcp.algorithm = algorithm;
    }

    /// The controller new connections get.
    pub fn algorithm(&self) -> transports::cc::Algorithm {
        self.engine().tcp.algorithm
    }
}
