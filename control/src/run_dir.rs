//! Files under the runtime directory (`/run/zerosplit`, or
//! `$RUNTIME_DIRECTORY` when systemd sets it), opened so that whoever owns
//! that directory cannot turn a root process's open into a write elsewhere
//! or make it hang.
//!
//! The shipped unit (`RuntimeDirectory=zerosplit`) gives the directory to
//! the service's user, and a root `nc`, `run` or `exec` in the same
//! namespace uses the same files. So below the base nothing is reached by
//! path: every directory and file is opened with `openat` from a directory
//! handle checked before use.
//!
//! - A directory is opened `O_DIRECTORY|O_NOFOLLOW` and refused if group
//!   or others may write to it, or if it belongs to someone other than
//!   root, us or the base's owner. One we create in a directory of another
//!   user is given to that user, so the service can use it after us.
//! - A file is opened `O_NOFOLLOW|O_NONBLOCK` (a FIFO cannot block the
//!   open) and refused unless it is a regular file with one link, owned as
//!   a directory must be. A new file is created `O_CREAT|O_EXCL`; nothing
//!   is ever truncated; reads are bounded.
//!
//! Every refusal names the path and what is wrong with it.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

/// Mode of the directories and files we create (the lists are not secret).
const DIR_MODE: Mode = Mode::from_bits_retain(0o755);
const FILE_MODE: Mode = Mode::from_bits_retain(0o644);

/// Why a path under the runtime directory was refused.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// A symbolic link where a file or directory was expected.
    #[error("{}: is a symbolic link; refusing to follow it under the runtime directory", .path.display())]
    Symlink {
        /// The path.
        path: PathBuf,
    },
    /// Not a regular file (a FIFO, a device, a socket, a directory).
    #[error("{}: is a {kind}, not a regular file; refusing it", .path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A regular file with more than one name: a hard link to a file
    /// elsewhere.
    #[error("{}: has {links} hard links; refusing a file linked from elsewhere", .path.display())]
    Linked {
        /// The path.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
    /// Group or others may write to a directory.
    #[error("{}: is writable by group or others (mode {mode:o}); refusing a directory others can change", .path.display())]
    Writable {
        /// The path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Owned by someone we do not trust.
    #[error("{}: is owned by uid {uid}, not by root, by us (uid {us}) nor by the runtime directory's owner (uid {base}); refusing it", .path.display())]
    Owner {
        /// The path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Our effective uid.
        us: u32,
        /// The base directory's owner.
        base: u32,
    },
    /// Larger than the caller reads.
    #[error("{}: is larger than {max} bytes; refusing to read it", .path.display())]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// The bound.
        max: u64,
    },
    /// A name that is not one plain path component.
    #[error("{}: {name:?} is not a plain file name", .path.display())]
    Name {
        /// The directory.
        path: PathBuf,
        /// The name.
        name: String,
    },
    /// The call failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl RunDirError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        RunDirError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether the name was already taken (`O_EXCL`, `mkdirat`).
    pub(crate) fn already_exists(&self) -> bool {
        matches!(self, RunDirError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
    }
}

impl From<RunDirError> for std::io::Error {
    fn from(e: RunDirError) -> Self {
        let kind = match &e {
            RunDirError::Io { source, .. } => source.kind(),
            RunDirError::TooLarge { .. } => std::io::ErrorKind::InvalidData,
            _ => std::io::ErrorKind::PermissionDenied,
        };
        std::io::Error::new(kind, e)
    }
}

/// An open directory under the runtime directory (or the base itself).
#[derive(Debug)]
pub(crate) struct RunDir {
    dir: File,
    path: PathBuf,
    /// The base directory's owner, trusted below it.
    base_owner: u32,
}

impl RunDir {
    /// Opens the base directory `path`, creating it (and its parents,
    /// which are the system's: `/run`) if missing. The last component is
    /// not followed if it is a symlink; the base may belong to any user
    /// (systemd gives it to the service's) but no one else may write to it.
    ///
    /// # Errors
    /// It cannot be created or opened, or is refused.
    pub(crate) fn base(path: &Path) -> Result<RunDir, RunDirError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if std::fs::symlink_metadata(path).is_err() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE.bits())
                .create(path)
                .map_err(|e| RunDirError::io(path, e))?;
        }
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| refusal(path, e))?;
        let meta = dir.metadata().map_err(|e| RunDirError::io(path, e))?;
        let d = RunDir {
            dir,
            path: path.to_path_buf(),
            base_owner: meta.uid(),
        };
        d.check_dir(path, &meta)?;
        Ok(d)
    }

    /// The directory's path (for messages).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the subdirectory `name`, creating it if missing (given to
    /// this directory's owner if that is not us).
    ///
    /// # Errors
    /// It cannot be created or opened, or is refused.
    pub(crate) fn dir(&self, name: &str) -> Result<RunDir, RunDirError> {
        let (c, path) = self.name(name)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let mut created = false;
        let fd = match openat(self.dir.as_fd(), &c, flags, Mode::empty()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match mkdirat(self.dir.as_fd(), &c, DIR_MODE) {
                    Ok(()) => created = true,
                    // Someone made it meanwhile: open what is there.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(RunDirError::io(&path, e)),
                }
                openat(self.dir.as_fd(), &c, flags, Mode::empty())
            }
            r => r,
        }
        .map_err(|e| refusal(&path, e))?;
        let dir = File::from(fd);
        let parent = self
            .dir
            .metadata()
            .map_err(|e| RunDirError::io(&self.path, e))?;
        if created && parent.uid() != euid() {
            std::os::unix::fs::fchown(&dir, Some(parent.uid()), Some(parent.gid()))
                .map_err(|e| RunDirError::io(&path, e))?;
        }
        let meta = dir.metadata().map_err(|e| RunDirError::io(&path, e))?;
        let d = RunDir {
            dir,
            path,
            base_owner: self.base_owner,
        };
        d.check_dir(&d.path, &meta)?;
        Ok(d)
    }

    /// Opens the file `name` for locking only (read-only), creating it
    /// empty if missing; never truncates.
    ///
    /// # Errors
    /// It cannot be opened or created, or is refused.
    pub(crate) fn lock_file(&self, name: &str) -> Result<File, RunDirError> {
        let (c, path) = self.name(name)?;
        let open = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        // Bounded: each round ends in an open, or a create that lost a race
        // to a file that then vanished.
        for _ in 0..3 {
            let fd = match openat(self.dir.as_fd(), &c, open, Mode::empty()) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    match openat(
                        self.dir.as_fd(),
                        &c,
                        open | OFlags::CREATE | OFlags::EXCL,
                        FILE_MODE,
                    ) {
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                        r => r,
                    }
                }
                r => r,
            }
            .map_err(|e| refusal(&path, e))?;
            return self.checked_file(fd.into(), path);
        }
        Err(RunDirError::io(
            &path,
            std::io::Error::other("created and removed again by someone else three times"),
        ))
    }

    /// Creates the new file `name` for writing (`O_EXCL`: an existing
    /// name, a symlink included, is an error: see
    /// [`RunDirError::already_exists`]).
    ///
    /// # Errors
    /// It exists or cannot be created.
    pub(crate) fn create_new(&self, name: &str) -> Result<File, RunDirError> {
        let (c, path) = self.name(name)?;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let fd = openat(self.dir.as_fd(), &c, flags, FILE_MODE).map_err(|e| refusal(&path, e))?;
        Ok(File::from(fd))
    }

    /// Opens the file `name` read-only and reads it whole, if it is at
    /// most `max` bytes.
    ///
    /// # Errors
    /// It cannot be opened or read, is refused, or is larger.
    pub(crate) fn read(&self, name: &str, max: u64) -> Result<(File, Vec<u8>), RunDirError> {
        let (c, path) = self.name(name)?;
        let fd = openat(
            self.dir.as_fd(),
            &c,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| refusal(&path, e))?;
        let file = self.checked_file(fd.into(), path.clone())?;
        let mut bytes = Vec::new();
        (&file)
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| RunDirError::io(&path, e))?;
        if bytes.len() as u64 > max {
            return Err(RunDirError::TooLarge { path, max });
        }
        Ok((file, bytes))
    }

    /// Removes the file `name` (a symlink itself, never its target).
    ///
    /// # Errors
    /// The kernel refused.
    pub(crate) fn remove(&self, name: &str) -> Result<(), RunDirError> {
        let (c, path) = self.name(name)?;
        unlinkat(self.dir.as_fd(), &c).map_err(|e| RunDirError::io(&path, e))
    }

    /// The names in the directory (those that are UTF-8).
    ///
    /// # Errors
    /// It cannot be listed.
    pub(crate) fn names(&self) -> Result<Vec<String>, RunDirError> {
        use std::os::fd::AsRawFd;
        // Listed through our own handle's /proc entry, so the listing is of
        // the directory we hold even if its path was swapped meanwhile.
        let proc = PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()));
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&proc).map_err(|e| RunDirError::io(&self.path, e))? {
            let entry = entry.map_err(|e| RunDirError::io(&self.path, e))?;
            if let Ok(n) = entry.file_name().into_string() {
                names.push(n);
            }
        }
        Ok(names)
    }

    /// `name` as a C string and its path, if it is one plain component.
    fn name(&self, name: &str) -> Result<(CString, PathBuf), RunDirError> {
        let bad = || RunDirError::Name {
            path: self.path.clone(),
            name: name.to_owned(),
        };
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(bad());
        }
        let c = CString::new(name).map_err(|_| bad())?;
        Ok((c, self.path.join(name)))
    }

    fn trusted(&self, path: &Path, uid: u32) -> Result<(), RunDirError> {
        let us = euid();
        if uid == 0 || uid == us || uid == self.base_owner {
            return Ok(());
        }
        Err(RunDirError::Owner {
            path: path.to_path_buf(),
            uid,
            us,
            base: self.base_owner,
        })
    }

    fn check_dir(&self, path: &Path, meta: &std::fs::Metadata) -> Result<(), RunDirError> {
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(RunDirError::Writable {
                path: path.to_path_buf(),
                mode,
            });
        }
        self.trusted(path, meta.uid())
    }

    fn checked_file(&self, file: File, path: PathBuf) -> Result<File, RunDirError> {
        let meta = file.metadata().map_err(|e| RunDirError::io(&path, e))?;
        let t = meta.file_type();
        if !t.is_file() {
            let kind = if t.is_fifo() {
                "FIFO"
            } else if t.is_char_device() || t.is_block_device() {
                "device"
            } else if t.is_socket() {
                "socket"
            } else if t.is_dir() {
                "directory"
            } else {
                "special file"
            };
            return Err(RunDirError::NotRegular { path, kind });
        }
        if meta.nlink() != 1 {
            return Err(RunDirError::Linked {
                path,
                links: meta.nlink(),
            });
        }
        self.trusted(&path, meta.uid())?;
        Ok(file)
    }
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`: `name` is looked up in
/// the directory we hold, never through a path from the base.
fn openat(dir: impl AsFd, name: &CStr, flags: OFlags, mode: Mode) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        flags | OFlags::CLOEXEC,
        mode,
    )?)
}

/// `mkdirat(dir, name, mode)` (`EEXIST` if anything, a symlink included,
/// is there).
fn mkdirat(dir: impl AsFd, name: &CStr, mode: Mode) -> std::io::Result<()> {
    Ok(rustix::fs::mkdirat(dir, name, mode)?)
}

/// `unlinkat(dir, name, 0)`: removes a file (a symlink itself, never what
/// it points to).
fn unlinkat(dir: impl AsFd, name: &CStr) -> std::io::Result<()> {
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?)
}

/// The process's effective user id.
fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// An open's error, with `ELOOP` (the last component is a symlink under
/// `O_NOFOLLOW`) said plainly.
fn refusal(path: &Path, e: std::io::Error) -> RunDirError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        RunDirError::Symlink {
            path: path.to_path_buf(),
        }
    } else {
        RunDirError::io(path, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_calls_stay_in_the_directory_and_report_errnos() {
        let dir = std::env::temp_dir().join(format!("zs-dirfd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let d = File::open(&dir).expect("open dir");
        mkdirat(d.as_fd(), c"sub", Mode::from_bits_retain(0o700)).expect("mkdirat");
        assert!(dir.join("sub").is_dir());
        let e = mkdirat(d.as_fd(), c"sub", Mode::from_bits_retain(0o700)).expect_err("exists");
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        std::os::unix::fs::symlink("/dev/null", dir.join("link")).expect("symlink");
        let e = openat(
            d.as_fd(),
            c"link",
            OFlags::RDONLY | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .expect_err("not followed");
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        let f = openat(
            d.as_fd(),
            c"new",
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Mode::from_bits_retain(0o600),
        )
        .expect("created");
        let flags = rustix::io::fcntl_getfd(&f).expect("F_GETFD");
        assert!(
            flags.contains(rustix::io::FdFlags::CLOEXEC),
            "close-on-exec"
        );
        drop(f);
        unlinkat(d.as_fd(), c"link").expect("unlink the link");
        assert!(Path::new("/dev/null").exists());
        assert!(dir.join("new").is_file());
        assert_eq!(euid(), std::fs::metadata("/proc/self").expect("proc").uid());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
