//! Why a request was refused, and why a message could not be read.

use super::VERSION;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// The message could not be decoded.
    BadMessage = 1,
    /// The first message was not `Hello`, or a second `Hello` came.
    NotAttached = 2,
    /// A per-attachment or daemon limit was reached (named in the text).
    Limit = 3,
    /// Not this attachment's connection.
    UnknownConnection = 4,
    /// Not this attachment's region.
    UnknownRegion = 5,
    /// Another attachment (or a kernel socket) holds the port.
    PortInUse = 6,
    /// Not listening on the port.
    NotListening = 7,
    /// The stack refused (the text says why).
    Failed = 8,
    /// The message came with descriptors; the daemon takes none.
    Descriptors = 9,
    /// No connection waits in the accept queue.
    WouldBlock = 10,
    /// Another holder of the connection has work requests posted on it.
    Busy = 11,
    /// No other process holds the connection.
    NotShared = 12,
}

impl ErrorCode {
    pub(super) fn from_u16(v: u16) -> Option<ErrorCode> {
        Some(match v {
            1 => ErrorCode::BadMessage,
            2 => ErrorCode::NotAttached,
            3 => ErrorCode::Limit,
            4 => ErrorCode::UnknownConnection,
            5 => ErrorCode::UnknownRegion,
            6 => ErrorCode::PortInUse,
            7 => ErrorCode::NotListening,
            8 => ErrorCode::Failed,
            9 => ErrorCode::Descriptors,
            10 => ErrorCode::WouldBlock,
            11 => ErrorCode::Busy,
            12 => ErrorCode::NotShared,
            _ => return None,
        })
    }
}

/// A message that is not one this build understands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than its header or its fields.
    #[error("message too short ({0} bytes)")]
    Short(usize),
    /// Longer than [`MAX_MESSAGE`], or bytes after the last field.
    #[error("message has {0} bytes after its fields")]
    Trailing(usize),
    /// Not a zerosplit message.
    #[error("bad magic {0:#010x}")]
    Magic(u32),
    /// Another protocol version.
    #[error("protocol version {0}, this build speaks {VERSION}")]
    Version(u16),
    /// An unknown message kind.
    #[error("unknown message kind {0}")]
    Kind(u16),
    /// A field out of its range (named).
    #[error("bad field {0}")]
    Field(&'static str),
}
