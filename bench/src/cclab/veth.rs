//! The lab on veth: zerosplit and Linux senders through one
//! [`BottleneckPath`] (tbf on a kernel-forwarded hop, delay from the
//! impairment hop) into Linux receivers.
//!
//! - Every flow is received by a Linux socket in B that counts its bytes
//!   per time bucket: throughput over time, shares and Jain's index come
//!   from the receiving side, the same way for both stacks.
//! - Each sender samples its own controller every [`SAMPLE`]: zerosplit
//!   through [`Stack::conn_info`], Linux through `TCP_INFO`
//!   ([`zerosplit::tcp_info`]), into one [`FlowSample`] shape.
//! - A flow's first 8 bytes are its index, so the receiver tells flows
//!   apart whatever their ports.
//!
//! All flows of one run start from one clock reading (`t0`), so their
//! samples and buckets share a time axis.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use transports::cc::Algorithm;
use transports::segment::CloseReason;

use datapath::mr::Access;
use zerosplit::host::HostConfig;
use zerosplit::provider::Provider;
use zerosplit::provider::{CompletionKind, ConnId};
use zerosplit::stack::Stack;
use zerosplit::tcp_info::{self, LinuxTcpInfo};
use zerosplit_lab::{getsockopt, setsockopt};

use crate::impair::{BottleneckPath, QueueCounters};

/// How often each sender samples its controller.
pub const SAMPLE: Duration = Duration::from_millis(10);
/// The receivers' throughput buckets.
pub const BUCKET: Duration = Duration::from_millis(100);
/// The receivers' port.
const PORT: u16 = 5301;
/// zerosplit send buffers per flow, each `ZS_BUF` bytes, posted again and
/// again (zero-copy TX of the same bytes).
const ZS_BUFS: usize = 8;
const ZS_BUF: usize = 256 << 10;
/// Linux write size.
const LINUX_CHUNK: usize = 16 << 10;

/// Which stack sends, with which controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Sender {
    /// zerosplit's header-only TCP.
    Zerosplit(#[serde(serialize_with = "algorithm_name")] Algorithm),
    /// Linux TCP with `TCP_CONGESTION` set to this name.
    Linux(&'static str),
}

fn algorithm_name<S: serde::Serializer>(a: &Algorithm, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.name())
}

impl Sender {
    /// `zs-cubic`, `linux-bbr`.
    pub fn label(&self) -> String {
        match self {
            Sender::Zerosplit(a) => format!("zs-{}", a.name()),
            Sender::Linux(n) => format!("linux-{n}"),
        }
    }

    /// Linux's counterpart of one of our controllers, where Linux has one
    /// here (`tcp_available_congestion_control`: reno, cubic, bbr).
    pub fn linux_twin(a: Algorithm) -> Option<Sender> {
        match a {
            Algorithm::NewReno => Some(Sender::Linux("reno")),
            Algorithm::Cubic => Some(Sender::Linux("cubic")),
            Algorithm::Bbr => Some(Sender::Linux("bbr")),
            _ => None,
        }
    }
}

/// One flow of a run: who sends, from when until when (from the run's
/// start).
#[derive(Debug, Clone, Copy)]
pub struct FlowPlan {
    /// The sender.
    pub sender: Sender,
    /// Start.
    pub start: Duration,
    /// Stop sending (the receiver counts until the run ends).
    pub stop: Duration,
}

/// One sample of a sender's controller.
#[derive(Debug, Clone, Serialize)]
pub struct FlowSample {
    /// Seconds since the run's start.
    pub t_s: f64,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes.
    pub ssthresh: Option<u64>,
    /// Smoothed RTT, µs.
    pub srtt_us: u64,
    /// Smallest RTT seen, µs.
    pub min_rtt_us: u64,
    /// Pacing rate, bit/s.
    pub pacing_bps: Option<u64>,
    /// Bytes in flight.
    pub in_flight: u64,
    /// Segments retransmitted so far.
    pub retrans: u64,
    /// Phase (ours) or `ca_state` (Linux), with recovery.
    pub state: String,
}

/// What one flow did.
#[derive(Debug, Clone, Serialize)]
pub struct FlowResult {
    /// `zs-cubic`, `linux-cubic`, …
    pub label: String,
    /// The sender.
    pub sender: Sender,
    /// Start and stop, s.
    pub start_s: f64,
    /// Stop, s.
    pub stop_s: f64,
    /// Bytes received per [`BUCKET`] from the run's start.
    pub buckets: Vec<u64>,
    /// Segments sent, retransmissions included.
    pub segs_out: u64,
    /// Segments retransmitted.
    pub retrans: u64,
    /// The controller samples.
    #[serde(skip)]
    pub samples: Vec<FlowSample>,
}

impl FlowResult {
    /// Mean goodput over `[from, to)` seconds, Mbit/s (receiver's count).
    pub fn goodput_mbps(&self, from: f64, to: f64) -> f64 {
        let b = BUCKET.as_secs_f64();
        let (i, j) = ((from / b).round() as usize, (to / b).round() as usize);
        let j = j.min(self.buckets.len());
        if j <= i {
            return 0.0;
        }
        self.buckets[i..j].iter().sum::<u64>() as f64 * 8.0 / ((j - i) as f64 * b) / 1e6
    }

    /// Throughput per bucket, `(s, Mbit/s)`.
    pub fn throughput_series(&self) -> Vec<(f64, f64)> {
        let b = BUCKET.as_secs_f64();
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, &n)| ((i as f64 + 0.5) * b, n as f64 * 8.0 / b / 1e6))
            .collect()
    }

    /// Retransmitted segments, % of those sent.
    pub fn loss_pct(&self) -> f64 {
        100.0 * self.retrans as f64 / self.segs_out.max(1) as f64
    }

    /// Samples taken in the second half of the flow's life.
    fn second_half(&self) -> impl Iterator<Item = &FlowSample> {
        let mid = (self.start_s + self.stop_s) / 2.0;
        let stop = self.stop_s;
        self.samples
            .iter()
            .filter(move |s| s.t_s >= mid && s.t_s < stop)
    }

    /// 95th percentile of smoothed RTT above the flow's smallest RTT over
    /// the second half, ms.
    pub fn p95_queue_ms(&self) -> f64 {
        let min = self
            .samples
            .iter()
            .map(|s| s.min_rtt_us)
            .filter(|&m| m > 0)
            .min()
            .unwrap_or(0);
        let mut q: Vec<f64> = self
            .second_half()
            .map(|s| s.srtt_us.saturating_sub(min) as f64 / 1e3)
            .collect();
        super::percentile(&mut q, 0.95)
    }

    /// Mean congestion window over the second half, kB.
    pub fn mean_cwnd_kb(&self) -> f64 {
        let (n, sum) = self
            .second_half()
            .fold((0u64, 0u64), |(n, s), x| (n + 1, s + x.cwnd));
        sum as f64 / n.max(1) as f64 / 1e3
    }
}

/// One run on the bottleneck.
#[derive(Debug, Clone, Serialize)]
pub struct VethRun {
    /// The flows, in plan order.
    pub flows: Vec<FlowResult>,
    /// What the bottleneck queue did during the run.
    pub queue: QueueCounters,
    /// Length of the run, s.
    pub seconds: f64,
}

impl VethRun {
    /// Jain's index of the flows' goodputs per bucket, over the buckets
    /// where every flow was sending, `(s, index)`.
    pub fn jain_over_time(&self) -> Vec<(f64, f64)> {
        let b = BUCKET.as_secs_f64();
        let n = self
            .flows
            .iter()
            .map(|f| f.buckets.len())
            .min()
            .unwrap_or(0);
        (0..n)
            .filter(|&i| {
                let t = i as f64 * b;
                self.flows
                    .iter()
                    .all(|f| t >= f.start_s && t + b <= f.stop_s)
            })
            .map(|i| {
                let x: Vec<f64> = self.flows.iter().map(|f| f.buckets[i] as f64).collect();
                ((i as f64 + 0.5) * b, jain(&x))
            })
            .collect()
    }
}

/// Jain's fairness index of `x`: 1 when equal, 1/n when one takes all.
pub fn jain(x: &[f64]) -> f64 {
    let (s, s2) = x.iter().fold((0.0, 0.0), |(s, s2), v| (s + v, s2 + v * v));
    if s2 == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * s2)
}

/// Runs `plans` through `path` and collects what each flow did. The
/// run lasts until the last flow stops plus two RTTs of draining.
///
/// # Errors
/// A sender or receiver failed (a zerosplit stack that cannot start, a
/// connection refused or reset, no progress): the error names the flow.
pub fn run(path: &BottleneckPath, plans: &[FlowPlan]) -> Result<VethRun> {
    if plans.is_empty() {
        bail!("a run needs at least one flow");
    }
    let to = SocketAddrV4::new(path.b.addr, PORT);
    let listener = zerosplit_lab::run_in(path.ns_b().name(), "binding the receivers", || {
        TcpListener::bind(to)
    })?;
    listener.set_nonblocking(true)?;
    let last_stop = plans.iter().map(|p| p.stop).max().unwrap_or_default();
    let seconds = (last_stop + path.config.rtt * 2).as_secs_f64();
    let buckets = (seconds / BUCKET.as_secs_f64()).ceil() as usize;
    let q0 = path.queue()?;
    // Every thread is up before the clock starts.
    let t0 = Instant::now() + Duration::from_millis(300);
    let end = t0 + Duration::from_secs_f64(seconds);
    let zs: Vec<(usize, Algorithm, FlowPlan)> = plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match p.sender {
            Sender::Zerosplit(a) => Some((i, a, *p)),
            Sender::Linux(_) => None,
        })
        .collect();
    let ns_a = path.ns_a().name().to_owned();
    let (iface, mtu) = (path.a.ifname.clone(), path.config.mtu);
    let results = thread::scope(|s| -> Result<Vec<FlowResult>> {
        let rx = s.spawn(|| receive(&listener, plans.len(), t0, end, buckets));
        let zs_sender = (!zs.is_empty()).then(|| {
            let ns_a = ns_a.clone();
            let zs = zs.clone();
            let iface = iface.clone();
            s.spawn(move || zs_send(&ns_a, &iface, mtu, to, &zs, t0, end))
        });
        let linux: Vec<_> = plans
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.sender {
                Sender::Linux(name) => Some((i, name, *p)),
                Sender::Zerosplit(_) => None,
            })
            .map(|(i, name, p)| {
                let ns_a = ns_a.clone();
                (
                    i,
                    s.spawn(move || linux_send(&ns_a, to, name, i as u64, p, t0)),
                )
            })
            .collect();
        let mut out: Vec<Option<(Vec<FlowSample>, u64, u64)>> = vec![None; plans.len()];
        for (i, h) in linux {
            let r = h
                .join()
                .map_err(|_| anyhow!("the Linux sender thread panicked"))?
                .with_context(|| format!("flow {i} ({})", plans[i].sender.label()))?;
            out[i] = Some(r);
        }
        if let Some(h) = zs_sender {
            let r = h
                .join()
                .map_err(|_| anyhow!("the zerosplit sender thread panicked"))?
                .context("zerosplit senders")?;
            for (i, flow) in r {
                out[i] = Some(flow);
            }
        }
        let received = rx
            .join()
            .map_err(|_| anyhow!("the receiver thread panicked"))??;
        plans
            .iter()
            .zip(out)
            .zip(received)
            .map(|((p, o), buckets)| {
                let (samples, segs_out, retrans) =
                    o.ok_or_else(|| anyhow!("a flow ran nowhere"))?;
                Ok(FlowResult {
                    label: p.sender.label(),
                    sender: p.sender,
                    start_s: p.start.as_secs_f64(),
                    stop_s: p.stop.as_secs_f64(),
                    buckets,
                    segs_out,
                    retrans,
                    samples,
                })
            })
            .collect()
    })?;
    let q1 = path.queue()?;
    Ok(VethRun {
        flows: results,
        queue: QueueCounters {
            packets: q1.packets - q0.packets,
            bytes: q1.bytes - q0.bytes,
            drops: q1.drops - q0.drops,
            backlog_bytes: q1.backlog_bytes,
        },
        seconds,
    })
}

/// Accepts `flows` connections and counts each one's bytes per bucket
/// (by the index each flow sends first) until `end`.
fn receive(
    listener: &TcpListener,
    flows: usize,
    t0: Instant,
    end: Instant,
    buckets: usize,
) -> Result<Vec<Vec<u64>>> {
    thread::scope(|s| {
        let mut readers = Vec::new();
        while readers.len() < flows && Instant::now() < end {
            match listener.accept() {
                Ok((c, _)) => readers.push(s.spawn(move || count(c, t0, end, buckets))),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(e).context("accepting a flow"),
            }
        }
        let mut out = vec![Vec::new(); flows];
        for r in readers {
            let (tag, b) = r
                .join()
                .map_err(|_| anyhow!("a receiver thread panicked"))??;
            let slot = out
                .get_mut(tag as usize)
                .ok_or_else(|| anyhow!("a flow announced index {tag} of {flows}"))?;
            *slot = b;
        }
        for (i, b) in out.iter_mut().enumerate() {
            if b.is_empty() {
                bail!("flow {i} never reached the receiver");
            }
        }
        Ok(out)
    })
}

/// One connection's bytes per bucket; its index first.
fn count(mut c: TcpStream, t0: Instant, end: Instant, buckets: usize) -> Result<(u64, Vec<u64>)> {
    c.set_nonblocking(false)?;
    c.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut tag = [0u8; 8];
    let mut have = 0;
    let mut b = vec![0u64; buckets];
    let mut buf = vec![0u8; 64 << 10];
    while Instant::now() < end {
        let into = if have < 8 {
            &mut tag[have..]
        } else {
            &mut buf[..]
        };
        match c.read(into) {
            Ok(0) => break,
            // A zerosplit sender aborts at its stop.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Ok(n) => {
                let now = Instant::now();
                let i = (now.saturating_duration_since(t0).as_secs_f64() / BUCKET.as_secs_f64())
                    as usize;
                if let Some(slot) = b.get_mut(i) {
                    *slot += n as u64;
                }
                have += n;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e).context("receiving"),
        }
    }
    if have < 8 {
        bail!("a connection closed before announcing its flow");
    }
    Ok((u64::from_le_bytes(tag), b))
}

fn linux_sample(t_s: f64, i: &LinuxTcpInfo) -> FlowSample {
    FlowSample {
        t_s,
        cwnd: i.cwnd,
        ssthresh: i.ssthresh,
        srtt_us: i.srtt.as_micros() as u64,
        min_rtt_us: i.min_rtt.as_micros() as u64,
        pacing_bps: i.pacing_rate.map(|r| r * 8),
        in_flight: i.bytes_in_flight,
        retrans: i.total_retrans,
        state: i.ca_state_name().to_owned(),
    }
}

/// A Linux sender in `ns`: connects at `plan.start`, sets its controller,
/// writes until `plan.stop`, sampling `TCP_INFO` every [`SAMPLE`].
fn linux_send(
    ns: &str,
    to: SocketAddrV4,
    cc: &str,
    tag: u64,
    plan: FlowPlan,
    t0: Instant,
) -> Result<(Vec<FlowSample>, u64, u64)> {
    let _in = zerosplit_lab::NetnsGuard::enter(ns).with_context(|| format!("entering {ns}"))?;
    sleep_until(t0 + plan.start);
    let mut c = TcpStream::connect_timeout(&to.into(), Duration::from_secs(5))
        .with_context(|| format!("connecting to {to}"))?;
    set_linux_congestion(c.as_fd(), cc).with_context(|| {
        format!("TCP_CONGESTION {cc} (is it in tcp_available_congestion_control?)")
    })?;
    c.set_write_timeout(Some(Duration::from_millis(20)))?;
    c.write_all(&tag.to_le_bytes())?;
    let buf = vec![0xa5u8; LINUX_CHUNK];
    let (stop, mut next_sample) = (t0 + plan.stop, Instant::now());
    let mut samples = Vec::new();
    loop {
        let now = Instant::now();
        if now >= next_sample {
            let i = read_linux_tcp_info(c.as_fd()).context("TCP_INFO")?;
            samples.push(linux_sample(now.duration_since(t0).as_secs_f64(), &i));
            next_sample += SAMPLE;
        }
        if now >= stop {
            break;
        }
        match c.write(&buf) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e).context("sending"),
        }
    }
    let i = read_linux_tcp_info(c.as_fd()).context("TCP_INFO")?;
    // Unsent bytes are not waited for: the receiver counts until the run
    // ends, and the socket is reset when it goes.
    let _ = c.shutdown(std::net::Shutdown::Both);
    Ok((samples, i.segs_out, i.total_retrans))
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

enum ZsFlow {
    Waiting,
    Connecting(ConnId),
    Sending(ConnId),
    Done,
}

/// The zerosplit senders: one stack on `iface` in `ns`, every zerosplit
/// flow of the run on it, each posting its buffers again and again until
/// its stop, sampling [`Stack::conn_info`] every [`SAMPLE`].
#[allow(clippy::type_complexity)]
fn zs_send(
    ns: &str,
    iface: &str,
    mtu: u32,
    to: SocketAddrV4,
    flows: &[(usize, Algorithm, FlowPlan)],
    t0: Instant,
    end: Instant,
) -> Result<Vec<(usize, (Vec<FlowSample>, u64, u64))>> {
    let _in = zerosplit_lab::NetnsGuard::enter(ns).with_context(|| format!("entering {ns}"))?;
    let mut cfg = HostConfig::default();
    cfg.nic.mtu = mtu as usize;
    cfg.nic.xsk.umem.mr_bytes = cfg
        .nic
        .xsk
        .umem
        .mr_bytes
        .max(flows.len() * ZS_BUFS * ZS_BUF + (8 << 20));
    cfg.tcp.mss = (mtu - 40) as u16;
    let mut stack =
        Stack::new(iface, cfg).with_context(|| format!("starting zerosplit on {iface}"))?;
    let mut mrs = Vec::new();
    for (k, _) in flows.iter().enumerate() {
        let mr = stack
            .register_memory(ZS_BUFS * ZS_BUF, Access::SEND)
            .context("registering send buffers")?;
        let m = stack.memory_mut(mr)?;
        m.fill(0xa5);
        // Slot 0 goes first: it starts with the flow's index.
        m[..8].copy_from_slice(&(flows[k].0 as u64).to_le_bytes());
        mrs.push(mr);
    }
    let mut state: Vec<ZsFlow> = flows.iter().map(|_| ZsFlow::Waiting).collect();
    let mut free: Vec<Vec<usize>> = flows.iter().map(|_| (0..ZS_BUFS).rev().collect()).collect();
    let mut samples: Vec<Vec<FlowSample>> = flows.iter().map(|_| Vec::new()).collect();
    let mut last: Vec<(u64, u64)> = vec![(0, 0); flows.len()];
    let mut next_sample = t0;
    let give_up = end + Duration::from_secs(5);
    while state.iter().any(|s| !matches!(s, ZsFlow::Done)) {
        let now = Instant::now();
        if now > give_up {
            bail!(
                "zerosplit flows still open {:?} after the run",
                give_up - end
            );
        }
        stack.poll();
        while let Some(c) = stack.poll_completion() {
            let Some(k) = state.iter().position(|s| match s {
                ZsFlow::Connecting(id) | ZsFlow::Sending(id) => *id == c.conn,
                _ => false,
            }) else {
                continue;
            };
            match c.kind {
                CompletionKind::Connected => state[k] = ZsFlow::Sending(c.conn),
                CompletionKind::Send => free[k].push(c.wr_id as usize % ZS_BUFS),
                CompletionKind::Closed(CloseReason::Graceful) => state[k] = ZsFlow::Done,
                CompletionKind::Closed(r) => {
                    bail!("{}: connection closed: {r:?}", flows[k].2.sender.label())
                }
                _ => {}
            }
        }
        for (k, (_, cc, plan)) in flows.iter().enumerate() {
            match state[k] {
                ZsFlow::Waiting if now >= t0 + plan.start => {
                    stack.set_algorithm(*cc);
                    state[k] = ZsFlow::Connecting(stack.connect(to.into()).context("connect")?);
                }
                ZsFlow::Sending(id) if now >= t0 + plan.stop => {
                    if let Some(i) = stack.conn_info(id) {
                        last[k] = (i.segments_sent, i.retransmits);
                    }
                    // Abort: what is queued is not waited for (as the
                    // Linux senders do); the receiver's count is the
                    // measure.
                    stack.abort(id).context("abort")?;
                    state[k] = ZsFlow::Done;
                }
                ZsFlow::Sending(id) => {
                    while let Some(slot) = free[k].pop() {
                        stack.post_send(id, mrs[k], slot * ZS_BUF, ZS_BUF, (slot) as u64)?;
                    }
                }
                _ => {}
            }
        }
        if now >= next_sample {
            let t_s = now.saturating_duration_since(t0).as_secs_f64();
            for (k, s) in state.iter().enumerate() {
                let ZsFlow::Sending(id) = s else { continue };
                let Some(i) = stack.conn_info(*id) else {
                    continue;
                };
                samples[k].push(FlowSample {
                    t_s,
                    cwnd: i.cwnd,
                    ssthresh: i.ssthresh,
                    srtt_us: i.srtt.unwrap_or_default().as_micros() as u64,
                    min_rtt_us: i.min_rtt.unwrap_or_default().as_micros() as u64,
                    pacing_bps: i.pacing_rate.map(|r| r * 8),
                    in_flight: i.bytes_in_flight,
                    retrans: i.retransmits,
                    state: if i.in_recovery {
                        format!("{}+recovery", i.cc_phase)
                    } else {
                        i.cc_phase.to_owned()
                    },
                });
            }
            while next_sample <= now {
                next_sample += SAMPLE;
            }
        }
    }
    Ok(flows
        .iter()
        .enumerate()
        .map(|(k, (i, _, _))| (*i, (std::mem::take(&mut samples[k]), last[k].0, last[k].1)))
        .collect())
}

/// `TCP_INFO` of a Linux TCP socket.
fn read_linux_tcp_info(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<LinuxTcpInfo> {
    let mut b = [0u8; tcp_info::LEN];
    let n = getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut b)?;
    Ok(LinuxTcpInfo::parse(&b[..n.min(tcp_info::LEN)]))
}

/// Sets `TCP_CONGESTION` on a Linux TCP socket (`"reno"`, `"cubic"`,
/// `"bbr"`: what `net.ipv4.tcp_available_congestion_control` lists; the
/// errno `ENOENT` for one the kernel lacks).
fn set_linux_congestion(fd: std::os::fd::BorrowedFd<'_>, name: &str) -> std::io::Result<()> {
    setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::impair::BottleneckConfig;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_one_taker() {
        assert!((jain(&[5.0, 5.0, 5.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[9.0, 0.0, 0.0]) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(jain(&[0.0, 0.0]), 0.0);
    }

    /// A zerosplit CUBIC flow and a Linux CUBIC flow through a 20 Mbit/s
    /// tbf bottleneck with 10 ms of base RTT: both get through, the
    /// receivers count them apart, both samplers see the path's RTT and
    /// the queue, and together they fill the link.
    #[test]
    fn a_zerosplit_and_a_linux_flow_share_a_tbf_bottleneck() {
        let path = BottleneckPath::create(BottleneckConfig {
            rate_bps: 20_000_000,
            queue_bytes: 25_000,
            rtt: Duration::from_millis(10),
            loss: 0.0,
            mtu: 1500,
        })
        .expect("the bottleneck path");
        let plan = |sender| FlowPlan {
            sender,
            start: Duration::ZERO,
            stop: Duration::from_secs(4),
        };
        let run = run(
            &path,
            &[
                plan(Sender::Zerosplit(Algorithm::Cubic)),
                plan(Sender::Linux("cubic")),
            ],
        )
        .expect("the run");
        let total: f64 = run.flows.iter().map(|f| f.goodput_mbps(1.0, 4.0)).sum();
        assert!(
            (15.0..=20.5).contains(&total),
            "together {total:.1} Mbit/s of 20"
        );
        for f in &run.flows {
            let g = f.goodput_mbps(1.0, 4.0);
            assert!(g > 2.0, "{}: {g:.1} Mbit/s", f.label);
            assert!(
                f.samples.len() > 100,
                "{}: {} samples",
                f.label,
                f.samples.len()
            );
            let min_rtt = f.samples.last().expect("samples").min_rtt_us;
            assert!(
                (9_000..13_000).contains(&min_rtt),
                "{}: min RTT {min_rtt} us",
                f.label
            );
            assert!(
                f.samples.iter().any(|s| s.srtt_us > min_rtt + 3_000),
                "{}: never queued",
                f.label
            );
            assert!(f.segs_out > 1000, "{}: {} segments", f.label, f.segs_out);
        }
        assert!(run.queue.packets > 5_000, "{:?}", run.queue);
    }
}
