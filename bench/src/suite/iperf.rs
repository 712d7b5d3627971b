//! The Linux↔Linux cross-check with iperf3 (when installed): a one-off
//! server in the receiving namespace, a client in the sending one, figures
//! from the client's JSON.

use std::net::IpAddr;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

/// What one iperf3 run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct IperfResult {
    /// Bytes the receiver got.
    pub bytes: u64,
    /// Seconds the receiver measured over.
    pub seconds: f64,
    /// Client (sender) CPU seconds.
    pub sender_cpu_s: f64,
    /// Server (receiver) CPU seconds.
    pub receiver_cpu_s: f64,
    /// Retransmitted segments (client's count).
    pub retransmits: u64,
}

/// iperf3 is in PATH.
pub fn installed() -> bool {
    zerosplit_lab::require_tool("iperf3").is_ok()
}

/// Parses the client's `-J` output.
///
/// # Errors
/// Not iperf3 JSON, or iperf3 reported an error.
pub fn parse(json: &str) -> Result<IperfResult, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("iperf3 output is not JSON: {e}"))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        return Err(format!("iperf3: {e}"));
    }
    let end = v.get("end").ok_or("iperf3 JSON has no `end`")?;
    let num = |path: &[&str]| {
        let mut cur = end;
        for p in path {
            cur = cur
                .get(p)
                .ok_or(format!("iperf3 JSON has no end.{}", path.join(".")))?;
        }
        cur.as_f64()
            .ok_or(format!("end.{} is not a number", path.join(".")))
    };
    let seconds = num(&["sum_received", "seconds"])?;
    Ok(IperfResult {
        bytes: num(&["sum_received", "bytes"])? as u64,
        seconds,
        sender_cpu_s: num(&["cpu_utilization_percent", "host_total"])? / 100.0 * seconds,
        receiver_cpu_s: num(&["cpu_utilization_percent", "remote_total"])? / 100.0 * seconds,
        retransmits: num(&["sum_sent", "retransmits"]).unwrap_or(0.0) as u64,
    })
}

/// Runs one iperf3 transfer from `client_ns` to `server_ns` (`server`
/// address, IPv4 or IPv6) for `seconds`.
///
/// # Errors
/// iperf3 failed or timed out (its output in the message).
pub fn run(
    server_ns: &str,
    client_ns: &str,
    server: IpAddr,
    seconds: f64,
) -> Result<IperfResult, String> {
    let addr = server.to_string();
    let mut srv =
        zerosplit_lab::command_in(server_ns, "iperf3", ["-s", "-1", "-B", &addr, "-p", "5399"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting the iperf3 server: {e}"))?;
    let secs = format!("{:.1}", seconds.max(0.5));
    // The server needs a moment to listen; the client retries while it is refused.
    let deadline = Instant::now() + Duration::from_secs_f64(seconds * 2.0 + 20.0);
    let result = loop {
        let out = zerosplit_lab::command_in(
            client_ns,
            "timeout",
            [
                format!("{}", (seconds * 2.0 + 15.0) as u64).as_str(),
                "iperf3",
                "-c",
                &addr,
                "-p",
                "5399",
                "-t",
                &secs,
                "-J",
            ],
        )
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting the iperf3 client: {e}"));
        match out {
            Ok(o) => match parse(&String::from_utf8_lossy(&o.stdout)) {
                Err(e) if e.contains("refused") && Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(50));
                }
                r => break r,
            },
            Err(e) => break Err(e),
        }
    };
    let stop = Instant::now() + Duration::from_secs(5);
    while matches!(srv.try_wait(), Ok(None)) && Instant::now() < stop {
        thread::sleep(Duration::from_millis(10));
    }
    if matches!(srv.try_wait(), Ok(None)) {
        let _ = srv.kill();
        let _ = srv.wait();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_json_gives_receiver_bytes_cpu_and_retransmits() {
        let json = r#"{"start":{},"intervals":[],"end":{"sum_sent":{"bytes":1300,"seconds":2.0,"retransmits":4},"sum_received":{"bytes":1250000000,"seconds":2.0},"cpu_utilization_percent":{"host_total":50.0,"remote_total":75.0}}}"#;
        let r = parse(json).expect("parses");
        assert_eq!(r.bytes, 1_250_000_000);
        assert_eq!(r.retransmits, 4);
        assert!((r.sender_cpu_s - 1.0).abs() < 1e-9);
        assert!((r.receiver_cpu_s - 1.5).abs() < 1e-9);
        let err =
            parse(r#"{"start":{},"error":"unable to connect to server: Connection refused"}"#)
                .expect_err("error");
        assert!(err.contains("refused"), "{err}");
        assert!(parse("").is_err());
    }
}
