//! The C library's own functions of the interposed names (the table's
//! `forwarded` rows), found with `dlsym(RTLD_NEXT, …)` on first use: what
//! a call on a descriptor that is not the layer's goes to, and what
//! `real` wraps.

use super::ctypes::*;

/// Finds `name` (NUL-terminated) in the libraries after this one.
fn lookup(name: &'static str) -> usize {
    // SAFETY: `name` is a NUL-terminated literal that lives forever;
    // RTLD_NEXT is a valid pseudo-handle for dlsym.
    let addr = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if addr == 0 {
        // The C library always has these; without one the process cannot
        // go on, and there is no caller to return an error to.
        let msg = b"zerosplit preload: a C library socket function is missing\n";
        // SAFETY: writes `msg`, which lives for the call, to stderr.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    addr
}

crate::__c_interface!(next);
