//! The metrics endpoint: Prometheus / OpenMetrics text on `/metrics`
//! (encoded by `prometheus-client`), the snapshots as JSON on `/stats`,
//! served by `tiny_http` on a thread of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::{Board, QueueSnapshot};

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint on {addr}: {reason}")]
pub struct MetricsError {
    addr: SocketAddr,
    reason: String,
}

/// The running endpoint; dropping it stops the server thread.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MetricsServer {
    /// The address it listens on (the port chosen if 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `board` on `addr` until the returned server is dropped.
///
/// # Errors
/// The address cannot be bound (in use, not local, no permission).
pub fn serve(addr: SocketAddr, board: Arc<Board>) -> Result<MetricsServer, MetricsError> {
    let server = tiny_http::Server::http(addr).map_err(|e| MetricsError {
        addr,
        reason: e.to_string(),
    })?;
    let bound = server.server_addr().to_ip().ok_or_else(|| MetricsError {
        addr,
        reason: "not an IP listener".into(),
    })?;
    let server = Arc::new(server);
    let srv = Arc::clone(&server);
    let thread = std::thread::Builder::new()
        .name("zs-metrics".into())
        .spawn(move || {
            let mut registry = Registry::default();
            registry.register_collector(Box::new(Queues(Arc::clone(&board))));
            for request in srv.incoming_requests() {
                let response = answer(request.url(), &registry, &board);
                let _ = request.respond(response);
            }
        })
        .map_err(|e| MetricsError {
            addr,
            reason: format!("spawning its thread: {e}"),
        })?;
    Ok(MetricsServer {
        server,
        thread: Some(thread),
        addr: bound,
    })
}

type Response = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn answer(url: &str, registry: &Registry, board: &Board) -> Response {
    let path = url.split('?').next().unwrap_or_default();
    let (status, body, content_type) = match path {
        "/metrics" => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => (
                    200,
                    text,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
                Err(e) => (500, format!("encoding failed: {e}\n"), "text/plain"),
            }
        }
        "/stats" => {
            let queues: Vec<QueueSnapshot> = board.read().iter().map(|s| (**s).clone()).collect();
            match serde_json::to_string(&queues) {
                Ok(json) => (200, json, "application/json"),
                Err(e) => (500, format!("encoding failed: {e}\n"), "text/plain"),
            }
        }
        "/" => (
            200,
            "zerosplit: /metrics (Prometheus), /stats (JSON)\n".to_owned(),
            "text/plain",
        ),
        _ => (404, format!("no such page: {path}\n"), "text/plain"),
    };
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .expect("a valid header");
    tiny_http::Response::from_data(body.into_bytes())
        .with_status_code(status)
        .with_header(header)
}

/// The board as metric families, encoded on each scrape.
#[derive(Debug)]
struct Queues(Arc<Board>);

/// Labels of a series: `queue` and `transport`, then its own.
type Labels = Vec<(&'static str, String)>;

/// One metric family being written: each `add` is one series.
struct Family<'a> {
    samples: Vec<(Labels, f64)>,
    name: &'a str,
    help: &'a str,
    unit: Option<Unit>,
    counter: bool,
}

impl<'a> Family<'a> {
    fn counter(name: &'a str, help: &'a str, unit: Option<Unit>) -> Self {
        Family {
            samples: Vec::new(),
            name,
            help,
            unit,
            counter: true,
        }
    }

    fn gauge(name: &'a str, help: &'a str, unit: Option<Unit>) -> Self {
        Family {
            counter: false,
            ..Self::counter(name, help, unit)
        }
    }

    fn add(&mut self, q: &QueueSnapshot, extra: &[(&'static str, &str)], v: f64) {
        let mut labels: Labels = vec![
            ("queue", q.queue.to_string()),
            ("transport", q.transport.clone()),
        ];
        labels.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        self.samples.push((labels, v));
    }

    fn encode(self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let kind = if self.counter {
            MetricType::Counter
        } else {
            MetricType::Gauge
        };
        let mut m = encoder.encode_descriptor(self.name, self.help, self.unit.as_ref(), kind)?;
        for (labels, v) in &self.samples {
            let e = m.encode_family(labels)?;
            if self.counter {
                ConstCounter::new(*v).encode(e)?;
            } else {
                ConstGauge::new(*v).encode(e)?;
            }
        }
        Ok(())
    }
}

impl Collector for Queues {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let queues = self.0.read();
        let u = |n: u64| n as f64;
        let mut packets = Family::counter(
            "zerosplit_packets",
            "Packets through the queue's AF_XDP sockets, by direction.",
            None,
        );
        let mut bytes = Family::counter(
            "zerosplit",
            "Bytes of those packets, headers included, by direction.",
            Some(Unit::Bytes),
        );
        let mut drops = Family::counter(
            "zerosplit_drops",
            "Packets dropped (or kept only in part), by reason.",
            None,
        );
        let mut verdicts = Family::counter(
            "zerosplit_placement_verdicts",
            "Placement verdicts of received segments.",
            None,
        );
        let mut placed = Family::counter(
            "zerosplit_placed",
            "Payload bytes written into posted application memory.",
            Some(Unit::Bytes),
        );
        let mut rtx = Family::counter("zerosplit_retransmits", "Segments sent again.", None);
        let mut timeouts = Family::counter(
            "zerosplit_loss_events",
            "Loss-recovery events by kind: rto (retransmission timeout), tlp (tail loss probe).",
            None,
        );
        let mut xdp = Family::counter(
            "zerosplit_xdp",
            "The kernel's XDP_STATISTICS summed over the queue's sockets.",
            None,
        );
        let mut loop_time = Family::counter(
            "zerosplit_poll_loop",
            "Time the queue's poll loop spent, by mode: busy (polling) or idle (asleep).",
            Some(Unit::Seconds),
        );
        let mut frames = Family::gauge(
            "zerosplit_umem_frames",
            "UMEM receive frames: free (free list and fill ring) or in_use (holding an unread packet).",
            None,
        );
        let mut conns = Family::gauge(
            "zerosplit_connections",
            "Open connections by TCP state.",
            None,
        );
        let mut taken = Family::gauge(
            "zerosplit_snapshot_timestamp",
            "When the queue last published these figures (Unix time).",
            Some(Unit::Seconds),
        );
        for q in &queues {
            packets.add(q, &[("direction", "rx")], u(q.rx_packets));
            packets.add(q, &[("direction", "tx")], u(q.tx_packets));
            bytes.add(q, &[("direction", "rx")], u(q.rx_bytes));
            bytes.add(q, &[("direction", "tx")], u(q.tx_bytes));
            for (reason, n) in &q.drops {
                drops.add(q, &[("reason", reason)], u(*n));
            }
            for (verdict, n) in &q.verdicts {
                verdicts.add(q, &[("verdict", verdict)], u(*n));
            }
            placed.add(q, &[], u(q.bytes_placed));
            rtx.add(q, &[], u(q.retransmits));
            timeouts.add(q, &[("kind", "rto")], u(q.rtos));
            timeouts.add(q, &[("kind", "tlp")], u(q.tail_loss_probes));
            for (stat, n) in &q.xdp {
                xdp.add(q, &[("stat", stat)], u(*n));
            }
            loop_time.add(
                q,
                &[("mode", "busy")],
                (q.uptime_seconds - q.loop_idle_seconds).max(0.0),
            );
            loop_time.add(q, &[("mode", "idle")], q.loop_idle_seconds);
            frames.add(q, &[("state", "free")], u(q.umem_frames_free));
            frames.add(q, &[("state", "in_use")], u(q.umem_frames_in_use));
            for (state, n) in q.states() {
                conns.add(q, &[("state", state)], u(n));
            }
            taken.add(q, &[], q.taken_unix_ms as f64 / 1000.0);
        }
        for f in [
            packets, bytes, drops, verdicts, placed, rtx, timeouts, xdp, loop_time, frames, conns,
            taken,
        ] {
            f.encode(&mut encoder)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ConnSnapshot, QueueSnapshot};

    fn scrape(board: &Arc<Board>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Queues(Arc::clone(board))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    fn board() -> Arc<Board> {
        let board = Board::new();
        board.publish(QueueSnapshot {
            queue: 1,
            transport: "tcp".into(),
            rx_packets: 10,
            tx_bytes: 1500,
            uptime_seconds: 4.0,
            loop_idle_seconds: 3.0,
            drops: [("bad_checksum".to_owned(), 3)].into(),
            verdicts: [("placed".to_owned(), 9)].into(),
            xdp: [("rx_ring_full".to_owned(), 2)].into(),
            connections: vec![ConnSnapshot {
                state: "ESTABLISHED".into(),
                ..ConnSnapshot::default()
            }],
            ..QueueSnapshot::default()
        });
        board
    }

    #[test]
    fn series_follow_prometheus_conventions() {
        let text = scrape(&board());
        for line in [
            r#"zerosplit_packets_total{queue="1",transport="tcp",direction="rx"} 10"#,
            r#"zerosplit_bytes_total{queue="1",transport="tcp",direction="tx"} 1500"#,
            r#"zerosplit_drops_total{queue="1",transport="tcp",reason="bad_checksum"} 3"#,
            r#"zerosplit_placement_verdicts_total{queue="1",transport="tcp",verdict="placed"} 9"#,
            r#"zerosplit_xdp_total{queue="1",transport="tcp",stat="rx_ring_full"} 2"#,
            r#"zerosplit_poll_loop_seconds_total{queue="1",transport="tcp",mode="busy"} 1.0"#,
            r#"zerosplit_connections{queue="1",transport="tcp",state="ESTABLISHED"} 1"#,
            "# TYPE zerosplit_drops counter",
            "# UNIT zerosplit_bytes bytes",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} missing in:\n{text}");
        }
    }

    /// Every metric the shipped Grafana dashboard queries is one the
    /// endpoint serves.
    #[test]
    fn grafana_dashboard_queries_served_metrics() {
        let text = scrape(&board());
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../deploy/grafana-dashboard.json"))
                .expect("dashboard JSON");
        let mut checked = 0;
        for panel in dashboard["panels"].as_array().expect("panels") {
            for target in panel["targets"].as_array().expect("targets") {
                let expr = target["expr"].as_str().expect("expr");
                for name in expr
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| w.starts_with("zerosplit_"))
                {
                    assert!(
                        text.lines().any(|l| l.starts_with(&format!("{name}{{"))),
                        "the dashboard queries {name}, which /metrics does not serve"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 10, "only {checked} metric references found");
    }
}
