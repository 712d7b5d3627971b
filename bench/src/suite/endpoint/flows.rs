//! Many concurrent bulk connections on one zerosplit stack
//! (`bench-peer --flows N`, N > 1): the sender opens N connections and
//! spreads its bytes and time over them, the receiver accepts N and
//! receives until every FIN.
//!
//! With `--queues Q` a zerosplit end opens one stack per receive queue
//! ([`zerosplit::shards::run_sharded`]) and each serves its share of the
//! N connections ([`zs_flows_sharded`]).
//!
//! Memory per connection shrinks with N ([`FlowBufs`]) so 1024
//! connections fit one registered area. Nothing here walks every
//! connection per loop turn: completions say which connection to serve,
//! so the application's cost per packet stays flat as N grows and the
//! figures measure the stack. Whole-table passes happen only at the
//! phase changes (the deadline, the final close).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use datapath::mr::Access;
use transports::segment::CloseReason;
use transports::tcp::State;
use zerosplit::provider::Provider;
use zerosplit::provider::{CompletionKind, ConnId};

use super::common::{
    closed_error, deadline, ready, recv_area, CpuWindow, FlowBufs, PeerArgs, IDLE,
};
use super::stacks::{fill_counters, stack_config};
use crate::suite::options::{
    MAX_FLOWS_POINT as MAX_PEER_FLOWS, MAX_FLOW_QUEUES as MAX_PEER_QUEUES,
};
use crate::suite::peer::PeerReport;
use crate::suite::report::merge_drops;

/// Opens `n` connections to `addr` and waits (bounded) for every
/// handshake; a refused one (listener not up yet) is tried again.
fn connect_all<P: Provider>(stack: &mut P, addr: SocketAddr, n: usize) -> Result<Vec<ConnId>> {
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
/// until every connection has its FIN and all bytes before it. Calls
/// `listening` once it listens.
pub(super) fn zs_recv_flows<P: Provider>(
    stack: &mut P,
    args: &PeerArgs,
    report: &mut PeerReport,
    listening: &(dyn Fn() + Sync),
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
    listening();
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

/// Connections queue `queue` of `queues` serves out of `flows`: an even
/// share, the first `flows % queues` queues one more.
fn queue_share(flows: usize, queues: u32, queue: u32) -> usize {
    let (q, i) = (queues as usize, queue as usize);
    flows / q + usize::from(i < flows % q)
}

/// `--flows N --queues Q` on a zerosplit end: one stack per queue, each
/// on its own thread serving `queue_share` of the connections. Sender
/// and receiver split alike: on veth a packet arrives on the peer's
/// queue with the number of the queue it was sent from, so the sender's
/// queue q meets the receiver's queue q (a packet that lands elsewhere is
/// handed to its owner by the queue group, and counted). Ready once
/// every queue listens; the report adds the queues' bytes and takes the
/// longest window and the largest CPU reading (each queue's window reads
/// the whole process's CPU, and the windows overlap).
pub(super) fn zs_flows_sharded(args: &PeerArgs, report: &mut PeerReport) -> Result<()> {
    let queues = args.queues;
    let base = stack_config(args);
    let configs = (0..queues)
        .map(|q| {
            let mut c = base.clone();
            c.nic.queue = q;
            c
        })
        .collect();
    let listening = AtomicU32::new(0);
    let on_listening = || {
        if listening.fetch_add(1, Ordering::AcqRel) + 1 == queues {
            ready();
        }
    };
    let sharded = zerosplit::shards::run_sharded(&args.iface, configs, |queue, stack| {
        let flows = queue_share(args.flows, queues, queue);
        let share = PeerArgs {
            flows,
            bytes: (args.bytes / args.flows as u64).max(1) * flows as u64,
            ..args.clone()
        };
        let mut r = PeerReport::default();
        let result = match args.role.as_str() {
            "send" => zs_send_flows(stack, &share, &mut r),
            "recv" => zs_recv_flows(stack, &share, &mut r, &on_listening),
            other => Err(anyhow!(
                "--queues serves the send and recv roles, not {other}"
            )),
        };
        fill_counters(stack, &mut r);
        (result.map_err(|e| format!("queue {queue}: {e:#}")), r)
    })
    .with_context(|| format!("starting {queues} zerosplit queues on {}", args.iface))?;
    let mut first_error = None;
    let mut flow_min = u64::MAX;
    for (_, (result, r)) in sharded.results {
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
        report.bytes += r.bytes;
        report.flows += r.flows;
        flow_min = flow_min.min(r.flow_min_bytes);
        report.flow_max_bytes = report.flow_max_bytes.max(r.flow_max_bytes);
        report.seconds = report.seconds.max(r.seconds);
        if r.cpu_s > report.cpu_s {
            report.cpu_s = r.cpu_s;
            report.threads = r.threads;
        }
        report.retransmits += r.retransmits;
        merge_drops(&mut report.drops, &r.drops);
    }
    report.flow_min_bytes = if report.flows == 0 { 0 } else { flow_min };
    match first_error {
        Some(e) => Err(anyhow!(e)),
        None => Ok(()),
    }
}

/// `--queues` out of range, or with an end that cannot serve several.
pub(super) fn check_queues(args: &PeerArgs) -> Result<()> {
    if !(1..=MAX_PEER_QUEUES).contains(&args.queues) {
        bail!(
            "--queues must be between 1 and {MAX_PEER_QUEUES}, got {}",
            args.queues
        );
    }
    if args.queues > 1 && args.stack != "kernel" {
        if args.stack != "tcp" {
            bail!(
                "--queues above 1 runs the header-only tcp stack, not {}",
                args.stack
            );
        }
        if args.flows < args.queues as usize {
            bail!(
                "--queues {} needs at least as many --flows, got {}",
                args.queues,
                args.flows
            );
        }
    }
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
    use super::super::common::{BUF, BUFS, MIN_BUF};
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

    fn peer_args(stack: &str, flows: usize, queues: u32) -> PeerArgs {
        PeerArgs {
            role: "recv".into(),
            stack: stack.into(),
            iface: "zs1x1a".into(),
            addr: "198.18.0.1:5303".parse().expect("addr"),
            mtu: 1500,
            threads: "rtc".into(),
            poll: "adaptive".into(),
            app_poll: None,
            bytes: 1 << 30,
            seconds: 1.0,
            rounds: 1,
            message: 64,
            flows,
            queues,
            metrics: false,
            daemon: None,
            daemon_pid: None,
        }
    }

    #[test]
    fn queues_are_checked_before_anything_opens() {
        check_queues(&peer_args("tcp", 16, 2)).expect("16 flows on 2 queues");
        check_queues(&peer_args("kernel", 1, 2)).expect("the kernel spreads by itself");
        let err = |a: PeerArgs| check_queues(&a).expect_err("refused").to_string();
        assert!(err(peer_args("tcp", 16, 0)).contains("--queues must be between 1 and 8"));
        assert!(err(peer_args("tcp", 16, 9)).contains("got 9"));
        assert!(err(peer_args("smoltcp", 16, 2)).contains("not smoltcp"));
        assert!(err(peer_args("tcp", 1, 2)).contains("at least as many --flows"));
    }

    #[test]
    fn queues_share_the_connections_evenly() {
        for (flows, queues) in [(16, 2), (17, 2), (1024, 3), (2, 2)] {
            let shares: Vec<usize> = (0..queues).map(|q| queue_share(flows, queues, q)).collect();
            assert_eq!(shares.iter().sum::<usize>(), flows, "{flows} over {queues}");
            let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(hi - lo <= 1, "{shares:?}");
        }
    }
}
