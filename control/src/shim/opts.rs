//! Socket options of our sockets: what each means here, and `TCP_INFO`
//! filled from the transport's state.

use std::ffi::c_int;
use std::os::fd::RawFd;
use std::time::Duration;

use datapath::cabi::{real, CResult};
use transports::cc::Algorithm;
use transports::tcp::State as TcpState;

use super::runtime::{Kind, Runtime};
use crate::host::ConnInfo;
use crate::provider::Provider;

/// A socket's options as the application set them.
#[derive(Debug, Clone, Default)]
pub(super) struct Opts {
    /// `TCP_CONGESTION` set before `connect`.
    pub congestion: Option<Algorithm>,
    pub rcvtimeo: Option<Duration>,
    pub sndtimeo: Option<Duration>,
    /// `SO_LINGER`: on, seconds.
    pub linger: (bool, c_int),
    /// Options stored and reported back (`SO_KEEPALIVE`, `TCP_NODELAY`,
    /// the keepalive timings, `SO_REUSEADDR`, …), by (level, name).
    pub ints: Vec<((c_int, c_int), c_int)>,
}

/// Integer options accepted and reported back; what they change here is
/// said in the README (the transport sends at once, so `TCP_NODELAY` is
/// always in effect; keepalive probes are not sent).
const STORED: &[(c_int, c_int)] = &[
    (libc::SOL_SOCKET, libc::SO_REUSEADDR),
    (libc::SOL_SOCKET, libc::SO_REUSEPORT),
    (libc::SOL_SOCKET, libc::SO_KEEPALIVE),
    (libc::SOL_SOCKET, libc::SO_RCVLOWAT),
    (libc::SOL_SOCKET, libc::SO_PRIORITY),
    (libc::SOL_SOCKET, libc::SO_OOBINLINE),
    (libc::IPPROTO_TCP, libc::TCP_NODELAY),
    (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
    (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL),
    (libc::IPPROTO_TCP, libc::TCP_KEEPCNT),
    (libc::IPPROTO_TCP, libc::TCP_QUICKACK),
    (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
    (libc::IPPROTO_IP, libc::IP_TOS),
];

fn int_of(value: &[u8]) -> CResult<c_int> {
    let b: [u8; 4] = value
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(libc::EINVAL)?;
    Ok(c_int::from_ne_bytes(b))
}

fn put(out: &mut [u8], bytes: &[u8]) -> usize {
    let n = out.len().min(bytes.len());
    out[..n].copy_from_slice(&bytes[..n]);
    n
}

fn timeval_of(value: &[u8]) -> CResult<Option<Duration>> {
    let b: [u8; 16] = value
        .get(..16)
        .and_then(|b| b.try_into().ok())
        .ok_or(libc::EINVAL)?;
    let secs = i64::from_ne_bytes(b[..8].try_into().unwrap_or_default());
    let usecs = i64::from_ne_bytes(b[8..].try_into().unwrap_or_default());
    if secs < 0 || !(0..1_000_000).contains(&usecs) {
        return Err(libc::EDOM);
    }
    let d = Duration::from_secs(secs as u64) + Duration::from_micros(usecs as u64);
    Ok((!d.is_zero()).then_some(d))
}

fn timeval_bytes(d: Option<Duration>) -> [u8; 16] {
    let d = d.unwrap_or_default();
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(d.as_secs() as i64).to_ne_bytes());
    b[8..].copy_from_slice(&i64::from(d.subsec_micros()).to_ne_bytes());
    b
}

/// Linux's name for a controller (`reno` for NewReno).
fn linux_name(a: Algorithm) -> &'static str {
    match a.name() {
        "newreno" => "reno",
        other => other,
    }
}

impl Opts {
    pub(super) fn linger_zero(&self) -> bool {
        self.linger == (true, 0)
    }

    /// `SO_OOBINLINE`: the urgent byte stays in the stream.
    pub(super) fn oob_inline(&self) -> bool {
        self.int((libc::SOL_SOCKET, libc::SO_OOBINLINE)) != 0
    }

    fn int(&self, key: (c_int, c_int)) -> c_int {
        self.ints
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(0, |&(_, v)| v)
    }

    fn set_int(&mut self, key: (c_int, c_int), v: c_int) {
        match self.ints.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = v,
            None => self.ints.push((key, v)),
        }
    }

    /// Takes over what the application set on the kernel socket before it
    /// was claimed: the stored integers, the timeouts, and `TCP_CONGESTION`
    /// when it differs from the kernel's default.
    pub(super) fn inherit_kernel(&mut self, fd: RawFd) {
        let mut b = [0u8; 16];
        for &key in STORED {
            if let Ok(4) = real::getsockopt(fd, key.0, key.1, &mut b[..4]) {
                let v = c_int::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                if v != 0 {
                    self.set_int(key, v);
                }
            }
        }
        if let Ok(16) = real::getsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &mut b) {
            self.rcvtimeo = timeval_of(&b).ok().flatten();
        }
        if let Ok(16) = real::getsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDTIMEO, &mut b) {
            self.sndtimeo = timeval_of(&b).ok().flatten();
        }
        let mut name = [0u8; 16];
        if let Ok(n) = real::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, &mut name) {
            let set = String::from_utf8_lossy(&name[..n]);
            let set = set.trim_end_matches('\0');
            let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
                .unwrap_or_default();
            if set != default.trim() {
                self.congestion = set.parse().ok();
            }
        }
    }
}

impl Runtime {
    /// `setsockopt` on our socket.
    pub(super) fn setsockopt(
        &self,
        fd: RawFd,
        level: c_int,
        name: c_int,
        value: &[u8],
    ) -> CResult<()> {
        let mut st = self.lock();
        let id = *st.fds.get(&fd).ok_or(libc::EBADF)?;
        let st = &mut *st;
        let sock = st.socks.get_mut(&id).ok_or(libc::EBADF)?;
        let key = (level, name);
        match key {
            _ if STORED.contains(&key) => sock.opts.set_int(key, int_of(value)?),
            (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_SNDBUF) => {
                // The rings have a fixed size; accepted so programs that
                // tune buffers run (getsockopt reports the ring size).
                int_of(value)?;
            }
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => sock.opts.rcvtimeo = timeval_of(value)?,
            (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => sock.opts.sndtimeo = timeval_of(value)?,
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                let on = int_of(value)?;
                let secs = int_of(value.get(4..).unwrap_or_default())?;
                sock.opts.linger = (on != 0, secs);
            }
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
                let v = int_of(value)?;
                if !(88..=65535).contains(&v) {
                    return Err(libc::EINVAL);
                }
                // The MSS is the stack's (`transport.mss`); accepted.
            }
            (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
                let name = String::from_utf8_lossy(value);
                let name = name.trim_end_matches('\0');
                let a: Algorithm = name.parse().map_err(|_| libc::ENOENT)?;
                match &sock.kind {
                    Kind::Stream(s) if s.alive => {
                        let now = st.stack.conn_info(s.conn).map(|i| i.algorithm);
                        if now != Some(a) {
                            super::unsupported(format!(
                                "TCP_CONGESTION {name} on an open connection (set it before connect)"
                            ));
                            return Err(libc::EBUSY);
                        }
                    }
                    _ => sock.opts.congestion = Some(a),
                }
            }
            _ => {
                super::unsupported(format!("setsockopt level {level} option {name}"));
                return Err(libc::ENOPROTOOPT);
            }
        }
        Ok(())
    }

    /// `getsockopt` on our socket.
    pub(super) fn getsockopt(
        &self,
        fd: RawFd,
        level: c_int,
        name: c_int,
        out: &mut [u8],
    ) -> CResult<usize> {
        let mut st = self.lock();
        let ring = super::setup::RING_BUFS * super::setup::RING_BUF;
        let id = *st.fds.get(&fd).ok_or(libc::EBADF)?;
        let default_cc = st.stack.algorithm();
        let (stack, sock) = {
            let s = &mut *st;
            (&mut s.stack, s.socks.get_mut(&id).ok_or(libc::EBADF)?)
        };
        let key = (level, name);
        let listener = matches!(sock.kind, Kind::Listener(_));
        let int = |v: c_int| v.to_ne_bytes();
        Ok(match key {
            _ if STORED.contains(&key) => put(out, &int(sock.opts.int(key))),
            (libc::SOL_SOCKET, libc::SO_ERROR) => {
                let e = match &mut sock.kind {
                    Kind::Stream(s) => s.so_error.take().unwrap_or(0),
                    Kind::Listener(_) => 0,
                };
                put(out, &int(e))
            }
            (libc::SOL_SOCKET, libc::SO_TYPE) => put(out, &int(libc::SOCK_STREAM)),
            (libc::SOL_SOCKET, libc::SO_DOMAIN) => put(out, &int(libc::AF_INET)),
            (libc::SOL_SOCKET, libc::SO_PROTOCOL) => put(out, &int(libc::IPPROTO_TCP)),
            (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => put(out, &int(c_int::from(listener))),
            (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_SNDBUF) => {
                put(out, &int(ring.min(c_int::MAX as u64) as c_int))
            }
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => put(out, &timeval_bytes(sock.opts.rcvtimeo)),
            (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => put(out, &timeval_bytes(sock.opts.sndtimeo)),
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&int(c_int::from(sock.opts.linger.0)));
                b[4..].copy_from_slice(&int(sock.opts.linger.1));
                put(out, &b)
            }
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
                let mss = match &sock.kind {
                    Kind::Stream(s) => stack.conn_info(s.conn).map_or(536, |i| i32::from(i.mss)),
                    Kind::Listener(_) => 536,
                };
                put(out, &int(mss))
            }
            (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
                let a = match &sock.kind {
                    Kind::Stream(s) => stack.conn_info(s.conn).map(|i| i.algorithm),
                    Kind::Listener(_) => None,
                }
                .or(sock.opts.congestion)
                .unwrap_or(default_cc);
                let mut name = [0u8; 16];
                let n = linux_name(a).len().min(15);
                name[..n].copy_from_slice(&linux_name(a).as_bytes()[..n]);
                put(out, &name)
            }
            (libc::IPPROTO_TCP, libc::TCP_INFO) => {
                let info = match &mut sock.kind {
                    Kind::Stream(s) => {
                        let i = stack.conn_info(s.conn);
                        tcp_info(
                            i.as_ref(),
                            s.alive.then(|| stack.state(s.conn).ok()).flatten(),
                        )
                    }
                    Kind::Listener(_) => {
                        let mut b = tcp_info(None, None);
                        b[0] = 10; // TCP_LISTEN
                        b
                    }
                };
                put(out, &info)
            }
            _ => {
                super::unsupported(format!("getsockopt level {level} option {name}"));
                return Err(libc::ENOPROTOOPT);
            }
        })
    }
}

/// Linux's `TCP_*` state number.
fn linux_state(s: Option<TcpState>) -> u8 {
    match s {
        Some(TcpState::Established) => 1,
        Some(TcpState::SynSent) => 2,
        Some(TcpState::SynReceived) => 3,
        Some(TcpState::FinWait1) => 4,
        Some(TcpState::FinWait2) => 5,
        Some(TcpState::TimeWait) => 6,
        Some(TcpState::Closed) | None => 7,
        Some(TcpState::CloseWait) => 8,
        Some(TcpState::LastAck) => 9,
        Some(TcpState::Closing) => 11,
    }
}

/// `struct tcp_info` in the kernel's layout ([`crate::tcp_info`]), from the
/// transport's state; fields the transport does not keep are 0.
fn tcp_info(i: Option<&ConnInfo>, state: Option<TcpState>) -> Vec<u8> {
    use crate::tcp_info::{off, LEN};
    let mut b = vec![0u8; LEN];
    let u32_at = |b: &mut Vec<u8>, at: usize, v: u64| {
        b[at..at + 4].copy_from_slice(&(v.min(u64::from(u32::MAX)) as u32).to_ne_bytes());
    };
    let u64_at =
        |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    b[off::STATE] = linux_state(state.or(i.map(|i| i.state)));
    let Some(i) = i else {
        return b;
    };
    let mss = u64::from(i.mss.max(1));
    let us = |d: Duration| d.as_micros().min(u128::from(u32::MAX)) as u64;
    b[off::OPTIONS] = u8::from(i.negotiated.timestamps)
        | u8::from(i.negotiated.sack) << 1
        | u8::from(i.negotiated.snd_wscale > 0 || i.negotiated.rcv_wscale > 0) << 2
        | u8::from(i.negotiated.ecn) << 3;
    b[off::WSCALE] = (i.negotiated.snd_wscale & 0xf) | (i.negotiated.rcv_wscale & 0xf) << 4;
    u32_at(&mut b, off::RTO, us(i.rto));
    u32_at(&mut b, off::SND_MSS, mss);
    u32_at(&mut b, off::RCV_MSS, mss);
    u32_at(&mut b, off::UNACKED, i.bytes_in_flight.div_ceil(mss));
    u32_at(&mut b, off::PMTU, mss + 40);
    u32_at(&mut b, off::RTT, us(i.srtt.unwrap_or_default()));
    u32_at(&mut b, off::RTTVAR, us(i.rttvar));
    u32_at(
        &mut b,
        off::SND_SSTHRESH,
        i.ssthresh.map_or(u64::from(u32::MAX >> 1), |s| s / mss),
    );
    u32_at(&mut b, off::SND_CWND, i.cwnd / mss);
    u32_at(&mut b, off::ADVMSS, mss);
    u32_at(&mut b, off::TOTAL_RETRANS, i.retransmits);
    u64_at(&mut b, off::PACING_RATE, i.pacing_rate.unwrap_or(u64::MAX));
    u64_at(&mut b, off::MAX_PACING_RATE, u64::MAX);
    u64_at(&mut b, off::BYTES_ACKED, i.acked);
    u64_at(&mut b, off::BYTES_RECEIVED, i.received);
    u32_at(&mut b, off::SEGS_OUT, i.segments_sent);
    u32_at(&mut b, off::SEGS_IN, i.segments_received);
    u32_at(&mut b, off::MIN_RTT, us(i.min_rtt.unwrap_or_default()));
    u32_at(&mut b, off::SND_WND, i.send_window);
    b
}
