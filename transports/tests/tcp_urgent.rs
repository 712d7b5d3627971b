//! Urgent data (RFC 9293 3.8.5, RFC 6093): the transport is header-only,
//! so it reports where the urgent byte is (a receive-stream offset) and
//! leaves the byte in the stream; the pointer is the offset of the byte
//! after the urgent one, as Linux reads it.

mod tcp_util;

use tcp_util::*;
use transports::segment::{Flags, RxSegment};
use transports::Transport;

/// A data segment with URG and urgent pointer `ptr`.
fn urgent(seq: u32, stream_off: u64, len: u32, ptr: u16) -> RxSegment {
    let mut s = data(seq, 1001, 1000, stream_off, len);
    s.header.flags = s.header.flags | Flags::URG;
    s.header.urgent = ptr;
    s
}

#[test]
fn the_urgent_byte_is_the_one_before_the_pointer() {
    let mut c = established(plain_config(), 1000, 5000, 1 << 20);
    assert_eq!(c.urgent_mark(), None, "no mark before URG");
    // 10 ordinary bytes, then "abc!" with the pointer after '!' (Linux's
    // send(MSG_OOB) of "abc!"): the urgent byte is stream offset 13.
    c.handle_segment(ms(2), &data(5001, 1001, 1000, 0, 10));
    assert_eq!(c.urgent_mark(), None);
    c.handle_segment(ms(3), &urgent(5011, 10, 4, 4));
    assert_eq!(c.urgent_mark(), Some(13));
    // Every byte stays in the stream: the socket layer withholds it.
    assert_eq!(c.received(), 14);
    // A later mark moves it on; a stale one (an old segment again) does not.
    c.handle_segment(ms(4), &urgent(5015, 14, 2, 1));
    assert_eq!(c.urgent_mark(), Some(14));
    c.handle_segment(ms(5), &urgent(5011, 10, 4, 4));
    assert_eq!(c.urgent_mark(), Some(14), "a retransmission's older mark");
}

#[test]
fn a_pointer_ahead_of_the_data_marks_a_byte_still_to_come() {
    let mut c = established(plain_config(), 1000, 5000, 1 << 20);
    // A sender whose urgent byte did not fit in this segment.
    c.handle_segment(ms(2), &urgent(5001, 0, 4, 100));
    assert_eq!(c.urgent_mark(), Some(99));
    assert_eq!(c.received(), 4);
}

#[test]
fn urg_without_a_pointer_or_on_a_refused_segment_marks_nothing() {
    let mut c = established(plain_config(), 1000, 5000, 1 << 20);
    c.handle_segment(ms(2), &urgent(5001, 0, 4, 0));
    assert_eq!(c.urgent_mark(), None, "pointer 0: nothing to mark");
    // Far outside the window: refused, its URG ignored.
    c.handle_segment(ms(3), &urgent(5001 + (1 << 30), 1 << 30, 4, 2));
    assert_eq!(c.urgent_mark(), None, "a refused segment's URG");
}
