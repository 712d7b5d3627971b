//! A controller defined outside the crate plugs into the TCP transport and
//! the simulator through [`Algorithm::Custom`] (the research hook), with no
//! edit to the transports crate: a fixed window of 20 segments, whose
//! goodput on a lossless path must then be the window over the RTT.

use core::time::Duration;

use transports::cc::{
    AckEvent, Algorithm, CcConfig, CongestionEvent, Controller, ControllerMetrics, CustomAlgorithm,
};
use transports::sim::{self, PathConfig};
use transports::tcp::{TcpConfig, TcpConnection};
use transports::Instant;

const SEGMENTS: u64 = 20;

/// Always `SEGMENTS` segments, whatever happens.
#[derive(Debug)]
struct FixedWindow {
    mss: u64,
}

impl Controller for FixedWindow {
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _bytes_in_flight: u64) {}
    fn on_ack(&mut self, _ack: &AckEvent<'_>) {}
    fn on_congestion_event(&mut self, _event: &CongestionEvent) {}
    fn on_mss_update(&mut self, mss: u16) {
        self.mss = u64::from(mss.max(1));
    }
    fn window(&self) -> u64 {
        SEGMENTS * self.mss
    }
    fn minimum_window(&self) -> u64 {
        self.window()
    }
    fn metrics(&self) -> ControllerMetrics {
        ControllerMetrics {
            window: self.window(),
            ..ControllerMetrics::default()
        }
    }
}

static FIXED: CustomAlgorithm = CustomAlgorithm {
    name: "fixed",
    build: |config: &CcConfig| {
        Box::new(FixedWindow {
            mss: u64::from(config.mss.max(1)),
        })
    },
};

#[test]
fn a_custom_controller_builds_and_is_not_a_shipped_name() {
    let algorithm = Algorithm::Custom(&FIXED);
    assert_eq!(algorithm.name(), "fixed");
    assert!(!Algorithm::ALL.contains(&algorithm));
    assert!("fixed".parse::<Algorithm>().is_err());
    let cc = algorithm.build(&CcConfig::default());
    assert_eq!(cc.algorithm(), algorithm);
    assert_eq!(cc.window(), 20 * 1460);
}

#[test]
fn a_custom_controller_runs_a_transfer_through_the_simulator() {
    let cfg = TcpConfig {
        algorithm: Algorithm::Custom(&FIXED),
        ..TcpConfig::default()
    };
    let rtt = Duration::from_millis(1);
    let path = PathConfig::link(1_000_000_000, rtt);
    let client = cfg.clone();
    let report = sim::transfer(
        move |now| {
            TcpConnection::connect(now, client.clone(), 40_000, 5_001, 1).expect("valid TCP config")
        },
        move |now, syn| TcpConnection::accept(now, cfg.clone(), syn, 7).ok(),
        &path,
        5_000_000,
        1,
    )
    .expect("the transfer completes");
    assert_eq!(report.bytes, 5_000_000);
    // A fixed window caps goodput at window / RTT, far below the 1 Gbit/s
    // link (a shipped controller's window would grow past it).
    let cap_bps = (SEGMENTS * 1460 * 8) as f64 / rtt.as_secs_f64();
    let ratio = report.goodput_bps / cap_bps;
    assert!(
        (0.8..=1.01).contains(&ratio),
        "goodput {:.1} Mbit/s is {ratio:.3} of the fixed window's {:.1} Mbit/s",
        report.goodput_bps / 1e6,
        cap_bps / 1e6
    );
    assert_eq!(report.forward_drops(), 0);
}
