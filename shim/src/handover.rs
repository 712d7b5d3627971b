//! A connection read or written before `fork`, handed to the process that
//! goes on with it (attached): its stream lives in the memory of the
//! process that used it, which a child does not map. So that process,
//! closing its descriptor, parks the connection ([`State::park`]) instead
//! of closing it when a child may hold it, and keeps its rings until the
//! daemon says the child took it up ([`State::take_handed`]); the child,
//! at its first use, takes it up with its bytes copied into rings of its
//! own ([`State::take_up_parked`]), waiting a while for the parent to let
//! go. Both using it at once is not supported: the second waits for the
//! first to close it, then sees it reset.

use std::time::{Duration, Instant};

use datapath::mr::Access;
use transports::segment::CloseReason;
use zerosplit::attach::AttachError;
use zerosplit::ipc::msg::ErrorCode;
use zerosplit::provider::Provider;
use zerosplit::stream::{Rings, RingsState};

use crate::backend::BackendError;
use crate::log::{log_line, unsupported};
use crate::sockets::{Kind, SockId, State, Stream};

/// How long a child waits for its parent to let go of a connection the
/// parent used before the fork.
const TAKE_UP_WAIT: Duration = Duration::from_secs(5);

impl State {
    /// Closing stream `s` (its last descriptor here), which had rings
    /// when this process forked: parks it if another process holds it,
    /// its rings kept until that one took it up. Whether it did.
    pub(crate) fn park(&mut self, s: &mut Stream) -> bool {
        let Some(read) = s.rings.as_ref().map(Rings::read_total) else {
            return false;
        };
        match self.stack.park(s.conn, read) {
            Ok(true) => {
                self.parked.insert(s.conn);
                self.orphans.insert(s.conn, s.rings.take());
                true
            }
            Ok(false) => false,
            Err(e) => {
                log_line(&format!("parking the connection to {}: {e}", s.peer));
                false
            }
        }
    }

    /// Parked connections another process took up: their rings are
    /// deregistered (retried while TX still reads them), never reused.
    /// Returns how many.
    pub(crate) fn take_handed(&mut self) -> usize {
        let handed = self.stack.take_handed();
        for conn in &handed {
            self.parked.remove(conn);
            if let Some(Some(r)) = self.orphans.remove(conn) {
                let st = r.state();
                self.unused_regions.extend([st.rx, st.tx]);
            }
        }
        if !handed.is_empty() {
            self.free_unused_regions();
        }
        handed.len()
    }

    /// At the first use in a forked child of stream `id`, which the
    /// parent read or wrote (its rings then were `old`): takes it up with
    /// its bytes once the parent let go of it (waiting up to
    /// [`TAKE_UP_WAIT`]); reset here otherwise.
    pub(crate) fn take_up_parked(&mut self, id: SockId, old: RingsState) {
        let ring = old.ring as usize;
        let rx = self.stack.register_memory(ring, Access::RECV);
        let tx = self.stack.register_memory(ring, Access::SEND);
        let (rx, tx) = match (rx, tx) {
            (Ok(rx), Ok(tx)) => (rx, tx),
            (rx, tx) => {
                for mr in [rx.ok(), tx.ok()].into_iter().flatten() {
                    let _ = self.stack.deregister_memory(mr);
                }
                self.no_memory += 1;
                log_line("no registered memory left to take up a connection used before fork(): reset it (raise the daemon's daemon.memory_per_attachment)");
                self.stack.let_go(old.conn);
                self.lose_stream(id);
                return;
            }
        };
        let until = Instant::now() + TAKE_UP_WAIT;
        let moves = [(old.rx, rx), (old.tx, tx)];
        let taken = loop {
            match self.stack.rehome(old.conn, &moves) {
                Err(BackendError::Daemon(AttachError::Refused {
                    code: ErrorCode::Busy,
                    ..
                })) if Instant::now() < until => std::thread::sleep(Duration::from_millis(2)),
                r => break r,
            }
        };
        let Some(Kind::Stream(s)) = self.socks.get_mut(&id).map(|s| &mut s.kind) else {
            return;
        };
        match taken {
            Ok(r) => {
                let mut rings = Rings::from_state(RingsState {
                    rx,
                    tx,
                    read: r.read,
                    rx_posted: r.rx_posted,
                    written: r.written,
                    ..old
                });
                let _ = rings.repost(&mut self.stack);
                s.rings = Some(rings);
                s.sends = r.sends as usize;
                if let Some(len) = r.peer_fin {
                    s.peer_fin = Some(len);
                    s.received = s.received.max(len);
                }
            }
            Err(e) => {
                unsupported(format!(
                    "a connection to {} read or written before fork(), used here while the other process still uses it: {e}; reset here",
                    s.peer
                ));
                for mr in [rx, tx] {
                    let _ = self.stack.deregister_memory(mr);
                }
                self.stack.let_go(old.conn);
                self.lose_stream(id);
            }
        }
    }

    /// Stream `id` is no longer this process's to use: it reads as reset.
    pub(crate) fn lose_stream(&mut self, id: SockId) {
        let Some(Kind::Stream(s)) = self.socks.get_mut(&id).map(|s| &mut s.kind) else {
            return;
        };
        s.rings = None;
        s.lazy = false;
        s.alive = false;
        s.closed = Some(CloseReason::Reset);
        s.so_error = Some(libc::ECONNRESET);
        let conn = s.conn;
        self.by_conn.remove(&conn);
    }
}
