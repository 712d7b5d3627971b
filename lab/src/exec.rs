//! Outside programs in the lab: running one with a time limit and its
//! output captured, the error naming its command line, and a missing
//! tool named with the Debian package that provides it.

use std::{
    fmt,
    io::Read,
    process::{Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use crate::error::HarnessError;
use crate::programs;

/// How long [`NetNs::exec`](crate::NetNs::exec) lets a command run before killing it.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// [`require_tool`] for `program` when it is one of
/// [`PROGRAMS`](crate::programs::PROGRAMS).
pub(crate) fn require_known(program: &str) -> Result<(), HarnessError> {
    require_known_in(program, &std::env::var_os("PATH").unwrap_or_default())
}

/// [`require_known`] with the search path given.
fn require_known_in(program: &str, path: &std::ffi::OsStr) -> Result<(), HarnessError> {
    match programs::find(program) {
        Some(p) if !programs::on_path(p.name, path) => Err(HarnessError::MissingTool {
            tool: p.name,
            package: p.packages.join(" "),
        }),
        _ => Ok(()),
    }
}

/// Fails with [`HarnessError::MissingTool`], naming the packages of
/// [`PROGRAMS`](crate::programs::PROGRAMS), unless `tool` is in `PATH`;
/// a tool missing from that table is itself an error (the table is what
/// `cargo xtask test` installs).
pub fn require_tool(tool: &'static str) -> Result<(), HarnessError> {
    require_tool_in(tool, &std::env::var_os("PATH").unwrap_or_default())
}

/// [`require_tool`] with the search path given.
fn require_tool_in(tool: &'static str, path: &std::ffi::OsStr) -> Result<(), HarnessError> {
    match programs::find(tool) {
        Some(_) => require_known_in(tool, path),
        None => Err(HarnessError::UnlistedTool { tool }),
    }
}

/// Runs `program args…` (in the caller's namespace), failing unless it exits 0.
#[cfg(test)]
fn run<S: AsRef<std::ffi::OsStr>>(
    program: &str,
    args: impl IntoIterator<Item = S>,
) -> Result<Output, HarnessError> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    checked(cmd, EXEC_TIMEOUT)
}

pub(crate) fn checked(cmd: Command, timeout: Duration) -> Result<Output, HarnessError> {
    let line = describe(&cmd);
    let out = output_within(cmd, timeout)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(HarnessError::Failed {
            command: line,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// Runs `cmd` with piped output, killing it after `timeout`.
pub(crate) fn output_within(mut cmd: Command, timeout: Duration) -> Result<Output, HarnessError> {
    let line = describe(&cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            command: line.clone(),
            source,
        })?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::Timeout {
                    command: line,
                    timeout,
                });
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(source) => {
                return Err(HarnessError::Spawn {
                    command: line,
                    source,
                })
            }
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// The command line as a shell would show it, for error messages.
pub(crate) fn describe(cmd: &Command) -> String {
    struct Line<'a>(&'a Command);
    impl fmt::Display for Line<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0.get_program().to_string_lossy())?;
            for a in self.0.get_args() {
                write!(f, " {}", a.to_string_lossy())?;
            }
            Ok(())
        }
    }
    Line(cmd).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_command_reports_its_line_and_stderr() {
        let err = run("sh", ["-c", "echo boom >&2; exit 3"]).expect_err("exit 3");
        let text = err.to_string();
        assert!(text.contains("sh -c echo boom"), "{text}");
        assert!(text.contains("boom"), "{text}");
    }

    #[test]
    fn slow_command_is_killed_at_the_limit() {
        let mut cmd = Command::new("sleep");
        cmd.arg("5");
        let started = Instant::now();
        let err = output_within(cmd, Duration::from_millis(100)).expect_err("timeout");
        assert!(matches!(err, HarnessError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn missing_tool_names_the_package() {
        let empty = std::ffi::OsString::new();
        let err = require_tool_in("cc", &empty).expect_err("missing");
        assert!(
            err.to_string().contains("apt-get install -y gcc libc6-dev"),
            "{err}"
        );
        let err = require_tool_in("zs-no-such-tool", &empty).expect_err("unlisted");
        assert!(err.to_string().contains("lab/src/programs.rs"), "{err}");
    }

    #[test]
    fn known_tools_are_checked_with_their_package() {
        use std::os::unix::fs::PermissionsExt;
        // A search path of our own: one directory with an executable `tc`
        // and a `redis-cli` that is not executable, one empty.
        let dir = std::env::temp_dir().join(format!("zs-known-{}", std::process::id()));
        let (bin, empty) = (dir.join("bin"), dir.join("empty"));
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::create_dir_all(&empty).expect("mkdir");
        for (name, mode) in [("tc", 0o755), ("redis-cli", 0o644)] {
            let file = bin.join(name);
            std::fs::write(&file, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        let only_empty = empty.clone().into_os_string();
        let both = std::env::join_paths([&empty, &bin]).expect("join");
        let missing = |program: &str, path: &std::ffi::OsStr| {
            require_known_in(program, path)
                .expect_err(program)
                .to_string()
        };
        let result = (
            require_known_in("tc", &both).is_ok(),
            missing("tc", &only_empty),
            missing("redis-cli", &both),
            missing("iperf3", &both),
            require_known_in("zs-not-in-the-table", &only_empty).is_ok(),
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(result.0, "an executable tc anywhere on the path is found");
        assert!(
            result.1.contains("apt-get install -y iproute2"),
            "{}",
            result.1
        );
        assert!(
            result.2.contains("apt-get install -y redis-tools"),
            "a file without x bits is not the tool: {}",
            result.2
        );
        assert!(
            result.3.contains("apt-get install -y iperf3"),
            "{}",
            result.3
        );
        assert!(result.4, "other programs are left to the spawn error");
        for gone in ["ip", "ethtool", "ping", "sysctl"] {
            assert!(
                programs::find(gone).is_none(),
                "{gone} is no longer needed by the harness"
            );
        }
        assert!(programs::PROGRAMS
            .iter()
            .all(|p| !p.name.is_empty() && !p.packages.is_empty()));
    }
}
