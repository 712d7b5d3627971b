//! Flow control: the advertised window is the posted receive space
//! (scaled, RFC 7323 2), window updates, and zero-window probing
//! (RFC 9293 3.8.6.1).

mod tcp_util;

use tcp_util::*;
use transports::segment::{CloseReason, Event, Flags};
use transports::tcp::{State, TcpConfig};
use transports::Transport;

#[test]
fn advertised_window_is_posted_space_scaled() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 1 << 20);
    assert_eq!(c.negotiated().rcv_wscale, 7);
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 1000));
    let out = drain(&mut c, ms(2));
    // 1 MiB - 1000 bytes, >> 7: far more than 64 KiB can be offered.
    assert_eq!(out[0].header.window, (((1u32 << 20) - 1000) >> 7) as u16);
    assert!(u64::from(out[0].header.window) << 7 > 65_535);
    // Posting more grows it; it never exceeds what was posted.
    c.recv_posted(ms(3), 3_000_000);
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1, "window update after a large post");
    assert_eq!(
        out[0].header.window,
        (((1u64 << 20) + 3_000_000 - 1000) >> 7) as u16
    );
}

#[test]
fn window_rounds_down_never_offering_unposted_space() {
    let mut c = established_full(TcpConfig::default(), 1000, 5000, 1000);
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 10));
    let out = drain(&mut c, ms(2));
    // 990 bytes posted above RCV.NXT: 7 units of 128 = 896 offered.
    assert_eq!(out[0].header.window, 7);
}

#[test]
fn window_field_saturates_at_16_bits() {
    let cfg = TcpConfig {
        window_scale: Some(2),
        ..TcpConfig::default()
    };
    let mut c = established_full(cfg, 1000, 5000, 1 << 30);
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 10));
    let out = drain(&mut c, ms(2));
    assert_eq!(out[0].header.window, u16::MAX);
}

#[test]
fn nothing_posted_means_zero_window_and_data_is_not_taken() {
    let mut c = established(plain_config(), 1000, 5000, 0);
    let mut s = data(5001, 1001, 1000, 0, 100);
    s.accepted = 0..0; // the datapath had nowhere to put it
    c.handle_segment(ms(2), &s);
    assert_eq!(c.received(), 0);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.ack, out[0].header.window), (5001, 0));
    // The application posts space: an immediate window update.
    c.recv_posted(ms(3), 4000);
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.window, 4000);
}

#[test]
fn small_posts_do_not_cause_an_ack_storm() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.recv_posted(ms(2), 10);
    assert!(
        drain(&mut c, ms(2)).is_empty(),
        "10 bytes is not worth an ACK"
    );
}

#[test]
fn zero_window_is_probed_with_backoff_until_it_opens() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.handle_segment(ms(2), &seg(Flags::ACK, 5001, 1001, 0));
    c.send_posted(ms(2), 3000);
    assert!(drain(&mut c, ms(2)).is_empty(), "window closed");
    let mut probes = Vec::new();
    for _ in 0..3 {
        let t = c.poll_timeout().expect("persist timer");
        c.handle_timeout(t);
        let out = drain(&mut c, t);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].header.seq, 1000, "probe at SND.UNA - 1");
        assert_eq!(out[0].payload, None);
        assert_eq!(out[0].header.flags, Flags::ACK);
        probes.push(t);
    }
    assert_eq!(c.stats().window_probes, 3);
    let gap1 = probes[1] - probes[0];
    let gap2 = probes[2] - probes[1];
    assert_eq!(gap2, gap1 * 2, "persist backoff doubles");
    // The peer answers a probe with an open window: data flows.
    let t = probes[2] + gap2 / 4;
    c.handle_segment(t, &seg(Flags::ACK, 5001, 1001, 2000));
    let out = drain(&mut c, t);
    assert_eq!(out[0].payload, Some(0..1460));
    // The persist timer gave way to the retransmission timer.
    assert_eq!(c.poll_timeout(), Some(t + c.current_rto()));
}

/// A peer that answers every probe but never opens its window does not
/// hold the connection for ever: after `max_persist_probes` probes the
/// connection gives up, with its own reason.
#[test]
fn a_window_closed_for_ever_gives_up_after_the_allowed_probes() {
    let cfg = TcpConfig {
        max_persist_probes: 4,
        ..plain_config()
    };
    let mut c = established(cfg, 1000, 5000, 10_000);
    c.handle_segment(ms(2), &seg(Flags::ACK, 5001, 1001, 0));
    c.send_posted(ms(2), 3000);
    assert!(drain(&mut c, ms(2)).is_empty(), "window closed");
    let mut probes = 0;
    // Bounded: a persist timer that never gives up fails here.
    for _ in 0..64 {
        let Some(t) = c.poll_timeout() else { break };
        c.handle_timeout(t);
        if c.state() == State::Closed {
            break;
        }
        let out = drain(&mut c, t);
        assert_eq!(out.len(), 1, "one probe per persist timeout");
        probes += 1;
        // The peer answers at once, still with a zero window.
        c.handle_segment(t, &seg(Flags::ACK, 5001, 1001, 0));
        drain(&mut c, t);
    }
    assert_eq!(probes, 4);
    assert_eq!(c.stats().window_probes, 4);
    assert_eq!(c.state(), State::Closed);
    assert!(events(&mut c).contains(&Event::Closed {
        reason: CloseReason::ZeroWindow
    }));
}

#[test]
fn a_probe_is_answered_with_the_current_window() {
    let mut c = established(plain_config(), 1000, 5000, 0);
    c.handle_segment(ms(2), &seg(Flags::ACK, 5000, 1001, 1000));
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.ack, out[0].header.window), (5001, 0));
    c.recv_posted(ms(3), 3000);
    drain(&mut c, ms(3));
    // The next probe, one persist interval later (answers to unacceptable
    // pure ACKs are rate-limited to one per half minimum RTO).
    c.handle_segment(ms(10), &seg(Flags::ACK, 5000, 1001, 1000));
    let out = drain(&mut c, ms(10));
    assert_eq!(out[0].header.window, 3000);
}

#[test]
fn sender_respects_the_peer_window() {
    let mut c = established(plain_config(), 1000, 5000, 10_000);
    c.handle_segment(ms(2), &seg(Flags::ACK, 5001, 1001, 3000));
    c.send_posted(ms(2), 100_000);
    let out = drain(&mut c, ms(2));
    let sent: u64 = out.iter().map(|s| s.payload_len()).sum();
    // 1460 + 1460 fit; the last 80 bytes wait (sender SWS avoidance).
    assert_eq!(sent, 2920);
    c.handle_segment(ms(3), &seg(Flags::ACK, 5001, 1001 + 2920, 3000));
    let out = drain(&mut c, ms(3));
    let sent: u64 = out.iter().map(|s| s.payload_len()).sum();
    assert_eq!(sent, 2920);
}
