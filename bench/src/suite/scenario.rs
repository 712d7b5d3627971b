//! The scenario matrix: who sends to whom (Linux kernel sockets, iperf3,
//! zerosplit with the header-only `tcp` or with `smoltcp`), at which MTU,
//! with zerosplit's transport in which thread mode, over which IP family.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One end of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Endpoint {
    /// Linux kernel TCP sockets (`bench-peer --stack kernel`).
    Kernel,
    /// iperf3 (client or server), when installed.
    Iperf3,
    /// zerosplit with the header-only TCP.
    Tcp,
    /// zerosplit with the smoltcp transport.
    Smoltcp,
}

impl Endpoint {
    /// The `bench-peer --stack` value.
    pub fn stack_name(self) -> &'static str {
        match self {
            Endpoint::Kernel | Endpoint::Iperf3 => "kernel",
            Endpoint::Tcp => "tcp",
            Endpoint::Smoltcp => "smoltcp",
        }
    }

    /// zerosplit runs this end (so its thread mode matters).
    pub fn is_zerosplit(self) -> bool {
        matches!(self, Endpoint::Tcp | Endpoint::Smoltcp)
    }

    /// This end talks IPv6 (the engine's own answer for a zerosplit end:
    /// smoltcp carries IPv4 only).
    pub fn carries_ipv6(self) -> bool {
        use zerosplit::engine::{smol::SmolEngine, tcp::TcpEngine};
        use zerosplit::host::Engine;
        match self {
            Endpoint::Kernel | Endpoint::Iperf3 => true,
            Endpoint::Tcp => <TcpEngine as Engine>::IPV6,
            Endpoint::Smoltcp => <SmolEngine as Engine>::IPV6,
        }
    }
}

/// A pair of endpoints: one row family of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Scenario {
    /// Linux → Linux with `bench-peer --stack kernel` on both ends: the
    /// baseline every ratio refers to.
    #[serde(rename = "linux-linux")]
    LinuxLinux,
    /// Linux → Linux with `bench-peer --stack kernel` on a veth with its
    /// default offloads (TX checksum, TSO, GSO, GRO as a fresh veth has
    /// them): the Linux a user gets.
    #[serde(rename = "linux-linux-offload")]
    LinuxLinuxOffload,
    /// Linux → Linux with iperf3 (a cross-check of the baseline).
    #[serde(rename = "linux-linux-iperf3")]
    LinuxLinuxIperf3,
    /// Linux sender → zerosplit receiver.
    #[serde(rename = "linux-zs")]
    LinuxZs,
    /// zerosplit sender → Linux receiver.
    #[serde(rename = "zs-linux")]
    ZsLinux,
    /// zerosplit → zerosplit, header-only TCP.
    #[serde(rename = "zs-zs-tcp")]
    ZsZsTcp,
    /// zerosplit → zerosplit, smoltcp transport.
    #[serde(rename = "zs-zs-smoltcp")]
    ZsZsSmoltcp,
}

impl Scenario {
    /// Every scenario, in table order.
    pub const ALL: [Scenario; 7] = [
        Scenario::LinuxLinux,
        Scenario::LinuxLinuxOffload,
        Scenario::LinuxLinuxIperf3,
        Scenario::LinuxZs,
        Scenario::ZsLinux,
        Scenario::ZsZsTcp,
        Scenario::ZsZsSmoltcp,
    ];

    /// Name used on the command line, in the table and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::LinuxLinux => "linux-linux",
            Scenario::LinuxLinuxOffload => "linux-linux-offload",
            Scenario::LinuxLinuxIperf3 => "linux-linux-iperf3",
            Scenario::LinuxZs => "linux-zs",
            Scenario::ZsLinux => "zs-linux",
            Scenario::ZsZsTcp => "zs-zs-tcp",
            Scenario::ZsZsSmoltcp => "zs-zs-smoltcp",
        }
    }

    /// The sending end (also the ping-pong client).
    pub fn sender(self) -> Endpoint {
        match self {
            Scenario::LinuxLinux | Scenario::LinuxLinuxOffload | Scenario::LinuxZs => {
                Endpoint::Kernel
            }
            Scenario::LinuxLinuxIperf3 => Endpoint::Iperf3,
            Scenario::ZsLinux | Scenario::ZsZsTcp => Endpoint::Tcp,
            Scenario::ZsZsSmoltcp => Endpoint::Smoltcp,
        }
    }

    /// The receiving end (also the ping-pong server).
    pub fn receiver(self) -> Endpoint {
        match self {
            Scenario::LinuxLinux | Scenario::LinuxLinuxOffload | Scenario::ZsLinux => {
                Endpoint::Kernel
            }
            Scenario::LinuxLinuxIperf3 => Endpoint::Iperf3,
            Scenario::LinuxZs | Scenario::ZsZsTcp => Endpoint::Tcp,
            Scenario::ZsZsSmoltcp => Endpoint::Smoltcp,
        }
    }

    /// The offloads of the veth pair this scenario runs on: the default
    /// ones for `linux-linux-offload`, TX checksum offload off for every
    /// other row (AF_XDP needs finished checksums; linux-linux is the
    /// packet-for-packet comparison).
    pub fn offloads(self) -> zerosplit_lab::Offloads {
        match self {
            Scenario::LinuxLinuxOffload => zerosplit_lab::Offloads::Default,
            _ => zerosplit_lab::Offloads::TxChecksumOff,
        }
    }

    /// At least one end is zerosplit, so the thread mode is a dimension.
    pub fn has_zerosplit(self) -> bool {
        self.sender().is_zerosplit() || self.receiver().is_zerosplit()
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a scenario, thread mode or list of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {got:?}; expected one of: {expected}")]
pub struct UnknownName {
    /// What kind of name.
    pub what: &'static str,
    /// What was given.
    pub got: String,
    /// The accepted names, comma-separated.
    pub expected: String,
}

impl FromStr for Scenario {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name() == s.trim())
            .ok_or_else(|| UnknownName {
                what: "scenario",
                got: s.to_owned(),
                expected: Scenario::ALL.map(Scenario::name).join(", "),
            })
    }
}

/// Where zerosplit's transport runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThreadMode {
    /// Datapath and transport in one loop.
    Rtc,
    /// The transport on its own thread.
    Dedicated,
}

impl ThreadMode {
    /// Name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ThreadMode::Rtc => "rtc",
            ThreadMode::Dedicated => "dedicated",
        }
    }
}

impl FromStr for ThreadMode {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "rtc" => Ok(ThreadMode::Rtc),
            "dedicated" => Ok(ThreadMode::Dedicated),
            other => Err(UnknownName {
                what: "thread mode",
                got: other.to_owned(),
                expected: "rtc, dedicated".into(),
            }),
        }
    }
}

/// The IP family a case's connections use.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// IPv4 on the pair's 198.18.0.0/15 addresses (every row before
    /// `--ipv6` existed, so a report without the field is IPv4).
    #[default]
    Ipv4,
    /// IPv6 on [`zerosplit_lab::IPV6_A`] and [`zerosplit_lab::IPV6_B`]
    /// (`zerosplit bench --ipv6`).
    Ipv6,
}

impl Family {
    /// Name in the table and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        }
    }

    /// Bytes of IP and TCP header without options in each segment (RFC
    /// 791, RFC 8200 §3, RFC 9293 §3.1): what the MTU leaves for payload.
    pub fn header_bytes(self) -> u32 {
        match self {
            Family::Ipv4 => 20 + 20,
            Family::Ipv6 => 40 + 20,
        }
    }
}

/// One row of the table: a scenario at an MTU in a thread mode (`None`
/// for rows without a zerosplit end) over an IP family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Case {
    /// Who talks to whom.
    pub scenario: Scenario,
    /// MTU of the veth pair.
    pub mtu: u32,
    /// zerosplit's thread mode.
    pub threads: Option<ThreadMode>,
    /// IPv4 or IPv6.
    #[serde(default)]
    pub family: Family,
}

impl Case {
    /// A stable key, e.g. `zs-zs-tcp/1500/rtc` or `linux-linux/9000/-`;
    /// an IPv6 case's ends in `/v6` (`zs-zs-tcp/1500/rtc/v6`), so IPv4 keys
    /// are what they were before IPv6 rows existed and old baselines match.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}{}",
            self.scenario.name(),
            self.mtu,
            self.threads.map_or("-", ThreadMode::name),
            match self.family {
                Family::Ipv4 => "",
                Family::Ipv6 => "/v6",
            }
        )
    }

    /// The same case over IPv4.
    pub fn ipv4(self) -> Case {
        Case {
            family: Family::Ipv4,
            ..self
        }
    }
}

/// The cases for every combination, in table order (MTU, then scenario,
/// then thread mode, then family: an IPv6 row right below its IPv4 twin);
/// rows without a zerosplit end appear once per MTU and family.
pub fn matrix(
    scenarios: &[Scenario],
    mtus: &[u32],
    threads: &[ThreadMode],
    families: &[Family],
) -> Vec<Case> {
    let mut cases = Vec::new();
    for &mtu in mtus {
        for scenario in Scenario::ALL.into_iter().filter(|s| scenarios.contains(s)) {
            let modes: Vec<Option<ThreadMode>> = if scenario.has_zerosplit() {
                threads.iter().copied().map(Some).collect()
            } else {
                vec![None]
            };
            for threads in modes {
                cases.extend(families.iter().map(|&family| Case {
                    scenario,
                    mtu,
                    threads,
                    family,
                }));
            }
        }
    }
    cases
}

/// Parses a comma-separated list of names.
///
/// # Errors
/// The first name that does not parse.
pub fn parse_list<T: FromStr<Err = UnknownName>>(s: &str) -> Result<Vec<T>, UnknownName> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(str::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_repeats_only_zerosplit_rows_per_thread_mode() {
        let cases = matrix(
            &[Scenario::ZsZsTcp, Scenario::LinuxLinux],
            &[1500, 9000],
            &[ThreadMode::Rtc, ThreadMode::Dedicated],
            &[Family::Ipv4],
        );
        let keys: Vec<String> = cases.iter().map(Case::key).collect();
        assert_eq!(
            keys,
            [
                "linux-linux/1500/-",
                "zs-zs-tcp/1500/rtc",
                "zs-zs-tcp/1500/dedicated",
                "linux-linux/9000/-",
                "zs-zs-tcp/9000/rtc",
                "zs-zs-tcp/9000/dedicated",
            ]
        );
    }

    #[test]
    fn ipv4_keys_are_as_before_and_ipv6_keys_end_in_v6() {
        let case = |scenario, mtu, threads, family| Case {
            scenario,
            mtu,
            threads,
            family,
        };
        let rtc = Some(ThreadMode::Rtc);
        // The keys stored baselines carry.
        assert_eq!(
            case(Scenario::ZsZsTcp, 1500, rtc, Family::Ipv4).key(),
            "zs-zs-tcp/1500/rtc"
        );
        assert_eq!(
            case(Scenario::LinuxLinux, 9000, None, Family::Ipv4).key(),
            "linux-linux/9000/-"
        );
        assert_eq!(
            case(Scenario::ZsZsTcp, 1500, rtc, Family::Ipv6).key(),
            "zs-zs-tcp/1500/rtc/v6"
        );
        assert_eq!(
            case(Scenario::LinuxLinux, 9000, None, Family::Ipv6).key(),
            "linux-linux/9000/-/v6"
        );
        let v6 = case(
            Scenario::LinuxZs,
            1500,
            Some(ThreadMode::Dedicated),
            Family::Ipv6,
        );
        assert_eq!(v6.ipv4().key(), "linux-zs/1500/dedicated");
        // A case written before the family existed reads as IPv4.
        let old: Case =
            serde_json::from_str(r#"{"scenario":"zs-linux","mtu":1500,"threads":"rtc"}"#)
                .expect("an old case");
        assert_eq!(old.family, Family::Ipv4);
        assert_eq!(
            serde_json::to_string(&Family::Ipv6).expect("json"),
            r#""ipv6""#
        );
    }

    #[test]
    fn matrix_puts_each_ipv6_case_below_its_ipv4_twin() {
        let keys: Vec<String> = matrix(
            &[Scenario::LinuxLinux, Scenario::ZsZsTcp],
            &[1500, 9000],
            &[ThreadMode::Rtc],
            &[Family::Ipv4, Family::Ipv6],
        )
        .iter()
        .map(Case::key)
        .collect();
        assert_eq!(
            keys,
            [
                "linux-linux/1500/-",
                "linux-linux/1500/-/v6",
                "zs-zs-tcp/1500/rtc",
                "zs-zs-tcp/1500/rtc/v6",
                "linux-linux/9000/-",
                "linux-linux/9000/-/v6",
                "zs-zs-tcp/9000/rtc",
                "zs-zs-tcp/9000/rtc/v6",
            ]
        );
    }

    #[test]
    fn smoltcp_is_the_end_without_ipv6() {
        assert!(Endpoint::Kernel.carries_ipv6());
        assert!(Endpoint::Iperf3.carries_ipv6());
        assert!(Endpoint::Tcp.carries_ipv6());
        assert!(!Endpoint::Smoltcp.carries_ipv6());
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_the_choices() {
        for sc in Scenario::ALL {
            assert_eq!(sc.name().parse::<Scenario>(), Ok(sc));
        }
        let err = parse_list::<Scenario>("linux-zs,nope").expect_err("unknown");
        assert_eq!(err.got, "nope");
        assert!(err.to_string().contains("zs-zs-smoltcp"), "{err}");
        assert_eq!(
            parse_list::<ThreadMode>("rtc, dedicated"),
            Ok(vec![ThreadMode::Rtc, ThreadMode::Dedicated])
        );
    }

    #[test]
    fn ends_of_each_scenario() {
        assert_eq!(Scenario::LinuxZs.sender(), Endpoint::Kernel);
        assert_eq!(Scenario::LinuxZs.receiver(), Endpoint::Tcp);
        assert_eq!(Scenario::ZsLinux.sender(), Endpoint::Tcp);
        assert!(!Scenario::LinuxLinuxIperf3.has_zerosplit());
        assert!(Scenario::ZsZsSmoltcp.has_zerosplit());
        assert_eq!(Scenario::LinuxLinuxOffload.sender(), Endpoint::Kernel);
        assert!(!Scenario::LinuxLinuxOffload.has_zerosplit());
    }

    #[test]
    fn only_the_offload_row_keeps_the_default_offloads() {
        use zerosplit_lab::Offloads;
        for sc in Scenario::ALL {
            let want = if sc == Scenario::LinuxLinuxOffload {
                Offloads::Default
            } else {
                Offloads::TxChecksumOff
            };
            assert_eq!(sc.offloads(), want, "{sc}");
        }
        assert_eq!(
            "linux-linux-offload".parse::<Scenario>(),
            Ok(Scenario::LinuxLinuxOffload)
        );
    }
}
