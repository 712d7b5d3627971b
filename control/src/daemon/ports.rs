//! Listening ports and the sockets on them. A port has one listening
//! socket, held by the attachment that listened and by every process
//! forked (or exec'd) from it, whose accept queue is the stack's; or, when
//! each asked with `SO_REUSEPORT` and all are one user's (Linux's rule),
//! several independent sockets — of several programs, or several of one
//! (nginx's `listen … reuseport` opens one per worker in its master) —
//! each with its number, its holders and an accept queue of its own: the
//! daemon takes the stack's accepted connections and spreads them over
//! the sockets by a hash of the peer's address and port, as a Linux
//! reuseport group does.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::net::SocketAddrV4;

use crate::idmap::ConnId;

/// Connections one socket of a reuseport group keeps waiting, at most;
/// one hashed to a full socket is reset (counted `accept_overflow`), as
/// Linux drops a connection for a listener whose queue is full.
pub(super) const MAX_SOCKET_QUEUE: usize = 1024;

/// One listening socket: its number, who holds it, and (in a reuseport
/// group) the connections waiting for one of them to accept.
#[derive(Debug)]
pub(super) struct Socket {
    pub id: u32,
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
    /// A port with one socket, `socket`, held by `holder`.
    pub fn new(socket: u32, holder: u32, reuseport: bool, uid: u32) -> Port {
        let mut p = Port {
            reuseport,
            uid,
            sockets: Vec::new(),
        };
        p.join(socket, holder);
        p
    }

    /// Whether a socket of `uid` asking for `reuseport` may join.
    pub fn admits(&self, reuseport: bool, uid: u32) -> bool {
        self.reuseport && reuseport && self.uid == uid
    }

    /// Whether the stack's accepted connections are spread over sockets.
    pub fn spread(&self) -> bool {
        self.sockets.len() > 1
    }

    /// Socket `id`.
    pub fn socket(&mut self, id: u32) -> Option<&mut Socket> {
        self.sockets.iter_mut().find(|s| s.id == id)
    }

    /// Connections waiting in socket `id`'s own queue.
    pub fn waiting_on(&self, id: u32) -> Option<u64> {
        self.sockets
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.queue.len() as u64)
    }

    /// Where the next connection accepted on socket `id` comes from: its
    /// own queue (a reuseport group's share, or what was left in it when
    /// the group shrank to this one socket), else the stack's queue
    /// unless the port is spread.
    pub fn next_for(&mut self, id: u32) -> Next {
        let spread = self.spread();
        match self.socket(id).and_then(|s| s.queue.pop_front()) {
            Some(conn) => Next::Waiting(conn),
            None if spread => Next::Nothing,
            None => Next::Stack,
        }
    }

    /// A new socket `id`, `holder`'s, in the group.
    pub fn join(&mut self, id: u32, holder: u32) {
        self.sockets.push(Socket {
            id,
            holders: vec![holder],
            queue: VecDeque::new(),
        });
    }

    /// `child` holds every socket `parent` holds (a fork or an exec).
    pub fn inherit(&mut self, parent: u32, child: u32) {
        for s in &mut self.sockets {
            if s.holders.contains(&parent) && !s.holders.contains(&child) {
                s.holders.push(child);
            }
        }
    }

    /// `holder` lets go of socket `id`: the connections that waited on it
    /// if nobody holds it any more (to reset), and whether the port has
    /// no socket left.
    pub fn let_go(&mut self, id: u32, holder: u32) -> (Vec<ConnId>, bool) {
        let mut orphaned = Vec::new();
        if let Some(i) = self.sockets.iter().position(|s| s.id == id) {
            let s = &mut self.sockets[i];
            s.holders.retain(|&h| h != holder);
            if s.holders.is_empty() {
                orphaned.extend(self.sockets.remove(i).queue);
            }
        }
        (orphaned, self.sockets.is_empty())
    }

    /// The socket a connection from `peer` goes to.
    pub fn pick(&self, peer: Option<SocketAddrV4>) -> usize {
        reuseport_index(peer, self.sockets.len())
    }

    /// Forgets `conn` if it waits on a socket (it closed before anyone
    /// accepted it).
    pub fn forget(&mut self, conn: ConnId) {
        for s in &mut self.sockets {
            s.queue.retain(|&c| c != conn);
        }
    }
}

/// Which of `n` sockets of a reuseport group a connection from `peer`
/// goes to: a hash of the peer's address and port (one peer, one
/// socket, while the group does not change).
pub fn reuseport_index(peer: Option<SocketAddrV4>, n: usize) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    peer.hash(&mut h);
    (h.finish() % n.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reuseport_sockets_of_one_user_share_a_port() {
        let p = Port::new(1, 1, true, 1000);
        assert!(p.admits(true, 1000));
        assert!(!p.admits(false, 1000));
        assert!(!p.admits(true, 0));
        assert!(!Port::new(1, 1, false, 1000).admits(true, 1000));
    }

    #[test]
    fn peers_spread_over_the_sockets_and_each_peer_stays_with_one() {
        let mut p = Port::new(1, 1, true, 0);
        p.join(2, 2);
        p.join(3, 3);
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
        let mut p = Port::new(1, 1, true, 0);
        p.join(2, 2);
        assert_eq!(p.next_for(1), Next::Nothing, "spread: only its share");
        let c = ConnId::from_bits(9);
        p.socket(2).expect("2").queue.push_back(c);
        assert_eq!(p.let_go(1, 1), (vec![], false));
        assert_eq!(p.next_for(2), Next::Waiting(c));
        assert_eq!(p.next_for(2), Next::Stack);
    }

    #[test]
    fn a_socket_is_gone_with_its_last_holder_and_its_queue_is_handed_back() {
        let mut p = Port::new(1, 1, true, 0);
        p.inherit(1, 4);
        p.join(2, 2);
        let c = ConnId::from_bits(7);
        p.socket(2).expect("2").queue.push_back(c);
        assert_eq!(p.let_go(1, 1), (vec![], false));
        assert_eq!(p.waiting_on(1), Some(0), "4 holds it on");
        assert_eq!(p.let_go(2, 2), (vec![c], false));
        assert!(!p.spread());
        assert_eq!(p.let_go(1, 4), (vec![], true));
    }

    /// nginx `listen … reuseport`: the master opens one socket per worker,
    /// each worker inherits all and keeps its own.
    #[test]
    fn one_holder_may_hold_several_sockets_of_a_group() {
        let mut p = Port::new(1, 10, true, 0);
        p.join(2, 10);
        p.inherit(10, 11);
        p.inherit(10, 12);
        assert_eq!(p.let_go(2, 11), (vec![], false));
        assert_eq!(p.let_go(1, 12), (vec![], false));
        let holders: Vec<_> = p.sockets.iter().map(|s| s.holders.clone()).collect();
        assert_eq!(holders, vec![vec![10, 11], vec![10, 12]]);
        assert_eq!(p.let_go(1, 10), (vec![], false));
        assert_eq!(p.let_go(2, 10), (vec![], false));
        assert_eq!(p.let_go(1, 12), (vec![], false), "12 let go of it already");
        assert!(p.spread(), "a socket for each worker");
        assert_eq!(p.let_go(1, 11), (vec![], false));
        assert!(!p.spread());
    }
}
