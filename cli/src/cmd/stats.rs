//! `zerosplit stats`: per-queue and per-connection figures of a running
//! stack, read from its metrics endpoint (`/stats`), laid out as `ss -ti`
//! lays out its own; for a daemon, then its attached applications as a
//! table.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zerosplit::config::ByteSize;
use zerosplit::metrics::{ConnSnapshot, DaemonSnapshot, QueueSnapshot, Stats};

/// Options of `zerosplit stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stack's metrics endpoint (`[metrics] listen`, `--metrics`).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDRESS")]
    endpoint: String,
    /// Print again every SECONDS until interrupted.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1")]
    watch: Option<f64>,
    /// Print the figures as JSON (one object per line: `queues`, and
    /// `daemon` for a daemon), rates left out. (The text view reads twice, 0.5 s apart, for goodput.)
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
    let read = || -> Result<(String, Stats)> {
        let text = fetch(&format!("{base}/stats"))?;
        let stats = serde_json::from_str(&text)
            .with_context(|| format!("{base}/stats did not answer zerosplit's figures"))?;
        Ok((text, stats))
    };
    // Goodput is a change over time: the text view reads twice, half a
    // second apart, before its first print.
    let mut previous: Option<(Instant, Vec<QueueSnapshot>)> = None;
    if !args.json {
        previous = Some((Instant::now(), read()?.1.queues));
        std::thread::sleep(Duration::from_millis(500));
    }
    loop {
        let (text, stats) = read()?;
        let now = Instant::now();
        if args.json {
            println!("{}", text.trim_end());
        } else {
            let earlier = previous.as_ref().map(|(t, q)| (now - *t, q.as_slice()));
            print!("{}", render(&stats.queues, earlier));
            if let Some(d) = &stats.daemon {
                print!("{}", render_daemon(d));
            }
        }
        let Some(every) = every else {
            return Ok(());
        };
        previous = Some((now, stats.queues));
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

/// The daemon's counters, then its attachments as a table.
fn render_daemon(d: &DaemonSnapshot) -> String {
    let c = &d.counters;
    let mut out = format!(
        "daemon {}: {} attached (opened {}, closed {}, lost {}, exec'd {}, attach refused {}), bad messages {}, connections reset {}, handed {}\n",
        d.socket,
        d.attachments.len(),
        c.attachments_opened,
        c.attachments_closed,
        c.attachments_lost,
        c.attachments_exec,
        c.attach_refused,
        c.bad_messages,
        c.conns_reset,
        c.conns_handed,
    );
    if d.attachments.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "{:>4} {:>8} {:>6} {:<16} {:>5} {:<12} {:>9} {:>6} {:>7}",
        "ID", "PID", "UID", "COMMAND", "CONNS", "LISTEN", "MEMORY", "POSTED", "REFUSED"
    );
    for a in &d.attachments {
        let listen: Vec<String> = a.listening.iter().map(u16::to_string).collect();
        let listen = if listen.is_empty() {
            "-".to_owned()
        } else {
            listen.join(",")
        };
        let refused = a.counters.posts_refused + a.counters.requests_refused;
        let _ = writeln!(
            out,
            "{:>4} {:>8} {:>6} {:<16} {:>5} {:<12} {:>9} {:>6} {:>7}",
            a.id,
            a.pid,
            a.uid,
            a.command.escape_debug().to_string(),
            a.connections,
            listen,
            ByteSize(a.memory_bytes).to_string(),
            a.posted,
            refused,
        );
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

    fn daemon() -> DaemonSnapshot {
        use zerosplit::metrics::{AttachmentCounters, AttachmentView, DaemonCounters};
        DaemonSnapshot {
            socket: "/run/zerosplit/daemon.sock".into(),
            counters: DaemonCounters {
                attachments_opened: 3,
                attachments_lost: 1,
                ..DaemonCounters::default()
            },
            attachments: vec![
                AttachmentView {
                    id: 1,
                    pid: 4242,
                    uid: 1000,
                    command: "redis-server".into(),
                    connections: 3,
                    listening: vec![6379, 6380],
                    memory_bytes: 64 << 20,
                    posted: 12,
                    counters: AttachmentCounters {
                        posts_refused: 2,
                        requests_refused: 1,
                        ..AttachmentCounters::default()
                    },
                },
                AttachmentView {
                    id: 2,
                    pid: 77,
                    command: "nc\nEVIL".into(),
                    ..AttachmentView::default()
                },
            ],
            ..DaemonSnapshot::default()
        }
    }

    #[test]
    fn renders_the_attachments_as_a_table() {
        let text = render_daemon(&daemon());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[0].starts_with(
                "daemon /run/zerosplit/daemon.sock: 2 attached (opened 3, closed 0, lost 1,"
            ),
            "{text}"
        );
        let cols = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            cols(lines[1]),
            ["ID", "PID", "UID", "COMMAND", "CONNS", "LISTEN", "MEMORY", "POSTED", "REFUSED"]
        );
        assert_eq!(
            cols(lines[2]),
            [
                "1",
                "4242",
                "1000",
                "redis-server",
                "3",
                "6379,6380",
                "64MiB",
                "12",
                "3"
            ]
        );
        // A command cannot break the table: its newline is shown escaped.
        assert_eq!(
            cols(lines[3]),
            ["2", "77", "0", "nc\\nEVIL", "0", "-", "0B", "0", "0"]
        );
        // Every row lines up under the header.
        let at = |l: &str| l.find("MEMORY").or_else(|| l.find("64MiB"));
        assert_eq!(at(lines[1]).map(|i| i + 6), at(lines[2]).map(|i| i + 5));
        let empty = DaemonSnapshot::default();
        assert_eq!(render_daemon(&empty).lines().count(), 1);
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
