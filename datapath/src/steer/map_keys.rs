//! The steering program's map keys and values, byte for byte as
//! `ebpf/steer.h` lays them out.

use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// Mirror of `struct zs_flow6_key` in `ebpf/steer.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawFlow6Key {
    saddr: [u8; 16],
    daddr: [u8; 16],
    sport: [u8; 2],
    dport: [u8; 2],
    proto: u8,
    pad: [u8; 3],
}

pub(super) type Flow6Bytes = [u8; size_of::<RawFlow6Key>()];

/// Mirror of `struct zs_listen6_key` in `ebpf/steer.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawListen6Key {
    daddr: [u8; 16],
    dport: [u8; 2],
    proto: u8,
    pad: u8,
}

pub(super) type Listen6Bytes = [u8; size_of::<RawListen6Key>()];

/// A flow's key in the map of its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlowMapKey {
    /// In `flows`.
    V4(FlowBytes),
    /// In `flows6`.
    V6(Flow6Bytes),
}

/// A listen claim's key in the map of its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListenMapKey {
    /// In `listen`.
    V4(ListenBytes),
    /// In `listen6`.
    V6(Listen6Bytes),
}

/// The map key of `key`'s flow, in its family's map. A [`proto::FlowKey`]'s
/// addresses are of one family; the local address says which.
pub(super) fn flow_key(key: &SteerKey) -> FlowMapKey {
    let f = &key.flow;
    match (f.remote_ip, f.local_ip) {
        (IpAddr::V4(r), IpAddr::V4(l)) => FlowMapKey::V4(
            RawFlowKey {
                saddr: r.octets(),
                daddr: l.octets(),
                sport: f.remote_port.to_be_bytes(),
                dport: f.local_port.to_be_bytes(),
                proto: key.proto.number(),
                pad: [0; 3],
            }
            .to_bytes(),
        ),
        (r, l) => FlowMapKey::V6(
            RawFlow6Key {
                saddr: ipv6_of(r).octets(),
                daddr: ipv6_of(l).octets(),
                sport: f.remote_port.to_be_bytes(),
                dport: f.local_port.to_be_bytes(),
                proto: key.proto.number(),
                pad: [0; 3],
            }
            .to_bytes(),
        ),
    }
}

/// The map key of a claim of `(addr, port, proto)`, in its family's map
/// (`0.0.0.0` and `::` claim the port on every address of their family).
pub(super) fn listen_key(addr: IpAddr, port: u16, proto: Proto) -> ListenMapKey {
    match addr {
        IpAddr::V4(a) => ListenMapKey::V4(RawListenKey::new(a, port, proto).to_bytes()),
        IpAddr::V6(a) => ListenMapKey::V6(
            RawListen6Key {
                daddr: a.octets(),
                dport: port.to_be_bytes(),
                proto: proto.number(),
                pad: 0,
            }
            .to_bytes(),
        ),
    }
}

fn ipv6_of(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

impl RawFlow6Key {
    /// The struct's memory image.
    fn to_bytes(self) -> Flow6Bytes {
        let mut b = [0; size_of::<RawFlow6Key>()];
        b[0..16].copy_from_slice(&self.saddr);
        b[16..32].copy_from_slice(&self.daddr);
        b[32..34].copy_from_slice(&self.sport);
        b[34..36].copy_from_slice(&self.dport);
        b[36] = self.proto;
        b[37..40].copy_from_slice(&self.pad);
        b
    }
}

impl RawListen6Key {
    /// The struct's memory image.
    fn to_bytes(self) -> Listen6Bytes {
        let mut b = [0; size_of::<RawListen6Key>()];
        b[0..16].copy_from_slice(&self.daddr);
        b[16..18].copy_from_slice(&self.dport);
        b[18] = self.proto;
        b[19] = self.pad;
        b
    }
}

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
    /// The bytes the kernel hashes: the struct's memory image.
    fn to_bytes(self) -> FlowBytes {
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
    fn new(addr: Ipv4Addr, port: u16, proto: Proto) -> Self {
        Self {
            daddr: addr.octets(),
            dport: port.to_be_bytes(),
            proto: proto.number(),
            pad: 0,
        }
    }

    fn to_bytes(self) -> ListenBytes {
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
    fn ipv6_keys_mirror_steer_h() {
        assert_eq!(size_of::<RawFlow6Key>(), 40);
        assert_eq!(offset_of!(RawFlow6Key, saddr), 0);
        assert_eq!(offset_of!(RawFlow6Key, daddr), 16);
        assert_eq!(offset_of!(RawFlow6Key, sport), 32);
        assert_eq!(offset_of!(RawFlow6Key, dport), 34);
        assert_eq!(offset_of!(RawFlow6Key, proto), 36);
        assert_eq!(offset_of!(RawFlow6Key, pad), 37);
        assert_eq!(size_of::<RawListen6Key>(), 20);
        assert_eq!(offset_of!(RawListen6Key, daddr), 0);
        assert_eq!(offset_of!(RawListen6Key, dport), 16);
        assert_eq!(offset_of!(RawListen6Key, proto), 18);
        assert_eq!(offset_of!(RawListen6Key, pad), 19);
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
                remote_ip: [198, 18, 0, 2].into(),
                local_ip: [198, 18, 0, 1].into(),
                remote_port: 0x1234,
                local_port: 80,
            },
            proto: Proto::Tcp,
        };
        assert_eq!(
            flow_key(&key),
            FlowMapKey::V4([198, 18, 0, 2, 198, 18, 0, 1, 0x12, 0x34, 0, 80, 6, 0, 0, 0])
        );
        let listen = listen_key(Ipv4Addr::UNSPECIFIED.into(), 5353, Proto::Udp);
        assert_eq!(listen, ListenMapKey::V4([0, 0, 0, 0, 0x14, 0xe9, 17, 0]));
        let six = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let key = SteerKey {
            flow: FlowKey {
                remote_ip: six("2001:2::2").into(),
                local_ip: six("2001:2::1").into(),
                remote_port: 0x1234,
                local_port: 80,
            },
            proto: Proto::Tcp,
        };
        let mut want = [0u8; 40];
        want[..16].copy_from_slice(&six("2001:2::2").octets());
        want[16..32].copy_from_slice(&six("2001:2::1").octets());
        want[32..37].copy_from_slice(&[0x12, 0x34, 0, 80, 6]);
        assert_eq!(flow_key(&key), FlowMapKey::V6(want));
        let mut want = [0u8; 20];
        want[16..19].copy_from_slice(&[0x14, 0xe9, 17]);
        assert_eq!(
            listen_key(Ipv6Addr::UNSPECIFIED.into(), 5353, Proto::Udp),
            ListenMapKey::V6(want)
        );
    }
}
