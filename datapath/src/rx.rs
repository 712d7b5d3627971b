//! The per-packet receive step, as a pure function over the tables: parse
//! ([`crate::wire`]) → look the flow up ([`crate::flow_table`]) → place the
//! payload ([`crate::placement`]) → an [`RxRecord`] for the transport. No
//! I/O: the frame's fragments and the payload area come in as slices, the
//! record goes out as a value. The NIC's poll loop ([`crate::nic`]) runs
//! it on every packet it takes off a ring; the fuzz rig runs the same
//! function on forged frames.
//!
//! [`rx_step`] is the whole step; [`place_segment`] is its second half
//! for a segment already parsed and matched to its flow.

use proto::RxSegment;

use crate::checksum::{ChecksumCheck, ChecksumPolicy};
use crate::counters::RxCounters;
use crate::flow_table::{FlowId, FlowState, FlowTable};
use crate::payload::Payload;
use crate::placement::{self, Placement, Verdict};
use crate::wire::{self, FlowKey, Parsed, ParsedSegment};

/// One received TCP segment as the transport side sees it: header fields,
/// where the payload went, no payload. Fixed size, so it can cross a
/// bounded SPSC queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxRecord {
    /// The flow, if one is installed for this 5-tuple (else: a SYN for a
    /// listener, or a stray segment the transport answers with RST).
    pub flow: Option<FlowId>,
    /// 5-tuple from our side.
    pub key: FlowKey,
    /// Source MAC (the peer or its router).
    pub src_mac: [u8; 6],
    /// The segment as a transport is handed it: header, payload length,
    /// the stream range placed ([`RxSegment::accepted`]), ECN.
    pub segment: RxSegment,
    /// What happened to the payload; `None` for segments of unknown flows
    /// (their payload was not placed anywhere).
    pub placement: Option<Placement>,
    /// Whether the bytes placed, if any, extend the flow's in-order placed
    /// prefix (the placed range starting at the floor) as placement left
    /// it: what [`crate::coalesce`] lets head a run.
    pub in_order: bool,
}

impl RxRecord {
    /// The record of `seg`, of flow `flow` (if known), whose payload
    /// `placement` placed (if it was placed anywhere).
    pub fn of(
        seg: &ParsedSegment,
        flow: Option<FlowId>,
        placement: Option<Placement>,
        in_order: bool,
    ) -> RxRecord {
        RxRecord {
            flow,
            key: seg.key,
            src_mac: seg.src_mac,
            segment: RxSegment {
                header: seg.header,
                payload_len: seg.payload_len,
                accepted: placement.as_ref().map_or(0..0, |p| p.placed.range()),
                ecn: seg.ecn,
                segment_size: 0,
            },
            placement,
            in_order,
        }
    }
}

/// What the receive step made of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RxStep {
    /// A segment for the transport: of a known flow (payload placed) or
    /// of none (checksum verified, nothing placed).
    Record(RxRecord),
    /// A UDP datagram: not the TCP datapath's.
    Udp,
    /// Not parsed (counted in the [`RxCounters`] by reason).
    ParseError,
    /// The TCP checksum failed: dropped (counted in the flow's counters,
    /// or the [`RxCounters`] for an unknown flow). `placement` is the
    /// known flow's verdict (it wrote into gaps only, placed nothing).
    BadChecksum {
        /// The flow, if known.
        flow: Option<FlowId>,
        /// Placement's verdict for a known flow.
        placement: Option<Placement>,
    },
    /// A segment of no flow here that queue `owner` owns: not verified,
    /// not counted; the caller hands the frame over.
    Foreign {
        /// The queue owning the flow.
        owner: u32,
    },
}

/// A segment placed into its flow: the placement and whether it extends
/// the in-order placed prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// What placement did.
    pub placement: Placement,
    /// See [`RxRecord::in_order`].
    pub in_order: bool,
}

/// Places `seg`'s payload (in `fragments`) into `area` for `flow`
/// ([`placement::place_parts`], counted in the flow's counters) and says
/// whether the placed bytes extend the in-order placed prefix.
pub fn place_segment(
    flow: &mut FlowState,
    seg: &ParsedSegment,
    fragments: &[&[u8]],
    area: &mut [u8],
    policy: ChecksumPolicy,
) -> Placed {
    let placement = placement::place_parts(flow, seg, fragments, area, policy);
    let in_order = !placement.placed.is_empty()
        && flow
            .placed
            .ranges()
            .next()
            .is_some_and(|r| r.start <= flow.floor() && r.end >= placement.placed.end);
    Placed {
        placement,
        in_order,
    }
}

/// One frame (its `fragments`: one, or a multi-buffer chain whose first
/// holds the headers) through parse, flow lookup and placement into
/// `area`, judged under `policy`. Parse errors, unknown flows and their
/// checksum verdicts are counted in `counters`; per-flow verdicts in the
/// flow's own. `owner_elsewhere` says which other queue, if any, owns a
/// key this table lacks (always `None` for a lone queue); such a frame is
/// [`RxStep::Foreign`], neither verified nor counted.
pub fn rx_step(
    flows: &mut FlowTable,
    counters: &mut RxCounters,
    fragments: &[&[u8]],
    area: &mut [u8],
    policy: ChecksumPolicy,
    owner_elsewhere: impl FnOnce(&FlowKey) -> Option<u32>,
) -> RxStep {
    let len = fragments.iter().map(|f| f.len()).sum();
    let head = fragments.first().copied().unwrap_or_default();
    let seg = match wire::parse_head(head, len) {
        Ok(Parsed::Tcp(seg)) => seg,
        Ok(Parsed::Udp(_)) => return RxStep::Udp,
        Err(e) => {
            counters.count_parse_error(&e);
            return RxStep::ParseError;
        }
    };
    let flow = flows.lookup(&seg.key);
    if let Some(state) = flow.and_then(|id| flows.get_mut(id)) {
        let Placed {
            placement,
            in_order,
        } = place_segment(state, &seg, fragments, area, policy);
        if placement.verdict == Verdict::BadChecksum {
            return RxStep::BadChecksum {
                flow,
                placement: Some(placement),
            };
        }
        return RxStep::Record(RxRecord::of(&seg, flow, Some(placement), in_order));
    }
    if let Some(owner) = owner_elsewhere(&seg.key) {
        return RxStep::Foreign { owner };
    }
    // Unknown flow: verify the checksum without placing anything.
    let check = Payload::in_fragments(fragments, seg.payload_range())
        .map_or(ChecksumCheck::Bad, |p| {
            seg.check_checksum(p.sum(0..p.len()), policy)
        });
    match check {
        ChecksumCheck::Bad => {
            counters.count_verdict(Verdict::BadChecksum);
            return RxStep::BadChecksum {
                flow: None,
                placement: None,
            };
        }
        ChecksumCheck::Partial => counters.csum_partial += 1,
        ChecksumCheck::Verified => {}
    }
    counters.unknown_flow += 1;
    RxStep::Record(RxRecord::of(&seg, None, None, false))
}

#[cfg(test)]
mod tests;
