#!/usr/bin/python3
"""free_port.py HOST: print a TCP port that is free on HOST now, for a
test's daemon to bind a moment later (free_port(host) for Python tests).

The port is taken below the kernel's ephemeral range
(net.ipv4.ip_local_port_range), from half its start up, at a random
place: the kernel hands ports of that range to outgoing connections, so a
port found by binding port 0 can be taken by any connection (one of the
test's own clients) before the daemon binds it."""
import random
import socket
import sys


def free_port(host="127.0.0.1"):
    """A port free on host now, below the ephemeral range; OSError if none."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32768
    first = max(1024, lo // 2)
    ports = list(range(first, lo))
    random.shuffle(ports)
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise OSError("no free port on %s in %d-%d" % (host, first, lo - 1))


if __name__ == "__main__":
    try:
        print(free_port(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"))
    except OSError as e:
        sys.exit("free_port.py: %s" % e)
