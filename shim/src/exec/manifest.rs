//! The manifest an `execve` hands the new program (in its environment,
//! [`crate::setup::ENV_INHERIT`]): what survives, written by the shim and
//! read back by it, whole or not at all.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use datapath::mr::{Access, MrId};
use zerosplit::attach::{CarriedConn, CarriedRegion};
use zerosplit::daemon::Families;
use zerosplit::provider::ConnId;
use zerosplit::stream::RingsState;

use crate::log::log_line;
use crate::opts::Opts;
use crate::setup::ENV_INHERIT;

/// What crosses an `execve`, as the new program takes it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The process that exec'd (the new program is the same one; another
    /// process that inherits the environment ignores the manifest).
    pub pid: u32,
    /// Its attachment to the daemon.
    pub attachment: u32,
    pub entries: Vec<Entry>,
}

/// One socket, or something the new program lets go of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A listener (the daemon's socket) and the descriptors naming it.
    Listener {
        local: SocketAddr,
        families: Families,
        socket: u32,
        reuseport: bool,
        backlog: usize,
        nonblock: bool,
        fds: Vec<RawFd>,
    },
    /// A connection nothing was read or written on here.
    Stream {
        conn: u64,
        local: SocketAddr,
        peer: SocketAddr,
        nonblock: bool,
        fds: Vec<RawFd>,
    },
    /// The connection of the [`Entry::Stream`] before, which the process
    /// this one was forked from read or wrote: its rings there (regions
    /// by that process's handles, geometry), for the new program to take
    /// it up with its bytes at its first use (`handover.rs`; the offsets
    /// are the daemon's to say, none is carried).
    Parked(RingsState),
    /// A connection that does not survive: let go of it.
    LetGo { conn: u64 },
    /// A listener that does not survive: let go of it.
    Unlisten { port: u16, socket: u32 },
    /// A region of the attachment's memory slot: the attachment goes on,
    /// so the new program takes it in (and deregisters what no
    /// connection of its own uses).
    Region(CarriedRegion),
    /// A connection read or written here: its rings and the posted work
    /// requests on them stay where they are, in the attachment's memory.
    Rings(Box<CarriedStream>),
    /// The options set on the socket that descriptor `fd` names (one of
    /// the entries before), when they are not all defaults.
    Opts { fd: RawFd, opts: Box<Opts> },
}

/// A connection with rings, as the new program takes it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CarriedStream {
    pub conn: CarriedConn,
    pub rings: RingsState,
    /// Posted sends not yet acknowledged.
    pub sends: usize,
    /// In-order and acknowledged counts as last seen (a stream that
    /// closed is not asked again).
    pub received: u64,
    pub acked: u64,
    pub peer_fin: Option<u64>,
    /// The urgent byte's stream offset.
    pub urgent: Option<u64>,
    pub connected: bool,
    pub shut_rd: bool,
    pub shut_wr: bool,
    pub oob_read: bool,
    /// Closed here and still finishing: only its rings are taken over,
    /// to be kept or deregistered once it closed.
    pub closing: bool,
    pub nonblock: bool,
    /// `SO_LINGER {1, 0}`: closed at the exec, it is reset.
    pub linger_zero: bool,
    /// It had rings when this process forked: closing it parks it.
    pub forked: bool,
    /// Its descriptors in the new program (none: it closes at the exec).
    pub fds: Vec<RawFd>,
}

impl CarriedStream {
    const CONNECTED: u8 = 1;
    const SHUT_RD: u8 = 2;
    const SHUT_WR: u8 = 4;
    const OOB_READ: u8 = 8;
    const CLOSING: u8 = 16;
    const NONBLOCK: u8 = 32;
    const LINGER_ZERO: u8 = 64;
    const FORKED: u8 = 128;

    fn flags(&self) -> u8 {
        [
            (self.connected, Self::CONNECTED),
            (self.shut_rd, Self::SHUT_RD),
            (self.shut_wr, Self::SHUT_WR),
            (self.oob_read, Self::OOB_READ),
            (self.closing, Self::CLOSING),
            (self.nonblock, Self::NONBLOCK),
            (self.linger_zero, Self::LINGER_ZERO),
            (self.forked, Self::FORKED),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |f, (_, bit)| f | bit)
    }

    fn encode(&self) -> String {
        let (c, r) = (&self.conn, &self.rings);
        let maybe = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        let (fin, urgent) = (maybe(self.peer_fin), maybe(self.urgent));
        format!(
            "R,{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{fin},{urgent},{},{}",
            c.conn.to_bits(),
            c.slot,
            c.recv,
            c.send,
            c.local,
            c.remote,
            r.rx.to_bits(),
            r.tx.to_bits(),
            r.buf,
            r.ring,
            r.read,
            r.rx_posted,
            r.written,
            self.sends,
            self.received,
            self.acked,
            self.flags(),
            fds_text(&self.fds)
        )
    }

    /// The fields after `R`, as [`CarriedStream::encode`] wrote them.
    fn decode(f: &[&str]) -> Option<CarriedStream> {
        let [conn, slot, recv, send, local, remote, rx, tx, buf, ring, read, rx_posted, written, sends, received, acked, fin, urgent, flags, fds] =
            f
        else {
            return None;
        };
        let n = |s: &str| s.parse::<u64>().ok();
        let maybe = |s: &str| -> Option<Option<u64>> {
            match s {
                "-" => Some(None),
                v => Some(Some(v.parse().ok()?)),
            }
        };
        let id = ConnId::from_bits(n(conn)?);
        let flags: u8 = flags.parse().ok()?;
        let on = |bit: u8| flags & bit != 0;
        Some(CarriedStream {
            conn: CarriedConn {
                conn: id,
                slot: slot.parse().ok()?,
                recv: recv.parse().ok()?,
                send: send.parse().ok()?,
                local: local.parse().ok()?,
                remote: remote.parse().ok()?,
            },
            rings: RingsState {
                conn: id,
                rx: MrId::from_bits(n(rx)?),
                tx: MrId::from_bits(n(tx)?),
                buf: n(buf)?,
                ring: n(ring)?,
                read: n(read)?,
                rx_posted: n(rx_posted)?,
                written: n(written)?,
            },
            sends: sends.parse().ok()?,
            received: n(received)?,
            acked: n(acked)?,
            peer_fin: maybe(fin)?,
            urgent: maybe(urgent)?,
            connected: on(Self::CONNECTED),
            shut_rd: on(Self::SHUT_RD),
            shut_wr: on(Self::SHUT_WR),
            oob_read: on(Self::OOB_READ),
            closing: on(Self::CLOSING),
            nonblock: on(Self::NONBLOCK),
            linger_zero: on(Self::LINGER_ZERO),
            forked: on(Self::FORKED),
            fds: parse_fds(fds)?,
        })
    }
}

impl CarriedStream {
    /// Whether its rings lie in regions of `regions` that hold them, with
    /// the access each direction needs, and its offsets are ones
    /// [`zerosplit::stream::Rings`] can have (a damaged manifest must not
    /// make a read or a post index outside a ring).
    pub(crate) fn sound(&self, regions: &HashMap<MrId, CarriedRegion>) -> bool {
        let r = &self.rings;
        let fits = |mr: MrId, access: Access| {
            regions
                .get(&mr)
                .is_some_and(|g| g.access.contains(access) && g.len as u64 >= r.ring)
        };
        r.rx != r.tx
            && fits(r.rx, Access::RECV)
            && fits(r.tx, Access::SEND)
            && r.buf > 0
            && r.ring >= r.buf
            && r.ring.is_multiple_of(r.buf)
            && r.read <= r.rx_posted
            && r.rx_posted <= r.read.saturating_add(r.ring)
            && r.conn == self.conn.conn
    }
}

/// Region access as the manifest writes it.
fn access_code(a: Access) -> u8 {
    match a {
        Access::RECV => 1,
        Access::SEND => 2,
        _ => 3,
    }
}

/// Descriptors as `3/9`, none as `-`.
fn fds_text(fds: &[RawFd]) -> String {
    if fds.is_empty() {
        return "-".into();
    }
    fds.iter()
        .map(RawFd::to_string)
        .collect::<Vec<_>>()
        .join("/")
}

fn parse_fds(s: &str) -> Option<Vec<RawFd>> {
    if s == "-" {
        return Some(Vec::new());
    }
    s.split('/').map(|n| n.parse().ok()).collect()
}

impl Manifest {
    /// The value of [`ENV_INHERIT`].
    pub(crate) fn encode(&self) -> String {
        let mut out = format!("{},{}", self.pid, self.attachment);
        for e in &self.entries {
            out.push(';');
            out += &match e {
                Entry::Listener {
                    local,
                    families,
                    socket,
                    reuseport,
                    backlog,
                    nonblock,
                    fds,
                } => format!(
                    "L,{local},{},{socket},{},{backlog},{},{}",
                    families.bits(),
                    u8::from(*reuseport),
                    u8::from(*nonblock),
                    fds_text(fds)
                ),
                Entry::Stream {
                    conn,
                    local,
                    peer,
                    nonblock,
                    fds,
                } => format!(
                    "C,{conn},{local},{peer},{},{}",
                    u8::from(*nonblock),
                    fds_text(fds)
                ),
                Entry::Parked(r) => format!(
                    "P,{},{},{},{},{}",
                    r.conn.to_bits(),
                    r.rx.to_bits(),
                    r.tx.to_bits(),
                    r.buf,
                    r.ring
                ),
                Entry::LetGo { conn } => format!("X,{conn}"),
                Entry::Unlisten { port, socket } => format!("U,{port},{socket}"),
                Entry::Region(r) => format!(
                    "M,{},{},{},{}",
                    r.mr.to_bits(),
                    r.offset,
                    r.len,
                    access_code(r.access)
                ),
                Entry::Rings(c) => c.encode(),
                Entry::Opts { fd, opts } => {
                    format!("O,{fd},{}", opts.encode().unwrap_or_default())
                }
            };
        }
        out
    }

    /// Reads a manifest; `None` if any part of it is malformed (a
    /// manifest is the shim's own writing: nothing of a damaged one is
    /// taken up).
    pub(crate) fn decode(text: &str) -> Option<Manifest> {
        let mut parts = text.split(';');
        let (pid, attachment) = parts.next()?.split_once(',')?;
        let mut m = Manifest {
            pid: pid.parse().ok()?,
            attachment: attachment.parse().ok()?,
            entries: Vec::new(),
        };
        for part in parts {
            let f: Vec<&str> = part.split(',').collect();
            let fds = parse_fds;
            let flag = |s: &str| -> Option<bool> {
                match s {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => None,
                }
            };
            m.entries.push(match f.as_slice() {
                ["L", local, families, socket, reuseport, backlog, nonblock, list] => {
                    Entry::Listener {
                        local: local.parse().ok()?,
                        families: Families::from_bits(families.parse().ok()?)?,
                        socket: socket.parse().ok()?,
                        reuseport: flag(reuseport)?,
                        backlog: backlog.parse().ok()?,
                        nonblock: flag(nonblock)?,
                        fds: fds(list)?,
                    }
                }
                ["C", conn, local, peer, nonblock, list] => Entry::Stream {
                    conn: conn.parse().ok()?,
                    local: local.parse().ok()?,
                    peer: peer.parse().ok()?,
                    nonblock: flag(nonblock)?,
                    fds: fds(list)?,
                },
                ["P", conn, rx, tx, buf, ring] => {
                    let (buf, ring): (u64, u64) = (buf.parse().ok()?, ring.parse().ok()?);
                    // Rings the new program can have: a whole number of
                    // buffers.
                    if buf == 0 || ring < buf || !ring.is_multiple_of(buf) {
                        return None;
                    }
                    Entry::Parked(RingsState {
                        conn: ConnId::from_bits(conn.parse().ok()?),
                        rx: MrId::from_bits(rx.parse().ok()?),
                        tx: MrId::from_bits(tx.parse().ok()?),
                        buf,
                        ring,
                        read: 0,
                        rx_posted: 0,
                        written: 0,
                    })
                }
                ["X", conn] => Entry::LetGo {
                    conn: conn.parse().ok()?,
                },
                ["U", port, socket] => Entry::Unlisten {
                    port: port.parse().ok()?,
                    socket: socket.parse().ok()?,
                },
                ["M", mr, offset, len, access] => Entry::Region(CarriedRegion {
                    mr: MrId::from_bits(mr.parse().ok()?),
                    offset: offset.parse().ok()?,
                    len: len.parse().ok()?,
                    access: match *access {
                        "1" => Access::RECV,
                        "2" => Access::SEND,
                        "3" => Access::BOTH,
                        _ => return None,
                    },
                }),
                ["R", rest @ ..] => Entry::Rings(Box::new(CarriedStream::decode(rest)?)),
                ["O", fd, rest @ ..] => Entry::Opts {
                    fd: fd.parse().ok()?,
                    opts: Box::new(Opts::decode(rest)?),
                },
                _ => return None,
            });
        }
        Some(m)
    }

    /// The manifest this process was started with, if it is this
    /// process's.
    pub(crate) fn from_env() -> Option<Manifest> {
        let text = std::env::var(ENV_INHERIT).ok()?;
        let m = Manifest::decode(&text);
        if m.is_none() {
            log_line(&format!(
                "{ENV_INHERIT} is malformed: no socket is taken up"
            ));
        }
        m.filter(|m| m.pid == std::process::id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            pid: 4242,
            attachment: 7,
            entries: vec![
                Entry::Listener {
                    local: "0.0.0.0:8080".parse().unwrap(),
                    families: Families::V4,
                    socket: 12,
                    reuseport: true,
                    backlog: 511,
                    nonblock: true,
                    fds: vec![3, 9],
                },
                Entry::Listener {
                    local: "[::]:8080".parse().unwrap(),
                    families: Families::V6,
                    socket: 13,
                    reuseport: false,
                    backlog: 16,
                    nonblock: false,
                    fds: vec![4],
                },
                Entry::Stream {
                    conn: u64::MAX - 5,
                    local: "198.18.0.1:8080".parse().unwrap(),
                    peer: "198.18.0.2:40000".parse().unwrap(),
                    nonblock: false,
                    fds: vec![0],
                },
                Entry::Stream {
                    conn: 6,
                    local: "[2001:2::1]:8080".parse().unwrap(),
                    peer: "[2001:2::2]:40000".parse().unwrap(),
                    nonblock: true,
                    fds: vec![5],
                },
                Entry::Parked(RingsState {
                    conn: ConnId::from_bits(u64::MAX - 5),
                    rx: MrId::from_bits(2 << 32 | 1),
                    tx: MrId::from_bits(2 << 32 | 2),
                    buf: 128 << 10,
                    ring: 1 << 20,
                    read: 0,
                    rx_posted: 0,
                    written: 0,
                }),
                Entry::LetGo { conn: 17 },
                Entry::Unlisten {
                    port: 9000,
                    socket: 4,
                },
                Entry::Region(CarriedRegion {
                    mr: MrId::from_bits(3 << 32 | 5),
                    offset: 1 << 20,
                    len: 1 << 20,
                    access: Access::RECV,
                }),
                Entry::Rings(Box::new(rings_sample())),
                Entry::Opts {
                    fd: 4,
                    opts: Box::new(opts_sample()),
                },
            ],
        }
    }

    fn opts_sample() -> Opts {
        let mut o = Opts {
            congestion: Some("cubic".parse().unwrap()),
            rcvtimeo: Some(std::time::Duration::from_micros(1_500_000)),
            sndtimeo: None,
            linger: (true, 0),
            ints: Vec::new(),
        };
        o.set_int((libc::IPPROTO_TCP, libc::TCP_NODELAY), 1);
        o.set_int((libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 30);
        o
    }

    fn rings_sample() -> CarriedStream {
        let conn = ConnId::from_bits(u64::MAX - 9);
        CarriedStream {
            conn: CarriedConn {
                conn,
                slot: 3,
                recv: 8,
                send: 2,
                local: "198.18.0.1:8080".parse().unwrap(),
                remote: "198.18.0.2:40001".parse().unwrap(),
            },
            rings: RingsState {
                conn,
                rx: MrId::from_bits(3 << 32 | 5),
                tx: MrId::from_bits(1 << 32 | 6),
                buf: 128 << 10,
                ring: 1 << 20,
                read: 5000,
                rx_posted: (1 << 20) + 4096,
                written: 77,
            },
            sends: 2,
            received: 6000,
            acked: 70,
            peer_fin: Some(6000),
            urgent: None,
            connected: true,
            shut_rd: false,
            shut_wr: true,
            oob_read: false,
            closing: false,
            nonblock: true,
            linger_zero: false,
            forked: false,
            fds: vec![4, 5],
        }
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode()), Some(m));
        let empty = Manifest {
            pid: 1,
            attachment: 2,
            entries: Vec::new(),
        };
        assert_eq!(Manifest::decode(&empty.encode()), Some(empty));
        // Every flag, no descriptors, no FIN.
        let mut other = rings_sample();
        (other.shut_rd, other.oob_read, other.closing) = (true, true, true);
        (other.connected, other.shut_wr, other.nonblock) = (false, false, false);
        (other.peer_fin, other.urgent, other.fds) = (None, Some(5999), Vec::new());
        (other.linger_zero, other.forked) = (true, true);
        let m = Manifest {
            pid: 1,
            attachment: 2,
            entries: vec![Entry::Rings(Box::new(other))],
        };
        assert_eq!(Manifest::decode(&m.encode()), Some(m));
        // Defaults are carried as nothing.
        assert_eq!(Opts::default().encode(), None);
    }

    #[test]
    fn carried_rings_are_used_only_inside_their_regions() {
        let c = rings_sample();
        let region = |mr: u64, access| CarriedRegion {
            mr: MrId::from_bits(mr),
            offset: 0,
            len: 1 << 20,
            access,
        };
        let (rx, tx) = (c.rings.rx.to_bits(), c.rings.tx.to_bits());
        let regions: HashMap<MrId, CarriedRegion> =
            [region(rx, Access::RECV), region(tx, Access::SEND)]
                .into_iter()
                .map(|r| (r.mr, r))
                .collect();
        assert!(c.sound(&regions));
        let mut bad = Vec::new();
        for f in [
            |r: &mut RingsState| r.buf = 0,
            |r: &mut RingsState| r.ring = 3 << 20,
            |r: &mut RingsState| r.buf = 3 << 10,
            |r: &mut RingsState| r.read = r.rx_posted + 1,
            |r: &mut RingsState| r.rx_posted = r.read + r.ring + 1,
            |r: &mut RingsState| r.tx = r.rx,
            |r: &mut RingsState| r.rx = MrId::from_bits(99),
            |r: &mut RingsState| r.conn = ConnId::from_bits(1),
        ] {
            let mut d = c.clone();
            f(&mut d.rings);
            bad.push(d.sound(&regions));
        }
        assert_eq!(bad, [false; 8], "each damage refused");
        let mut swapped = regions.clone();
        swapped.insert(c.rings.rx, region(rx, Access::SEND));
        assert!(!c.sound(&swapped), "a receive ring needs RECV access");
    }

    #[test]
    fn a_damaged_manifest_is_refused_whole() {
        let text = sample().encode();
        for bad in [
            "",
            "4242",
            "x,7",
            &text.replace("L,", "Q,"),
            &text.replace("/9", "/nine"),
            &text.replace(",511,", ",-1,"),
            &text.replace(",1,3", ",2,3"),
            &text.replace(",12,1,", ",12,yes,"),
            &text.replace("U,9000,4", "U,9000"),
            &format!("{text};X"),
            &format!("{text};U,70000,1"),
            &text.replace(",1048576,1;", ",1048576,4;"),
            &text.replace(",6000,-,", ",-6000,-,"),
            &text.replace(",6000,-,37,", ",6000,-,256,"),
            &text.replace(",131072,1048576;", ",0,1048576;"),
            &text.replace(",131072,1048576;", ",131072,1048575;"),
            &text.replace(",6000,-,37,", ",6000,x,37,"),
            &text.replace(",6000,70,", ",6000,"),
            &text.replace(",4/5", ",-/5"),
            &text.replace(";R,", ";R,1,"),
            &text.replace(",cubic,", ",vegas2,"),
            &text.replace(",1,0,cubic,", ",2,0,cubic,"),
            &text.replace(":1/", ":1:2/"),
            &text.replace(
                &format!("{}:{}:", libc::IPPROTO_TCP, libc::TCP_NODELAY),
                "6:99:",
            ),
        ] {
            assert_eq!(Manifest::decode(bad), None, "{bad}");
        }
    }
}
