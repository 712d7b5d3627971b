//! The board's snapshots as Prometheus metric families ([`Queues`]),
//! encoded on each scrape of `/metrics`: one series per queue and
//! transport, then per reason, verdict, state, … as each family says.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::{Board, QueueSnapshot};

/// The board as metric families, encoded on each scrape.
#[derive(Debug)]
pub(super) struct Queues(pub(super) Arc<Board>);

/// Labels of a series, in order (a queue's: `queue` and `transport`,
/// then its own).
pub(super) type Labels = Vec<(&'static str, String)>;

/// One metric family being written: each `add` (or `push`) is one series.
pub(super) struct Family<'a> {
    samples: Vec<(Labels, f64)>,
    name: &'a str,
    help: &'a str,
    unit: Option<Unit>,
    counter: bool,
}

impl<'a> Family<'a> {
    pub(super) fn counter(name: &'a str, help: &'a str, unit: Option<Unit>) -> Self {
        Family {
            samples: Vec::new(),
            name,
            help,
            unit,
            counter: true,
        }
    }

    pub(super) fn gauge(name: &'a str, help: &'a str, unit: Option<Unit>) -> Self {
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
        self.push(labels, v);
    }

    /// One series with exactly `labels`.
    pub(super) fn push(&mut self, labels: Labels, v: f64) {
        self.samples.push((labels, v));
    }

    pub(super) fn encode(self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
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
pub(super) mod tests {
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::metrics::ConnSnapshot;

    fn scrape(board: &Arc<Board>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Queues(Arc::clone(board))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    /// A board with one queue's snapshot (shared with the server's tests).
    pub(in crate::metrics) fn board() -> Arc<Board> {
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

    /// The board of [`board`] with a daemon and one attached application
    /// published, scraped with every collector `/metrics` registers for
    /// the board.
    fn scrape_all() -> String {
        use crate::metrics::attachments::Service;
        use crate::metrics::{AttachmentView, DaemonCounters, DaemonSnapshot};
        let board = board();
        board.publish_daemon(DaemonSnapshot::new(
            "/run/zerosplit/daemon.sock".into(),
            DaemonCounters::default(),
            vec![AttachmentView {
                id: 1,
                pid: 42,
                command: "app".into(),
                ..AttachmentView::default()
            }],
        ));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Queues(Arc::clone(&board))));
        registry.register_collector(Box::new(Service(Arc::clone(&board))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    /// Each `zerosplit_…` name in a PromQL expression, and whether it is
    /// the argument of `rate`, `irate` or `increase`.
    fn metric_refs(expr: &str) -> Vec<(&str, bool)> {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut refs = Vec::new();
        let mut i = 0;
        while i < expr.len() {
            let len = expr[i..].find(|c: char| !word(c)).unwrap_or(expr.len() - i);
            let name = &expr[i..i + len];
            if len > 0 && name.starts_with("zerosplit_") {
                let before = expr[..i].trim_end();
                let rated = ["rate(", "increase("].iter().any(|f| before.ends_with(f));
                refs.push((name, rated));
            }
            i += len.max(1);
            while i < expr.len() && !expr.is_char_boundary(i) {
                i += 1;
            }
        }
        refs
    }

    /// Every panel of the dashboard, rows' nested panels included.
    fn all_panels(panels: &serde_json::Value) -> Vec<&serde_json::Value> {
        let mut out = Vec::new();
        for p in panels.as_array().expect("panels") {
            out.push(p);
            if p.get("panels").is_some() {
                out.extend(all_panels(&p["panels"]));
            }
        }
        out
    }

    #[test]
    fn metric_refs_see_rate_arguments() {
        assert_eq!(
            metric_refs("sum by (q) (rate(zerosplit_a_total{m=\"x\"}[$__rate_interval])) > 0"),
            [("zerosplit_a_total", true)]
        );
        assert_eq!(
            metric_refs("time() - max(zerosplit_b) + increase( zerosplit_c_total[5m])"),
            [("zerosplit_b", false), ("zerosplit_c_total", true)]
        );
    }

    /// Every metric the shipped Grafana dashboard queries is one the
    /// endpoint serves (queues and daemon), counters are only queried
    /// through `rate`/`increase` and gauges never are, every daemon and
    /// attachment family has a panel, and panels neither share an id nor
    /// overlap.
    #[test]
    fn grafana_dashboard_queries_served_metrics() {
        let text = scrape_all();
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../deploy/grafana-dashboard.json"))
                .expect("dashboard JSON");
        let panels = all_panels(&dashboard["panels"]);
        let mut queried = Vec::new();
        for panel in &panels {
            if panel["type"] == "row" {
                continue;
            }
            for target in panel["targets"].as_array().expect("targets") {
                let expr = target["expr"].as_str().expect("expr");
                for (name, rated) in metric_refs(expr) {
                    assert!(
                        text.lines().any(|l| l.starts_with(&format!("{name}{{"))
                            || l.starts_with(&format!("{name} "))),
                        "the dashboard queries {name}, which /metrics does not serve"
                    );
                    let counter = name.strip_suffix("_total").is_some_and(|family| {
                        text.lines()
                            .any(|l| l == format!("# TYPE {family} counter"))
                    });
                    assert_eq!(
                        rated,
                        counter,
                        "{name} is {} but the dashboard {} it: {expr}",
                        if counter { "a counter" } else { "a gauge" },
                        if rated {
                            "takes the rate of"
                        } else {
                            "plots it raw"
                        },
                    );
                    queried.push(name);
                }
            }
        }
        assert!(
            queried.len() >= 10,
            "only {} metric references found",
            queried.len()
        );
        for l in text.lines() {
            let name = l.split(['{', ' ']).next().unwrap_or_default();
            if !l.starts_with('#')
                && (name.starts_with("zerosplit_daemon_")
                    || name.starts_with("zerosplit_attachment_"))
            {
                assert!(queried.contains(&name), "no panel shows {name}");
            }
        }
        let mut cells = std::collections::HashMap::new();
        for p in &panels {
            let g = &p["gridPos"];
            let n = |k: &str| g[k].as_u64().expect("gridPos");
            assert!(
                n("x") + n("w") <= 24,
                "panel {} is wider than the grid",
                p["id"]
            );
            for x in n("x")..n("x") + n("w") {
                for y in n("y")..n("y") + n("h") {
                    if let Some(other) = cells.insert((x, y), p["id"].clone()) {
                        panic!("panels {} and {other} overlap at ({x}, {y})", p["id"]);
                    }
                }
            }
        }
        let mut ids: Vec<u64> = panels
            .iter()
            .map(|p| p["id"].as_u64().expect("id"))
            .collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "panel ids repeat");
    }
}
