//! Every packet is accounted for (issue 12, "every drop counted"): N
//! frames of mixed kinds sent at a running datapath end up, each exactly
//! once, as an accepted record, a drop under a named reason, or a packet
//! handed to the kernel because it is not ours, and the test names the
//! outcome it expects of every kind.
//!
//! Builds its own "stack" and "peer" namespaces joined by veth; the peer
//! writes whole Ethernet frames with a packet socket (so lying lengths and
//! bad IP checksums reach the wire, and no ARP is needed). IPv6 is off in
//! both namespaces, so nothing else crosses the link. Needs root.

use std::collections::BTreeMap;
use std::time::Duration;

use datapath::checksum::{ipv4_pseudo_header, sum};
use datapath::nic::{Nic, NicConfig, RxRecord};
use datapath::steer::SteerCounters;
use datapath::wire::FlowKey;
use proto::Flags;
use zerosplit_lab::PacketSocket;
use zerosplit_lab::{NetNs, VethPair};
use zerosplit_tests::{in_netns, require_root, wait_until};

const LISTEN_PORT: u16 = 7401;
const FLOW_PORT: u16 = 40401;
/// Copies of each kind sent.
const EACH: usize = 7;

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const SYN: u8 = Flags::SYN.0;
const ACK: u8 = Flags::ACK.0;

/// Addresses of the two ends.
struct Ends {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
}

/// How to spoil an otherwise good frame.
#[derive(Clone, Copy, Default)]
struct Spoil {
    /// Flip the TCP checksum.
    tcp_checksum: bool,
    /// Flip the IPv4 header checksum.
    ip_checksum: bool,
    /// Add this to the IPv4 total length (a length longer than the frame).
    ip_length_extra: u16,
    /// IPv4 flags and fragment offset field.
    frag: u16,
    /// TCP data offset in words (5 when not spoiled).
    data_offset: Option<u8>,
    /// IP version nibble (4 when not spoiled).
    version: Option<u8>,
    /// Cut the frame to this many bytes.
    cut: Option<usize>,
}

impl Ends {
    /// A TCP segment with a correct checksum, before `spoil`.
    fn tcp(&self, sport: u16, dport: u16, flags: u8, payload: &[u8], spoil: Spoil) -> Vec<u8> {
        let mut seg = vec![0u8; 20];
        seg[0..2].copy_from_slice(&sport.to_be_bytes());
        seg[2..4].copy_from_slice(&dport.to_be_bytes());
        seg[4..8].copy_from_slice(&1000u32.to_be_bytes());
        seg[8..12].copy_from_slice(&1u32.to_be_bytes());
        seg[12] = spoil.data_offset.unwrap_or(5) << 4;
        seg[13] = flags;
        seg[14..16].copy_from_slice(&65535u16.to_be_bytes());
        seg.extend_from_slice(payload);
        let ph = ipv4_pseudo_header(self.src, self.dst, TCP, seg.len() as u16);
        let mut csum = ph.then(sum(&seg)).checksum();
        if spoil.tcp_checksum {
            csum ^= 0x5a5a;
        }
        seg[16..18].copy_from_slice(&csum.to_be_bytes());
        self.ipv4(TCP, &seg, spoil)
    }

    /// A UDP datagram with a correct checksum.
    fn udp(&self, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; 8];
        d[0..2].copy_from_slice(&sport.to_be_bytes());
        d[2..4].copy_from_slice(&dport.to_be_bytes());
        d[4..6].copy_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        d.extend_from_slice(payload);
        let ph = ipv4_pseudo_header(self.src, self.dst, UDP, d.len() as u16);
        let csum = ph.then(sum(&d)).checksum();
        d[6..8].copy_from_slice(&csum.to_be_bytes());
        self.ipv4(UDP, &d, Spoil::default())
    }

    /// Ethernet + IPv4 (correct header checksum unless spoiled) + `l4`.
    fn ipv4(&self, proto: u8, l4: &[u8], spoil: Spoil) -> Vec<u8> {
        let mut f = self.ethernet(0x0800);
        let mut ip = [0u8; 20];
        ip[0] = (spoil.version.unwrap_or(4) << 4) | 5;
        let total = 20 + l4.len() as u16 + spoil.ip_length_extra;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[6..8].copy_from_slice(&spoil.frag.to_be_bytes());
        ip[8] = 64;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&self.src);
        ip[16..20].copy_from_slice(&self.dst);
        let mut csum = sum(&ip).checksum();
        if spoil.ip_checksum {
            csum ^= 0x5a5a;
        }
        ip[10..12].copy_from_slice(&csum.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(l4);
        if let Some(n) = spoil.cut {
            f.truncate(n);
        }
        f
    }

    fn ethernet(&self, ethertype: u16) -> Vec<u8> {
        let mut f = Vec::with_capacity(1514);
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }
}

/// One kind of frame and the outcome it must have.
struct Kind {
    name: &'static str,
    outcome: &'static str,
    frame: Vec<u8>,
}

/// The kinds sent, each with the counter that must count it. `accepted`
/// is a record handed on to the transport; `to_kernel` a packet that is
/// not ours (another port, protocol or ethertype) which the steering
/// program passes to the kernel; `to_kernel_malformed` one whose headers
/// the steering program cannot read (the kernel drops it).
fn kinds(e: &Ends) -> Vec<Kind> {
    let good = Spoil::default();
    let data = [0xabu8; 100];
    let k = |name, outcome, frame| Kind {
        name,
        outcome,
        frame,
    };
    vec![
        k(
            "syn to the listener",
            "accepted",
            e.tcp(50001, LISTEN_PORT, SYN, &[], good),
        ),
        k(
            "data on the installed flow",
            "accepted",
            e.tcp(FLOW_PORT, LISTEN_PORT, ACK, &data, good),
        ),
        k(
            "bad tcp checksum on the flow",
            "flow_bad_checksum",
            e.tcp(
                FLOW_PORT,
                LISTEN_PORT,
                ACK,
                &data,
                Spoil {
                    tcp_checksum: true,
                    ..good
                },
            ),
        ),
        k(
            "bad tcp checksum, unknown flow",
            "bad_checksum",
            e.tcp(
                50002,
                LISTEN_PORT,
                SYN,
                &[],
                Spoil {
                    tcp_checksum: true,
                    ..good
                },
            ),
        ),
        k(
            "bad ip header checksum",
            "bad_ip_checksum",
            e.tcp(
                50003,
                LISTEN_PORT,
                SYN,
                &[],
                Spoil {
                    ip_checksum: true,
                    ..good
                },
            ),
        ),
        k(
            "ip total length beyond the frame",
            "malformed_ipv4",
            e.tcp(
                FLOW_PORT,
                LISTEN_PORT,
                ACK,
                &data,
                Spoil {
                    ip_length_extra: 200,
                    ..good
                },
            ),
        ),
        k(
            "tcp data offset below 5",
            "malformed_tcp",
            e.tcp(
                50004,
                LISTEN_PORT,
                SYN,
                &[],
                Spoil {
                    data_offset: Some(3),
                    ..good
                },
            ),
        ),
        k(
            "tcp data offset beyond the segment",
            "malformed_tcp",
            e.tcp(
                50005,
                LISTEN_PORT,
                SYN,
                &[],
                Spoil {
                    data_offset: Some(15),
                    ..good
                },
            ),
        ),
        k(
            "tcp header cut short",
            "to_kernel_malformed",
            e.tcp(
                50006,
                LISTEN_PORT,
                SYN,
                &[],
                Spoil {
                    cut: Some(14 + 20 + 10),
                    ..good
                },
            ),
        ),
        k(
            "ip version 5",
            "to_kernel_malformed",
            e.tcp(
                50007,
                LISTEN_PORT,
                SYN,
                &[],
                Spoil {
                    version: Some(5),
                    ..good
                },
            ),
        ),
        k(
            "udp to the listening port",
            "to_kernel",
            e.udp(50008, LISTEN_PORT, &data),
        ),
        k(
            "first fragment to the listening port",
            "ip_fragment",
            e.tcp(
                50009,
                LISTEN_PORT,
                SYN,
                &data,
                Spoil {
                    frag: 0x2000,
                    ..good
                },
            ),
        ),
        k(
            "first fragment on the installed flow",
            "ip_fragment",
            e.tcp(
                FLOW_PORT,
                LISTEN_PORT,
                ACK,
                &data,
                Spoil {
                    frag: 0x2000,
                    ..good
                },
            ),
        ),
        k(
            "first fragment to another port",
            "to_kernel",
            e.tcp(
                50011,
                9,
                SYN,
                &data,
                Spoil {
                    frag: 0x2000,
                    ..good
                },
            ),
        ),
        k(
            "later fragment",
            "to_kernel",
            e.ipv4(
                TCP,
                &data,
                Spoil {
                    frag: 0x0010,
                    ..good
                },
            ),
        ),
        k(
            "tcp to a port nobody listens on",
            "to_kernel",
            e.tcp(50010, 9, SYN, &[], good),
        ),
        k(
            "icmp",
            "to_kernel",
            e.ipv4(ICMP, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0], good),
        ),
        k("another ethertype", "to_kernel", {
            let mut f = e.ethernet(0x88b5);
            f.extend_from_slice(&[0u8; 46]);
            f
        }),
    ]
}

/// Every outcome counter of the datapath and the steering program.
fn outcomes(nic: &Nic, flow: datapath::flow_table::FlowId) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    m.insert("accepted".into(), nic.counters().records);
    for (name, n) in nic.drops() {
        *m.entry(name.into()).or_default() += n;
    }
    let flow = nic.flow(flow).expect("the flow is installed");
    for (name, n) in flow.counters.iter() {
        // Per-flow placement verdicts of accepted segments (placed,
        // beyond_posted, ...) describe records; only a bad checksum drops.
        if name == "bad_checksum" {
            m.insert("flow_bad_checksum".into(), n);
        }
    }
    let steer: SteerCounters = nic.steering().counters().expect("steering counters");
    m.insert("to_kernel".into(), steer.passed);
    m.insert("to_kernel_malformed".into(), steer.malformed);
    m.retain(|_, n| *n > 0);
    m
}

#[test]
fn every_packet_is_accepted_or_counted_under_its_reason() {
    require_root();
    let _serial = zerosplit_tests::heavy();
    let stack = NetNs::new("zda").expect("stack netns");
    let peer = NetNs::new("zdp").expect("peer netns");
    let pair = VethPair::create(&stack, &peer, 1500).expect("veth pair");
    // The stack's kernel answers some kinds (ICMP unreachable, RST, echo
    // reply): a permanent neighbour entry keeps its ARP request, and the
    // peer's ARP reply, off the link.
    stack
        .set_permanent_neighbour(&pair.a.ifname, pair.b.addr, pair.b.mac)
        .expect("static neighbour entry");
    let cfg = NicConfig {
        flow_sockets: false,
        ..NicConfig::default()
    };
    let mut nic = in_netns(&stack, || Nic::open(&pair.a.ifname, cfg)).expect("open datapath");
    nic.listen(pair.a.addr, LISTEN_PORT).expect("listen");
    let key = FlowKey {
        remote_ip: pair.b.addr.into(),
        local_ip: pair.a.addr.into(),
        remote_port: FLOW_PORT,
        local_port: LISTEN_PORT,
    };
    let flow = in_netns(&stack, || nic.add_flow(key, pair.a.mac, pair.b.mac, 0, 0))
        .expect("install the flow");
    let before = outcomes(&nic, flow);
    assert!(
        before.is_empty(),
        "nothing crossed the link yet: {before:?}"
    );

    let ends = Ends {
        src_mac: pair.b.mac,
        dst_mac: pair.a.mac,
        src: pair.b.addr.octets(),
        dst: pair.a.addr.octets(),
    };
    let kinds = kinds(&ends);
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for k in &kinds {
        *expected.entry(k.outcome.into()).or_default() += EACH as u64;
    }
    let n: u64 = (kinds.len() * EACH) as u64;
    let frames: Vec<&[u8]> = (0..EACH)
        .flat_map(|_| kinds.iter().map(|k| k.frame.as_slice()))
        .collect();
    in_netns(&peer, || -> Result<(), zerosplit_lab::PacketError> {
        let tx = PacketSocket::open_tx(&pair.b.ifname, 1 << 20)?;
        let mut sent = 0;
        while sent < frames.len() {
            sent += tx.send_batch(&frames[sent..])?;
        }
        Ok(())
    })
    .expect("send the frames from the peer");

    let mut records: Vec<RxRecord> = Vec::new();
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    let all_seen = wait_until(Duration::from_secs(5), || {
        nic.poll_rx(256, &mut records);
        total(&outcomes(&nic, flow)) >= n
    });
    // A little longer, so that a packet counted twice would show.
    for _ in 0..50 {
        nic.poll_rx(256, &mut records);
        std::thread::sleep(Duration::from_millis(2));
    }
    let got = outcomes(&nic, flow);
    assert!(
        all_seen,
        "only {} of {n} packets accounted for: {got:?}",
        total(&got)
    );
    let names: Vec<String> = kinds
        .iter()
        .map(|k| format!("{} -> {}", k.name, k.outcome))
        .collect();
    assert_eq!(
        got, expected,
        "accepted + drops by reason must match what was sent; kinds: {names:#?}"
    );
    assert_eq!(total(&got), n, "accepted + every drop counter = N");
    assert_eq!(records.len() as u64, got["accepted"]);
}
