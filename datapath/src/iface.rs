//! What the runtime asks the kernel about an interface by name besides
//! rtnetlink ([`crate::rtnl`]): its index, for attaching the XDP program
//! and binding AF_XDP sockets.

use std::io;

use rustix::net::{netdevice::name_to_index, socket_with, AddressFamily, SocketFlags, SocketType};

/// The index of interface `name` in the calling thread's network namespace
/// (the `SIOCGIFINDEX` ioctl on a throwaway datagram socket, as
/// `if_nametoindex(3)` does it).
///
/// # Errors
///
/// `InvalidInput` if `name` contains a NUL byte; `NotFound` (ENODEV) if no
/// interface has that name in this namespace; the `socket` error otherwise.
pub fn ifindex(name: &str) -> io::Result<u32> {
    if name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} contains a NUL byte"),
        ));
    }
    let sock = socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("socket(AF_INET): {e}")))?;
    name_to_index(&sock, name).map_err(|e| {
        let kind = if e == rustix::io::Errno::NODEV {
            io::ErrorKind::NotFound
        } else {
            io::Error::from(e).kind()
        };
        io::Error::new(kind, format!("interface {name:?}: SIOCGIFINDEX: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_an_index_and_unknown_names_are_not_found() {
        assert!(ifindex("lo").expect("every namespace has lo") > 0);
        let err = ifindex("zs-nope0").expect_err("no such interface");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("zs-nope0"), "{err}");
    }

    #[test]
    fn names_with_nul_or_too_long_are_refused() {
        let err = ifindex("l\0o").expect_err("NUL");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        let err = ifindex("sixteen-bytes-xx").expect_err("longer than IFNAMSIZ - 1");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    }
}
