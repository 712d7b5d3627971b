use super::*;

#[test]
fn convergence_is_when_the_mean_stays_above_0_9() {
    // Windows of 0.25 s: a mean over 4 windows.
    let series: Vec<(f64, f64)> = (1..=40)
        .map(|i| {
            let t = f64::from(i) * 0.25;
            (
                t,
                if t < 5.0 {
                    0.5
                } else if t == 6.0 {
                    0.85
                } else {
                    0.99
                },
            )
        })
        .collect();
    // 4-window means ending at 5.0: 0.62; 5.25: 0.745; 5.5: 0.8675;
    // 5.75: 0.99, the first ≥ 0.9 (the dip at 6.0 comes later).
    let at = converged_at(&series, 2.0, 0.25).expect("converges");
    assert_eq!(at, 5.75);
    assert_eq!(
        converged_at(&series[..12], 2.0, 0.25),
        None,
        "never above 0.9"
    );
}

#[test]
fn percentile_is_nearest_rank() {
    let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&mut v, 0.95), 95.0);
    assert_eq!(percentile(&mut [3.0, 1.0, 2.0], 0.5), 2.0);
    assert_eq!(percentile(&mut [], 0.95), 0.0);
}

/// A short lab of NewReno: every output is written, the trace CSV has
/// a line per sample, and the figures are those of a flow that fills
/// the bottleneck.
#[test]
fn newreno_lab_writes_every_output() {
    let out = std::env::temp_dir().join(format!("zs-cclab-{}", std::process::id()));
    let report = run(&LabOptions {
        quick: true,
        ccs: vec![Algorithm::NewReno],
        out: out.clone(),
        progress: false,
        veth: false,
    })
    .expect("lab");
    for f in [
        "single-newreno.csv",
        "fairness-newreno.csv",
        "cwnd.svg",
        "delivery-rate.svg",
        "throughput-delay.svg",
        "fairness.svg",
        "summary.json",
        "summary.txt",
    ] {
        assert!(out.join(f).is_file(), "{f} written");
    }
    let csv = std::fs::read_to_string(out.join("single-newreno.csv")).expect("csv");
    assert_eq!(csv.lines().count(), report.single[0].samples + 1);
    let s = &report.single[0];
    assert!(s.utilisation > 0.5 && s.utilisation <= 1.0, "{s:?}");
    assert!(
        s.p95_queue_ms >= 0.0 && s.p95_queue_ms <= 2.0 * report.setup.rtt_ms,
        "{s:?}"
    );
    assert!(report.intra[0].jain_over_time.len() > 10);
    let _ = std::fs::remove_dir_all(&out);
}
