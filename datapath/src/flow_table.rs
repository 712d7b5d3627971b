//! The flow table: 5-tuple → per-flow datapath state, in a fixed-capacity
//! slab addressed by generation-checked [`FlowId`]s. A full table refuses new
//! flows (counted); it never grows.

use std::collections::HashMap;

use crate::counters::RxCounters;
use crate::mr::Access;
use crate::ms::SegmentList;
use crate::wire::FlowKey;
use proto::placement::PlacedSet;

/// Handle to a flow; a handle to a removed flow is refused even after its
/// slot is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowId {
    index: u32,
    generation: u32,
}

impl FlowId {
    /// The slot index (for steering-map slots and metrics).
    pub const fn index(self) -> u32 {
        self.index
    }

    /// The handle as one integer (index in the low half, generation in
    /// the high half), for a handle that crosses a process boundary.
    pub const fn to_bits(self) -> u64 {
        (self.generation as u64) << 32 | self.index as u64
    }

    /// The handle [`Self::to_bits`] gave. Any integer makes a handle; the
    /// table refuses one it did not hand out.
    pub const fn from_bits(bits: u64) -> FlowId {
        FlowId {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

/// What a new flow is created from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowParams {
    /// 5-tuple from our side.
    pub key: FlowKey,
    /// Our MAC address.
    pub local_mac: [u8; 6],
    /// The peer's (or next hop's) MAC address.
    pub remote_mac: [u8; 6],
    /// The peer's initial sequence number; receive-stream offset 0 is the
    /// byte with sequence number `irs + 1` (RFC 9293 §3.4: the SYN occupies
    /// `irs`).
    pub irs: u32,
    /// Our initial sequence number; send-stream offset 0 is `iss + 1`.
    pub iss: u32,
    /// Socket slot the flow's frames arrive on.
    pub socket: u32,
    /// Maximum outstanding receive segments.
    pub max_recv_segments: usize,
    /// Maximum outstanding send segments.
    pub max_send_segments: usize,
    /// Maximum disjoint placed ranges above the floor (out-of-order holes
    /// the flow can track).
    pub max_placed_ranges: usize,
}

/// Per-flow datapath state.
#[derive(Debug, Clone)]
pub struct FlowState {
    /// 5-tuple from our side.
    pub key: FlowKey,
    /// Our MAC address.
    pub local_mac: [u8; 6],
    /// The peer's MAC address.
    pub remote_mac: [u8; 6],
    /// Peer's initial sequence number.
    pub irs: u32,
    /// Whether `irs` is the peer's ISN. An active open installs its flow
    /// before the SYN-ACK says it; until then no payload is placed.
    pub synchronized: bool,
    /// Whether the flow has its exact steering entry (a passive open gets
    /// it when its handshake completes).
    pub steered: bool,
    /// Our initial sequence number.
    pub iss: u32,
    /// Posted receive segments; their floor is the placement floor.
    pub recv: SegmentList,
    /// Posted send segments.
    pub send: SegmentList,
    /// Stream ranges above the floor already placed with a verified checksum.
    pub placed: PlacedSet,
    /// Socket slot.
    pub socket: u32,
    /// Next IPv4 identification value for frames we send.
    pub ip_id: u16,
    /// Per-flow RX counters.
    pub counters: RxCounters,
}

impl FlowState {
    /// A fresh flow with nothing posted.
    pub fn new(p: &FlowParams) -> Self {
        FlowState {
            key: p.key,
            local_mac: p.local_mac,
            remote_mac: p.remote_mac,
            irs: p.irs,
            synchronized: true,
            steered: false,
            iss: p.iss,
            recv: SegmentList::new(p.max_recv_segments, Access::RECV),
            send: SegmentList::new(p.max_send_segments, Access::SEND),
            placed: PlacedSet::new(p.max_placed_ranges),
            socket: p.socket,
            ip_id: 0,
            counters: RxCounters::default(),
        }
    }

    /// The placement floor: first receive-stream byte not yet completed.
    pub fn floor(&self) -> u64 {
        self.recv.floor()
    }
}

/// Errors from the flow table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlowTableError {
    /// Every slot is in use.
    #[error("flow table full ({capacity} flows), refusing {key:?}")]
    FlowTableFull {
        /// Capacity.
        capacity: usize,
        /// The refused flow.
        key: FlowKey,
    },
    /// A flow with this 5-tuple exists already.
    #[error("flow {key:?} already present as {existing:?}")]
    Exists {
        /// The 5-tuple.
        key: FlowKey,
        /// The existing flow.
        existing: FlowId,
    },
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    flow: Option<FlowState>,
}

/// The flow table.
#[derive(Debug)]
pub struct FlowTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: HashMap<FlowKey, FlowId>,
    refused_full: u64,
}

impl FlowTable {
    /// An empty table with room for `capacity` flows.
    pub fn new(capacity: usize) -> Self {
        FlowTable {
            slots: (0..capacity)
                .map(|_| Slot {
                    generation: 0,
                    flow: None,
                })
                .collect(),
            free: (0..capacity as u32).rev().collect(),
            index: HashMap::with_capacity(capacity),
            refused_full: 0,
        }
    }

    /// Installs a flow.
    ///
    /// # Errors
    /// `FlowTableFull` (counted) or `Exists`.
    pub fn insert(&mut self, params: &FlowParams) -> Result<FlowId, FlowTableError> {
        if let Some(&existing) = self.index.get(&params.key) {
            return Err(FlowTableError::Exists {
                key: params.key,
                existing,
            });
        }
        let Some(index) = self.free.pop() else {
            self.refused_full += 1;
            return Err(FlowTableError::FlowTableFull {
                capacity: self.slots.len(),
                key: params.key,
            });
        };
        let slot = &mut self.slots[index as usize];
        slot.flow = Some(FlowState::new(params));
        let id = FlowId {
            index,
            generation: slot.generation,
        };
        self.index.insert(params.key, id);
        Ok(id)
    }

    /// The flow for a 5-tuple.
    pub fn lookup(&self, key: &FlowKey) -> Option<FlowId> {
        self.index.get(key).copied()
    }

    /// The state of a live flow.
    pub fn get(&self, id: FlowId) -> Option<&FlowState> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.flow.as_ref())
    }

    /// The mutable state of a live flow.
    pub fn get_mut(&mut self, id: FlowId) -> Option<&mut FlowState> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.flow.as_mut())
    }

    /// Removes a flow and returns its state (the caller releases its
    /// segments' region references).
    pub fn remove(&mut self, id: FlowId) -> Option<FlowState> {
        let slot = self
            .slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)?;
        let flow = slot.flow.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.index.remove(&flow.key);
        self.free.push(id.index);
        Some(flow)
    }

    /// The ids of every live flow.
    pub fn ids(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.index.values().copied()
    }

    /// Number of live flows.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no flow is live.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// How many inserts were refused because the table was full.
    pub fn refused_full(&self) -> u64 {
        self.refused_full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(port: u16) -> FlowParams {
        FlowParams {
            key: FlowKey {
                remote_ip: [198, 18, 0, 1].into(),
                local_ip: [198, 18, 0, 2].into(),
                remote_port: port,
                local_port: 5201,
            },
            local_mac: [2, 0, 0, 0, 0, 2],
            remote_mac: [2, 0, 0, 0, 0, 1],
            irs: 1000,
            iss: 2000,
            socket: 0,
            max_recv_segments: 4,
            max_send_segments: 4,
            max_placed_ranges: 8,
        }
    }

    #[test]
    fn insert_lookup_remove_with_generations() {
        let mut t = FlowTable::new(2);
        let a = t.insert(&params(1)).expect("room");
        let b = t.insert(&params(2)).expect("room");
        assert!(matches!(
            t.insert(&params(3)),
            Err(FlowTableError::FlowTableFull { capacity: 2, .. })
        ));
        assert_eq!(t.refused_full(), 1);
        assert!(matches!(
            t.insert(&params(1)),
            Err(FlowTableError::Exists { existing, .. }) if existing == a
        ));
        assert_eq!(t.lookup(&params(2).key), Some(b));
        assert_eq!(t.get(a).map(|f| f.irs), Some(1000));
        assert!(t.remove(a).is_some());
        assert!(t.get(a).is_none());
        assert!(t.remove(a).is_none());
        assert_eq!(t.lookup(&params(1).key), None);
        let c = t.insert(&params(3)).expect("slot freed");
        assert_eq!(c.index(), a.index());
        assert_ne!(c, a);
        assert!(t.get_mut(a).is_none());
        assert_eq!(t.len(), 2);
    }
}
