//! The placement rule on byte ranges alone.

use super::*;

fn rx(placed: &PlacedSet, floor: u64, posted_end: u64) -> Receiver<'_> {
    Receiver {
        floor,
        posted_end,
        placed,
    }
}

#[test]
fn stream_offsets_wrap_around_the_floor() {
    let irs = u32::MAX - 10;
    assert_eq!(stream_offset(irs, 0, u32::MAX - 9), 0);
    assert_eq!(stream_offset(irs, 0, 5), 15);
    assert_eq!(stream_offset(irs, 0, u32::MAX - 20), -11);
    let deep = 5 << 32;
    assert_eq!(
        stream_offset(irs, deep, (u32::MAX - 9).wrapping_add(100)),
        deep as i64 + 100
    );
    assert_eq!(
        stream_offset(irs, deep, (u32::MAX - 9).wrapping_sub(100)),
        deep as i64 - 100
    );
}

#[test]
fn refusals_in_order_of_precedence() {
    let ack = Flags::ACK;
    assert_eq!(refusal(ack, true), None);
    assert_eq!(
        refusal(Flags::SYN | ack, false),
        Some(Verdict::SynPayloadIgnored)
    );
    assert_eq!(refusal(ack, false), Some(Verdict::Unsynchronized));
    assert_eq!(refusal(Flags::PSH, true), Some(Verdict::Unacceptable));
    assert_eq!(refusal(Flags::RST | ack, true), Some(Verdict::Unacceptable));
}

#[test]
fn clips_to_floor_and_posted_end() {
    let set = PlacedSet::new(4);
    let d = decide(rx(&set, 1000, 3000), 1000..2000, None);
    assert_eq!((d.gap, d.verdict), (1000..2000, Verdict::Placed));
    let d = decide(rx(&set, 1000, 3000), 500..1500, None);
    assert_eq!((d.lo, d.hi), (1000, 1500));
    assert_eq!((d.gap, d.verdict), (1000..1500, Verdict::Trimmed));
    let d = decide(rx(&set, 1000, 3000), 2500..3500, None);
    assert_eq!((d.gap, d.verdict), (2500..3000, Verdict::Trimmed));
    let d = decide(rx(&set, 1000, 3000), 3000..3100, None);
    assert_eq!((d.lo, d.hi), (3000, 3000));
    assert_eq!((d.gap, d.verdict), (0..0, Verdict::BeyondPosted));
    let d = decide(rx(&set, 1000, 3000), -50..1000, None);
    assert_eq!((d.lo, d.hi), (1000, 1000));
    assert_eq!((d.gap, d.verdict), (0..0, Verdict::Duplicate));
    let d = decide(rx(&set, 1000, 3000), 1200..1200, None);
    assert_eq!((d.gap, d.verdict), (0..0, Verdict::NoPayload));
}

#[test]
fn writes_only_the_first_gap_and_never_placed_bytes() {
    let mut set = PlacedSet::new(8);
    assert!(set.insert(100..200, 0));
    assert!(set.insert(300..400, 0));
    // Covers 0..500: three gaps; only the first is written.
    let d = decide(rx(&set, 0, 1000), 0..500, None);
    assert_eq!((d.gap.clone(), d.verdict), (0..100, Verdict::Placed));
    assert!(d.writes());
    let d = decide(rx(&set, 0, 1000), 150..500, None);
    assert_eq!(d.gap, 200..300);
    let d = decide(rx(&set, 0, 1000), 120..180, None);
    assert_eq!((d.gap.clone(), d.verdict), (0..0, Verdict::Duplicate));
    assert!(!d.writes());
}

#[test]
fn refused_and_full_write_nothing() {
    let mut set = PlacedSet::new(2);
    let d = decide(rx(&set, 0, 1000), 0..100, Some(Verdict::Unacceptable));
    assert_eq!((d.gap, d.verdict), (0..0, Verdict::Unacceptable));
    assert!(set.insert(500..600, 0));
    // One slot is kept for the floor: a second hole is refused, the
    // in-order segment is not.
    let d = decide(rx(&set, 0, 1000), 700..800, None);
    assert_eq!((d.gap, d.verdict), (0..0, Verdict::PlacedSetFull));
    let d = decide(rx(&set, 0, 1000), 0..100, None);
    assert_eq!((d.gap, d.verdict), (0..100, Verdict::Placed));
}
