//! The daemon's part of the board: its counters and every attached
//! application ([`DaemonSnapshot`], published by
//! [`Daemon::set_metrics`](crate::daemon::Daemon::set_metrics)), and those
//! as metric families ([`Service`]): daemon-wide series, then one series
//! per attachment with an `app` label (`command:pid`) and an info series
//! carrying its pid, uid and command.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;
use serde::{Deserialize, Serialize};

use super::families::Family;
use super::Board;

/// Daemon-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonCounters {
    /// Applications that attached.
    pub attachments_opened: u64,
    /// Attachments that said `Detach` and left.
    pub attachments_closed: u64,
    /// Attachments that hung up without `Detach` (exit, crash, kill).
    pub attachments_lost: u64,
    /// Attachments whose program `execve`d and whose new program took up
    /// what they held.
    pub attachments_exec: u64,
    /// Connections refused before attaching: over the pending limit, no
    /// hello in time, a bad hello, no memory slot free.
    pub attach_refused: u64,
    /// Messages that did not decode, or came with descriptors.
    pub bad_messages: u64,
    /// Connections reset because their attachment went away.
    pub conns_reset: u64,
    /// Connections read or written in one process and taken up, with
    /// their bytes, by another holding them (a forked child).
    pub conns_handed: u64,
    /// Connections reset because the `SO_REUSEPORT` socket they were
    /// spread to had 1024 waiting already.
    pub accept_overflow: u64,
    /// Connections reset because no socket on their port takes their
    /// peer's family (an IPv4 peer of a port with an IPv6-only socket
    /// only, and the reverse), as Linux refuses them.
    pub wrong_family: u64,
}

/// Counters of one attachment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentCounters {
    /// Work requests taken from its post ring and handed to the stack.
    pub posts: u64,
    /// Work requests refused (outside its memory, not its connection or
    /// region, over its limit, malformed); each aborts the connection it
    /// named, if that connection is the attachment's.
    pub posts_refused: u64,
    /// Completions written to its ring.
    pub completions: u64,
    /// Completions that found its ring full (it does not read them):
    /// held in order, and its posts and new connections wait meanwhile.
    pub completions_deferred: u64,
    /// Control requests served.
    pub requests: u64,
    /// Control requests refused.
    pub requests_refused: u64,
    /// Times its ring indices broke the protocol.
    pub ring_violations: u64,
}

/// What an operator sees of one attachment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentView {
    /// The daemon's number for it.
    pub id: u32,
    /// Process id (`SO_PEERCRED`).
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// The program (`/proc/PID/comm`, else what it said).
    pub command: String,
    /// Open connections.
    pub connections: usize,
    /// Ports it listens on.
    pub listening: Vec<u16>,
    /// Bytes of registered memory.
    pub memory_bytes: u64,
    /// Work requests posted and not completed.
    pub posted: u32,
    /// Its counters.
    pub counters: AttachmentCounters,
}

/// The daemon at one moment: what `/stats` shows under `daemon`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonSnapshot {
    /// The socket applications attach on.
    pub socket: String,
    /// When it was taken, milliseconds since the Unix epoch.
    pub taken_unix_ms: u64,
    /// Daemon-wide counters.
    pub counters: DaemonCounters,
    /// Every attachment, by id.
    pub attachments: Vec<AttachmentView>,
}

impl DaemonSnapshot {
    /// A snapshot taken now.
    pub fn new(
        socket: String,
        counters: DaemonCounters,
        attachments: Vec<AttachmentView>,
    ) -> DaemonSnapshot {
        DaemonSnapshot {
            socket,
            taken_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            counters,
            attachments,
        }
    }

    /// Each attachment's `app` label, in order: `command:pid`, with
    /// `#id` added where one process holds several attachments (so every
    /// series stays unique).
    pub fn app_labels(&self) -> Vec<String> {
        let base: Vec<String> = self
            .attachments
            .iter()
            .map(|a| format!("{}:{}", a.command, a.pid))
            .collect();
        base.iter()
            .zip(&self.attachments)
            .map(|(b, a)| {
                if base.iter().filter(|o| *o == b).count() > 1 {
                    format!("{b}#{}", a.id)
                } else {
                    b.clone()
                }
            })
            .collect()
    }
}

/// The board's daemon section as metric families, encoded on each scrape
/// (nothing when no daemon published).
#[derive(Debug)]
pub(super) struct Service(pub(super) Arc<Board>);

impl Collector for Service {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(d) = self.0.daemon() else {
            return Ok(());
        };
        let u = |n: u64| n as f64;
        let c = &d.counters;
        let mut daemon = vec![Family::gauge(
            "zerosplit_daemon_attachments",
            "Applications attached to the daemon now.",
            None,
        )];
        daemon[0].push(Vec::new(), d.attachments.len() as f64);
        for (name, help, v) in [
            (
                "zerosplit_daemon_attachments_opened",
                "Applications that attached.",
                c.attachments_opened,
            ),
            (
                "zerosplit_daemon_attachments_closed",
                "Attachments that detached and left.",
                c.attachments_closed,
            ),
            (
                "zerosplit_daemon_attachments_lost",
                "Attachments that hung up without detaching (exit, crash, kill).",
                c.attachments_lost,
            ),
            (
                "zerosplit_daemon_attachments_exec",
                "Attachments whose program exec'd, its sockets taken up by the new program.",
                c.attachments_exec,
            ),
            (
                "zerosplit_daemon_conns_handed",
                "Connections read or written in one process and taken up, with their bytes, by \
                 another holding them (a forked child).",
                c.conns_handed,
            ),
            (
                "zerosplit_daemon_attach_refused",
                "Connections to the socket refused before attaching (too many pending, no hello \
                 in time, a bad hello, no memory slot free).",
                c.attach_refused,
            ),
            (
                "zerosplit_daemon_bad_messages",
                "Control messages that did not decode or came with descriptors.",
                c.bad_messages,
            ),
            (
                "zerosplit_daemon_conns_reset",
                "Connections reset because their attachment went away.",
                c.conns_reset,
            ),
            (
                "zerosplit_daemon_accept_overflow",
                "Connections reset because the SO_REUSEPORT socket they were spread to had its \
                 queue full.",
                c.accept_overflow,
            ),
            (
                "zerosplit_daemon_wrong_family",
                "Connections reset because no socket on their port takes their peer's address \
                 family.",
                c.wrong_family,
            ),
        ] {
            let mut f = Family::counter(name, help, None);
            f.push(Vec::new(), u(v));
            daemon.push(f);
        }

        let mut info = Family::gauge(
            "zerosplit_attachment_info",
            "One series per attached application (value 1): its app label with its attachment \
             id, pid, uid and command.",
            None,
        );
        let mut gauges = [
            Family::gauge(
                "zerosplit_attachment_connections",
                "Connections the application holds.",
                None,
            ),
            Family::gauge(
                "zerosplit_attachment_memory",
                "Memory the application registered.",
                Some(Unit::Bytes),
            ),
            Family::gauge(
                "zerosplit_attachment_posted",
                "Work requests the application posted and that have not completed.",
                None,
            ),
        ];
        let mut counters = [
            Family::counter(
                "zerosplit_attachment_posts",
                "Work requests taken from the application's post ring.",
                None,
            ),
            Family::counter(
                "zerosplit_attachment_posts_refused",
                "Work requests refused (outside its memory, not its own, over its limit, \
                 malformed).",
                None,
            ),
            Family::counter(
                "zerosplit_attachment_completions",
                "Completions written to the application's ring.",
                None,
            ),
            Family::counter(
                "zerosplit_attachment_completions_deferred",
                "Completions that found the application's ring full (it does not read them); \
                 its posts and new connections wait meanwhile.",
                None,
            ),
            Family::counter(
                "zerosplit_attachment_requests",
                "Control requests served.",
                None,
            ),
            Family::counter(
                "zerosplit_attachment_requests_refused",
                "Control requests refused.",
                None,
            ),
            Family::counter(
                "zerosplit_attachment_ring_violations",
                "Times the application's ring indices broke the protocol.",
                None,
            ),
        ];
        for (a, app) in d.attachments.iter().zip(d.app_labels()) {
            let label = || vec![("app", app.clone())];
            info.push(
                vec![
                    ("app", app.clone()),
                    ("attachment", a.id.to_string()),
                    ("pid", a.pid.to_string()),
                    ("uid", a.uid.to_string()),
                    ("command", a.command.clone()),
                ],
                1.0,
            );
            let k = &a.counters;
            for (f, v) in
                gauges
                    .iter_mut()
                    .zip([a.connections as u64, a.memory_bytes, u64::from(a.posted)])
            {
                f.push(label(), u(v));
            }
            for (f, v) in counters.iter_mut().zip([
                k.posts,
                k.posts_refused,
                k.completions,
                k.completions_deferred,
                k.requests,
                k.requests_refused,
                k.ring_violations,
            ]) {
                f.push(label(), u(v));
            }
        }
        for f in daemon
            .into_iter()
            .chain([info])
            .chain(gauges)
            .chain(counters)
        {
            f.encode(&mut encoder)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;

    fn scrape(board: &Arc<Board>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Service(Arc::clone(board))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    fn view(id: u32, pid: u32, command: &str) -> AttachmentView {
        AttachmentView {
            id,
            pid,
            uid: 1000,
            command: command.into(),
            ..AttachmentView::default()
        }
    }

    fn daemon() -> DaemonSnapshot {
        let redis = AttachmentView {
            connections: 3,
            listening: vec![6379],
            memory_bytes: 64 << 20,
            posted: 12,
            counters: AttachmentCounters {
                posts: 40,
                posts_refused: 2,
                completions: 38,
                completions_deferred: 4,
                requests: 7,
                requests_refused: 1,
                ring_violations: 5,
            },
            ..view(1, 4242, "redis-server")
        };
        DaemonSnapshot::new(
            "/run/zerosplit/daemon.sock".into(),
            DaemonCounters {
                attachments_opened: 4,
                attachments_closed: 1,
                attachments_lost: 1,
                attachments_exec: 0,
                attach_refused: 2,
                bad_messages: 3,
                conns_reset: 6,
                conns_handed: 0,
                accept_overflow: 0,
                wrong_family: 1,
            },
            vec![redis, view(2, 77, "nc")],
        )
    }

    #[test]
    fn attachment_series_carry_the_app_label_and_their_values() {
        let board = Board::new();
        board.publish_daemon(daemon());
        let text = scrape(&board);
        for line in [
            r#"zerosplit_attachment_info{app="redis-server:4242",attachment="1",pid="4242",uid="1000",command="redis-server"} 1.0"#,
            r#"zerosplit_attachment_connections{app="redis-server:4242"} 3.0"#,
            r#"zerosplit_attachment_memory_bytes{app="redis-server:4242"} 67108864.0"#,
            r#"zerosplit_attachment_posted{app="redis-server:4242"} 12.0"#,
            r#"zerosplit_attachment_posts_total{app="redis-server:4242"} 40.0"#,
            r#"zerosplit_attachment_posts_refused_total{app="redis-server:4242"} 2.0"#,
            r#"zerosplit_attachment_completions_total{app="redis-server:4242"} 38.0"#,
            r#"zerosplit_attachment_completions_deferred_total{app="redis-server:4242"} 4.0"#,
            r#"zerosplit_attachment_requests_total{app="redis-server:4242"} 7.0"#,
            r#"zerosplit_attachment_requests_refused_total{app="redis-server:4242"} 1.0"#,
            r#"zerosplit_attachment_ring_violations_total{app="redis-server:4242"} 5.0"#,
            r#"zerosplit_attachment_connections{app="nc:77"} 0.0"#,
            "zerosplit_daemon_attachments 2.0",
            "zerosplit_daemon_attachments_opened_total 4.0",
            "zerosplit_daemon_attachments_closed_total 1.0",
            "zerosplit_daemon_attachments_lost_total 1.0",
            "zerosplit_daemon_attach_refused_total 2.0",
            "zerosplit_daemon_bad_messages_total 3.0",
            "zerosplit_daemon_conns_reset_total 6.0",
            "# TYPE zerosplit_attachment_posts counter",
            "# UNIT zerosplit_attachment_memory_bytes bytes",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing in:\n{text}"
            );
        }
    }

    /// Every per-attachment sample names its application: a series
    /// without the label could not be told apart from another's.
    #[test]
    fn every_attachment_sample_has_an_app_label() {
        let board = Board::new();
        board.publish_daemon(daemon());
        let text = scrape(&board);
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("zerosplit_attachment_"))
            .collect();
        assert_eq!(samples.len(), 2 * 11, "{text}");
        for s in samples {
            assert!(s.contains("{app=\""), "no app label: {s}");
        }
    }

    #[test]
    fn one_process_attached_twice_gets_two_distinct_app_labels() {
        let mut d = daemon();
        d.attachments = vec![view(3, 9, "bench"), view(5, 9, "bench"), view(6, 10, "x")];
        assert_eq!(d.app_labels(), ["bench:9#3", "bench:9#5", "x:10"]);
    }

    /// A command is what the application says: quotes and newlines in it
    /// are escaped, never a series of their own.
    #[test]
    fn a_hostile_command_cannot_forge_a_series() {
        let board = Board::new();
        let mut d = daemon();
        d.attachments = vec![view(1, 5, "x\"} 1\nzerosplit_daemon_attachments 99\n")];
        board.publish_daemon(d);
        let text = scrape(&board);
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("zerosplit_daemon_attachments 99")),
            "{text}"
        );
        assert!(text
            .lines()
            .any(|l| l == "zerosplit_daemon_attachments 1.0"));
    }

    #[test]
    fn no_daemon_no_daemon_series() {
        assert_eq!(scrape(&Board::new()), "# EOF\n");
    }
}
