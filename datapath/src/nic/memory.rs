//! Memory regions and posted segments: the application registers parts of
//! the MR area, posts receive and send space on a flow, and completes it.

use core::ops::Range;

use super::flows::flow_mut;
use super::{Nic, NicError};
use crate::flow_table::{FlowId, FlowState};
#[cfg(test)]
use crate::mr::MrError;
use crate::mr::{Access, MrId, MrTable};
use crate::ms::{Completion, SegmentList};
use crate::placement;
use crate::xsk::XskPort;

impl Nic {
    /// Registers `len` bytes of the MR area (first fit, 64-byte aligned).
    ///
    /// # Errors
    /// No space left, or the region table is full.
    pub fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, NicError> {
        let offset = self.mrs.allocate(len, 64)?;
        Ok(self.mrs.register(offset, len, access)?)
    }

    /// Registers `len` bytes inside `range` of the MR area (first fit,
    /// 64-byte aligned): a region in one application's memory slot.
    ///
    /// # Errors
    /// The range is outside the area, no space is left in it, or the region
    /// table is full.
    pub fn register_memory_in(
        &mut self,
        range: Range<usize>,
        len: usize,
        access: Access,
    ) -> Result<MrId, NicError> {
        let offset = self.mrs.allocate_in(range, len, 64)?;
        Ok(self.mrs.register(offset, len, access)?)
    }

    /// Where a registered region lies in the MR area: (offset, length).
    ///
    /// # Errors
    /// Unknown region.
    pub fn mr_extent(&self, mr: MrId) -> Result<(usize, usize), NicError> {
        Ok(self.mrs.extent(mr)?)
    }

    /// Zeroes `range` of the MR area (a memory slot before it goes to its
    /// next application), which no registered region may overlap and no TX
    /// descriptor may still read.
    ///
    /// # Errors
    /// The range is outside the area, overlaps a registered region, or is
    /// still read by a TX descriptor ([`NicError::MemoryInUse`]).
    pub fn zero_mr(&mut self, range: Range<usize>) -> Result<(), NicError> {
        let area_len = self.mrs.area_len();
        if range.start > range.end || range.end > area_len {
            return Err(crate::mr::MrError::OutOfArea {
                offset: range.start,
                len: range.end.saturating_sub(range.start),
                area_len,
            }
            .into());
        }
        let busy = |why| NicError::MemoryInUse {
            start: range.start,
            end: range.end,
            why,
        };
        if self.mrs.overlapping(range.clone()).is_some() {
            return Err(busy("still registered"));
        }
        if self.port.mr_busy(range.clone()) {
            return Err(busy("still read by TX descriptors"));
        }
        self.port.umem_mut().mr_mut()[range].fill(0);
        Ok(())
    }

    /// Memory slot `i`'s memfd ([`crate::config::MrSlots`]), to pass to the
    /// application it is for; `None` past the last slot or without slots.
    /// Slot `i` is bytes `i * mr_slot_len()..(i + 1) * mr_slot_len()` of
    /// the MR area.
    pub fn mr_slot_fd(&self, i: u32) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.port.umem().mr_slot_fd(i)
    }

    /// Number of memory slots (0 without).
    pub fn mr_slot_count(&self) -> u32 {
        self.port.umem().mr_slot_count()
    }

    /// Bytes per memory slot (0 without).
    pub fn mr_slot_len(&self) -> usize {
        self.port.umem().mr_slot_len()
    }

    /// The memory slots, for another queue's UMEM to map the same memory
    /// ([`crate::config::MrSlots::memory`]).
    pub fn mr_slot_set(&self) -> crate::config::SlotSet {
        self.port.umem().mr_slot_set()
    }

    /// Deregisters a region no posted segment references.
    ///
    /// # Errors
    /// Unknown region, or segments still reference it.
    pub fn deregister_memory(&mut self, mr: MrId) -> Result<(), NicError> {
        Ok(self.mrs.deregister(mr)?)
    }

    /// A registered region's bytes.
    ///
    /// # Errors
    /// Unknown region.
    pub fn memory(&self, mr: MrId) -> Result<&[u8], NicError> {
        let (off, len) = self.mrs.extent(mr)?;
        Ok(&self.port.umem().mr()[off..off + len])
    }

    /// A registered region's bytes, writable (to fill send buffers).
    ///
    /// # Errors
    /// Unknown region.
    pub fn memory_mut(&mut self, mr: MrId) -> Result<&mut [u8], NicError> {
        let (off, len) = self.mrs.extent(mr)?;
        Ok(&mut self.port.umem_mut().mr_mut()[off..off + len])
    }

    /// Posts receive space: `len` bytes at `offset` of `mr` become the next
    /// part of the flow's receive stream. Returns the stream range.
    ///
    /// # Errors
    /// Unknown flow, region, bounds or access; the list is full.
    pub fn post_recv(
        &mut self,
        flow: FlowId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<std::ops::Range<u64>, NicError> {
        let f = flow_mut(&mut self.flows, flow)?;
        Ok(f.recv.post(&mut self.mrs, mr, offset, len, wr_id)?)
    }

    /// Posts payload to send: `len` bytes at `offset` of `mr` become the
    /// next part of the flow's send stream. Returns the stream range.
    ///
    /// # Errors
    /// Unknown flow, region, bounds or access; the list is full.
    pub fn post_send(
        &mut self,
        flow: FlowId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<std::ops::Range<u64>, NicError> {
        let f = flow_mut(&mut self.flows, flow)?;
        Ok(f.send.post(&mut self.mrs, mr, offset, len, wr_id)?)
    }

    /// The receive stream ended (the peer's FIN is in, every byte before
    /// it placed): drops the flow's posted receive segments without
    /// completing them, so their memory is no longer referenced (the
    /// application may deregister it while the flow lingers in
    /// TIME-WAIT). Returns how many were dropped; a byte that still
    /// arrives finds no posted memory.
    ///
    /// # Errors
    /// Unknown flow.
    pub fn release_recv(&mut self, flow: FlowId) -> Result<usize, NicError> {
        let f = flow_mut(&mut self.flows, flow)?;
        Ok(f.recv.drop_all(&mut self.mrs))
    }

    /// The transport's in-order point reached `upto`: retire receive
    /// segments ending at or before it (no further writes) and then append
    /// their completions to `out`.
    ///
    /// # Errors
    /// Unknown flow; `upto` beyond the posted end or over bytes never placed.
    pub fn complete_recv(
        &mut self,
        flow: FlowId,
        upto: u64,
        out: &mut Vec<Completion>,
    ) -> Result<(), NicError> {
        let f = flow_mut(&mut self.flows, flow)?;
        out.extend(placement::advance_floor(f, &mut self.mrs, upto)?);
        Ok(())
    }

    /// The peer acknowledged the send stream up to `upto`: complete the
    /// send segments ending at or before it whose memory no TX descriptor
    /// points at any more (zero-copy chain fragments are read by the
    /// kernel until their completions come back), in order, appending
    /// their completions to `out`. Returns the stream offset below which
    /// the memory is back with the application. Segments still read wait:
    /// call again (any `upto` at or below one already given) after
    /// [`Nic::flush`] reclaimed completions, while [`Nic::send_waiting`].
    ///
    /// # Errors
    /// Unknown flow, or `upto` beyond what was posted.
    pub fn complete_send(
        &mut self,
        flow: FlowId,
        upto: u64,
        out: &mut Vec<Completion>,
    ) -> Result<u64, NicError> {
        let f = flow_mut(&mut self.flows, flow)?;
        let before = f.send.floor();
        // The rule checked where completions leave: note the work requests
        // this call may retire whose memory is still read.
        self.read_scratch.clear();
        let through = upto.max(before);
        for s in f.send.segments().take_while(|s| s.stream_end() <= through) {
            if self
                .port
                .mr_busy(s.area_start..s.area_start + s.len as usize)
            {
                self.read_scratch.push(s.wr_id);
            }
        }
        let first = out.len();
        let released = complete_sent(&self.port, f, &mut self.mrs, upto, out)?;
        if f.send.floor() > before && f.send.completion_waiting() {
            self.counters.tx_ack_before_completion += 1;
        }
        if !self.read_scratch.is_empty() {
            let early = out[first..]
                .iter()
                .filter(|c| self.read_scratch.contains(&c.wr_id))
                .count();
            self.counters.tx_completed_in_flight += early as u64;
        }
        Ok(released)
    }

    /// Whether a TX descriptor queued or in flight still points into bytes
    /// `[offset, offset+len)` of region `mr` (chunk-grained: neighbouring
    /// bytes in flight count). An application that got a send completion
    /// may reuse that memory, so this is `false` for it: a check of the
    /// rule for tests and the hostile suite.
    ///
    /// # Errors
    /// Unknown region, or the range is outside it.
    pub fn send_memory_in_flight(
        &self,
        mr: MrId,
        offset: usize,
        len: usize,
    ) -> Result<bool, NicError> {
        let (start, region_len) = self.mrs.extent(mr)?;
        let end = offset.checked_add(len).filter(|&e| e <= region_len).ok_or(
            crate::mr::MrError::OutOfRegion {
                id: mr,
                offset,
                len,
                region_len,
            },
        )?;
        Ok(self.port.mr_busy(start + offset..start + end))
    }

    /// Whether acknowledged send work requests of `flow` wait for their TX
    /// descriptors to complete ([`Nic::complete_send`] again later).
    ///
    /// # Errors
    /// Unknown flow.
    pub fn send_waiting(&self, flow: FlowId) -> Result<bool, NicError> {
        let f = self.flows.get(flow).ok_or(NicError::UnknownFlow(flow))?;
        Ok(f.send.retire_waiting())
    }
}

/// Send memory of removed flows that TX descriptors still point at. Each
/// entry keeps one reference on its region, so the application cannot
/// deregister (and reuse) memory the kernel may still read; entries of one
/// region merge into one covering range, so there are at most as many
/// entries as regions.
#[derive(Debug, Default)]
pub(super) struct HeldSends {
    held: Vec<(MrId, Range<usize>)>,
}

impl HeldSends {
    /// Holds `area` of region `mr`, taking over the reference a removed
    /// segment had on it.
    pub(super) fn hold(&mut self, mrs: &mut MrTable, mr: MrId, area: Range<usize>) {
        match self.held.iter_mut().find(|(m, _)| *m == mr) {
            Some((_, r)) => {
                *r = r.start.min(area.start)..r.end.max(area.end);
                // The entry holds the region already: one reference is enough.
                mrs.release(mr).ok();
            }
            None => self.held.push((mr, area)),
        }
    }

    /// The send segments of a removed flow: releases the references of
    /// those whose memory no descriptor of `port` points at, holds the
    /// others. Returns how many were held.
    pub(super) fn release_removed(
        &mut self,
        mrs: &mut MrTable,
        port: &XskPort,
        send: &SegmentList,
    ) -> u64 {
        let mut held = 0;
        for seg in send.segments() {
            let area = seg.area_start..seg.area_start + seg.len as usize;
            if port.mr_busy(area.clone()) {
                self.hold(mrs, seg.mr, area);
                held += 1;
            } else {
                mrs.release(seg.mr).ok();
            }
        }
        held
    }

    /// Releases the references of held memory no descriptor of `port`
    /// points at any more.
    pub(super) fn release_idle(&mut self, mrs: &mut MrTable, port: &XskPort) {
        if self.held.is_empty() {
            return;
        }
        self.held.retain(|(mr, area)| {
            let busy = port.mr_busy(area.clone());
            if !busy {
                mrs.release(*mr).ok();
            }
            busy
        });
    }

    /// Entries held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.len()
    }
}

/// The peer acknowledged `f`'s send stream up to `upto`: appends the
/// completions of the send work requests that may complete now —
/// acknowledged, and no TX descriptor of `port` pointing at their memory
/// any more — to `out`, and returns the stream offset below which the
/// memory is back with the application.
fn complete_sent(
    port: &XskPort,
    f: &mut FlowState,
    mrs: &mut MrTable,
    upto: u64,
    out: &mut Vec<Completion>,
) -> Result<u64, NicError> {
    f.send
        .retire_sent_through(mrs, upto, |area| port.mr_busy(area), out)?;
    Ok(f.send.released())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow_table::FlowParams;
    use crate::tx::{self, TxSegment};
    use crate::wire::{Ecn, FlowKey};
    use crate::xsk::testing::FakeKernel;
    use proto::{Flags, TcpHeader};

    /// A fake port with a 64 KiB MR area, a region of 8 KiB in it, and a
    /// flow with `len` bytes of it posted to send as work request 7.
    fn setup(len: usize) -> (XskPort, FakeKernel, MrTable, MrId, FlowState) {
        let (mut port, kernel) = XskPort::fake_with_mr(16, 64 << 10);
        let mut mrs = MrTable::new(port.umem().mr().len(), 4);
        let mr = mrs.register(4096, 8192, Access::SEND).expect("region");
        port.umem_mut().mr_mut()[4096..4096 + 8192].fill(0x5a);
        let mut f = FlowState::new(&FlowParams {
            key: FlowKey {
                remote_ip: [198, 18, 0, 1].into(),
                local_ip: [198, 18, 0, 2].into(),
                remote_port: 41234,
                local_port: 5201,
            },
            local_mac: [2, 0, 0, 0, 0, 2],
            remote_mac: [2, 0, 0, 0, 0, 1],
            irs: 0,
            iss: 0,
            socket: 0,
            max_recv_segments: 4,
            max_send_segments: 4,
            max_placed_ranges: 4,
        });
        f.send.post(&mut mrs, mr, 0, len, 7).expect("post");
        (port, kernel, mrs, mr, f)
    }

    /// Queues stream bytes `range` of `f` as a zero-copy chain (header
    /// frame + MR fragments), as `Nic::send` does with `TxStrategy::Chain`.
    fn send_chain(port: &mut XskPort, f: &mut FlowState, range: std::ops::Range<u64>) {
        let seg = TxSegment {
            header: TcpHeader {
                seq: 1 + range.start as u32,
                ack: 1,
                flags: Flags::ACK | Flags::PSH,
                window: 4096,
                ..TcpHeader::default()
            },
            payload: Some(range),
            ecn: Ecn::NotEct,
            segment_size: 0,
        };
        let queued = port
            .transmit_chain(|frame, area, parts| {
                let c = tx::build_chain(f, &seg, area, 1500, frame).expect("builds");
                parts.extend_from_slice(c.fragments());
                c.header_len
            })
            .expect("chain");
        assert!(queued, "a TX frame was free");
    }

    /// The rule of issue 25 (defect 4): a send work request completes only
    /// when the peer acknowledged it AND every TX descriptor pointing at
    /// its memory came back on the completion ring. The fake kernel takes
    /// the descriptors off the TX ring and holds their completions back
    /// while the (optimistic) ACK covering everything arrives.
    #[test]
    fn an_ack_does_not_complete_a_send_whose_descriptors_are_still_out() {
        let (mut port, mut kernel, mut mrs, mr, mut f) = setup(3000);
        for range in [0..1000, 1000..2000, 2000..3000] {
            send_chain(&mut port, &mut f, range);
        }
        port.flush();
        let descs = kernel.take_tx_descs();
        let frags: Vec<u64> = descs
            .iter()
            .map(|d| d.addr)
            .filter(|&a| a >= 16 * 2048)
            .collect();
        let headers: Vec<u64> = descs
            .iter()
            .map(|d| d.addr)
            .filter(|&a| a < 16 * 2048)
            .collect();
        assert_eq!(headers.len(), 3, "one header frame per packet");
        assert!(frags.len() >= 3, "payload went as MR fragments: {descs:?}");

        // The peer ACKs everything while no completion came back.
        let mut out = Vec::new();
        let released = complete_sent(&port, &mut f, &mut mrs, 3000, &mut out).expect("acked");
        assert!(out.is_empty(), "completed with descriptors out: {out:?}");
        assert_eq!(released, 0, "no byte is back with the application");
        assert_eq!(mrs.deregister(mr), Err(MrError::InUse { id: mr, refs: 1 }));

        // Headers and all fragments but the last complete: still waiting.
        kernel.complete_addrs(&headers);
        kernel.complete_addrs(&frags[..frags.len() - 1]);
        port.flush();
        complete_sent(&port, &mut f, &mut mrs, 3000, &mut out).expect("again");
        assert!(out.is_empty(), "completed with a descriptor out: {out:?}");

        // The last one comes back: the work request completes, once.
        kernel.complete_addrs(&frags[frags.len() - 1..]);
        port.flush();
        let released = complete_sent(&port, &mut f, &mut mrs, 3000, &mut out).expect("last");
        assert_eq!(
            out,
            vec![Completion {
                wr_id: 7,
                len: 3000
            }]
        );
        assert_eq!(released, 3000);
        assert_eq!(port.mr_in_flight(), 0);
        complete_sent(&port, &mut f, &mut mrs, 3000, &mut out).expect("idempotent");
        assert_eq!(out.len(), 1, "completed exactly once");
        mrs.deregister(mr)
            .expect("the memory is the application's again");

        // A completion returned twice releases nothing and is counted.
        let refused = port.counters().tx_frames_refused;
        kernel.complete_addrs(&frags[..1]);
        port.flush();
        assert_eq!(port.counters().tx_frames_refused, refused + 1);
        assert_eq!(port.mr_in_flight(), 0);
    }

    /// A retransmission puts the same bytes on the TX ring twice: the
    /// send completes only when both copies' descriptors came back.
    #[test]
    fn a_retransmitted_send_waits_for_every_copy_of_its_descriptors() {
        let (mut port, mut kernel, mut mrs, _mr, mut f) = setup(1000);
        send_chain(&mut port, &mut f, 0..1000);
        port.flush();
        let first: Vec<u64> = kernel.take_tx_descs().iter().map(|d| d.addr).collect();
        send_chain(&mut port, &mut f, 0..1000);
        port.flush();
        let second: Vec<u64> = kernel.take_tx_descs().iter().map(|d| d.addr).collect();
        let mut out = Vec::new();
        kernel.complete_addrs(&first);
        port.flush();
        complete_sent(&port, &mut f, &mut mrs, 1000, &mut out).expect("acked");
        assert!(out.is_empty(), "the retransmission still reads it");
        kernel.complete_addrs(&second);
        port.flush();
        complete_sent(&port, &mut f, &mut mrs, 1000, &mut out).expect("again");
        assert_eq!(
            out,
            vec![Completion {
                wr_id: 7,
                len: 1000
            }]
        );
    }

    /// The copy strategy copies the payload next to the header: its
    /// descriptors point at pool frames, never at the application's
    /// memory, so the ACK alone completes the send (the rule holds with
    /// no descriptor to wait for).
    #[test]
    fn a_copied_send_completes_on_the_ack_while_its_frame_is_out() {
        let (mut port, mut kernel, mut mrs, _mr, mut f) = setup(1000);
        let seg = TxSegment {
            header: TcpHeader {
                seq: 1,
                ack: 1,
                flags: Flags::ACK,
                window: 4096,
                ..TcpHeader::default()
            },
            payload: Some(0..1000),
            ecn: Ecn::NotEct,
            segment_size: 0,
        };
        let queued = port
            .transmit(|frame, area| tx::build_copy(&mut f, &seg, area, 1500, frame).expect("fits"))
            .expect("frame");
        assert!(queued);
        port.flush();
        assert_eq!(kernel.take_tx_descs().len(), 1, "one frame, no fragment");
        assert_eq!(port.mr_in_flight(), 0);
        let mut out = Vec::new();
        let released = complete_sent(&port, &mut f, &mut mrs, 1000, &mut out).expect("acked");
        assert_eq!(
            out,
            vec![Completion {
                wr_id: 7,
                len: 1000
            }]
        );
        assert_eq!(released, 1000);
    }

    /// A flow removed (closed, or its application gone) while chain
    /// fragments still point at its send memory: the region stays
    /// referenced — the application cannot deregister and reuse it — until
    /// the completions come back, and is then released exactly once.
    #[test]
    fn a_removed_flow_keeps_its_send_memory_until_the_descriptors_return() {
        let (mut port, mut kernel, mut mrs, mr, mut f) = setup(2000);
        f.send
            .post(&mut mrs, mr, 2000, 500, 8)
            .expect("second post");
        let other = mrs.register(32 << 10, 4096, Access::SEND).expect("other");
        f.send.post(&mut mrs, other, 0, 100, 9).expect("idle post");
        send_chain(&mut port, &mut f, 0..1000);
        send_chain(&mut port, &mut f, 1900..2300);
        port.flush();
        let descs = kernel.take_tx_descs();
        assert_eq!(mrs.refs(mr), Ok(2));

        let mut held = HeldSends::default();
        let n = held.release_removed(&mut mrs, &port, &f.send);
        assert_eq!(n, 2, "both segments of `mr` are still read");
        assert_eq!(held.len(), 1, "one entry per region");
        assert_eq!(mrs.refs(mr), Ok(1), "held once, the other reference gone");
        assert_eq!(mrs.refs(other), Ok(0), "idle memory released at once");
        assert!(matches!(mrs.deregister(mr), Err(MrError::InUse { .. })));
        held.release_idle(&mut mrs, &port);
        assert_eq!(mrs.refs(mr), Ok(1), "nothing completed yet");

        let addrs: Vec<u64> = descs.iter().map(|d| d.addr).collect();
        kernel.complete_addrs(&addrs);
        port.flush();
        held.release_idle(&mut mrs, &port);
        assert_eq!(held.len(), 0);
        assert_eq!(mrs.refs(mr), Ok(0));
        mrs.deregister(mr).expect("the application's again");
        held.release_idle(&mut mrs, &port);
        assert!(matches!(mrs.refs(mr), Err(MrError::UnknownRegion(_))));
    }
}
