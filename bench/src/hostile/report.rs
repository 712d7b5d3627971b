//! What one hostile kind did to one receiver ([`Outcome`]), whether that
//! passes ([`Outcome::verdict`]), and the table of kinds × receivers.

use super::kinds::{Expect, Kind};

/// Which TCP received the legitimate stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    /// zerosplit's stack (header-only TCP over the datapath).
    Zerosplit,
    /// A kernel listener in the same namespace, no XDP attached.
    Linux,
}

/// What happened to one receiver during one kind.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Bytes the receiver delivered.
    pub received: usize,
    /// Bytes of the sender's stream.
    pub expected: usize,
    /// Delivered bytes that differ from the sender's.
    pub wrong_bytes: usize,
    /// Of those, bytes equal to the forged fill byte.
    pub forged_bytes: usize,
    /// Why the transfer did not finish, if it did not.
    pub error: Option<String>,
    /// Frames injected.
    pub injected: u64,
    /// The stack's drop counters that grew, by name (zerosplit only).
    pub drops: Vec<(String, u64)>,
    /// The receiver namespace's kernel counters that grew.
    pub kernel: Vec<(String, i64)>,
    /// Growth of the process's resident memory across the kind, bytes.
    pub rss_growth: i64,
    /// The bound that growth must stay under.
    pub rss_bound: i64,
    /// Connections the stack still held after the stream (zerosplit only).
    pub connections_after: usize,
    /// Stack-sends kinds: send completions that came while a TX descriptor
    /// still pointed at the memory (zerosplit only; must be 0).
    pub early_completions: u64,
    /// Stack-sends kinds: completions of work requests not outstanding
    /// (completed twice, or never posted; must be 0).
    pub double_completions: u64,
    /// Stack-sends kinds: ACKs whose data's descriptors were still out, so
    /// the completion waited (`tx_ack_before_completion`, zerosplit only).
    pub deferred: u64,
}

/// Pass or fail, and a short reason for the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The kind passed on this receiver.
    pub pass: bool,
    /// One cell of the table.
    pub text: String,
}

impl Outcome {
    /// Whether every byte arrived and only the sender's.
    pub fn byte_exact(&self) -> bool {
        self.error.is_none() && self.received == self.expected && self.wrong_bytes == 0
    }

    /// How much the stack's counters named by `expect` grew; `None` when
    /// the kind expects no count of the stack.
    pub fn counted(&self, expect: Expect) -> Option<u64> {
        match expect {
            Expect::Drop(names) | Expect::SenderDrop(names) => Some(
                self.drops
                    .iter()
                    .filter(|(n, _)| names.contains(&n.as_str()))
                    .map(|(_, v)| *v)
                    .sum(),
            ),
            // Passed to the kernel: its counters of the receiving
            // namespace.
            Expect::Kernel(names) => Some(
                self.kernel
                    .iter()
                    .filter(|(n, _)| names.contains(&n.as_str()))
                    .map(|(_, v)| u64::try_from(*v).unwrap_or(0))
                    .sum(),
            ),
            // Accepted or ignored, or dropped where nothing counts it.
            Expect::Either | Expect::KernelUncounted => None,
        }
    }

    /// The verdict for `kind` on `receiver`: the stream byte-exact, memory
    /// bounded, and (zerosplit) the drop counted under its reason.
    pub fn verdict(&self, kind: &Kind, receiver: Receiver) -> Verdict {
        let mut fails = Vec::new();
        if self.injected == 0 {
            fails.push("NOTHING INJECTED (the connection was not seen)".to_string());
        }
        if let Some(e) = &self.error {
            fails.push(format!("ERROR {e}"));
        } else if !self.byte_exact() {
            fails.push(format!(
                "CORRUPT {} bytes wrong ({} forged), {} of {} delivered",
                self.wrong_bytes, self.forged_bytes, self.received, self.expected
            ));
        }
        if self.rss_growth > self.rss_bound {
            fails.push(format!("RSS +{} MiB", self.rss_growth >> 20));
        }
        if self.early_completions > 0 {
            fails.push(format!(
                "EARLY {} sends completed with descriptors out",
                self.early_completions
            ));
        }
        if self.double_completions > 0 {
            fails.push(format!(
                "DOUBLE {} completions of no outstanding send",
                self.double_completions
            ));
        }
        let counted = self.counted(kind.expect);
        if receiver == Receiver::Zerosplit && counted == Some(0) {
            fails.push("UNCOUNTED".into());
        }
        let why = match receiver {
            Receiver::Zerosplit
                if matches!(kind.expect, Expect::Kernel(_) | Expect::KernelUncounted) =>
            {
                top(&self.kernel, "kernel ")
            }
            Receiver::Zerosplit => top_u(&self.drops),
            Receiver::Linux => top(&self.kernel, ""),
        };
        let why = match (receiver, self.connections_after) {
            (Receiver::Zerosplit, n) if n > 0 => format!("{why} conns_left={n}"),
            _ => why,
        };
        let why = if receiver == Receiver::Zerosplit && kind.expect.stack_sends() {
            format!("{why} tx_ack_before_completion={}", self.deferred)
        } else {
            why
        };
        if fails.is_empty() {
            Verdict {
                pass: true,
                text: format!("ok {why}"),
            }
        } else {
            Verdict {
                pass: false,
                text: format!("{} {why}", fails.join("; ")),
            }
        }
    }
}

fn top(v: &[(String, i64)], prefix: &str) -> String {
    let s: Vec<String> = v
        .iter()
        .take(2)
        .map(|(n, c)| format!("{prefix}{n}={c}"))
        .collect();
    if s.is_empty() {
        String::new()
    } else {
        format!("[{}]", s.join(" "))
    }
}

fn top_u(v: &[(String, u64)]) -> String {
    let s: Vec<String> = v.iter().take(2).map(|(n, c)| format!("{n}={c}")).collect();
    if s.is_empty() {
        String::new()
    } else {
        format!("[{}]", s.join(" "))
    }
}

/// One kind's row: its outcome on each receiver run.
#[derive(Debug, Clone)]
pub struct Row {
    /// The kind.
    pub kind: Kind,
    /// On zerosplit.
    pub zerosplit: Option<Outcome>,
    /// On Linux.
    pub linux: Option<Outcome>,
}

impl Row {
    /// The verdicts, zerosplit then Linux (`None` where not run).
    pub fn verdicts(&self) -> (Option<Verdict>, Option<Verdict>) {
        (
            self.zerosplit
                .as_ref()
                .map(|o| o.verdict(&self.kind, Receiver::Zerosplit)),
            self.linux
                .as_ref()
                .map(|o| o.verdict(&self.kind, Receiver::Linux)),
        )
    }
}

/// The table: one line per kind, `kind | zerosplit | Linux`.
pub fn table(rows: &[Row]) -> String {
    let width = rows.iter().map(|r| r.kind.name.len()).max().unwrap_or(4);
    let mut out = format!("{:width$} | {:60} | Linux\n", "kind", "zerosplit");
    out.push_str(&format!("{}\n", "-".repeat(width + 80)));
    let cell = |v: Option<Verdict>| v.map_or_else(|| "-".to_string(), |v| v.text);
    for r in rows {
        let (z, l) = r.verdicts();
        out.push_str(&format!(
            "{:width$} | {:60} | {}\n",
            r.kind.name,
            cell(z),
            cell(l)
        ));
    }
    let fails = |pick: fn(&Row) -> Option<Verdict>| {
        rows.iter()
            .filter(|r| pick(r).is_some_and(|v| !v.pass))
            .count()
    };
    out.push_str(&format!(
        "{} kinds; failing: zerosplit {}, Linux {}\n",
        rows.len(),
        fails(|r| r.verdicts().0),
        fails(|r| r.verdicts().1)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile::KINDS;

    fn kind(name: &str) -> Kind {
        *KINDS.iter().find(|k| k.name == name).expect(name)
    }

    /// A byte-exact zerosplit outcome whose kernel counters grew by `kernel`.
    fn clean(kernel: &[(&str, i64)]) -> Outcome {
        Outcome {
            received: 100,
            expected: 100,
            injected: 80,
            rss_bound: 1 << 20,
            kernel: kernel.iter().map(|(n, v)| ((*n).to_string(), *v)).collect(),
            ..Outcome::default()
        }
    }

    #[test]
    fn a_kind_passed_to_the_kernel_needs_the_kernels_counter() {
        let k = kind("ip_ihl_4");
        let counted = clean(&[("Ip.InHdrErrors", 80)]).verdict(&k, Receiver::Zerosplit);
        assert!(counted.pass, "{}", counted.text);
        // Another counter moving (a reset at the end of the stream) is not
        // the kernel counting the kind.
        let other = clean(&[("Tcp.OutRsts", 1)]).verdict(&k, Receiver::Zerosplit);
        assert!(
            !other.pass && other.text.contains("UNCOUNTED"),
            "{}",
            other.text
        );
        // The kernel's own counters are not required of the Linux receiver.
        assert!(clean(&[]).verdict(&k, Receiver::Linux).pass);
    }

    #[test]
    fn only_accepted_kinds_and_the_uncounted_one_pass_without_a_counter() {
        let uncounted: Vec<&str> = KINDS
            .iter()
            .filter(|k| clean(&[]).verdict(k, Receiver::Zerosplit).pass)
            .map(|k| k.name)
            .collect();
        let either = KINDS.iter().filter(|k| k.expect == Expect::Either).count();
        assert_eq!(uncounted.len(), either + 1, "{uncounted:?}");
        assert!(uncounted.contains(&"frame_cut_in_tcp"), "{uncounted:?}");
    }
}
