//! What the bench reads from /proc: a process's own CPU time
//! (`/proc/self/stat` utime + stime), each of its threads' user and system
//! time (`/proc/self/task/*/stat`), the softirq time of the whole machine
//! and of each CPU (`/proc/stat`), and the network namespace's TCP counters
//! (`/proc/net/snmp`, `/proc/net/netstat`) for the kernel ends'
//! retransmissions and drops; and the machine's load average
//! (`/proc/loadavg`).
//!
//! Times in these files are in clock ticks of `USER_HZ`, which the Linux
//! ABI fixes at 100 on every architecture this project runs on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

/// The 1-minute load average of a `/proc/loadavg` text (its first field:
/// runnable and uninterruptible tasks, machine-wide, averaged).
///
/// # Errors
/// No number first.
pub fn parse_load_1min(text: &str) -> Result<f64, ProcError> {
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| ProcError::Parse {
            path: "/proc/loadavg",
            detail: format!("no load average in {text:?}"),
        })
}

/// The machine's 1-minute load average now.
///
/// # Errors
/// /proc/loadavg unreadable or not of its shape.
pub fn load_1min() -> Result<f64, ProcError> {
    parse_load_1min(&read("/proc/loadavg")?)
}

/// The command name and the fields after it (field 3 onwards) of a
/// `/proc/…/stat` line. The name (field 2) may contain spaces and ')':
/// it runs from the first '(' to the last ')'.
fn stat_fields<'a>(
    stat: &'a str,
    path: &'static str,
) -> Result<(&'a str, Vec<&'a str>), ProcError> {
    let bad = |d: &str| ProcError::Parse {
        path,
        detail: d.to_owned(),
    };
    let (head, rest) = stat
        .rsplit_once(')')
        .ok_or_else(|| bad("no ')' after the command name"))?;
    let name = head
        .split_once('(')
        .map(|(_, n)| n)
        .ok_or_else(|| bad("no '(' before the command name"))?;
    Ok((name, rest.split_whitespace().collect()))
}

/// Field `i` (1-based, as in proc(5)) of a stat line as clock ticks, from
/// the fields after the name ([`stat_fields`]).
fn stat_ticks(fields: &[&str], i: usize, path: &'static str) -> Result<u64, ProcError> {
    fields
        .get(i - 3)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| ProcError::Parse {
            path,
            detail: format!("field {i} missing or not a number"),
        })
}

/// utime + stime (all threads) of the process whose `stat` line this is, in
/// seconds.
///
/// # Errors
/// The line is malformed.
pub fn parse_process_cpu(stat: &str) -> Result<f64, ProcError> {
    const PATH: &str = "/proc/self/stat";
    let (_, fields) = stat_fields(stat, PATH)?;
    // utime is field 14, stime 15.
    Ok((stat_ticks(&fields, 14, PATH)? + stat_ticks(&fields, 15, PATH)?) as f64 / USER_HZ)
}

/// One thread's CPU time: a reading of its `/proc/self/task/<tid>/stat`,
/// or (in a peer's report) the difference of two readings over a window.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ThreadCpu {
    /// Thread id.
    pub tid: u32,
    /// Thread name (`comm`, at most 15 bytes), e.g. `zs-transport`.
    pub name: String,
    /// User time, seconds.
    pub user_s: f64,
    /// System time, seconds.
    pub system_s: f64,
}

/// Parses one `/proc/<pid>/task/<tid>/stat` line (fields 1 tid, 2 name,
/// 14 utime, 15 stime).
///
/// # Errors
/// The line is malformed.
pub fn parse_task_stat(stat: &str) -> Result<ThreadCpu, ProcError> {
    const PATH: &str = "/proc/self/task/*/stat";
    let (name, fields) = stat_fields(stat, PATH)?;
    let tid = stat
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| ProcError::Parse {
            path: PATH,
            detail: "field 1 (tid) missing or not a number".into(),
        })?;
    Ok(ThreadCpu {
        tid,
        name: name.to_owned(),
        user_s: stat_ticks(&fields, 14, PATH)? as f64 / USER_HZ,
        system_s: stat_ticks(&fields, 15, PATH)? as f64 / USER_HZ,
    })
}

/// Every thread of this process with its CPU time so far. A thread that
/// exits while the directory is read is skipped.
///
/// # Errors
/// `/proc/self/task` is unreadable, or a stat line is malformed.
pub fn thread_times() -> Result<Vec<ThreadCpu>, ProcError> {
    const DIR: &str = "/proc/self/task";
    let entries = std::fs::read_dir(DIR).map_err(|source| ProcError::Read { path: DIR, source })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        out.push(parse_task_stat(&text)?);
    }
    out.sort_by_key(|t| t.tid);
    Ok(out)
}

/// Each thread's CPU time between two readings: `after − before` by tid (a
/// thread started in between counts from zero). Threads that ended in
/// between are gone from `after` and are not counted.
pub fn thread_deltas(before: &[ThreadCpu], after: &[ThreadCpu]) -> Vec<ThreadCpu> {
    after
        .iter()
        .map(|a| {
            let b = before.iter().find(|b| b.tid == a.tid);
            ThreadCpu {
                tid: a.tid,
                name: a.name.clone(),
                user_s: (a.user_s - b.map_or(0.0, |b| b.user_s)).max(0.0),
                system_s: (a.system_s - b.map_or(0.0, |b| b.system_s)).max(0.0),
            }
        })
        .collect()
}

/// Names the calling thread (`/proc/thread-self/comm`, truncated by the
/// kernel to 15 bytes) so its time can be told apart in
/// [`thread_times`].
///
/// # Errors
/// The file cannot be written.
pub fn name_this_thread(name: &str) -> Result<(), ProcError> {
    const PATH: &str = "/proc/thread-self/comm";
    std::fs::write(PATH, name).map_err(|source| ProcError::Read { path: PATH, source })
}

/// This process's CPU time (user + system, all threads) in seconds.
///
/// # Errors
/// /proc/self/stat is unreadable or malformed.
pub fn process_cpu_seconds() -> Result<f64, ProcError> {
    parse_process_cpu(&read("/proc/self/stat")?)
}

/// Process `pid`'s CPU time (user + system, all threads) in seconds.
///
/// # Errors
/// /proc/PID/stat is unreadable (the process is gone) or malformed.
pub fn pid_cpu_seconds(pid: u32) -> Result<f64, ProcError> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|source| ProcError::Read {
        path: "/proc/PID/stat",
        source,
    })?;
    parse_process_cpu(&text)
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

/// Softirq time of each CPU (the `cpuN` lines of /proc/stat), in seconds,
/// indexed by CPU number (a CPU without a line, e.g. offline, reads 0).
///
/// # Errors
/// No `cpuN` line, or one without a softirq column.
pub fn parse_softirq_per_cpu(stat: &str) -> Result<Vec<f64>, ProcError> {
    let bad = |detail: String| ProcError::Parse {
        path: "/proc/stat",
        detail,
    };
    let mut out: Vec<f64> = Vec::new();
    for line in stat.lines() {
        let mut cols = line.split_whitespace();
        let Some(cpu) = cols
            .next()
            .and_then(|c| c.strip_prefix("cpu"))
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        let n: usize = cpu
            .parse()
            .map_err(|_| bad(format!("bad CPU number in {line:?}")))?;
        if n >= 4096 {
            return Err(bad(format!("CPU number {n} out of range")));
        }
        // cpuN user nice system idle iowait irq softirq ...
        let ticks: u64 = cols
            .nth(6)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(format!("no softirq column in {line:?}")))?;
        if out.len() <= n {
            out.resize(n + 1, 0.0);
        }
        out[n] = ticks as f64 / USER_HZ;
    }
    if out.is_empty() {
        return Err(bad("no `cpuN` line".into()));
    }
    Ok(out)
}

/// Softirq time of each CPU in seconds (all namespaces).
///
/// # Errors
/// /proc/stat is unreadable or malformed.
pub fn softirq_per_cpu_seconds() -> Result<Vec<f64>, ProcError> {
    parse_softirq_per_cpu(&read("/proc/stat")?)
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
    fn load_average_is_the_first_field() {
        let v = parse_load_1min("2.38 2.14 1.95 3/412 14004\n").expect("parsed");
        assert!((v - 2.38).abs() < 1e-9);
        assert!(parse_load_1min("").is_err());
        assert!(parse_load_1min("x 1 2").is_err());
        assert!(load_1min().is_ok_and(|v| v >= 0.0));
    }

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

    fn task_line(tid: u32, name: &str, utime: u64, stime: u64) -> String {
        let mut line = format!("{tid} ({name}) S");
        for i in 4..=13 {
            line.push_str(&format!(" {i}"));
        }
        line.push_str(&format!(" {utime} {stime} 0 0 20 0 1"));
        line
    }

    #[test]
    fn task_stat_keeps_a_name_with_spaces_and_parens() {
        let t = parse_task_stat(&task_line(4242, "zs (x) y)", 250, 75)).expect("parses");
        assert_eq!(t.tid, 4242);
        assert_eq!(t.name, "zs (x) y)");
        assert_eq!((t.user_s, t.system_s), (2.5, 0.75));
        let t = parse_task_stat(&task_line(7, "zs-transport", 1, 2)).expect("parses");
        assert_eq!(t.name, "zs-transport");
        assert!(parse_task_stat("7 (x) R 1 2").is_err());
        assert!(parse_task_stat("x (y) R").is_err());
        assert!(parse_task_stat("no parens at all").is_err());
    }

    #[test]
    fn thread_deltas_subtract_by_tid_and_count_new_threads_from_zero() {
        let before = [
            parse_task_stat(&task_line(1, "zs-loop", 100, 10)).expect("1"),
            parse_task_stat(&task_line(2, "gone", 5, 5)).expect("2"),
        ];
        let after = [
            parse_task_stat(&task_line(1, "zs-loop", 350, 30)).expect("1"),
            parse_task_stat(&task_line(3, "zs-transport", 40, 2)).expect("3"),
        ];
        let d = thread_deltas(&before, &after);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].tid, d[0].user_s), (1, 2.5));
        assert!((d[0].system_s - 0.2).abs() < 1e-9, "{d:?}");
        assert_eq!((d[1].name.as_str(), d[1].user_s), ("zs-transport", 0.4));
    }

    #[test]
    fn this_process_has_at_least_this_thread() {
        let t = thread_times().expect("reads /proc/self/task");
        assert!(t.iter().any(|t| t.tid == std::process::id()), "{t:?}");
    }

    #[test]
    fn softirq_per_cpu_reads_every_cpun_line() {
        let stat = "cpu  100 0 200 5000 10 3 470 0 0 0
cpu0 50 0 100 2500 5 1 200 0 0 0
cpu2 50 0 100 2500 5 2 270 0 0 0
intr 1 2 3
softirq 9 9 9
";
        assert_eq!(
            parse_softirq_per_cpu(stat).expect("parses"),
            [2.0, 0.0, 2.7]
        );
        assert!(parse_softirq_per_cpu(
            "cpu  1 2 3 4 5 6 7
"
        )
        .is_err());
        assert!(parse_softirq_per_cpu(
            "cpu0 1 2 3
"
        )
        .is_err());
        assert!(parse_softirq_per_cpu(
            "cpuX 1 2 3 4 5 6 7
"
        )
        .is_err());
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
