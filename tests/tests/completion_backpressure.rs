//! A full completion queue pushes back on the application instead of
//! growing (issue 12, "every queue bounded"): while the application does
//! not take its completions, the stack reads no more packets (nothing is
//! placed, the peer's data waits in the network and its window), posting
//! is refused with a clear error, and once the completions are taken the
//! transfer carries on, byte-exact.
//!
//! Builds its own namespaces joined by veth; Linux sends. Needs root.

use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use datapath::mr::Access;
use zerosplit::host::{HostConfig, HostError};
use zerosplit::provider::CompletionKind;
use zerosplit::provider::Provider;
use zerosplit::stack::Stack;
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{connect_retrying, heavy, pattern, require_root, wait_for};

const PORT: u16 = 5077;
const CQ: usize = 8;
const BUF: usize = 64 << 10;
const BUFS: usize = 64;
/// More than the posted space, so the window is not what stops the sender.
const LEN: usize = 16 << 20;

#[test]
fn a_full_completion_queue_stops_receiving_until_the_application_takes_it() {
    require_root();
    let _serial = heavy();
    let a = NetNs::new("zcq").expect("netns");
    let b = NetNs::new("zcp").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let payload = pattern(LEN, 7);
    let ready = AtomicBool::new(false);
    let received = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&a, || {
                let config = HostConfig {
                    completion_queue: CQ,
                    ..HostConfig::default()
                };
                let mut stack = Stack::new(&pair.a.ifname, config).expect("stack");
                stack.listen(PORT).expect("listen");
                let mr = stack
                    .register_memory(BUF * BUFS, Access::RECV)
                    .expect("memory");
                ready.store(true, Ordering::Release);
                let deadline = Instant::now() + Duration::from_secs(10);
                let conn = loop {
                    stack.poll();
                    if let Some(c) = stack.accept(PORT).expect("accept") {
                        break c;
                    }
                    assert!(Instant::now() < deadline, "no connection");
                };
                for k in 0..BUFS {
                    stack
                        .post_recv(conn, mr, k * BUF, BUF, k as u64)
                        .expect("post");
                }
                // The application only polls: completions pile up to the
                // bound, then receiving stops.
                let until = Instant::now() + Duration::from_secs(2);
                while Instant::now() < until {
                    stack.poll();
                }
                let paused_at = stack.received(conn).expect("open");
                for _ in 0..200 {
                    stack.poll();
                    thread::sleep(Duration::from_millis(2));
                }
                assert_eq!(
                    stack.received(conn).expect("open"),
                    paused_at,
                    "nothing received while the completion queue is full"
                );
                assert!(
                    paused_at < (BUF * BUFS) as u64,
                    "stopped by the completion queue, not by the posted space: {paused_at}"
                );
                assert!(stack.counters().rx_paused > 0);
                let refused = stack.post_recv(conn, mr, 0, BUF, 999);
                assert!(
                    matches!(
                        refused,
                        Err(HostError::CompletionQueueFull { capacity: CQ })
                    ),
                    "{refused:?}"
                );
                // Take the completions: receiving resumes; run the
                // transfer to its end.
                let mut out = Vec::with_capacity(LEN);
                let mut next_wr = BUFS as u64;
                let mut peer_len = None;
                let deadline = Instant::now() + Duration::from_secs(30);
                while peer_len.is_none_or(|n| (out.len() as u64) < n) {
                    assert!(
                        Instant::now() < deadline,
                        "transfer stalled at {}",
                        out.len()
                    );
                    stack.poll();
                    while let Some(c) = stack.poll_completion() {
                        match c.kind {
                            CompletionKind::Recv => {
                                let slot = (c.wr_id as usize) % BUFS;
                                stack
                                    .post_recv(conn, mr, slot * BUF, BUF, next_wr)
                                    .expect("post after taking completions");
                                next_wr += 1;
                            }
                            CompletionKind::PeerClosed { len } => peer_len = Some(len),
                            _ => {}
                        }
                    }
                    let upto = stack.received(conn).unwrap_or(out.len() as u64) as usize;
                    let memory = stack.memory(mr).expect("memory");
                    while out.len() < upto {
                        let at = out.len() % (BUF * BUFS);
                        let n = (upto - out.len()).min(BUF * BUFS - at);
                        out.extend_from_slice(&memory[at..at + n]);
                    }
                }
                stack.close(conn).ok();
                for _ in 0..100 {
                    stack.poll();
                }
                out
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        in_netns(&b, || {
            let addr = SocketAddrV4::new(pair.a.addr, PORT);
            let mut stream = connect_retrying(addr, Duration::from_secs(10));
            stream.write_all(&payload).expect("kernel send");
            stream.shutdown(std::net::Shutdown::Write).expect("FIN");
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
        });
        server.join().expect("server thread")
    });
    assert!(received == payload, "byte-exact after the pause");
}
