//! The `zerosplit daemon` an attached row's zerosplit end attaches to: a
//! child process in that end's namespace, owning its interface with the
//! stack an in-process end would open ([`daemon_config`]), its socket and
//! configuration in a directory of its own. Stopped with SIGTERM, it
//! writes its payload copies (`--report`), which [`DaemonProcess::stop`]
//! returns.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use zerosplit::host::PayloadCopies;
use zerosplit::idle::PollMode;

use super::endpoint::daemon_config;
use super::peer::DaemonRef;

/// Longest the daemon may take to open its socket, and to exit.
const START_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running daemon; killed and its directory removed on drop.
#[derive(Debug)]
pub(super) struct DaemonProcess {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
    /// How the applications attached to it wait.
    app_poll: Option<PollMode>,
}

impl DaemonProcess {
    /// Starts `program daemon` on `iface` in namespace `netns` and waits
    /// until its socket exists; the applications that attach to it wait
    /// as `app_poll` says.
    pub(super) fn start(
        program: &Path,
        netns: &str,
        iface: &str,
        mtu: u32,
        poll: PollMode,
        app_poll: Option<PollMode>,
    ) -> Result<DaemonProcess, String> {
        let dir =
            std::env::temp_dir().join(format!("zs-bench-daemon-{}-{netns}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let socket = dir.join("daemon.sock");
        std::fs::remove_file(&socket).ok();
        let config = daemon_config(iface, mtu, poll, &socket).map_err(|e| format!("{e:#}"))?;
        let text = config.to_toml_string().map_err(|e| e.to_string())?;
        let file = dir.join("daemon.toml");
        std::fs::write(&file, text).map_err(|e| format!("writing {}: {e}", file.display()))?;
        let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
        let child = zerosplit_lab::command_in(
            netns,
            program,
            [
                "daemon".as_ref(),
                "--config".as_ref(),
                file.as_os_str(),
                "--drain".as_ref(),
                "0".as_ref(),
                "--report".as_ref(),
                dir.join("report.json").as_os_str(),
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {} daemon: {e}", program.display()))?;
        let mut d = DaemonProcess {
            child,
            dir,
            socket,
            app_poll,
        };
        let until = Instant::now() + START_TIMEOUT;
        while !d.socket.exists() {
            if let Ok(Some(status)) = d.child.try_wait() {
                return Err(format!("the daemon exited ({status}): {}", d.log()));
            }
            if Instant::now() > until {
                return Err(format!(
                    "the daemon opened no socket within {START_TIMEOUT:?}: {}",
                    d.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(d)
    }

    /// What a peer needs to attach.
    pub(super) fn reference(&self) -> DaemonRef {
        DaemonRef {
            socket: self.socket.clone(),
            pid: self.child.id(),
            app_poll: self.app_poll,
        }
    }

    /// The last lines of its stderr.
    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" / ")
    }

    /// SIGTERM, the exit, and the payload copies it reported.
    pub(super) fn stop(mut self) -> Result<PayloadCopies, String> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32)
            .ok_or("the daemon has no pid")?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .map_err(|e| format!("SIGTERM to the daemon: {e}"))?;
        let until = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => break,
                Ok(Some(s)) => return Err(format!("the daemon exited ({s}): {}", self.log())),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) => return Err(format!("the daemon did not stop within {STOP_TIMEOUT:?}")),
                Err(e) => return Err(e.to_string()),
            }
        }
        let file = self.dir.join("report.json");
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("reading the daemon's {}: {e}", file.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("the daemon's report: {e}"))
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
