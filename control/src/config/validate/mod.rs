//! The rules a configuration must keep beyond its types: ranges, and
//! combinations of values that cannot work together. Each rule reports the
//! dotted key it is about and says what would be right.

use std::collections::HashSet;
use std::time::Duration;

use ::datapath::config::{MAX_FRAGS, MAX_FRAME_COUNT, MAX_RING_SIZE};
use ::datapath::config::{MAX_FRAME_SIZE, MIN_FRAME_SIZE};
use ::datapath::nic::{MAX_FLOWS, MAX_PLACED_RANGES, MAX_REGIONS, MAX_SEGMENTS};
use ::datapath::steer::MAX_QUEUES;

use super::error::Problem;
use super::units::Dur;
use super::{Config, ThreadMode, TransportKind, TxStrategyName};

mod transport;
use transport::transport;

/// Ethernet header bytes in front of the IP datagram.
const ETH_HEADER: u32 = proto::ETH_HEADER_LEN as u32;
/// Smallest MTU the stack accepts (RFC 791: every host takes 576-byte datagrams).
const MIN_MTU: u32 = 576;
/// Largest IPv4 datagram.
const MAX_MTU: u32 = 65535;
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    pub(super) fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            key: key.into(),
            message: message.into(),
            line_column: None,
        });
    }

    pub(super) fn at_least<T: PartialOrd + std::fmt::Display>(
        &mut self,
        key: &str,
        value: T,
        min: T,
    ) {
        if value < min {
            self.add(key, format!("{value} is below the minimum {min}"));
        }
    }

    /// `value` must lie in `min..=max`; `max` is the documented upper bound
    /// of a key that sizes memory or a queue.
    pub(super) fn within<T: PartialOrd + std::fmt::Display>(
        &mut self,
        key: &str,
        value: T,
        min: T,
        max: T,
    ) {
        if value > max {
            self.add(key, format!("{value} is above the maximum {max}"));
        } else {
            self.at_least(key, value, min);
        }
    }
}

/// Checks every rule; an empty list means the configuration is usable.
pub(super) fn check(c: &Config) -> Vec<Problem> {
    let mut p = Problems::default();
    interface(c, &mut p);
    umem(c, &mut p);
    flows(c, &mut p);
    listen_and_ports(c, &mut p);
    transport(c, &mut p);
    threads(c, &mut p);
    metrics(c, &mut p);
    capture(c, &mut p);
    daemon(c, &mut p);
    p.0
}

fn interface(c: &Config, p: &mut Problems) {
    let i = &c.interface;
    let name = &i.name;
    if name.is_empty() {
        p.add("interface.name", "is empty: name the network interface");
    } else if name.len() > 15 {
        p.add(
            "interface.name",
            format!("{name:?} is longer than the kernel's 15-byte limit (IFNAMSIZ - 1)"),
        );
    } else if name == "."
        || name == ".."
        || name.contains(['/', ':'])
        || name.contains(char::is_whitespace)
    {
        p.add(
            "interface.name",
            format!("{name:?} is not a valid interface name (no '/', ':' or spaces, not . or ..)"),
        );
    }
    if i.queues.is_empty() {
        p.add(
            "interface.queues",
            "is empty: list at least one queue id, like [0]",
        );
    }
    let mut seen = HashSet::new();
    for (n, &q) in i.queues.iter().enumerate() {
        if q >= MAX_QUEUES {
            p.add(
                format!("interface.queues[{n}]"),
                format!("queue {q} is above the {MAX_QUEUES} queues the steering program serves (0..{MAX_QUEUES})"),
            );
        }
        if !seen.insert(q) {
            p.add(
                format!("interface.queues[{n}]"),
                format!("queue {q} is listed twice: queue ids must be unique"),
            );
        }
    }
    if let Some(b) = i.busy_poll.on() {
        if b.usecs == 0 {
            p.add(
                "interface.busy_poll.usecs",
                "0 disables busy polling: write busy_poll = \"off\" instead",
            );
        }
        if !(1..=65535).contains(&b.budget) {
            p.add(
                "interface.busy_poll.budget",
                format!("{} is outside 1..=65535 (SO_BUSY_POLL_BUDGET)", b.budget),
            );
        }
    }
    if let Some(b) = i.tx_budget.get() {
        p.at_least("interface.tx_budget", b, 1);
    }
}

fn umem(c: &Config, p: &mut Problems) {
    let u = &c.umem;
    let fs = u.frame_size;
    if !fs.is_power_of_two() || !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE).contains(&fs) {
        p.add(
            "umem.frame_size",
            format!("{fs} must be a power of two between {MIN_FRAME_SIZE} and {MAX_FRAME_SIZE} (2048 or 4096)"),
        );
    }
    p.within("umem.frame_count", u.frame_count, 2, MAX_FRAME_COUNT);
    if u.tx_frames == 0 || u.tx_frames >= u.frame_count {
        p.add(
            "umem.tx_frames",
            format!(
                "{} must be at least 1 and below umem.frame_count ({}), leaving frames for RX",
                u.tx_frames, u.frame_count
            ),
        );
    }
    if u.mr_bytes.bytes() == 0 {
        p.add(
            "umem.mr_bytes",
            "is 0: received payload needs a memory-region area",
        );
    }
    let total = u64::from(u.frame_count) * u64::from(fs) + u.mr_bytes.bytes();
    if usize::try_from(total).is_err() || total > 1 << 46 {
        p.add(
            "umem.mr_bytes",
            format!(
                "{} plus the frames makes a UMEM too large to map",
                u.mr_bytes
            ),
        );
    }
    for (key, size) in [
        ("umem.rx_ring", u.rx_ring),
        ("umem.tx_ring", u.tx_ring),
        ("umem.fill_ring", u.fill_ring),
        ("umem.comp_ring", u.comp_ring),
        ("umem.flow_rx_ring", u.flow_rx_ring),
    ] {
        if size > MAX_RING_SIZE {
            p.add(key, format!("{size} is above the maximum {MAX_RING_SIZE}"));
        } else if !size.is_power_of_two() {
            p.add(
                key,
                format!("{size} must be a power of two (the kernel refuses other ring sizes)"),
            );
        }
    }
    if u.flow_rx_ring >= u.fill_ring {
        p.add(
            "umem.flow_rx_ring",
            format!(
                "{} must be smaller than umem.fill_ring ({}): one stalled flow would hold every RX frame",
                u.flow_rx_ring, u.fill_ring
            ),
        );
    }
    if u.tx_strategy == TxStrategyName::Chain && !u.multi_buffer {
        p.add(
            "umem.tx_strategy",
            "\"chain\" sends header and payload as a multi-buffer chain: set umem.multi_buffer = true",
        );
    }
    if !(MIN_MTU..=MAX_MTU).contains(&u.mtu) {
        p.add(
            "umem.mtu",
            format!("{} is outside {MIN_MTU}..={MAX_MTU}", u.mtu),
        );
    } else if u.mtu + ETH_HEADER > fs {
        if !u.multi_buffer {
            p.add(
                "umem.mtu",
                format!(
                    "{} plus the {ETH_HEADER}-byte Ethernet header does not fit a {fs}-byte frame: set umem.multi_buffer = true or lower the MTU to {}",
                    u.mtu,
                    fs.saturating_sub(ETH_HEADER)
                ),
            );
        } else if u64::from(u.mtu + ETH_HEADER) > u64::from(fs) * MAX_FRAGS as u64 {
            p.add(
                "umem.mtu",
                format!("{} needs more than the {MAX_FRAGS} fragments a packet may have with {fs}-byte frames", u.mtu),
            );
        }
    }
}

fn flows(c: &Config, p: &mut Problems) {
    let f = &c.flows;
    p.within("flows.max_flows", f.max_flows, 1, MAX_FLOWS);
    p.within(
        "flows.max_recv_segments",
        f.max_recv_segments,
        1,
        MAX_SEGMENTS,
    );
    p.within(
        "flows.max_send_segments",
        f.max_send_segments,
        1,
        MAX_SEGMENTS,
    );
    p.within(
        "flows.max_placed_ranges",
        f.max_placed_ranges,
        1,
        MAX_PLACED_RANGES,
    );
    p.within("flows.max_regions", f.max_regions, 1, MAX_REGIONS);
    p.within("flows.backlog", f.backlog, 1, MAX_FLOWS);
    p.within("flows.max_half_open", f.max_half_open, 1, MAX_FLOWS);
    p.at_least("flows.flow_rx_budget", f.flow_rx_budget, 1);
    p.within(
        "flows.rx_coalesce_bytes",
        f.rx_coalesce_bytes,
        0,
        ::datapath::coalesce::MAX_COALESCE_BYTES,
    );
    p.within(
        "flows.max_flow_sockets",
        f.max_flow_sockets,
        0,
        datapath::nic::MAX_FLOW_SOCKETS,
    );
}

fn listen_and_ports(c: &Config, p: &mut Problems) {
    for (n, l) in c.listen.iter().enumerate() {
        if l.address.is_multicast() || l.address.is_broadcast() {
            p.add(
                format!("listen[{n}].address"),
                format!(
                    "{} is not a unicast address (use one of the interface's, or 0.0.0.0)",
                    l.address
                ),
            );
        }
        if l.port == 0 {
            p.add(
                format!("listen[{n}].port"),
                "0 is not a port a peer can connect to",
            );
        }
        for (m, earlier) in c.listen[..n].iter().enumerate() {
            let same_addr = earlier.address == l.address
                || earlier.address.is_unspecified()
                || l.address.is_unspecified();
            if earlier.port == l.port && same_addr {
                p.add(
                    format!("listen[{n}].port"),
                    format!(
                        "{}:{} overlaps listen[{m}] ({}:{})",
                        l.address, l.port, earlier.address, earlier.port
                    ),
                );
            }
        }
    }
    let r = c.ports.ephemeral_range;
    if r.is_empty() {
        p.add(
            "ports.ephemeral_range",
            format!("{r} is empty: the first port must not exceed the last"),
        );
    } else if r.first < 1024 {
        p.add(
            "ports.ephemeral_range",
            format!("{r} starts below 1024: keep outgoing source ports within 1024..=65535"),
        );
    }
    for (n, l) in c.listen.iter().enumerate() {
        if r.contains(l.port) {
            p.add(
                "ports.ephemeral_range",
                format!("{r} contains port {} of listen[{n}]: outgoing connections would collide with it", l.port),
            );
        }
    }
}

fn threads(c: &Config, p: &mut Problems) {
    let th = &c.threads;
    let cores = &th.datapath_cores;
    match th.mode {
        ThreadMode::Dedicated if c.transport.kind == TransportKind::Smoltcp => p.add(
            "threads.mode",
            "transport.kind = \"smoltcp\" runs run-to-completion only: set mode = \"run-to-completion\"",
        ),
        ThreadMode::RunToCompletion => {
            if !cores.is_empty() && cores.len() != c.interface.queues.len() {
                p.add(
                    "threads.datapath_cores",
                    format!(
                        "run-to-completion runs one loop per queue: give no core or one per queue ({} queue(s) in interface.queues, {} core(s) given)",
                        c.interface.queues.len(),
                        cores.len()
                    ),
                );
            }
            if th.transport_core.id().is_some() {
                p.add(
                    "threads.transport_core",
                    "run-to-completion runs the transport inside the datapath loop: set \"any\", or use mode = \"dedicated\"",
                );
            }
        }
        ThreadMode::Dedicated => {
            if cores.len() != c.interface.queues.len() {
                p.add(
                    "threads.datapath_cores",
                    format!(
                        "dedicated mode needs one core per queue: {} queue(s) in interface.queues, {} core(s) given",
                        c.interface.queues.len(),
                        cores.len()
                    ),
                );
            }
            let mut seen = HashSet::new();
            for (n, &core) in cores.iter().enumerate() {
                if !seen.insert(core) {
                    p.add(
                        format!("threads.datapath_cores[{n}]"),
                        format!("core {core} is used twice: dedicated threads need distinct cores"),
                    );
                }
            }
            match th.transport_core.id() {
                None => p.add(
                    "threads.transport_core",
                    "dedicated mode needs a core for the transport thread",
                ),
                Some(tc) if seen.contains(&tc) => p.add(
                    "threads.transport_core",
                    format!(
                        "core {tc} is also a datapath core: dedicated threads need distinct cores"
                    ),
                ),
                Some(_) => {}
            }
        }
    }
    if let Some(online) = crate::netinfo::online_cpus() {
        let all = cores
            .iter()
            .enumerate()
            .map(|(i, &core)| (format!("threads.datapath_cores[{i}]"), core))
            .chain(
                th.transport_core
                    .id()
                    .map(|tc| ("threads.transport_core".to_string(), tc)),
            );
        for (key, core) in all {
            if !online.contains(core) {
                p.add(
                    key,
                    format!("core {core} is not an online CPU of this machine ({online})"),
                );
            }
        }
    }
    if !(2..=1 << 24).contains(&th.spsc_capacity) {
        p.add(
            "threads.spsc_capacity",
            format!("{} is outside 2..={}", th.spsc_capacity, 1 << 24),
        );
    }
    let (min, max) = crate::idle::IDLE_BUDGET_RANGE;
    if !(min..=max).contains(&th.idle_budget.get()) {
        p.add(
            "threads.idle_budget",
            format!(
                "{} is outside {}..={}: a loop spins this long without work before it sleeps",
                th.idle_budget,
                Dur(min),
                Dur(max)
            ),
        );
    }
}

fn capture(c: &Config, p: &mut Problems) {
    let (min, max) = crate::capture::SNAPLEN_RANGE;
    if !(min..=max).contains(&c.capture.snaplen) {
        p.add(
            "capture.snaplen",
            format!("{} is outside {min}..={max}", c.capture.snaplen),
        );
    }
}

fn metrics(c: &Config, p: &mut Problems) {
    if let Some(i) = c.metrics.interval.get() {
        if i.get() < Duration::from_millis(10) {
            p.add(
                "metrics.interval",
                format!("{i} is below 10ms: write \"off\" to disable"),
            );
        }
    }
    let n = c.metrics.max_connections;
    if !(1..=MAX_METRICS_CONNECTIONS).contains(&n) {
        p.add(
            "metrics.max_connections",
            format!("{n} is outside 1..={MAX_METRICS_CONNECTIONS} (one thread each)"),
        );
    }
}

/// The most connections the metrics endpoint may serve at once.
const MAX_METRICS_CONNECTIONS: usize = 1024;

/// Most applications one daemon serves (memory slots of the UMEM).
pub const MAX_ATTACHMENTS: u32 = 64;

fn daemon(c: &Config, p: &mut Problems) {
    let d = &c.daemon;
    if d.socket.as_os_str().is_empty() || !d.socket.is_absolute() {
        p.add(
            "daemon.socket",
            format!("{:?} is not an absolute path", d.socket),
        );
    }
    if d.socket_mode > 0o777 {
        p.add(
            "daemon.socket_mode",
            format!("{:#o} has bits beyond 0o777", d.socket_mode),
        );
    }
    if d.socket_group.as_deref() == Some("") {
        p.add(
            "daemon.socket_group",
            "is empty: name a group or leave it out",
        );
    }
    p.within(
        "daemon.max_attachments",
        d.max_attachments,
        1,
        MAX_ATTACHMENTS,
    );
    let mem = d.memory_per_attachment.bytes();
    p.within("daemon.memory_per_attachment", mem, 1 << 20, 16 << 30);
    if !mem.is_multiple_of(4096) {
        p.add(
            "daemon.memory_per_attachment",
            format!("{mem} is not a whole number of 4096-byte pages"),
        );
    }
    p.within("daemon.max_connections", d.max_connections, 1, 65536);
    p.within("daemon.max_posted", d.max_posted, 1, 1 << 20);
}
