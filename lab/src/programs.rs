//! The outside programs the tests and the benchmarks run, each with the
//! Debian packages that provide it: one table, read by `cargo xtask test`
//! (which installs what is missing) and by [`require`] (a test that still
//! finds one missing fails naming its package instead of a bare ENOENT).
//! Nothing on the demo path needs any of them.

use std::ffi::OsStr;
use std::path::Path;

/// An outside program and what provides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// The name looked up in `PATH`.
    pub name: &'static str,
    /// The Debian packages that make it work (a compiler needs its C
    /// library headers too).
    pub packages: &'static [&'static str],
    /// Who runs it, for the list `cargo xtask packages` prints.
    pub used_by: &'static str,
}

/// Every outside program a test or a benchmark runs.
pub const PROGRAMS: &[Program] = &[
    Program {
        name: "tc",
        packages: &["iproute2"],
        used_by: "the bench's tbf bottleneck and application rows",
    },
    Program {
        name: "ss",
        packages: &["iproute2"],
        used_by: "the bench's application rows",
    },
    Program {
        name: "nstat",
        packages: &["iproute2"],
        used_by: "the bench's application rows",
    },
    Program {
        name: "iperf3",
        packages: &["iperf3"],
        used_by: "exec tests, the bench's cross-check row",
    },
    Program {
        name: "redis-server",
        packages: &["redis-server"],
        used_by: "exec tests, the bench's apps section",
    },
    Program {
        name: "redis-cli",
        packages: &["redis-tools"],
        used_by: "exec tests",
    },
    Program {
        name: "redis-benchmark",
        packages: &["redis-tools"],
        used_by: "exec tests, the bench's apps section",
    },
    Program {
        name: "nginx",
        packages: &["nginx-light"],
        used_by: "exec fork tests (master and workers)",
    },
    Program {
        name: "ab",
        packages: &["apache2-utils"],
        used_by: "exec fork tests (drives nginx)",
    },
    Program {
        name: "curl",
        packages: &["curl"],
        used_by: "exec fork tests (the nginx download)",
    },
    Program {
        name: "socat",
        packages: &["socat"],
        used_by: "exec fork tests (a child per connection)",
    },
    Program {
        name: "python3",
        packages: &["python3"],
        used_by: "the exec probe of every call",
    },
    Program {
        name: "tcpdump",
        packages: &["tcpdump"],
        used_by: "reading back --pcap captures",
    },
    Program {
        name: "cc",
        packages: &["gcc", "libc6-dev"],
        used_by: "the exec tests' C probes",
    },
    Program {
        name: "kill",
        packages: &["procps"],
        used_by: "CLI tests that send signals",
    },
    Program {
        name: "systemd-analyze",
        packages: &["systemd"],
        used_by: "checking deploy/zerosplit.service",
    },
];

/// The entry of `name` in [`PROGRAMS`].
pub fn find(name: &str) -> Option<&'static Program> {
    PROGRAMS.iter().find(|p| p.name == name)
}

/// Whether `name` is an executable file in one of `path`'s directories.
pub fn on_path(name: &str, path: &OsStr) -> bool {
    std::env::split_paths(path).any(|dir| is_executable(&dir.join(name)))
}

/// The programs of [`PROGRAMS`] not on this process's `PATH`.
pub fn missing() -> Vec<&'static Program> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    PROGRAMS
        .iter()
        .filter(|p| !on_path(p.name, &path))
        .collect()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
