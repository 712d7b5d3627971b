//! Files named relative to an open directory (`openat(2)`, `mkdirat(2)`,
//! `unlinkat(2)`) and the effective user id: what a process needs to work
//! inside a directory someone else may write to without letting them swap
//! a path component under it. std has no `*at` calls; the policy (which
//! flags, what to refuse) is the caller's, in safe code.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::syscall::check;

/// `openat(dir, name, flags, mode)`; `O_CLOEXEC` is always added.
///
/// # Errors
/// The kernel's error (its errno kept), e.g. `ELOOP` for a symlink under `O_NOFOLLOW`,
/// `EEXIST` under `O_CREAT|O_EXCL`.
pub fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> std::io::Result<OwnedFd> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call;
    // `dir` is an open descriptor borrowed for the call; the mode is passed
    // as the variadic argument's promoted type.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    };
    let fd = check(fd, "openat").map_err(std::io::Error::from)?;
    // SAFETY: a successful openat returned a new descriptor no one else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `mkdirat(dir, name, mode)`.
///
/// # Errors
/// The kernel's error (`EEXIST` if anything, a symlink included, is there).
pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> std::io::Result<()> {
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is open.
    check(
        unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) },
        "mkdirat",
    )
    .map(drop)
    .map_err(std::io::Error::from)
}

/// `unlinkat(dir, name, 0)`: removes a file (a symlink itself, never
/// what it points to).
///
/// # Errors
/// The kernel's error.
pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr) -> std::io::Result<()> {
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is open.
    check(
        unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) },
        "unlinkat",
    )
    .map(drop)
    .map_err(std::io::Error::from)
}

/// The process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn at_calls_stay_in_the_directory_and_report_errnos() {
        let dir = std::env::temp_dir().join(format!("zs-dirfd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let d = std::fs::File::open(&dir).expect("open dir");
        mkdirat(d.as_fd(), c"sub", 0o700).expect("mkdirat");
        assert!(dir.join("sub").is_dir());
        let e = mkdirat(d.as_fd(), c"sub", 0o700).expect_err("exists");
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        std::os::unix::fs::symlink("/dev/null", dir.join("link")).expect("symlink");
        let e = openat(d.as_fd(), c"link", libc::O_RDONLY | libc::O_NOFOLLOW, 0)
            .expect_err("not followed");
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        let f = openat(
            d.as_fd(),
            c"new",
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )
        .expect("created");
        drop(f);
        unlinkat(d.as_fd(), c"link").expect("unlink the link");
        assert!(std::path::Path::new("/dev/null").exists());
        assert!(dir.join("new").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
