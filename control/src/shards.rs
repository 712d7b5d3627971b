//! Serving several receive queues of one interface: one [`Stack`] per
//! queue, each on a thread of its own (its datapath, and in dedicated mode
//! a transport thread of its own too), all opened into one
//! [`QueueGroup`] that shares the steering program.
//!
//! A connection lives on one queue for its whole life: the queue its SYN
//! arrived on, or the queue that opened it. Each queue gets a disjoint
//! slice of the ephemeral port range, so two queues never pick the same
//! local port. Packets of a flow that arrive on another queue are handed
//! to the owner by the group ([`datapath::group`]) and counted.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use datapath::group::{GroupCounters, QueueGroup};
use datapath::steer::SteerCounters;

use crate::host;
use crate::host::{HostConfig, HostError};
use crate::reserved_ports::ReservedPorts;
use crate::stack::Stack;

/// Splits `range` into `n` contiguous, disjoint, non-empty slices.
///
/// # Errors
/// [`HostError::PortsExhausted`] when the range has fewer than `n` ports.
pub fn split_ports(
    range: &RangeInclusive<u16>,
    n: usize,
) -> Result<Vec<RangeInclusive<u16>>, HostError> {
    let len = usize::from(*range.end()).saturating_sub(usize::from(*range.start())) + 1;
    if range.is_empty() || n == 0 || len < n {
        return Err(HostError::PortsExhausted(range.clone()));
    }
    let (per, extra) = (len / n, len % n);
    let mut start = usize::from(*range.start());
    Ok((0..n)
        .map(|i| {
            let size = per + usize::from(i < extra);
            let r = start as u16..=(start + size - 1) as u16;
            start += size;
            r
        })
        .collect())
}

/// Prepares the queues of `configs` on `ifname` before their stacks open
/// (by [`Stack::new_in`] with the group returned): checks that there is
/// at least one and none twice, gives each a disjoint slice of the first
/// one's ephemeral range, attaches the group's steering program, and
/// reserves the range from the kernel once when the first config asks for
/// that (the guard returned holds it; no stack reserves on its own).
///
/// # Errors
/// No config, duplicate queues, too few ephemeral ports, no such
/// interface, attach or reservation failures.
pub(crate) fn prepare(
    ifname: &str,
    configs: &mut [HostConfig],
) -> Result<(Arc<QueueGroup>, Option<ReservedPorts>), HostError> {
    let Some(first) = configs.first() else {
        return Err(HostError::Queues("no queue to serve".into()));
    };
    let mut queues: Vec<u32> = configs.iter().map(|c| c.nic.queue).collect();
    queues.sort_unstable();
    if queues.windows(2).any(|w| w[0] == w[1]) {
        return Err(HostError::Queues(format!(
            "queue ids must be unique, got {queues:?}"
        )));
    }
    let size = queues.last().copied().unwrap_or(0) + 1;
    let ports = split_ports(&first.ephemeral_ports, configs.len())?;
    host::ifindex(ifname)?;
    let group = QueueGroup::attach(ifname, first.nic.xdp_mode, size)
        .map_err(|e| HostError::Nic(e.into()))?;
    let reserved = host::reserve_ports(&first.ephemeral_ports, first.reserve_ports)?;
    for (config, range) in configs.iter_mut().zip(ports) {
        config.ephemeral_ports = range;
        config.reserve_ports = false;
    }
    Ok((group, reserved))
}

/// What [`run_sharded`] returns: each queue's result, in the order of
/// `configs`, and the counters of what the queues shared.
#[derive(Debug)]
pub struct Sharded<T> {
    /// `(queue, result of the body)` per queue.
    pub results: Vec<(u32, T)>,
    /// Packets handed between queues.
    pub group: GroupCounters,
    /// The steering program's counters when the last body returned
    /// (`None` if reading them failed).
    pub steering: Option<SteerCounters>,
}

/// Opens one stack per entry of `configs` on `ifname` (each on queue
/// `config.nic.queue`, all in one [`QueueGroup`]) and runs `body` on each,
/// on a thread of its own, until every body returns.
///
/// Every stack is opened before any body runs; if one fails to open, none
/// runs and the first error is returned. The ephemeral range of the first
/// config is reserved from the kernel once (when it asks for that) and
/// split between the queues.
///
/// # Errors
/// No config, duplicate queues, too few ephemeral ports, attach or open
/// failures.
pub fn run_sharded<T, F>(
    ifname: &str,
    mut configs: Vec<HostConfig>,
    body: F,
) -> Result<Sharded<T>, HostError>
where
    T: Send,
    F: Fn(u32, &mut Stack) -> T + Sync,
{
    let (group, _reserved) = prepare(ifname, &mut configs)?;
    let n = configs.len();
    let opened = Barrier::new(n);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<HostError>> = Mutex::new(None);
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .into_iter()
            .map(|config| {
                let (group, opened, failed, first_error, body) =
                    (&group, &opened, &failed, &first_error, &body);
                let queue = config.nic.queue;
                std::thread::Builder::new()
                    .name(format!("zs-queue-{queue}"))
                    .spawn_scoped(scope, move || {
                        let stack = match Stack::new_in(group, config) {
                            Ok(stack) => Some(stack),
                            Err(e) => {
                                failed.store(true, Ordering::Release);
                                let mut slot =
                                    first_error.lock().unwrap_or_else(|p| p.into_inner());
                                slot.get_or_insert(HostError::OnQueue {
                                    queue,
                                    source: Box::new(e),
                                });
                                None
                            }
                        };
                        opened.wait();
                        let mut stack = stack.filter(|_| !failed.load(Ordering::Acquire))?;
                        Some((queue, body(queue, &mut stack)))
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.map(|h| h.join()))
            .collect::<Vec<_>>()
    });
    let mut out = Vec::with_capacity(n);
    for r in results {
        match r {
            Err(source) => return Err(HostError::Thread { source }),
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Ok(Ok(Some(r))) => out.push(r),
            Ok(Ok(None)) => {}
        }
    }
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let steering = group.steering().counters().ok();
    Ok(Sharded {
        results: out,
        group: group.counters(),
        steering,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_split_into_disjoint_slices_covering_the_range() {
        let parts = split_ports(&(40000..=40999), 3).expect("split");
        assert_eq!(parts, vec![40000..=40333, 40334..=40666, 40667..=40999]);
        let parts = split_ports(&(10..=13), 4).expect("split");
        assert_eq!(parts, vec![10..=10, 11..=11, 12..=12, 13..=13]);
        assert_eq!(split_ports(&(1..=65535), 1).expect("one"), vec![1..=65535]);
    }

    #[test]
    fn too_few_ports_for_the_queues_is_an_error() {
        let e = split_ports(&(100..=101), 3).expect_err("3 queues, 2 ports");
        assert!(e.to_string().contains("100..=101"), "{e}");
    }
}
