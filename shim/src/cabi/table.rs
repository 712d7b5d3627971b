//! The C interface, written once: every C function the shim interposes,
//! with its C prototype and the handler that serves it. Two things are
//! generated from this one table:
//!
//! - `exports`: the `#[no_mangle] unsafe extern "C"` functions, expanded
//!   by the preload library (`shim/preload/`, through
//!   [`crate::c_exports`]) and nowhere else, so no binary that links this
//!   crate as a library interposes its own `socket` or `read`;
//! - `next`: for each `forwarded` row, the C library's own function of
//!   that name (found with `dlsym(RTLD_NEXT)` on first use, [`super::next`]).
//!
//! A row reads `name(arguments) -> return => family::handler(arguments)`;
//! the handler (in [`super`]'s per-family modules) takes the layer first.
//! `forwarded` rows name a C library function the handlers call for
//! descriptors that are not the layer's; `aliases` are other entry points
//! (the short, fortified and non-`p` forms) served by a handler of another
//! row, never called in the C library under their own name.
//!
//! `fcntl` and `ioctl` are variadic in C; their one optional argument is
//! passed in the same register as a third fixed argument on the System V
//! ABIs (x86-64, AArch64), which is how they are declared here.

/// Expands the table for `next` (inside [`super::next`]) or `exports`
/// (inside a module of the preload library that has the C types in scope,
/// see [`crate::c_exports`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __c_interface {
    ($mode:ident) => {
        $crate::__c_interface! { @$mode
            forwarded {
                socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int
                    => sock::socket(domain, ty, protocol);
                bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int
                    => sock::bind(fd, addr, len);
                listen(fd: c_int, backlog: c_int) -> c_int => sock::listen(fd, backlog);
                accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int
                    => sock::accept4(fd, addr, len, flags);
                connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int
                    => sock::connect(fd, addr, len);
                shutdown(fd: c_int, how: c_int) -> c_int => sock::shutdown(fd, how);
                getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int
                    => sock::sockname(fd, addr, len, false);
                getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int
                    => sock::sockname(fd, addr, len, true);
                read(fd: c_int, buf: *mut c_void, n: usize) -> isize => io::read(fd, buf, n);
                write(fd: c_int, buf: *const c_void, n: usize) -> isize => io::write(fd, buf, n);
                readv(fd: c_int, iov: *const iovec, cnt: c_int) -> isize => io::readv(fd, iov, cnt);
                writev(fd: c_int, iov: *const iovec, cnt: c_int) -> isize
                    => io::writev(fd, iov, cnt);
                recvfrom(fd: c_int, buf: *mut c_void, n: usize, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> isize
                    => io::recvfrom(fd, buf, n, flags, addr, len);
                recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> isize
                    => io::recvmsg(fd, msg, flags);
                sendto(fd: c_int, buf: *const c_void, n: usize, flags: c_int, addr: *const sockaddr, len: socklen_t) -> isize
                    => io::sendto(fd, buf, n, flags, addr, len);
                sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> isize
                    => io::sendmsg(fd, msg, flags);
                close(fd: c_int) -> c_int => fds::close(fd);
                dup(fd: c_int) -> c_int => fds::dup(fd);
                dup2(old: c_int, new: c_int) -> c_int => fds::dup3(old, new, 0, true);
                dup3(old: c_int, new: c_int, flags: c_int) -> c_int
                    => fds::dup3(old, new, flags, false);
                close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int
                    => fds::close_range(first, last, flags);
                closefrom(low: c_int) -> () => fds::closefrom(low);
                fclose(f: *mut FILE) -> c_int => fds::fclose(f);
                fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int
                    => sockopt::fcntl(fd, cmd, arg);
                ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int
                    => sockopt::ioctl(fd, request, arg);
                setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: socklen_t) -> c_int
                    => sockopt::setsockopt(fd, level, name, value, len);
                getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut socklen_t) -> c_int
                    => sockopt::getsockopt(fd, level, name, value, len);
                ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, sigmask: *const sigset_t) -> c_int
                    => poll::ppoll(fds, n, timeout, sigmask);
                pselect(nfds: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *const timespec, sigmask: *const sigset_t) -> c_int
                    => poll::pselect(nfds, r, w, e, timeout, sigmask);
                epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut epoll_event) -> c_int
                    => epoll::epoll_ctl(epfd, op, fd, event);
                epoll_pwait(epfd: c_int, events: *mut epoll_event, max: c_int, timeout: c_int, sigmask: *const sigset_t) -> c_int
                    => epoll::epoll_pwait(epfd, events, max, timeout, sigmask);
                fork() -> pid_t => fds::fork();
                execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int
                    => exec::execve(path, argv, envp);
                execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int
                    => exec::execvpe(file, argv, envp);
                fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int
                    => exec::fexecve(fd, argv, envp);
                sendfile(out: c_int, input: c_int, offset: *mut off_t, count: usize) -> isize
                    => io::sendfile(out, input, offset, count);
            }
            aliases {
                accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int
                    => sock::accept4(fd, addr, len, 0);
                __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize
                    => io::read(fd, buf, n.min(buflen));
                recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize
                    => io::recvfrom(fd, buf, n, flags, ::core::ptr::null_mut(), ::core::ptr::null_mut());
                __recv_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize, flags: c_int) -> isize
                    => io::recvfrom(fd, buf, n.min(buflen), flags, ::core::ptr::null_mut(), ::core::ptr::null_mut());
                __recvfrom_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> isize
                    => io::recvfrom(fd, buf, n.min(buflen), flags, addr, len);
                send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize
                    => io::sendto(fd, buf, n, flags, ::core::ptr::null(), 0);
                fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int
                    => sockopt::fcntl(fd, cmd, arg);
                vfork() -> pid_t => fds::vfork();
                execv(path: *const c_char, argv: *const *const c_char) -> c_int
                    => exec::execv(path, argv);
                execvp(file: *const c_char, argv: *const *const c_char) -> c_int
                    => exec::execvp(file, argv);
                sendfile64(out: c_int, input: c_int, offset: *mut off_t, count: usize) -> isize
                    => io::sendfile(out, input, offset, count);
                poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int
                    => poll::poll(fds, n, timeout);
                __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: usize) -> c_int
                    => poll::poll(fds, n.min((fdslen / ::core::mem::size_of::<pollfd>()) as nfds_t), timeout);
                __ppoll_chk(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, sigmask: *const sigset_t, fdslen: usize) -> c_int
                    => poll::ppoll(fds, n.min((fdslen / ::core::mem::size_of::<pollfd>()) as nfds_t), timeout, sigmask);
                select(nfds: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval) -> c_int
                    => poll::select(nfds, r, w, e, timeout);
                epoll_wait(epfd: c_int, events: *mut epoll_event, max: c_int, timeout: c_int) -> c_int
                    => epoll::epoll_pwait(epfd, events, max, timeout, ::core::ptr::null());
            }
        }
    };
    (@next
        forwarded {
            $($name:ident($($p:ident: $t:ty),*) -> $ret:ty
                => $family:ident::$handler:ident($($a:expr),*);)*
        }
        aliases { $($aliases:tt)* }
    ) => {
        $(
            #[allow(clippy::too_many_arguments)]
            pub(crate) unsafe fn $name($($p: $t),*) -> $ret {
                static ADDR: ::std::sync::atomic::AtomicUsize = ::std::sync::atomic::AtomicUsize::new(0);
                let mut addr = ADDR.load(::std::sync::atomic::Ordering::Relaxed);
                if addr == 0 {
                    addr = lookup(concat!(stringify!($name), "\0"));
                    ADDR.store(addr, ::std::sync::atomic::Ordering::Relaxed);
                }
                // SAFETY: `addr` is the C library's function of this
                // name, whose C prototype is the one in the table.
                let f: unsafe extern "C" fn($($t),*) -> $ret = unsafe { ::std::mem::transmute(addr) };
                // SAFETY: the caller passes what the C function expects.
                unsafe { f($($p),*) }
            }
        )*
    };
    (@exports forwarded { $($rows:tt)* } aliases { $($aliases:tt)* }) => {
        $crate::__c_interface! { @export_rows $($rows)* $($aliases)* }
    };
    (@export_rows
        $($name:ident($($p:ident: $t:ty),*) -> $ret:ty => $family:ident::$handler:ident($($a:expr),*);)*
    ) => {
        /// The shim of this process.
        static SHIM: $crate::Shim = $crate::Shim::new();
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($p: $t),*) -> $ret {
                $crate::cabi::$family::$handler(&SHIM, $($a),*)
            }
        )*
    };
}
