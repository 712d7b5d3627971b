//! The project's performance targets, judged on one run's figures (all
//! ratios within the run): see the README's Measurements section.

use super::report::{Ceiling, Row, Target};
use super::scenario::{Scenario, ThreadMode};

fn find(rows: &[Row], sc: Scenario, mtu: u32, threads: Option<ThreadMode>) -> Option<&Row> {
    rows.iter()
        .find(|r| r.scenario == sc && r.mtu == mtu && r.threads == threads)
}

fn target(name: String, value: Option<f64>, goal: f64, at_most: bool) -> Target {
    let met = value.map(|v| if at_most { v <= goal } else { v >= goal });
    Target {
        name,
        value,
        goal,
        at_most,
        met,
    }
}

/// Judges the targets for each MTU present, with zerosplit in
/// run-to-completion mode (the rows the targets were written for).
pub fn judge(rows: &[Row], ceilings: &[Ceiling]) -> Vec<Target> {
    let rtc = Some(ThreadMode::Rtc);
    let mut out = Vec::new();
    let mut mtus: Vec<u32> = rows.iter().map(|r| r.mtu).collect();
    mtus.sort_unstable();
    mtus.dedup();
    let good = |r: Option<&Row>| r.and_then(|r| r.goodput_gbps.map(|g| g.median));
    for mtu in mtus {
        let linux = find(rows, Scenario::LinuxLinux, mtu, None);
        let tcp = find(rows, Scenario::ZsZsTcp, mtu, rtc);
        let goal = if mtu >= 9000 { 2.0 } else { 1.5 };
        if tcp.is_some() || linux.is_some() {
            out.push(target(
                format!("zs-zs-tcp goodput ÷ linux-linux, MTU {mtu}"),
                tcp.and_then(|t| t.ratios.vs_linux),
                goal,
                false,
            ));
            let raw = ceilings
                .iter()
                .find(|c| c.mtu == mtu)
                .and_then(|c| c.raw_payload_gbps);
            out.push(target(
                format!("zs-zs-tcp goodput ÷ raw AF_XDP ceiling, MTU {mtu}"),
                good(tcp).zip(raw).map(|(g, r)| g / r),
                0.8,
                false,
            ));
        }
        let lz = find(rows, Scenario::LinuxZs, mtu, rtc);
        if lz.is_some() {
            let rcv = |r: Option<&Row>| r.and_then(|r| r.cpu_s_per_gb.receiver.map(|s| s.median));
            out.push(target(
                format!("linux-zs receiver CPU/byte ÷ linux-linux's, MTU {mtu}"),
                rcv(lz).zip(rcv(linux)).map(|(a, b)| a / b),
                0.5,
                true,
            ));
        }
        let smol = find(rows, Scenario::ZsZsSmoltcp, mtu, rtc);
        if smol.is_some() {
            out.push(target(
                format!("zs-zs-tcp goodput ÷ zs-zs-smoltcp, MTU {mtu}"),
                good(tcp).zip(good(smol)).map(|(a, b)| a / b),
                2.0,
                false,
            ));
        }
        let lat = |r: Option<&Row>, f: fn(&super::report::Latency) -> Option<f64>| {
            r.and_then(|r| r.latency.as_ref()).and_then(f)
        };
        if tcp.is_some() {
            let p50 = |l: &super::report::Latency| l.p50_us.map(|s| s.median);
            let p99 = |l: &super::report::Latency| l.p99_us.map(|s| s.median);
            out.push(target(
                format!("zs-zs-tcp ping-pong p50 ÷ linux-linux's, MTU {mtu}"),
                lat(tcp, p50).zip(lat(linux, p50)).map(|(a, b)| a / b),
                0.2,
                true,
            ));
            out.push(target(
                format!("zs-zs-tcp ping-pong p99 ÷ linux-linux's, MTU {mtu}"),
                lat(tcp, p99).zip(lat(linux, p99)).map(|(a, b)| a / b),
                1.0 / 3.0,
                true,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::sample;
    use super::*;

    #[test]
    fn targets_compare_the_right_rows() {
        let r = sample();
        let t = judge(&r.rows, &r.ceilings);
        let by = |n: &str| t.iter().find(|t| t.name.starts_with(n)).expect(n);
        let vs_linux = by("zs-zs-tcp goodput ÷ linux-linux");
        assert_eq!(vs_linux.value, Some(1.5));
        assert_eq!(vs_linux.met, Some(true));
        let raw = by("zs-zs-tcp goodput ÷ raw");
        assert!((raw.value.expect("value") - 9.0 / 17.0).abs() < 1e-9);
        assert_eq!(raw.met, Some(false));
        // smoltcp row is unavailable: measured as missing, not as a pass.
        assert_eq!(by("zs-zs-tcp goodput ÷ zs-zs-smoltcp").met, None);
        let p50 = by("zs-zs-tcp ping-pong p50");
        assert_eq!(p50.value, Some(1.0));
        assert_eq!(p50.met, Some(false));
    }
}
