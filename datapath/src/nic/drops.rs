//! Every packet one queue's datapath dropped, by reason: the poll loop's
//! parse and placement drops, the port's, the kernel's `XDP_STATISTICS` of
//! every socket, and — when this queue is its interface's only one — the
//! steering program's (`no_socket`, `ip_fragment`, `ipv6_ext`) and the cross-queue
//! inbox's.

use super::{Nic, NicCounters};
use crate::group::GroupCounters;
use crate::steer::SteerCounters;
use crate::xsk::{PortCounters, XskStats};

impl Nic {
    /// Packets dropped (or kept only in part) by this queue, by reason,
    /// leaving out reasons at 0. Per-flow placement drops are in each
    /// flow's counters ([`Nic::flow`]), not here. In a group of several
    /// queues the group's `inbox_full` and the steering program's
    /// `no_socket` are the interface's, not one queue's: read them once
    /// from the group, not from each queue.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let kernel = self.kernel_stats();
        let shared = (self.group.queues() == 1).then(|| {
            let steer = self.group.steering().counters().unwrap_or_default();
            (self.group.counters(), steer)
        });
        drop_reasons(
            &self.counters(),
            &self.port.counters(),
            &kernel,
            shared.as_ref(),
        )
    }
}

impl Nic {
    /// The kernel's `XDP_STATISTICS` summed over this queue's sockets: its
    /// own, the open per-flow sockets' and those of flows since closed. A
    /// socket whose statistics cannot be read counts as zeros.
    pub fn kernel_stats(&self) -> XskStats {
        let mut kernel = self.port.stats().unwrap_or_default();
        kernel += self.port.closed_flow_stats();
        for &i in &self.open_sockets {
            if let Some((_, sock)) = self.flow_sockets.get(i).and_then(Option::as_ref) {
                kernel += sock.stats().unwrap_or_default();
            }
        }
        kernel
    }
}

/// The drops among the counters, by name, leaving out those at 0.
fn drop_reasons(
    nic: &NicCounters,
    port: &PortCounters,
    kernel: &XskStats,
    shared: Option<&(GroupCounters, SteerCounters)>,
) -> Vec<(&'static str, u64)> {
    let shared = shared.map(|(group, steer)| {
        [
            ("inbox_full", group.inbox_full),
            ("no_socket", steer.no_socket),
            ("ip_fragment", steer.ip_fragment),
            ("ipv6_ext", steer.ipv6_ext),
        ]
    });
    nic.rx
        .drops()
        .chain([("udp_dropped", nic.udp_dropped)])
        .chain(port.drops())
        .chain(kernel.drops())
        .chain(shared.into_iter().flatten())
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[(&'static str, u64)]) -> Vec<&'static str> {
        v.iter().map(|(name, _)| *name).collect()
    }

    #[test]
    fn nothing_dropped_lists_nothing() {
        let v = drop_reasons(
            &NicCounters::default(),
            &PortCounters::default(),
            &XskStats::default(),
            Some(&Default::default()),
        );
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn every_drop_shows_under_its_name() {
        let mut nic = NicCounters::default();
        nic.rx.flow_table_full = 1;
        nic.rx.bad_ip_checksum = 2;
        nic.rx.placed = 50;
        nic.udp_dropped = 3;
        let port = PortCounters {
            rx_bad_descs: 4,
            rx_too_many_frags: 5,
            rx_drained_on_close: 6,
            rx_packets: 99,
            ..PortCounters::default()
        };
        let kernel = XskStats {
            rx_dropped: 7,
            rx_invalid_descs: 8,
            tx_invalid_descs: 9,
            rx_ring_full: 10,
            rx_fill_ring_empty_descs: 11,
            tx_ring_empty_descs: 1000,
        };
        let group = GroupCounters {
            forwarded: 77,
            inbox_full: 12,
        };
        let steer = SteerCounters {
            no_socket: 13,
            steered: 88,
            ..SteerCounters::default()
        };
        let v = drop_reasons(&nic, &port, &kernel, Some(&(group, steer)));
        assert_eq!(
            v,
            vec![
                ("bad_ip_checksum", 2),
                ("flow_table_full", 1),
                ("udp_dropped", 3),
                ("rx_bad_descs", 4),
                ("rx_too_many_frags", 5),
                ("rx_drained_on_close", 6),
                ("xsk_rx_dropped", 7),
                ("xsk_rx_invalid_descs", 8),
                ("xsk_tx_invalid_descs", 9),
                ("xsk_rx_ring_full", 10),
                ("xsk_rx_fill_ring_empty", 11),
                ("inbox_full", 12),
                ("no_socket", 13),
            ]
        );
        let alone = drop_reasons(&nic, &port, &kernel, None);
        assert!(!names(&alone).contains(&"inbox_full") && !names(&alone).contains(&"no_socket"));
    }
}
