//! Linux's `struct tcp_info` (`<linux/tcp.h>`), the layout both ways: the
//! socket shim writes it for programs that ask our sockets for `TCP_INFO`
//! (`shim/src/sockopt.rs`), and the CC lab reads it from Linux's own sockets to
//! set Linux's controllers beside ours ([`LinuxTcpInfo::parse`] over the
//! bytes `getsockopt` gave).
//!
//! Offsets are the kernel's (stable ABI; fields are only ever appended).
//! [`LEN`] covers the struct through `tcpi_snd_wnd`.

use std::time::Duration;

/// Bytes of `struct tcp_info` through `tcpi_snd_wnd`.
pub const LEN: usize = 232;

/// Byte offsets of the fields zerosplit writes or reads.
pub mod off {
    /// `tcpi_state` (u8).
    pub const STATE: usize = 0;
    /// `tcpi_ca_state` (u8).
    pub const CA_STATE: usize = 1;
    /// `tcpi_options` (u8).
    pub const OPTIONS: usize = 5;
    /// `tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4` (u8).
    pub const WSCALE: usize = 6;
    /// `tcpi_rto`, µs (u32).
    pub const RTO: usize = 8;
    /// `tcpi_snd_mss` (u32).
    pub const SND_MSS: usize = 16;
    /// `tcpi_rcv_mss` (u32).
    pub const RCV_MSS: usize = 20;
    /// `tcpi_unacked`, segments (u32).
    pub const UNACKED: usize = 24;
    /// `tcpi_pmtu` (u32).
    pub const PMTU: usize = 60;
    /// `tcpi_rtt`, smoothed, µs (u32).
    pub const RTT: usize = 68;
    /// `tcpi_rttvar`, µs (u32).
    pub const RTTVAR: usize = 72;
    /// `tcpi_snd_ssthresh`, segments (u32).
    pub const SND_SSTHRESH: usize = 76;
    /// `tcpi_snd_cwnd`, segments (u32).
    pub const SND_CWND: usize = 80;
    /// `tcpi_advmss` (u32).
    pub const ADVMSS: usize = 84;
    /// `tcpi_total_retrans`, segments (u32).
    pub const TOTAL_RETRANS: usize = 100;
    /// `tcpi_pacing_rate`, bytes/s (u64).
    pub const PACING_RATE: usize = 104;
    /// `tcpi_max_pacing_rate`, bytes/s (u64).
    pub const MAX_PACING_RATE: usize = 112;
    /// `tcpi_bytes_acked` (u64).
    pub const BYTES_ACKED: usize = 120;
    /// `tcpi_bytes_received` (u64).
    pub const BYTES_RECEIVED: usize = 128;
    /// `tcpi_segs_out` (u32).
    pub const SEGS_OUT: usize = 136;
    /// `tcpi_segs_in` (u32).
    pub const SEGS_IN: usize = 140;
    /// `tcpi_min_rtt`, µs (u32).
    pub const MIN_RTT: usize = 148;
    /// `tcpi_delivery_rate`, bytes/s (u64).
    pub const DELIVERY_RATE: usize = 160;
    /// `tcpi_snd_wnd`, bytes (u32).
    pub const SND_WND: usize = 228;
}

/// The `tcp_info` fields a controller comparison needs, from a Linux
/// socket.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinuxTcpInfo {
    /// `tcpi_ca_state`: 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss.
    pub ca_state: u8,
    /// Sender MSS, bytes.
    pub snd_mss: u32,
    /// Congestion window, bytes (segments × MSS).
    pub cwnd: u64,
    /// Slow-start threshold, bytes; `None` while unset (Linux reports
    /// `TCP_INFINITE_SSTHRESH`).
    pub ssthresh: Option<u64>,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Smallest RTT seen.
    pub min_rtt: Duration,
    /// Pacing rate, bytes/s (`None` when unlimited).
    pub pacing_rate: Option<u64>,
    /// Delivery rate of the last sample, bytes/s.
    pub delivery_rate: u64,
    /// Bytes in flight (unacknowledged segments × MSS).
    pub bytes_in_flight: u64,
    /// Bytes acknowledged.
    pub bytes_acked: u64,
    /// Segments sent, retransmissions included.
    pub segs_out: u64,
    /// Segments retransmitted.
    pub total_retrans: u64,
}

impl LinuxTcpInfo {
    /// Parses the kernel's bytes (`b` as `getsockopt` filled it; missing
    /// trailing fields read as 0).
    pub fn parse(b: &[u8]) -> LinuxTcpInfo {
        let u32_at = |at: usize| {
            b.get(at..at + 4)
                .map_or(0, |s| u32::from_ne_bytes(s.try_into().unwrap_or([0; 4])))
        };
        let u64_at = |at: usize| {
            b.get(at..at + 8)
                .map_or(0, |s| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])))
        };
        let mss = u64::from(u32_at(off::SND_MSS));
        let ssthresh = u32_at(off::SND_SSTHRESH);
        let pacing = u64_at(off::PACING_RATE);
        LinuxTcpInfo {
            ca_state: b.get(off::CA_STATE).copied().unwrap_or(0),
            snd_mss: mss as u32,
            cwnd: u64::from(u32_at(off::SND_CWND)) * mss,
            // Linux's TCP_INFINITE_SSTHRESH is 0x7fffffff segments.
            ssthresh: (ssthresh < 0x7fff_ffff).then_some(u64::from(ssthresh) * mss),
            srtt: Duration::from_micros(u64::from(u32_at(off::RTT))),
            min_rtt: Duration::from_micros(u64::from(u32_at(off::MIN_RTT))),
            pacing_rate: (pacing != u64::MAX).then_some(pacing),
            delivery_rate: u64_at(off::DELIVERY_RATE),
            bytes_in_flight: u64::from(u32_at(off::UNACKED)) * mss,
            bytes_acked: u64_at(off::BYTES_ACKED),
            segs_out: u64::from(u32_at(off::SEGS_OUT)),
            total_retrans: u64::from(u32_at(off::TOTAL_RETRANS)),
        }
    }

    /// The recovery state's name: "open", "disorder", "cwr", "recovery",
    /// "loss".
    pub fn ca_state_name(&self) -> &'static str {
        match self.ca_state {
            0 => "open",
            1 => "disorder",
            2 => "cwr",
            3 => "recovery",
            4 => "loss",
            _ => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_odd_buffers_parse_without_panicking() {
        let empty = LinuxTcpInfo::parse(&[]);
        assert_eq!(
            (empty.cwnd, empty.segs_out, empty.pacing_rate),
            (0, 0, Some(0))
        );
        assert_eq!(LinuxTcpInfo::parse(&[1, 4]).ca_state_name(), "loss");
        let mut b = [0u8; LEN];
        b[off::SND_MSS..off::SND_MSS + 4].copy_from_slice(&1000u32.to_ne_bytes());
        b[off::SND_CWND..off::SND_CWND + 4].copy_from_slice(&10u32.to_ne_bytes());
        b[off::SND_SSTHRESH..off::SND_SSTHRESH + 4].copy_from_slice(&0x7fff_ffffu32.to_ne_bytes());
        let i = LinuxTcpInfo::parse(&b);
        assert_eq!((i.cwnd, i.ssthresh), (10_000, None));
    }
}
