//! The daemon's isolation and limits, driven turn by turn over the fake
//! kernel by applications that speak the protocol by hand.

use std::os::fd::AsFd;
use std::path::PathBuf;

use super::testing::{fake_daemon, RawApp};
use super::*;
use crate::config::ByteSize;
use crate::ipc::msg::{ErrorCode, Reply, Request};
use crate::testing::IP_B;

const SLOT: usize = 64 << 10;

fn path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("zs-daemon-{name}-{}.sock", std::process::id()))
}

fn daemon(name: &str, f: impl FnOnce(&mut DaemonConfig)) -> (Daemon, PathBuf) {
    let p = path(name);
    let mut c = DaemonConfig {
        socket: p.clone(),
        max_attachments: 2,
        memory_per_attachment: ByteSize(SLOT as u64),
        ..DaemonConfig::default()
    };
    f(&mut c);
    (fake_daemon(&p, c).expect("daemon"), p)
}

/// A new listening socket on `port`.
fn listen(port: u16, reuseport: bool) -> Request {
    Request::Listen {
        port,
        reuseport,
        families: 3,
        socket: 0,
    }
}

/// The socket and status entry of a `Listening` reply.
fn listening(r: Option<Reply>) -> (u32, u32) {
    match r {
        Some(Reply::Listening { socket, slot }) => (socket, slot),
        other => panic!("not listening: {other:?}"),
    }
}

fn refused(r: Option<Reply>) -> (ErrorCode, String) {
    match r {
        Some(Reply::Error { code, message }) => (code, message),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn an_application_beyond_the_limit_is_refused_naming_the_key() {
    let (mut d, p) = daemon("limit", |_| ());
    let _a = RawApp::attach(&mut d, &p).expect("first");
    let _b = RawApp::attach(&mut d, &p).expect("second");
    let err = RawApp::attach(&mut d, &p).expect_err("third");
    assert!(err.contains("daemon.max_attachments (2)"), "{err}");
    assert_eq!(d.counters().attach_refused, 1);
}

#[test]
fn a_hang_up_ends_the_attachment_and_frees_its_memory() {
    let (mut d, p) = daemon("hangup", |_| ());
    let mut a = RawApp::attach(&mut d, &p).expect("attach");
    let full = Request::RegisterMemory {
        len: SLOT as u64,
        access: 3,
    };
    assert!(matches!(
        a.request(&mut d, &full),
        Some(Reply::Registered { .. })
    ));
    assert_eq!(d.free_slots(), 1);
    a.memory.bytes_mut()[..4].copy_from_slice(b"mine");
    drop(a);
    // A process another test forks may hold the socket for an instant
    // (between its fork and exec): turn until the hang-up shows, at most
    // one second (the bound).
    let start = std::time::Instant::now();
    while d.free_slots() < 2 && start.elapsed() < std::time::Duration::from_secs(1) {
        d.turn();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(d.free_slots(), 2, "the slot is free again");
    assert_eq!(d.counters().attachments_lost, 1);
    assert!(d.attachments().is_empty());
    // The whole slot can be registered again, and reads as zeros.
    let mut b = RawApp::attach(&mut d, &p).expect("attach again");
    let mut c = RawApp::attach(&mut d, &p).expect("and another");
    for app in [&mut b, &mut c] {
        let Some(Reply::Registered { offset, .. }) = app.request(&mut d, &full) else {
            panic!("the full slot registers");
        };
        assert_eq!(offset, 0);
        assert!(app.memory.bytes().iter().all(|&x| x == 0), "no leftovers");
    }
}

/// Registers 4 KiB for both directions: the region's handle (as the
/// protocol carries it) and its offset in the slot.
fn register_page(app: &mut RawApp, d: &mut Daemon) -> (u64, u64) {
    let page = Request::RegisterMemory {
        len: 4096,
        access: 3,
    };
    match app.request(d, &page) {
        Some(Reply::Registered { mr, offset, .. }) => (mr, offset),
        other => panic!("register: {other:?}"),
    }
}

#[test]
fn names_are_looked_up_in_the_asking_applications_own_tables() {
    let (mut d, p) = daemon("names", |_| ());
    let mut good = RawApp::attach(&mut d, &p).expect("good");
    let mut bad = RawApp::attach(&mut d, &p).expect("bad");
    let (mr, _) = register_page(&mut good, &mut d);
    let remote = std::net::SocketAddr::from((IP_B, 80));
    let Some(Reply::Connecting { conn, slot }) = good.request(&mut d, &Request::Connect { remote })
    else {
        panic!("connect");
    };
    assert!(matches!(
        good.request(&mut d, &listen(80, false)),
        Some(Reply::Listening { .. })
    ));
    // The other application names them all.
    let (code, _) = refused(bad.request(&mut d, &Request::Close { conn }));
    assert_eq!(code, ErrorCode::UnknownConnection);
    let (code, _) = refused(bad.request(&mut d, &Request::DeregisterMemory { mr }));
    assert_eq!(code, ErrorCode::UnknownRegion);
    let (code, msg) = refused(bad.request(&mut d, &listen(80, false)));
    assert_eq!(code, ErrorCode::PortInUse, "{msg}");
    let (own, _) = register_page(&mut bad, &mut d);
    for (c, m) in [(conn, own), (conn, mr)] {
        bad.chan.post(crate::ipc::desc::PostDesc {
            wr_id: 1,
            conn: c,
            mr: m,
            offset: 0,
            len: 100,
            dir: crate::ipc::desc::DIR_RECV,
            reserved: 0,
        });
    }
    d.turn();
    let views = d.attachments();
    assert_eq!(views[1].counters.posts, 0);
    assert_eq!(views[1].counters.posts_refused, 2);
    assert_eq!(
        good.chan.status(slot).map(|s| s.conn),
        Some(conn),
        "the good application's connection is untouched"
    );
    assert_eq!(views[0].connections, 1);
}

#[test]
fn limits_and_bad_messages_are_refused_and_counted() {
    let (mut d, p) = daemon("limits", |c| c.max_connections = 1);
    let mut a = RawApp::attach(&mut d, &p).expect("attach");
    let remote = std::net::SocketAddr::from((IP_B, 80));
    assert!(matches!(
        a.request(&mut d, &Request::Connect { remote }),
        Some(Reply::Connecting { .. })
    ));
    let (code, msg) = refused(a.request(&mut d, &Request::Connect { remote }));
    assert_eq!(code, ErrorCode::Limit);
    assert!(msg.contains("daemon.max_connections (1)"), "{msg}");
    let (code, _) = refused(a.request(
        &mut d,
        &Request::RegisterMemory {
            len: SLOT as u64 + 1,
            access: 3,
        },
    ));
    assert_eq!(code, ErrorCode::Limit);
    // Garbage, and a descriptor beside a good message.
    sock::send(a.sock.as_fd(), b"not a message", &[]).expect("send");
    let (code, _) = refused(super::testing::reply(&mut d, &a.sock).map(|r| r.0));
    assert_eq!(code, ErrorCode::BadMessage);
    sock::send(a.sock.as_fd(), &Request::Stats.encode(9), &[a.memory.fd()]).expect("send");
    let (code, _) = refused(super::testing::reply(&mut d, &a.sock).map(|r| r.0));
    assert_eq!(code, ErrorCode::Descriptors);
    assert_eq!(d.counters().bad_messages, 2);
    assert!(matches!(
        a.request(&mut d, &Request::Stats),
        Some(Reply::Stats(_))
    ));
}

#[test]
fn a_port_has_one_accept_queue_and_only_a_child_names_a_parent() {
    let (mut d, p) = daemon("holders", |c| c.max_attachments = 3);
    let mut a = RawApp::attach(&mut d, &p).expect("a");
    let (socket, slot) = listening(a.request(&mut d, &listen(80, false)));
    let again = Request::Listen {
        port: 80,
        reuseport: false,
        families: 3,
        socket,
    };
    assert_eq!(
        a.request(&mut d, &again),
        Some(Reply::Listening { socket, slot }),
        "taking up a held socket names the same entry"
    );
    let (code, msg) = refused(a.request(&mut d, &listen(80, false)));
    assert_eq!(code, ErrorCode::PortInUse, "a second socket: {msg}");
    assert!(msg.contains("this program's"), "{msg}");
    let (code, _) = refused(a.request(&mut d, &Request::Accept { socket }));
    assert_eq!(code, ErrorCode::WouldBlock, "nothing waits");
    let other = socket + 1;
    let (code, _) = refused(a.request(&mut d, &Request::Accept { socket: other }));
    assert_eq!(code, ErrorCode::NotListening);
    let (code, _) = refused(a.request(&mut d, &Request::Adopt { conn: 12345 }));
    assert_eq!(code, ErrorCode::UnknownConnection, "nothing held to adopt");
    // This process is not its own child: it cannot inherit a's sockets.
    let err = RawApp::attach_as(&mut d, &p, a.welcome.attachment).expect_err("not a child");
    assert!(err.contains("not a child of attachment"), "{err}");
    let err = RawApp::attach_as(&mut d, &p, 999).expect_err("no such parent");
    assert!(err.contains("attachment 999 is gone"), "{err}");
    let mut b = RawApp::attach(&mut d, &p).expect("b");
    let (code, _) = refused(b.request(&mut d, &listen(80, false)));
    assert_eq!(code, ErrorCode::PortInUse);
    let (code, _) = refused(b.request(&mut d, &Request::Unlisten { socket }));
    assert_eq!(code, ErrorCode::NotListening, "a's socket is not b's");
    assert_eq!(
        a.request(&mut d, &Request::Unlisten { socket }),
        Some(Reply::Done)
    );
    assert!(
        matches!(
            b.request(&mut d, &listen(80, false)),
            Some(Reply::Listening { .. })
        ),
        "the port is free once its last holder let go"
    );
}

#[test]
fn the_region_table_holds_every_attachments_regions() {
    let mut config = crate::config::Config::default();
    config.daemon.max_attachments = 9;
    let hosts = host_configs(&config).expect("tcp");
    let want = 9 * requests::max_regions(config.daemon.max_connections);
    assert!(
        hosts.iter().all(|h| h.nic.max_regions >= want),
        "{} regions for {want}",
        hosts[0].nic.max_regions
    );
}

/// A program that announced an `execve` hangs up (its socket closes at
/// the exec): its attachment outlives it until the new program, the same
/// process, attaches naming it, and then goes on as the new program's:
/// the same attachment, listener, region and memory bytes. Without the
/// announcement (or disarmed: the exec failed) a hang-up ends it all.
#[test]
fn an_announced_exec_hands_the_attachment_to_the_new_program() {
    let (mut d, p) = daemon("exec", |_| ());
    let mut a = RawApp::attach(&mut d, &p).expect("a");
    let (socket, _) = listening(a.request(&mut d, &listen(80, false)));
    let old = a.welcome.attachment;
    let (mr, offset) = register_page(&mut a, &mut d);
    let at = offset as usize;
    a.memory.bytes_mut()[at..at + 5].copy_from_slice(b"kept!");
    let armed = Request::Exec { armed: true };
    assert_eq!(a.request(&mut d, &armed), Some(Reply::Done));
    drop(a);
    for _ in 0..20 {
        d.turn();
    }
    let views = d.attachments();
    assert_eq!(views.len(), 1, "the exec'ing program lives on a while");
    assert_eq!(views[0].listening, vec![80]);
    // A reload meanwhile changes the limits of new attachments, not the
    // sizes of this one's channel.
    let mut reloaded = d.config.clone();
    reloaded.max_posted *= 2;
    reloaded.max_connections += 3;
    d.set_limits(reloaded);
    let mut b = RawApp::attach_as(&mut d, &p, old).expect("the new program");
    let held = Request::Listen {
        port: 80,
        reuseport: false,
        families: 3,
        socket,
    };
    assert_eq!(listening(b.request(&mut d, &held)).0, socket);
    assert_eq!(b.welcome.attachment, old, "the same attachment goes on");
    assert_eq!(&b.memory.bytes()[at..at + 5], b"kept!", "the same memory");
    let views = d.attachments();
    assert_eq!(views.len(), 1, "one attachment: {views:?}");
    assert_eq!(views[0].listening, vec![80]);
    assert_eq!(views[0].memory_bytes, 4096, "its region is still its own");
    let again = Request::DeregisterMemory { mr };
    assert_eq!(b.request(&mut d, &again), Some(Reply::Done), "{mr:?}");
    assert_eq!(d.counters().attachments_exec, 1);
    assert_eq!(d.counters().attachments_lost, 0);

    // Disarmed, a hang-up ends the attachment and its port at once.
    assert_eq!(b.request(&mut d, &armed), Some(Reply::Done));
    let disarmed = Request::Exec { armed: false };
    assert_eq!(b.request(&mut d, &disarmed), Some(Reply::Done));
    drop(b);
    let start = std::time::Instant::now();
    while !d.attachments().is_empty() && start.elapsed() < std::time::Duration::from_secs(1) {
        d.turn();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(d.attachments().is_empty());
    assert_eq!(d.counters().attachments_lost, 1);
    let mut c = RawApp::attach(&mut d, &p).expect("c");
    assert!(
        matches!(
            c.request(&mut d, &listen(80, false)),
            Some(Reply::Listening { .. })
        ),
        "the port is free again"
    );
}

/// `SO_REUSEPORT` on every socket: a second program joins the port with
/// a socket (and accept queue) of its own; one without it, or a port
/// first taken without it, is refused; the port stops listening with
/// its last socket.
#[test]
fn reuseport_sockets_of_several_programs_share_a_port() {
    let (mut d, p) = daemon("reuseport", |c| c.max_attachments = 4);
    let shared = listen(81, true);
    let plain = listen(81, false);
    let mut a = RawApp::attach(&mut d, &p).expect("a");
    let mut b = RawApp::attach(&mut d, &p).expect("b");
    let mut c = RawApp::attach(&mut d, &p).expect("c");
    let (sa, _) = listening(a.request(&mut d, &shared));
    let (sb, _) = listening(b.request(&mut d, &shared));
    assert_ne!(sa, sb, "a socket each");
    let (code, msg) = refused(c.request(&mut d, &plain));
    assert_eq!(code, ErrorCode::PortInUse);
    assert!(msg.contains("SO_REUSEPORT"), "{msg}");
    let (code, _) = refused(b.request(&mut d, &Request::Accept { socket: sb }));
    assert_eq!(code, ErrorCode::WouldBlock, "b's own queue is empty");
    for (app, socket) in [(&mut a, sa), (&mut b, sb)] {
        assert_eq!(
            app.request(&mut d, &Request::Unlisten { socket }),
            Some(Reply::Done)
        );
    }
    assert!(matches!(
        c.request(&mut d, &plain),
        Some(Reply::Listening { .. })
    ));
    let (code, _) = refused(a.request(&mut d, &shared));
    assert_eq!(code, ErrorCode::PortInUse, "taken without SO_REUSEPORT");
}

/// nginx's `listen 80; listen [::]:80`: an IPv4 socket and an IPv6-only
/// one share a port without `SO_REUSEPORT`; a dual-stack socket does not
/// join them, and a families byte that names none is refused.
#[test]
fn sockets_of_different_families_share_a_port() {
    let (mut d, p) = daemon("families", |c| c.max_attachments = 2);
    let mut a = RawApp::attach(&mut d, &p).expect("a");
    let of = |families| Request::Listen {
        port: 83,
        reuseport: false,
        families,
        socket: 0,
    };
    let (s4, _) = listening(a.request(&mut d, &of(1)));
    let (s6, _) = listening(a.request(&mut d, &of(2)));
    assert_ne!(s4, s6);
    let (code, _) = refused(a.request(&mut d, &of(3)));
    assert_eq!(code, ErrorCode::PortInUse, "dual-stack overlaps both");
    let (code, _) = refused(a.request(&mut d, &of(2)));
    assert_eq!(code, ErrorCode::PortInUse, "a second IPv6-only one");
    let (code, msg) = refused(a.request(&mut d, &of(0)));
    assert_eq!(code, ErrorCode::BadMessage, "{msg}");
    assert_eq!(d.attachments()[0].listening, vec![83, 83]);
}

/// nginx's `listen … reuseport`: the master opens a socket per worker on
/// one port, each worker (a child) inherits them all and lets go of the
/// others'; the port listens until the last socket's last holder lets
/// go.
#[test]
fn one_program_holds_several_reuseport_sockets_of_a_port() {
    let (mut d, p) = daemon("reuseport-one", |c| c.max_attachments = 2);
    let mut master = RawApp::attach(&mut d, &p).expect("master");
    let (s1, slot1) = listening(master.request(&mut d, &listen(82, true)));
    let (s2, slot2) = listening(master.request(&mut d, &listen(82, true)));
    assert_ne!(s1, s2);
    assert_ne!(slot1, slot2, "a status entry each");
    let (code, _) = refused(master.request(&mut d, &listen(82, false)));
    assert_eq!(code, ErrorCode::PortInUse, "a third without SO_REUSEPORT");
    assert_eq!(d.attachments()[0].listening, vec![82, 82]);
    for socket in [s1, s2] {
        let (code, _) = refused(master.request(&mut d, &Request::Accept { socket }));
        assert_eq!(code, ErrorCode::WouldBlock);
    }
    // The master lets go of one; the port stays with the other.
    assert_eq!(
        master.request(&mut d, &Request::Unlisten { socket: s1 }),
        Some(Reply::Done)
    );
    let (code, _) = refused(master.request(&mut d, &Request::Accept { socket: s1 }));
    assert_eq!(code, ErrorCode::NotListening);
    let mut other = RawApp::attach(&mut d, &p).expect("another program");
    let (code, _) = refused(other.request(&mut d, &listen(82, false)));
    assert_eq!(code, ErrorCode::PortInUse, "still listening on s2");
    assert_eq!(
        master.request(&mut d, &Request::Unlisten { socket: s2 }),
        Some(Reply::Done)
    );
    listening(other.request(&mut d, &listen(82, false)));
}

/// A work request on `conn` over `len` bytes at `offset` of region `mr`.
fn post(app: &mut RawApp, conn: u64, mr: u64, offset: u64, len: u64, dir: u32, wr_id: u64) {
    assert!(app.chan.post(crate::ipc::desc::PostDesc {
        wr_id,
        conn,
        mr,
        offset,
        len,
        dir,
        reserved: 0,
    }));
}

/// A parent with a connection it read and wrote (a receive and a send
/// posted over a page holding `pattern`), and a child holding it.
fn parent_and_child(d: &mut Daemon, p: &std::path::Path, pattern: &[u8]) -> [(RawApp, u64); 2] {
    let mut parent = RawApp::attach(d, p).expect("parent");
    let (mr, off) = register_page(&mut parent, d);
    parent.memory.bytes_mut()[off as usize..][..4096].copy_from_slice(pattern);
    let remote = std::net::SocketAddr::from((IP_B, 80));
    let Some(Reply::Connecting { conn, .. }) = parent.request(d, &Request::Connect { remote })
    else {
        panic!("connect");
    };
    post(
        &mut parent,
        conn,
        mr,
        0,
        2048,
        crate::ipc::desc::DIR_RECV,
        1,
    );
    post(
        &mut parent,
        conn,
        mr,
        2048,
        1000,
        crate::ipc::desc::DIR_SEND,
        2,
    );
    d.turn();
    assert_eq!(d.attachments()[0].posted, 2);
    let child = RawApp::attach(d, p).expect("child");
    // What a forked child's hello does (the lineage check needs a fork).
    d.inherit(parent.welcome.attachment, child.welcome.attachment);
    [(parent, conn), (child, mr)]
}

/// A connection its parent read or wrote is taken up by a child holding
/// it once the parent parked it: the bytes are copied into the child's
/// region, its work requests still to complete and the parent's read
/// offset go to the child, and the parent hears its memory is free.
#[test]
fn a_parked_connection_is_taken_up_with_its_bytes_by_a_holder() {
    use crate::ipc::desc::KIND_HANDED;
    let (mut d, p) = daemon("handover", |c| c.max_attachments = 3);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let [(mut parent, conn), (mut child, mr)] = parent_and_child(&mut d, &p, &pattern);
    let (cmr, coff) = register_page(&mut child, &mut d);
    let rehome = |from, to| Request::Rehome {
        conn,
        moves: vec![(from, to)],
    };

    let (code, msg) = refused(child.request(&mut d, &rehome(mr, cmr)));
    assert_eq!(code, ErrorCode::Busy, "the parent still uses it: {msg}");
    let (code, _) = refused(child.request(&mut d, &Request::Park { conn, read: 0 }));
    assert_eq!(code, ErrorCode::UnknownConnection, "only its user parks it");
    let park = Request::Park { conn, read: 100 };
    assert_eq!(parent.request(&mut d, &park), Some(Reply::Done));
    let (code, _) = refused(child.request(&mut d, &rehome(cmr, mr)));
    assert_eq!(
        code,
        ErrorCode::UnknownRegion,
        "the regions are named by owner"
    );
    let (code, _) = refused(child.request(&mut d, &Request::Adopt { conn }));
    assert_eq!(
        code,
        ErrorCode::Busy,
        "a parked connection is taken up whole"
    );

    // The parent's other memory (nothing of this connection's was posted
    // there: a send ring never written, say) is moved as nothing.
    let (other, ooff) = register_page(&mut parent, &mut d);
    parent.memory.bytes_mut()[ooff as usize..][..6].copy_from_slice(b"secret");
    let (cmr2, coff2) = register_page(&mut child, &mut d);
    let greedy = Request::Rehome {
        conn,
        moves: vec![(mr, cmr), (other, cmr2)],
    };
    let r = match child.request(&mut d, &greedy) {
        Some(Reply::Rehomed(r)) => r,
        other => panic!("not taken up: {other:?}"),
    };
    assert!(
        child.memory.bytes()[coff2 as usize..][..4096]
            .iter()
            .all(|&b| b == 0),
        "the parent's other memory is not copied"
    );
    assert_eq!(
        (r.read, r.rx_posted, r.written, r.recvs, r.sends, r.peer_fin),
        (100, 2048, 1000, 1, 1, None)
    );
    assert_eq!(r.remote, std::net::SocketAddr::from((IP_B, 80)));
    assert!(
        child.memory.bytes()[coff as usize..][..4096] == pattern[..],
        "the child's region holds the connection's bytes"
    );
    assert_eq!(child.chan.status(r.slot).map(|s| s.conn), Some(conn));
    let views = d.attachments();
    assert_eq!((views[0].posted, views[1].posted), (0, 2));
    assert_eq!(d.counters().conns_handed, 1);
    let handed = std::iter::from_fn(|| parent.chan.take_completion())
        .any(|c| c.kind == KIND_HANDED && c.conn == conn);
    assert!(handed, "the parent is told it is free of it");
    assert_eq!(
        parent.request(&mut d, &Request::DeregisterMemory { mr }),
        Some(Reply::Done),
        "nothing of the parent's memory is posted any more"
    );
    let (code, _) = refused(child.request(&mut d, &Request::DeregisterMemory { mr: cmr }));
    assert_eq!(code, ErrorCode::Failed, "the child's memory is posted on");
    let (code, _) = refused(child.request(&mut d, &rehome(mr, cmr)));
    assert_eq!(code, ErrorCode::UnknownConnection, "taken up once");
}

/// A parent that parked a connection and exits lets go of everything
/// else at once (its listener: the port is free) and lingers, its memory
/// with it, until the connection is taken up or closed: here the child
/// lets go of it, which closes it (a FIN: nothing was left unread), and
/// the parent ends.
#[test]
fn a_parker_that_exits_lingers_until_its_parked_connection_closes() {
    let (mut d, p) = daemon("lingers", |c| c.max_attachments = 3);
    let [(mut parent, conn), (mut child, _)] = parent_and_child(&mut d, &p, &[7; 4096]);
    listening(parent.request(&mut d, &listen(81, false)));
    let (code, _) = refused(parent.request(&mut d, &Request::Park { conn: 1, read: 0 }));
    assert_eq!(code, ErrorCode::UnknownConnection);
    assert_eq!(
        parent.request(&mut d, &Request::Park { conn, read: 0 }),
        Some(Reply::Done)
    );
    drop(parent);
    for _ in 0..50 {
        d.turn();
    }
    assert_eq!(d.attachments().len(), 2, "the parker lingers");
    let mut other = RawApp::attach(&mut d, &p).expect("another program");
    listening(other.request(&mut d, &listen(81, false)));
    assert_eq!(
        child.request(&mut d, &Request::Close { conn }),
        Some(Reply::Done)
    );
    for _ in 0..50 {
        d.turn();
    }
    assert_eq!(d.attachments().len(), 2, "it ends with the connection");
    assert_eq!(d.counters().attachments_lost, 1);
    assert_eq!(d.counters().conns_reset, 0, "closed, not reset");
}

/// `Park` of a connection no other process holds is refused (the caller
/// closes it as usual).
#[test]
fn parking_a_connection_nobody_else_holds_is_refused() {
    let (mut d, p) = daemon("unshared", |_| ());
    let mut app = RawApp::attach(&mut d, &p).expect("app");
    let remote = std::net::SocketAddr::from((IP_B, 80));
    let Some(Reply::Connecting { conn, .. }) = app.request(&mut d, &Request::Connect { remote })
    else {
        panic!("connect");
    };
    let (code, msg) = refused(app.request(&mut d, &Request::Park { conn, read: 0 }));
    assert_eq!(code, ErrorCode::NotShared, "{msg}");
}

/// A memory slot goes to its next application cleared: bytes the last one
/// left where no region lies are not the next one's to read.
#[test]
fn a_slot_reaches_its_next_application_cleared() {
    let (mut d, p) = daemon("cleared", |c| c.max_attachments = 1);
    let mut a = RawApp::attach(&mut d, &p).expect("attach");
    a.memory.bytes_mut()[SLOT - 4..].copy_from_slice(b"left");
    drop(a);
    let start = std::time::Instant::now();
    while d.free_slots() < 1 && start.elapsed() < std::time::Duration::from_secs(1) {
        d.turn();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let b = RawApp::attach(&mut d, &p).expect("the slot again");
    assert!(
        b.memory.bytes().iter().all(|&x| x == 0),
        "the last application's bytes are gone"
    );
}

/// The other order: the child lets go of the parked connection while the
/// parent lives (the connection closes), then the parent exits: it does
/// not linger, and the connection it closed is not reset.
#[test]
fn a_parker_whose_connection_closed_ends_when_it_exits() {
    let (mut d, p) = daemon("unparked", |c| c.max_attachments = 3);
    let [(mut parent, conn), (mut child, _)] = parent_and_child(&mut d, &p, &[7; 4096]);
    let park = Request::Park { conn, read: 0 };
    assert_eq!(parent.request(&mut d, &park), Some(Reply::Done));
    let close = Request::Close { conn };
    assert_eq!(child.request(&mut d, &close), Some(Reply::Done));
    let entry =
        d.attachments[&parent.welcome.attachment].conns[&crate::idmap::ConnId::from_bits(conn)];
    assert_eq!(
        (entry.parked, entry.closing),
        (None, true),
        "closing: no longer parked for anyone"
    );
    drop(parent);
    let start = std::time::Instant::now();
    while d.attachments().len() > 1 && start.elapsed() < std::time::Duration::from_secs(1) {
        d.turn();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(d.attachments().len(), 1, "the parent does not linger");
    assert_eq!(d.counters().conns_reset, 0);
}
