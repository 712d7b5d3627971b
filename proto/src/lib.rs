//! zerosplit's one vocabulary: the types every layer names a packet with.
//!
//! The datapath parses frames into them ([`TcpHeader::parse`]), the record
//! it hands to a transport carries them, the transport reads and produces
//! them, and the TX builder emits them ([`TcpHeader::emit`]). There is one
//! definition of each: [`FlowKey`], [`Ecn`], [`Flags`], [`TcpOptions`],
//! [`TcpHeader`], the segment handed up ([`RxSegment`]) and down
//! ([`TxSegment`]) without payload, and the sequence arithmetic [`SeqNum`].
//! [`placement`] holds placement's rule on byte ranges (which part of a
//! payload may be written, and the verdict), used by the datapath and the
//! simulator alike.
//!
//! Parsing and emitting go through `smoltcp::wire`'s checked views, so no
//! code here or above indexes header bytes by raw offset. No I/O, no clock.

mod ecn;
mod flow;
pub mod placement;
mod segment;
mod seq;
mod tcp;

pub use ecn::Ecn;
pub use flow::FlowKey;
pub use segment::{RxSegment, TxSegment};
pub use seq::SeqNum;
pub use tcp::{Flags, TcpHeader, TcpOptions, TCP_MAX_OPTIONS_LEN, TCP_MIN_HEADER_LEN};

/// Length of an Ethernet II header without VLAN tags.
pub const ETH_HEADER_LEN: usize = 14;
