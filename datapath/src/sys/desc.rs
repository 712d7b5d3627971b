//! The addresses and descriptors that travel between the UMEM, the rings
//! and the socket code, as types instead of bare `u64`s.
//!
//! - [`FrameAddr`] is an owned frame of the UMEM's frame area: not `Clone`,
//!   so exactly one place (a free list, a ring, a packet being built) holds
//!   a frame at a time, and only the holder can reach its bytes. Only this
//!   module mints them: once at start-up ([`super::umem::Umem::take_frames`])
//!   and when a ring gives a frame back.
//! - [`MrAddr`] is a checked fragment of the MR area (zero-copy TX): inside
//!   the area and inside one chunk, as the kernel requires.
//! - [`XdpDesc`] is the kernel's `struct xdp_desc`, the element of the RX
//!   and TX rings; it never leaves `sys`. Outside, a received descriptor is
//!   an [`RxDesc`] (borrowed from its ring) and one to send a [`TxDesc`].

use std::marker::PhantomData;

use super::umem_error::UmemError;

/// An AF_XDP RX/TX descriptor (`struct xdp_desc`), as it sits in a ring.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XdpDesc {
    /// UMEM address of the data.
    pub addr: u64,
    /// Length of the data.
    pub len: u32,
    /// `XDP_PKT_CONTD` when more fragments of the packet follow.
    pub options: u32,
}

impl XdpDesc {
    /// Whether more fragments of the same packet follow this one.
    pub fn more(&self) -> bool {
        self.options & libc::XDP_PKT_CONTD != 0
    }
}

/// One frame of the UMEM's frame area, owned by whoever holds this value.
/// The address is the start of the frame's chunk.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FrameAddr(u64);

impl FrameAddr {
    /// Only `sys` mints frames: see the module docs.
    pub(super) fn new(addr: u64) -> FrameAddr {
        FrameAddr(addr)
    }

    /// The UMEM address of the frame's first byte.
    pub(crate) fn addr(&self) -> u64 {
        self.0
    }
}

/// A fragment of the MR area: a UMEM address and length, checked to lie
/// inside the area and inside one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MrAddr {
    addr: u64,
    len: u32,
}

impl MrAddr {
    /// Bytes of the fragment.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// The UMEM address (the MR area follows the frame area).
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }
}

/// Where the frame area ends and the MR area lies, and the chunk size: what
/// turns a kernel address back into a frame or a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UmemLayout {
    /// Bytes per frame (chunk).
    pub(crate) frame_size: u32,
    /// Bytes of the frame area; the MR area starts here.
    pub(crate) frames_len: u64,
    /// Bytes of the MR area.
    pub(crate) mr_len: u64,
}

impl UmemLayout {
    /// The frame holding `addr`, or `None` when `addr` is outside the frame
    /// area (an MR fragment or garbage). Mints a token: callers must be
    /// taking the frame back from the kernel.
    pub(super) fn frame_of(&self, addr: u64) -> Option<FrameAddr> {
        (addr < self.frames_len).then(|| FrameAddr(addr - addr % u64::from(self.frame_size)))
    }

    /// The MR fragment at MR-area offset `offset` of `len` bytes.
    ///
    /// # Errors
    /// [`UmemError::BadDescriptor`] when the fragment is empty, leaves the
    /// MR area, or crosses a chunk boundary (split it first with
    /// [`UmemLayout::chunk_room`]).
    pub(crate) fn mr_addr(&self, offset: u64, len: u32) -> Result<MrAddr, UmemError> {
        let addr = self.frames_len.saturating_add(offset);
        let bad = UmemError::BadDescriptor { addr, len };
        let end = offset.checked_add(u64::from(len)).ok_or(bad)?;
        if len == 0 || end > self.mr_len || u64::from(len) > self.chunk_room(offset) {
            return Err(UmemError::BadDescriptor { addr, len });
        }
        Ok(MrAddr { addr, len })
    }

    /// Bytes from MR-area offset `offset` to the end of its chunk.
    pub(crate) fn chunk_room(&self, offset: u64) -> u64 {
        let fs = u64::from(self.frame_size);
        // The MR area starts on a chunk boundary (the frame area is whole
        // chunks), so MR offsets and UMEM addresses share chunk phase.
        fs - offset % fs
    }
}

/// A received descriptor, borrowed from its RX ring: valid until the ring
/// releases it (which hands its frame to the free list).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RxDesc<'r> {
    pub(super) desc: XdpDesc,
    pub(super) _ring: PhantomData<&'r ()>,
}

impl RxDesc<'_> {
    /// Whether more fragments of the same packet follow.
    pub(crate) fn more(&self) -> bool {
        self.desc.more()
    }
}

/// Where the bytes of a TX descriptor are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TxData {
    /// A pool frame (header, or a copied packet), from its start.
    Frame(FrameAddr),
    /// Application memory in the MR area (zero-copy payload).
    Mr(MrAddr),
}

/// A descriptor to transmit: its data, its length and whether more
/// fragments of the packet follow.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TxDesc {
    /// The data.
    pub(crate) data: TxData,
    /// Bytes to send (for a frame, from its start).
    pub(crate) len: u32,
    /// `XDP_PKT_CONTD`: another fragment of this packet follows.
    pub(crate) more: bool,
}

impl TxDesc {
    /// The ring element for this descriptor.
    pub(super) fn to_raw(&self) -> XdpDesc {
        let addr = match &self.data {
            TxData::Frame(f) => f.addr(),
            TxData::Mr(m) => m.addr,
        };
        XdpDesc {
            addr,
            len: self.len,
            options: if self.more { libc::XDP_PKT_CONTD } else { 0 },
        }
    }

    /// The frame this descriptor holds, if it is a pool frame (to give back
    /// when the packet is cancelled).
    pub(crate) fn into_frame(self) -> Option<FrameAddr> {
        match self.data {
            TxData::Frame(f) => Some(f),
            TxData::Mr(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: UmemLayout = UmemLayout {
        frame_size: 2048,
        frames_len: 4 * 2048,
        mr_len: 2 * 2048,
    };

    #[test]
    fn descriptor_matches_the_kernel_struct() {
        assert_eq!(
            std::mem::size_of::<XdpDesc>(),
            std::mem::size_of::<libc::xdp_desc>()
        );
        assert_eq!(
            std::mem::align_of::<XdpDesc>(),
            std::mem::align_of::<libc::xdp_desc>()
        );
    }

    #[test]
    fn kernel_addresses_map_to_their_frame_start() {
        assert_eq!(LAYOUT.frame_of(0), Some(FrameAddr(0)));
        assert_eq!(LAYOUT.frame_of(2048 + 256), Some(FrameAddr(2048)));
        assert_eq!(LAYOUT.frame_of(4 * 2048 - 1), Some(FrameAddr(3 * 2048)));
        assert_eq!(LAYOUT.frame_of(4 * 2048), None, "MR area is no frame");
        assert_eq!(LAYOUT.frame_of(u64::MAX), None);
    }

    #[test]
    fn mr_fragments_stay_in_the_area_and_in_one_chunk() {
        let f = LAYOUT.mr_addr(100, 1948).unwrap();
        assert_eq!((f.addr, f.len()), (4 * 2048 + 100, 1948));
        assert!(LAYOUT.mr_addr(100, 1949).is_err(), "crosses a chunk");
        assert!(LAYOUT.mr_addr(2048, 2048).is_ok());
        assert!(LAYOUT.mr_addr(4096, 1).is_err(), "past the MR area");
        assert!(LAYOUT.mr_addr(0, 0).is_err(), "empty");
        assert!(LAYOUT.mr_addr(u64::MAX, 1).is_err());
        assert_eq!(LAYOUT.chunk_room(100), 1948);
        assert_eq!(LAYOUT.chunk_room(2048), 2048);
    }

    #[test]
    fn tx_descriptors_carry_the_continuation_flag() {
        let d = TxDesc {
            data: TxData::Frame(FrameAddr(2048)),
            len: 60,
            more: true,
        };
        assert_eq!(
            d.to_raw(),
            XdpDesc {
                addr: 2048,
                len: 60,
                options: libc::XDP_PKT_CONTD
            }
        );
        assert!(d.to_raw().more());
        assert_eq!(d.into_frame(), Some(FrameAddr(2048)));
        let m = TxDesc {
            data: TxData::Mr(LAYOUT.mr_addr(0, 10).unwrap()),
            len: 10,
            more: false,
        };
        assert_eq!(m.to_raw().addr, 4 * 2048);
        assert_eq!(m.into_frame(), None);
    }
}
