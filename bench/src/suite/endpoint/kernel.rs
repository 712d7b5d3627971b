//! The Linux-kernel side of a bench endpoint: bulk send and receive and
//! ping-pong over kernel TCP sockets, for the `kernel` rows the zerosplit
//! stacks are compared with.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::common::{deadline, pingpong_rounds, ready, CpuWindow, PeerArgs, BUF, IDLE};
use crate::suite::peer::PeerReport;

pub(super) fn kernel_accept(args: &PeerArgs) -> Result<TcpStream> {
    let listener =
        TcpListener::bind(args.addr).with_context(|| format!("binding {}", args.addr))?;
    listener.set_nonblocking(true)?;
    ready();
    let started = Instant::now();
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(IDLE))?;
                return Ok(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && started.elapsed() < IDLE => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(e).context("accept"),
        }
    }
}

pub(super) fn kernel_connect(addr: SocketAddr) -> Result<TcpStream> {
    let started = Instant::now();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => {
                s.set_read_timeout(Some(IDLE))?;
                return Ok(s);
            }
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).with_context(|| format!("connecting to {addr}")),
        }
    }
}

pub(super) fn kernel_recv(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let mut s = kernel_accept(args)?;
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let mut buf = vec![0u8; BUF];
    let mut last = t0;
    loop {
        let n = s.read(&mut buf).context("read")?;
        if n == 0 {
            break;
        }
        report.bytes += n as u64;
        last = Instant::now();
    }
    cpu0.end(report)?;
    report.seconds = last.duration_since(t0).as_secs_f64();
    Ok(())
}

pub(super) fn kernel_send(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let mut s = kernel_connect(args.addr)?;
    let buf = vec![0xa5u8; BUF];
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let end = deadline(args);
    while report.bytes < args.bytes && Instant::now() < end {
        let n = ((args.bytes - report.bytes) as usize).min(BUF);
        s.write_all(&buf[..n]).context("write")?;
        report.bytes += n as u64;
    }
    s.shutdown(Shutdown::Write)?;
    // The receiver closes after reading everything.
    let _ = s.read(&mut [0u8; 1]);
    cpu0.end(report)?;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(())
}

/// Reads exactly `buf.len()` bytes from a non-blocking socket, spinning.
fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool> {
    let mut at = 0;
    let started = Instant::now();
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => return Ok(false),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if started.elapsed() > IDLE {
                    bail!("no reply for {IDLE:?}");
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("read"),
        }
    }
    Ok(true)
}

fn spin_write(s: &mut TcpStream, buf: &[u8]) -> Result<()> {
    let mut at = 0;
    let started = Instant::now();
    while at < buf.len() {
        match s.write(&buf[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock && started.elapsed() < IDLE => {
                std::hint::spin_loop();
            }
            Err(e) => return Err(e).context("write"),
        }
    }
    Ok(())
}

pub(super) fn kernel_pingpong_server(args: &PeerArgs) -> Result<()> {
    let mut s = kernel_accept(args)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let mut msg = vec![0u8; args.message];
    while spin_read(&mut s, &mut msg)? {
        spin_write(&mut s, &msg)?;
    }
    Ok(())
}

pub(super) fn kernel_pingpong_client(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let mut s = kernel_connect(args.addr)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let mut msg = vec![0x5au8; args.message];
    pingpong_rounds(args, report, || {
        spin_write(&mut s, &msg)?;
        if !spin_read(&mut s, &mut msg)? {
            bail!("the server closed the connection");
        }
        Ok(())
    })
}

// ---- zerosplit ends -------------------------------------------------------
