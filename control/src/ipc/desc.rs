//! What travels on an attachment's two rings: work requests from the
//! application ([`PostDesc`]) and completions to it ([`CompletionDesc`]),
//! plus the codes that carry enums across. Both are plain integers, valid
//! for any bit pattern, because the other side may write anything.

use bytemuck::{Pod, Zeroable};
use transports::segment::CloseReason;
use transports::tcp::State;

use crate::provider::{CompletionKind, Direction};

/// A work request on the post ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Pod, Zeroable)]
#[repr(C)]
pub struct PostDesc {
    /// The application's id, returned in the completion.
    pub wr_id: u64,
    /// The connection's handle.
    pub conn: u64,
    /// The region's handle.
    pub mr: u64,
    /// Offset in the region.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// [`DIR_RECV`] or [`DIR_SEND`].
    pub dir: u32,
    /// Zero.
    pub reserved: u32,
}

/// `PostDesc::dir` of receive space.
pub const DIR_RECV: u32 = 1;
/// `PostDesc::dir` of payload to send.
pub const DIR_SEND: u32 = 2;

impl PostDesc {
    /// The direction, if `dir` names one.
    pub fn direction(&self) -> Option<Direction> {
        match self.dir {
            DIR_RECV => Some(Direction::Recv),
            DIR_SEND => Some(Direction::Send),
            _ => None,
        }
    }
}

/// A completion on the completion ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Pod, Zeroable)]
#[repr(C)]
pub struct CompletionDesc {
    /// The connection's handle.
    pub conn: u64,
    /// `Recv`/`Send`: the work request's id; `Accepted`: the port.
    pub wr_id: u64,
    /// `Recv`/`Send`: bytes; `PeerClosed`: stream length; `Accepted`:
    /// the connection's status slot.
    pub len: u64,
    /// One of the `KIND_*` codes.
    pub kind: u32,
    /// `Closed`: the reason's code.
    pub detail: u32,
}

/// `CompletionDesc::kind`: a receive work request is full.
pub const KIND_RECV: u32 = 1;
/// A send work request is acknowledged.
pub const KIND_SEND: u32 = 2;
/// The handshake completed.
pub const KIND_CONNECTED: u32 = 3;
/// The peer sent FIN.
pub const KIND_PEER_CLOSED: u32 = 4;
/// The connection ended.
pub const KIND_CLOSED: u32 = 5;
/// Another holder of the connection (a process forked from this one)
/// adopted it: this attachment still holds it, but no longer sees its
/// progress (not a provider completion).
pub const KIND_HANDED: u32 = 6;

/// The handle a listener's status entry carries (its `received` is the
/// count of connections waiting to be accepted): the port, tagged so it
/// never equals a connection's.
pub fn listener_tag(port: u16) -> u64 {
    1 << 63 | u64::from(port)
}

impl CompletionDesc {
    /// The ring entry of a provider completion.
    pub fn from_completion(c: &crate::provider::Completion) -> CompletionDesc {
        let (kind, len, detail) = match c.kind {
            CompletionKind::Recv => (KIND_RECV, c.len, 0),
            CompletionKind::Send => (KIND_SEND, c.len, 0),
            CompletionKind::Connected => (KIND_CONNECTED, 0, 0),
            CompletionKind::PeerClosed { len } => (KIND_PEER_CLOSED, len, 0),
            CompletionKind::Closed(r) => (KIND_CLOSED, 0, close_code(r)),
        };
        CompletionDesc {
            conn: c.conn.to_bits(),
            wr_id: c.wr_id,
            len,
            kind,
            detail,
        }
    }

    /// The provider completion this entry is, if it is one (not
    /// `Accepted`, not an unknown code).
    pub fn completion(&self) -> Option<crate::provider::Completion> {
        let (kind, wr_id, len) = match self.kind {
            KIND_RECV => (CompletionKind::Recv, self.wr_id, self.len),
            KIND_SEND => (CompletionKind::Send, self.wr_id, self.len),
            KIND_CONNECTED => (CompletionKind::Connected, 0, 0),
            KIND_PEER_CLOSED => (CompletionKind::PeerClosed { len: self.len }, 0, 0),
            KIND_CLOSED => (CompletionKind::Closed(close_reason(self.detail)?), 0, 0),
            _ => return None,
        };
        Some(crate::provider::Completion {
            conn: crate::idmap::ConnId::from_bits(self.conn),
            kind,
            wr_id,
            len,
        })
    }
}

const CLOSE_REASONS: [CloseReason; 6] = [
    CloseReason::Graceful,
    CloseReason::Reset,
    CloseReason::Refused,
    CloseReason::Aborted,
    CloseReason::TimedOut,
    CloseReason::ZeroWindow,
];

fn close_code(r: CloseReason) -> u32 {
    CLOSE_REASONS.iter().position(|&x| x == r).unwrap_or(3) as u32
}

fn close_reason(code: u32) -> Option<CloseReason> {
    CLOSE_REASONS.get(code as usize).copied()
}

const STATES: [State; 10] = [
    State::Closed,
    State::SynSent,
    State::SynReceived,
    State::Established,
    State::FinWait1,
    State::FinWait2,
    State::CloseWait,
    State::Closing,
    State::LastAck,
    State::TimeWait,
];

/// A TCP state as a status-table code.
pub fn state_code(s: State) -> u32 {
    STATES.iter().position(|&x| x == s).unwrap_or(0) as u32
}

/// The TCP state of a status-table code (`Closed` for an unknown one).
pub fn state_from_code(code: u32) -> State {
    STATES.get(code as usize).copied().unwrap_or(State::Closed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Completion;

    #[test]
    fn every_kind_reason_and_state_crosses_unchanged() {
        let conn = crate::idmap::ConnId::from_bits(5 << 32 | 9);
        let mut kinds = vec![
            CompletionKind::Recv,
            CompletionKind::Send,
            CompletionKind::Connected,
            CompletionKind::PeerClosed { len: 77 },
        ];
        kinds.extend(CLOSE_REASONS.iter().map(|&r| CompletionKind::Closed(r)));
        for kind in kinds {
            let (wr_id, len) = match kind {
                CompletionKind::Recv | CompletionKind::Send => (42, 1000),
                _ => (0, 0),
            };
            let c = Completion {
                conn,
                kind,
                wr_id,
                len,
            };
            assert_eq!(CompletionDesc::from_completion(&c).completion(), Some(c));
        }
        for s in STATES {
            assert_eq!(state_from_code(state_code(s)), s);
        }
    }

    #[test]
    fn unknown_codes_are_not_completions() {
        for kind in [0, KIND_HANDED, 99] {
            let d = CompletionDesc {
                kind,
                ..CompletionDesc::default()
            };
            assert_eq!(d.completion(), None);
        }
        let d = CompletionDesc {
            kind: KIND_CLOSED,
            detail: 6,
            ..CompletionDesc::default()
        };
        assert_eq!(d.completion(), None);
    }
}
