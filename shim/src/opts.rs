//! Socket options of our sockets as the application set them ([`Opts`]),
//! and the byte encodings of option values.

use std::ffi::c_int;
use std::os::fd::RawFd;
use std::time::Duration;

use transports::cc::Algorithm;

use crate::cabi::real;
use crate::layer::CResult;

/// A socket's options as the application set them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Opts {
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
/// always in effect and `TCP_CORK` holds nothing back; keepalive probes
/// are not sent).
pub(crate) const STORED: &[(c_int, c_int)] = &[
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
    (libc::IPPROTO_TCP, libc::TCP_CORK),
    (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
    (libc::IPPROTO_IP, libc::IP_TOS),
];

pub(crate) fn int_of(value: &[u8]) -> CResult<c_int> {
    let b: [u8; 4] = value
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(libc::EINVAL)?;
    Ok(c_int::from_ne_bytes(b))
}

pub(crate) fn put(out: &mut [u8], bytes: &[u8]) -> usize {
    let n = out.len().min(bytes.len());
    out[..n].copy_from_slice(&bytes[..n]);
    n
}

pub(crate) fn timeval_of(value: &[u8]) -> CResult<Option<Duration>> {
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

pub(crate) fn timeval_bytes(d: Option<Duration>) -> [u8; 16] {
    let d = d.unwrap_or_default();
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(d.as_secs() as i64).to_ne_bytes());
    b[8..].copy_from_slice(&i64::from(d.subsec_micros()).to_ne_bytes());
    b
}

impl Opts {
    /// The options as an exec manifest carries them (`rcvtimeo` and
    /// `sndtimeo` in µs, linger on and seconds, congestion or `-`, the
    /// stored integers as `level:name:value/…` or `-`); `None` when every
    /// one is its default. A controller no name selects
    /// ([`Algorithm::Custom`]) is not carried.
    pub(crate) fn encode(&self) -> Option<String> {
        if *self == Opts::default() {
            return None;
        }
        let us = |d: Option<Duration>| d.map_or(0, |d| d.as_micros());
        let congestion = self
            .congestion
            .filter(|a| a.name().parse::<Algorithm>().is_ok())
            .map_or("-", Algorithm::name);
        let ints = if self.ints.is_empty() {
            "-".into()
        } else {
            let each: Vec<String> = self
                .ints
                .iter()
                .map(|((level, name), v)| format!("{level}:{name}:{v}"))
                .collect();
            each.join("/")
        };
        Some(format!(
            "{},{},{},{},{congestion},{ints}",
            us(self.rcvtimeo),
            us(self.sndtimeo),
            u8::from(self.linger.0),
            self.linger.1
        ))
    }

    /// Options as [`Opts::encode`] wrote them, split at the commas; only
    /// the integer options the shim stores are taken.
    pub(crate) fn decode(f: &[&str]) -> Option<Opts> {
        let [rcv, snd, on, secs, congestion, ints] = f else {
            return None;
        };
        let timeout = |s: &str| -> Option<Option<Duration>> {
            let us: u64 = s.parse().ok()?;
            Some((us > 0).then(|| Duration::from_micros(us)))
        };
        let mut opts = Opts {
            congestion: match *congestion {
                "-" => None,
                name => Some(name.parse().ok()?),
            },
            rcvtimeo: timeout(rcv)?,
            sndtimeo: timeout(snd)?,
            linger: (
                match *on {
                    "0" => false,
                    "1" => true,
                    _ => return None,
                },
                secs.parse().ok()?,
            ),
            ints: Vec::new(),
        };
        if *ints != "-" {
            for one in ints.split('/') {
                let mut parts = one.split(':').map(|n| n.parse::<c_int>().ok());
                let (Some(Some(level)), Some(Some(name)), Some(Some(v)), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return None;
                };
                if !STORED.contains(&(level, name)) {
                    return None;
                }
                opts.set_int((level, name), v);
            }
        }
        Some(opts)
    }

    pub(crate) fn linger_zero(&self) -> bool {
        self.linger == (true, 0)
    }

    /// `SO_OOBINLINE`: the urgent byte stays in the stream.
    pub(crate) fn oob_inline(&self) -> bool {
        self.int((libc::SOL_SOCKET, libc::SO_OOBINLINE)) != 0
    }

    pub(crate) fn int(&self, key: (c_int, c_int)) -> c_int {
        self.ints
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(0, |&(_, v)| v)
    }

    pub(crate) fn set_int(&mut self, key: (c_int, c_int), v: c_int) {
        match self.ints.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = v,
            None => self.ints.push((key, v)),
        }
    }

    /// Takes over what the application set on the kernel socket before it
    /// was claimed: the stored integers, the timeouts, and `TCP_CONGESTION`
    /// when it differs from the kernel's default.
    pub(crate) fn inherit_kernel(&mut self, fd: RawFd) {
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
