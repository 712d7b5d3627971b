//! Opening the owner socket of a port, one step per function: create the
//! socket, register the UMEM, size the rings, map them, set the options,
//! bind (retrying EBUSY, falling back from zero-copy to copy in `Auto`).

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use super::frames::FramePool;
use super::{BindMode, BoundMode, PortCounters, XskConfig, XskError, XskPort, XskStats, MAX_FRAGS};
use crate::sys::desc::UmemLayout;
use crate::sys::netns;
use crate::sys::syscall::{bind_xdp, setsockopt, xdp_socket, SyscallError};
use crate::sys::umem::Umem;
use crate::sys::xdp_ring::{CompRing, FillRing, MmapOffsets, RxRing, TxRing};

/// `setsockopt(SOL_XDP, XDP_MAX_TX_SKB_BUDGET)`: descriptors one `sendto`
/// may transmit in copy mode (default 32). Not yet in the libc crate.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// Binds tried while the queue answers EBUSY, 10 ms apart.
const BIND_TRIES: u32 = 50;

impl XskPort {
    /// Creates the UMEM, the owner socket and its rings, and binds it to
    /// `ifname` queue `queue`.
    ///
    /// # Errors
    /// Bad configuration, unknown interface, or a syscall failed (bind names
    /// the mode it tried).
    pub fn open(ifname: &str, queue: u32, config: &XskConfig) -> Result<XskPort, XskError> {
        config.validate()?;
        let ifindex =
            netns::ifindex(ifname).map_err(|_| XskError::NoSuchInterface(ifname.to_string()))?;
        let mut umem = Umem::new(&config.umem)?;
        let fd = xdp_socket()?;
        umem.register(fd.as_fd())?;
        set_ring_sizes(fd.as_fd(), config)?;
        let rings = Rings::map(fd.as_fd(), config, umem.layout())?;
        set_options(fd.as_fd(), config)?;
        let mode = bind_owner(fd.as_fd(), ifname, ifindex, queue, config)?;
        let frames = FramePool::new(umem.take_frames(), config.tx_frames, umem.layout());
        let mut port = XskPort {
            id: XskPort::next_id(),
            fd,
            umem,
            fill: rings.fill,
            comp: rings.comp,
            rx: rings.rx,
            tx: rings.tx,
            frames,
            tx_pending: Vec::with_capacity(config.tx_ring as usize),
            tx_outstanding: 0,
            chain_scratch: Vec::with_capacity(MAX_FRAGS),
            frag_scratch: Vec::with_capacity(MAX_FRAGS),
            ifname: ifname.to_string(),
            ifindex,
            queue,
            mode,
            config: config.clone(),
            counters: PortCounters::default(),
            closed_flow_stats: XskStats::default(),
            #[cfg(any(test, feature = "testing"))]
            fake: None,
        };
        port.refill();
        Ok(port)
    }
}

/// Sets the sizes of the fill, completion, RX and TX rings.
fn set_ring_sizes(fd: BorrowedFd<'_>, config: &XskConfig) -> Result<(), SyscallError> {
    for (name, size, call) in [
        (
            libc::XDP_UMEM_FILL_RING,
            config.fill_ring,
            "setsockopt(XDP_UMEM_FILL_RING)",
        ),
        (
            libc::XDP_UMEM_COMPLETION_RING,
            config.comp_ring,
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        ),
        (libc::XDP_RX_RING, config.rx_ring, "setsockopt(XDP_RX_RING)"),
        (libc::XDP_TX_RING, config.tx_ring, "setsockopt(XDP_TX_RING)"),
    ] {
        setsockopt(fd, libc::SOL_XDP, name, &size, call)?;
    }
    Ok(())
}

/// The owner's four rings, mapped.
struct Rings {
    fill: FillRing,
    comp: CompRing,
    rx: RxRing,
    tx: TxRing,
}

impl Rings {
    fn map(fd: BorrowedFd<'_>, config: &XskConfig, layout: UmemLayout) -> Result<Rings, XskError> {
        let off = MmapOffsets::query(fd)?;
        Ok(Rings {
            fill: FillRing::map(fd, &off, config.fill_ring)?,
            comp: CompRing::map(fd, &off, config.comp_ring, layout)?,
            rx: RxRing::map(fd, &off, config.rx_ring)?,
            tx: TxRing::map(fd, &off, config.tx_ring)?,
        })
    }
}

/// The TX budget (best effort) and the busy-poll options.
fn set_options(fd: BorrowedFd<'_>, config: &XskConfig) -> Result<(), SyscallError> {
    if let Some(budget) = config.tx_budget {
        // Older kernels lack the option; the default budget still works.
        if let Err(e) = setsockopt(
            fd,
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
        let usecs = bp.usecs as libc::c_int;
        let budget = bp.budget as libc::c_int;
        for (name, value, call) in [
            (
                libc::SO_PREFER_BUSY_POLL,
                one,
                "setsockopt(SO_PREFER_BUSY_POLL)",
            ),
            (libc::SO_BUSY_POLL, usecs, "setsockopt(SO_BUSY_POLL)"),
            (
                libc::SO_BUSY_POLL_BUDGET,
                budget,
                "setsockopt(SO_BUSY_POLL_BUDGET)",
            ),
        ] {
            setsockopt(fd, libc::SOL_SOCKET, name, &value, call)?;
        }
    }
    Ok(())
}

/// Binds the owner in the configured mode; `Auto` tries zero-copy and falls
/// back to copy when the driver refuses it.
fn bind_owner(
    fd: BorrowedFd<'_>,
    ifname: &str,
    ifindex: u32,
    queue: u32,
    config: &XskConfig,
) -> Result<BoundMode, XskError> {
    let flags = config.bind_flags();
    let bind = |mode| bind_mode(fd, ifname, ifindex, queue, flags, mode);
    match config.bind {
        BindMode::Copy => bind(BoundMode::Copy),
        BindMode::ZeroCopy => bind(BoundMode::ZeroCopy),
        BindMode::Auto => match bind(BoundMode::ZeroCopy) {
            Err(XskError::Bind { source, .. })
                if matches!(
                    source.errno(),
                    Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::EPROTONOSUPPORT)
                ) =>
            {
                log::info!("{ifname} queue {queue}: zero-copy refused ({source}); using copy mode");
                bind(BoundMode::Copy)
            }
            other => other,
        },
    }
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
    bind_retrying(fd, ifindex, queue, flags | mode_flag, None).map_err(|source| {
        XskError::Bind {
            ifname: ifname.to_string(),
            queue,
            mode: name,
            source,
        }
    })?;
    Ok(mode)
}

/// Binds, retrying for a while on EBUSY: rebinding a queue right after its
/// previous socket closed can give EBUSY for a moment (FACTS.md).
pub(super) fn bind_retrying(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared_umem: Option<BorrowedFd<'_>>,
) -> Result<(), SyscallError> {
    let mut tries = 0;
    loop {
        match bind_xdp(fd, ifindex, queue, flags, shared_umem) {
            Err(e) if e.errno() == Some(libc::EBUSY) && tries < BIND_TRIES => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}
