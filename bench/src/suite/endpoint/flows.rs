//! Many concurrent bulk connections on one zerosplit stack
//! (`bench-peer --flows N`, N > 1): the sender opens N connections and
//! spreads its bytes and time over them, the receiver accepts N and
//! receives until every FIN.
//!
//! Memory per connection shrinks with N ([`FlowBufs`]) so 1024
//! connections fit one registered area. Nothing here walks every
//! connection per loop turn: completions say which connection to serve,
//! so the application's cost per packet stays flat as N grows and the
//! figures measure the stack. Whole-table passes happen only at the
//! phase changes (the deadline, the final close).

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use datapath::mr::Access;
use transports::segment::CloseReason;
use transports::tcp::State;
use zerosplit::provider::Provider;
use zerosplit::stack::{CompletionKind, ConnId};

use super::{closed_error, deadline, ready, CpuWindow, PeerArgs, BUF, BUFS, IDLE};
use crate::suite::flows::MAX_FLOWS_POINT as MAX_PEER_FLOWS;
use crate::suite::peer::PeerReport;

/// Smallest buffer a connection posts.
const MIN_BUF: usize = 16 << 10;

/// How one connection's buffers are cut: `bufs` buffers of `buf` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowBufs {
    pub(crate) bufs: usize,
    pub(crate) buf: usize,
}

impl FlowBufs {
    /// The one-flow budget (`BUFS` × `BUF`) shared by `flows`
    /// connections, each posting 4 buffers of 16 KiB to 1 MiB.
    pub(crate) fn for_flows(flows: usize) -> FlowBufs {
        let bufs = 4;
        let share = (BUFS * BUF) / (bufs * flows.max(1));
        let buf = (share & !4095).clamp(MIN_BUF, BUF);
        FlowBufs { bufs, buf }
    }

    /// Bytes one connection's buffers span.
    pub(crate) fn per_conn(self) -> usize {
        self.bufs * self.buf
    }
}

/// Registered bytes `flows` receiving connections need.
pub(crate) fn recv_area(flows: usize) -> usize {
    FlowBufs::for_flows(flows).per_conn() * flows
}

/// Opens `n` connections to `addr` and waits (bounded) for every
/// handshake; a refused one (listener not up yet) is tried again.
fn connect_all<P: Provider>(stack: &mut P, addr: SocketAddrV4, n: usize) -> Result<Vec<ConnId>> {
    let started = Instant::now();
    let mut pending = HashMap::new();
    for _ in 0..n {
        let c = stack
            .connect(addr)
            .with_context(|| format!("connecting to {addr}"))?;
        pending.insert(c, ());
    }
    let mut up = Vec::with_capacity(n);
    while up.len() < n {
        stack.poll();
        while let Some(c) = stack.poll_completion() {
            match c.kind {
                CompletionKind::Connected if pending.remove(&c.conn).is_some() => up.push(c.conn),
                CompletionKind::Closed(CloseReason::Refused)
                    if started.elapsed() < Duration::from_secs(10) =>
                {
                    pending.remove(&c.conn);
                    let again = stack
                        .connect(addr)
                        .with_context(|| format!("connecting to {addr}"))?;
                    pending.insert(again, ());
                }
                CompletionKind::Closed(r) => return Err(closed_error(r)),
                _ => {}
            }
        }
        if started.elapsed() > IDLE {
            bail!(
                "{} of {n} handshakes with {addr} done within {IDLE:?}",
                up.len()
            );
        }
    }
    Ok(up)
}

/// One sending connection.
#[derive(Debug, Default)]
struct Tx {
    posted: u64,
    acked: u64,
    outstanding: usize,
    fin: bool,
}

/// The sender: N connections, each keeping `bufs` sends of `buf` bytes in
/// flight from one shared region (TX only reads it), reposting on each
/// send completion until the byte share or the time is used up.
pub(super) fn zs_send_flows<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
) -> Result<()> {
    let n = args.flows;
    let fb = FlowBufs::for_flows(n);
    let mr = stack
        .register_memory(fb.per_conn(), Access::SEND)
        .context("registering send buffers")?;
    stack.memory_mut(mr)?.fill(0xa5);
    let conns = connect_all(stack, args.addr, n)?;
    let index: HashMap<ConnId, usize> = conns.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    let share = (args.bytes / n as u64).max(1);
    let mut tx: Vec<Tx> = conns.iter().map(|_| Tx::default()).collect();
    let (t0, cpu0) = (Instant::now(), CpuWindow::start()?);
    let end = deadline(args);
    let post = |stack: &mut P, i: usize, t: &mut Tx| -> Result<()> {
        let n = ((share - t.posted) as usize).min(fb.buf);
        let slot = (t.posted / fb.buf as u64) as usize % fb.bufs;
        stack.post_send(conns[i], mr, slot * fb.buf, n, i as u64)?;
        t.posted += n as u64;
        t.outstanding += 1;
        Ok(())
    };
    for (i, t) in tx.iter_mut().enumerate() {
        while t.outstanding < fb.bufs && t.posted < share {
            post(stack, i, t)?;
        }
    }
    let (mut sending, mut unfinished, mut progress) = (true, n, t0);
    while unfinished > 0 {
        stack.poll();
        let open = sending && Instant::now() < end;
        while let Some(c) = stack.poll_completion() {
            let Some(&i) = index.get(&c.conn) else {
                continue;
            };
            let t = &mut tx[i];
            match c.kind {
                CompletionKind::Send => {
                    t.outstanding -= 1;
                    t.acked += c.len;
                    progress = Instant::now();
                    if open && t.posted < share {
                        post(stack, i, t)?;
                    } else if !t.fin && t.outstanding == 0 {
                        stack.close(conns[i])?;
                        t.fin = true;
                    }
                    if t.fin && t.outstanding == 0 {
                        unfinished -= 1;
                    }
                }
                CompletionKind::Closed(CloseReason::Graceful) if t.fin => {}
                CompletionKind::Closed(r) => return Err(closed_error(r)),
                _ => {}
            }
        }
        if sending && !open {
            // Time is up: one pass closes every connection whose sends
            // are all acknowledged; the rest close on their last completion.
            sending = false;
            for (i, t) in tx.iter_mut().enumerate() {
                if !t.fin && t.outstanding == 0 {
                    stack.close(conns[i])?;
                    t.fin = true;
                    unfinished -= 1;
                }
            }
        }
        if progress.elapsed() > IDLE {
            bail!("no progress for {IDLE:?}; {unfinished} of {n} connections unfinished");
        }
    }
    cpu0.end(report)?;
    report.seconds = t0.elapsed().as_secs_f64();
    fill_fairness(report, tx.iter().map(|t| t.acked));
    wait_closed(stack, &conns, |s| {
        matches!(s, State::FinWait2 | State::TimeWait | State::Closed)
    });
    Ok(())
}

/// Total, count and per-connection min/max of `bytes`.
pub(super) fn fill_fairness(report: &mut PeerReport, bytes: impl Iterator<Item = u64>) {
    let (mut total, mut min, mut max, mut count) = (0, u64::MAX, 0, 0);
    for b in bytes {
        total += b;
        min = min.min(b);
        max = max.max(b);
        count += 1;
    }
    report.bytes = total;
    report.flows = count;
    report.flow_min_bytes = if count == 0 { 0 } else { min };
    report.flow_max_bytes = max;
}

/// Polls (at most 2 s) until every connection is in a state `done` accepts.
fn wait_closed<P: Provider>(stack: &mut P, conns: &[ConnId], done: impl Fn(State) -> bool) {
    let end = Instant::now() + Duration::from_secs(2);
    let mut left: Vec<ConnId> = conns.to_vec();
    while !left.is_empty() && Instant::now() < end {
        stack.poll();
        while stack.poll_completion().is_some() {}
        left.retain(|&c| stack.state(c).is_ok_and(|s| !done(s)));
    }
}

/// One receiving connection.
#[derive(Debug, Default)]
struct Rx {
    next_wr: u64,
    peer_len: Option<u64>,
    received: u64,
    done: bool,
}

/// The receiver: accepts N connections, each receiving into its own
/// `bufs` × `buf` slice of one region and reposting each full buffer,
/// until every connection has its FIN and all bytes before it.
pub(super) fn zs_recv_flows<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
) -> Result<()> {
    let n = args.flows;
    let fb = FlowBufs::for_flows(n);
    let mr = stack
        .register_memory(recv_area(n), Access::RECV)
        .context("registering receive buffers")?;
    let port = args.addr.port();
    stack
        .listen(port)
        .with_context(|| format!("listening on port {port}"))?;
    ready();
    let mut conns: Vec<ConnId> = Vec::with_capacity(n);
    let mut index: HashMap<ConnId, usize> = HashMap::with_capacity(n);
    let mut rx: Vec<Rx> = Vec::with_capacity(n);
    let mut closing: Vec<usize> = Vec::new();
    let (mut t0, mut cpu0) = (Instant::now(), CpuWindow::start()?);
    let (mut progress, mut last, mut done) = (t0, t0, 0);
    while done < n {
        stack.poll();
        while conns.len() < n {
            let Some(c) = stack.accept(port)? else { break };
            let i = conns.len();
            let mut r = Rx::default();
            for k in 0..fb.bufs {
                let at = i * fb.per_conn() + k * fb.buf;
                stack.post_recv(c, mr, at, fb.buf, r.next_wr)?;
                r.next_wr += 1;
            }
            conns.push(c);
            index.insert(c, i);
            rx.push(r);
            progress = Instant::now();
            if conns.len() == n {
                (t0, cpu0) = (progress, CpuWindow::start()?);
            }
        }
        while let Some(c) = stack.poll_completion() {
            let Some(&i) = index.get(&c.conn) else {
                continue;
            };
            let r = &mut rx[i];
            match c.kind {
                CompletionKind::Recv => {
                    let at = i * fb.per_conn() + (c.wr_id as usize % fb.bufs) * fb.buf;
                    stack.post_recv(c.conn, mr, at, fb.buf, r.next_wr)?;
                    r.next_wr += 1;
                    progress = Instant::now();
                }
                CompletionKind::PeerClosed { len } => {
                    r.peer_len = Some(len);
                    closing.push(i);
                }
                CompletionKind::Closed(reason) if r.peer_len.is_none() => {
                    return Err(closed_error(reason))
                }
                _ => {}
            }
        }
        // Only the connections whose FIN came are looked at.
        let mut finished = 0;
        closing.retain(|&i| {
            let r = &mut rx[i];
            r.received = stack.received(conns[i]).unwrap_or(r.received);
            let complete = r.peer_len.is_some_and(|l| r.received >= l);
            if complete && !r.done {
                r.done = true;
                finished += 1;
                stack.close(conns[i]).ok();
            }
            !complete
        });
        if finished > 0 {
            done += finished;
            last = Instant::now();
            progress = last;
        }
        if progress.elapsed() > IDLE {
            bail!(
                "no progress for {IDLE:?}: {} of {n} accepted, {done} finished",
                conns.len()
            );
        }
    }
    cpu0.end(report)?;
    report.seconds = last.duration_since(t0).as_secs_f64();
    fill_fairness(report, rx.iter().map(|r| r.received));
    wait_closed(stack, &conns, |s| {
        matches!(s, State::Closed | State::TimeWait)
    });
    Ok(())
}

/// `--flows` out of range.
pub(super) fn check_flows(flows: usize) -> Result<()> {
    if !(1..=MAX_PEER_FLOWS).contains(&flows) {
        return Err(anyhow!(
            "--flows must be between 1 and {MAX_PEER_FLOWS}, got {flows}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_shrink_with_flows_and_stay_within_bounds() {
        assert_eq!(FlowBufs::for_flows(1).buf, BUF);
        assert_eq!(FlowBufs::for_flows(16).per_conn(), BUFS * BUF / 16);
        for n in [1, 2, 16, 256, 1024, MAX_PEER_FLOWS] {
            let fb = FlowBufs::for_flows(n);
            assert!((MIN_BUF..=BUF).contains(&fb.buf), "{n}: {fb:?}");
            assert_eq!(fb.buf % 4096, 0, "{n}: {fb:?}");
        }
        // 1024 connections fit in 64 MiB.
        assert!(recv_area(1024) <= 64 << 20, "{}", recv_area(1024));
        assert!(check_flows(0).is_err() && check_flows(MAX_PEER_FLOWS + 1).is_err());
        check_flows(1024).expect("1024 is allowed");
    }
}
