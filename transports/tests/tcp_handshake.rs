//! Opening handshakes (RFC 9293 3.5) at segment level, including the exact
//! options a Linux SYN carries.

mod tcp_util;

use std::time::Duration;

use tcp_util::*;
use transports::segment::{CloseReason, Flags};
use transports::tcp::{AcceptError, State, TcpConfig, TcpConnection};
use transports::{Event, Transport};

/// Linux's SYN options: MSS 1460, SACK_PERM, TS, NOP, WS 7.
fn linux_syn_options(tsval: u32) -> Vec<u8> {
    let mut v = vec![0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a];
    v.extend_from_slice(&tsval.to_be_bytes());
    v.extend_from_slice(&[0, 0, 0, 0]);
    v.extend_from_slice(&[0x01, 0x03, 0x03, 0x07]);
    v
}

#[test]
fn active_open_sends_linux_like_syn_and_completes() {
    let mut c = TcpConnection::connect(ms(0), TcpConfig::default(), LOCAL, REMOTE, 1000).unwrap();
    c.recv_posted(ms(0), 1 << 20);
    assert_eq!(c.state(), State::SynSent);
    let out = drain(&mut c, ms(0));
    assert_eq!(out.len(), 1);
    let syn = &out[0];
    assert_eq!(syn.header.flags, Flags::SYN);
    assert_eq!(syn.header.seq, 1000);
    assert_eq!(
        syn.header.window, 65535,
        "SYN window is unscaled and capped"
    );
    let o = syn.header.options.as_slice();
    assert_eq!(o.len(), 20);
    assert_eq!(&o[..6], &[0x02, 0x04, 0x05, 0xb4, 0x04, 0x02]);
    assert_eq!(&o[6..8], &[0x08, 0x0a]);
    assert_eq!(&o[12..16], &[0, 0, 0, 0], "TSecr is zero on a SYN");
    assert_eq!(&o[16..], &[0x01, 0x03, 0x03, 0x07]);
    let tsval = u32::from_be_bytes([o[8], o[9], o[10], o[11]]);

    // SYN-ACK with MSS 1400, SACK_PERM, TS, WS 9.
    let mut opts = vec![0x02, 0x04, 0x05, 0x78, 0x04, 0x02, 0x08, 0x0a];
    opts.extend_from_slice(&777u32.to_be_bytes());
    opts.extend_from_slice(&tsval.to_be_bytes());
    opts.extend_from_slice(&[0x01, 0x03, 0x03, 0x09]);
    let synack = with_opts(seg(Flags::SYN | Flags::ACK, 5000, 1001, 100), &opts);
    c.handle_segment(ms(2), &synack);
    assert_eq!(c.state(), State::Established);
    assert_eq!(events(&mut c), vec![Event::Connected]);
    assert_eq!((c.irs(), c.rcv_nxt(), c.snd_una()), (5000, 5001, 1001));
    let n = c.negotiated();
    assert_eq!((n.peer_mss, n.snd_wscale, n.rcv_wscale), (1400, 9, 7));
    assert!(n.sack && n.timestamps);
    // The SYN-ACK's window is not scaled (RFC 7323 2.2).
    assert_eq!(c.send_window(), 100);
    // RTT from the echoed timestamp: 2 ms.
    assert_eq!(c.rtt().smoothed(), Some(Duration::from_millis(2)));
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    let ack = &out[0];
    assert_eq!(ack.header.flags, Flags::ACK);
    assert_eq!((ack.header.seq, ack.header.ack), (1001, 5001));
    assert_eq!(ack.header.window, ((1u32 << 20) >> 7) as u16);
    assert_eq!(ts_of(ack).map(|t| t.1), Some(777));
}

#[test]
fn passive_open_from_a_linux_syn() {
    let syn = with_opts(
        seg(Flags::SYN, 7_000_000, 0, 64240),
        &linux_syn_options(0xdead),
    );
    let mut c = TcpConnection::accept(ms(0), TcpConfig::default(), &syn, 42).unwrap();
    c.recv_posted(ms(0), 256 * 1024);
    assert_eq!(c.state(), State::SynReceived);
    let out = drain(&mut c, ms(0));
    assert_eq!(out.len(), 1);
    let sa = &out[0];
    assert_eq!(sa.header.flags, Flags::SYN | Flags::ACK);
    assert_eq!((sa.header.seq, sa.header.ack), (42, 7_000_001));
    assert_eq!((sa.header.src_port, sa.header.dst_port), (LOCAL, REMOTE));
    assert_eq!(sa.header.window, 65535);
    let o = sa.header.options.as_slice();
    assert_eq!(&o[..6], &[0x02, 0x04, 0x05, 0xb4, 0x04, 0x02]);
    assert_eq!(ts_of(sa).map(|t| t.1), Some(0xdead), "TSecr echoes the SYN");
    assert_eq!(&o[16..], &[0x01, 0x03, 0x03, 0x07]);
    let (my_ts, _) = ts_of(sa).unwrap();

    let ack = with_opts(seg(Flags::ACK, 7_000_001, 43, 502), &ts_opt(0xdeae, my_ts));
    c.handle_segment(ms(1), &ack);
    assert_eq!(c.state(), State::Established);
    assert_eq!(events(&mut c), vec![Event::Connected]);
    // Window scaling is in force after the handshake: 502 << 7.
    assert_eq!(c.send_window(), 502 << 7);
    assert_eq!(c.negotiated().peer_mss, 1460);
    // Every later segment carries 12 bytes of timestamps: 1448 of payload.
    c.send_posted(ms(1), 5000);
    let out = drain(&mut c, ms(1));
    assert!(!out.is_empty());
    assert_eq!(out[0].payload, Some(0..1448));
}

#[test]
fn syn_ack_omits_options_the_syn_lacked() {
    let syn = with_opts(seg(Flags::SYN, 100, 0, 1000), &[0x02, 0x04, 0x02, 0x18]);
    let mut c = TcpConnection::accept(ms(0), TcpConfig::default(), &syn, 9).unwrap();
    let out = drain(&mut c, ms(0));
    // MSS only (RFC 7323 2.2, 3.2; RFC 2018 2).
    assert_eq!(out[0].header.options.as_slice(), &[0x02, 0x04, 0x05, 0xb4]);
    let n = c.negotiated();
    assert!(!n.sack && !n.timestamps);
    assert_eq!((n.snd_wscale, n.rcv_wscale, n.peer_mss), (0, 0, 536));
}

#[test]
fn data_on_a_syn_is_not_accepted() {
    let mut syn = seg(Flags::SYN, 100, 0, 1000);
    syn.payload_len = 50;
    syn.accepted = 0..50;
    let mut c = TcpConnection::accept(ms(0), plain_config(), &syn, 9).unwrap();
    c.recv_posted(ms(0), 1000);
    let out = drain(&mut c, ms(0));
    assert_eq!(out[0].header.ack, 101, "only the SYN is acknowledged");
    c.handle_segment(ms(1), &seg(Flags::ACK, 101, 10, 1000));
    assert_eq!(c.received(), 0);
}

#[test]
fn accept_refuses_what_is_not_a_bare_syn() {
    for flags in [
        Flags::ACK,
        Flags::SYN | Flags::ACK,
        Flags::SYN | Flags::RST,
        Flags::FIN,
    ] {
        let r = TcpConnection::accept(ms(0), TcpConfig::default(), &seg(flags, 1, 0, 0), 9);
        assert!(
            matches!(
                r,
                Err(AcceptError::NotSyn {
                    src_port: REMOTE,
                    ..
                })
            ),
            "{flags:?}"
        );
    }
    let bad = with_opts(seg(Flags::SYN, 1, 0, 0), &[0x02, 0x03, 0x05]);
    let r = TcpConnection::accept(ms(0), TcpConfig::default(), &bad, 9);
    assert!(matches!(r, Err(AcceptError::BadOptions { .. })));
    let cfg = TcpConfig {
        window_scale: Some(15),
        ..TcpConfig::default()
    };
    let r = TcpConnection::accept(ms(0), cfg, &seg(Flags::SYN, 1, 0, 0), 9);
    assert!(matches!(r, Err(AcceptError::Config(_))));
}

#[test]
fn simultaneous_open() {
    let cfg = TcpConfig::default();
    let mut a = TcpConnection::connect(ms(0), cfg.clone(), 1, 2, 100).unwrap();
    let mut b = TcpConnection::connect(ms(0), cfg, 2, 1, 900).unwrap();
    a.recv_posted(ms(0), 10_000);
    b.recv_posted(ms(0), 10_000);
    let sa = drain(&mut a, ms(0)).remove(0);
    let sb = drain(&mut b, ms(0)).remove(0);
    a.handle_segment(ms(1), &to_in(&sb));
    b.handle_segment(ms(1), &to_in(&sa));
    assert_eq!(
        (a.state(), b.state()),
        (State::SynReceived, State::SynReceived)
    );
    let sa2 = drain(&mut a, ms(1)).remove(0);
    let sb2 = drain(&mut b, ms(1)).remove(0);
    // Each answers with SYN-ACK from the same ISS.
    assert_eq!(sa2.header.flags, Flags::SYN | Flags::ACK);
    assert_eq!((sa2.header.seq, sa2.header.ack), (100, 901));
    assert_eq!((sb2.header.seq, sb2.header.ack), (900, 101));
    a.handle_segment(ms(2), &to_in(&sb2));
    b.handle_segment(ms(2), &to_in(&sa2));
    assert_eq!(
        (a.state(), b.state()),
        (State::Established, State::Established)
    );
    assert_eq!(events(&mut a), vec![Event::Connected]);
    assert_eq!(events(&mut b), vec![Event::Connected]);
    assert!(a.negotiated().timestamps && b.negotiated().sack);
}

#[test]
fn syn_is_retransmitted_with_backoff_then_gives_up() {
    let cfg = TcpConfig {
        initial_rto: Duration::from_millis(100),
        max_retransmissions: 3,
        ..TcpConfig::default()
    };
    let mut c = TcpConnection::connect(ms(0), cfg, LOCAL, REMOTE, 1).unwrap();
    assert_eq!(drain(&mut c, ms(0)).len(), 1);
    let mut expect = 100;
    let mut now = 0;
    for _ in 0..3 {
        let t = c.poll_timeout().expect("RTO armed");
        assert_eq!(t, ms(now + expect));
        now += expect;
        c.handle_timeout(t);
        let out = drain(&mut c, t);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].header.flags, Flags::SYN);
        assert_eq!(out[0].header.seq, 1);
        expect *= 2;
    }
    let t = c.poll_timeout().unwrap();
    assert_eq!(t, ms(now + expect));
    c.handle_timeout(t);
    assert_eq!(c.state(), State::Closed);
    assert_eq!(
        events(&mut c),
        vec![Event::Closed {
            reason: CloseReason::TimedOut
        }]
    );
    assert!(drain(&mut c, t).is_empty());
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn retransmitted_syn_gives_no_karn_sample() {
    let cfg = TcpConfig {
        timestamps: false,
        initial_rto: Duration::from_millis(100),
        ..TcpConfig::default()
    };
    let mut c = TcpConnection::connect(ms(0), cfg, LOCAL, REMOTE, 1).unwrap();
    drain(&mut c, ms(0));
    c.handle_timeout(ms(100));
    drain(&mut c, ms(100));
    c.handle_segment(ms(150), &seg(Flags::SYN | Flags::ACK, 5, 2, 1000));
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.rtt().smoothed(), None, "ambiguous sample skipped");
}

#[test]
fn syn_received_resends_syn_ack_on_a_retransmitted_syn() {
    let syn = seg(Flags::SYN, 300, 0, 1000);
    let mut c = TcpConnection::accept(ms(0), plain_config(), &syn, 9).unwrap();
    assert_eq!(drain(&mut c, ms(0)).len(), 1);
    c.handle_segment(ms(5), &syn);
    let out = drain(&mut c, ms(5));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.flags, Flags::SYN | Flags::ACK);
    assert_eq!(c.state(), State::SynReceived);
}

#[test]
fn syn_received_answers_a_bad_ack_with_rst() {
    let syn = seg(Flags::SYN, 300, 0, 1000);
    let mut c = TcpConnection::accept(ms(0), plain_config(), &syn, 9).unwrap();
    drain(&mut c, ms(0));
    c.handle_segment(ms(1), &seg(Flags::ACK, 301, 5555, 1000));
    let out = drain(&mut c, ms(1));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.flags, Flags::RST);
    assert_eq!(out[0].header.seq, 5555);
    assert_eq!(c.state(), State::SynReceived);
    assert_eq!(c.stats().drops.bad_ack, 1);
}
