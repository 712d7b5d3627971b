//! Address families. The stack carries IPv4; an `AF_INET6` socket is
//! claimed for its IPv4 peers, named with v4-mapped addresses
//! (`::ffff:a.b.c.d`) as Linux names them, and what only IPv6 would serve
//! is left to the kernel for a [`Reason`], said so (`crate::fallback`).
//!
//! What a `listen` or `connect` on a candidate socket becomes:
//!
//! | socket, address | interface with IPv4 only | interface with IPv6 too |
//! |---|---|---|
//! | IPv4 on its address or `0.0.0.0`; a peer routed through it | ours | ours |
//! | IPv6 on `::` (dual-stack) | ours (IPv4 peers) | kernel, noted |
//! | IPv6 on a v4-mapped address of it; a v4-mapped peer routed through it | ours | ours |
//! | IPv6-only on `::`, or on one of its IPv6 addresses; an IPv6 peer routed through it | kernel | kernel, noted |
//! | anything else (loopback, another interface's address or route) | kernel | kernel |
//!
//! Link-local IPv6 addresses do not count: on an interface whose only IPv6
//! address is its link-local one, a dual-stack socket is claimed and an
//! IPv6 peer reaching it over link-local addresses is refused.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

/// Why a call the interface could serve is left to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// An IPv6 address: the interface's own, or a peer routed through it.
    Ipv6,
    /// A dual-stack socket on `::` while the interface has IPv6 addresses:
    /// claimed for IPv4, its IPv6 peers would be refused.
    DualStack,
    /// `MSG_FASTOPEN`: a connect carrying data in its SYN.
    FastOpen,
}

impl Reason {
    /// Its bit in a set of reasons.
    pub(crate) fn bit(self) -> u8 {
        match self {
            Reason::Ipv6 => 1,
            Reason::DualStack => 2,
            Reason::FastOpen => 4,
        }
    }

    /// The errno `--strict` fails the call with.
    pub(crate) fn errno(self) -> i32 {
        match self {
            Reason::Ipv6 | Reason::DualStack => libc::EAFNOSUPPORT,
            Reason::FastOpen => libc::EOPNOTSUPP,
        }
    }

    /// What the note on stderr says of it.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Reason::Ipv6 => "zerosplit carries IPv4 only",
            Reason::DualStack => {
                "the interface has IPv6 addresses and zerosplit carries IPv4 only, so a dual-stack \
                 socket stays the kernel's (listen on 0.0.0.0 or an IPv4 address, e.g. iperf3 -4, \
                 to use zerosplit)"
            }
            Reason::FastOpen => "zerosplit does not send data in a SYN (TCP Fast Open)",
        }
    }
}

/// What a `listen` or `connect` on a candidate socket becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Claimed: the stack listens on, or connects to, this IPv4 address.
    Ours(SocketAddrV4),
    /// The kernel's, and rightly: the interface could not serve it.
    Kernel,
    /// The kernel's although the interface could serve it: said once and
    /// counted, refused under `--strict`.
    LeftToKernel(Reason),
}

/// The IPv4 address an IPv4 peer reaches a socket bound to `a` at, or
/// connects to for `a`: `a` itself, the address a v4-mapped IPv6 one
/// carries, `0.0.0.0` for `::` (a dual-stack socket's any); `None` for
/// other IPv6 addresses.
pub(crate) fn ipv4_view(a: SocketAddr) -> Option<SocketAddrV4> {
    match a {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            Some(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, a.port()))
        }
        SocketAddr::V6(a) => a
            .ip()
            .to_ipv4_mapped()
            .map(|ip| SocketAddrV4::new(ip, a.port())),
    }
}

/// `a` as a socket of the IPv6 family names it (`v6`): `0.0.0.0` is `::`,
/// any other address v4-mapped; as itself for an IPv4 socket.
pub(crate) fn named(a: SocketAddrV4, v6: bool) -> SocketAddr {
    if !v6 {
        return SocketAddr::V4(a);
    }
    let ip = if a.ip().is_unspecified() {
        Ipv6Addr::UNSPECIFIED
    } else {
        a.ip().to_ipv6_mapped()
    };
    SocketAddr::new(ip.into(), a.port())
}

/// Whether one of `addrs` (an interface's IPv6 addresses) is not
/// link-local: IPv6 peers beyond the link reach the interface.
pub(crate) fn serves_ipv6(addrs: &[(Ipv6Addr, u8)]) -> bool {
    addrs.iter().any(|(a, _)| !a.is_unicast_link_local())
}

/// What `listen` on a socket bound to `bound` becomes (`v6_only`: an IPv6
/// socket with `IPV6_V6ONLY`), on an interface with IPv4 address `ip` and
/// IPv6 addresses `ip6`.
pub(crate) fn listen_target(
    bound: SocketAddr,
    v6_only: bool,
    ip: Ipv4Addr,
    ip6: &[(Ipv6Addr, u8)],
) -> Target {
    let ours = |a: SocketAddrV4| {
        if a.ip().is_unspecified() || *a.ip() == ip {
            Target::Ours(a)
        } else {
            Target::Kernel
        }
    };
    match bound {
        SocketAddr::V4(a) => ours(a),
        SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some() => {
            ipv4_view(bound).map_or(Target::Kernel, ours)
        }
        SocketAddr::V6(a) if a.ip().is_unspecified() => match (v6_only, serves_ipv6(ip6)) {
            (false, false) => ipv4_view(bound).map_or(Target::Kernel, ours),
            (false, true) => Target::LeftToKernel(Reason::DualStack),
            (true, true) => Target::LeftToKernel(Reason::Ipv6),
            (true, false) => Target::Kernel,
        },
        SocketAddr::V6(a) if ip6.iter().any(|(x, _)| x == a.ip()) => {
            Target::LeftToKernel(Reason::Ipv6)
        }
        SocketAddr::V6(_) => Target::Kernel,
    }
}

/// What `connect` to `remote` on a socket of the IPv6 family (`v6`) or
/// the IPv4 one becomes; `routes` says whether an IPv4 peer is reached
/// through the interface, `routes6` an IPv6 one.
pub(crate) fn connect_target(
    remote: SocketAddr,
    v6: bool,
    v6_only: bool,
    routes: impl Fn(SocketAddrV4) -> bool,
    routes6: impl Fn(Ipv6Addr) -> bool,
) -> Target {
    let ours = |a: SocketAddrV4| {
        if routes(a) {
            Target::Ours(a)
        } else {
            Target::Kernel
        }
    };
    match remote {
        // A family the socket does not have: the kernel's error.
        SocketAddr::V4(_) if v6 => Target::Kernel,
        SocketAddr::V6(_) if !v6 => Target::Kernel,
        SocketAddr::V4(a) => ours(a),
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            // An IPv6-only socket cannot reach an IPv4 peer.
            Some(_) if v6_only => Target::Kernel,
            Some(ip) => ours(SocketAddrV4::new(ip, a.port())),
            None => {
                let ip = *a.ip();
                if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || !routes6(ip) {
                    Target::Kernel
                } else {
                    Target::LeftToKernel(Reason::Ipv6)
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn v4(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    const IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

    fn ip6(list: &[&str]) -> Vec<(Ipv6Addr, u8)> {
        list.iter().map(|a| (a.parse().unwrap(), 64)).collect()
    }

    #[test]
    fn names_follow_the_socket_family() {
        assert_eq!(named(v4("198.18.0.2:80"), false), sa("198.18.0.2:80"));
        assert_eq!(
            named(v4("198.18.0.2:80"), true),
            sa("[::ffff:198.18.0.2]:80")
        );
        assert_eq!(named(v4("0.0.0.0:80"), true), sa("[::]:80"));
        assert_eq!(
            ipv4_view(sa("[::ffff:198.18.0.2]:80")),
            Some(v4("198.18.0.2:80"))
        );
        assert_eq!(ipv4_view(sa("[::]:80")), Some(v4("0.0.0.0:80")));
        assert_eq!(ipv4_view(sa("[2001:2::1]:80")), None);
        assert_eq!(ipv4_view(sa("[::1]:80")), None);
    }

    #[test]
    fn listeners_are_claimed_where_only_ipv4_reaches_them() {
        let none = ip6(&[]);
        let link = ip6(&["fe80::1"]);
        let global = ip6(&["fe80::1", "2001:2::1"]);
        let t = |a: &str, only: bool, six: &[(Ipv6Addr, u8)]| listen_target(sa(a), only, IP, six);
        // IPv4 sockets, as before.
        assert_eq!(
            t("0.0.0.0:80", false, &global),
            Target::Ours(v4("0.0.0.0:80"))
        );
        assert_eq!(
            t("198.18.0.1:80", false, &none),
            Target::Ours(v4("198.18.0.1:80"))
        );
        assert_eq!(t("127.0.0.1:80", false, &none), Target::Kernel);
        // Dual-stack `::`: ours while no IPv6 peer reaches the interface.
        assert_eq!(t("[::]:80", false, &none), Target::Ours(v4("0.0.0.0:80")));
        assert_eq!(t("[::]:80", false, &link), Target::Ours(v4("0.0.0.0:80")));
        assert_eq!(
            t("[::]:80", false, &global),
            Target::LeftToKernel(Reason::DualStack)
        );
        // IPv6-only.
        assert_eq!(t("[::]:80", true, &none), Target::Kernel);
        assert_eq!(
            t("[::]:80", true, &global),
            Target::LeftToKernel(Reason::Ipv6)
        );
        assert_eq!(
            t("[2001:2::1]:80", false, &global),
            Target::LeftToKernel(Reason::Ipv6)
        );
        assert_eq!(t("[2001:db8::1]:80", false, &global), Target::Kernel);
        assert_eq!(t("[::1]:80", false, &global), Target::Kernel);
        // v4-mapped.
        assert_eq!(
            t("[::ffff:198.18.0.1]:80", false, &global),
            Target::Ours(v4("198.18.0.1:80"))
        );
        assert_eq!(t("[::ffff:127.0.0.1]:80", false, &none), Target::Kernel);
    }

    #[test]
    fn connects_are_claimed_when_an_ipv4_peer_is_routed_out_of_the_interface() {
        let routes = |a: SocketAddrV4| a.ip().octets()[..2] == [198, 18];
        let routes6 = |a: Ipv6Addr| a.segments()[..2] == [0x2001, 2];
        let t = |a: &str, v6: bool, only: bool| connect_target(sa(a), v6, only, routes, routes6);
        assert_eq!(
            t("198.18.0.2:80", false, false),
            Target::Ours(v4("198.18.0.2:80"))
        );
        assert_eq!(t("10.0.0.1:80", false, false), Target::Kernel);
        assert_eq!(
            t("[::ffff:198.18.0.2]:80", true, false),
            Target::Ours(v4("198.18.0.2:80"))
        );
        assert_eq!(t("[::ffff:198.18.0.2]:80", true, true), Target::Kernel);
        assert_eq!(t("[::ffff:10.0.0.1]:80", true, false), Target::Kernel);
        assert_eq!(
            t("[2001:2::2]:80", true, false),
            Target::LeftToKernel(Reason::Ipv6)
        );
        assert_eq!(t("[2001:3::2]:80", true, false), Target::Kernel);
        assert_eq!(t("[::1]:80", true, false), Target::Kernel);
        // A family the socket does not have is the kernel's error.
        assert_eq!(t("198.18.0.2:80", true, false), Target::Kernel);
        assert_eq!(t("[2001:2::2]:80", false, false), Target::Kernel);
    }
}
