//! The zerosplit ends' roles on one connection (the header-only `tcp`
//! stack or `smoltcp`, any [`Provider`]): bulk send and receive, ping-pong
//! and an idle listener. The stacks they run on are in `stacks.rs`, the
//! many-flow ends in `flows.rs`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use datapath::mr::Access;
use transports::segment::CloseReason;
use transports::tcp::State;
use zerosplit::provider::Provider;
use zerosplit::provider::{CompletionKind, ConnId};

use super::common::{
    closed_error, deadline, pingpong_rounds, ready, CpuWindow, PeerArgs, BUF, BUFS, IDLE, SLOTS,
};
use crate::suite::peer::PeerReport;

/// Listens on the address's port and waits (bounded) for one connection.
pub(super) fn zs_accept<P: Provider>(stack: &mut P, args: &PeerArgs) -> Result<ConnId> {
    let port = args.addr.port();
    stack
        .listen(port)
        .with_context(|| format!("listening on port {port}"))?;
    ready();
    let started = Instant::now();
    loop {
        stack.poll();
        if let Some(c) = stack.accept(port)? {
            return Ok(c);
        }
        if started.elapsed() > IDLE {
            bail!("nobody connected within {IDLE:?}");
        }
    }
}

/// Listens and polls, as an application waiting for connections would,
/// for `--seconds` with no traffic: `cpu_s` over `seconds` is the idle
/// stack's share of a core.
pub(super) fn zs_idle<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
) -> Result<()> {
    let port = args.addr.port();
    stack
        .listen(port)
        .with_context(|| format!("listening on port {port}"))?;
    ready();
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let end = deadline(args);
    while Instant::now() < end {
        stack.poll();
        if stack.accept(port)?.is_some() {
            bail!("the idle stack got a connection");
        }
    }
    report.seconds = t0.elapsed().as_secs_f64();
    cpu0.end(report)
}

/// Connects and waits (bounded) for the handshake.
pub(super) fn zs_connect<P: Provider>(stack: &mut P, addr: SocketAddr) -> Result<ConnId> {
    let started = Instant::now();
    loop {
        let conn = stack
            .connect(addr)
            .with_context(|| format!("connecting to {addr}"))?;
        loop {
            stack.poll();
            match stack.poll_completion().map(|c| c.kind) {
                Some(CompletionKind::Connected) => return Ok(conn),
                // The listener may not be up yet: try again for a while.
                Some(CompletionKind::Closed(CloseReason::Refused))
                    if started.elapsed() < Duration::from_secs(10) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
                Some(CompletionKind::Closed(r)) => return Err(closed_error(r)),
                _ => {}
            }
            if started.elapsed() > IDLE {
                bail!("no handshake with {addr} within {IDLE:?}");
            }
        }
    }
}

pub(super) fn zs_recv<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
) -> Result<()> {
    let mr = stack
        .register_memory(BUFS * BUF, Access::RECV)
        .context("registering receive buffers")?;
    let conn = zs_accept(stack, args)?;
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let mut next_wr = 0u64;
    for k in 0..BUFS {
        stack.post_recv(conn, mr, k * BUF, BUF, next_wr)?;
        next_wr += 1;
    }
    let (mut peer_len, mut last, mut progress) = (None, t0, t0);
    let mut received = 0;
    loop {
        stack.poll();
        while let Some(c) = stack.poll_completion() {
            if c.conn != conn {
                continue;
            }
            match c.kind {
                CompletionKind::Recv => {
                    let slot = (c.wr_id as usize) % BUFS;
                    stack.post_recv(conn, mr, slot * BUF, BUF, next_wr)?;
                    next_wr += 1;
                }
                CompletionKind::PeerClosed { len } => peer_len = Some(len),
                CompletionKind::Closed(r) if peer_len.is_none() => return Err(closed_error(r)),
                _ => {}
            }
        }
        let now_received = stack.received(conn).unwrap_or(received);
        if now_received > received {
            received = now_received;
            last = Instant::now();
            progress = last;
        }
        if peer_len.is_some_and(|l| received >= l) {
            break;
        }
        if progress.elapsed() > IDLE {
            bail!("no progress for {IDLE:?} after {received} bytes");
        }
    }
    cpu0.end(report)?;
    report.seconds = last.duration_since(t0).as_secs_f64();
    report.bytes = received;
    stack.close(conn).ok();
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end
        && stack
            .state(conn)
            .is_ok_and(|s| s != State::Closed && s != State::TimeWait)
    {
        stack.poll();
    }
    Ok(())
}

pub(super) fn zs_send<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
) -> Result<()> {
    let mr = stack
        .register_memory(BUFS * BUF, Access::SEND)
        .context("registering send buffers")?;
    stack.memory_mut(mr)?.fill(0xa5);
    let conn = zs_connect(stack, args.addr)?;
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let end = deadline(args);
    let mut free: Vec<usize> = (0..BUFS).collect();
    let (mut posted, mut fin, mut progress, mut acked) = (0u64, false, t0, 0u64);
    loop {
        stack.poll();
        while let Some(c) = stack.poll_completion() {
            match c.kind {
                CompletionKind::Send => free.push(c.wr_id as usize % BUFS),
                CompletionKind::Closed(CloseReason::Graceful) if fin => {}
                CompletionKind::Closed(r) => return Err(closed_error(r)),
                _ => {}
            }
        }
        if !fin {
            let sending = posted < args.bytes && Instant::now() < end;
            if sending {
                while let Some(slot) = free.pop() {
                    let n = ((args.bytes - posted) as usize).min(BUF);
                    stack.post_send(conn, mr, slot * BUF, n, slot as u64)?;
                    posted += n as u64;
                    if posted >= args.bytes {
                        break;
                    }
                }
            } else {
                stack.close(conn)?;
                fin = true;
            }
        }
        let now_acked = stack.acked(conn).unwrap_or(acked);
        if now_acked > acked {
            acked = now_acked;
            progress = Instant::now();
        }
        if fin
            && acked >= posted
            && stack.state(conn).map_or(true, |s| {
                matches!(s, State::FinWait2 | State::TimeWait | State::Closed)
            })
        {
            break;
        }
        if progress.elapsed() > IDLE {
            bail!("no progress for {IDLE:?} after {acked} of {posted} bytes acknowledged");
        }
    }
    cpu0.end(report)?;
    report.seconds = t0.elapsed().as_secs_f64();
    report.bytes = posted;
    Ok(())
}

/// The two regions of a ping-pong end: receive slots and send slots.
pub(super) struct Slots {
    rx: datapath::mr::MrId,
    tx: datapath::mr::MrId,
    tx_free: Vec<usize>,
    next_wr: u64,
    msg: usize,
}

impl Slots {
    fn new<P: Provider>(stack: &mut P, msg: usize) -> Result<Slots> {
        Ok(Slots {
            rx: stack.register_memory(SLOTS * msg, Access::RECV)?,
            tx: stack.register_memory(SLOTS * msg, Access::SEND)?,
            tx_free: (0..SLOTS).collect(),
            next_wr: 0,
            msg,
        })
    }

    fn post_all_rx<P: Provider>(&mut self, stack: &mut P, conn: ConnId) -> Result<()> {
        for k in 0..SLOTS {
            stack.post_recv(conn, self.rx, k * self.msg, self.msg, k as u64)?;
        }
        self.next_wr = SLOTS as u64;
        Ok(())
    }

    /// Handles completions; returns how many messages arrived and whether
    /// the peer closed.
    fn drain<P: Provider>(&mut self, stack: &mut P, conn: ConnId) -> Result<(usize, bool)> {
        let (mut got, mut closed) = (0, false);
        while let Some(c) = stack.poll_completion() {
            if c.conn != conn {
                continue;
            }
            match c.kind {
                CompletionKind::Recv => {
                    let slot = (c.wr_id as usize) % SLOTS;
                    stack.post_recv(conn, self.rx, slot * self.msg, self.msg, self.next_wr)?;
                    self.next_wr += 1;
                    got += 1;
                }
                CompletionKind::Send => self.tx_free.push(c.wr_id as usize % SLOTS),
                CompletionKind::PeerClosed { .. } => closed = true,
                CompletionKind::Closed(CloseReason::Graceful) => closed = true,
                CompletionKind::Closed(r) => return Err(closed_error(r)),
                _ => {}
            }
        }
        Ok((got, closed))
    }

    /// Posts one message, waiting (bounded) for a free send slot.
    fn send<P: Provider>(&mut self, stack: &mut P, conn: ConnId) -> Result<()> {
        let started = Instant::now();
        let slot = loop {
            if let Some(s) = self.tx_free.pop() {
                break s;
            }
            stack.poll();
            let (got, _) = self.drain(stack, conn)?;
            if got > 0 {
                bail!("a message arrived while waiting for a send slot");
            }
            if started.elapsed() > IDLE {
                bail!("no send slot freed within {IDLE:?}");
            }
        };
        stack.post_send(conn, self.tx, slot * self.msg, self.msg, slot as u64)?;
        Ok(())
    }
}

pub(super) fn zs_pingpong_server<P: Provider>(stack: &mut P, args: &PeerArgs) -> Result<()> {
    let mut slots = Slots::new(stack, args.message)?;
    let conn = zs_accept(stack, args)?;
    slots.post_all_rx(stack, conn)?;
    let mut progress = Instant::now();
    loop {
        stack.poll();
        let (got, closed) = slots.drain(stack, conn)?;
        for _ in 0..got {
            slots.send(stack, conn)?;
        }
        if got > 0 {
            progress = Instant::now();
        }
        if closed {
            break;
        }
        if progress.elapsed() > IDLE {
            bail!("no message for {IDLE:?}");
        }
    }
    stack.close(conn).ok();
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end && stack.state(conn).is_ok_and(|s| s != State::Closed) {
        stack.poll();
    }
    Ok(())
}

pub(super) fn zs_pingpong_client<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
) -> Result<()> {
    let mut slots = Slots::new(stack, args.message)?;
    let conn = zs_connect(stack, args.addr)?;
    slots.post_all_rx(stack, conn)?;
    pingpong_rounds(args, report, || {
        let t = Instant::now();
        slots.send(stack, conn)?;
        loop {
            stack.poll();
            let (got, closed) = slots.drain(stack, conn)?;
            if got > 0 {
                return Ok(());
            }
            if closed {
                bail!("the server closed the connection");
            }
            if t.elapsed() > IDLE {
                bail!("no reply within {IDLE:?}");
            }
        }
    })?;
    stack.close(conn).ok();
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end
        && stack
            .state(conn)
            .is_ok_and(|s| !matches!(s, State::Closed | State::TimeWait))
    {
        stack.poll();
    }
    Ok(())
}
