//! One measurement: a fresh path (veth pair or impaired lab), the two
//! endpoint processes for the transfer and then the ping-pong, and the
//! ceilings of one round.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::impair::{ImpairConfig, ImpairedPath};
use crate::rx_rate;
use zerosplit_lab::{NetNs, Offloads, VethEnd, VethPair};

use super::cpu::{end_seconds, CpuSample};
use super::daemon::DaemonProcess;
use super::options::SuiteOptions;
use super::peer::{self, DaemonRef, LatencyReport, PeerProcess, PeerReport, PeerSpec, Role};
use super::report::merge_drops;
use super::scenario::{Case, Endpoint, Family, Scenario, ThreadMode};
use super::{ceilings, iperf, procfs};

/// One measurement's figures.
#[derive(Debug, Clone, Default)]
pub(super) struct Sample {
    pub(super) goodput_gbps: f64,
    pub(super) snd_cpu_per_gb: f64,
    pub(super) rcv_cpu_per_gb: f64,
    pub(super) softirq_per_gb: f64,
    pub(super) retransmits: f64,
    pub(super) drops: BTreeMap<String, u64>,
    pub(super) latency: Option<LatencyReport>,
    pub(super) notes: Vec<String>,
    /// CPU by thread and kind, per-CPU softirq.
    pub(super) cpu: CpuSample,
    /// The zerosplit end's payload copies per payload byte of the
    /// transfer (its stack's, or its daemon's when attached).
    pub(super) copies_per_byte: Option<f64>,
    /// The daemon's CPU seconds per GB (already in the attached end's
    /// `snd_cpu_per_gb` or `rcv_cpu_per_gb`).
    pub(super) daemon_cpu_per_gb: Option<f64>,
}

#[derive(Debug)]
pub(super) enum Outcome {
    Measured(Box<Sample>),
    Unavailable(String),
    Failed(String),
}

/// The path one measurement runs over: a plain veth pair or the impaired
/// A–R–B lab; receivers run in A, senders in B.
pub(super) enum Path {
    Plain {
        pair: VethPair,
        _a: NetNs,
        _b: NetNs,
    },
    Impaired(Box<ImpairedPath>),
}

impl Path {
    pub(super) fn build(
        mtu: u32,
        offloads: Offloads,
        impair: Option<&ImpairConfig>,
    ) -> Result<Path, String> {
        Self::build_with_queues(mtu, offloads, impair, 1)
    }

    /// As [`Path::build`], the veth pair with `queues` queues per end (an
    /// impaired path has one).
    pub(super) fn build_with_queues(
        mtu: u32,
        offloads: Offloads,
        impair: Option<&ImpairConfig>,
        queues: u32,
    ) -> Result<Path, String> {
        match impair {
            None => {
                let a = NetNs::new("zba").map_err(|e| e.to_string())?;
                let b = NetNs::new("zbb").map_err(|e| e.to_string())?;
                let pair = VethPair::create_with_offloads(&a, &b, mtu, queues, offloads)
                    .map_err(|e| e.to_string())?;
                Ok(Path::Plain { pair, _a: a, _b: b })
            }
            Some(_) if queues > 1 => Err("an impaired path has one queue".into()),
            Some(cfg) => ImpairedPath::create(mtu, cfg)
                .map(|p| Path::Impaired(Box::new(p)))
                .map_err(|e| e.to_string()),
        }
    }

    pub(super) fn ends(&self) -> (&VethEnd, &VethEnd) {
        match self {
            Path::Plain { pair, .. } => (&pair.a, &pair.b),
            Path::Impaired(p) => (&p.a, &p.b),
        }
    }

    /// Gives both ends their IPv6 address (A's is [`Path::a_ip`]'s);
    /// before any zerosplit stack starts on them (a stack reads its
    /// addresses once).
    pub(super) fn add_ipv6(&self) -> Result<(), String> {
        match self {
            Path::Plain { pair, _a: a, _b: b } => pair.add_ipv6(a, b).map_err(|e| e.to_string()),
            Path::Impaired(p) => p.add_ipv6().map_err(|e| e.to_string()),
        }
    }

    /// The A end's (the receivers') address of `family` (IPv6: the one
    /// [`Path::add_ipv6`] gives it).
    pub(super) fn a_ip(&self, family: Family) -> IpAddr {
        match family {
            Family::Ipv4 => self.ends().0.addr.into(),
            Family::Ipv6 => zerosplit_lab::IPV6_A.into(),
        }
    }
}

pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(20);

pub(super) fn peer_failure(r: &PeerReport) -> Option<Outcome> {
    let e = r.error.as_ref()?;
    Some(if r.unavailable {
        Outcome::Unavailable(e.clone())
    } else {
        Outcome::Failed(format!("{} peer ({}): {e}", r.role, r.stack))
    })
}

/// Runs a listener and then a connector over `path`; returns both reports.
pub(super) fn run_pair(
    opts: &SuiteOptions,
    path: &Path,
    listener: PeerSpec,
    connector: PeerSpec,
) -> Result<(PeerReport, PeerReport), Outcome> {
    let (a, b) = path.ends();
    let fail = |e: peer::PeerError| Outcome::Failed(e.to_string());
    let mut l = PeerProcess::start(&opts.peer_program, &a.netns, &listener).map_err(fail)?;
    if let Some(early) = l.wait_ready(READY_TIMEOUT).map_err(fail)? {
        return Err(peer_failure(&early).unwrap_or(Outcome::Failed(format!(
            "{} peer exited before listening",
            listener.role.name()
        ))));
    }
    let limit = Duration::from_secs_f64(opts.seconds * 3.0 + 40.0);
    let mut c = PeerProcess::start(&opts.peer_program, &b.netns, &connector).map_err(fail)?;
    let cr = c.finish(limit);
    let lr = l.finish(if cr.is_ok() {
        limit
    } else {
        Duration::from_secs(3)
    });
    let cr = cr.map_err(fail)?;
    if let Some(o) = peer_failure(&cr) {
        return Err(o);
    }
    let lr = lr.map_err(fail)?;
    if let Some(o) = peer_failure(&lr) {
        return Err(o);
    }
    Ok((lr, cr))
}

fn spec(
    case: &Case,
    role: Role,
    end: Endpoint,
    iface: &VethEnd,
    addr: SocketAddr,
    opts: &SuiteOptions,
    daemon: Option<DaemonRef>,
) -> PeerSpec {
    PeerSpec {
        role,
        stack: end.stack_name(),
        iface: iface.ifname.clone(),
        addr,
        mtu: case.mtu,
        threads: case.threads.unwrap_or(ThreadMode::Rtc),
        poll: opts.poll,
        bytes: opts.bytes,
        seconds: opts.seconds,
        rounds: opts.pingpong_rounds,
        message: opts.message,
        flows: 1,
        queues: 1,
        metrics: opts.metrics,
        daemon,
    }
}

fn veth_drops(
    end: &VethEnd,
    before: Option<ceilings::LinkStats>,
    into: &mut BTreeMap<String, u64>,
) {
    let (Some(before), Ok(after)) = (before, ceilings::link_stats(&end.netns, &end.ifname)) else {
        return;
    };
    for (name, d) in [
        ("veth_rx_dropped", after.rx_dropped - before.rx_dropped),
        ("veth_tx_dropped", after.tx_dropped - before.tx_dropped),
    ] {
        if d > 0 {
            *into.entry(name.into()).or_default() += d;
        }
    }
}

/// One measurement of `case` on a fresh path: the transfer, then the
/// ping-pong.
pub(super) fn measure(case: &Case, opts: &SuiteOptions) -> Outcome {
    measure_as(case, opts, false)
}

/// As [`measure`]; with `attached`, the case's zerosplit end attaches to
/// a `zerosplit daemon` in its namespace (a fresh one for the transfer
/// and for the ping-pong), whose CPU counts with the end's and whose
/// payload copies are the end's.
pub(super) fn measure_as(case: &Case, opts: &SuiteOptions, attached: bool) -> Outcome {
    if attached
        && (case.scenario.sender().is_zerosplit() == case.scenario.receiver().is_zerosplit()
            || case.threads != Some(ThreadMode::Rtc)
            || opts.impair.is_some())
    {
        return Outcome::Unavailable(
            "attached rows have one zerosplit end, run to completion, on a plain veth pair".into(),
        );
    }
    if let Some(why) = ipv6_unavailable(case, attached) {
        return Outcome::Unavailable(why);
    }
    let offloads = case.scenario.offloads();
    if offloads == Offloads::Default && opts.impair.is_some() {
        return Outcome::Unavailable(
            "the impaired path needs offloads off on every hop; linux-linux-offload runs on a plain veth pair only".into(),
        );
    }
    let path = match Path::build(case.mtu, offloads, opts.impair.as_ref()) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(format!("building the path: {e}")),
    };
    if case.family == Family::Ipv6 {
        if let Err(e) = path.add_ipv6() {
            return Outcome::Failed(format!("adding the IPv6 addresses: {e}"));
        }
    }
    let (a, b) = path.ends();
    let ip_a = path.a_ip(case.family);
    if case.scenario == Scenario::LinuxLinuxIperf3 {
        return match iperf::run(&a.netns, &b.netns, ip_a, opts.seconds) {
            Ok(r) => {
                let gb = r.bytes as f64 / 1e9;
                Outcome::Measured(Box::new(Sample {
                    goodput_gbps: r.bytes as f64 * 8.0 / r.seconds / 1e9,
                    snd_cpu_per_gb: r.sender_cpu_s / gb,
                    rcv_cpu_per_gb: r.receiver_cpu_s / gb,
                    softirq_per_gb: f64::NAN,
                    retransmits: r.retransmits as f64,
                    ..Sample::default()
                }))
            }
            Err(e) => Outcome::Failed(e),
        };
    }
    let sc = case.scenario;
    let data = SocketAddr::new(ip_a, 5301);
    let before = (
        ceilings::link_stats(&a.netns, &a.ifname).ok(),
        ceilings::link_stats(&b.netns, &b.ifname).ok(),
    );
    let zs_receives = sc.receiver().is_zerosplit();
    let daemon = match attached.then(|| start_daemon(opts, case, &path, zs_receives)) {
        Some(Ok(d)) => Some(d),
        Some(Err(o)) => return o,
        None => None,
    };
    let (rd, sd) = daemon_refs(daemon.as_ref(), zs_receives);
    let soft0 = procfs::softirq_per_cpu_seconds().ok();
    let (rcv, snd) = match run_pair(
        opts,
        &path,
        spec(case, Role::Recv, sc.receiver(), a, data, opts, rd),
        spec(case, Role::Send, sc.sender(), b, data, opts, sd),
    ) {
        Ok(r) => r,
        Err(o) => return o,
    };
    let copies = match daemon.map(DaemonProcess::stop) {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => return Outcome::Failed(format!("daemon: {e}")),
        None if zs_receives => rcv.copies,
        None => snd.copies,
    };
    let soft_per_cpu = softirq_deltas(soft0, procfs::softirq_per_cpu_seconds().ok());
    let soft = if soft_per_cpu.is_empty() {
        f64::NAN
    } else {
        soft_per_cpu.iter().sum()
    };
    if rcv.bytes != snd.bytes || rcv.bytes == 0 {
        return Outcome::Failed(format!(
            "the receiver got {} bytes, the sender sent {}",
            rcv.bytes, snd.bytes
        ));
    }
    let gb = rcv.bytes as f64 / 1e9;
    let mut s = Sample {
        goodput_gbps: rcv.bytes as f64 * 8.0 / rcv.seconds.max(1e-9) / 1e9,
        snd_cpu_per_gb: snd.cpu_s / gb,
        rcv_cpu_per_gb: rcv.cpu_s / gb,
        softirq_per_gb: soft / gb,
        retransmits: (snd.retransmits + rcv.retransmits) as f64,
        cpu: CpuSample {
            sender: end_seconds(sc.sender(), case.threads, &snd),
            receiver: end_seconds(sc.receiver(), case.threads, &rcv),
            softirq_per_cpu: soft_per_cpu,
            bytes: rcv.bytes,
            goodput_gbps: rcv.bytes as f64 * 8.0 / rcv.seconds.max(1e-9) / 1e9,
        },
        copies_per_byte: copies.map(|c| c.copied() as f64 / rcv.bytes as f64),
        daemon_cpu_per_gb: attached.then(|| (snd.daemon_cpu_s + rcv.daemon_cpu_s) / gb),
        ..Sample::default()
    };
    merge_drops(&mut s.drops, &snd.drops);
    merge_drops(&mut s.drops, &rcv.drops);
    veth_drops(a, before.0, &mut s.drops);
    veth_drops(b, before.1, &mut s.drops);
    let pp = SocketAddr::new(ip_a, 5302);
    let daemon = match attached.then(|| start_daemon(opts, case, &path, zs_receives)) {
        Some(Ok(d)) => Some(d),
        Some(Err(Outcome::Failed(e) | Outcome::Unavailable(e))) => {
            s.notes.push(format!("ping-pong: {e}"));
            return Outcome::Measured(Box::new(s));
        }
        _ => None,
    };
    let (rd, sd) = daemon_refs(daemon.as_ref(), zs_receives);
    match run_pair(
        opts,
        &path,
        spec(case, Role::PingpongServer, sc.receiver(), a, pp, opts, rd),
        spec(case, Role::PingpongClient, sc.sender(), b, pp, opts, sd),
    ) {
        Ok((_, client)) => s.latency = client.latency,
        Err(Outcome::Failed(e) | Outcome::Unavailable(e)) => {
            s.notes.push(format!("ping-pong: {e}"));
        }
        Err(Outcome::Measured(_)) => {}
    }
    Outcome::Measured(Box::new(s))
}

/// Why an IPv6 case cannot run at all (`None` for IPv4): an end that
/// carries no IPv6, or an attached row (those are measured over IPv4).
fn ipv6_unavailable(case: &Case, attached: bool) -> Option<String> {
    if case.family != Family::Ipv6 {
        return None;
    }
    if attached {
        return Some("attached rows are measured over IPv4 only".into());
    }
    [case.scenario.sender(), case.scenario.receiver()]
        .into_iter()
        .find(|e| !e.carries_ipv6())
        .map(|e| {
            format!(
                "the {} transport carries IPv4 only (the tcp transport carries IPv6)",
                e.stack_name()
            )
        })
}

/// A daemon on the zerosplit end's interface: the receiver's (A) or the
/// sender's (B).
fn start_daemon(
    opts: &SuiteOptions,
    case: &Case,
    path: &Path,
    zs_receives: bool,
) -> Result<DaemonProcess, Outcome> {
    let (a, b) = path.ends();
    let end = if zs_receives { a } else { b };
    DaemonProcess::start(
        &opts.peer_program,
        &end.netns,
        &end.ifname,
        case.mtu,
        opts.poll,
        opts.attached_poll,
    )
    .map_err(|e| Outcome::Failed(format!("starting the daemon: {e}")))
}

/// The daemon reference of the receiving and of the sending end.
fn daemon_refs(
    d: Option<&DaemonProcess>,
    zs_receives: bool,
) -> (Option<DaemonRef>, Option<DaemonRef>) {
    let r = d.map(DaemonProcess::reference);
    if zs_receives {
        (r, None)
    } else {
        (None, r)
    }
}

/// Each CPU's softirq seconds between two readings (empty when either is
/// missing).
fn softirq_deltas(before: Option<Vec<f64>>, after: Option<Vec<f64>>) -> Vec<f64> {
    let (Some(before), Some(after)) = (before, after) else {
        return Vec::new();
    };
    after
        .iter()
        .enumerate()
        .map(|(i, a)| (a - before.get(i).copied().unwrap_or(0.0)).max(0.0))
        .collect()
}

/// One round's ceilings at one MTU.
#[derive(Debug, Default)]
pub(super) struct CeilingSample {
    pub(super) rx: Option<rx_rate::Rate>,
    pub(super) tx: Option<rx_rate::Rate>,
    pub(super) errors: Vec<String>,
}

pub(super) fn measure_ceilings(mtu: u32, opts: &SuiteOptions) -> CeilingSample {
    let mut c = CeilingSample::default();
    let duration = Duration::from_secs_f64(opts.ceiling_seconds);
    match ceilings::raw_rx(mtu, duration) {
        Ok(r) => c.rx = Some(r),
        Err(e) => c.errors.push(format!("raw RX: {e}")),
    }
    match ceilings::raw_tx(mtu, duration) {
        Ok(r) => c.tx = Some(r),
        Err(e) => c.errors.push(format!("raw TX: {e}")),
    }
    c
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_offload_row_is_unavailable_on_an_impaired_path() {
        let mut opts = SuiteOptions::quick(PathBuf::from("/nonexistent"));
        opts.impair = Some("loss=1%".parse().expect("spec"));
        let case = Case {
            scenario: Scenario::LinuxLinuxOffload,
            mtu: 1500,
            threads: None,
            family: Family::Ipv4,
        };
        match measure(&case, &opts) {
            Outcome::Unavailable(why) => assert!(why.contains("offloads off"), "{why}"),
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    #[test]
    fn ipv6_rows_without_ipv6_ends_are_unavailable_before_anything_is_built() {
        let opts = SuiteOptions::quick(PathBuf::from("/nonexistent"));
        let case = |scenario, family| Case {
            scenario,
            mtu: 1500,
            threads: Some(ThreadMode::Rtc),
            family,
        };
        // No namespace is built (this test runs unprivileged): the answer
        // comes first.
        match measure(&case(Scenario::ZsZsSmoltcp, Family::Ipv6), &opts) {
            Outcome::Unavailable(why) => assert!(why.contains("smoltcp"), "{why}"),
            other => panic!("expected unavailable, got {other:?}"),
        }
        match measure_as(&case(Scenario::ZsLinux, Family::Ipv6), &opts, true) {
            Outcome::Unavailable(why) => assert!(why.contains("IPv4 only"), "{why}"),
            other => panic!("expected unavailable, got {other:?}"),
        }
        for sc in [Scenario::ZsZsTcp, Scenario::LinuxZs, Scenario::ZsLinux] {
            assert_eq!(ipv6_unavailable(&case(sc, Family::Ipv6), false), None);
        }
        assert_eq!(
            ipv6_unavailable(&case(Scenario::ZsZsSmoltcp, Family::Ipv4), false),
            None
        );
    }

    #[test]
    fn softirq_deltas_per_cpu_and_missing_readings() {
        assert_eq!(
            softirq_deltas(Some(vec![1.0, 2.0]), Some(vec![1.5, 2.0, 0.25])),
            [0.5, 0.0, 0.25]
        );
        assert!(softirq_deltas(None, Some(vec![1.0])).is_empty());
        assert!(softirq_deltas(Some(vec![1.0]), None).is_empty());
    }
}
