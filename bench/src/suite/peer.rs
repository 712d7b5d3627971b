//! The endpoints as processes: the orchestrator starts `zerosplit
//! bench-peer …` inside a namespace (as `ip netns exec NS zerosplit
//! bench-peer …` would, through [`zerosplit_lab::command_in`]), so each
//! side's CPU time is its own process's. A peer
//! prints `{"ready":true}` once it listens, then exactly one JSON result
//! line ([`PeerReport`]) and exits.
//!
//! This module owns both halves of that contract: the arguments
//! ([`PeerSpec::to_args`]) and the result line; `zerosplit bench-peer`
//! (in the `zerosplit` package, which can use the stack) produces it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::procfs::ThreadCpu;
use super::scenario::ThreadMode;
pub use zerosplit::idle::PollMode;

/// The names a peer's threads carry, so that [`PeerReport::threads`] can
/// be told apart.
pub mod thread_names {
    /// zerosplit in run-to-completion mode: the one loop running the
    /// datapath and the transport (the peer's main thread).
    pub const LOOP: &str = "zs-loop";
    /// zerosplit in dedicated mode: the thread polling the datapath (the
    /// peer's main thread).
    pub const DATAPATH: &str = "zs-datapath";
    /// zerosplit in dedicated mode: the transport thread, named where it
    /// is spawned (`control/src/tcp/driver.rs`).
    pub const TRANSPORT: &str = "zs-transport";
    /// A Linux end: the thread making the socket calls.
    pub const KERNEL: &str = "zs-kernel-end";
}

/// What a peer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Connect and send (bulk).
    Send,
    /// Listen, accept one connection, receive until FIN.
    Recv,
    /// Connect and run 64-byte request/response rounds, timing each.
    PingpongClient,
    /// Listen, accept one connection, echo every message.
    PingpongServer,
    /// Listen and poll with no traffic for `--seconds`: the idle stack's
    /// CPU (zerosplit stacks only).
    Idle,
}

impl Role {
    /// The `--role` value.
    pub fn name(self) -> &'static str {
        match self {
            Role::Send => "send",
            Role::Recv => "recv",
            Role::PingpongClient => "pingpong-client",
            Role::PingpongServer => "pingpong-server",
            Role::Idle => "idle",
        }
    }

    /// The role listens (and says when it is ready).
    pub fn listens(self) -> bool {
        matches!(self, Role::Recv | Role::PingpongServer | Role::Idle)
    }
}

/// Everything one `bench-peer` run needs.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSpec {
    /// What to do.
    pub role: Role,
    /// `kernel`, `tcp` or `smoltcp`.
    pub stack: &'static str,
    /// Interface (zerosplit ends run on it).
    pub iface: String,
    /// Address to listen on (receivers) or connect to (senders), IPv4 or
    /// IPv6 (`[2001:2::1]:5301` on the command line).
    pub addr: SocketAddr,
    /// MTU of the interface.
    pub mtu: u32,
    /// zerosplit's thread mode.
    pub threads: ThreadMode,
    /// zerosplit's idle policy (`threads.poll`).
    pub poll: PollMode,
    /// Senders stop after this many bytes…
    pub bytes: u64,
    /// …or after this long, whichever comes first; ping-pong likewise.
    pub seconds: f64,
    /// Ping-pong rounds.
    pub rounds: u64,
    /// Ping-pong message size.
    pub message: usize,
    /// Concurrent bulk connections (send and recv roles; 1 otherwise).
    pub flows: usize,
    /// Receive queues a zerosplit end serves with several flows (one stack
    /// per queue); 1 otherwise.
    pub queues: u32,
    /// zerosplit ends publish their metrics and are scraped meanwhile
    /// (`zerosplit bench --metrics`).
    pub metrics: bool,
    /// A zerosplit end attaches to this daemon instead of opening the
    /// interface itself (`--daemon`, `--daemon-pid`).
    pub daemon: Option<DaemonRef>,
}

/// A running `zerosplit daemon` a peer attaches to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonRef {
    /// Its socket.
    pub socket: std::path::PathBuf,
    /// Its process id: the peer adds the daemon's CPU time over its
    /// measured window to its own.
    pub pid: u32,
    /// How the attached end waits for completions (`None`: the provider
    /// library's default).
    pub app_poll: Option<PollMode>,
}

impl PeerSpec {
    /// The arguments after the program name.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "bench-peer".into(),
            "--role".into(),
            self.role.name().into(),
            "--stack".into(),
            self.stack.into(),
            "--iface".into(),
            self.iface.clone(),
            "--addr".into(),
            self.addr.to_string(),
            "--mtu".into(),
            self.mtu.to_string(),
            "--threads".into(),
            self.threads.name().into(),
            "--poll".into(),
            self.poll.name().into(),
            "--bytes".into(),
            self.bytes.to_string(),
            "--seconds".into(),
            format!("{}", self.seconds),
            "--rounds".into(),
            self.rounds.to_string(),
            "--message".into(),
            self.message.to_string(),
            "--flows".into(),
            self.flows.to_string(),
            "--queues".into(),
            self.queues.to_string(),
        ]
        .into_iter()
        .chain(self.metrics.then(|| "--metrics".into()))
        .chain(self.daemon.iter().flat_map(|d| {
            [
                "--daemon".into(),
                d.socket.display().to_string(),
                "--daemon-pid".into(),
                d.pid.to_string(),
            ]
            .into_iter()
            .chain(
                d.app_poll
                    .into_iter()
                    .flat_map(|p| ["--app-poll".into(), p.name().into()]),
            )
        }))
        .collect()
    }
}

/// Latency percentiles of a ping-pong client, in microseconds of round
/// trip time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    /// Rounds measured.
    pub rounds: u64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
    /// (quantile in 0..=1, µs) points of the distribution, for the CDF plot.
    pub cdf: Vec<(f64, f64)>,
}

/// The result line of one peer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PeerReport {
    /// `--role`.
    pub role: String,
    /// `--stack`.
    pub stack: String,
    /// Payload bytes sent (senders) or received (receivers).
    pub bytes: u64,
    /// From the connection being established to the last byte (receiver),
    /// or to the last byte acknowledged (sender).
    pub seconds: f64,
    /// This process's user + system CPU time over the same interval, and
    /// the daemon's when the end is attached (`daemon_cpu_s`).
    pub cpu_s: f64,
    /// The daemon's share of `cpu_s` (an attached end; 0 otherwise).
    #[serde(default)]
    pub daemon_cpu_s: f64,
    /// The payload copies of an in-process zerosplit end's stack (an
    /// attached end's are the daemon's: `zerosplit daemon --report`).
    #[serde(default)]
    pub copies: Option<zerosplit::host::PayloadCopies>,
    /// Each thread's user and system time over the same interval, by name
    /// (see [`thread_names`]); empty in a schema-1 peer's line.
    #[serde(default)]
    pub threads: Vec<ThreadCpu>,
    /// Retransmitted segments (zerosplit: the stack's count; kernel: the
    /// namespace's `Tcp:RetransSegs` difference).
    pub retransmits: u64,
    /// Drops by reason (zerosplit: the datapath's reasons; kernel: the
    /// namespace's `TcpExt:*Drop*` differences).
    pub drops: BTreeMap<String, u64>,
    /// Ping-pong client only.
    pub latency: Option<LatencyReport>,
    /// Bulk connections this peer ran (`--flows`; 1 for the one-flow roles).
    #[serde(default)]
    pub flows: u64,
    /// Fewest payload bytes one of those connections moved (fairness).
    #[serde(default)]
    pub flow_min_bytes: u64,
    /// Most payload bytes one of those connections moved.
    #[serde(default)]
    pub flow_max_bytes: u64,
    /// Set when the peer failed; the other fields are then empty.
    pub error: Option<String>,
    /// The failure is that this build lacks what was asked for (e.g. a
    /// transport not built yet).
    #[serde(default)]
    pub unavailable: bool,
}

/// Starting or running a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The process could not be started.
    #[error("starting `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// It did not say it was ready in time.
    #[error("{role} peer ({stack}) not ready within {timeout:?}; stderr: {stderr}")]
    NotReady {
        /// Role.
        role: &'static str,
        /// Stack.
        stack: &'static str,
        /// The limit.
        timeout: Duration,
        /// Its stderr so far.
        stderr: String,
    },
    /// It ran past its time limit and was killed.
    #[error("{role} peer ({stack}) did not finish within {timeout:?}; killed; stderr: {stderr}")]
    Timeout {
        /// Role.
        role: &'static str,
        /// Stack.
        stack: &'static str,
        /// The limit.
        timeout: Duration,
        /// Its stderr.
        stderr: String,
    },
    /// It exited without a result line.
    #[error("{role} peer ({stack}) exited ({status}) without a result; stderr: {stderr}")]
    NoResult {
        /// Role.
        role: &'static str,
        /// Stack.
        stack: &'static str,
        /// Exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
}

/// A running peer; killed and reaped on drop if still running.
#[derive(Debug)]
pub struct PeerProcess {
    role: Role,
    stack: &'static str,
    child: Child,
    lines: Receiver<String>,
    stderr: Receiver<String>,
    stderr_text: String,
}

impl PeerProcess {
    /// Starts `program bench-peer …` in namespace `netns`.
    ///
    /// # Errors
    /// [`PeerError::Spawn`].
    pub fn start(program: &Path, netns: &str, spec: &PeerSpec) -> Result<Self, PeerError> {
        let mut cmd = zerosplit_lab::command_in(netns, program, spec.to_args());
        let line = format!(
            "(in netns {netns}) {} {}",
            program.display(),
            spec.to_args().join(" ")
        );
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| PeerError::Spawn {
                command: line,
                source,
            })?;
        let lines = forward_lines(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let stderr = forward_lines(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        Ok(PeerProcess {
            role: spec.role,
            stack: spec.stack,
            child,
            lines,
            stderr,
            stderr_text: String::new(),
        })
    }

    fn collect_stderr(&mut self) -> String {
        while let Ok(l) = self.stderr.try_recv() {
            if self.stderr_text.len() < 4096 {
                self.stderr_text.push_str(&l);
                self.stderr_text.push('\n');
            }
        }
        self.stderr_text.trim().to_owned()
    }

    /// Waits until the peer prints its ready line.
    ///
    /// # Errors
    /// [`PeerError::NotReady`] on timeout; [`PeerError::NoResult`] if it
    /// exited first. A result line instead of the ready line (a peer that
    /// failed early) is returned as `Ok(Some(report))`.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Option<PeerReport>, PeerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.trim() == r#"{"ready":true}"# => return Ok(None),
                Ok(l) => {
                    if let Ok(r) = serde_json::from_str::<PeerReport>(&l) {
                        let _ = self.finish(Duration::from_secs(5));
                        return Ok(Some(r));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(PeerError::NotReady {
                        role: self.role.name(),
                        stack: self.stack,
                        timeout,
                        stderr: self.collect_stderr(),
                    })
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self
                        .child
                        .wait()
                        .map_or_else(|e| e.to_string(), |s| s.to_string());
                    thread::sleep(Duration::from_millis(20));
                    return Err(PeerError::NoResult {
                        role: self.role.name(),
                        stack: self.stack,
                        status,
                        stderr: self.collect_stderr(),
                    });
                }
            }
        }
    }

    /// Waits for the result line and the exit, killing the peer after
    /// `timeout`.
    ///
    /// # Errors
    /// [`PeerError::Timeout`] or [`PeerError::NoResult`].
    pub fn finish(&mut self, timeout: Duration) -> Result<PeerReport, PeerError> {
        let deadline = Instant::now() + timeout;
        let mut report = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Ok(r) = serde_json::from_str::<PeerReport>(&l) {
                        report = Some(r);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(PeerError::Timeout {
                        role: self.role.name(),
                        stack: self.stack,
                        timeout,
                        stderr: self.collect_stderr(),
                    });
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        // stdout closed: the process is exiting.
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.to_string(),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break "killed after closing stdout".into();
                }
                Err(e) => break e.to_string(),
            }
        };
        thread::sleep(Duration::from_millis(10));
        let stderr = self.collect_stderr();
        report.ok_or(PeerError::NoResult {
            role: self.role.name(),
            stack: self.stack,
            status,
            stderr,
        })
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn forward_lines(pipe: Option<Box<dyn Read + Send>>) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        if let Some(p) = pipe {
            for line in BufReader::new(p).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn report_round_trips_through_json() {
        let r = PeerReport {
            role: "recv".into(),
            stack: "tcp".into(),
            bytes: 1 << 30,
            seconds: 1.25,
            cpu_s: 0.5,
            daemon_cpu_s: 0.125,
            copies: Some(zerosplit::host::PayloadCopies {
                rx_placed: 1 << 30,
                ..Default::default()
            }),
            threads: vec![ThreadCpu {
                tid: 9,
                name: thread_names::TRANSPORT.into(),
                user_s: 0.25,
                system_s: 0.01,
            }],
            retransmits: 3,
            drops: BTreeMap::from([("beyond_posted".to_string(), 7)]),
            latency: Some(LatencyReport {
                rounds: 10,
                p50_us: 12.0,
                p99_us: 40.0,
                p999_us: 41.0,
                max_us: 41.5,
                cdf: vec![(0.5, 12.0), (1.0, 41.5)],
            }),
            error: None,
            unavailable: false,
            flows: 4,
            flow_min_bytes: 1 << 27,
            flow_max_bytes: 1 << 29,
        };
        let line = serde_json::to_string(&r).expect("serialises");
        assert!(!line.contains('\n'));
        assert_eq!(
            serde_json::from_str::<PeerReport>(&line).expect("parses"),
            r
        );
    }

    #[test]
    fn args_carry_every_field() {
        let spec = PeerSpec {
            role: Role::PingpongServer,
            stack: "smoltcp",
            iface: "zs1x2a".into(),
            addr: "198.18.0.1:5201".parse().expect("addr"),
            mtu: 9000,
            threads: ThreadMode::Dedicated,
            poll: PollMode::Sleep,
            bytes: 123,
            seconds: 1.5,
            rounds: 77,
            message: 64,
            flows: 16,
            queues: 2,
            metrics: true,
            daemon: Some(DaemonRef {
                socket: "/tmp/x/d.sock".into(),
                pid: 4242,
                app_poll: Some(PollMode::Spin),
            }),
        };
        let args = spec.to_args().join(" ");
        for want in [
            "bench-peer",
            "--role pingpong-server",
            "--stack smoltcp",
            "--iface zs1x2a",
            "--addr 198.18.0.1:5201",
            "--mtu 9000",
            "--threads dedicated",
            "--poll sleep",
            "--bytes 123",
            "--seconds 1.5",
            "--rounds 77",
            "--message 64",
            "--flows 16",
            "--queues 2",
            "--metrics",
            "--daemon /tmp/x/d.sock --daemon-pid 4242 --app-poll spin",
        ] {
            assert!(args.contains(want), "{want} missing from {args}");
        }
    }

    /// What `zerosplit bench-peer` parses its arguments with.
    #[derive(Debug, clap::Parser)]
    struct BenchPeer {
        #[command(flatten)]
        args: crate::suite::endpoint::PeerArgs,
    }

    #[test]
    fn args_parse_back_for_either_family() {
        use clap::Parser;
        for addr in ["198.18.0.1:5301", "[2001:2::1]:5301"] {
            let spec = PeerSpec {
                role: Role::Recv,
                stack: "tcp",
                iface: "zs1x2a".into(),
                addr: addr.parse().expect("addr"),
                mtu: 9000,
                threads: ThreadMode::Rtc,
                poll: PollMode::Adaptive,
                bytes: 1 << 20,
                seconds: 1.0,
                rounds: 10,
                message: 64,
                flows: 1,
                queues: 1,
                metrics: false,
                daemon: None,
            };
            let args = spec.to_args();
            assert!(
                args.join(" ").contains(&format!("--addr {addr}")),
                "{args:?}"
            );
            // `bench-peer` is the subcommand's name: the program's place.
            let parsed = BenchPeer::try_parse_from(&args).expect("bench-peer parses its args");
            assert_eq!(parsed.args.addr, spec.addr);
            assert_eq!(parsed.args.addr.to_string(), addr);
            assert_eq!(parsed.args.mtu, 9000);
        }
    }

    #[test]
    fn a_peer_that_prints_ready_then_a_result_is_read() {
        // `sh` stands in for bench-peer: the process protocol is what is tested.
        let mut p = PeerProcess {
            role: Role::Recv,
            stack: "kernel",
            child: Command::new("true").spawn().expect("spawn true"),
            lines: mpsc::channel().1,
            stderr: mpsc::channel().1,
            stderr_text: String::new(),
        };
        let _ = p.child.wait();
        let mut child = Command::new("sh")
            .args([
                "-c",
                r#"echo '{"ready":true}'; echo noise; echo '{"role":"recv","stack":"kernel","bytes":5,"seconds":1.0,"cpu_s":0.1,"retransmits":0,"drops":{},"latency":null,"error":null}'; echo oops >&2"#,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        p.lines = forward_lines(
            child
                .stdout
                .take()
                .map(|x| Box::new(x) as Box<dyn Read + Send>),
        );
        p.stderr = forward_lines(
            child
                .stderr
                .take()
                .map(|x| Box::new(x) as Box<dyn Read + Send>),
        );
        p.child = child;
        assert_eq!(p.wait_ready(Duration::from_secs(5)).expect("ready"), None);
        let r = p.finish(Duration::from_secs(5)).expect("result");
        assert_eq!(r.bytes, 5);
    }
}
