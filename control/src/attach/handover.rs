//! Handing a used connection to another process and taking one up
//! (`daemon/handover.rs` has the daemon's side).

use datapath::mr::MrId;

use super::{AttachError, Attached, Local};
use crate::idmap::ConnId;
use crate::ipc::msg::{ErrorCode, Rehomed, Reply, Request};

impl Attached {
    /// Lets go of connection `id`, which this application read (`read`
    /// bytes of its receive stream) or wrote, for another process holding
    /// it to take up ([`Attached::rehome`]). Its memory stays registered
    /// and posted until the daemon says it was taken up
    /// ([`Attached::take_handed`]) or the connection closed. `false`
    /// when no other process holds it (close it instead).
    ///
    /// # Errors
    /// Not this application's connection; the daemon is gone.
    pub fn park(&mut self, id: ConnId, read: u64) -> Result<bool, AttachError> {
        self.local(id)?;
        let conn = id.to_bits();
        match self.call(Request::Park { conn, read }) {
            Ok(Reply::Done) => {
                self.parked.insert(id, ());
                Ok(true)
            }
            Err(AttachError::Refused {
                code: ErrorCode::NotShared,
                ..
            }) => Ok(false),
            Ok(other) => Err(AttachError::Protocol(format!(
                "{other:?} instead of Done to a park"
            ))),
            Err(e) => Err(e),
        }
    }

    /// Connections this application parked that another took up since
    /// the last call: their memory is free (deregister it; TX may still
    /// read it for a while, see [`crate::provider::Provider::deregister_memory`]).
    pub fn take_handed(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.handed)
    }

    /// Takes up connection `id`, which this application holds and the
    /// process that read or wrote it parked: its bytes are copied from
    /// each move's first region (the parker's, by the handle that process
    /// knew it by) into the second (this application's, of the same
    /// length and nothing posted on it), and the connection's work
    /// requests go on there. Returns where the parker left the stream.
    ///
    /// # Errors
    /// Not held here; refused ([`ErrorCode::Busy`] while the other process
    /// has not parked it; a region unknown or unfit); the daemon is gone.
    pub fn rehome(&mut self, id: ConnId, moves: &[(MrId, MrId)]) -> Result<Rehomed, AttachError> {
        if !self.held.contains_key(&id) {
            return Err(AttachError::UnknownConnection(id));
        }
        if moves.len() > crate::ipc::msg::MAX_MOVES {
            return Err(AttachError::Protocol(format!(
                "{} moves; a connection has at most {}",
                moves.len(),
                crate::ipc::msg::MAX_MOVES
            )));
        }
        for &(_, to) in moves {
            self.region(to)?;
        }
        let req = Request::Rehome {
            conn: id.to_bits(),
            moves: moves
                .iter()
                .map(|(from, to)| (from.to_bits(), to.to_bits()))
                .collect(),
        };
        match self.call(req)? {
            Reply::Rehomed(r) => {
                if r.slot >= self.welcome.max_connections {
                    return Err(AttachError::Protocol(format!(
                        "status entry {} of {}",
                        r.slot, self.welcome.max_connections
                    )));
                }
                self.held.remove(&id);
                self.addresses.insert(id, (r.local, r.remote));
                self.conns.insert(
                    id,
                    Local {
                        slot: r.slot,
                        recv: r.recvs,
                        send: r.sends,
                    },
                );
                self.posted = self.posted.saturating_add(r.recvs.saturating_add(r.sends));
                Ok(r)
            }
            other => Err(AttachError::Protocol(format!(
                "{other:?} instead of a connection taken up"
            ))),
        }
    }
}
