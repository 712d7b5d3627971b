//! smoltcp's `phy::Device` over the datapath's queue, in two halves that
//! match how the queue lends frames.
//!
//! - [`IngressDevice`]: built around one received frame that the datapath
//!   lends for the length of a closure ([`datapath::nic::Nic::receive_frames`]);
//!   its RX token hands smoltcp that frame in place (no copy). Replies smoltcp
//!   builds while processing it (RSTs, immediate duplicate ACKs: headers
//!   only) cannot go to the ring while the ring lends the frame, so they are
//!   staged in [`Staged`] and sent right after.
//! - [`EgressDevice`]: no RX; its TX tokens write straight into a UMEM TX
//!   frame (frames larger than one UMEM frame, MTU 9000, are built in a
//!   scratch buffer and copied across a frame chain).

use datapath::nic::Nic;
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Ipv4Address,
};

/// Ethernet header bytes.
use proto::ETH_HEADER_LEN;

use super::zero_window::ClosedWindows;

/// What smoltcp may assume of the device: Ethernet frames up to `mtu` IP
/// bytes; checksums computed and verified in software (smoltcp's default).
pub(crate) fn capabilities(mtu: usize) -> DeviceCapabilities {
    let mut caps = DeviceCapabilities::default();
    caps.medium = Medium::Ethernet;
    // For Ethernet, smoltcp's MTU counts the Ethernet header.
    caps.max_transmission_unit = mtu + ETH_HEADER_LEN;
    caps
}

/// Frames built during ingress, waiting for the TX ring: one flat buffer
/// and the end offset of each frame.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Staged {
    /// Appends a frame of `len` bytes that `fill` writes.
    fn push<R>(&mut self, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> R {
        let start = self.bytes.len();
        self.bytes.resize(start + len, 0);
        let r = fill(&mut self.bytes[start..]);
        self.ends.push(self.bytes.len());
        r
    }

    /// Number of staged frames.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Calls `send` on each staged frame in order and empties the stage.
    pub(crate) fn drain(&mut self, mut send: impl FnMut(&[u8])) {
        let mut start = 0;
        for &end in &self.ends {
            send(&self.bytes[start..end]);
            start = end;
        }
        self.bytes.clear();
        self.ends.clear();
    }
}

/// The device smoltcp sees while it processes one lent frame.
#[derive(Debug)]
pub(crate) struct IngressDevice<'a> {
    frame: Option<&'a [u8]>,
    staged: &'a mut Staged,
    caps: &'a DeviceCapabilities,
}

impl<'a> IngressDevice<'a> {
    /// A device whose one RX token is `frame`.
    pub(crate) fn new(
        frame: &'a [u8],
        staged: &'a mut Staged,
        caps: &'a DeviceCapabilities,
    ) -> Self {
        IngressDevice {
            frame: Some(frame),
            staged,
            caps,
        }
    }
}

/// Lends a received frame to smoltcp.
#[derive(Debug)]
pub(crate) struct LentRx<'a>(&'a [u8]);

impl phy::RxToken for LentRx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0)
    }
}

/// A TX token that stages the frame for later.
#[derive(Debug)]
pub(crate) struct StagedTx<'a>(&'a mut Staged);

impl phy::TxToken for StagedTx<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        self.0.push(len, f)
    }
}

impl phy::Device for IngressDevice<'_> {
    type RxToken<'b>
        = LentRx<'b>
    where
        Self: 'b;
    type TxToken<'b>
        = StagedTx<'b>
    where
        Self: 'b;

    fn receive(&mut self, _now: Instant) -> Option<(LentRx<'_>, StagedTx<'_>)> {
        let frame = self.frame.take()?;
        Some((LentRx(frame), StagedTx(self.staged)))
    }

    fn transmit(&mut self, _now: Instant) -> Option<StagedTx<'_>> {
        Some(StagedTx(self.staged))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

/// Counters of the egress device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TxCounters {
    /// Frames queued on the TX ring.
    pub(crate) frames: u64,
    /// ARP requests smoltcp sent (the replies go to the kernel, not to
    /// smoltcp; the stack fills smoltcp's neighbour cache itself).
    pub(crate) arp_requests: u64,
    /// Frames the datapath refused (dropped; TCP retransmits them).
    pub(crate) refused: u64,
    /// Frames larger than a UMEM frame, sent as multi-buffer chains.
    pub(crate) chained: u64,
}

/// The device smoltcp sends through outside of ingress.
#[derive(Debug)]
pub(crate) struct EgressDevice<'a> {
    pub(crate) nic: &'a mut Nic,
    pub(crate) scratch: &'a mut Vec<u8>,
    pub(crate) caps: &'a DeviceCapabilities,
    pub(crate) counters: &'a mut TxCounters,
    /// Told of every frame sent, for the windows smoltcp announces.
    pub(crate) closed: &'a mut ClosedWindows,
}

/// Writes a frame into a UMEM TX frame.
#[derive(Debug)]
pub(crate) struct UmemTx<'a> {
    nic: &'a mut Nic,
    scratch: &'a mut Vec<u8>,
    counters: &'a mut TxCounters,
    closed: &'a mut ClosedWindows,
}

impl phy::TxToken for UmemTx<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut f = Some(f);
        let mut out = None;
        let mut is_arp = false;
        let chained = len > self.nic.frame_size();
        let queued = self.nic.transmit_frame(len, self.scratch, |buf| {
            if let Some(f) = f.take() {
                out = Some(f(buf));
            }
            is_arp = is_arp_request(buf);
            self.closed.sent(buf);
        });
        match queued {
            Ok(true) => {
                self.counters.frames += 1;
                self.counters.arp_requests += u64::from(is_arp);
                self.counters.chained += u64::from(chained);
            }
            Ok(false) | Err(_) => self.counters.refused += 1,
        }
        match (out, f) {
            (Some(r), _) => r,
            // The datapath refused before building: let smoltcp build into
            // scratch so it gets its result; the frame is dropped (counted).
            (None, Some(f)) => {
                self.scratch.clear();
                self.scratch.resize(len, 0);
                f(self.scratch)
            }
            (None, None) => unreachable!("the builder ran but gave no result"),
        }
    }
}

/// An RX token that is never handed out (the egress device receives nothing).
#[derive(Debug)]
pub(crate) enum NoRx {}

impl phy::RxToken for NoRx {
    fn consume<R, F>(self, _f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        match self {}
    }
}

impl phy::Device for EgressDevice<'_> {
    type RxToken<'b>
        = NoRx
    where
        Self: 'b;
    type TxToken<'b>
        = UmemTx<'b>
    where
        Self: 'b;

    fn receive(&mut self, _now: Instant) -> Option<(NoRx, UmemTx<'_>)> {
        None
    }

    fn transmit(&mut self, _now: Instant) -> Option<UmemTx<'_>> {
        if self.nic.tx_room_packets() == 0 {
            // Let queued frames go and completed ones come back, then look again.
            self.nic.flush();
            if self.nic.tx_room_packets() == 0 {
                return None;
            }
        }
        Some(UmemTx {
            nic: self.nic,
            scratch: self.scratch,
            counters: self.counters,
            closed: self.closed,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

fn is_arp_request(frame: &[u8]) -> bool {
    EthernetFrame::new_checked(frame).is_ok_and(|eth| {
        eth.ethertype() == EthernetProtocol::Arp
            && ArpPacket::new_checked(eth.payload())
                .is_ok_and(|arp| arp.operation() == ArpOperation::Request)
    })
}

/// The source MAC and IPv4 address of an IPv4 frame, if it is one.
pub(crate) fn ipv4_source(frame: &[u8]) -> Option<([u8; 6], Ipv4Address)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = smoltcp::wire::Ipv4Packet::new_checked(eth.payload()).ok()?;
    Some((eth.src_addr().0, ip.src_addr()))
}

/// The destination port of a TCP SYN (without ACK) in an IPv4 frame.
pub(crate) fn syn_port(frame: &[u8]) -> Option<u16> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = smoltcp::wire::Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != smoltcp::wire::IpProtocol::Tcp {
        return None;
    }
    let tcp = smoltcp::wire::TcpPacket::new_checked(ip.payload()).ok()?;
    (tcp.syn() && !tcp.ack()).then(|| tcp.dst_port())
}

/// An ARP reply from `peer` (at `peer_mac`) to us: fed to smoltcp, it fills
/// smoltcp's neighbour cache with what the kernel's table says, since real
/// ARP replies go to the kernel (the steering program passes ARP).
pub(crate) fn arp_reply(
    peer_mac: [u8; 6],
    peer_ip: Ipv4Address,
    our_mac: [u8; 6],
    our_ip: Ipv4Address,
) -> Vec<u8> {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: EthernetAddress(peer_mac),
        source_protocol_addr: peer_ip,
        target_hardware_addr: EthernetAddress(our_mac),
        target_protocol_addr: our_ip,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress(peer_mac),
        dst_addr: EthernetAddress(our_mac),
        ethertype: EthernetProtocol::Arp,
    };
    let mut buf = vec![0u8; eth.buffer_len() + arp.buffer_len()];
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    arp.emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
    buf
}

/// An Ethernet frame carrying `tcp` from `src` to `dst`, checksums filled.
#[cfg(test)]
pub(super) fn ipv4_tcp_frame(
    src: Ipv4Address,
    dst: Ipv4Address,
    tcp: &smoltcp::wire::TcpRepr,
) -> Vec<u8> {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, TcpPacket};
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        ethertype: EthernetProtocol::Ipv4,
    };
    let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + tcp.buffer_len()];
    let caps = ChecksumCapabilities::default();
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut f);
    let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p, &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(p.payload_mut()),
        &IpAddress::Ipv4(src),
        &IpAddress::Ipv4(dst),
        &caps,
    );
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::{Device, RxToken, TxToken};

    #[test]
    fn staged_frames_come_out_in_order_and_whole() {
        let mut staged = Staged::default();
        let caps = capabilities(1500);
        let rx = [7u8; 60];
        let mut dev = IngressDevice::new(&rx, &mut staged, &caps);
        let (rx_token, tx_token) = dev.receive(Instant::ZERO).expect("one frame");
        assert_eq!(rx_token.consume(|f| f.to_vec()), rx.to_vec());
        tx_token.consume(3, |b| b.copy_from_slice(&[1, 2, 3]));
        assert!(
            dev.receive(Instant::ZERO).is_none(),
            "the frame is lent once"
        );
        dev.transmit(Instant::ZERO)
            .expect("staging always has room")
            .consume(2, |b| b.copy_from_slice(&[4, 5]));
        assert_eq!(staged.len(), 2);
        let mut out = Vec::new();
        staged.drain(|f| out.push(f.to_vec()));
        assert_eq!(out, vec![vec![1, 2, 3], vec![4, 5]]);
        assert_eq!(staged.len(), 0);
    }

    #[test]
    fn synthetic_arp_reply_parses_as_a_reply_from_the_peer() {
        let peer = Ipv4Address::new(198, 18, 0, 1);
        let us = Ipv4Address::new(198, 18, 0, 2);
        let frame = arp_reply([2, 0, 0, 0, 0, 1], peer, [2, 0, 0, 0, 0, 2], us);
        let eth = EthernetFrame::new_checked(&frame[..]).unwrap();
        assert_eq!(eth.ethertype(), EthernetProtocol::Arp);
        assert_eq!(eth.dst_addr(), EthernetAddress([2, 0, 0, 0, 0, 2]));
        let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(
            arp,
            ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
                source_protocol_addr: peer,
                target_hardware_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
                target_protocol_addr: us,
            }
        );
        assert!(!is_arp_request(&frame));
        assert_eq!(ipv4_source(&frame), None, "ARP is not IPv4");
    }

    fn tcp_frame(control: smoltcp::wire::TcpControl, ack: bool) -> Vec<u8> {
        use smoltcp::wire::{TcpRepr, TcpSeqNumber};
        let tcp = TcpRepr {
            src_port: 40000,
            dst_port: 5001,
            control,
            seq_number: TcpSeqNumber(1),
            ack_number: ack.then_some(TcpSeqNumber(7)),
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        ipv4_tcp_frame(
            Ipv4Address::new(198, 18, 0, 1),
            Ipv4Address::new(198, 18, 0, 2),
            &tcp,
        )
    }

    #[test]
    fn syn_port_finds_only_connection_requests() {
        use smoltcp::wire::TcpControl;
        assert_eq!(syn_port(&tcp_frame(TcpControl::Syn, false)), Some(5001));
        assert_eq!(syn_port(&tcp_frame(TcpControl::Syn, true)), None, "SYN-ACK");
        assert_eq!(
            syn_port(&tcp_frame(TcpControl::None, true)),
            None,
            "data/ACK"
        );
        assert_eq!(syn_port(&tcp_frame(TcpControl::Rst, false)), None);
        let frame = tcp_frame(TcpControl::None, true);
        assert_eq!(
            ipv4_source(&frame),
            Some(([2, 0, 0, 0, 0, 1], Ipv4Address::new(198, 18, 0, 1)))
        );
        assert_eq!(syn_port(&frame[..20]), None, "truncated");
    }

    #[test]
    fn capabilities_count_the_ethernet_header() {
        let caps = capabilities(9000);
        assert_eq!(caps.max_transmission_unit, 9014);
        assert_eq!(caps.medium, Medium::Ethernet);
    }
}
