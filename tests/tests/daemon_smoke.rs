//! The daemon in-process on a veth, an application attached to it from
//! this process: both directions to and from Linux TCP, byte-exact.

use std::net::{SocketAddrV4, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use zerosplit::config::Config;
use zerosplit::daemon::{Daemon, Queues};
use zerosplit::provider::Provider;
use zerosplit::transfer::{self, TransferOptions};
use zerosplit_lab::{in_netns, NetNs, VethPair};
use zerosplit_tests::{
    heavy, linux_receives, linux_sends, pattern, require_root, wait_for, RaiseOnDrop,
};

#[test]
fn an_attached_application_moves_bytes_both_ways() {
    require_root();
    let _serial = heavy();
    let a = NetNs::new("zsdsa").expect("netns");
    let b = NetNs::new("zsdsb").expect("netns");
    let pair = VethPair::create(&a, &b, 1500).expect("veth");
    let socket = std::env::temp_dir().join(format!("zs-daemon-smoke-{}.sock", std::process::id()));
    let mut config = Config::default();
    config.set_interface(&pair.a.ifname).expect("iface");
    config.daemon.socket = socket.clone();
    config.daemon.max_attachments = 2;
    config.daemon.memory_per_attachment = zerosplit::config::ByteSize(64 << 20);
    let stop = AtomicBool::new(false);
    let ready = AtomicBool::new(false);
    const LEN: usize = 32 << 20;
    let up = pattern(LEN, 3);
    let down = pattern(LEN, 4);
    let board = zerosplit::metrics::Board::new();
    thread::scope(|s| {
        let daemon = s.spawn(|| {
            in_netns(&a, || {
                let hosts = zerosplit::daemon::host_configs(&config).expect("host config");
                let queues = Queues::open(&pair.a.ifname, hosts).expect("stack");
                let listener = zerosplit::ipc::sock::listen(&socket, 0o600, None).expect("socket");
                let mut d = Daemon::new(
                    queues,
                    config.daemon.clone(),
                    listener,
                    config.poll_config(),
                );
                d.set_metrics(Some(std::sync::Arc::clone(&board)));
                ready.store(true, Ordering::Release);
                d.run(&stop);
                d.counters()
            })
        });
        let _stop = RaiseOnDrop(&stop);
        wait_for(&ready, Duration::from_secs(20), "daemon up");
        let linux = in_netns(&b, || TcpListener::bind((pair.b.addr, 5002)).expect("bind"));
        let got_up = s.spawn(move || linux_receives(&linux, LEN));
        let mut app = zerosplit::attach(&socket).expect("attach");
        assert_eq!(app.local_ip(), pair.a.addr);
        let opts = TransferOptions {
            idle_timeout: Duration::from_secs(20),
        };
        transfer::connect(
            &mut app,
            SocketAddrV4::new(pair.b.addr, 5002).into(),
            &mut up.as_slice(),
            &opts,
        )
        .expect("attached → Linux");
        assert!(
            got_up.join().expect("linux") == up,
            "attached → Linux byte-exact"
        );
        let sender = s.spawn(|| {
            in_netns(&b, || {
                linux_sends(SocketAddrV4::new(pair.a.addr, 5003), &down)
            })
        });
        let mut out = Vec::new();
        transfer::listen(&mut app, 5003, &mut out, &opts).expect("Linux → attached");
        sender.join().expect("linux sends");
        assert!(
            out == down,
            "Linux → attached byte-exact ({} bytes)",
            out.len()
        );
        // The operator's view: the daemon publishes this attachment (checked
        // here, with every helper thread joined, so a failure cannot hang).
        let start = std::time::Instant::now();
        let seen = loop {
            let d = board.daemon();
            let first = d.as_ref().and_then(|d| d.attachments.first());
            if let Some(v) = first.filter(|v| v.counters.posts > 0) {
                break v.clone();
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "no attachment published: {d:?}"
            );
            thread::sleep(Duration::from_millis(20));
        };
        assert_eq!((seen.pid, seen.uid), (std::process::id(), 0), "{seen:?}");
        assert!(!board.read().is_empty(), "the queue publishes too");
        drop(app);
        drop(_stop);
        let c = daemon.join().expect("daemon");
        assert_eq!(c.attachments_opened, 1);
        assert_eq!(c.attachments_closed, 1, "{c:?}");
    });
}
