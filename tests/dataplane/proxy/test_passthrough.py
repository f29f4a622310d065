#!/usr/bin/env python3
"""Black-box tests of TLS passthrough, PROXY protocol and trusted proxies.

Real kwd-controller (compiles the objects) and kwd-proxy processes on
loopback; TLS backends are Python ssl servers with an openssl-made
certificate. Each backend answers a TLS connection with its own name, so the
client learns which server the proxy chose without the proxy decrypting
anything. The backends speak only TLS, as SAP's HTTPS ports do: the proxy's
health checks of passthrough groups come over TLS (an HTTP GET inside) and get
200, or 503 while the backend plays unhealthy; plain TCP is closed unanswered.

Needs KWD_PROXY and KWD_CONTROLLER (the built binaries), set by ctest.
"""

import os
import sys
import re
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")
NAMES = ["a.example.test", "x.wild.example.test", "sticky.example.test",
         "health.example.test", "unknown.example.test", "other.test", "quiet.example.test"]


def make_cert(directory):
    cert = os.path.join(directory, "server.pem")
    key = os.path.join(directory, "server.key")
    san = ",".join("DNS:" + n for n in NAMES)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=kwd-test",
         "-addext", "subjectAltName=" + san],
        check=True, capture_output=True, timeout=60)
    return cert, key


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


class Backend:
    """A TLS-only server answering its name; an HTTP request inside TLS (a
    health check) gets a health answer; plain TCP is closed unanswered."""

    def __init__(self, name, cert, key):
        self.name = name
        self.healthy = True
        self.silent = False  # accepts, then never answers (a hung server)
        self.tls_connections = 0  # passthrough clients (not health checks)
        self.health_checks = 0  # HTTP requests over TLS
        self.plain_connections = 0
        self.last_sni = None  # of the last health check
        self.last_check_head = b""
        self.lock = threading.Lock()
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.context.sni_callback = self.on_sni
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    @staticmethod
    def on_sni(sslobj, name, context):
        sslobj.kwd_sni = name

    def serve(self, conn):
        conn.settimeout(10)
        try:
            if self.silent:
                deadline = time.monotonic() + 10
                while self.silent and not self.closed and time.monotonic() < deadline:
                    time.sleep(0.05)
                return
            first = conn.recv(1, socket.MSG_PEEK)
            if first != b"\x16":
                with self.lock:
                    self.plain_connections += 1
                return
            tls = self.context.wrap_socket(conn, server_side=True)
            data = b""
            while not data.endswith(b"\n"):
                chunk = tls.recv(1024)
                if not chunk:
                    break
                data += chunk
            if data.startswith(b"GET "):
                while b"\r\n\r\n" not in data:
                    chunk = tls.recv(1024)
                    if not chunk:
                        break
                    data += chunk
                with self.lock:
                    self.health_checks += 1
                    self.last_check_head = data
                    self.last_sni = getattr(tls, "kwd_sni", None)
                status = b"200 OK" if self.healthy else b"503 Service Unavailable"
                tls.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n"
                            b"Connection: close\r\n\r\nok")
            else:
                with self.lock:
                    self.tls_connections += 1
                tls.sendall(self.name.encode() + b" " + data)
            tls.close()
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def close(self):
        self.closed = True
        self.sock.close()


class HttpEcho:
    """A plain HTTP backend answering with the request head it received."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        conn.settimeout(10)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head = data.split(b"\r\n\r\n", 1)[0]
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % len(head) + head)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()


def client_context():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def tls_ask(port, sni, prefix=b"", chunk=None, records=None, timeout=5):
    """One TLS connection through the proxy: returns the backend's name, or
    None when the proxy closed it. The handshake runs over memory BIOs so
    the ClientHello can be sent in `chunk`-byte writes and re-framed into
    TLS records of `records` bytes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context().wrap_bio(incoming, outgoing, server_hostname=sni)
    try:
        if prefix:
            sock.sendall(prefix)
        first = True
        deadline = time.monotonic() + timeout
        while True:
            try:
                tls.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            out = outgoing.read()
            if out:
                if first and records:
                    out = reframe(out, records)
                if first and chunk:
                    # A pause after each of the first 64 pieces (the record
                    # and handshake headers), then after every 8th: the
                    # pieces arrive apart, and the whole hello stays well
                    # inside the proxy's 1 s ClientHello timeout even on a
                    # loaded machine where each sleep takes several ms.
                    for n, i in enumerate(range(0, len(out), chunk)):
                        sock.sendall(out[i:i + chunk])
                        if n < 64 or n % 8 == 0:
                            time.sleep(0.001)
                else:
                    sock.sendall(out)
                first = False
            if done:
                break
            if time.monotonic() > deadline:
                return None
            data = sock.recv(65536)
            if not data:
                return None
            incoming.write(data)
        tls.write(b"hello\n")
        sock.sendall(outgoing.read())
        answer = b""
        while not answer.endswith(b"\n"):
            data = sock.recv(65536)
            if not data:
                break
            incoming.write(data)
            try:
                answer += tls.read(65536)
            except ssl.SSLWantReadError:
                continue
            except ssl.SSLZeroReturnError:
                break
        return answer.decode().split(" ")[0] if answer else None
    except (OSError, ssl.SSLError):
        return None
    finally:
        sock.close()


def reframe(flight, size):
    """The first TLS record of `flight` (the ClientHello) split into records
    of at most `size` payload bytes."""
    content_type, version, length = flight[0], flight[1:3], struct.unpack("!H", flight[3:5])[0]
    payload, rest = flight[5:5 + length], flight[5 + length:]
    out = b""
    for i in range(0, len(payload), size):
        part = payload[i:i + size]
        out += bytes([content_type]) + version + struct.pack("!H", len(part)) + part
    return out + rest


def closed_without_answer(port, data, timeout=5):
    """Sends `data`, returns (closed, seconds until the close)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        if data:
            sock.sendall(data)
        try:
            while True:
                got = sock.recv(65536)
                if not got:
                    return True, time.monotonic() - start
        except socket.timeout:
            return False, time.monotonic() - start
        except ConnectionResetError:
            return True, time.monotonic() - start


def proxy_v2(source, port=40000, dest="127.0.0.1", dport=443):
    addresses = socket.inet_aton(source) + socket.inet_aton(dest) + struct.pack("!HH", port, dport)
    return (b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", len(addresses))
            + addresses)


GROUP = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: %(name)s, namespace: t}
spec:
  kind: java
  healthCheck: {path: /ping, intervalSeconds: 1, timeoutSeconds: 1, unhealthyThreshold: 1}
%(affinity)s  backend:
    staticServers:
%(servers)s
---
"""

MAPPING = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: %(name)s, namespace: t}
spec:
  hosts: %(hosts)s
  passthroughGroup: %(group)s
%(extra)s---
"""


class Proxy:
    def __init__(self, directory, name, objects, flags):
        self.dir = os.path.join(directory, name)
        os.makedirs(os.path.join(self.dir, "objects"))
        with open(os.path.join(self.dir, "objects", "objects.yaml"), "w") as f:
            f.write(objects)
        compiled = subprocess.run(
            [CONTROLLER, "compile", "--source=dir:" + os.path.join(self.dir, "objects")],
            capture_output=True, text=True, timeout=60)
        assert compiled.returncode == 0, compiled.stderr
        self.snapshot = compiled.stdout
        snapshot = os.path.join(self.dir, "snapshot.json")
        with open(snapshot, "w") as f:
            f.write(compiled.stdout)
        self.access_log = os.path.join(self.dir, "access.log")
        self.admin_port = free_port()
        self.stderr = open(os.path.join(self.dir, "proxy.stderr"), "w")
        self.process = subprocess.Popen(
            [PROXY, "serve", "--snapshot", snapshot, "--listen", "127.0.0.1:0",
             "--admin-listen", "127.0.0.1:%d" % self.admin_port, "--workers", "1",
             "--passthrough-listen", "127.0.0.1:0", "--access-log", self.access_log,
             "--header-timeout", "1s"] + flags,
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.port = self.passthrough_port = self.tls_port = None
        for _ in range(10):
            line = self.process.stdout.readline()
            if line.startswith("listening "):
                self.port = int(line.rsplit(":", 1)[1])
            elif line.startswith("listening-tls "):
                self.tls_port = int(line.rsplit(":", 1)[1])
            elif line.startswith("passthrough "):
                self.passthrough_port = int(line.rsplit(":", 1)[1])
                break
            elif not line:
                break
        assert self.port and self.passthrough_port, "kwd-proxy did not start"

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.admin_port,
                                    timeout=5) as r:
            return r.read().decode()

    def state(self):
        import json
        with urllib.request.urlopen("http://127.0.0.1:%d/admin/api/state" % self.admin_port,
                                    timeout=5) as r:
            return json.loads(r.read().decode())

    def wait_up(self, group, server, up, deadline_s=15):
        want = 1 if up else 0
        deadline = time.monotonic() + deadline_s
        while self.metric(r'kwd_proxy_server_up\{group="%s",server="%s"\}' % (group, server)) \
                != want:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def metric(self, pattern):
        match = re.search("^" + pattern + r" (\S+)$", self.metrics(), re.M)
        return float(match.group(1)) if match else None

    def log_lines(self, needle, deadline_s=5):
        """Access-log lines holding `needle` (waits for the worker's flush)."""
        deadline = time.monotonic() + deadline_s
        while True:
            with open(self.access_log) as f:
                lines = [line for line in f if needle in line]
            if lines or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.stderr.close()


def servers(*backends, capacities=None):
    lines = []
    for i, b in enumerate(backends):
        capacity = capacities[i] if capacities else 1
        lines.append("      - {name: %s, address: 127.0.0.1, port: %d, capacity: %d}"
                     % (b.name, b.port, capacity))
    return "\n".join(lines)


class PassthroughTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PROXY or not CONTROLLER:
            raise unittest.SkipTest("set KWD_PROXY and KWD_CONTROLLER to the built binaries")
        cls.dir = tempfile.mkdtemp(prefix="kwd-passthrough-")
        cert, key = make_cert(cls.dir)
        cls.cert_dir = os.path.join(cls.dir, "certs")
        os.makedirs(cls.cert_dir)
        shutil.copy(cert, os.path.join(cls.cert_dir, "site.crt"))
        shutil.copy(key, os.path.join(cls.cert_dir, "site.key"))
        b = {n: Backend(n, cert, key)
             for n in ["a1", "a2", "w1", "s1", "s2", "h1", "h2", "d1", "q1", "q2"]}
        cls.backends = b
        cls.web = HttpEcho()
        affinity = "  sessionAffinity:\n    clientIP: {mask: 255.255.255.0, maxEntries: 100}\n"
        groups = (GROUP % dict(name="alpha", affinity="", servers=servers(
                      b["a1"], b["a2"], capacities=[1, 3]))
                  + GROUP % dict(name="wild", affinity="", servers=servers(b["w1"]))
                  + GROUP % dict(name="sticky", affinity=affinity,
                                 servers=servers(b["s1"], b["s2"]))
                  + GROUP % dict(name="health", affinity="", servers=servers(b["h1"], b["h2"]))
                  + GROUP % dict(name="dflt", affinity="", servers=servers(b["d1"]))
                  + GROUP % dict(name="quiet", affinity="", servers=servers(b["q1"], b["q2"]))
                  + GROUP.replace("healthCheck: {path: /ping, intervalSeconds: 1, timeoutSeconds:"
                                  " 1, unhealthyThreshold: 1}", "healthCheck: {path: /}")
                  % dict(name="web", affinity="", servers=
                         "      - {name: web1, address: 127.0.0.1, port: %d}" % cls.web.port))
        mappings = (MAPPING % dict(name="a", hosts="[a.example.test]", group="alpha", extra="")
                    + MAPPING % dict(name="w", hosts='["*.wild.example.test"]', group="wild",
                                     extra="")
                    + MAPPING % dict(name="s", hosts="[sticky.example.test]", group="sticky",
                                     extra="")
                    + MAPPING % dict(name="h", hosts="[health.example.test]", group="health",
                                     extra="")
                    + MAPPING % dict(name="q", hosts="[quiet.example.test]", group="quiet",
                                     extra=""))
        default = MAPPING % dict(
            name="any", hosts="[]", group="dflt",
            extra="  defaultGroups: {java: web}\n"
                  "  permissions:\n    - {action: secure, pattern: /secure/*}\n")
        b["h2"].healthy = False
        cls.plain = Proxy(cls.dir, "plain", groups + mappings, [])
        cls.fronted = Proxy(cls.dir, "fronted", groups + mappings + default,
                            ["--proxy-protocol", "http,tls,passthrough",
                             "--tls-listen", "127.0.0.1:0", "--tls-cert-dir", cls.cert_dir,
                             "--trusted-proxies", "10.0.0.0/8, 192.168.1.1"])

    @classmethod
    def tearDownClass(cls):
        cls.plain.close()
        cls.fronted.close()
        for b in cls.backends.values():
            b.close()
        cls.web.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # ---- controller ----

    def test_snapshot_carries_the_passthrough_fields(self):
        import json
        snapshot = json.loads(self.fronted.snapshot)
        hosts = {v.get("host", ""): v for v in snapshot["virtualHosts"]}
        self.assertEqual(hosts["a.example.test"]["passthroughGroup"], "t/alpha")
        self.assertEqual(hosts[""]["passthroughGroup"], "t/dflt")
        groups = {g["key"]: g for g in snapshot["groups"]}
        client_ip = groups["t/sticky"]["sessionAffinity"]["clientIp"]
        self.assertEqual(client_ip["ipv4Mask"], 0xFFFFFF00)
        self.assertEqual(client_ip["maxEntries"], 100)
        self.assertEqual(client_ip["idleTimeoutSeconds"], 3600)
        self.assertNotIn("clientIp", groups["t/alpha"].get("sessionAffinity", {}))

    # ---- routing by SNI ----

    def test_sni_picks_the_group_exact_and_wildcard(self):
        self.assertIn(tls_ask(self.plain.passthrough_port, "a.example.test"), ("a1", "a2"))
        self.assertEqual(tls_ask(self.plain.passthrough_port, "x.wild.example.test"), "w1")
        self.assertEqual(tls_ask(self.plain.passthrough_port, "X.Wild.Example.Test"), "w1")

    def test_unknown_or_missing_sni_without_default_is_closed_and_counted(self):
        before = self.plain.metric(r'kwd_proxy_passthrough_rejected_total\{reason="no-route"\}')
        self.assertIsNone(tls_ask(self.plain.passthrough_port, "unknown.example.test"))
        self.assertIsNone(tls_ask(self.plain.passthrough_port, None))
        after = self.plain.metric(r'kwd_proxy_passthrough_rejected_total\{reason="no-route"\}')
        self.assertEqual(after - before, 2)

    def test_unknown_and_missing_sni_take_the_default_group(self):
        v2 = proxy_v2("10.9.9.9")
        self.assertEqual(tls_ask(self.fronted.passthrough_port, "unknown.example.test",
                                 prefix=v2), "d1")
        self.assertEqual(tls_ask(self.fronted.passthrough_port, None, prefix=v2), "d1")
        # A host with its own passthrough group still gets it.
        self.assertEqual(tls_ask(self.fronted.passthrough_port, "x.wild.example.test",
                                 prefix=v2), "w1")

    # ---- balancing ----

    def test_capacity_ratio_over_many_connections(self):
        counts = {"a1": 0, "a2": 0}
        for _ in range(40):
            counts[tls_ask(self.plain.passthrough_port, "a.example.test")] += 1
        # Capacities 1 and 3: every fourth connection goes to a1.
        self.assertEqual(counts, {"a1": 10, "a2": 30})

    def test_client_ip_affinity_keeps_a_client_on_its_server(self):
        seen = {tls_ask(self.plain.passthrough_port, "sticky.example.test") for _ in range(8)}
        self.assertEqual(len(seen), 1, seen)
        # Through PROXY headers: 10.1.1.x share one entry (mask /24) and so
        # one server; the other /24s are balanced over both servers.
        port = self.fronted.passthrough_port
        servers_by_net = {}
        for net in range(6):
            names = {tls_ask(port, "sticky.example.test", prefix=proxy_v2("10.2.%d.%d" % (net, h)))
                     for h in (1, 77, 200)}
            self.assertEqual(len(names), 1, (net, names))
            servers_by_net[net] = names.pop()
        self.assertEqual(set(servers_by_net.values()), {"s1", "s2"})

    def test_unhealthy_server_is_skipped(self):
        deadline = time.monotonic() + 15
        while self.plain.metric(r'kwd_proxy_server_up\{group="t/health",server="h2"\}') != 0:
            self.assertLess(time.monotonic(), deadline, "h2 never marked down")
            time.sleep(0.1)
        before = self.backends["h2"].tls_connections
        names = [tls_ask(self.plain.passthrough_port, "health.example.test") for _ in range(6)]
        self.assertEqual(names, ["h1"] * 6)
        self.assertEqual(self.backends["h2"].tls_connections, before)

    # ---- health checks over TLS ----

    def test_health_checks_of_passthrough_groups_are_tls(self):
        h1 = self.backends["h1"]
        self.assertTrue(self.plain.wait_up("t/health", "h1", True))
        deadline = time.monotonic() + 15
        while h1.health_checks == 0:
            self.assertLess(time.monotonic(), deadline, "no TLS health check reached h1")
            time.sleep(0.1)
        # SNI and Host are the UrlMapping's one exact host; the path is healthCheck.path.
        self.assertEqual(h1.last_sni, "health.example.test")
        self.assertTrue(h1.last_check_head.startswith(b"GET /ping HTTP/1.1\r\n"),
                        h1.last_check_head)
        self.assertIn(b"\r\nHost: health.example.test\r\n", h1.last_check_head)
        # A wildcard host is no name to ask for: the address (no SNI for an IP).
        w1 = self.backends["w1"]
        while w1.health_checks == 0:
            self.assertLess(time.monotonic(), deadline, "no TLS health check reached w1")
            time.sleep(0.1)
        self.assertIsNone(w1.last_sni)
        # TLS-only servers stay up and take connections; nothing came in clear.
        self.assertTrue(self.plain.wait_up("t/alpha", "a1", True))
        self.assertTrue(self.plain.wait_up("t/alpha", "a2", True))
        self.assertIn(tls_ask(self.plain.passthrough_port, "a.example.test"), ("a1", "a2"))
        for name in ("a1", "a2", "w1", "h1", "h2", "s1", "s2", "q1", "q2"):
            self.assertEqual(self.backends[name].plain_connections, 0, name)

    def test_backend_that_stops_answering_is_marked_down_and_skipped(self):
        q2 = self.backends["q2"]
        self.assertTrue(self.plain.wait_up("t/quiet", "q1", True))
        self.assertTrue(self.plain.wait_up("t/quiet", "q2", True))
        q2.silent = True
        try:
            self.assertTrue(self.plain.wait_up("t/quiet", "q2", False), "q2 never marked down")
            before = q2.tls_connections
            names = [tls_ask(self.plain.passthrough_port, "quiet.example.test")
                     for _ in range(6)]
            self.assertEqual(names, ["q1"] * 6)
            self.assertEqual(q2.tls_connections, before)
        finally:
            q2.silent = False
        self.assertTrue(self.plain.wait_up("t/quiet", "q2", True), "q2 never came back")

    # ---- admin views ----

    def test_admin_state_shows_passthrough_groups_and_counters(self):
        self.assertEqual(tls_ask(self.plain.passthrough_port, "x.wild.example.test"), "w1")
        state = self.plain.state()
        groups = {g["key"]: g for g in state["groups"]}
        wild = groups["t/wild"]["passthrough"]
        self.assertEqual(wild["hosts"], ["*.wild.example.test"])
        self.assertGreaterEqual(wild["connections"], 1)
        self.assertGreater(wild["bytes_in"], 0)
        self.assertGreater(wild["bytes_out"], 0)
        self.assertEqual(wild["errors"], self.plain.metric(
            r'kwd_proxy_passthrough_errors_total\{group="t/wild"\}'))
        self.assertEqual(groups["t/health"]["health_check"],
                         {"path": "/ping", "protocol": "tls",
                          "server_name": "health.example.test"})
        self.assertIsNone(groups["t/wild"]["health_check"]["server_name"])
        # In the plain proxy no host names dflt: not a passthrough group, checked in HTTP.
        self.assertIsNone(groups["t/dflt"]["passthrough"])
        self.assertEqual(groups["t/dflt"]["health_check"]["protocol"], "http")
        hosts = {h["host"]: h for h in state["url_mapping"]}
        self.assertEqual(hosts["a.example.test"]["passthrough_group"], "t/alpha")
        self.assertEqual(hosts["*.wild.example.test"]["passthrough_group"], "t/wild")
        # The any-host entry's passthrough group is the default; its HTTP
        # group stays an HTTP group.
        fronted = self.fronted.state()
        fgroups = {g["key"]: g for g in fronted["groups"]}
        self.assertEqual(fgroups["t/dflt"]["passthrough"]["hosts"], [None])
        self.assertEqual(fgroups["t/dflt"]["health_check"]["protocol"], "tls")
        self.assertIsNone(fgroups["t/web"]["passthrough"])
        self.assertEqual(fgroups["t/web"]["health_check"]["protocol"], "http")
        any_host = [h for h in fronted["url_mapping"] if h["host"] is None][0]
        self.assertEqual(any_host["passthrough_group"], "t/dflt")
        self.assertEqual(any_host["default_groups"]["java"], "t/web")

    # ---- bad input ----

    def test_client_hello_split_byte_by_byte_and_over_records(self):
        port = self.plain.passthrough_port
        self.assertEqual(tls_ask(port, "x.wild.example.test", chunk=1), "w1")
        self.assertEqual(tls_ask(port, "x.wild.example.test", records=7, chunk=5), "w1")

    def test_garbage_is_closed_at_once(self):
        closed, seconds = closed_without_answer(self.plain.passthrough_port,
                                                b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        self.assertTrue(closed)
        self.assertLess(seconds, 0.9)  # not the 1 s ClientHello timeout
        self.assertTrue(self.plain.log_lines('"bad-client-hello') or
                        self.plain.log_lines("bad-client-hello"))

    def test_oversized_client_hello_is_closed(self):
        # A record announcing a 64 KiB ClientHello: beyond the 16 KiB limit.
        data = b"\x16\x03\x01\x40\x00" + b"\x01\x01\x00\x00" + b"\x00" * 16380
        closed, seconds = closed_without_answer(self.plain.passthrough_port, data)
        self.assertTrue(closed)
        self.assertLess(seconds, 0.9)
        self.assertTrue(self.plain.log_lines("client-hello-too-large"))

    def test_stalled_client_hello_times_out(self):
        before = self.plain.metric(r'kwd_proxy_passthrough_rejected_total\{reason="timeout"\}')
        closed, seconds = closed_without_answer(self.plain.passthrough_port,
                                                b"\x16\x03\x01\x02\x00\x01", timeout=8)
        self.assertTrue(closed)
        self.assertGreaterEqual(seconds, 0.9)
        after = self.plain.metric(r'kwd_proxy_passthrough_rejected_total\{reason="timeout"\}')
        self.assertEqual(after - before, 1)

    def test_other_connections_are_undisturbed_by_bad_ones(self):
        stalled = socket.create_connection(("127.0.0.1", self.plain.passthrough_port))
        stalled.sendall(b"\x16\x03")
        try:
            self.assertEqual(tls_ask(self.plain.passthrough_port, "x.wild.example.test"), "w1")
        finally:
            stalled.close()

    def test_group_metrics(self):
        before = self.plain.metric(
            r'kwd_proxy_passthrough_connections_total\{group="t/wild"\}') or 0
        self.assertEqual(tls_ask(self.plain.passthrough_port, "x.wild.example.test"), "w1")
        self.assertEqual(self.plain.metric(
            r'kwd_proxy_passthrough_connections_total\{group="t/wild"\}'), before + 1)
        self.assertGreater(self.plain.metric(
            r'kwd_proxy_passthrough_bytes_total\{direction="in",group="t/wild"\}') or
            self.plain.metric(
                r'kwd_proxy_passthrough_bytes_total\{group="t/wild",direction="in"\}'), 0)

    # ---- PROXY protocol ----

    def test_proxy_v1_and_v2_set_the_logged_client(self):
        port = self.fronted.passthrough_port
        v1 = b"PROXY TCP4 10.7.7.7 127.0.0.1 5555 443\r\n"
        self.assertEqual(tls_ask(port, "x.wild.example.test", prefix=v1), "w1")
        self.assertTrue(self.fronted.log_lines("10.7.7.7 "))
        self.assertEqual(tls_ask(port, "x.wild.example.test", prefix=proxy_v2("10.8.8.8")), "w1")
        self.assertTrue(self.fronted.log_lines("10.8.8.8 "))

    def test_missing_proxy_header_is_refused(self):
        self.assertIsNone(tls_ask(self.fronted.passthrough_port, "x.wild.example.test"))
        closed, _ = closed_without_answer(self.fronted.port, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertTrue(closed)
        # A header that never completes: the header timeout (1 s) closes it.
        closed, seconds = closed_without_answer(self.fronted.port, b"PROXY TCP4 1.2", timeout=8)
        self.assertTrue(closed)
        self.assertGreaterEqual(seconds, 0.9)
        self.assertGreaterEqual(self.fronted.metric("kwd_proxy_proxy_protocol_rejected_total"), 3)

    def http(self, proxy_header, extra=b"", path=b"/secure/x"):
        with socket.create_connection(("127.0.0.1", self.fronted.port), timeout=5) as s:
            s.sendall(proxy_header + b"GET " + path + b" HTTP/1.1\r\nHost: h\r\n" + extra +
                      b"Connection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data

    def test_proxy_header_address_goes_to_x_forwarded_for(self):
        data = self.http(b"PROXY TCP4 198.51.100.4 127.0.0.1 5555 80\r\n", path=b"/open")
        self.assertIn(b"X-Forwarded-For: 198.51.100.4\r\n", data)
        data = self.http(proxy_v2("198.51.100.5"), path=b"/open")
        self.assertIn(b"X-Forwarded-For: 198.51.100.5\r\n", data)

    def test_proxy_header_before_the_tls_handshake(self):
        with socket.create_connection(("127.0.0.1", self.fronted.tls_port), timeout=5) as raw:
            raw.sendall(b"PROXY TCP4 198.51.100.44 127.0.0.1 5555 443\r\n")
            with client_context().wrap_socket(raw, server_hostname="a.example.test") as tls:
                tls.sendall(b"GET /open HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = tls.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:200])
        self.assertIn(b"X-Forwarded-For: 198.51.100.44\r\n", data)
        self.assertIn(b"X-Forwarded-Proto: https\r\n", data)
        # Without the header the TLS listener refuses the connection.
        with socket.create_connection(("127.0.0.1", self.fronted.tls_port), timeout=5) as raw:
            with self.assertRaises((ssl.SSLError, OSError)):
                with client_context().wrap_socket(raw, server_hostname="a.example.test") as tls:
                    tls.sendall(b"GET /open HTTP/1.1\r\nHost: h\r\n\r\n")
                    if not tls.recv(100):
                        raise OSError("closed")

    # ---- trusted proxies ----

    def test_trusted_proxy_may_say_https_for_a_secure_rule(self):
        trusted = b"PROXY TCP4 10.0.0.5 127.0.0.1 5555 80\r\n"
        untrusted = b"PROXY TCP4 198.51.100.9 127.0.0.1 5555 80\r\n"
        https = b"X-Forwarded-Proto: https\r\nX-Forwarded-For: 203.0.113.7, 192.168.1.1\r\n"
        data = self.http(trusted, https)
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:200])
        self.assertIn(b"X-Forwarded-Proto: https\r\n", data)
        self.assertIn(b"X-Forwarded-For: 203.0.113.7, 192.168.1.1, 10.0.0.5\r\n", data)
        # The log names the right-most untrusted address.
        self.assertTrue(self.fronted.log_lines('203.0.113.7 - - '))
        data = self.http(untrusted, https)
        self.assertTrue(data.startswith(b"HTTP/1.1 403"), data[:200])
        data = self.http(untrusted, https, path=b"/open")
        self.assertIn(b"X-Forwarded-Proto: http\r\n", data)
        # An untrusted peer's X-Forwarded-For is replaced, not extended: the
        # server sees only the address kwd saw.
        self.assertIn(b"X-Forwarded-For: 198.51.100.9\r\n", data)
        self.assertNotIn(b"203.0.113.7", data)
        self.assertTrue(self.fronted.log_lines('198.51.100.9 - - '))


if __name__ == "__main__":
    unittest.main(verbosity=2)
