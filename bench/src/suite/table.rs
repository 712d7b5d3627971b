//! The human table on stdout: one row per case with medians and min–max,
//! the ratios next to each row, IPv6 ÷ IPv4 when IPv6 rows ran, then the
//! ceilings, the targets, and a legend saying what each column measures.

use std::fmt::Write as _;

use super::report::{drop_list, CpuBreakdown, EndCpu, Report, Row, Status};
use super::scenario::Family;
use super::stats::Summary;

/// Width of the row-name column: 30, or the longest key (an IPv6 row's
/// `/v6` can pass 30).
fn key_width(report: &Report) -> usize {
    report
        .rows
        .iter()
        .map(|r| r.key.chars().count())
        .fold(30, usize::max)
}

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
    drop_list(&r.drops)
}

/// `user/system` medians of one thread kind.
fn user_sys(user: Option<Summary>, system: Option<Summary>) -> String {
    if user.is_none() && system.is_none() {
        return "-".into();
    }
    format!("{}/{}", med(user, 2), med(system, 2))
}

fn main_thread(e: Option<&EndCpu>) -> String {
    e.map_or("-".into(), |e| user_sys(e.main_user, e.main_system))
}

fn transport_thread(e: Option<&EndCpu>) -> String {
    e.map_or("-".into(), |e| {
        user_sys(e.transport_user, e.transport_system)
    })
}

/// Softirq s/GB of each CPU that had any, as `cN:v`.
fn softirq_cpus(b: &CpuBreakdown) -> String {
    let parts: Vec<String> = b
        .softirq_per_cpu
        .iter()
        .enumerate()
        .filter_map(|(c, s)| {
            s.filter(|s| s.median > 0.0)
                .map(|s| format!("c{c}:{:.2}", s.median))
        })
        .collect();
    if parts.is_empty() {
        if b.softirq_per_cpu.iter().any(Option::is_some) {
            "0 on every CPU".into()
        } else {
            "-".into()
        }
    } else {
        parts.join(" ")
    }
}

/// The busier transport thread's share of a core per 10 Gbit/s, in %.
fn transport_share(b: &CpuBreakdown) -> String {
    [&b.sender, &b.receiver]
        .into_iter()
        .filter_map(|e| e.as_ref().and_then(|e| e.transport_core_per_10gbps))
        .map(|s| s.median)
        .reduce(f64::max)
        .map_or("-".into(), |v| format!("{:.0} %", v * 100.0))
}

/// The CPU breakdown table: per row, each end's main thread and transport
/// thread (user/system s/GB), softirq per CPU, and the derived figures.
fn render_cpu(out: &mut String, report: &Report) {
    let rows: Vec<&Row> = report
        .rows
        .iter()
        .filter(|r| r.cpu_breakdown != CpuBreakdown::default())
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nCPU by thread, s/GB user/sys (main = the loop in rtc, the datapath thread in dedicated, the whole process for Linux):"
    );
    let w = key_width(report);
    let _ = writeln!(
        out,
        "{:<w$} {:>11} {:>11} {:>11} {:>11} {:>8} {:>8} {:>9}  softirq s/GB per CPU",
        "scenario/mtu/threads",
        "snd main",
        "snd transp",
        "rcv main",
        "rcv transp",
        "own s/GB",
        "Linux",
        "transp/10G"
    );
    for r in rows {
        let b = &r.cpu_breakdown;
        let _ = writeln!(
            out,
            "{:<w$} {:>11} {:>11} {:>11} {:>11} {:>8} {:>8} {:>9}  {}",
            r.key,
            main_thread(b.sender.as_ref()),
            transport_thread(b.sender.as_ref()),
            main_thread(b.receiver.as_ref()),
            transport_thread(b.receiver.as_ref()),
            med(b.stack_own_s_per_gb, 2),
            med(b.linux_total_s_per_gb, 2),
            transport_share(b),
            softirq_cpus(b),
        );
    }
    let _ = writeln!(
        out,
        "  own s/GB = the stack's own CPU per byte: user time of the zerosplit end(s), every thread; Linux = user + system of both Linux ends + softirq of every CPU;\n  transp/10G = the busier transport thread's share of one core scaled to 10 Gbit/s (dedicated rows); softirq is per CPU, whoever caused it."
    );
}

/// The targets with met / MISSED / not measured.
fn render_targets(out: &mut String, report: &Report) {
    if report.targets.is_empty() {
        return;
    }
    let _ = writeln!(out, "\ntargets:");
    for t in &report.targets {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not measured",
        };
        let _ = writeln!(
            out,
            "  {verdict:<12} {:>7}  (goal {} {:.2})  {}",
            t.value.map_or("-".into(), |v| format!("{v:.2}")),
            if t.at_most { "≤" } else { "≥" },
            t.goal,
            t.name,
        );
    }
}

/// Renders the whole report as text.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let w = key_width(report);
    let _ = writeln!(
        out,
        "{:<w$} {:>8} {:>13} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>8} {:>8} {:>8}  drops",
        "scenario/mtu/threads",
        "Gbit/s",
        "min–max",
        "xLinux",
        "xLinOff",
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
            let _ = writeln!(out, "{:<w$} {label}", r.key);
            continue;
        }
        let lat = r.latency.as_ref();
        let _ = writeln!(
            out,
            "{:<w$} {:>8} {:>13} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>8} {:>8} {:>8}  {}{}",
            r.key,
            med(r.goodput_gbps, 2),
            range(r.goodput_gbps, 2),
            ratio(r.ratios.vs_linux),
            ratio(r.ratios.vs_linux_offload),
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
    out.push_str(&super::families::render(&report.rows));
    render_cpu(&mut out, report);
    if let Some(p) = &report.poll {
        out.push_str(&super::poll::render(p));
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
    if let Some(a) = &report.apps {
        out.push_str(&super::apps::render(a));
    }
    if let Some(a) = &report.attached {
        out.push_str(&super::attached::render(a, &report.rows));
    }
    render_targets(&mut out, report);
    let _ = writeln!(
        out,
        "\nlegend: Gbit/s = payload goodput at the receiver, median of {} run(s) with min–max; xLinux = ÷ linux-linux at the same MTU; xRaw = ÷ the lower raw AF_XDP ceiling (TX or RX) as TCP payload;\n        snd/rcv s/GB = CPU seconds (user+system) of the sending/receiving process per GB of payload; sirq = softirq seconds per GB, SYSTEM-WIDE (all CPUs; on veth both ends' kernel work lands there);\n        xLinOff = ÷ linux-linux-offload (Linux with the veth's default offloads: TX checksum, TSO, GSO, GRO); xLinux's linux-linux has TX checksum offload off;
        retx = retransmitted segments per run; p50/p99/p99.9 = {} B ping-pong round trip (zerosplit ends in threads.poll = adaptive, the default, unless --poll said otherwise); drops summed over runs (zerosplit reasons, kernel TcpExt counters, veth counters).",
        report.options.runs, report.options.message
    );
    if report.rows.iter().any(|r| r.family == Family::Ipv6) {
        let _ = writeln!(
            out,
            "        /v6 = the same case over IPv6 (2001:2::1 ↔ 2001:2::2); its xLinux and xLinOff refer to the Linux rows over IPv6, its xRaw to the raw ceiling as IPv6 payload."
        );
    }
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
        let poll = text.find("poll modes").expect("poll section");
        assert!(poll < text.find("ceilings").expect("ceilings"));
    }

    #[test]
    fn ipv6_rows_are_named_aligned_and_compared() {
        let mut r = sample();
        let plain = render(&r);
        assert!(!plain.contains("/v6") && !plain.contains("IPv6"), "{plain}");
        let mut v6 = r.rows[1].clone();
        v6.family = Family::Ipv6;
        v6.key = v6.case().key();
        v6.goodput_gbps = Summary::of(&[8.64]);
        r.rows.insert(2, v6);
        let text = render(&r);
        let row = |key: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{key} ")))
                .unwrap_or_else(|| panic!("no row {key}: {text}"))
        };
        // The IPv6 row sits below its twin, its figures in the same columns.
        let (v4, v6) = (row("zs-zs-tcp/1500/rtc"), row("zs-zs-tcp/1500/rtc/v6"));
        assert_eq!(v4.find(" 9.00 "), v6.find(" 8.64 "), "\n{v4}\n{v6}");
        assert!(text.contains("IPv6 ÷ IPv4 goodput"), "{text}");
        assert!(text.contains("/v6 = the same case over IPv6"), "{text}");
        let ratio = text
            .lines()
            .find(|l| l.starts_with("  zs-zs-tcp/1500/rtc "))
            .expect("ratio line");
        assert!(ratio.contains("0.96x") && ratio.ends_with("met"), "{ratio}");
    }

    #[test]
    fn cpu_table_and_target_verdicts() {
        let mut r = sample();
        r.targets.push(crate::suite::report::Target {
            name: "a figure nobody measured".into(),
            value: None,
            goal: 0.5,
            at_most: true,
            met: None,
        });
        let text = render(&r);
        let cpu = text
            .lines()
            .skip_while(|l| !l.starts_with("CPU by thread"))
            .find(|l| l.starts_with("zs-zs-tcp/1500/rtc"))
            .expect("cpu row");
        // main user/sys of both ends, no transport thread in rtc, own s/GB,
        // and both CPUs' softirq.
        assert!(cpu.contains("0.30/0.10"), "{cpu}");
        assert!(cpu.contains(" 0.60 "), "{cpu}");
        assert!(cpu.contains("c0:0.15 c1:0.05"), "{cpu}");
        let linux = text
            .lines()
            .skip_while(|l| !l.starts_with("CPU by thread"))
            .find(|l| l.starts_with("linux-linux/1500/-"))
            .expect("linux cpu row");
        assert!(linux.contains(" 1.00 "), "{linux}");
        // The unavailable smoltcp row has no CPU line.
        assert_eq!(text.matches("zs-zs-smoltcp/1500/rtc").count(), 1);
        assert!(text.contains("not measured"), "{text}");
        assert!(text
            .lines()
            .any(|l| l.contains("met") && l.contains("zs-zs-tcp vs linux-linux")));
        assert!(text.contains("xLinOff"));
    }
}
