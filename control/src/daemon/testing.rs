//! An application that speaks the daemon's protocol by hand, one step at
//! a time (feature `testing`): for tests and fuzz targets that drive a
//! [`Daemon`] turn by turn in one thread, or play a hostile client.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use datapath::shm::SharedMemory;

use super::Daemon;
use crate::ipc::channel::{AppEnd, Layout};
use crate::ipc::msg::{Reply, Request, Welcome, MAX_MESSAGE};
use crate::ipc::sock::{self, Received};

/// Turns a daemon may take to answer one request.
const TURNS: usize = 50;

/// An attached application without the provider library.
#[derive(Debug)]
pub struct RawApp {
    /// Its socket.
    pub sock: OwnedFd,
    /// Its memory slot, mapped.
    pub memory: SharedMemory,
    /// Its channel.
    pub chan: AppEnd,
    /// A second descriptor of the channel's memfd (to map it raw).
    pub channel_fd: OwnedFd,
    /// What the welcome said.
    pub welcome: Welcome,
    seq: u32,
}

/// The next reply on `sock`, turning `daemon` until it comes (at most
/// [`TURNS`] turns); `None` on hang-up or silence.
pub fn reply(daemon: &mut Daemon, sock: &OwnedFd) -> Option<(Reply, Vec<OwnedFd>)> {
    let mut buf = vec![0; MAX_MESSAGE];
    for _ in 0..TURNS {
        daemon.turn();
        match sock::recv(sock.as_fd(), &mut buf, true) {
            Ok(Received::Message { len, fds, .. }) => {
                return Reply::decode(&buf[..len]).ok().map(|(r, _)| (r, fds))
            }
            Ok(Received::Empty) => {}
            _ => return None,
        }
    }
    None
}

impl RawApp {
    /// Attaches to `daemon` listening at `path`.
    ///
    /// # Errors
    /// What went wrong, in words.
    pub fn attach(daemon: &mut Daemon, path: &Path) -> Result<RawApp, String> {
        Self::attach_as(daemon, path, 0)
    }

    /// [`RawApp::attach`] naming attachment `parent` as the one this
    /// process was forked from.
    ///
    /// # Errors
    /// What went wrong, in words.
    pub fn attach_as(daemon: &mut Daemon, path: &Path, parent: u32) -> Result<RawApp, String> {
        let sock = sock::connect(path).map_err(|e| format!("connect: {e}"))?;
        let hello = Request::Hello {
            name: "raw".into(),
            parent,
        }
        .encode(1);
        sock::send(sock.as_fd(), &hello, &[]).map_err(|e| format!("hello: {e}"))?;
        let (welcome, fds) = match reply(daemon, &sock) {
            Some((Reply::Welcome(w), fds)) => (w, fds),
            other => return Err(format!("no welcome: {other:?}")),
        };
        let [memory, channel, _wake_daemon, _wake_app]: [OwnedFd; 4] = fds
            .try_into()
            .map_err(|_| "the welcome lacks its 4 descriptors".to_string())?;
        let memory =
            SharedMemory::open(memory, welcome.slot_len as usize).map_err(|e| e.to_string())?;
        let channel_fd = channel.try_clone().map_err(|e| e.to_string())?;
        let chan = AppEnd::open(channel, Self::layout_of(&welcome)).map_err(|e| e.to_string())?;
        Ok(RawApp {
            sock,
            memory,
            chan,
            channel_fd,
            welcome,
            seq: 1,
        })
    }

    fn layout_of(w: &Welcome) -> Layout {
        Layout {
            post_ring: w.post_ring,
            completion_ring: w.completion_ring,
            status_slots: w.max_connections,
        }
    }

    /// The channel's sizes.
    pub fn layout(&self) -> Layout {
        Self::layout_of(&self.welcome)
    }

    /// Sends `req` and turns `daemon` until the reply comes.
    pub fn request(&mut self, daemon: &mut Daemon, req: &Request) -> Option<Reply> {
        self.seq += 1;
        sock::send(self.sock.as_fd(), &req.encode(self.seq), &[]).ok()?;
        reply(daemon, &self.sock).map(|r| r.0)
    }
}

/// A daemon over the datapath's fake kernel (host A of
/// [`crate::testing::Pair`], every peer on the link), listening at `path`,
/// with `config`'s limits; its slots are `config.memory_per_attachment`.
///
/// # Errors
/// What went wrong, in words.
pub fn fake_daemon(path: &Path, config: crate::config::DaemonConfig) -> Result<Daemon, String> {
    let mut host = crate::testing::Pair::config();
    host.nic.xsk.umem.mr_slots = Some(crate::daemon::slot_geometry(&config));
    let (stack, _kernel) = crate::stack::Stack::fake(
        host,
        crate::testing::IP_A,
        crate::testing::MAC_A,
        crate::testing::MAC_B,
    )
    .map_err(|e| format!("fake stack: {e}"))?;
    let listener = sock::listen(path, 0o600, None).map_err(|e| format!("listen: {e}"))?;
    Ok(Daemon::new(
        crate::daemon::Queues::one(stack).map_err(|e| format!("queue: {e}"))?,
        config,
        listener,
        crate::idle::PollConfig::default(),
    ))
}
