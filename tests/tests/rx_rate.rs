//! The RX rate harness end to end, briefly: an AF_XDP sender in the peer
//! namespace, the raw AF_XDP receiver, then the datapath with selective
//! repeat through shared memory. The placed bytes must equal the sender's.

use std::time::Duration;

use bench::rx_rate::{run, RxRateConfig, RxRateReport};
use zerosplit_tests::require_root;

#[test]
fn datapath_places_a_blasted_stream_byte_exact_and_reports_rates() {
    require_root();
    let cfg = RxRateConfig {
        duration: Duration::from_millis(800),
        window: 4 << 20,
        ..RxRateConfig::default()
    };
    // The same run's raw AF_XDP receiver is the reference: both phases are
    // limited by the same sender, and the datapath measured 0.87-1.18 times
    // the raw rate on 2 cores beside a full CI run, once 0.49 (the other
    // core busy through one phase only). Placement that costs per byte (a
    // copy, a scan) or stalls the window falls below half in every run; a
    // run that does so once is measured again, at most `RUNS` times.
    let mut ratios = Vec::new();
    for _ in 0..RUNS {
        let r = run(&cfg).expect("rx rate run");
        eprintln!(
            "raw {:.2} Gbit/s, datapath {:.2} Gbit/s (goodput {:.2})",
            r.raw.gbps(),
            r.datapath.gbps(),
            r.goodput_gbps
        );
        check_placement(&cfg, &r);
        ratios.push(r.datapath.gbps() / r.raw.gbps());
        if ratios[ratios.len() - 1] >= DATAPATH_VS_RAW {
            return;
        }
    }
    panic!(
        "the datapath's rate stayed below {:.0} % of the raw receiver's in {RUNS} runs: {ratios:.2?}",
        100.0 * DATAPATH_VS_RAW
    );
}

/// What every run must show whatever its rate: traffic in both phases, a
/// window completed in order, receive memory equal to the sender's bytes.
fn check_placement(cfg: &RxRateConfig, r: &RxRateReport) {
    assert!(r.raw.packets > 1000, "raw receive saw traffic: {:?}", r.raw);
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

/// The datapath's share of the raw receiver's rate it must keep.
const DATAPATH_VS_RAW: f64 = 0.5;

/// Runs measured before the rate check fails.
const RUNS: usize = 3;
