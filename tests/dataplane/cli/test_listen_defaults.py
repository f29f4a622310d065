#!/usr/bin/python3
"""Safe defaults: without --admin-listen/--grpc-listen, kwd-proxy's admin port
and kwd-controller's admin and gRPC ports listen on loopback only; the
traffic listener stays on every address.

Each binary runs with no listen flags in a network namespace of its own
(`unshare -rn`), so the fixed default ports collide with nothing on the host,
and its listening sockets are read from /proc/PID/net/tcp (that namespace's
view). Skipped where unprivileged user namespaces are not allowed.
Debian's python3, standard library only.
"""
import os
import shutil
import subprocess
import tempfile
import time
import unittest

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
BINARY_DIR = os.environ.get("KWD_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
PROXY = os.path.join(BINARY_DIR, "kwd-proxy")
CONTROLLER = os.path.join(BINARY_DIR, "kwd-controller")
QUICKSTART = os.path.join(SOURCE_DIR, "examples", "quickstart")
# Brings the namespace's loopback up, then becomes the binary (same PID).
IN_NETNS = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def ipv4(word):
    """/proc/net/tcp's little-endian hex of an IPv4 address, dotted."""
    return ".".join(str(int(word[i:i + 2], 16)) for i in (6, 4, 2, 0))


def listeners(pid):
    """{"127.0.0.1:9901", ...}: the TCP sockets in LISTEN state that the
    process's network namespace holds; IPv4-mapped IPv6 addresses (gRPC
    binds those) as IPv4, other IPv6 addresses as "[hex]"."""
    found = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":  # TCP_LISTEN
                    continue
                address, port = fields[1].split(":")
                if len(address) == 8:
                    host = ipv4(address)
                elif address[:24] == "0000000000000000FFFF0000":
                    host = ipv4(address[24:])
                else:
                    host = "[" + address + "]"
                found.add(host + ":" + str(int(port, 16)))
    return found


class ListenDefaultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        probe = subprocess.run(IN_NETNS + ["true"], capture_output=True, timeout=30, check=False)
        if probe.returncode != 0:
            raise unittest.SkipTest("no unprivileged network namespace here: " +
                                    probe.stderr.decode(errors="replace").strip())

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kwd-listen-defaults-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def run_in_netns(self, argv, want):
        log = open(os.path.join(self.dir, "log"), "w")
        self.addCleanup(log.close)
        process = subprocess.Popen(IN_NETNS + argv, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 20
            seen = set()
            while time.monotonic() < deadline and process.poll() is None:
                seen = listeners(process.pid)
                if want <= seen:
                    break
                time.sleep(0.05)
            return seen
        finally:
            process.terminate()
            process.wait(timeout=15)

    def test_proxy_admin_port_is_loopback(self):
        snapshot = os.path.join(self.dir, "snapshot.json")
        with open(snapshot, "w") as out:
            subprocess.run([CONTROLLER, "compile", "--source=dir:" + QUICKSTART], stdout=out,
                           timeout=60, check=True)
        seen = self.run_in_netns([PROXY, "serve", "--snapshot", snapshot, "--access-log", "off"],
                                 {"127.0.0.1:9901", "0.0.0.0:8080"})
        self.assertEqual(seen, {"127.0.0.1:9901", "0.0.0.0:8080"})

    def test_controller_admin_and_grpc_ports_are_loopback(self):
        seen = self.run_in_netns([CONTROLLER, "serve", "--source=dir:" + QUICKSTART],
                                 {"127.0.0.1:9902", "127.0.0.1:18000"})
        self.assertEqual(seen, {"127.0.0.1:9902", "127.0.0.1:18000"})


if __name__ == "__main__":
    unittest.main()
