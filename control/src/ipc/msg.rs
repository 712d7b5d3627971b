//! The control messages between an attached application and the daemon,
//! and their encoding.
//!
//! Every message is one `SOCK_SEQPACKET` datagram of at most
//! [`MAX_MESSAGE`] bytes: a 12-byte header (magic, version, kind, the
//! request's sequence number, all little-endian) and a body of fixed-size
//! fields; strings are a length byte and at most [`MAX_TEXT`] bytes of
//! UTF-8. Decoding takes nothing on trust: a short, long, unknown or
//! malformed message is a [`DecodeError`], never a panic, and nothing it
//! says is allocated beyond those bounds. Descriptors travel beside a
//! message (`SCM_RIGHTS`), only from the daemon to the application.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// First four bytes of every message.
pub const MAGIC: u32 = u32::from_le_bytes(*b"ZSd\x01");
/// The protocol version this build speaks; a peer with another is refused.
pub const VERSION: u16 = 9;
/// Longest message either side sends or accepts.
pub const MAX_MESSAGE: usize = 1024;
/// Longest string in a message (bytes of UTF-8).
pub const MAX_TEXT: usize = 200;
/// Most drop reasons a [`Reply::Stats`] carries.
pub const MAX_DROPS: usize = 24;
/// Most region moves a [`Request::Rehome`] names (a connection's rings:
/// one each way).
pub const MAX_MOVES: usize = 4;
/// Longest drop reason in a [`Reply::Stats`] (they are short identifiers).
pub const MAX_REASON: usize = 32;
const HEADER_LEN: usize = 12;

mod error;
mod frame;
pub use error::{DecodeError, ErrorCode};
use frame::{open, Writer};

/// What an application asks of the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The first message: the application's name (its `comm`); the daemon
    /// answers [`Reply::Welcome`] with the attachment's memory.
    Hello {
        /// Program name, for the operator's view.
        name: String,
        /// The attachment of the process this one was forked from (0:
        /// none). The daemon checks the lineage (that process is this
        /// one's parent) and makes the new attachment a holder of every
        /// port and connection the parent's holds, as a forked child
        /// holds its parent's sockets.
        parent: u32,
    },
    /// Registers `len` bytes of the attachment's memory slot.
    RegisterMemory {
        /// Bytes.
        len: u64,
        /// `Access` bits (1 receive, 2 send).
        access: u8,
    },
    /// Deregisters a region ([`datapath::mr::MrId::to_bits`]).
    DeregisterMemory {
        /// The region.
        mr: u64,
    },
    /// Accepts connections to a port: opens a listening socket, or
    /// takes up one this attachment holds already (inherited).
    Listen {
        /// The port.
        port: u16,
        /// `SO_REUSEPORT`: a port whose sockets all asked for it and are
        /// the same user's is shared, each socket with its own accept
        /// queue (connections spread by the peer's address) — sockets of
        /// other programs, or several of this one's.
        reuseport: bool,
        /// The families of peers it takes ([`crate::daemon::Families`]
        /// bits: 1 IPv4, 2 IPv6, 3 both). Sockets taking different
        /// families share a port without `SO_REUSEPORT`.
        families: u8,
        /// 0: a new socket. Otherwise a socket this attachment holds
        /// (a forked or exec'd process taking up what it inherited).
        socket: u32,
    },
    /// Lets go of a listening socket (it closes with its last holder).
    Unlisten {
        /// The socket ([`Reply::Listening`]).
        socket: u32,
    },
    /// Opens a connection.
    Connect {
        /// The peer.
        remote: SocketAddr,
    },
    /// FIN after everything posted.
    Close {
        /// The connection.
        conn: u64,
    },
    /// RST now.
    Abort {
        /// The connection.
        conn: u64,
    },
    /// The queue's drop counters and retransmissions.
    Stats,
    /// The application leaves: its connections are reset, its memory
    /// freed (as on a hang-up, but not counted as lost).
    Detach,
    /// A connection's local and remote addresses (an accepted
    /// connection's peer is learnt this way).
    Endpoints {
        /// The connection.
        conn: u64,
    },
    /// Takes one connection from a listening socket's accept queue (one
    /// queue for every holder of the socket, each connection to exactly
    /// one).
    Accept {
        /// The socket ([`Reply::Listening`]).
        socket: u32,
    },
    /// Makes a connection this attachment holds (inherited) its own:
    /// its progress shows in this attachment's status table and its work
    /// requests come from here. Refused while another holder has work
    /// requests posted on it.
    Adopt {
        /// The connection.
        conn: u64,
    },
    /// The process is about to `execve` (`armed`) or its `execve` failed
    /// (not `armed`). Armed, the attachment's hang-up (its socket closes
    /// at the exec) does not end it for [`EXEC_GRACE`]: the new program,
    /// the same process, attaches naming it as its parent and is welcomed
    /// back as that attachment (the same number, memory slot and
    /// channel), as sockets without `FD_CLOEXEC` survive `exec` on Linux.
    Exec {
        /// Armed or disarmed.
        armed: bool,
    },
    /// This process closes its descriptor of a connection it has read or
    /// written, which a process forked from it also holds: the connection
    /// stays open, parked, for that holder to take up ([`Request::Rehome`]).
    /// `read` is how far this process read the receive stream. Refused
    /// (`NotShared`) when no other process holds it: then it is closed
    /// as usual.
    Park {
        /// The connection.
        conn: u64,
        /// Receive-stream bytes this process read.
        read: u64,
    },
    /// Takes up a connection this attachment holds that another process
    /// read or wrote and parked: its bytes are copied from each move's
    /// first region (the parker's) into its second (this attachment's,
    /// the same length, nothing posted on it) and its work requests go on
    /// there. Refused (`Busy`) while the other process has not parked it.
    Rehome {
        /// The connection.
        conn: u64,
        /// (the parker's region, this attachment's region), by handle; at
        /// most [`MAX_MOVES`].
        moves: Vec<(u64, u64)>,
    },
}

/// How long an attachment that announced an `exec` outlives its hang-up
/// waiting for the new program to attach.
pub const EXEC_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the daemon answers; exactly one reply per request, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The attachment is set up; its memory slot and channel descriptors
    /// come with this message.
    Welcome(Welcome),
    /// The request was carried out.
    Done,
    /// A region was registered.
    Registered {
        /// Its handle ([`datapath::mr::MrId::to_bits`]).
        mr: u64,
        /// Where it starts in the attachment's memory slot.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// A connection is being opened; `Connected` or `Closed` follows on
    /// the completion ring.
    Connecting {
        /// Its handle.
        conn: u64,
        /// Its entry in the channel's status table.
        slot: u32,
    },
    /// Counters.
    Stats(Stats),
    /// A connection's addresses.
    Endpoints {
        /// Ours.
        local: SocketAddr,
        /// The peer's.
        remote: SocketAddr,
    },
    /// Listening (or holding an inherited listener): the socket, and the
    /// status entry that shows how many connections wait in its accept
    /// queue.
    Listening {
        /// The socket's number (daemon-wide; never 0).
        socket: u32,
        /// Its entry in the channel's status table.
        slot: u32,
    },
    /// A connection taken from the accept queue, or adopted, with its
    /// addresses (no `Endpoints` round trip per accepted connection).
    Accepted {
        /// Its handle.
        conn: u64,
        /// Its entry in the channel's status table.
        slot: u32,
        /// Ours.
        local: SocketAddr,
        /// The peer's.
        remote: SocketAddr,
    },
    /// A parked connection taken up ([`Request::Rehome`]).
    Rehomed(Rehomed),
    /// The request was refused.
    Error {
        /// What kind of failure.
        code: ErrorCode,
        /// What was wrong, for a person.
        message: String,
    },
}

/// The attachment's setup, sent with four descriptors: the memory slot,
/// the channel, the daemon's doorbell and the application's doorbell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The attachment's number (for logs and the operator's view).
    pub attachment: u32,
    /// The interface's address.
    pub local_ip: Ipv4Addr,
    /// The interface's IPv6 address, when the daemon serves IPv6.
    pub local_ip6: Option<Ipv6Addr>,
    /// The transport's name.
    pub transport: String,
    /// Bytes of the memory slot.
    pub slot_len: u64,
    /// Entries of the work-request ring.
    pub post_ring: u32,
    /// Entries of the completion ring.
    pub completion_ring: u32,
    /// Entries of the status table (the attachment's connection limit).
    pub max_connections: u32,
    /// Work requests the attachment may have posted and not completed.
    pub max_posted: u32,
}

/// A connection taken up from the process that parked it: where it is,
/// and the stream state the taker's bookkeeping goes on from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rehomed {
    /// Its entry in the channel's status table.
    pub slot: u32,
    /// Ours.
    pub local: SocketAddr,
    /// The peer's.
    pub remote: SocketAddr,
    /// Receive-stream bytes the parker read.
    pub read: u64,
    /// End of the posted receive space.
    pub rx_posted: u64,
    /// End of the posted send stream.
    pub written: u64,
    /// Receive work requests posted and not completed (now this
    /// attachment's).
    pub recvs: u32,
    /// Send work requests posted and not completed (now this
    /// attachment's).
    pub sends: u32,
    /// The peer's FIN came after this many stream bytes.
    pub peer_fin: Option<u64>,
}

/// Counters a [`Request::Stats`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stats {
    /// Retransmissions and RTOs, where the transport counts them.
    pub retransmissions: Option<(u64, u64)>,
    /// Payload bytes the transport copied itself.
    pub payload_touched: u64,
    /// Drops by reason (non-zero only, at most [`MAX_DROPS`]).
    pub drops: Vec<(String, u64)>,
}

const K_HELLO: u16 = 1;
const K_REGISTER: u16 = 2;
const K_DEREGISTER: u16 = 3;
const K_LISTEN: u16 = 4;
const K_UNLISTEN: u16 = 5;
const K_CONNECT: u16 = 6;
const K_CLOSE: u16 = 7;
const K_ABORT: u16 = 8;
const K_STATS: u16 = 9;
const K_DETACH: u16 = 10;
const K_ENDPOINTS: u16 = 11;
const K_ACCEPT: u16 = 12;
const K_ADOPT: u16 = 13;
const K_EXEC: u16 = 14;
const K_PARK: u16 = 15;
const K_REHOME: u16 = 16;
const K_WELCOME: u16 = 0x81;
const K_DONE: u16 = 0x82;
const K_REGISTERED: u16 = 0x83;
const K_CONNECTING: u16 = 0x84;
const K_STATS_REPLY: u16 = 0x85;
const K_ENDPOINTS_REPLY: u16 = 0x86;
const K_LISTENING: u16 = 0x87;
const K_ACCEPTED: u16 = 0x88;
const K_REHOMED: u16 = 0x89;
const K_ERROR: u16 = 0x8f;

impl Request {
    /// The message for request number `seq`.
    pub fn encode(&self, seq: u32) -> Vec<u8> {
        let kind = match self {
            Request::Hello { .. } => K_HELLO,
            Request::RegisterMemory { .. } => K_REGISTER,
            Request::DeregisterMemory { .. } => K_DEREGISTER,
            Request::Listen { .. } => K_LISTEN,
            Request::Unlisten { .. } => K_UNLISTEN,
            Request::Connect { .. } => K_CONNECT,
            Request::Close { .. } => K_CLOSE,
            Request::Abort { .. } => K_ABORT,
            Request::Stats => K_STATS,
            Request::Detach => K_DETACH,
            Request::Endpoints { .. } => K_ENDPOINTS,
            Request::Accept { .. } => K_ACCEPT,
            Request::Adopt { .. } => K_ADOPT,
            Request::Exec { .. } => K_EXEC,
            Request::Park { .. } => K_PARK,
            Request::Rehome { .. } => K_REHOME,
        };
        let mut w = Writer::new(kind, seq);
        match self {
            Request::Hello { name, parent } => {
                w.text(name);
                w.u32(*parent);
            }
            Request::RegisterMemory { len, access } => {
                w.u64(*len);
                w.u8(*access);
            }
            Request::DeregisterMemory { mr } => w.u64(*mr),
            Request::Listen {
                port,
                reuseport,
                families,
                socket,
            } => {
                w.u16(*port);
                w.u8(u8::from(*reuseport));
                w.u8(*families);
                w.u32(*socket);
            }
            Request::Unlisten { socket } | Request::Accept { socket } => {
                w.u32(*socket);
            }
            Request::Connect { remote } => w.addr(*remote),
            Request::Close { conn }
            | Request::Abort { conn }
            | Request::Endpoints { conn }
            | Request::Adopt { conn } => {
                w.u64(*conn);
            }
            Request::Exec { armed } => w.u8(u8::from(*armed)),
            Request::Park { conn, read } => {
                w.u64(*conn);
                w.u64(*read);
            }
            Request::Rehome { conn, moves } => {
                w.u64(*conn);
                let moves = &moves[..moves.len().min(MAX_MOVES)];
                w.u8(moves.len() as u8);
                for &(from, to) in moves {
                    w.u64(from);
                    w.u64(to);
                }
            }
            Request::Stats | Request::Detach => {}
        }
        w.0
    }

    /// Decodes a message from an application: the request and its
    /// sequence number.
    ///
    /// # Errors
    /// Anything but a well-formed request of this version.
    pub fn decode(buf: &[u8]) -> Result<(Request, u32), DecodeError> {
        let (kind, seq, mut r) = open(buf)?;
        let req = match kind {
            K_HELLO => Request::Hello {
                name: r.text()?,
                parent: r.u32()?,
            },
            K_REGISTER => Request::RegisterMemory {
                len: r.u64()?,
                access: r.u8()?,
            },
            K_DEREGISTER => Request::DeregisterMemory { mr: r.u64()? },
            K_LISTEN => Request::Listen {
                port: r.u16()?,
                reuseport: r.u8()? != 0,
                families: r.u8()?,
                socket: r.u32()?,
            },
            K_UNLISTEN => Request::Unlisten { socket: r.u32()? },
            K_CONNECT => Request::Connect { remote: r.addr()? },
            K_CLOSE => Request::Close { conn: r.u64()? },
            K_ABORT => Request::Abort { conn: r.u64()? },
            K_STATS => Request::Stats,
            K_DETACH => Request::Detach,
            K_ENDPOINTS => Request::Endpoints { conn: r.u64()? },
            K_ACCEPT => Request::Accept { socket: r.u32()? },
            K_ADOPT => Request::Adopt { conn: r.u64()? },
            K_EXEC => Request::Exec {
                armed: r.u8()? != 0,
            },
            K_PARK => Request::Park {
                conn: r.u64()?,
                read: r.u64()?,
            },
            K_REHOME => {
                let conn = r.u64()?;
                let n = usize::from(r.u8()?);
                if n > MAX_MOVES {
                    return Err(DecodeError::Field("move count"));
                }
                let mut moves = Vec::with_capacity(n);
                for _ in 0..n {
                    moves.push((r.u64()?, r.u64()?));
                }
                Request::Rehome { conn, moves }
            }
            other => return Err(DecodeError::Kind(other)),
        };
        r.end()?;
        Ok((req, seq))
    }
}

impl Reply {
    /// The message answering request number `seq`.
    pub fn encode(&self, seq: u32) -> Vec<u8> {
        let kind = match self {
            Reply::Welcome(_) => K_WELCOME,
            Reply::Done => K_DONE,
            Reply::Registered { .. } => K_REGISTERED,
            Reply::Connecting { .. } => K_CONNECTING,
            Reply::Stats(_) => K_STATS_REPLY,
            Reply::Endpoints { .. } => K_ENDPOINTS_REPLY,
            Reply::Listening { .. } => K_LISTENING,
            Reply::Accepted { .. } => K_ACCEPTED,
            Reply::Rehomed(_) => K_REHOMED,
            Reply::Error { .. } => K_ERROR,
        };
        let mut w = Writer::new(kind, seq);
        match self {
            Reply::Welcome(h) => {
                w.u32(h.attachment);
                w.u32(u32::from(h.local_ip));
                match h.local_ip6 {
                    Some(ip) => w.ip(ip.into()),
                    None => w.u8(0),
                }
                w.text(&h.transport);
                w.u64(h.slot_len);
                w.u32(h.post_ring);
                w.u32(h.completion_ring);
                w.u32(h.max_connections);
                w.u32(h.max_posted);
            }
            Reply::Done => {}
            Reply::Registered { mr, offset, len } => {
                w.u64(*mr);
                w.u64(*offset);
                w.u64(*len);
            }
            Reply::Connecting { conn, slot } => {
                w.u64(*conn);
                w.u32(*slot);
            }
            Reply::Accepted {
                conn,
                slot,
                local,
                remote,
            } => {
                w.u64(*conn);
                w.u32(*slot);
                w.addr(*local);
                w.addr(*remote);
            }
            Reply::Listening { socket, slot } => {
                w.u32(*socket);
                w.u32(*slot);
            }
            Reply::Rehomed(h) => {
                w.u32(h.slot);
                w.addr(h.local);
                w.addr(h.remote);
                for v in [h.read, h.rx_posted, h.written] {
                    w.u64(v);
                }
                w.u32(h.recvs);
                w.u32(h.sends);
                w.u8(u8::from(h.peer_fin.is_some()));
                w.u64(h.peer_fin.unwrap_or(0));
            }
            Reply::Stats(s) => {
                match s.retransmissions {
                    Some((retx, rto)) => {
                        w.u8(1);
                        w.u64(retx);
                        w.u64(rto);
                    }
                    None => w.u8(0),
                }
                w.u64(s.payload_touched);
                let drops = &s.drops[..s.drops.len().min(MAX_DROPS)];
                w.u8(drops.len() as u8);
                for (name, n) in drops {
                    w.text_max(name, MAX_REASON);
                    w.u64(*n);
                }
            }
            Reply::Endpoints { local, remote } => {
                w.addr(*local);
                w.addr(*remote);
            }
            Reply::Error { code, message } => {
                w.u16(*code as u16);
                w.text(message);
            }
        }
        w.0
    }

    /// Decodes a message from the daemon: the reply and the sequence
    /// number it answers.
    ///
    /// # Errors
    /// Anything but a well-formed reply of this version.
    pub fn decode(buf: &[u8]) -> Result<(Reply, u32), DecodeError> {
        let (kind, seq, mut r) = open(buf)?;
        let reply = match kind {
            K_WELCOME => Reply::Welcome(Welcome {
                attachment: r.u32()?,
                local_ip: Ipv4Addr::from(r.u32()?),
                local_ip6: match r.u8()? {
                    0 => None,
                    6 => Some(Ipv6Addr::from(r.array::<16>()?)),
                    _ => return Err(DecodeError::Field("IPv6 address flag")),
                },
                transport: r.text()?,
                slot_len: r.u64()?,
                post_ring: r.u32()?,
                completion_ring: r.u32()?,
                max_connections: r.u32()?,
                max_posted: r.u32()?,
            }),
            K_DONE => Reply::Done,
            K_REGISTERED => Reply::Registered {
                mr: r.u64()?,
                offset: r.u64()?,
                len: r.u64()?,
            },
            K_CONNECTING => Reply::Connecting {
                conn: r.u64()?,
                slot: r.u32()?,
            },
            K_ACCEPTED => Reply::Accepted {
                conn: r.u64()?,
                slot: r.u32()?,
                local: r.addr()?,
                remote: r.addr()?,
            },
            K_LISTENING => Reply::Listening {
                socket: r.u32()?,
                slot: r.u32()?,
            },
            K_REHOMED => Reply::Rehomed(Rehomed {
                slot: r.u32()?,
                local: r.addr()?,
                remote: r.addr()?,
                read: r.u64()?,
                rx_posted: r.u64()?,
                written: r.u64()?,
                recvs: r.u32()?,
                sends: r.u32()?,
                peer_fin: match (r.u8()?, r.u64()?) {
                    (0, _) => None,
                    (1, len) => Some(len),
                    _ => return Err(DecodeError::Field("peer FIN flag")),
                },
            }),
            K_STATS_REPLY => {
                let retransmissions = match r.u8()? {
                    0 => None,
                    1 => Some((r.u64()?, r.u64()?)),
                    _ => return Err(DecodeError::Field("retransmissions flag")),
                };
                let payload_touched = r.u64()?;
                let n = usize::from(r.u8()?);
                if n > MAX_DROPS {
                    return Err(DecodeError::Field("drop count"));
                }
                let mut drops = Vec::with_capacity(n);
                for _ in 0..n {
                    drops.push((r.text_max(MAX_REASON)?, r.u64()?));
                }
                Reply::Stats(Stats {
                    retransmissions,
                    payload_touched,
                    drops,
                })
            }
            K_ENDPOINTS_REPLY => Reply::Endpoints {
                local: r.addr()?,
                remote: r.addr()?,
            },
            K_ERROR => {
                let code = ErrorCode::from_u16(r.u16()?).ok_or(DecodeError::Field("error code"))?;
                Reply::Error {
                    code,
                    message: r.text()?,
                }
            }
            other => return Err(DecodeError::Kind(other)),
        };
        r.end()?;
        Ok((reply, seq))
    }
}

#[cfg(test)]
mod tests;
