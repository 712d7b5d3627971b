//! The framing of control messages: the 12-byte header (magic, version,
//! kind, sequence number) and the little-endian fields after it.

use super::{DecodeError, HEADER_LEN, MAGIC, MAX_MESSAGE, MAX_TEXT, VERSION};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Family bytes of an address field.
const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;

/// Appends little-endian fields to a message being built.
pub(super) struct Writer(pub(super) Vec<u8>);

impl Writer {
    pub(super) fn new(kind: u16, seq: u32) -> Writer {
        let mut w = Writer(Vec::with_capacity(64));
        w.u32(MAGIC);
        w.u16(VERSION);
        w.u16(kind);
        w.u32(seq);
        w
    }
    pub(super) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(super) fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// An address: its family (4 or 6) and its 4 or 16 bytes, in
    /// network order.
    pub(super) fn ip(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(a) => {
                self.u8(FAMILY_V4);
                self.0.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                self.u8(FAMILY_V6);
                self.0.extend_from_slice(&a.octets());
            }
        }
    }
    /// An address and port (an IPv6 scope or flow label is not carried:
    /// the stack's addresses are global).
    pub(super) fn addr(&mut self, a: SocketAddr) {
        self.ip(a.ip());
        self.u16(a.port());
    }
    /// A string cut to [`MAX_TEXT`] bytes at a character boundary.
    pub(super) fn text(&mut self, s: &str) {
        self.text_max(s, MAX_TEXT);
    }
    /// A string cut to `max` bytes at a character boundary.
    pub(super) fn text_max(&mut self, s: &str, max: usize) {
        let mut end = s.len().min(max);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u8(end as u8);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
    }
}

/// Reads little-endian fields, every read bounds-checked.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(DecodeError::Short(self.buf.len()))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub(super) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(super) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub(super) fn ip(&mut self) -> Result<IpAddr, DecodeError> {
        match self.u8()? {
            FAMILY_V4 => Ok(Ipv4Addr::from(self.array::<4>()?).into()),
            FAMILY_V6 => Ok(Ipv6Addr::from(self.array::<16>()?).into()),
            _ => Err(DecodeError::Field("address family")),
        }
    }
    pub(super) fn addr(&mut self) -> Result<SocketAddr, DecodeError> {
        Ok(SocketAddr::new(self.ip()?, self.u16()?))
    }
    pub(super) fn text(&mut self) -> Result<String, DecodeError> {
        self.text_max(MAX_TEXT)
    }
    pub(super) fn text_max(&mut self, max: usize) -> Result<String, DecodeError> {
        let n = usize::from(self.u8()?);
        if n > max {
            return Err(DecodeError::Field("text length"));
        }
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| DecodeError::Field("text encoding"))
    }
    pub(super) fn end(&self) -> Result<(), DecodeError> {
        match self.buf.len() - self.at {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}

/// Checks the header; returns the kind, the sequence number and a reader
/// at the body.
pub(super) fn open(buf: &[u8]) -> Result<(u16, u32, Reader<'_>), DecodeError> {
    if buf.len() > MAX_MESSAGE {
        return Err(DecodeError::Trailing(buf.len() - MAX_MESSAGE));
    }
    if buf.len() < HEADER_LEN {
        return Err(DecodeError::Short(buf.len()));
    }
    let mut r = Reader { buf, at: 0 };
    let magic = r.u32()?;
    if magic != MAGIC {
        return Err(DecodeError::Magic(magic));
    }
    let version = r.u16()?;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let kind = r.u16()?;
    let seq = r.u32()?;
    Ok((kind, seq, r))
}
