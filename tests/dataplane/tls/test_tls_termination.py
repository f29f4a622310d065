#!/usr/bin/env python3
"""Black-box tests of TLS termination on kwd-proxy's --tls-listen.

A real kwd-proxy on loopback, its snapshot compiled by the real kwd-controller,
one backend (written here) that answers every request with the request head it
received, and certificates made at test time with the openssl command line:
a server CA with pairs "alpha" (alpha.kwd.test), "beta" (beta.kwd.test) and a
Secret-style mount "wild/tls.crt" (*.wild.kwd.test); a client CA with an
intermediate and a client certificate; an unrelated CA with its own client.

Needs KWD_PROXY and KWD_CONTROLLER (the built binaries), set by ctest; Debian's
python3 (standard library) and openssl.
"""

import fcntl
import json
import os
import sys
import re
import select
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")


def run(*args, cwd):
    subprocess.run(args, cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(cwd, name):
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
        "-subj", "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=cwd)


def make_cert(cwd, name, ca, subject, ext, out_crt=None, out_key=None):
    """A leaf (or intermediate) signed by `ca` with extensions `ext` (lines)."""
    key = out_key or name + ".key"
    crt = out_crt or name + ".crt"
    with open(os.path.join(cwd, name + ".ext"), "w") as f:
        f.write("\n".join(ext) + "\n")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", key, "-out", name + ".csr", "-subj", subject, cwd=cwd)
    run("openssl", "x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
        ca + ".key", "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", name + ".ext",
        cwd=cwd)


def server_ext(*names):
    return ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature",
            "extendedKeyUsage=serverAuth",
            "subjectAltName=" + ",".join("DNS:" + n for n in names)]


CLIENT_EXT = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature",
              "extendedKeyUsage=clientAuth"]


def make_pki(pki, certs):
    make_ca(pki, "server-ca")
    make_ca(pki, "client-ca")
    make_ca(pki, "other-ca")
    make_cert(pki, "alpha", "server-ca", "/CN=alpha", server_ext("alpha.kwd.test"),
              os.path.join(certs, "alpha.crt"), os.path.join(certs, "alpha.key"))
    make_cert(pki, "beta", "server-ca", "/CN=beta", server_ext("beta.kwd.test"),
              os.path.join(certs, "beta.crt"), os.path.join(certs, "beta.key"))
    # A Kubernetes Secret mount: tls.crt -> ..data/tls.crt, ..data -> ..<version>.
    wild = os.path.join(certs, "wild")
    os.makedirs(os.path.join(wild, "..v1"))
    make_cert(pki, "wild", "server-ca", "/CN=wild", server_ext("*.wild.kwd.test"),
              os.path.join(wild, "..v1", "tls.crt"), os.path.join(wild, "..v1", "tls.key"))
    os.symlink("..v1", os.path.join(wild, "..data"))
    for name in ("tls.crt", "tls.key"):
        os.symlink(os.path.join("..data", name), os.path.join(wild, name))
    make_cert(pki, "wild2", "server-ca", "/CN=wild-renewed", server_ext("*.wild.kwd.test"))
    # beta again, signed by the unrelated CA: the "renewed" certificate.
    make_cert(pki, "beta2", "other-ca", "/CN=beta-renewed", server_ext("beta.kwd.test"))
    make_cert(pki, "client-int", "client-ca", "/CN=client-int",
              ["basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign"],
              out_crt="client-int.pem")
    make_cert(pki, "client", "client-int", "/CN=alice/O=kwd test", CLIENT_EXT)
    with open(os.path.join(pki, "client-chain.pem"), "w") as f:
        for name in ("client.crt", "client-int.pem"):
            with open(os.path.join(pki, name)) as part:
                f.write(part.read())
    make_cert(pki, "stranger", "other-ca", "/CN=mallory", CLIENT_EXT)
    # A valid chain with a self-made CA certificate appended (and a leaf it
    # signed): certificates the client merely sent, which verified nothing.
    make_ca(pki, "rogue-ca")
    make_cert(pki, "rogue-int", "rogue-ca", "/CN=rogue-int",
              ["basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign"],
              out_crt="rogue-int.pem")
    with open(os.path.join(pki, "client-chain-padded.pem"), "w") as f:
        for name in ("client.crt", "client-int.pem", "rogue-int.pem", "rogue-ca.pem"):
            with open(os.path.join(pki, name)) as part:
                f.write(part.read())


class EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({"path": self.path, "headers": self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


OBJECTS = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: all, namespace: default}
spec:
  kind: java
  healthCheck: {path: /health, intervalSeconds: 3600}
  backend:
    staticServers:
      - {name: echo, address: 127.0.0.1, port: %d}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: all, namespace: default}
spec:
  hosts: []
  defaultRootHandler: java
  defaultGroups: {java: all}
  permissions:
    - {action: secure, pattern: /secure/*}
"""


def read_http_response(sock, timeout=5):
    """One HTTP/1.1 response with Content-Length: (status, headers dict, body)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response head")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]


class TlsTermination(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PROXY or not CONTROLLER:
            raise unittest.SkipTest("set KWD_PROXY and KWD_CONTROLLER to the built binaries")
        cls.dir = tempfile.mkdtemp(prefix="kwd-tls-")
        cls.pki = os.path.join(cls.dir, "pki")
        cls.certs = os.path.join(cls.dir, "certs")
        os.makedirs(cls.pki)
        os.makedirs(cls.certs)
        make_pki(cls.pki, cls.certs)
        cls.backend = ThreadingHTTPServer(("127.0.0.1", 0), EchoHandler)
        cls.backend.daemon_threads = True
        threading.Thread(target=cls.backend.serve_forever, daemon=True).start()
        os.makedirs(os.path.join(cls.dir, "objects"))
        with open(os.path.join(cls.dir, "objects", "objects.yaml"), "w") as f:
            f.write(OBJECTS % cls.backend.server_address[1])
        compiled = subprocess.run(
            [CONTROLLER, "compile", "--source=dir:" + os.path.join(cls.dir, "objects")],
            capture_output=True, text=True, timeout=60)
        assert compiled.returncode == 0, compiled.stderr
        cls.snapshot = os.path.join(cls.dir, "snapshot.json")
        with open(cls.snapshot, "w") as f:
            f.write(compiled.stdout)
        cls.admin_port = free_port()
        cls.access_log = os.path.join(cls.dir, "access.log")
        cls.log_path = os.path.join(cls.dir, "proxy.log")
        cls.log = open(cls.log_path, "w")
        stderr = cls.log
        if getattr(cls, "LOG_PIPE", False):
            # The proxy's log through a pipe the test can stop reading (LogPipe).
            cls.log_pipe = LogPipe(cls.log)
            stderr = cls.log_pipe.write_fd
        cls.proxy = subprocess.Popen(
            [PROXY, "serve", "--snapshot", cls.snapshot, "--listen", "127.0.0.1:0",
             "--admin-listen", "127.0.0.1:%d" % cls.admin_port, "--access-log", cls.access_log,
             "--tls-listen", "127.0.0.1:0", "--tls-cert-dir", cls.certs,
             "--tls-client-ca", os.path.join(cls.pki, "client-ca.pem"),
             "--tls-verify-client", getattr(cls, "VERIFY", "optional"),
             "--tls-handshake-timeout", "1s", "--workers", "2",
             "--log-level", "info"],
            stdout=subprocess.PIPE, stderr=stderr, text=True)
        if stderr is not cls.log:
            os.close(stderr)
        ports = {}
        for _ in range(10):
            line = cls.proxy.stdout.readline()
            if not line:
                break
            m = re.match(r"(listening|listening-tls) .*:(\d+)$", line.strip())
            if m:
                ports[m.group(1)] = int(m.group(2))
            if len(ports) == 2:
                break
        assert len(ports) == 2, "kwd-proxy did not start: " + open(cls.log_path).read()
        cls.port = ports["listening"]
        cls.tls_port = ports["listening-tls"]

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "log_pipe", None):
            cls.log_pipe.resume()
        cls.proxy.terminate()
        try:
            cls.proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            cls.proxy.kill()
            cls.proxy.wait()
        cls.proxy.stdout.close()
        if getattr(cls, "log_pipe", None):
            cls.log_pipe.close()
        cls.log.close()
        cls.backend.shutdown()
        cls.backend.server_close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # ---- helpers ----

    def context(self, client_cert=None, ca="server-ca.pem", alpn=("http/1.1",)):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(os.path.join(self.pki, ca))
        if client_cert:
            cert, key = client_cert
            ctx.load_cert_chain(os.path.join(self.pki, cert), os.path.join(self.pki, key))
        if alpn:
            ctx.set_alpn_protocols(list(alpn))
        return ctx

    def tls_connect(self, server_name, ctx=None, session=None):
        ctx = ctx or self.context()
        raw = socket.create_connection(("127.0.0.1", self.tls_port), timeout=5)
        return ctx.wrap_socket(raw, server_hostname=server_name, session=session)

    def request(self, sock, path="/", host="alpha.kwd.test", headers=()):
        lines = ["GET %s HTTP/1.1" % path, "Host: " + host] + list(headers)
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return read_http_response(sock)

    def echoed(self, sock, **kw):
        status, _, body = self.request(sock, **kw)
        self.assertEqual(status, 200, body)
        return {k.lower(): v for k, v in json.loads(body)["headers"]}

    def peer_cn(self, sock):
        cert = sock.getpeercert()
        return dict(x[0] for x in cert["subject"])["commonName"]

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.admin_port,
                                    timeout=5) as r:
            return r.read().decode()

    def metric(self, name_and_labels):
        m = re.search("^" + re.escape(name_and_labels) + r" (\S+)$", self.metrics(), re.M)
        return float(m.group(1)) if m else 0.0

    def wait_for(self, condition, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.05)
        return condition()

    # ---- SNI, ALPN, protocol versions ----

    def test_sni_picks_exact_then_wildcard_else_the_first_pair(self):
        for name, cn in [("alpha.kwd.test", "alpha"), ("beta.kwd.test", "beta"),
                         ("x.wild.kwd.test", "wild")]:
            with self.tls_connect(name) as s:
                self.assertEqual(self.peer_cn(s), cn, name)
        # No SNI, an unknown name, two labels under the wildcard: the default
        # pair (first in name order: alpha).
        for name in ["unknown.kwd.test", "a.b.wild.kwd.test"]:
            ctx = self.context()
            ctx.check_hostname = False
            with self.tls_connect(name, ctx) as s:
                self.assertEqual(self.peer_cn(s), "alpha", name)
        ctx = self.context()
        ctx.check_hostname = False
        raw = socket.create_connection(("127.0.0.1", self.tls_port), timeout=5)
        with ctx.wrap_socket(raw) as s:  # no server_hostname: no SNI
            self.assertEqual(self.peer_cn(s), "alpha")

    def test_sni_with_a_trailing_dot_picks_the_same_pair(self):
        # An absolute name ("beta.kwd.test.") is the same host: the pair for
        # it, as passthrough routes it, not the default pair.
        for name, cn in [("beta.kwd.test.", "beta"), ("x.wild.kwd.test.", "wild"),
                         ("BETA.kwd.test.", "beta")]:
            ctx = self.context()
            ctx.check_hostname = False
            with self.tls_connect(name, ctx) as s:
                self.assertEqual(self.peer_cn(s), cn, name)

    def test_alpn_http11_and_tls12_13_only(self):
        with self.tls_connect("alpha.kwd.test") as s:
            self.assertEqual(s.selected_alpn_protocol(), "http/1.1")
            self.assertIn(s.version(), ("TLSv1.3",))
        ctx = self.context(alpn=("h2",))  # HTTP/2 (issue 15): preferred when offered
        with self.tls_connect("alpha.kwd.test", ctx) as s:
            self.assertEqual(s.selected_alpn_protocol(), "h2")
        ctx = self.context(alpn=("spdy/3",))  # nothing we speak: no ALPN, still served
        with self.tls_connect("alpha.kwd.test", ctx) as s:
            self.assertIsNone(s.selected_alpn_protocol())
            self.assertEqual(self.request(s)[0], 200)
        ctx = self.context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with self.tls_connect("alpha.kwd.test", ctx) as s:
            self.assertEqual(s.version(), "TLSv1.2")
            self.assertEqual(self.request(s)[0], 200)

    def test_tls11_and_tls10_offers_are_refused_and_counted(self):
        before = self.metric('kwd_proxy_tls_handshake_errors_total{reason="protocol_version"}')
        for args in (["-tls1_1"], ["-tls1"]):
            r = subprocess.run(
                ["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.tls_port,
                 "-servername", "alpha.kwd.test", "-cipher", "DEFAULT:@SECLEVEL=0"] + args,
                input="", capture_output=True, text=True, timeout=20)
            self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertTrue(self.wait_for(lambda: self.metric(
            'kwd_proxy_tls_handshake_errors_total{reason="protocol_version"}') >= before + 2))

    # ---- https awareness ----

    def test_https_for_secure_rule_forwarded_proto_and_access_log(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            status, _, _ = self.request(s, path="/secure/x")
            self.assertEqual(status, 403)
            headers = self.echoed(s, path="/plain-marker",
                                  headers=["X-Forwarded-Proto: https",
                                           "SSL_CLIENT_CERT: forged", "SSL-Cipher-Suite: forged"])
            self.assertEqual(headers["x-forwarded-proto"], "http")
            self.assertNotIn("ssl_client_cert", headers)
            self.assertNotIn("ssl-cipher-suite", headers)
            self.assertNotIn("ssl_cipher_suite", headers)
        with self.tls_connect("alpha.kwd.test") as s:
            status, _, body = self.request(s, path="/secure/x")
            self.assertEqual(status, 200, body)
            headers = self.echoed(s, path="/tls-marker")
            self.assertEqual(headers["x-forwarded-proto"], "https")
            self.assertTrue(headers["ssl_cipher_suite"].startswith("TLS_"), headers)
            self.assertIn(headers["ssl_cipher_usekeysize"], ("128", "256"))
        def logged():
            with open(self.access_log) as f:
                text = f.read()
            return ('"GET /tls-marker HTTP/1.1" 200' in text and
                    '"GET /plain-marker HTTP/1.1" 200' in text, text)
        self.assertTrue(self.wait_for(lambda: logged()[0]))
        text = logged()[1]
        tls_line = [l for l in text.splitlines() if "/tls-marker" in l][0]
        plain_line = [l for l in text.splitlines() if "/plain-marker" in l][0]
        # The last field is the client connection's TLS version, "-" for plain HTTP.
        self.assertRegex(tls_line, r" TLSv1\.[23]$")
        self.assertTrue(plain_line.endswith(" -"), plain_line)

    # ---- client certificates ----

    def test_verified_client_certificate_and_chain_reach_the_backend(self):
        ctx = self.context(client_cert=("client-chain.pem", "client.key"))
        with self.tls_connect("alpha.kwd.test", ctx) as s:
            headers = self.echoed(s, headers=["SSL_CLIENT_CERT: forged",
                                              "SSL_CLIENT_CERT_CHAIN_5: forged"])
        cert = headers["ssl_client_cert"]
        self.assertRegex(cert, r"^-----BEGIN CERTIFICATE----- [A-Za-z0-9+/=]+ "
                               r"-----END CERTIFICATE-----$")
        with open(os.path.join(self.pki, "client.crt")) as f:
            pem = f.read()
        body = "".join(l for l in pem.splitlines() if not l.startswith("-----"))
        self.assertIn(body, cert)
        with open(os.path.join(self.pki, "client-int.pem")) as f:
            int_body = "".join(l for l in f.read().splitlines() if not l.startswith("-----"))
        self.assertIn(int_body, headers["ssl_client_cert_chain_1"])
        self.assertNotIn("ssl_client_cert_chain_5", headers)
        self.assertNotIn("forged", json.dumps(headers))

    def test_only_the_verified_chain_is_forwarded(self):
        # Issue 23 item 10: certificates appended to a valid chain (a self-made
        # CA and an intermediate it signed) took part in no verification.
        ctx = self.context(client_cert=("client-chain-padded.pem", "client.key"))
        with self.tls_connect("alpha.kwd.test", ctx) as s:
            headers = self.echoed(s)

        def body(name):
            with open(os.path.join(self.pki, name)) as f:
                return "".join(l for l in f.read().splitlines() if not l.startswith("-----"))

        self.assertIn(body("client.crt"), headers["ssl_client_cert"])
        self.assertIn(body("client-int.pem"), headers["ssl_client_cert_chain_1"])
        chain = {k: v for k, v in headers.items() if k.startswith("ssl_client_cert_chain_")}
        self.assertEqual(list(chain), ["ssl_client_cert_chain_1"], chain)
        text = json.dumps(headers)
        self.assertNotIn(body("rogue-ca.pem"), text)
        self.assertNotIn(body("rogue-int.pem"), text)
        # The trust anchor (client-ca) is not sent either, as SAP's ICM does not.
        self.assertNotIn(body("client-ca.pem"), text)

    def test_unverified_client_certificate_is_not_forwarded(self):
        before = self.metric("kwd_proxy_tls_client_certificates_unverified_total")
        ctx = self.context(client_cert=("stranger.crt", "stranger.key"))
        with self.tls_connect("alpha.kwd.test", ctx) as s:
            headers = self.echoed(s, headers=["SSL_CLIENT_CERT: forged"])
        self.assertNotIn("ssl_client_cert", headers)
        self.assertIn("ssl_cipher_suite", headers)
        self.assertGreaterEqual(
            self.metric("kwd_proxy_tls_client_certificates_unverified_total"), before + 1)

    # ---- sessions ----

    def test_session_ticket_resumption(self):
        ctx = self.context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with self.tls_connect("alpha.kwd.test", ctx) as s:
            self.assertEqual(self.request(s)[0], 200)
            session = s.session
        self.assertTrue(session.has_ticket)
        with self.tls_connect("alpha.kwd.test", ctx, session=session) as s:
            self.assertTrue(s.session_reused)
            self.assertEqual(self.request(s)[0], 200)
        # TLS 1.3: the ticket arrives after the handshake, with the response.
        ctx = self.context()
        with self.tls_connect("beta.kwd.test", ctx) as s:
            self.assertEqual(self.request(s, host="beta.kwd.test")[0], 200)
            session = s.session
        with self.tls_connect("beta.kwd.test", ctx, session=session) as s:
            self.assertTrue(s.session_reused)
        # Two workers, one ticket key: every resumption works whichever worker
        # the kernel hands the connection to.
        for _ in range(6):
            with self.tls_connect("beta.kwd.test", ctx, session=session) as s:
                self.assertTrue(s.session_reused)
        self.assertGreaterEqual(self.metric('kwd_proxy_tls_handshakes_total{resumed="true"}'), 2)

    def test_certificate_metrics(self):
        self.assertEqual(self.metric("kwd_proxy_tls_certificates"), 3)
        expiry = self.metric("kwd_proxy_tls_certificate_expiry_timestamp_seconds")
        # The test certificates are valid for two days.
        self.assertGreater(expiry, time.time() + 86400)
        self.assertLess(expiry, time.time() + 3 * 86400)

    # ---- bad input ----

    def test_garbage_split_oversized_and_stalled_handshakes_leave_others_alone(self):
        # A client in the middle of a keep-alive exchange the whole time.
        good = self.tls_connect("alpha.kwd.test")
        self.assertEqual(self.request(good)[0], 200)
        before_protocol = self.metric('kwd_proxy_tls_handshake_errors_total{reason="protocol"}')
        before_timeout = self.metric('kwd_proxy_tls_handshake_errors_total{reason="timeout"}')
        before_http = self.metric('kwd_proxy_tls_handshake_errors_total{reason="http_request"}')
        # Garbage.
        with socket.create_connection(("127.0.0.1", self.tls_port), timeout=5) as s:
            s.sendall(os.urandom(64) + b"\x16\x03\x01\xff\xff" + b"\x00" * 300)
            recv_until_closed(s)
        # Plain HTTP on the TLS port.
        with socket.create_connection(("127.0.0.1", self.tls_port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            recv_until_closed(s)
        # Oversized ClientHello: a handshake message claiming 16 MB.
        with socket.create_connection(("127.0.0.1", self.tls_port), timeout=5) as s:
            record = b"\x01\xff\xff\xff" + b"\x00" * 1000
            s.sendall(b"\x16\x03\x01" + len(record).to_bytes(2, "big") + record)
            recv_until_closed(s)
        # A real ClientHello split into 1-byte TCP segments still works.
        hello = client_hello_bytes(self.context(), "beta.kwd.test")
        with socket.create_connection(("127.0.0.1", self.tls_port), timeout=5) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(len(hello)):
                s.sendall(hello[i:i + 1])
            s.settimeout(5)
            reply = s.recv(5)
            self.assertEqual(reply[:1], b"\x16", "a ServerHello record answers the split hello")
        # A stalled handshake: half a ClientHello, then nothing.
        stalled = socket.create_connection(("127.0.0.1", self.tls_port), timeout=5)
        stalled.sendall(hello[:20])
        started = time.monotonic()
        # Meanwhile the keep-alive client and new clients are served.
        self.assertEqual(self.request(good)[0], 200)
        with self.tls_connect("beta.kwd.test") as s:
            self.assertEqual(self.request(s, host="beta.kwd.test")[0], 200)
        recv_until_closed(stalled, timeout=8)
        elapsed = time.monotonic() - started
        stalled.close()
        self.assertLess(elapsed, 7, "the 1 s handshake timeout closes a stalled handshake")
        self.assertEqual(self.request(good)[0], 200)
        good.close()
        self.assertTrue(self.wait_for(lambda: self.metric(
            'kwd_proxy_tls_handshake_errors_total{reason="timeout"}') >= before_timeout + 1))
        self.assertGreaterEqual(
            self.metric('kwd_proxy_tls_handshake_errors_total{reason="protocol"}'),
            before_protocol + 2)
        self.assertGreaterEqual(
            self.metric('kwd_proxy_tls_handshake_errors_total{reason="http_request"}'),
            before_http + 1)
        self.assertIsNone(self.proxy.poll(), "the proxy is still running")

    def test_renegotiation_is_refused_and_counted(self):
        before = self.metric('kwd_proxy_tls_handshake_errors_total{reason="renegotiation"}')
        # s_client's "R" command renegotiates (TLS 1.2 only).
        p = subprocess.Popen(
            ["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.tls_port, "-servername",
             "alpha.kwd.test", "-tls1_2", "-CAfile", os.path.join(self.pki, "server-ca.pem")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            p.stdin.write("R\n")
            p.stdin.flush()
            # s_client exits when the proxy closes; else ask for a response
            # that must not come.
            if self.wait_for(lambda: p.poll() is not None, timeout=3) is False:
                p.stdin.write("GET / HTTP/1.1\r\nHost: alpha.kwd.test\r\n\r\n")
                p.stdin.flush()
        except BrokenPipeError:
            pass  # s_client is gone: the proxy closed the connection
        try:
            out, _ = p.communicate(timeout=15)
        except (subprocess.TimeoutExpired, BrokenPipeError, ValueError):
            p.kill()
            out = p.stdout.read() if p.stdout and not p.stdout.closed else ""
            p.wait()
        self.assertNotIn("HTTP/1.1 200", out)
        self.assertTrue(self.wait_for(lambda: self.metric(
            'kwd_proxy_tls_handshake_errors_total{reason="renegotiation"}') >= before + 1))


class TlsReload(unittest.TestCase):
    """Certificates replaced on disk: new handshakes get them, nothing fails."""

    @classmethod
    def setUpClass(cls):
        TlsTermination.setUpClass.__func__(cls)

    @classmethod
    def tearDownClass(cls):
        TlsTermination.tearDownClass.__func__(cls)

    context = TlsTermination.context
    tls_connect = TlsTermination.tls_connect
    request = TlsTermination.request
    peer_cn = TlsTermination.peer_cn
    metrics = TlsTermination.metrics
    metric = TlsTermination.metric
    wait_for = TlsTermination.wait_for

    def test_reload_under_load_broken_pair_keeps_the_old_one(self):
        failures = []
        done = threading.Event()
        counts = [0]

        def load():
            # Fresh handshakes and keep-alive requests until told to stop
            # (bounded: at most 60 s).
            deadline = time.monotonic() + 60
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            while not done.is_set() and time.monotonic() < deadline:
                try:
                    with self.tls_connect("beta.kwd.test", ctx) as s:
                        for _ in range(3):
                            status = self.request(s, host="beta.kwd.test")[0]
                            if status != 200:
                                failures.append(status)
                            counts[0] += 1
                except Exception as e:  # noqa: BLE001 - any failure counts
                    failures.append(repr(e))

        threads = [threading.Thread(target=load) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            # Hold one connection open across the reloads.
            held = self.tls_connect("beta.kwd.test")
            self.assertEqual(self.request(held, host="beta.kwd.test")[0], 200)
            self.assertTrue(self.wait_for(lambda: counts[0] >= 20))
            errors_before = self.metric("kwd_proxy_tls_certificate_errors_total")
            # A broken pair: the key does not match the certificate.
            crt = os.path.join(self.certs, "beta.crt")
            key = os.path.join(self.certs, "beta.key")
            shutil.copy(os.path.join(self.pki, "beta2.crt"), crt + ".tmp")
            os.replace(crt + ".tmp", crt)
            self.assertTrue(self.wait_for(lambda: self.metric(
                "kwd_proxy_tls_certificate_errors_total") >= errors_before + 1))
            with open(self.log_path) as f:
                self.assertIn("certificate pair refused; the previous one keeps serving", f.read())
            with self.tls_connect("beta.kwd.test") as s:
                self.assertEqual(self.peer_cn(s), "beta", "the old pair keeps serving")
            # The key is deleted before the new one is written: still the old pair.
            errors_before = self.metric("kwd_proxy_tls_certificate_errors_total")
            os.remove(key)
            self.assertTrue(self.wait_for(lambda: self.metric(
                "kwd_proxy_tls_certificate_errors_total") >= errors_before + 1))
            with open(self.log_path) as f:
                self.assertIn("certificate pair incomplete", f.read())
            with self.tls_connect("beta.kwd.test") as s:
                self.assertEqual(self.peer_cn(s), "beta", "the old pair keeps serving")
            # The matching key arrives: the renewed certificate is used.
            reloads_before = self.metric("kwd_proxy_tls_certificate_reloads_total")
            shutil.copy(os.path.join(self.pki, "beta2.key"), key + ".tmp")
            os.replace(key + ".tmp", key)
            self.assertTrue(self.wait_for(lambda: self.metric(
                "kwd_proxy_tls_certificate_reloads_total") >= reloads_before + 1))
            with self.tls_connect("beta.kwd.test", self.context(ca="other-ca.pem")) as s:
                self.assertEqual(self.peer_cn(s), "beta-renewed")
            # A Secret update: the kubelet writes a new version directory and
            # swaps the ..data symlink atomically.
            wild = os.path.join(self.certs, "wild")
            os.makedirs(os.path.join(wild, "..v2"))
            shutil.copy(os.path.join(self.pki, "wild2.crt"), os.path.join(wild, "..v2", "tls.crt"))
            shutil.copy(os.path.join(self.pki, "wild2.key"), os.path.join(wild, "..v2", "tls.key"))
            os.symlink("..v2", os.path.join(wild, "..data_tmp"))
            os.replace(os.path.join(wild, "..data_tmp"), os.path.join(wild, "..data"))

            def wild_cn():
                with self.tls_connect("x.wild.kwd.test") as s:
                    return self.peer_cn(s)
            self.assertTrue(self.wait_for(lambda: wild_cn() == "wild-renewed"))
            served = counts[0]
            self.assertTrue(self.wait_for(lambda: counts[0] >= served + 20))
            # The connection opened before the reloads still works.
            self.assertEqual(self.request(held, host="beta.kwd.test")[0], 200)
            held.close()
        finally:
            done.set()
            for t in threads:
                t.join(timeout=70)
        self.assertEqual(failures, [])
        self.assertGreater(counts[0], 40)


class TlsReloadCountedWhenServed(unittest.TestCase):
    """kwd_proxy_tls_certificate_reloads_total counts a reload once the new
    pair serves, and after its log line. It used to count first, then log, then
    publish: TlsReload, which waits for the count and then expects the new
    certificate (or the log line), could fail when the reloading thread lost
    the CPU between the two (a loaded machine).
    Here the log line cannot be written (the proxy's stderr is a full pipe),
    which holds the reloading thread at that line: the count must not have
    moved yet; once the log flows, count and certificate move together."""

    LOG_PIPE = True

    @classmethod
    def setUpClass(cls):
        TlsTermination.setUpClass.__func__(cls)

    @classmethod
    def tearDownClass(cls):
        TlsTermination.tearDownClass.__func__(cls)

    context = TlsTermination.context
    tls_connect = TlsTermination.tls_connect
    peer_cn = TlsTermination.peer_cn
    metrics = TlsTermination.metrics
    metric = TlsTermination.metric
    wait_for = TlsTermination.wait_for

    def test_reload_counted_after_its_log_line_and_once_served(self):
        def wild_cn():
            with self.tls_connect("x.wild.kwd.test") as s:
                return self.peer_cn(s)

        self.assertEqual(wild_cn(), "wild")
        before = self.metric("kwd_proxy_tls_certificate_reloads_total")
        self.log_pipe.pause_full()
        try:
            # A Secret update (the ..data symlink swapped): both files at once.
            wild = os.path.join(self.certs, "wild")
            os.makedirs(os.path.join(wild, "..v2"))
            shutil.copy(os.path.join(self.pki, "wild2.crt"), os.path.join(wild, "..v2", "tls.crt"))
            shutil.copy(os.path.join(self.pki, "wild2.key"), os.path.join(wild, "..v2", "tls.key"))
            os.symlink("..v2", os.path.join(wild, "..data_tmp"))
            os.replace(os.path.join(wild, "..data_tmp"), os.path.join(wild, "..data"))
            # The reload thread looks every 2 s: within 5 s it has loaded the
            # pair and is held writing "certificate reloaded".
            counted = self.wait_for(lambda: self.metric(
                "kwd_proxy_tls_certificate_reloads_total") >= before + 1, timeout=5)
            if counted:
                self.assertEqual(wild_cn(), "wild-renewed", "counted, but the old pair serves")
            self.assertFalse(counted, "counted before its log line was written")
        finally:
            self.log_pipe.resume()
        self.assertTrue(self.wait_for(lambda: self.metric(
            "kwd_proxy_tls_certificate_reloads_total") >= before + 1))
        # Counted: served and logged, no waiting.
        self.assertEqual(wild_cn(), "wild-renewed")

        def logged():  # the line is in the pipe; the copying thread writes it here
            with open(self.log_path) as f:
                return "certificate reloaded" in f.read()
        self.assertTrue(self.wait_for(logged))


class TlsRequiredClientCertificate(unittest.TestCase):
    VERIFY = "required"

    @classmethod
    def setUpClass(cls):
        TlsTermination.setUpClass.__func__(cls)

    @classmethod
    def tearDownClass(cls):
        TlsTermination.tearDownClass.__func__(cls)

    context = TlsTermination.context
    tls_connect = TlsTermination.tls_connect
    request = TlsTermination.request
    echoed = TlsTermination.echoed
    metrics = TlsTermination.metrics
    metric = TlsTermination.metric
    wait_for = TlsTermination.wait_for

    def test_no_or_unverified_certificate_is_refused(self):
        before = self.metric('kwd_proxy_tls_handshake_errors_total{reason="client_certificate"}')
        for cert in (None, ("stranger.crt", "stranger.key")):
            with self.subTest(cert=cert):
                # TLS 1.3: the client learns of the refusal at its first read.
                with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
                    with self.tls_connect("alpha.kwd.test", self.context(client_cert=cert)) as s:
                        self.request(s)
        self.assertTrue(self.wait_for(lambda: self.metric(
            'kwd_proxy_tls_handshake_errors_total{reason="client_certificate"}') >= before + 2))
        ctx = self.context(client_cert=("client-chain.pem", "client.key"))
        with self.tls_connect("alpha.kwd.test", ctx) as s:
            self.assertIn("ssl_client_cert", self.echoed(s))


class TlsFlags(unittest.TestCase):
    """kwd-proxy serve refuses TLS flags that cannot work, naming the flag."""

    def serve(self, *args):
        if not PROXY:
            self.skipTest("set KWD_PROXY")
        return subprocess.run(
            [PROXY, "serve", "--snapshot", "/nonexistent.json", "--listen", "127.0.0.1:0",
             "--admin-listen", "127.0.0.1:0"] + list(args),
            capture_output=True, text=True, timeout=30)

    def test_usage_errors_exit_two_naming_the_flag(self):
        for args, text in [
            (["--tls-listen", "127.0.0.1:0"], "--tls-listen and --tls-cert-dir go together"),
            (["--tls-cert-dir", "/tmp"], "--tls-listen and --tls-cert-dir go together"),
            (["--tls-listen", "127.0.0.1:0", "--tls-cert-dir", "/tmp", "--tls-verify-client",
              "sometimes"], "--tls-verify-client takes none, optional or required"),
            (["--tls-listen", "127.0.0.1:0", "--tls-cert-dir", "/tmp", "--tls-verify-client",
              "required"], "needs --tls-client-ca"),
            (["--tls-client-ca", "/tmp/ca.pem"], "need --tls-listen"),
            (["--tls-listen", "nowhere", "--tls-cert-dir", "/tmp"], "--tls-listen"),
        ]:
            with self.subTest(args=args):
                r = self.serve(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(text, r.stderr)

    def test_help_lists_the_tls_flags(self):
        r = subprocess.run([PROXY, "serve", "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0)
        for flag in ("--tls-listen", "--tls-cert-dir", "--tls-client-ca", "--tls-verify-client",
                     "--tls-handshake-timeout"):
            self.assertIn(flag, r.stdout)

    def test_unusable_certificate_directory_exits_one(self):
        empty = tempfile.mkdtemp(prefix="kwd-tls-empty-")
        try:
            with open(os.path.join(empty, "bad.crt"), "w") as f:
                f.write("not a certificate")
            with open(os.path.join(empty, "bad.key"), "w") as f:
                f.write("not a key")
            snapshot = os.path.join(empty, "snapshot.json")
            with open(snapshot, "w") as f:
                f.write("{}")
            r = subprocess.run(
                [PROXY, "serve", "--snapshot", snapshot, "--listen", "127.0.0.1:0",
                 "--admin-listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0",
                 "--tls-cert-dir", empty], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("--tls-cert-dir " + empty + ": no certificate pair could be loaded",
                          r.stderr)
            self.assertIn("certificate pair refused", r.stderr)
            os.remove(os.path.join(empty, "bad.crt"))
            r = subprocess.run(
                [PROXY, "serve", "--snapshot", snapshot, "--listen", "127.0.0.1:0",
                 "--admin-listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0",
                 "--tls-cert-dir", empty], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("no certificate pair (NAME.crt + NAME.key", r.stderr)
        finally:
            shutil.rmtree(empty, ignore_errors=True)


class LogPipe:
    """A pipe for the proxy's stderr, copied to `log` by a thread, that the
    test can fill and stop reading (pause_full): the proxy's next log line
    then blocks in write(2) until resume()."""

    def __init__(self, log):
        self.log = log
        self.read_fd, self.write_fd = os.pipe()
        fcntl.fcntl(self.write_fd, fcntl.F_SETPIPE_SZ, 4096)
        self.flowing = threading.Event()
        self.flowing.set()
        self.idle = threading.Event()
        self.closed = False
        self.thread = threading.Thread(target=self.copy, daemon=True)
        self.thread.start()

    def copy(self):
        while not self.closed:
            if not self.flowing.is_set():
                self.idle.set()
                time.sleep(0.01)
                continue
            self.idle.clear()
            ready, _, _ = select.select([self.read_fd], [], [], 0.05)
            if ready and self.flowing.is_set():
                data = os.read(self.read_fd, 65536)
                if not data:
                    break
                self.log.write(data.decode(errors="replace").replace("#", ""))
                self.log.flush()

    def pause_full(self):
        self.flowing.clear()
        assert self.idle.wait(5)
        # A writer of its own (a new open file description: O_NONBLOCK only
        # there) fills the pipe.
        fd = os.open("/proc/self/fd/%d" % self.read_fd, os.O_WRONLY | os.O_NONBLOCK)
        try:
            for size in (512, 64, 8, 1):  # to the last byte: any line blocks
                try:
                    while True:
                        os.write(fd, b"#" * size)
                except BlockingIOError:
                    pass
        finally:
            os.close(fd)

    def resume(self):
        self.flowing.set()

    def close(self):
        self.closed = True
        self.thread.join(timeout=5)
        os.close(self.read_fd)


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


def recv_until_closed(sock, timeout=5):
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return data


def client_hello_bytes(ctx, server_name):
    """The bytes of a ClientHello, from a memory BIO handshake that goes no further."""
    incoming = ssl.MemoryBIO()
    outgoing = ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


if __name__ == "__main__":
    unittest.main()
