//! `setsockopt` and `getsockopt` on our sockets: what each option means
//! here, and `TCP_INFO` filled from the transport's state.

use std::ffi::c_int;
use std::os::fd::RawFd;
use std::time::Duration;

use transports::cc::Algorithm;
use transports::tcp::State as TcpState;
use zerosplit::host::ConnInfo;
use zerosplit::provider::Provider;

use crate::cabi::real;
use crate::layer::CResult;
use crate::log::unsupported;
use crate::opts::{int_of, put, timeval_bytes, timeval_of, STORED};
use crate::runtime::Runtime;
use crate::setup::{RING_BUF, RING_BUFS};
use crate::sockets::Kind;

/// Linux's name for a controller (`reno` for NewReno).
fn linux_name(a: Algorithm) -> &'static str {
    match a.name() {
        "newreno" => "reno",
        other => other,
    }
}

impl Runtime {
    /// `setsockopt` on our socket.
    pub(crate) fn setsockopt(
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
            // IPV6_V6ONLY, IPV6_TCLASS...: the placeholder, an IPv6
            // socket too, keeps (or refuses) them as Linux does.
            (libc::IPPROTO_IPV6, _) => real::setsockopt(fd, level, name, value)?,
            (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
                let name = String::from_utf8_lossy(value);
                let name = name.trim_end_matches('\0');
                let a: Algorithm = name.parse().map_err(|_| libc::ENOENT)?;
                match &sock.kind {
                    Kind::Stream(s) if s.alive => {
                        let now = st.stack.conn_info(s.conn).map(|i| i.algorithm);
                        if now != Some(a) {
                            unsupported(format!(
                                "TCP_CONGESTION {name} on an open connection (set it before connect)"
                            ));
                            return Err(libc::EBUSY);
                        }
                    }
                    _ => sock.opts.congestion = Some(a),
                }
            }
            _ => {
                unsupported(format!("setsockopt level {level} option {name}"));
                return Err(libc::ENOPROTOOPT);
            }
        }
        Ok(())
    }

    /// `getsockopt` on our socket.
    pub(crate) fn getsockopt(
        &self,
        fd: RawFd,
        level: c_int,
        name: c_int,
        out: &mut [u8],
    ) -> CResult<usize> {
        let mut st = self.lock();
        let ring = RING_BUFS * RING_BUF;
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
            (libc::SOL_SOCKET, libc::SO_DOMAIN) => put(out, &int(real::domain(fd)?)),
            (libc::IPPROTO_IPV6, _) => real::getsockopt(fd, level, name, out)?,
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
                unsupported(format!("getsockopt level {level} option {name}"));
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

/// `struct tcp_info` in the kernel's layout ([`zerosplit::tcp_info`]), from the
/// transport's state; fields the transport does not keep are 0.
fn tcp_info(i: Option<&ConnInfo>, state: Option<TcpState>) -> Vec<u8> {
    use zerosplit::tcp_info::{off, LEN};
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
