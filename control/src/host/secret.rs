//! The host's secret: 128 bits from the OS random number generator, drawn
//! once per process, and the two numbers keyed by it that an off-path
//! attacker must not guess:
//!
//! - initial sequence numbers, RFC 6528 §3: `ISN = M + F(localip,
//!   localport, remoteip, remoteport, secretkey)`, with `F` SipHash-2-4
//!   keyed by the secret and `M` a timer that ticks every 4 microseconds
//!   since the secret was drawn. Both connect and accept take their ISN
//!   from [`Secret::isn`]. (The smoltcp transport chooses its own ISNs from
//!   its internal generator; the host seeds that from the OS RNG, see
//!   [`os_random_u64`].)
//! - the per-destination offset and step of ephemeral ports, RFC 6056
//!   §3.3.4 and §3.3.5 ([`Secret::port_offset`], [`Secret::draw`]; the
//!   selection itself is in `ports.rs`).

use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use proto::FlowKey;
use siphasher::sip::SipHasher24;

use super::HostError;

/// One tick of the ISN clock, RFC 6528 §3 (the RFC 793 timer).
const ISN_TICK: Duration = Duration::from_micros(4);

/// A 128-bit key for SipHash-2-4 and the moment it was drawn (the origin
/// of the ISN clock).
#[derive(Clone)]
pub(crate) struct Secret {
    key: [u8; 16],
    epoch: Instant,
}

/// The key is never printed.
impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret").finish_non_exhaustive()
    }
}

impl Secret {
    /// This process's secret: drawn from the OS RNG on first use, the same
    /// for every host (queue) of the process afterwards.
    ///
    /// # Errors
    /// [`HostError::Random`] when the OS RNG fails.
    pub(crate) fn host() -> Result<Secret, HostError> {
        static HOST: OnceLock<Secret> = OnceLock::new();
        if let Some(s) = HOST.get() {
            return Ok(s.clone());
        }
        let mut key = [0u8; 16];
        getrandom::fill(&mut key).map_err(|e| HostError::Random(e.to_string()))?;
        Ok(HOST
            .get_or_init(|| Secret::with_key(key, Instant::now()))
            .clone())
    }

    /// A secret with a given key and clock origin (tests; two "hosts").
    pub(crate) fn with_key(key: [u8; 16], epoch: Instant) -> Secret {
        Secret { key, epoch }
    }

    /// SipHash-2-4 of `domain` and `parts` under the key. `domain` keeps
    /// the uses of the one key apart.
    fn hash(&self, domain: &[u8], parts: &[&[u8]]) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(domain);
        for p in parts {
            h.write(p);
        }
        h.finish()
    }

    /// The initial sequence number of the connection `key` opened at `at`
    /// (RFC 6528 §3). Two connections with the same 4-tuple get ISNs that
    /// grow with time by one per 4 µs; different 4-tuples get unrelated
    /// ones.
    pub(crate) fn isn(&self, key: &FlowKey, at: Instant) -> u32 {
        let (local, remote) = (octets(key.local_ip), octets(key.remote_ip));
        let f = self.hash(
            b"isn",
            &[
                local.as_slice(),
                &key.local_port.to_be_bytes(),
                remote.as_slice(),
                &key.remote_port.to_be_bytes(),
            ],
        ) as u32;
        let ticks = at.saturating_duration_since(self.epoch).as_nanos() / ISN_TICK.as_nanos();
        // M wraps modulo 2^32 like the sequence space.
        (ticks as u32).wrapping_add(f)
    }

    /// RFC 6056 §3.3.4 `F(local_IP, remote_IP, remote_port, secret_key)`:
    /// where the search for a local port towards this destination starts
    /// in the range, before the destination's counter is added.
    pub(crate) fn port_offset(&self, local: IpAddr, remote: SocketAddr) -> u32 {
        self.destination(b"port offset", local, remote) as u32
    }

    /// RFC 6056 §3.3.4 `G(...)`: which counter of the table serves this
    /// destination (the same inputs under another domain).
    pub(crate) fn port_bucket(&self, local: IpAddr, remote: SocketAddr) -> u64 {
        self.destination(b"port bucket", local, remote)
    }

    /// The keyed hash of a destination as RFC 6056 sees it: local address,
    /// remote address and port.
    fn destination(&self, domain: &[u8], local: IpAddr, remote: SocketAddr) -> u64 {
        self.hash(
            domain,
            &[
                octets(local).as_slice(),
                octets(remote.ip()).as_slice(),
                &remote.port().to_be_bytes(),
            ],
        )
    }

    /// The `n`-th number of a keyed stream (SipHash in counter mode):
    /// unpredictable without the key, reproducible with it.
    pub(crate) fn draw(&self, n: u64) -> u64 {
        self.hash(b"draw", &[&n.to_le_bytes()])
    }
}

/// 64 bits from the OS random number generator (smoltcp's seed).
///
/// # Errors
/// [`HostError::Random`] when the OS RNG fails.
pub(crate) fn os_random_u64() -> Result<u64, HostError> {
    getrandom::u64().map_err(|e| HostError::Random(e.to_string()))
}

/// An address's bytes (4 or 16), as the hashes take them.
fn octets(a: std::net::IpAddr) -> Vec<u8> {
    match a {
        std::net::IpAddr::V4(a) => a.octets().to_vec(),
        std::net::IpAddr::V6(a) => a.octets().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(remote_port: u16) -> FlowKey {
        FlowKey {
            remote_ip: [198, 18, 0, 2].into(),
            local_ip: [198, 18, 0, 1].into(),
            remote_port,
            local_port: 40000,
        }
    }

    #[test]
    fn different_four_tuples_get_unrelated_isns() {
        let t0 = Instant::now();
        let s = Secret::with_key(*b"0123456789abcdef", t0);
        let isns: Vec<u32> = (5000..5064).map(|p| s.isn(&key(p), t0)).collect();
        let mut sorted = isns.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), isns.len(), "no two tuples share an ISN");
        // Neighbouring ports give ISNs far apart (not a counter): on
        // average a quarter of the space; demand more than 2^20 for all
        // but a few pairs.
        let close = isns
            .windows(2)
            .filter(|w| w[0].wrapping_sub(w[1]).min(w[1].wrapping_sub(w[0])) < 1 << 20)
            .count();
        assert!(close <= 2, "{close} neighbouring tuples had close ISNs");
        // Every bit of the ISN varies across tuples.
        let (ones, zeros) = isns
            .iter()
            .fold((0u32, u32::MAX), |(o, z), &i| (o | i, z & i));
        assert_eq!((ones, zeros), (u32::MAX, 0), "all 32 bits vary");
    }

    #[test]
    fn the_same_tuple_later_gets_an_isn_larger_by_the_clock_term() {
        let t0 = Instant::now();
        let s = Secret::with_key(*b"0123456789abcdef", t0);
        let k = key(5001);
        let a = s.isn(&k, t0 + Duration::from_millis(3));
        let b = s.isn(
            &k,
            t0 + Duration::from_millis(3) + Duration::from_micros(400),
        );
        assert_eq!(b.wrapping_sub(a), 100, "400 µs = 100 ticks of 4 µs");
        let c = s.isn(&k, t0 + Duration::from_secs(2));
        assert_eq!(c.wrapping_sub(a), 499_250);
        // Before the epoch the clock term is 0, not a panic.
        let later = Secret::with_key(*b"0123456789abcdef", t0 + Duration::from_secs(1));
        assert_eq!(later.isn(&k, t0), s.isn(&k, t0));
    }

    #[test]
    fn two_hosts_with_different_secrets_choose_different_isns() {
        let t0 = Instant::now();
        let a = Secret::with_key(*b"0123456789abcdef", t0);
        let b = Secret::with_key(*b"0123456789abcdeg", t0);
        let differ = (5000..5032)
            .filter(|&p| a.isn(&key(p), t0) != b.isn(&key(p), t0))
            .count();
        assert_eq!(differ, 32);
        // The process's own secret comes from the OS RNG, once.
        let h1 = Secret::host().expect("OS RNG");
        let h2 = Secret::host().expect("OS RNG");
        assert_eq!(h1.key, h2.key);
        assert_ne!(h1.key, [0; 16]);
        assert_ne!(os_random_u64().unwrap(), os_random_u64().unwrap());
    }
}
