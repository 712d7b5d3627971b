//! Removing a flow whose socket still holds received packets gives their
//! UMEM frames back to the queue (issue 12, item 3), and a flow refused
//! for a full flow table is counted (item 6).
//!
//! Builds its own "stack" and "peer" namespaces joined by veth; the peer
//! sends raw TCP segments of one 5-tuple that the datapath never reads
//! before the flow is removed. Needs root.

use std::net::SocketAddrV4;
use std::time::Duration;

use datapath::nic::{Nic, NicConfig};
use datapath::wire::FlowKey;
use socket2::{Domain, Protocol, Socket, Type};
use zerosplit_lab::{NetNs, VethPair};
use zerosplit_tests::{in_netns, require_root, wait_until};

const LOCAL_PORT: u16 = 7301;
const REMOTE_PORT: u16 = 40301;
const SENT: u32 = 64;

/// A bare TCP header (ACK, no payload) from `REMOTE_PORT` to `LOCAL_PORT`;
/// its checksum is not checked before the datapath reads it.
fn tcp_ack(seq: u32) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0..2].copy_from_slice(&REMOTE_PORT.to_be_bytes());
    h[2..4].copy_from_slice(&LOCAL_PORT.to_be_bytes());
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[12] = 5 << 4;
    h[13] = 0x10;
    h[14..16].copy_from_slice(&1024u16.to_be_bytes());
    h
}

fn key(pair: &VethPair, remote_port: u16) -> FlowKey {
    FlowKey {
        remote_ip: pair.b.addr.into(),
        local_ip: pair.a.addr.into(),
        remote_port,
        local_port: LOCAL_PORT,
    }
}

#[test]
fn removing_a_flow_with_unread_packets_returns_their_frames() {
    require_root();
    let _serial = zerosplit_tests::heavy();
    let stack = NetNs::new("zfc").expect("stack netns");
    let peer = NetNs::new("zfp").expect("peer netns");
    let pair = VethPair::create(&stack, &peer, 1500).expect("veth pair");
    let cfg = NicConfig {
        flow_sockets: true,
        max_flows: 1,
        ..NicConfig::default()
    };
    let mut nic = in_netns(&stack, || Nic::open(&pair.a.ifname, cfg)).expect("open datapath");
    let start = nic.rx_frame_count();
    // Flow sockets bind by interface index: install in the stack's namespace.
    let (installed, second) = in_netns(&stack, || {
        (
            nic.add_flow(key(&pair, REMOTE_PORT), pair.a.mac, pair.b.mac, 0, 0),
            nic.add_flow(key(&pair, REMOTE_PORT + 1), pair.a.mac, pair.b.mac, 0, 0)
                .is_err(),
        )
    });
    let flow = installed.expect("install the flow");
    assert_eq!(
        nic.counters().flow_sockets_opened,
        1,
        "veth takes a flow socket"
    );

    // The table holds one flow: the second is refused and counted.
    assert!(second);
    assert_eq!(nic.counters().rx.flow_table_full, 1);
    assert!(
        nic.drops().contains(&("flow_table_full", 1)),
        "{:?}",
        nic.drops()
    );

    let to = SocketAddrV4::new(pair.a.addr, 0);
    in_netns(&peer, || -> std::io::Result<()> {
        let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::TCP))?;
        for i in 0..SENT {
            raw.send_to(&tcp_ack(i), &to.into())?;
        }
        Ok(())
    })
    .expect("send raw TCP from the peer");
    let arrived = wait_until(Duration::from_secs(5), || nic.rx_frame_count().rx >= SENT);
    let held = nic.rx_frame_count();
    assert!(arrived, "{SENT} packets on the flow's ring: {held:?}");
    assert_eq!(
        held.total(),
        start.total(),
        "frames all accounted for while open"
    );

    nic.remove_flow(flow).expect("remove the flow");
    let end = nic.rx_frame_count();
    assert_eq!(
        end.total(),
        start.total(),
        "no frame lost with the socket: {end:?}"
    );
    assert!(nic.port_counters().rx_drained_on_close >= u64::from(SENT));
    let drained = nic.drops();
    assert!(
        drained
            .iter()
            .any(|&(name, n)| name == "rx_drained_on_close" && n >= u64::from(SENT)),
        "{drained:?}"
    );
}
