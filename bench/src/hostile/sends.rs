//! The kinds that hit a stack while it *sends*: a fresh sender in the
//! stack namespace (zerosplit with registered send buffers, or a Linux
//! socket) streams to a Linux reader in the peer namespace, and the
//! injector forges the kind's frames toward the sender.

use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use datapath::mr::Access;
use datapath::nic::TxStrategy;
use transports::segment::CloseReason;
use transports::tcp::State;
use zerosplit::host::HostConfig;
use zerosplit::provider::CompletionKind;
use zerosplit::provider::Provider;
use zerosplit::stack::Stack;
use zerosplit_lab::PacketSocket;

use super::kinds::{Kind, FORGED};
use super::lab::{
    connect, drops_since, face_off, inject, linux_accepts_one, port_of, rss, stream, Lab,
    SuiteConfig, ZS_PORT,
};
use super::report::{Outcome, Receiver};
use super::sniff::Sniffer;

/// Send buffers of the sending stack, each `SEND_BUF` bytes: few and
/// small, so every one is reused many times over a stream.
pub(super) const SEND_BUFS: usize = 8;

pub(super) const SEND_BUF: usize = 16 << 10;

/// What the sending side returns (stack-sends kinds).
#[derive(Default)]
pub(super) struct Sent {
    error: Option<String>,
    drops: Vec<(String, u64)>,
    rss_growth: i64,
    connections_after: usize,
    early_completions: u64,
    double_completions: u64,
    deferred: u64,
}

/// One stack-sends kind ([`Expect::SenderDrop`](super::Expect::SenderDrop)):
/// the victim in the stack namespace sends the stream to a Linux reader
/// in the peer namespace, which the injector's forged ACKs pretend to be.
pub(super) fn run_stack_sends(
    lab: &Lab,
    cfg: &SuiteConfig,
    kind: &Kind,
    r: Receiver,
    seed: u64,
) -> Outcome {
    let payload = stream(cfg.stream_bytes, seed);
    let ready = AtomicBool::new(false);
    let port = port_of(r);
    let (sent, (got, injected, read_error)) = face_off(
        lab,
        &ready,
        || match r {
            Receiver::Zerosplit => zerosplit_sends(lab, cfg, &ready, &payload),
            Receiver::Linux => linux_sends(cfg, &ready, &payload),
        },
        || read_and_inject(lab, cfg, kind, port, &payload),
        || Sent {
            error: Some("sender panicked".into()),
            ..Sent::default()
        },
    );
    let n = got.len().min(payload.len());
    let wrong: Vec<usize> = (0..n).filter(|&i| got[i] != payload[i]).collect();
    Outcome {
        received: got.len(),
        expected: payload.len(),
        wrong_bytes: wrong.len(),
        forged_bytes: wrong.iter().filter(|&&i| got[i] == FORGED).count(),
        error: sent.error.or(read_error.map(|e| format!("reader: {e}"))),
        injected,
        drops: sent.drops,
        kernel: Vec::new(),
        rss_growth: sent.rss_growth,
        rss_bound: cfg.rss_bound(),
        connections_after: sent.connections_after,
        early_completions: sent.early_completions,
        double_completions: sent.double_completions,
        deferred: sent.deferred,
    }
}

/// The stack sends `payload` to the first connection on [`ZS_PORT`] as
/// zero-copy chains from a few send buffers; the moment a send completes
/// its buffer is overwritten with the forged byte (the application reuses
/// it) and checked to be read by no TX descriptor any more.
pub(super) fn zerosplit_sends(
    lab: &Lab,
    cfg: &SuiteConfig,
    ready: &AtomicBool,
    payload: &[u8],
) -> Sent {
    let mut sc = HostConfig::default();
    sc.nic.max_flows = cfg.table_limit;
    sc.backlog = cfg.backlog;
    sc.nic.tx_strategy = Some(TxStrategy::Chain);
    sc.nic.xsk.multi_buffer = true;
    let mut stack = match Stack::new(&lab.pair.a.ifname, sc) {
        Ok(s) => s,
        Err(e) => {
            ready.store(true, Ordering::Release);
            return Sent {
                error: Some(format!("stack: {e}")),
                ..Sent::default()
            };
        }
    };
    let drops_before = stack.drops();
    let nic_before = stack.nic_counters();
    let rss_before = rss();
    let mut sent = Sent::default();
    let result = send_stream(&mut stack, cfg, ready, payload, &mut sent);
    // Retransmissions and the close settle for a moment.
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        stack.poll();
    }
    sent.error = result.err();
    sent.drops = drops_since(&stack, &drops_before);
    let nic = stack.nic_counters();
    sent.deferred = nic.tx_ack_before_completion - nic_before.tx_ack_before_completion;
    // Where completions leave the datapath, and (in `send_stream`) where
    // the application takes them.
    sent.early_completions += nic.tx_completed_in_flight - nic_before.tx_completed_in_flight;
    sent.rss_growth = rss() - rss_before;
    sent.connections_after = stack.connections();
    sent
}

pub(super) fn send_stream(
    stack: &mut Stack,
    cfg: &SuiteConfig,
    ready: &AtomicBool,
    payload: &[u8],
    sent: &mut Sent,
) -> Result<(), String> {
    stack.listen(ZS_PORT).map_err(|e| format!("listen: {e}"))?;
    let mr = stack
        .register_memory(SEND_BUFS * SEND_BUF, Access::SEND)
        .map_err(|e| format!("register: {e}"))?;
    ready.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(15);
    let conn = loop {
        stack.poll();
        if let Some(c) = stack.accept(ZS_PORT).map_err(|e| format!("accept: {e}"))? {
            break c;
        }
        if Instant::now() > deadline {
            return Err("no connection".into());
        }
    };
    // Per buffer, the work request on it, if one is outstanding.
    let mut outstanding: [Option<u64>; SEND_BUFS] = [None; SEND_BUFS];
    let (mut at, mut next_wr, mut fin) = (0usize, 0u64, false);
    let mut last_activity = Instant::now();
    loop {
        if stack.poll() > 0 {
            last_activity = Instant::now();
        }
        while let Some(c) = stack.poll_completion() {
            if c.conn != conn {
                continue;
            }
            match c.kind {
                CompletionKind::Send => {
                    let slot = (c.wr_id % SEND_BUFS as u64) as usize;
                    if outstanding[slot] != Some(c.wr_id) {
                        sent.double_completions += 1;
                        continue;
                    }
                    outstanding[slot] = None;
                    let off = slot * SEND_BUF;
                    if stack.send_memory_in_flight(mr, off, c.len as usize) != Some(false) {
                        sent.early_completions += 1;
                    }
                    // Reused at once: a byte the kernel reads from it from
                    // now on is a wrong one at the reader.
                    if let Ok(m) = stack.memory_mut(mr) {
                        m[off..off + SEND_BUF].fill(FORGED);
                    }
                }
                CompletionKind::Closed(reason) => {
                    return if fin && reason == CloseReason::Graceful {
                        Ok(())
                    } else {
                        Err(format!("closed: {reason:?}"))
                    };
                }
                _ => {}
            }
        }
        while at < payload.len() {
            let Some(slot) = outstanding.iter().position(Option::is_none) else {
                break;
            };
            let n = SEND_BUF.min(payload.len() - at);
            let off = slot * SEND_BUF;
            let m = stack.memory_mut(mr).map_err(|e| format!("memory: {e}"))?;
            m[off..off + n].copy_from_slice(&payload[at..at + n]);
            let wr = next_wr * SEND_BUFS as u64 + slot as u64;
            stack
                .post_send(conn, mr, off, n, wr)
                .map_err(|e| format!("post_send: {e}"))?;
            outstanding[slot] = Some(wr);
            next_wr += 1;
            at += n;
            last_activity = Instant::now();
        }
        if at == payload.len() && !fin {
            stack.close(conn).map_err(|e| format!("close: {e}"))?;
            fin = true;
        }
        let all_done = outstanding.iter().all(Option::is_none);
        if fin
            && all_done
            && stack
                .state(conn)
                .is_ok_and(|s| matches!(s, State::FinWait2 | State::TimeWait | State::Closed))
        {
            return Ok(());
        }
        if last_activity.elapsed() > cfg.idle_timeout {
            return Err(format!(
                "nothing happened for {:?} ({at} of {} bytes posted)",
                cfg.idle_timeout,
                payload.len()
            ));
        }
    }
}

/// The kernel's reference: a Linux listener on [`LINUX_PORT`] that writes
/// `payload` to its first connection.
pub(super) fn linux_sends(cfg: &SuiteConfig, ready: &AtomicBool, payload: &[u8]) -> Sent {
    let rss_before = rss();
    let result = (|| -> std::io::Result<()> {
        let mut c = linux_accepts_one(ready)?;
        c.set_write_timeout(Some(cfg.idle_timeout))?;
        for chunk in payload.chunks(cfg.chunk) {
            c.write_all(chunk)?;
        }
        c.shutdown(std::net::Shutdown::Write)?;
        c.set_read_timeout(Some(cfg.idle_timeout))?;
        let _ = c.read_to_end(&mut Vec::new());
        Ok(())
    })();
    ready.store(true, Ordering::Release);
    Sent {
        error: result.err().map(|e| e.to_string()),
        rss_growth: rss() - rss_before,
        ..Sent::default()
    }
}

/// In the peer namespace: connects to the sender, reads the stream to its
/// end on a thread of its own, and meanwhile sniffs the connection and
/// injects the kind's frames. Returns the bytes read, the frames injected
/// and the reader's error, if any.
pub(super) fn read_and_inject(
    lab: &Lab,
    cfg: &SuiteConfig,
    kind: &Kind,
    port: u16,
    payload: &[u8],
) -> (Vec<u8>, u64, Option<String>) {
    let to = SocketAddrV4::new(lab.pair.a.addr, port);
    let mut sniffer = match Sniffer::open(&lab.pair.b.ifname, to, lab.pair.b.addr) {
        Ok(s) => s,
        Err(e) => return (Vec::new(), 0, Some(format!("sniffer: {e}"))),
    };
    let tx = match PacketSocket::open_tx(&lab.pair.b.ifname, 8 << 20) {
        Ok(s) => s,
        Err(e) => return (Vec::new(), 0, Some(format!("injector: {e}"))),
    };
    let mut conn = match connect(to, Duration::from_secs(10)) {
        Ok(c) => c,
        Err(e) => return (Vec::new(), 0, Some(format!("connect: {e}"))),
    };
    let from = match conn.local_addr() {
        Ok(std::net::SocketAddr::V4(a)) => a,
        _ => return (Vec::new(), 0, Some("no local IPv4 address".into())),
    };
    thread::scope(|s| {
        // A paced reader: segments wait in its receive queue (acknowledged,
        // their sender's TX completions not necessarily back) while the
        // forged ACKs run ahead.
        let reader = s.spawn(move || {
            let mut got = Vec::with_capacity(payload.len());
            let mut buf = vec![0u8; cfg.chunk];
            let r = conn
                .set_read_timeout(Some(cfg.idle_timeout))
                .and_then(|()| loop {
                    match conn.read(&mut buf) {
                        Ok(0) => break Ok(()),
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                    thread::sleep(cfg.pace);
                });
            (got, r.err().map(|e| e.to_string()))
        });
        let injected = inject(&mut sniffer, &tx, lab, cfg, kind, from, payload);
        let (got, err) = reader
            .join()
            .unwrap_or_else(|_| (Vec::new(), Some("reader panicked".into())));
        (got, injected, err)
    })
}
