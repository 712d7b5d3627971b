//! Sending: a transport's header descriptor plus the flow's send segments
//! become a frame (payload copied next to the header) or a multi-buffer
//! chain (header frame + MR fragments), as the [`TxStrategy`] says.

use super::flows::flow_mut;
use super::{Nic, NicError, TxStrategy};
use crate::capture::Direction;
use crate::flow_table::FlowId;
use crate::tx::{self, TxSegment};
use crate::wire;
use crate::xsk::MAX_FRAGS;

impl Nic {
    /// Builds and queues the wire segments of `seg` for `flow`: one, or for
    /// a super-segment (software TSO) its [`TxSegment::slices`], each a
    /// packet of its own with its own checksums. All slices are queued or
    /// none: returns `false` when the TX frames or ring slots free now
    /// cannot take every slice (call [`Nic::flush`] and retry).
    ///
    /// # Errors
    /// Unknown flow; a super-segment needing more TX frames or ring slots
    /// than the port has at all; or the builder refused a segment (payload
    /// not posted, too large for the MTU, options too long). A refusal of
    /// a slice after the first leaves the earlier slices queued: the
    /// transport recovers the rest as it recovers a segment lost on the
    /// wire, and the caller counts the refusal.
    pub fn send(&mut self, flow: FlowId, seg: &TxSegment) -> Result<bool, NicError> {
        let slices = seg.wire_segments() as usize;
        if slices == 1 {
            return self.send_one(flow, seg);
        }
        flow_mut(&mut self.flows, flow)?;
        let slots_each = self.slots_per_packet(seg.segment_size as usize);
        match self.port.tx_room_for(slices, slots_each) {
            (true, _) => {}
            (false, true) => return Ok(false),
            (false, false) => {
                return Err(NicError::Config(format!(
                    "a super-segment of {slices} wire segments needs more TX frames or ring \
                     slots than the port has (lower transport.tso_segments)"
                )))
            }
        }
        for slice in seg.slices() {
            if !self.send_one(flow, &slice)? {
                // Room was reserved above for every slice; a frame that
                // still failed to come is lost like one dropped on the wire.
                return Err(NicError::Config(
                    "TX room reserved for a super-segment vanished".into(),
                ));
            }
        }
        Ok(true)
    }

    /// Most wire segments one super-segment may have on this port: what an
    /// idle port can queue at once of packets as large as the MTU allows
    /// (a transport's `tso_segments` is clamped to it, so a super-segment
    /// always fits once the ring drains).
    pub fn max_tx_burst(&self) -> u32 {
        let payload = (self.config.mtu).saturating_sub(40);
        let packets = self.port.tx_capacity(self.slots_per_packet(payload));
        u32::try_from(packets).unwrap_or(u32::MAX).max(1)
    }

    /// TX ring slots a packet with `payload` bytes may take: one, or a
    /// chain's header and fragments.
    fn slots_per_packet(&self, payload: usize) -> usize {
        if self.needs_chain(payload) {
            MAX_FRAGS + 1
        } else {
            1
        }
    }

    /// Whether a packet with `payload` bytes goes out as a multi-buffer
    /// chain (the strategy says so, or it does not fit one frame).
    fn needs_chain(&self, payload: usize) -> bool {
        let frame_room = self.port.umem().frame_size() as usize;
        self.strategy == TxStrategy::Chain || wire::ETH_HEADER_LEN + 60 + 40 + payload > frame_room
    }

    /// Builds and queues one wire segment.
    fn send_one(&mut self, flow: FlowId, seg: &TxSegment) -> Result<bool, NicError> {
        let payload = seg.payload.as_ref().map_or(0, |r| r.end - r.start) as usize;
        let chain = self.needs_chain(payload);
        let f = flow_mut(&mut self.flows, flow)?;
        let mtu = self.config.mtu;
        let mut err = None;
        let tap = self.tap.as_deref_mut();
        let queued = if chain {
            self.port.transmit_chain(|frame, area, parts| {
                match tx::build_chain(f, seg, area, mtu, frame) {
                    Ok(c) => {
                        parts.extend_from_slice(c.fragments());
                        if let Some(tap) = tap {
                            let mut pieces: Vec<&[u8]> = vec![&frame[..c.header_len]];
                            pieces
                                .extend(c.fragments().iter().map(|&(at, len)| &area[at..at + len]));
                            tap.frame(Direction::Tx, &pieces);
                        }
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
                    Ok(len) => {
                        if let Some(tap) = tap {
                            tap.frame(Direction::Tx, &[&frame[..len]]);
                        }
                        len
                    }
                    Err(e) => {
                        err = Some(e);
                        0
                    }
                },
            )?
        };
        match err {
            Some(e) => Err(e.into()),
            None => {
                if queued {
                    let n = payload as u64;
                    if chain {
                        self.counters.tx_payload_chained += n;
                    } else {
                        self.counters.tx_payload_copied += n;
                    }
                }
                Ok(queued)
            }
        }
    }

    /// Puts queued packets on the TX ring, kicks the kernel, and reclaims
    /// completed frames; memory of removed flows whose descriptors all
    /// completed goes back to the application (its region references are
    /// released). Returns descriptors submitted.
    ///
    /// Send work requests acknowledged while their descriptors were out
    /// are not completed here: [`Nic::complete_send`] again (see
    /// [`Nic::send_waiting`]).
    pub fn flush(&mut self) -> u32 {
        let n = self.port.flush();
        self.held.release_idle(&mut self.mrs, &self.port);
        n
    }

    /// Packets queued or in flight on the TX path.
    pub fn tx_in_flight(&self) -> usize {
        self.port.tx_in_flight()
    }
}
