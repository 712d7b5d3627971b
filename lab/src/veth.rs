//! Veth pairs between two lab namespaces: named, addressed from
//! 198.18.0.0/15 and up, with the offloads asked for; deleted on drop.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::{io, thread};

use datapath::rtnl::Rtnl;

use crate::error::HarnessError;
use crate::netns::next_id;
use crate::netns::NetNs;
use crate::rtnl::{LinkSetup, VethSpec};
use crate::sys::ethtool::{self, Offload};
use crate::sys::netns::NetnsGuard;

/// One end of a [`VethPair`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethEnd {
    /// Namespace the interface lives in.
    pub netns: String,
    /// Interface name (≤ 15 bytes).
    pub ifname: String,
    /// IPv4 address (prefix length [`VethPair::PREFIX_LEN`]).
    pub addr: Ipv4Addr,
    /// MAC address (locally administered, unique per pair).
    pub mac: [u8; 6],
}

impl VethEnd {
    /// The MAC as `aa:bb:cc:dd:ee:ff`.
    pub fn mac_string(&self) -> String {
        mac_string(self.mac)
    }
}

/// The offloads a [`VethPair`]'s ends are left with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offloads {
    /// TX checksum offload off on both ends (and with it TSO and GSO's
    /// checksum help): AF_XDP sees finished checksums, and Linux is
    /// compared packet for packet. What every test and bench row uses
    /// unless it asks otherwise.
    TxChecksumOff,
    /// Whatever a freshly created veth has (TX checksum, TSO, GSO, GRO as
    /// the kernel sets them): the Linux a user gets.
    Default,
}

/// A veth pair with one end in each of two namespaces, addressed, up, and
/// (unless made with [`VethPair::create_with_offloads`]) with TX checksum
/// offload off on both ends (so AF_XDP sees finished checksums). Dropping
/// it deletes the link (best effort; deleting either namespace deletes it
/// too).
#[derive(Debug)]
pub struct VethPair {
    /// The end in `ns_a`, address `.1` of the /30.
    pub a: VethEnd,
    /// The end in `ns_b`, address `.2` of the /30.
    pub b: VethEnd,
    /// The MTU of both ends.
    pub mtu: u32,
}

/// The IPv6 addresses a lab gives the ends that carry IPv6 (the
/// benchmarking prefix 2001:2::/48, RFC 5180, as 198.18.0.0/15 for IPv4):
/// `::1` on the A end, `::2` on the B end, prefix length 64.
pub const IPV6_A: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 1);
/// See [`IPV6_A`].
pub const IPV6_B: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 2);

impl VethPair {
    /// Prefix length of the pair's subnet.
    pub const PREFIX_LEN: u8 = 30;

    /// Gives the ends [`IPV6_A`] and [`IPV6_B`] (/64, no duplicate
    /// address detection: usable at once).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`] naming the refused address.
    pub fn add_ipv6(&self, ns_a: &NetNs, ns_b: &NetNs) -> Result<(), HarnessError> {
        ns_a.add_ipv6(&self.a.ifname, IPV6_A, 64)?;
        ns_b.add_ipv6(&self.b.ifname, IPV6_B, 64)
    }

    /// Creates the pair `zs<pid>x<n>a` (in `ns_a`) ↔ `zs<pid>x<n>b` (in
    /// `ns_b`) with MTU `mtu`, addresses 198.18.0.0/15 + 4·n + {1, 2} /30.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Kernel`] naming the refused operation (creating
    /// the pair, an address, setting it up, the TX checksum ioctl).
    pub fn create(ns_a: &NetNs, ns_b: &NetNs, mtu: u32) -> Result<Self, HarnessError> {
        Self::create_with_queues(ns_a, ns_b, mtu, 1)
    }

    /// As [`VethPair::create`], with `queues` receive and transmit queues
    /// on each end. The receiving end takes a packet on the queue the
    /// sender transmitted it on, so several queues spread flows like RSS.
    ///
    /// # Errors
    ///
    /// As [`VethPair::create`]; `queues` 0 or above 64 is invalid.
    pub fn create_with_queues(
        ns_a: &NetNs,
        ns_b: &NetNs,
        mtu: u32,
        queues: u32,
    ) -> Result<Self, HarnessError> {
        Self::create_with_offloads(ns_a, ns_b, mtu, queues, Offloads::TxChecksumOff)
    }

    /// As [`VethPair::create_with_queues`], with the ends' offloads chosen
    /// by `offloads` ([`Offloads::Default`] leaves a fresh veth as it is:
    /// what a Linux user gets, and not usable by AF_XDP ends).
    ///
    /// # Errors
    ///
    /// As [`VethPair::create_with_queues`].
    pub fn create_with_offloads(
        ns_a: &NetNs,
        ns_b: &NetNs,
        mtu: u32,
        queues: u32,
        offloads: Offloads,
    ) -> Result<Self, HarnessError> {
        if !(1..=64).contains(&queues) {
            return Err(HarnessError::Invalid {
                what: "veth queues",
                detail: format!("{queues} is outside 1..=64"),
            });
        }
        let id = next_id();
        let pid = std::process::id();
        let subnet = id % (1 << 15); // 32768 /30 subnets in 198.18.0.0/15
        let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + subnet * 4;
        let end = |ns: &NetNs, side: char, host: u32| VethEnd {
            netns: ns.name().to_owned(),
            ifname: format!("zs{pid}x{}{side}", id % 10_000),
            addr: Ipv4Addr::from(base + host),
            mac: {
                let s = subnet.to_be_bytes();
                [0x02, 0x5a, s[2], s[3], u8::from(side == 'b'), 0x01]
            },
        };
        let a = end(ns_a, 'a', 1);
        let b = end(ns_b, 'b', 2);
        for e in [&a, &b] {
            if e.ifname.len() > 15 {
                return Err(HarnessError::Invalid {
                    what: "interface name",
                    detail: format!("{} is longer than 15 bytes", e.ifname),
                });
            }
        }
        fn spec(e: &VethEnd, mtu: u32, queues: u32) -> VethSpec<'_> {
            VethSpec {
                name: &e.ifname,
                mac: Some(e.mac),
                mtu: Some(mtu),
                queues: Some(queues),
            }
        }
        ns_a.add_veth(&spec(&a, mtu, queues), ns_b, &spec(&b, mtu, queues))?;
        // From here on the pair exists: dropping it on a failure below
        // deletes the link.
        let pair = Self { a, b, mtu };
        for (ns, e) in [(ns_a, &pair.a), (ns_b, &pair.b)] {
            ns.run(&format!("setting up {}", e.ifname), || {
                let mut rtnl = Rtnl::open()?;
                rtnl.add_ipv4(&e.ifname, e.addr, Self::PREFIX_LEN)?;
                rtnl.set_link_up(&e.ifname, true)?;
                if offloads == Offloads::TxChecksumOff {
                    ethtool::set_offload(&e.ifname, Offload::TxChecksum, false)?;
                }
                Ok(())
            })?;
        }
        Ok(pair)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Ignored when the namespace (and so the link) is already gone.
        let (netns, ifname) = (self.a.netns.as_str(), self.a.ifname.as_str());
        let _ = thread::scope(|s| {
            s.spawn(|| -> io::Result<()> {
                let _guard = NetnsGuard::enter(netns)?;
                Rtnl::open()?.delete_link(ifname)
            })
            .join()
        });
    }
}

fn mac_string(mac: [u8; 6]) -> String {
    let parts: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;

    /// Needs root (no iproute2, ethtool or ping): a pair comes up as asked,
    /// carries an ICMP echo, and everything is removed on drop.
    #[test]
    fn pair_is_reachable_and_everything_is_removed_on_drop() {
        let (ns_names, ifname);
        let host_v6 = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6").ok();
        {
            let a = NetNs::new("zsb").expect("netns a (needs root)");
            let b = NetNs::new("zsb").expect("netns b");
            assert!(Path::new("/var/run/netns").join(a.name()).exists());
            let pair = VethPair::create_with_queues(&a, &b, 1500, 2).expect("veth pair");
            assert!(pair.a.ifname.len() <= 15 && pair.b.ifname.len() <= 15);
            assert_eq!(u32::from(pair.b.addr) - u32::from(pair.a.addr), 1);
            assert_eq!(pair.a.addr.octets()[0..2], [198, 18]);
            for (ns, end) in [(&a, &pair.a), (&b, &pair.b)] {
                let link = ns.link(&end.ifname).expect("link");
                assert_eq!(link.mac, Some(end.mac), "{link:?}");
                assert_eq!(link.mtu, Some(1500), "{link:?}");
                assert!(link.up && link.ethernet, "{link:?}");
                assert_eq!(link.queues, (Some(2), Some(2)), "{link:?}");
                assert_eq!(link.xdp, None);
                let addrs = ns
                    .run("listing addresses", || {
                        Rtnl::open()?.ipv4_addresses(&end.ifname)
                    })
                    .expect("addresses");
                assert_eq!(addrs, vec![(end.addr, VethPair::PREFIX_LEN)]);
                // Read back with ETHTOOL_GTXCSUM; TSO follows TX checksum.
                assert!(!ns.offload(&end.ifname, Offload::TxChecksum).expect("tx"));
                assert!(!ns.offload(&end.ifname, Offload::Tso).expect("tso"));
            }
            // Each end lives in its own namespace only.
            assert!(!a.has_link(&pair.b.ifname).expect("lookup"));
            assert!(!b.has_link(&pair.a.ifname).expect("lookup"));
            // IPv6 is off inside, whatever the host has.
            let v6 = a
                .run("reading disable_ipv6", || {
                    std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6")
                })
                .ok();
            assert!(v6.is_none_or(|v| v.trim() == "1"), "IPv6 left on");
            // … and the write went to the namespace, not to the host (the
            // test's own namespace), whose /proc/sys/net is another one.
            let outside = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6").ok();
            assert_eq!(outside, host_v6, "the host's disable_ipv6 changed");
            let lo = a.link("lo").expect("lo");
            assert!(lo.up, "{lo:?}");
            let rtt = crate::icmp::ping(&b, pair.a.addr, Duration::from_secs(2))
                .expect("echo reply from a");
            assert!(rtt < Duration::from_secs(2));
            crate::icmp::ping(&a, pair.b.addr, Duration::from_secs(2)).expect("echo reply from b");
            // With b's end down, the echo goes unanswered.
            b.set_link_up(&pair.b.ifname, false).expect("b down");
            assert!(!b.link(&pair.b.ifname).expect("link").up);
            let silent = crate::icmp::ping(&a, pair.b.addr, Duration::from_millis(300))
                .expect_err("b is down");
            assert!(
                matches!(silent, crate::icmp::PingError::NoReply { .. }),
                "{silent}"
            );
            ns_names = [a.name().to_owned(), b.name().to_owned()];
            ifname = pair.a.ifname.clone();
        }
        for name in &ns_names {
            assert!(
                !Path::new("/var/run/netns").join(name).exists(),
                "{name} still exists"
            );
            let err = NetnsGuard::enter(name).expect_err("gone");
            assert_eq!(err.kind(), io::ErrorKind::NotFound);
        }
        let host = Rtnl::open()
            .and_then(|mut r| r.link_exists(&ifname))
            .expect("host lookup");
        assert!(!host, "{ifname} left in the test's namespace");
    }

    /// Needs root: a pair made with the default offloads keeps TX checksum
    /// offload (and the TSO it enables) as a fresh veth has it.
    #[test]
    fn default_offloads_are_left_as_a_fresh_veth_has_them() {
        let a = NetNs::new("zsb").expect("netns a (needs root)");
        let b = NetNs::new("zsb").expect("netns b");
        let pair =
            VethPair::create_with_offloads(&a, &b, 1500, 1, Offloads::Default).expect("veth pair");
        for (ns, end) in [(&a, &pair.a), (&b, &pair.b)] {
            assert!(ns.offload(&end.ifname, Offload::TxChecksum).expect("tx"));
        }
        // And the ioctl turns it off and on again, as read back.
        a.set_offloads(&pair.a.ifname, &[(Offload::TxChecksum, false)])
            .expect("tx off");
        assert!(!a.offload(&pair.a.ifname, Offload::TxChecksum).expect("tx"));
        a.set_offloads(&pair.a.ifname, &[(Offload::TxChecksum, true)])
            .expect("tx on");
        assert!(a.offload(&pair.a.ifname, Offload::TxChecksum).expect("tx"));
    }

    #[test]
    fn mac_formatting() {
        assert_eq!(
            mac_string([0x02, 0x5a, 0, 0x10, 1, 0xff]),
            "02:5a:00:10:01:ff"
        );
    }
}
