//! zerosplit sends, a Linux kernel TCP socket receives: the datapath builds
//! packets from header descriptors plus payload taken from posted
//! application memory (copied next to the header, or chained as fragments
//! pointing into the MR area), checksums filled in software.
//!
//! A tiny active-open sender stands in for the transport (SYN, ACK, data in
//! the peer's window, go-back-N on a stall, FIN); the kernel peer reads
//! everything and the bytes are compared.

use std::{
    io::Read,
    net::{Ipv4Addr, TcpListener},
    thread,
    time::{Duration, Instant},
};

use datapath::config::XskConfig;
use datapath::mr::Access;
use datapath::nic::{Nic, NicConfig, TxStrategy};
use datapath::tx::control_segment;
use datapath::wire::FlowKey;
use proto::{Flags, TcpOptions};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::require_root;

const PORT: u16 = 7101;
const SPORT: u16 = 45001;
const ISS: u32 = 0xffff_ff00; // the send stream wraps the 32-bit sequence space
const CHUNK: usize = 100_003; // posted send segments of odd size

fn data(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 9)) as u8)
        .collect()
}

fn send_to_kernel(mtu: u32, len: usize, strategy: Option<TxStrategy>) {
    require_root();
    let _serial = zerosplit_tests::heavy();
    let stack = NetNs::new("zte").expect("netns");
    let peer = NetNs::new("ztp").expect("netns");
    let pair = VethPair::create(&stack, &peer, mtu).expect("veth");
    let (a, b) = (pair.a.clone(), pair.b.clone());
    let payload = data(len);
    let listener = in_netns(&peer, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).expect("kernel listen")
    });

    let received = thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut conn, _) = listener.accept().expect("kernel accept");
            conn.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            let mut got = Vec::with_capacity(len);
            conn.read_to_end(&mut got).expect("kernel read until FIN");
            got
        });
        in_netns(&stack, || {
            let cfg = NicConfig {
                mtu: mtu as usize,
                tx_strategy: strategy,
                xsk: XskConfig {
                    multi_buffer: mtu > 3000 || strategy == Some(TxStrategy::Chain),
                    ..XskConfig::default()
                },
                ..NicConfig::default()
            };
            let mut nic = Nic::open(&a.ifname, cfg).expect("open datapath");
            let key = FlowKey {
                remote_ip: b.addr.into(),
                local_ip: a.addr.into(),
                remote_port: PORT,
                local_port: SPORT,
            };
            let id = nic.add_flow(key, a.mac, b.mac, 0, ISS).expect("flow");
            let mr = nic.register_memory(len, Access::SEND).expect("register");
            nic.memory_mut(mr)
                .expect("memory")
                .copy_from_slice(&payload);
            let mut off = 0;
            while off < len {
                let n = CHUNK.min(len - off);
                nic.post_send(id, mr, off, n, off as u64)
                    .expect("post send");
                off += n;
            }
            let mss = (mtu - 40) as u64;
            let mut syn = control_segment(ISS, 0, Flags::SYN, 65535);
            syn.header.options =
                TcpOptions::new(&[2, 4, (mss >> 8) as u8, mss as u8]).expect("4 bytes");
            assert!(nic.send(id, &syn).expect("SYN"));
            nic.flush();

            let (mut irs, mut established) = (0u32, false);
            let (mut snd_una, mut snd_nxt, mut peer_window) = (0u64, 0u64, 0u64);
            let (mut records, mut completions) = (Vec::new(), Vec::new());
            let mut last_progress = Instant::now();
            let mut fin_sent = false;
            let deadline = Instant::now() + Duration::from_secs(30);
            while !(fin_sent && snd_una > len as u64) && Instant::now() < deadline {
                records.clear();
                nic.poll_rx(256, &mut records);
                for r in &records {
                    if r.segment.header.has(Flags::RST) {
                        panic!("kernel reset the connection: {r:?}");
                    }
                    if r.segment.header.has(Flags::SYN | Flags::ACK) && !established {
                        irs = r.segment.header.seq;
                        nic.set_irs(id, irs).expect("irs");
                        established = true;
                    }
                    if r.segment.header.has(Flags::ACK) {
                        let acked =
                            u64::from(r.segment.header.ack.wrapping_sub(ISS.wrapping_add(1)));
                        if acked > snd_una && acked <= len as u64 + 1 {
                            snd_una = acked;
                            last_progress = Instant::now();
                            nic.complete_send(id, snd_una.min(len as u64), &mut completions)
                                .expect("complete");
                        }
                        peer_window = u64::from(r.segment.header.window);
                    }
                }
                if !established {
                    continue;
                }
                let ack = irs.wrapping_add(1);
                if snd_nxt == 0 && snd_una == 0 {
                    // Third leg of the handshake.
                    nic.send(
                        id,
                        &control_segment(ISS.wrapping_add(1), ack, Flags::ACK, 65535),
                    )
                    .expect("ACK");
                }
                if last_progress.elapsed() > Duration::from_millis(20) {
                    snd_nxt = snd_una.min(len as u64); // go back
                    fin_sent = false;
                    last_progress = Instant::now();
                }
                while snd_nxt < len as u64 && snd_nxt < snd_una + peer_window.max(mss) {
                    let end = (snd_nxt + mss)
                        .min(len as u64)
                        .min(snd_una + peer_window.max(mss));
                    let mut seg = control_segment(
                        ISS.wrapping_add(1).wrapping_add(snd_nxt as u32),
                        ack,
                        Flags::ACK | Flags::PSH,
                        65535,
                    );
                    seg.payload = Some(snd_nxt..end);
                    if !nic.send(id, &seg).expect("data segment") {
                        break;
                    }
                    snd_nxt = end;
                }
                if snd_nxt == len as u64 && !fin_sent {
                    let fin = control_segment(
                        ISS.wrapping_add(1).wrapping_add(len as u32),
                        ack,
                        Flags::FIN | Flags::ACK,
                        65535,
                    );
                    fin_sent = nic.send(id, &fin).expect("FIN");
                }
                nic.flush();
            }
            assert!(
                snd_una > len as u64,
                "the kernel acknowledged every byte and the FIN (snd_una {snd_una})"
            );
            // A send acknowledged while its chain fragments were still out
            // completes once their TX completions come back.
            let until = Instant::now() + Duration::from_secs(5);
            while nic.send_waiting(id).expect("flow") && Instant::now() < until {
                nic.flush();
                nic.complete_send(id, len as u64, &mut completions)
                    .expect("complete");
            }
            assert!(
                !nic.send_waiting(id).expect("flow"),
                "completions came back"
            );
            let done: u64 = completions.iter().map(|c| c.len).sum();
            assert_eq!(done, len as u64, "every posted send segment completed once");
            assert_eq!(nic.tx_strategy(), strategy.unwrap_or(TxStrategy::Copy));
            let pc = nic.port_counters();
            let data_packets = len as u64 / mss;
            assert!(pc.tx_packets >= data_packets, "{pc:?}");
            // What went out as chains, counted where the descriptors are
            // queued (not read back from the configuration). A descriptor
            // holds at most one frame (or MR chunk) of payload, so the
            // payload fits in the chains' fragments plus one frame per
            // packet that was not chained only if chains carried it.
            let frame_size = u64::from(XskConfig::default().umem.frame_size);
            let single = pc.tx_packets - pc.tx_multi_buffer;
            let room = (pc.tx_fragments + single) * frame_size;
            if strategy == Some(TxStrategy::Chain) {
                // Every data packet: a header frame and its MR fragments.
                assert!(pc.tx_multi_buffer >= data_packets, "{pc:?}");
                assert!(pc.tx_fragments >= pc.tx_multi_buffer, "{pc:?}");
                assert!(room >= len as u64, "{pc:?}");
            } else if mss > frame_size {
                // Jumbo segments do not fit one frame: those that carried
                // more than a frame's worth went out as chains.
                assert!(pc.tx_multi_buffer > 0, "no chains: {pc:?}");
                assert!(
                    room >= len as u64,
                    "{len} payload bytes cannot have fit {room} bytes of descriptors: {pc:?}"
                );
            } else {
                assert_eq!(pc.tx_multi_buffer, 0, "copy sends one frame each: {pc:?}");
                assert_eq!(pc.tx_fragments, 0, "{pc:?}");
            }
        });
        reader.join().expect("kernel reader")
    });
    assert!(
        received == payload,
        "the kernel received exactly the bytes in posted memory ({} of {len})",
        received.len()
    );
}

#[test]
fn copy_strategy_sends_byte_exact_to_kernel_tcp() {
    send_to_kernel(1500, 4 << 20, None);
}

#[test]
fn chained_fragments_from_the_mr_area_send_byte_exact() {
    send_to_kernel(1500, 4 << 20, Some(TxStrategy::Chain));
}

#[test]
fn jumbo_segments_go_out_as_multi_buffer_chains() {
    send_to_kernel(9000, 4 << 20, None);
}
