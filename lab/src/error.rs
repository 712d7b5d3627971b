//! What went wrong in the lab; each variant names the command or the
//! kernel operation.

use std::{io, process::ExitStatus, time::Duration};

use thiserror::Error;

/// What went wrong in the harness; each variant names the command or the
/// kernel operation.
#[derive(Debug, Error)]
pub enum HarnessError {
    /// A tool the harness needs is not installed.
    #[error(
        "`{tool}` is not installed (not found in PATH); install it: apt-get install -y {package}"
    )]
    MissingTool {
        /// Program name.
        tool: &'static str,
        /// The Debian packages that provide it.
        package: String,
    },
    /// A program the tests ask for that the table of programs lacks.
    #[error("`{tool}` is not in lab/src/programs.rs: add it with its Debian package, so `cargo xtask test` installs it")]
    UnlistedTool {
        /// Program name.
        tool: &'static str,
    },
    /// The command could not be started.
    #[error("`{command}` could not be started: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The command exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// The command ran longer than allowed and was killed.
    #[error("`{command}` did not finish within {timeout:?}; killed")]
    Timeout {
        /// The command line.
        command: String,
        /// The limit.
        timeout: Duration,
    },
    /// A name or argument the harness cannot use.
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// What was wrong.
        what: &'static str,
        /// Details.
        detail: String,
    },
    /// The kernel refused an operation (netlink, ioctl, mount, setns).
    #[error("{what}: {source}")]
    Kernel {
        /// The operation, with its namespace and interface.
        what: String,
        /// The kernel's error (its message names the call).
        source: io::Error,
    },
}

impl HarnessError {
    pub(crate) fn kernel(what: impl Into<String>) -> impl FnOnce(io::Error) -> HarnessError {
        let what = what.into();
        move |source| HarnessError::Kernel { what, source }
    }
}
