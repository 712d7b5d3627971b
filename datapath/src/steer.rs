//! XDP steering: loads `ebpf/steer.bpf.o`, attaches it to one interface and
//! edits its maps.
//!
//! The program (see `ebpf/steer.bpf.c` and the layouts in `ebpf/steer.h`)
//! redirects packets of flows zerosplit owns into AF_XDP sockets and passes
//! everything else (ARP, ICMP, IPv6, other ports) to the kernel:
//!
//! 1. an exact 5-tuple in the `flows` map goes to the XSKMAP slot stored
//!    there (a per-flow socket, slots `FIRST_FLOW_SLOT..XSKS_MAX`) when it
//!    arrived on the queue that socket is bound to, else to the catch-all
//!    socket of the queue it arrived on (counted `other_queue`; the
//!    datapath hands it to the queue that owns the flow);
//! 2. `(daddr, dport, proto)` in the `listen` map (or `(0.0.0.0, dport,
//!    proto)`) goes to slot `rx_queue_index`, the catch-all socket of the
//!    queue the packet arrived on (slots `0..MAX_QUEUES`);
//! 3. a match whose slot holds no socket is dropped and counted
//!    `no_socket`: the port is ours and the kernel must not answer it.
//!
//! The program is attached through a bpf_link, so it detaches when the
//! [`Steering`] is dropped *and* when the process dies without running
//! destructors (the kernel closes the link fd).
//!
//! # Minimum kernel
//!
//! Linux 5.9 (XDP bpf_link), 5.18 for the `xdp.frags` section the object
//! uses (multi-buffer XDP); 6.18 is what this project is tested on.

use std::{fmt, net::IpAddr, os::fd::BorrowedFd};

use aya::{maps::MapError, programs::ProgramError, EbpfError};
use thiserror::Error;

mod map_keys;
#[cfg(any(test, feature = "testing"))]
mod memory;
mod xdp;

#[cfg(any(test, feature = "testing"))]
pub use memory::{MemorySteering, SteerAction};
use proto::FlowKey;
pub use xdp::XdpProgram;

/// Fails with [`SteerError::SlotOutOfRange`] unless `slot` indexes the
/// socket map.
fn check_slot(ifname: &str, op: &'static str, slot: u32) -> Result<(), SteerError> {
    if slot < XSKS_MAX {
        Ok(())
    } else {
        Err(SteerError::SlotOutOfRange {
            ifname: ifname.to_owned(),
            op,
            slot,
        })
    }
}

/// The compiled steering program (see `datapath/build.rs`).
static STEER_OBJ: &[u8] = aya::include_bytes_aligned!(env!("ZEROSPLIT_STEER_OBJ"));

/// Name of the XDP function in `steer.bpf.c`.
const PROGRAM: &str = "zs_steer";

/// Number of XSKMAP entries (`ZS_XSKS_MAX`).
pub const XSKS_MAX: u32 = 1024;
/// Catch-all slots, one per rx queue: queue `q` uses slot `q` (`ZS_MAX_QUEUES`).
pub const MAX_QUEUES: u32 = 64;
/// First slot for per-flow sockets (`ZS_FIRST_FLOW_SLOT`).
pub const FIRST_FLOW_SLOT: u32 = MAX_QUEUES;
/// Entries of the `flows` map (`ZS_FLOWS_MAX`): no more flows can be steered.
pub const FLOWS_MAX: u32 = 65536;

const MAP_FLOWS: &str = "flows";
const MAP_LISTEN: &str = "listen";
const MAP_FLOWS6: &str = "flows6";
const MAP_LISTEN6: &str = "listen6";
const MAP_XSKS: &str = "xsks";
const MAP_COUNTERS: &str = "counters";

/// Oldest kernel with XDP bpf_link (`BPF_LINK_CREATE` for `BPF_XDP`).
const MIN_KERNEL: (u8, u8, u16) = (5, 9, 0);

/// How the program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XdpMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`); veth, mlx5, ice, i40e support it.
    Native,
    /// In the generic stack after skb allocation (`XDP_FLAGS_SKB_MODE`);
    /// works on any interface, slower.
    Generic,
}

impl XdpMode {
    fn aya(self) -> aya::programs::XdpMode {
        match self {
            Self::Native => aya::programs::XdpMode::Driver,
            Self::Generic => aya::programs::XdpMode::Skb,
        }
    }
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Native => "native",
            Self::Generic => "generic",
        })
    }
}

/// Transport protocol of a steered flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
}

impl Proto {
    /// The IPv4 protocol number (RFC 790 / IANA).
    pub fn number(self) -> u8 {
        match self {
            Self::Tcp => 6,
            Self::Udp => 17,
        }
    }
}

/// A flow as the XDP program matches it on receive: the 5-tuple from our
/// side (the *remote* end is the packet's source) and the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SteerKey {
    /// Addresses and ports.
    pub flow: FlowKey,
    /// Transport protocol.
    pub proto: Proto,
}

/// Indices of the `counters` map (`enum zs_counter`).
const CNT_STEERED: u32 = 0;
const CNT_PASSED: u32 = 1;
const CNT_MALFORMED: u32 = 2;
const CNT_NO_SOCKET: u32 = 3;
const CNT_OTHER_QUEUE: u32 = 4;
const CNT_IP_FRAGMENT: u32 = 5;
const CNT_IPV6_EXT: u32 = 6;

/// Packet counters of the steering program, summed over all CPUs. Every
/// packet the program sees is counted exactly once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteerCounters {
    /// Redirected into an AF_XDP socket.
    pub steered: u64,
    /// Handed to the kernel (not ours: ARP, ICMP, ICMPv6, fragments, other
    /// ports).
    pub passed: u64,
    /// Truncated or invalid Ethernet/IP/L4 headers; passed to the kernel.
    pub malformed: u64,
    /// Matched a flow or listen entry whose XSKMAP slot is empty: dropped.
    pub no_socket: u64,
    /// A flow's packet that arrived on another rx queue than its socket's,
    /// redirected to the catch-all socket of the queue it arrived on.
    pub other_queue: u64,
    /// A first IPv4 fragment for a flow or listening port of ours: dropped
    /// (we do not reassemble, and the kernel would answer with a RST).
    pub ip_fragment: u64,
    /// An IPv6 packet with extension headers for a flow or listening port
    /// of ours: dropped (the datapath takes TCP right after the fixed
    /// header only, and the kernel would answer with a RST).
    pub ipv6_ext: u64,
}

/// What went wrong in [`Steering`]; every variant names the interface.
#[derive(Debug, Error)]
pub enum SteerError {
    /// The running kernel cannot attach XDP through a bpf_link.
    #[error("attach to {ifname}: kernel {found} is older than 5.9, which XDP bpf_link needs")]
    KernelTooOld {
        /// Interface.
        ifname: String,
        /// Running kernel version.
        found: String,
    },
    /// The interface does not exist in the calling thread's namespace.
    #[error("attach to {ifname}: no such interface in this thread's network namespace: {source}")]
    NoInterface {
        /// Interface.
        ifname: String,
        /// The lookup error.
        source: std::io::Error,
    },
    /// The embedded object could not be loaded (maps created).
    #[error("attach to {ifname}: loading the embedded XDP object failed: {source}")]
    Load {
        /// Interface.
        ifname: String,
        /// aya's error (boxed: it is large).
        source: Box<EbpfError>,
    },
    /// The object lacks an expected program or map (a build mismatch).
    #[error("attach to {ifname}: the XDP object has no {what} `{name}`")]
    Missing {
        /// Interface.
        ifname: String,
        /// `"program"` or `"map"`.
        what: &'static str,
        /// Its name.
        name: &'static str,
    },
    /// Loading (verifying) or attaching the program failed.
    #[error("{op} XDP program on {ifname} ({mode} mode): {source}")]
    Program {
        /// Interface.
        ifname: String,
        /// Requested mode.
        mode: XdpMode,
        /// `"load"`, `"attach"` or `"take link of"`.
        op: &'static str,
        /// aya's error (boxed: it is large).
        source: Box<ProgramError>,
    },
    /// aya fell back to a netlink attach, which would outlive a crash.
    #[error("attach to {ifname} ({mode} mode): the kernel refused a bpf_link and the program was attached via netlink; refusing a crash-unsafe attach")]
    NotALink {
        /// Interface.
        ifname: String,
        /// Requested mode.
        mode: XdpMode,
    },
    /// A map operation failed.
    #[error("{op} on map `{map}` of {ifname}: {source}")]
    Map {
        /// Interface.
        ifname: String,
        /// Map name.
        map: &'static str,
        /// Operation.
        op: &'static str,
        /// aya's error (e.g. ENOENT on removing a missing key, E2BIG when
        /// full); boxed: it is large.
        source: Box<MapError>,
    },
    /// An XSKMAP slot outside `0..XSKS_MAX`.
    #[error("{op} on {ifname}: XSKMAP slot {slot} is out of range 0..{XSKS_MAX}")]
    SlotOutOfRange {
        /// Interface.
        ifname: String,
        /// Operation.
        op: &'static str,
        /// The slot.
        slot: u32,
    },
}

/// The steering of one interface, behind one interface for the datapath:
/// the XDP program and its kernel maps, or (with the `testing` feature) the
/// same tables in memory, read by the fake kernel of [`crate::testing`]
/// when it decides which ring a delivered frame lands on.
#[derive(Debug)]
pub enum Steering {
    /// The XDP program attached to a real interface.
    Xdp(Box<XdpProgram>),
    /// The tables in memory, no program, no kernel.
    #[cfg(any(test, feature = "testing"))]
    Memory(Box<MemorySteering>),
}

impl Steering {
    /// Loads the embedded steering program and attaches it to `ifname`
    /// ([`XdpProgram::attach`]).
    ///
    /// # Errors
    /// As [`XdpProgram::attach`].
    pub fn attach(ifname: &str, mode: XdpMode) -> Result<Self, SteerError> {
        XdpProgram::attach(ifname, mode).map(|p| Steering::Xdp(Box::new(p)))
    }

    /// The interface index the program is attached to (0 in memory).
    pub fn ifindex(&self) -> u32 {
        match self {
            Steering::Xdp(p) => p.ifindex(),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(_) => 0,
        }
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        match self {
            Steering::Xdp(p) => p.ifname(),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(m) => m.ifname(),
        }
    }

    /// The mode the program runs in (native in memory).
    pub fn mode(&self) -> XdpMode {
        match self {
            Steering::Xdp(p) => p.mode(),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(_) => XdpMode::Native,
        }
    }

    /// Puts the AF_XDP socket `fd` into XSKMAP `slot`
    /// ([`XdpProgram::set_socket`]).
    ///
    /// # Errors
    /// As [`XdpProgram::set_socket`].
    pub fn set_socket(&mut self, slot: u32, fd: BorrowedFd<'_>) -> Result<(), SteerError> {
        match self {
            Steering::Xdp(p) => p.set_socket(slot, fd),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(m) => m.set_socket(slot, fd),
        }
    }

    /// Empties XSKMAP `slot` ([`XdpProgram::clear_socket`]).
    ///
    /// # Errors
    /// As [`XdpProgram::clear_socket`].
    pub fn clear_socket(&mut self, slot: u32) -> Result<(), SteerError> {
        match self {
            Steering::Xdp(p) => p.clear_socket(slot),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(m) => m.clear_socket(slot),
        }
    }

    /// Steers `key` to XSKMAP `slot` on rx `queue`
    /// ([`XdpProgram::insert_flow`]).
    ///
    /// # Errors
    /// As [`XdpProgram::insert_flow`].
    pub fn insert_flow(&mut self, key: &SteerKey, slot: u32, queue: u32) -> Result<(), SteerError> {
        match self {
            Steering::Xdp(p) => p.insert_flow(key, slot, queue),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(m) => m.insert_flow(key, slot, queue),
        }
    }

    /// Stops steering `key` ([`XdpProgram::remove_flow`]).
    ///
    /// # Errors
    /// As [`XdpProgram::remove_flow`] (an error if it was not there).
    pub fn remove_flow(&mut self, key: &SteerKey) -> Result<(), SteerError> {
        match self {
            Steering::Xdp(p) => p.remove_flow(key),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(m) => m.remove_flow(key),
        }
    }

    /// Claims `(addr, port, proto)` ([`XdpProgram::insert_listen`]).
    ///
    /// # Errors
    /// As [`XdpProgram::insert_listen`].
    pub fn insert_listen(
        &mut self,
        addr: impl Into<IpAddr>,
        port: u16,
        proto: Proto,
    ) -> Result<(), SteerError> {
        let addr = addr.into();
        match self {
            Steering::Xdp(p) => p.insert_listen(addr, port, proto),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(m) => m.insert_listen(addr, port, proto),
        }
    }

    /// Releases a claim made by [`Steering::insert_listen`].
    ///
    /// # Errors
    /// As [`XdpProgram::remove_listen`] (an error if it was not there).
    pub fn remove_listen(
        &mut self,
        addr: impl Into<IpAddr>,
        port: u16,
        proto: Proto,
    ) -> Result<(), SteerError> {
        let addr = addr.into();
        match self {
            Steering::Xdp(p) => p.remove_listen(addr, port, proto),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(m) => m.remove_listen(addr, port, proto),
        }
    }

    /// The program's packet counters.
    ///
    /// # Errors
    /// As [`XdpProgram::counters`].
    pub fn counters(&self) -> Result<SteerCounters, SteerError> {
        match self {
            Steering::Xdp(p) => p.counters(),
            #[cfg(any(test, feature = "testing"))]
            Steering::Memory(m) => Ok(m.counters()),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_steer_h() {
        let header = include_str!("../../ebpf/steer.h");
        let define = |name: &str| -> u32 {
            let line = header
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("{name} not in steer.h"));
            let value = line.split_whitespace().nth(2).unwrap_or_default();
            match value {
                "ZS_MAX_QUEUES" => MAX_QUEUES,
                v => v.parse().unwrap_or_else(|_| panic!("{name} = {v:?}")),
            }
        };
        assert_eq!(define("ZS_XSKS_MAX"), XSKS_MAX);
        assert_eq!(define("ZS_MAX_QUEUES"), MAX_QUEUES);
        assert_eq!(define("ZS_FIRST_FLOW_SLOT"), FIRST_FLOW_SLOT);
        for (name, index) in [
            ("ZS_CNT_STEERED", CNT_STEERED),
            ("ZS_CNT_PASSED", CNT_PASSED),
            ("ZS_CNT_MALFORMED", CNT_MALFORMED),
            ("ZS_CNT_NO_SOCKET", CNT_NO_SOCKET),
            ("ZS_CNT_OTHER_QUEUE", CNT_OTHER_QUEUE),
            ("ZS_CNT_IP_FRAGMENT", CNT_IP_FRAGMENT),
        ] {
            assert!(
                header.contains(&format!("{name} = {index},")),
                "{name} must be {index} in steer.h"
            );
        }
    }

    #[test]
    fn embedded_object_is_an_elf_with_the_program_section() {
        assert_eq!(&STEER_OBJ[..4], b"\x7fELF");
        let needle = b"xdp.frags";
        assert!(STEER_OBJ.windows(needle.len()).any(|w| w == needle));
        let obj = aya_obj_names(STEER_OBJ);
        for name in [
            PROGRAM,
            MAP_FLOWS,
            MAP_LISTEN,
            MAP_FLOWS6,
            MAP_LISTEN6,
            MAP_XSKS,
            MAP_COUNTERS,
        ] {
            assert!(
                obj.iter().any(|n| n == name),
                "{name} missing from steer.bpf.o"
            );
        }
    }

    /// NUL-separated strings of the object (symbol names live there).
    fn aya_obj_names(obj: &[u8]) -> Vec<String> {
        obj.split(|&b| b == 0)
            .filter_map(|s| std::str::from_utf8(s).ok())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn attach_to_a_missing_interface_names_it() {
        let err =
            Steering::attach("zs-nonexistent0", XdpMode::Generic).expect_err("no such interface");
        assert!(matches!(err, SteerError::NoInterface { .. }), "{err}");
        assert!(err.to_string().contains("zs-nonexistent0"), "{err}");
    }
}
