//! Interface offloads through the legacy `SIOCETHTOOL` ioctl, so turning
//! TX checksum offload off needs no `ethtool` binary.
//!
//! Each call opens an `AF_INET` datagram socket in the calling thread's
//! network namespace (the ioctl resolves the interface name there) and
//! issues one `ETHTOOL_G*`/`ETHTOOL_S*` command with a
//! `struct ethtool_value { cmd, data }`. The kernel maps the legacy set
//! commands onto its feature flags (`ethtool_set_one_feature`) and
//! recomputes the dependent ones, as `ethtool -K` does: TX checksum off
//! also drops TSO. Linux has answered these commands since 2.6; a driver
//! without the feature answers `EOPNOTSUPP`, which the error names.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use super::check;

/// `SIOCETHTOOL` from `<linux/sockios.h>`.
const SIOCETHTOOL: u64 = 0x8946;

/// `struct ethtool_value` from `<linux/ethtool.h>`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// An offload with a legacy get/set ethtool command pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    /// TX checksumming (`ethtool -K IF tx`): `ETHTOOL_[GS]TXCSUM`.
    TxChecksum,
    /// Scatter-gather (`sg`): `ETHTOOL_[GS]SG`.
    ScatterGather,
    /// TCP segmentation offload (`tso`): `ETHTOOL_[GS]TSO`.
    Tso,
    /// Generic segmentation offload (`gso`): `ETHTOOL_[GS]GSO`.
    Gso,
    /// Generic receive offload (`gro`): `ETHTOOL_[GS]GRO`.
    Gro,
}

impl Offload {
    /// The `ETHTOOL_G*` and `ETHTOOL_S*` command numbers.
    fn commands(self) -> (u32, u32, &'static str) {
        match self {
            Offload::TxChecksum => (0x16, 0x17, "ETHTOOL_STXCSUM"),
            Offload::ScatterGather => (0x18, 0x19, "ETHTOOL_SSG"),
            Offload::Tso => (0x1e, 0x1f, "ETHTOOL_STSO"),
            Offload::Gso => (0x23, 0x24, "ETHTOOL_SGSO"),
            Offload::Gro => (0x2b, 0x2c, "ETHTOOL_SGRO"),
        }
    }

    /// The name `ethtool -K` uses.
    pub fn name(self) -> &'static str {
        match self {
            Offload::TxChecksum => "tx",
            Offload::ScatterGather => "sg",
            Offload::Tso => "tso",
            Offload::Gso => "gso",
            Offload::Gro => "gro",
        }
    }
}

/// Whether `offload` is on for interface `ifname` (in the calling thread's
/// namespace).
///
/// # Errors
///
/// `NotFound` for an unknown interface; the ioctl error otherwise, naming
/// the interface and the command.
pub fn offload(ifname: &str, offload: Offload) -> io::Result<bool> {
    let (get, _, _) = offload.commands();
    let name = format!("ETHTOOL_G{}", &offload.commands().2[9..]);
    Ok(ethtool_value(ifname, get, 0, &name)? != 0)
}

/// Turns `offload` on or off for interface `ifname` (in the calling
/// thread's namespace), as `ethtool -K IF NAME on|off` does.
///
/// # Errors
///
/// `NotFound` for an unknown interface; `Unsupported` when the driver
/// cannot change it; the ioctl error otherwise, naming the interface and
/// the command.
pub fn set_offload(ifname: &str, offload: Offload, on: bool) -> io::Result<()> {
    let (_, set, name) = offload.commands();
    ethtool_value(ifname, set, u32::from(on), name).map(|_| ())
}

/// One `SIOCETHTOOL` round trip with an `ethtool_value`; returns its `data`.
fn ethtool_value(ifname: &str, cmd: u32, data: u32, what: &str) -> io::Result<u32> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {ifname:?} is not 1 to 15 bytes without NUL"),
        ));
    }
    let sock = control_socket()?;
    let mut value = EthtoolValue { cmd, data };
    // SAFETY: ifreq is a plain C struct (a name array and a union of
    // integers and pointers) for which all-zero bytes are a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &b) in ifr.ifr_name.iter_mut().zip(bytes) {
        *dst = b as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&raw mut value).cast();
    // SAFETY: `ifr` is a valid ifreq whose name is NUL-terminated (the
    // length check leaves at least one zero byte) and whose data pointer
    // points to `value`, an ethtool_value that lives on this stack frame
    // across the call; SIOCETHTOOL with a G/S-value command reads and
    // writes exactly that struct and the ifreq.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as libc::Ioctl, &raw mut ifr) };
    check(rc, "ioctl(SIOCETHTOOL)").map_err(|e| {
        let hint = match e.errno() {
            Some(libc::ENODEV) => " (no such interface in this namespace)",
            Some(libc::EOPNOTSUPP) => " (the driver does not support this offload setting)",
            Some(libc::EPERM) => " (needs CAP_NET_ADMIN: run as root)",
            _ => "",
        };
        let kind = if e.errno() == Some(libc::ENODEV) {
            io::ErrorKind::NotFound
        } else {
            e.source.kind()
        };
        io::Error::new(
            kind,
            format!("ioctl(SIOCETHTOOL, {what}) on {ifname}: {}{hint}", e.source),
        )
    })?;
    Ok(value.data)
}

/// An `AF_INET` datagram socket for interface ioctls (close-on-exec).
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket takes only integers and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let fd = check(fd, "socket(AF_INET, SOCK_DGRAM)")?;
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interface_is_not_found_and_named() {
        let err = offload("zs-nope0", Offload::TxChecksum).expect_err("no such interface");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("zs-nope0"), "{err}");
        assert!(err.to_string().contains("ETHTOOL_GTXCSUM"), "{err}");
    }

    #[test]
    fn bad_names_are_refused_before_the_ioctl() {
        for bad in ["", "sixteen-bytes-xx", "a\0b"] {
            let err = set_offload(bad, Offload::Gro, false).expect_err(bad);
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
