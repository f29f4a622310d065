"""Who the client is, as the server hears it: black-box tests of the fields a
real kwd-proxy forwards (issue 23 items 3, 9, 11, 13; issue 24 item 4).

A real kwd-proxy (snapshot from the real kwd-controller) in front of
recording backends written here: raw sockets that answer every request with
what arrived, head fields and trailer fields each in order, so that a
forged or duplicated field cannot hide in a dictionary.

- SAP's forwarding fields (UrlMapping.spec.sapHeaders): an ABAP group's
  server gets ClientProtocol (http, or https over TLS) and x-sap-webdisp-ap
  with the public ports (--public-ports, else the bound listen ports); a Java
  group and a mapping with the switch off get none; clients' copies never
  pass, a trusted proxy's do (SAP's SetHeaderIfEmpty);
- Forwarded, X-Real-IP, X-Forwarded-Port and other spellings of forwarding
  fields (X_Forwarded_For, Client-Protocol) from untrusted clients are
  dropped; from --trusted-proxies the canonical ones pass;
- trailers (HTTP/1.1 chunked, HTTP/2 trailing HEADERS) never carry
  SSL_CLIENT_CERT, X-Forwarded-*, X-Request-Id or Forwarded to the server;
- Host: 0.0.0.0=5000 (a reg-name with sub-delims) is served;
- both admin ports answer only their own address, localhost and
  --admin-allowed-hosts, and every answer forbids framing and sniffing.

Needs KWD_PROXY and KWD_CONTROLLER (set by ctest); Debian's python3 with
python3-h2, and openssl.
"""

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_http2 import CannedBackend, H2Client, Proxy, free_port, run  # noqa: E402

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")


class Recorder(CannedBackend):
    """A keep-alive HTTP/1.1 server on loopback (CannedBackend's sockets) that
    answers each request with JSON: {"line", "fields": [[name, value]...],
    "trailers": [[name, value]...], "body"}. Chunked and Content-Length
    bodies are read whole."""

    @staticmethod
    def _fields(reader):
        fields = []
        for _ in range(200):
            line = reader.readline()
            if line in (b"\r\n", b"\n", b""):
                return fields
            name, _, value = line.decode("latin-1").rstrip("\r\n").partition(":")
            fields.append([name, value.strip()])
        return fields

    def _serve(self, conn):
        with conn:
            conn.settimeout(20)
            reader = conn.makefile("rb")
            try:
                while True:
                    line = reader.readline()
                    if not line:
                        return
                    fields = self._fields(reader)
                    lower = {n.lower(): v for n, v in fields}
                    body, trailers = b"", []
                    if lower.get("transfer-encoding", "").lower() == "chunked":
                        for _ in range(10000):
                            size = int(reader.readline().split(b";")[0], 16)
                            if size == 0:
                                trailers = self._fields(reader)
                                break
                            body += reader.read(size)
                            reader.readline()
                    elif "content-length" in lower:
                        body = reader.read(int(lower["content-length"]))
                    answer = json.dumps({"line": line.decode("latin-1").strip(),
                                         "fields": fields, "trailers": trailers,
                                         "body": body.decode("latin-1")}).encode()
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer))
            except (OSError, ValueError):
                return


def read_response(sock):
    """One response with Content-Length: (status, [[name, value]...], body bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response head")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    fields = [[p.strip() for p in l.split(":", 1)] for l in lines[1:]]
    length = int(dict((n.lower(), v) for n, v in fields).get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(lines[0].split(" ")[1]), fields, rest[:length]


def values(fields, name):
    return [v for n, v in fields if n.lower() == name.lower()]


OBJECTS = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: abap}}
spec:
  kind: abap
  healthCheck: {{intervalSeconds: 3600}}
  backend:
    staticServers: [{{name: abap1, address: 127.0.0.1, port: {abap}}}]
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: java}}
spec:
  kind: java
  healthCheck: {{intervalSeconds: 3600}}
  backend:
    staticServers: [{{name: java1, address: 127.0.0.1, port: {java}}}]
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: any}}
spec:
  defaultRootHandler: abap
  defaultGroups: {{abap: abap, java: java}}
  rules:
    - {{prefix: /sap/, kind: abap}}
    - {{prefix: /irj/, kind: java}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: switched}}
spec:
  hosts: [switched.example.test]
  defaultGroups: {{abap: abap, java: java}}
  sapHeaders: {{clientProtocol: false}}
  rules:
    - {{prefix: /sap/, kind: abap}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: javaon}}
spec:
  hosts: [javaon.example.test]
  defaultGroups: {{abap: abap, java: java}}
  sapHeaders: {{clientProtocol: true, accessPoints: false}}
  rules:
    - {{prefix: /irj/, kind: java}}
"""

SAP_FIELDS = ("clientprotocol", "x-sap-webdisp-ap")


class ForwardingHeaders(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PROXY or not CONTROLLER:
            raise unittest.SkipTest("set KWD_PROXY and KWD_CONTROLLER to the built binaries")
        cls.dir = tempfile.mkdtemp(prefix="kwd-forwarding-")
        os.makedirs(os.path.join(cls.dir, "certs"))
        run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            "-keyout certs/erp.key -out certs/erp.crt -days 2 -subj /CN=erp.example.test "
            "-addext subjectAltName=DNS:erp.example.test", cls.dir)
        cls.abap = Recorder()
        cls.java = Recorder()
        objects = os.path.join(cls.dir, "objects")
        os.makedirs(objects)
        with open(os.path.join(objects, "objects.yaml"), "w") as f:
            f.write(OBJECTS.format(abap=cls.abap.port, java=cls.java.port))
        compiled = subprocess.run([CONTROLLER, "compile", "--source=dir:" + objects],
                                  capture_output=True, text=True, timeout=60)
        assert compiled.returncode == 0, compiled.stdout + compiled.stderr
        cls.snapshot = os.path.join(cls.dir, "snapshot.json")
        with open(cls.snapshot, "w") as f:
            f.write(compiled.stdout)
        # 127.0.0.2 plays a trusted proxy in front (a load balancer).
        cls.proxy = Proxy(cls.dir, cls.snapshot,
                          ["--h2c", "--public-ports", "http=80,https=443",
                           "--trusted-proxies", "127.0.0.2/32",
                           "--admin-allowed-hosts", "kwd-admin.example.test"], "main")
        cls.plain = Proxy(cls.dir, cls.snapshot, [], "plain")

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.plain.stop()
        cls.abap.close()
        cls.java.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # ---- helpers ----

    def connect(self, port, source="127.0.0.1", tls=False):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                        source_address=(source, 0))
        if tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["http/1.1"])
            sock = ctx.wrap_socket(sock, server_hostname="erp.example.test")
        self.addCleanup(sock.close)
        return sock

    def exchange(self, raw, port=None, source="127.0.0.1", tls=False):
        """Sends raw request bytes; returns what the backend received."""
        sock = self.connect(port or (self.proxy.tls_port if tls else self.proxy.port),
                            source, tls)
        sock.sendall(raw)
        status, _, body = read_response(sock)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def get(self, path="/sap/bc/ping", host="erp.example.test", headers=(), **kw):
        lines = [f"GET {path} HTTP/1.1", "Host: " + host] + list(headers)
        return self.exchange(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), **kw)

    def assertNoForged(self, received):
        text = json.dumps(received)
        for forged in ("203.0.113.9", "forged", "HTTP=1,"):
            self.assertNotIn(forged, text)

    # ---- SAP's forwarding fields (issue 24 item 4) ----

    def test_abap_group_gets_client_protocol_and_the_public_access_points(self):
        forged = ["ClientProtocol: https", "x-sap-webdisp-ap: HTTP=1,HTTPS=2",
                  "Client-Protocol: forged", "X_SAP_WebDisp_AP: forged"]
        for path in ("/sap/bc/ping", "/", "/index.html"):  # a rule, the root rule
            plain = self.get(path, headers=forged)["fields"]
            self.assertEqual(values(plain, "ClientProtocol"), ["http"], (path, plain))
            self.assertEqual(values(plain, "x-sap-webdisp-ap"), ["HTTP=80,HTTPS=443"], plain)
            self.assertNoForged(plain)
        tls = self.get(headers=forged, tls=True)["fields"]
        self.assertEqual(values(tls, "ClientProtocol"), ["https"], tls)
        self.assertEqual(values(tls, "x-sap-webdisp-ap"), ["HTTP=80,HTTPS=443"], tls)
        self.assertNoForged(tls)

    def test_http2_streams_get_them_too(self):
        c = H2Client(self.proxy.port, tls=False)
        self.addCleanup(c.close)
        response = c.get("/sap/bc/ping", headers=[("clientprotocol", "https"),
                                                  ("x-sap-webdisp-ap", "HTTP=1,HTTPS=2")])
        fields = json.loads(bytes(response["data"]))["fields"]
        self.assertEqual(values(fields, "ClientProtocol"), ["http"], fields)
        self.assertEqual(values(fields, "x-sap-webdisp-ap"), ["HTTP=80,HTTPS=443"], fields)

    def test_java_group_and_switched_off_mappings_get_none(self):
        java = self.get("/irj/portal", headers=["ClientProtocol: https"])["fields"]
        self.assertEqual([n for n, _ in java if n.lower() in SAP_FIELDS], [], java)
        # sapHeaders {clientProtocol: false}: the access points still go.
        off = self.get(host="switched.example.test",
                       headers=["ClientProtocol: https"])["fields"]
        self.assertEqual(values(off, "ClientProtocol"), [], off)
        self.assertEqual(values(off, "x-sap-webdisp-ap"), ["HTTP=80,HTTPS=443"], off)
        # Explicitly on for a Java group: only what was switched on.
        on = self.get("/irj/portal", host="javaon.example.test", tls=True)["fields"]
        self.assertEqual(values(on, "ClientProtocol"), ["https"], on)
        self.assertEqual(values(on, "x-sap-webdisp-ap"), [], on)

    def test_access_points_default_to_the_bound_listen_ports(self):
        fields = self.get(port=self.plain.port)["fields"]
        self.assertEqual(values(fields, "x-sap-webdisp-ap"),
                         [f"HTTP={self.plain.port},HTTPS={self.plain.tls_port}"], fields)

    def test_a_trusted_proxys_sap_fields_stand(self):
        fields = self.get(source="127.0.0.2",
                          headers=["ClientProtocol: https",
                                   "x-sap-webdisp-ap: HTTP=8080,HTTPS=8443",
                                   "X-Forwarded-Proto: https"])["fields"]
        self.assertEqual(values(fields, "ClientProtocol"), ["https"], fields)
        self.assertEqual(values(fields, "x-sap-webdisp-ap"), ["HTTP=8080,HTTPS=8443"], fields)
        # Without its own ClientProtocol, the proto it vouched for.
        fields = self.get(source="127.0.0.2", headers=["X-Forwarded-Proto: https"])["fields"]
        self.assertEqual(values(fields, "ClientProtocol"), ["https"], fields)

    # ---- forwarding fields from clients (issue 23 item 9) ----

    FORGED_FORWARDING = [
        "Forwarded: for=203.0.113.9;proto=https", "X-Real-IP: 203.0.113.9",
        "X-Forwarded-Port: 443", "X-Forwarded-For: 203.0.113.9",
        "X-Forwarded-Proto: https", "X-Forwarded-Host: forged.example",
        "X_Forwarded_For: 203.0.113.9", "X_Forwarded_Proto: https",
        "XForwardedFor: 203.0.113.9", "X_Real_IP: 203.0.113.9",
        "X-Forwarded_Host: forged.example", "SSL_CLIENT_CERT: forged",
        "ssl-cipher-suite: forged"]

    def test_forwarding_fields_from_untrusted_clients_are_dropped(self):
        for path in ("/sap/bc/ping", "/irj/portal"):
            fields = self.get(path, headers=self.FORGED_FORWARDING)["fields"]
            self.assertNoForged(fields)
            self.assertNotIn("forged.example", json.dumps(fields))
            self.assertEqual(values(fields, "X-Forwarded-For"), ["127.0.0.1"], fields)
            self.assertEqual(values(fields, "X-Forwarded-Proto"), ["http"], fields)
            for name in ("Forwarded", "X-Real-IP", "X-Forwarded-Port"):
                self.assertEqual(values(fields, name), [], (name, fields))
            names = [n.lower() for n, _ in fields]
            self.assertFalse([n for n in names if "_" in n and not n.startswith("ssl")], names)

    def test_forwarding_fields_from_trusted_proxies_pass_in_their_own_spelling(self):
        fields = self.get("/irj/portal", source="127.0.0.2",
                          headers=self.FORGED_FORWARDING[:4] + ["X_Forwarded_For: 198.51.100.1"])
        fields = fields["fields"]
        self.assertEqual(values(fields, "Forwarded"), ["for=203.0.113.9;proto=https"], fields)
        self.assertEqual(values(fields, "X-Real-IP"), ["203.0.113.9"], fields)
        self.assertEqual(values(fields, "X-Forwarded-Port"), ["443"], fields)
        self.assertEqual(values(fields, "X-Forwarded-For"), ["203.0.113.9, 127.0.0.2"], fields)
        self.assertNotIn("198.51.100.1", json.dumps(fields))

    # ---- trailers (issue 23 item 3) ----

    FORGED_TRAILERS = [("ssl_client_cert", "forged"), ("SSL_CIPHER_SUITE", "forged"),
                       ("x-forwarded-for", "203.0.113.9"), ("x-forwarded-proto", "forged"),
                       ("x-request-id", "forged"), ("forwarded", "for=203.0.113.9"),
                       ("x-real-ip", "203.0.113.9"), ("clientprotocol", "forged"),
                       ("x_forwarded_for", "203.0.113.9"), ("x-checksum", "abc")]

    def test_http1_chunked_trailers_cannot_assert_forwarding_fields(self):
        trailer = "".join(f"{n}: {v}\r\n" for n, v in self.FORGED_TRAILERS)
        for path in ("/sap/upload", "/irj/upload"):
            raw = (f"POST {path} HTTP/1.1\r\nHost: erp.example.test\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n" + trailer + "\r\n")
            received = self.exchange(raw.encode())
            self.assertEqual(received["body"], "hello")
            self.assertEqual(received["trailers"], [["x-checksum", "abc"]], received)
            self.assertNoForged(received)
            self.assertEqual(values(received["fields"], "X-Forwarded-For"), ["127.0.0.1"])

    def test_http2_trailers_cannot_assert_forwarding_fields(self):
        c = H2Client(self.proxy.port, tls=False)
        self.addCleanup(c.close)
        response = c.wait([c.request("/sap/upload", method="POST", body=b"hello",
                                     trailers=self.FORGED_TRAILERS)])[0]
        received = json.loads(bytes(response["data"]))
        self.assertEqual(received["body"], "hello")
        self.assertEqual(received["trailers"], [["x-checksum", "abc"]], received)
        self.assertNoForged(received)

    # ---- Host (issue 23 item 13) ----

    def test_host_with_sub_delims_is_a_reg_name(self):
        received = self.get(host="0.0.0.0=5000")
        self.assertEqual(values(received["fields"], "Host"), ["0.0.0.0=5000"])
        sock = self.connect(self.proxy.port)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: a{b\r\n\r\n")
        self.assertEqual(read_response(sock)[0], 400)

    # ---- admin ports (issue 23 item 11) ----

    def admin(self, port, path, host):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.addCleanup(sock.close)
        head = f"GET {path} HTTP/1.1\r\n" + (f"Host: {host}\r\n" if host else "") + "\r\n"
        sock.sendall(head.encode())
        status, fields, body = read_response(sock)
        self.assertEqual(values(fields, "X-Frame-Options"), ["DENY"], (path, fields))
        self.assertEqual(values(fields, "X-Content-Type-Options"), ["nosniff"], (path, fields))
        csp = values(fields, "Content-Security-Policy")
        self.assertEqual(len(csp), 1, fields)
        self.assertIn("frame-ancestors 'none'", csp[0])
        return status, body

    def test_proxy_admin_answers_only_its_own_names(self):
        port = self.proxy.admin_port
        for path in ("/metrics", "/admin/api/state", "/readyz", "/admin"):
            status, body = self.admin(port, path, "rebind.evil.example:%d" % port)
            self.assertEqual(status, 421, path)
            self.assertNotIn(b"kwd_proxy", body)
            self.assertNotIn(b"evil", body)
            for host in ("127.0.0.1:%d" % port, "localhost:%d" % port, "kwd-admin.example.test",
                         None):
                self.assertEqual(self.admin(port, path, host)[0], 200, (path, host))
        # Unknown paths and refusals carry the headers too (checked in admin()).
        self.assertEqual(self.admin(port, "/nothing", "localhost")[0], 404)

    def test_controller_admin_answers_only_its_own_names(self):
        admin_port = free_port()
        log = open(os.path.join(self.dir, "controller.log"), "w")
        self.addCleanup(log.close)
        controller = subprocess.Popen(
            [CONTROLLER, "serve", "--source=dir:" + os.path.join(self.dir, "objects"),
             "--grpc-listen", "127.0.0.1:0", "--admin-listen", f"127.0.0.1:{admin_port}",
             "--admin-allowed-hosts", "*.kwd.example.test"],
            stdout=subprocess.DEVNULL, stderr=log)

        def stop():
            controller.terminate()
            try:
                controller.wait(timeout=15)
            except subprocess.TimeoutExpired:
                controller.kill()
                controller.wait()
        self.addCleanup(stop)
        deadline = time.monotonic() + 30
        status = None
        while status != 200:  # up, and the first snapshot compiled (/readyz)
            self.assertLess(time.monotonic(), deadline, f"the controller's /readyz: {status}")
            try:
                status, _ = self.admin(admin_port, "/readyz", "localhost")
            except OSError:
                time.sleep(0.1)
                continue
            if status != 200:
                time.sleep(0.1)
        status, body = self.admin(admin_port, "/debug/snapshot", "evil.example")
        self.assertEqual(status, 421)
        self.assertNotIn(b"127.0.0.1", body)
        self.assertEqual(self.admin(admin_port, "/debug/snapshot", "a.kwd.example.test")[0], 200)
        self.assertEqual(self.admin(admin_port, "/debug/snapshot", f"[::1]:{admin_port}")[0], 200)

    def test_bad_flag_values_exit_two_with_the_reason(self):
        for binary, args in ((PROXY, ["serve", "--snapshot", self.snapshot]),
                             (CONTROLLER, ["serve", "--source=dir:" + self.dir])):
            r = subprocess.run([binary] + args + ["--admin-allowed-hosts", "a b"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn('not a host name, IP address or *.suffix: "a b"', r.stderr)
        for bad in ("http=0", "ftp=21", "http=80,http=81", "https", ""):
            r = subprocess.run([PROXY, "serve", "--snapshot", self.snapshot,
                                "--public-ports", bad], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
            self.assertIn("--public-ports", r.stderr)
        for binary in (PROXY, CONTROLLER):
            r = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                               timeout=30)
            self.assertIn("--admin-allowed-hosts", r.stdout + r.stderr)
        r = subprocess.run([PROXY, "serve", "--help"], capture_output=True, text=True, timeout=30)
        self.assertIn("--public-ports", r.stdout)


if __name__ == "__main__":
    unittest.main()
