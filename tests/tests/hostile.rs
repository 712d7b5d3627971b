//! The hostile-packet suite (issue 12, `bench::hostile`) against the
//! running stack: every kind of [`bench::hostile::KINDS`] injected from the
//! peer namespace during a live Linux → zerosplit transfer, and the same
//! against a Linux receiver for reference. For each kind on zerosplit: the
//! stack stays up, the stream is byte-exact, memory stays bounded, and a
//! dropped kind moves its counter — the stack's named drop reason
//! (`Expect::Drop`, `SenderDrop`) or, for what the steering program passes
//! to the kernel, the kernel's own counter in the receiving namespace
//! (`Expect::Kernel`). Kinds a receiver may accept (`Expect::Either`) and
//! the one the kernel drops without any counter (`KernelUncounted`) are
//! checked byte-exact only. On Linux, byte-exact. Prints the table of
//! kinds × outcomes.
//!
//! CI form by default (every kind, small counts, ~2 minutes). The full
//! form (8 MiB streams, 100 rounds, a 100 000-SYN flood):
//! `ZEROSPLIT_HOSTILE=full cargo test -p zerosplit-tests --test hostile`,
//! or `zerosplit hostile --full`. `ZEROSPLIT_HOSTILE_KINDS=a,b` runs only
//! the named kinds. Needs root.

use bench::hostile::{run_suite, table, SuiteConfig, KINDS};
use zerosplit_tests::{heavy, require_root};

#[test]
fn every_hostile_kind_leaves_the_stream_byte_exact_and_its_drop_counter_moves() {
    require_root();
    let _serial = heavy();
    let cfg = match std::env::var("ZEROSPLIT_HOSTILE").as_deref() {
        Ok("full") => SuiteConfig::full(),
        _ => SuiteConfig::ci(),
    };
    let only = std::env::var("ZEROSPLIT_HOSTILE_KINDS").unwrap_or_default();
    let kinds: Vec<_> = KINDS
        .iter()
        .filter(|k| only.is_empty() || only.split(',').any(|n| n == k.name))
        .copied()
        .collect();
    assert!(!kinds.is_empty(), "no kind named in {only:?}");
    let started = std::time::Instant::now();
    let rows = run_suite(&cfg, &kinds, |row| {
        let (z, l) = row.verdicts();
        eprintln!(
            "{:24} zerosplit: {} | linux: {}",
            row.kind.name,
            z.map_or_else(String::new, |v| v.text),
            l.map_or_else(String::new, |v| v.text)
        );
    })
    .expect("hostile lab");
    println!("{}", table(&rows));
    println!("suite took {:?}", started.elapsed());
    let failing: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let (z, l) = r.verdicts();
            let bad: Vec<String> = [("zerosplit", z), ("linux", l)]
                .into_iter()
                .filter_map(|(who, v)| v.filter(|v| !v.pass).map(|v| format!("{who}: {}", v.text)))
                .collect();
            (!bad.is_empty()).then(|| format!("{}: {}", r.kind.name, bad.join("; ")))
        })
        .collect();
    assert!(failing.is_empty(), "failing kinds:\n{}", failing.join("\n"));
}
