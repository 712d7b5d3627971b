use std::ffi::{c_int, c_uint, c_ulong};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::sync::Mutex;
use std::time::Duration;

use libc::{epoll_event, iovec, msghdr, pollfd, sigset_t, timespec};

use super::errno;
use super::fds::{close_range, dup3};
use super::io::{readv, recvmsg, sendmsg, writev};
use super::poll::pselect;
use super::real;
use crate::layer::{fd_set_words, CResult, Errno, SocketLayer};

/// A layer that owns the descriptors it is given and records what the
/// C side hands it.
#[derive(Default)]
struct Mock {
    owned: Vec<RawFd>,
    /// Each recv's buffers as (address, length).
    recv_bufs: Mutex<Vec<Vec<(usize, usize)>>>,
    /// The bytes each recv delivers.
    data: Vec<u8>,
    closed: Mutex<Vec<RawFd>>,
}

impl Mock {
    fn owning(fds: &[RawFd]) -> Self {
        Mock {
            owned: fds.to_vec(),
            ..Mock::default()
        }
    }
}

impl SocketLayer for Mock {
    fn sendfile(&self, _: RawFd, _: RawFd, _: Option<i64>, _: usize) -> CResult<usize> {
        Err(libc::ENOSYS)
    }
    fn before_fork(&self) {}
    fn after_fork(&self, _: libc::pid_t) {}
    fn owns(&self, fd: RawFd) -> bool {
        self.owned.contains(&fd)
    }
    fn watches(&self, _: RawFd) -> bool {
        false
    }
    fn on_socket(&self, _: RawFd, _: c_int, _: c_int, _: c_int) {}
    fn on_close(&self, fd: RawFd) {
        self.closed.lock().unwrap().push(fd);
    }
    fn on_dup(&self, _: RawFd, _: RawFd) {}
    fn marked(&self, first: RawFd, last: RawFd) -> Vec<RawFd> {
        let mut v: Vec<RawFd> = self
            .owned
            .iter()
            .copied()
            .filter(|fd| (first..=last).contains(fd))
            .collect();
        v.sort_unstable();
        v
    }
    fn bind(&self, _: RawFd, _: Option<SocketAddr>) -> Option<CResult<()>> {
        None
    }
    fn listen(&self, _: RawFd, _: c_int) -> Option<CResult<()>> {
        None
    }
    fn connect(&self, _: RawFd, _: Option<SocketAddr>) -> Option<CResult<()>> {
        None
    }
    fn accept(&self, _: RawFd, _: c_int) -> CResult<(RawFd, SocketAddr)> {
        Err(libc::EINVAL)
    }
    fn recv(&self, _: RawFd, bufs: &mut [&mut [u8]], _: c_int) -> CResult<usize> {
        self.recv_bufs.lock().unwrap().push(
            bufs.iter()
                .map(|b| (b.as_ptr() as usize, b.len()))
                .collect(),
        );
        // Scatter in order, as the shim's copy_out does.
        let mut done = 0;
        for b in bufs.iter_mut() {
            let n = b.len().min(self.data.len() - done);
            b[..n].copy_from_slice(&self.data[done..done + n]);
            done += n;
        }
        Ok(done)
    }
    fn send(&self, _: RawFd, bufs: &[&[u8]], _: c_int) -> CResult<usize> {
        Ok(bufs.iter().map(|b| b.len()).sum())
    }
    fn shutdown(&self, _: RawFd, _: c_int) -> CResult<()> {
        Ok(())
    }
    fn local_addr(&self, _: RawFd) -> CResult<SocketAddr> {
        Err(libc::EINVAL)
    }
    fn peer_addr(&self, _: RawFd) -> CResult<SocketAddr> {
        Err(libc::EINVAL)
    }
    fn fcntl(&self, _: RawFd, _: c_int, _: c_int) -> CResult<c_int> {
        Ok(0)
    }
    fn ioctl(&self, _: RawFd, _: c_ulong, _: &mut c_int) -> CResult<c_int> {
        Ok(0)
    }
    fn setsockopt(&self, _: RawFd, _: c_int, _: c_int, _: &[u8]) -> CResult<()> {
        Ok(())
    }
    fn getsockopt(&self, _: RawFd, _: c_int, _: c_int, _: &mut [u8]) -> CResult<usize> {
        Ok(0)
    }
    fn poll(
        &self,
        _: &mut [pollfd],
        _: Option<Duration>,
        _: Option<&sigset_t>,
    ) -> Option<CResult<usize>> {
        None
    }
    fn select(
        &self,
        nfds: c_int,
        sets: [Option<&mut [u64]>; 3],
        _: Option<Duration>,
        _: Option<&sigset_t>,
    ) -> Option<CResult<usize>> {
        // As the shim does: clear what it was given, then mark the
        // owned descriptors below nfds readable.
        let [r, _, _] = sets;
        let r = r?;
        r.fill(0);
        for &fd in self.owned.iter().filter(|&&fd| fd < nfds) {
            r[fd as usize / 64] |= 1 << (fd % 64);
        }
        Some(Ok(1))
    }
    fn epoll_ctl(
        &self,
        _: RawFd,
        _: c_int,
        _: RawFd,
        _: Option<epoll_event>,
    ) -> Option<CResult<()>> {
        None
    }
    fn epoll_wait(
        &self,
        _: RawFd,
        _: &mut [epoll_event],
        _: Option<Duration>,
        _: Option<&sigset_t>,
    ) -> Option<CResult<usize>> {
        None
    }
}

fn errno_now() -> Errno {
    errno()
}

#[test]
fn select_hands_the_layer_only_the_words_nfds_covers() {
    let l = Mock::owning(&[3]);
    // A caller's one-word set, followed by memory that is not its.
    let mut mem = [u64::MAX; 17];
    mem[0] = 1 << 3;
    let set = mem.as_mut_ptr().cast::<libc::fd_set>();
    // SAFETY: `set` has a word for the 4 descriptors nfds covers.
    let r = unsafe {
        pselect(
            &l,
            4,
            set,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 1);
    assert_eq!(mem[0], 1 << 3, "fd 3 readable");
    assert!(
        mem[1..].iter().all(|&w| w == u64::MAX),
        "words past nfds written: {mem:x?}"
    );
    // 65 descriptors: two words, the third untouched.
    let mut mem = [u64::MAX; 17];
    mem[0] = 1 << 3;
    mem[1] = 0;
    let set = mem.as_mut_ptr().cast::<libc::fd_set>();
    // SAFETY: two words for 65 descriptors.
    let r = unsafe {
        pselect(
            &l,
            65,
            set,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 1);
    assert_eq!(&mem[..2], &[1 << 3, 0]);
    assert!(mem[2..].iter().all(|&w| w == u64::MAX), "{mem:x?}");
}

#[test]
fn overlapping_iovecs_reach_the_layer_as_disjoint_buffers() {
    let l = Mock {
        data: b"abcdefgh".to_vec(),
        ..Mock::owning(&[3])
    };
    let mut buf = [b'.'; 16];
    let p = buf.as_mut_ptr();
    let v = [
        iovec {
            iov_base: p.cast(),
            iov_len: 5,
        },
        // SAFETY: inside `buf`.
        iovec {
            iov_base: unsafe { p.add(2) }.cast(),
            iov_len: 5,
        },
    ];
    // SAFETY: two iovecs over `buf`.
    let r = unsafe { readv(&l, 3, v.as_ptr(), 2) };
    assert_eq!(r, 8);
    // As Linux: in order, the later iovec over the earlier's overlap.
    assert_eq!(&buf[..10], b"abfgh.....");
    for bufs in l.recv_bufs.lock().unwrap().iter() {
        for (i, &(a, n)) in bufs.iter().enumerate() {
            for &(b, m) in &bufs[i + 1..] {
                assert!(a + n <= b || b + m <= a, "aliased buffers {bufs:x?}");
            }
        }
    }
}

#[test]
fn recvmsg_refuses_more_iovecs_than_iov_max_without_truncating() {
    let l = Mock {
        data: b"abcdefgh".to_vec(),
        ..Mock::owning(&[3])
    };
    let mut buf = [0u8; 8];
    let mut v = [iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: 8,
    }];
    // SAFETY: all-zero is a valid msghdr.
    let mut m: msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = v.as_mut_ptr();
    for len in [1025, (1 << 32) + 1] {
        m.msg_iovlen = len;
        // SAFETY: a valid msghdr (the kernel would read no iovec).
        let r = unsafe { recvmsg(&l, 3, &mut m, 0) };
        assert_eq!((r, errno_now()), (-1, libc::EMSGSIZE), "msg_iovlen {len}");
        // SAFETY: as above.
        let r = unsafe { sendmsg(&l, 3, &m, 0) };
        assert_eq!((r, errno_now()), (-1, libc::EMSGSIZE), "msg_iovlen {len}");
    }
    assert!(l.recv_bufs.lock().unwrap().is_empty());
}

#[test]
fn a_null_iov_base_with_a_length_is_efault() {
    let l = Mock {
        data: b"abcdefgh".to_vec(),
        ..Mock::owning(&[3])
    };
    let mut buf = [0u8; 8];
    let v = [
        iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: 3,
        },
        iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 5,
        },
    ];
    // SAFETY: the first iovec is `buf`; the second is the bad one.
    let r = unsafe { readv(&l, 3, v.as_ptr(), 2) };
    assert_eq!((r, errno_now()), (-1, libc::EFAULT));
    // SAFETY: as above.
    let r = unsafe { writev(&l, 3, v.as_ptr(), 2) };
    assert_eq!((r, errno_now()), (-1, libc::EFAULT));
    assert!(l.recv_bufs.lock().unwrap().is_empty());
}

#[test]
fn a_set_of_nfds_descriptors_is_the_words_they_fall_in() {
    let words: Vec<usize> = [0, 1, 63, 64, 65, 1024, 1025].map(fd_set_words).to_vec();
    assert_eq!(words, [0, 1, 1, 1, 2, 16, 17]);
}

#[test]
fn select_with_a_negative_nfds_is_einval_and_leaves_the_set() {
    let l = Mock::owning(&[3]);
    let mut set = [1u64 << 3];
    let t = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a one-word set; a valid timespec.
    let r = unsafe {
        pselect(
            &l,
            -1,
            set.as_mut_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &t,
            std::ptr::null(),
        )
    };
    assert_eq!((r, errno_now(), set[0]), (-1, libc::EINVAL, 1 << 3));
}

#[test]
fn close_range_forgets_what_it_closes_and_nothing_when_refused() {
    let mut p = [0; 2];
    // SAFETY: `p` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    // SAFETY: no pointers.
    let a = unsafe { libc::fcntl(p[0], libc::F_DUPFD, 700) };
    let l = Mock::owning(&[a]);
    let at = a as c_uint;
    // SAFETY: no pointers (a range the kernel refuses, then one that
    // closes nothing).
    unsafe {
        assert_eq!(
            (close_range(&l, at + 1, at, 0), errno_now()),
            (-1, libc::EINVAL)
        );
        assert_eq!(
            close_range(&l, at, at, libc::CLOSE_RANGE_CLOEXEC as c_int),
            0
        );
    }
    assert!(l.closed.lock().unwrap().is_empty());
    // SAFETY: no pointers; `a` is this test's.
    assert_eq!(unsafe { close_range(&l, at, at, 0) }, 0);
    assert_eq!(*l.closed.lock().unwrap(), vec![a]);
    // SAFETY: no pointers: `a` is closed now.
    assert_eq!(
        (unsafe { libc::fcntl(a, libc::F_GETFD) }, errno_now()),
        (-1, libc::EBADF)
    );
    real::close(p[0]);
    real::close(p[1]);
}

#[test]
fn dup2_of_a_bad_descriptor_leaves_the_target_alone() {
    let mut p = [0; 2];
    // SAFETY: `p` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    let l = Mock::owning(&[p[0]]);
    // SAFETY: no pointers.
    let bad = unsafe { libc::fcntl(p[1], libc::F_DUPFD, 900) };
    real::close(bad);
    for dup2 in [true, false] {
        // SAFETY: no pointers.
        let r = unsafe { dup3(&l, bad, p[0], 0, dup2) };
        assert_eq!((r, errno_now()), (-1, libc::EBADF));
    }
    assert!(
        l.closed.lock().unwrap().is_empty(),
        "the target was forgotten"
    );
    real::close(p[0]);
    real::close(p[1]);
}

/// Both families read and write back as the C library lays them out;
/// a short buffer gets the first bytes and the full length, as from
/// Linux; a family we do not take, or a length short of its size, is
/// none.
#[test]
fn socket_addresses_of_both_families_cross_the_c_boundary() {
    use super::ptr::{read_addr, write_addr};
    let cases: [SocketAddr; 3] = [
        SocketAddr::V4(SocketAddrV4::new([198, 18, 0, 1].into(), 5201)),
        "[::ffff:198.18.0.2]:80".parse().unwrap(),
        "[2001:2::1%7]:443".parse().unwrap(),
    ];
    for a in cases {
        let mut buf = [0u8; 64];
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: `buf` has `len` writable bytes.
        unsafe { write_addr(buf.as_mut_ptr().cast(), &mut len, a) };
        let full = if a.is_ipv4() { 16 } else { 28 };
        assert_eq!(len, full, "{a}");
        // SAFETY: `buf` has `len` readable bytes.
        assert_eq!(unsafe { read_addr(buf.as_ptr().cast(), len) }, Some(a));
        // SAFETY: as above, shorter.
        let short_by_one = unsafe { read_addr(buf.as_ptr().cast(), len - 1) };
        match a {
            // RFC 2133's 24 bytes and up: without the scope id.
            SocketAddr::V6(v6) => {
                let no_scope = SocketAddrV6::new(*v6.ip(), v6.port(), v6.flowinfo(), 0);
                assert_eq!(short_by_one, Some(no_scope.into()), "{a}");
                // SAFETY: as above.
                assert_eq!(
                    unsafe { read_addr(buf.as_ptr().cast(), 24) },
                    Some(no_scope.into())
                );
                // SAFETY: as above.
                assert_eq!(unsafe { read_addr(buf.as_ptr().cast(), 23) }, None, "{a}");
            }
            SocketAddr::V4(_) => assert_eq!(short_by_one, None, "{a}"),
        }
        let mut short = [0u8; 8];
        let mut len = short.len() as libc::socklen_t;
        // SAFETY: `short` has `len` writable bytes.
        unsafe { write_addr(short.as_mut_ptr().cast(), &mut len, a) };
        assert_eq!((len, &short[..]), (full, &buf[..8]), "{a}");
    }
    let unix = [
        libc::AF_UNIX as u8,
        0,
        b'/',
        b'x',
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    // SAFETY: `unix` has 16 readable bytes.
    assert_eq!(unsafe { read_addr(unix.as_ptr().cast(), 16) }, None);
}
