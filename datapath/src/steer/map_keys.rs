//! The steering program's map keys and values, byte for byte as
//! `ebpf/steer.h` lays them out.

use std::mem::size_of;
use std::net::Ipv4Addr;

use super::{Proto, SteerKey};

/// Mirror of `struct zs_flow_key` in `ebpf/steer.h`; all fields in wire
/// (network) byte order, padding zero.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawFlowKey {
    saddr: [u8; 4],
    daddr: [u8; 4],
    sport: [u8; 2],
    dport: [u8; 2],
    proto: u8,
    pad: [u8; 3],
}

/// Mirror of `struct zs_listen_key` in `ebpf/steer.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawListenKey {
    daddr: [u8; 4],
    dport: [u8; 2],
    proto: u8,
    pad: u8,
}

pub(super) type FlowBytes = [u8; size_of::<RawFlowKey>()];

/// Mirror of `struct zs_flow_val` in `ebpf/steer.h`: the slot and the rx
/// queue of the flow's socket, host byte order.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawFlowValue {
    pub(super) slot: u32,
    pub(super) queue: u32,
}

pub(super) type FlowValueBytes = [u8; size_of::<RawFlowValue>()];

impl RawFlowValue {
    pub(super) fn to_bytes(self) -> FlowValueBytes {
        let mut b = [0; size_of::<RawFlowValue>()];
        b[..4].copy_from_slice(&self.slot.to_ne_bytes());
        b[4..].copy_from_slice(&self.queue.to_ne_bytes());
        b
    }
}
pub(super) type ListenBytes = [u8; size_of::<RawListenKey>()];

impl RawFlowKey {
    pub(super) fn new(key: &SteerKey) -> Self {
        Self {
            saddr: key.flow.remote_ip,
            daddr: key.flow.local_ip,
            sport: key.flow.remote_port.to_be_bytes(),
            dport: key.flow.local_port.to_be_bytes(),
            proto: key.proto.number(),
            pad: [0; 3],
        }
    }

    /// The bytes the kernel hashes: the struct's memory image.
    pub(super) fn to_bytes(self) -> FlowBytes {
        let mut b = [0; size_of::<RawFlowKey>()];
        b[0..4].copy_from_slice(&self.saddr);
        b[4..8].copy_from_slice(&self.daddr);
        b[8..10].copy_from_slice(&self.sport);
        b[10..12].copy_from_slice(&self.dport);
        b[12] = self.proto;
        b[13..16].copy_from_slice(&self.pad);
        b
    }
}

impl RawListenKey {
    pub(super) fn new(addr: Ipv4Addr, port: u16, proto: Proto) -> Self {
        Self {
            daddr: addr.octets(),
            dport: port.to_be_bytes(),
            proto: proto.number(),
            pad: 0,
        }
    }

    pub(super) fn to_bytes(self) -> ListenBytes {
        let mut b = [0; size_of::<RawListenKey>()];
        b[0..4].copy_from_slice(&self.daddr);
        b[4..6].copy_from_slice(&self.dport);
        b[6] = self.proto;
        b[7] = self.pad;
        b
    }
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use super::*;
    use proto::FlowKey;

    #[test]
    fn capacities_mirror_steer_h() {
        let h = include_str!("../../../ebpf/steer.h");
        for (name, value) in [
            ("ZS_FLOWS_MAX", crate::steer::FLOWS_MAX),
            ("ZS_XSKS_MAX", crate::steer::XSKS_MAX),
            ("ZS_MAX_QUEUES", crate::steer::MAX_QUEUES),
        ] {
            let line = format!("#define {name} {value}");
            assert!(
                h.lines().any(|l| l.trim() == line),
                "steer.h lacks `{line}`"
            );
        }
    }

    #[test]
    fn flow_key_mirrors_steer_h() {
        assert_eq!(size_of::<RawFlowKey>(), 16);
        assert_eq!(offset_of!(RawFlowKey, saddr), 0);
        assert_eq!(offset_of!(RawFlowKey, daddr), 4);
        assert_eq!(offset_of!(RawFlowKey, sport), 8);
        assert_eq!(offset_of!(RawFlowKey, dport), 10);
        assert_eq!(offset_of!(RawFlowKey, proto), 12);
        assert_eq!(offset_of!(RawFlowKey, pad), 13);
    }

    #[test]
    fn flow_value_mirrors_steer_h() {
        assert_eq!(size_of::<RawFlowValue>(), 8);
        assert_eq!(offset_of!(RawFlowValue, slot), 0);
        assert_eq!(offset_of!(RawFlowValue, queue), 4);
        let b = RawFlowValue { slot: 70, queue: 3 }.to_bytes();
        assert_eq!(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]), 70);
        assert_eq!(u32::from_ne_bytes([b[4], b[5], b[6], b[7]]), 3);
    }

    #[test]
    fn listen_key_mirrors_steer_h() {
        assert_eq!(size_of::<RawListenKey>(), 8);
        assert_eq!(offset_of!(RawListenKey, daddr), 0);
        assert_eq!(offset_of!(RawListenKey, dport), 4);
        assert_eq!(offset_of!(RawListenKey, proto), 6);
        assert_eq!(offset_of!(RawListenKey, pad), 7);
    }

    #[test]
    fn flow_key_bytes_are_wire_order_with_zero_padding() {
        let key = SteerKey {
            flow: FlowKey {
                remote_ip: [198, 18, 0, 2],
                local_ip: [198, 18, 0, 1],
                remote_port: 0x1234,
                local_port: 80,
            },
            proto: Proto::Tcp,
        };
        assert_eq!(
            RawFlowKey::new(&key).to_bytes(),
            [198, 18, 0, 2, 198, 18, 0, 1, 0x12, 0x34, 0, 80, 6, 0, 0, 0]
        );
        let listen = RawListenKey::new(Ipv4Addr::UNSPECIFIED, 5353, Proto::Udp).to_bytes();
        assert_eq!(listen, [0, 0, 0, 0, 0x14, 0xe9, 17, 0]);
    }
}
