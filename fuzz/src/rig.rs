//! One flow wired as the stack wires it: a datapath flow table holding the
//! one flow, the region table and payload area, and a `TcpConnection` in
//! ESTABLISHED. A frame goes through [`Rig::deliver`] the way
//! `datapath::nic` and `control::tcp` take it: the datapath's own receive
//! step ([`datapath::rx::rx_step`]: parse, flow lookup, placement, record),
//! the record's segment handed to the connection, and retirement through
//! the floor on `Event::Received`.
//!
//! Alongside, the rig keeps a shadow of the receive stream: for every
//! stream offset a placement reported as placed, the byte the placing
//! segment carried. [`Rig::deliver`] checks placement against it (every
//! changed area byte lies in posted memory above the floor at an offset
//! that was a gap; placed bytes hold what the segment carried) and
//! [`Rig::advance`] checks that the floor only moves over placed bytes.
//! A `Received` the datapath refuses to retire (the stack's
//! `retire_refused`: the transport counted bytes that were never placed)
//! is a failure too.

use core::time::Duration;

use datapath::counters::RxCounters;
use datapath::flow_table::{FlowId, FlowParams, FlowState, FlowTable};
use datapath::mr::{Access, MrId, MrTable};
use datapath::ms::PostedSegment;
use datapath::payload::Payload;
use datapath::placement::{advance_floor, stream_offset, ChecksumPolicy, Placement};
use datapath::rx::{rx_step, RxStep};
use datapath::wire::{parse_head, Parsed, ParsedSegment};
use proto::Flags;
use transports::tcp::{TcpConfig, TcpConnection};
use transports::{Event, Instant, RxSegment, Transport};

use crate::frames::{self, flow_key, LOCAL_PORT, PEER_PORT};

/// Byte the area is filled with before anything is placed.
pub const CANARY: u8 = 0xa5;

/// Most segments one drain of the connection may produce before it is
/// called a runaway.
pub const MAX_OUTPUT_PER_STEP: usize = 4096;

/// How the rig is built.
#[derive(Debug, Clone)]
pub struct RigSpec {
    /// The peer's ISN.
    pub irs: u32,
    /// Our ISN.
    pub iss: u32,
    /// The connection's configuration.
    pub config: TcpConfig,
    /// Options of the peer's SYN-ACK.
    pub synack_options: Vec<u8>,
    /// Window of the peer's SYN-ACK.
    pub synack_window: u16,
    /// Length of the payload area.
    pub area_len: usize,
    /// Registered regions: (area offset, length, access).
    pub regions: Vec<(usize, usize, Access)>,
    /// Most posted receive segments.
    pub max_recv_segments: usize,
    /// Most disjoint placed ranges.
    pub max_placed_ranges: usize,
    /// Whether [`Rig::deliver`] diffs the area around each placement
    /// (costs a copy of the area per frame).
    pub check_writes: bool,
    /// The flow is IPv6 ([`frames::flow_key6`]) instead of IPv4.
    pub ipv6: bool,
}

/// The flow, its memory and its connection.
#[derive(Debug)]
pub struct Rig {
    /// The datapath's flow table, holding the one flow.
    flows: FlowTable,
    /// The flow.
    id: FlowId,
    /// The peer's ISN.
    irs: u32,
    /// Counters of frames the step did not take for the flow.
    pub rx_counters: RxCounters,
    /// Region table.
    pub mrs: MrTable,
    /// Registered regions with the next free offset inside each.
    regions: Vec<(MrId, usize, usize)>,
    /// The payload area.
    pub area: Vec<u8>,
    /// The connection.
    pub conn: TcpConnection,
    /// Current time.
    pub now: Instant,
    /// Verified content by stream offset (`None`: never placed).
    shadow: Vec<Option<u8>>,
    /// Bytes handed to the application through the floor, from offset 0.
    pub app: Vec<u8>,
    /// Right edge of the window the connection last advertised (stream
    /// offset), as the peer sees it.
    pub advertised_edge: u64,
    /// Whether the connection reported `Closed`.
    pub closed: bool,
    /// Frames that parsed as a segment of the flow and went through
    /// placement to the connection.
    pub segments_in: u64,
    check_writes: bool,
    ipv6: bool,
}

impl Rig {
    /// Builds the flow and opens the connection (active open, answered by
    /// a SYN-ACK from `spec.irs`).
    ///
    /// # Errors
    /// A message if the configuration or handshake fails (the targets pick
    /// specs for which it does not).
    pub fn new(spec: &RigSpec) -> Result<Rig, String> {
        let mut mrs = MrTable::new(spec.area_len, spec.regions.len().max(1));
        let mut regions = Vec::new();
        for &(off, len, access) in &spec.regions {
            if let Ok(id) = mrs.register(off, len, access) {
                regions.push((id, 0, len));
            }
        }
        let mut flows = FlowTable::new(1);
        let id = flows
            .insert(&FlowParams {
                key: if spec.ipv6 {
                    frames::flow_key6()
                } else {
                    flow_key()
                },
                local_mac: [0; 6],
                remote_mac: [0; 6],
                irs: spec.irs,
                iss: spec.iss,
                socket: 0,
                max_recv_segments: spec.max_recv_segments,
                max_send_segments: 4,
                max_placed_ranges: spec.max_placed_ranges,
            })
            .map_err(|e| format!("flow refused: {e}"))?;
        let now = Instant::ZERO;
        let mut conn =
            TcpConnection::connect(now, spec.config.clone(), LOCAL_PORT, PEER_PORT, spec.iss)
                .map_err(|e| format!("config refused: {e}"))?;
        let mut rig = Rig {
            flows,
            id,
            irs: spec.irs,
            rx_counters: RxCounters::default(),
            mrs,
            regions,
            area: vec![CANARY; spec.area_len],
            conn: {
                while conn.poll_transmit(now).is_some() {}
                conn
            },
            now,
            shadow: Vec::new(),
            app: Vec::new(),
            advertised_edge: 0,
            closed: false,
            segments_in: 0,
            check_writes: spec.check_writes,
            ipv6: spec.ipv6,
        };
        let synack = frames::header(
            Flags::SYN | Flags::ACK,
            spec.irs,
            spec.iss.wrapping_add(1),
            spec.synack_window,
            &spec.synack_options,
        );
        rig.now += Duration::from_micros(50);
        rig.conn.handle_segment(
            rig.now,
            &RxSegment {
                header: synack,
                payload_len: 0,
                accepted: 0..0,
                ecn: proto::Ecn::NotEct,
                segment_size: 0,
            },
        );
        if !rig.conn.state().is_synchronized() {
            return Err(format!("handshake failed: {:?}", rig.conn.state()));
        }
        rig.settle()?;
        Ok(rig)
    }

    /// The flow's datapath state.
    ///
    /// # Errors
    /// If the flow left its table (nothing here removes it).
    pub fn flow(&self) -> Result<&FlowState, String> {
        self.flows.get(self.id).ok_or_else(gone)
    }

    /// Whether the flow is IPv6 (its frames are built with
    /// [`frames::build6`]).
    pub fn ipv6(&self) -> bool {
        self.ipv6
    }

    /// The peer's ISN.
    pub fn irs(&self) -> u32 {
        self.irs
    }

    /// End of the posted receive space (0 if the flow is gone).
    pub fn posted_end(&self) -> u64 {
        self.flow().map_or(0, |f| f.recv.posted_end())
    }

    /// Number of registered regions.
    pub fn regions(&self) -> usize {
        self.regions.len()
    }

    /// Posts `len` bytes of region `region` (the next unused part of it)
    /// and tells the connection. Returns whether the post was taken.
    ///
    /// # Errors
    /// A broken invariant seen while the connection reacted.
    pub fn post(&mut self, region: usize, len: usize) -> Result<bool, String> {
        let Some(&(id, next, size)) = self.regions.get(region) else {
            return Ok(false);
        };
        let len = len.min(size - next);
        let flow = self.flows.get_mut(self.id).ok_or_else(gone)?;
        let wr_id = flow.recv.len() as u64;
        if flow.recv.post(&mut self.mrs, id, next, len, wr_id).is_err() {
            return Ok(false);
        }
        let posted_end = flow.recv.posted_end();
        self.regions[region].1 += len;
        self.shadow.resize(posted_end as usize, None);
        self.conn.recv_posted(self.now, len as u64);
        self.settle()?;
        Ok(true)
    }

    /// Lets time pass; runs the connection's timers when due.
    ///
    /// # Errors
    /// A broken invariant, or timers that stay due after running.
    pub fn tick(&mut self, by: Duration) -> Result<(), String> {
        self.now += by;
        for _ in 0..64 {
            match self.conn.poll_timeout() {
                Some(t) if t <= self.now => {
                    self.conn.handle_timeout(self.now);
                    self.settle()?;
                }
                _ => return Ok(()),
            }
        }
        Err(format!("timer still due at {:?} after 64 runs", self.now))
    }

    /// One frame, as a chain of fragments, through the datapath's step
    /// (parse → flow lookup → place) → transport → floor. Returns the
    /// placement, if the frame was the flow's.
    ///
    /// # Errors
    /// The invariant that broke.
    pub fn deliver(&mut self, fragments: &[&[u8]]) -> Result<Option<Placement>, String> {
        // The checker's own view of the frame, to know what it carried.
        let len = fragments.iter().map(|f| f.len()).sum();
        let head = fragments.first().copied().unwrap_or_default();
        let parsed = match parse_head(head, len) {
            Ok(Parsed::Tcp(seg)) => Some(seg),
            _ => None,
        };
        let before = self.check_writes.then(|| self.area.clone());
        let flow = self.flow()?;
        let segs: Vec<PostedSegment> = flow.recv.segments().copied().collect();
        let floor = flow.floor();
        let posted_end = flow.recv.posted_end();
        let start = parsed.as_ref().map(|seg| {
            let data_seq = seg.header.seq.wrapping_add(u32::from(seg.has(Flags::SYN)));
            stream_offset(flow, data_seq)
        });
        // The NIC's own step: parse, look the flow up, place, record.
        let step = rx_step(
            &mut self.flows,
            &mut self.rx_counters,
            fragments,
            &mut self.area,
            ChecksumPolicy::Verify,
            |_| None,
        );
        if let Some(before) = before {
            self.check_changes(&before, &segs, floor, posted_end)?;
        }
        let ours = Some(self.id);
        let record = match step {
            RxStep::Record(record) if record.flow == ours => record,
            RxStep::BadChecksum { flow, placement } if flow == ours => {
                self.segments_in += 1;
                return match placement {
                    Some(p) if p.placed.is_empty() => Ok(Some(p)),
                    Some(p) => Err(format!("bad checksum but placed {:?}", p.placed)),
                    None => Err("a bad checksum of the flow without a placement".into()),
                };
            }
            _ => return Ok(None),
        };
        self.segments_in += 1;
        let (Some(seg), Some(start), Some(p)) = (parsed, start, record.placement) else {
            return Err(format!(
                "a record of the flow the checker cannot read: {record:?}"
            ));
        };
        self.record_placed(&seg, fragments, start, &p, floor, posted_end)?;
        self.now += Duration::from_micros(10);
        self.conn.handle_segment(self.now, &record.segment);
        self.settle()?;
        Ok(Some(p))
    }

    /// Every area byte that changed lies in memory posted (before the
    /// call) at a stream offset in `[floor, posted_end)` that was a gap.
    fn check_changes(
        &self,
        before: &[u8],
        segs: &[PostedSegment],
        floor: u64,
        posted_end: u64,
    ) -> Result<(), String> {
        for (i, (a, b)) in self.area.iter().zip(before).enumerate() {
            if a == b {
                continue;
            }
            let owner = segs
                .iter()
                .find(|s| s.area_start <= i && i < s.area_start + s.len as usize);
            let Some(s) = owner else {
                return Err(format!(
                    "placement wrote area byte {i}, outside posted memory"
                ));
            };
            let off = s.stream_start + (i - s.area_start) as u64;
            if off < floor || off >= posted_end {
                return Err(format!(
                    "placement wrote stream offset {off} outside [floor {floor}, posted end {posted_end})"
                ));
            }
            if self.shadow.get(off as usize).copied().flatten().is_some() {
                return Err(format!("placement overwrote verified stream offset {off}"));
            }
        }
        Ok(())
    }

    /// Learns the content of newly placed offsets and checks that every
    /// placed offset holds what this segment carried.
    fn record_placed(
        &mut self,
        seg: &ParsedSegment,
        fragments: &[&[u8]],
        start: i64,
        p: &Placement,
        floor: u64,
        posted_end: u64,
    ) -> Result<(), String> {
        if p.placed.is_empty() {
            return Ok(());
        }
        let placed = p.placed.range();
        if placed.start < floor || placed.end > posted_end {
            return Err(format!("placed {placed:?} outside [{floor}, {posted_end})"));
        }
        let payload = Payload::in_fragments(fragments, seg.payload_range())
            .ok_or("placed a payload that is not in the frame")?;
        let mut bytes = vec![0u8; payload.len()];
        payload
            .copy_and_sum(0..payload.len(), &mut bytes)
            .map_err(|e| format!("copying the payload: {e}"))?;
        for off in placed.clone() {
            let Some(&b) = usize::try_from(off as i64 - start)
                .ok()
                .and_then(|i| bytes.get(i))
            else {
                return Err(format!(
                    "placed offset {off} is outside the segment's payload"
                ));
            };
            let known = &mut self.shadow[off as usize];
            let want = *known.get_or_insert(b);
            if self.memory_of(off) != Some(want) {
                return Err(format!(
                    "placed offset {off} does not hold its verified byte"
                ));
            }
        }
        Ok(())
    }

    /// The area byte that holds stream offset `off`, while posted.
    fn memory_of(&self, off: u64) -> Option<u8> {
        let (_, mem) = self.flows.get(self.id)?.recv.map(off..off + 1).next()?;
        self.area.get(mem.start).copied()
    }

    /// Moves the floor to `upto` as the stack does on `Received`; on
    /// success, the bytes below it go to the application. Returns whether
    /// the datapath took the move.
    ///
    /// # Errors
    /// The floor moved over a byte never placed, or the application got a
    /// byte other than the one verified there.
    pub fn advance(&mut self, upto: u64) -> Result<bool, String> {
        let flow = self.flow()?;
        let floor = flow.floor();
        let bytes: Vec<Option<u8>> = (floor..upto.min(flow.recv.posted_end()))
            .map(|o| self.memory_of(o))
            .collect();
        let flow = self.flows.get_mut(self.id).ok_or_else(gone)?;
        match advance_floor(flow, &mut self.mrs, upto) {
            Ok(_) if upto > floor => {
                for (o, b) in (floor..upto).zip(bytes) {
                    let verified = self.shadow.get(o as usize).copied().flatten();
                    if verified.is_none() {
                        return Err(format!(
                            "advance_floor to {upto} passed unplaced offset {o}"
                        ));
                    }
                    if b != verified {
                        return Err(format!(
                            "application got {b:?} at {o}, verified {verified:?}"
                        ));
                    }
                    self.app.push(b.unwrap_or_default());
                }
                Ok(true)
            }
            Ok(_) => Ok(true),
            Err(_) => Ok(false),
        }
    }

    /// Drains the connection's output and events, retiring on `Received`.
    fn settle(&mut self) -> Result<(), String> {
        let mut n = 0;
        while let Some(s) = self.conn.poll_transmit(self.now) {
            n += 1;
            if n > MAX_OUTPUT_PER_STEP {
                return Err(format!(
                    "more than {MAX_OUTPUT_PER_STEP} segments in one step"
                ));
            }
            let h = &s.header;
            if h.flags.contains(Flags::ACK) && !h.flags.contains(Flags::SYN) {
                let ack = u64::from(h.ack.wrapping_sub(self.irs.wrapping_add(1)));
                let shift = self.conn.negotiated().rcv_wscale;
                // The window never shrinks from the sender's side (RFC
                // 9293 3.8.6.2.2): the edge is the largest advertised.
                let edge = ack + (u64::from(h.window) << shift);
                self.advertised_edge = self.advertised_edge.max(edge);
            }
        }
        for _ in 0..MAX_OUTPUT_PER_STEP {
            match self.conn.poll_event() {
                Some(Event::Received { upto }) => {
                    if !self.advance(upto)? {
                        let flow = self.flow()?;
                        return Err(format!(
                            "the datapath refused Received {{ upto: {upto} }} (floor {}, placed {:?}, posted end {})",
                            flow.floor(),
                            flow.placed.ranges().collect::<Vec<_>>(),
                            flow.recv.posted_end()
                        ));
                    }
                }
                Some(Event::Discarded { range }) => {
                    // As `Nic::discard`: the refused bytes are forgotten.
                    let flow = self.flows.get_mut(self.id).ok_or_else(gone)?;
                    let floor = flow.floor();
                    flow.placed.remove(range.clone(), floor);
                    for off in range.start.max(floor)..range.end {
                        if let Some(b) = self.shadow.get_mut(off as usize) {
                            *b = None;
                        }
                    }
                }
                Some(Event::Closed { .. }) => self.closed = true,
                Some(_) => {}
                None => return Ok(()),
            }
        }
        Err("events never ran dry".to_string())
    }
}

/// The error of a rig whose flow left its table.
fn gone() -> String {
    "the rig's flow left its flow table".to_string()
}
