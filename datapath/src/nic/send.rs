//! Sending: a transport's header descriptor plus the flow's send segments
//! become a frame (payload copied next to the header) or a multi-buffer
//! chain (header frame + MR fragments), as the [`TxStrategy`] says.

use super::flows::flow_mut;
use super::{Nic, NicError, TxStrategy};
use crate::flow_table::FlowId;
use crate::tx::{self, TxSegment};
use crate::wire;

impl Nic {
    /// Builds and queues one segment of `flow`. Returns `false` when no TX
    /// frame or ring slot was free (call [`Nic::flush`] and retry).
    ///
    /// # Errors
    /// Unknown flow, or the builder refused the segment (payload not
    /// posted, too large for the MTU, options too long).
    pub fn send(&mut self, flow: FlowId, seg: &TxSegment) -> Result<bool, NicError> {
        let f = flow_mut(&mut self.flows, flow)?;
        let mtu = self.config.mtu;
        let payload = seg.payload.as_ref().map_or(0, |r| r.end - r.start) as usize;
        let frame_room = self.port.umem().frame_size() as usize;
        let chain = self.strategy == TxStrategy::Chain
            || wire::ETH_HEADER_LEN + 60 + 40 + payload > frame_room;
        let mut err = None;
        let queued = if chain {
            self.port.transmit_chain(|frame, area, parts| {
                match tx::build_chain(f, seg, area, mtu, frame) {
                    Ok(c) => {
                        parts.extend_from_slice(c.fragments());
                        c.header_len
                    }
                    Err(e) => {
                        err = Some(e);
                        0
                    }
                }
            })?
        } else {
            self.port.transmit(
                |frame, area| match tx::build_copy(f, seg, area, mtu, frame) {
                    Ok(len) => len,
                    Err(e) => {
                        err = Some(e);
                        0
                    }
                },
            )?
        };
        match err {
            Some(e) => Err(e.into()),
            None => Ok(queued),
        }
    }

    /// Puts queued packets on the TX ring, kicks the kernel, and reclaims
    /// completed frames. Returns descriptors submitted.
    pub fn flush(&mut self) -> u32 {
        self.port.flush()
    }

    /// Packets queued or in flight on the TX path.
    pub fn tx_in_flight(&self) -> usize {
        self.port.tx_in_flight()
    }
}
