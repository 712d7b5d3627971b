//! Connection handles and the maps keyed by them, with a cheap hash.
//!
//! std's default hasher (SipHash) protects maps whose keys an attacker
//! chooses. A [`ConnId`] is a slot index and generation that the datapath
//! handed out, never a value read off the wire, so a multiply-rotate hash
//! is enough here. The stack and the engine look connections up several
//! times per packet; the bench profile of a zerosplit receiver put SipHash
//! at 6 % of its samples. (The datapath's flow table, keyed by 4-tuples
//! from received packets, keeps SipHash.)

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use datapath::flow_table::FlowId;

/// A connection handle: the datapath's flow slot and its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(pub(crate) FlowId);

impl ConnId {
    /// The handle as one integer, for a handle that crosses a process
    /// boundary (an attached application's).
    pub const fn to_bits(self) -> u64 {
        self.0.to_bits()
    }

    /// The handle [`Self::to_bits`] gave; one the stack never handed out
    /// is refused where it is used.
    pub const fn from_bits(bits: u64) -> ConnId {
        ConnId(FlowId::from_bits(bits))
    }
}

/// A map from connection handle to `V`.
pub(crate) type ConnMap<V> = HashMap<ConnId, V, BuildHasherDefault<IdHasher>>;

/// Hashes the few integers of a handle: each word is mixed in with a
/// rotate, xor and multiply by an odd constant (2^64 / golden ratio).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher {
    state: u64,
}

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl IdHasher {
    fn mix(&mut self, word: u64) {
        self.state = (self.state.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, Hash};

    use super::*;

    fn hash_of<T: Hash>(t: &T) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(t)
    }

    #[test]
    fn index_and_generation_both_change_the_hash() {
        let a = hash_of(&(3u32, 0u32));
        assert_ne!(a, hash_of(&(4u32, 0u32)));
        assert_ne!(a, hash_of(&(3u32, 1u32)));
        assert_ne!(hash_of(&(0u32, 1u32)), hash_of(&(1u32, 0u32)));
    }

    #[test]
    fn consecutive_slots_spread_over_the_buckets() {
        // hashbrown picks buckets from the low bits and a tag from the top
        // seven; a table of 4096 slots must not pile onto a few of either.
        let low: HashSet<u64> = (0..4096u32).map(|i| hash_of(&(i, 0u32)) & 4095).collect();
        assert!(low.len() > 2500, "{} distinct low-bit buckets", low.len());
        let top: HashSet<u64> = (0..4096u32).map(|i| hash_of(&(i, 0u32)) >> 57).collect();
        assert_eq!(top.len(), 128, "every 7-bit tag is used");
    }
}
