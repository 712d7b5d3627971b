//! `daemon`: a hostile application against `zerosplit::daemon::Daemon`
//! over the datapath's fake kernel. Two applications attach through the
//! real socket and channel: a good one, which registers a canary region
//! and listens on a port, and a hostile one, which then sends arbitrary
//! and structured control messages (any length, kind, field), posts work
//! requests naming its own or the good application's connections and
//! regions with any offsets and lengths, writes wild indices and flags
//! into its channel's rings, and never drains its completions, with the
//! daemon turning in between.
//!
//! Invariants: no panic; the good application's canary is intact and the
//! rest of its memory slot still zero; the hostile application's slot
//! holds nothing but zeros (nothing is ever delivered to it, so any byte
//! is a write the daemon made outside posted memory); the good
//! application stays attached and its next request is answered.

use std::os::fd::AsFd;

use arbitrary::{Result, Unstructured};
use datapath::shm::SharedMemory;
use zerosplit::config::{ByteSize, DaemonConfig};
use zerosplit::daemon::testing::{fake_daemon, RawApp};
use zerosplit::daemon::Daemon;
use zerosplit::ipc::desc::PostDesc;
use zerosplit::ipc::msg::{Reply, Request, MAX_MESSAGE};
use zerosplit::ipc::sock;

use super::Reached;

const SLOT: usize = 64 << 10;
const CANARY_LEN: usize = 4096;

fn turns(d: &mut Daemon, n: usize) {
    for _ in 0..n {
        d.turn();
    }
}

pub(super) fn run(data: &[u8]) -> std::result::Result<Reached, String> {
    let path = std::env::temp_dir().join(format!(
        "zs-fuzz-daemon-{}-{:?}.sock",
        std::process::id(),
        std::thread::current().id()
    ));
    let config = DaemonConfig {
        socket: path.clone(),
        max_attachments: 2,
        memory_per_attachment: ByteSize(SLOT as u64),
        max_connections: 8,
        max_posted: 32,
        ..DaemonConfig::default()
    };
    let mut d = fake_daemon(&path, config)?;
    let mut good = RawApp::attach(&mut d, &path)?;
    let mut bad = RawApp::attach(&mut d, &path)?;
    std::fs::remove_file(&path).ok();
    // The good application: a canary region and a listener.
    let Some(Reply::Registered { mr, offset, .. }) = good.request(
        &mut d,
        &Request::RegisterMemory {
            len: CANARY_LEN as u64,
            access: 3,
        },
    ) else {
        return Err("the good application could not register memory".into());
    };
    let canary = offset as usize..offset as usize + CANARY_LEN;
    for (i, b) in good.memory.bytes_mut()[canary.clone()]
        .iter_mut()
        .enumerate()
    {
        *b = (i % 251) as u8 + 1;
    }
    let listen = Request::Listen {
        port: 80,
        reuseport: false,
        families: 3,
        socket: 0,
    };
    let Some(Reply::Listening { socket, .. }) = good.request(&mut d, &listen) else {
        return Err("the good application could not listen".into());
    };
    let remote = std::net::SocketAddr::from((zerosplit::testing::IP_B, 80));
    let Some(Reply::Connecting { conn, slot }) = good.request(&mut d, &Request::Connect { remote })
    else {
        return Err("the good application could not connect".into());
    };
    let mut u = Unstructured::new(data);
    let mut own_posts = 0;
    let good_handles = (mr, conn, u64::from(socket));
    if hostile(&mut u, &mut d, &mut bad, good_handles, &mut own_posts).is_err() {
        return Ok(Reached::SetupOnly);
    }
    turns(&mut d, 4);
    // The hostile application may have ended itself (an empty datagram
    // reads as a hang-up); the good one must still be there.
    let views = d.attachments();
    if views.first().map(|v| v.id) != Some(1) {
        return Err(format!("the good application is gone: {views:?}"));
    }
    if let Some(v) = views.get(1) {
        if v.counters.posts > own_posts {
            return Err(format!(
                "the daemon took {} work requests of the hostile application; only {own_posts} named its own connections",
                v.counters.posts
            ));
        }
    }
    if good.chan.status(slot).map(|s| s.conn) != Some(conn) {
        return Err("the good application's connection is gone".into());
    }
    // Invariants.
    let bytes = good.memory.bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let want = if canary.contains(&i) {
            ((i - canary.start) % 251) as u8 + 1
        } else {
            0
        };
        if b != want {
            return Err(format!("good slot byte {i} is {b:#x}, not {want:#x}"));
        }
    }
    if let Some(i) = bad.memory.bytes().iter().position(|&b| b != 0) {
        return Err(format!("the daemon wrote byte {i} of the hostile slot"));
    }
    match good.request(&mut d, &Request::Stats) {
        Some(Reply::Stats(_)) => Ok(Reached::Engine),
        other => Err(format!(
            "the good application's stats request got {other:?}"
        )),
    }
}

/// The hostile application's moves.
fn hostile(
    u: &mut Unstructured<'_>,
    d: &mut Daemon,
    bad: &mut RawApp,
    (good_mr, good_conn, good_socket): (u64, u64, u64),
    own_posts: &mut u64,
) -> Result<()> {
    let mut own_conns: Vec<u64> = Vec::new();
    let mut own: Vec<u64> = Vec::new();
    for _ in 0..u.int_in_range(1u8..=40)? {
        match u.int_in_range(0u8..=6)? {
            0 => {
                // Any bytes as a message.
                let n = u.int_in_range(0usize..=MAX_MESSAGE + 16)?;
                let msg = u.bytes(n.min(u.len()))?.to_vec();
                sock::send(bad.sock.as_fd(), &msg, &[]).ok();
            }
            1 => {
                let req = match u.int_in_range(0u8..=15)? {
                    0 => Request::Hello {
                        name: text(u)?,
                        parent: u.arbitrary()?,
                    },
                    1 => Request::RegisterMemory {
                        len: size(u, SLOT as u64)?,
                        access: if u.ratio(3u8, 4)? {
                            u.int_in_range(1u8..=3)?
                        } else {
                            u.arbitrary()?
                        },
                    },
                    2 => Request::DeregisterMemory {
                        mr: pick(u, &own, good_mr)?,
                    },
                    3 => Request::Listen {
                        port: u.arbitrary()?,
                        reuseport: u.arbitrary()?,
                        families: u.int_in_range(0u8..=4)?,
                        socket: if u.arbitrary()? {
                            0
                        } else {
                            pick(u, &own, good_socket)? as u32
                        },
                    },
                    4 => Request::Unlisten {
                        socket: pick(u, &own, good_socket)? as u32,
                    },
                    5 => Request::Connect {
                        remote: if u.arbitrary()? {
                            (zerosplit::testing::IP_B, u.arbitrary()?).into()
                        } else {
                            (
                                std::net::Ipv6Addr::from(u.arbitrary::<[u8; 16]>()?),
                                u.arbitrary()?,
                            )
                                .into()
                        },
                    },
                    6 => Request::Close {
                        conn: pick(u, &own, good_conn)?,
                    },
                    7 => Request::Abort {
                        conn: pick(u, &own, good_conn)?,
                    },
                    8 => Request::Stats,
                    9 => Request::Accept {
                        socket: pick(u, &own, good_socket)? as u32,
                    },
                    10 => Request::Adopt {
                        conn: pick(u, &own, good_conn)?,
                    },
                    11 => Request::Exec {
                        armed: u.arbitrary()?,
                    },
                    12 => Request::Park {
                        conn: pick(u, &own, good_conn)?,
                        read: u.arbitrary()?,
                    },
                    13 => {
                        let mut moves = Vec::new();
                        for _ in 0..u.int_in_range(0u8..=4)? {
                            moves.push((pick(u, &own, good_mr)?, pick(u, &own, good_mr)?));
                        }
                        Request::Rehome {
                            conn: pick(u, &own, good_conn)?,
                            moves,
                        }
                    }
                    _ => Request::Listen {
                        port: 80,
                        reuseport: u.arbitrary()?,
                        families: u.int_in_range(1u8..=3)?,
                        socket: 0,
                    },
                };
                match bad.request(d, &req) {
                    Some(Reply::Registered { mr, .. }) => own.push(mr),
                    Some(Reply::Listening { socket, .. }) => own.push(u64::from(socket)),
                    Some(Reply::Connecting { conn, .. } | Reply::Accepted { conn, .. }) => {
                        own.push(conn);
                        own_conns.push(conn);
                    }
                    _ => {}
                }
            }
            2 => {
                let p = PostDesc {
                    wr_id: u.arbitrary()?,
                    conn: pick(u, &own, good_conn)?,
                    mr: pick(u, &own, good_mr)?,
                    offset: size(u, SLOT as u64)?,
                    len: size(u, SLOT as u64)?,
                    dir: u.int_in_range(0u32..=3)?,
                    reserved: if u.ratio(1u8, 8)? { u.arbitrary()? } else { 0 },
                };
                if bad.chan.post(p) && own_conns.contains(&p.conn) {
                    *own_posts += 1;
                }
                d.turn();
            }
            3 => {
                // Wild ring indices and flags.
                let rings = datapath::shm::ChannelLayout::new::<
                    PostDesc,
                    zerosplit::ipc::desc::CompletionDesc,
                >(
                    bad.layout().post_ring,
                    bad.layout().completion_ring,
                    bad.layout().status_slots as usize * 32,
                )
                .map_err(|_| arbitrary::Error::IncorrectFormat)?;
                let raw = bad
                    .channel_fd
                    .try_clone()
                    .ok()
                    .and_then(|fd| SharedMemory::open(fd, rings.len).ok())
                    .ok_or(arbitrary::Error::IncorrectFormat)?;
                let field = match u.int_in_range(0u8..=5)? {
                    0 => rings.post.producer,
                    1 => rings.post.consumer,
                    2 => rings.post.flags,
                    3 => rings.completion.producer,
                    4 => rings.completion.consumer,
                    _ => rings.completion.flags,
                };
                if let Some(a) = raw.atomic_u32(field) {
                    a.store(u.arbitrary()?, std::sync::atomic::Ordering::Release);
                }
                d.turn();
            }
            4 => {
                // A message with a descriptor beside it.
                let msg = Request::Stats.encode(99);
                sock::send(bad.sock.as_fd(), &msg, &[bad.memory.fd()]).ok();
                turns(d, 2);
            }
            _ => turns(d, usize::from(u.int_in_range(1u8..=4)?)),
        }
    }
    Ok(())
}

/// One of the hostile application's own handles, the good one's, or any.
fn pick(u: &mut Unstructured<'_>, own: &[u64], good: u64) -> Result<u64> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 if !own.is_empty() => own[u.choose_index(own.len())?],
        1 => good,
        _ => u.arbitrary()?,
    })
}

/// Mostly a size up to `max`, sometimes any.
fn size(u: &mut Unstructured<'_>, max: u64) -> Result<u64> {
    if u.ratio(3u8, 4)? {
        u.int_in_range(0..=max)
    } else {
        u.arbitrary()
    }
}

/// A short string of any bytes.
fn text(u: &mut Unstructured<'_>) -> Result<String> {
    let n = u.int_in_range(0usize..=40)?;
    Ok(String::from_utf8_lossy(u.bytes(n.min(u.len()))?).into_owned())
}
