//! Many concurrent bulk connections over kernel sockets
//! (`bench-peer --stack kernel --flows N`, N > 1): non-blocking sockets
//! and one epoll set on one thread, the reference the zerosplit rows of
//! the flows section are compared with. Each ready socket gets one
//! `read`/`write` of up to `BUF` bytes per wakeup (level-triggered), so
//! the connections share the thread fairly.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::event::epoll::{self, CreateFlags, Event, EventData, EventFlags};
use rustix::event::Timespec;

use super::common::{deadline, ready, CpuWindow, PeerArgs, BUF, IDLE};
use super::flows::fill_fairness;
use super::kernel::kernel_connect;
use crate::suite::peer::PeerReport;

const WAIT: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};
/// epoll_wait's key for the listener; connection `i` is `i`.
const LISTENER: u64 = u64::MAX;

fn epoll_set() -> Result<std::os::fd::OwnedFd> {
    epoll::create(CreateFlags::CLOEXEC).context("epoll_create1")
}

fn wait(ep: &std::os::fd::OwnedFd, events: &mut Vec<Event>, cap: usize) -> Result<()> {
    events.clear();
    events.reserve(cap);
    epoll::wait(ep, rustix::buffer::spare_capacity(events), Some(&WAIT)).context("epoll_wait")?;
    Ok(())
}

/// Accepts N connections and reads each until its FIN.
pub(super) fn kernel_recv_flows(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let n = args.flows;
    let listener =
        TcpListener::bind(args.addr).with_context(|| format!("binding {}", args.addr))?;
    listener.set_nonblocking(true)?;
    let ep = epoll_set()?;
    epoll::add(&ep, &listener, EventData::new_u64(LISTENER), EventFlags::IN)
        .context("epoll_ctl(listener)")?;
    ready();
    let mut socks: Vec<TcpStream> = Vec::with_capacity(n);
    let mut bytes = vec![0u64; n];
    let mut buf = vec![0u8; BUF];
    let mut events = Vec::new();
    let (mut t0, mut cpu0) = (Instant::now(), CpuWindow::start()?);
    let (mut progress, mut last, mut done) = (t0, t0, 0);
    while done < n {
        wait(&ep, &mut events, n + 1)?;
        for ev in &events {
            let key = ev.data.u64();
            if key == LISTENER {
                while socks.len() < n {
                    match listener.accept() {
                        Ok((s, _)) => {
                            s.set_nonblocking(true)?;
                            let i = socks.len() as u64;
                            epoll::add(&ep, &s, EventData::new_u64(i), EventFlags::IN)
                                .context("epoll_ctl(connection)")?;
                            socks.push(s);
                            progress = Instant::now();
                            if socks.len() == n {
                                (t0, cpu0) = (progress, CpuWindow::start()?);
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e).context("accept"),
                    }
                }
                continue;
            }
            let i = key as usize;
            let Some(s) = socks.get_mut(i) else { continue };
            match s.read(&mut buf) {
                Ok(0) => {
                    epoll::delete(&ep, &*s).context("epoll_ctl(delete)")?;
                    done += 1;
                    last = Instant::now();
                }
                Ok(k) => {
                    bytes[i] += k as u64;
                    progress = Instant::now();
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(e) => return Err(e).with_context(|| format!("read (connection {i})")),
            }
        }
        if progress.elapsed() > IDLE {
            bail!(
                "no progress for {IDLE:?}: {} of {n} accepted, {done} finished",
                socks.len()
            );
        }
    }
    cpu0.end(report)?;
    report.seconds = last.duration_since(t0).as_secs_f64();
    fill_fairness(report, bytes.iter().copied());
    Ok(())
}

/// Opens N connections and writes to whichever can take bytes, until the
/// byte share or the time is used up; then shuts each down and waits for
/// the receiver to close it (it has read everything then).
pub(super) fn kernel_send_flows(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let n = args.flows;
    let ep = epoll_set()?;
    let mut socks = Vec::with_capacity(n);
    for i in 0..n {
        let s = kernel_connect(args.addr)?;
        s.set_nonblocking(true)?;
        epoll::add(&ep, &s, EventData::new_u64(i as u64), EventFlags::OUT)
            .context("epoll_ctl(connection)")?;
        socks.push(s);
    }
    let share = (args.bytes / n as u64).max(1);
    let buf = vec![0xa5u8; BUF];
    let mut bytes = vec![0u64; n];
    let mut shut = vec![false; n];
    let mut events = Vec::new();
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let end = deadline(args);
    let (mut progress, mut closed) = (t0, 0);
    while closed < n {
        let sending = Instant::now() < end;
        wait(&ep, &mut events, n)?;
        for ev in &events {
            let i = ev.data.u64() as usize;
            let Some(s) = socks.get_mut(i) else { continue };
            if shut[i] {
                // Waiting for the receiver's close.
                match s.read(&mut [0u8; 1]) {
                    Ok(_) | Err(_) => {
                        epoll::delete(&ep, &*s).context("epoll_ctl(delete)")?;
                        closed += 1;
                        progress = Instant::now();
                    }
                }
                continue;
            }
            if sending && bytes[i] < share {
                let k = ((share - bytes[i]) as usize).min(BUF);
                match s.write(&buf[..k]) {
                    Ok(w) => {
                        bytes[i] += w as u64;
                        progress = Instant::now();
                    }
                    Err(e)
                        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                    Err(e) => return Err(e).with_context(|| format!("write (connection {i})")),
                }
            } else {
                s.shutdown(Shutdown::Write)?;
                shut[i] = true;
                epoll::modify(&ep, &*s, EventData::new_u64(i as u64), EventFlags::IN)
                    .context("epoll_ctl(modify)")?;
            }
        }
        if progress.elapsed() > IDLE {
            bail!("no progress for {IDLE:?}; {closed} of {n} connections closed");
        }
        if !sending && Instant::now() > end + Duration::from_secs(30) + IDLE {
            bail!("connections still open long after the deadline");
        }
    }
    cpu0.end(report)?;
    report.seconds = t0.elapsed().as_secs_f64();
    fill_fairness(report, bytes.iter().copied());
    Ok(())
}
