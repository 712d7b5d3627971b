//! The service sections: `[[listen]]` (ports the stack accepts connections
//! on, and what it does with them) and `[ports]` (the source ports of
//! outgoing connections).

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::units::PortRange;

/// What a listener does with the bytes of an accepted connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// Send every received byte back (RFC 862).
    #[default]
    Echo,
    /// Receive and throw away (RFC 863): posted memory is reused at once.
    Discard,
    /// Receive into registered memory and count it; for throughput tests.
    Sink,
}

/// One `[[listen]]` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// Local IPv4 address; `0.0.0.0` accepts on every address of the
    /// interface.
    #[serde(default = "unspecified")]
    pub address: Ipv4Addr,
    /// TCP port (required).
    pub port: u16,
    /// What to run on accepted connections.
    #[serde(default)]
    pub service: Service,
}

fn unspecified() -> Ipv4Addr {
    Ipv4Addr::UNSPECIFIED
}

impl ListenConfig {
    /// The default listener: echo on port 7 of every address.
    pub fn echo() -> ListenConfig {
        ListenConfig {
            address: Ipv4Addr::UNSPECIFIED,
            port: 7,
            service: Service::Echo,
        }
    }
}

/// `[ports]`: port numbers the stack owns besides its listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PortsConfig {
    /// Source ports of outgoing connections (RFC 6056 selection). The
    /// stack reserves them from the kernel
    /// (`net.ipv4.ip_local_reserved_ports`) while it runs.
    pub ephemeral_range: PortRange,
}

impl Default for PortsConfig {
    fn default() -> Self {
        PortsConfig {
            ephemeral_range: PortRange {
                first: 40000,
                last: 40999,
            },
        }
    }
}
