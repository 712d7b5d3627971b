//! The socket shim behind `zerosplit exec`: POSIX TCP sockets over a
//! zerosplit stack inside an unmodified program's process.
//!
//! The preload library (`shim/preload/`) exports the C socket functions
//! ([`c_exports`], from the one table of the C interface); the C side
//! ([`cabi`]) hands every call on a descriptor of ours to [`Shim`] (a
//! [`SocketLayer`]) and every other call to the C library.
//!
//! - **Which sockets are ours.** Every `socket(AF_INET, SOCK_STREAM)` is a
//!   real kernel socket at first (a *candidate*). `listen` on the
//!   interface's address or the wildcard, and `connect` to an address
//!   routed out of the interface, *claim* it: from then on the kernel
//!   socket is only a placeholder that keeps the descriptor number (so
//!   numbers never collide and the fd can sit in a kernel poll set), and
//!   the connection runs over zerosplit. Everything else (UDP, Unix,
//!   IPv6, loopback, other interfaces) stays the kernel's, and so do the
//!   stack's own sockets: those a thread opens while it starts the stack
//!   (the metrics endpoint's listener) or while it holds the lock, and
//!   the polling thread's.
//! - **One stack, one polling thread** (`runtime`): started at the
//!   first claim, it polls the stack and sleeps (adaptive polling, outside
//!   the lock) when idle; application threads take the same lock to copy
//!   bytes and post them, and a thread that has to wait polls the stack
//!   itself for a while first (run-to-completion), the polling thread
//!   keeping out of its way.
//! - **Copies**: a socket's bytes are copied between the caller's buffer
//!   and the connection's rings ([`zerosplit::stream::Rings`]); the zero-copy
//!   provider API stays the fast path for programs written for it.
//! - **Blocking** calls block only their thread: after its polling spell
//!   it sleeps on an eventfd of its own (with the kernel fds of a mixed
//!   poll set) that the polling thread signals when it did work; signals
//!   interrupt it (`EINTR`).
//! - **fork and exec**: attached to the daemon, a forked child holds
//!   every socket it inherited (`fork`) and a socket without
//!   `FD_CLOEXEC` lives on in the program `execve` starts (`exec`), as
//!   on Linux. Standalone, our sockets in a child fail (the placeholder
//!   sockets are unconnected kernel sockets: `ENOTCONN`, `EPIPE`) and new
//!   sockets there are the kernel's. `vfork` is a `fork` here (a vfork
//!   child would change the parent's tables).
//! - **Closing**: `close`, `dup2`/`dup3` over a descriptor, `close_range`,
//!   `closefrom` and `fclose` of an `fdopen`ed socket all make the shim
//!   forget the descriptor first, so a number the kernel hands out again
//!   is never taken for the old socket. A process
//!   started by `exec` in a child does not open the queue again unless
//!   `ZEROSPLIT_EXEC_FOLLOW=1` says so.

//!
//! Why this crate has `unsafe`: a shim interposed under the C library's
//! own names must be called with C pointers and must call the C library
//! through function pointers found at run time; neither can be expressed
//! in safe Rust. All of it is in one module, [`cabi`] (the C ABI room):
//! it finds the C library's functions (`dlsym(RTLD_NEXT)`), turns each
//! pointer a C caller passes into a slice or value only as far as that C
//! function's contract says, and gives the rest of the crate safe calls
//! ([`cabi::real`]); every block there has a `SAFETY` comment. The logic
//! (the socket table, the stack's runtime, readiness, options) is safe
//! code behind the [`SocketLayer`] trait, which the C side's unit tests
//! drive with a mock.

mod backend;
#[doc(hidden)]
#[allow(
    unsafe_code,
    reason = "the C ABI room: C pointers to slices, dlsym(RTLD_NEXT); every block has a SAFETY comment"
)]
pub mod cabi;
mod dispatch;
mod exec;
mod fallback;
mod family;
mod fork;
mod handover;
mod interest;
mod io;
mod layer;
mod log;
mod marks;
mod opts;
mod ready;
mod runtime;
mod setup;
mod socket;
mod sockets;
mod sockopt;

pub use self::dispatch::Shim;
pub use self::layer::{fd_set_words, CResult, Errno, SocketLayer, SELECT_MAX_FDS};
pub use self::setup::{
    exec_defaults, ENV_CONFIG, ENV_DAEMON, ENV_FOLLOW, ENV_IFACE, ENV_METRICS, ENV_PCAP, ENV_PID,
    ENV_QUEUE, ENV_SNAPLEN, ENV_STRICT,
};

/// Expands the `#[no_mangle] unsafe extern "C"` exports of the C
/// interface ([`cabi`]'s table) and the process's [`Shim`] behind them, in
/// a module `exports`. Only the preload library (`shim/preload/`, a
/// `cdylib`) invokes it: compiled into a program, the exports would
/// interpose that program's own `socket`, `read` and `close`.
#[macro_export]
macro_rules! c_exports {
    () => {
        /// The C library's socket functions, interposed.
        pub mod exports {
            use $crate::cabi::ctypes::*;
            $crate::__c_interface!(exports);
            $crate::exec_list_exports!();
        }
    };
}
