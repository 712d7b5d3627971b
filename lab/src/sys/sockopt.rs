//! `getsockopt(2)` and `setsockopt(2)` on a kernel socket, with the
//! option's value as bytes: for options of Linux's own TCP sockets
//! (`TCP_INFO`, `TCP_CONGESTION`) that no safe wrapper covers.

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `getsockopt(fd, level, name)` into `out`; the length the kernel wrote.
///
/// # Errors
/// The errno (e.g. `ENOPROTOOPT` for an option the socket lacks).
pub fn getsockopt(
    fd: BorrowedFd<'_>,
    level: c_int,
    name: c_int,
    out: &mut [u8],
) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(out.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `fd` is a live descriptor (borrowed); `out` has `len`
    // writable bytes and `len` is writable, both for the call.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            out.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((len as usize).min(out.len()))
}

/// `setsockopt(fd, level, name, value)`.
///
/// # Errors
/// The errno (e.g. `ENOENT` for a congestion controller the kernel lacks).
pub fn setsockopt(fd: BorrowedFd<'_>, level: c_int, name: c_int, value: &[u8]) -> io::Result<()> {
    let len = libc::socklen_t::try_from(value.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `fd` is a live descriptor (borrowed); `value` has `len`
    // readable bytes for the call.
    let r = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, value.as_ptr().cast(), len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_option_set_reads_back_and_a_missing_one_is_the_errno() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
        let fd = l.as_fd();
        setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_KEEPALIVE,
            &1i32.to_ne_bytes(),
        )
        .expect("set");
        let mut b = [0u8; 4];
        assert_eq!(
            getsockopt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, &mut b).expect("get"),
            4
        );
        assert_eq!(i32::from_ne_bytes(b), 1);
        let e = setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, b"no-such-cc")
            .expect_err("unknown controller");
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
}
