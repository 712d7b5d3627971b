//! IPv6 beside IPv4 (`zerosplit bench --ipv6`): every case of the main
//! rows also ran over IPv6, in the same rounds as its IPv4 twin (same
//! scenario, MTU and thread mode). This module pairs the twins, takes the
//! ratio of their median goodputs, judges the target — IPv6 at least
//! [`GOAL`] × IPv4 for the rows with a zerosplit end that talks IPv6
//! ([`JUDGED`]), at MTU 1500 and 9000 and any other MTU that ran — and
//! prints the "IPv6 ÷ IPv4" section. The Linux rows are shown as the
//! kernel's own IPv6 cost, not judged.
//!
//! Like every target, a missed one is reported, never a failed run.

use std::fmt::Write as _;

use super::report::{Row, Status, Target};
use super::scenario::{Case, Family, Scenario, ThreadMode};

/// The goal: IPv6 goodput at least this share of IPv4's.
pub const GOAL: f64 = 0.95;

/// The scenarios the target is judged on: zerosplit's `tcp` against
/// itself and against Linux, both ways.
pub const JUDGED: [Scenario; 3] = [Scenario::ZsZsTcp, Scenario::LinuxZs, Scenario::ZsLinux];

/// The MTUs judged whenever IPv6 ran, so a run without one shows its
/// targets as not measured.
const JUDGED_MTUS: [u32; 2] = [1500, 9000];

/// An IPv6 row and its IPv4 twin.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// The IPv4 case (the IPv6 one differs in family only).
    pub case: Case,
    /// Median goodput of the IPv4 row, Gbit/s.
    pub ipv4_gbps: Option<f64>,
    /// Median goodput of the IPv6 row, Gbit/s.
    pub ipv6_gbps: Option<f64>,
    /// Why the IPv6 row has no figure (unavailable or failed), if so.
    pub ipv6_note: Option<String>,
}

impl Pair {
    /// IPv6 ÷ IPv4 median goodput, when both are measured and IPv4's is
    /// positive.
    pub fn ratio(&self) -> Option<f64> {
        let (v6, v4) = (self.ipv6_gbps?, self.ipv4_gbps?);
        (v4 > 0.0).then(|| v6 / v4)
    }

    /// The target on this pair (`None` for a scenario not judged).
    pub fn target(&self) -> Option<Target> {
        JUDGED
            .contains(&self.case.scenario)
            .then(|| target(self.case, self.ratio()))
    }
}

fn median(r: &Row) -> Option<f64> {
    r.goodput_gbps.map(|s| s.median)
}

/// Each IPv6 row that has an IPv4 twin, with the twin, in table order.
pub fn pairs(rows: &[Row]) -> Vec<Pair> {
    rows.iter()
        .filter(|r| r.family == Family::Ipv6)
        .filter_map(|v6| {
            let case = v6.case().ipv4();
            let v4 = rows.iter().find(|r| r.case() == case)?;
            Some(Pair {
                case,
                ipv4_gbps: median(v4),
                ipv6_gbps: median(v6),
                ipv6_note: matches!(v6.status, Status::Unavailable | Status::Failed)
                    .then(|| v6.notes.first().cloned().unwrap_or_default()),
            })
        })
        .collect()
}

fn target(case: Case, ratio: Option<f64>) -> Target {
    Target::judged(
        format!("IPv6 ÷ IPv4 goodput (medians), {}", case.key()),
        ratio,
        GOAL,
        false,
    )
}

/// The targets of a run with IPv6 rows (none without): one per judged
/// scenario at MTU 1500 and 9000 in run-to-completion, and one per other
/// IPv6 row of a judged scenario (another MTU, the dedicated mode), in
/// table order (MTU, scenario, thread mode).
pub fn targets(rows: &[Row]) -> Vec<Target> {
    if !rows.iter().any(|r| r.family == Family::Ipv6) {
        return Vec::new();
    }
    let pairs = pairs(rows);
    let mut cases: Vec<Case> = JUDGED
        .iter()
        .flat_map(|&scenario| {
            JUDGED_MTUS.map(|mtu| Case {
                scenario,
                mtu,
                threads: Some(ThreadMode::Rtc),
                family: Family::Ipv4,
            })
        })
        .chain(
            pairs
                .iter()
                .map(|p| p.case)
                .filter(|c| JUDGED.contains(&c.scenario)),
        )
        .collect();
    cases.sort_by_key(|c| (c.mtu, c.scenario, c.threads));
    cases.dedup();
    cases
        .into_iter()
        .map(|case| {
            let ratio = pairs.iter().find(|p| p.case == case).and_then(Pair::ratio);
            target(case, ratio)
        })
        .collect()
}

/// The "IPv6 ÷ IPv4" section of the text report (empty without IPv6 rows).
pub fn render(rows: &[Row]) -> String {
    let pairs = pairs(rows);
    let mut out = String::new();
    if pairs.is_empty() {
        return out;
    }
    let gbps = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let _ = writeln!(
        out,
        "\nIPv6 ÷ IPv4 goodput (medians of the same rounds; goal ≥ {GOAL:.2} for {}):",
        JUDGED.map(Scenario::name).join(", ")
    );
    let _ = writeln!(
        out,
        "  {:<30} {:>8} {:>8} {:>9}  verdict",
        "scenario/mtu/threads", "IPv4", "IPv6", "IPv6/IPv4"
    );
    for p in &pairs {
        let verdict = match (p.target(), p.case.scenario.has_zerosplit()) {
            (Some(t), _) => match t.met {
                Some(true) => "met".to_owned(),
                Some(false) => "MISSED".to_owned(),
                None => "not measured".to_owned(),
            },
            (None, false) => "Linux's own (not judged)".to_owned(),
            (None, true) => "not judged".to_owned(),
        };
        let _ = writeln!(
            out,
            "  {:<30} {:>8} {:>8} {:>9}  {verdict}{}",
            p.case.key(),
            gbps(p.ipv4_gbps),
            gbps(p.ipv6_gbps),
            p.ratio().map_or("-".into(), |r| format!("{r:.2}x")),
            p.ipv6_note
                .as_ref()
                .map_or(String::new(), |n| format!("  [IPv6: {n}]")),
        );
    }
    let _ = writeln!(
        out,
        "  Gbit/s of payload at the receiver; IPv6 runs on 2001:2::1 ↔ 2001:2::2 of the same kind of pair, each segment carrying 20 header bytes more."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::sample;
    use super::super::stats::Summary;
    use super::*;

    /// The sample's rows (IPv4: linux-linux 6, zs-zs-tcp 9 Gbit/s, smoltcp
    /// unavailable), each followed by its IPv6 twin at `v6_gbps`.
    fn with_ipv6(v6_gbps: [Option<f64>; 3]) -> Vec<Row> {
        let mut rows = Vec::new();
        for (row, g) in sample().rows.into_iter().zip(v6_gbps) {
            let mut v6 = row.clone();
            v6.family = Family::Ipv6;
            v6.key = v6.case().key();
            v6.goodput_gbps = g.and_then(|g| Summary::of(&[g * 0.9, g, g * 1.2]));
            rows.extend([row, v6]);
        }
        rows
    }

    fn by<'a>(t: &'a [Target], key: &str) -> &'a Target {
        t.iter()
            .find(|t| t.name.ends_with(&format!(", {key}")))
            .unwrap_or_else(|| panic!("no target for {key}: {t:#?}"))
    }

    #[test]
    fn pairs_take_the_ratio_of_medians_of_each_twin() {
        let rows = with_ipv6([Some(5.4), Some(8.1), None]);
        let pairs = pairs(&rows);
        let keys: Vec<String> = pairs.iter().map(|p| p.case.key()).collect();
        assert_eq!(
            keys,
            [
                "linux-linux/1500/-",
                "zs-zs-tcp/1500/rtc",
                "zs-zs-smoltcp/1500/rtc"
            ]
        );
        // 5.4 ÷ 6.0 and 8.1 ÷ 9.0: the medians, not the means (the
        // samples are skewed: 0.9×, 1×, 1.2×).
        assert!((pairs[0].ratio().expect("linux") - 0.9).abs() < 1e-12);
        assert!((pairs[1].ratio().expect("tcp") - 0.9).abs() < 1e-12);
        assert_eq!(pairs[2].ratio(), None, "no figure on either side");
        assert_eq!(
            pairs[2].ipv6_note.as_deref(),
            Some("transport not available")
        );
        // Linux is not judged; smoltcp is not judged either.
        assert!(pairs[0].target().is_none());
        assert!(pairs[2].target().is_none());
    }

    #[test]
    fn targets_judge_zerosplit_rows_against_the_goal() {
        // 8.1 ÷ 9.0 = 0.90 < 0.95: missed.
        let t = targets(&with_ipv6([Some(5.4), Some(8.1), None]));
        let tcp = by(&t, "zs-zs-tcp/1500/rtc");
        assert_eq!(tcp.met, Some(false));
        assert_eq!((tcp.goal, tcp.at_most), (GOAL, false));
        assert!((tcp.value.expect("value") - 0.9).abs() < 1e-12);
        // 8.64 ÷ 9.0 = 0.96: met.
        let t = targets(&with_ipv6([Some(5.4), Some(8.64), None]));
        assert_eq!(by(&t, "zs-zs-tcp/1500/rtc").met, Some(true));
        // Every judged scenario at 1500 and 9000, the unmeasured ones
        // neither met nor missed; no Linux or smoltcp target.
        let keys: Vec<&str> = t
            .iter()
            .map(|t| t.name.rsplit(", ").next().unwrap_or(""))
            .collect();
        assert_eq!(
            keys,
            [
                "linux-zs/1500/rtc",
                "zs-linux/1500/rtc",
                "zs-zs-tcp/1500/rtc",
                "linux-zs/9000/rtc",
                "zs-linux/9000/rtc",
                "zs-zs-tcp/9000/rtc",
            ]
        );
        assert_eq!(by(&t, "linux-zs/1500/rtc").met, None);
        assert_eq!(by(&t, "zs-zs-tcp/9000/rtc").met, None);
    }

    #[test]
    fn a_run_without_ipv6_rows_has_no_section_and_no_targets() {
        let rows = sample().rows;
        assert!(pairs(&rows).is_empty());
        assert!(targets(&rows).is_empty());
        assert_eq!(render(&rows), "");
    }

    #[test]
    fn the_section_shows_both_figures_the_ratio_and_the_verdict() {
        let text = render(&with_ipv6([Some(5.4), Some(8.64), None]));
        assert!(text.contains("IPv6 ÷ IPv4 goodput"), "{text}");
        let line = |key: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(&format!("{key} ")))
                .unwrap_or_else(|| panic!("no line for {key}: {text}"))
                .to_owned()
        };
        let tcp = line("zs-zs-tcp/1500/rtc");
        assert!(tcp.contains(" 9.00 ") && tcp.contains(" 8.64 "), "{tcp}");
        assert!(tcp.contains("0.96x") && tcp.ends_with("met"), "{tcp}");
        let linux = line("linux-linux/1500/-");
        assert!(
            linux.contains("0.90x") && linux.contains("not judged"),
            "{linux}"
        );
        let smol = line("zs-zs-smoltcp/1500/rtc");
        assert!(smol.contains("[IPv6: transport not available]"), "{smol}");
    }
}
