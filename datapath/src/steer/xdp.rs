//! The steering program itself: the embedded object loaded with aya,
//! attached through a bpf_link, and its maps edited in place.

use std::{
    fmt,
    net::IpAddr,
    os::fd::{AsRawFd, BorrowedFd},
};

use aya::{
    maps::{HashMap, MapData, MapError, PerCpuArray, XskMap},
    programs::{links::FdLink, Xdp},
    util::KernelVersion,
    Ebpf,
};

use super::map_keys::{
    flow_key, listen_key, Flow6Bytes, FlowBytes, FlowMapKey, FlowValueBytes, Listen6Bytes,
    ListenBytes, ListenMapKey, RawFlowValue,
};
use super::{
    check_slot, Proto, SteerCounters, SteerError, SteerKey, XdpMode, CNT_IPV6_EXT, CNT_IP_FRAGMENT,
    CNT_MALFORMED, CNT_NO_SOCKET, CNT_OTHER_QUEUE, CNT_PASSED, CNT_STEERED, MAP_COUNTERS,
    MAP_FLOWS, MAP_FLOWS6, MAP_LISTEN, MAP_LISTEN6, MAP_XSKS, MIN_KERNEL, PROGRAM, STEER_OBJ,
};
use crate::iface;

/// The steering program attached to one interface, with its maps.
///
/// Dropping it detaches the program (the link fd is closed) and frees the
/// maps; a process that dies without unwinding detaches it too.
pub struct XdpProgram {
    // Field order matters: the link is dropped (detached) before the maps
    // and the program it refers to.
    _link: FdLink,
    flows: HashMap<MapData, FlowBytes, FlowValueBytes>,
    listen: HashMap<MapData, ListenBytes, u32>,
    flows6: HashMap<MapData, Flow6Bytes, FlowValueBytes>,
    listen6: HashMap<MapData, Listen6Bytes, u32>,
    xsks: XskMap<MapData>,
    counters: PerCpuArray<MapData, u64>,
    _ebpf: Ebpf,
    ifname: String,
    ifindex: u32,
    mode: XdpMode,
}

impl fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpProgram")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl XdpProgram {
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
        let flows6 = HashMap::try_from(take_map(&mut ebpf, ifname, MAP_FLOWS6)?)
            .map_err(|source| map_err(ifname, MAP_FLOWS6, "open", source))?;
        let listen6 = HashMap::try_from(take_map(&mut ebpf, ifname, MAP_LISTEN6)?)
            .map_err(|source| map_err(ifname, MAP_LISTEN6, "open", source))?;
        let xsks = XskMap::try_from(take_map(&mut ebpf, ifname, MAP_XSKS)?)
            .map_err(|source| map_err(ifname, MAP_XSKS, "open", source))?;
        let counters = PerCpuArray::try_from(take_map(&mut ebpf, ifname, MAP_COUNTERS)?)
            .map_err(|source| map_err(ifname, MAP_COUNTERS, "open", source))?;
        Ok(Self {
            _link: link,
            flows,
            listen,
            flows6,
            listen6,
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

    /// The interface name given to [`XdpProgram::attach`].
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
        check_slot(&self.ifname, "set_socket", slot)?;
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
        check_slot(&self.ifname, "clear_socket", slot)?;
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
    /// family's table of 65536 flows is full).
    pub fn insert_flow(&mut self, key: &SteerKey, slot: u32, queue: u32) -> Result<(), SteerError> {
        check_slot(&self.ifname, "insert_flow", slot)?;
        let value = RawFlowValue { slot, queue }.to_bytes();
        let (map, r) = match flow_key(key) {
            FlowMapKey::V4(k) => (MAP_FLOWS, self.flows.insert(k, value, 0)),
            FlowMapKey::V6(k) => (MAP_FLOWS6, self.flows6.insert(k, value, 0)),
        };
        r.map_err(|source| map_err(&self.ifname, map, "insert_flow", source))
    }

    /// Stops steering `key` by its 5-tuple.
    ///
    /// # Errors
    ///
    /// [`SteerError::Map`] (ENOENT if it was not there).
    pub fn remove_flow(&mut self, key: &SteerKey) -> Result<(), SteerError> {
        let (map, r) = match flow_key(key) {
            FlowMapKey::V4(k) => (MAP_FLOWS, self.flows.remove(&k)),
            FlowMapKey::V6(k) => (MAP_FLOWS6, self.flows6.remove(&k)),
        };
        r.map_err(|source| map_err(&self.ifname, map, "remove_flow", source))
    }

    /// Claims `(addr, port, proto)`: packets to it without a flow entry go
    /// to the catch-all socket of their rx queue. `addr` 0.0.0.0 (`::`)
    /// claims the port on every IPv4 (IPv6) address.
    ///
    /// # Errors
    ///
    /// [`SteerError::Map`] (E2BIG when the family's 1024 entries exist).
    pub fn insert_listen(
        &mut self,
        addr: IpAddr,
        port: u16,
        proto: Proto,
    ) -> Result<(), SteerError> {
        let (map, r) = match listen_key(addr, port, proto) {
            ListenMapKey::V4(k) => (MAP_LISTEN, self.listen.insert(k, 0, 0)),
            ListenMapKey::V6(k) => (MAP_LISTEN6, self.listen6.insert(k, 0, 0)),
        };
        r.map_err(|source| map_err(&self.ifname, map, "insert_listen", source))
    }

    /// Releases a claim made by [`XdpProgram::insert_listen`].
    ///
    /// # Errors
    ///
    /// [`SteerError::Map`] (ENOENT if it was not there).
    pub fn remove_listen(
        &mut self,
        addr: IpAddr,
        port: u16,
        proto: Proto,
    ) -> Result<(), SteerError> {
        let (map, r) = match listen_key(addr, port, proto) {
            ListenMapKey::V4(k) => (MAP_LISTEN, self.listen.remove(&k)),
            ListenMapKey::V6(k) => (MAP_LISTEN6, self.listen6.remove(&k)),
        };
        r.map_err(|source| map_err(&self.ifname, map, "remove_listen", source))
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
            ipv6_ext: read(CNT_IPV6_EXT)?,
        })
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
