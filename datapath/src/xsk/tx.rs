//! Transmitting: build a packet in a free TX frame (or a header frame plus
//! zero-copy fragments of the MR area, or a copy across a chain of frames),
//! queue its descriptors, put them on the TX ring in batches without ever
//! splitting a chain, kick the kernel, and reclaim completed frames.

use std::os::fd::AsFd;

use super::{XskError, XskPort, MAX_FRAGS};
use crate::sys::desc::{FrameAddr, MrAddr, TxData, TxDesc, UmemLayout};
use crate::sys::syscall::kick_tx;
use crate::sys::umem::UmemError;
use crate::sys::xdp_ring::Completed;

impl XskPort {
    /// Returns completed TX frames to the free list; returns how many.
    pub fn reclaim(&mut self) -> u32 {
        let frames = &mut self.frames;
        let tx_free = &mut frames.tx_free;
        let mut refused = 0;
        // Fragments that pointed into the MR area (zero-copy chains) are
        // application memory, not pool frames: their completion only
        // counts down the descriptors reading that memory (see
        // `XskPort::mr_busy`); a frame the kernel did not hold for sending
        // is not taken back.
        let n = self.comp.drain(&mut frames.owners, |c| match c {
            Completed::Frame(frame) => tx_free.push(frame),
            Completed::Mr => {}
            Completed::Refused => refused += 1,
        });
        self.counters.tx_frames_refused += refused;
        self.tx_outstanding = self.tx_outstanding.saturating_sub(n);
        self.counters.tx_completed += u64::from(n);
        n
    }

    /// Whether a TX descriptor queued or in flight still points into the
    /// MR-area bytes `area` (offsets into [`crate::sys::umem::Umem::mr`]):
    /// the kernel may still read them, so a send over them must not
    /// complete. Chunk-grained and conservative.
    pub fn mr_busy(&self, area: core::ops::Range<usize>) -> bool {
        self.frames.owners.mr_busy(area)
    }

    /// TX descriptors pointing into the MR area that have not completed.
    pub fn mr_in_flight(&self) -> u64 {
        self.frames.owners.mr_in_flight()
    }

    /// TX ring slots neither queued nor in flight.
    fn ring_room(&self) -> usize {
        (self.tx.size() as usize)
            .saturating_sub(self.tx_outstanding as usize + self.tx_pending.len())
    }

    /// A free TX frame when the ring has more than `slots_needed - 1` free
    /// slots, reclaiming completed frames first when none is free. Counts
    /// a refusal.
    fn take_tx_frame(&mut self, slots_needed: usize) -> Option<FrameAddr> {
        if self.frames.tx_free.is_empty() {
            self.reclaim();
        }
        let frame = if self.ring_room() >= slots_needed {
            self.frames.tx_free.pop()
        } else {
            None
        };
        if frame.is_none() {
            self.counters.tx_no_frame += 1;
        }
        frame
    }

    /// Builds one packet in a free TX frame: `build` gets the frame (from
    /// the start of its chunk) and the MR area, and returns the packet
    /// length (0 to cancel). The packet is queued, not sent: call
    /// [`XskPort::flush`]. Returns `false` when no frame was free.
    ///
    /// # Errors
    /// `build` returned a length larger than the frame.
    pub fn transmit<F>(&mut self, build: F) -> Result<bool, XskError>
    where
        F: FnOnce(&mut [u8], &[u8]) -> usize,
    {
        let Some(frame) = self.take_tx_frame(1) else {
            return Ok(false);
        };
        let (mut frames, mr) = self.umem.split();
        let buf = match frames.tx(&frame) {
            Ok(buf) => buf,
            Err(e) => {
                self.frames.tx_free.push(frame);
                return Err(e.into());
            }
        };
        let room = buf.len();
        let len = build(buf, mr);
        if len == 0 || len > room {
            self.frames.tx_free.push(frame);
            if len > room {
                return Err(XskError::Config(format!(
                    "packet of {len} bytes does not fit a {room}-byte frame"
                )));
            }
            return Ok(true);
        }
        self.tx_pending.push(TxDesc {
            data: TxData::Frame(frame),
            len: len as u32,
            more: false,
        });
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += len as u64;
        Ok(true)
    }

    /// Queues a multi-buffer packet: a header built in a free TX frame
    /// followed by fragments that point into the MR area (zero-copy send in
    /// zero-copy mode; in copy mode the kernel copies them). `build` gets the
    /// frame, the MR area and an empty list to which it appends the payload
    /// fragments as (MR-area offset, length); it returns the header length
    /// (0 to cancel). Fragments are split at chunk boundaries here, as the
    /// kernel requires. Needs `multi_buffer`. Returns `false` when no frame
    /// or ring room was free.
    ///
    /// # Errors
    /// Multi-buffer is off, or a fragment lies outside the MR area.
    pub fn transmit_chain<F>(&mut self, build: F) -> Result<bool, XskError>
    where
        F: FnOnce(&mut [u8], &[u8], &mut Vec<(usize, usize)>) -> usize,
    {
        if !self.config.multi_buffer {
            return Err(XskError::Config(
                "multi-buffer TX needs multi_buffer = true".into(),
            ));
        }
        let Some(frame) = self.take_tx_frame(MAX_FRAGS + 1) else {
            return Ok(false);
        };
        let mut parts = std::mem::take(&mut self.chain_scratch);
        parts.clear();
        let (mut frames, mr) = self.umem.split();
        let result = match frames.tx(&frame) {
            Ok(buf) => {
                let room = buf.len();
                let len = build(buf, mr, &mut parts);
                self.check_chain(len, room, &parts).map(|()| len)
            }
            Err(e) => Err(e.into()),
        };
        self.chain_scratch = parts;
        match result {
            Ok(0) => {
                self.frames.tx_free.push(frame);
                Ok(false)
            }
            Ok(len) => {
                self.queue_chain(frame, len);
                Ok(true)
            }
            Err(e) => {
                self.frames.tx_free.push(frame);
                Err(e)
            }
        }
    }

    /// Checks a chain's header length and splits its payload parts into
    /// chunk-sized MR fragments (into `frag_scratch`). A header length of
    /// 0 (cancelled) checks nothing.
    fn check_chain(
        &mut self,
        len: usize,
        room: usize,
        parts: &[(usize, usize)],
    ) -> Result<(), XskError> {
        if len == 0 {
            return Ok(());
        }
        if len > room {
            return Err(XskError::Config(format!(
                "header of {len} bytes does not fit a {room}-byte frame"
            )));
        }
        mr_fragments(&self.umem.layout(), parts, &mut self.frag_scratch)
    }

    /// Queues a checked chain: the header frame, then `frag_scratch`, every
    /// descriptor but the last marked `XDP_PKT_CONTD`.
    fn queue_chain(&mut self, frame: FrameAddr, len: usize) {
        let frags = self.frag_scratch.len();
        self.counters.tx_bytes += len as u64
            + self
                .frag_scratch
                .iter()
                .map(|f| u64::from(f.len()))
                .sum::<u64>();
        self.tx_pending.push(TxDesc {
            data: TxData::Frame(frame),
            len: len as u32,
            more: frags > 0,
        });
        for (k, frag) in self.frag_scratch.drain(..).enumerate() {
            // The application's memory is read by the kernel from now
            // until this descriptor's completion comes back.
            self.frames.owners.hold_mr(&frag);
            self.tx_pending.push(TxDesc {
                len: frag.len(),
                data: TxData::Mr(frag),
                more: k + 1 < frags,
            });
        }
        self.counters.tx_packets += 1;
        if frags > 0 {
            self.counters.tx_multi_buffer += 1;
            self.counters.tx_fragments += frags as u64;
        }
    }

    /// Packets' worth of TX room now: free TX frames (reclaiming completed
    /// ones first when none is free) and free TX ring slots, the smaller.
    pub fn tx_room(&mut self) -> usize {
        if self.frames.tx_free.is_empty() {
            self.reclaim();
        }
        self.frames.tx_free.len().min(self.ring_room())
    }

    /// Whether `packets` packets of up to `slots_each` descriptors each can
    /// all be queued now (free TX frames and ring slots for every one of
    /// them, as [`XskPort::transmit`] / [`XskPort::transmit_chain`] will
    /// ask), reclaiming completed frames first when too few are free; and
    /// whether an idle port could ever hold them (`false` for the second
    /// means waiting would never help).
    pub fn tx_room_for(&mut self, packets: usize, slots_each: usize) -> (bool, bool) {
        if self.frames.tx_free.len() < packets {
            self.reclaim();
        }
        let slots = packets.saturating_mul(slots_each);
        let now = self.frames.tx_free.len() >= packets && self.ring_room() >= slots;
        if !now {
            self.counters.tx_no_frame += 1;
        }
        (now, self.tx_capacity(slots_each) >= packets)
    }

    /// Most packets of up to `slots_each` descriptors an idle port can
    /// queue at once: TX frames and TX ring slots, the smaller.
    pub fn tx_capacity(&self, slots_each: usize) -> usize {
        (self.config.tx_frames as usize).min(self.tx.size() as usize / slots_each.max(1))
    }

    /// Queues `data` (a whole Ethernet frame) copied across as many pool
    /// frames as it needs: one frame, or a multi-buffer chain of frames for
    /// packets larger than a frame (needs `multi_buffer`). For transports
    /// that build full packets in a buffer of their own (smoltcp at MTU
    /// 9000). Returns `false` when not enough frames or ring slots were free.
    ///
    /// # Errors
    /// Empty data, data needing more than [`MAX_FRAGS`] frames, or a chain
    /// without `multi_buffer`.
    pub fn transmit_copied(&mut self, data: &[u8]) -> Result<bool, XskError> {
        let fs = self.umem.frame_size() as usize;
        let frames_needed = data.len().div_ceil(fs);
        if frames_needed == 0 || frames_needed > MAX_FRAGS {
            return Err(XskError::Config(format!(
                "a {}-byte packet needs 1..={MAX_FRAGS} frames of {fs} bytes",
                data.len()
            )));
        }
        if frames_needed > 1 && !self.config.multi_buffer {
            return Err(XskError::Config(format!(
                "a {}-byte packet needs multi_buffer = true",
                data.len()
            )));
        }
        if self.tx_room() < frames_needed {
            self.counters.tx_no_frame += 1;
            return Ok(false);
        }
        let first = self.tx_pending.len();
        let (mut frames, _mr) = self.umem.split();
        for (k, piece) in data.chunks(fs).enumerate() {
            let Some(frame) = self.frames.tx_free.pop() else {
                break;
            };
            let buf = match frames.tx(&frame) {
                Ok(buf) => buf,
                Err(e) => {
                    // Give this packet's frames back before reporting.
                    self.frames.tx_free.push(frame);
                    let queued = self.tx_pending.drain(first..);
                    self.frames
                        .tx_free
                        .extend(queued.filter_map(TxDesc::into_frame));
                    return Err(e.into());
                }
            };
            buf[..piece.len()].copy_from_slice(piece);
            self.tx_pending.push(TxDesc {
                data: TxData::Frame(frame),
                len: piece.len() as u32,
                more: k + 1 < frames_needed,
            });
        }
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += data.len() as u64;
        if frames_needed > 1 {
            self.counters.tx_multi_buffer += 1;
            self.counters.tx_fragments += frames_needed as u64 - 1;
        }
        Ok(true)
    }

    /// Puts queued packets on the TX ring and kicks the kernel. Returns how
    /// many descriptors were submitted.
    pub fn flush(&mut self) -> u32 {
        let mut submitted = 0;
        if !self.tx_pending.is_empty() {
            let want = self.tx_pending.len().min(u32::MAX as usize) as u32;
            let got = self.tx.free(want);
            // Never split a multi-buffer chain across two submissions.
            let mut take = got;
            while take > 0 && self.tx_pending[take as usize - 1].more {
                take -= 1;
            }
            let n = self
                .tx
                .push_from(&mut self.tx_pending, take, &mut self.frames.owners);
            self.tx_outstanding += n;
            submitted = n;
        }
        if self.tx_outstanding > 0
            && (!self.config.need_wakeup
                || self.tx.needs_wakeup()
                || self.mode == super::BoundMode::Copy)
        {
            self.kick();
        }
        self.reclaim();
        submitted
    }

    fn kick(&mut self) {
        self.counters.tx_kicks += 1;
        if self.is_fake() {
            return;
        }
        if let Err(e) = kick_tx(self.fd.as_fd()) {
            match e.errno() {
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                | Some(libc::ENETDOWN) => self.counters.tx_kick_busy += 1,
                _ => log::warn!("{}: {e}", self.ifname),
            }
        }
    }

    /// Packets queued or in flight on the TX path.
    pub fn tx_in_flight(&self) -> usize {
        self.tx_pending.len() + self.tx_outstanding as usize
    }
}

/// Splits payload parts (MR-area offset, length) into chunk-sized MR
/// fragments, as the kernel requires, replacing the contents of `out`.
///
/// # Errors
/// A part leaves the MR area, or the packet (header frame included) would
/// need more than [`MAX_FRAGS`] fragments.
fn mr_fragments(
    layout: &UmemLayout,
    parts: &[(usize, usize)],
    out: &mut Vec<MrAddr>,
) -> Result<(), XskError> {
    out.clear();
    for &(off, plen) in parts {
        let (off, plen) = (off as u64, plen as u64);
        if off.checked_add(plen).is_none_or(|end| end > layout.mr_len) {
            return Err(UmemError::BadDescriptor {
                addr: layout.frames_len.saturating_add(off),
                len: plen as u32,
            }
            .into());
        }
        let mut at = off;
        let end = off + plen;
        while at < end {
            let piece = layout.chunk_room(at).min(end - at);
            out.push(layout.mr_addr(at, piece as u32)?);
            at += piece;
        }
    }
    let count = 1 + out.len();
    if count > MAX_FRAGS {
        return Err(XskError::Config(format!(
            "packet needs {count} fragments, at most {MAX_FRAGS} allowed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: UmemLayout = UmemLayout {
        frame_size: 4096,
        frames_len: 16 * 4096,
        mr_len: 64 * 4096,
    };

    #[test]
    fn payload_parts_split_at_chunk_boundaries() {
        let mut out = Vec::new();
        mr_fragments(&LAYOUT, &[(4000, 5000), (20_000, 10)], &mut out).unwrap();
        let lens: Vec<u32> = out.iter().map(MrAddr::len).collect();
        assert_eq!(lens, vec![96, 4096, 808, 10]);
        assert_eq!(out[1], LAYOUT.mr_addr(4096, 4096).unwrap());
        mr_fragments(&LAYOUT, &[], &mut out).unwrap();
        assert!(out.is_empty(), "a header-only chain has no fragments");
    }

    #[test]
    fn parts_outside_the_area_name_their_umem_address() {
        let mut out = Vec::new();
        let err = mr_fragments(&LAYOUT, &[(64 * 4096 - 10, 11)], &mut out).unwrap_err();
        assert!(matches!(
            err,
            XskError::Umem(UmemError::BadDescriptor { addr, len: 11 })
                if addr == 16 * 4096 + 64 * 4096 - 10
        ));
        assert!(mr_fragments(&LAYOUT, &[(usize::MAX, 2)], &mut out).is_err());
    }

    /// Room for a super-segment's slices is all or nothing, and says when
    /// waiting could never make enough.
    #[test]
    fn tx_room_for_counts_frames_and_ring_slots_of_every_packet() {
        let (mut port, _kernel) = XskPort::fake(16);
        // The fake port has 4 TX frames and a 32-slot TX ring.
        assert_eq!(port.tx_capacity(1), 4);
        assert_eq!(port.tx_capacity(MAX_FRAGS + 1), 1);
        assert_eq!(port.tx_room_for(4, 1), (true, true));
        assert_eq!(port.tx_room_for(5, 1), (false, false));
        assert_eq!(port.tx_room_for(2, MAX_FRAGS + 1), (false, false));
        for _ in 0..2 {
            assert!(port
                .transmit(|frame, _| {
                    frame[..60].fill(0);
                    60
                })
                .unwrap());
        }
        assert_eq!(port.tx_room_for(3, 1), (false, true), "two frames queued");
        assert_eq!(port.tx_room_for(2, 1), (true, true));
    }

    #[test]
    fn chains_longer_than_max_frags_are_refused() {
        let mut out = Vec::new();
        let fits = (MAX_FRAGS - 1) * 4096;
        mr_fragments(&LAYOUT, &[(0, fits)], &mut out).unwrap();
        assert_eq!(out.len(), MAX_FRAGS - 1);
        let err = mr_fragments(&LAYOUT, &[(0, fits + 1)], &mut out).unwrap_err();
        assert!(err.to_string().contains("at most 18"), "{err}");
    }
}
