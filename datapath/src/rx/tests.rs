//! The receive step on frames built by smoltcp (198.18.0.1:1000 →
//! 198.18.0.2:2000), over a table with and without their flow.

use super::*;
use crate::flow_table::FlowParams;
use crate::mr::{Access, MrTable};
use crate::placement::tests::frame;

const IRS: u32 = 99;

fn key() -> FlowKey {
    FlowKey {
        remote_ip: [198, 18, 0, 1].into(),
        local_ip: [198, 18, 0, 2].into(),
        remote_port: 1000,
        local_port: 2000,
    }
}

/// A table with the frames' flow, 100 bytes of receive stream posted at
/// area 0..100 of a 200-byte area filled with 0xee.
fn table() -> (FlowTable, FlowId, MrTable, Vec<u8>) {
    let mut flows = FlowTable::new(4);
    let id = flows
        .insert(&FlowParams {
            key: key(),
            local_mac: [2, 0, 0, 0, 0, 2],
            remote_mac: [2, 0, 0, 0, 0, 1],
            irs: IRS,
            iss: 0,
            socket: 0,
            max_recv_segments: 4,
            max_send_segments: 4,
            max_placed_ranges: 4,
        })
        .expect("flow");
    let mut mrs = MrTable::new(200, 2);
    let mr = mrs.register(0, 100, Access::RECV).expect("region");
    let flow = flows.get_mut(id).expect("flow state");
    flow.recv.post(&mut mrs, mr, 0, 100, 1).expect("post");
    (flows, id, mrs, vec![0xee; 200])
}

fn step(flows: &mut FlowTable, counters: &mut RxCounters, frame: &[u8], area: &mut [u8]) -> RxStep {
    rx_step(
        flows,
        counters,
        &[frame],
        area,
        ChecksumPolicy::Verify,
        |_| None,
    )
}

#[test]
fn a_segment_of_a_known_flow_is_placed_and_recorded() {
    let (mut flows, id, _mrs, mut area) = table();
    let mut counters = RxCounters::default();
    // Offsets 10..20 first (a gap before), then 0..10.
    let late = frame(IRS + 11, false, &[7; 10]);
    let RxStep::Record(record) = step(&mut flows, &mut counters, &late, &mut area) else {
        panic!("no record");
    };
    assert_eq!(record.flow, Some(id));
    assert_eq!(record.key, key());
    assert_eq!(record.src_mac, [2, 0, 0, 0, 0, 1]);
    assert_eq!(record.segment.accepted, 10..20);
    assert_eq!(record.segment.payload_len, 10);
    assert!(!record.in_order, "a gap lies before it");
    assert_eq!(&area[10..20], &[7; 10]);
    assert_eq!(area[0], 0xee);

    let early = frame(IRS + 1, false, &[5; 10]);
    let RxStep::Record(record) = step(&mut flows, &mut counters, &early, &mut area) else {
        panic!("no record");
    };
    assert_eq!(record.segment.accepted, 0..10);
    assert!(record.in_order, "it closes the gap at the floor");
    assert_eq!(&area[..10], &[5; 10]);
    assert_eq!(
        counters,
        RxCounters::default(),
        "per-flow verdicts stay in the flow"
    );
    assert_eq!(flows.get(id).expect("flow").counters.placed, 2);
}

#[test]
fn a_segment_of_no_flow_is_verified_and_recorded_without_placement() {
    let mut flows = FlowTable::new(4);
    let mut counters = RxCounters::default();
    let mut area = vec![0xee; 200];
    let RxStep::Record(record) = step(
        &mut flows,
        &mut counters,
        &frame(IRS + 1, false, &[5; 10]),
        &mut area,
    ) else {
        panic!("no record");
    };
    assert_eq!((record.flow, record.placement), (None, None));
    assert_eq!(record.segment.accepted, 0..0);
    assert_eq!(counters.unknown_flow, 1);
    assert!(area.iter().all(|&b| b == 0xee), "nothing written");
}

#[test]
fn corrupt_segments_are_dropped_and_counted_where_they_belong() {
    let (mut flows, id, _mrs, mut area) = table();
    let mut counters = RxCounters::default();
    let mut bad = frame(IRS + 1, false, &[5; 10]);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let got = step(&mut flows, &mut counters, &bad, &mut area);
    assert!(
        matches!(got, RxStep::BadChecksum { flow: Some(f), placement: Some(ref p) } if f == id && p.placed.is_empty()),
        "{got:?}"
    );
    assert_eq!(flows.get(id).expect("flow").counters.bad_checksum, 1);

    let mut empty = FlowTable::new(4);
    let got = step(&mut empty, &mut counters, &bad, &mut area);
    assert_eq!(
        got,
        RxStep::BadChecksum {
            flow: None,
            placement: None
        }
    );
    assert_eq!(counters.bad_checksum, 1);

    assert_eq!(
        step(&mut flows, &mut counters, &bad[..10], &mut area),
        RxStep::ParseError
    );
    assert_eq!(counters.truncated_ethernet, 1);
}

#[test]
fn a_flow_another_queue_owns_is_handed_over_unverified() {
    let mut flows = FlowTable::new(4);
    let mut counters = RxCounters::default();
    let mut area = vec![0xee; 200];
    let mut bad = frame(IRS + 1, false, &[5; 10]);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let got = rx_step(
        &mut flows,
        &mut counters,
        &[&bad],
        &mut area,
        ChecksumPolicy::Verify,
        |k| (*k == key()).then_some(3),
    );
    assert_eq!(got, RxStep::Foreign { owner: 3 });
    assert_eq!(counters, RxCounters::default(), "not counted here");
}

#[test]
fn a_segment_at_the_floor_is_in_order_and_one_past_a_gap_is_not() {
    let (mut flows, _id, _mrs, mut area) = table();
    let mut counters = RxCounters::default();
    let in_order = |s: RxStep| match s {
        RxStep::Record(record) => record.in_order,
        other => panic!("no record: {other:?}"),
    };
    let first = frame(IRS + 1, false, &[1; 10]);
    assert!(in_order(step(&mut flows, &mut counters, &first, &mut area)));
    let after_gap = frame(IRS + 31, false, &[2; 10]);
    assert!(!in_order(step(
        &mut flows,
        &mut counters,
        &after_gap,
        &mut area
    )));
    let next = frame(IRS + 11, false, &[3; 10]);
    assert!(in_order(step(&mut flows, &mut counters, &next, &mut area)));
}
