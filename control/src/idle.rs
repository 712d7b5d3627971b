//! Busy-polling that gives the core away when idle.
//!
//! The stack's loops poll without blocking. On a machine with cores to
//! spare that costs nothing; when busy threads outnumber cores (dedicated
//! mode on two cores, both ends of a test on one machine), a loop that
//! spins on an empty ring takes the core from the thread that would fill
//! it. After [`SPINS`] idle iterations in a row a loop yields its time
//! slice (`sched_yield`), which returns at once when nothing else wants
//! the core.

/// Idle iterations spun before yielding.
pub(crate) const SPINS: u32 = 64;

/// Counts idle iterations of one loop.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    idle: u32,
}

impl Backoff {
    /// Called once per iteration with the work it did.
    pub(crate) fn after(&mut self, work: usize) {
        if work > 0 {
            self.idle = 0;
        } else if self.idle < SPINS {
            self.idle += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }

    /// Whether the loop has been idle long enough to yield.
    #[cfg(test)]
    fn yielding(&self) -> bool {
        self.idle >= SPINS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yields_only_after_enough_idle_iterations_and_resets_on_work() {
        let mut b = Backoff::default();
        for _ in 0..SPINS - 1 {
            b.after(0);
        }
        assert!(!b.yielding());
        b.after(0);
        assert!(b.yielding());
        b.after(3);
        assert!(!b.yielding());
    }
}
