//! Moving the placement floor: the transport's `rcv_nxt` retires receive
//! segments, and only then are their completions handed out.

use crate::flow_table::FlowState;
use crate::mr::MrTable;
use crate::ms::{Completion, MsError};

/// Errors from [`advance_floor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FloorError {
    /// Part of `[floor, offset)` was never placed by a verified segment:
    /// completing it would hand the application bytes nobody checked.
    #[error("cannot advance floor {floor} to {offset}: byte {first_gap} was never placed")]
    NotPlaced {
        /// Current floor.
        floor: u64,
        /// Requested floor.
        offset: u64,
        /// First stream offset in the range that is not placed.
        first_gap: u64,
    },
    /// The segment list refused (offset beyond the posted end).
    #[error(transparent)]
    Segments(#[from] MsError),
}

/// Moves the placement floor to `offset` (the transport's `rcv_nxt` as a
/// stream offset): retires receive segments ending at or before it, prunes
/// the placed set, and only then returns the completions to post. Moving
/// the floor backwards, or to where it is, does nothing.
///
/// # Errors
/// [`FloorError::NotPlaced`] if some byte of `[floor, offset)` was not
/// placed with a verified checksum; [`FloorError::Segments`] if `offset`
/// exceeds the posted end. Nothing changes on error.
pub fn advance_floor(
    flow: &mut FlowState,
    mrs: &mut MrTable,
    offset: u64,
) -> Result<Vec<Completion>, FloorError> {
    let floor = flow.floor();
    if offset > flow.recv.posted_end() {
        return Err(MsError::BeyondPosted {
            offset,
            posted_end: flow.recv.posted_end(),
        }
        .into());
    }
    if offset > floor && !flow.placed.contains(floor..offset) {
        let first_gap = flow
            .placed
            .ranges()
            .next()
            .filter(|r| r.start <= floor)
            .map_or(floor, |r| r.end);
        return Err(FloorError::NotPlaced {
            floor,
            offset,
            first_gap,
        });
    }
    let done = flow.recv.retire_through(mrs, offset)?;
    flow.placed.prune(flow.floor());
    Ok(done)
}
