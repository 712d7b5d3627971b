//! A [`Nic`] over the fake kernel: the same poll loop, tables and TX path,
//! over in-memory rings and steering tables, with the kernel's side in the
//! test's hands ([`crate::testing`]).

use std::sync::Arc;

use super::{Nic, NicConfig, NicError};
use crate::checksum::ChecksumPolicy;
use crate::group::QueueGroup;
use crate::steer::{SteerAction, Steering};
use crate::xsk::testing::{FakeKernel, RxRefused, RxTarget};
use crate::xsk::XskPort;

/// What became of a frame the fake kernel was given to receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// On the RX ring of the socket in XSKMAP `slot` (the queue's
    /// catch-all slot is its queue number).
    Received {
        /// The XSKMAP slot the steering chose.
        slot: u32,
    },
    /// Not ours: the steering passed it to the (absent) kernel stack.
    Passed,
    /// The steering dropped it: a slot of ours without a socket.
    Dropped,
    /// The steering chose a socket, but it could not take the packet.
    Refused(RxRefused),
}

impl Nic {
    /// A datapath over the fake kernel: the only queue (`config.queue`
    /// must be 0) of an in-memory interface called "fake0". No socket, no
    /// XDP program, no root. Huge pages and need_wakeup in `config` are
    /// ignored; checksums are verified ([`ChecksumPolicy::Verify`]).
    ///
    /// # Errors
    /// As [`Nic::open_in`] for the configuration; the UMEM mapping failed.
    pub fn fake(config: NicConfig) -> Result<(Nic, FakeKernel), NicError> {
        let group = QueueGroup::in_memory("fake0", config.queue + 1)?;
        Nic::fake_in(&group, config)
    }

    /// Queue `config.queue` of an in-memory group
    /// ([`QueueGroup::in_memory`]) over the fake kernel.
    ///
    /// # Errors
    /// As [`Nic::fake`]; a group with real steering.
    pub fn fake_in(
        group: &Arc<QueueGroup>,
        config: NicConfig,
    ) -> Result<(Nic, FakeKernel), NicError> {
        Nic::check_open(group, &config)?;
        if !matches!(*group.steering(), Steering::Memory(_)) {
            return Err(NicError::Config(
                "a fake datapath needs an in-memory queue group".into(),
            ));
        }
        let ifname = group.steering().ifname().to_owned();
        let (port, kernel) = XskPort::fake_from(&ifname, config.queue, &config.xsk)?;
        let nic = Nic::over_port(group, port, config, ChecksumPolicy::Verify)?;
        Ok((nic, kernel))
    }
}

impl FakeKernel {
    fn check_pair(&self, nic: &Nic) {
        assert!(
            self.owns(&nic.port),
            "this fake kernel belongs to another Nic"
        );
    }

    /// Receives `frame` as the kernel would on `nic`'s queue: the
    /// in-memory steering picks the socket (a flow's own, or the queue's
    /// catch-all for a listener or a flow of another queue), and the frame
    /// is written into fill-ring frames (several, chained, on a
    /// multi-buffer port) on that socket's RX ring. [`Nic::poll_rx`] takes
    /// it from there.
    ///
    /// # Panics
    /// `nic` is not the one this kernel was made with.
    pub fn deliver(&mut self, nic: &mut Nic, frame: &[u8]) -> Delivery {
        self.check_pair(nic);
        let queue = nic.config.queue;
        let action = match &mut *nic.group.steering() {
            Steering::Memory(m) => m.steer(frame, queue),
            Steering::Xdp(_) => SteerAction::Pass,
        };
        match action {
            SteerAction::Pass => Delivery::Passed,
            SteerAction::Drop => Delivery::Dropped,
            SteerAction::Redirect { slot, socket } => {
                let target = if socket == nic.port.raw_fd() {
                    RxTarget::Owner
                } else {
                    RxTarget::Socket(socket)
                };
                match self.receive(&mut nic.port, target, frame) {
                    Ok(()) => Delivery::Received { slot },
                    Err(e) => Delivery::Refused(e),
                }
            }
        }
    }

    /// Receives `frame` straight onto `nic`'s catch-all RX ring, whatever
    /// the steering says.
    ///
    /// # Errors
    /// No frames on the fill ring, no room on the RX ring, or too long.
    ///
    /// # Panics
    /// `nic` is not the one this kernel was made with.
    pub fn deliver_to_catch_all(&mut self, nic: &mut Nic, frame: &[u8]) -> Result<(), RxRefused> {
        self.check_pair(nic);
        self.receive(&mut nic.port, RxTarget::Owner, frame)
    }

    /// Sends what `nic` put on its TX ring (after [`Nic::flush`]): returns
    /// each packet's bytes (a multi-buffer chain joined into one) and holds
    /// its frames until [`FakeKernel::complete`] gives them back.
    ///
    /// # Panics
    /// `nic` is not the one this kernel was made with.
    pub fn take_tx(&mut self, nic: &mut Nic) -> Vec<Vec<u8>> {
        self.check_pair(nic);
        self.send(&mut nic.port)
    }

    /// Puts the oldest `n` held TX addresses on the completion ring (as
    /// many as fit); returns how many. The datapath reclaims them on its
    /// next [`Nic::flush`].
    pub fn complete(&mut self, n: usize) -> usize {
        self.complete_held(n)
    }

    /// Completes every held TX address that fits on the completion ring.
    pub fn complete_all(&mut self) -> usize {
        self.complete_held(usize::MAX)
    }

    /// TX addresses sent and not yet completed.
    pub fn held_completions(&self) -> usize {
        self.held.len()
    }

    /// Frames the datapath gave the kernel to receive into (on the fill
    /// ring or taken from it and not used yet), by UMEM address.
    pub fn fill_ring_frames(&mut self) -> Vec<u64> {
        self.fill_frames()
    }
}

#[cfg(test)]
mod tests;
