//! No silent fallback: a TCP `listen` or `connect` the interface could
//! serve that is left to the kernel (an IPv6 address, a dual-stack socket
//! on an interface with IPv6, TCP Fast Open) is said on stderr once per
//! reason and counted; the connections over zerosplit and over the kernel
//! are reported at exit. Under `--strict` such calls fail with an errno
//! instead, so a benchmark never measures the kernel by accident.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::cabi::real;
pub(crate) use crate::family::Reason;
use crate::layer::CResult;
use crate::log::log_line;

/// Reasons said so far (bits of [`Reason::bit`]).
static NOTED: AtomicU8 = AtomicU8::new(0);
/// Connections zerosplit carried (connects claimed, connections accepted).
static OVER_ZEROSPLIT: AtomicU64 = AtomicU64::new(0);
/// Connections of calls left to the kernel that the interface could have
/// served (connects, connections accepted on such listeners).
static OVER_KERNEL: AtomicU64 = AtomicU64::new(0);
/// The process that armed the exit report (a forked child's copy of the
/// counts is not its own).
static ARMED_BY: AtomicU32 = AtomicU32::new(0);
static REPORTED: AtomicBool = AtomicBool::new(false);
/// The process the counts are of ([`own_counts`]).
static COUNTS_OF: AtomicU32 = AtomicU32::new(0);

/// A call (`what`, for the note) the interface could serve is left to the
/// kernel for `reason`: under `strict` it fails with the reason's errno;
/// otherwise the kernel does it. Either way said once per reason.
///
/// # Errors
/// The reason's errno, under `strict`.
pub(crate) fn left_to_kernel(reason: Reason, what: &str, strict: bool) -> CResult<()> {
    let first = NOTED.fetch_or(reason.bit(), Ordering::AcqRel) & reason.bit() == 0;
    if first {
        let verdict = if strict {
            "refused (--strict)"
        } else {
            "left to the kernel"
        };
        log_line(&format!("{verdict}: {what}: {}", reason.why()));
    }
    if strict {
        return Err(reason.errno());
    }
    arm_report();
    Ok(())
}

/// A connection over zerosplit (a connect claimed, or accepted).
pub(crate) fn over_zerosplit() {
    own_counts();
    OVER_ZEROSPLIT.fetch_add(1, Ordering::Relaxed);
}

/// A connection over the kernel that the interface could have carried.
pub(crate) fn over_kernel() {
    own_counts();
    OVER_KERNEL.fetch_add(1, Ordering::Relaxed);
}

/// The counts are this process's: a forked child starts from zero (its
/// parent's connections are its parent's to report), and reports its own.
fn own_counts() {
    let pid = std::process::id();
    if COUNTS_OF.swap(pid, Ordering::AcqRel) != pid {
        OVER_ZEROSPLIT.store(0, Ordering::Relaxed);
        OVER_KERNEL.store(0, Ordering::Relaxed);
        REPORTED.store(false, Ordering::Release);
    }
}

/// The counts, as the exit report says them.
pub(crate) fn summary() -> String {
    format!(
        "connections: {} over zerosplit, {} over the kernel that the interface could have carried",
        OVER_ZEROSPLIT.load(Ordering::Relaxed),
        OVER_KERNEL.load(Ordering::Relaxed)
    )
}

/// Says [`summary`] on stderr, once per process.
pub(crate) fn report() {
    if !REPORTED.swap(true, Ordering::AcqRel) {
        log_line(&format!("at exit: {}", summary()));
    }
}

/// Reports the counts at exit, in this process (armed once, at the first
/// call left to the kernel).
fn arm_report() {
    let pid = std::process::id();
    if ARMED_BY.swap(pid, Ordering::AcqRel) != pid {
        real::at_exit(report_at_exit);
    }
}

extern "C" fn report_at_exit() {
    if ARMED_BY.load(Ordering::Acquire) == std::process::id() {
        report();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child's counts start from zero: what its parent counted
    /// before the fork is the parent's to report.
    #[test]
    fn the_counts_are_the_counting_process_own() {
        over_zerosplit();
        over_kernel();
        assert!(summary().starts_with("connections: "), "{}", summary());
        // As if these counts were another process's (the parent's, seen
        // from a child after fork).
        COUNTS_OF.store(std::process::id().wrapping_add(1), Ordering::Release);
        over_zerosplit();
        assert_eq!(
            summary(),
            "connections: 1 over zerosplit, 0 over the kernel that the interface could have carried"
        );
    }
}
