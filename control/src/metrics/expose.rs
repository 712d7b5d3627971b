//! The metrics endpoint: Prometheus / OpenMetrics text on `/metrics`
//! (encoded by `prometheus-client`), the snapshots as JSON on `/stats`
//! ([`Stats`](super::Stats): the queues, and the daemon's section in a
//! daemon).
//!
//! It runs inside the process it watches (under `exec`, the application's),
//! so everything it takes is bounded: at most `max_connections` requests
//! at once, one thread each (further connections get `503` and are closed),
//! a request head of at most [`MAX_REQUEST_HEAD`] bytes arriving within
//! [`REQUEST_TIMEOUT`] (`431` / `408` otherwise: a slow client cannot hold
//! a slot), no request body (`413`), `GET`/`HEAD` only, one request per
//! connection. Every refusal is counted by reason in
//! `zerosplit_metrics_refused_total`. The request head is parsed by
//! `httparse`; the accept loop is ours, because `tiny_http` (used before)
//! offers none of these bounds.
//!
//! `/stats` lists every connection's peer and TCP state, without
//! authentication: a listen address that is not loopback is warned about
//! ([`MetricsServer::exposure`], logged and printed by the commands).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::attachments::Service;
use super::families::Queues;
use super::Board;

/// Concurrent connections served unless configured
/// (`metrics.max_connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// Time a client has to send its whole request head (and to take the
/// answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest request head read, bytes.
pub const MAX_REQUEST_HEAD: usize = 8 << 10;

/// Request headers parsed at most.
const MAX_HEADERS: usize = 32;

/// How often the accept loop looks for a stop request when idle.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint on {addr}: {reason}")]
pub struct MetricsError {
    addr: SocketAddr,
    reason: String,
}

/// Why a connection was refused, one counter each.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// `max_connections` were being served.
    OverCapacity,
    /// The request head did not arrive within [`REQUEST_TIMEOUT`].
    Timeout,
    /// The head exceeded [`MAX_REQUEST_HEAD`], or a body was sent.
    TooLarge,
    /// Not HTTP, too many headers, or a method other than GET/HEAD.
    BadRequest,
}

impl Refusal {
    const ALL: [Refusal; 4] = [
        Refusal::OverCapacity,
        Refusal::Timeout,
        Refusal::TooLarge,
        Refusal::BadRequest,
    ];

    fn name(self) -> &'static str {
        match self {
            Refusal::OverCapacity => "over_capacity",
            Refusal::Timeout => "timeout",
            Refusal::TooLarge => "too_large",
            Refusal::BadRequest => "bad_request",
        }
    }
}

/// The endpoint's own counters.
#[derive(Debug, Default)]
struct Endpoint {
    refused: [AtomicU64; 4],
    /// Connections being served now.
    active: AtomicUsize,
}

impl Endpoint {
    fn refuse(&self, r: Refusal) {
        self.refused[r as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// The running endpoint; dropping it stops accepting (requests being
/// served finish within their timeout on their own threads).
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
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

    /// A warning to show when the address is not loopback: it names the
    /// address and what anyone who reaches it can read.
    pub fn exposure(&self) -> Option<String> {
        exposure(self.addr)
    }
}

fn exposure(addr: SocketAddr) -> Option<String> {
    (!addr.ip().is_loopback()).then(|| {
        format!(
            "warning: the metrics endpoint listens on {addr}, which is not a loopback address: \
             anyone who can reach it reads /metrics (counters) and /stats (every connection's \
             local and peer address, TCP state and byte counts) without authentication; \
             give 127.0.0.1:PORT unless that is meant"
        )
    })
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `board` on `addr` until the returned server is dropped, with at
/// most [`DEFAULT_MAX_CONNECTIONS`] connections at once.
///
/// # Errors
/// The address cannot be bound (in use, not local, no permission).
pub fn serve(addr: SocketAddr, board: Arc<Board>) -> Result<MetricsServer, MetricsError> {
    serve_with(addr, board, DEFAULT_MAX_CONNECTIONS)
}

/// [`serve`] with at most `max_connections` (at least 1) connections at
/// once. A non-loopback address is logged as a warning
/// ([`MetricsServer::exposure`]).
///
/// # Errors
/// The address cannot be bound, or the thread cannot start.
pub fn serve_with(
    addr: SocketAddr,
    board: Arc<Board>,
    max_connections: usize,
) -> Result<MetricsServer, MetricsError> {
    let err = |reason: String| MetricsError { addr, reason };
    let listener = TcpListener::bind(addr).map_err(|e| err(e.to_string()))?;
    let bound = listener.local_addr().map_err(|e| err(e.to_string()))?;
    // Non-blocking, so the loop sees a stop request without a connection.
    listener
        .set_nonblocking(true)
        .map_err(|e| err(e.to_string()))?;
    if let Some(w) = exposure(bound) {
        log::warn!("{w}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let cap = max_connections.max(1);
    let thread = std::thread::Builder::new()
        .name("zs-metrics".into())
        .spawn(move || {
            let endpoint = Arc::new(Endpoint::default());
            let mut registry = Registry::default();
            registry.register_collector(Box::new(Queues(Arc::clone(&board))));
            registry.register_collector(Box::new(Service(Arc::clone(&board))));
            registry.register_collector(Box::new(EndpointCollector(Arc::clone(&endpoint))));
            let shared = Arc::new((registry, board));
            accept_loop(&listener, &flag, cap, &endpoint, &shared);
        })
        .map_err(|e| err(format!("spawning its thread: {e}")))?;
    Ok(MetricsServer {
        stop,
        thread: Some(thread),
        addr: bound,
    })
}

fn accept_loop(
    listener: &TcpListener,
    stop: &AtomicBool,
    cap: usize,
    endpoint: &Arc<Endpoint>,
    shared: &Arc<(Registry, Arc<Board>)>,
) {
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                log::warn!("metrics endpoint: accept: {e}");
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        if endpoint.active.load(Ordering::Acquire) >= cap {
            endpoint.refuse(Refusal::OverCapacity);
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            send(
                &stream,
                503,
                "too many connections to the metrics endpoint\n",
                "text/plain",
                false,
            );
            continue;
        }
        endpoint.active.fetch_add(1, Ordering::AcqRel);
        let (ep, sh) = (Arc::clone(endpoint), Arc::clone(shared));
        let spawned = std::thread::Builder::new()
            .name("zs-metrics-conn".into())
            .spawn(move || {
                serve_one(&stream, &ep, &sh.0, &sh.1);
                ep.active.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            endpoint.active.fetch_sub(1, Ordering::AcqRel);
            endpoint.refuse(Refusal::OverCapacity);
            log::warn!("metrics endpoint: no thread for a connection: {e}");
        }
    }
}

/// Reads one request head within the bounds and answers it.
fn serve_one(stream: &TcpStream, endpoint: &Endpoint, registry: &Registry, board: &Board) {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let refuse = |r: Refusal, status: u16, why: &str| {
        endpoint.refuse(r);
        send(stream, status, why, "text/plain", false);
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return refuse(Refusal::Timeout, 408, "request head not received in time\n");
        }
        let room = (MAX_REQUEST_HEAD + 1 - buf.len()).min(chunk.len());
        match (&*stream).read(&mut chunk[..room]) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return refuse(Refusal::Timeout, 408, "request head not received in time\n");
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                let has_body = req.headers.iter().any(|h| {
                    h.name.eq_ignore_ascii_case("transfer-encoding")
                        || (h.name.eq_ignore_ascii_case("content-length")
                            && h.value
                                .iter()
                                .any(|b| *b != b'0' && !b.is_ascii_whitespace()))
                });
                if has_body {
                    return refuse(Refusal::TooLarge, 413, "no request body is accepted\n");
                }
                let head = match req.method {
                    Some("GET") => false,
                    Some("HEAD") => true,
                    _ => return refuse(Refusal::BadRequest, 405, "GET or HEAD only\n"),
                };
                let (status, body, content_type) = answer(req.path.unwrap_or("/"), registry, board);
                send(stream, status, &body, content_type, head);
                return;
            }
            Ok(httparse::Status::Partial) if buf.len() > MAX_REQUEST_HEAD => {
                return refuse(Refusal::TooLarge, 431, "request head too large\n");
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return refuse(Refusal::TooLarge, 431, "too many request headers\n");
            }
            Err(_) => return refuse(Refusal::BadRequest, 400, "not an HTTP request\n"),
        }
    }
}

/// Writes a whole response and closes our side.
fn send(stream: &TcpStream, status: u16, body: &str, content_type: &str, head_only: bool) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    let _ = (&*stream).write_all(&out);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Drain what the client still sends (briefly), so closing does not
    // reset the connection before it reads the answer.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let mut sink = [0u8; 1024];
    for _ in 0..16 {
        match (&*stream).read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

fn answer(url: &str, registry: &Registry, board: &Board) -> (u16, String, &'static str) {
    let path = url.split('?').next().unwrap_or_default();
    match path {
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
        "/stats" => match serde_json::to_string(&board.stats()) {
            Ok(json) => (200, json, "application/json"),
            Err(e) => (500, format!("encoding failed: {e}\n"), "text/plain"),
        },
        "/" => (
            200,
            "zerosplit: /metrics (Prometheus), /stats (JSON)\n".to_owned(),
            "text/plain",
        ),
        _ => (404, format!("no such page: {path}\n"), "text/plain"),
    }
}

/// The endpoint's refusals as a metric family.
#[derive(Debug)]
struct EndpointCollector(Arc<Endpoint>);

impl Collector for EndpointCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut m = encoder.encode_descriptor(
            "zerosplit_metrics_refused",
            "Connections to this endpoint refused, by reason: over_capacity (metrics.max_connections \
             being served), timeout (request head not received in time), too_large (head or body), \
             bad_request.",
            None,
            MetricType::Counter,
        )?;
        for r in Refusal::ALL {
            let n = self.0.refused[r as usize].load(Ordering::Relaxed);
            ConstCounter::new(n).encode(m.encode_family(&[("reason", r.name())])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::families::tests::board;

    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    fn local() -> SocketAddr {
        "127.0.0.1:0".parse().expect("addr")
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s
    }

    /// What the server sends before it closes, read for at most `secs`
    /// (a server that never answers gives what it sent so far).
    fn reply(s: &mut TcpStream, secs: u64) -> String {
        s.set_read_timeout(Some(Duration::from_secs(secs)))
            .expect("timeout");
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    }

    /// GET `path`, retried for a few seconds while the server is at its cap.
    fn get(addr: SocketAddr, path: &str) -> String {
        let start = Instant::now();
        loop {
            let mut s = connect(addr);
            let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            let r = reply(&mut s, 10);
            if r.starts_with("HTTP/1.1 200") || start.elapsed() > Duration::from_secs(10) {
                return r;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn connections_beyond_the_cap_are_refused_and_counted() {
        let server = serve(local(), board()).expect("serve");
        let addr = server.addr();
        let idle: Vec<TcpStream> = (0..DEFAULT_MAX_CONNECTIONS)
            .map(|_| connect(addr))
            .collect();
        let mut extra = connect(addr);
        let r = reply(&mut extra, 3);
        assert!(
            r.starts_with("HTTP/1.1 503"),
            "connection {} of {DEFAULT_MAX_CONNECTIONS} allowed: {r:?}",
            DEFAULT_MAX_CONNECTIONS + 1
        );
        drop(idle);
        let text = get(addr, "/metrics");
        assert!(
            text.contains(r#"zerosplit_metrics_refused_total{reason="over_capacity"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn a_slow_loris_client_is_timed_out() {
        let server = serve(local(), board()).expect("serve");
        let addr = server.addr();
        let mut s = connect(addr);
        let start = Instant::now();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
        // One header byte every 200 ms, never ending the head.
        let mut closed = false;
        while start.elapsed() < Duration::from_secs(15) {
            if s.write_all(b"X").is_err() {
                closed = true;
                break;
            }
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .expect("timeout");
            let mut b = [0u8; 512];
            match s.read(&mut b) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(_) => {
                    assert!(String::from_utf8_lossy(&b).starts_with("HTTP/1.1 408"));
                    closed = true;
                    break;
                }
                Err(_) => {}
            }
        }
        assert!(
            closed,
            "a client trickling its request head was kept for 15 s"
        );
        assert!(
            start.elapsed() >= REQUEST_TIMEOUT - Duration::from_millis(500),
            "closed before the timeout"
        );
        let text = get(addr, "/metrics");
        assert!(
            text.contains(r#"zerosplit_metrics_refused_total{reason="timeout"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn an_oversized_request_is_rejected() {
        let server = serve(local(), board()).expect("serve");
        let addr = server.addr();
        let mut s = connect(addr);
        let head = format!(
            "GET /stats HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 << 10)
        );
        let _ = s.write_all(head.as_bytes());
        let r = reply(&mut s, 10);
        assert!(r.starts_with("HTTP/1.1 431"), "{r:?}");
        let mut s = connect(addr);
        let _ = s.write_all(b"POST /stats HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n");
        let r = reply(&mut s, 10);
        assert!(r.starts_with("HTTP/1.1 413"), "{r:?}");
        let text = get(addr, "/metrics");
        assert!(
            text.contains(r#"zerosplit_metrics_refused_total{reason="too_large"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn stats_still_answer_within_the_bounds() {
        let server = serve(local(), board()).expect("serve");
        let r = get(server.addr(), "/stats");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.contains("\"transport\":\"tcp\""), "{r}");
    }

    /// A daemon's board: `/stats` carries its section (read back as
    /// `zerosplit stats` reads it), `/metrics` its series.
    #[test]
    fn a_daemon_section_is_served_on_both_pages() {
        use crate::metrics::{AttachmentView, DaemonCounters, DaemonSnapshot, Stats};
        let b = board();
        let view = AttachmentView {
            id: 1,
            pid: 31,
            command: "nc".into(),
            connections: 2,
            ..AttachmentView::default()
        };
        let counters = DaemonCounters {
            attachments_lost: 4,
            ..DaemonCounters::default()
        };
        b.publish_daemon(DaemonSnapshot::new("/s".into(), counters, vec![view]));
        let server = serve(local(), b).expect("serve");
        let r = get(server.addr(), "/stats");
        let body = r.split("\r\n\r\n").nth(1).expect("a body");
        let stats: Stats = serde_json::from_str(body).expect("Stats JSON");
        assert_eq!(stats.queues.len(), 1);
        let d = stats.daemon.expect("the daemon section");
        assert_eq!(
            (d.counters.attachments_lost, d.attachments[0].connections),
            (4, 2)
        );
        let text = get(server.addr(), "/metrics");
        assert!(
            text.contains(r#"zerosplit_attachment_connections{app="nc:31"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn a_non_loopback_address_is_warned_about() {
        let any = serve("0.0.0.0:0".parse().expect("addr"), board()).expect("serve");
        let w = any.exposure().expect("a warning for 0.0.0.0");
        assert!(
            w.contains(&any.addr().to_string())
                && w.contains("not a loopback address")
                && w.contains("/stats")
                && w.contains("without authentication"),
            "{w}"
        );
        let lo = serve(local(), board()).expect("serve");
        assert_eq!(lo.exposure(), None);
    }
}
