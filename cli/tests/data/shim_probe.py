"""The socket calls a program makes, checked one by one against their POSIX
behaviour; run under `zerosplit exec` against shim_peer.py on Linux TCP.
Prints "ok NAME" or "FAIL NAME: why" per check; exits 1 on any failure.

Usage: shim_probe.py PEER_ADDR PEER_PORT LOCAL_PORT
"""
import errno
import fcntl
import os
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time

PEER = (sys.argv[1], int(sys.argv[2]))
LOCAL_PORT = int(sys.argv[3])
failures = 0


def check(name, fn):
    global failures
    try:
        fn()
        print("ok", name, flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported
        failures += 1
        print("FAIL %s: %r" % (name, e), flush=True)


def pattern(n):
    return bytes((i * 131 ^ (i >> 7)) & 0xFF for i in range(n))


def dial(cmd):
    s = socket.create_connection(PEER, timeout=10)
    s.settimeout(None)
    s.sendall((cmd + "\n").encode())
    return s


def recv_all(s):
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            return out
        out += b


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_errno(fn, *codes):
    try:
        fn()
    except OSError as e:
        expect(e.errno in codes, "errno %s, wanted %s" % (e.errno, codes))
        return
    raise AssertionError("no error, wanted %s" % (codes,))


def blocking_echo():
    s = dial("ECHO")
    data = pattern(300_000)
    t = threading.Thread(target=s.sendall, args=(data,))
    t.start()
    got = b""
    while len(got) < len(data):
        b = s.recv(70_000)
        expect(b, "EOF early")
        got += b
    t.join()
    expect(got == data, "echo differs")
    s.shutdown(socket.SHUT_WR)
    expect(s.recv(10) == b"", "no EOF after our FIN")
    s.close()


def nonblocking_connect():
    s = socket.socket()
    s.setblocking(False)
    expect_errno(lambda: s.connect(PEER), errno.EINPROGRESS)
    _, w, _ = select.select([], [s], [], 5)
    expect(w == [s], "not writable after the handshake")
    expect(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0, "SO_ERROR set")
    expect_errno(lambda: s.recv(10), errno.EAGAIN)
    s.close()


def refused():
    s = socket.socket()
    expect_errno(lambda: s.connect((PEER[0], 1)), errno.ECONNREFUSED)
    s.close()
    s = socket.socket()
    s.setblocking(False)
    expect_errno(lambda: s.connect((PEER[0], 1)), errno.EINPROGRESS)
    p = select.poll()
    p.register(s, select.POLLOUT)
    ev = p.poll(5000)
    expect(ev and ev[0][1] & (select.POLLERR | select.POLLHUP), "no error event: %r" % ev)
    expect(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED, "SO_ERROR")
    s.close()


def names():
    s = dial("ECHO")
    peer = s.getpeername()
    local = s.getsockname()
    expect(peer == PEER, "getpeername %r" % (peer,))
    expect(local[0] != "0.0.0.0" and local[1] > 0, "getsockname %r" % (local,))
    s.close()


def fionread(s):
    return struct.unpack("i", fcntl.ioctl(s, termios.FIONREAD, b"\0\0\0\0"))[0]


def wait_readable_bytes(s, n):
    end = time.time() + 5
    while fionread(s) < n:
        expect(time.time() < end, "only %d of %d bytes arrived" % (fionread(s), n))
        select.select([s], [], [], 0.05)


def peek_dontwait_fionread():
    quiet = dial("ECHO")
    expect_errno(lambda: quiet.recv(10, socket.MSG_DONTWAIT), errno.EAGAIN)
    quiet.close()
    s = dial("SEND 1000")
    wait_readable_bytes(s, 1000)
    expect(fionread(s) == 1000, "FIONREAD %d" % fionread(s))
    peeked = s.recv(100, socket.MSG_PEEK)
    expect(peeked == pattern(1000)[:100], "MSG_PEEK")
    got = s.recv(2000, socket.MSG_WAITALL)
    expect(got == pattern(1000), "MSG_WAITALL read %d bytes" % len(got))
    expect(s.recv(10) == b"", "EOF")
    s.close()


def vectored():
    s = dial("ECHO")
    n = s.sendmsg([b"abc", b"", b"defgh"])
    expect(n == 8, "sendmsg %d" % n)
    wait_readable_bytes(s, 8)
    a, b = bytearray(3), bytearray(10)
    n = s.recvmsg_into([a, b])[0]
    expect(n == 8 and bytes(a) + bytes(b[:5]) == b"abcdefgh", "recvmsg_into %d %r %r" % (n, a, b))
    s.close()


def options():
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")
    s.connect(PEER)
    s.sendall(b"ECHO\n")
    cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0")
    expect(cc == b"reno", "TCP_CONGESTION %r" % cc)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    expect(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1, "TCP_NODELAY")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    expect(s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1, "SO_KEEPALIVE")
    expect(s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) == socket.SOCK_STREAM, "SO_TYPE")
    expect(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) > 0, "TCP_MAXSEG")
    s.sendall(b"x" * 100_000)
    got = 0
    while got < 100_000:
        got += len(s.recv(65536))
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    state, rto, mss, rtt, cwnd = info[0], *struct.unpack_from("I", info, 8), *struct.unpack_from("I", info, 16), *struct.unpack_from("I", info, 68), *struct.unpack_from("I", info, 80)
    expect(state == 1, "TCP_INFO state %d" % state)
    expect(mss > 0 and cwnd > 0 and rtt > 0 and rto > 0, "TCP_INFO mss %d cwnd %d rtt %d rto %d" % (mss, cwnd, rtt, rto))
    s.settimeout(None)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200_000))
    t = time.time()
    expect_errno(lambda: s.recv(10), errno.EAGAIN)
    expect(0.15 < time.time() - t < 2, "SO_RCVTIMEO waited %.2fs" % (time.time() - t))
    bad = socket.socket()
    bad.connect(PEER)
    expect_errno(lambda: bad.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"nosuch"), errno.ENOENT)
    bad.close()
    s.close()


def dup_and_close():
    s = dial("ECHO")
    fd2 = os.dup(s.fileno())
    fd3 = os.dup2(s.fileno(), 200)
    s.close()
    os.write(fd2, b"ping")
    expect(os.read(fd3, 10) == b"ping", "read through the dup2")
    f4 = fcntl.fcntl(fd2, fcntl.F_DUPFD_CLOEXEC, 300)
    os.close(fd2)
    os.close(fd3)
    os.write(f4, b"pong")
    expect(os.read(f4, 10) == b"pong", "read through F_DUPFD")
    os.close(f4)


def shutdown_write():
    s = dial("SINK")
    s.sendall(b"y" * 5000)
    s.shutdown(socket.SHUT_WR)
    expect(recv_all(s) == b"5000", "sink count")
    s.close()


def reset_and_epipe():
    s = dial("RST")
    s.settimeout(5)
    try:
        b = s.recv(10)
        expect(b == b"", "data after RST")
    except ConnectionResetError:
        pass
    time.sleep(0.1)
    expect_errno(lambda: s.send(b"x", socket.MSG_NOSIGNAL), errno.EPIPE, errno.ECONNRESET)
    expect_errno(lambda: s.send(b"x"), errno.EPIPE, errno.ECONNRESET)
    s.close()


def mixed_poll():
    r, w = os.pipe()
    s = dial("ECHO")
    p = select.poll()
    p.register(s, select.POLLIN)
    p.register(r, select.POLLIN)
    expect(p.poll(50) == [], "nothing ready yet")
    os.write(w, b"k")
    ev = p.poll(1000)
    expect(ev == [(r, select.POLLIN)], "pipe readable: %r" % ev)
    os.read(r, 1)
    s.sendall(b"z")
    ev = p.poll(5000)
    expect(ev == [(s.fileno(), select.POLLIN)], "socket readable: %r" % ev)
    rd, _, _ = select.select([s, r], [], [], 1)
    expect(rd == [s], "select %r" % rd)
    s.recv(1)
    t = time.time()
    rd, _, _ = select.select([s, r], [], [], 0.2)
    expect(rd == [] and time.time() - t >= 0.15, "select timeout")
    # A thread wakes the poll through the pipe while it waits.
    threading.Timer(0.2, lambda: os.write(w, b"k")).start()
    ev = p.poll(5000)
    expect(ev == [(r, select.POLLIN)], "woken by the pipe: %r" % ev)
    os.close(r)
    os.close(w)
    s.close()


def epoll_modes():
    r, w = os.pipe()
    s = dial("ECHO")
    ep = select.epoll()
    ep.register(s, select.EPOLLIN | select.EPOLLET | select.EPOLLRDHUP)
    ep.register(r, select.EPOLLIN)
    expect(ep.poll(0.05) == [], "nothing yet")
    s.sendall(b"abc")
    ev = ep.poll(5)
    expect(ev == [(s.fileno(), select.EPOLLIN)], "ET edge %r" % ev)
    expect(ep.poll(0.05) == [], "ET reports an edge once")
    s.recv(1)
    expect(ep.poll(0.05) == [], "ET: no new edge after a partial read")
    s.sendall(b"d")
    time.sleep(0.1)
    expect(ep.poll(1) == [(s.fileno(), select.EPOLLIN)], "ET: new bytes are a new edge")
    s.recv(10)
    ep.modify(s, select.EPOLLIN | select.EPOLLONESHOT)
    s.sendall(b"e")
    expect(ep.poll(5) == [(s.fileno(), select.EPOLLIN)], "oneshot fires")
    expect(ep.poll(0.05) == [], "oneshot fires once")
    ep.modify(s, select.EPOLLIN)
    expect(ep.poll(1) == [(s.fileno(), select.EPOLLIN)], "re-armed level")
    expect(ep.poll(0.05) == [(s.fileno(), select.EPOLLIN)], "level stays")
    s.recv(10)
    os.write(w, b"q")
    expect(ep.poll(1) == [(r, select.EPOLLIN)], "kernel fd in the same epoll")
    os.read(r, 1)
    ep.modify(s, select.EPOLLIN | select.EPOLLRDHUP)
    s.shutdown(socket.SHUT_WR)
    ev = ep.poll(5)
    expect(ev and ev[0][1] & select.EPOLLRDHUP, "RDHUP after the peer's FIN %r" % ev)
    ep.unregister(s)
    expect_errno(lambda: ep.unregister(s), errno.ENOENT)
    ep.close()
    os.close(r)
    os.close(w)
    s.close()


def listen_accept():
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", LOCAL_PORT))
    ls.listen(8)
    expect(ls.getsockname()[1] == LOCAL_PORT, "listener name")
    ls.setblocking(False)
    expect_errno(ls.accept, errno.EAGAIN)
    ep = select.epoll()
    ep.register(ls, select.EPOLLIN)
    ctl = dial("CONNECT %d" % LOCAL_PORT)
    ev = ep.poll(5)
    expect(ev == [(ls.fileno(), select.EPOLLIN)], "listener readable %r" % ev)
    c, addr = ls.accept()
    expect(addr[0] == PEER[0], "peer address %r" % (addr,))
    # accept4(SOCK_NONBLOCK) would not do here: Python's accept() gives a
    # blocking socket; FIONBIO and F_GETFL must agree on it.
    expect(fcntl.fcntl(c, fcntl.F_GETFL) & os.O_NONBLOCK == 0, "accepted socket blocking")
    fcntl.ioctl(c, termios.FIONBIO, struct.pack("i", 1))
    expect(fcntl.fcntl(c, fcntl.F_GETFL) & os.O_NONBLOCK != 0, "F_GETFL sees FIONBIO")
    fcntl.fcntl(c, fcntl.F_SETFL, fcntl.fcntl(c, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    c.setblocking(True)
    expect(recv_all(c) == b"hello", "accepted bytes")
    c.close()
    expect(recv_all(ctl) == b"done", "peer done")
    ctl.close()
    ep.close()
    ls.close()
    # The same port again, after the first listener closed.
    ls2 = socket.socket()
    ls2.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls2.bind(("0.0.0.0", LOCAL_PORT))
    ls2.listen(8)
    ctl = dial("CONNECT %d" % LOCAL_PORT)
    c, _ = ls2.accept()
    expect(recv_all(c) == b"hello", "accepted bytes on the reopened listener")
    c.close()
    expect(recv_all(ctl) == b"done", "peer done again")
    ctl.close()
    ls2.close()


def threads_block_only_themselves():
    s = dial("ECHO")
    got = []
    t = threading.Thread(target=lambda: got.append(s.recv(10)))
    t.start()
    time.sleep(0.2)
    other = dial("SINK")
    other.sendall(b"12345")
    other.shutdown(socket.SHUT_WR)
    expect(recv_all(other) == b"5", "another thread's socket works while one blocks")
    other.close()
    s.sendall(b"wake")
    t.join(5)
    expect(got == [b"wake"], "blocked reader woke %r" % got)
    s.close()


def signal_interrupts_a_wait():
    s = dial("ECHO")
    signal.signal(signal.SIGALRM, lambda *a: None)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    t = time.time()
    p = select.poll()
    p.register(s, select.POLLIN)
    # Python retries poll after EINTR with the time left (PEP 475): the
    # wait ends at the timeout, not never.
    expect(p.poll(600) == [], "poll result")
    expect(time.time() - t < 3, "poll returned")
    s.close()


def fork_child():
    s = dial("ECHO")
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            s.send(b"from the child")
            code = 3
        except OSError:
            code = 0
        try:
            k = socket.create_connection(("127.0.0.1", 9), timeout=0.5)
            k.close()
        except OSError:
            pass
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    expect(os.waitstatus_to_exitcode(status) == 0, "child's send on our socket failed cleanly")
    s.sendall(b"parent")
    expect(s.recv(10) == b"parent", "the parent's socket still works")
    s.close()


for name, fn in [
    ("blocking-echo", blocking_echo),
    ("nonblocking-connect", nonblocking_connect),
    ("connect-refused", refused),
    ("getsockname-getpeername", names),
    ("peek-dontwait-fionread-waitall", peek_dontwait_fionread),
    ("sendmsg-recvmsg", vectored),
    ("socket-options-tcp-info", options),
    ("dup-dup2-fdupfd", dup_and_close),
    ("shutdown-write", shutdown_write),
    ("reset-epipe", reset_and_epipe),
    ("poll-select-mixed", mixed_poll),
    ("epoll-et-oneshot-rdhup", epoll_modes),
    ("listen-accept", listen_accept),
    ("threads", threads_block_only_themselves),
    ("signal", signal_interrupts_a_wait),
    ("fork", fork_child),
]:
    check(name, fn)
sys.exit(1 if failures else 0)
