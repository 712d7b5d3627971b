//! Local ports of outgoing connections, chosen per RFC 6056 from the
//! ephemeral range, skipping ports in use, optionally reserved from the
//! kernel (`net.ipv4.ip_local_reserved_ports`) for the host's life.
//!
//! The selection is RFC 6056 §3.3.4 Algorithm 4 ("double-hash"): the
//! search for a destination (local address, remote address and port)
//! starts at a keyed-hash offset of that destination plus a counter of
//! its own (one of [`TABLE_LENGTH`] counters, chosen by a second keyed
//! hash), and goes up one port at a time past ports in use. After each
//! choice the counter advances by the ports probed plus a keyed random
//! step of 2 to [`MAX_STEP`] + 1 (the random increments of §3.3.5), so
//! that successive connections to one peer get unpredictable,
//! non-consecutive ports, and an observer of the ports we use towards
//! one destination learns nothing of those towards another.

use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;

use super::{HostError, Secret};
use crate::reserved_ports::ReservedPorts;

/// Counters of the per-destination table (RFC 6056 §3.3.4 `TABLE_LENGTH`).
pub(crate) const TABLE_LENGTH: usize = 256;

/// Largest random part of a counter's step (RFC 6056 §3.3.5 `N`, its
/// suggested 500), capped at half the range so a step never wraps to the
/// next port.
pub(crate) const MAX_STEP: u32 = 500;

/// The ephemeral range, the keyed counters, and the kernel reservation.
#[derive(Debug)]
pub(crate) struct Ports {
    range: RangeInclusive<u16>,
    secret: Secret,
    table: Vec<u32>,
    /// Keyed random numbers drawn so far.
    draws: u64,
    _reserved: Option<ReservedPorts>,
}

impl Ports {
    /// Serves `range` with ports keyed by `secret`, reserving the range
    /// from the kernel when `reserve`.
    ///
    /// # Errors
    /// [`HostError::ReservePorts`].
    pub(crate) fn new(
        range: RangeInclusive<u16>,
        reserve: bool,
        secret: Secret,
    ) -> Result<Ports, HostError> {
        Ok(Ports {
            _reserved: reserve_ports(&range, reserve)?,
            range,
            secret,
            table: vec![0; TABLE_LENGTH],
            draws: 0,
        })
    }

    /// A port of the range for which `in_use` is false, for a connection
    /// from `local` to `remote`.
    ///
    /// # Errors
    /// [`HostError::PortsExhausted`] when every port is in use.
    pub(crate) fn allocate(
        &mut self,
        local: IpAddr,
        remote: SocketAddr,
        in_use: impl Fn(u16) -> bool,
    ) -> Result<u16, HostError> {
        let (start, end) = (*self.range.start(), *self.range.end());
        if start > end {
            return Err(HostError::PortsExhausted(self.range.clone()));
        }
        let span = u32::from(end - start) + 1;
        let offset = self.secret.port_offset(local, remote);
        let index = (self.secret.port_bucket(local, remote) % TABLE_LENGTH as u64) as usize;
        let first = (u64::from(offset) + u64::from(self.table[index])) % u64::from(span);
        for probe in 0..span {
            let port = start + ((first + u64::from(probe)) % u64::from(span)) as u16;
            if in_use(port) {
                continue;
            }
            self.draws += 1;
            let max_step = MAX_STEP.min(span / 2).max(1);
            let step = 2 + (self.secret.draw(self.draws) % u64::from(max_step)) as u32;
            self.table[index] = self.table[index].wrapping_add(probe + step);
            return Ok(port);
        }
        Err(HostError::PortsExhausted(self.range.clone()))
    }
}

/// Tells the kernel not to use `range` (when `reserve`), until the guard
/// drops.
///
/// # Errors
/// [`HostError::ReservePorts`].
pub(crate) fn reserve_ports(
    range: &RangeInclusive<u16>,
    reserve: bool,
) -> Result<Option<ReservedPorts>, HostError> {
    if !reserve {
        return Ok(None);
    }
    ReservedPorts::reserve(range)
        .map(Some)
        .map_err(|source| HostError::ReservePorts {
            range: range.clone(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Instant;

    use super::*;

    use std::net::Ipv4Addr;

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));

    fn ports(range: RangeInclusive<u16>, key: u8) -> Ports {
        Ports::new(range, false, Secret::with_key([key; 16], Instant::now()))
            .expect("no reservation")
    }

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::new(Ipv4Addr::new(198, 18, 0, 2).into(), port)
    }

    #[test]
    fn successive_connections_to_one_peer_get_non_consecutive_ports_in_range() {
        for key in 0..8 {
            let mut p = ports(40000..=40999, key);
            let mut used = HashSet::new();
            let mut last: Option<u16> = None;
            for _ in 0..200 {
                let port = p
                    .allocate(LOCAL, peer(5000), |q| used.contains(&q))
                    .expect("free ports left");
                assert!((40000..=40999).contains(&port), "{port} out of range");
                assert!(used.insert(port), "{port} handed out twice");
                if let Some(prev) = last {
                    assert!(
                        port.abs_diff(prev) > 1,
                        "key {key}: {prev} then {port} are consecutive"
                    );
                }
                last = Some(port);
            }
        }
    }

    #[test]
    fn destinations_and_secrets_start_at_unrelated_ports() {
        let firsts = |key| {
            (0..32)
                .map(|i| ports(40000..=40999, key).allocate(LOCAL, peer(5000 + i), |_| false))
                .collect::<Result<Vec<_>, _>>()
                .expect("free")
        };
        let a = firsts(1);
        let distinct: HashSet<_> = a.iter().collect();
        assert!(distinct.len() >= 28, "first ports per peer: {a:?}");
        let b = firsts(2);
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same <= 2, "two secrets chose the same ports: {a:?} {b:?}");
    }

    #[test]
    fn every_port_of_the_range_is_served_then_exhaustion_names_the_range() {
        for range in [10..=12, 65535..=65535, 65000..=65535] {
            let mut p = ports(range.clone(), 7);
            let mut used = HashSet::new();
            for i in 0..range.len() {
                let port = p
                    .allocate(LOCAL, peer(80 + (i % 3) as u16), |q| used.contains(&q))
                    .expect("a free port remains");
                assert!(range.contains(&port) && used.insert(port), "{port}");
            }
            let e = p
                .allocate(LOCAL, peer(80), |q| used.contains(&q))
                .unwrap_err();
            assert!(
                matches!(e, HostError::PortsExhausted(ref r) if *r == range),
                "{e}"
            );
            assert!(e.to_string().contains(&format!("{range:?}")), "{e}");
        }
    }

    #[test]
    fn a_released_port_is_served_again() {
        let mut p = ports(65535..=65535, 3);
        assert_eq!(p.allocate(LOCAL, peer(1), |_| false).unwrap(), 65535);
        assert_eq!(p.allocate(LOCAL, peer(1), |_| false).unwrap(), 65535);
    }
}
