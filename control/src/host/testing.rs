//! What the Pair harness ([`crate::testing`]) needs of a host beyond the
//! provider API (feature `testing`): time as a parameter, the datapath for
//! the fake kernel's hands, and a look at the host's tables.

use datapath::flow_table::FlowId;
use datapath::nic::Nic;
use transports::Instant;

use super::{Engine, Host};
use crate::idmap::ConnId;

impl<E: Engine> Host<E> {
    /// Sets the host's clock: every reading (polls, posts, timers) is `now`
    /// until the next call. Time then moves only when the test says.
    pub fn set_clock(&mut self, now: Instant) {
        self.core.manual_clock = Some(now);
    }

    /// The datapath (for a [`datapath::testing::FakeKernel`] to deliver
    /// into and take from).
    pub fn nic_mut(&mut self) -> &mut Nic {
        &mut self.core.nic
    }

    /// The datapath flow of connection `id`, while the host knows it.
    pub fn flow_of(&self, id: ConnId) -> Option<FlowId> {
        self.core.conns.get(&id).map(|c| c.flow)
    }
}
