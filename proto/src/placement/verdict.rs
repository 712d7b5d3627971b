//! What placement did with a segment's payload: the verdict the placement
//! rule decides, the datapath's engine returns and its counters count.

/// What happened to a segment's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// All of the payload lies in `[floor, posted_end)`; new bytes written.
    Placed,
    /// Part of the payload was placed, the rest fell outside
    /// `[floor, posted_end)`.
    Trimmed,
    /// Nothing new: entirely below the floor or already placed.
    Duplicate,
    /// Nothing of the payload fits: it lies at or beyond the posted end.
    BeyondPosted,
    /// The TCP checksum failed; the segment must be dropped.
    BadChecksum,
    /// No payload (pure ACK, SYN, FIN, RST); checksum verified.
    NoPayload,
    /// A SYN with payload: checksum verified, payload not placed.
    SynPayloadIgnored,
    /// Out-of-order data refused: the flow tracks no more disjoint ranges.
    PlacedSetFull,
    /// Payload for a flow whose peer ISN is not known yet (an active open
    /// before the SYN-ACK): nothing can be placed, its offsets are unknown.
    Unsynchronized,
    /// Payload on a segment the transport refuses whatever its sequence
    /// number (no ACK flag, or RST: RFC 9293 3.10.7.4): never placed.
    Unacceptable,
}
