//! One ICMP echo from inside a namespace, so tests that check "the peer
//! answers" need no `ping` binary.
//!
//! A raw `IPPROTO_ICMP` socket (root, as the whole harness) opened on a
//! thread that entered the namespace: unlike an unprivileged ping socket it
//! does not depend on `net.ipv4.ping_group_range`, which is closed in a
//! fresh namespace. The reply is matched on its source, identifier and
//! sequence number, so other ICMP traffic in the namespace is skipped.

use std::{
    io::{self, Read},
    net::{Ipv4Addr, SocketAddrV4},
    sync::atomic::{AtomicU16, Ordering},
    time::{Duration, Instant},
};

use socket2::{Domain, Protocol, Socket, Type};
use thiserror::Error;

use crate::error::HarnessError;
use crate::netns::NetNs;

/// At most this many foreign packets are skipped while waiting for a reply.
const MAX_SKIPPED: usize = 100_000;

/// Sequence numbers, unique per process.
static NEXT_SEQ: AtomicU16 = AtomicU16::new(1);

/// Why [`ping`] got no answer.
#[derive(Debug, Error)]
pub enum PingError {
    /// The socket could not be opened or used.
    #[error(transparent)]
    Harness(#[from] HarnessError),
    /// No echo reply arrived in time.
    #[error("no ICMP echo reply from {to} within {timeout:?} (from netns {netns})")]
    NoReply {
        /// Where the request went.
        to: Ipv4Addr,
        /// How long we waited.
        timeout: Duration,
        /// The namespace it was sent from.
        netns: String,
    },
}

/// Sends one ICMP echo request from namespace `ns` to `to` and waits up to
/// `timeout` for the matching reply; returns the round-trip time.
///
/// # Errors
///
/// [`PingError::NoReply`], or [`PingError::Harness`] when the namespace or
/// the raw socket cannot be used (e.g. not root).
pub fn ping(ns: &NetNs, to: Ipv4Addr, timeout: Duration) -> Result<Duration, PingError> {
    ping_sized(ns, to, 56, timeout)
}

/// [`ping`] with `payload` bytes of ICMP data (`ping -s PAYLOAD`; 56 is
/// `ping`'s default). The kernel sets DF on a raw socket's datagram when
/// it fits the route's MTU (the default `IP_PMTUDISC_WANT`), so a payload
/// too big for the path gets no answer rather than fragments.
///
/// # Errors
///
/// As [`ping`]; a payload above 65 000 bytes is refused by the kernel.
pub fn ping_sized(
    ns: &NetNs,
    to: Ipv4Addr,
    payload: usize,
    timeout: Duration,
) -> Result<Duration, PingError> {
    let id = (std::process::id() as u16) ^ 0x5a5a;
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
    let data: Vec<u8> = (0..payload).map(|i| i as u8).collect();
    let rtt = ns.run(&format!("ICMP echo to {to}"), || {
        echo(to, id, seq, &data, timeout)
    })?;
    rtt.ok_or_else(|| PingError::NoReply {
        to,
        timeout,
        netns: ns.name().to_owned(),
    })
}

/// The request and the wait, on the namespace's thread; `None` on timeout.
fn echo(
    to: Ipv4Addr,
    id: u16,
    seq: u16,
    payload: &[u8],
    timeout: Duration,
) -> io::Result<Option<Duration>> {
    let socket = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))
        .map_err(|e| io::Error::new(e.kind(), format!("raw ICMP socket: {e}")))?;
    let request = echo_request(id, seq, payload);
    let started = Instant::now();
    socket.send_to(&request, &SocketAddrV4::new(to, 0).into())?;
    let deadline = started + timeout;
    let mut buf = vec![0u8; 65_536];
    for _ in 0..MAX_SKIPPED {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        socket.set_read_timeout(Some(left))?;
        let n = match (&socket).read(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if is_reply(&buf[..n], to, id, seq) {
            return Ok(Some(started.elapsed()));
        }
    }
    Ok(None)
}

/// An ICMP echo request (type 8) with its checksum.
fn echo_request(id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![8, 0, 0, 0];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(payload);
    let sum = checksum(&p);
    p[2..4].copy_from_slice(&sum.to_be_bytes());
    p
}

/// Whether `packet` (an IPv4 datagram as a raw socket returns it) is the
/// echo reply from `from` with `id` and `seq` and a valid checksum.
fn is_reply(packet: &[u8], from: Ipv4Addr, id: u16, seq: u16) -> bool {
    let Some(&first) = packet.first() else {
        return false;
    };
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 || packet.len() < ihl + 8 || packet[9] != 1 {
        return false;
    }
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let icmp = &packet[ihl..];
    src == from
        && icmp[0] == 0
        && icmp[1] == 0
        && icmp[4..6] == id.to_be_bytes()
        && icmp[6..8] == seq.to_be_bytes()
        && checksum(icmp) == 0
}

/// The Internet checksum (RFC 1071) of `data`.
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_to(request: &[u8], from: Ipv4Addr) -> Vec<u8> {
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
        ip.extend_from_slice(&from.octets());
        ip.extend_from_slice(&[198, 18, 0, 2]);
        let mut icmp = request.to_vec();
        icmp[0] = 0;
        icmp[2..4].copy_from_slice(&[0, 0]);
        let sum = checksum(&icmp);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        ip.extend_from_slice(&icmp);
        ip
    }

    #[test]
    fn request_checksums_to_zero_and_replies_are_matched() {
        let req = echo_request(0x1234, 7, b"abc");
        assert_eq!(checksum(&req), 0);
        let from = Ipv4Addr::new(198, 18, 0, 1);
        let reply = reply_to(&req, from);
        assert!(is_reply(&reply, from, 0x1234, 7));
        assert!(!is_reply(&reply, from, 0x1234, 8), "other sequence");
        assert!(!is_reply(&reply, from, 0x1235, 7), "other identifier");
        assert!(!is_reply(&reply, Ipv4Addr::new(198, 18, 0, 5), 0x1234, 7));
        assert!(!is_reply(&reply[..20], from, 0x1234, 7), "truncated");
        let mut bad = reply.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(!is_reply(&bad, from, 0x1234, 7), "bad checksum");
    }
}
