//! What the kernel knows about the interface zerosplit runs on: its IPv4
//! address and MAC, the next hop towards a peer and the peer's MAC; its
//! IPv6 addresses and routes (what the shim leaves to the kernel). The
//! kernel keeps ARP and routing (the XDP program passes ARP to it); we only
//! read its tables, and ask it to resolve a neighbour when the entry is
//! missing by sending it a datagram.
//!
//! And the CPUs a thread may be pinned to (`/sys/devices/system/cpu/online`),
//! for the configuration's core checks. All of the host side's kernel
//! access (other than the datapath's own sockets and XDP link, pinning
//! threads with `core_affinity`, and the one thing the host writes there,
//! the reserved ports of `reserved_ports.rs`) is in this module.
//!
//! Everything is read in the calling thread's network namespace
//! (`/proc/thread-self/net/*`, and an rtnetlink socket opened by the
//! calling thread: no `ip` binary is needed).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::time::{Duration, Instant};

use datapath::rtnl::Rtnl;

/// Reading the kernel's tables failed.
#[derive(Debug, thiserror::Error)]
pub enum NetInfoError {
    /// Asking the kernel over rtnetlink failed (e.g. no such interface).
    #[error("{what}: {reason}")]
    Netlink {
        /// What was asked.
        what: String,
        /// What went wrong.
        reason: String,
    },
    /// The interface has no IPv4 address.
    #[error("interface {0} has no IPv4 address")]
    NoAddress(String),
    /// The interface has no Ethernet address.
    #[error("interface {0} has no Ethernet (MAC) address")]
    NoMac(String),
    /// No route to the destination through this interface.
    #[error("no route to {dst} through {ifname}")]
    NoRoute {
        /// Destination.
        dst: IpAddr,
        /// Interface.
        ifname: String,
    },
    /// The neighbour did not answer ARP (IPv6: neighbour discovery) in
    /// time.
    #[error("{ip} did not answer ARP or neighbour discovery on {ifname} within {timeout:?}")]
    NoNeighbour {
        /// Next hop.
        ip: IpAddr,
        /// Interface.
        ifname: String,
        /// How long we waited.
        timeout: Duration,
    },
    /// Reading a `/proc` file failed.
    #[error("reading {path}: {source}")]
    Proc {
        /// The file.
        path: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn netlink_error(what: String) -> impl FnOnce(std::io::Error) -> NetInfoError {
    move |e| NetInfoError::Netlink {
        what,
        reason: e.to_string(),
    }
}

/// The interface's first IPv4 address and its prefix length.
///
/// # Errors
/// The lookup failed (no such interface) or there is no IPv4 address.
pub fn ipv4_address(ifname: &str) -> Result<(Ipv4Addr, u8), NetInfoError> {
    let addrs = Rtnl::open()
        .and_then(|mut r| r.ipv4_addresses(ifname))
        .map_err(netlink_error(format!("IPv4 addresses of {ifname}")))?;
    addrs
        .first()
        .copied()
        .ok_or_else(|| NetInfoError::NoAddress(ifname.to_string()))
}

/// The interface's MAC address.
///
/// # Errors
/// The lookup failed (no such interface) or the link is not Ethernet.
pub fn mac_address(ifname: &str) -> Result<[u8; 6], NetInfoError> {
    let link = Rtnl::open()
        .and_then(|mut r| r.link(ifname))
        .map_err(netlink_error(format!("link {ifname}")))?;
    match link.mac {
        Some(mac) if link.ethernet => Ok(mac),
        _ => Err(NetInfoError::NoMac(ifname.to_string())),
    }
}

/// The interface's IPv6 addresses (link-local ones included) and their
/// prefix lengths; none when IPv6 is off on it.
///
/// # Errors
/// The lookup failed (no such interface).
pub fn ipv6_addresses(ifname: &str) -> Result<Vec<(Ipv6Addr, u8)>, NetInfoError> {
    Rtnl::open()
        .and_then(|mut r| r.ipv6_addresses(ifname))
        .map_err(netlink_error(format!("IPv6 addresses of {ifname}")))
}

/// Whether the kernel's IPv6 table (`/proc/thread-self/net/ipv6_route`)
/// has a route through `ifname` that covers `dst`: an IPv6 connection to
/// `dst` would leave through the interface.
///
/// # Errors
/// The table could not be read (absent: no IPv6 in the kernel, `false`).
pub fn ipv6_routes_via(ifname: &str, dst: Ipv6Addr) -> Result<bool, NetInfoError> {
    const PATH: &str = "/proc/thread-self/net/ipv6_route";
    match std::fs::read_to_string(PATH) {
        Ok(table) => Ok(ipv6_routed_in(&table, ifname, dst)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(NetInfoError::Proc { path: PATH, source }),
    }
}

/// Whether a `/proc/net/ipv6_route` table routes `dst` through `ifname`
/// (rows: destination, its prefix length, source, its prefix length,
/// next hop, metric, references, use, flags, device; in hex).
fn ipv6_routed_in(table: &str, ifname: &str, dst: Ipv6Addr) -> bool {
    table.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[9] != ifname {
            return false;
        }
        let (Ok(net), Ok(len)) = (u128::from_str_radix(f[0], 16), u8::from_str_radix(f[1], 16))
        else {
            return false;
        };
        let mask = if len == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(len.min(128)))
        };
        u128::from(dst) & mask == net & mask
    })
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn same_subnet(a: Ipv4Addr, b: Ipv4Addr, prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    u32::from(a) & mask == u32::from(b) & mask
}

/// The next hop towards `dst`: `dst` itself when it is on the interface's
/// subnet, else the gateway of the most specific route through `ifname`
/// in the kernel's table (`/proc/thread-self/net/route`).
///
/// # Errors
/// No route through this interface.
pub fn next_hop(
    ifname: &str,
    local: Ipv4Addr,
    prefix: u8,
    dst: Ipv4Addr,
) -> Result<Ipv4Addr, NetInfoError> {
    if same_subnet(local, dst, prefix) {
        return Ok(dst);
    }
    const PATH: &str = "/proc/thread-self/net/route";
    let table = std::fs::read_to_string(PATH)
        .map_err(|source| NetInfoError::Proc { path: PATH, source })?;
    let hex = |s: &str| {
        u32::from_str_radix(s, 16)
            .ok()
            .map(|v| Ipv4Addr::from(v.swap_bytes()))
    };
    let mut best: Option<(u32, Ipv4Addr)> = None;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0] != ifname {
            continue;
        }
        let (Some(net), Some(gw), Some(mask)) = (hex(f[1]), hex(f[2]), hex(f[7])) else {
            continue;
        };
        let m = u32::from(mask);
        if u32::from(dst) & m == u32::from(net) & m
            && best.is_none_or(|(bm, _)| m.count_ones() > bm)
        {
            let hop = if gw.is_unspecified() { dst } else { gw };
            best = Some((m.count_ones(), hop));
        }
    }
    best.map(|(_, hop)| hop).ok_or(NetInfoError::NoRoute {
        dst: dst.into(),
        ifname: ifname.to_string(),
    })
}

/// The next hop towards IPv6 `dst`: the gateway of the most specific route
/// through `ifname` in the kernel's table (`/proc/thread-self/net/
/// ipv6_route`), or `dst` itself on a route without one (on the link).
///
/// # Errors
/// No route through this interface.
pub fn next_hop6(ifname: &str, dst: Ipv6Addr) -> Result<Ipv6Addr, NetInfoError> {
    const PATH: &str = "/proc/thread-self/net/ipv6_route";
    let table = std::fs::read_to_string(PATH)
        .map_err(|source| NetInfoError::Proc { path: PATH, source })?;
    ipv6_hop_in(&table, ifname, dst).ok_or(NetInfoError::NoRoute {
        dst: dst.into(),
        ifname: ifname.to_string(),
    })
}

/// The most specific route of a `/proc/net/ipv6_route` table through
/// `ifname` that covers `dst`: its next hop, or `dst` when it has none.
fn ipv6_hop_in(table: &str, ifname: &str, dst: Ipv6Addr) -> Option<Ipv6Addr> {
    let mut best: Option<(u8, Ipv6Addr)> = None;
    for line in table.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[9] != ifname {
            continue;
        }
        let (Ok(net), Ok(len), Ok(gw)) = (
            u128::from_str_radix(f[0], 16),
            u8::from_str_radix(f[1], 16),
            u128::from_str_radix(f[4], 16),
        ) else {
            continue;
        };
        let mask = if len == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(len.min(128)))
        };
        if u128::from(dst) & mask == net & mask && best.is_none_or(|(b, _)| len > b) {
            let hop = if gw == 0 { dst } else { Ipv6Addr::from(gw) };
            best = Some((len, hop));
        }
    }
    best.map(|(_, hop)| hop)
}

fn arp_lookup(ifname: &str, ip: Ipv4Addr) -> Result<Option<[u8; 6]>, NetInfoError> {
    const PATH: &str = "/proc/thread-self/net/arp";
    let table = std::fs::read_to_string(PATH)
        .map_err(|source| NetInfoError::Proc { path: PATH, source })?;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // IP address, HW type, Flags, HW address, Mask, Device
        if f.len() >= 6 && f[5] == ifname && f[0].parse() == Ok(ip) {
            let complete =
                u32::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap_or(0) & 0x2 != 0;
            if complete {
                return Ok(parse_mac(f[3]));
            }
        }
    }
    Ok(None)
}

/// How often a neighbour being resolved is probed again.
pub const PROBE_EVERY: Duration = Duration::from_millis(200);

/// Makes the kernel resolve `ip` (send ARP requests or neighbour
/// solicitations for it): an empty datagram to its discard port.
/// A link-local IPv6 neighbour (a router's `fe80::…`, the usual next hop)
/// is named with the interface as its scope.
fn probe_with(s: &UdpSocket, ifname: &str, ip: IpAddr) {
    let to = match ip {
        IpAddr::V6(v6) if v6.is_unicast_link_local() => {
            let scope = datapath::iface::ifindex(ifname).unwrap_or(0);
            std::net::SocketAddr::V6(std::net::SocketAddrV6::new(v6, 9, 0, scope))
        }
        ip => std::net::SocketAddr::new(ip, 9),
    };
    let _ = s.send_to(&[], to);
}

/// The MAC of neighbour `ip` on `ifname` in the kernel's table now: the
/// ARP table for IPv4, the neighbour table over rtnetlink for IPv6.
fn neighbour_lookup(ifname: &str, ip: IpAddr) -> Result<Option<[u8; 6]>, NetInfoError> {
    match ip {
        IpAddr::V4(ip) => arp_lookup(ifname, ip),
        IpAddr::V6(ip) => Rtnl::open()
            .and_then(|mut r| r.ipv6_neighbour(ifname, ip))
            .map_err(netlink_error(format!("IPv6 neighbour {ip} on {ifname}"))),
    }
}

/// The MAC of neighbour `ip` on `ifname` if the kernel's table has it
/// now; otherwise `None`, after asking the kernel to resolve it (as
/// [`resolve_neighbour`] does, from our address `local`) when `probe`.
/// Never waits: for a loop that serves others meanwhile (the daemon's).
///
/// # Errors
/// The table could not be read.
pub fn neighbour_now(
    ifname: &str,
    local: IpAddr,
    ip: IpAddr,
    probe: bool,
) -> Result<Option<[u8; 6]>, NetInfoError> {
    let mac = neighbour_lookup(ifname, ip)?;
    if mac.is_none() && probe {
        if let Ok(s) = UdpSocket::bind((local, 0)) {
            probe_with(&s, ifname, ip);
        }
    }
    Ok(mac)
}

/// The MAC of neighbour `ip` (either family) on `ifname`, from the
/// kernel's table; when missing, a datagram to `ip` (discard port) from
/// our address `local` makes the kernel resolve it, and the table is
/// polled until `timeout`.
///
/// # Errors
/// The neighbour did not answer in time.
pub fn resolve_neighbour(
    ifname: &str,
    local: IpAddr,
    ip: IpAddr,
    timeout: Duration,
) -> Result<[u8; 6], NetInfoError> {
    if let Some(mac) = neighbour_lookup(ifname, ip)? {
        return Ok(mac);
    }
    let probe = UdpSocket::bind((local, 0)).ok();
    let deadline = Instant::now() + timeout;
    let mut next_probe = Instant::now();
    while Instant::now() < deadline {
        if Instant::now() >= next_probe {
            if let Some(s) = &probe {
                probe_with(s, ifname, ip);
            }
            next_probe = Instant::now() + PROBE_EVERY;
        }
        std::thread::sleep(Duration::from_millis(5));
        if let Some(mac) = neighbour_lookup(ifname, ip)? {
            return Ok(mac);
        }
    }
    Err(NetInfoError::NoNeighbour {
        ip,
        ifname: ifname.to_string(),
        timeout,
    })
}

/// Whether a kernel TCP socket listens on `port` in this namespace, on any
/// address of either family (`/proc/thread-self/net/tcp`, `…/tcp6`; a
/// dual-stack socket is the default of iperf3, Java, Node.js): zerosplit
/// must not take a port the kernel already serves.
///
/// # Errors
/// A table could not be read (`tcp6` may be absent: no IPv6 in the kernel).
pub fn kernel_listens_on(port: u16) -> Result<bool, NetInfoError> {
    const V4: &str = "/proc/thread-self/net/tcp";
    const V6: &str = "/proc/thread-self/net/tcp6";
    let v4 =
        std::fs::read_to_string(V4).map_err(|source| NetInfoError::Proc { path: V4, source })?;
    let v6 = match std::fs::read_to_string(V6) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(NetInfoError::Proc { path: V6, source }),
    };
    Ok(listens_in(&v4, port) || listens_in(&v6, port))
}

/// Whether a `/proc/net/tcp` or `tcp6` table shows a listener on `port`,
/// on any address: the stack takes the port on the interface's addresses
/// of both families, so a kernel listener on any of them (or on a
/// wildcard) owns it.
fn listens_in(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // local_address is "HEXIP:HEXPORT", st 0A = LISTEN.
        let Some((_, p)) = f.get(1).and_then(|a| a.rsplit_once(':')) else {
            return false;
        };
        f.get(3) == Some(&"0A") && u16::from_str_radix(p, 16).ok() == Some(port)
    })
}

/// The CPUs a thread could be pinned to.
pub(crate) struct OnlineCpus {
    /// Inclusive ranges from `/sys/devices/system/cpu/online`, or `0..=n-1`.
    ranges: Vec<(usize, usize)>,
}

impl OnlineCpus {
    pub(crate) fn contains(&self, core: usize) -> bool {
        self.ranges.iter().any(|&(a, b)| (a..=b).contains(&core))
    }
}

impl std::fmt::Display for OnlineCpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .ranges
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        write!(f, "online: {}", parts.join(","))
    }
}

/// Online CPUs as the kernel lists them (`0-3,8-11`), so that ids outside a
/// taskset mask are still accepted; falls back to `0..available_parallelism`.
/// `None` when neither source answers (then cores are not checked).
pub(crate) fn online_cpus() -> Option<OnlineCpus> {
    let from_sysfs = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|text| parse_cpu_list(text.trim()));
    from_sysfs.or_else(|| {
        std::thread::available_parallelism()
            .ok()
            .map(|n| OnlineCpus {
                ranges: vec![(0, n.get() - 1)],
            })
    })
}

fn parse_cpu_list(text: &str) -> Option<OnlineCpus> {
    let mut ranges = Vec::new();
    for part in text.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        if a > b {
            return None;
        }
        ranges.push((a, b));
    }
    (!ranges.is_empty()).then_some(OnlineCpus { ranges })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_strictly() {
        assert_eq!(
            parse_mac("02:00:5e:10:00:01"),
            Some([2, 0, 0x5e, 0x10, 0, 1])
        );
        assert_eq!(parse_mac("02:00:5e:10:00"), None);
        assert_eq!(parse_mac("02:00:5e:10:00:01:07"), None);
        assert_eq!(parse_mac("zz:00:5e:10:00:01"), None);
    }

    #[test]
    fn subnet_membership() {
        let a = Ipv4Addr::new(198, 18, 0, 1);
        assert!(same_subnet(a, Ipv4Addr::new(198, 18, 0, 2), 30));
        assert!(!same_subnet(a, Ipv4Addr::new(198, 18, 0, 5), 30));
        assert!(same_subnet(a, Ipv4Addr::new(10, 0, 0, 1), 0));
    }

    #[test]
    fn loopback_has_an_address_and_lookups_name_the_interface() {
        let (addr, prefix) = ipv4_address("lo").expect("lo has 127.0.0.1");
        assert!(addr.is_loopback() && prefix == 8);
        let err = ipv4_address("zs-no-such0").expect_err("no such interface");
        assert!(err.to_string().contains("zs-no-such0"), "{err}");
    }

    #[test]
    fn cpu_lists_parse() {
        let c = parse_cpu_list("0-3,8,10-11").unwrap();
        assert!(c.contains(0) && c.contains(3) && c.contains(8) && c.contains(11));
        assert!(!c.contains(4) && !c.contains(9) && !c.contains(12));
        assert_eq!(c.to_string(), "online: 0-3,8,10-11");
        assert!(parse_cpu_list("").is_none());
        assert!(parse_cpu_list("3-1").is_none());
        assert!(parse_cpu_list("x").is_none());
    }

    /// Routes of the IPv6 table as Linux prints it: the interface's own
    /// prefix and a default route count, another device's and the
    /// multicast route do not cover a unicast peer elsewhere.
    #[test]
    fn ipv6_routes_through_the_interface_are_seen() {
        let table = "\
20010002000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 veth0
fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 veth0
20010db8000000000000000000000000 20 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth9
ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001 veth0
";
        let ip = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert!(ipv6_routed_in(table, "veth0", ip("2001:2::2")));
        assert!(ipv6_routed_in(table, "veth0", ip("fe80::1")));
        assert!(!ipv6_routed_in(table, "veth0", ip("2001:db8::1")), "eth9's");
        assert!(ipv6_routed_in(table, "eth9", ip("2001:db8::1")));
        assert!(!ipv6_routed_in(table, "veth0", ip("2001:3::1")));
        let default = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 20010002000000000000000000000001 00000400 00000001 00000000 00000003 veth0\n";
        assert!(ipv6_routed_in(default, "veth0", ip("2001:3::1")));
        // The next hop: the peer itself on the link, else the gateway of
        // the most specific route.
        let both = format!("{table}{default}");
        assert_eq!(
            ipv6_hop_in(&both, "veth0", ip("2001:2::2")),
            Some(ip("2001:2::2"))
        );
        assert_eq!(
            ipv6_hop_in(&both, "veth0", ip("2001:3::9")),
            Some(ip("2001:2::1"))
        );
        assert_eq!(ipv6_hop_in(table, "veth0", ip("2001:3::9")), None);
        assert!(!ipv6_routed_in("garbage\n", "veth0", ip("2001:3::1")));
    }

    /// Listeners IPv4 connections reach, from both tables as Linux prints
    /// them (x86-64: each IPv6 word in host byte order).
    #[test]
    fn kernel_listeners_of_both_families_are_seen() {
        let head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        let v4 = format!("{head}   0: 00000000:1389 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n");
        assert!(listens_in(&v4, 5001));
        assert!(!listens_in(&v4, 5002), "another port");
        let row = |ip: &str, st: &str| {
            format!("{head}   0: {ip}:1389 00000000000000000000000000000000:0000 {st} 00000000:00000000 00:00000000 00000000     0        0 2\n")
        };
        let any = "00000000000000000000000000000000";
        assert!(listens_in(&row(any, "0A"), 5001), "[::] dual-stack");
        assert!(!listens_in(&row(any, "01"), 5001), "an established one");
        let mapped = "0000000000000000FFFF00000A0012C6";
        assert!(listens_in(&row(mapped, "0A"), 5001), "::ffff:198.18.0.10");
        let global = "B80D0120000000000000000001000000";
        assert!(
            listens_in(&row(global, "0A"), 5001),
            "2001:db8::1: the stack's IPv6 address may be that one"
        );
    }
}
