//! [`Provider`]: the provider API (registered memory, posted work requests,
//! a completion queue) as a trait, so the CLI's commands and the stream
//! facade run over either transport on the same datapath: the header-only
//! TCP ([`crate::stack::Stack`]) or smoltcp ([`crate::stack::SmolStack`]).
//! Both are a [`crate::host::Host`], which implements it once.
//!
//! The API follows RDMA verbs loosely: the application registers memory,
//! posts receive space and payload to send as work requests and learns
//! their fate from a completion queue. A receive work request completes
//! when every byte of it arrived in order; bytes below
//! [`Provider::received`] are final even before their buffer completes
//! (nothing writes below the placement floor), so a stream reader may
//! consume them early. A send work request completes when the peer
//! acknowledged all of it.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use datapath::mr::{Access, MrId};
use transports::segment::CloseReason;
use transports::tcp::State;

pub use crate::idmap::ConnId;

/// A provider call failed; says what was being done. Front-ends that drive
/// a [`Provider`] generically (a transfer, a service) report its errors
/// through this one type.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ProviderCallError {
    /// What was being done (`listening on port 7`, `posting a receive
    /// buffer`, …).
    pub what: String,
    /// The provider's own error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl ProviderCallError {
    /// A `map_err` adapter naming `what` a failed call was doing.
    pub fn doing<E: std::error::Error + Send + Sync + 'static>(
        what: impl Into<String>,
    ) -> impl FnOnce(E) -> Self {
        move |e| Self {
            what: what.into(),
            source: Box::new(e),
        }
    }
}

/// What completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionKind {
    /// A receive work request is full of in-order bytes.
    Recv,
    /// A send work request is acknowledged.
    Send,
    /// The handshake completed (active or passive open).
    Connected,
    /// The peer sent FIN after `len` stream bytes.
    PeerClosed {
        /// Receive-stream length.
        len: u64,
    },
    /// The connection ended; its id is no longer valid after this.
    Closed(CloseReason),
}

/// An entry of the completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The connection.
    pub conn: ConnId,
    /// What completed.
    pub kind: CompletionKind,
    /// The work request's id (`Recv`/`Send`), else 0.
    pub wr_id: u64,
    /// Bytes of the work request (`Recv`/`Send`), else 0.
    pub len: u64,
}

/// The address families a listening socket takes peers of: an IPv4
/// socket's, an IPv6-only one's (`IPV6_V6ONLY`), or a dual-stack IPv6
/// one's (both; IPv4 peers named v4-mapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Families(u8);

impl Families {
    /// IPv4 peers.
    pub const V4: Families = Families(1);
    /// IPv6 peers.
    pub const V6: Families = Families(2);
    /// Both (a dual-stack socket).
    pub const BOTH: Families = Families(3);

    /// From [`Families::bits`]; `None` for anything else.
    pub fn from_bits(bits: u8) -> Option<Families> {
        (1..=3).contains(&bits).then_some(Families(bits))
    }

    /// Its encoding (1 IPv4, 2 IPv6, 3 both).
    pub fn bits(self) -> u8 {
        self.0
    }

    /// Whether a peer at `peer` is one of these families (a v4-mapped
    /// address is IPv4).
    pub fn take(self, peer: SocketAddr) -> bool {
        let ipv4 = match peer {
            SocketAddr::V4(_) => true,
            SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some(),
        };
        self.0 & if ipv4 { 1 } else { 2 } != 0
    }

    /// Whether a peer could be taken by both.
    pub fn overlap(self, other: Families) -> bool {
        self.0 & other.0 != 0
    }
}

/// The operations an application drives a transport with. Semantics are
/// those documented in [this module](self): a receive work request completes when all
/// its bytes arrived in order (bytes below [`Provider::received`] are final
/// earlier), a send work request when the peer acknowledged all of it.
pub trait Provider {
    /// The error of every fallible operation.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Short name of the transport (`"tcp"`, `"smoltcp"`).
    fn transport_name(&self) -> &'static str;
    /// The interface's IPv4 address.
    fn local_ip(&self) -> Ipv4Addr;
    /// The interface's IPv6 address, when this stack serves IPv6 (its
    /// listeners take IPv6 peers too and it connects to them).
    fn local_ip6(&self) -> Option<Ipv6Addr>;
    /// Registers `len` bytes of application memory.
    ///
    /// # Errors
    /// No space or no region slot left.
    fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, Self::Error>;
    /// Deregisters a region.
    ///
    /// # Errors
    /// Unknown region, or still referenced.
    fn deregister_memory(&mut self, mr: MrId) -> Result<(), Self::Error>;
    /// A registered region's bytes.
    ///
    /// # Errors
    /// Unknown region.
    fn memory(&self, mr: MrId) -> Result<&[u8], Self::Error>;
    /// A registered region's bytes, writable.
    ///
    /// # Errors
    /// Unknown region.
    fn memory_mut(&mut self, mr: MrId) -> Result<&mut [u8], Self::Error>;
    /// Accepts connections to `port`.
    ///
    /// # Errors
    /// The port is taken or steering failed.
    fn listen(&mut self, port: u16) -> Result<(), Self::Error>;
    /// Stops accepting connections to `port`: new SYNs go to the kernel
    /// again; connections not yet accepted (still in the handshake or the
    /// accept queue) are reset; accepted ones are untouched.
    ///
    /// # Errors
    /// Not listening on `port`, or steering failed.
    fn unlisten(&mut self, port: u16) -> Result<(), Self::Error>;
    /// The next established connection on `port`.
    ///
    /// # Errors
    /// Not listening on `port`.
    fn accept(&mut self, port: u16) -> Result<Option<ConnId>, Self::Error>;
    /// Opens a connection to an IPv4 or IPv6 peer (a v4-mapped IPv6
    /// address is the IPv4 peer), from the interface's address of its
    /// family.
    ///
    /// # Errors
    /// No route, no ARP (neighbour discovery) answer, no address of the
    /// peer's family, no port, no flow slot.
    fn connect(&mut self, remote: SocketAddr) -> Result<ConnId, Self::Error>;
    /// Posts a work request: receive space or payload to send.
    ///
    /// # Errors
    /// Unknown connection or region, bounds, access.
    fn post(&mut self, wr: WorkRequest) -> Result<(), Self::Error>;
    /// Posts receive space ([`Provider::post`] of a [`Direction::Recv`]
    /// request).
    ///
    /// # Errors
    /// Unknown connection or region, bounds, access.
    fn post_recv(
        &mut self,
        id: ConnId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), Self::Error> {
        self.post(WorkRequest::new(
            id,
            Direction::Recv,
            mr,
            offset,
            len,
            wr_id,
        ))
    }
    /// Posts payload to send ([`Provider::post`] of a [`Direction::Send`]
    /// request).
    ///
    /// # Errors
    /// Unknown connection or region, bounds, access.
    fn post_send(
        &mut self,
        id: ConnId,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), Self::Error> {
        self.post(WorkRequest::new(
            id,
            Direction::Send,
            mr,
            offset,
            len,
            wr_id,
        ))
    }
    /// FIN after everything posted.
    ///
    /// # Errors
    /// Unknown connection.
    fn close(&mut self, id: ConnId) -> Result<(), Self::Error>;
    /// RST now.
    ///
    /// # Errors
    /// Unknown connection.
    fn abort(&mut self, id: ConnId) -> Result<(), Self::Error>;
    /// In-order, final receive-stream bytes.
    ///
    /// # Errors
    /// Unknown connection.
    fn received(&self, id: ConnId) -> Result<u64, Self::Error>;
    /// Acknowledged send-stream bytes.
    ///
    /// # Errors
    /// Unknown connection.
    fn acked(&self, id: ConnId) -> Result<u64, Self::Error>;
    /// The TCP state.
    ///
    /// # Errors
    /// Unknown connection.
    fn state(&self, id: ConnId) -> Result<State, Self::Error>;
    /// One iteration of the loop; how much work it did.
    fn poll(&mut self) -> usize;
    /// The next completion, without polling.
    fn poll_completion(&mut self) -> Option<Completion>;
    /// Polls until a completion or the timeout.
    fn wait_completion(&mut self, timeout: Duration) -> Option<Completion>;
    /// Datapath drops by reason (non-zero only).
    fn drops(&self) -> Vec<(&'static str, u64)>;
    /// TCP retransmissions and RTOs, where the transport reports them
    /// (smoltcp does not count them).
    fn retransmissions(&self) -> Option<(u64, u64)>;
    /// Payload bytes the transport itself touched (copied into or out of
    /// its own buffers on its behalf): about every byte for smoltcp, 0 for
    /// the header-only TCP.
    fn payload_bytes_touched_by_transport(&self) -> u64;
}

/// Which stream a work request extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Receive space.
    Recv,
    /// Payload to send.
    Send,
}

/// A posted work request: `len` bytes at `offset` of `mr`.
#[derive(Debug, Clone, Copy)]
pub struct WorkRequest {
    /// The connection (open: the host checked).
    pub conn: ConnId,
    /// Receive space or payload to send.
    pub dir: Direction,
    /// The region.
    pub mr: MrId,
    /// Offset in the region.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
    /// The application's id, returned in the completion.
    pub wr_id: u64,
}

impl WorkRequest {
    /// `len` bytes at `offset` of `mr` for `conn`'s receive or send stream.
    pub fn new(
        conn: ConnId,
        dir: Direction,
        mr: MrId,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Self {
        WorkRequest {
            conn,
            dir,
            mr,
            offset,
            len,
            wr_id,
        }
    }
}
