//! The hostile kinds as data: [`KINDS`], one named frame builder each,
//! with what a correct receiver does about it ([`Expect`]).
//!
//! Every builder forges frames from the sender's side of the live
//! connection ([`Ctx`]: what the sniffer learned) for one injection round.
//! Payload that a correct TCP must refuse is [`FORGED`] bytes, so a
//! receiver that delivers any of it shows in the byte-exact comparison;
//! payload a correct TCP may legitimately accept (IP options, fragments,
//! odd TCP options) carries the sender's genuine bytes for those sequence
//! numbers, so accepting it is harmless and only dropping or crashing on it
//! shows.
//!
//! Counter names: the datapath's and the stack's `drops()` names, the
//! transport's per-connection drops prefixed `tcp_` (RFC 9293 / RFC 5961 /
//! RFC 7323 reasons).

use std::net::Ipv4Addr;

use proto::{Flags, TcpHeader, TcpOptions};

use super::frame::{self, Forge, DF, IPPROTO_TCP, MF};
use super::sniff::Live;

/// The byte forged payload is made of.
pub const FORGED: u8 = 0xEE;
/// Payload bytes per forged data segment.
const SEG: u32 = 1024;
/// Forged data segments per round: they cover `SEG * AHEAD` bytes from
/// the receiver's latest acknowledgment, where the paced sender's next
/// segments will land.
const AHEAD: u32 = 8;

/// What a correct receiver does with a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Drops it and counts it under one of these names.
    Drop(&'static [&'static str]),
    /// Accepts or ignores it (genuine bytes or harmless): only the stream
    /// and the stack's health are checked.
    Either,
    /// Not the stack's: the steering program passes it to the kernel, and
    /// one of these kernel counters of the receiving namespace
    /// (`Prefix.Name` of `/proc/net/snmp` or `/proc/net/netstat`) must
    /// grow.
    Kernel(&'static [&'static str]),
    /// Passed to the kernel, which drops it without any counter (a TCP
    /// header cut short: `tcp_v4_rcv` discards it before counting): only
    /// the stream and the stack's health are checked.
    KernelUncounted,
    /// The direction turns round: the receiver under test SENDS the stream
    /// (zero-copy chains from application memory that is reused the moment
    /// a send completes) to a Linux reader in the attacker's namespace,
    /// and the forged segments are ACKs from the reader's side. It refuses
    /// what acknowledges data never sent, counting it under one of these
    /// names (RFC 9293 3.10.7.4), and no send completes while a TX
    /// descriptor still points at its memory.
    SenderDrop(&'static [&'static str]),
}

impl Expect {
    /// Whether the stack under test sends the stream in this kind.
    pub fn stack_sends(self) -> bool {
        matches!(self, Expect::SenderDrop(_))
    }
}

/// One hostile kind.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// Short name (the table's row).
    pub name: &'static str,
    /// What it forges.
    pub about: &'static str,
    /// What a correct receiver does.
    pub expect: Expect,
    /// Frames of one round.
    pub build: fn(&mut Ctx<'_>) -> Vec<Vec<u8>>,
}

/// What a builder forges from.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The live connection as the path saw it.
    pub live: Live,
    /// The sender's MAC (source of forged frames).
    pub sender_mac: [u8; 6],
    /// The receiver's MAC.
    pub receiver_mac: [u8; 6],
    /// The sender's whole stream (for genuine bytes).
    pub genuine: &'a [u8],
    /// Round number, from 0.
    pub round: u32,
    /// Flood frames per round for the flood kinds.
    pub flood: u32,
    /// Most flows the receiver's table holds (the table-limit kind opens
    /// more than this many).
    pub table_limit: u32,
    /// A port nobody listens on in the receiver's namespace.
    pub closed_port: u16,
    /// A port inside the receiver's ephemeral range with no connection.
    pub idle_ephemeral_port: u16,
    /// xorshift64 state for flood addresses and ports.
    pub rng: u64,
}

impl Ctx<'_> {
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// A segment from the sender: the receiver's numbers, ACK|PSH, the
    /// timestamps option when the connection uses it, no payload.
    fn seg(&self) -> Forge {
        let l = &self.live;
        let options = match (l.ts_recent, l.receiver_ts) {
            (Some(val), Some(ecr)) => {
                let mut o = vec![1, 1, 8, 10];
                o.extend_from_slice(&val.wrapping_add(1).to_be_bytes());
                o.extend_from_slice(&ecr.to_be_bytes());
                o
            }
            _ => Vec::new(),
        };
        Forge {
            src_mac: self.sender_mac,
            dst_mac: self.receiver_mac,
            src_ip: *l.sender.ip(),
            dst_ip: *l.receiver.ip(),
            ip_options: Vec::new(),
            frag: DF,
            protocol: IPPROTO_TCP,
            tcp: TcpHeader {
                urgent: 0,
                src_port: l.sender.port(),
                dst_port: l.receiver.port(),
                seq: l.rcv_nxt,
                ack: l.snd_nxt,
                flags: Flags::ACK | Flags::PSH,
                window: 1024,
                options: opts(&options),
            },
            urgent: 0,
            payload: Vec::new(),
        }
    }

    /// The sender's genuine bytes from `seq` on (fewer at the stream's end).
    fn genuine_at(&self, seq: u32, len: u32) -> Vec<u8> {
        let off = seq.wrapping_sub(self.live.isn.wrapping_add(1)) as usize;
        let end = (off + len as usize).min(self.genuine.len());
        self.genuine.get(off..end).unwrap_or_default().to_vec()
    }

    /// `AHEAD` forged data segments from the receiver's RCV.NXT + `skip`,
    /// each changed by `lie`.
    fn forged_ahead(&self, skip: u32, lie: impl Fn(&mut Forge)) -> Vec<Vec<u8>> {
        (0..AHEAD)
            .map(|k| {
                let mut f = self.seg();
                f.tcp.seq = self.live.rcv_nxt.wrapping_add(skip + k * SEG);
                f.payload = vec![FORGED; SEG as usize];
                lie(&mut f);
                f.build()
            })
            .collect()
    }

    /// `AHEAD` genuine data segments from RCV.NXT, each changed by `lie`.
    fn genuine_ahead(&self, lie: impl Fn(&mut Forge)) -> Vec<Vec<u8>> {
        (0..AHEAD)
            .filter_map(|k| {
                let mut f = self.seg();
                f.tcp.seq = self.live.rcv_nxt.wrapping_add(k * SEG);
                f.payload = self.genuine_at(f.tcp.seq, SEG);
                (!f.payload.is_empty()).then(|| {
                    lie(&mut f);
                    f.build()
                })
            })
            .collect()
    }

    /// Forged in-window data with a lie applied to the built bytes.
    fn mangled(&self, lie: impl Fn(&mut Vec<u8>)) -> Vec<Vec<u8>> {
        let mut v = self.forged_ahead(0, |_| {});
        v.iter_mut().for_each(lie);
        v
    }

    /// A pure segment from the sender with `flags` at `seq`.
    fn control(&self, flags: Flags, seq: u32) -> Vec<u8> {
        let mut f = self.seg();
        f.tcp.flags = flags;
        f.tcp.seq = seq;
        f.build()
    }

    /// `n` SYNs to `port` from random addresses of 198.19.192.0/18 (not on
    /// any link: the SYN-ACKs go nowhere) and random ports.
    fn syns(&mut self, n: u32, port: u16) -> Vec<Vec<u8>> {
        (0..n)
            .map(|_| {
                let r = self.next();
                let mut f = self.seg();
                f.src_ip = Ipv4Addr::new(198, 19, 192 | (r >> 8) as u8 & 63, r as u8);
                f.tcp.src_port = 1024 + (r >> 16) as u16 % 60000;
                f.tcp.dst_port = port;
                f.tcp.seq = (r >> 32) as u32;
                f.tcp.ack = 0;
                f.tcp.flags = Flags::SYN;
                f.tcp.options = opts(&[2, 4, 5, 0xb4, 1, 1, 4, 2]);
                f.build()
            })
            .collect()
    }
}

/// Raw option bytes as the header's options area (at most 40 bytes; the
/// kinds never build more).
fn opts(raw: &[u8]) -> TcpOptions {
    TcpOptions::new(raw).unwrap_or_default()
}

/// `base` followed by `more`.
fn with(base: &TcpOptions, more: &[u8]) -> TcpOptions {
    let mut v = base.as_slice().to_vec();
    v.extend_from_slice(more);
    opts(&v)
}

/// An option of `kind` with `body` zero bytes, whose length byte lies.
fn option_with_len(kind: u8, len: u8, body: usize) -> Vec<u8> {
    let mut o = vec![kind, len];
    o.resize(2 + body, 0);
    o
}

/// A SACK option (RFC 2018) with one block.
fn sack(left: u32, right: u32) -> Vec<u8> {
    let mut o = vec![1, 1, 5, 10];
    o.extend_from_slice(&left.to_be_bytes());
    o.extend_from_slice(&right.to_be_bytes());
    o
}

const NO_ACK: &[&str] = &["tcp_no_ack", "tcp_unexpected"];
const OOW: &[&str] = &["tcp_out_of_window", "duplicate", "beyond_posted"];
const BAD_ACK: &[&str] = &["tcp_bad_ack"];
const MALFORMED: &[&str] = &["malformed_ipv4", "malformed_tcp", "bad_ip_version"];
/// The kernel's IPv4 header errors (`ip_rcv_core`).
const IN_HDR: &[&str] = &["Ip.InHdrErrors"];
/// What the kernel counts for an IPv4 header that swallows the TCP header:
/// its 40 bytes of "options" are the forged TCP header and payload, which
/// `ip_options_compile` refuses (a header error) or, when those bytes
/// happen to parse as options (they vary with the run's sequence numbers),
/// TCP then finds a checksum error in the bytes after them.
const IHL_SWALLOWS_TCP: &[&str] = &["Ip.InHdrErrors", "Tcp.InCsumErrors"];
/// The kernel's resets to segments for no socket.
const RESETS: &[&str] = &["Tcp.OutRsts"];

/// Every kind, in the order the suite runs them (floods last).
pub const KINDS: &[Kind] = &[
    // Checksums and lengths.
    Kind { name: "ip_bad_checksum", about: "in-window forged data, IPv4 header checksum wrong", expect: Expect::Drop(&["bad_ip_checksum"]),
        build: |c| c.mangled(|f| frame::break_ip_checksum(f)) },
    Kind { name: "tcp_bad_checksum", about: "in-window forged data, TCP checksum wrong", expect: Expect::Drop(&["bad_checksum"]),
        build: |c| c.mangled(|f| frame::break_tcp_checksum(f)) },
    Kind { name: "ip_total_len_short", about: "IPv4 total length ends inside the TCP header", expect: Expect::Drop(MALFORMED),
        build: |c| c.mangled(|f| frame::set_total_len(f, 30)) },
    Kind { name: "ip_total_len_below_ihl", about: "IPv4 total length 12, below the header", expect: Expect::Drop(MALFORMED),
        build: |c| c.mangled(|f| frame::set_total_len(f, 12)) },
    Kind { name: "ip_total_len_long", about: "IPv4 total length 300 bytes past the frame", expect: Expect::Drop(MALFORMED),
        build: |c| c.mangled(|f| { let n = (f.len() - frame::IP + 300) as u16; frame::set_total_len(f, n) }) },
    Kind { name: "ip_ihl_4", about: "IHL 4 (16-byte IPv4 header)", expect: Expect::Kernel(IN_HDR),
        build: |c| c.mangled(|f| frame::set_ihl(f, 4)) },
    Kind { name: "ip_ihl_15", about: "IHL 15: the IPv4 header swallows the TCP header", expect: Expect::Kernel(IHL_SWALLOWS_TCP),
        build: |c| c.mangled(|f| frame::set_ihl(f, 15)) },
    Kind { name: "ip_version_5", about: "version nibble 5 on an IPv4 frame", expect: Expect::Kernel(IN_HDR),
        build: |c| c.mangled(|f| frame::set_version(f, 5)) },
    Kind { name: "frame_cut_in_ip", about: "frame ends 12 bytes into the IPv4 header", expect: Expect::Kernel(IN_HDR),
        build: |c| c.mangled(|f| f.truncate(frame::IP + 12)) },
    Kind { name: "frame_cut_in_tcp", about: "frame and total length end 10 bytes into the TCP header", expect: Expect::KernelUncounted,
        build: |c| c.mangled(|f| { f.truncate(frame::IP + 30); frame::set_total_len(f, 30) }) },
    // A packet socket refuses frames shorter than the Ethernet header.
    Kind { name: "frame_runt", about: "an IPv4 Ethernet header and nothing after it", expect: Expect::Kernel(IN_HDR),
        build: |c| c.mangled(|f| f.truncate(frame::IP)) },
    Kind { name: "tcp_doff_4", about: "TCP data offset 4 (16-byte header)", expect: Expect::Drop(MALFORMED),
        build: |c| c.mangled(|f| frame::set_data_offset(f, 4)) },
    Kind { name: "tcp_doff_past_end", about: "TCP data offset 15 in a 28-byte segment", expect: Expect::Drop(MALFORMED),
        build: |c| c.forged_ahead(0, |f| { f.tcp.options = TcpOptions::EMPTY; f.payload.truncate(8) }).into_iter()
            .map(|mut f| { frame::set_data_offset(&mut f, 15); f }).collect() },
    // IP options and fragments (genuine bytes: a receiver may take them).
    Kind { name: "ip_options_nop", about: "genuine data behind IPv4 options (NOP, EOL)", expect: Expect::Either,
        build: |c| c.genuine_ahead(|f| f.ip_options = vec![1, 1, 1, 0]) },
    Kind { name: "ip_option_lsrr", about: "genuine data with a loose source route option", expect: Expect::Either,
        build: |c| c.genuine_ahead(|f| f.ip_options = vec![131, 7, 4, 198, 19, 255, 1, 0]) },
    Kind { name: "ip_fragment_first", about: "first fragments (MF) of genuine data, never completed", expect: Expect::Drop(&["ip_fragment"]),
        build: |c| c.genuine_ahead(|f| f.frag = MF).into_iter()
            .map(|mut f| { let n = f.len().min(frame::IP + 20 + 32 + 8 * 16); f.truncate(n); let t = (n - frame::IP) as u16; frame::set_total_len(&mut f, t); f }).collect() },
    Kind { name: "ip_fragment_pair", about: "genuine data split in two IPv4 fragments (reassembled by Linux; the steering program drops fragments)", expect: Expect::Drop(&["ip_fragment"]),
        build: |c| fragment_pairs(c) },
    // TCP options (genuine bytes: a receiver may ignore a bad option).
    Kind { name: "tcp_opt_len_0", about: "genuine data, an option of length 0", expect: Expect::Drop(&["tcp_bad_options"]),
        build: |c| c.genuine_ahead(|f| f.tcp.options = opts(&option_with_len(8, 0, 8))) },
    Kind { name: "tcp_opt_len_1", about: "genuine data, an option of length 1", expect: Expect::Drop(&["tcp_bad_options"]),
        build: |c| c.genuine_ahead(|f| f.tcp.options = opts(&option_with_len(8, 1, 8))) },
    Kind { name: "tcp_opt_overrun", about: "genuine data, a SACK option of length 40 in 12 bytes", expect: Expect::Drop(&["tcp_bad_options"]),
        build: |c| c.genuine_ahead(|f| f.tcp.options = opts(&option_with_len(5, 40, 10))) },
    Kind { name: "tcp_opt_unknown", about: "genuine data with unknown option kinds 99 and 254", expect: Expect::Either,
        build: |c| c.genuine_ahead(|f| { let mut o = vec![99, 4, 0, 0, 254, 6, 1, 2, 3, 4]; o.extend_from_slice(f.tcp.options.as_slice()); f.tcp.options = opts(&o) }) },
    Kind { name: "sack_beyond_sent", about: "ACK with a SACK block above SND.NXT", expect: Expect::Either,
        build: |c| { let s = c.live.snd_nxt; let mut f = c.seg(); f.tcp.options = with(&f.tcp.options, &sack(s.wrapping_add(1000), s.wrapping_add(5000))); vec![f.build()] } },
    Kind { name: "sack_below_una", about: "ACK with a SACK block 1 GiB below SND.UNA", expect: Expect::Either,
        build: |c| { let s = c.live.snd_nxt.wrapping_sub(1 << 30); let mut f = c.seg(); f.tcp.options = with(&f.tcp.options, &sack(s, s.wrapping_add(4000))); vec![f.build()] } },
    Kind { name: "sack_inverted", about: "ACK with a SACK block whose left edge is above its right", expect: Expect::Either,
        build: |c| { let s = c.live.snd_nxt; let mut f = c.seg(); f.tcp.options = with(&f.tcp.options, &sack(s.wrapping_add(5000), s)); vec![f.build()] } },
    // Sequence numbers.
    Kind { name: "data_old", about: "forged data 4 KiB below RCV.NXT (already acknowledged)", expect: Expect::Drop(OOW),
        build: |c| c.forged_ahead(0u32.wrapping_sub(AHEAD * SEG + 4096), |_| {}) },
    Kind { name: "data_far_below", about: "forged data 1 GiB below RCV.NXT", expect: Expect::Drop(OOW),
        build: |c| c.forged_ahead(0u32.wrapping_sub(1 << 30), |_| {}) },
    Kind { name: "data_half_space", about: "forged data 2^31 from RCV.NXT (wrapped comparison)", expect: Expect::Drop(OOW),
        build: |c| c.forged_ahead(1 << 31, |_| {}) },
    Kind { name: "data_far_beyond", about: "forged data 1 GiB above RCV.NXT", expect: Expect::Drop(OOW),
        build: |c| c.forged_ahead(1 << 30, |_| {}) },
    // The margin keeps it beyond the window the receiver will have grown
    // to by the time it arrives (the sniffed numbers lag), yet inside the
    // 16 MiB a zerosplit receiver posts.
    Kind { name: "data_beyond_window", about: "forged data 256 KiB past the advertised window's edge", expect: Expect::Drop(OOW),
        build: |c| { let w = c.live.window; c.forged_ahead(w + (256 << 10), |_| {}) } },
    // RFC 5961.
    Kind { name: "rst_in_window", about: "RST in the window but not at RCV.NXT (challenge ACK)", expect: Expect::Drop(&["tcp_bad_rst"]),
        build: |c| vec![c.control(Flags::RST, c.live.rcv_nxt.wrapping_add(8192))] },
    Kind { name: "rst_ack_in_window", about: "RST|ACK in the window but not at RCV.NXT", expect: Expect::Drop(&["tcp_bad_rst"]),
        build: |c| vec![c.control(Flags::RST | Flags::ACK, c.live.rcv_nxt.wrapping_add(8192))] },
    Kind { name: "rst_out_of_window", about: "RST 1 GiB above RCV.NXT", expect: Expect::Drop(&["tcp_bad_rst", "tcp_out_of_window"]),
        build: |c| vec![c.control(Flags::RST, c.live.rcv_nxt.wrapping_add(1 << 30))] },
    Kind { name: "rst_with_data", about: "RST|ACK carrying forged in-window data", expect: Expect::Drop(&["tcp_bad_rst"]),
        build: |c| c.forged_ahead(SEG, |f| f.tcp.flags = Flags::RST | Flags::ACK) },
    Kind { name: "syn_in_window", about: "SYN in the window of the established connection", expect: Expect::Drop(&["tcp_syn_in_window", "tcp_unexpected", "tcp_no_ack", "syn_refused"]),
        build: |c| vec![c.control(Flags::SYN, c.live.rcv_nxt.wrapping_add(100))] },
    Kind { name: "syn_out_of_window", about: "SYN 1 GiB above RCV.NXT", expect: Expect::Drop(&["tcp_unexpected", "tcp_no_ack", "tcp_out_of_window", "syn_refused"]),
        build: |c| vec![c.control(Flags::SYN, c.live.rcv_nxt.wrapping_add(1 << 30))] },
    Kind { name: "syn_ack_in_window", about: "SYN|ACK in the window of the established connection", expect: Expect::Drop(&["tcp_syn_in_window", "tcp_unexpected", "tcp_out_of_window"]),
        build: |c| vec![c.control(Flags::SYN | Flags::ACK, c.live.rcv_nxt.wrapping_add(100))] },
    Kind { name: "syn_with_data", about: "SYN carrying forged in-window data", expect: Expect::Drop(&["syn_payload_ignored", "tcp_unexpected", "tcp_no_ack"]),
        build: |c| c.forged_ahead(0, |f| f.tcp.flags = Flags::SYN) },
    // Forged in-window data that a correct TCP must refuse.
    Kind { name: "data_ack_unsent", about: "forged in-window data acknowledging 1 MiB never sent", expect: Expect::Drop(BAD_ACK),
        build: |c| { let a = c.live.snd_nxt.wrapping_add(1 << 20); c.forged_ahead(0, |f| f.tcp.ack = a) } },
    Kind { name: "data_ack_ancient", about: "forged in-window data with an ACK 1 GiB old (RFC 5961 5.2)", expect: Expect::Drop(BAD_ACK),
        build: |c| { let a = c.live.snd_nxt.wrapping_sub(1 << 30); c.forged_ahead(0, |f| f.tcp.ack = a) } },
    Kind { name: "data_no_ack_flag", about: "forged in-window data without the ACK flag", expect: Expect::Drop(NO_ACK),
        build: |c| c.forged_ahead(0, |f| f.tcp.flags = Flags::PSH) },
    Kind { name: "data_no_flags", about: "forged in-window data with no control bit at all", expect: Expect::Drop(NO_ACK),
        build: |c| c.forged_ahead(0, |f| f.tcp.flags = Flags(0)) },
    Kind { name: "data_fin_no_ack", about: "forged in-window data with FIN and no ACK", expect: Expect::Drop(NO_ACK),
        build: |c| c.forged_ahead(0, |f| f.tcp.flags = Flags::FIN | Flags::PSH) },
    Kind {
        name: "data_stale_timestamp",
        about: "forged in-window data, TSval 2^30 behind TS.Recent (PAWS)",
        expect: Expect::Drop(&["tcp_paws"]),
        build: stale_timestamps,
    },
    // ACKs.
    Kind { name: "ack_unsent", about: "pure ACK for 100 000 bytes never sent", expect: Expect::Drop(BAD_ACK),
        build: |c| { let mut f = c.seg(); f.tcp.ack = c.live.snd_nxt.wrapping_add(100_000); vec![f.build()] } },
    // The stack sends: a peer that ACKs ahead of what it received, up to
    // data still on the stack's TX ring or not yet sent at all.
    Kind { name: "ack_optimistic", about: "the stack sends; ACKs running ahead of the reader, up to 112 KiB past what the path saw sent", expect: Expect::SenderDrop(BAD_ACK),
        build: optimistic_acks },
    Kind { name: "ack_zero_window", about: "pure ACKs closing the sender-side window, forever", expect: Expect::Either,
        build: |c| { let mut f = c.seg(); f.tcp.window = 0; vec![f.build(); 4] } },
    Kind { name: "ack_storm", about: "64 duplicate ACKs per round", expect: Expect::Either,
        build: |c| vec![c.seg().build(); 64] },
    // Floods.
    Kind { name: "stray_ack_listener", about: "ACKs to the listening port from unknown 4-tuples", expect: Expect::Drop(&["stray_segment", "no_connection"]),
        build: |c| { let n = c.flood.min(256); c.syns(n, c.live.receiver.port()).into_iter().map(|mut f| { let at = frame::IP + 20 + 13; f[at] = Flags::ACK.0; frame::fix_tcp_checksum(&mut f); f }).collect() } },
    Kind { name: "closed_port_syn_flood", about: "SYNs to a port nobody listens on", expect: Expect::Kernel(RESETS),
        build: |c| { let (n, p) = (c.flood, c.closed_port); c.syns(n, p) } },
    Kind { name: "ephemeral_port_data", about: "forged data to an unused port of the stack's ephemeral range (not steered: the kernel's)", expect: Expect::Kernel(RESETS),
        build: |c| { let p = c.idle_ephemeral_port; c.forged_ahead(0, |f| f.tcp.dst_port = p) } },
    Kind { name: "flows_beyond_table", about: "SYNs from more distinct 4-tuples than the flow table holds", expect: Expect::Drop(&["flow_table_full", "syn_refused"]),
        build: |c| { let n = c.table_limit + 64; let p = c.live.receiver.port(); if c.round == 0 { c.syns(n, p) } else { Vec::new() } } },
    Kind { name: "syn_flood", about: "SYNs from random addresses and ports to the listening port", expect: Expect::Drop(&["syn_refused", "flow_table_full"]),
        build: |c| { let (n, p) = (c.flood, c.live.receiver.port()); c.syns(n, p) } },
];

/// ACKs from the reader's side running ahead of it: from what the path
/// saw the stack send up to 112 KiB past it (data on the stack's TX ring,
/// or never sent). Each advertises the reader's real right window edge
/// (what remains of it past the forged ACK), so the stack never sends
/// beyond what the reader takes: the forgery lies about what arrived, not
/// about the room. Nothing until the reader's own ACK was seen.
fn optimistic_acks(c: &mut Ctx<'_>) -> Vec<Vec<u8>> {
    let Some(edge) = c.live.sender_edge else {
        return Vec::new();
    };
    (0..AHEAD)
        .map(|k| {
            let mut f = c.seg();
            f.tcp.flags = Flags::ACK;
            f.tcp.ack = c.live.snd_nxt.wrapping_add(k * 16 * SEG);
            let room = (edge.wrapping_sub(f.tcp.ack) as i32).max(0) as u32;
            f.tcp.window = (room >> c.live.sender_wscale).min(0xffff) as u16;
            f.build()
        })
        .collect()
}

/// Forged in-window data whose TSval is 2^30 behind TS.Recent; nothing
/// while the connection shows no timestamps (without them the segment
/// would be a valid one, not a stale one).
fn stale_timestamps(c: &mut Ctx<'_>) -> Vec<Vec<u8>> {
    let Some(recent) = c.live.ts_recent.filter(|_| c.live.receiver_ts.is_some()) else {
        return Vec::new();
    };
    let stale = recent.wrapping_sub(1 << 30).to_be_bytes();
    c.forged_ahead(0, |f| {
        let mut o = f.tcp.options.as_slice().to_vec();
        o[4..8].copy_from_slice(&stale);
        f.tcp.options = opts(&o);
    })
}

/// Genuine data at RCV.NXT split into two IPv4 fragments (first: TCP
/// header and 32 payload bytes, MF; second: the rest) that reassemble
/// into a valid segment.
fn fragment_pairs(c: &mut Ctx<'_>) -> Vec<Vec<u8>> {
    let whole = c.genuine_ahead(|_| {});
    let mut out = Vec::new();
    for f in whole.into_iter().take(2) {
        let l4 = &f[frame::IP + 20..];
        let cut = 40.min(l4.len());
        let (a, b) = l4.split_at(cut);
        for (part, off, more) in [(a, 0u16, true), (b, (cut / 8) as u16, false)] {
            let mut g = f[..frame::IP + 20].to_vec();
            g.extend_from_slice(part);
            g[frame::IP + 6..frame::IP + 8]
                .copy_from_slice(&(off | if more { MF } else { 0 }).to_be_bytes());
            let t = (g.len() - frame::IP) as u16;
            frame::set_total_len(&mut g, t);
            out.push(g);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV4;

    fn ctx(genuine: &[u8]) -> Ctx<'_> {
        Ctx {
            live: Live {
                sender: SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 40000),
                receiver: SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 5201),
                isn: 1000,
                receiver_isn: 5000,
                rcv_nxt: 1001 + 4096,
                snd_nxt: 5001,
                window: 65535,
                wscale: 7,
                ts_recent: Some(77),
                receiver_ts: Some(88),
                sender_edge: Some(5001 + 65535),
                sender_wscale: 7,
            },
            sender_mac: [2, 0, 0, 0, 0, 2],
            receiver_mac: [2, 0, 0, 0, 0, 1],
            genuine,
            round: 0,
            flood: 10,
            table_limit: 4,
            closed_port: 5999,
            idle_ephemeral_port: 40500,
            rng: 7,
        }
    }

    #[test]
    fn there_are_at_least_forty_kinds_with_distinct_names_each_building_frames() {
        assert!(KINDS.len() >= 40, "{} kinds", KINDS.len());
        let mut names: Vec<_> = KINDS.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KINDS.len(), "names are distinct");
        let genuine = vec![1u8; 1 << 20];
        for k in KINDS {
            let frames = (k.build)(&mut ctx(&genuine));
            assert!(!frames.is_empty(), "{} builds frames", k.name);
            assert!(
                frames.iter().all(|f| f.len() <= 1514),
                "{} fits the MTU",
                k.name
            );
        }
    }

    #[test]
    fn genuine_kinds_carry_the_senders_bytes_at_their_sequence_numbers() {
        let genuine: Vec<u8> = (0..1 << 16).map(|i: u32| (i % 251) as u8).collect();
        let c = ctx(&genuine);
        let frames = c.genuine_ahead(|_| {});
        let Ok(datapath::wire::Parsed::Tcp(seg)) = datapath::wire::parse(&frames[1]) else {
            panic!("parses");
        };
        let off = seg.header.seq.wrapping_sub(1001) as usize;
        assert_eq!(
            &frames[1][seg.payload_range()],
            &genuine[off..off + SEG as usize]
        );
    }
}
