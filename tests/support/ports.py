"""Ports for the servers a test starts (proxies, controllers, backends).

A port reserved by binding port 0 and closing the socket comes from the
kernel's ephemeral range: until the test's server binds it, any process's
next outgoing connection may take it as its local port (the server then fails
with "Address already in use"), and a parallel test may be handed the same
one. free_port() picks at random below the ephemeral range instead, where the
kernel never picks local ports, and checks that nothing is bound to it.
tests/support/process.cc's ReserveFreePort() does the same for C++ tests.
Tests that need fixed ports take them below LOWEST (bench.proxies_smoke:
PORT_BASE=19600).
"""

import random
import socket

LOWEST = 20000


def ephemeral_low():
    """The first port of the kernel's ephemeral range (32768 if unknown)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A loopback TCP port nothing is bound to, outside the ephemeral range."""
    highest = ephemeral_low() - 1
    if highest - LOWEST >= 1000:
        pick = random.SystemRandom()
        for _ in range(200):  # bounded
            port = pick.randint(LOWEST, highest)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    print(free_port())
