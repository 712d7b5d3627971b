//! A tap on every frame the datapath receives and sends, for packet
//! capture (`--pcap`). The datapath only hands each frame's bytes to the
//! tap, before it parses a received one and after it built a sent one;
//! what is written where is the tap's (the control stack's pcap writer).
//! Without a tap the cost is one `Option` test per packet.

/// Which way a frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received from the wire (before any check: hostile frames too).
    Rx,
    /// Sent to the wire.
    Tx,
}

/// Receives a copy of each frame.
pub trait FrameTap: Send + std::fmt::Debug {
    /// One frame, as its pieces in order (a multi-buffer frame has several).
    fn frame(&mut self, dir: Direction, parts: &[&[u8]]);
}
