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

use std::fs::File;
use std::io::Write;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::run_dir::{RunDir, RunDirError};

/// The kernel's list of reserved ports (in the caller's namespace).
const SYSCTL: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";

/// The runtime directory when systemd does not name one; the state files
/// of every namespace live in its `reserved-ports`.
const RUN_DIR: &str = "/run/zerosplit";

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
    /// The runtime directory (`/run/zerosplit`, `$RUNTIME_DIRECTORY`).
    base: PathBuf,
    /// This namespace's directory in `base/reserved-ports`: `net-<inode>`.
    ns: String,
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

/// The longest state file read: every port listed one by one, alternate
/// ports ("1,3,5,…") is under 200 KiB.
const MAX_STATE_FILE: u64 = 256 << 10;

/// How long a reservation waits for the namespace's lock, which a live
/// holder keeps only for a read-modify-write of the list.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// New state file names tried when a name is taken (by a file planted
/// under our pid, or a stale one of an earlier process with our pid).
const NAME_TRIES: u64 = 1024;

/// The sequence number of the next state file name.
static SEQ: AtomicU64 = AtomicU64::new(0);

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
        let base = std::env::var_os("RUNTIME_DIRECTORY")
            .map_or_else(|| PathBuf::from(RUN_DIR), PathBuf::from);
        Ok(Registry {
            base,
            ns: format!("net-{id}"),
            sysctl: PathBuf::from(SYSCTL),
        })
    }

    /// Opens (creating) this namespace's state directory, every step
    /// checked ([`RunDir`]).
    fn open_dir(&self) -> std::io::Result<RunDir> {
        Ok(RunDir::base(&self.base)?
            .dir("reserved-ports")?
            .dir(&self.ns)?)
    }

    /// Takes the namespace's lock (released when the file drops), waiting
    /// at most [`LOCK_WAIT`].
    fn lock(dir: &RunDir) -> std::io::Result<File> {
        let f = dir.lock_file("lock")?;
        let path = dir.path().join("lock");
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match f.try_lock() {
                Ok(()) => return Ok(f),
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(at(
                        &path,
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("held by another process for {} s", LOCK_WAIT.as_secs()),
                        ),
                    ))
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(at(&path, e)),
            }
        }
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
    /// holders' ports (removing their files). A name that is not a
    /// regular file of ours (a symlink, a FIFO, …) is left alone and
    /// logged. Call with the lock held.
    fn scan(dir: &RunDir, skip: Option<&str>) -> std::io::Result<Holders> {
        let mut h = Holders::default();
        for name in dir.names()? {
            if !name.ends_with(".ports") || Some(name.as_str()) == skip {
                continue;
            }
            let (f, bytes) = match dir.read(&name, MAX_STATE_FILE) {
                Ok(r) => r,
                Err(e) => {
                    log::warn!("reserved ports: skipping {e}");
                    continue;
                }
            };
            let owned = std::str::from_utf8(&bytes)
                .ok()
                .and_then(PortSet::parse)
                .unwrap_or_default();
            match f.try_lock() {
                Ok(()) => {
                    h.dead = h.dead.union(&owned);
                    dir.remove(&name)?;
                }
                Err(std::fs::TryLockError::WouldBlock) => h.live = h.live.union(&owned),
                Err(std::fs::TryLockError::Error(e)) => return Err(at(&dir.path().join(&name), e)),
            }
        }
        Ok(h)
    }

    /// Creates a new state file `<pid>-<n>.ports`, never one that exists.
    fn create_state(dir: &RunDir) -> std::io::Result<(String, File)> {
        for _ in 0..NAME_TRIES {
            let name = format!(
                "{}-{}.ports",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            );
            match dir.create_new(&name) {
                Ok(f) => return Ok((name, f)),
                Err(e) if e.already_exists() => log::warn!("reserved ports: {e}"),
                Err(e) => return Err(e.into()),
            }
        }
        Err(at(
            dir.path(),
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{NAME_TRIES} state file names of this process are taken"),
            ),
        ))
    }

    /// Reserves `range`: see the module doc.
    fn reserve(&self, range: &RangeInclusive<u16>) -> std::io::Result<ReservedPorts> {
        let dir = self.open_dir()?;
        let _lock = Self::lock(&dir)?;
        let holders = Self::scan(&dir, None)?;
        let current = self.read_list()?.minus(&holders.dead.minus(&holders.live));
        let others = current.minus(&holders.live);
        let owned = PortSet::range(range).minus(&others);
        let (name, mut file) = Self::create_state(&dir)?;
        let path = dir.path().join(&name);
        file.try_lock().map_err(|e| at(&path, e.into()))?;
        file.write_all(owned.to_list().as_bytes())
            .map_err(|e| at(&path, e))?;
        if let Err(e) = self.write_list(&current.union(&PortSet::range(range))) {
            let _ = dir.remove(&name);
            return Err(e);
        }
        Ok(ReservedPorts {
            registry: self.clone(),
            dir,
            name,
            owned,
            file: Some(file),
        })
    }

    /// Takes back `owned` (and dead holders' ports), keeping what live
    /// holders own, and removes the state file `name`.
    fn release(&self, dir: &RunDir, name: &str, owned: &PortSet) -> std::io::Result<()> {
        let _lock = Self::lock(dir)?;
        let holders = Self::scan(dir, Some(name))?;
        let current = self.read_list()?;
        let gone = owned.union(&holders.dead).minus(&holders.live);
        self.write_list(&current.minus(&gone))?;
        match dir.remove(name) {
            Err(RunDirError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(())
            }
            r => Ok(r?),
        }
    }
}

/// Ports reserved from the kernel until this guard drops (or its process
/// dies: then the next reservation in the namespace takes them back).
#[derive(Debug)]
pub(crate) struct ReservedPorts {
    registry: Registry,
    /// The namespace's state directory, as opened when reserving.
    dir: RunDir,
    /// The state file's name in `dir`, locked while `file` is open.
    name: String,
    owned: PortSet,
    file: Option<File>,
}

impl ReservedPorts {
    /// Reserves `range` in the calling thread's network namespace.
    ///
    /// # Errors
    /// The state directory or the kernel's list could not be read or
    /// written, or a path under the runtime directory was refused (the
    /// error names the file).
    pub(crate) fn reserve(range: &RangeInclusive<u16>) -> std::io::Result<ReservedPorts> {
        Registry::here()?.reserve(range)
    }
}

impl Drop for ReservedPorts {
    fn drop(&mut self) {
        // Our own file stays locked until it is removed: the release skips
        // it by name, and no other holder can take it for a dead one.
        if let Err(e) = self.registry.release(&self.dir, &self.name, &self.owned) {
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
        registry_in(&dir.join("run"), &sysctl)
    }

    fn registry_in(base: &Path, sysctl: &Path) -> Registry {
        Registry {
            base: base.to_path_buf(),
            ns: "net-test".into(),
            sysctl: sysctl.to_path_buf(),
        }
    }

    fn state_dir(r: &Registry) -> PathBuf {
        r.base.join("reserved-ports").join(&r.ns)
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

    /// A runtime directory as the shipped unit leaves it: `run` under a
    /// fresh temporary directory, its namespace directory made, owned by
    /// `owner` (systemd's `RuntimeDirectory=` gives it to the service's
    /// user); the kernel's list stands outside it. Returns the registry and
    /// the namespace directory, where an attacker owning `run` plants.
    fn planted(name: &str, owner: Option<u32>) -> (Registry, PathBuf) {
        let tmp = std::env::temp_dir().join(format!("zs-plant-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let base = tmp.join("run");
        let ns = base.join("reserved-ports").join("net-test");
        std::fs::create_dir_all(&ns).unwrap();
        std::fs::write(tmp.join("sysctl"), "\n").unwrap();
        if let Some(uid) = owner {
            for d in [&base, &base.join("reserved-ports"), &ns] {
                std::os::unix::fs::chown(d, Some(uid), Some(uid)).unwrap();
            }
        }
        (registry_in(&base, &tmp.join("sysctl")), ns)
    }

    /// Runs `f` on a thread and waits at most `secs` for it: a test of
    /// "does not block" fails instead of hanging.
    fn within<T: Send + 'static>(
        secs: u64,
        what: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(secs))
            .unwrap_or_else(|_| panic!("{what} did not return within {secs} s: it blocked"))
    }

    fn mkfifo(path: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo")
            .success();
        assert!(ok, "mkfifo {}", path.display());
    }

    const NOBODY: u32 = 65534;

    #[test]
    fn a_planted_lock_symlink_is_never_followed() {
        let (r, ns) = planted("locklink", Some(NOBODY));
        let target = ns
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .with_file_name("created-by-root");
        std::os::unix::fs::symlink(&target, ns.join("lock")).unwrap();
        let res = within(10, "reserve", move || r.reserve(&(40000..=40009)).map(die));
        assert!(
            !target.exists(),
            "root created the symlink's target {}",
            target.display()
        );
        let e = res.expect_err("a symlinked lock is refused");
        assert!(
            e.to_string().contains("net-test/lock") && e.to_string().contains("symbolic link"),
            "{e}"
        );
    }

    #[test]
    fn a_planted_ports_symlink_is_neither_followed_nor_truncated() {
        let (r, ns) = planted("portslink", Some(NOBODY));
        // A file some live process holds locked (a dpkg lock, say): the
        // scan takes it for a live holder's and leaves the link in place.
        let victim = ns
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .with_file_name("victim");
        std::fs::write(&victim, "precious").unwrap();
        let held = File::open(&victim).unwrap();
        held.lock().unwrap();
        for n in 0..100 {
            let link = ns.join(format!("{}-{n}.ports", std::process::id()));
            std::os::unix::fs::symlink(&victim, link).unwrap();
        }
        let res = within(10, "reserve", move || r.reserve(&(40000..=40009)).map(die));
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "root wrote through a planted symlink"
        );
        res.expect("a fresh state file is made beside the planted links");
    }

    #[test]
    fn a_fifo_lock_does_not_block() {
        let (r, ns) = planted("fifolock", Some(NOBODY));
        mkfifo(&ns.join("lock"));
        let e = within(10, "reserve", move || r.reserve(&(40000..=40009)).map(die))
            .expect_err("a FIFO lock is refused");
        assert!(
            e.to_string().contains("net-test/lock") && e.to_string().contains("FIFO"),
            "{e}"
        );
    }

    #[test]
    fn a_fifo_ports_file_does_not_block() {
        let (r, ns) = planted("fifoports", Some(NOBODY));
        mkfifo(&ns.join("1-0.ports"));
        within(10, "reserve", move || r.reserve(&(40000..=40009)).map(die))
            .expect("the FIFO is skipped");
        assert!(ns.join("1-0.ports").exists(), "left for its owner");
    }

    // Before the fix this test reads /dev/zero without end: run it alone
    // under `ulimit -v` to watch it fail.
    #[test]
    fn a_ports_symlink_to_dev_zero_does_not_block() {
        let (r, ns) = planted("devzero", Some(NOBODY));
        std::os::unix::fs::symlink("/dev/zero", ns.join("2-0.ports")).unwrap();
        within(10, "reserve", move || r.reserve(&(40000..=40009)).map(die))
            .expect("the link is skipped");
        assert!(
            ns.join("2-0.ports").symlink_metadata().is_ok(),
            "the link was read (/dev/zero, without end) and taken for a dead holder's file"
        );
    }

    #[test]
    fn run_dirs_writable_by_others_or_owned_by_a_stranger_are_refused() {
        let (r, ns) = planted("perm", None);
        let base = ns.parent().unwrap().parent().unwrap().to_path_buf();
        std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let e = r
            .reserve(&(40000..=40009))
            .map(die)
            .expect_err("0777 is refused");
        assert!(
            e.to_string().contains(&format!("{}:", base.display()))
                && e.to_string().contains("writable by group or others"),
            "{e}"
        );
        std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let sub = base.join("reserved-ports");
        std::os::unix::fs::chown(&sub, Some(NOBODY), Some(NOBODY)).unwrap();
        let e = r
            .reserve(&(40000..=40009))
            .map(die)
            .expect_err("a stranger's dir is refused");
        assert!(
            e.to_string().contains("reserved-ports:")
                && e.to_string().contains("owned by uid 65534"),
            "{e}"
        );
    }

    #[test]
    fn root_shares_the_service_users_run_dir_and_leaves_it_theirs() {
        let (r, ns) = planted("shared", Some(NOBODY));
        let base = ns.parent().unwrap().parent().unwrap().to_path_buf();
        std::fs::remove_dir_all(base.join("reserved-ports")).unwrap();
        let guard = r
            .reserve(&(40000..=40009))
            .expect("root uses the service's directory");
        for d in [base.join("reserved-ports"), ns.clone()] {
            let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&d).unwrap());
            assert_eq!(uid, NOBODY, "{} stays the service user's", d.display());
        }
        drop(guard);
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
        let files: Vec<_> = std::fs::read_dir(state_dir(&r))
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
        let blocked = registry_in(&r.sysctl.join("run"), &r.sysctl);
        let e = blocked.reserve(&(1..=2)).unwrap_err();
        assert!(e.to_string().contains("sysctl/run"), "{e}");
    }
}
