//! The daemon's Unix socket: `SOCK_SEQPACKET`, so each message arrives
//! whole and alone, with descriptors passed beside it (`SCM_RIGHTS`), and
//! the peer's identity from the kernel (`SO_PEERCRED`). Safe calls only
//! (rustix).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use super::msg::MAX_MESSAGE;

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// The kernel's word on who is at the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// What one receive found.
#[derive(Debug)]
pub enum Received {
    /// A message of `len` bytes, and the descriptors that came with it.
    Message {
        /// Bytes.
        len: usize,
        /// Descriptors (closed when dropped).
        fds: Vec<OwnedFd>,
        /// The message or its descriptors did not fit: a peer that does
        /// not speak this protocol.
        truncated: bool,
    },
    /// The other side closed (or died).
    HangUp,
    /// Nothing yet (non-blocking receive).
    Empty,
}

fn flags(nonblocking: bool) -> SocketFlags {
    if nonblocking {
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK
    } else {
        SocketFlags::CLOEXEC
    }
}

/// A listening socket at `path` (a stale socket file there is replaced),
/// with permission bits `mode` and, if given, group `gid`.
///
/// # Errors
/// The socket, bind, listen, chmod or chown failed.
pub fn listen(path: &Path, mode: u32, gid: Option<u32>) -> io::Result<OwnedFd> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        flags(true),
        None,
    )?;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    rustix::net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    rustix::fs::chmod(path, rustix::fs::Mode::from_raw_mode(mode))?;
    if let Some(gid) = gid {
        rustix::fs::chown(path, None, Some(rustix::fs::Gid::from_raw(gid)))?;
    }
    rustix::net::listen(&fd, 64)?;
    Ok(fd)
}

/// The next connection waiting on a listening socket, non-blocking.
///
/// # Errors
/// `accept` failed other than for want of a connection.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    match rustix::net::accept_with(listener, flags(true)) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A blocking connection to the daemon at `path`.
///
/// # Errors
/// No daemon listens there, or it refused.
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        flags(false),
        None,
    )?;
    rustix::net::connect(&fd, &SocketAddrUnix::new(path)?)?;
    Ok(fd)
}

/// Who is connected on `fd`.
///
/// # Errors
/// `getsockopt(SO_PEERCRED)` failed.
pub fn peer(fd: BorrowedFd<'_>) -> io::Result<Peer> {
    let c = rustix::net::sockopt::socket_peercred(fd)?;
    Ok(Peer {
        pid: c.pid.as_raw_nonzero().get() as u32,
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
    })
}

/// Sends one message with `fds` beside it; never raises `SIGPIPE` (a
/// dead peer is an `EPIPE` error).
///
/// # Errors
/// The peer is gone, or its queue is full (`WouldBlock` on a non-blocking
/// socket).
pub fn send(fd: BorrowedFd<'_>, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors for one message",
        ));
    }
    let sent = rustix::net::sendmsg(
        fd,
        &[io::IoSlice::new(msg)],
        &mut control,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    )?;
    if sent != msg.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "message sent in part",
        ));
    }
    Ok(())
}

/// Receives one message into `buf` (at least [`MAX_MESSAGE`] bytes);
/// blocks unless `nonblocking`. Descriptors come close-on-exec.
///
/// # Errors
/// `recvmsg` failed other than by hang-up or want of a message.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], nonblocking: bool) -> io::Result<Received> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut flags = RecvFlags::CMSG_CLOEXEC;
    if nonblocking {
        flags |= RecvFlags::DONTWAIT;
    }
    let got = loop {
        match rustix::net::recvmsg(fd, &mut [io::IoSliceMut::new(buf)], &mut control, flags) {
            Ok(got) => break got,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => return Ok(Received::Empty),
            Err(rustix::io::Errno::CONNRESET) => return Ok(Received::HangUp),
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if got.bytes == 0 && fds.is_empty() {
        return Ok(Received::HangUp);
    }
    let truncated = got
        .flags
        .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
        || got.bytes > buf.len().min(MAX_MESSAGE);
    Ok(Received::Message {
        len: got.bytes.min(buf.len()),
        fds,
        truncated,
    })
}

/// Whether `fd` has hung up or has something to read, without waiting.
pub fn readable(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    matches!(rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())), Ok(n) if n > 0)
}
