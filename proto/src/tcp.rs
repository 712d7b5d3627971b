//! The TCP header (RFC 9293 §3.1) without payload: control bits, the
//! options area, and parse/emit through `smoltcp::wire::TcpPacket`.

use smoltcp::wire::{TcpPacket, TcpSeqNumber};

/// Smallest TCP header (data offset 5, RFC 9293 §3.1).
pub const TCP_MIN_HEADER_LEN: usize = 20;

/// Largest options area (data offset 15 → 60-byte header).
pub const TCP_MAX_OPTIONS_LEN: usize = 40;

/// TCP control bits (RFC 9293 §3.1; ECE/CWR from RFC 3168 §6.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x02);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x04);
    /// Push function.
    pub const PSH: Flags = Flags(0x08);
    /// Acknowledgment field is significant.
    pub const ACK: Flags = Flags(0x10);
    /// Urgent pointer field is significant (never sent; on receipt the
    /// transport marks the urgent byte for the socket layer).
    pub const URG: Flags = Flags(0x20);
    /// ECN-Echo.
    pub const ECE: Flags = Flags(0x40);
    /// Congestion Window Reduced.
    pub const CWR: Flags = Flags(0x80);

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set in `self`.
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether these are a connection request's: SYN without ACK, RST or
    /// FIN.
    pub const fn is_connection_request(self) -> bool {
        self.contains(Flags::SYN)
            && !self.intersects(Flags(Flags::ACK.0 | Flags::RST.0 | Flags::FIN.0))
    }

    /// Union of two flag sets.
    #[must_use]
    pub const fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// `self` with every bit of `other` cleared.
    #[must_use]
    pub const fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }

    /// Reads the control bits from a header view (branch-free: the parser
    /// runs this once per received packet).
    fn read<T: AsRef<[u8]>>(tcp: &TcpPacket<T>) -> Flags {
        Flags(
            u8::from(tcp.fin())
                | u8::from(tcp.syn()) << 1
                | u8::from(tcp.rst()) << 2
                | u8::from(tcp.psh()) << 3
                | u8::from(tcp.ack()) << 4
                | u8::from(tcp.urg()) << 5
                | u8::from(tcp.ece()) << 6
                | u8::from(tcp.cwr()) << 7,
        )
    }

    /// Writes the control bits into a header view (reserved bits and NS
    /// cleared).
    fn write<T: AsRef<[u8]> + AsMut<[u8]>>(self, tcp: &mut TcpPacket<T>) {
        tcp.clear_flags();
        tcp.set_fin(self.contains(Flags::FIN));
        tcp.set_syn(self.contains(Flags::SYN));
        tcp.set_rst(self.contains(Flags::RST));
        tcp.set_psh(self.contains(Flags::PSH));
        tcp.set_ack(self.contains(Flags::ACK));
        tcp.set_urg(self.contains(Flags::URG));
        tcp.set_ece(self.contains(Flags::ECE));
        tcp.set_cwr(self.contains(Flags::CWR));
    }
}

impl core::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        self.with(rhs)
    }
}

impl core::fmt::Debug for Flags {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        let mut first = true;
        for (bit, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// The TCP options area as raw bytes (at most 40), fixed size and `Copy`
/// so a header can cross a bounded queue. Transports interpret it with
/// `smoltcp::wire::TcpOption`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TcpOptions {
    bytes: [u8; TCP_MAX_OPTIONS_LEN],
    len: u8,
}

impl TcpOptions {
    /// No options.
    pub const EMPTY: TcpOptions = TcpOptions {
        bytes: [0; TCP_MAX_OPTIONS_LEN],
        len: 0,
    };

    /// Copies `raw`, or returns `None` if it is longer than 40 bytes.
    pub fn new(raw: &[u8]) -> Option<Self> {
        if raw.len() > TCP_MAX_OPTIONS_LEN {
            return None;
        }
        let mut bytes = [0; TCP_MAX_OPTIONS_LEN];
        bytes[..raw.len()].copy_from_slice(raw);
        Some(TcpOptions {
            bytes,
            len: raw.len() as u8,
        })
    }

    /// The option bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Number of option bytes (before padding).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are no options.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for TcpOptions {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl core::fmt::Debug for TcpOptions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:02x?}", self.as_slice())
    }
}

/// A TCP header without payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful when ACK is set).
    pub ack: u32,
    /// Control bits.
    pub flags: Flags,
    /// Window field, before scaling.
    pub window: u16,
    /// Options area.
    pub options: TcpOptions,
    /// Urgent pointer (meaningful when URG is set): the offset from
    /// `seq` of the byte after the urgent one, as Linux reads it (RFC 6093).
    pub urgent: u16,
}

impl TcpHeader {
    /// Whether every bit of `f` is set.
    pub const fn has(&self, f: Flags) -> bool {
        self.flags.contains(f)
    }

    /// Length of the header as emitted: 20 bytes plus the options padded to
    /// a multiple of 4 (RFC 9293 §3.2).
    pub fn header_len(&self) -> usize {
        TCP_MIN_HEADER_LEN + self.options.len().next_multiple_of(4)
    }

    /// Reads the header from a view whose data offset the caller checked
    /// (at least 20 bytes, at most the buffer). Options beyond 40 bytes
    /// cannot occur: the data offset is four bits.
    pub fn parse(tcp: &TcpPacket<&[u8]>) -> TcpHeader {
        TcpHeader {
            urgent: tcp.urgent_at(),
            src_port: tcp.src_port(),
            dst_port: tcp.dst_port(),
            seq: tcp.seq_number().0 as u32,
            ack: tcp.ack_number().0 as u32,
            flags: Flags::read(tcp),
            window: tcp.window_len(),
            options: TcpOptions::new(tcp.options()).unwrap_or_default(),
        }
    }

    /// Writes the header into the first [`header_len`](Self::header_len)
    /// bytes of `tcp`'s buffer: every field, the options zero-padded (EOL),
    /// checksum zero (the caller fills the checksum).
    /// The buffer must hold at least `header_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tcp: &mut TcpPacket<T>) {
        tcp.set_src_port(self.src_port);
        tcp.set_dst_port(self.dst_port);
        tcp.set_seq_number(TcpSeqNumber(self.seq as i32));
        tcp.set_ack_number(TcpSeqNumber(self.ack as i32));
        tcp.set_header_len(self.header_len() as u8);
        self.flags.write(tcp);
        tcp.set_window_len(self.window);
        tcp.set_checksum(0);
        tcp.set_urgent_at(self.urgent);
        let opts = tcp.options_mut();
        let n = self.options.len();
        opts[..n].copy_from_slice(self.options.as_slice());
        opts[n..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SYN from a Linux client (port 40000 → 5201, seq 0x01020304), MSS
    /// 1460, SACK permitted, timestamps, window scale 7; checksum zeroed.
    const SYN: [u8; 40] = [
        0x9c, 0x40, 0x14, 0x51, 0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0, 0xa0, 0x02, 0xfa, 0xf0, 0, 0,
        0, 0, 2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];

    #[test]
    fn parses_a_syn_from_bytes() {
        let h = TcpHeader::parse(&TcpPacket::new_checked(&SYN[..]).unwrap());
        assert_eq!((h.src_port, h.dst_port), (40000, 5201));
        assert_eq!(h.seq, 0x0102_0304);
        assert_eq!(h.flags, Flags::SYN);
        assert_eq!(h.window, 0xfaf0);
        assert_eq!(h.options.as_slice(), &SYN[20..]);
        assert_eq!(h.header_len(), 40);
    }

    #[test]
    fn emit_then_parse_keeps_every_field() {
        let h = TcpHeader {
            urgent: 0x1234,
            src_port: 1,
            dst_port: 65535,
            seq: 0xffff_fff0,
            ack: 7,
            flags: Flags::ACK | Flags::PSH | Flags::ECE | Flags::CWR | Flags::FIN,
            window: 1234,
            options: TcpOptions::new(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 5]).unwrap(),
        };
        // 13 option bytes pad to 16: a 36-byte header.
        let mut buf = [0xaau8; 36];
        h.emit(&mut TcpPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf[13], 0xd9, "control bits as on the wire");
        assert_eq!(&buf[33..36], &[0, 0, 0], "options padded with EOL");
        let back = TcpHeader::parse(&TcpPacket::new_checked(&buf[..]).unwrap());
        let mut padded = h;
        padded.options = TcpOptions::new(&buf[20..36]).unwrap();
        assert_eq!(back, padded);
    }

    #[test]
    fn emit_clears_reserved_bits_and_the_urgent_pointer() {
        let mut buf = [0xffu8; 20];
        TcpHeader::default().emit(&mut TcpPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf[12], 0x50, "data offset 5, reserved and NS zero");
        assert_eq!(buf[13], 0);
        assert_eq!(&buf[16..20], &[0, 0, 0, 0]);
    }

    #[test]
    fn options_longer_than_40_are_refused() {
        assert!(TcpOptions::new(&[0; 41]).is_none());
        assert_eq!(TcpOptions::new(&[1; 40]).unwrap().len(), 40);
    }

    #[test]
    fn flags_print_by_name() {
        assert_eq!(format!("{:?}", Flags::SYN | Flags::ACK), "SYN|ACK");
        assert_eq!(format!("{:?}", Flags(0)), "-");
        assert!((Flags::SYN | Flags::ACK).intersects(Flags::ACK | Flags::RST));
    }

    #[test]
    fn only_a_bare_syn_requests_a_connection() {
        assert!(Flags::SYN.is_connection_request());
        assert!((Flags::SYN | Flags::ECE | Flags::CWR).is_connection_request());
        for other in [Flags::ACK, Flags::RST, Flags::FIN] {
            assert!(!(Flags::SYN | other).is_connection_request());
        }
        assert!(!Flags::ACK.is_connection_request());
    }
}
