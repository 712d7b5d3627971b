"""Kernel-TCP peer of shim_probe.py: serves one scripted behaviour per
connection, chosen by the connection's first line.

  ECHO            echo until EOF, then close
  SINK            read to EOF, answer the byte count, close
  RST             close at once with SO_LINGER 0 (a reset)
  SEND n          send n pattern bytes, shut down writing, wait for EOF
  CONNECT port    connect back to the client's address on port, send
                  "hello", wait for EOF

Usage: shim_peer.py ADDR PORT SECONDS
"""
import socket
import struct
import sys
import threading
import time


def pattern(n):
    return bytes((i * 131 ^ (i >> 7)) & 0xFF for i in range(n))


def line(c):
    buf = b""
    while not buf.endswith(b"\n"):
        b = c.recv(1)
        if not b:
            return None
        buf += b
    return buf.decode().strip()


def serve(c, addr):
    try:
        cmd = line(c)
        if cmd is None:
            return
        if cmd == "ECHO":
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
        elif cmd == "SINK":
            n = 0
            while True:
                b = c.recv(65536)
                if not b:
                    break
                n += len(b)
            c.sendall(str(n).encode())
        elif cmd == "RST":
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif cmd.startswith("SEND "):
            c.sendall(pattern(int(cmd.split()[1])))
            c.shutdown(socket.SHUT_WR)
            while c.recv(65536):
                pass
        elif cmd.startswith("CONNECT "):
            back = socket.create_connection((addr[0], int(cmd.split()[1])), timeout=10)
            back.sendall(b"hello")
            back.shutdown(socket.SHUT_WR)
            while back.recv(65536):
                pass
            back.close()
            c.sendall(b"done")
    except OSError as e:
        print("peer:", cmd, e, file=sys.stderr)
    finally:
        c.close()


def main():
    addr, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)
    s.settimeout(0.5)
    end = time.time() + seconds
    print("ready", flush=True)
    while time.time() < end:
        try:
            c, a = s.accept()
        except socket.timeout:
            continue
        c.settimeout(20)
        threading.Thread(target=serve, args=(c, a), daemon=True).start()


main()
