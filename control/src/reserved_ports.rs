//! The ephemeral ports a host reserves from the kernel
//! (`net.ipv4.ip_local_reserved_ports`, one list per network namespace),
//! so the kernel's own sockets never pick a port whose packets the XDP
//! program steers to us, and how the reservation survives a crash.
//!
//! A reservation ([`ReservedPorts`]) is recorded in a state file,
//! `/run/zerosplit/reserved-ports/net-<netns inode>/<pid>-<n>.ports`
//! (`$RUNTIME_DIRECTORY/reserved-ports/…` when systemd sets it),
//! which its holder keeps open with an exclusive `flock` for its whole
//! life. The kernel drops that lock when the holder dies, however it dies
//! (kill -9 included), so a state file whose lock can be taken belongs to
//! a dead holder. Every reservation and release, under the directory's own
//! lock file:
//!
//! 1. takes back the ports of dead holders (their state files are removed),
//! 2. never takes back a port that a live holder owns, nor one that was
//!    reserved by someone else (the administrator) before any of us,
//! 3. writes the new list.
//!
//! A holder *owns* the ports of its range that were not reserved by
//! someone else when it started. So a crashed stack's reservation is
//! undone by the next stack that starts (or stops) in the same namespace,
//! concurrent live stacks never disturb one another, and ports reserved
//! by hand stay reserved.
//!
//! Limitation: a namespace inode can be reused after its namespace is
//! gone; a dead holder's file from the old namespace then makes the next
//! stack in the new one take back those ports if something other than a
//! zerosplit stack reserved them there in the meantime.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The kernel's list of reserved ports (in the caller's namespace).
const SYSCTL: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";

/// Where the state files of every namespace live.
const STATE_DIR: &str = "/run/zerosplit/reserved-ports";

/// A set of ports, one bit each.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PortSet(Box<[u64; 1024]>);

impl std::fmt::Debug for PortSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PortSet({})", self.to_list())
    }
}

impl Default for PortSet {
    fn default() -> Self {
        PortSet(Box::new([0; 1024]))
    }
}

impl PortSet {
    fn range(r: &RangeInclusive<u16>) -> PortSet {
        let mut s = PortSet::default();
        for p in r.clone() {
            s.insert(p);
        }
        s
    }

    fn insert(&mut self, p: u16) {
        self.0[usize::from(p / 64)] |= 1 << (p % 64);
    }

    fn contains(&self, p: u16) -> bool {
        self.0[usize::from(p / 64)] & (1 << (p % 64)) != 0
    }

    fn union(&self, o: &PortSet) -> PortSet {
        self.zip(o, |a, b| a | b)
    }

    fn minus(&self, o: &PortSet) -> PortSet {
        self.zip(o, |a, b| a & !b)
    }

    fn zip(&self, o: &PortSet, f: impl Fn(u64, u64) -> u64) -> PortSet {
        let mut s = PortSet::default();
        for (i, w) in s.0.iter_mut().enumerate() {
            *w = f(self.0[i], o.0[i]);
        }
        s
    }

    /// Parses the kernel's list form, `1000-1005,2000` (empty: no port).
    fn parse(text: &str) -> Option<PortSet> {
        let mut s = PortSet::default();
        for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b): (u16, u16) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            if a > b {
                return None;
            }
            for p in a..=b {
                s.insert(p);
            }
        }
        Some(s)
    }

    /// The kernel's list form: ranges in order, comma-separated.
    fn to_list(&self) -> String {
        let mut parts = Vec::new();
        let mut p: u32 = 0;
        while p <= u32::from(u16::MAX) {
            if !self.contains(p as u16) {
                p += 1;
                continue;
            }
            let a = p;
            while p < u32::from(u16::MAX) && self.contains(p as u16 + 1) {
                p += 1;
            }
            parts.push(if a == p {
                a.to_string()
            } else {
                format!("{a}-{p}")
            });
            p += 1;
        }
        parts.join(",")
    }
}

/// The files one namespace's reservations go through (paths are
/// parameters so tests can use a temporary directory and a fake list).
#[derive(Debug, Clone)]
struct Registry {
    /// This namespace's directory of state files.
    dir: PathBuf,
    /// The kernel's list (or a stand-in).
    sysctl: PathBuf,
}

/// What one pass over the state files found.
#[derive(Debug, Default)]
struct Holders {
    /// Ports owned by live holders (other than the caller).
    live: PortSet,
    /// Ports owned by dead holders, whose files were removed.
    dead: PortSet,
}

/// An I/O error that names the file.
fn at(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

impl Registry {
    /// The registry of the calling thread's network namespace.
    fn here() -> std::io::Result<Registry> {
        let ns = Path::new("/proc/thread-self/ns/net");
        let link = std::fs::read_link(ns).map_err(|e| at(ns, e))?;
        // "net:[4026531840]" -> "net-4026531840"
        let id: String = link
            .to_string_lossy()
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        // A service that systemd gives a runtime directory
        // (`RuntimeDirectory=zerosplit`, the shipped unit) keeps its state
        // there: the same /run/zerosplit, but owned by the service's user.
        let base = std::env::var_os("RUNTIME_DIRECTORY").map_or_else(
            || PathBuf::from(STATE_DIR),
            |d| PathBuf::from(d).join("reserved-ports"),
        );
        Ok(Registry {
            dir: base.join(format!("net-{id}")),
            sysctl: PathBuf::from(SYSCTL),
        })
    }

    /// Takes the namespace's lock (released when the file drops).
    fn lock(&self) -> std::io::Result<File> {
        std::fs::create_dir_all(&self.dir).map_err(|e| at(&self.dir, e))?;
        let path = self.dir.join("lock");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| at(&path, e))?;
        f.lock().map_err(|e| at(&path, e))?;
        Ok(f)
    }

    fn read_list(&self) -> std::io::Result<PortSet> {
        let text = std::fs::read_to_string(&self.sysctl).map_err(|e| at(&self.sysctl, e))?;
        PortSet::parse(&text).ok_or_else(|| {
            at(
                &self.sysctl,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not a port list: {text:?}"),
                ),
            )
        })
    }

    fn write_list(&self, set: &PortSet) -> std::io::Result<()> {
        let list = set.to_list();
        // The kernel takes "\n" as the empty list.
        let text = if list.is_empty() { "\n".into() } else { list };
        std::fs::write(&self.sysctl, text).map_err(|e| at(&self.sysctl, e))
    }

    /// Reads every state file but `skip`: live holders' ports, and dead
    /// holders' ports (removing their files). Call with the lock held.
    fn scan(&self, skip: Option<&Path>) -> std::io::Result<Holders> {
        let mut h = Holders::default();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| at(&self.dir, e))?;
        for entry in entries {
            let path = entry.map_err(|e| at(&self.dir, e))?.path();
            if path.extension().is_none_or(|x| x != "ports") || Some(path.as_path()) == skip {
                continue;
            }
            let Ok(mut f) = File::open(&path) else {
                continue;
            };
            let mut text = String::new();
            let owned = f
                .read_to_string(&mut text)
                .ok()
                .and_then(|_| PortSet::parse(&text))
                .unwrap_or_default();
            match f.try_lock() {
                Ok(()) => {
                    h.dead = h.dead.union(&owned);
                    std::fs::remove_file(&path).map_err(|e| at(&path, e))?;
                }
                Err(std::fs::TryLockError::WouldBlock) => h.live = h.live.union(&owned),
                Err(std::fs::TryLockError::Error(e)) => return Err(at(&path, e)),
            }
        }
        Ok(h)
    }

    /// Reserves `range`: see the module doc.
    fn reserve(&self, range: &RangeInclusive<u16>) -> std::io::Result<ReservedPorts> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let _lock = self.lock()?;
        let holders = self.scan(None)?;
        let current = self.read_list()?.minus(&holders.dead.minus(&holders.live));
        let others = current.minus(&holders.live);
        let owned = PortSet::range(range).minus(&others);
        let name = format!(
            "{}-{}.ports",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.dir.join(name);
        let mut file = File::create(&path).map_err(|e| at(&path, e))?;
        file.try_lock().map_err(|e| at(&path, e.into()))?;
        file.write_all(owned.to_list().as_bytes())
            .map_err(|e| at(&path, e))?;
        if let Err(e) = self.write_list(&current.union(&PortSet::range(range))) {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(ReservedPorts {
            registry: self.clone(),
            path,
            owned,
            file: Some(file),
        })
    }

    /// Takes back `owned` (and dead holders' ports), keeping what live
    /// holders own, and removes `path`.
    fn release(&self, path: &Path, owned: &PortSet) -> std::io::Result<()> {
        let _lock = self.lock()?;
        let holders = self.scan(Some(path))?;
        let current = self.read_list()?;
        let gone = owned.union(&holders.dead).minus(&holders.live);
        self.write_list(&current.minus(&gone))?;
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(at(path, e)),
            _ => Ok(()),
        }
    }
}

/// Ports reserved from the kernel until this guard drops (or its process
/// dies: then the next reservation in the namespace takes them back).
#[derive(Debug)]
pub(crate) struct ReservedPorts {
    registry: Registry,
    /// The state file, locked while `file` is open.
    path: PathBuf,
    owned: PortSet,
    file: Option<File>,
}

impl ReservedPorts {
    /// Reserves `range` in the calling thread's network namespace.
    ///
    /// # Errors
    /// The state directory or the kernel's list could not be read or
    /// written (the error names the file).
    pub(crate) fn reserve(range: &RangeInclusive<u16>) -> std::io::Result<ReservedPorts> {
        Registry::here()?.reserve(range)
    }
}

impl Drop for ReservedPorts {
    fn drop(&mut self) {
        // Our own file stays locked until it is removed: the release skips
        // it by name, and no other holder can take it for a dead one.
        if let Err(e) = self.registry.release(&self.path, &self.owned) {
            log::warn!("releasing reserved ports {:?}: {e}", self.owned);
        }
        self.file = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(name: &str) -> Registry {
        let dir = std::env::temp_dir().join(format!("zs-reserved-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sysctl = dir.join("sysctl");
        std::fs::write(&sysctl, "\n").unwrap();
        Registry {
            dir: dir.join("state"),
            sysctl,
        }
    }

    fn list(r: &Registry) -> String {
        std::fs::read_to_string(&r.sysctl)
            .unwrap()
            .trim()
            .to_string()
    }

    /// What a kill -9 does: the state file's lock goes, its file stays,
    /// nothing else runs.
    fn die(mut guard: ReservedPorts) {
        guard.file = None;
        std::mem::forget(guard);
    }

    #[test]
    fn port_lists_parse_and_print_like_the_kernel() {
        let s = PortSet::parse("1000-1005,2000, 65535\n").unwrap();
        assert_eq!(s.to_list(), "1000-1005,2000,65535");
        assert_eq!(PortSet::parse("").unwrap().to_list(), "");
        assert_eq!(PortSet::parse("\n").unwrap(), PortSet::default());
        assert_eq!(PortSet::range(&(0..=65535)).to_list(), "0-65535");
        assert!(PortSet::parse("5-3").is_none());
        assert!(PortSet::parse("x").is_none());
        assert!(PortSet::parse("70000").is_none());
    }

    #[test]
    fn a_dead_holders_ports_are_taken_back_by_the_next_reservation() {
        let r = registry("dead");
        die(r.reserve(&(40000..=40999)).unwrap());
        assert_eq!(list(&r), "40000-40999", "a crash leaves the list modified");
        let next = r.reserve(&(41000..=41009)).unwrap();
        assert_eq!(list(&r), "41000-41009", "the dead holder's ports are gone");
        drop(next);
        assert_eq!(list(&r), "");
        let files: Vec<_> = std::fs::read_dir(&r.dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "ports"))
            .collect();
        assert!(files.is_empty(), "no state file left: {files:?}");
    }

    #[test]
    fn a_restart_on_the_same_range_then_a_clean_stop_restores_the_list() {
        let r = registry("restart");
        std::fs::write(&r.sysctl, "5555\n").unwrap();
        die(r.reserve(&(40000..=40999)).unwrap());
        let again = r.reserve(&(40000..=40999)).unwrap();
        assert_eq!(list(&r), "5555,40000-40999");
        drop(again);
        assert_eq!(list(&r), "5555", "the administrator's port stays");
    }

    #[test]
    fn live_holders_keep_their_ports_whoever_stops_first() {
        let r = registry("live");
        std::fs::write(&r.sysctl, "40500").unwrap();
        let a = r.reserve(&(40000..=40999)).unwrap();
        let b = r.reserve(&(40900..=41099)).unwrap();
        assert_eq!(list(&r), "40000-41099");
        drop(a);
        assert_eq!(
            list(&r),
            "40500,40900-41099",
            "b's ports and the admin's stay"
        );
        let c = r.reserve(&(40000..=40099)).unwrap();
        drop(b);
        assert_eq!(list(&r), "40000-40099,40500");
        drop(c);
        assert_eq!(list(&r), "40500");
    }

    #[test]
    fn a_bad_list_or_directory_is_an_error_naming_the_file() {
        let r = registry("bad");
        std::fs::write(&r.sysctl, "not ports").unwrap();
        let e = r.reserve(&(1..=2)).unwrap_err();
        assert!(
            e.to_string().contains("sysctl") && e.to_string().contains("not a port list"),
            "{e}"
        );
        let blocked = Registry {
            dir: r.sysctl.join("state"),
            sysctl: r.sysctl.clone(),
        };
        let e = blocked.reserve(&(1..=2)).unwrap_err();
        assert!(e.to_string().contains("sysctl/state"), "{e}");
    }
}
