//! Whole frames in and out of a [`Nic`]'s queue, for a full-packet
//! transport (smoltcp) that parses and builds every packet itself.
//!
//! The steering program still decides what reaches the queue: listening
//! ports and installed flows go to the catch-all socket, everything else
//! (ARP, ICMP, the kernel's own ports) passes to the kernel. Here nothing is
//! parsed, verified or placed: every frame the catch-all socket receives is
//! lent, as bytes, to a closure and recycled to the fill ring when it
//! returns. Use a [`Nic`] either through [`Nic::poll_rx`] (split mode) or
//! through these methods, not both; open it with `flow_sockets: false` so
//! every flow arrives on the catch-all socket.
//!
//! Multi-buffer packets (MTU 9000) arrive as chains of frames; they are
//! linearised into a caller-provided scratch buffer before being lent (one
//! copy; a full-packet transport copies the payload again into its socket
//! buffer anyway). Packets that fit one frame are lent in place, no copy.
//!
//! On a veth, a TCP segment whose checksum a Linux sender left partial
//! ([`ChecksumPolicy`]) is the one thing looked at: it is copied into the
//! scratch buffer with its checksum finished (and counted in
//! `csum_partial`), so the transport's own verification passes it and
//! still refuses every other bad checksum.

use std::ops::Range;

use crate::checksum::ChecksumPolicy;
use crate::mr::{Access, MrId};
use crate::nic::{Nic, NicError};
use crate::wire;

/// Ethernet header bytes in front of the IP datagram.
use proto::ETH_HEADER_LEN;

impl Nic {
    /// Receives up to `budget` packets from the catch-all socket and lends
    /// each, as one contiguous frame (Ethernet header first), to `on_frame`.
    /// Single-frame packets are lent straight from the UMEM; multi-buffer
    /// packets are copied into `scratch` first. Returns packets taken.
    pub fn receive_frames<F>(&mut self, budget: u32, scratch: &mut Vec<u8>, mut on_frame: F) -> u32
    where
        F: FnMut(&[u8]),
    {
        let accept_partial = self.checksum_policy() == ChecksumPolicy::AcceptPartial;
        let Nic { port, counters, .. } = self;
        port.receive(budget, |pkt, _area| {
            let fragments = pkt.fragments();
            scratch.clear();
            if let [only] = fragments {
                // On a veth, a partial checksum is finished in a copy;
                // every other frame is lent in place.
                if !(accept_partial && wire::has_partial_checksum(only)) {
                    on_frame(only);
                    return;
                }
                scratch.extend_from_slice(only);
            } else {
                counters.rx_multi_buffer += 1;
                for f in fragments {
                    scratch.extend_from_slice(f);
                }
            }
            if accept_partial && wire::finish_partial_checksum(scratch) {
                counters.rx.csum_partial += 1;
            }
            on_frame(scratch);
        })
    }

    /// Bytes of one UMEM frame: larger packets travel as chains.
    pub fn frame_size(&self) -> usize {
        self.port.umem().frame_size() as usize
    }

    /// Packets that could be queued for TX now, each up to one MTU.
    pub fn tx_room_packets(&mut self) -> usize {
        let fs = self.port.umem().frame_size() as usize;
        let per_packet = (self.config.mtu + ETH_HEADER_LEN).div_ceil(fs).max(1);
        self.port.tx_room() / per_packet
    }

    /// Queues one frame of `len` bytes that `fill` writes. A frame that fits
    /// a UMEM frame is written there directly (no copy); a larger one
    /// (MTU 9000) is written into `scratch` and copied across a
    /// multi-buffer chain of frames. Returns `false` (and does not call
    /// `fill`) when no room was free; call [`Nic::flush`] and retry.
    ///
    /// # Errors
    /// `len` is 0 or larger than the MTU allows, or a chain was needed
    /// without multi-buffer.
    pub fn transmit_frame<F>(
        &mut self,
        len: usize,
        scratch: &mut Vec<u8>,
        fill: F,
    ) -> Result<bool, NicError>
    where
        F: FnOnce(&mut [u8]),
    {
        let max = self.config.mtu + ETH_HEADER_LEN;
        if len == 0 || len > max {
            return Err(NicError::Config(format!(
                "a {len}-byte frame is outside 1..={max} (MTU {} + Ethernet header)",
                self.config.mtu
            )));
        }
        if len <= self.port.umem().frame_size() as usize {
            let mut fill = Some(fill);
            let queued = self.port.transmit(|frame, _mr| {
                if let Some(f) = fill.take() {
                    f(&mut frame[..len]);
                }
                len
            })?;
            return Ok(queued);
        }
        let fs = self.port.umem().frame_size() as usize;
        if self.port.tx_room() < len.div_ceil(fs) {
            return Ok(false);
        }
        scratch.clear();
        scratch.resize(len, 0);
        fill(scratch);
        Ok(self.port.transmit_copied(scratch)?)
    }

    /// Where `len` bytes at `offset` of region `mr` lie in the MR area,
    /// checking that the region exists, grants `access` and holds them.
    ///
    /// # Errors
    /// Unknown region, access denied, or out of bounds.
    pub fn resolve_region(
        &self,
        mr: MrId,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<Range<usize>, NicError> {
        Ok(self.mrs.resolve(mr, offset, len, access)?)
    }

    /// The whole MR area (every registered region lies inside it).
    pub fn mr_area(&self) -> &[u8] {
        self.port.umem().mr()
    }

    /// The whole MR area, writable.
    pub fn mr_area_mut(&mut self) -> &mut [u8] {
        self.port.umem_mut().mr_mut()
    }
}
