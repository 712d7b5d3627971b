//! Readiness of our sockets and the waits over sets that mix them with
//! kernel descriptors: `poll`/`ppoll`, `select`/`pselect`, and epoll
//! (level- and edge-triggered, `EPOLLONESHOT`, `EPOLLRDHUP`).
//!
//! Our sockets' readiness is computed under the lock; the kernel
//! descriptors of the same set are asked with a zero timeout, and when
//! nothing is ready the thread sleeps in one `ppoll` on the kernel
//! descriptors (for epoll: the epoll fd itself, which is readable when its
//! kernel entries are) and its own wakeup, which the polling thread
//! signals after it did work.

use std::ffi::c_int;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use libc::{epoll_event, pollfd, sigset_t};
use transports::segment::CloseReason;

use crate::cabi::real;
use crate::interest::{Epoll, Interest, Stamp};
use crate::layer::CResult;
use crate::marks::FdMarks;
use crate::runtime::Runtime;
use crate::sockets::{Kind, SockId, State};

const IN: u32 = libc::EPOLLIN as u32;
const OUT: u32 = libc::EPOLLOUT as u32;
const ERR: u32 = libc::EPOLLERR as u32;
const HUP: u32 = libc::EPOLLHUP as u32;
const RDHUP: u32 = libc::EPOLLRDHUP as u32;
const PRI: u32 = libc::EPOLLPRI as u32;
const ET: u32 = libc::EPOLLET as u32;
const ONESHOT: u32 = libc::EPOLLONESHOT as u32;

impl State {
    /// The socket's readiness as epoll bits (the poll bits have the same
    /// values), and its stamp.
    fn readiness(&mut self, id: SockId) -> (u32, Stamp) {
        let max_sends = self.setup.max_sends;
        self.ensure_rings(id);
        let Some(sock) = self.socks.get_mut(&id) else {
            return (ERR | HUP, (0, 0, 0, 0));
        };
        match &mut sock.kind {
            Kind::Listener(l) => {
                let n = l.backlog.len() + self.stack.pending(l.socket) as usize;
                (if n > 0 { IN } else { 0 }, (0, 0, 0, n))
            }
            Kind::Stream(s) => {
                let stack = &self.stack;
                let mut m = 0;
                let connecting = !s.connected && s.closed.is_none();
                if !connecting {
                    if s.readable(stack) > 0 || s.at_eof(stack) || s.shut_rd {
                        m |= IN;
                    }
                    if s.writable(stack, max_sends) > 0 || s.closed.is_some() {
                        m |= OUT;
                    }
                    if s.peer_fin.is_some() {
                        m |= RDHUP;
                    }
                    if s.closed.is_some() || (s.shut_wr && s.peer_fin.is_some()) {
                        m |= HUP;
                    }
                    if s.so_error.is_some()
                        || matches!(
                            s.closed,
                            Some(CloseReason::Reset | CloseReason::Refused | CloseReason::TimedOut)
                        ) && !s.reset_reported
                    {
                        m |= ERR;
                    }
                }
                let stamp = (m, s.received, s.acked, 0);
                (m, stamp)
            }
        }
    }

    /// Our entries of `epfd` that are ready, into `out`; the count.
    fn epoll_ready(&mut self, epfd: RawFd, out: &mut [epoll_event]) -> usize {
        let Some(ep) = self.epolls.get(&epfd) else {
            return 0;
        };
        let entries: Vec<(RawFd, Interest)> = ep
            .entries
            .iter()
            .filter(|(_, i)| !i.disabled)
            .map(|(&fd, i)| (fd, i.clone()))
            .collect();
        let mut n = 0;
        let mut updates = Vec::new();
        for (fd, mut interest) in entries {
            if n == out.len() {
                break;
            }
            let Some(&id) = self.fds.get(&fd) else {
                continue;
            };
            let (mask, stamp) = self.readiness(id);
            let mask = mask & (interest.events | ERR | HUP);
            if mask == 0 {
                if interest.last.is_some() {
                    interest.last = None;
                    updates.push((fd, interest));
                }
                continue;
            }
            if interest.events & ET != 0 {
                if interest.last == Some(stamp) {
                    continue;
                }
                interest.last = Some(stamp);
            }
            if interest.events & ONESHOT != 0 {
                interest.disabled = true;
            }
            out[n] = epoll_event {
                events: mask,
                u64: interest.data,
            };
            n += 1;
            updates.push((fd, interest));
        }
        if let Some(ep) = self.epolls.get_mut(&epfd) {
            for (fd, i) in updates {
                if let Some(e) = ep.entries.get_mut(&fd) {
                    *e = i;
                }
            }
        }
        n
    }

    /// Fills `revents` of our entries of `fds`; how many are ready.
    fn poll_ours(&mut self, fds: &mut [pollfd], owned: &FdMarks) -> usize {
        let mut n = 0;
        for p in fds.iter_mut().filter(|p| owned.get(p.fd)) {
            let always = (ERR | HUP) as i16;
            p.revents = match self.fds.get(&p.fd).copied() {
                Some(id) => (self.readiness(id).0 as i16) & (p.events | always),
                None => libc::POLLNVAL,
            };
            if p.revents != 0 {
                n += 1;
            }
        }
        n
    }
}

impl Runtime {
    /// `ppoll` over a set holding at least one of our sockets.
    pub(crate) fn poll(
        &self,
        fds: &mut [pollfd],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
        owned: &FdMarks,
    ) -> CResult<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let kernel_at: Vec<usize> = (0..fds.len()).filter(|&i| !owned.get(fds[i].fd)).collect();
        let mut kernel: Vec<pollfd> = kernel_at.iter().map(|&i| fds[i]).collect();
        let mut st = self.lock();
        let mut attempt = 0;
        loop {
            let ours = st.poll_ours(fds, owned);
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            if ours > 0 || expired {
                drop(st);
                let mut k = 0;
                if !kernel.is_empty() {
                    k = real::ppoll(&mut kernel, Some(Duration::ZERO), None)?;
                    for (&i, p) in kernel_at.iter().zip(&kernel) {
                        fds[i].revents = p.revents;
                    }
                }
                return Ok(ours + k);
            }
            attempt += 1;
            let (g, k) = self.wait(st, deadline, &mut kernel, sigmask, attempt <= 2)?;
            st = g;
            if k > 0 {
                for (&i, p) in kernel_at.iter().zip(&kernel) {
                    fds[i].revents = p.revents;
                }
                let ours = st.poll_ours(fds, owned);
                return Ok(ours + k);
            }
        }
    }

    /// `pselect` over sets holding at least one of our sockets, as a poll.
    /// Each set is the caller's [`crate::layer::fd_set_words`]`(nfds)`
    /// words, no more: only those are read and written.
    pub(crate) fn select(
        &self,
        nfds: c_int,
        mut sets: [Option<&mut [u64]>; 3],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
        owned: &FdMarks,
    ) -> CResult<usize> {
        let bit = |s: &Option<&mut [u64]>, fd: usize| {
            s.as_ref()
                .and_then(|s| s.get(fd / 64))
                .is_some_and(|w| w >> (fd % 64) & 1 == 1)
        };
        let mut fds = Vec::new();
        for fd in 0..nfds.max(0) as usize {
            let mut events = 0;
            if bit(&sets[0], fd) {
                events |= libc::POLLIN;
            }
            if bit(&sets[1], fd) {
                events |= libc::POLLOUT;
            }
            if bit(&sets[2], fd) {
                events |= libc::POLLPRI;
            }
            if events != 0 {
                fds.push(pollfd {
                    fd: fd as RawFd,
                    events,
                    revents: 0,
                });
            }
        }
        self.poll(&mut fds, timeout, sigmask, owned)?;
        if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
            return Err(libc::EBADF);
        }
        for s in sets.iter_mut().flatten() {
            s.fill(0);
        }
        let mut n = 0;
        for p in &fds {
            let fd = p.fd as usize;
            let r = p.revents;
            let marks = [
                p.events & libc::POLLIN != 0
                    && r & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0,
                p.events & libc::POLLOUT != 0 && r & (libc::POLLOUT | libc::POLLERR) != 0,
                p.events & libc::POLLPRI != 0 && r & libc::POLLPRI != 0,
            ];
            for (set, on) in sets.iter_mut().zip(marks) {
                if let (Some(w), true) = (set.as_mut().and_then(|s| s.get_mut(fd / 64)), on) {
                    *w |= 1 << (fd % 64);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// `epoll_ctl` for one of our sockets.
    pub(crate) fn epoll_ctl(
        &self,
        epfd: RawFd,
        op: c_int,
        fd: RawFd,
        event: Option<epoll_event>,
    ) -> CResult<()> {
        if epfd == fd {
            return Err(libc::EINVAL);
        }
        let mut st = self.lock();
        if !st.fds.contains_key(&fd) {
            return Err(libc::EBADF);
        }
        let ep: &mut Epoll = st.epolls.entry(epfd).or_default();
        let interest = |e: Option<epoll_event>| {
            e.map(|e| Interest {
                events: e.events,
                data: e.u64,
                last: None,
                disabled: false,
            })
            .ok_or(libc::EFAULT)
        };
        match op {
            libc::EPOLL_CTL_ADD => {
                if ep.entries.contains_key(&fd) {
                    return Err(libc::EEXIST);
                }
                ep.entries.insert(fd, interest(event)?);
            }
            libc::EPOLL_CTL_MOD => {
                let e = ep.entries.get_mut(&fd).ok_or(libc::ENOENT)?;
                *e = interest(event)?;
            }
            libc::EPOLL_CTL_DEL => {
                ep.entries.remove(&fd).ok_or(libc::ENOENT)?;
            }
            _ => return Err(libc::EINVAL),
        }
        let _ = PRI;
        Ok(())
    }

    /// `epoll_pwait` on an epoll instance that holds our sockets (`None`
    /// if it holds none: the kernel's call then).
    pub(crate) fn epoll_wait(
        &self,
        epfd: RawFd,
        out: &mut [epoll_event],
        timeout: Option<Duration>,
        sigmask: Option<&sigset_t>,
    ) -> Option<CResult<usize>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.lock();
        if st.epolls.get(&epfd).is_none_or(|e| e.entries.is_empty()) {
            return None;
        }
        let mut attempt = 0;
        Some(loop {
            let n = st.epoll_ready(epfd, out);
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            if n > 0 || expired {
                drop(st);
                let k =
                    real::epoll_wait(epfd, &mut out[n..], Some(Duration::ZERO), None).unwrap_or(0);
                break Ok(n + k);
            }
            attempt += 1;
            let mut kernel = [pollfd {
                fd: epfd,
                events: libc::POLLIN,
                revents: 0,
            }];
            let (g, k) = match self.wait(st, deadline, &mut kernel, sigmask, attempt <= 2) {
                Ok(x) => x,
                Err(e) => break Err(e),
            };
            st = g;
            if k > 0 {
                let n = st.epoll_ready(epfd, out);
                drop(st);
                let k =
                    real::epoll_wait(epfd, &mut out[n..], Some(Duration::ZERO), None).unwrap_or(0);
                if n + k > 0 {
                    break Ok(n + k);
                }
                st = self.lock();
            }
        })
    }
}
