//! The lab's room for `unsafe`: the kernel calls std, socket2 and the
//! datapath do not make for us. Each block states why it is sound.
//!
//! - [`netns`]: creating, deleting and entering named network namespaces
//!   (`unshare`, `mount`, `setns`), and starting a child inside one.
//! - [`packet`]: raw `AF_PACKET` sockets bound to one interface, batched
//!   with `recvmmsg`/`sendmmsg`, for the impairment hop and path watchers.
//! - [`ethtool`]: interface offloads through the `SIOCETHTOOL` ioctl.
//! - [`sockopt`]: `getsockopt`/`setsockopt` with the value as bytes, for
//!   options of Linux's own TCP sockets no safe wrapper covers (the CC
//!   lab's `TCP_INFO`).

pub mod ethtool;
pub mod netns;
pub mod packet;
pub mod sockopt;

use std::io;

use datapath::raw::SyscallError;

/// Maps a negative C return value to the thread's `errno`, naming `call`
/// (the datapath's [`SyscallError`], so a failed call reads the same
/// whichever crate made it).
fn check(ret: libc::c_int, call: &'static str) -> Result<libc::c_int, SyscallError> {
    if ret < 0 {
        Err(SyscallError {
            call,
            source: io::Error::last_os_error(),
        })
    } else {
        Ok(ret)
    }
}
