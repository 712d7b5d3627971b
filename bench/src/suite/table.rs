//! The human table on stdout: one row per case with medians and min–max,
//! the ratios next to each row, then the ceilings, the targets, and a
//! legend saying what each column measures.

use std::fmt::Write as _;

use super::report::{Report, Row, Status};
use super::stats::Summary;

fn med(s: Option<Summary>, prec: usize) -> String {
    s.map_or("-".into(), |s| format!("{:.*}", prec, s.median))
}

fn range(s: Option<Summary>, prec: usize) -> String {
    match s {
        Some(s) if s.n > 1 => format!("{:.*}–{:.*}", prec, s.min, prec, s.max),
        Some(_) => "(1 run)".into(),
        None => "-".into(),
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}x"))
}

fn drops(r: &Row) -> String {
    if r.drops.is_empty() {
        return "none".into();
    }
    r.drops
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Renders the whole report as text.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<30} {:>8} {:>13} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>8} {:>8} {:>8}  drops",
        "scenario/mtu/threads",
        "Gbit/s",
        "min–max",
        "xLinux",
        "xRaw",
        "snd s/GB",
        "rcv s/GB",
        "sirq",
        "retx",
        "p50 µs",
        "p99 µs",
        "p99.9 µs"
    );
    for r in &report.rows {
        if r.status == Status::Unavailable || r.status == Status::Failed {
            let why = r.notes.first().cloned().unwrap_or_default();
            let label = if r.status == Status::Unavailable {
                format!("n/a ({why})")
            } else {
                format!("FAILED: {why}")
            };
            let _ = writeln!(out, "{:<30} {label}", r.key);
            continue;
        }
        let lat = r.latency.as_ref();
        let _ = writeln!(
            out,
            "{:<30} {:>8} {:>13} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>8} {:>8} {:>8}  {}{}",
            r.key,
            med(r.goodput_gbps, 2),
            range(r.goodput_gbps, 2),
            ratio(r.ratios.vs_linux),
            ratio(r.ratios.vs_raw),
            med(r.cpu_s_per_gb.sender, 2),
            med(r.cpu_s_per_gb.receiver, 2),
            med(r.cpu_s_per_gb.softirq, 2),
            med(r.retransmits, 0),
            med(lat.and_then(|l| l.p50_us), 1),
            med(lat.and_then(|l| l.p99_us), 1),
            med(lat.and_then(|l| l.p999_us), 1),
            drops(r),
            if r.status == Status::Partial {
                format!("  [partial: {}]", r.notes.join("; "))
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(out, "\nceilings (same run, same veth):");
    for c in &report.ceilings {
        let _ = writeln!(
            out,
            "  MTU {:<5} raw AF_XDP RX {} Gbit/s [{}], raw AF_XDP TX {} Gbit/s [{}] (frames); as TCP payload {} Gbit/s; memcpy {} Gbit/s{}",
            c.mtu,
            med(c.raw_rx_gbps, 1),
            range(c.raw_rx_gbps, 1),
            med(c.raw_tx_gbps, 1),
            range(c.raw_tx_gbps, 1),
            c.raw_payload_gbps.map_or("-".into(), |v| format!("{v:.1}")),
            med(c.memcpy_gbps, 1),
            if c.errors.is_empty() {
                String::new()
            } else {
                format!("  (errors: {})", c.errors.join("; "))
            }
        );
    }
    if let Some(f) = &report.flows {
        out.push_str(&super::flows::render(f));
    }
    if !report.targets.is_empty() {
        let _ = writeln!(out, "\ntargets:");
        for t in &report.targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "not measured",
            };
            let _ = writeln!(
                out,
                "  {:<62} {:>8} (goal {} {:.2})  {verdict}",
                t.name,
                t.value.map_or("-".into(), |v| format!("{v:.2}")),
                if t.at_most { "≤" } else { "≥" },
                t.goal
            );
        }
    }
    let _ = writeln!(
        out,
        "\nlegend: Gbit/s = payload goodput at the receiver, median of {} run(s) with min–max; xLinux = ÷ linux-linux at the same MTU; xRaw = ÷ the lower raw AF_XDP ceiling (TX or RX) as TCP payload;\n        snd/rcv s/GB = CPU seconds (user+system) of the sending/receiving process per GB of payload; sirq = softirq seconds per GB, SYSTEM-WIDE (all CPUs; on veth both ends' kernel work lands there);\n        retx = retransmitted segments per run; p50/p99/p99.9 = {} B ping-pong round trip (both ends busy-poll); drops summed over runs (zerosplit reasons, kernel TcpExt counters, veth counters).",
        report.options.runs, report.options.message
    );
    out
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::sample;
    use super::*;

    #[test]
    fn table_shows_figures_ratios_and_unavailable_rows() {
        let text = render(&sample());
        let tcp = text
            .lines()
            .find(|l| l.starts_with("zs-zs-tcp/1500/rtc"))
            .expect("row");
        assert!(tcp.contains(" 9.00 "), "{tcp}");
        assert!(tcp.contains("8.10–9.90"), "{tcp}");
        assert!(tcp.contains("1.50x"), "{tcp}");
        assert!(tcp.contains("beyond_posted=3"), "{tcp}");
        assert!(text.contains("zs-zs-smoltcp/1500/rtc"));
        assert!(text.contains("n/a (transport not available)"));
        assert!(text.contains("SYSTEM-WIDE"));
        assert!(text.contains("met"));
    }
}
