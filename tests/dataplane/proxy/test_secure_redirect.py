"""Redirect to HTTPS and HSTS (issue 24 item 3): black-box tests through a real
kwd-proxy (snapshot from the real kwd-controller) with TLS (certificates made
with the openssl CLI here) and a recording backend.

- UrlMapping.spec.secureAction: redirect: a `secure` permission entry answers
  plain http with 301 (GET, HEAD) or 308 (other methods) to
  https://<host>[:<public https port>]<target as received>; forbid (the
  default) keeps SAP's 403; https requests pass;
- the port: --public-ports https=PORT (443 left out), else the bound
  --tls-listen port; a proxy with neither answers 403, counts it and says so
  once in its log;
- hostile Host values never produce a redirect to another site;
- UrlMapping.spec.hsts: Strict-Transport-Security on https responses
  (HTTP/1.1 and HTTP/2, the proxy's own error answers included), never on
  plain http; includeSubDomains/preload rendered; a server's own field kept
  and not doubled; a trusted proxy's X-Forwarded-Proto: https counts as https.

Needs KWD_PROXY and KWD_CONTROLLER (set by ctest); Debian's python3 with
python3-h2, and openssl.
"""

import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_forwarding_headers import Recorder, read_response, values  # noqa: E402
from test_http2 import H2Client, Proxy, free_port, run  # noqa: E402

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")

OWN_STS = "max-age=86400"


class StsRecorder(Recorder):
    """The Recorder, whose answers to paths holding "own-sts" carry its own
    Strict-Transport-Security field."""

    class _Conn:
        """A socket whose sendall adds the field to such answers."""

        def __init__(self, sock):
            self.sock = sock

        def __getattr__(self, name):
            return getattr(self.sock, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.sock.close()

        def sendall(self, data):
            if b"own-sts" in data:
                data = data.replace(b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\n"
                                    b"Strict-Transport-Security: " + OWN_STS.encode() +
                                    b"\r\n", 1)
            return self.sock.sendall(data)

    def _serve(self, conn):
        return Recorder._serve(self, self._Conn(conn))


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
kind: UrlMapping
metadata: {{name: redirect}}
spec:
  hosts: [erp.example.test, "*.wild.example.test"]
  defaultRootHandler: abap
  defaultGroups: {{abap: abap}}
  secureAction: redirect
  hsts: {{maxAgeSeconds: 31536000, includeSubDomains: true, preload: true}}
  rules:
    - {{prefix: /sap/, kind: abap}}
    - {{prefix: /nogroup/, kind: abap, logonGroup: missing}}
  permissions:
    - {{action: deny, pattern: /sap/denied/*}}
    - {{action: secure, pattern: /sap/bc/gui/*}}
    - {{action: secure, pattern: /secure.html}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: forbid}}
spec:
  hosts: [forbid.example.test]
  defaultGroups: {{abap: abap}}
  hsts: {{maxAgeSeconds: 600}}
  rules:
    - {{prefix: /sap/, kind: abap}}
  permissions:
    - {{action: secure, pattern: /sap/bc/gui/*}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: anyhost}}
spec:
  defaultGroups: {{abap: abap}}
  secureAction: redirect
  rules:
    - {{prefix: /sap/, kind: abap}}
  permissions:
    - {{action: secure, pattern: /sap/bc/gui/*}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: sys-erp, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  hosts: [sys.example.test]
  system: {{sid: ERP}}
  defaultRootHandler: abap
  defaultGroups: {{abap: abap}}
  hsts: {{maxAgeSeconds: 300}}
  rules:
    - {{prefix: /sap/, kind: abap}}
  modifications:
    - rules: |
        if %{{HTTP_X_TARGET}} stricmp "qas"
        SetHeader x-sap-webdisp-target-sid QAS [break]
        if %{{HTTP_X_TARGET}} stricmp "prd"
        SetHeader x-sap-webdisp-target-sid PRD [break]
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: sys-qas, creationTimestamp: "2026-02-01T00:00:00Z"}}
spec:
  hosts: [sys.example.test]
  system: {{sid: QAS}}
  defaultRootHandler: abap
  defaultGroups: {{abap: abap, java: abap}}
  hsts: {{maxAgeSeconds: 900, includeSubDomains: true}}
  rules:
    - {{prefix: /sap/, kind: abap}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: sys-prd, creationTimestamp: "2026-03-01T00:00:00Z"}}
spec:
  hosts: [prd.example.test]
  system: {{sid: PRD}}
  defaultRootHandler: abap
  defaultGroups: {{abap: abap, java: abap}}
  rules:
    - {{prefix: /sap/, kind: abap}}
"""

REDIRECT_HSTS = "max-age=31536000; includeSubDomains; preload"


class PlainOnlyProxy:
    """kwd-proxy serve without any TLS listener (and no --public-ports)."""

    def __init__(self, directory, snapshot, name):
        self.admin_port = free_port()
        self.log_path = os.path.join(directory, name + ".log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [PROXY, "serve", "--snapshot", snapshot, "--listen", "127.0.0.1:0",
             "--admin-listen", f"127.0.0.1:{self.admin_port}", "--access-log", "off",
             "--workers", "2"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.port = None
        for _ in range(100):
            line = self.process.stdout.readline()
            if line.startswith("listening "):
                self.port = int(line.rsplit(":", 1)[1])
                break
            if not line:
                break
        assert self.port, "kwd-proxy did not start"

    metrics = Proxy.metrics
    metric = Proxy.metric
    stop = Proxy.stop


class SecureRedirectTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PROXY or not CONTROLLER:
            raise unittest.SkipTest("set KWD_PROXY and KWD_CONTROLLER to the built binaries")
        cls.dir = tempfile.mkdtemp(prefix="kwd-secure-")
        os.makedirs(os.path.join(cls.dir, "certs"))
        run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            "-keyout certs/erp.key -out certs/erp.crt -days 2 -subj /CN=erp.example.test "
            "-addext subjectAltName=DNS:erp.example.test", cls.dir)
        cls.backend = StsRecorder()
        objects = os.path.join(cls.dir, "objects")
        os.makedirs(objects)
        with open(os.path.join(objects, "objects.yaml"), "w") as f:
            f.write(OBJECTS.format(abap=cls.backend.port))
        compiled = subprocess.run([CONTROLLER, "compile", "--source=dir:" + objects],
                                  capture_output=True, text=True, timeout=60)
        assert compiled.returncode == 0, compiled.stdout + compiled.stderr
        cls.snapshot = os.path.join(cls.dir, "snapshot.json")
        with open(cls.snapshot, "w") as f:
            f.write(compiled.stdout)
        # 127.0.0.2 plays a TLS-terminating load balancer in front.
        cls.proxy = Proxy(cls.dir, cls.snapshot,
                          ["--h2c", "--trusted-proxies", "127.0.0.2/32"], "main")
        cls.public = Proxy(cls.dir, cls.snapshot,
                           ["--public-ports", "http=80,https=443"], "public")
        cls.plain_only = PlainOnlyProxy(cls.dir, cls.snapshot, "plain-only")

    @classmethod
    def tearDownClass(cls):
        for proxy in (cls.proxy, cls.public, cls.plain_only):
            proxy.stop()
        cls.backend.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # ---- helpers ----

    def connect(self, port, tls=False, source="127.0.0.1"):
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

    def request(self, path, host="erp.example.test", method="GET", headers=(), body=None,
                port=None, tls=False, source="127.0.0.1", raw_host_line=None):
        """One HTTP/1.1 request: (status, fields, body)."""
        port = port or (self.proxy.tls_port if tls else self.proxy.port)
        lines = [f"{method} {path} HTTP/1.1"]
        lines.append(raw_host_line if raw_host_line is not None else "Host: " + host)
        lines += list(headers)
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        sock = self.connect(port, tls, source)
        sock.sendall(data)
        if method == "HEAD":
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                head += chunk
            lines = head.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            return (int(lines[0].split(" ")[1]),
                    [[p.strip() for p in l.split(":", 1)] for l in lines[1:]], b"")
        return read_response(sock)

    # ---- the redirect ----

    def test_get_is_redirected_with_the_location_exact(self):
        # Host's port dropped, the https listener's named, the target as
        # received: percent-encoding, an encoded slash, a query with
        # encoded bytes, dot segments and an empty query value.
        target = "/sap/bc/gui/sap/its/webgui%2Fx/a%20b/./c?sap-client=001&q=%41%2f&e="
        status, fields, body = self.request(target, host="erp.example.test:8080")
        self.assertEqual(status, 301, body)
        self.assertEqual(values(fields, "Location"),
                         [f"https://erp.example.test:{self.proxy.tls_port}{target}"])
        self.assertEqual(values(fields, "Content-Length"), ["0"])
        self.assertEqual(body, b"")
        self.assertEqual(values(fields, "Strict-Transport-Security"), [], fields)
        # HEAD too; a root-level secure entry (the root rule) as well.
        status, fields, _ = self.request("/sap/bc/gui/x", method="HEAD")
        self.assertEqual(status, 301)
        status, fields, _ = self.request("/secure.html?x=1")
        self.assertEqual(status, 301)
        self.assertEqual(values(fields, "Location"),
                         [f"https://erp.example.test:{self.proxy.tls_port}/secure.html?x=1"])

    def test_the_public_https_port_443_is_left_out(self):
        status, fields, _ = self.request("/sap/bc/gui/x?a=b", host="erp.example.test:80",
                                         port=self.public.port)
        self.assertEqual(status, 301)
        self.assertEqual(values(fields, "Location"), ["https://erp.example.test/sap/bc/gui/x?a=b"])
        # A wildcard host: the name the client asked for.
        status, fields, _ = self.request("/sap/bc/gui/x", host="a.wild.example.test",
                                         port=self.public.port)
        self.assertEqual(values(fields, "Location"), ["https://a.wild.example.test/sap/bc/gui/x"])
        # Absolute-form: its authority is the host.
        status, fields, _ = self.request("http://erp.example.test/sap/bc/gui/y?z",
                                         host="erp.example.test", port=self.public.port)
        self.assertEqual(status, 301)
        self.assertEqual(values(fields, "Location"), ["https://erp.example.test/sap/bc/gui/y?z"])

    def test_methods_with_a_body_get_308(self):
        before = self.proxy.metric("kwd_proxy_secure_redirects_total", outcome="redirected")
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, fields, _ = self.request("/sap/bc/gui/form?x=1", method=method,
                                             body=b"user=a&password=b")
            self.assertEqual(status, 308, method)
            self.assertEqual(values(fields, "Location"),
                             [f"https://erp.example.test:{self.proxy.tls_port}"
                              "/sap/bc/gui/form?x=1"])
        self.assertEqual(self.proxy.metric("kwd_proxy_secure_redirects_total",
                                           outcome="redirected"), before + 4)

    def test_following_the_redirect_reaches_the_server_over_https(self):
        status, fields, _ = self.request("/sap/bc/gui/x?y=%41")
        location = values(fields, "Location")[0]
        self.assertTrue(location.startswith("https://erp.example.test:"), location)
        rest = location[len("https://erp.example.test:"):]
        port, path = rest.split("/", 1)
        status, fields, body = self.request("/" + path, port=int(port), tls=True)
        self.assertEqual(status, 200, body)
        self.assertIn('"GET /sap/bc/gui/x?y=%41 HTTP/1.1"', body.decode())
        self.assertEqual(values(fields, "Strict-Transport-Security"), [REDIRECT_HSTS])

    def test_forbid_is_the_default_and_stays_403(self):
        status, fields, _ = self.request("/sap/bc/gui/x", host="forbid.example.test")
        self.assertEqual(status, 403)
        self.assertEqual(values(fields, "Location"), [])
        self.assertEqual(values(fields, "X-Kwd-Error"), ["EPERM"])
        status, _, _ = self.request("/sap/bc/gui/x", host="forbid.example.test", tls=True)
        self.assertEqual(status, 200)

    def test_https_and_a_trusted_proxys_https_are_not_redirected(self):
        status, fields, _ = self.request("/sap/bc/gui/x", tls=True)
        self.assertEqual(status, 200)
        # A trusted TLS-terminating proxy said https: served, with HSTS.
        status, fields, _ = self.request("/sap/bc/gui/x", source="127.0.0.2",
                                         headers=["X-Forwarded-Proto: https"])
        self.assertEqual(status, 200)
        self.assertEqual(values(fields, "Strict-Transport-Security"), [REDIRECT_HSTS])
        # The same words from an untrusted client change nothing.
        status, fields, _ = self.request("/sap/bc/gui/x", headers=["X-Forwarded-Proto: https"])
        self.assertEqual(status, 301)
        self.assertEqual(values(fields, "Strict-Transport-Security"), [])

    def test_without_an_https_port_it_is_403_counted_and_said_once(self):
        before = self.plain_only.metric("kwd_proxy_secure_redirects_total",
                                        outcome="no-https-port")
        for _ in range(3):
            status, fields, _ = self.request("/sap/bc/gui/x", port=self.plain_only.port)
            self.assertEqual(status, 403)
            self.assertEqual(values(fields, "Location"), [])
        self.assertEqual(self.plain_only.metric("kwd_proxy_secure_redirects_total",
                                                outcome="no-https-port"), before + 3)
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline:
            with open(self.plain_only.log_path) as f:
                text = f.read()
            if "has no https port" in text:
                break
            time.sleep(0.05)
        self.assertEqual(text.count("has no https port"), 1, text)

    def test_hostile_hosts_never_redirect_elsewhere(self):
        hostile = ["evil.example@erp.example.test", "erp.example.test@evil.example",
                   "evil.example/erp.example.test", "evil.example\\erp.example.test",
                   "evil.example%2Ferp", "evil.example%40erp", "evil.example;x",
                   "evil.example:443:1", "evil.example:x", "[::1%25eth0]", "evil example",
                   "0.0.0.0=5000", "evil.example,erp.example.test"]
        before = self.proxy.metric("kwd_proxy_secure_redirects_total", outcome="bad-host")
        refused = 0
        for host in hostile:
            for line in ("Host: " + host, None):
                if line is None:
                    # The same authority in absolute-form.
                    status, fields, _ = self.request(f"http://{host}/sap/bc/gui/x", host=host)
                else:
                    status, fields, _ = self.request("/sap/bc/gui/x", raw_host_line=line)
                self.assertIn(status, (400, 403), (host, status, fields))
                self.assertEqual(values(fields, "Location"), [], host)
                refused += status == 403
        # HTTP/2 :authority the same way (h2c on the plain listener).
        h2 = H2Client(self.proxy.port, tls=False)
        self.addCleanup(h2.close)
        for host in ("evil.example@erp.example.test", "evil.example%2Ferp", "evil.example;x"):
            response = h2.get("/sap/bc/gui/x", authority=host)
            if response["reset"] is not None:
                continue  # refused as a malformed stream
            self.assertIn(response["headers"][":status"], ("400", "403"), host)
            self.assertNotIn("location", response["headers"], host)
            refused += response["headers"][":status"] == "403"
        # CR/LF in a Host: refused by the parser, never in a Location.
        sock = self.connect(self.proxy.port)
        sock.sendall(b"GET /sap/bc/gui/x HTTP/1.1\r\nHost: evil.example\rLocation: x\r\n\r\n")
        status, fields, _ = read_response(sock)
        self.assertEqual(status, 400)
        self.assertEqual(values(fields, "Location"), [])
        # Those the parser let through reached the routing and were counted.
        self.assertGreater(refused, 0)
        self.assertEqual(self.proxy.metric("kwd_proxy_secure_redirects_total",
                                           outcome="bad-host"), before + refused)

    # ---- HSTS ----

    def test_hsts_on_https_only(self):
        status, fields, _ = self.request("/sap/x", tls=True)
        self.assertEqual(status, 200)
        self.assertEqual(values(fields, "Strict-Transport-Security"), [REDIRECT_HSTS])
        status, fields, _ = self.request("/sap/x")
        self.assertEqual(status, 200)
        self.assertEqual(values(fields, "Strict-Transport-Security"), [])
        # Root URL and default group: the mapping that set the host's defaults.
        status, fields, _ = self.request("/", tls=True)
        self.assertEqual(values(fields, "Strict-Transport-Security"), [REDIRECT_HSTS])
        # Another mapping's: its own value, rendered without the flags.
        status, fields, _ = self.request("/sap/x", host="forbid.example.test", tls=True)
        self.assertEqual(values(fields, "Strict-Transport-Security"), ["max-age=600"])
        # A mapping without hsts: none.
        status, fields, _ = self.request("/sap/x", host="other.example.test", tls=True)
        self.assertEqual(status, 200)
        self.assertEqual(values(fields, "Strict-Transport-Security"), [])

    def test_hsts_on_the_routes_of_a_system_chosen_by_sid(self):
        # A modification rule sends the request to a SAP system by SID: every
        # route of that system's mapping carries its spec.hsts, the root URL
        # and the default group (its defaults) too, not only its rules.
        qas = "max-age=900; includeSubDomains"
        for path, rule in (("/sap/x", "/sap/"), ("/", "root"), ("/other/x", "default")):
            status, fields, body = self.request(path, host="sys.example.test", tls=True,
                                                headers=["X-Target: qas"])
            self.assertEqual(status, 200, (path, body))
            self.assertEqual(values(fields, "Strict-Transport-Security"), [qas],
                             (path, rule, fields))
            # Plain http: never.
            status, fields, _ = self.request(path, host="sys.example.test",
                                             headers=["X-Target: qas"])
            self.assertEqual(values(fields, "Strict-Transport-Security"), [], path)
            # Not sent to a system: the host's owner's (ERP's mapping).
            status, fields, _ = self.request(path, host="sys.example.test", tls=True)
            self.assertEqual(values(fields, "Strict-Transport-Security"), ["max-age=300"],
                             path)
            # A system whose mapping has no hsts (on another host, chosen
            # anywhere): none, not the host's.
            status, fields, body = self.request(path, host="sys.example.test", tls=True,
                                                headers=["X-Target: prd"])
            self.assertEqual(status, 200, (path, body))
            self.assertEqual(values(fields, "Strict-Transport-Security"), [], path)
        # HTTP/2 over TLS: the same.
        c = H2Client(self.proxy.tls_port)
        self.addCleanup(c.close)
        response = c.get("/", authority="sys.example.test", headers=[("x-target", "qas")])
        self.assertEqual(response["headers"].get("strict-transport-security"), qas,
                         response["headers"])

    def test_hsts_on_the_proxys_own_answers_over_https(self):
        for path, want in (("/sap/denied/x", 403), ("/nogroup/x", 503)):
            status, fields, _ = self.request(path, tls=True)
            self.assertEqual(status, want, path)
            self.assertEqual(values(fields, "Strict-Transport-Security"), [REDIRECT_HSTS], path)
            status, fields, _ = self.request(path)
            self.assertEqual(status, want, path)
            self.assertEqual(values(fields, "Strict-Transport-Security"), [], path)

    def test_a_servers_own_sts_is_kept_and_not_doubled(self):
        status, fields, _ = self.request("/sap/own-sts", tls=True)
        self.assertEqual(status, 200)
        self.assertEqual(values(fields, "Strict-Transport-Security"), [OWN_STS])
        c = H2Client(self.proxy.tls_port)
        self.addCleanup(c.close)
        response = c.get("/sap/own-sts")
        self.assertEqual(response["headers"][":status"], "200")
        self.assertEqual(response["headers"].get("strict-transport-security"), OWN_STS)

    def test_http2_over_tls_gets_hsts_and_h2c_the_redirect(self):
        c = H2Client(self.proxy.tls_port)
        self.addCleanup(c.close)
        for path in ("/sap/x", "/sap/denied/x"):
            response = c.get(path)
            self.assertEqual(response["headers"].get("strict-transport-security"),
                             REDIRECT_HSTS, (path, response["headers"]))
        plain = H2Client(self.proxy.port, tls=False)
        self.addCleanup(plain.close)
        response = plain.get("/sap/x")
        self.assertNotIn("strict-transport-security", response["headers"])
        response = plain.get("/sap/bc/gui/x?a=%41", method="POST", body=b"x=1")
        self.assertEqual(response["headers"][":status"], "308")
        self.assertEqual(response["headers"]["location"],
                         f"https://erp.example.test:{self.proxy.tls_port}/sap/bc/gui/x?a=%41")
        response = plain.get("/sap/bc/gui/x")
        self.assertEqual(response["headers"][":status"], "301")


if __name__ == "__main__":
    unittest.main(verbosity=2)
