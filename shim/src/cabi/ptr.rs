//! A C caller's pointers as the safe types the layer takes (addresses,
//! buffers, iovec lists, timeouts), each trusted exactly as far as the C
//! function's contract says and no further.

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

use libc::{iovec, sockaddr, socklen_t, timespec};

use crate::layer::{CResult, Errno, SocketLayer};

/// The most bytes one read or write moves (Linux's `MAX_RW_COUNT`); longer
/// requests are cut to it, as the kernel cuts them.
pub(crate) const MAX_RW: usize = 0x7fff_f000;

/// Overlapping iovecs are filled through a buffer of our own, at most this
/// long (a short read, as a stream socket may return).
pub(crate) const BOUNCE_MAX: usize = 1 << 20;

/// Bytes of RFC 2133's `sockaddr_in6`, before `sin6_scope_id` was added.
const SOCKADDR_IN6_RFC2133: usize = 24;

/// An IPv4 or IPv6 socket address from a C `sockaddr`, if it is one
/// (`len` long enough for its family's).
///
/// # Safety
/// `addr` is null or points to `len` readable bytes.
pub(crate) unsafe fn read_addr(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if addr.is_null() || (len as usize) < size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: the caller's contract: at least the family's bytes are
    // readable; read unaligned, as a caller's buffer may be.
    let family = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>()) };
    match c_int::from(family) {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the caller's contract: `len` (at least a
            // sockaddr_in's size) readable bytes.
            let sin = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in>()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        // RFC 2133's 24-byte `sockaddr_in6` (no scope id), which Linux
        // takes too, or today's 28 bytes.
        libc::AF_INET6 if len as usize >= SOCKADDR_IN6_RFC2133 => {
            // As Linux: the scope id only from a whole `sockaddr_in6`.
            let n = if len as usize >= size_of::<libc::sockaddr_in6>() {
                size_of::<libc::sockaddr_in6>()
            } else {
                SOCKADDR_IN6_RFC2133
            };
            let mut sin6 = std::mem::MaybeUninit::<libc::sockaddr_in6>::zeroed();
            // SAFETY: the caller's contract: `len` (at least `n`) readable
            // bytes; `n` fits the zeroed `sockaddr_in6`, which is then
            // whole (a missing scope id reads 0).
            let sin6 = unsafe {
                std::ptr::copy_nonoverlapping(addr.cast::<u8>(), sin6.as_mut_ptr().cast::<u8>(), n);
                sin6.assume_init()
            };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// `a` as the C `sockaddr_in6` an IPv6 socket names it with.
pub(crate) fn sockaddr_in6(a: &SocketAddrV6) -> libc::sockaddr_in6 {
    libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: a.port().to_be(),
        sin6_flowinfo: a.flowinfo(),
        sin6_addr: libc::in6_addr {
            s6_addr: a.ip().octets(),
        },
        sin6_scope_id: a.scope_id(),
    }
}

/// `a` as a C `sockaddr_in`.
pub(crate) fn sockaddr_in(a: &SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Writes `a` as a `sockaddr_in` or `sockaddr_in6` into a C caller's
/// `addr`/`len` pair (truncated to `*len`, which then says the full
/// length), as `accept` and `getsockname` do.
///
/// # Safety
/// `addr` and `len` are null, or `len` points to a writable `socklen_t`
/// and `addr` to `*len` writable bytes.
pub(crate) unsafe fn write_addr(addr: *mut sockaddr, len: *mut socklen_t, a: SocketAddr) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let (sin, sin6);
    let (p, full): (*const u8, usize) = match &a {
        SocketAddr::V4(a) => {
            sin = sockaddr_in(a);
            ((&raw const sin).cast(), size_of::<libc::sockaddr_in>())
        }
        SocketAddr::V6(a) => {
            sin6 = sockaddr_in6(a);
            ((&raw const sin6).cast(), size_of::<libc::sockaddr_in6>())
        }
    };
    // SAFETY: the caller's contract: `len` is writable and `addr` has
    // `*len` writable bytes; we copy at most that many from `p`, a live
    // address of `full` bytes.
    unsafe {
        let n = (*len as usize).min(full);
        std::ptr::copy_nonoverlapping(p, addr.cast::<u8>(), n);
        *len = full as socklen_t;
    }
}

/// A caller's iovec array as (address, length) parts, checked as Linux
/// checks it: more than `UIO_MAXIOV` is `too_many` (readv's `EINVAL`,
/// recvmsg's `EMSGSIZE`), a null array `EFAULT`, a length beyond
/// `isize::MAX` `EINVAL`, a null base with a length `EFAULT`; the total is
/// cut to [`MAX_RW`]. Empty iovecs are left out.
///
/// # Safety
/// `iov` is null or points to `cnt` iovecs.
pub(crate) unsafe fn iov_parts(
    iov: *const iovec,
    cnt: usize,
    too_many: Errno,
) -> CResult<Vec<(*mut u8, usize)>> {
    if cnt > libc::UIO_MAXIOV as usize {
        return Err(too_many);
    }
    if cnt == 0 {
        return Ok(Vec::new());
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract: `cnt` iovecs at `iov`, not null.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt) };
    if v.iter().any(|v| v.iov_len > isize::MAX as usize) {
        return Err(libc::EINVAL);
    }
    if v.iter().any(|v| v.iov_base.is_null() && v.iov_len > 0) {
        return Err(libc::EFAULT);
    }
    let mut total = 0usize;
    Ok(v.iter()
        .map(|v| {
            let n = v.iov_len.min(MAX_RW - total);
            total += n;
            (v.iov_base.cast::<u8>(), n)
        })
        .filter(|&(_, n)| n > 0)
        .collect())
}

/// Whether no two parts share a byte.
pub(crate) fn disjoint(parts: &[(*mut u8, usize)]) -> bool {
    if parts.len() < 2 {
        return true;
    }
    let mut r: Vec<(usize, usize)> = parts.iter().map(|&(p, n)| (p as usize, n)).collect();
    r.sort_unstable();
    r.windows(2)
        .all(|w| w[0].0.saturating_add(w[0].1) <= w[1].0)
}

/// `recv` into a scatter list. Disjoint parts become the layer's slices;
/// overlapping ones (which as `&mut` slices would alias) are filled from
/// one buffer of ours, in order, a later part overwriting an earlier
/// one's overlap as Linux's copy does.
///
/// # Safety
/// Each part names writable bytes (readv's contract); from
/// [`iov_parts`] (not null, lengths within `isize::MAX`).
pub(crate) unsafe fn recv_parts<L: SocketLayer>(
    l: &L,
    fd: c_int,
    parts: &[(*mut u8, usize)],
    flags: c_int,
) -> CResult<usize> {
    if disjoint(parts) {
        let mut bufs: Vec<&mut [u8]> = parts
            .iter()
            // SAFETY: writable (the contract), not null, and no two
            // overlap (checked above), so the slices do not alias.
            .map(|&(p, n)| unsafe { std::slice::from_raw_parts_mut(p, n) })
            .collect();
        return l.recv(fd, &mut bufs, flags);
    }
    let total: usize = parts.iter().map(|&(_, n)| n).sum();
    let mut bounce = vec![0u8; total.min(BOUNCE_MAX)];
    let got = l.recv(fd, &mut [&mut bounce[..]], flags)?;
    let mut at = 0;
    for &(p, n) in parts {
        let k = n.min(got - at);
        if k == 0 {
            break;
        }
        // SAFETY: `p` has `n` >= `k` writable bytes (the contract);
        // `bounce[at..at + k]` is ours, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(bounce.as_ptr().add(at), p, k) };
        at += k;
    }
    Ok(got)
}

/// Gather slices of the parts (shared slices may overlap).
///
/// # Safety
/// Each part names readable bytes (writev's contract); from
/// [`iov_parts`].
pub(crate) unsafe fn send_parts<'a>(parts: &[(*mut u8, usize)]) -> Vec<&'a [u8]> {
    parts
        .iter()
        // SAFETY: readable (the contract), not null, within isize::MAX.
        .map(|&(p, n)| unsafe { std::slice::from_raw_parts(p.cast_const(), n) })
        .collect()
}

/// # Safety
/// `buf` points to `n` writable bytes (or `n` is 0).
pub(crate) unsafe fn buf_mut<'a>(buf: *mut c_void, n: usize) -> CResult<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract; not null, cut to MAX_RW.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n.min(MAX_RW)) })
}

/// # Safety
/// `buf` points to `n` readable bytes (or `n` is 0).
pub(crate) unsafe fn buf<'a>(buf: *const c_void, n: usize) -> CResult<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract; not null, cut to MAX_RW.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n.min(MAX_RW)) })
}

pub(crate) fn duration_ts(ts: &timespec) -> CResult<Duration> {
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return Err(libc::EINVAL);
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

pub(crate) fn duration_ms(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}
