//! Listening ports and the sockets on them. A port has one listening
//! socket, held by the attachment that listened and by every process
//! forked (or exec'd) from it, whose accept queue is the stack's; or
//! several independent sockets, each with its number, its holders and an
//! accept queue of its own — when each asked with `SO_REUSEPORT` and all
//! are one user's (Linux's rule: sockets of several programs, or several
//! of one, as nginx's `listen … reuseport` opens one per worker in its
//! master), or when they take peers of different families (an IPv4
//! socket beside an IPv6-only one, nginx's `listen 80; listen [::]:80`).
//! The daemon takes the stack's accepted connections and spreads them
//! over the sockets that take the peer's family by a hash of its address
//! and port, as a Linux reuseport group does.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;

use crate::idmap::ConnId;
use crate::provider::Families;

/// Connections one socket of a reuseport group keeps waiting, at most;
/// one hashed to a full socket is reset (counted `accept_overflow`), as
/// Linux drops a connection for a listener whose queue is full.
pub(super) const MAX_SOCKET_QUEUE: usize = 1024;

/// How a listening socket shares its port: the families it takes, and
/// (for sockets whose families overlap) `SO_REUSEPORT` and its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Share {
    pub families: Families,
    pub reuseport: bool,
    pub uid: u32,
}

/// One listening socket: its number, who holds it, how it shares the
/// port, and (when the port is spread) the connections waiting for one
/// of its holders to accept.
#[derive(Debug)]
pub(super) struct Socket {
    pub id: u32,
    pub holders: Vec<u32>,
    pub queue: VecDeque<ConnId>,
    pub share: Share,
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
    pub sockets: Vec<Socket>,
}

impl Port {
    /// A port with one socket, `socket`, held by `holder`.
    pub fn new(socket: u32, holder: u32, share: Share) -> Port {
        let mut p = Port {
            sockets: Vec::new(),
        };
        p.join(socket, holder, share);
        p
    }

    /// The socket that keeps a new one sharing as `share` off the port:
    /// one taking peers of a family the new one takes too, unless both
    /// asked for `SO_REUSEPORT` and are one user's.
    pub fn conflict(&self, share: Share) -> Option<&Socket> {
        self.sockets.iter().find(|s| {
            s.share.families.overlap(share.families)
                && !(s.share.reuseport && share.reuseport && s.share.uid == share.uid)
        })
    }

    /// The families of peers some socket on the port takes (the stack
    /// listens for those only: [`crate::host::Host::listen_families`]).
    pub fn families(&self) -> Families {
        let bits = self
            .sockets
            .iter()
            .fold(0, |b, s| b | s.share.families.bits());
        Families::from_bits(bits).unwrap_or(Families::BOTH)
    }

    /// Whether the stack's accepted connections are spread over sockets
    /// (several, or one that takes only one family: the other's are
    /// reset).
    pub fn spread(&self) -> bool {
        self.sockets.len() > 1
            || self
                .sockets
                .iter()
                .any(|s| s.share.families != Families::BOTH)
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

    /// A new socket `id`, `holder`'s, on the port.
    pub fn join(&mut self, id: u32, holder: u32, share: Share) {
        self.sockets.push(Socket {
            id,
            holders: vec![holder],
            queue: VecDeque::new(),
            share,
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

    /// The socket a connection from `peer` goes to; `None` when no
    /// socket takes its family.
    pub fn pick(&self, peer: SocketAddr) -> Option<usize> {
        reuseport_pick(peer, self.sockets.iter().map(|s| s.share.families))
    }

    /// Forgets `conn` if it waits on a socket (it closed before anyone
    /// accepted it).
    pub fn forget(&mut self, conn: ConnId) {
        for s in &mut self.sockets {
            s.queue.retain(|&c| c != conn);
        }
    }
}

/// Which of a port's sockets (taking peers of `families` each) a
/// connection from `peer` goes to: among those that take its family, by
/// a hash of its address and port (one peer, one socket, while the
/// sockets do not change); `None` when none takes it.
pub fn reuseport_pick(peer: SocketAddr, families: impl Iterator<Item = Families>) -> Option<usize> {
    let takers: Vec<usize> = families
        .enumerate()
        .filter(|(_, f)| f.take(peer))
        .map(|(i, _)| i)
        .collect();
    if takers.is_empty() {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    peer.hash(&mut h);
    Some(takers[(h.finish() % takers.len() as u64) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(uid: u32) -> Share {
        Share {
            families: Families::BOTH,
            reuseport: true,
            uid,
        }
    }

    fn alone(families: Families) -> Share {
        Share {
            families,
            reuseport: false,
            uid: 0,
        }
    }

    #[test]
    fn only_reuseport_sockets_of_one_user_share_a_port() {
        let p = Port::new(1, 1, group(1000));
        assert!(p.conflict(group(1000)).is_none());
        let plain = Share {
            reuseport: false,
            ..group(1000)
        };
        assert_eq!(p.conflict(plain).map(|s| s.id), Some(1));
        assert!(p.conflict(group(0)).is_some());
        assert!(Port::new(1, 1, plain).conflict(group(1000)).is_some());
    }

    #[test]
    fn peers_spread_over_the_sockets_and_each_peer_stays_with_one() {
        let mut p = Port::new(1, 1, group(0));
        p.join(2, 2, group(0));
        p.join(3, 3, group(0));
        let mut hits = [0u32; 3];
        for port in 40_000..40_300u16 {
            let peer = SocketAddr::from(([198, 18, 0, 2], port));
            let i = p.pick(peer).expect("a socket takes IPv4");
            assert_eq!(Some(i), p.pick(peer));
            hits[i] += 1;
        }
        assert!(hits.iter().all(|&n| n >= 60), "{hits:?}");
    }

    #[test]
    fn a_socket_left_alone_in_its_group_takes_its_waiting_share_first() {
        let mut p = Port::new(1, 1, group(0));
        p.join(2, 2, group(0));
        assert_eq!(p.next_for(1), Next::Nothing, "spread: only its share");
        let c = ConnId::from_bits(9);
        p.socket(2).expect("2").queue.push_back(c);
        assert_eq!(p.let_go(1, 1), (vec![], false));
        assert_eq!(p.next_for(2), Next::Waiting(c));
        assert_eq!(p.next_for(2), Next::Stack);
    }

    #[test]
    fn a_socket_is_gone_with_its_last_holder_and_its_queue_is_handed_back() {
        let mut p = Port::new(1, 1, group(0));
        p.inherit(1, 4);
        p.join(2, 2, group(0));
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
        let mut p = Port::new(1, 10, group(0));
        p.join(2, 10, group(0));
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

    /// nginx `listen 80; listen [::]:80`: an IPv4 socket and an IPv6-only
    /// one share the port without `SO_REUSEPORT`, each peer goes to the
    /// socket of its family, and a dual-stack socket conflicts with both.
    #[test]
    fn sockets_of_different_families_share_a_port_and_split_its_peers() {
        let mut p = Port::new(1, 1, alone(Families::V4));
        assert!(p.spread(), "one family: the other's peers are refused");
        assert!(p.conflict(alone(Families::V6)).is_none());
        p.join(2, 1, alone(Families::V6));
        assert_eq!(p.conflict(alone(Families::BOTH)).map(|s| s.id), Some(1));
        let v4: SocketAddr = "198.18.0.2:40000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:198.18.0.2]:40000".parse().unwrap();
        let v6: SocketAddr = "[2001:2::2]:40000".parse().unwrap();
        assert_eq!(p.pick(v4), Some(0));
        assert_eq!(p.pick(mapped), Some(0));
        assert_eq!(p.pick(v6), Some(1));
        let only6 = Port::new(3, 1, alone(Families::V6));
        assert_eq!(only6.pick(v4), None, "no socket takes IPv4");
        let both = Port::new(4, 1, alone(Families::BOTH));
        assert!(!both.spread(), "one dual-stack socket: the stack's queue");
        assert_eq!(Families::from_bits(0), None);
        assert_eq!(Families::from_bits(3), Some(Families::BOTH));
    }
}
