//! What a poll loop does when a poll found no work: the idle policy.
//!
//! Three modes ([`PollMode`], config `threads.poll`):
//!
//! - **spin**: never sleep. After [`SPINS`] idle iterations in a row the
//!   loop yields its time slice (`sched_yield`, which returns at once when
//!   nothing else wants the core), so a spinning loop does not starve the
//!   thread that would give it work when threads outnumber cores. Lowest
//!   latency; an idle stack uses a whole core.
//! - **adaptive** (the default): spin as above while work keeps coming;
//!   once the loop has found nothing for [`PollConfig::idle_budget`], sleep
//!   until a socket has something to receive, the other thread signals, or
//!   the transport's next timer is due. Under load the gaps between
//!   packets are far shorter than the budget, so the loop never sleeps and
//!   goodput is spin's; an idle stack sleeps and costs next to nothing.
//! - **sleep**: sleep as soon as one poll finds nothing. Least CPU; every
//!   idle gap costs a wakeup (tens of microseconds on a loaded machine).
//!
//! One sleep lasts at most [`MAX_SLEEP`]: in run-to-completion mode the
//! application calls `poll()` itself, so a blocking poll hands control back
//! within that bound even when nothing arrives. The policy is pure (time
//! is a parameter); the loops do the sleeping (`tcp/mod.rs`,
//! `tcp/driver.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use transports::Instant;

/// Idle iterations spun before yielding (spin mode, and adaptive mode
/// within its idle budget).
pub(crate) const SPINS: u32 = 64;

/// Longest single sleep: a blocking `poll()` returns to its caller within
/// this (plus scheduling delay) even when nothing arrives and no timer is
/// due.
pub const MAX_SLEEP: Duration = Duration::from_millis(10);

/// Longest single sleep of a loop no application waits on (the dedicated
/// transport thread): whatever gives it work wakes it (the datapath thread
/// unparks it after handing it input, shutdown unparks it) and its own
/// timers bound the sleep, so the cap is only a safety net. Waking every
/// [`MAX_SLEEP`] instead cost an idle stack in dedicated mode about 1 % of
/// a core.
pub const MAX_SLEEP_UNWATCHED: Duration = Duration::from_millis(100);

/// Smallest and largest `threads.idle_budget` the configuration accepts.
pub const IDLE_BUDGET_RANGE: (Duration, Duration) =
    (Duration::from_micros(1), Duration::from_millis(100));

/// How a poll loop waits for work (`threads.poll`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PollMode {
    /// Busy-poll (yielding the core after a run of idle polls); never sleep.
    Spin,
    /// Busy-poll while there is work; sleep after the idle budget.
    #[default]
    Adaptive,
    /// Sleep as soon as a poll finds nothing.
    Sleep,
}

impl PollMode {
    /// Every mode, in the order the bench reports them.
    pub const ALL: [PollMode; 3] = [PollMode::Spin, PollMode::Adaptive, PollMode::Sleep];

    /// The configuration spelling (`"spin"`, `"adaptive"`, `"sleep"`).
    pub fn name(self) -> &'static str {
        match self {
            PollMode::Spin => "spin",
            PollMode::Adaptive => "adaptive",
            PollMode::Sleep => "sleep",
        }
    }
}

impl std::str::FromStr for PollMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PollMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("{s:?} is not a poll mode (spin, adaptive or sleep)"))
    }
}

impl std::fmt::Display for PollMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The idle policy of a stack's loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollConfig {
    /// Spin, adaptive or sleep.
    pub mode: PollMode,
    /// Adaptive mode: how long a loop finds no work before it sleeps.
    pub idle_budget: Duration,
    /// Longest single sleep of every loop; `None` (the default and what
    /// the configuration file gives): [`MAX_SLEEP`] for a loop an
    /// application waits on, [`MAX_SLEEP_UNWATCHED`] for the dedicated
    /// transport thread. Tests raise it far above the latency they
    /// require, so a loop that is not woken by what arrives shows.
    pub max_sleep: Option<Duration>,
}

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig {
            mode: PollMode::Adaptive,
            idle_budget: Duration::from_micros(50),
            max_sleep: None,
        }
    }
}

/// How often a loop slept and for how long in total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdleCounters {
    /// Sleeps (each ended by a wakeup, a due timer or [`MAX_SLEEP`]).
    pub sleeps: u64,
    /// Nanoseconds spent asleep.
    pub slept_ns: u64,
}

/// What the loop does next (public for the socket shim's polling thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// The poll did work: poll again at once.
    Busy,
    /// Idle: spin once (a pause hint) and poll again.
    Spin,
    /// Idle for a while: give the time slice away, then poll again.
    Yield,
    /// Sleep at most this long (until woken).
    Sleep(Duration),
}

impl Idle {
    /// Carries out a non-sleeping decision (a sleep is the caller's).
    pub fn pause(self) {
        match self {
            Idle::Spin => std::hint::spin_loop(),
            Idle::Yield => std::thread::yield_now(),
            Idle::Busy | Idle::Sleep(_) => {}
        }
    }
}

/// The idle state of one loop (public for the socket shim's polling
/// thread).
#[derive(Debug, Clone)]
pub struct IdlePolicy {
    config: PollConfig,
    /// Longest single sleep ([`MAX_SLEEP`] unless said otherwise).
    max_sleep: Duration,
    /// When the current run of idle polls began.
    idle_since: Option<Instant>,
    /// Idle polls in the current run (saturating).
    idle_polls: u32,
    counters: IdleCounters,
}

impl IdlePolicy {
    /// The policy of `config`, not idle yet.
    pub fn new(config: PollConfig) -> Self {
        IdlePolicy {
            config,
            max_sleep: config.max_sleep.unwrap_or(MAX_SLEEP),
            idle_since: None,
            idle_polls: 0,
            counters: IdleCounters::default(),
        }
    }

    /// The same policy for a loop no application waits on, whose sleeps
    /// may last up to [`MAX_SLEEP_UNWATCHED`].
    pub(crate) fn unwatched(config: PollConfig) -> Self {
        IdlePolicy {
            max_sleep: config.max_sleep.unwrap_or(MAX_SLEEP_UNWATCHED),
            ..Self::new(config)
        }
    }

    /// How long a wait polls before it sleeps: all of it (spin), the idle
    /// budget (adaptive), not at all (sleep).
    pub fn spin_budget(&self) -> Duration {
        match self.config.mode {
            PollMode::Spin => Duration::MAX,
            PollMode::Adaptive => self.config.idle_budget,
            PollMode::Sleep => Duration::ZERO,
        }
    }

    /// Decides after a poll at `now` that did `work`; `deadline` gives the
    /// transport's next timer (a sleep never passes it; one already due
    /// means no sleep), asked only when the loop would sleep.
    pub fn after(
        &mut self,
        work: usize,
        now: Instant,
        deadline: impl FnOnce() -> Option<Instant>,
    ) -> Idle {
        if work > 0 {
            self.busy();
            return Idle::Busy;
        }
        let since = *self.idle_since.get_or_insert(now);
        self.idle_polls = self.idle_polls.saturating_add(1);
        let spin = if self.idle_polls <= SPINS {
            Idle::Spin
        } else {
            Idle::Yield
        };
        let sleep = match self.config.mode {
            PollMode::Spin => false,
            PollMode::Adaptive => now.saturating_duration_since(since) >= self.config.idle_budget,
            PollMode::Sleep => true,
        };
        if !sleep {
            return spin;
        }
        let limit = match deadline() {
            Some(d) => d.saturating_duration_since(now).min(self.max_sleep),
            None => self.max_sleep,
        };
        if limit.is_zero() {
            spin
        } else {
            Idle::Sleep(limit)
        }
    }

    /// After a pass at `now` that did `work`: spins, yields, or sleeps
    /// with `wait` (given the longest sleep; it blocks until woken or that
    /// long), counting the sleep. Returns whether it slept: the loop then
    /// makes another pass and reports it with [`Self::woke`].
    pub(crate) fn settle(
        &mut self,
        work: usize,
        now: Instant,
        deadline: impl FnOnce() -> Option<Instant>,
        wait: impl FnOnce(Duration) -> std::io::Result<bool>,
    ) -> bool {
        match self.after(work, now, deadline) {
            Idle::Sleep(limit) => {
                let start = std::time::Instant::now();
                if let Err(e) = wait(limit) {
                    log::warn!("sleeping on the datapath's sockets: {e}");
                }
                self.slept(start.elapsed());
                true
            }
            other => {
                other.pause();
                false
            }
        }
    }

    /// The pass after a sleep did `work`.
    pub(crate) fn woke(&mut self, work: usize) {
        if work > 0 {
            self.busy();
        }
    }

    /// Work came (after a sleep): the next idle run starts afresh.
    pub fn busy(&mut self) {
        self.idle_since = None;
        self.idle_polls = 0;
    }

    /// Records a sleep of `slept`.
    pub fn slept(&mut self, slept: Duration) {
        self.counters.sleeps += 1;
        self.counters.slept_ns += slept.as_nanos() as u64;
    }

    pub(crate) fn counters(&self) -> IdleCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_nanos(us * 1_000)
    }

    fn policy(mode: PollMode, budget_us: u64) -> IdlePolicy {
        IdlePolicy::new(PollConfig {
            mode,
            idle_budget: Duration::from_micros(budget_us),
            max_sleep: None,
        })
    }

    #[test]
    fn spin_never_sleeps_and_yields_only_after_enough_idle_polls() {
        let mut p = policy(PollMode::Spin, 50);
        for i in 0..SPINS {
            assert_eq!(p.after(0, at(u64::from(i) * 1000), || None), Idle::Spin);
        }
        assert_eq!(p.after(0, at(10_000_000), || None), Idle::Yield);
        assert_eq!(p.after(3, at(10_000_001), || None), Idle::Busy);
        assert_eq!(p.after(0, at(10_000_002), || None), Idle::Spin);
    }

    #[test]
    fn adaptive_sleeps_only_after_the_idle_budget_and_work_resets_it() {
        let mut p = policy(PollMode::Adaptive, 50);
        assert_eq!(p.after(0, at(100), || None), Idle::Spin);
        assert_eq!(p.after(0, at(149), || None), Idle::Spin);
        assert_eq!(p.after(0, at(150), || None), Idle::Sleep(MAX_SLEEP));
        // Work restarts the budget.
        assert_eq!(p.after(1, at(151), || None), Idle::Busy);
        assert_eq!(p.after(0, at(160), || None), Idle::Spin);
        assert_eq!(p.after(0, at(209), || None), Idle::Spin);
        assert_eq!(p.after(0, at(210), || None), Idle::Sleep(MAX_SLEEP));
        // So does a wakeup that brought work.
        p.busy();
        assert_eq!(p.after(0, at(300), || None), Idle::Spin);
    }

    #[test]
    fn an_unwatched_loop_sleeps_longer_but_never_past_its_next_timer() {
        let config = policy(PollMode::Sleep, 50).config;
        let mut p = IdlePolicy::unwatched(config);
        assert_eq!(p.after(0, at(5), || None), Idle::Sleep(MAX_SLEEP_UNWATCHED));
        assert_eq!(
            p.after(0, at(10), || Some(at(10_010))),
            Idle::Sleep(Duration::from_millis(10))
        );
        assert!(MAX_SLEEP_UNWATCHED > MAX_SLEEP);
    }

    #[test]
    fn a_configured_cap_replaces_both_defaults() {
        let config = PollConfig {
            max_sleep: Some(Duration::from_secs(3)),
            ..policy(PollMode::Sleep, 50).config
        };
        let cap = Idle::Sleep(Duration::from_secs(3));
        assert_eq!(IdlePolicy::new(config).after(0, at(5), || None), cap);
        assert_eq!(IdlePolicy::unwatched(config).after(0, at(5), || None), cap);
    }

    #[test]
    fn sleep_mode_sleeps_on_the_first_empty_poll() {
        let mut p = policy(PollMode::Sleep, 50);
        assert_eq!(p.after(0, at(5), || None), Idle::Sleep(MAX_SLEEP));
        assert_eq!(p.after(2, at(6), || None), Idle::Busy);
    }

    #[test]
    fn a_wait_spins_for_what_the_mode_allows() {
        assert_eq!(policy(PollMode::Spin, 50).spin_budget(), Duration::MAX);
        assert_eq!(
            policy(PollMode::Adaptive, 50).spin_budget(),
            Duration::from_micros(50)
        );
        assert_eq!(policy(PollMode::Sleep, 50).spin_budget(), Duration::ZERO);
    }

    #[test]
    fn a_sleep_ends_no_later_than_the_next_timer_and_a_due_timer_prevents_it() {
        let mut p = policy(PollMode::Sleep, 50);
        assert_eq!(
            p.after(0, at(1_000), || Some(at(1_300))),
            Idle::Sleep(Duration::from_micros(300))
        );
        assert_eq!(
            p.after(0, at(1_000), || Some(at(900_000))),
            Idle::Sleep(MAX_SLEEP)
        );
        assert_eq!(p.after(0, at(1_000), || Some(at(1_000))), Idle::Spin);
        assert_eq!(p.after(0, at(1_000), || Some(at(10))), Idle::Spin);
    }

    #[test]
    fn sleeps_are_counted_with_their_length() {
        let mut p = policy(PollMode::Adaptive, 50);
        p.slept(Duration::from_micros(30));
        p.slept(Duration::from_micros(70));
        assert_eq!(
            p.counters(),
            IdleCounters {
                sleeps: 2,
                slept_ns: 100_000
            }
        );
    }

    #[test]
    fn settle_waits_only_when_the_policy_sleeps_and_counts_the_sleep() {
        let mut p = policy(PollMode::Sleep, 50);
        let mut asked = None;
        let slept = p.settle(
            0,
            at(1_000),
            || Some(at(1_400)),
            |limit| {
                asked = Some(limit);
                Ok(true)
            },
        );
        assert!(slept);
        assert_eq!(asked, Some(Duration::from_micros(400)));
        assert_eq!(p.counters().sleeps, 1);
        p.woke(1);
        let mut spin = policy(PollMode::Spin, 50);
        let slept = spin.settle(0, at(1_000), || None, |_| panic!("spin never waits"));
        assert!(!slept);
        assert_eq!(spin.counters().sleeps, 0);
        // A failed wait is logged and counted as a (short) sleep.
        let slept = p.settle(
            0,
            at(2_000),
            || None,
            |_| Err(std::io::Error::other("ppoll")),
        );
        assert!(slept);
        assert_eq!(p.counters().sleeps, 2);
    }

    #[test]
    fn modes_parse_from_and_print_as_their_config_names() {
        for m in PollMode::ALL {
            assert_eq!(m.name().parse::<PollMode>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
        }
        let e = "busy".parse::<PollMode>().unwrap_err();
        assert!(e.contains("spin, adaptive or sleep"), "{e}");
    }
}
