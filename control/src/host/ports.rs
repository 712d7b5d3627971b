//! Local ports of outgoing connections: the ephemeral range, handed out
//! round-robin skipping ports in use, optionally reserved from the kernel
//! (`net.ipv4.ip_local_reserved_ports`) for the host's life.

use std::ops::RangeInclusive;

use crate::netinfo::ReservedPorts;
use crate::stack::StackError;

/// The ephemeral range and where the next search starts.
#[derive(Debug)]
pub(crate) struct Ports {
    range: RangeInclusive<u16>,
    next: u16,
    _reserved: Option<ReservedPorts>,
}

impl Ports {
    /// Serves `range`, reserving it from the kernel when `reserve`.
    ///
    /// # Errors
    /// [`StackError::ReservePorts`].
    pub(crate) fn new(range: RangeInclusive<u16>, reserve: bool) -> Result<Ports, StackError> {
        Ok(Ports {
            next: *range.start(),
            _reserved: reserve_ports(&range, reserve)?,
            range,
        })
    }

    /// The next port of the range for which `in_use` is false.
    ///
    /// # Errors
    /// [`StackError::PortsExhausted`] when every port is in use.
    pub(crate) fn allocate(&mut self, in_use: impl Fn(u16) -> bool) -> Result<u16, StackError> {
        let (start, end) = (*self.range.start(), *self.range.end());
        let span = u32::from(end.saturating_sub(start)) + 1;
        for _ in 0..span {
            let p = self.next;
            self.next = if p >= end { start } else { p + 1 };
            if !in_use(p) {
                return Ok(p);
            }
        }
        Err(StackError::PortsExhausted(self.range.clone()))
    }
}

/// Tells the kernel not to use `range` (when `reserve`), until the guard
/// drops.
///
/// # Errors
/// [`StackError::ReservePorts`].
pub(crate) fn reserve_ports(
    range: &RangeInclusive<u16>,
    reserve: bool,
) -> Result<Option<ReservedPorts>, StackError> {
    if !reserve {
        return Ok(None);
    }
    ReservedPorts::reserve(range)
        .map(Some)
        .map_err(|source| StackError::ReservePorts {
            range: range.clone(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_go_round_robin_skipping_those_in_use_and_run_out() {
        let mut ports = Ports::new(10..=12, false).expect("no reservation");
        assert_eq!(ports.allocate(|_| false).unwrap(), 10);
        assert_eq!(ports.allocate(|p| p == 11).unwrap(), 12);
        // Wraps around to the start.
        assert_eq!(ports.allocate(|_| false).unwrap(), 10);
        let e = ports.allocate(|_| true).unwrap_err();
        assert!(
            matches!(e, StackError::PortsExhausted(ref r) if *r == (10..=12)),
            "{e}"
        );
    }

    #[test]
    fn the_top_port_of_the_range_is_served() {
        let mut ports = Ports::new(65535..=65535, false).expect("no reservation");
        assert_eq!(ports.allocate(|_| false).unwrap(), 65535);
        assert_eq!(ports.allocate(|_| false).unwrap(), 65535);
    }
}
