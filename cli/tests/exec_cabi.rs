//! The C ABI of `zerosplit exec`'s socket calls, from a C program
//! (`data/cabi_probe.c`, compiled here with `cc`) that passes what C
//! callers may pass: a one-word `fd_set` before an unmapped page,
//! overlapping iovecs, a null `iov_base`, more iovecs than `IOV_MAX`,
//! `dup2` of a bad descriptor onto a socket, sockets closed by
//! `close_range`, `closefrom` and `fclose`, a `vfork` child that closes
//! one.
//!
//! Each check runs twice against the ECHO peer of `shim_peer.py` (Linux
//! TCP in the peer namespace): natively first, which shows the program's
//! expectations are Linux's, then under `zerosplit exec`, whose run must
//! leave the exec namespace's kernel TCP counters (opens, segments in)
//! where they were: the connections were zerosplit's.
//!
//! Needs root and `cc` (Debian `gcc`) and `python3`.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::*;

const PORT: &str = "9000";

/// The probe, compiled once per test binary (into the target's scratch
/// directory: a test's own temporary directory goes with the test).
fn probe() -> &'static str {
    static PROBE: OnceLock<String> = OnceLock::new();
    PROBE.get_or_init(|| compile_c(env!("CARGO_TARGET_TMPDIR"), "cabi_probe"))
}

/// Runs `cabi_probe MODE` natively, then under `zerosplit exec`, in a lab
/// of its own named `prefix`; both must print `ok MODE`, and the exec
/// run must not move the exec namespace's kernel TCP counters.
fn check(prefix: &str, mode: &str) {
    let _serial = serial();
    require_program("python3");
    let probe = probe().to_owned();
    let (a, b, pair) = lab(prefix);
    let peer_addr = pair.b.addr.to_string();
    let _peer = shim_peer(&b, &peer_addr, PORT, "110");

    let native = run_in(&a, 30, &[&probe, mode, &peer_addr, PORT]);
    let text = String::from_utf8_lossy(&native.stdout);
    assert!(
        native.status.success() && text.contains(&format!("ok {mode}")),
        "{mode} natively (Linux TCP) failed ({}): {text}{}",
        native.status,
        String::from_utf8_lossy(&native.stderr)
    );

    let before = kernel_tcp(&a);
    let dir = tempdir();
    let log = dir.join(&format!("{mode}.log"));
    let mut run = exec_in(&a, &pair.a.ifname, &log, &[&probe, mode, &peer_addr, PORT]);
    let status = wait_exit(&mut run.0, Duration::from_secs(60));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status == Some(0) && text.contains(&format!("ok {mode}")),
        "{mode} under zerosplit exec failed (exit {status:?}: None is a death by signal, e.g. SIGSEGV; 124 a hang):\n{text}"
    );
    assert!(text.contains("zerosplit exec: TCP over"), "{text}");
    assert_eq!(
        kernel_tcp(&a),
        before,
        "{mode}: the exec namespace's kernel counted TCP of its own"
    );
}

#[test]
fn select_on_a_one_word_fd_set_touches_only_that_word() {
    check("zqs", "select");
}

#[test]
fn overlapping_null_and_too_many_iovecs_behave_as_on_linux() {
    check("zqi", "iov");
}

#[test]
fn dup2_of_a_bad_descriptor_onto_a_socket_leaves_it_working() {
    check("zqd", "dup2");
}

#[test]
fn close_range_and_closefrom_forget_the_sockets_they_close() {
    check("zqc", "closerange");
}

#[test]
fn fclose_of_an_fdopened_socket_forgets_it() {
    check("zqf", "fclose");
}

#[test]
fn a_vfork_child_leaves_the_parents_sockets_alone() {
    check("zqv", "vfork");
}
