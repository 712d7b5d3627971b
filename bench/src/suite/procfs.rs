//! What the bench reads from /proc: a process's own CPU time
//! (`/proc/self/stat` utime + stime), the system-wide softirq time
//! (`/proc/stat`), and the network namespace's TCP counters
//! (`/proc/net/snmp`, `/proc/net/netstat`) for the kernel ends'
//! retransmissions and drops.
//!
//! Times in these files are in clock ticks of `USER_HZ`, which the Linux
//! ABI fixes at 100 on every architecture this project runs on.

use std::collections::BTreeMap;

/// Clock ticks per second in /proc (`USER_HZ`).
pub const USER_HZ: f64 = 100.0;

/// Reading or parsing a /proc file failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file did not have the expected shape.
    #[error("parsing {path}: {detail}")]
    Parse {
        /// The file.
        path: &'static str,
        /// What was missing.
        detail: String,
    },
}

fn read(path: &'static str) -> Result<String, ProcError> {
    std::fs::read_to_string(path).map_err(|source| ProcError::Read { path, source })
}

/// utime + stime (all threads) of the process whose `stat` line this is, in
/// seconds.
///
/// # Errors
/// The line is malformed.
pub fn parse_process_cpu(stat: &str) -> Result<f64, ProcError> {
    // The command name (field 2) may contain spaces: fields count from the
    // last ')'.
    let bad = |d: &str| ProcError::Parse {
        path: "/proc/self/stat",
        detail: d.to_owned(),
    };
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| bad("no ')' after the command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime 15.
    let tick = |i: usize| -> Result<u64, ProcError> {
        fields
            .get(i - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| bad(&format!("field {i} missing or not a number")))
    };
    Ok((tick(14)? + tick(15)?) as f64 / USER_HZ)
}

/// This process's CPU time (user + system, all threads) in seconds.
///
/// # Errors
/// /proc/self/stat is unreadable or malformed.
pub fn process_cpu_seconds() -> Result<f64, ProcError> {
    parse_process_cpu(&read("/proc/self/stat")?)
}

/// Softirq time summed over all CPUs (the `cpu` line of /proc/stat), in
/// seconds.
///
/// # Errors
/// The text has no well-formed `cpu` line.
pub fn parse_softirq(stat: &str) -> Result<f64, ProcError> {
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| ProcError::Parse {
            path: "/proc/stat",
            detail: "no aggregate `cpu` line".into(),
        })?;
    // cpu user nice system idle iowait irq softirq ...
    line.split_whitespace()
        .nth(7)
        .and_then(|v| v.parse::<u64>().ok())
        .map(|t| t as f64 / USER_HZ)
        .ok_or_else(|| ProcError::Parse {
            path: "/proc/stat",
            detail: format!("no softirq column in {line:?}"),
        })
}

/// System-wide softirq time in seconds (all CPUs, all namespaces).
///
/// # Errors
/// /proc/stat is unreadable or malformed.
pub fn softirq_seconds() -> Result<f64, ProcError> {
    parse_softirq(&read("/proc/stat")?)
}

/// Parses the two-line-per-group format of /proc/net/snmp and
/// /proc/net/netstat (`Group: names…` then `Group: values…`) into
/// `Group:Name` → value.
pub fn parse_counter_table(text: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((g1, names)), Some((g2, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if g1 != g2 {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse::<i64>() {
                out.insert(format!("{g1}:{n}"), v);
            }
        }
    }
    out
}

/// The calling thread's network namespace's TCP/IP counters
/// (/proc/net/snmp and /proc/net/netstat together).
///
/// # Errors
/// Either file is unreadable.
pub fn net_counters() -> Result<BTreeMap<String, i64>, ProcError> {
    let mut all = parse_counter_table(&read("/proc/net/snmp")?);
    all.extend(parse_counter_table(&read("/proc/net/netstat")?));
    Ok(all)
}

/// Kernel drop counters worth reporting: every `TcpExt:*Drop*` counter
/// plus `Ip:InDiscards`, as non-zero differences `after − before`.
pub fn kernel_drops(
    before: &BTreeMap<String, i64>,
    after: &BTreeMap<String, i64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| (k.starts_with("TcpExt:") && k.contains("Drop")) || *k == "Ip:InDiscards")
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d as u64))
        })
        .collect()
}

/// `Tcp:RetransSegs` difference `after − before`.
pub fn kernel_retransmits(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>) -> u64 {
    let k = "Tcp:RetransSegs";
    (after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0)).max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_counts_from_the_last_paren() {
        // pid (comm with ) and spaces) state ppid ... utime=250 stime=50
        let mut line = String::from("42 (a b) c) R");
        for i in 4..=13 {
            line.push_str(&format!(" {i}"));
        }
        line.push_str(" 250 50 0 0 20 0 1");
        assert_eq!(parse_process_cpu(&line).expect("parses"), 3.0);
        assert!(parse_process_cpu("42 (x) R 1 2").is_err());
        assert!(parse_process_cpu("garbage").is_err());
    }

    #[test]
    fn softirq_is_the_seventh_value_of_the_cpu_line() {
        let stat = "cpu  100 0 200 5000 10 3 470 0 0 0\ncpu0 50 0 100 2500 5 1 200 0 0 0\n";
        assert_eq!(parse_softirq(stat).expect("parses"), 4.7);
        assert!(parse_softirq("cpu0 1 2 3\n").is_err());
    }

    #[test]
    fn counter_tables_and_their_differences() {
        let before = parse_counter_table(
            "Tcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 10 0\nTcpExt: TCPBacklogDrop TCPOFODrop PAWSActive\nTcpExt: 0 2 7\n",
        );
        assert_eq!(before.get("Tcp:RetransSegs"), Some(&10));
        assert_eq!(before.get("TcpExt:TCPOFODrop"), Some(&2));
        let after = parse_counter_table(
            "Tcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 25 0\nTcpExt: TCPBacklogDrop TCPOFODrop PAWSActive\nTcpExt: 3 2 9\n",
        );
        assert_eq!(kernel_retransmits(&before, &after), 15);
        let drops = kernel_drops(&before, &after);
        assert_eq!(drops.len(), 1, "{drops:?}");
        assert_eq!(drops.get("TcpExt:TCPBacklogDrop"), Some(&3));
    }
}
