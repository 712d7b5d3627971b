//! The `poll` section of the report: what each idle policy (`threads.poll`
//! = spin, adaptive, sleep) costs and gives. Per mode, on fresh veth pairs
//! at MTU 1500 with zerosplit run-to-completion:
//!
//! - idle CPU: a zerosplit stack with a listener and no traffic for
//!   `idle_seconds`, its process CPU time as a fraction of one core;
//! - goodput of a zs-zs-tcp transfer and the ping-pong p50/p99 (both ends
//!   in that mode), measured exactly like the main table's rows.
//!
//! Targets ([`targets`]): the default mode's idle stack ≤ 2 % of a core,
//! adaptive goodput ≥ 0.95× spin's.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use zerosplit_lab::Offloads;

use super::measure::{measure, peer_failure, Outcome, Path, READY_TIMEOUT};
use super::options::SuiteOptions;
use super::peer::{PeerProcess, PeerSpec, PollMode, Role};
use super::report::{PollRow, PollSection, Target};
use super::scenario::{Case, Family, Scenario, ThreadMode};
use super::stats::Summary;

/// MTU of the section's measurements.
const MTU: u32 = 1500;

/// Most a stack's idle CPU may be, in percent of a core (the default
/// mode's target; percent, so the targets table's two decimals show it).
pub const IDLE_CPU_GOAL_PERCENT: f64 = 2.0;

/// Least adaptive goodput may be, as a fraction of spin's.
pub const ADAPTIVE_GOODPUT_GOAL: f64 = 0.95;

/// Rounds per mode: one in `--quick` (the section stays short), else the
/// suite's rounds.
fn rounds(opts: &SuiteOptions) -> usize {
    if opts.quick {
        1
    } else {
        opts.runs
    }
}

/// Measures every mode, in rounds alternating the modes.
pub fn run(opts: &SuiteOptions) -> PollSection {
    let mut samples: Vec<Samples> = PollMode::ALL.iter().map(|_| Samples::default()).collect();
    for _ in 0..rounds(opts) {
        for (i, &mode) in PollMode::ALL.iter().enumerate() {
            if opts
                .stop
                .as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
            {
                break;
            }
            samples[i].take(mode, opts);
        }
    }
    PollSection {
        mtu: MTU,
        idle_seconds: opts.idle_seconds,
        default_mode: opts.poll.name().into(),
        rows: PollMode::ALL
            .iter()
            .zip(samples)
            .map(|(m, s)| s.row(*m))
            .collect(),
    }
}

/// One mode's samples over the rounds.
#[derive(Debug, Default)]
struct Samples {
    idle: Vec<f64>,
    goodput: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    notes: Vec<String>,
}

impl Samples {
    fn take(&mut self, mode: PollMode, opts: &SuiteOptions) {
        match idle_cpu(mode, opts) {
            Ok(f) => self.idle.push(f),
            Err(e) => self.notes.push(format!("idle: {e}")),
        }
        let case = Case {
            scenario: Scenario::ZsZsTcp,
            mtu: MTU,
            threads: Some(ThreadMode::Rtc),
            family: Family::Ipv4,
        };
        let mut o = opts.clone();
        o.poll = mode;
        match measure(&case, &o) {
            Outcome::Measured(s) => {
                self.goodput.push(s.goodput_gbps);
                if let Some(l) = &s.latency {
                    self.p50.push(l.p50_us);
                    self.p99.push(l.p99_us);
                }
                self.notes.extend(s.notes.iter().cloned());
            }
            Outcome::Failed(e) | Outcome::Unavailable(e) => {
                self.notes.push(format!("transfer: {e}"));
            }
        }
    }

    fn row(self, mode: PollMode) -> PollRow {
        PollRow {
            mode: mode.name().into(),
            idle_cpu_fraction: Summary::of(&self.idle),
            goodput_gbps: Summary::of(&self.goodput),
            p50_us: Summary::of(&self.p50),
            p99_us: Summary::of(&self.p99),
            notes: self.notes,
        }
    }
}

/// The idle stack's CPU fraction in `mode`, on a fresh veth pair.
fn idle_cpu(mode: PollMode, opts: &SuiteOptions) -> Result<f64, String> {
    let path = Path::build(MTU, Offloads::TxChecksumOff, None)?;
    let (a, _) = path.ends();
    let spec = PeerSpec {
        role: Role::Idle,
        stack: "tcp",
        iface: a.ifname.clone(),
        addr: SocketAddr::new(a.addr.into(), 5303),
        mtu: MTU,
        threads: ThreadMode::Rtc,
        poll: mode,
        bytes: 0,
        seconds: opts.idle_seconds,
        rounds: 0,
        message: opts.message,
        flows: 1,
        queues: 1,
        metrics: opts.metrics,
        daemon: None,
    };
    let mut p =
        PeerProcess::start(&opts.peer_program, &a.netns, &spec).map_err(|e| e.to_string())?;
    if let Some(early) = p.wait_ready(READY_TIMEOUT).map_err(|e| e.to_string())? {
        return Err(early
            .error
            .unwrap_or_else(|| "exited before listening".into()));
    }
    let r = p
        .finish(Duration::from_secs_f64(opts.idle_seconds + 20.0))
        .map_err(|e| e.to_string())?;
    if let Some(Outcome::Failed(e) | Outcome::Unavailable(e)) = peer_failure(&r) {
        return Err(e);
    }
    if r.seconds <= 0.0 {
        return Err("the idle peer measured no time".into());
    }
    Ok(r.cpu_s / r.seconds)
}

fn median(s: Option<Summary>) -> Option<f64> {
    s.map(|s| s.median)
}

/// The section's targets: the default mode's idle CPU ≤ 2 % of a core;
/// adaptive goodput ≥ 0.95× spin's.
pub fn targets(section: &PollSection) -> Vec<Target> {
    let row = |m: &str| section.rows.iter().find(|r| r.mode == m);
    let idle = row(&section.default_mode)
        .and_then(|r| median(r.idle_cpu_fraction))
        .map(|f| f * 100.0);
    let good = |m: &str| row(m).and_then(|r| median(r.goodput_gbps));
    let ratio = good("adaptive")
        .zip(good("spin"))
        .filter(|(_, s)| *s > 0.0)
        .map(|(a, s)| a / s);
    vec![
        Target::judged(
            format!("idle stack CPU, % of a core ({})", section.default_mode),
            idle,
            IDLE_CPU_GOAL_PERCENT,
            true,
        ),
        Target::judged(
            format!("adaptive goodput ÷ spin goodput, MTU {}", section.mtu),
            ratio,
            ADAPTIVE_GOODPUT_GOAL,
            false,
        ),
    ]
}

/// The section as text, printed after the main table.
pub fn render(section: &PollSection) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\npoll modes (threads.poll; zs-zs-tcp/{}/rtc, main rows ran {}; idle = a listening stack with no traffic for {} s):",
        section.mtu, section.default_mode, section.idle_seconds
    );
    let _ = writeln!(
        out,
        "  {:<9} {:>14} {:>8} {:>8} {:>8}",
        "mode", "idle % of core", "Gbit/s", "p50 µs", "p99 µs"
    );
    let fmt = |s: Option<Summary>, scale: f64, prec: usize| {
        s.map_or("-".into(), |s| format!("{:.*}", prec, s.median * scale))
    };
    for r in &section.rows {
        let _ = writeln!(
            out,
            "  {:<9} {:>14} {:>8} {:>8} {:>8}{}",
            r.mode,
            fmt(r.idle_cpu_fraction, 100.0, 2),
            fmt(r.goodput_gbps, 1.0, 2),
            fmt(r.p50_us, 1.0, 1),
            fmt(r.p99_us, 1.0, 1),
            if r.notes.is_empty() {
                String::new()
            } else {
                format!("  [{}]", r.notes.join("; "))
            }
        );
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn s(v: f64) -> Option<Summary> {
        Summary::of(&[v])
    }

    pub(crate) fn section(idle: f64, spin: f64, adaptive: f64) -> PollSection {
        let row = |mode: &str, idle_cpu: f64, goodput: f64| PollRow {
            mode: mode.into(),
            idle_cpu_fraction: s(idle_cpu),
            goodput_gbps: s(goodput),
            p50_us: s(20.0),
            p99_us: s(40.0),
            notes: Vec::new(),
        };
        PollSection {
            mtu: 1500,
            idle_seconds: 1.0,
            default_mode: "adaptive".into(),
            rows: vec![
                row("spin", 1.0, spin),
                row("adaptive", idle, adaptive),
                row("sleep", 0.001, adaptive * 0.9),
            ],
        }
    }

    #[test]
    fn targets_judge_the_default_modes_idle_cpu_and_adaptive_against_spin() {
        let t = targets(&section(0.01, 5.0, 4.9));
        assert_eq!(t.len(), 2);
        assert!((t[0].value.expect("idle") - 1.0).abs() < 1e-9);
        assert_eq!(t[0].met, Some(true));
        assert!(t[0].at_most);
        assert!((t[1].value.expect("ratio") - 0.98).abs() < 1e-9);
        assert_eq!(t[1].met, Some(true));
        let t = targets(&section(0.05, 5.0, 4.0));
        assert_eq!(t[0].met, Some(false));
        assert_eq!(t[1].met, Some(false));
    }

    #[test]
    fn a_missing_figure_is_not_measured_rather_than_met() {
        let mut sec = section(0.01, 5.0, 4.9);
        sec.rows[0].goodput_gbps = None;
        sec.rows[1].idle_cpu_fraction = None;
        let t = targets(&sec);
        assert_eq!(t[0].met, None);
        assert_eq!(t[1].met, None);
    }

    #[test]
    fn the_text_shows_each_mode_with_idle_cpu_in_percent() {
        let text = render(&section(0.0123, 5.0, 4.9));
        let adaptive = text
            .lines()
            .find(|l| l.trim_start().starts_with("adaptive"))
            .expect("adaptive row");
        assert!(adaptive.contains("1.23"), "{adaptive}");
        assert!(adaptive.contains("4.90"), "{adaptive}");
        assert!(text.contains("spin") && text.contains("sleep"));
    }
}
