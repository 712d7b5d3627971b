//! Blocking until a descriptor is readable: [`wait_readable`] (`ppoll(2)`)
//! and [`EventFd`] (`eventfd(2)`), which one thread signals to wake another
//! that sleeps in [`wait_readable`] on the datapath's sockets.
//!
//! An AF_XDP socket is readable when its RX ring holds descriptors; the
//! kernel wakes a sleeper in `poll` when it fills the ring (Linux ≥ 4.18).
//! With need_wakeup (Linux ≥ 5.4) a `poll` also serves as the RX/TX wakeup
//! the ring flags ask for. Policy (when to sleep, for how long) is the
//! caller's; this module only makes the calls.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::syscall::{check, check_size, SyscallError};

/// Most descriptors one wait watches (the queue's socket, its per-flow
/// sockets and a wakeup event); more are not watched (the timeout still
/// bounds the wait).
pub const MAX_WAIT_FDS: usize = 4096;

/// Sleeps until one of `fds` is readable or `timeout` passes. Returns how
/// many descriptors are ready (0: timeout, or a signal interrupted the
/// wait). At most [`MAX_WAIT_FDS`] descriptors are watched.
///
/// # Errors
/// `ppoll` failed other than by interruption (e.g. `ENOMEM`).
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> Result<usize, SyscallError> {
    let mut pollfds: Vec<libc::pollfd> = fds
        .iter()
        .take(MAX_WAIT_FDS)
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pollfds` is a live array of `len` initialised pollfd
    // entries the kernel may write `revents` into; `ts` outlives the call;
    // a null signal mask leaves the mask unchanged (as `poll`). The
    // descriptors are borrowed, so they stay open for the call.
    let ret = unsafe {
        libc::ppoll(
            pollfds.as_mut_ptr(),
            pollfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    match check(ret, "ppoll") {
        Ok(n) => Ok(n as usize),
        Err(e) if e.errno() == Some(libc::EINTR) => Ok(0),
        Err(e) => Err(e),
    }
}

/// A non-blocking `eventfd`: [`EventFd::signal`] makes it readable until
/// [`EventFd::drain`]. Cheap to signal (one `write`), so a producer signals
/// only a consumer that said it sleeps.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new event, not signalled.
    ///
    /// # Errors
    /// `eventfd` failed (descriptor limit).
    pub fn new() -> Result<EventFd, SyscallError> {
        // SAFETY: eventfd takes no pointers; on success it returns a new
        // descriptor that nothing else owns, which `OwnedFd` takes over.
        let fd = check(
            unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) },
            "eventfd",
        )?;
        // SAFETY: `fd` is a fresh, valid descriptor owned by no one else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the event readable (wakes a thread waiting on it).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, which lives for the call.
        let ret = unsafe {
            libc::write(
                self.0.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        // EAGAIN only when the counter is near overflow: the event is
        // readable then anyway.
        let _ = check_size(ret, "write(eventfd)");
    }

    /// Clears the event; whether it had been signalled.
    pub fn drain(&self) -> bool {
        let mut value: u64 = 0;
        // SAFETY: reads at most 8 bytes into `value`, which lives for the
        // call.
        let ret = unsafe {
            libc::read(
                self.0.as_raw_fd(),
                (&mut value as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        check_size(ret, "read(eventfd)").is_ok_and(|n| n > 0)
    }
}

impl EventFd {
    /// An eventfd received from another process. Refused unless it is an
    /// eventfd (so a `signal` cannot write into a file or block on a full
    /// pipe); made non-blocking if the sender left it blocking (the flag
    /// is shared with the sender's descriptor).
    ///
    /// # Errors
    /// Not an eventfd (`EINVAL`), or `fcntl` failed.
    pub fn from_received(fd: OwnedFd) -> Result<EventFd, SyscallError> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        if !link.is_ok_and(|l| l.as_os_str() == "anon_inode:[eventfd]") {
            return Err(SyscallError {
                call: "readlink(/proc/self/fd): not an eventfd",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        let flags = rustix::fs::fcntl_getfl(&fd).map_err(|e| SyscallError {
            call: "fcntl(F_GETFL)",
            source: e.into(),
        })?;
        if !flags.contains(rustix::fs::OFlags::NONBLOCK) {
            rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK).map_err(|e| {
                SyscallError {
                    call: "fcntl(F_SETFL, O_NONBLOCK)",
                    source: e.into(),
                }
            })?;
        }
        Ok(EventFd(fd))
    }
}

/// Takes over a descriptor this process knows to be a non-blocking eventfd
/// (one it made; use [`EventFd::from_received`] for one from a peer).
impl From<OwnedFd> for EventFd {
    fn from(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }
}

/// The descriptor, to pass to another process (`SCM_RIGHTS`).
impl From<EventFd> for OwnedFd {
    fn from(ev: EventFd) -> OwnedFd {
        ev.0
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signalled_event_wakes_a_wait_and_a_drained_one_times_out() {
        let ev = EventFd::new().expect("eventfd");
        let t = std::time::Instant::now();
        assert_eq!(
            wait_readable(&[ev.as_fd()], Duration::from_millis(2)).expect("ppoll"),
            0
        );
        assert!(t.elapsed() >= Duration::from_millis(2));
        ev.signal();
        assert_eq!(
            wait_readable(&[ev.as_fd()], Duration::from_secs(5)).expect("ppoll"),
            1
        );
        assert!(ev.drain());
        assert!(!ev.drain());
        assert_eq!(
            wait_readable(&[ev.as_fd()], Duration::ZERO).expect("ppoll"),
            0
        );
    }

    #[test]
    fn an_eventfd_survives_the_round_trip_and_other_fds_are_refused() {
        let ev = EventFd::new().expect("eventfd");
        let dup = ev.as_fd().try_clone_to_owned().expect("dup");
        let received = EventFd::from_received(dup).expect("an eventfd");
        received.signal();
        assert!(ev.drain(), "both ends are one event");
        let back: OwnedFd = received.into();
        assert!(EventFd::from(back).as_fd().as_raw_fd() >= 0);
        let null: OwnedFd = std::fs::File::open("/dev/null").expect("null").into();
        let e = EventFd::from_received(null).unwrap_err();
        assert!(e.to_string().contains("not an eventfd"), "{e}");
    }

    #[test]
    fn a_signal_from_another_thread_ends_a_long_wait_early() {
        let ev = std::sync::Arc::new(EventFd::new().expect("eventfd"));
        let other = std::sync::Arc::clone(&ev);
        let t = std::time::Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            other.signal();
        });
        let n = wait_readable(&[ev.as_fd()], Duration::from_secs(5)).expect("ppoll");
        h.join().expect("signaller");
        assert_eq!(n, 1);
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
