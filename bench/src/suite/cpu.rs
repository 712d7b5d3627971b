//! CPU by thread and by kind: each peer's per-thread user and system time
//! ([`PeerReport::threads`]) split into the end's main thread (the loop,
//! the datapath thread, or a Linux process) and zerosplit's transport
//! thread, the per-CPU softirq time the orchestrator samples around the
//! transfer, and the figures derived from them per transfer:
//!
//! - the stack's own CPU per byte: user time of the zerosplit ends;
//! - Linux's total CPU per byte: user + system of both Linux ends plus all
//!   softirq time;
//! - the transport thread's share of one core scaled to 10 Gbit/s.
//!
//! [`summarise`] turns one row's transfers into its [`CpuBreakdown`].

use super::peer::{thread_names, PeerReport};
use super::report::{CpuBreakdown, EndCpu, MainThread};
use super::scenario::{Endpoint, ThreadMode};
use super::stats::Summary;

/// One end's CPU seconds over one transfer, split by thread.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct EndSeconds {
    main: MainThread,
    main_user: f64,
    main_system: f64,
    /// (user, system) of the transport thread, when the end has one.
    transport: Option<(f64, f64)>,
    /// The end's transfer time (its report's `seconds`).
    seconds: f64,
}

impl EndSeconds {
    fn zerosplit(&self) -> bool {
        self.main != MainThread::Process
    }

    fn user(&self) -> f64 {
        self.main_user + self.transport.map_or(0.0, |t| t.0)
    }

    fn total(&self) -> f64 {
        self.user() + self.main_system + self.transport.map_or(0.0, |t| t.1)
    }
}

/// Splits one peer's threads: the transport thread by its name, every
/// other thread into the main figure. `None` when the peer reported no
/// threads (an iperf3 end, or a peer older than schema 2).
pub(super) fn end_seconds(
    end: Endpoint,
    mode: Option<ThreadMode>,
    report: &PeerReport,
) -> Option<EndSeconds> {
    if report.threads.is_empty() {
        return None;
    }
    let main = match (end.is_zerosplit(), mode) {
        (false, _) => MainThread::Process,
        (true, Some(ThreadMode::Dedicated)) => MainThread::Datapath,
        (true, _) => MainThread::Loop,
    };
    let mut out = EndSeconds {
        main,
        main_user: 0.0,
        main_system: 0.0,
        transport: None,
        seconds: report.seconds,
    };
    for t in &report.threads {
        if end.is_zerosplit() && t.name == thread_names::TRANSPORT {
            let (u, s) = out.transport.unwrap_or((0.0, 0.0));
            out.transport = Some((u + t.user_s, s + t.system_s));
        } else {
            out.main_user += t.user_s;
            out.main_system += t.system_s;
        }
    }
    Some(out)
}

/// One transfer's CPU figures.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct CpuSample {
    pub(super) sender: Option<EndSeconds>,
    pub(super) receiver: Option<EndSeconds>,
    /// Softirq seconds of each CPU over the transfer.
    pub(super) softirq_per_cpu: Vec<f64>,
    /// Payload bytes moved.
    pub(super) bytes: u64,
    /// Goodput of the transfer.
    pub(super) goodput_gbps: f64,
}

impl CpuSample {
    fn per_gb(&self, seconds: f64) -> f64 {
        seconds / (self.bytes as f64 / 1e9)
    }

    fn ends(&self) -> Option<[&EndSeconds; 2]> {
        Some([self.sender.as_ref()?, self.receiver.as_ref()?])
    }

    /// User time of the zerosplit ends per GB; `None` without a zerosplit
    /// end or without both ends' threads.
    pub(super) fn stack_own_s_per_gb(&self) -> Option<f64> {
        let ends = self.ends()?;
        let zs: Vec<&&EndSeconds> = ends.iter().filter(|e| e.zerosplit()).collect();
        if zs.is_empty() || self.bytes == 0 {
            return None;
        }
        Some(self.per_gb(zs.iter().map(|e| e.user()).sum()))
    }

    /// User + system of both ends plus all softirq, per GB; only when both
    /// ends are Linux and the softirq time was read.
    pub(super) fn linux_total_s_per_gb(&self) -> Option<f64> {
        let ends = self.ends()?;
        if ends.iter().any(|e| e.zerosplit()) || self.softirq_per_cpu.is_empty() || self.bytes == 0
        {
            return None;
        }
        let softirq: f64 = self.softirq_per_cpu.iter().sum();
        Some(self.per_gb(ends.iter().map(|e| e.total()).sum::<f64>() + softirq))
    }

    /// The end's transport thread's share of one core per 10 Gbit/s of
    /// goodput: `cpu / seconds × 10 / goodput`.
    fn transport_core_per_10gbps(&self, end: &EndSeconds) -> Option<f64> {
        let (u, s) = end.transport?;
        (end.seconds > 0.0 && self.goodput_gbps > 0.0)
            .then(|| (u + s) / end.seconds * 10.0 / self.goodput_gbps)
    }
}

fn summary(values: impl Iterator<Item = Option<f64>>) -> Option<Summary> {
    Summary::of(&values.flatten().collect::<Vec<_>>())
}

fn end_cpu(samples: &[&CpuSample], pick: fn(&CpuSample) -> Option<&EndSeconds>) -> Option<EndCpu> {
    let main = samples.iter().find_map(|s| pick(s))?.main;
    let per_gb = |f: fn(&EndSeconds) -> Option<f64>| {
        summary(
            samples
                .iter()
                .map(|s| pick(s).and_then(f).map(|v| s.per_gb(v))),
        )
    };
    Some(EndCpu {
        main,
        main_user: per_gb(|e| Some(e.main_user)),
        main_system: per_gb(|e| Some(e.main_system)),
        transport_user: per_gb(|e| e.transport.map(|t| t.0)),
        transport_system: per_gb(|e| e.transport.map(|t| t.1)),
        transport_core_per_10gbps: summary(
            samples
                .iter()
                .map(|s| pick(s).and_then(|e| s.transport_core_per_10gbps(e))),
        ),
    })
}

/// One row's CPU breakdown: medians with min–max over its transfers.
pub(super) fn summarise(samples: &[&CpuSample]) -> CpuBreakdown {
    let samples: Vec<&CpuSample> = samples.iter().copied().filter(|s| s.bytes > 0).collect();
    let cpus = samples
        .iter()
        .map(|s| s.softirq_per_cpu.len())
        .max()
        .unwrap_or(0);
    CpuBreakdown {
        sender: end_cpu(&samples, |s| s.sender.as_ref()),
        receiver: end_cpu(&samples, |s| s.receiver.as_ref()),
        softirq_per_cpu: (0..cpus)
            .map(|c| {
                summary(
                    samples
                        .iter()
                        .map(|s| s.softirq_per_cpu.get(c).map(|v| s.per_gb(*v))),
                )
            })
            .collect(),
        stack_own_s_per_gb: summary(samples.iter().map(|s| s.stack_own_s_per_gb())),
        linux_total_s_per_gb: summary(samples.iter().map(|s| s.linux_total_s_per_gb())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::procfs::ThreadCpu;

    fn peer(seconds: f64, threads: &[(&str, f64, f64)]) -> PeerReport {
        PeerReport {
            seconds,
            threads: threads
                .iter()
                .enumerate()
                .map(|(i, &(name, user_s, system_s))| ThreadCpu {
                    tid: i as u32 + 1,
                    name: name.into(),
                    user_s,
                    system_s,
                })
                .collect(),
            ..PeerReport::default()
        }
    }

    #[test]
    fn the_transport_thread_is_told_apart_by_name() {
        let r = peer(
            2.0,
            &[
                (thread_names::DATAPATH, 1.0, 0.5),
                (thread_names::TRANSPORT, 0.25, 0.05),
            ],
        );
        let e = end_seconds(Endpoint::Tcp, Some(ThreadMode::Dedicated), &r).expect("end");
        assert_eq!(e.main, MainThread::Datapath);
        assert_eq!((e.main_user, e.main_system), (1.0, 0.5));
        assert_eq!(e.transport, Some((0.25, 0.05)));
        // On a Linux end a thread of that name is just one of its threads.
        let k = end_seconds(Endpoint::Kernel, None, &r).expect("end");
        assert_eq!((k.main, k.transport), (MainThread::Process, None));
        assert_eq!(k.main_user, 1.25);
        let rtc = end_seconds(
            Endpoint::Tcp,
            Some(ThreadMode::Rtc),
            &peer(1.0, &[("zs-loop", 1.0, 0.0)]),
        );
        assert_eq!(rtc.expect("end").main, MainThread::Loop);
        assert!(end_seconds(Endpoint::Tcp, None, &peer(1.0, &[])).is_none());
    }

    fn zs_pair_dedicated() -> CpuSample {
        let r = peer(
            2.0,
            &[
                (thread_names::DATAPATH, 0.8, 0.4),
                (thread_names::TRANSPORT, 0.3, 0.1),
            ],
        );
        let end = end_seconds(Endpoint::Tcp, Some(ThreadMode::Dedicated), &r);
        CpuSample {
            sender: end.clone(),
            receiver: end,
            softirq_per_cpu: vec![0.2, 0.6],
            bytes: 2_000_000_000,
            goodput_gbps: 8.0,
        }
    }

    #[test]
    fn derived_figures_of_a_zerosplit_pair() {
        let s = zs_pair_dedicated();
        // User time of both ends, all threads: 2 × (0.8 + 0.3) s over 2 GB.
        assert!((s.stack_own_s_per_gb().expect("own") - 1.1).abs() < 1e-12);
        assert_eq!(s.linux_total_s_per_gb(), None);
        // 0.4 s of transport over 2 s = 20 % of a core at 8 Gbit/s → 25 %
        // per 10 Gbit/s.
        let e = s.sender.as_ref().expect("sender");
        let share = s.transport_core_per_10gbps(e).expect("share");
        assert!((share - 0.25).abs() < 1e-12, "{share}");
        let b = summarise(&[&s]);
        let snd = b.sender.expect("sender");
        assert_eq!(snd.main, MainThread::Datapath);
        assert!((snd.main_user.expect("u").median - 0.4).abs() < 1e-12);
        assert!((snd.transport_system.expect("s").median - 0.05).abs() < 1e-12);
        assert!((snd.transport_core_per_10gbps.expect("t").median - 0.25).abs() < 1e-12);
        assert_eq!(b.softirq_per_cpu.len(), 2);
        assert!((b.softirq_per_cpu[1].expect("cpu1").median - 0.3).abs() < 1e-12);
        assert_eq!(b.linux_total_s_per_gb, None);
    }

    #[test]
    fn linux_total_counts_both_ends_and_all_softirq() {
        let k = |u, s| {
            end_seconds(
                Endpoint::Kernel,
                None,
                &peer(1.0, &[("zs-kernel-end", u, s)]),
            )
        };
        let s = CpuSample {
            sender: k(0.1, 0.9),
            receiver: k(0.1, 0.4),
            softirq_per_cpu: vec![0.3, 0.2],
            bytes: 1_000_000_000,
            goodput_gbps: 8.0,
        };
        assert!((s.linux_total_s_per_gb().expect("total") - 2.0).abs() < 1e-12);
        assert_eq!(s.stack_own_s_per_gb(), None);
        assert_eq!(
            s.transport_core_per_10gbps(s.sender.as_ref().expect("s")),
            None
        );
        // Without the softirq reading the total is not measured, not low.
        let no_softirq = CpuSample {
            softirq_per_cpu: vec![],
            ..s
        };
        assert_eq!(no_softirq.linux_total_s_per_gb(), None);
        let b = summarise(&[&no_softirq]);
        assert_eq!(b.linux_total_s_per_gb, None);
        assert!(b.softirq_per_cpu.is_empty());
    }

    #[test]
    fn a_mixed_row_counts_only_the_zerosplit_end_as_the_stack() {
        let zs = end_seconds(
            Endpoint::Tcp,
            Some(ThreadMode::Rtc),
            &peer(1.0, &[("zs-loop", 0.7, 0.3)]),
        );
        let k = end_seconds(
            Endpoint::Kernel,
            None,
            &peer(1.0, &[("zs-kernel-end", 0.5, 0.5)]),
        );
        let s = CpuSample {
            sender: k,
            receiver: zs,
            softirq_per_cpu: vec![1.0],
            bytes: 1_000_000_000,
            goodput_gbps: 8.0,
        };
        assert!((s.stack_own_s_per_gb().expect("own") - 0.7).abs() < 1e-12);
        assert_eq!(s.linux_total_s_per_gb(), None);
        // An empty row has no figures at all.
        let b = summarise(&[&CpuSample::default()]);
        assert_eq!(b, CpuBreakdown::default());
    }
}
