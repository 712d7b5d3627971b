//! Frames from the peer of the one flow the targets use, and the ways a
//! fuzzer bends them: flipped bytes, lying lengths, data offsets, options,
//! flags, sequence numbers, truncation, padding, fragment chains.
//!
//! Frames are written by hand (Ethernet II, IPv4 without options or the
//! IPv6 fixed header, TCP from [`proto::TcpHeader::emit`]) and checksummed
//! with the datapath's own sum, so a mutation can be followed by a checksum
//! fix that makes the lie reach placement.

use arbitrary::{Result, Unstructured};
use datapath::checksum::{ipv4_pseudo_header, ipv6_pseudo_header, sum};
use proto::{Flags, FlowKey, TcpHeader, TcpOptions};
use smoltcp::wire::TcpPacket;

/// The peer's address.
pub const PEER_IP: [u8; 4] = [198, 18, 0, 1];
/// Our address.
pub const LOCAL_IP: [u8; 4] = [198, 18, 0, 2];
/// The peer's port.
pub const PEER_PORT: u16 = 40_000;
/// Our port.
pub const LOCAL_PORT: u16 = 5201;
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const LOCAL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const ETH: usize = 14;
const IP: usize = 20;
const IP6: usize = 40;
/// The peer's IPv6 address (an IPv6 flow's).
pub const PEER_IP6: [u8; 16] = [0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// Our IPv6 address.
pub const LOCAL_IP6: [u8; 16] = [0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// An IPv6 flow's key from our side.
pub fn flow_key6() -> FlowKey {
    FlowKey {
        remote_ip: PEER_IP6.into(),
        local_ip: LOCAL_IP6.into(),
        remote_port: PEER_PORT,
        local_port: LOCAL_PORT,
    }
}

/// Whether `f` is an IPv6 frame (by its ethertype).
fn is_v6(f: &[u8]) -> bool {
    f.get(12..14) == Some(&[0x86, 0xdd])
}

/// The flow's key from our side.
pub fn flow_key() -> FlowKey {
    FlowKey {
        remote_ip: PEER_IP.into(),
        local_ip: LOCAL_IP.into(),
        remote_port: PEER_PORT,
        local_port: LOCAL_PORT,
    }
}

/// A header from the peer to us.
pub fn header(flags: Flags, seq: u32, ack: u32, window: u16, options: &[u8]) -> TcpHeader {
    TcpHeader {
        urgent: 0,
        src_port: PEER_PORT,
        dst_port: LOCAL_PORT,
        seq,
        ack,
        flags,
        window,
        options: TcpOptions::new(&options[..options.len().min(40)]).unwrap_or_default(),
    }
}

/// A well-formed frame carrying `h` and `payload`, checksums right.
pub fn build(h: &TcpHeader, payload: &[u8]) -> Vec<u8> {
    let tcp_len = h.header_len() + payload.len();
    let mut f = vec![0u8; ETH + IP + tcp_len];
    f[0..6].copy_from_slice(&LOCAL_MAC);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[ETH..ETH + IP];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((IP + tcp_len) as u16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&PEER_IP);
    ip[16..20].copy_from_slice(&LOCAL_IP);
    h.emit(&mut TcpPacket::new_unchecked(&mut f[ETH + IP..]));
    let at = ETH + IP + h.header_len();
    f[at..].copy_from_slice(payload);
    fix_checksums(&mut f);
    f
}

/// [`build`] over IPv6: the fixed header (hop limit 64, no extension
/// headers) from [`PEER_IP6`] to [`LOCAL_IP6`].
pub fn build6(h: &TcpHeader, payload: &[u8]) -> Vec<u8> {
    let tcp_len = h.header_len() + payload.len();
    let mut f = vec![0u8; ETH + IP6 + tcp_len];
    f[0..6].copy_from_slice(&LOCAL_MAC);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    let ip = &mut f[ETH..ETH + IP6];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
    ip[6] = 6;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&PEER_IP6);
    ip[24..40].copy_from_slice(&LOCAL_IP6);
    h.emit(&mut TcpPacket::new_unchecked(&mut f[ETH + IP6..]));
    let at = ETH + IP6 + h.header_len();
    f[at..].copy_from_slice(payload);
    fix_checksums(&mut f);
    f
}

/// The timestamps option `NOP NOP TS(tsval, tsecr)`.
pub fn ts_option(tsval: u32, tsecr: u32) -> [u8; 12] {
    let mut o = [1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0];
    o[4..8].copy_from_slice(&tsval.to_be_bytes());
    o[8..12].copy_from_slice(&tsecr.to_be_bytes());
    o
}

/// Recomputes the IPv4 header checksum and the TCP checksum from the
/// frame's own (possibly lying) IHL and total length (an IPv6 frame's TCP
/// checksum from its payload length), as far as the frame holds them. A
/// frame too short for a field is left as it is.
pub fn fix_checksums(f: &mut [u8]) {
    if is_v6(f) {
        fix_checksum6(f);
        return;
    }
    let Some(&vihl) = f.get(ETH) else { return };
    let ihl = usize::from(vihl & 0x0f) * 4;
    if ihl < IP || f.len() < ETH + ihl {
        return;
    }
    f[ETH + 10..ETH + 12].fill(0);
    let c = sum(&f[ETH..ETH + ihl]).checksum();
    f[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
    let total = usize::from(u16::from_be_bytes([f[ETH + 2], f[ETH + 3]]));
    let end = (ETH + total).min(f.len());
    let l4 = ETH + ihl;
    if end < l4 + 18 {
        return;
    }
    let mut src = [0; 4];
    let mut dst = [0; 4];
    src.copy_from_slice(&f[ETH + 12..ETH + 16]);
    dst.copy_from_slice(&f[ETH + 16..ETH + 20]);
    f[l4 + 16..l4 + 18].fill(0);
    let len = (end - l4) as u16;
    let c = ipv4_pseudo_header(src, dst, f[ETH + 9], len)
        .then(sum(&f[l4..end]))
        .checksum();
    f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
}

/// The TCP checksum of an IPv6 frame, over what its payload length says
/// (the next header is taken as the transport's, whatever it is).
fn fix_checksum6(f: &mut [u8]) {
    let l4 = ETH + IP6;
    if f.len() < l4 + 18 {
        return;
    }
    let payload = usize::from(u16::from_be_bytes([f[ETH + 4], f[ETH + 5]]));
    let end = (l4 + payload).min(f.len());
    if end < l4 + 18 {
        return;
    }
    let mut src = [0; 16];
    let mut dst = [0; 16];
    src.copy_from_slice(&f[ETH + 8..ETH + 24]);
    dst.copy_from_slice(&f[ETH + 24..ETH + 40]);
    f[l4 + 16..l4 + 18].fill(0);
    let c = ipv6_pseudo_header(src, dst, f[ETH + 6], (end - l4) as u32)
        .then(sum(&f[l4..end]))
        .checksum();
    f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
}

/// Option areas a fuzzer picks from: well-formed ones and the malformed
/// lengths (0, 1, overrunning) a parser must survive.
pub fn options(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 | 1 => Vec::new(),
        2 => ts_option(u.arbitrary()?, u.arbitrary()?).to_vec(),
        3 => {
            // SACK with 1..=4 blocks of arbitrary edges.
            let n = u.int_in_range(1usize..=4)?;
            let mut o = vec![1, 1, 5, (2 + 8 * n) as u8];
            for _ in 0..2 * n {
                o.extend_from_slice(&u.arbitrary::<u32>()?.to_be_bytes());
            }
            o.truncate(40);
            o
        }
        4 => vec![
            2,
            4,
            u.arbitrary()?,
            u.arbitrary()?,
            3,
            3,
            u.arbitrary()?,
            4,
            2,
        ],
        5 => vec![u.arbitrary()?, 0],
        6 => vec![u.arbitrary()?, 1, u.arbitrary()?],
        7 => vec![u.arbitrary()?, u.int_in_range(38u8..=255)?, 0, 0],
        _ => {
            let n = u.int_in_range(0usize..=40)?;
            u.bytes(n)?.to_vec()
        }
    })
}

/// Applies up to `max` mutations to `f`, then (most of the time) fixes the
/// checksums so the mutated frame gets past verification.
pub fn mutate(u: &mut Unstructured<'_>, f: &mut Vec<u8>, max: u8) -> Result<()> {
    let n = u.int_in_range(0..=max)?;
    for _ in 0..n {
        mutate_once(u, f)?;
    }
    if u.ratio(3u8, 4u8)? {
        fix_checksums(f);
    }
    Ok(())
}

fn set_byte(f: &mut [u8], at: usize, v: u8) {
    if let Some(b) = f.get_mut(at) {
        *b = v;
    }
}

fn set_u16(f: &mut [u8], at: usize, v: u16) {
    let [a, b] = v.to_be_bytes();
    set_byte(f, at, a);
    set_byte(f, at + 1, b);
}

fn set_u32(f: &mut [u8], at: usize, v: u32) {
    for (i, b) in v.to_be_bytes().into_iter().enumerate() {
        set_byte(f, at + i, b);
    }
}

fn get_u32(f: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    for (i, x) in b.iter_mut().enumerate() {
        *x = f.get(at + i).copied().unwrap_or(0);
    }
    u32::from_be_bytes(b)
}

fn mutate_once(u: &mut Unstructured<'_>, f: &mut Vec<u8>) -> Result<()> {
    let v6 = is_v6(f);
    let tcp = ETH + if v6 { IP6 } else { IP };
    match u.int_in_range(0u8..=13)? {
        0 => {
            if !f.is_empty() {
                let at = u.choose_index(f.len())?;
                f[at] ^= u.int_in_range(1u8..=255)?;
            }
        }
        // IPv4 total length (IPv6 payload length): small lies and wild
        // ones.
        1 => {
            let at = ETH + if v6 { 4 } else { 2 };
            let cur = u16::from_be_bytes([
                f.get(at).copied().unwrap_or(0),
                f.get(at + 1).copied().unwrap_or(0),
            ]);
            let v = if u.arbitrary()? {
                cur.wrapping_add(u.int_in_range(0u16..=16)?).wrapping_sub(8)
            } else {
                u.arbitrary()?
            };
            set_u16(f, at, v);
        }
        2 => set_byte(f, ETH, 0x40 | u.int_in_range(0u8..=15)?),
        3 => set_byte(f, tcp + 12, u.int_in_range(0u8..=15)? << 4),
        4 => set_byte(f, tcp + 13, u.arbitrary()?),
        5 => {
            let d: i16 = u.arbitrary()?;
            let seq = get_u32(f, tcp + 4).wrapping_add(d as i32 as u32);
            set_u32(f, tcp + 4, seq);
        }
        6 => set_u32(f, tcp + 8, u.arbitrary()?),
        7 => {
            let keep = u.int_in_range(0..=f.len())?;
            f.truncate(keep);
        }
        8 => {
            let n = u.int_in_range(1usize..=64)?;
            f.extend_from_slice(u.bytes(n.min(u.len()))?);
        }
        9 => {
            // Overwrite the options area (whatever the data offset says).
            for (i, b) in options(u)?.into_iter().enumerate() {
                set_byte(f, tcp + 20 + i, b);
            }
        }
        // IPv6's next header: extension headers, ICMPv6, UDP.
        10 if v6 => set_byte(f, ETH + 6, *u.choose(&[0, 43, 44, 60, 51, 50, 58, 17, 59])?),
        // IP flags and fragment offset (MF, offsets, the reserved bit).
        10 => set_u16(f, ETH + 6, u.arbitrary()?),
        11 => set_u16(f, 12, *u.choose(&[0x0800, 0x86dd, 0x0806, 0x8100])?),
        12 => set_byte(f, ETH, (u.int_in_range(0u8..=15)? << 4) | 5),
        _ => set_u16(f, tcp + 2 * u.int_in_range(0usize..=1)?, u.arbitrary()?),
    }
    Ok(())
}

/// Cuts `f` into 1..=3 fragments at arbitrary points, as a multi-buffer
/// packet arrives.
pub fn split<'a>(u: &mut Unstructured<'_>, f: &'a [u8]) -> Result<Vec<&'a [u8]>> {
    let mut cuts = vec![0, f.len()];
    for _ in 0..u.int_in_range(0u8..=2)? {
        cuts.push(u.int_in_range(0..=f.len())?);
    }
    cuts.sort_unstable();
    Ok(cuts.windows(2).map(|w| &f[w[0]..w[1]]).collect())
}
