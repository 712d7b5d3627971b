//! `zerosplit stats`: per-queue and per-connection figures of a running
//! stack, read from its metrics endpoint (`/stats`), laid out as `ss -ti`
//! lays out its own.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zerosplit::metrics::{ConnSnapshot, QueueSnapshot};

/// Options of `zerosplit stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stack's metrics endpoint (`[metrics] listen`, `--metrics`).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDRESS")]
    endpoint: String,
    /// Print again every SECONDS until interrupted.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1")]
    watch: Option<f64>,
    /// Print the figures as JSON (one array of queues per line), rates
    /// left out. (The text view reads twice, 0.5 s apart, for goodput.)
    #[arg(long)]
    json: bool,
    /// Print the endpoint's Prometheus text instead.
    #[arg(long, conflicts_with = "json")]
    prometheus: bool,
}

/// Runs `zerosplit stats`.
///
/// # Errors
/// The endpoint cannot be reached or answers something else.
pub fn run(args: Args) -> Result<()> {
    let base = format!("http://{}", args.endpoint.trim_start_matches("http://"));
    if args.prometheus {
        print!("{}", fetch(&format!("{base}/metrics"))?);
        return Ok(());
    }
    let every = match args.watch {
        Some(s) if !(0.1..=3600.0).contains(&s) => {
            bail!("--watch must be between 0.1 and 3600 seconds, got {s}")
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let read = || -> Result<(String, Vec<QueueSnapshot>)> {
        let text = fetch(&format!("{base}/stats"))?;
        let queues = serde_json::from_str(&text)
            .with_context(|| format!("{base}/stats did not answer zerosplit's figures"))?;
        Ok((text, queues))
    };
    // Goodput is a change over time: the text view reads twice, half a
    // second apart, before its first print.
    let mut previous: Option<(Instant, Vec<QueueSnapshot>)> = None;
    if !args.json {
        previous = Some((Instant::now(), read()?.1));
        std::thread::sleep(Duration::from_millis(500));
    }
    loop {
        let (text, queues) = read()?;
        let now = Instant::now();
        if args.json {
            println!("{}", text.trim_end());
        } else {
            let earlier = previous.as_ref().map(|(t, q)| (now - *t, q.as_slice()));
            print!("{}", render(&queues, earlier));
        }
        let Some(every) = every else {
            return Ok(());
        };
        previous = Some((now, queues));
        std::thread::sleep(every);
        if !args.json {
            println!();
        }
    }
}

fn fetch(url: &str) -> Result<String> {
    let mut response = ureq::get(url).call().with_context(|| {
        format!("reading {url}: is a zerosplit stack running with [metrics] listen (or --metrics) at that address?")
    })?;
    response
        .body_mut()
        .read_to_string()
        .with_context(|| format!("reading {url}"))
}

/// The figures as text; goodput from the change since `earlier` (how long
/// ago, and what it was), when there is one.
fn render(queues: &[QueueSnapshot], earlier: Option<(Duration, &[QueueSnapshot])>) -> String {
    let mut out = String::new();
    if queues.is_empty() {
        out.push_str("no queue has published figures yet\n");
    }
    let before: HashMap<(u32, &str, &str), &ConnSnapshot> = earlier
        .iter()
        .flat_map(|(_, qs)| qs.iter())
        .flat_map(|q| {
            q.connections
                .iter()
                .map(move |c| ((q.queue, c.local.as_str(), c.peer.as_str()), c))
        })
        .collect();
    let secs = earlier.map(|(d, _)| d.as_secs_f64());
    for q in queues {
        let drops: u64 = q.drops.values().sum();
        let busy = if q.uptime_seconds > 0.0 {
            100.0 * (1.0 - q.loop_idle_seconds / q.uptime_seconds)
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "queue {} {} ({}): rx {} pkts {} B, tx {} pkts {} B, retrans {}, rtos {}, tlps {}, drops {}{}, loop busy {:.0}%, umem frames free {} in use {}",
            q.queue,
            q.interface,
            q.transport,
            q.rx_packets,
            q.rx_bytes,
            q.tx_packets,
            q.tx_bytes,
            q.retransmits,
            q.rtos,
            q.tail_loss_probes,
            drops,
            nonzero(&q.drops),
            busy,
            q.umem_frames_free,
            q.umem_frames_in_use,
        );
        let _ = writeln!(out, "{:<12} {:<22} {:<22}", "State", "Local", "Peer");
        for c in &q.connections {
            let _ = writeln!(
                out,
                "{:<12} {:<22} {:<22}",
                ss_state(&c.state),
                c.local,
                c.peer
            );
            let mut line = String::from("\t");
            if let Some(t) = &c.tcp {
                let _ = write!(line, "{}", t.cc);
                if !t.cc_phase.is_empty() {
                    let _ = write!(line, " phase:{}", t.cc_phase);
                }
                let _ = write!(
                    line,
                    " ca_state:{} rto:{} mss:{} cwnd:{} ssthresh:{}",
                    t.ca_state,
                    t.rto_ms,
                    t.mss,
                    t.cwnd,
                    t.ssthresh.map_or("-".into(), |v| v.to_string())
                );
                if let Some(rtt) = t.rtt_us {
                    let _ = write!(
                        line,
                        " rtt:{:.3}/{:.3}",
                        rtt as f64 / 1000.0,
                        t.rttvar_us as f64 / 1000.0
                    );
                }
                if let Some(m) = t.minrtt_us {
                    let _ = write!(line, " minrtt:{:.3}", m as f64 / 1000.0);
                }
                if let Some(p) = t.pacing_rate {
                    let _ = write!(line, " pacing_rate:{}", bits(p as f64 * 8.0));
                }
                let _ = write!(
                    line,
                    " unacked:{} retrans:{} rtos:{} tlps:{} sack_holes:{} segs_out:{} segs_in:{} snd_wnd:{}",
                    t.unacked, t.retrans, t.rtos, t.tlps, t.sack_holes, t.segs_out, t.segs_in, t.snd_wnd
                );
            }
            let _ = write!(
                line,
                " bytes_acked:{} bytes_received:{} posted_recv:{} posted_send:{}",
                c.bytes_acked, c.bytes_received, c.posted_recv, c.posted_send
            );
            if let (Some(secs), Some(b)) = (
                secs,
                before.get(&(q.queue, c.local.as_str(), c.peer.as_str())),
            ) {
                let moved = (c.bytes_acked + c.bytes_received)
                    .saturating_sub(b.bytes_acked + b.bytes_received);
                let _ = write!(line, " goodput:{}", bits(moved as f64 * 8.0 / secs));
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    out
}

/// `ss`'s short state names.
fn ss_state(s: &str) -> &str {
    match s {
        "ESTABLISHED" => "ESTAB",
        other => other,
    }
}

fn nonzero(m: &std::collections::BTreeMap<String, u64>) -> String {
    let v: Vec<String> = m
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if v.is_empty() {
        String::new()
    } else {
        format!(" ({})", v.join(", "))
    }
}

/// A rate in bits per second, as `ss` prints it.
fn bits(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2}Gbps", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1}Mbps", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1}Kbps", bps / 1e3)
    } else {
        format!("{bps:.0}bps")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerosplit::metrics::TcpSnapshot;

    fn queue(acked: u64) -> QueueSnapshot {
        QueueSnapshot {
            interface: "veth0".into(),
            transport: "tcp".into(),
            uptime_seconds: 10.0,
            loop_idle_seconds: 7.5,
            drops: [("bad_checksum".to_owned(), 2), ("fragment".to_owned(), 0)].into(),
            connections: vec![ConnSnapshot {
                local: "198.18.0.1:5000".into(),
                peer: "198.18.0.2:7".into(),
                state: "ESTABLISHED".into(),
                bytes_acked: acked,
                tcp: Some(TcpSnapshot {
                    cc: "cubic".into(),
                    cc_phase: "slow_start".into(),
                    ca_state: "open".into(),
                    rtt_us: Some(1500),
                    rttvar_us: 250,
                    ..TcpSnapshot::default()
                }),
                ..ConnSnapshot::default()
            }],
            ..QueueSnapshot::default()
        }
    }

    #[test]
    fn renders_ss_fields_and_goodput_from_the_change() {
        let before = [queue(1_000_000)];
        let text = render(
            &[queue(126_000_000)],
            Some((Duration::from_secs(1), &before)),
        );
        for want in [
            "ESTAB",
            "198.18.0.1:5000",
            "cubic phase:slow_start ca_state:open",
            "rtt:1.500/0.250",
            "goodput:1.00Gbps",
            "drops 2 (bad_checksum 2)",
            "loop busy 25%",
        ] {
            assert!(text.contains(want), "{want:?} missing in:\n{text}");
        }
        assert!(!render(&[queue(5)], None).contains("goodput"));
    }
}
