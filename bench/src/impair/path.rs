//! A three-namespace lab with the impairment hop in the middle:
//!
//! ```text
//!   ns A                 ns R                       ns B
//!  [a] 198.19.x.1 ── [ra] ⇄ forwarder ⇄ [rb] ── [b] 198.19.x.2
//! ```
//!
//! **Layer 2, by choice.** A and B share one /30 and see each other's MACs;
//! R has no addresses and bridges frames between `ra` and `rb` in user
//! space, ARP included. No routes, no `ip_forward`, no TTL change: to A and
//! B the hop is a (lossy, slow, reordering) wire, and a test reads the
//! same addresses and MACs it would on a plain veth pair.
//!
//! All four veth ends have TX checksum offload, GRO, GSO and TSO off, so
//! every frame on the wire is at most MTU-sized with a finished checksum
//! (the corruption counter would otherwise hit frames whose checksum the
//! receiver never verifies). IPv6 is disabled in the three namespaces so
//! router solicitations and neighbour discovery do not mix into the
//! counters, unless [`ImpairedPath::add_ipv6`] turns it on for A's and B's
//! ends (the hop bridges IPv6 frames as it does IPv4's). Dropping the
//! [`ImpairedPath`] stops the forwarder (within ~10 ms) and deletes the
//! namespaces with everything in them.

use std::{
    net::Ipv4Addr,
    sync::atomic::{AtomicU32, Ordering},
};

use thiserror::Error;

use super::{
    flap::{FlapConfig, Flapper},
    forwarder::{ForwardError, Forwarder, ForwarderConfig, PathCounters},
    spec::ImpairConfig,
};
use zerosplit_lab::Offload;
use zerosplit_lab::VethSpec;
use zerosplit_lab::{HarnessError, NetNs, VethEnd};

static NEXT_LAB: AtomicU32 = AtomicU32::new(0);

/// Building or running the lab failed.
#[derive(Debug, Error)]
pub enum PathError {
    /// A namespace, link or address could not be set up (names the command).
    #[error("impaired path setup: {0}")]
    Setup(#[from] HarnessError),
    /// The forwarder in R could not start.
    #[error("impaired path forwarder: {0}")]
    Forwarder(#[from] ForwardError),
    /// The MTU is outside what veth and the forwarder support.
    #[error("impaired path MTU {0} is outside 576..=65535")]
    Mtu(u32),
}

/// Namespaces A, R, B; veth pairs A—R and R—B; the impairment forwarder
/// running in R. See the module documentation for the layout.
#[derive(Debug)]
pub struct ImpairedPath {
    forwarder: Option<Forwarder>,
    /// The end in namespace A, address `.1` of the /30.
    pub a: VethEnd,
    /// The end in namespace B, address `.2` of the /30.
    pub b: VethEnd,
    /// R's interface facing A.
    pub r_a_if: String,
    /// R's interface facing B.
    pub r_b_if: String,
    /// MTU of all four ends.
    pub mtu: u32,
    // Declared last: dropped after the forwarder (see Drop).
    ns_a: NetNs,
    ns_r: NetNs,
    ns_b: NetNs,
}

impl ImpairedPath {
    /// Prefix length of the A–B subnet.
    pub const PREFIX_LEN: u8 = 30;

    /// Builds the lab with `impair` applied in **both** directions (the
    /// B→A direction seeded with `seed + 1`, so the two differ).
    ///
    /// # Errors
    ///
    /// As [`ImpairedPath::create_with`].
    pub fn create(mtu: u32, impair: &ImpairConfig) -> Result<Self, PathError> {
        let reverse = impair.clone().with_seed(impair.seed.wrapping_add(1));
        Self::create_with(
            mtu,
            &ForwarderConfig {
                a_to_b: impair.clone(),
                b_to_a: reverse,
                ..ForwarderConfig::default()
            },
        )
    }

    /// Builds the lab with a config per direction (`max_frame` is set from
    /// `mtu`).
    ///
    /// # Errors
    ///
    /// [`PathError::Mtu`]; [`PathError::Setup`] naming the refused
    /// netlink or ioctl operation (e.g. not root); [`PathError::Forwarder`].
    pub fn create_with(mtu: u32, cfg: &ForwarderConfig) -> Result<Self, PathError> {
        if !(576..=65535).contains(&mtu) {
            return Err(PathError::Mtu(mtu));
        }
        let n = NEXT_LAB.fetch_add(1, Ordering::Relaxed) % 16384;
        let ns_a = NetNs::new("zsia")?;
        let ns_r = NetNs::new("zsir")?;
        let ns_b = NetNs::new("zsib")?;
        let (a, b, mac) = lab_ends(&ns_a, &ns_b, "zsi", n, Ipv4Addr::new(198, 19, 0, 0), 0x5b);
        let r_a_if = format!("zsi{n}ra");
        let r_b_if = format!("zsi{n}rb");
        for (r_if, r_mac, end, ns) in [(&r_a_if, mac(2), &a, &ns_a), (&r_b_if, mac(3), &b, &ns_b)] {
            ns_r.add_veth(
                &VethSpec {
                    name: r_if,
                    mac: Some(r_mac),
                    mtu: Some(mtu),
                    queues: None,
                },
                ns,
                &VethSpec {
                    name: &end.ifname,
                    mac: Some(end.mac),
                    mtu: Some(mtu),
                    queues: None,
                },
            )?;
        }
        for (ns, end) in [(&ns_a, &a), (&ns_b, &b)] {
            ns.add_ipv4(&end.ifname, end.addr, Self::PREFIX_LEN)?;
            wire_offloads_off(ns, &end.ifname)?;
        }
        wire_offloads_off(&ns_r, &r_a_if)?;
        wire_offloads_off(&ns_r, &r_b_if)?;
        let cfg = ForwarderConfig {
            max_frame: mtu as usize + 18,
            ..cfg.clone()
        };
        let forwarder = Forwarder::start(&r_a_if, &r_b_if, Some(ns_r.name()), &cfg)?;
        Ok(Self {
            forwarder: Some(forwarder),
            a,
            b,
            r_a_if,
            r_b_if,
            mtu,
            ns_a,
            ns_r,
            ns_b,
        })
    }

    /// Gives A's end [`zerosplit_lab::IPV6_A`] and B's
    /// [`zerosplit_lab::IPV6_B`] (/64, no duplicate address detection), as
    /// [`zerosplit_lab::VethPair::add_ipv6`] does on a plain pair; R needs
    /// none (it bridges). A zerosplit stack reads its interface's addresses
    /// when it starts: add them before.
    ///
    /// # Errors
    ///
    /// [`PathError::Setup`] naming the refused address.
    pub fn add_ipv6(&self) -> Result<(), PathError> {
        self.ns_a
            .add_ipv6(&self.a.ifname, zerosplit_lab::IPV6_A, 64)?;
        self.ns_b
            .add_ipv6(&self.b.ifname, zerosplit_lab::IPV6_B, 64)?;
        Ok(())
    }

    /// Namespace A.
    pub fn ns_a(&self) -> &NetNs {
        &self.ns_a
    }

    /// Namespace B.
    pub fn ns_b(&self) -> &NetNs {
        &self.ns_b
    }

    /// Namespace R, where the forwarder runs.
    pub fn ns_r(&self) -> &NetNs {
        &self.ns_r
    }

    /// The forwarder's counters now (A→B and B→A).
    pub fn counters(&self) -> PathCounters {
        self.forwarder
            .as_ref()
            .map(Forwarder::counters)
            .unwrap_or_default()
    }

    /// Starts flapping the R—B wire (R's `rb` end: B loses carrier too)
    /// as `cfg` says, until the returned [`Flapper`] is stopped or dropped.
    pub fn flap(&self, cfg: FlapConfig) -> Flapper {
        Flapper::start(self.ns_r.name(), &self.r_b_if, cfg)
    }

    /// True while the forwarder's threads run.
    pub fn is_forwarding(&self) -> bool {
        self.forwarder.as_ref().is_some_and(Forwarder::is_running)
    }

    /// Stops the forwarder and returns its final counters; the namespaces
    /// stay until the path is dropped (frames no longer pass).
    ///
    /// # Errors
    ///
    /// The error a direction stopped with.
    pub fn stop_forwarding(&mut self) -> Result<PathCounters, ForwardError> {
        match self.forwarder.take() {
            Some(f) => f.stop(),
            None => Ok(PathCounters::default()),
        }
    }
}

/// The two addressed ends of lab `n`: `<tag><n>a` in `ns_a` at `.1` and
/// `<tag><n>b` in `ns_b` at `.2` of the `n`-th /30 from `subnet`, with
/// locally administered MACs `02:<kind>:<n>:<role>:01` (roles 0 and 1;
/// the returned function gives the others).
pub(crate) fn lab_ends(
    ns_a: &NetNs,
    ns_b: &NetNs,
    tag: &str,
    n: u32,
    subnet: Ipv4Addr,
    kind: u8,
) -> (VethEnd, VethEnd, impl Fn(u8) -> [u8; 6]) {
    let base = u32::from(subnet) + n * 4;
    let id = n.to_be_bytes();
    let mac = move |role: u8| [0x02, kind, id[2], id[3], role, 0x01];
    let end = |ns: &NetNs, side: char, host: u32, role: u8| VethEnd {
        netns: ns.name().to_owned(),
        ifname: format!("{tag}{n}{side}"),
        addr: Ipv4Addr::from(base + host),
        mac: mac(role),
    };
    (end(ns_a, 'a', 1, 0), end(ns_b, 'b', 2, 1), mac)
}

/// `ethtool -K DEV tx off gro off gso off tso off`, then up: every frame
/// on the wire at most MTU-sized with a finished checksum.
pub(crate) fn wire_offloads_off(ns: &NetNs, dev: &str) -> Result<(), HarnessError> {
    ns.set_offloads(
        dev,
        &[
            (Offload::TxChecksum, false),
            (Offload::Gro, false),
            (Offload::Gso, false),
            (Offload::Tso, false),
        ],
    )?;
    ns.set_link_up(dev, true)
}

impl Drop for ImpairedPath {
    fn drop(&mut self) {
        // Stop the threads before their interfaces disappear; the namespace
        // guards (fields) then delete A, R and B.
        if let Some(f) = self.forwarder.take() {
            if let Err(e) = f.stop() {
                log::error!("impaired path: {e}");
            }
        }
    }
}
