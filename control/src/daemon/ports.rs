//! Listening ports and the sockets on them. A port has one listening
//! socket, held by the attachment that listened and by every process
//! forked (or exec'd) from it, whose accept queue is the stack's; or, when
//! each asked with `SO_REUSEPORT` and all are one user's (Linux's rule),
//! several independent sockets, each with its holders and an accept queue
//! of its own: the daemon takes the stack's accepted connections and
//! spreads them over the sockets by a hash of the peer's address and
//! port, as a Linux reuseport group does.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::net::SocketAddrV4;

use crate::idmap::ConnId;

/// Connections one socket of a reuseport group keeps waiting, at most;
/// one hashed to a full socket is reset (counted `accept_overflow`), as
/// Linux drops a connection for a listener whose queue is full.
pub(super) const MAX_SOCKET_QUEUE: usize = 1024;

/// One listening socket: who holds it, and (in a reuseport group) the
/// connections waiting for one of them to accept.
#[derive(Debug, Default)]
pub(super) struct Socket {
    pub holders: Vec<u32>,
    pub queue: VecDeque<ConnId>,
}

/// Where an accepted connection comes from ([`Port::next_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// This one, waiting on the socket.
    Waiting(ConnId),
    /// The stack's accept queue.
    Stack,
    /// None waits.
    Nothing,
}

/// A listening port.
#[derive(Debug)]
pub(super) struct Port {
    /// Its first socket asked for `SO_REUSEPORT`: others may join.
    pub reuseport: bool,
    /// The user the port's sockets belong to.
    pub uid: u32,
    pub sockets: Vec<Socket>,
}

impl Port {
    /// A port with one socket, held by `holder`.
    pub fn new(holder: u32, reuseport: bool, uid: u32) -> Port {
        Port {
            reuseport,
            uid,
            sockets: vec![Socket {
                holders: vec![holder],
                queue: VecDeque::new(),
            }],
        }
    }

    /// Whether a socket of `uid` asking for `reuseport` may join.
    pub fn admits(&self, reuseport: bool, uid: u32) -> bool {
        self.reuseport && reuseport && self.uid == uid
    }

    /// Whether the stack's accepted connections are spread over sockets.
    pub fn spread(&self) -> bool {
        self.sockets.len() > 1
    }

    /// The socket `holder` holds.
    pub fn socket_of(&mut self, holder: u32) -> Option<&mut Socket> {
        self.sockets
            .iter_mut()
            .find(|s| s.holders.contains(&holder))
    }

    /// Connections waiting in the own queue of the socket `holder` holds.
    pub fn waiting_for(&self, holder: u32) -> Option<u64> {
        self.sockets
            .iter()
            .find(|s| s.holders.contains(&holder))
            .map(|s| s.queue.len() as u64)
    }

    /// Where the next connection `holder` accepts comes from: its
    /// socket's own queue (a reuseport group's share, or what was left in
    /// it when the group shrank to this one socket), else the stack's
    /// queue unless the port is spread.
    pub fn next_for(&mut self, holder: u32) -> Next {
        let spread = self.spread();
        match self.socket_of(holder).and_then(|s| s.queue.pop_front()) {
            Some(conn) => Next::Waiting(conn),
            None if spread => Next::Nothing,
            None => Next::Stack,
        }
    }

    /// A new socket of `holder`'s in the group.
    pub fn join(&mut self, holder: u32) {
        self.sockets.push(Socket {
            holders: vec![holder],
            queue: VecDeque::new(),
        });
    }

    /// `child` holds the socket `parent` holds (a fork or an exec).
    pub fn inherit(&mut self, parent: u32, child: u32) {
        if let Some(s) = self.socket_of(parent) {
            if !s.holders.contains(&child) {
                s.holders.push(child);
            }
        }
    }

    /// `holder` lets go of its socket: the connections waiting on a
    /// socket nobody holds any more (to reset), and whether the port has
    /// no socket left.
    pub fn let_go(&mut self, holder: u32) -> (Vec<ConnId>, bool) {
        let mut orphaned = Vec::new();
        for s in &mut self.sockets {
            s.holders.retain(|&h| h != holder);
            if s.holders.is_empty() {
                orphaned.extend(s.queue.drain(..));
            }
        }
        self.sockets.retain(|s| !s.holders.is_empty());
        (orphaned, self.sockets.is_empty())
    }

    /// The socket a connection from `peer` goes to.
    pub fn pick(&self, peer: Option<SocketAddrV4>) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        peer.hash(&mut h);
        (h.finish() % self.sockets.len().max(1) as u64) as usize
    }

    /// Forgets `conn` if it waits on a socket (it closed before anyone
    /// accepted it).
    pub fn forget(&mut self, conn: ConnId) {
        for s in &mut self.sockets {
            s.queue.retain(|&c| c != conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reuseport_sockets_of_one_user_share_a_port() {
        let p = Port::new(1, true, 1000);
        assert!(p.admits(true, 1000));
        assert!(!p.admits(false, 1000));
        assert!(!p.admits(true, 0));
        assert!(!Port::new(1, false, 1000).admits(true, 1000));
    }

    #[test]
    fn peers_spread_over_the_sockets_and_each_peer_stays_with_one() {
        let mut p = Port::new(1, true, 0);
        p.join(2);
        p.join(3);
        let mut hits = [0u32; 3];
        for port in 40_000..40_300u16 {
            let peer = SocketAddrV4::new([198, 18, 0, 2].into(), port);
            let i = p.pick(Some(peer));
            assert_eq!(i, p.pick(Some(peer)));
            hits[i] += 1;
        }
        assert!(hits.iter().all(|&n| n >= 60), "{hits:?}");
    }

    #[test]
    fn a_socket_left_alone_in_its_group_takes_its_waiting_share_first() {
        let mut p = Port::new(1, true, 0);
        p.join(2);
        assert_eq!(p.next_for(1), Next::Nothing, "spread: only its share");
        let c = ConnId::from_bits(9);
        p.socket_of(2).expect("2's").queue.push_back(c);
        assert_eq!(p.let_go(1), (vec![], false));
        assert_eq!(p.next_for(2), Next::Waiting(c));
        assert_eq!(p.next_for(2), Next::Stack);
    }

    #[test]
    fn a_socket_is_gone_with_its_last_holder_and_its_queue_is_handed_back() {
        let mut p = Port::new(1, true, 0);
        p.inherit(1, 4);
        p.join(2);
        let c = ConnId::from_bits(7);
        p.socket_of(2).expect("2's").queue.push_back(c);
        assert_eq!(p.let_go(1), (vec![], false));
        assert_eq!(p.waiting_for(4), Some(0));
        assert_eq!(p.let_go(2), (vec![c], false));
        assert!(!p.spread());
        assert_eq!(p.let_go(4), (vec![], true));
    }
}
