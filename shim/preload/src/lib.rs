//! The preload library of `zerosplit exec`: the C library's socket
//! functions exported under their own names, so an unmodified program's
//! calls reach the shim ([`zerosplit_shim::Shim`]) first. The exports are
//! expanded here, and only here, from the one table of the C interface in
//! `zerosplit-shim` ([`zerosplit_shim::c_exports`]); every pointer
//! dereference happens in that crate's C ABI room, under a `SAFETY`
//! comment.
//!
//! The functions are `unsafe extern "C"` because their callers are C code
//! bound by the C prototypes' contracts (a `read` buffer has `n` writable
//! bytes); `no_mangle` is what makes them interpose.
#![allow(
    unsafe_code,
    reason = "C ABI exports (no_mangle, unsafe extern \"C\" with the C contracts); no unsafe block here"
)]
#![allow(
    clippy::missing_safety_doc,
    reason = "each export's contract is its C prototype's (man 2)"
)]

zerosplit_shim::c_exports!();
