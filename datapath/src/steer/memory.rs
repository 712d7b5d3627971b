//! The steering tables in memory: what the XDP program's maps hold, and
//! the program's decision over them, for a datapath over the fake kernel
//! of [`crate::testing`] (no program, no maps, no root).
//!
//! [`MemorySteering::steer`] follows `ebpf/steer.bpf.c`: an exact flow
//! entry wins (its own slot on its own queue, else the arrival queue's
//! catch-all, counted `other_queue`); then a listen entry for the
//! destination address or 0.0.0.0 (the arrival queue's catch-all); a slot
//! without a socket drops (`no_socket`); everything else is passed to the
//! kernel. Three simplifications: the frame is judged by
//! [`crate::wire::parse`] (a frame it refuses is `malformed` and passed,
//! IPv4 fragments included); an IPv6 packet with extension headers is
//! taken to be for a port of ours (dropped, `ipv6_ext`: the program walks
//! the headers to find out); and there is no kernel behind "passed": the
//! frame is simply not delivered.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use super::{check_slot, Proto, SteerCounters, SteerError, SteerKey};
use crate::wire::{self, Parsed, WireError};

/// What the steering decided for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerAction {
    /// Redirected into the socket in XSKMAP `slot`.
    Redirect {
        /// The XSKMAP slot.
        slot: u32,
        /// The socket there (its file descriptor number).
        socket: RawFd,
    },
    /// Handed to the kernel's stack (not ours).
    Pass,
    /// Dropped (a slot of ours without a socket).
    Drop,
}

/// The `flows`, `listen` and `xsks` maps and the counters, in memory.
#[derive(Debug, Default)]
pub struct MemorySteering {
    ifname: String,
    flows: HashMap<SteerKey, (u32, u32)>,
    listen: HashSet<(IpAddr, u16, Proto)>,
    xsks: HashMap<u32, RawFd>,
    counters: SteerCounters,
}

impl MemorySteering {
    /// Empty tables for an interface called `ifname`.
    pub fn new(ifname: &str) -> MemorySteering {
        MemorySteering {
            ifname: ifname.to_owned(),
            ..MemorySteering::default()
        }
    }

    pub(super) fn ifname(&self) -> &str {
        &self.ifname
    }

    fn missing(&self, map: &'static str, op: &'static str) -> SteerError {
        SteerError::Map {
            ifname: self.ifname.clone(),
            map,
            op,
            source: Box::new(aya::maps::MapError::KeyNotFound),
        }
    }

    pub(super) fn set_socket(&mut self, slot: u32, fd: BorrowedFd<'_>) -> Result<(), SteerError> {
        check_slot(&self.ifname, "set_socket", slot)?;
        self.xsks.insert(slot, fd.as_raw_fd());
        Ok(())
    }

    pub(super) fn clear_socket(&mut self, slot: u32) -> Result<(), SteerError> {
        check_slot(&self.ifname, "clear_socket", slot)?;
        self.xsks.remove(&slot);
        Ok(())
    }

    pub(super) fn insert_flow(
        &mut self,
        key: &SteerKey,
        slot: u32,
        queue: u32,
    ) -> Result<(), SteerError> {
        check_slot(&self.ifname, "insert_flow", slot)?;
        self.flows.insert(*key, (slot, queue));
        Ok(())
    }

    pub(super) fn remove_flow(&mut self, key: &SteerKey) -> Result<(), SteerError> {
        match self.flows.remove(key) {
            Some(_) => Ok(()),
            None => Err(self.missing("flows", "remove_flow")),
        }
    }

    pub(super) fn insert_listen(
        &mut self,
        addr: IpAddr,
        port: u16,
        proto: Proto,
    ) -> Result<(), SteerError> {
        self.listen.insert((addr, port, proto));
        Ok(())
    }

    pub(super) fn remove_listen(
        &mut self,
        addr: IpAddr,
        port: u16,
        proto: Proto,
    ) -> Result<(), SteerError> {
        if self.listen.remove(&(addr, port, proto)) {
            Ok(())
        } else {
            Err(self.missing("listen", "remove_listen"))
        }
    }

    /// The counters of the decisions made so far.
    pub fn counters(&self) -> SteerCounters {
        self.counters
    }

    /// Decides where `frame`, arriving on rx `queue`, goes, and counts it
    /// as the program would.
    pub fn steer(&mut self, frame: &[u8], queue: u32) -> SteerAction {
        let key = match wire::parse(frame) {
            Ok(Parsed::Tcp(seg)) => SteerKey {
                flow: seg.key,
                proto: Proto::Tcp,
            },
            Ok(Parsed::Udp(d)) => SteerKey {
                flow: d.key,
                proto: Proto::Udp,
            },
            // As the program: neither IP family, or neither TCP nor UDP
            // (ICMPv6 included), is the kernel's.
            Err(WireError::NotIp { .. } | WireError::UnsupportedProtocol { .. }) => {
                self.counters.passed += 1;
                return SteerAction::Pass;
            }
            // The program walks the extension headers to the ports; this
            // mirror takes every such packet to be for a port of ours.
            Err(WireError::Ipv6ExtensionHeader { .. }) => {
                self.counters.ipv6_ext += 1;
                return SteerAction::Drop;
            }
            Err(_) => {
                self.counters.malformed += 1;
                return SteerAction::Pass;
            }
        };
        if let Some(&(slot, flow_queue)) = self.flows.get(&key) {
            if flow_queue == queue {
                return self.redirect(slot, Counted::Steered);
            }
            return self.redirect(queue, Counted::OtherQueue);
        }
        let local = key.flow.local_ip;
        let any = match local {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        let port = key.flow.local_port;
        if self.listen.contains(&(local, port, key.proto))
            || self.listen.contains(&(any, port, key.proto))
        {
            return self.redirect(queue, Counted::Steered);
        }
        self.counters.passed += 1;
        SteerAction::Pass
    }

    fn redirect(&mut self, slot: u32, counted: Counted) -> SteerAction {
        match self.xsks.get(&slot) {
            Some(&socket) => {
                match counted {
                    Counted::Steered => self.counters.steered += 1,
                    Counted::OtherQueue => self.counters.other_queue += 1,
                }
                SteerAction::Redirect { slot, socket }
            }
            None => {
                self.counters.no_socket += 1;
                SteerAction::Drop
            }
        }
    }
}

/// Which counter a successful redirect bumps.
#[derive(Debug, Clone, Copy)]
enum Counted {
    Steered,
    OtherQueue,
}
