//! RFC 6937 Proportional Rate Reduction: how much a sender in fast
//! recovery may send on each ACK.
//!
//! Without it (RFC 6675 alone) the window drops to `ssthresh` at once and
//! the pipe, which leaves out every segment marked lost, can fall far
//! below it: after a slow-start overshoot that lost a few hundred segments
//! the sender sent the retransmissions and new data in one burst, into the
//! queue that had just overflowed (on veth: 2.5 × Linux's drops at the
//! queue and 2.3 × its retransmissions, `zerosplit cc-lab`). PRR spreads the reduction
//! over the recovery's round trip instead: while the pipe is above
//! `ssthresh` it sends `ssthresh / RecoverFS` of what was delivered, and
//! below it grows back by slow start bounded by what was delivered
//! (PRR-SSRB), as Linux does (`tcp_cwnd_reduction`).
//!
//! Model-based controllers that set their own window through recovery
//! (BBR's packet conservation) opt out with
//! [`crate::cc::Controller::governs_recovery`], as Linux's BBR does.

/// The per-recovery counters of RFC 6937 section 3, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Prr {
    /// `RecoverFS`: bytes outstanding when recovery began.
    recover_fs: u64,
    /// `prr_delivered`: bytes delivered (ACKed or SACKed) since.
    delivered: u64,
    /// `prr_out`: bytes sent since.
    out: u64,
    /// `sndcnt` of the latest ACK, less what was sent since.
    budget: u64,
}

impl Prr {
    /// Recovery begins with `recover_fs` bytes outstanding.
    pub(super) fn start(recover_fs: u64) -> Prr {
        Prr {
            recover_fs: recover_fs.max(1),
            delivered: 0,
            out: 0,
            budget: 0,
        }
    }

    /// An ACK delivered `bytes` (newly acknowledged plus newly SACKed),
    /// leaving `pipe` in the network; the controller reduced its window to
    /// `ssthresh`. Sets what may leave until the next ACK (`sndcnt`).
    pub(super) fn on_ack(&mut self, bytes: u64, pipe: u64, ssthresh: u64, mss: u64) {
        self.delivered = self.delivered.saturating_add(bytes);
        self.budget = if pipe > ssthresh {
            // Proportional: prr_delivered × ssthresh / RecoverFS, rounded
            // up, less what was sent.
            let due = (u128::from(self.delivered) * u128::from(ssthresh))
                .div_ceil(u128::from(self.recover_fs));
            u64::try_from(due)
                .unwrap_or(u64::MAX)
                .saturating_sub(self.out)
        } else {
            // PRR-SSRB: back up to ssthresh, at most one segment more than
            // was delivered.
            let limit = self
                .delivered
                .saturating_sub(self.out)
                .max(bytes)
                .saturating_add(mss);
            (ssthresh - pipe).min(limit)
        };
    }

    /// `bytes` left (a retransmission or new data).
    pub(super) fn on_sent(&mut self, bytes: u64) {
        self.out = self.out.saturating_add(bytes);
        self.budget = self.budget.saturating_sub(bytes);
    }

    /// Bytes that may still leave before the next ACK.
    pub(super) fn allowance(&self) -> u64 {
        self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    /// Sends what each ACK allows, one segment at a time.
    fn send_all(p: &mut Prr) -> u64 {
        let mut n = 0;
        while p.allowance() >= MSS {
            p.on_sent(MSS);
            n += MSS;
        }
        n
    }

    #[test]
    fn above_ssthresh_it_sends_in_proportion_to_what_was_delivered() {
        // RFC 6937's example: RecoverFS 20 segments, ssthresh 10 (Reno's
        // half): one segment out for every two delivered.
        let mut p = Prr::start(20 * MSS);
        let (mut sent, mut pipe) = (0, 19 * MSS);
        for _ in 0..10 {
            pipe -= MSS;
            p.on_ack(MSS, pipe, 10 * MSS, MSS);
            let n = send_all(&mut p);
            (sent, pipe) = (sent + n, pipe + n);
        }
        assert_eq!(sent, 5 * MSS);
    }

    #[test]
    fn cubic_s_reduction_sends_seven_for_ten() {
        let mut p = Prr::start(100 * MSS);
        p.on_ack(10 * MSS, 90 * MSS, 70 * MSS, MSS);
        assert_eq!(send_all(&mut p), 7 * MSS);
    }

    #[test]
    fn below_ssthresh_it_slow_starts_bounded_by_delivery() {
        // After heavy loss the pipe is far below ssthresh: no burst up to
        // it, at most what was delivered plus one segment.
        let mut p = Prr::start(300 * MSS);
        p.on_ack(2 * MSS, 20 * MSS, 200 * MSS, MSS);
        assert_eq!(send_all(&mut p), 3 * MSS);
        p.on_ack(MSS, 23 * MSS, 200 * MSS, MSS);
        assert_eq!(send_all(&mut p), 2 * MSS);
        // Near ssthresh only the gap.
        p.on_ack(5 * MSS, 199 * MSS, 200 * MSS, MSS);
        assert_eq!(send_all(&mut p), MSS);
    }

    #[test]
    fn huge_counters_saturate_instead_of_overflowing() {
        let mut p = Prr::start(1);
        p.on_ack(u64::MAX, u64::MAX, u64::MAX - 1, MSS);
        p.on_ack(u64::MAX, u64::MAX, u64::MAX - 1, MSS);
        assert_eq!(p.allowance(), u64::MAX);
        p.on_ack(u64::MAX, 0, u64::MAX, u64::MAX);
        assert_eq!(p.allowance(), u64::MAX);
    }
}
