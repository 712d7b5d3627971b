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

use std::{
    fmt,
    net::Ipv4Addr,
    os::fd::{AsRawFd, BorrowedFd},
};

use aya::{
    maps::{HashMap, MapData, MapError, PerCpuArray, XskMap},
    programs::{links::FdLink, ProgramError, Xdp},
    util::KernelVersion,
    Ebpf, EbpfError,
};
use thiserror::Error;

mod map_keys;

use crate::iface;
use map_keys::{FlowBytes, FlowValueBytes, ListenBytes, RawFlowKey, RawFlowValue, RawListenKey};
use proto::FlowKey;

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

/// Packet counters of the steering program, summed over all CPUs. Every
/// packet the program sees is counted exactly once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteerCounters {
    /// Redirected into an AF_XDP socket.
    pub steered: u64,
    /// Handed to the kernel (not ours: ARP, ICMP, IPv6, fragments, other ports).
    pub passed: u64,
    /// Truncated or invalid Ethernet/IPv4/L4 headers; passed to the kernel.
    pub malformed: u64,
    /// Matched a flow or listen entry whose XSKMAP slot is empty: dropped.
    pub no_socket: u64,
    /// A flow's packet that arrived on another rx queue than its socket's,
    /// redirected to the catch-all socket of the queue it arrived on.
    pub other_queue: u64,
    /// A first IPv4 fragment for a flow or listening port of ours: dropped
    /// (we do not reassemble, and the kernel would answer with a RST).
    pub ip_fragment: u64,
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

/// The steering program attached to one interface, with its maps.
///
/// Dropping it detaches the program (the link fd is closed) and frees the
/// maps; a process that dies without unwinding detaches it too.
pub struct Steering {
    // Field order matters: the link is dropped (detached) before the maps
    // and the program it refers to.
    _link: FdLink,
    flows: HashMap<MapData, FlowBytes, FlowValueBytes>,
    listen: HashMap<MapData, ListenBytes, u32>,
    xsks: XskMap<MapData>,
    counters: PerCpuArray<MapData, u64>,
    _ebpf: Ebpf,
    ifname: String,
    ifindex: u32,
    mode: XdpMode,
}

impl fmt::Debug for Steering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Steering")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Steering {
    /// Loads the embedded steering program and attaches it to `ifname` (in
    /// the calling thread's network namespace) through a bpf_link.
    ///
    /// # Errors
    ///
    /// [`SteerError::NoInterface`] if `ifname` does not exist;
    /// [`SteerError::Program`] if the verifier rejects the program or the
    /// attach fails (e.g. EBUSY: another XDP program is attached; EINVAL /
    /// "Peer MTU is too large" on veth); [`SteerError::Load`] if map
    /// creation fails (e.g. no CAP_BPF); [`SteerError::KernelTooOld`] below 5.9.
    pub fn attach(ifname: &str, mode: XdpMode) -> Result<Self, SteerError> {
        let owned = || ifname.to_owned();
        if let Ok(found) = KernelVersion::current() {
            let (ma, mi, pa) = MIN_KERNEL;
            if found < KernelVersion::new(ma, mi, pa) {
                return Err(SteerError::KernelTooOld {
                    ifname: owned(),
                    found: format!("{found:?}"),
                });
            }
        }
        let ifindex = iface::ifindex(ifname).map_err(|source| SteerError::NoInterface {
            ifname: owned(),
            source,
        })?;
        let mut ebpf = Ebpf::load(STEER_OBJ).map_err(|source| SteerError::Load {
            ifname: owned(),
            source: Box::new(source),
        })?;
        let prog_err = |op, source| SteerError::Program {
            ifname: owned(),
            mode,
            op,
            source: Box::new(source),
        };
        let program: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .ok_or(SteerError::Missing {
                ifname: owned(),
                what: "program",
                name: PROGRAM,
            })?
            .try_into()
            .map_err(|e| prog_err("load", e))?;
        program.load().map_err(|e| prog_err("load", e))?;
        // aya 0.14 tries BPF_LINK_CREATE first and silently falls back to a
        // netlink attach on EINVAL; only the bpf_link form detaches on crash.
        let id = program
            .attach_to_if_index(ifindex, mode.aya())
            .map_err(|e| prog_err("attach", e))?;
        let link = program
            .take_link(id)
            .map_err(|e| prog_err("take link of", e))?;
        // A netlink "link" cannot become an FdLink; the failed conversion
        // consumes it without detaching, which cannot happen on >= 5.9
        // kernels (checked above) unless BPF_LINK_CREATE itself was refused.
        let link = FdLink::try_from(link).map_err(|_| SteerError::NotALink {
            ifname: owned(),
            mode,
        })?;

        let flows = HashMap::try_from(take_map(&mut ebpf, ifname, MAP_FLOWS)?)
            .map_err(|source| map_err(ifname, MAP_FLOWS, "open", source))?;
        let listen = HashMap::try_from(take_map(&mut ebpf, ifname, MAP_LISTEN)?)
            .map_err(|source| map_err(ifname, MAP_LISTEN, "open", source))?;
        let xsks = XskMap::try_from(take_map(&mut ebpf, ifname, MAP_XSKS)?)
            .map_err(|source| map_err(ifname, MAP_XSKS, "open", source))?;
        let counters = PerCpuArray::try_from(take_map(&mut ebpf, ifname, MAP_COUNTERS)?)
            .map_err(|source| map_err(ifname, MAP_COUNTERS, "open", source))?;
        Ok(Self {
            _link: link,
            flows,
            listen,
            xsks,
            counters,
            _ebpf: ebpf,
            ifname: owned(),
            ifindex,
            mode,
        })
    }

    /// The interface index the program is attached to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface name given to [`Steering::attach`].
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The mode the program runs in.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// Puts the AF_XDP socket `fd` into XSKMAP `slot`. Catch-all sockets go
    /// to slot = their rx queue (< [`MAX_QUEUES`]), per-flow sockets to
    /// slots ≥ [`FIRST_FLOW_SLOT`]. The socket must be bound to this
    /// interface (and, for delivery, to the queue the packets arrive on).
    ///
    /// # Errors
    ///
    /// [`SteerError::SlotOutOfRange`]; [`SteerError::Map`] if the kernel
    /// refuses (EOPNOTSUPP: the fd is not an AF_XDP socket).
    pub fn set_socket(&mut self, slot: u32, fd: BorrowedFd<'_>) -> Result<(), SteerError> {
        self.check_slot("set_socket", slot)?;
        self.xsks
            .set(slot, fd.as_raw_fd(), 0)
            .map_err(|source| map_err(&self.ifname, MAP_XSKS, "set_socket", source))
    }

    /// Empties XSKMAP `slot`; packets steered there are then dropped and
    /// counted `no_socket`. Clearing an empty slot succeeds (the kernel's
    /// XSKMAP delete is an exchange with NULL).
    ///
    /// # Errors
    ///
    /// [`SteerError::SlotOutOfRange`]; [`SteerError::Map`] if the kernel
    /// refuses.
    pub fn clear_socket(&mut self, slot: u32) -> Result<(), SteerError> {
        self.check_slot("clear_socket", slot)?;
        self.xsks
            .unset(slot)
            .map_err(|source| map_err(&self.ifname, MAP_XSKS, "clear_socket", source))
    }

    /// Steers `key` to XSKMAP `slot`, whose socket is bound to rx `queue`
    /// (inserts or replaces). Packets of `key` arriving on another queue go
    /// to that queue's catch-all slot instead (an AF_XDP socket only takes
    /// packets of its own queue).
    ///
    /// # Errors
    ///
    /// [`SteerError::SlotOutOfRange`]; [`SteerError::Map`] (E2BIG when the
    /// table of 65536 flows is full).
    pub fn insert_flow(&mut self, key: &SteerKey, slot: u32, queue: u32) -> Result<(), SteerError> {
        self.check_slot("insert_flow", slot)?;
        let value = RawFlowValue { slot, queue }.to_bytes();
        self.flows
            .insert(RawFlowKey::new(key).to_bytes(), value, 0)
            .map_err(|source| map_err(&self.ifname, MAP_FLOWS, "insert_flow", source))
    }

    /// Stops steering `key` by its 5-tuple.
    ///
    /// # Errors
    ///
    /// [`SteerError::Map`] (ENOENT if it was not there).
    pub fn remove_flow(&mut self, key: &SteerKey) -> Result<(), SteerError> {
        self.flows
            .remove(&RawFlowKey::new(key).to_bytes())
            .map_err(|source| map_err(&self.ifname, MAP_FLOWS, "remove_flow", source))
    }

    /// Claims `(addr, port, proto)`: packets to it without a flow entry go
    /// to the catch-all socket of their rx queue. `addr` 0.0.0.0 claims the
    /// port on every address.
    ///
    /// # Errors
    ///
    /// [`SteerError::Map`] (E2BIG when 1024 entries exist).
    pub fn insert_listen(
        &mut self,
        addr: Ipv4Addr,
        port: u16,
        proto: Proto,
    ) -> Result<(), SteerError> {
        self.listen
            .insert(RawListenKey::new(addr, port, proto).to_bytes(), 0, 0)
            .map_err(|source| map_err(&self.ifname, MAP_LISTEN, "insert_listen", source))
    }

    /// Releases a claim made by [`Steering::insert_listen`].
    ///
    /// # Errors
    ///
    /// [`SteerError::Map`] (ENOENT if it was not there).
    pub fn remove_listen(
        &mut self,
        addr: Ipv4Addr,
        port: u16,
        proto: Proto,
    ) -> Result<(), SteerError> {
        self.listen
            .remove(&RawListenKey::new(addr, port, proto).to_bytes())
            .map_err(|source| map_err(&self.ifname, MAP_LISTEN, "remove_listen", source))
    }

    /// Reads the program's counters, summed over all CPUs.
    ///
    /// # Errors
    ///
    /// [`SteerError::Map`] if the kernel lookup fails.
    pub fn counters(&self) -> Result<SteerCounters, SteerError> {
        let read = |index: u32| -> Result<u64, SteerError> {
            let values = self
                .counters
                .get(&index, 0)
                .map_err(|source| map_err(&self.ifname, MAP_COUNTERS, "read counters", source))?;
            Ok(values.iter().copied().fold(0u64, u64::wrapping_add))
        };
        Ok(SteerCounters {
            steered: read(CNT_STEERED)?,
            passed: read(CNT_PASSED)?,
            malformed: read(CNT_MALFORMED)?,
            no_socket: read(CNT_NO_SOCKET)?,
            other_queue: read(CNT_OTHER_QUEUE)?,
            ip_fragment: read(CNT_IP_FRAGMENT)?,
        })
    }

    fn check_slot(&self, op: &'static str, slot: u32) -> Result<(), SteerError> {
        if slot < XSKS_MAX {
            Ok(())
        } else {
            Err(SteerError::SlotOutOfRange {
                ifname: self.ifname.clone(),
                op,
                slot,
            })
        }
    }
}

fn take_map(
    ebpf: &mut Ebpf,
    ifname: &str,
    name: &'static str,
) -> Result<aya::maps::Map, SteerError> {
    ebpf.take_map(name).ok_or(SteerError::Missing {
        ifname: ifname.to_owned(),
        what: "map",
        name,
    })
}

fn map_err(ifname: &str, map: &'static str, op: &'static str, source: MapError) -> SteerError {
    SteerError::Map {
        ifname: ifname.to_owned(),
        map,
        op,
        source: Box::new(source),
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
        for name in [PROGRAM, MAP_FLOWS, MAP_LISTEN, MAP_XSKS, MAP_COUNTERS] {
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
