//! The RX rate harness end to end, briefly: an AF_XDP sender in the peer
//! namespace, the raw AF_XDP receiver, then the datapath with selective
//! repeat through shared memory. The placed bytes must equal the sender's.

use std::time::Duration;

use bench::rx_rate::{run, RxRateConfig};
use zerosplit_tests::require_root;

#[test]
fn datapath_places_a_blasted_stream_byte_exact_and_reports_rates() {
    require_root();
    let cfg = RxRateConfig {
        duration: Duration::from_millis(800),
        window: 4 << 20,
        ..RxRateConfig::default()
    };
    let r = run(&cfg).expect("rx rate run");
    assert!(
        r.raw.packets > 1000 && r.raw.gbps() > 0.0,
        "raw receive saw traffic: {:?}",
        r.raw
    );
    assert!(
        r.datapath.packets > 1000,
        "datapath saw traffic: {:?}",
        r.datapath
    );
    assert!(
        r.completed >= cfg.window as u64,
        "more than a window completed in order: {}",
        r.completed
    );
    assert!(r.verified, "receive memory equals the sender's pattern");
    let placed = r
        .flow_counters
        .iter()
        .find(|(n, _)| *n == "placed")
        .map_or(0, |(_, v)| *v);
    assert!(placed > 0, "placement counted: {:?}", r.flow_counters);
    assert!(
        r.sent >= r.completed / (cfg.mtu as u64 - 40),
        "sender counted its packets"
    );
}
