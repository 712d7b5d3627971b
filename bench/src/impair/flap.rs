//! Link flaps: an interface of a namespace taken down (`ip link set down`)
//! for a while, every so often, by a thread of its own ([`Flapper`]),
//! with the times each flap began and ended kept for the caller (a soak
//! measures how soon traffic resumes after the link returns).
//!
//! Taking one end of a veth pair down takes the carrier of the other end
//! with it: flapping the hop's `rb` cuts the R—B wire both ways. The
//! forwarder keeps running across a flap (its sockets report `ENETDOWN`
//! once, counted as `link_down`).

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::spec::{duration, SpecError};
use zerosplit_lab::{HarnessError, LinkSetup};

/// How often and for how long the link goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlapConfig {
    /// Time from one flap's start to the next's.
    pub every: Duration,
    /// How long the link stays down each time.
    pub down_for: Duration,
}

impl FromStr for FlapConfig {
    type Err = SpecError;

    /// `EVERY:DOWN`, e.g. `3s:500ms` (each at most 10 s, DOWN below EVERY).
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let (every, down) = s.split_once(':').ok_or_else(|| SpecError::BadValue {
            key: "flap",
            value: s.into(),
            expected: "EVERY:DOWN, e.g. 3s:500ms",
        })?;
        let cfg = FlapConfig {
            every: duration("flap", every)?,
            down_for: duration("flap", down)?,
        };
        if cfg.down_for.is_zero() || cfg.down_for >= cfg.every {
            return Err(SpecError::BadValue {
                key: "flap",
                value: s.into(),
                expected: "a down time above 0 and below the period, e.g. 3s:500ms",
            });
        }
        Ok(cfg)
    }
}

/// One flap: when the link went down and when it came back up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flap {
    /// `ip link set down` returned.
    pub down: Instant,
    /// `ip link set up` returned (`None` while still down).
    pub up: Option<Instant>,
}

/// Flaps one interface until stopped or dropped; the link is left up.
#[derive(Debug)]
pub struct Flapper {
    stop: Arc<AtomicBool>,
    flaps: Arc<Mutex<Vec<Flap>>>,
    handle: Option<JoinHandle<Result<(), HarnessError>>>,
}

/// `ip -n NETNS link set dev IFNAME up|down`, over rtnetlink.
fn set_link(netns: &str, ifname: &str, state: &str) -> Result<(), HarnessError> {
    zerosplit_lab::run_in(netns, &format!("setting {ifname} {state}"), || {
        datapath::rtnl::Rtnl::open()?.set_link_up(ifname, state == "up")
    })
}

impl Flapper {
    /// Starts flapping `ifname` in namespace `netns` (the first flap one
    /// period from now).
    pub fn start(netns: &str, ifname: &str, cfg: FlapConfig) -> Flapper {
        let stop = Arc::new(AtomicBool::new(false));
        let flaps = Arc::new(Mutex::new(Vec::new()));
        let (s, f) = (Arc::clone(&stop), Arc::clone(&flaps));
        let (netns, ifname) = (netns.to_owned(), ifname.to_owned());
        let handle = thread::spawn(move || {
            let sleep_until = |t: Instant| {
                while Instant::now() < t && !s.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(5).min(t - Instant::now()));
                }
            };
            let mut next = Instant::now() + cfg.every;
            loop {
                sleep_until(next);
                if s.load(Ordering::Relaxed) {
                    return Ok(());
                }
                set_link(&netns, &ifname, "down")?;
                let down = Instant::now();
                f.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Flap { down, up: None });
                // Always brought back up, even when asked to stop meanwhile.
                let back = down + cfg.down_for;
                while Instant::now() < back {
                    thread::sleep(Duration::from_millis(2).min(back - Instant::now()));
                }
                set_link(&netns, &ifname, "up")?;
                if let Some(last) = f.lock().unwrap_or_else(|p| p.into_inner()).last_mut() {
                    last.up = Some(Instant::now());
                }
                next = down + cfg.every;
            }
        });
        Flapper {
            stop,
            flaps,
            handle: Some(handle),
        }
    }

    /// The flaps so far.
    pub fn flaps(&self) -> Vec<Flap> {
        self.flaps.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops flapping (the link is up afterwards) and returns every flap.
    ///
    /// # Errors
    /// Setting the link up or down failed.
    pub fn stop(mut self) -> Result<Vec<Flap>, HarnessError> {
        self.finish()?;
        Ok(self.flaps())
    }

    fn finish(&mut self) -> Result<(), HarnessError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(HarnessError::Invalid {
                what: "link flapper",
                detail: "its thread panicked".into(),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Flapper {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            log::error!("link flapper: {e}");
        }
    }
}

/// The longest time without progress that began or ended with the link
/// up: for every gap between consecutive progress instants, the part
/// after the last flap that ended inside it (or the whole gap when no flap
/// touched it). `progress` holds the instants bytes arrived, in order.
pub fn longest_stall_after_link_up(progress: &[Instant], flaps: &[Flap]) -> Duration {
    progress
        .windows(2)
        .map(|w| {
            let (t0, t1) = (w[0], w[1]);
            let from = flaps
                .iter()
                .filter(|f| f.down < t1)
                .map(|f| f.up.map_or(t1, |u| u.clamp(t0, t1)))
                .max()
                .map_or(t0, |u| u.max(t0));
            t1 - from
        })
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flap_spec_parses_and_a_down_time_at_or_above_the_period_is_refused() {
        let f: FlapConfig = "3s:500ms".parse().expect("parses");
        assert_eq!(f.every, Duration::from_secs(3));
        assert_eq!(f.down_for, Duration::from_millis(500));
        assert!("1s:1s".parse::<FlapConfig>().is_err());
        assert!("1s".parse::<FlapConfig>().is_err());
        assert!("1s:0ms".parse::<FlapConfig>().is_err());
    }

    #[test]
    fn a_stall_is_measured_from_the_link_coming_back() {
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        // Progress every 10 ms, then a gap 100 → 3100 ms; the link was down
        // 200 → 1200 ms: the stall after it returned is 1900 ms.
        let progress = [ms(90), ms(100), ms(3100), ms(3110)];
        let flaps = [Flap {
            down: ms(200),
            up: Some(ms(1200)),
        }];
        assert_eq!(
            longest_stall_after_link_up(&progress, &flaps),
            Duration::from_millis(1900)
        );
        // Without the flap, the whole gap counts.
        assert_eq!(
            longest_stall_after_link_up(&progress, &[]),
            Duration::from_millis(3000)
        );
        // A flap still down at the next progress leaves nothing to blame.
        let open = [Flap {
            down: ms(200),
            up: None,
        }];
        assert_eq!(
            longest_stall_after_link_up(&progress[1..3], &open),
            Duration::ZERO
        );
    }
}
