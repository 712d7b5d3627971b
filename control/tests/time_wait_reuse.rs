//! A server that closes first waits in TIME-WAIT while its client, closed
//! at once, may open the same 4-tuple again (a Linux client reuses a
//! source port within the second under connection churn). The new SYN
//! reaches a listener and opens a new connection, as on Linux (RFC 6191,
//! RFC 1122 4.2.2.13); a SYN that cannot be told apart from an old
//! duplicate is answered with an ACK, and once the client's RST ended
//! TIME-WAIT the listener takes the next one. The client is forged
//! ([`Pair::forge_to_b`]): our own stack never reuses a port it holds.

use proto::Flags;
use transports::segment::CloseReason;
use transports::tcp::State;
use zerosplit::provider::{Completion, CompletionKind, ConnId, Provider};
use zerosplit::stack::Stack;
use zerosplit::testing::{Forged, From, Pair, Segment};

const PORT: u16 = 8080;

fn take(stack: &mut Stack) -> Vec<Completion> {
    std::iter::from_fn(|| stack.poll_completion()).collect()
}

fn has(cs: &[Completion], id: ConnId, kind: CompletionKind) -> bool {
    cs.iter().any(|c| c.conn == id && c.kind == kind)
}

/// The old connection, from the client's side: its port, and the sequence
/// number after its FIN (what B acknowledged last).
struct Old {
    b: ConnId,
    port: u16,
    rcv_nxt: u32,
}

/// A connects, B (the server) closes first, A closes in answer: B is in
/// TIME-WAIT, A's connection is gone.
fn b_in_time_wait(pair: &mut Pair) -> Old {
    pair.b.stack.listen(PORT).expect("listen");
    let a = pair
        .a
        .stack
        .connect(pair.b_addr(PORT).into())
        .expect("connect");
    let mut b = None;
    assert!(pair.run_until(50, |p| {
        b = b.or_else(|| p.b.stack.accept(PORT).expect("accept"));
        b.is_some() && p.a.stack.state(a).ok() == Some(State::Established)
    }));
    let b = b.expect("accepted");
    pair.b.stack.close(b).expect("close b");
    let mut a_closed = false;
    assert!(pair.run_until(100, |p| {
        let cs = take(&mut p.a.stack);
        if has(&cs, a, CompletionKind::PeerClosed { len: 0 }) {
            p.a.stack.close(a).expect("close a");
        }
        a_closed |= has(&cs, a, CompletionKind::Closed(CloseReason::Graceful));
        a_closed
    }));
    pair.drive(3);
    assert_eq!(pair.b.stack.state(b).expect("b"), State::TimeWait);
    let fin = pair
        .sent_by(From::A)
        .find(|s| s.has(Flags::FIN))
        .copied()
        .expect("A's FIN");
    Old {
        b,
        port: fin.src_port,
        rcv_nxt: fin.seq.wrapping_add(1),
    }
}

fn syn(old: &Old, seq: u32, options: Vec<u8>) -> Forged {
    Forged {
        src_port: old.port,
        dst_port: PORT,
        seq,
        ack: 0,
        flags: Flags::SYN,
        options,
    }
}

/// The client's RST for what B acknowledged last (its side is CLOSED).
fn reset(old: &Old) -> Forged {
    Forged {
        src_port: old.port,
        dst_port: PORT,
        seq: old.rcv_nxt,
        ack: 0,
        flags: Flags::RST,
        options: Vec::new(),
    }
}

/// B's segments to the old port after the log's first `from` entries.
fn b_answers(pair: &Pair, from: usize, port: u16) -> Vec<Segment> {
    pair.log[from..]
        .iter()
        .filter(|s| s.from == From::B && s.dst_port == port)
        .copied()
        .collect()
}

/// B's SYN|ACK to `seq`, and the new connection B accepts once the
/// forged client completes the handshake.
fn opens_anew(pair: &mut Pair, old: &Old, seq: u32, from: usize) -> ConnId {
    pair.drive(3);
    let answers = b_answers(pair, from, old.port);
    let synack = answers
        .iter()
        .find(|s| s.flags == Flags::SYN | Flags::ACK)
        .copied()
        .unwrap_or_else(|| panic!("no SYN|ACK to the new SYN: {answers:?}"));
    assert_eq!(synack.ack, seq.wrapping_add(1), "{answers:?}");
    assert!(
        !answers.iter().any(|s| s.has(Flags::RST)),
        "the new SYN was refused: {answers:?}"
    );
    pair.forge_to_b(&Forged {
        src_port: old.port,
        dst_port: PORT,
        seq: seq.wrapping_add(1),
        ack: synack.seq.wrapping_add(1),
        flags: Flags::ACK,
        options: Vec::new(),
    });
    let mut new = None;
    assert!(pair.run_until(10, |p| {
        new = new.or_else(|| p.b.stack.accept(PORT).expect("accept"));
        new.is_some()
    }));
    let new = new.expect("accepted");
    assert_ne!(new, old.b);
    assert_eq!(pair.b.stack.state(new).expect("new"), State::Established);
    new
}

/// Without timestamps a SYN beyond what TIME-WAIT acknowledged is a new
/// incarnation (RFC 1122 4.2.2.13): TIME-WAIT ends, the listener answers.
#[test]
fn a_newer_syn_in_time_wait_opens_a_new_connection() {
    let mut pair = Pair::new();
    let old = b_in_time_wait(&mut pair);
    let seq = old.rcv_nxt.wrapping_add(12_000_000);
    let from = pair.log.len();
    pair.forge_to_b(&syn(&old, seq, Vec::new()));
    opens_anew(&mut pair, &old, seq, from);
    assert!(
        pair.b.stack.state(old.b).is_err(),
        "the old connection stays"
    );
    assert_eq!(pair.b.stack.counters().syns_passed_on, 1);
}

/// A SYN at or below what TIME-WAIT acknowledged may be an old duplicate:
/// TIME-WAIT answers it with an ACK (Linux's answer; the client, CLOSED,
/// resets it), the RST ends TIME-WAIT, and the SYN the client sends again
/// reaches the listener, not the connection that just ended.
#[test]
fn an_old_syn_is_acknowledged_and_after_the_clients_reset_the_listener_takes_it() {
    let mut pair = Pair::new();
    let old = b_in_time_wait(&mut pair);
    let seq = old.rcv_nxt.wrapping_sub(5000);
    let from = pair.log.len();
    pair.forge_to_b(&syn(&old, seq, Vec::new()));
    pair.drive(3);
    let answers = b_answers(&pair, from, old.port);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].flags, Flags::ACK);
    assert_eq!(answers[0].ack, old.rcv_nxt);
    assert_eq!(pair.b.stack.state(old.b).expect("b"), State::TimeWait);
    pair.forge_to_b(&reset(&old));
    pair.drive(3);
    assert!(
        pair.b.stack.state(old.b).is_err(),
        "TIME-WAIT outlived the RST"
    );
    let from = pair.log.len();
    pair.forge_to_b(&syn(&old, seq, Vec::new()));
    opens_anew(&mut pair, &old, seq, from);
}

/// The client's RST and its next SYN arrive in one batch (the loop was
/// asleep meanwhile): the RST ends TIME-WAIT, and the SYN, still routed
/// to the connection it ended, goes on to the listener instead of
/// drawing the RST a closed connection answers with.
#[test]
fn a_syn_right_behind_the_reset_that_ended_time_wait_reaches_the_listener() {
    let mut pair = Pair::new();
    let old = b_in_time_wait(&mut pair);
    let seq = old.rcv_nxt.wrapping_sub(5000);
    pair.forge_to_b(&syn(&old, seq, Vec::new()));
    pair.drive(3);
    let from = pair.log.len();
    pair.forge_to_b(&reset(&old));
    pair.forge_to_b(&syn(&old, seq, Vec::new()));
    opens_anew(&mut pair, &old, seq, from);
    assert_eq!(pair.b.stack.counters().syns_passed_on, 1);
}
