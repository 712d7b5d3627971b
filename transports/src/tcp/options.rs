//! TCP options: parsed from and emitted to the raw options area with
//! `smoltcp::wire::TcpOption` (RFC 9293 3.1, RFC 7323, RFC 2018).

use smoltcp::wire::TcpOption;

use crate::segment::TcpOptions;

/// The options of one segment that this connection understands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParsedOptions {
    /// Maximum segment size (RFC 9293 3.7.1), only meaningful on a SYN.
    pub mss: Option<u16>,
    /// Window scale shift (RFC 7323 2), only meaningful on a SYN.
    pub window_scale: Option<u8>,
    /// SACK-permitted (RFC 2018 2), only meaningful on a SYN.
    pub sack_permitted: bool,
    /// SACK blocks as wire sequence numbers `(left, right)` (RFC 2018 3).
    /// smoltcp keeps at most three; a fourth block is ignored, which only
    /// costs information, never correctness.
    pub sack: [Option<(u32, u32)>; 3],
    /// Timestamps `(tsval, tsecr)` (RFC 7323 3).
    pub timestamp: Option<(u32, u32)>,
}

/// An options area that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tcp options: malformed option at byte {offset} of {len}")]
pub struct OptionsError {
    /// Where the bad option starts.
    pub offset: usize,
    /// Length of the options area.
    pub len: usize,
}

/// Parses an options area. Unknown options are skipped; an option whose
/// length byte is wrong for its kind or runs past the end is an error, and
/// the caller drops the segment (RFC 9293 3.1 lets a receiver treat such a
/// segment as malformed).
///
/// # Errors
/// [`OptionsError`] naming the offset of the bad option.
pub fn parse(options: &TcpOptions) -> Result<ParsedOptions, OptionsError> {
    let all = options.as_slice();
    let mut out = ParsedOptions::default();
    let mut rest = all;
    // Each iteration consumes at least one byte; bound it anyway.
    for _ in 0..all.len() {
        if rest.is_empty() {
            break;
        }
        let offset = all.len() - rest.len();
        let (next, opt) = TcpOption::parse(rest).map_err(|_| OptionsError {
            offset,
            len: all.len(),
        })?;
        match opt {
            TcpOption::EndOfList => break,
            TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
            TcpOption::MaxSegmentSize(m) => out.mss = Some(m),
            TcpOption::WindowScale(s) => out.window_scale = Some(s),
            TcpOption::SackPermitted => out.sack_permitted = true,
            TcpOption::SackRange(blocks) => out.sack = blocks,
            TcpOption::TimeStamp { tsval, tsecr } => out.timestamp = Some((tsval, tsecr)),
        }
        if next.len() >= rest.len() {
            // A zero-length option would never end; smoltcp refuses it, but
            // do not rely on that.
            return Err(OptionsError {
                offset,
                len: all.len(),
            });
        }
        rest = next;
    }
    Ok(out)
}

/// Builds an options area from a list of options, padding to a multiple of
/// four with NOPs in front of timestamps and SACK as Linux does. Options that
/// no longer fit in 40 bytes are left out.
#[derive(Debug)]
pub struct OptionWriter {
    buf: [u8; 40],
    len: usize,
}

impl Default for OptionWriter {
    fn default() -> Self {
        Self {
            buf: [0; 40],
            len: 0,
        }
    }
}

impl OptionWriter {
    /// Appends one option if it fits.
    pub fn push(&mut self, opt: TcpOption<'_>) -> bool {
        let n = opt.buffer_len();
        if self.len + n > self.buf.len() {
            return false;
        }
        opt.emit(&mut self.buf[self.len..self.len + n]);
        self.len += n;
        true
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends SACK blocks (at most four) preceded by two NOPs.
    pub fn push_sack(&mut self, blocks: &[(u32, u32)]) -> bool {
        let room = self.buf.len().saturating_sub(self.len + 4) / 8;
        let n = blocks.len().min(room).min(4);
        if n == 0 {
            return false;
        }
        self.push(TcpOption::NoOperation);
        self.push(TcpOption::NoOperation);
        if n <= 3 {
            let mut arr = [None; 3];
            for (slot, b) in arr.iter_mut().zip(blocks) {
                *slot = Some(*b);
            }
            self.push(TcpOption::SackRange(arr))
        } else {
            // smoltcp's SackRange holds three blocks; the fourth (room for it
            // exists only without timestamps, RFC 2018 3) goes out as a raw
            // kind-5 option with the same layout.
            let mut data = [0u8; 32];
            for (chunk, (l, r)) in data.chunks_exact_mut(8).zip(blocks) {
                chunk[..4].copy_from_slice(&l.to_be_bytes());
                chunk[4..].copy_from_slice(&r.to_be_bytes());
            }
            self.push(TcpOption::Unknown {
                kind: 5,
                data: &data,
            })
        }
    }

    /// The options area.
    pub fn finish(&self) -> TcpOptions {
        TcpOptions::new(&self.buf[..self.len]).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_syn_options_parse() {
        let raw = [
            0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0x01,
            0x03, 0x03, 0x07,
        ];
        let p = parse(&TcpOptions::new(&raw).unwrap()).unwrap();
        assert_eq!(p.mss, Some(1460));
        assert!(p.sack_permitted);
        assert_eq!(p.timestamp, Some((0x1234, 0)));
        assert_eq!(p.window_scale, Some(7));
    }

    #[test]
    fn bad_lengths_are_errors_not_panics() {
        for raw in [
            &[0x02, 0x03, 0x05][..],
            &[0x02, 0x00],
            &[0x08, 0x01],
            &[0x05, 0x05, 1, 2, 3],
            &[0x03, 0x04, 0x07, 0x00],
            &[0x08, 0x0a, 1, 2],
            &[0xfe],
        ] {
            let r = parse(&TcpOptions::new(raw).unwrap());
            assert!(r.is_err(), "{raw:02x?} parsed as {r:?}");
        }
    }

    #[test]
    fn four_sack_blocks_round_trip_as_three_plus_raw() {
        let mut w = OptionWriter::default();
        assert!(w.push_sack(&[(1, 2), (3, 4), (5, 6), (7, 8)]));
        assert_eq!(w.len(), 36);
        let bytes = w.finish();
        assert_eq!(&bytes.as_slice()[..4], &[1, 1, 5, 34]);
        let p = parse(&bytes).unwrap();
        assert_eq!(p.sack, [Some((1, 2)), Some((3, 4)), Some((5, 6))]);
    }
}
