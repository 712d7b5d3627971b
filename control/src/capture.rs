//! Packet capture to a pcap file (`--pcap FILE`, `[capture] pcap`): a
//! [`FrameTap`] that writes every frame the datapath receives and sends,
//! cut to the snap length, with wall-clock timestamps, through the
//! `pcap-file` crate. `tcpdump -r FILE` and Wireshark read it.
//!
//! One file may serve several queues (each stack gets a clone; a lock
//! orders their writes). Writes are buffered (64 KiB); the file is complete
//! once every clone is dropped or [`PcapTap::finish`] was called. Capture is
//! for looking, not for speed: it costs a clock read and a copy per frame,
//! and nothing when off.
//!
//! The file holds whole payloads, so it is made private (mode 0600) and
//! new: [`PcapTap::create`] refuses a name that exists (a symlink
//! included, which is never followed), so a capture never truncates or
//! writes through what was there. [`PcapTap::replace`]
//! (`--pcap-overwrite`, `[capture] overwrite`) first removes the old name
//! (a symlink itself, not what it points to), then creates it the same way.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use datapath::capture::{Direction, FrameTap};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

/// Smallest and largest snap length accepted.
pub const SNAPLEN_RANGE: (u32, u32) = (64, 262_144);

/// Opening the capture file failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The snap length is out of range.
    #[error("snap length {0} is outside {min}..={max}", min = SNAPLEN_RANGE.0, max = SNAPLEN_RANGE.1)]
    Snaplen(u32),
    /// Something is already there (a file, a symlink, anything).
    #[error("capture file {}: exists; refusing to overwrite it (remove it, or pass --pcap-overwrite or set capture.overwrite = true)", .path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A directory is there: `replace` removes only files and symlinks.
    #[error("capture file {}: is a directory", .path.display())]
    Directory {
        /// The path.
        path: PathBuf,
    },
    /// The file could not be created or written.
    #[error("capture file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug)]
struct Inner {
    writer: Option<PcapWriter<BufWriter<File>>>,
    snaplen: u32,
    scratch: Vec<u8>,
    frames: u64,
    /// Frames not written because a write failed (counted, logged once).
    lost: u64,
}

/// A pcap file being written; clone it for each stack that shares it.
#[derive(Debug, Clone)]
pub struct PcapTap(Arc<Mutex<Inner>>);

impl PcapTap {
    /// Creates the new file `path` (mode 0600; never through a symlink,
    /// never over an existing file) and writes the pcap header (Ethernet,
    /// `snaplen`).
    ///
    /// # Errors
    /// Snap length out of range, the name exists, or the file cannot be
    /// created.
    pub fn create(path: &Path, snaplen: u32) -> Result<PcapTap, CaptureError> {
        use std::os::unix::fs::OpenOptionsExt;
        if !(SNAPLEN_RANGE.0..=SNAPLEN_RANGE.1).contains(&snaplen) {
            return Err(CaptureError::Snaplen(snaplen));
        }
        let file_err = |source| CaptureError::File {
            path: path.to_path_buf(),
            source,
        };
        // O_EXCL fails on any existing name, a dangling symlink included;
        // O_NOFOLLOW says so for a symlink on every kernel.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => CaptureError::Exists {
                    path: path.to_path_buf(),
                },
                _ => file_err(e),
            })?;
        let header = PcapHeader {
            snaplen,
            datalink: DataLink::ETHERNET,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(BufWriter::with_capacity(1 << 16, file), header)
            .map_err(|e| file_err(std::io::Error::other(e.to_string())))?;
        Ok(PcapTap(Arc::new(Mutex::new(Inner {
            writer: Some(writer),
            snaplen,
            scratch: Vec::with_capacity(snaplen as usize),
            frames: 0,
            lost: 0,
        }))))
    }

    /// Removes what is at `path` (a file, or a symlink itself: never what
    /// it points to), then [`create`](Self::create)s it.
    ///
    /// # Errors
    /// As `create`, or a directory is there, or it cannot be removed.
    pub fn replace(path: &Path, snaplen: u32) -> Result<PcapTap, CaptureError> {
        if !(SNAPLEN_RANGE.0..=SNAPLEN_RANGE.1).contains(&snaplen) {
            return Err(CaptureError::Snaplen(snaplen));
        }
        remove_old(path)?;
        PcapTap::create(path, snaplen)
    }

    /// A boxed clone, for [`crate::stack::Stack::set_capture`].
    pub fn tap(&self) -> Box<dyn FrameTap> {
        Box::new(self.clone())
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.lock().frames
    }

    /// Writes the buffered frames to the file and ends the capture (later
    /// frames are not written): for a process about to exit without
    /// dropping its stacks. Dropping the last clone does the same.
    ///
    /// # Errors
    /// The write failed.
    pub fn finish(&self) -> std::io::Result<()> {
        match self.lock().writer.take() {
            Some(w) => w.into_writer().flush(),
            None => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Removes what is at `path`, if anything, so that [`PcapTap::create`]
/// can make it anew: a file or a symlink (the link itself), not a
/// directory. For `exec`, whose program creates the file.
///
/// # Errors
/// A directory is there, or it cannot be removed.
pub fn remove_old(path: &Path) -> Result<(), CaptureError> {
    let err = |source| CaptureError::File {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(e)),
        Ok(m) if m.is_dir() => Err(CaptureError::Directory {
            path: path.to_path_buf(),
        }),
        Ok(_) => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(err(e)),
            _ => Ok(()),
        },
    }
}

impl FrameTap for PcapTap {
    fn frame(&mut self, _dir: Direction, parts: &[&[u8]]) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut g = self.lock();
        let inner = &mut *g;
        let orig: usize = parts.iter().map(|p| p.len()).sum();
        inner.scratch.clear();
        for p in parts {
            let room = inner.snaplen as usize - inner.scratch.len();
            inner.scratch.extend_from_slice(&p[..p.len().min(room)]);
        }
        let Some(w) = inner.writer.as_mut() else {
            inner.lost += 1;
            return;
        };
        let packet = PcapPacket::new(ts, orig.min(u32::MAX as usize) as u32, &inner.scratch);
        match w.write_packet(&packet) {
            Ok(_) => inner.frames += 1,
            Err(e) => {
                // A full disk must not stop the stack: stop capturing.
                log::warn!("packet capture stopped after {} frames: {e}", inner.frames);
                inner.writer = None;
                inner.lost += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("zs-pcap-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn an_existing_file_is_refused_and_left_as_it_was() {
        let dir = scratch("exists");
        let path = dir.join("t.pcap");
        std::fs::write(&path, "precious").unwrap();
        let e = PcapTap::create(&path, 64).expect_err("an existing file is refused");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
        assert!(
            e.to_string().contains("t.pcap") && e.to_string().contains("exists"),
            "{e}"
        );
    }

    #[test]
    fn a_symlink_is_never_followed() {
        let dir = scratch("link");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("a.pcap")).unwrap();
        assert!(PcapTap::create(&dir.join("a.pcap"), 64).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let target = dir.join("created-through-a-link");
        std::os::unix::fs::symlink(&target, dir.join("b.pcap")).unwrap();
        assert!(PcapTap::create(&dir.join("b.pcap"), 64).is_err());
        assert!(!target.exists(), "a dangling link's target was created");
    }

    #[test]
    fn the_capture_file_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("mode");
        let path = dir.join("t.pcap");
        drop(PcapTap::create(&path, 64).expect("create"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o600,
            "full payload must not be world-readable: {mode:o}"
        );
    }

    #[test]
    fn replace_removes_the_old_name_never_what_a_link_points_to() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("replace");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = dir.join("t.pcap");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        drop(PcapTap::replace(&path, 64).expect("replace"));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file(), "a new regular file");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), 24, "the pcap header alone");
        std::fs::create_dir(dir.join("d.pcap")).unwrap();
        assert!(matches!(
            PcapTap::replace(&dir.join("d.pcap"), 64),
            Err(CaptureError::Directory { .. })
        ));
    }

    #[test]
    fn frames_are_written_cut_to_the_snap_length_and_read_back() {
        let dir = scratch("frames");
        let path = dir.join("t.pcap");
        let tap = PcapTap::create(&path, 64).expect("create");
        let mut a = tap.tap();
        let mut b = tap.tap();
        let frame: Vec<u8> = (0..100u8).collect();
        a.frame(Direction::Rx, &[&frame[..60], &frame[60..]]);
        b.frame(Direction::Tx, &[&frame[..10]]);
        drop((a, b));
        assert_eq!(tap.frames(), 2);
        drop(tap);
        let file = File::open(&path).expect("open");
        let mut r = pcap_file::pcap::PcapReader::new(file).expect("pcap");
        assert_eq!(r.header().snaplen, 64);
        // Raw records: the crate's typed reader refuses a record whose
        // original length exceeds the snap length, which is what a snap
        // length is for (tcpdump reads them).
        let p1 = r.next_raw_packet().expect("one").expect("ok");
        assert_eq!(
            (p1.incl_len, p1.orig_len, &p1.data[..]),
            (64, 100, &frame[..64])
        );
        let p2 = r.next_raw_packet().expect("two").expect("ok");
        assert_eq!(
            (p2.incl_len, p2.orig_len, &p2.data[..]),
            (10, 10, &frame[..10])
        );
        assert!(r.next_raw_packet().is_none());
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(
            PcapTap::create(&path, 10),
            Err(CaptureError::Snaplen(10))
        ));
    }
}
