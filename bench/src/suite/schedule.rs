//! The order runs happen in: every case once per round, forwards on even
//! rounds and backwards on odd ones (A B … B A), so a slow drift of the
//! machine (another build starting, thermal state) lands on every case
//! about equally instead of always on the ones that run last.

/// `(round, case)` pairs in execution order for `cases` cases repeated
/// `rounds` times, alternating direction each round.
pub fn alternating(cases: usize, rounds: usize) -> Vec<(usize, usize)> {
    let mut order = Vec::with_capacity(cases * rounds);
    for round in 0..rounds {
        if round % 2 == 0 {
            order.extend((0..cases).map(|c| (round, c)));
        } else {
            order.extend((0..cases).rev().map(|c| (round, c)));
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_direction() {
        let cases: Vec<usize> = alternating(3, 3).into_iter().map(|(_, c)| c).collect();
        assert_eq!(cases, [0, 1, 2, 2, 1, 0, 0, 1, 2]);
        let rounds: Vec<usize> = alternating(2, 2).into_iter().map(|(r, _)| r).collect();
        assert_eq!(rounds, [0, 0, 1, 1]);
    }

    #[test]
    fn every_case_runs_once_per_round_and_mean_positions_match() {
        let (cases, rounds) = (5, 4);
        let order = alternating(cases, rounds);
        assert_eq!(order.len(), cases * rounds);
        // With an even number of rounds every case's mean position is the same.
        let mut pos_sum = vec![0usize; cases];
        for (i, (_, c)) in order.iter().enumerate() {
            pos_sum[*c] += i % cases;
        }
        assert!(pos_sum.iter().all(|&p| p == pos_sum[0]), "{pos_sum:?}");
    }

    #[test]
    fn empty_inputs_give_an_empty_order() {
        assert!(alternating(0, 3).is_empty());
        assert!(alternating(3, 0).is_empty());
    }
}
