//! Virtual time. Transports never read a clock: every call that needs the
//! time takes an [`Instant`], which the caller produces (the datapath from a
//! monotonic clock, the simulator from its virtual clock).

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an arbitrary epoch chosen by the
/// caller. Only differences between instants of the same epoch mean anything.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// An instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Instant(micros * 1_000)
    }

    /// An instant `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis * 1_000_000)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, or `None` on overflow.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let nanos = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(nanos).map(Instant)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the far future instead of overflowing.
    fn add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant(u64::MAX))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturates at zero when `rhs` is later than `self`.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}ms", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let a = Instant::from_millis(5);
        let b = Instant::from_millis(7);
        assert_eq!(b - a, Duration::from_millis(2));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(
            Instant::from_nanos(u64::MAX - 1) + Duration::from_secs(1),
            Instant::from_nanos(u64::MAX)
        );
        assert_eq!(a + Duration::from_micros(3), Instant::from_nanos(5_003_000));
    }
}
