//! Raw Ethernet frames through `AF_PACKET` sockets (packet(7)), batched
//! with `recvmmsg(2)`/`sendmmsg(2)`.
//!
//! This is what a forwarding hop in user space needs: receive every frame
//! that arrives on one interface, whatever its destination MAC, and send
//! whole frames (Ethernet header included) out of another. socket2 can open
//! an `AF_PACKET` socket but cannot build a `sockaddr_ll` to bind it to one
//! interface without `unsafe`, nor batch, so the few calls live here.
//!
//! A receiving socket ([`PacketSocket::open_rx`]) binds to `ETH_P_ALL` on
//! one interface and sets `PACKET_IGNORE_OUTGOING` (Linux ≥ 4.20) so frames
//! leaving the interface — sent by us or by the local stack — are not
//! delivered to it; frames marked `PACKET_OUTGOING` are also reported so a
//! caller can skip them on kernels that lack the option. A sending socket
//! ([`PacketSocket::open_tx`]) binds with protocol 0 (it receives nothing)
//! and asks for `PACKET_QDISC_BYPASS` (Linux ≥ 3.14) where available.

use std::{
    io,
    mem::{size_of, zeroed},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use super::{check, SyscallError};

/// Most frames one [`PacketSocket::recv_batch`] or
/// [`PacketSocket::send_batch`] call moves.
pub const MAX_BATCH: usize = 64;

/// `PACKET_OUTGOING` from `<linux/if_packet.h>`: a frame this host sent.
const PACKET_OUTGOING: u8 = 4;
/// `PACKET_QDISC_BYPASS` from `<linux/if_packet.h>`.
const PACKET_QDISC_BYPASS: libc::c_int = 20;
/// `PACKET_IGNORE_OUTGOING` from `<linux/if_packet.h>`.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `SO_SNDBUFFORCE` from `<asm-generic/socket.h>` (needs `CAP_NET_ADMIN`).
const SO_SNDBUFFORCE: libc::c_int = 32;
/// `SO_RCVBUFFORCE` from `<asm-generic/socket.h>` (needs `CAP_NET_ADMIN`).
const SO_RCVBUFFORCE: libc::c_int = 33;

/// Opening or using a packet socket failed; names the interface.
#[derive(Debug, thiserror::Error)]
pub enum PacketError {
    /// The interface name could not be resolved in the calling thread's
    /// network namespace.
    #[error("interface {ifname:?}: {source}")]
    Interface {
        /// The name given.
        ifname: String,
        /// The lookup error.
        #[source]
        source: io::Error,
    },
    /// A syscall on the socket failed.
    #[error("packet socket on {ifname:?}: {source}")]
    Syscall {
        /// The interface the socket belongs to.
        ifname: String,
        /// The call and errno.
        #[source]
        source: SyscallError,
    },
}

impl PacketError {
    /// Whether the interface went down under the socket (`ENETDOWN`): the
    /// kernel reports that once to every packet socket bound to it, and
    /// the socket works again once the link is back up.
    pub fn is_link_down(&self) -> bool {
        matches!(self, PacketError::Syscall { source, .. } if source.errno() == Some(libc::ENETDOWN))
    }
}

/// What [`PacketSocket::recv_batch`] learned about one received frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes written into the buffer.
    pub len: usize,
    /// The frame was longer than the buffer (`MSG_TRUNC`): only `len`
    /// bytes of it were kept.
    pub truncated: bool,
    /// The frame was leaving the interface (`PACKET_OUTGOING`), not
    /// arriving.
    pub outgoing: bool,
}

/// An `AF_PACKET`, `SOCK_RAW` socket bound to one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifname: String,
    ifindex: u32,
}

impl PacketSocket {
    /// Opens a socket that receives every frame arriving on `ifname` (in
    /// the calling thread's namespace), with receive and send buffers of
    /// `buffer_bytes` (forced past `rmem_max` when the caller has
    /// `CAP_NET_ADMIN`).
    ///
    /// # Errors
    ///
    /// [`PacketError::Interface`] if `ifname` does not exist;
    /// [`PacketError::Syscall`] if `socket`/`bind`/`setsockopt` fail (e.g.
    /// `EPERM` without `CAP_NET_RAW`).
    pub fn open_rx(ifname: &str, buffer_bytes: usize) -> Result<Self, PacketError> {
        Self::open_rx_with(ifname, buffer_bytes, false)
    }

    /// [`PacketSocket::open_rx`] that also receives the frames this host
    /// sends out of `ifname` (marked `outgoing` in [`RecvMeta`]): a path
    /// watcher that needs both directions.
    ///
    /// # Errors
    ///
    /// As [`PacketSocket::open_rx`].
    pub fn open_rx_both(ifname: &str, buffer_bytes: usize) -> Result<Self, PacketError> {
        Self::open_rx_with(ifname, buffer_bytes, true)
    }

    fn open_rx_with(
        ifname: &str,
        buffer_bytes: usize,
        outgoing: bool,
    ) -> Result<Self, PacketError> {
        // Protocol 0 first: the socket receives nothing until it is bound to
        // the one interface, so no frame of another interface slips in.
        let sock = Self::open(ifname)?;
        sock.set_buffers(buffer_bytes)?;
        if !outgoing {
            // Best effort: kernels before 4.20 lack the option; `outgoing`
            // in `RecvMeta` lets the caller filter instead.
            let _ = sock.setsockopt(
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                1,
                "PACKET_IGNORE_OUTGOING",
            );
        }
        sock.bind((libc::ETH_P_ALL as u16).to_be())?;
        Ok(sock)
    }

    /// Opens a socket that sends whole Ethernet frames out of `ifname` and
    /// receives nothing.
    ///
    /// # Errors
    ///
    /// As [`PacketSocket::open_rx`].
    pub fn open_tx(ifname: &str, buffer_bytes: usize) -> Result<Self, PacketError> {
        let sock = Self::open(ifname)?;
        sock.set_buffers(buffer_bytes)?;
        // Best effort: without it frames pass the (usually empty) qdisc.
        let _ = sock.setsockopt(
            libc::SOL_PACKET,
            PACKET_QDISC_BYPASS,
            1,
            "PACKET_QDISC_BYPASS",
        );
        sock.bind(0)?;
        Ok(sock)
    }

    /// The interface the socket is bound to.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    fn open(ifname: &str) -> Result<Self, PacketError> {
        let ifindex =
            datapath::iface::ifindex(ifname).map_err(|source| PacketError::Interface {
                ifname: ifname.to_owned(),
                source,
            })?;
        // SAFETY: plain socket(2) call with constant arguments; no memory is
        // passed.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        let raw =
            check(raw, "socket(AF_PACKET, SOCK_RAW)").map_err(|source| PacketError::Syscall {
                ifname: ifname.to_owned(),
                source,
            })?;
        // SAFETY: `raw` is a freshly created descriptor that nothing else
        // owns; OwnedFd closes it exactly once.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            fd,
            ifname: ifname.to_owned(),
            ifindex,
        })
    }

    fn err(&self, source: SyscallError) -> PacketError {
        PacketError::Syscall {
            ifname: self.ifname.clone(),
            source,
        }
    }

    fn setsockopt(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        value: libc::c_int,
        call: &'static str,
    ) -> Result<(), PacketError> {
        // SAFETY: `value` is a live c_int and the length passed is its size;
        // the kernel only reads it.
        let ret = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        check(ret, call).map(drop).map_err(|e| self.err(e))
    }

    fn set_buffers(&self, bytes: usize) -> Result<(), PacketError> {
        let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        for (force, plain, call) in [
            (SO_RCVBUFFORCE, libc::SO_RCVBUF, "setsockopt(SO_RCVBUF)"),
            (SO_SNDBUFFORCE, libc::SO_SNDBUF, "setsockopt(SO_SNDBUF)"),
        ] {
            if self
                .setsockopt(libc::SOL_SOCKET, force, bytes, call)
                .is_err()
            {
                self.setsockopt(libc::SOL_SOCKET, plain, bytes, call)?;
            }
        }
        Ok(())
    }

    /// Binds to this socket's interface with `protocol` (network order).
    fn bind(&self, protocol_be: u16) -> Result<(), PacketError> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as libc::c_ushort;
        addr.sll_protocol = protocol_be;
        addr.sll_ifindex = self.ifindex as libc::c_int;
        // SAFETY: `addr` is a valid sockaddr_ll that lives across the call,
        // and the length passed is its size.
        let ret = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        check(ret, "bind(sockaddr_ll)")
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// Waits up to `timeout` for a frame to be readable; `Ok(false)` on
    /// timeout or when a signal interrupted the wait.
    ///
    /// # Errors
    ///
    /// [`PacketError::Syscall`] if `ppoll` fails otherwise.
    pub fn wait_readable(&self, timeout: Duration) -> Result<bool, PacketError> {
        Self::wait_any(&[self], timeout)
    }

    /// Waits up to `timeout` until any of `sockets` has a frame to read;
    /// `Ok(false)` on timeout or when a signal interrupted the wait.
    ///
    /// # Errors
    ///
    /// [`PacketError::Syscall`] (naming the first socket's interface) if
    /// `ppoll` fails otherwise.
    pub fn wait_any(sockets: &[&PacketSocket], timeout: Duration) -> Result<bool, PacketError> {
        let Some(first) = sockets.first() else {
            std::thread::sleep(timeout);
            return Ok(false);
        };
        let mut pfds: Vec<libc::pollfd> = sockets
            .iter()
            .map(|s| libc::pollfd {
                fd: s.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `pfds` holds `pfds.len()` initialised pollfds and `ts` is
        // live for the call; a null sigmask keeps the thread's mask.
        let ret = unsafe {
            libc::ppoll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        match check(ret, "ppoll") {
            Ok(n) => Ok(n > 0),
            Err(e) if e.errno() == Some(libc::EINTR) => Ok(false),
            Err(e) => Err(first.err(e)),
        }
    }

    /// Receives up to `min(bufs.len(), metas.len(), MAX_BATCH)` frames
    /// without blocking, one per buffer; returns how many arrived (0 when
    /// none was waiting) and fills `metas[..n]`.
    ///
    /// # Errors
    ///
    /// [`PacketError::Syscall`] if `recvmmsg` fails with anything but
    /// `EAGAIN`/`EINTR`.
    pub fn recv_batch(
        &self,
        bufs: &mut [Vec<u8>],
        metas: &mut [RecvMeta],
    ) -> Result<usize, PacketError> {
        let n = bufs.len().min(metas.len()).min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: iovec, sockaddr_ll and mmsghdr are plain old data; all-zero
        // is valid for each (null pointers, zero lengths).
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut addrs: [libc::sockaddr_ll; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        for i in 0..n {
            iov[i].iov_base = bufs[i].as_mut_ptr().cast();
            iov[i].iov_len = bufs[i].len();
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_ll).cast();
            msgs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        }
        // SAFETY: `msgs[..n]` point at `iov[i]` (each covering exactly the
        // initialised bytes of `bufs[i]`, exclusively borrowed) and at
        // `addrs[i]` with its true size; all outlive the call. The kernel
        // writes at most `iov_len` bytes per buffer.
        let ret = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let got = match check(ret, "recvmmsg") {
            Ok(got) => got as usize,
            Err(e) if matches!(e.errno(), Some(libc::EAGAIN) | Some(libc::EINTR)) => 0,
            Err(e) => return Err(self.err(e)),
        };
        for i in 0..got {
            metas[i] = RecvMeta {
                len: (msgs[i].msg_len as usize).min(bufs[i].len()),
                truncated: msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                outgoing: addrs[i].sll_pkttype == PACKET_OUTGOING,
            };
        }
        Ok(got)
    }

    /// Sends up to `MAX_BATCH` whole Ethernet frames out of the interface;
    /// returns how many the kernel took (it may take fewer than given).
    ///
    /// # Errors
    ///
    /// [`PacketError::Syscall`] if `sendmmsg` fails on the first frame
    /// (e.g. `EMSGSIZE` for a frame longer than the MTU, `ENETDOWN`).
    pub fn send_batch(&self, frames: &[&[u8]]) -> Result<usize, PacketError> {
        let n = frames.len().min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: iovec and mmsghdr are plain old data; all-zero is valid.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        for i in 0..n {
            // The kernel only reads through this pointer (send path).
            iov[i].iov_base = frames[i].as_ptr().cast_mut().cast();
            iov[i].iov_len = frames[i].len();
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..n]` point at `iov[i]`, each covering the bytes of
        // `frames[i]`, all alive across the call; with no msg_name the
        // socket's bound interface is used. sendmmsg only reads the frames.
        let ret =
            unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), n as libc::c_uint, 0) };
        match check(ret, "sendmmsg") {
            Ok(sent) => Ok(sent as usize),
            Err(e) if e.errno() == Some(libc::EINTR) => Ok(0),
            Err(e) => Err(self.err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interface_is_named_in_the_error() {
        let err = PacketSocket::open_rx("zs-no-such-if", 1 << 16).expect_err("no such interface");
        assert!(matches!(err, PacketError::Interface { .. }), "{err}");
        assert!(err.to_string().contains("zs-no-such-if"), "{err}");
    }
}
