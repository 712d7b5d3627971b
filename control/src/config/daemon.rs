//! `[daemon]`: the shared service (`zerosplit daemon`), its socket and the
//! limits each attached application gets.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::units::ByteSize;

/// Where the daemon listens unless `daemon.socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/zerosplit/daemon.sock";

/// `[daemon]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    /// The Unix socket applications attach on.
    pub socket: PathBuf,
    /// Permission bits of the socket (who may attach), e.g. `0o660`.
    pub socket_mode: u32,
    /// Group that owns the socket, or none (root's).
    pub socket_group: Option<String>,
    /// Applications attached at once.
    pub max_attachments: u32,
    /// Memory each application may register (its memory slot: a part of
    /// the UMEM only it maps).
    pub memory_per_attachment: ByteSize,
    /// Connections each application may hold.
    pub max_connections: u32,
    /// Work requests each application may have posted and not completed.
    pub max_posted: u32,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: PathBuf::from(DEFAULT_SOCKET),
            socket_mode: 0o660,
            socket_group: None,
            max_attachments: 8,
            memory_per_attachment: ByteSize(64 << 20),
            max_connections: 256,
            max_posted: 1024,
        }
    }
}
