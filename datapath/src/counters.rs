//! RX drop and outcome counters: one plain `u64` per reason, so every frame
//! the datapath sees ends up in exactly one bucket and an operator can read
//! them by name.

use crate::wire::WireError;
use proto::placement::Verdict;

macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            $($(#[$fm])* pub $field: u64,)*
        }

        impl $name {
            /// Adds `other`'s counts to these.
            pub fn add(&mut self, other: &Self) {
                $(self.$field += other.$field;)*
            }

            /// Every counter as `(name, value)`, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($field), self.$field),)*].into_iter()
            }
        }
    };
}

counters! {
    /// Per-reason RX counters.
    RxCounters {
        /// Segments whose payload was placed in full.
        placed,
        /// Segments placed in part (rest outside `[floor, posted_end)`).
        trimmed,
        /// Segments with nothing new: below the floor or already placed.
        duplicate,
        /// Segments whose payload lay entirely at or beyond the posted end.
        beyond_posted,
        /// Segments whose TCP checksum failed.
        bad_checksum,
        /// Segments without payload (pure ACK, SYN, FIN, RST).
        no_payload,
        /// SYN segments that carried payload (the payload is not placed).
        syn_payload_ignored,
        /// Out-of-order data refused because the placed-range set was full.
        placed_set_full,
        /// Payload that arrived before the peer's ISN was known.
        unsynchronized,
        /// Payload on a segment without ACK or with RST (never placed).
        unacceptable_flags,
        /// Placed ranges the transport refused (a forged, out-of-window or
        /// otherwise rejected segment): forgotten, so the genuine bytes are
        /// placed over them.
        discarded,
        /// Bytes of the ranges counted in `discarded`.
        bytes_discarded,
        /// Payload bytes written into posted memory by verified segments.
        bytes_placed,
        /// Segments taken with a partial checksum (the field held only the
        /// pseudo-header sum, as a veth delivers a Linux sender's
        /// offloaded checksum), unverified: on a veth only. Each is also
        /// counted under its placement verdict.
        csum_partial,
        /// Frames shorter than an Ethernet header.
        truncated_ethernet,
        /// Neither IPv4 nor IPv6.
        not_ip,
        /// IPv4 lengths inconsistent with the frame.
        malformed_ipv4,
        /// IPv6 payload length inconsistent with the frame (or a
        /// jumbogram's 0).
        malformed_ipv6,
        /// IPv6 packets with extension headers (not walked).
        ipv6_extension,
        /// IPv6 addresses that must not appear on the wire (v4-mapped,
        /// a multicast or unspecified source).
        bad_ipv6_address,
        /// Wrong IP version nibble.
        bad_ip_version,
        /// IPv4 header checksum failures.
        bad_ip_checksum,
        /// IPv4 fragments.
        fragment,
        /// Neither TCP nor UDP.
        unsupported_protocol,
        /// TCP data offset out of range.
        malformed_tcp,
        /// UDP length out of range.
        malformed_udp,
        /// Headers not inside the first fragment of a multi-buffer frame.
        split_headers,
        /// Segments for no known flow.
        unknown_flow,
        /// New flows refused because the flow table was full.
        flow_table_full,
    }
}

impl RxCounters {
    /// The counters that count a drop (or a partial keep), as opposed to a
    /// success, as `(name, value)`. `unknown_flow` is not one: those
    /// records (a listener's SYNs) go on to the stack, which counts the
    /// ones it drops.
    pub fn drops(&self) -> impl Iterator<Item = (&'static str, u64)> {
        self.iter().filter(|(name, _)| {
            !matches!(
                *name,
                "placed"
                    | "bytes_placed"
                    | "bytes_discarded"
                    | "no_payload"
                    | "unknown_flow"
                    | "csum_partial"
            )
        })
    }

    /// Counts a parse failure in its bucket.
    pub fn count_parse_error(&mut self, e: &WireError) {
        let c = match e {
            WireError::TruncatedEthernet { .. } => &mut self.truncated_ethernet,
            WireError::NotIp { .. } => &mut self.not_ip,
            WireError::MalformedIpv4 { .. } => &mut self.malformed_ipv4,
            WireError::MalformedIpv6 { .. } => &mut self.malformed_ipv6,
            WireError::Ipv6ExtensionHeader { .. } => &mut self.ipv6_extension,
            WireError::BadIpv6Address { .. } => &mut self.bad_ipv6_address,
            WireError::BadIpVersion { .. } => &mut self.bad_ip_version,
            WireError::BadIpChecksum { .. } => &mut self.bad_ip_checksum,
            WireError::Fragment { .. } => &mut self.fragment,
            WireError::UnsupportedProtocol { .. } => &mut self.unsupported_protocol,
            WireError::MalformedTcp { .. } => &mut self.malformed_tcp,
            WireError::MalformedUdp { .. } => &mut self.malformed_udp,
            WireError::SplitHeaders { .. } => &mut self.split_headers,
        };
        *c += 1;
    }

    /// Counts a placement outcome in its bucket.
    pub fn count_verdict(&mut self, v: Verdict) {
        let c = match v {
            Verdict::Placed => &mut self.placed,
            Verdict::Trimmed => &mut self.trimmed,
            Verdict::Duplicate => &mut self.duplicate,
            Verdict::BeyondPosted => &mut self.beyond_posted,
            Verdict::BadChecksum => &mut self.bad_checksum,
            Verdict::NoPayload => &mut self.no_payload,
            Verdict::SynPayloadIgnored => &mut self.syn_payload_ignored,
            Verdict::PlacedSetFull => &mut self.placed_set_full,
            Verdict::Unsynchronized => &mut self.unsynchronized,
            Verdict::Unacceptable => &mut self.unacceptable_flags,
        };
        *c += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iter_names_every_bucket_once() {
        let mut c = RxCounters::default();
        c.count_verdict(Verdict::BadChecksum);
        let ext = WireError::Ipv6ExtensionHeader { next_header: 0 };
        c.count_parse_error(&ext);
        c.count_parse_error(&ext);
        let v: Vec<_> = c.iter().filter(|(_, n)| *n > 0).collect();
        assert_eq!(v, vec![("bad_checksum", 1), ("ipv6_extension", 2)]);
        let names: std::collections::HashSet<_> = c.iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), c.iter().count());
    }

    #[test]
    fn drops_leave_out_successes_and_records_for_the_stack() {
        let mut c = RxCounters::default();
        c.count_verdict(Verdict::Placed);
        c.count_verdict(Verdict::NoPayload);
        c.count_verdict(Verdict::Duplicate);
        c.unknown_flow = 4;
        c.flow_table_full = 2;
        c.bytes_placed = 100;
        let v: Vec<_> = c.drops().filter(|(_, n)| *n > 0).collect();
        assert_eq!(v, vec![("duplicate", 1), ("flow_table_full", 2)]);
    }
}
