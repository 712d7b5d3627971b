//! AF_XDP sockets: the UMEM owner of one (interface, queue) — which is also
//! that queue's catch-all socket — and per-flow sockets bound to the same
//! queue with `XDP_SHARED_UMEM`.
//!
//! All RX frames return through the owner's fill ring and all TX
//! completions arrive on the owner's completion ring (FACTS.md: this is how
//! the kernel shares one UMEM), so one thread owns the [`XskPort`] and every
//! [`FlowSocket`] of it. Per-flow RX rings are kept small relative to the
//! fill ring so that one undrained flow cannot hold every frame.
//!
//! Minimum kernel: 5.4 (need_wakeup), 6.6 for multi-buffer (`XDP_USE_SG`).

use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use super::mmap::Mmap;
use super::ring::{ConsumerRing, ProducerRing, RingError, RingOffsets, XdpDesc};
use super::syscall::{check, check_size, SyscallError};
use super::umem::{Frames, Umem, UmemConfig, UmemError};

/// `setsockopt(SOL_XDP, XDP_MAX_TX_SKB_BUDGET)`: descriptors one `sendto`
/// may transmit in copy mode (default 32). Not yet in the libc crate.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// The most fragments one multi-buffer packet may have (MAX_SKB_FRAGS + 1).
pub const MAX_FRAGS: usize = 18;

/// How to bind: zero-copy needs driver support (not on veth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindMode {
    /// `XDP_COPY`: works on every driver with XDP.
    Copy,
    /// `XDP_ZEROCOPY`: fails where the driver lacks support.
    ZeroCopy,
    /// Try zero-copy, fall back to copy.
    #[default]
    Auto,
}

/// Busy-poll socket options (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`,
/// `SO_BUSY_POLL_BUDGET`; kernel 5.11+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// `SO_BUSY_POLL` in microseconds.
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET` in packets.
    pub budget: u32,
}

/// Everything needed to open a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XskConfig {
    /// UMEM geometry.
    pub umem: UmemConfig,
    /// Frames kept for TX (the rest circulate through the fill ring).
    pub tx_frames: u32,
    /// Owner socket's RX ring entries.
    pub rx_ring: u32,
    /// Owner socket's TX ring entries.
    pub tx_ring: u32,
    /// Fill ring entries.
    pub fill_ring: u32,
    /// Completion ring entries.
    pub comp_ring: u32,
    /// RX ring entries of each per-flow socket (keep small: see module docs).
    pub flow_rx_ring: u32,
    /// Copy, zero-copy or automatic.
    pub bind: BindMode,
    /// Bind with `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// Bind with `XDP_USE_SG` to receive and send multi-buffer packets.
    pub multi_buffer: bool,
    /// Busy-poll options, if any.
    pub busy_poll: Option<BusyPoll>,
    /// `XDP_MAX_TX_SKB_BUDGET` (copy mode); `None` keeps the kernel default.
    pub tx_budget: Option<u32>,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            umem: UmemConfig::default(),
            tx_frames: 1024,
            rx_ring: 2048,
            tx_ring: 2048,
            fill_ring: 8192,
            comp_ring: 2048,
            flow_rx_ring: 2048,
            bind: BindMode::Auto,
            need_wakeup: true,
            multi_buffer: false,
            busy_poll: None,
            tx_budget: Some(256),
        }
    }
}

/// Opening or using a socket failed.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    /// A syscall failed.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
    /// A ring could not be set up.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// The UMEM could not be set up, or a descriptor was out of bounds.
    #[error(transparent)]
    Umem(#[from] UmemError),
    /// No interface of that name in this network namespace.
    #[error("no network interface named {0:?}")]
    NoSuchInterface(String),
    /// A configuration value is impossible.
    #[error("invalid AF_XDP configuration: {0}")]
    Config(String),
    /// Binding failed; says which mode was tried.
    #[error("binding AF_XDP socket to {ifname} queue {queue} in {mode} mode: {source}")]
    Bind {
        /// Interface.
        ifname: String,
        /// Queue.
        queue: u32,
        /// Mode tried.
        mode: &'static str,
        /// Underlying error.
        #[source]
        source: SyscallError,
    },
}

/// The mode the kernel bound the owner socket in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundMode {
    /// Copy mode.
    Copy,
    /// Zero-copy mode.
    ZeroCopy,
}

/// Kernel statistics of one socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XskStats {
    /// Dropped for reasons other than invalid descriptors.
    pub rx_dropped: u64,
    /// Invalid RX descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors.
    pub tx_invalid_descs: u64,
    /// RX ring was full.
    pub rx_ring_full: u64,
    /// Fill ring was empty when a packet arrived.
    pub rx_fill_ring_empty_descs: u64,
    /// TX ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

/// Our own counters of the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCounters {
    /// Packets received (all sockets of the port).
    pub rx_packets: u64,
    /// Descriptors received.
    pub rx_descs: u64,
    /// Received descriptors that pointed outside the frame area (dropped).
    pub rx_bad_descs: u64,
    /// Multi-buffer packets with more fragments than [`MAX_FRAGS`] (dropped).
    pub rx_too_many_frags: u64,
    /// Packets queued for TX.
    pub tx_packets: u64,
    /// TX attempts refused because no TX frame or ring slot was free.
    pub tx_no_frame: u64,
    /// `sendto` kicks.
    pub tx_kicks: u64,
    /// Kicks answered EAGAIN/EBUSY/ENOBUFS (retried on the next flush).
    pub tx_kick_busy: u64,
    /// TX completions reclaimed.
    pub tx_completed: u64,
    /// RX wakeups issued for need_wakeup.
    pub rx_wakeups: u64,
}

/// A received packet: one descriptor, or several chained by `XDP_PKT_CONTD`.
#[derive(Debug)]
pub struct RxPacket<'a> {
    frags: [&'a [u8]; MAX_FRAGS],
    count: usize,
}

impl<'a> RxPacket<'a> {
    /// The fragments in order; the first holds the headers.
    pub fn fragments(&self) -> &[&'a [u8]] {
        &self.frags[..self.count]
    }

    /// Total length.
    pub fn len(&self) -> usize {
        self.fragments().iter().map(|f| f.len()).sum()
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Interface index of `name` in the calling thread's network namespace.
///
/// # Errors
/// [`XskError::NoSuchInterface`] when the name is unknown or too long.
pub fn ifindex(name: &str) -> Result<u32, XskError> {
    super::netns::ifindex(name).map_err(|_| XskError::NoSuchInterface(name.to_string()))
}

fn new_socket() -> Result<OwnedFd, SyscallError> {
    // SAFETY: plain socket(2); the returned fd is checked and then owned.
    let fd = check(
        unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) },
        "socket(AF_XDP)",
    )?;
    // SAFETY: `fd` is a freshly created descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    call: &'static str,
) -> Result<(), SyscallError> {
    // SAFETY: `value` points to a live `T` of the given size for the call.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    check(ret, call).map(drop)
}

fn getsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    name: libc::c_int,
    call: &'static str,
) -> Result<T, SyscallError> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: the buffer is `size_of::<T>()` writable bytes; `len` says so.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            value.as_mut_ptr().cast(),
            &mut len,
        )
    };
    check(ret, call)?;
    // SAFETY: zero-initialised and possibly overwritten by the kernel with a
    // `T` (or a prefix of one, for older struct versions): valid either way
    // for the plain-integer structs used here.
    Ok(unsafe { value.assume_init() })
}

fn map_ring<T: Copy>(
    fd: BorrowedFd<'_>,
    off: &libc::xdp_ring_offset,
    size: u32,
    pgoff: u64,
) -> Result<(Arc<Mmap>, RingOffsets), XskError> {
    let offsets = RingOffsets::from_kernel(off);
    let mem = Arc::new(Mmap::shared(fd, offsets.mapping_len::<T>(size), pgoff)?);
    Ok((mem, offsets))
}

fn bind(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared_fd: u32,
) -> Result<(), SyscallError> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared_fd,
    };
    // Rebinding a queue right after its previous socket closed can give
    // EBUSY for a moment (FACTS.md): retry briefly.
    let mut tries = 0;
    loop {
        // SAFETY: `addr` is a valid sockaddr_xdp of the size passed.
        let ret = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_xdp).cast(),
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        match check(ret, "bind(AF_XDP)") {
            Err(e) if e.errno() == Some(libc::EBUSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other.map(drop),
        }
    }
}

fn stats(fd: BorrowedFd<'_>) -> Result<XskStats, SyscallError> {
    let s: libc::xdp_statistics =
        getsockopt(fd, libc::XDP_STATISTICS, "getsockopt(XDP_STATISTICS)")?;
    Ok(XskStats {
        rx_dropped: s.rx_dropped,
        rx_invalid_descs: s.rx_invalid_descs,
        tx_invalid_descs: s.tx_invalid_descs,
        rx_ring_full: s.rx_ring_full,
        rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        tx_ring_empty_descs: s.tx_ring_empty_descs,
    })
}

/// A per-flow socket: an RX ring of its own on the port's queue, sharing the
/// port's UMEM. Receive from it with [`XskPort::receive_flow`].
#[derive(Debug)]
pub struct FlowSocket {
    fd: OwnedFd,
    rx: ConsumerRing<XdpDesc>,
}

impl FlowSocket {
    /// The socket, for the XSKMAP.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Kernel statistics of this socket.
    ///
    /// # Errors
    /// `getsockopt` failed.
    pub fn stats(&self) -> Result<XskStats, SyscallError> {
        stats(self.fd.as_fd())
    }
}

/// The UMEM owner on one (interface, queue): the catch-all socket, the fill
/// and completion rings, the TX ring, and the frame pools.
#[derive(Debug)]
pub struct XskPort {
    fd: OwnedFd,
    umem: Umem,
    fill: ProducerRing<u64>,
    comp: ConsumerRing<u64>,
    rx: ConsumerRing<XdpDesc>,
    tx: ProducerRing<XdpDesc>,
    /// RX frames not currently in the fill ring or held by a socket's RX ring.
    rx_free: Vec<u64>,
    /// TX frames not in flight.
    tx_free: Vec<u64>,
    /// Descriptors written by `transmit` but not yet on the TX ring.
    tx_pending: Vec<XdpDesc>,
    /// TX ring slots handed to the kernel and not yet completed.
    tx_outstanding: u32,
    /// Reused list of payload fragments for `transmit_chain`.
    chain_scratch: Vec<(usize, usize)>,
    ifname: String,
    ifindex: u32,
    queue: u32,
    mode: BoundMode,
    config: XskConfig,
    counters: PortCounters,
}

impl XskPort {
    /// Creates the UMEM, the owner socket and its rings, and binds it to
    /// `ifname` queue `queue`.
    ///
    /// # Errors
    /// Bad configuration, unknown interface, or a syscall failed (bind names
    /// the mode it tried).
    pub fn open(ifname: &str, queue: u32, config: &XskConfig) -> Result<XskPort, XskError> {
        let frames = config.umem.frame_count;
        if config.tx_frames == 0 || config.tx_frames >= frames {
            return Err(XskError::Config(format!(
                "tx_frames ({}) must be between 1 and frame_count - 1 ({})",
                config.tx_frames,
                frames.saturating_sub(1)
            )));
        }
        for (name, size) in [
            ("rx_ring", config.rx_ring),
            ("tx_ring", config.tx_ring),
            ("fill_ring", config.fill_ring),
            ("comp_ring", config.comp_ring),
            ("flow_rx_ring", config.flow_rx_ring),
        ] {
            if !size.is_power_of_two() {
                return Err(XskError::Config(format!(
                    "{name} ({size}) must be a power of two"
                )));
            }
        }
        let ifindex = ifindex(ifname)?;
        let umem = Umem::new(&config.umem)?;
        let fd = new_socket()?;
        let (addr, len) = umem.registration();
        let reg = libc::xdp_umem_reg {
            addr,
            len,
            chunk_size: umem.frame_size(),
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(
            fd.as_fd(),
            libc::SOL_XDP,
            libc::XDP_UMEM_REG,
            &reg,
            "setsockopt(XDP_UMEM_REG)",
        )?;
        setsockopt(
            fd.as_fd(),
            libc::SOL_XDP,
            libc::XDP_UMEM_FILL_RING,
            &config.fill_ring,
            "setsockopt(XDP_UMEM_FILL_RING)",
        )?;
        setsockopt(
            fd.as_fd(),
            libc::SOL_XDP,
            libc::XDP_UMEM_COMPLETION_RING,
            &config.comp_ring,
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        )?;
        setsockopt(
            fd.as_fd(),
            libc::SOL_XDP,
            libc::XDP_RX_RING,
            &config.rx_ring,
            "setsockopt(XDP_RX_RING)",
        )?;
        setsockopt(
            fd.as_fd(),
            libc::SOL_XDP,
            libc::XDP_TX_RING,
            &config.tx_ring,
            "setsockopt(XDP_TX_RING)",
        )?;
        let off: libc::xdp_mmap_offsets = getsockopt(
            fd.as_fd(),
            libc::XDP_MMAP_OFFSETS,
            "getsockopt(XDP_MMAP_OFFSETS)",
        )?;

        let (mem, o) = map_ring::<u64>(
            fd.as_fd(),
            &off.fr,
            config.fill_ring,
            libc::XDP_UMEM_PGOFF_FILL_RING,
        )?;
        let fill = ProducerRing::new(mem, o, config.fill_ring)?;
        let (mem, o) = map_ring::<u64>(
            fd.as_fd(),
            &off.cr,
            config.comp_ring,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        )?;
        let comp = ConsumerRing::new(mem, o, config.comp_ring)?;
        let (mem, o) = map_ring::<XdpDesc>(
            fd.as_fd(),
            &off.rx,
            config.rx_ring,
            libc::XDP_PGOFF_RX_RING as u64,
        )?;
        let rx = ConsumerRing::new(mem, o, config.rx_ring)?;
        let (mem, o) = map_ring::<XdpDesc>(
            fd.as_fd(),
            &off.tx,
            config.tx_ring,
            libc::XDP_PGOFF_TX_RING as u64,
        )?;
        let tx = ProducerRing::new(mem, o, config.tx_ring)?;

        if let Some(budget) = config.tx_budget {
            // Older kernels lack the option; the default budget still works.
            if let Err(e) = setsockopt(
                fd.as_fd(),
                libc::SOL_XDP,
                XDP_MAX_TX_SKB_BUDGET,
                &budget,
                "setsockopt(XDP_MAX_TX_SKB_BUDGET)",
            ) {
                log::warn!("{e}; keeping the kernel's TX budget");
            }
        }
        if let Some(bp) = config.busy_poll {
            let one: libc::c_int = 1;
            setsockopt(
                fd.as_fd(),
                libc::SOL_SOCKET,
                libc::SO_PREFER_BUSY_POLL,
                &one,
                "setsockopt(SO_PREFER_BUSY_POLL)",
            )?;
            let usecs = bp.usecs as libc::c_int;
            setsockopt(
                fd.as_fd(),
                libc::SOL_SOCKET,
                libc::SO_BUSY_POLL,
                &usecs,
                "setsockopt(SO_BUSY_POLL)",
            )?;
            let budget = bp.budget as libc::c_int;
            setsockopt(
                fd.as_fd(),
                libc::SOL_SOCKET,
                libc::SO_BUSY_POLL_BUDGET,
                &budget,
                "setsockopt(SO_BUSY_POLL_BUDGET)",
            )?;
        }

        let mut flags = 0u16;
        if config.need_wakeup {
            flags |= libc::XDP_USE_NEED_WAKEUP;
        }
        if config.multi_buffer {
            flags |= libc::XDP_USE_SG;
        }
        let mode = match config.bind {
            BindMode::Copy => {
                Self::bind_mode(fd.as_fd(), ifname, ifindex, queue, flags, BoundMode::Copy)?
            }
            BindMode::ZeroCopy => Self::bind_mode(
                fd.as_fd(),
                ifname,
                ifindex,
                queue,
                flags,
                BoundMode::ZeroCopy,
            )?,
            BindMode::Auto => match Self::bind_mode(
                fd.as_fd(),
                ifname,
                ifindex,
                queue,
                flags,
                BoundMode::ZeroCopy,
            ) {
                Ok(m) => m,
                Err(XskError::Bind { source, .. })
                    if matches!(
                        source.errno(),
                        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::EPROTONOSUPPORT)
                    ) =>
                {
                    log::info!(
                        "{ifname} queue {queue}: zero-copy refused ({source}); using copy mode"
                    );
                    Self::bind_mode(fd.as_fd(), ifname, ifindex, queue, flags, BoundMode::Copy)?
                }
                Err(e) => return Err(e),
            },
        };

        let fs = u64::from(umem.frame_size());
        let tx_free: Vec<u64> = (0..u64::from(config.tx_frames)).map(|i| i * fs).collect();
        let rx_free: Vec<u64> = (u64::from(config.tx_frames)..u64::from(frames))
            .map(|i| i * fs)
            .collect();
        let mut port = XskPort {
            fd,
            umem,
            fill,
            comp,
            rx,
            tx,
            rx_free,
            tx_free,
            tx_pending: Vec::with_capacity(config.tx_ring as usize),
            tx_outstanding: 0,
            chain_scratch: Vec::with_capacity(MAX_FRAGS),
            ifname: ifname.to_string(),
            ifindex,
            queue,
            mode,
            config: config.clone(),
            counters: PortCounters::default(),
        };
        port.refill();
        Ok(port)
    }

    fn bind_mode(
        fd: BorrowedFd<'_>,
        ifname: &str,
        ifindex: u32,
        queue: u32,
        flags: u16,
        mode: BoundMode,
    ) -> Result<BoundMode, XskError> {
        let (mode_flag, name) = match mode {
            BoundMode::Copy => (libc::XDP_COPY, "copy"),
            BoundMode::ZeroCopy => (libc::XDP_ZEROCOPY, "zero-copy"),
        };
        bind(fd, ifindex, queue, flags | mode_flag, 0).map_err(|source| XskError::Bind {
            ifname: ifname.to_string(),
            queue,
            mode: name,
            source,
        })?;
        Ok(mode)
    }

    /// Opens a per-flow socket on the same queue, sharing this UMEM. Put its
    /// fd into the XSKMAP slot the flow's steering entry names.
    ///
    /// # Errors
    /// A syscall failed (some drivers refuse shared sockets: fall back to
    /// the catch-all socket with software demux).
    pub fn open_flow_socket(&self) -> Result<FlowSocket, XskError> {
        let fd = new_socket()?;
        let size = self.config.flow_rx_ring;
        setsockopt(
            fd.as_fd(),
            libc::SOL_XDP,
            libc::XDP_RX_RING,
            &size,
            "setsockopt(XDP_RX_RING)",
        )?;
        let off: libc::xdp_mmap_offsets = getsockopt(
            fd.as_fd(),
            libc::XDP_MMAP_OFFSETS,
            "getsockopt(XDP_MMAP_OFFSETS)",
        )?;
        let (mem, o) =
            map_ring::<XdpDesc>(fd.as_fd(), &off.rx, size, libc::XDP_PGOFF_RX_RING as u64)?;
        let rx = ConsumerRing::new(mem, o, size)?;
        // The owner's flags (copy/zero-copy, need_wakeup, SG) apply; a
        // shared socket passing its own gets EINVAL (FACTS.md).
        bind(
            fd.as_fd(),
            self.ifindex,
            self.queue,
            libc::XDP_SHARED_UMEM,
            self.fd.as_raw_fd() as u32,
        )
        .map_err(|source| XskError::Bind {
            ifname: self.ifname.clone(),
            queue: self.queue,
            mode: "shared-umem",
            source,
        })?;
        Ok(FlowSocket { fd, rx })
    }

    /// The owner (catch-all) socket, for the XSKMAP.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Queue id.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Copy or zero-copy, as bound.
    pub fn mode(&self) -> BoundMode {
        self.mode
    }

    /// The configuration the port was opened with.
    pub fn config(&self) -> &XskConfig {
        &self.config
    }

    /// Our counters.
    pub fn counters(&self) -> PortCounters {
        self.counters
    }

    /// Kernel statistics of the owner socket.
    ///
    /// # Errors
    /// `getsockopt` failed.
    pub fn stats(&self) -> Result<XskStats, SyscallError> {
        stats(self.fd.as_fd())
    }

    /// The UMEM (MR area access for the application side).
    pub fn umem(&self) -> &Umem {
        &self.umem
    }

    /// The UMEM, writable.
    pub fn umem_mut(&mut self) -> &mut Umem {
        &mut self.umem
    }

    /// Frames available for RX that are not yet in the fill ring.
    pub fn rx_frames_free(&self) -> usize {
        self.rx_free.len()
    }

    /// TX frames not in flight.
    pub fn tx_frames_free(&self) -> usize {
        self.tx_free.len()
    }

    /// Moves free RX frames into the fill ring; returns how many.
    pub fn refill(&mut self) -> u32 {
        let want = self.rx_free.len().min(u32::MAX as usize) as u32;
        let got = self.fill.reserve(want);
        for i in 0..got {
            let addr = self
                .rx_free
                .pop()
                .expect("reserved no more than rx_free holds");
            self.fill.write(i, addr);
        }
        self.fill.submit(got);
        got
    }

    /// Receives up to `budget` packets from the owner (catch-all) socket.
    /// `on_packet` sees each packet's fragments and the writable MR area;
    /// the frames go back to the fill ring after it returns.
    pub fn receive<F>(&mut self, budget: u32, on_packet: F) -> u32
    where
        F: FnMut(&RxPacket<'_>, &mut [u8]),
    {
        let XskPort {
            rx,
            umem,
            rx_free,
            counters,
            ..
        } = self;
        let n = Self::drain(rx, umem, rx_free, counters, budget, on_packet);
        self.refill();
        self.wake_rx_if_needed();
        n
    }

    /// Receives up to `budget` packets from a per-flow socket of this port.
    pub fn receive_flow<F>(&mut self, socket: &mut FlowSocket, budget: u32, on_packet: F) -> u32
    where
        F: FnMut(&RxPacket<'_>, &mut [u8]),
    {
        let XskPort {
            umem,
            rx_free,
            counters,
            ..
        } = self;
        let n = Self::drain(&mut socket.rx, umem, rx_free, counters, budget, on_packet);
        self.refill();
        self.wake_rx_if_needed();
        n
    }

    fn drain<F>(
        ring: &mut ConsumerRing<XdpDesc>,
        umem: &mut Umem,
        rx_free: &mut Vec<u64>,
        counters: &mut PortCounters,
        budget: u32,
        mut on_packet: F,
    ) -> u32
    where
        F: FnMut(&RxPacket<'_>, &mut [u8]),
    {
        let fs = u64::from(umem.frame_size());
        let avail = ring.available(budget.saturating_mul(MAX_FRAGS as u32).min(ring.size()));
        let (frames, mr) = umem.split();
        let mut i = 0;
        let mut packets = 0;
        while i < avail && packets < budget {
            // Gather one packet's descriptors (XDP_PKT_CONTD chains). A chain
            // cut off by the end of what is available now is left for the
            // next call, unless it can never complete in this ring.
            let start = i;
            let mut end = i;
            while end < avail && ring.read(end).options & libc::XDP_PKT_CONTD != 0 {
                end += 1;
            }
            if end == avail {
                if avail - start < ring.size() {
                    break;
                }
                end = avail - 1;
            }
            let count = (end - start + 1) as usize;
            counters.rx_descs += count as u64;
            if count > MAX_FRAGS {
                counters.rx_too_many_frags += 1;
            } else {
                Self::deliver(&frames, ring, start, count, counters, mr, &mut on_packet);
            }
            for j in start..=end {
                rx_free.push(ring.read(j).addr - ring.read(j).addr % fs);
            }
            i = end + 1;
            packets += 1;
        }
        ring.release(i);
        counters.rx_packets += u64::from(packets);
        packets
    }

    fn deliver<F>(
        frames: &Frames<'_>,
        ring: &ConsumerRing<XdpDesc>,
        start: u32,
        count: usize,
        counters: &mut PortCounters,
        mr: &mut [u8],
        on_packet: &mut F,
    ) where
        F: FnMut(&RxPacket<'_>, &mut [u8]),
    {
        let mut pkt = RxPacket {
            frags: [&[]; MAX_FRAGS],
            count,
        };
        for k in 0..count {
            let d = ring.read(start + k as u32);
            match frames.rx(d.addr, d.len) {
                Ok(bytes) => pkt.frags[k] = bytes,
                Err(_) => {
                    counters.rx_bad_descs += 1;
                    return;
                }
            }
        }
        on_packet(&pkt, mr);
    }

    fn wake_rx_if_needed(&mut self) {
        if self.config.need_wakeup && self.fill.needs_wakeup() {
            self.counters.rx_wakeups += 1;
            // SAFETY: recvfrom with a NULL, zero-length buffer only kicks the
            // driver; no memory is written.
            let ret = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            // EAGAIN is the normal answer; anything else shows in stats.
            let _ = check_size(ret, "recvfrom(AF_XDP wakeup)");
        }
    }

    /// Returns completed TX frames to the free list; returns how many.
    pub fn reclaim(&mut self) -> u32 {
        let fs = u64::from(self.umem.frame_size());
        let mr_start = self.umem.mr_offset();
        let n = self.comp.available(self.comp.size());
        for i in 0..n {
            let addr = self.comp.read(i);
            // Fragments that pointed into the MR area (zero-copy chains) are
            // application memory, not pool frames.
            if addr < mr_start {
                self.tx_free.push(addr - addr % fs);
            }
        }
        self.comp.release(n);
        self.tx_outstanding = self.tx_outstanding.saturating_sub(n);
        self.counters.tx_completed += u64::from(n);
        n
    }

    /// Builds one packet in a free TX frame: `build` gets the frame (from
    /// the start of its chunk) and the MR area, and returns the packet
    /// length (0 to cancel). The packet is queued, not sent: call
    /// [`XskPort::flush`]. Returns `false` when no frame was free.
    ///
    /// # Errors
    /// `build` returned a length larger than the frame.
    pub fn transmit<F>(&mut self, build: F) -> Result<bool, XskError>
    where
        F: FnOnce(&mut [u8], &[u8]) -> usize,
    {
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        let ring_room =
            self.tx.size() as usize - self.tx_outstanding as usize - self.tx_pending.len();
        let Some(addr) = self.tx_free.pop().filter(|_| ring_room > 0) else {
            self.counters.tx_no_frame += 1;
            return Ok(false);
        };
        let (mut frames, mr) = self.umem.split();
        let frame = frames.tx(addr)?;
        let room = frame.len();
        let len = build(frame, mr);
        if len == 0 || len > room {
            self.tx_free.push(addr);
            if len > room {
                return Err(XskError::Config(format!(
                    "packet of {len} bytes does not fit a {room}-byte frame"
                )));
            }
            return Ok(true);
        }
        self.tx_pending.push(XdpDesc {
            addr,
            len: len as u32,
            options: 0,
        });
        self.counters.tx_packets += 1;
        Ok(true)
    }

    /// Queues a multi-buffer packet: a header built in a free TX frame
    /// followed by fragments that point into the MR area (zero-copy send in
    /// zero-copy mode; in copy mode the kernel copies them). `build` gets the
    /// frame, the MR area and an empty list to which it appends the payload
    /// fragments as (MR-area offset, length); it returns the header length
    /// (0 to cancel). Fragments are split at chunk boundaries here, as the
    /// kernel requires. Needs `multi_buffer`. Returns `false` when no frame
    /// or ring room was free.
    ///
    /// # Errors
    /// Multi-buffer is off, or a fragment lies outside the MR area.
    pub fn transmit_chain<F>(&mut self, build: F) -> Result<bool, XskError>
    where
        F: FnOnce(&mut [u8], &[u8], &mut Vec<(usize, usize)>) -> usize,
    {
        if !self.config.multi_buffer {
            return Err(XskError::Config(
                "multi-buffer TX needs multi_buffer = true".into(),
            ));
        }
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        let ring_room =
            self.tx.size() as usize - self.tx_outstanding as usize - self.tx_pending.len();
        let Some(addr) = self.tx_free.pop().filter(|_| ring_room > MAX_FRAGS) else {
            self.counters.tx_no_frame += 1;
            return Ok(false);
        };
        let mut parts = std::mem::take(&mut self.chain_scratch);
        parts.clear();
        let (mut frames, mr) = self.umem.split();
        let frame = frames.tx(addr)?;
        let room = frame.len();
        let len = build(frame, mr, &mut parts);
        let result = self.queue_chain(addr, len, room, &parts);
        self.chain_scratch = parts;
        if !matches!(result, Ok(true)) {
            self.tx_free.push(addr);
        }
        result
    }

    /// Packets' worth of TX room now: free TX frames (reclaiming completed
    /// ones first when none is free) and free TX ring slots, the smaller.
    pub fn tx_room(&mut self) -> usize {
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        let ring_room =
            self.tx.size() as usize - self.tx_outstanding as usize - self.tx_pending.len();
        self.tx_free.len().min(ring_room)
    }

    /// Queues `data` (a whole Ethernet frame) copied across as many pool
    /// frames as it needs: one frame, or a multi-buffer chain of frames for
    /// packets larger than a frame (needs `multi_buffer`). For transports
    /// that build full packets in a buffer of their own (smoltcp at MTU
    /// 9000). Returns `false` when not enough frames or ring slots were free.
    ///
    /// # Errors
    /// Empty data, data needing more than [`MAX_FRAGS`] frames, or a chain
    /// without `multi_buffer`.
    pub fn transmit_copied(&mut self, data: &[u8]) -> Result<bool, XskError> {
        let fs = self.umem.frame_size() as usize;
        let frames_needed = data.len().div_ceil(fs);
        if frames_needed == 0 || frames_needed > MAX_FRAGS {
            return Err(XskError::Config(format!(
                "a {}-byte packet needs 1..={MAX_FRAGS} frames of {fs} bytes",
                data.len()
            )));
        }
        if frames_needed > 1 && !self.config.multi_buffer {
            return Err(XskError::Config(format!(
                "a {}-byte packet needs multi_buffer = true",
                data.len()
            )));
        }
        if self.tx_room() < frames_needed {
            self.counters.tx_no_frame += 1;
            return Ok(false);
        }
        let first = self.tx_pending.len();
        let (mut frames, _mr) = self.umem.split();
        for (k, piece) in data.chunks(fs).enumerate() {
            let Some(addr) = self.tx_free.pop() else {
                break;
            };
            let frame = match frames.tx(addr) {
                Ok(f) => f,
                Err(e) => {
                    // Give this packet's frames back before reporting.
                    self.tx_free.push(addr);
                    let queued = self.tx_pending.drain(first..);
                    self.tx_free.extend(queued.map(|d| d.addr));
                    return Err(e.into());
                }
            };
            frame[..piece.len()].copy_from_slice(piece);
            self.tx_pending.push(XdpDesc {
                addr,
                len: piece.len() as u32,
                options: if k + 1 < frames_needed {
                    libc::XDP_PKT_CONTD
                } else {
                    0
                },
            });
        }
        self.counters.tx_packets += 1;
        Ok(true)
    }

    fn queue_chain(
        &mut self,
        addr: u64,
        len: usize,
        room: usize,
        parts: &[(usize, usize)],
    ) -> Result<bool, XskError> {
        if len == 0 {
            return Ok(false);
        }
        if len > room {
            return Err(XskError::Config(format!(
                "header of {len} bytes does not fit a {room}-byte frame"
            )));
        }
        let fs = u64::from(self.umem.frame_size());
        let mr_start = self.umem.mr_offset();
        let mr_len = self.umem.mr_len() as u64;
        let first = self.tx_pending.len();
        self.tx_pending.push(XdpDesc {
            addr,
            len: len as u32,
            options: 0,
        });
        for &(off, plen) in parts {
            let (off, plen) = (off as u64, plen as u64);
            if off.checked_add(plen).is_none_or(|end| end > mr_len) {
                self.tx_pending.truncate(first);
                return Err(UmemError::BadDescriptor {
                    addr: mr_start + off,
                    len: plen as u32,
                }
                .into());
            }
            let mut at = mr_start + off;
            let end = at + plen;
            while at < end {
                let piece = (fs - at % fs).min(end - at);
                self.tx_pending.push(XdpDesc {
                    addr: at,
                    len: piece as u32,
                    options: 0,
                });
                at += piece;
            }
        }
        let last = self.tx_pending.len() - 1;
        if last - first + 1 > MAX_FRAGS {
            self.tx_pending.truncate(first);
            return Err(XskError::Config(format!(
                "packet needs {} fragments, at most {MAX_FRAGS} allowed",
                last - first + 1
            )));
        }
        for d in &mut self.tx_pending[first..last] {
            d.options = libc::XDP_PKT_CONTD;
        }
        self.counters.tx_packets += 1;
        Ok(true)
    }

    /// Puts queued packets on the TX ring and kicks the kernel. Returns how
    /// many descriptors were submitted.
    pub fn flush(&mut self) -> u32 {
        let mut submitted = 0;
        if !self.tx_pending.is_empty() {
            let want = self.tx_pending.len() as u32;
            let got = self.tx.reserve(want);
            // Never split a multi-buffer chain across two submissions.
            let mut take = got;
            while take > 0 && self.tx_pending[take as usize - 1].options & libc::XDP_PKT_CONTD != 0
            {
                take -= 1;
            }
            for i in 0..take {
                self.tx.write(i, self.tx_pending[i as usize]);
            }
            self.tx.submit(take);
            self.tx_pending.drain(..take as usize);
            self.tx_outstanding += take;
            submitted = take;
        }
        if self.tx_outstanding > 0
            && (!self.config.need_wakeup || self.tx.needs_wakeup() || self.mode == BoundMode::Copy)
        {
            self.kick();
        }
        self.reclaim();
        submitted
    }

    fn kick(&mut self) {
        self.counters.tx_kicks += 1;
        // SAFETY: sendto with no buffer and no address only asks the kernel
        // to process the TX ring.
        let ret = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if let Err(e) = check_size(ret, "sendto(AF_XDP kick)") {
            match e.errno() {
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                | Some(libc::ENETDOWN) => self.counters.tx_kick_busy += 1,
                _ => log::warn!("{}: {e}", self.ifname),
            }
        }
    }

    /// Packets queued or in flight on the TX path.
    pub fn tx_in_flight(&self) -> usize {
        self.tx_pending.len() + self.tx_outstanding as usize
    }
}
