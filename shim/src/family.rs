//! Address families. An `AF_INET6` socket is claimed like an `AF_INET`
//! one when the stack serves IPv6 (the interface has a global IPv6
//! address and the transport carries IPv6): on `::` it takes both
//! families (IPv4 peers named v4-mapped, `::ffff:a.b.c.d`, as Linux names
//! them) or IPv6 only (`IPV6_V6ONLY`), on the interface's IPv6 address
//! IPv6 peers. When the stack serves no IPv6 (smoltcp, or the daemon's
//! transport), what only IPv6 would serve is left to the kernel for a
//! [`Reason`], said so (`crate::fallback`).
//!
//! What a `listen` or `connect` on a candidate socket becomes:
//!
//! | socket, address | stack serves IPv6 | interface IPv4 only (or link-local IPv6) | interface with IPv6, stack IPv4 only |
//! |---|---|---|---|
//! | IPv4 on its address or `0.0.0.0`; a peer routed through it | ours | ours | ours |
//! | IPv6 on `::`, dual-stack | ours, both families | ours (IPv4 peers) | kernel, noted |
//! | IPv6 on `::`, `IPV6_V6ONLY` | ours, IPv6 peers | kernel | kernel, noted |
//! | IPv6 on the interface's IPv6 address; an IPv6 peer routed through it | ours | — | kernel, noted |
//! | IPv6 on a v4-mapped address of it; a v4-mapped peer routed through it | ours | ours | ours |
//! | a link-local IPv6 peer | kernel, noted | kernel | kernel, noted |
//! | anything else (loopback, another interface's address or route) | kernel | kernel | kernel |

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

pub(crate) use zerosplit::daemon::Families;

/// Why a call the interface could serve is left to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// An IPv6 address (the interface's own, or a peer routed through
    /// it), and the stack serves no IPv6.
    Ipv6,
    /// A dual-stack socket on `::` while the interface has IPv6 addresses
    /// and the stack serves no IPv6: claimed for IPv4, its IPv6 peers
    /// would be refused.
    DualStack,
    /// A link-local IPv6 peer: the stack's IPv6 address is global.
    LinkLocal,
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
            Reason::LinkLocal => 8,
        }
    }

    /// The errno `--strict` fails the call with.
    pub(crate) fn errno(self) -> i32 {
        match self {
            Reason::Ipv6 | Reason::DualStack => libc::EAFNOSUPPORT,
            Reason::LinkLocal => libc::EADDRNOTAVAIL,
            Reason::FastOpen => libc::EOPNOTSUPP,
        }
    }

    /// What the note on stderr says of it.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Reason::Ipv6 => {
                "zerosplit's stack here serves no IPv6 (its transport carries IPv4 only, or the \
                 interface has no global IPv6 address)"
            }
            Reason::DualStack => {
                "the interface has IPv6 addresses and zerosplit's stack here serves IPv4 only, so a \
                 dual-stack socket stays the kernel's (listen on 0.0.0.0 or an IPv4 address, e.g. \
                 iperf3 -4, to use zerosplit)"
            }
            Reason::LinkLocal => "zerosplit uses the interface's global IPv6 address only",
            Reason::FastOpen => "zerosplit does not send data in a SYN (TCP Fast Open)",
        }
    }
}

/// What a `listen` or `connect` on a candidate socket becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target<T> {
    /// Claimed: the stack listens with, or connects to, this.
    Ours(T),
    /// The kernel's, and rightly: the interface could not serve it.
    Kernel,
    /// The kernel's although the interface could serve it: said once and
    /// counted, refused under `--strict`.
    LeftToKernel(Reason),
}

/// A claimed listener: the name it has (the socket's bound address, an
/// IPv4 one for a v4-mapped address) and the families of peers it takes.
pub(crate) type Listen = (SocketAddr, Families);

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

/// `a` (an address on the wire, or a listener's name) as a socket of the
/// IPv6 family (`v6`) names it: an IPv4 address v4-mapped, `0.0.0.0` as
/// `::`; as itself otherwise.
pub(crate) fn named(a: SocketAddr, v6: bool) -> SocketAddr {
    match a {
        SocketAddr::V4(a) if v6 => {
            let ip = if a.ip().is_unspecified() {
                Ipv6Addr::UNSPECIFIED
            } else {
                a.ip().to_ipv6_mapped()
            };
            SocketAddr::new(ip.into(), a.port())
        }
        a => a,
    }
}

/// Whether one of `addrs` (an interface's IPv6 addresses) is not
/// link-local: IPv6 peers beyond the link reach the interface.
pub(crate) fn serves_ipv6(addrs: &[(Ipv6Addr, u8)]) -> bool {
    addrs.iter().any(|(a, _)| !a.is_unicast_link_local())
}

/// What `listen` on a socket bound to `bound` becomes (`v6_only`: an IPv6
/// socket with `IPV6_V6ONLY`), on an interface with IPv4 address `ip` and
/// IPv6 addresses `ip6`; `served6` is the IPv6 address the stack serves,
/// if any (asked only for an IPv6 address that needs it).
pub(crate) fn listen_target(
    bound: SocketAddr,
    v6_only: bool,
    ip: Ipv4Addr,
    ip6: &[(Ipv6Addr, u8)],
    served6: impl FnOnce() -> Option<Ipv6Addr>,
) -> Target<Listen> {
    let ours4 = |a: SocketAddrV4| {
        if a.ip().is_unspecified() || *a.ip() == ip {
            Target::Ours((SocketAddr::V4(a), Families::V4))
        } else {
            Target::Kernel
        }
    };
    match bound {
        SocketAddr::V4(a) => ours4(a),
        SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some() => {
            ipv4_view(bound).map_or(Target::Kernel, ours4)
        }
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            if served6().is_some() {
                let families = if v6_only {
                    Families::V6
                } else {
                    Families::BOTH
                };
                return Target::Ours((bound, families));
            }
            match (v6_only, serves_ipv6(ip6)) {
                (false, false) => Target::Ours((bound, Families::V4)),
                (false, true) => Target::LeftToKernel(Reason::DualStack),
                (true, true) => Target::LeftToKernel(Reason::Ipv6),
                (true, false) => Target::Kernel,
            }
        }
        SocketAddr::V6(a) if ip6.iter().any(|(x, _)| x == a.ip()) => {
            if served6() == Some(*a.ip()) {
                Target::Ours((bound, Families::V6))
            } else if a.ip().is_unicast_link_local() {
                Target::LeftToKernel(Reason::LinkLocal)
            } else {
                Target::LeftToKernel(Reason::Ipv6)
            }
        }
        SocketAddr::V6(_) => Target::Kernel,
    }
}

/// What `connect` to `remote` on a socket of the IPv6 family (`v6`) or
/// the IPv4 one becomes; `routes` says whether an IPv4 peer is reached
/// through the interface, `routes6` an IPv6 one, `serves6` whether the
/// stack serves IPv6. An IPv4 peer (v4-mapped too) is claimed as IPv4.
pub(crate) fn connect_target(
    remote: SocketAddr,
    v6: bool,
    v6_only: bool,
    routes: impl Fn(SocketAddrV4) -> bool,
    routes6: impl Fn(Ipv6Addr) -> bool,
    serves6: impl FnOnce() -> bool,
) -> Target<SocketAddr> {
    let ours = |a: SocketAddrV4| {
        if routes(a) {
            Target::Ours(SocketAddr::V4(a))
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
                } else if ip.is_unicast_link_local() {
                    Target::LeftToKernel(Reason::LinkLocal)
                } else if serves6() {
                    Target::Ours(remote)
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
        assert_eq!(named(sa("198.18.0.2:80"), false), sa("198.18.0.2:80"));
        assert_eq!(
            named(sa("198.18.0.2:80"), true),
            sa("[::ffff:198.18.0.2]:80")
        );
        assert_eq!(named(sa("0.0.0.0:80"), true), sa("[::]:80"));
        assert_eq!(named(sa("[2001:2::1]:80"), true), sa("[2001:2::1]:80"));
        assert_eq!(named(sa("[::]:80"), true), sa("[::]:80"));
        assert_eq!(
            ipv4_view(sa("[::ffff:198.18.0.2]:80")),
            Some(v4("198.18.0.2:80"))
        );
        assert_eq!(ipv4_view(sa("[::]:80")), Some(v4("0.0.0.0:80")));
        assert_eq!(ipv4_view(sa("[2001:2::1]:80")), None);
        assert_eq!(ipv4_view(sa("[::1]:80")), None);
    }

    fn ours(a: &str, f: Families) -> Target<Listen> {
        Target::Ours((sa(a), f))
    }

    #[test]
    fn listeners_are_claimed_where_only_ipv4_reaches_them_when_the_stack_serves_no_ipv6() {
        let none = ip6(&[]);
        let link = ip6(&["fe80::1"]);
        let global = ip6(&["fe80::1", "2001:2::1"]);
        let t = |a: &str, only: bool, six: &[(Ipv6Addr, u8)]| {
            listen_target(sa(a), only, IP, six, || None)
        };
        // IPv4 sockets, as before.
        let v4 = Families::V4;
        assert_eq!(t("0.0.0.0:80", false, &global), ours("0.0.0.0:80", v4));
        assert_eq!(t("198.18.0.1:80", false, &none), ours("198.18.0.1:80", v4));
        assert_eq!(t("127.0.0.1:80", false, &none), Target::Kernel);
        // Dual-stack `::`: ours while no IPv6 peer reaches the interface.
        assert_eq!(t("[::]:80", false, &none), ours("[::]:80", v4));
        assert_eq!(t("[::]:80", false, &link), ours("[::]:80", v4));
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
        assert_eq!(
            t("[fe80::1]:80", false, &global),
            Target::LeftToKernel(Reason::LinkLocal)
        );
        assert_eq!(t("[2001:db8::1]:80", false, &global), Target::Kernel);
        assert_eq!(t("[::1]:80", false, &global), Target::Kernel);
        // v4-mapped.
        assert_eq!(
            t("[::ffff:198.18.0.1]:80", false, &global),
            ours("198.18.0.1:80", v4)
        );
        assert_eq!(t("[::ffff:127.0.0.1]:80", false, &none), Target::Kernel);
    }

    #[test]
    fn ipv6_listeners_are_claimed_when_the_stack_serves_ipv6() {
        let global = ip6(&["fe80::1", "2001:2::1"]);
        let served = "2001:2::1".parse().ok();
        let t = |a: &str, only: bool| listen_target(sa(a), only, IP, &global, || served);
        assert_eq!(t("[::]:80", false), ours("[::]:80", Families::BOTH));
        assert_eq!(t("[::]:80", true), ours("[::]:80", Families::V6));
        assert_eq!(
            t("[2001:2::1]:80", false),
            ours("[2001:2::1]:80", Families::V6)
        );
        assert_eq!(
            t("[fe80::1]:80", false),
            Target::LeftToKernel(Reason::LinkLocal)
        );
        assert_eq!(t("0.0.0.0:80", false), ours("0.0.0.0:80", Families::V4));
        assert_eq!(t("[::1]:80", false), Target::Kernel);
        assert_eq!(t("[2001:db8::1]:80", false), Target::Kernel);
    }

    #[test]
    fn connects_are_claimed_when_the_peer_is_routed_out_of_the_interface() {
        let routes = |a: SocketAddrV4| a.ip().octets()[..2] == [198, 18];
        let routes6 = |a: Ipv6Addr| a.segments()[..2] == [0x2001, 2] || a.is_unicast_link_local();
        let t = |a: &str, v6: bool, only: bool, serves6: bool| {
            connect_target(sa(a), v6, only, routes, routes6, || serves6)
        };
        let ours = |a: &str| Target::Ours(sa(a));
        assert_eq!(
            t("198.18.0.2:80", false, false, false),
            ours("198.18.0.2:80")
        );
        assert_eq!(t("10.0.0.1:80", false, false, false), Target::Kernel);
        assert_eq!(
            t("[::ffff:198.18.0.2]:80", true, false, true),
            ours("198.18.0.2:80")
        );
        assert_eq!(
            t("[::ffff:198.18.0.2]:80", true, true, true),
            Target::Kernel
        );
        assert_eq!(t("[::ffff:10.0.0.1]:80", true, false, true), Target::Kernel);
        assert_eq!(
            t("[2001:2::2]:80", true, false, false),
            Target::LeftToKernel(Reason::Ipv6)
        );
        assert_eq!(
            t("[2001:2::2]:80", true, false, true),
            ours("[2001:2::2]:80")
        );
        assert_eq!(
            t("[2001:2::2]:80", true, true, true),
            ours("[2001:2::2]:80")
        );
        assert_eq!(
            t("[fe80::2]:80", true, false, true),
            Target::LeftToKernel(Reason::LinkLocal)
        );
        assert_eq!(t("[2001:3::2]:80", true, false, true), Target::Kernel);
        assert_eq!(t("[::1]:80", true, false, true), Target::Kernel);
        // A family the socket does not have is the kernel's error.
        assert_eq!(t("198.18.0.2:80", true, false, true), Target::Kernel);
        assert_eq!(t("[2001:2::2]:80", false, false, true), Target::Kernel);
    }
}
