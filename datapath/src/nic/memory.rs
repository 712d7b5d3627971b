//! Memory regions and posted segments: the application registers parts of
//! the MR area, posts receive and send space on a flow, and completes it.

use super::flows::flow_mut;
use super::{Nic, NicError};
use crate::flow_table::FlowId;
use crate::mr::{Access, MrId};
use crate::ms::Completion;
use crate::placement;

impl Nic {
    /// Registers `len` bytes of the MR area (first fit, 64-byte aligned).
    ///
    /// # Errors
    /// No space left, or the region table is full.
    pub fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, NicError> {
        let offset = self.mrs.allocate(len, 64)?;
        Ok(self.mrs.register(offset, len, access)?)
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

    /// The peer acknowledged the send stream up to `upto`: complete send
    /// segments ending at or before it.
    ///
    /// # Errors
    /// Unknown flow, or `upto` beyond what was posted.
    pub fn complete_send(
        &mut self,
        flow: FlowId,
        upto: u64,
        out: &mut Vec<Completion>,
    ) -> Result<(), NicError> {
        let f = flow_mut(&mut self.flows, flow)?;
        out.extend(f.send.retire_through(&mut self.mrs, upto)?);
        Ok(())
    }
}
