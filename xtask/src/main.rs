//! `cargo xtask`: the project's own commands, in Rust so they need nothing
//! but cargo (the alias is in `.cargo/config.toml`).
//!
//! - `cargo xtask test [CARGO TEST ARGS…]`: the README's test command.
//!   Installs the Debian packages of the outside programs the tests run
//!   (`lab/src/programs.rs`) that are missing, when it runs
//!   as root on a machine with `apt-get`, then runs `cargo test --locked`
//!   with the arguments given, or `--workspace` without any.
//! - `cargo xtask packages`: the programs, their packages and who runs
//!   them, each marked present or missing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

// The table is the lab's (lab/src/programs.rs, which the tests read); it
// is compiled in here from its file so xtask builds in seconds, without
// the lab's dependencies.
#[path = "../../lab/src/programs.rs"]
#[allow(
    dead_code,
    reason = "xtask reads the table; the lookup is for the tests"
)]
mod programs;
use programs::Program;

const USAGE: &str = "usage: cargo xtask test [CARGO TEST ARGS...] | cargo xtask packages";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("packages") => {
            packages();
            Ok(())
        }
        Some("-h" | "--help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cargo xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the parent of this crate's folder.
fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

fn packages() {
    let missing = programs::missing();
    for p in programs::PROGRAMS {
        let state = if missing.contains(&p) {
            "missing"
        } else {
            "present"
        };
        println!(
            "{:<16} {:<8} {:<20} {}",
            p.name,
            state,
            p.packages.join(" "),
            p.used_by
        );
    }
}

fn test(args: &[String]) -> Result<(), String> {
    // `cargo xtask test -- ARGS` and `cargo xtask test ARGS` alike.
    let cargo_args = match args.split_first() {
        Some((first, rest)) if first == "--" => rest,
        _ => args,
    };
    install_missing(&programs::missing())?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root()).args(["test", "--locked"]);
    if cargo_args.is_empty() {
        cmd.arg("--workspace");
    } else {
        cmd.args(cargo_args);
    }
    eprintln!("cargo xtask: running {}", describe(&cmd));
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the tests failed ({status})"))
    }
}

/// Installs the packages of `missing` with apt-get when that can work
/// (root, apt-get present); otherwise says what to install and goes on:
/// the tests that need a missing program fail naming its package.
fn install_missing(missing: &[&Program]) -> Result<(), String> {
    if missing.is_empty() {
        return Ok(());
    }
    let packages: BTreeSet<&str> = missing
        .iter()
        .flat_map(|p| p.packages.iter().copied())
        .collect();
    let list = packages.iter().copied().collect::<Vec<_>>().join(" ");
    let names = missing
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ");
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !is_root() || !programs::on_path("apt-get", &path) {
        eprintln!(
            "cargo xtask: missing {names}; install them as root with \
             `apt-get install -y {list}` (the tests that run them will fail naming the package)"
        );
        return Ok(());
    }
    eprintln!("cargo xtask: missing {names}; installing {list}");
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&packages))?;
    if packages.contains("redis-server") {
        // Debian starts a redis-server on 127.0.0.1:6379 at install; the
        // tests run their own in namespaces and need none on the host.
        let _ = Command::new("systemctl")
            .args(["stop", "redis-server"])
            .status();
    }
    let still = programs::missing();
    if !still.is_empty() {
        let names = still.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
        return Err(format!("still missing after apt-get install: {names}"));
    }
    Ok(())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let what = describe(cmd);
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn is_root() -> bool {
    // The effective user of this process, from the kernel's own record of
    // it (no libc call: xtask stays free of unsafe).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
