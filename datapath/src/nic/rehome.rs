//! Moving a flow's memory into other regions: a connection handed from one
//! application to another (a child after `fork`) goes on in the memory of
//! the one taking it up.

use super::flows::flow_mut;
use super::{Nic, NicError};
use crate::flow_table::FlowId;
use crate::ms::MrMove;

impl Nic {
    /// Moves `flow`'s memory: for each move, region `from`'s bytes are
    /// copied into `to` (bytes received but not yet completed, placed out
    /// of order, or posted to send are all there), and the flow's posted
    /// receive and send segments are re-pointed at the same places in the
    /// new regions. Send memory that TX descriptors still read stays
    /// referenced until they return, as a removed flow's does; the old
    /// regions hold no other reference of this flow's afterwards. Returns
    /// the flow's posted ends, receive then send.
    ///
    /// # Errors
    /// Unknown flow or region ([`NicError::Mr`]); a move whose regions are
    /// the same, differ in length, are named twice, or whose new region is
    /// already posted on, or whose old region another flow holds
    /// ([`NicError::BadMove`]); a posted segment in a
    /// region no move leaves, or whose place in the new region lacks the
    /// access ([`NicError::Ms`]). Nothing changes on error.
    pub fn rehome_flow(&mut self, flow: FlowId, moves: &[MrMove]) -> Result<(u64, u64), NicError> {
        let mut extents = Vec::with_capacity(moves.len());
        for (i, m) in moves.iter().enumerate() {
            let bad = |why| NicError::BadMove {
                from: m.from.index(),
                to: m.to.index(),
                why,
            };
            let (from, from_len) = self.mrs.extent(m.from)?;
            let (to, to_len) = self.mrs.extent(m.to)?;
            if m.from == m.to {
                return Err(bad("they are the same region"));
            }
            if from_len != to_len {
                return Err(bad("their lengths differ"));
            }
            if self.mrs.refs(m.to)? > 0 {
                return Err(bad("the new region is posted on"));
            }
            let named = |r| moves[..i].iter().any(|o| [o.from, o.to].contains(&r));
            if named(m.from) || named(m.to) {
                return Err(bad("a region is named by two moves"));
            }
            extents.push((from, to, from_len));
        }
        let f = flow_mut(&mut self.flows, flow)?;
        f.recv.check_rehome(&self.mrs, moves)?;
        f.send.check_rehome(&self.mrs, moves)?;
        // The bytes copied are this flow's only: a region another flow
        // (or send memory a removed one left to TX) also holds is not.
        for m in moves {
            let ours = (f.recv.segments().chain(f.send.segments()))
                .filter(|s| s.mr == m.from)
                .count();
            if self.mrs.refs(m.from)? as usize != ours {
                return Err(NicError::BadMove {
                    from: m.from.index(),
                    to: m.to.index(),
                    why: "another flow holds the old region",
                });
            }
        }

        let area = self.port.umem_mut().mr_mut();
        for (from, to, len) in extents {
            area.copy_within(from..from + len, to);
        }
        let mrs = &mut self.mrs;
        f.recv.rehome(mrs, moves, |mrs, mr, _| {
            mrs.release(mr).ok();
        })?;
        let (port, held) = (&self.port, &mut self.held);
        f.send.rehome(mrs, moves, |mrs, mr, area| {
            if port.mr_busy(area.clone()) {
                held.hold(mrs, mr, area);
            } else {
                mrs.release(mr).ok();
            }
        })?;
        Ok((f.recv.posted_end(), f.send.posted_end()))
    }
}
