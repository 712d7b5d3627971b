//! Programs replaced: `execve`, `execv`, `execvp`, `execvpe` and
//! `fexecve` run the new program with an environment that carries the
//! sockets surviving the exec ([`SocketLayer::before_exec`], see
//! `crate::exec`); a manifest the program was started with is never
//! passed on stale.

use std::ffi::{c_char, c_int, CStr, CString};

use super::next;
use crate::layer::SocketLayer;
use crate::setup::ENV_INHERIT;

extern "C" {
    /// The C library's environment of this process.
    static environ: *const *const c_char;
}

/// The entries of `envp`, a C `NULL`-terminated array.
///
/// # Safety
/// `envp` is `NULL` or a `NULL`-terminated array of C strings.
unsafe fn entries(envp: *const *const c_char) -> Vec<*const c_char> {
    let mut out = Vec::new();
    if envp.is_null() {
        return out;
    }
    loop {
        // SAFETY: the array is NULL-terminated and not passed yet.
        let p = unsafe { *envp.add(out.len()) };
        if p.is_null() {
            return out;
        }
        out.push(p);
    }
}

/// Whether environment entry `p` is a manifest.
///
/// # Safety
/// `p` is a C string.
unsafe fn is_manifest(p: *const c_char) -> bool {
    // SAFETY: as the caller's.
    let s = unsafe { CStr::from_ptr(p) }.to_bytes();
    s.strip_prefix(ENV_INHERIT.as_bytes())
        .is_some_and(|rest| rest.first() == Some(&b'='))
}

/// Runs `exec` with the environment the layer wants for the new program:
/// `envp` as it is when nothing of ours survives and no stale manifest
/// is in it.
///
/// # Safety
/// `envp` as [`entries`]; `exec` is one of the C library's exec
/// functions given the caller's other arguments.
unsafe fn exec_with<L: SocketLayer>(
    l: &L,
    envp: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let entry = l.before_exec().and_then(|e| CString::new(e).ok());
    // SAFETY: as the caller's.
    let all = unsafe { entries(envp) };
    // SAFETY: entries of the caller's environment.
    let stale = all.iter().any(|&p| unsafe { is_manifest(p) });
    if entry.is_none() && !stale {
        return exec(envp);
    }
    let mut env: Vec<*const c_char> = all
        .into_iter()
        // SAFETY: as above.
        .filter(|&p| !unsafe { is_manifest(p) })
        .collect();
    env.extend(entry.as_ref().map(|e| e.as_ptr()));
    env.push(std::ptr::null());
    let ret = exec(env.as_ptr());
    // Only a failed exec returns.
    let e = super::errno();
    if entry.is_some() {
        l.exec_failed();
    }
    super::set_errno(e);
    ret
}

/// The process's environment.
fn environment() -> *const *const c_char {
    // SAFETY: `environ` is the C library's; reading the pointer races
    // only with `setenv` on another thread, as in the C library's own
    // `execv`.
    unsafe { environ }
}

/// `execve(2)`.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn execve<L: SocketLayer>(
    l: &L,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's pointers, passed on as they came.
    unsafe { exec_with(l, envp, |env| next::execve(path, argv, env)) }
}

/// `execv(3)`: [`execve`] with the process's environment.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn execv<L: SocketLayer>(
    l: &L,
    path: *const c_char,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: as `execve`'s.
    unsafe { execve(l, path, argv, environment()) }
}

/// `execvpe(3)`.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn execvpe<L: SocketLayer>(
    l: &L,
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's pointers, passed on as they came.
    unsafe { exec_with(l, envp, |env| next::execvpe(file, argv, env)) }
}

/// `execvp(3)`: [`execvpe`] with the process's environment.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn execvp<L: SocketLayer>(
    l: &L,
    file: *const c_char,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: as `execvpe`'s.
    unsafe { execvpe(l, file, argv, environment()) }
}

/// `fexecve(3)`.
///
/// # Safety
/// None beyond the C function's.
pub unsafe fn fexecve<L: SocketLayer>(
    l: &L,
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's pointers, passed on as they came.
    unsafe { exec_with(l, envp, |env| next::fexecve(fd, argv, env)) }
}
