//! The kernel's own drop counters of a namespace (`/proc/net/snmp` and
//! `/proc/net/netstat` as the calling thread sees them), snapshotted and
//! compared: how the Linux receiver counts a hostile kind, and how the
//! kernel counts the frames the steering program passes to it.

use std::collections::BTreeMap;

/// Counters by `Prefix.Name` (e.g. `TcpExt.PAWSEstab`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelCounters(BTreeMap<String, i64>);

/// Substrings of the counter names that count a drop or a defence (a
/// challenge ACK, a reset sent, a reassembly).
const DROPPISH: &[&str] = &[
    "Err",
    "Drop",
    "Discard",
    "Reasm",
    "Rst",
    "Csum",
    "Challenge",
    "PAWS",
    "Fail",
    "Overflow",
    "Cookies",
    "Trunc",
    "Bad",
    "Unknown",
    "OutOfWindow",
    "Reject",
    "Prune",
    "ACKSkipped",
];

impl KernelCounters {
    /// Reads the calling thread's namespace's counters; empty when the
    /// files cannot be read.
    pub fn read() -> Self {
        let mut all = BTreeMap::new();
        for file in ["snmp", "netstat"] {
            let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}"))
                .unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            for pair in lines.chunks_exact(2) {
                let (Some((prefix, names)), Some((_, values))) =
                    (pair[0].split_once(':'), pair[1].split_once(':'))
                else {
                    continue;
                };
                for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
                    if let Ok(v) = v.parse::<i64>() {
                        all.insert(format!("{prefix}.{n}"), v);
                    }
                }
            }
        }
        KernelCounters(all)
    }

    /// The drop-like counters that grew since `before`, largest first.
    pub fn grown_since(&self, before: &KernelCounters) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = self
            .0
            .iter()
            .filter(|(name, _)| DROPPISH.iter().any(|d| name.contains(d)))
            .filter_map(|(name, &now)| {
                let d = now - before.0.get(name).copied().unwrap_or(0);
                (d > 0).then(|| (name.clone(), d))
            })
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_lists_only_drop_like_counters_that_grew() {
        let mut a = KernelCounters::default();
        a.0.insert("Ip.InHdrErrors".into(), 1);
        a.0.insert("Tcp.InSegs".into(), 10);
        a.0.insert("TcpExt.PAWSEstab".into(), 0);
        let mut b = a.clone();
        b.0.insert("Ip.InHdrErrors".into(), 4);
        b.0.insert("Tcp.InSegs".into(), 99);
        b.0.insert("TcpExt.TCPChallengeACK".into(), 2);
        assert_eq!(
            b.grown_since(&a),
            vec![
                ("Ip.InHdrErrors".to_string(), 3),
                ("TcpExt.TCPChallengeACK".to_string(), 2)
            ]
        );
        assert!(
            KernelCounters::read().0.len() > 10,
            "this namespace's counters read"
        );
    }
}
