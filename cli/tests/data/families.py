"""IPv6-family sockets as programs open them, for cli/tests/exec_families.rs.

  families.py dual PORT [N]        a dual-stack server (socket.create_server,
                                   AF_INET6, dualstack_ipv6=True): accepts N
                                   connections (1), one after the other, says
                                   their names, echoes each to EOF
  families.py mapped ADDR PORT     an AF_INET6 client of IPv4 ADDR through its
                                   v4-mapped address: says the names, echoes
  families.py calls LOCAL6 PEER6 PEER4 PORT
                                   the calls exec leaves to the kernel: listen
                                   on [LOCAL6]:PORT, dual-stack on [::]:PORT+1,
                                   connect to [PEER6]:PORT+2, MSG_FASTOPEN to
                                   PEER4:PORT+3; each says "ok" or its errno;
                                   then accepts one IPv6 peer on the first
  families.py peer PEER6 PEER4 PORT  the Linux side of "calls" (PORT+2, PORT+3)
  families.py client ADDR PORT     connects to ADDR:PORT (either family),
                                   sends 30 bytes, says what comes back
  families.py echo ADDR PORT       an echo server of one connection on ADDR
                                   (IPv4 or IPv6)

Every wait is bounded (socket timeouts); output is flushed line by line.
"""

import socket
import sys

T = 10.0


def say(*a):
    print(*a, flush=True)


def names(tag, s):
    dom = s.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
    say(f"{tag} local={s.getsockname()[0]} peer={s.getpeername()[0]} domain={dom}")


def to_eof(c):
    """Ends our side, reads the peer's to its end, closes."""
    c.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = c.recv(100)
        if not b:
            break
        got += b
    c.close()
    return got


def echo(c):
    while True:
        b = c.recv(65536)
        if not b:
            return
        c.sendall(b)


def dual(port, n):
    srv = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    srv.settimeout(T)
    say(f"listening on {srv.getsockname()[0]} port {srv.getsockname()[1]}")
    for _ in range(n):
        c, peer = srv.accept()
        c.settimeout(T)
        say(f"accept returned {peer[0]}")
        names("accepted", c)
        echo(c)
        c.close()
    srv.close()
    say("done")


def echo_once(srv):
    c, _ = srv.accept()
    c.settimeout(T)
    echo(c)
    c.close()


def mapped(addr, port):
    c = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    c.settimeout(T)
    c.connect(("::ffff:" + addr, port))
    names("connected", c)
    c.sendall(b"ping over a v4-mapped address")
    say("echoed", to_eof(c).decode())


def attempt(tag, f):
    try:
        f()
        say(f"{tag} ok")
        return True
    except OSError as e:
        say(f"{tag} errno {e.errno}")
        return False


def calls(local6, peer6, peer4, port):
    s1 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s1.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s1.bind((local6, port))
    listening = attempt("listen6", lambda: s1.listen(8))
    s2 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s2.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s2.bind(("::", port + 1))
    attempt("dual", lambda: s2.listen(8))
    c = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    c.settimeout(T)
    attempt("connect6", lambda: c.connect((peer6, port + 2)))
    # Blocking (a timeout would make it non-blocking: EINPROGRESS); the
    # peer listens, and `timeout` bounds the whole program.
    f = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    attempt("fastopen", lambda: f.sendto(b"x", socket.MSG_FASTOPEN, (peer4, port + 3)))
    if listening:
        s1.settimeout(T)
        say("waiting")
        attempt("accept6", lambda: echo_once(s1))
    for s in (c, f, s1, s2):
        s.close()


def peer(peer6, peer4, port):
    ls = []
    for fam, addr, p in ((socket.AF_INET6, peer6, port + 2), (socket.AF_INET, peer4, port + 3)):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, p))
        s.listen(8)
        s.settimeout(30)
        ls.append(s)
    say("ready")
    for s in ls:
        try:
            c, _ = s.accept()
            c.close()
        except OSError:
            pass


def client(addr, port):
    c = socket.create_connection((addr, port), timeout=T)
    c.sendall(b"ping from the peer, thirty byt")
    say(f"client got {to_eof(c).decode()!r}")


def echo_server(addr, port):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    s.settimeout(30)
    say("ready")
    c, _ = s.accept()
    c.settimeout(T)
    echo(c)
    c.close()


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "dual":
        dual(int(args[0]), int(args[1]) if len(args) > 1 else 1)
    elif mode == "mapped":
        mapped(args[0], int(args[1]))
    elif mode == "calls":
        calls(args[0], args[1], args[2], int(args[3]))
    elif mode == "peer":
        peer(args[0], args[1], int(args[2]))
    elif mode == "client":
        client(args[0], int(args[1]))
    elif mode == "echo":
        echo_server(args[0], int(args[1]))
    else:
        sys.exit(f"unknown mode {mode}")


main()
