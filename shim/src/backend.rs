//! Where the shim's sockets live: a stack of this process's own
//! ([`Backend::Own`], the standalone mode) or the host's daemon
//! ([`Backend::Daemon`], attached: the daemon owns the interface and
//! runs the transport; payload still lands in this process's memory,
//! its slot of the daemon's UMEM). Both are a [`Provider`]; the few
//! calls beyond it say here what each mode does.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::time::{Duration, Instant as StdInstant};

use datapath::mr::{Access, MrId};
use transports::cc::Algorithm;
use transports::tcp::State;
use transports::Instant;
use zerosplit::attach::{AttachError, Attached, CarriedConn, CarriedRegion, ListenSocket};
use zerosplit::daemon::Families;
use zerosplit::host::{ConnInfo, HostError};
use zerosplit::provider::{Completion, ConnId, Provider, WorkRequest};
use zerosplit::stack::Stack;

/// The shim's stack.
#[derive(Debug)]
pub(crate) enum Backend {
    /// In this process (`zerosplit exec --standalone`).
    Own(Box<Stack>),
    /// The daemon's, through an attachment; `since` is the clock the
    /// idle policy reads, `algorithm` the controller the configuration
    /// names (the daemon's connections get the daemon's).
    Daemon {
        attached: Box<Attached>,
        since: StdInstant,
        algorithm: Algorithm,
    },
    /// None: a forked child that could not attach (its inherited sockets
    /// are reset); every call fails with `ENETDOWN`.
    Detached,
}

/// A call failed, in either mode.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendError {
    #[error(transparent)]
    Own(#[from] HostError),
    #[error(transparent)]
    Daemon(#[from] AttachError),
    #[error("this process could not attach to the daemon after fork")]
    Detached,
}

impl BackendError {
    /// The errno `listen` / `connect` report for it.
    pub(crate) fn errno(&self) -> i32 {
        use zerosplit::ipc::msg::ErrorCode;
        match self {
            BackendError::Own(HostError::PortOwned(_))
            | BackendError::Daemon(AttachError::Refused {
                code: ErrorCode::PortInUse,
                ..
            }) => libc::EADDRINUSE,
            BackendError::Own(HostError::NetInfo(_)) => libc::ENETUNREACH,
            BackendError::Daemon(AttachError::Lost) | BackendError::Detached => libc::ENETDOWN,
            BackendError::Daemon(AttachError::Refused {
                code: ErrorCode::Limit,
                ..
            }) => libc::ENOBUFS,
            _ => libc::EAGAIN,
        }
    }
}

/// Runs `$call` on whichever provider the backend holds.
macro_rules! both {
    ($self:ident, $p:ident => $call:expr) => {
        match $self {
            Backend::Own($p) => $call.map_err(BackendError::from),
            Backend::Daemon { attached: $p, .. } => $call.map_err(BackendError::from),
            Backend::Detached => Err(BackendError::Detached),
        }
    };
    (plain $self:ident, $p:ident => $call:expr, $none:expr) => {
        match $self {
            Backend::Own($p) => $call,
            Backend::Daemon { attached: $p, .. } => $call,
            Backend::Detached => $none,
        }
    };
}

impl Provider for Backend {
    type Error = BackendError;

    fn transport_name(&self) -> &'static str {
        both!(plain self, p => p.transport_name(), "none")
    }
    fn local_ip(&self) -> Ipv4Addr {
        both!(plain self, p => p.local_ip(), Ipv4Addr::UNSPECIFIED)
    }
    fn local_ip6(&self) -> Option<Ipv6Addr> {
        both!(plain self, p => p.local_ip6(), None)
    }
    fn register_memory(&mut self, len: usize, access: Access) -> Result<MrId, BackendError> {
        both!(self, p => p.register_memory(len, access))
    }
    fn deregister_memory(&mut self, mr: MrId) -> Result<(), BackendError> {
        both!(self, p => p.deregister_memory(mr))
    }
    fn memory(&self, mr: MrId) -> Result<&[u8], BackendError> {
        both!(self, p => p.memory(mr))
    }
    fn memory_mut(&mut self, mr: MrId) -> Result<&mut [u8], BackendError> {
        both!(self, p => p.memory_mut(mr))
    }
    fn listen(&mut self, port: u16) -> Result<(), BackendError> {
        both!(self, p => p.listen(port))
    }
    fn unlisten(&mut self, port: u16) -> Result<(), BackendError> {
        both!(self, p => p.unlisten(port))
    }
    fn accept(&mut self, port: u16) -> Result<Option<ConnId>, BackendError> {
        both!(self, p => p.accept(port))
    }
    fn connect(&mut self, remote: std::net::SocketAddr) -> Result<ConnId, BackendError> {
        both!(self, p => p.connect(remote))
    }
    fn post(&mut self, wr: WorkRequest) -> Result<(), BackendError> {
        both!(self, p => p.post(wr))
    }
    fn close(&mut self, id: ConnId) -> Result<(), BackendError> {
        both!(self, p => p.close(id))
    }
    fn abort(&mut self, id: ConnId) -> Result<(), BackendError> {
        both!(self, p => p.abort(id))
    }
    fn received(&self, id: ConnId) -> Result<u64, BackendError> {
        both!(self, p => p.received(id))
    }
    fn acked(&self, id: ConnId) -> Result<u64, BackendError> {
        both!(self, p => p.acked(id))
    }
    fn state(&self, id: ConnId) -> Result<State, BackendError> {
        both!(self, p => p.state(id))
    }
    fn poll(&mut self) -> usize {
        both!(plain self, p => p.poll(), 0)
    }
    fn poll_completion(&mut self) -> Option<Completion> {
        both!(plain self, p => p.poll_completion(), None)
    }
    fn wait_completion(&mut self, timeout: Duration) -> Option<Completion> {
        both!(plain self, p => p.wait_completion(timeout), None)
    }
    fn drops(&self) -> Vec<(&'static str, u64)> {
        both!(plain self, p => p.drops(), Vec::new())
    }
    fn retransmissions(&self) -> Option<(u64, u64)> {
        both!(plain self, p => Provider::retransmissions(&**p), None)
    }
    fn payload_bytes_touched_by_transport(&self) -> u64 {
        both!(plain self, p => p.payload_bytes_touched_by_transport(), 0)
    }
}

impl Backend {
    /// The sockets live in the daemon (or would: a forked child that
    /// could not attach).
    pub(crate) fn is_attached(&self) -> bool {
        !matches!(self, Backend::Own(_))
    }

    /// Connections waiting in a listener's accept queue that this
    /// process may take: attached, the queue every holder of the daemon's
    /// socket shares (standalone, accepted connections are moved to the
    /// listener's backlog at once, so none).
    pub(crate) fn pending(&self, socket: Option<ListenSocket>) -> u64 {
        match (self, socket) {
            (Backend::Daemon { attached, .. }, Some(s)) => attached.pending(s),
            _ => 0,
        }
    }

    /// One pass: the own stack's transport and datapath, or the
    /// daemon's completions taken off the ring. Returns the work done.
    pub(crate) fn poll_pass(&mut self) -> usize {
        match self {
            Backend::Own(s) => s.poll_pass(),
            Backend::Daemon { attached, .. } => attached.take_completions(),
            Backend::Detached => 0,
        }
    }

    /// The idle policy's clock.
    pub(crate) fn now(&self) -> Instant {
        match self {
            Backend::Own(s) => s.now(),
            Backend::Daemon { since, .. } => Instant::from_nanos(since.elapsed().as_nanos() as u64),
            Backend::Detached => Instant::from_nanos(0),
        }
    }

    /// When the own transport's next timer is due (the daemon keeps its
    /// own timers).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        match self {
            Backend::Own(s) => s.next_deadline(),
            Backend::Daemon { .. } | Backend::Detached => None,
        }
    }

    /// What the polling thread sleeps on.
    pub(crate) fn wait_fds(&self) -> Vec<RawFd> {
        match self {
            Backend::Own(s) => s.wait_fds(),
            Backend::Daemon { attached, .. } => attached.wait_fds(),
            Backend::Detached => Vec::new(),
        }
    }

    /// Before the polling thread sleeps; `false`: do not (work waits).
    pub(crate) fn prepare_sleep(&mut self) -> bool {
        match self {
            Backend::Own(_) | Backend::Detached => true,
            Backend::Daemon { attached, .. } => attached.prepare_sleep(),
        }
    }

    /// After the polling thread slept: whether the daemon rang (progress
    /// that may not show as a completion: waiting readers must look).
    pub(crate) fn woke(&mut self) -> bool {
        match self {
            Backend::Own(_) | Backend::Detached => false,
            Backend::Daemon { attached, .. } => attached.woke(),
        }
    }

    /// Retransmitted segments and RTOs.
    pub(crate) fn retransmission_counts(&self) -> (u64, u64) {
        match self {
            Backend::Own(s) => s.retransmissions(),
            Backend::Daemon { attached, .. } => {
                Provider::retransmissions(&**attached).unwrap_or((0, 0))
            }
            Backend::Detached => (0, 0),
        }
    }

    /// Whether a send may be posted now. Attached, the daemon bounds the
    /// work requests a program has outstanding (`daemon.max_posted`);
    /// sends stop at three quarters of it, so receive buffers can always
    /// be posted again (a program whose reads could not repost would
    /// wait for data that has nowhere to land). A send that finds no room
    /// waits as for a full send ring, instead of failing.
    pub(crate) fn send_room(&self) -> bool {
        match self {
            Backend::Own(_) => true,
            Backend::Detached => false,
            Backend::Daemon { attached, .. } => {
                let (_, max_posted) = attached.limits();
                attached.post_room() > max_posted / 4
            }
        }
    }

    /// Opens a listening socket on `port`, or takes up `inherited` (one
    /// this process holds since a fork or exec). Attached, the daemon's
    /// socket, which `reuseport` (`SO_REUSEPORT`) may put in a group with
    /// other sockets on the port (this program's or others'); the own
    /// stack has one listener a port (`None`), which the shim's reuseport
    /// sockets, and its sockets of different `families`, share.
    pub(crate) fn open_listener(
        &mut self,
        port: u16,
        reuseport: bool,
        families: Families,
        inherited: Option<ListenSocket>,
    ) -> Result<Option<ListenSocket>, BackendError> {
        match self {
            Backend::Daemon { attached, .. } => Ok(Some(
                attached.listen_socket(port, reuseport, families, inherited)?,
            )),
            other => Provider::listen(other, port).map(|()| None),
        }
    }

    /// Narrows the own stack's listening port `port` to peers of
    /// `families` (those of the shim's listeners on it). Attached, the
    /// daemon does so for its sockets.
    pub(crate) fn listen_families(
        &mut self,
        port: u16,
        families: Families,
    ) -> Result<(), BackendError> {
        match self {
            Backend::Own(s) => Ok(s.listen_families(port, families)?),
            _ => Ok(()),
        }
    }

    /// One connection from a listener's accept queue: the daemon's socket
    /// (attached), else the own stack's on `port`.
    pub(crate) fn accept_on(
        &mut self,
        port: u16,
        socket: Option<ListenSocket>,
    ) -> Result<Option<ConnId>, BackendError> {
        match (self, socket) {
            (Backend::Daemon { attached, .. }, Some(s)) => Ok(attached.accept_on(s)?),
            (other, _) => Provider::accept(other, port),
        }
    }

    /// Lets go of a listening socket (attached: the daemon's, which
    /// closes with its last holder in any process).
    pub(crate) fn close_listener(
        &mut self,
        port: u16,
        socket: Option<ListenSocket>,
    ) -> Result<(), BackendError> {
        match (self, socket) {
            (Backend::Daemon { attached, .. }, Some(s)) => Ok(attached.unlisten_socket(s)?),
            (other, _) => Provider::unlisten(other, port),
        }
    }

    /// Tells the daemon an `execve` is coming (`armed`) or failed.
    pub(crate) fn announce_exec(&mut self, armed: bool) -> Result<(), BackendError> {
        match self {
            Backend::Daemon { attached, .. } => Ok(attached.announce_exec(armed)?),
            _ => Err(BackendError::Detached),
        }
    }

    /// A forked child holds inherited connection `id` (attached).
    pub(crate) fn hold(&mut self, id: ConnId) {
        if let Backend::Daemon { attached, .. } = self {
            attached.hold(id);
        }
    }

    /// Makes connection `id` this process's own (attached): one it holds
    /// since a fork, or its own already (nothing to do).
    pub(crate) fn adopt(&mut self, id: ConnId) -> Result<(), BackendError> {
        match self {
            Backend::Daemon { attached, .. } => Ok(attached.adopt(id)?),
            _ => Err(BackendError::Detached),
        }
    }

    /// Lets go of connection `id`, read up to `read`, for another process
    /// holding it to take up (attached); `false` when none holds it.
    pub(crate) fn park(&mut self, id: ConnId, read: u64) -> Result<bool, BackendError> {
        match self {
            Backend::Daemon { attached, .. } => Ok(attached.park(id, read)?),
            _ => Ok(false),
        }
    }

    /// Connections parked here that another process took up since the
    /// last call.
    pub(crate) fn take_handed(&mut self) -> Vec<ConnId> {
        match self {
            Backend::Daemon { attached, .. } => attached.take_handed(),
            _ => Vec::new(),
        }
    }

    /// Takes up held connection `id`, parked by the process that used it,
    /// moving its memory into ours (attached).
    pub(crate) fn rehome(
        &mut self,
        id: ConnId,
        moves: &[(MrId, MrId)],
    ) -> Result<zerosplit::ipc::msg::Rehomed, BackendError> {
        match self {
            Backend::Daemon { attached, .. } => Ok(attached.rehome(id, moves)?),
            _ => Err(BackendError::Detached),
        }
    }

    /// A forked child lets go of inherited connection `id` (attached): it
    /// closes if no other process holds it.
    pub(crate) fn let_go(&mut self, id: ConnId) {
        if let Backend::Daemon { attached, .. } = self {
            attached.hold(id);
            let _ = attached.close(id);
        }
    }

    /// Attached, welcomed back as the attachment of the program this one
    /// exec'd from.
    pub(crate) fn resumed(&self) -> bool {
        matches!(self, Backend::Daemon { attached, .. } if attached.resumed())
    }

    /// Attached: every region registered, as the program an `execve`
    /// starts takes them in.
    pub(crate) fn carried_regions(&self) -> Vec<CarriedRegion> {
        match self {
            Backend::Daemon { attached, .. } => attached.regions(),
            _ => Vec::new(),
        }
    }

    /// Attached: connection `id`, if it is this program's, as the program
    /// an `execve` starts takes it in.
    pub(crate) fn carried_conn(&self, id: ConnId) -> Option<CarriedConn> {
        match self {
            Backend::Daemon { attached, .. } => attached.carried_conn(id),
            _ => None,
        }
    }

    /// In the program an `execve` started, attached to the attachment its
    /// old self held: takes in a region and a connection of that program.
    pub(crate) fn carry_in(
        &mut self,
        region: Option<CarriedRegion>,
        conn: Option<CarriedConn>,
    ) -> Result<(), BackendError> {
        let Backend::Daemon { attached, .. } = self else {
            return Err(BackendError::Detached);
        };
        if let Some(r) = region {
            attached.take_region(r)?;
        }
        if let Some(c) = conn {
            attached.take_conn(c)?;
        }
        Ok(())
    }

    /// A connection's addresses (a request to the daemon when attached).
    pub(crate) fn endpoints(&self, id: ConnId) -> Option<(SocketAddr, SocketAddr)> {
        match self {
            Backend::Own(s) => s.endpoints(id),
            Backend::Daemon { attached, .. } => attached.endpoints(id).ok(),
            Backend::Detached => None,
        }
    }

    /// `TCP_INFO`'s source: the own transport's view; attached, not yet
    /// (the daemon does not carry it: `TCP_INFO` then shows the state).
    pub(crate) fn conn_info(&self, id: ConnId) -> Option<ConnInfo> {
        match self {
            Backend::Own(s) => s.conn_info(id),
            Backend::Daemon { .. } | Backend::Detached => None,
        }
    }

    /// The urgent byte's offset (`MSG_OOB`); attached, the daemon does
    /// not carry urgent marks yet.
    pub(crate) fn urgent_mark(&self, id: ConnId) -> Option<u64> {
        match self {
            Backend::Own(s) => s.urgent_mark(id),
            Backend::Daemon { .. } | Backend::Detached => None,
        }
    }

    /// The congestion controller new connections get.
    pub(crate) fn algorithm(&self) -> Algorithm {
        match self {
            Backend::Own(s) => s.algorithm(),
            Backend::Daemon { algorithm, .. } => *algorithm,
            Backend::Detached => Algorithm::NewReno,
        }
    }

    /// Sets the congestion controller of new connections (own stack
    /// only; `false` attached).
    pub(crate) fn set_algorithm(&mut self, a: Algorithm) -> bool {
        match self {
            Backend::Own(s) => {
                s.set_algorithm(a);
                true
            }
            Backend::Daemon { .. } | Backend::Detached => false,
        }
    }
}
