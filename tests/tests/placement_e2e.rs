//! A Linux kernel TCP sender's payload lands byte-exact in posted memory.
//!
//! The stack namespace runs the datapath ([`Nic`]) with a deliberately tiny
//! receiver standing in for the transport: it answers the SYN, installs the
//! flow, posts receive segments, and acknowledges the in-order point that
//! the placement records reveal. The datapath does the real work: steering,
//! AF_XDP RX, checksum verification and placement at the sequence number's
//! offset. The peer is an ordinary kernel `TcpStream`.

use std::{
    io::Write,
    net::{SocketAddrV4, TcpStream},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use datapath::config::BoundMode;
use datapath::config::XskConfig;
use datapath::mr::Access;
use datapath::nic::{rx_queue, DemuxMode, Nic, NicConfig, RxRecord};
use datapath::tx::{control_segment, TxSegment};
use proto::{Flags, TcpOptions};
use zerosplit_lab::{NetNs, VethPair};
use zerosplit_tests::{in_netns, require_root, wait_for};

const PORT: u16 = 7001;
const ISS: u32 = 0xfff0_0000; // near the wrap on purpose
const WS: u8 = 7;
const QUEUE: usize = 16;
const SEGMENT: usize = 256 * 1024 + 123; // odd size: segments straddle packets

fn payload(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn has_window_scale(rec: &RxRecord) -> bool {
    let o = rec.segment.header.options.as_slice();
    let mut i = 0;
    while i < o.len() {
        match o[i] {
            0 => return false,
            1 => i += 1,
            3 => return true,
            _ => i += usize::from(*o.get(i + 1).unwrap_or(&1)).max(2),
        }
    }
    false
}

fn segment(seq: u32, ack: u32, bits: Flags, window: u16, options: &[u8]) -> TxSegment {
    let mut s = control_segment(seq, ack, bits, window);
    s.header.options = TcpOptions::new(options).expect("at most 40 option bytes");
    s
}

fn receive_from_kernel(mtu: u32, len: usize, flow_sockets: bool) {
    require_root();
    let _serial = zerosplit_tests::heavy();
    let stack = NetNs::new("zpe").expect("netns");
    let peer = NetNs::new("zpp").expect("netns");
    let pair = VethPair::create(&stack, &peer, mtu).expect("veth");
    let a = pair.a.clone();
    let data = payload(len);
    let done = AtomicBool::new(false);
    let ready = AtomicBool::new(false);

    let (received, flow_placed, records_with_payload) = thread::scope(|s| {
        let stack_side = s.spawn(|| {
            in_netns(&stack, || {
                let multi = mtu > 3000;
                let mut cfg = NicConfig {
                    mtu: mtu as usize,
                    flow_sockets,
                    ..NicConfig::default()
                };
                cfg.xsk = XskConfig {
                    multi_buffer: multi,
                    ..XskConfig::default()
                };
                cfg.xsk.umem.mr_bytes = len + (1 << 20);
                let mut nic = Nic::open(&a.ifname, cfg).expect("open datapath");
                // veth cannot bind zero-copy: the automatic mode falls back.
                assert_eq!(nic.bind_mode(), BoundMode::Copy);
                nic.listen(a.addr, PORT).expect("listen");
                ready.store(true, Ordering::Release);
                let mr = nic.register_memory(len, Access::RECV).expect("register");
                let mss = (mtu - 40) as u16;
                let mut flow = None;
                let mut irs = 0u32;
                let mut shift = 0u8;
                let mut placed: Vec<(u64, u64)> = Vec::new(); // scoreboard
                let mut rcv_nxt = 0u64;
                let mut acked = u64::MAX;
                let mut completions = Vec::new();
                let mut with_payload = 0u64;
                let mut records = Vec::new();
                let (mut queue_tx, mut queue_rx) = rx_queue(QUEUE);
                let deadline = Instant::now() + Duration::from_secs(60);
                while rcv_nxt < len as u64 && Instant::now() < deadline {
                    records.clear();
                    if flow_sockets {
                        nic.poll_rx(256, &mut records);
                    } else {
                        // The dedicated-thread path: records cross a small
                        // bounded SPSC queue; the loop takes no more packets
                        // than the queue has room for.
                        let taken = nic.poll_rx(256, &mut queue_tx);
                        assert!(
                            taken as usize <= QUEUE,
                            "poll_rx respected the queue's room"
                        );
                        while let Ok(r) = queue_rx.pop() {
                            records.push(r);
                        }
                    }
                    for rec in &records {
                        if rec.segment.header.has(Flags::SYN) && flow.is_none() {
                            irs = rec.segment.header.seq;
                            shift = if has_window_scale(rec) { WS } else { 0 };
                            let id = nic
                                .add_flow(rec.key, a.mac, rec.src_mac, irs, ISS)
                                .expect("add flow");
                            let mut off = 0;
                            while off < len {
                                let n = SEGMENT.min(len - off);
                                nic.post_recv(id, mr, off, n, off as u64).expect("post");
                                off += n;
                            }
                            flow = Some(id);
                            let mut opts = vec![2, 4];
                            opts.extend_from_slice(&mss.to_be_bytes());
                            if shift > 0 {
                                opts.extend_from_slice(&[1, 3, 3, shift]);
                            }
                            let win = (len as u64 >> shift).min(65535) as u16;
                            let synack = segment(
                                ISS,
                                irs.wrapping_add(1),
                                Flags::SYN | Flags::ACK,
                                win,
                                &opts,
                            );
                            assert!(nic.send(id, &synack).expect("build SYN-ACK"));
                            nic.flush();
                            continue;
                        }
                        let Some(p) = rec.placement else { continue };
                        if rec.segment.payload_len > 0 {
                            with_payload += 1;
                        }
                        if !p.placed.is_empty() {
                            placed.push((p.placed.start, p.placed.end));
                        }
                    }
                    // Merge the scoreboard and find the in-order point.
                    placed.sort_unstable();
                    for &(s0, e0) in &placed {
                        if s0 <= rcv_nxt {
                            rcv_nxt = rcv_nxt.max(e0);
                        }
                    }
                    placed.retain(|&(_, e0)| e0 > rcv_nxt);
                    if let Some(id) = flow {
                        if rcv_nxt != acked {
                            nic.complete_recv(id, rcv_nxt, &mut completions)
                                .expect("complete");
                            // Round up: the last < 2^shift bytes would otherwise
                            // advertise a zero window (the sender has nothing
                            // beyond `len`, so nothing lands outside posted space).
                            let win = (len as u64 - rcv_nxt).div_ceil(1 << shift).min(65535) as u16;
                            let ack = irs.wrapping_add(1).wrapping_add(rcv_nxt as u32);
                            let seg = segment(ISS.wrapping_add(1), ack, Flags::ACK, win, &[]);
                            // A full TX ring only delays the ACK to the next turn.
                            if nic.send(id, &seg).expect("build ACK") {
                                acked = rcv_nxt;
                            }
                        }
                    }
                    nic.flush();
                }
                done.store(true, Ordering::Relaxed);
                assert_eq!(
                    rcv_nxt, len as u64,
                    "every byte arrived in order before the deadline"
                );
                let done_wrs: u64 = completions.iter().map(|c| c.len).sum();
                assert_eq!(
                    done_wrs, len as u64,
                    "every posted receive segment completed exactly once"
                );
                assert_eq!(completions.len(), len.div_ceil(SEGMENT));
                let id = flow.expect("flow");
                let want = if flow_sockets {
                    DemuxMode::PerFlowSockets
                } else {
                    DemuxMode::SoftwareDemux
                };
                assert_eq!(nic.demux_mode(), want);
                assert_eq!(nic.counters().flow_sockets_opened, u64::from(flow_sockets));
                // Jumbo frames arrive as fragment chains and are placed
                // from the fragments (at least half of the bytes came in
                // full-sized segments); 1500-byte frames fit one frame.
                let chains = nic.counters().rx_multi_buffer;
                if multi {
                    assert!(
                        chains as usize >= len / (2 * mtu as usize),
                        "{chains} chains"
                    );
                } else {
                    assert_eq!(chains, 0);
                }
                let placed_bytes = nic.flow(id).expect("flow").counters.bytes_placed;
                (
                    nic.memory(mr).expect("memory").to_vec(),
                    placed_bytes,
                    with_payload,
                )
            })
        });
        wait_for(&ready, Duration::from_secs(30), "the datapath to listen");
        let sender = s.spawn(|| {
            in_netns(&peer, || {
                let mut stream = TcpStream::connect_timeout(
                    &SocketAddrV4::new(a.addr, PORT).into(),
                    Duration::from_secs(5),
                )
                .expect("kernel connect to zerosplit");
                stream
                    .set_write_timeout(Some(Duration::from_secs(30)))
                    .expect("timeout");
                stream.write_all(&data).expect("kernel write");
                let deadline = Instant::now() + Duration::from_secs(60);
                while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(10));
                }
            })
        });
        let r = stack_side.join().expect("stack side");
        sender.join().expect("sender");
        r
    });
    assert!(
        received == data,
        "posted memory holds exactly the bytes the kernel sent"
    );
    assert!(
        flow_placed >= len as u64,
        "the datapath placed every byte ({flow_placed})"
    );
    assert!(
        records_with_payload as usize >= len / (mtu as usize),
        "records came per segment"
    );
}

#[test]
fn kernel_tcp_payload_lands_in_posted_memory_mtu_1500() {
    receive_from_kernel(1500, 8 << 20, true);
}

#[test]
fn kernel_tcp_payload_lands_in_posted_memory_mtu_9000_multi_buffer() {
    receive_from_kernel(9000, 8 << 20, true);
}

#[test]
fn software_demux_through_a_bounded_spsc_queue_places_the_same_bytes() {
    receive_from_kernel(1500, 4 << 20, false);
}
