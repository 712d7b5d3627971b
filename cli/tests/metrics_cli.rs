//! The metrics endpoint as the commands start it: a listen address that is
//! not loopback is warned about on standard error, naming the address and
//! what it exposes. `nc` on an interface that does not exist starts the
//! endpoint first, then fails: no network is needed.

use std::process::Stdio;

use zerosplit_tests::require_root;

const BIN: &str = env!("CARGO_BIN_EXE_zerosplit");

fn nc_with_metrics(addr: &str) -> String {
    let out = std::process::Command::new("timeout")
        .args([
            "20",
            BIN,
            "nc",
            "-l",
            ":5000",
            "--iface",
            "zs-no-such0",
            "--metrics",
            addr,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("nc");
    assert!(!out.status.success(), "the interface does not exist");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_metrics_address_that_is_not_loopback_is_warned_about() {
    require_root();
    let err = nc_with_metrics("0.0.0.0:0");
    let line = err
        .lines()
        .find(|l| l.contains("warning"))
        .unwrap_or_else(|| panic!("no warning for 0.0.0.0:\n{err}"));
    assert!(
        line.contains("0.0.0.0:")
            && line.contains("not a loopback address")
            && line.contains("/stats")
            && line.contains("without authentication"),
        "{line}"
    );
    let err = nc_with_metrics("127.0.0.1:0");
    assert!(
        !err.contains("warning"),
        "loopback is not warned about:\n{err}"
    );
    assert!(err.contains("metrics on http://127.0.0.1:"), "{err}");
}
