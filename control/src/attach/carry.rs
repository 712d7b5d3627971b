//! What of an attachment's own tables crosses an `execve`. The daemon
//! welcomes the new program back as the attachment its old self held
//! (same memory slot, channel, regions, posted work requests), so the
//! program's side of those tables is all that is lost with the old image:
//! the old program reads it out ([`Attached::regions`],
//! [`Attached::carried_conn`]) into what it hands its successor (the
//! socket shim's exec manifest), and the new one takes it in.
//!
//! Nothing taken in is trusted by the daemon, which checks every work
//! request against its own tables; what is checked here keeps this
//! process from indexing outside its mapping.

use std::net::SocketAddr;

use datapath::mr::{Access, MrId};

use super::{AttachError, Attached, Local, Region};
use crate::idmap::ConnId;

/// A region of the memory slot as the program before an exec held it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarriedRegion {
    /// Its handle.
    pub mr: MrId,
    /// Its offset in the memory slot.
    pub offset: usize,
    /// Its length.
    pub len: usize,
    /// What it may be posted for.
    pub access: Access,
}

/// A connection as the program before an exec held it: its status-table
/// entry, its work requests posted and not yet completed, its addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarriedConn {
    /// The connection.
    pub conn: ConnId,
    /// Its status-table entry.
    pub slot: u32,
    /// Receive work requests posted and not completed.
    pub recv: u32,
    /// Send work requests posted and not completed.
    pub send: u32,
    /// Local address.
    pub local: SocketAddr,
    /// Remote address.
    pub remote: SocketAddr,
}

impl Attached {
    /// Whether the daemon welcomed this program back as the attachment
    /// of the program it exec'd from.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// Every region registered, in no particular order.
    pub fn regions(&self) -> Vec<CarriedRegion> {
        self.regions
            .iter()
            .map(|(&mr, r)| CarriedRegion {
                mr,
                offset: r.offset,
                len: r.len,
                access: r.access,
            })
            .collect()
    }

    /// Connection `id` as a successor takes it in, if it is this
    /// program's (active: accepted, connected or adopted).
    pub fn carried_conn(&self, id: ConnId) -> Option<CarriedConn> {
        let l = self.conns.get(&id)?;
        let (local, remote) = self.endpoints(id).ok()?;
        Some(CarriedConn {
            conn: id,
            slot: l.slot,
            recv: l.recv,
            send: l.send,
            local,
            remote,
        })
    }

    /// Takes in a region the program before the exec registered.
    ///
    /// # Errors
    /// Not resumed (`Protocol`), or the region does not lie inside the
    /// memory slot (`Range`).
    pub fn take_region(&mut self, r: CarriedRegion) -> Result<(), AttachError> {
        self.check_resumed()?;
        if r.offset
            .checked_add(r.len)
            .is_none_or(|end| end > self.memory.len())
        {
            return Err(AttachError::Range {
                mr: r.mr,
                offset: r.offset,
                len: r.len,
                region_len: self.memory.len(),
                access: r.access,
            });
        }
        self.regions.insert(
            r.mr,
            Region {
                offset: r.offset,
                len: r.len,
                access: r.access,
            },
        );
        Ok(())
    }

    /// Takes in a connection the program before the exec held.
    ///
    /// # Errors
    /// Not resumed (`Protocol`), or its status entry or posted work
    /// requests lie beyond the limits the daemon gave (`Limit`).
    pub fn take_conn(&mut self, c: CarriedConn) -> Result<(), AttachError> {
        self.check_resumed()?;
        let posted = c.recv.saturating_add(c.send);
        if c.slot >= self.welcome.max_connections
            || self.posted.saturating_add(posted) > self.welcome.max_posted
        {
            return Err(AttachError::Limit(format!(
                "connection {:?} at status entry {} with {posted} posted",
                c.conn, c.slot
            )));
        }
        self.conns.insert(
            c.conn,
            Local {
                slot: c.slot,
                recv: c.recv,
                send: c.send,
            },
        );
        self.posted += posted;
        self.addresses.insert(c.conn, (c.local, c.remote));
        Ok(())
    }

    fn check_resumed(&self) -> Result<(), AttachError> {
        if self.resumed {
            Ok(())
        } else {
            Err(AttachError::Protocol(
                "this attachment is not the one the program before the exec held".into(),
            ))
        }
    }
}
