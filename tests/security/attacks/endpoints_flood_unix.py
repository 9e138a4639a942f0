#!/usr/bin/env python3
"""An idle-connection flood on a unix socket, from a process of its own (the gRPC servers
share their connections out per peer process):

    endpoints_flood_unix.py SOCKET COUNT

Opens COUNT connections that send nothing, prints "ready", and reopens each one the server
closes (checked five times a second) until its standard input closes."""
import os
import select
import socket
import sys


def open_one(path):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        s.setblocking(False)
        return s
    except OSError:
        s.close()
        return None


def closed(s):
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def main():
    path, count = sys.argv[1], int(sys.argv[2])
    socks = [open_one(path) for _ in range(count)]
    print("ready", flush=True)
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 0.2)
        if r and not os.read(sys.stdin.fileno(), 1):
            break
        for i, s in enumerate(socks):
            if s is None or closed(s):
                if s is not None:
                    s.close()
                socks[i] = open_one(path)
    for s in socks:
        if s is not None:
            s.close()


if __name__ == "__main__":
    main()
