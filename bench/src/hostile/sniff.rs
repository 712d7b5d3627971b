//! The attacker on the path: an `AF_PACKET` socket in the sender's
//! namespace that watches the receiver's segments of the live connection
//! and learns what a forger needs to land inside its window — the
//! sender's initial sequence number (from the SYN-ACK), the receiver's
//! latest acknowledgment, its window and window scale, and the
//! timestamps being exchanged (RFC 7323).

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use datapath::wire::{parse, Parsed};
use proto::Flags;
use transports::tcp::options;
use zerosplit_lab::{PacketError, PacketSocket, RecvMeta, MAX_BATCH};

/// What the path saw of one connection, from the receiver's segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    /// The sender (the Linux client, in the attacker's namespace).
    pub sender: SocketAddrV4,
    /// The receiver (zerosplit or Linux, the victim).
    pub receiver: SocketAddrV4,
    /// The sender's initial sequence number.
    pub isn: u32,
    /// The receiver's initial sequence number.
    pub receiver_isn: u32,
    /// The receiver's latest acknowledgment (its RCV.NXT).
    pub rcv_nxt: u32,
    /// The receiver's highest sequence number seen sent, past its
    /// payload (its SND.NXT as far as the path knows).
    pub snd_nxt: u32,
    /// The receiver's window in bytes (scaled).
    pub window: u32,
    /// The receiver's window scale (from its SYN-ACK).
    pub wscale: u8,
    /// The receiver's latest TSecr: the sender's recent TSval (TS.Recent).
    pub ts_recent: Option<u32>,
    /// The receiver's latest TSval.
    pub receiver_ts: Option<u32>,
    /// The right edge of the sender's own receive window (its latest
    /// acknowledgment plus its scaled window), once it sent an ACK: how
    /// far the receiver may send to it (the stack-sends kinds).
    pub sender_edge: Option<u32>,
    /// The sender's window scale (from its SYN).
    pub sender_wscale: u8,
}

/// Watches the receiver's side of connections to `receiver` on one
/// interface of the sender's namespace.
#[derive(Debug)]
pub struct Sniffer {
    sock: PacketSocket,
    receiver: SocketAddrV4,
    sender_ip: Ipv4Addr,
    bufs: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
    /// Connections seen, by the sender's port (a handful at most: one per
    /// kind, and the sniffer is opened per kind).
    seen: Vec<Live>,
    /// The window scale of the sender's latest SYN, until its connection
    /// is seen.
    syn_wscale: u8,
}

impl Sniffer {
    /// Opens the socket on `ifname` (the calling thread's namespace).
    ///
    /// # Errors
    /// The packet socket could not be opened.
    pub fn open(
        ifname: &str,
        receiver: SocketAddrV4,
        sender_ip: Ipv4Addr,
    ) -> Result<Self, PacketError> {
        Ok(Sniffer {
            sock: PacketSocket::open_rx_both(ifname, 4 << 20)?,
            receiver,
            sender_ip,
            bufs: vec![vec![0u8; 2048]; MAX_BATCH],
            metas: vec![RecvMeta::default(); MAX_BATCH],
            seen: Vec::new(),
            syn_wscale: 0,
        })
    }

    /// Reads every frame waiting (bounded: at most 64 batches) and updates
    /// what is known.
    ///
    /// # Errors
    /// The socket failed.
    pub fn drain(&mut self) -> Result<(), PacketError> {
        for _ in 0..64 {
            let n = self.sock.recv_batch(&mut self.bufs, &mut self.metas)?;
            for i in 0..n {
                let len = self.metas[i].len;
                let frame = std::mem::take(&mut self.bufs[i]);
                if self.metas[i].outgoing {
                    self.learn_sender(&frame[..len]);
                } else {
                    self.learn(&frame[..len]);
                }
                self.bufs[i] = frame;
            }
            if n < MAX_BATCH {
                break;
            }
        }
        Ok(())
    }

    fn learn(&mut self, frame: &[u8]) {
        let Ok(Parsed::Tcp(seg)) = parse(frame) else {
            return;
        };
        // `key` is from the frame's destination's side: the sender's.
        let (k, h) = (seg.key, seg.header);
        if k.remote_ip != IpAddr::V4(*self.receiver.ip())
            || k.remote_port != self.receiver.port()
            || k.local_ip != IpAddr::V4(self.sender_ip)
        {
            return;
        }
        let parsed = options::parse(&h.options).unwrap_or_default();
        let (ts, ws) = (parsed.timestamp, parsed.window_scale.map(|w| w.min(14)));
        let sender = SocketAddrV4::new(self.sender_ip, k.local_port);
        if h.has(Flags::SYN | Flags::ACK) {
            self.seen.retain(|l| l.sender != sender);
            self.seen.push(Live {
                sender,
                receiver: self.receiver,
                isn: h.ack.wrapping_sub(1),
                receiver_isn: h.seq,
                rcv_nxt: h.ack,
                snd_nxt: h.seq.wrapping_add(1),
                window: u32::from(h.window),
                wscale: ws.unwrap_or(0),
                ts_recent: ts.map(|t| t.1),
                receiver_ts: ts.map(|t| t.0),
                sender_edge: None,
                sender_wscale: self.syn_wscale,
            });
            return;
        }
        let Some(live) = self.seen.iter_mut().find(|l| l.sender == sender) else {
            return;
        };
        if h.has(Flags::ACK) && h.ack.wrapping_sub(live.rcv_nxt) as i32 >= 0 {
            live.rcv_nxt = h.ack;
            live.window = u32::from(h.window) << live.wscale;
        }
        // The receiver's next sequence number past this segment (it sends
        // data when it is the stack under test sending).
        let end = h
            .seq
            .wrapping_add(seg.payload_len)
            .wrapping_add(u32::from(h.has(Flags::FIN)));
        if end.wrapping_sub(live.snd_nxt) as i32 > 0 {
            live.snd_nxt = end;
        }
        if let Some((val, ecr)) = ts {
            live.receiver_ts = Some(val);
            if ecr != 0 {
                live.ts_recent = Some(ecr);
            }
        }
    }

    /// The sender's own segments (outgoing on the sniffed interface): its
    /// window scale and the right edge of its receive window.
    fn learn_sender(&mut self, frame: &[u8]) {
        let Ok(Parsed::Tcp(seg)) = parse(frame) else {
            return;
        };
        // `key` is from the frame's destination's side: the receiver's.
        let (k, h) = (seg.key, seg.header);
        if k.local_ip != IpAddr::V4(*self.receiver.ip())
            || k.local_port != self.receiver.port()
            || k.remote_ip != IpAddr::V4(self.sender_ip)
        {
            return;
        }
        if h.has(Flags::SYN) {
            let parsed = options::parse(&h.options).unwrap_or_default();
            self.syn_wscale = parsed.window_scale.map_or(0, |w| w.min(14));
            return;
        }
        let sender = SocketAddrV4::new(self.sender_ip, k.remote_port);
        let Some(live) = self.seen.iter_mut().find(|l| l.sender == sender) else {
            return;
        };
        if h.has(Flags::ACK) {
            let edge = h
                .ack
                .wrapping_add(u32::from(h.window) << live.sender_wscale);
            if live
                .sender_edge
                .is_none_or(|e| edge.wrapping_sub(e) as i32 > 0)
            {
                live.sender_edge = Some(edge);
            }
        }
    }

    /// The connection from `sender`, once its SYN-ACK was seen.
    pub fn live(&self, sender: SocketAddrV4) -> Option<Live> {
        self.seen.iter().find(|l| l.sender == sender).copied()
    }

    /// Drains until the connection from `sender` has been seen past its
    /// handshake, or `timeout` passes.
    ///
    /// # Errors
    /// The socket failed.
    pub fn wait_live(
        &mut self,
        sender: SocketAddrV4,
        timeout: Duration,
    ) -> Result<Option<Live>, PacketError> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            self.sock.wait_readable(Duration::from_millis(5))?;
            self.drain()?;
            if let Some(l) = self.live(sender) {
                return Ok(Some(l));
            }
        }
        Ok(None)
    }
}
