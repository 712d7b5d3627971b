//! `threads.poll`: an idle stack in adaptive and sleep mode sleeps in
//! `poll(2)` (under 2 % of a core, its sleeps counted) while spin keeps a
//! core busy; in every mode a zerosplit ↔ zerosplit transfer completes
//! byte-exact and a ping-pong with idle gaps round-trips (a sleeping loop
//! is woken by the packet, not by its timeout alone: the ping-pong raises
//! every loop's sleep cap to [`WAKE_CAP`] and requires each round trip
//! within [`WAKE_BOUND`], far below it).

use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bench::suite::procfs::process_cpu_seconds;
use zerosplit::config::{ListenConfig, Service};
use zerosplit::engine::tcp::TcpCounters;
use zerosplit::host::{HostConfig, Threads};
use zerosplit::idle::{PollConfig, PollMode};
use zerosplit::provider::Provider;
use zerosplit::service::serve;
use zerosplit::stack::Stack;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{connect_retrying, heavy, pattern, require_root, wait_for, RaiseOnDrop};

const DEDICATED: Threads = Threads::Dedicated {
    datapath_core: None,
    transport_core: None,
    queue: 4096,
};

/// How long the idle stack sits.
const IDLE: Duration = Duration::from_secs(2);

/// Most CPU an idle stack that sleeps may use, as a fraction of a core.
const IDLE_GOAL: f64 = 0.02;

struct Lab {
    pair: VethPair,
    b: NetNs,
    a: NetNs,
}

fn lab() -> Lab {
    require_root();
    let a = NetNs::new("zpa").expect("netns");
    let b = NetNs::new("zpb").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    Lab { pair, b, a }
}

/// The ping-pong's cap on one sleep of every loop: far above the default
/// caps (10 ms, 100 ms for the transport thread), so a loop that sleeps
/// through the packet's arrival holds the round trip for up to this long
/// (or until a transport timer is due).
const WAKE_CAP: Duration = Duration::from_secs(3);

/// Longest round trip the ping-pong accepts: a woken loop answers in
/// microseconds (milliseconds on a loaded 2-core machine).
const WAKE_BOUND: Duration = Duration::from_millis(150);

fn config(mode: PollMode, threads: Threads) -> HostConfig {
    config_capped(mode, threads, None)
}

fn config_capped(mode: PollMode, threads: Threads, max_sleep: Option<Duration>) -> HostConfig {
    let mut c = HostConfig {
        threads,
        poll: PollConfig {
            mode,
            max_sleep,
            ..PollConfig::default()
        },
        ..HostConfig::default()
    };
    c.nic.xsk.umem.mr_bytes = 40 << 20;
    c
}

/// A stack listening with no traffic, polled by its application for
/// [`IDLE`]: the process's CPU time ÷ wall time, and the stack's counters.
fn idle_cpu(mode: PollMode, threads: Threads) -> (f64, TcpCounters) {
    let lab = lab();
    in_netns(&lab.a, || {
        let mut stack = Stack::new(&lab.pair.a.ifname, config(mode, threads)).expect("stack");
        stack.listen(5100).expect("listen");
        let (t0, cpu0) = (Instant::now(), process_cpu_seconds().expect("cpu"));
        let mut longest = Duration::ZERO;
        while t0.elapsed() < IDLE {
            let p = Instant::now();
            stack.poll();
            longest = longest.max(p.elapsed());
            assert!(stack.accept(5100).expect("accept").is_none());
        }
        let cpu = process_cpu_seconds().expect("cpu") - cpu0;
        let fraction = cpu / t0.elapsed().as_secs_f64();
        // A blocking poll hands control back within its bound (5 ms, plus
        // scheduling on a busy machine).
        assert!(
            longest < Duration::from_millis(200),
            "{mode}: one poll() blocked for {longest:?}"
        );
        (fraction, stack.counters())
    })
}

#[test]
fn an_idle_stack_sleeps_in_adaptive_and_sleep_mode_and_spins_in_spin_mode() {
    let _serial = heavy();
    for threads in [Threads::RunToCompletion, DEDICATED] {
        for mode in [PollMode::Adaptive, PollMode::Sleep] {
            let (fraction, c) = idle_cpu(mode, threads);
            eprintln!(
                "{mode} {threads:?}: idle CPU {:.2} % of a core, {c:?}",
                fraction * 100.0
            );
            assert!(
                fraction < IDLE_GOAL,
                "{mode} {threads:?}: an idle stack used {:.2} % of a core",
                fraction * 100.0
            );
            assert!(c.loop_idle.sleeps > 0, "{mode}: the loop never slept");
            assert!(
                c.loop_idle.slept_ns > IDLE.as_nanos() as u64 / 2,
                "{mode}: slept only {} ns of {IDLE:?}",
                c.loop_idle.slept_ns
            );
            if threads != Threads::RunToCompletion {
                assert!(
                    c.transport_idle.sleeps > 0,
                    "{mode}: the transport thread never slept"
                );
            }
        }
    }
    // The measurement can tell: a spinning stack stays on the CPU (it
    // yields to other runnable threads, so on a loaded machine it gets
    // less than a whole core, but more than a sleeping one may).
    let (spin, c) = idle_cpu(PollMode::Spin, Threads::RunToCompletion);
    eprintln!("spin: idle CPU {:.2} % of a core", spin * 100.0);
    assert!(
        spin > IDLE_GOAL,
        "spin used only {:.2} % of a core",
        spin * 100.0
    );
    assert_eq!(c.loop_idle.sleeps, 0, "spin never sleeps");
}

fn zerosplit_to_zerosplit(mode: PollMode, threads: Threads) {
    const LEN: usize = 32 << 20;
    let _serial = heavy();
    let lab = lab();
    let payload = pattern(LEN, 7);
    let ready = AtomicBool::new(false);
    let opts = TransferOptions {
        idle_timeout: Duration::from_secs(20),
    };
    let received = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let mut stack =
                    Stack::new(&lab.pair.a.ifname, config(mode, threads)).expect("stack a");
                let mut out = Vec::with_capacity(LEN);
                ready.store(true, Ordering::Release);
                transfer::listen(&mut stack, 5101, &mut out, &opts).expect("zerosplit receives");
                out
            })
        });
        wait_for(&ready, Duration::from_secs(20), "zerosplit listening");
        thread::sleep(Duration::from_millis(200));
        in_netns(&lab.b, || {
            let mut stack = Stack::new(&lab.pair.b.ifname, config(mode, threads)).expect("stack b");
            transfer::connect(
                &mut stack,
                SocketAddrV4::new(lab.pair.a.addr, 5101).into(),
                &mut payload.as_slice(),
                &opts,
            )
            .expect("zerosplit sends");
        });
        server.join().expect("server")
    });
    assert!(
        received == payload,
        "{mode} {threads:?}: {} of {LEN} bytes, byte-exact",
        received.len()
    );
}

#[test]
fn a_transfer_completes_in_spin_mode() {
    zerosplit_to_zerosplit(PollMode::Spin, Threads::RunToCompletion);
}

#[test]
fn a_transfer_completes_in_adaptive_mode() {
    zerosplit_to_zerosplit(PollMode::Adaptive, Threads::RunToCompletion);
    zerosplit_to_zerosplit(PollMode::Adaptive, DEDICATED);
}

#[test]
fn a_transfer_completes_in_sleep_mode() {
    zerosplit_to_zerosplit(PollMode::Sleep, Threads::RunToCompletion);
    zerosplit_to_zerosplit(PollMode::Sleep, DEDICATED);
}

/// A Linux client ping-pongs 64-byte messages with the zerosplit echo
/// service in `mode`, pausing now and then so the service falls asleep;
/// every round comes back within [`WAKE_BOUND`] although the service's
/// loops may sleep for [`WAKE_CAP`]: the packet woke them.
fn ping_pong(mode: PollMode, threads: Threads) {
    const ROUNDS: usize = 200;
    let _serial = heavy();
    let lab = lab();
    let stop = AtomicBool::new(false);
    let up = AtomicBool::new(false);
    let listeners = [ListenConfig {
        address: std::net::Ipv4Addr::UNSPECIFIED,
        port: 7,
        service: Service::Echo,
    }];
    let (slowest, counters) = thread::scope(|s| {
        let server = s.spawn(|| {
            in_netns(&lab.a, || {
                let config = config_capped(mode, threads, Some(WAKE_CAP));
                let mut stack = Stack::new(&lab.pair.a.ifname, config).expect("stack");
                up.store(true, Ordering::Release);
                serve(&mut stack, &listeners, &stop).expect("serve");
                stack.counters()
            })
        });
        let stop_service = RaiseOnDrop(&stop);
        wait_for(&up, Duration::from_secs(20), "zerosplit echo service up");
        let addr = SocketAddrV4::new(lab.pair.a.addr, 7);
        let slowest = in_netns(&lab.b, || {
            let mut c = connect_retrying(addr, Duration::from_secs(10));
            c.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            c.set_nodelay(true).expect("nodelay");
            let mut slowest = Duration::ZERO;
            let mut back = [0u8; 64];
            for round in 0..ROUNDS {
                if round % 20 == 0 {
                    // Long enough for adaptive mode to go to sleep.
                    thread::sleep(Duration::from_millis(10));
                }
                let msg = pattern(64, round as u64);
                let t = Instant::now();
                c.write_all(&msg).expect("send");
                c.read_exact(&mut back).expect("echo back");
                let took = t.elapsed();
                slowest = slowest.max(took);
                assert_eq!(&back[..], &msg[..], "{mode}: round {round} came back wrong");
                // Fail at the first slow round (not after 200 of them).
                assert!(
                    took < WAKE_BOUND,
                    "{mode} {threads:?}: round {round} took {took:?} (sleep cap {WAKE_CAP:?}): \
                     the service was not woken by the packet"
                );
            }
            slowest
        });
        drop(stop_service);
        (slowest, server.join().expect("server"))
    });
    eprintln!("{mode} {threads:?}: slowest round trip {slowest:?}, {counters:?}");
    if mode != PollMode::Spin {
        assert!(
            counters.loop_idle.sleeps > 0,
            "{mode}: the service never slept"
        );
    }
}

#[test]
fn ping_pong_works_in_every_mode() {
    for mode in PollMode::ALL {
        ping_pong(mode, Threads::RunToCompletion);
    }
    ping_pong(PollMode::Sleep, DEDICATED);
}
