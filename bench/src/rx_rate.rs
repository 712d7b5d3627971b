//! RX rates on a veth pair, measured in one run: the raw AF_XDP ceiling
//! (receive and recycle, nothing else) and the datapath (parse, verify the
//! checksum, look the flow up, place the payload at its stream offset).
//!
//! The sender is an AF_XDP socket in the peer namespace that builds TCP
//! segments of one flow with the datapath's own TX builder and sends them as
//! fast as the ring takes them. For the datapath run the two sides close the
//! loop through shared memory instead of ACK packets: the receiver publishes
//! its in-order point, the sender keeps at most the receiver's posted window
//! in flight and goes back to the in-order point when it stalls (go-back-N),
//! so drops at the receiver are repaired and the goodput figure is real.
//! At the end the receiver's memory is compared with the sender's pattern.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use datapath::flow_table::{FlowId, FlowParams, FlowState};
use datapath::mr::{Access, MrId, MrTable};
use datapath::nic::{Nic, NicConfig, NicCounters, RxRecord};
use datapath::steer::{Proto, Steering, XdpMode};
use datapath::tx::{self, TxSegment};
use datapath::wire::{Ecn, FlowKey};
use datapath::{config::XskConfig, raw::XskPort};
use proto::{Flags, TcpHeader};

use zerosplit_lab::{in_netns, HarnessError, NetNs, VethPair};

const DPORT: u16 = 9100;
const SPORT: u16 = 41000;
const ISS: u32 = 0xffff_f000;

/// What to measure.
#[derive(Debug, Clone)]
pub struct RxRateConfig {
    /// MTU of the veth pair (above ~3500 the sockets use multi-buffer).
    pub mtu: u32,
    /// How long each measurement sends.
    pub duration: Duration,
    /// Receive memory posted at once (the sender's window).
    pub window: usize,
    /// Size of each posted receive segment.
    pub chunk: usize,
}

impl Default for RxRateConfig {
    fn default() -> Self {
        RxRateConfig {
            mtu: 1500,
            duration: Duration::from_secs(3),
            window: 8 << 20,
            chunk: 256 << 10,
        }
    }
}

/// Packets and bytes over a time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rate {
    /// Packets received.
    pub packets: u64,
    /// Ethernet frame bytes received.
    pub bytes: u64,
    /// Measurement time in seconds.
    pub seconds: f64,
}

impl Rate {
    /// Million packets per second.
    pub fn mpps(&self) -> f64 {
        self.packets as f64 / self.seconds / 1e6
    }

    /// Gigabits per second of frame bytes.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds / 1e9
    }
}

/// What one run found.
#[derive(Debug, Clone)]
pub struct RxRateReport {
    /// MTU used.
    pub mtu: u32,
    /// AF_XDP receive and recycle only.
    pub raw: Rate,
    /// Packets through the datapath (parse + verify + place).
    pub datapath: Rate,
    /// Payload bytes completed in order per second, in Gbit/s.
    pub goodput_gbps: f64,
    /// Bytes completed in order.
    pub completed: u64,
    /// Packets the sender sent in the datapath run (retransmissions included).
    pub sent: u64,
    /// Receive memory equals the sender's pattern.
    pub verified: bool,
    /// Poll-loop counters of the datapath run.
    pub counters: NicCounters,
    /// Per-flow placement counters, as (name, value).
    pub flow_counters: Vec<(&'static str, u64)>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RxRateError {
    /// Setting up namespaces or veth failed.
    #[error(transparent)]
    Harness(#[from] HarnessError),
    /// A datapath operation failed.
    #[error("{0}")]
    Datapath(String),
}

fn err(context: &str, e: impl std::fmt::Display) -> RxRateError {
    RxRateError::Datapath(format!("{context}: {e}"))
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn xsk_config(mtu: u32, mr_bytes: usize) -> XskConfig {
    let mut c = XskConfig {
        multi_buffer: mtu > 3000,
        ..XskConfig::default()
    };
    c.umem.mr_bytes = mr_bytes;
    c
}

/// Builds a fresh veth pair and measures raw then datapath RX rates.
///
/// # Errors
/// Namespace/veth setup or a datapath operation failed.
pub fn run(config: &RxRateConfig) -> Result<RxRateReport, RxRateError> {
    if config.chunk == 0
        || config.window < 2 * config.chunk
        || !config.window.is_multiple_of(config.chunk)
    {
        return Err(RxRateError::Datapath(format!(
            "window ({}) must be a multiple of chunk ({}) and hold at least two chunks",
            config.window, config.chunk
        )));
    }
    let stack = NetNs::new("zrr")?;
    let peer = NetNs::new("zrs")?;
    let pair = VethPair::create(&stack, &peer, config.mtu)?;
    let raw = measure_raw(config, &stack, &peer, &pair)?;
    measure_datapath(config, &stack, &peer, &pair, raw)
}

/// What the receiver publishes to the sender instead of ACK packets.
#[derive(Debug, Default)]
struct Feedback {
    /// In-order point (every stream byte below it is placed).
    floor: AtomicU64,
    /// End of the first hole above the floor: start of the lowest placed
    /// range beyond it (`u64::MAX` when there is none).
    hole_end: AtomicU64,
}

struct Sender<'a> {
    config: &'a RxRateConfig,
    pair: &'a VethPair,
    /// The receiver's in-order point and hole; `None` for the raw run.
    feedback: Option<&'a Feedback>,
    start: &'a AtomicBool,
}

/// Where the sender is in the stream.
struct SendState {
    /// Next new byte to send.
    next: u64,
    /// End of the send segments posted so far.
    posted_end: u64,
    /// Laps of the send region posted (the work-request id).
    lap: u64,
    /// Packets queued.
    sent: u64,
    /// The receiver's in-order point when last seen, and since when.
    last_floor: u64,
    floor_moved: Instant,
    /// Selective repeat: `resend` walks the first hole once per stall.
    resend: Option<(u64, u64)>,
}

/// What the sender does next.
enum Step {
    /// Send stream range `start..end`.
    Send(u64, u64),
    /// Nothing to send now: flush and look again.
    Wait,
}

impl Sender<'_> {
    /// Sends for the configured duration; returns packets sent.
    fn run(&self) -> Result<u64, RxRateError> {
        let w = self.config.window;
        let (mut port, mut mrs, mr, mut flow) = self.open()?;
        let mss = (self.config.mtu - 40) as u64;
        let limit = (w - self.config.chunk) as u64;
        let mut st = SendState {
            next: 0,
            posted_end: 0,
            lap: 0,
            sent: 0,
            last_floor: 0,
            floor_moved: Instant::now(),
            resend: None,
        };
        while !self.start.load(Ordering::Acquire) {
            thread::yield_now();
        }
        let deadline = Instant::now() + self.config.duration;
        let mtu = self.config.mtu as usize;
        let jumbo = mtu + 14 > port.umem().frame_size() as usize;
        while Instant::now() < deadline {
            let floor = self.feedback.map_or(st.next.saturating_sub(limit), |f| {
                f.floor.load(Ordering::Acquire)
            });
            if floor != st.last_floor {
                (st.last_floor, st.floor_moved) = (floor, Instant::now());
            }
            flow.send
                .retire_through(&mut mrs, floor.min(st.posted_end))
                .map_err(|e| err("sender retire", e))?;
            while st.posted_end < st.next + limit + mss {
                flow.send
                    .post(&mut mrs, mr, 0, w, st.lap)
                    .map_err(|e| err("sender post", e))?;
                st.posted_end += w as u64;
                st.lap += 1;
            }
            let Step::Send(start, end) = self.step(&mut st, floor, limit, mss) else {
                port.flush();
                continue;
            };
            if queue_segment(&mut port, &mut flow, start..end, jumbo, mtu)? {
                match &mut st.resend {
                    Some((at, _)) if *at == start => *at = end,
                    _ => st.next = end,
                }
                st.sent += 1;
                if st.sent.is_multiple_of(32) {
                    port.flush();
                }
            } else {
                port.flush();
            }
        }
        port.flush();
        Ok(st.sent)
    }

    /// The sender's socket, its send region filled with the pattern, and
    /// the flow it sends on.
    fn open(&self) -> Result<(XskPort, MrTable, MrId, FlowState), RxRateError> {
        let (a, b) = (&self.pair.a, &self.pair.b);
        let w = self.config.window;
        let mut port = XskPort::open(&b.ifname, 0, &xsk_config(self.config.mtu, w))
            .map_err(|e| err("sender socket", e))?;
        let mut mrs = MrTable::new(port.umem().mr_len(), 4);
        let mr = mrs
            .register(0, w, Access::SEND)
            .map_err(|e| err("sender region", e))?;
        port.umem_mut().mr_mut()[..w].copy_from_slice(&pattern(w));
        let flow = FlowState::new(&FlowParams {
            key: FlowKey {
                remote_ip: a.addr.into(),
                local_ip: b.addr.into(),
                remote_port: DPORT,
                local_port: SPORT,
            },
            local_mac: b.mac,
            remote_mac: a.mac,
            irs: 0,
            iss: ISS,
            socket: 0,
            max_recv_segments: 1,
            max_send_segments: 64,
            max_placed_ranges: 1,
        });
        Ok((port, mrs, mr, flow))
    }

    /// The next range to send: the hole being resent, nothing while the
    /// window is full or the receiver stalls (arming a resend of its first
    /// hole), else new data.
    fn step(&self, st: &mut SendState, floor: u64, limit: u64, mss: u64) -> Step {
        match (self.feedback, st.resend) {
            (_, Some((at, until))) if at < until && at >= floor => {
                Step::Send(at, (at + mss).min(until))
            }
            (Some(fb), _)
                if st.next >= floor + limit
                    || st.floor_moved.elapsed() > Duration::from_millis(1) && st.next > floor =>
            {
                // Window full, or no progress for a while: the receiver
                // is missing [floor, hole_end); send that again.
                if st.floor_moved.elapsed() > Duration::from_micros(500) {
                    let hole_end = fb.hole_end.load(Ordering::Acquire).min(st.next);
                    st.resend = Some((floor, hole_end));
                    st.floor_moved = Instant::now();
                }
                Step::Wait
            }
            _ => {
                st.resend = None;
                Step::Send(st.next, st.next + mss)
            }
        }
    }
}

/// Builds and queues one segment carrying stream range `range`: copied
/// next to its header, or (`jumbo`) as a header frame plus fragments.
/// Returns `false` when no TX room was free.
fn queue_segment(
    port: &mut XskPort,
    flow: &mut FlowState,
    range: std::ops::Range<u64>,
    jumbo: bool,
    mtu: usize,
) -> Result<bool, RxRateError> {
    let seg = TxSegment {
        header: TcpHeader {
            urgent: 0,
            seq: ISS.wrapping_add(1).wrapping_add(range.start as u32),
            ack: 0,
            flags: Flags::ACK,
            window: 65535,
            ..TcpHeader::default()
        },
        payload: Some(range),
        ecn: Ecn::NotEct,
        segment_size: 0,
    };
    let mut build_error = None;
    let queued = if jumbo {
        // Larger than a frame: header frame + payload fragments.
        port.transmit_chain(|frame, area, parts| {
            match tx::build_chain(flow, &seg, area, mtu, frame) {
                Ok(c) => {
                    parts.extend_from_slice(c.fragments());
                    c.header_len
                }
                Err(e) => {
                    build_error = Some(e);
                    0
                }
            }
        })
    } else {
        port.transmit(
            |frame, area| match tx::build_copy(flow, &seg, area, mtu, frame) {
                Ok(n) => n,
                Err(e) => {
                    build_error = Some(e);
                    0
                }
            },
        )
    }
    .map_err(|e| err("sender transmit", e))?;
    match build_error {
        Some(e) => Err(err("sender build", e)),
        None => Ok(queued),
    }
}

fn measure_raw(
    config: &RxRateConfig,
    stack: &NetNs,
    peer: &NetNs,
    pair: &VethPair,
) -> Result<Rate, RxRateError> {
    let start = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let receiver = s.spawn(|| {
            in_netns(stack, || -> Result<Rate, RxRateError> {
                let mut steering = Steering::attach(&pair.a.ifname, XdpMode::Native)
                    .map_err(|e| err("attach", e))?;
                let mut port = XskPort::open(&pair.a.ifname, 0, &xsk_config(config.mtu, 1 << 20))
                    .map_err(|e| err("receiver socket", e))?;
                steering
                    .set_socket(0, port.fd())
                    .map_err(|e| err("slot", e))?;
                steering
                    .insert_listen(pair.a.addr, DPORT, Proto::Tcp)
                    .map_err(|e| err("listen", e))?;
                start.store(true, Ordering::Release);
                let mut rate = Rate::default();
                let t0 = Instant::now();
                let mut last = t0;
                while !stop.load(Ordering::Acquire) && t0.elapsed() < config.duration * 3 {
                    let n = port.receive(256, |pkt, _| rate.bytes += pkt.len() as u64);
                    if n > 0 {
                        rate.packets += u64::from(n);
                        last = Instant::now();
                    }
                }
                rate.seconds = last.duration_since(t0).as_secs_f64().max(1e-9);
                Ok(rate)
            })
        });
        let sent = in_netns(peer, || {
            Sender {
                config,
                pair,
                feedback: None,
                start: &start,
            }
            .run()
        });
        thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Release);
        let rate = receiver
            .join()
            .map_err(|_| RxRateError::Datapath("raw receiver panicked".into()))?;
        sent?;
        rate
    })
}

fn measure_datapath(
    config: &RxRateConfig,
    stack: &NetNs,
    peer: &NetNs,
    pair: &VethPair,
    raw: Rate,
) -> Result<RxRateReport, RxRateError> {
    let start = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let feedback = Feedback {
        floor: AtomicU64::new(0),
        hole_end: AtomicU64::new(u64::MAX),
    };
    thread::scope(|s| {
        let receiver = s.spawn(|| {
            in_netns(stack, || {
                Receiver {
                    config,
                    pair,
                    feedback: &feedback,
                    start: &start,
                    stop: &stop,
                }
                .run(raw)
            })
        });
        let sent = in_netns(peer, || {
            Sender {
                config,
                pair,
                feedback: Some(&feedback),
                start: &start,
            }
            .run()
        });
        thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Release);
        let mut report = receiver
            .join()
            .map_err(|_| RxRateError::Datapath("datapath receiver panicked".into()))??;
        report.sent = sent?;
        Ok(report)
    })
}

/// The datapath side: places the sender's segments, completes and reposts
/// receive chunks as the in-order point moves, and publishes it.
struct Receiver<'a> {
    config: &'a RxRateConfig,
    pair: &'a VethPair,
    feedback: &'a Feedback,
    start: &'a AtomicBool,
    stop: &'a AtomicBool,
}

/// The receiver's in-order point and the placed ranges above it.
#[derive(Default)]
struct InOrder {
    rcv_nxt: u64,
    pending: Vec<(u64, u64)>,
}

impl InOrder {
    /// Takes the placed ranges of `records` in; returns the bytes on the wire.
    fn absorb(&mut self, records: &[RxRecord]) -> u64 {
        let mut bytes = 0;
        for r in records {
            bytes += u64::from(r.segment.payload_len) + 54;
            let Some(p) = r.placement else { continue };
            if p.placed.is_empty() {
                continue;
            }
            if p.placed.start <= self.rcv_nxt {
                self.rcv_nxt = self.rcv_nxt.max(p.placed.end);
            } else {
                self.pending.push((p.placed.start, p.placed.end));
            }
        }
        if !self.pending.is_empty() {
            self.pending.sort_unstable();
            for &(s0, e0) in &self.pending {
                if s0 <= self.rcv_nxt {
                    self.rcv_nxt = self.rcv_nxt.max(e0);
                }
            }
            let rcv_nxt = self.rcv_nxt;
            self.pending.retain(|&(_, e0)| e0 > rcv_nxt);
        }
        bytes
    }
}

impl Receiver<'_> {
    fn run(&self, raw: Rate) -> Result<RxRateReport, RxRateError> {
        let config = self.config;
        let w = config.window;
        let (mut nic, id, mr) = self.open()?;
        let chunks = w / config.chunk;
        let mut next_wr = chunks as u64;
        let mut order = InOrder::default();
        let (mut records, mut completions) = (Vec::with_capacity(512), Vec::new());
        let mut rate = Rate::default();
        self.start.store(true, Ordering::Release);
        let t0 = Instant::now();
        let mut last = t0;
        while !self.stop.load(Ordering::Acquire) && t0.elapsed() < config.duration * 3 {
            records.clear();
            let n = nic.poll_rx(256, &mut records);
            if n == 0 {
                continue;
            }
            rate.packets += u64::from(n);
            last = Instant::now();
            let before = order.rcv_nxt;
            rate.bytes += order.absorb(&records);
            if order.rcv_nxt > before {
                completions.clear();
                nic.complete_recv(id, order.rcv_nxt, &mut completions)
                    .map_err(|e| err("complete", e))?;
                for c in &completions {
                    let off = (c.wr_id as usize % chunks) * config.chunk;
                    nic.post_recv(id, mr, off, config.chunk, next_wr)
                        .map_err(|e| err("repost", e))?;
                    next_wr += 1;
                }
                self.feedback.floor.store(order.rcv_nxt, Ordering::Release);
            }
            self.feedback.hole_end.store(
                order.pending.first().map_or(u64::MAX, |p| p.0),
                Ordering::Release,
            );
        }
        rate.seconds = last.duration_since(t0).as_secs_f64().max(1e-9);
        let rcv_nxt = order.rcv_nxt;
        let verified = rcv_nxt >= w as u64
            && nic.memory(mr).map_err(|e| err("memory", e))? == pattern(w).as_slice();
        let flow_counters = nic
            .flow(id)
            .map(|f| f.counters.iter().filter(|(_, v)| *v > 0).collect())
            .unwrap_or_default();
        Ok(RxRateReport {
            mtu: config.mtu,
            raw,
            datapath: rate,
            goodput_gbps: rcv_nxt as f64 * 8.0 / rate.seconds / 1e9,
            completed: rcv_nxt,
            sent: 0,
            verified,
            counters: nic.counters(),
            flow_counters,
        })
    }

    /// The datapath with the sender's flow installed and the whole window
    /// posted in chunks.
    fn open(&self) -> Result<(Nic, FlowId, MrId), RxRateError> {
        let (config, a) = (self.config, &self.pair.a);
        let w = config.window;
        let nic_config = NicConfig {
            mtu: config.mtu as usize,
            xsk: xsk_config(config.mtu, w),
            ..NicConfig::default()
        };
        let mut nic = Nic::open(&a.ifname, nic_config).map_err(|e| err("open datapath", e))?;
        let key = FlowKey {
            remote_ip: self.pair.b.addr.into(),
            local_ip: a.addr.into(),
            remote_port: SPORT,
            local_port: DPORT,
        };
        let id = nic
            .add_flow(key, a.mac, self.pair.b.mac, ISS, 1)
            .map_err(|e| err("add flow", e))?;
        let mr = nic
            .register_memory(w, Access::RECV)
            .map_err(|e| err("register", e))?;
        for k in 0..w / config.chunk {
            nic.post_recv(id, mr, k * config.chunk, config.chunk, k as u64)
                .map_err(|e| err("post", e))?;
        }
        Ok((nic, id, mr))
    }
}
