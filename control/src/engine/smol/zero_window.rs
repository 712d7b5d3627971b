//! ACKs that reach smoltcp while its receive window is closed.
//!
//! RFC 9293 (3.10.7.4): when the receive window is zero no segment is
//! acceptable, "but special allowance should be made to accept valid ACKs".
//! smoltcp 0.14 makes none: a segment that fails the acceptability test is
//! answered and dropped before its acknowledgment and window are looked at,
//! and at a zero window only a zero-length segment at exactly the next
//! expected sequence number passes. A peer that has bytes in flight past
//! that point (bytes smoltcp refused, sent into a window it then withdrew)
//! stamps every later segment, pure ACKs too, with a sequence number past
//! it. smoltcp then never learns that the peer acknowledged its data or
//! opened its own window; an application that frees receive space only
//! once its sent bytes are acknowledged (an echo) waits forever, and so
//! does the peer, probing a window that never opens.
//!
//! [`ClosedWindows`] remembers, per connection whose last segment from
//! smoltcp announced a zero window, the acknowledgment number it carried
//! (smoltcp's next expected sequence number). A segment from that peer with
//! an ACK and a sequence number at most one receive buffer past that point
//! is answered by smoltcp as before, then fed again as a pure ACK at the
//! expected sequence number, with the peer's acknowledgment, window and
//! options: a segment smoltcp accepts, so it applies the ACK (and validates
//! the acknowledgment number as for any other segment).

use std::collections::HashMap;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr,
    TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

use proto::ETH_HEADER_LEN;

/// Most connections tracked at once: entries are made only by smoltcp's
/// own zero-window segments, so this bounds a table no peer can grow past
/// the number of connections it holds at a closed window.
const MAX_CLOSED: usize = 4096;

/// One connection, seen from smoltcp: the peer's address and port, ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Flow {
    peer: Ipv4Address,
    peer_port: u16,
    port: u16,
}

/// Connections whose receive window smoltcp last announced as zero.
#[derive(Debug)]
pub(crate) struct ClosedWindows {
    /// smoltcp's next expected sequence number, per connection.
    next: HashMap<Flow, TcpSeqNumber>,
    /// How far past it an acceptable ACK's sequence number may be: one
    /// receive buffer, the most the peer could have been allowed to send.
    reach: u32,
    /// Zero-window announcements not tracked because the table was full.
    pub(crate) untracked: u64,
}

/// An IPv4 TCP frame's IP packet and TCP segment.
type Headers<'a> = (Ipv4Packet<&'a [u8]>, TcpPacket<&'a [u8]>);

/// The IPv4 and TCP headers of an IPv4 TCP frame.
fn tcp_of(frame: &[u8]) -> Option<Headers<'_>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(&frame[ETH_HEADER_LEN..]).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let payload = &frame[ETH_HEADER_LEN + usize::from(ip.header_len())
        ..ETH_HEADER_LEN + usize::from(ip.total_len())];
    let tcp = TcpPacket::new_checked(payload).ok()?;
    Some((ip, tcp))
}

impl ClosedWindows {
    /// Tracks connections of receive buffers of `buffer` bytes.
    pub(crate) fn new(buffer: usize) -> Self {
        ClosedWindows {
            next: HashMap::new(),
            reach: u32::try_from(buffer).unwrap_or(u32::MAX),
            untracked: 0,
        }
    }

    /// Notes a frame smoltcp sends: a zero window announced, or a window
    /// open again (or the connection ending).
    pub(crate) fn sent(&mut self, frame: &[u8]) {
        let Some((ip, tcp)) = tcp_of(frame) else {
            return;
        };
        let flow = Flow {
            peer: ip.dst_addr(),
            peer_port: tcp.dst_port(),
            port: tcp.src_port(),
        };
        let closed = tcp.ack() && tcp.window_len() == 0 && !tcp.rst() && !tcp.fin();
        if !closed {
            if !self.next.is_empty() {
                self.next.remove(&flow);
            }
            return;
        }
        if self.next.len() >= MAX_CLOSED && !self.next.contains_key(&flow) {
            self.untracked += 1;
            return;
        }
        self.next.insert(flow, tcp.ack_number());
    }

    /// For a frame from a peer whose window smoltcp holds closed, with an
    /// ACK that smoltcp would drop for its sequence number: writes the
    /// same ACK at smoltcp's next expected sequence number, without
    /// payload, into `out`, and returns `true`.
    pub(crate) fn acceptable_ack(&self, frame: &[u8], out: &mut Vec<u8>) -> bool {
        if self.next.is_empty() {
            return false;
        }
        let Some((ip, tcp)) = tcp_of(frame) else {
            return false;
        };
        let flow = Flow {
            peer: ip.src_addr(),
            peer_port: tcp.src_port(),
            port: tcp.dst_port(),
        };
        let Some(&next) = self.next.get(&flow) else {
            return false;
        };
        if !tcp.ack() || tcp.syn() || tcp.rst() {
            return false;
        }
        // Past the expected byte, by no more than the peer could have sent.
        let ahead = tcp.seq_number().0.wrapping_sub(next.0) as u32;
        if ahead == 0 || ahead > self.reach {
            return false;
        }
        let (src, dst) = (
            IpAddress::Ipv4(ip.src_addr()),
            IpAddress::Ipv4(ip.dst_addr()),
        );
        let caps = ChecksumCapabilities::default();
        // A segment whose checksum fails is not the peer's: nothing to take.
        let Ok(mut repr) = TcpRepr::parse(&tcp, &src, &dst, &caps) else {
            return false;
        };
        repr.seq_number = next;
        repr.control = TcpControl::None;
        repr.payload = &[];
        let ip_repr = Ipv4Repr {
            src_addr: ip.src_addr(),
            dst_addr: ip.dst_addr(),
            next_header: IpProtocol::Tcp,
            payload_len: repr.header_len(),
            hop_limit: ip.hop_limit(),
        };
        out.clear();
        out.resize(ETH_HEADER_LEN + ip_repr.buffer_len() + repr.header_len(), 0);
        out[..ETH_HEADER_LEN].copy_from_slice(&frame[..ETH_HEADER_LEN]);
        let mut p = Ipv4Packet::new_unchecked(&mut out[ETH_HEADER_LEN..]);
        ip_repr.emit(&mut p, &caps);
        repr.emit(
            &mut TcpPacket::new_unchecked(p.payload_mut()),
            &src,
            &dst,
            &caps,
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::smol::device::ipv4_tcp_frame;

    const US: Ipv4Address = Ipv4Address::new(198, 18, 0, 9);
    const PEER: Ipv4Address = Ipv4Address::new(198, 18, 0, 10);
    /// smoltcp's next expected sequence number in these tests.
    const NEXT: TcpSeqNumber = TcpSeqNumber(1_000);

    fn segment<'a>(
        seq: TcpSeqNumber,
        ack: u32,
        window: u16,
        control: TcpControl,
        payload: &'a [u8],
    ) -> TcpRepr<'a> {
        TcpRepr {
            src_port: 46704,
            dst_port: 7,
            control,
            seq_number: seq,
            ack_number: Some(TcpSeqNumber(ack as i32)),
            window_len: window,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload,
        }
    }

    /// What smoltcp sends the peer: an ACK of `ack` announcing `window`.
    fn ours(ack: TcpSeqNumber, window: u16, control: TcpControl) -> Vec<u8> {
        let mut s = segment(TcpSeqNumber(5_000), ack.0 as u32, window, control, &[]);
        (s.src_port, s.dst_port) = (7, 46704);
        ipv4_tcp_frame(US, PEER, &s)
    }

    /// What the peer sends: `payload` at `seq`, acknowledging 5001 and
    /// opening a window of 72 units.
    fn theirs(seq: TcpSeqNumber, control: TcpControl, payload: &[u8]) -> Vec<u8> {
        ipv4_tcp_frame(PEER, US, &segment(seq, 5_001, 72, control, payload))
    }

    fn closed() -> ClosedWindows {
        let mut w = ClosedWindows::new(4 << 20);
        w.sent(&ours(NEXT, 0, TcpControl::None));
        w
    }

    #[test]
    fn an_ack_past_a_closed_window_is_fed_again_at_the_expected_sequence() {
        let w = closed();
        let mut out = Vec::new();
        for payload in [&[][..], &[0xab; 16][..]] {
            let frame = theirs(NEXT + 16, TcpControl::Psh, payload);
            assert!(
                w.acceptable_ack(&frame, &mut out),
                "{} bytes",
                payload.len()
            );
            let (ip, tcp) = tcp_of(&out).expect("an IPv4 TCP frame");
            let (src, dst) = (IpAddress::Ipv4(PEER), IpAddress::Ipv4(US));
            let repr = TcpRepr::parse(&tcp, &src, &dst, &ChecksumCapabilities::default())
                .expect("checksums hold");
            assert_eq!((ip.src_addr(), ip.dst_addr()), (PEER, US));
            assert_eq!(repr.seq_number, NEXT);
            assert_eq!(repr.ack_number, Some(TcpSeqNumber(5_001)));
            assert_eq!(repr.window_len, 72);
            assert_eq!((repr.control, repr.payload), (TcpControl::None, &[][..]));
            assert_eq!(out[..ETH_HEADER_LEN], frame[..ETH_HEADER_LEN]);
        }
    }

    #[test]
    fn only_acks_smoltcp_would_drop_are_fed_again() {
        let w = closed();
        let mut out = Vec::new();
        let refused = [
            (
                "at the expected sequence",
                theirs(NEXT, TcpControl::None, &[]),
            ),
            ("before it", theirs(NEXT - 1, TcpControl::None, &[])),
            (
                "past one buffer",
                theirs(NEXT + ((4 << 20) + 1), TcpControl::None, &[]),
            ),
            ("a reset", theirs(NEXT + 16, TcpControl::Rst, &[])),
            ("a SYN", theirs(NEXT + 16, TcpControl::Syn, &[])),
        ];
        for (what, frame) in refused {
            assert!(!w.acceptable_ack(&frame, &mut out), "{what}");
        }
        let mut corrupt = theirs(NEXT + 16, TcpControl::None, &[1, 2, 3]);
        *corrupt.last_mut().unwrap() ^= 0xff;
        assert!(!w.acceptable_ack(&corrupt, &mut out), "a bad checksum");
        let mut other = theirs(NEXT + 16, TcpControl::None, &[]);
        other[ETH_HEADER_LEN + 20 + 1] = 99; // another source port
        assert!(!w.acceptable_ack(&other, &mut out), "another connection");
    }

    #[test]
    fn a_window_that_opens_or_a_connection_that_ends_is_forgotten() {
        let mut out = Vec::new();
        let past = theirs(NEXT + 16, TcpControl::None, &[]);
        for (what, frame) in [
            ("open", ours(NEXT, 1, TcpControl::None)),
            ("FIN", ours(NEXT, 0, TcpControl::Fin)),
            ("RST", ours(NEXT, 0, TcpControl::Rst)),
        ] {
            let mut w = closed();
            assert!(w.acceptable_ack(&past, &mut out));
            w.sent(&frame);
            assert!(!w.acceptable_ack(&past, &mut out), "{what}");
        }
    }

    #[test]
    fn the_table_is_bounded() {
        let mut w = ClosedWindows::new(4 << 20);
        for port in 0..=MAX_CLOSED as u16 {
            let mut s = segment(TcpSeqNumber(1), NEXT.0 as u32, 0, TcpControl::None, &[]);
            (s.src_port, s.dst_port) = (7, port);
            w.sent(&ipv4_tcp_frame(US, PEER, &s));
        }
        assert_eq!((w.next.len(), w.untracked), (MAX_CLOSED, 1));
    }
}
