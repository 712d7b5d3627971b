//! Programs replaced: `execve`, `execv`, `execvp`, `execvpe` and
//! `fexecve` run the new program with an environment that carries the
//! sockets surviving the exec ([`SocketLayer::before_exec`], see
//! `crate::exec`); a manifest the program was started with is never
//! passed on stale. `execl`, `execlp` and `execle` take their arguments
//! as a C variadic list, which stable Rust cannot declare: on x86-64 a
//! naked entry point ([`crate::exec_list_exports`]) hands the argument
//! registers and the caller's stack arguments to [`exec_list`], which
//! reads the list as the System V ABI lays it out.

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

/// The entry points of `execl`, `execlp` and `execle` ([`exec_list`]).
pub const LIST_L: c_int = 0;
/// `execlp`.
pub const LIST_LP: c_int = 1;
/// `execle`.
pub const LIST_LE: c_int = 2;

/// Most arguments an `execl` list may have here: one without its `NULL`
/// within it fails with `E2BIG` instead of reading on.
const MAX_LIST: usize = 1 << 16;

/// `execl(3)`, `execlp(3)` or `execle(3)` (`form`: [`LIST_L`],
/// [`LIST_LP`], [`LIST_LE`]), from their variadic argument list as the
/// x86-64 System V ABI passes it: `regs` holds the five argument
/// registers after `path` (`rsi`, `rdx`, `rcx`, `r8`, `r9`), `stack`
/// points at the caller's stack arguments; the list ends at the first
/// `NULL`, and `execle`'s environment is the argument after it.
///
/// # Safety
/// The C functions': the list is `NULL`-terminated (and `execle`'s
/// followed by its environment); `regs` has five entries and `stack` the
/// caller's remaining arguments.
pub unsafe fn exec_list<L: SocketLayer>(
    l: &L,
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    form: c_int,
) -> c_int {
    let arg = |i: usize| {
        if i < 5 {
            // SAFETY: `regs` has five entries.
            unsafe { *regs.add(i) }
        } else {
            // SAFETY: the caller's stack holds the list's arguments up
            // to its NULL (and execle's environment after it); `i` never
            // passes them.
            unsafe { *stack.add(i - 5) }
        }
    };
    let mut argv = Vec::new();
    loop {
        if argv.len() >= MAX_LIST {
            super::set_errno(libc::E2BIG);
            return -1;
        }
        let p = arg(argv.len());
        argv.push(p);
        if p.is_null() {
            break;
        }
    }
    match form {
        LIST_LE => {
            let envp = arg(argv.len()).cast::<*const c_char>();
            // SAFETY: argv is NULL-terminated; the rest is the caller's.
            unsafe { execve(l, path, argv.as_ptr(), envp) }
        }
        // SAFETY: as above.
        LIST_LP => unsafe { execvp(l, path, argv.as_ptr()) },
        // SAFETY: as above.
        _ => unsafe { execv(l, path, argv.as_ptr()) },
    }
}

/// Expands, inside the preload library's `exports` module (where the
/// shim `SHIM` is), the x86-64 entry points of `execl`, `execlp` and
/// `execle`: each spills the argument registers after the first, points
/// at the caller's stack arguments and calls [`exec_list`] through
/// `exec_list_entry` with its form.
#[doc(hidden)]
#[macro_export]
macro_rules! exec_list_exports {
    () => {
        /// [`$crate::cabi::exec::exec_list`] for the entry points below.
        ///
        /// # Safety
        /// Called only by them, with what they spilled.
        #[cfg(target_arch = "x86_64")]
        unsafe extern "C" fn exec_list_entry(
            path: *const c_char,
            regs: *const *const c_char,
            stack: *const *const c_char,
            form: c_int,
        ) -> c_int {
            // SAFETY: the C caller's list, as the entry point found it.
            unsafe { $crate::cabi::exec::exec_list(&SHIM, path, regs, stack, form) }
        }
        $crate::exec_list_exports!(@entry execl, $crate::cabi::exec::LIST_L);
        $crate::exec_list_exports!(@entry execlp, $crate::cabi::exec::LIST_LP);
        $crate::exec_list_exports!(@entry execle, $crate::cabi::exec::LIST_LE);
    };
    (@entry $name:ident, $form:expr) => {
        /// The C library's variadic function of this name (x86-64 System
        /// V: `rdi` the path, the list in `rsi`, `rdx`, `rcx`, `r8`, `r9`
        /// and then on the caller's stack above the return address).
        #[cfg(target_arch = "x86_64")]
        #[no_mangle]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() -> c_int {
            ::core::arch::naked_asm!(
                // 5 spilled registers + 16-byte alignment for the call.
                "sub rsp, 56",
                "mov [rsp], rsi",
                "mov [rsp + 8], rdx",
                "mov [rsp + 16], rcx",
                "mov [rsp + 24], r8",
                "mov [rsp + 32], r9",
                "mov rsi, rsp",
                // The caller's stack arguments: above our 56 bytes and
                // the return address.
                "lea rdx, [rsp + 64]",
                "mov ecx, {form}",
                "call {entry}",
                "add rsp, 56",
                "ret",
                form = const $form,
                entry = sym exec_list_entry,
            )
        }
    };
}
