"""Re-encryption (LogonGroup upstreamTLS mode reencrypt, issue 11 item 4),
black-box: a real kwd-proxy with a snapshot that the real kwd-controller
compiled, in front of TLS backends on loopback (Python's ssl, certificates
made at test time with openssl).

- reencrypt works: the backend sees TLS with the SNI serverName;
- wrong CA, or a name the certificate does not hold: 502 EPROTERROR, counted
  in kwd_proxy_upstream_tls_errors_total{reason="verify"}, and the backend
  never sees a byte in clear;
- clientCertSecret: the certificate from --upstream-cert-dir is presented; a
  Secret the proxy does not have gives 502 (reason config), nothing in clear;
- pooled connections are reused (one TLS connection for many requests) and a
  new connection resumes the session;
- health checks go over TLS and mark a server down and up again.

Needs KWD_PROXY and KWD_CONTROLLER (the built binaries), set by ctest.
Debian's python3, standard library only.
"""

import base64
import json
import os
import sys
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")
SERVER_NAME = "erp.example.test"


def run(command, cwd):
    result = subprocess.run(command, cwd=cwd, shell=True, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, command + "\n" + result.stdout + result.stderr


def make_pki(directory):
    """ca, server (SAN erp.example.test, 127.0.0.1) and client signed by
    ca; other-ca, an unrelated CA."""
    def ca(name):
        run(f"openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            f"-keyout {name}.key -out {name}.pem -days 2 -subj /CN={name} "
            f"-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign",
            directory)

    def leaf(name, signer, ext):
        with open(os.path.join(directory, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        run(f"openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            f"-keyout {name}.key -out {name}.csr -subj /CN={name} && "
            f"openssl x509 -req -in {name}.csr -CA {signer}.pem -CAkey {signer}.key "
            f"-CAcreateserial -out {name}.pem -days 2 -extfile {name}.ext", directory)

    ca("ca")
    ca("other-ca")
    leaf("server", "ca", f"subjectAltName=DNS:{SERVER_NAME},IP:127.0.0.1\n"
                         "extendedKeyUsage=serverAuth")
    leaf("client", "ca", "extendedKeyUsage=clientAuth")
    leaf("client2", "ca", "extendedKeyUsage=clientAuth")


class TlsBackend:
    """HTTPS on loopback, keep-alive. Counts what arrives: TLS handshakes
    (SNI, client certificate CN, resumed or not), and connections that began
    with anything but a TLS record (clear text)."""

    def __init__(self, pki):
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(os.path.join(pki, "server.pem"),
                                     os.path.join(pki, "server.key"))
        self.context.load_verify_locations(os.path.join(pki, "ca.pem"))
        self.context.verify_mode = ssl.CERT_OPTIONAL
        self.context.sni_callback = self._sni
        self.lock = threading.Lock()
        self.handshakes = []  # dicts: sni, client, resumed
        self.failed_handshakes = 0
        self.cleartext = 0
        self.requests = 0
        self.healthy = True
        self.pair_count = 0
        self.pair_arrived = threading.Condition()
        self._sni_seen = {}
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _sni(self, ssl_socket, name, context):
        with self.lock:
            self._sni_seen[id(ssl_socket)] = name

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            conn.settimeout(10)
            first = conn.recv(1, socket.MSG_PEEK)
            if first != b"\x16":
                with self.lock:
                    self.cleartext += 1 if first else 0
                conn.close()
                return
            try:
                tls = self.context.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                with self.lock:
                    self.failed_handshakes += 1
                conn.close()
                return
            peer = tls.getpeercert() or {}
            client = ""
            for rdn in peer.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        client = value
            with self.lock:
                sni = self._sni_seen.pop(id(tls), None)
                self.handshakes.append({"sni": sni, "client": client,
                                        "resumed": tls.session_reused})
                index = len(self.handshakes)
            self._http(tls, index, sni, client)
        except OSError:
            pass
        finally:
            conn.close()

    def _http(self, tls, index, sni, client):
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                chunk = tls.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, data = data.split(b"\r\n\r\n", 1)
            target = head.split(b" ")[1].decode()
            with self.lock:
                self.requests += 1
                healthy = self.healthy
            if "/pair" in target:
                # Held until the other request of the pair has arrived too,
                # so both are in flight at once (two server connections)
                # however the two clients get scheduled.
                with self.pair_arrived:
                    self.pair_count += 1
                    self.pair_arrived.notify_all()
                    self.pair_arrived.wait_for(lambda: self.pair_count >= 2, timeout=10)
            status = "200 OK"
            if target.startswith("/sap/public/icman/ping") and not healthy:
                status = "503 Service Unavailable"
            body = json.dumps({"connection": index, "sni": sni, "client": client,
                               "path": target}).encode()
            close = "close" in target  # a new connection for the next request
            tls.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n"
                        f"{'Connection: close' + chr(13) + chr(10) if close else ''}\r\n".encode()
                        + body)
            if close:
                return

    def close(self):
        self.closed = True
        self.sock.close()


class GarbageBackend:
    """Answers the proxy's ClientHello with clear-text HTTP instead of a
    ServerHello (a server that does not speak TLS on that port)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            try:
                conn.settimeout(10)
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                time.sleep(1)
            except OSError:
                pass

    def close(self):
        self.sock.close()


def group(name, port, quick_health=False, **tls):
    # Quick health checks only where the test is about them: a group whose
    # TLS fails would otherwise be marked down at once and answer 503
    # before its 502 could be seen (the default needs 2 failed checks, 25 s
    # apart).
    spec = {"mode": "reencrypt", **tls}
    health = ("{intervalSeconds: 1, timeoutSeconds: 1, unhealthyThreshold: 1, healthyThreshold: 1}"
              if quick_health else "{}")
    return f"""apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: {name}}}
spec:
  kind: abap
  backend:
    staticServers: [{{name: {name}1, address: 127.0.0.1, port: {port}}}]
  healthCheck: {health}
  upstreamTLS: {json.dumps(spec)}
---
"""


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


class UpstreamTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PROXY or not CONTROLLER:
            raise unittest.SkipTest("set KWD_PROXY and KWD_CONTROLLER to the built binaries")
        cls.dir = tempfile.mkdtemp(prefix="kwd-upstream-tls-")
        pki = os.path.join(cls.dir, "pki")
        os.makedirs(pki)
        make_pki(pki)
        # The client certificate as a Secret mount: DIR/<secret>/tls.crt + tls.key.
        cls.pki = pki
        certs = os.path.join(cls.dir, "upstream-certs")
        cls.certs = certs
        os.makedirs(os.path.join(certs, "erp-client"))
        shutil.copy(os.path.join(pki, "client.pem"), os.path.join(certs, "erp-client", "tls.crt"))
        shutil.copy(os.path.join(pki, "client.key"), os.path.join(certs, "erp-client", "tls.key"))

        cls.backend = TlsBackend(pki)
        cls.health_backend = TlsBackend(pki)
        cls.garbage_backend = GarbageBackend()

        def b64(name):
            with open(os.path.join(pki, name), "rb") as f:
                return base64.b64encode(f.read()).decode()

        port = cls.backend.port
        objects = (
            group("good", port, serverName=SERVER_NAME, caBundle=b64("ca.pem"))
            + group("wrongca", port, serverName=SERVER_NAME, caBundle=b64("other-ca.pem"))
            + group("wrongname", port, serverName="other.example.test", caBundle=b64("ca.pem"))
            + group("mtls", port, serverName=SERVER_NAME, caBundle=b64("ca.pem"),
                    clientCertSecret="erp-client")
            + group("nosecret", port, serverName=SERVER_NAME, caBundle=b64("ca.pem"),
                    clientCertSecret="absent")
            + group("health", cls.health_backend.port, quick_health=True, serverName=SERVER_NAME,
                    caBundle=b64("ca.pem"))
            + group("garbage", cls.garbage_backend.port, serverName=SERVER_NAME,
                    caBundle=b64("ca.pem"))
            + """apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: map}
spec:
  defaultGroups: {abap: good, java: good}
  rules:
"""
            + "".join(f"    - {{prefix: /{g}/, kind: abap, logonGroup: {g}}}\n"
                      for g in ("good", "wrongca", "wrongname", "mtls", "nosecret", "health",
                                 "garbage")))
        os.makedirs(os.path.join(cls.dir, "objects"))
        with open(os.path.join(cls.dir, "objects", "objects.yaml"), "w") as f:
            f.write(objects)
        compiled = subprocess.run(
            [CONTROLLER, "compile", "--source=dir:" + os.path.join(cls.dir, "objects")],
            capture_output=True, text=True, timeout=60)
        assert compiled.returncode == 0, compiled.stdout + compiled.stderr
        snapshot = os.path.join(cls.dir, "snapshot.json")
        with open(snapshot, "w") as f:
            f.write(compiled.stdout)
        cls.admin_port = free_port()
        cls.log_path = os.path.join(cls.dir, "proxy.log")
        cls.log = open(cls.log_path, "w")
        cls.proxy = subprocess.Popen(
            [PROXY, "serve", "--snapshot", snapshot, "--listen", "127.0.0.1:0",
             "--admin-listen", f"127.0.0.1:{cls.admin_port}", "--access-log", "off",
             "--upstream-cert-dir", certs, "--workers", "1"],
            stdout=subprocess.PIPE, stderr=cls.log, text=True)
        line = ""
        for _ in range(100):
            line = cls.proxy.stdout.readline()
            if line.startswith("listening ") or not line:
                break
        assert line.startswith("listening "), "kwd-proxy did not start: " + line
        cls.port = int(line.rsplit(":", 1)[1])

    @classmethod
    def tearDownClass(cls):
        cls.proxy.terminate()
        try:
            cls.proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            cls.proxy.kill()
            cls.proxy.wait()
        cls.proxy.stdout.close()
        cls.log.close()
        cls.backend.close()
        cls.health_backend.close()
        cls.garbage_backend.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def get(self, path, sock=None):
        """One GET through the proxy (on `sock` when given: keep-alive);
        returns (status, body bytes)."""
        own = sock is None
        if own:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        try:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: erp\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                self.assertTrue(chunk, "the proxy closed without an answer")
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(body) < length:
                chunk = sock.recv(65536)
                self.assertTrue(chunk)
                body += chunk
            return int(head.split(b" ")[1]), body
        finally:
            if own:
                sock.close()

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics",
                                    timeout=5) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            series, _, value = line.rpartition(" ")
            got = series[len(name):].strip("{}").split(",") if "{" in series else []
            if all(part in got for part in want.split(",") if part):
                total += float(value)
        return total

    def wait_for(self, condition, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.05)
        return condition()

    def test_reencrypt_sends_sni_and_verifies(self):
        status, body = self.get("/good/x")
        self.assertEqual(status, 200, body)
        answer = json.loads(body)
        self.assertEqual(answer["sni"], SERVER_NAME)
        self.assertEqual(answer["client"], "")  # no clientCertSecret: no certificate
        self.assertEqual(answer["path"], "/good/x")
        self.assertEqual(self.backend.cleartext, 0)

    def test_wrong_ca_is_502_and_never_clear_text(self):
        before = self.metric("kwd_proxy_upstream_tls_errors_total", group="default/wrongca",
                             reason="verify")
        status, body = self.get("/wrongca/x")
        self.assertEqual(status, 502)
        self.assertIn(b"EPROTERROR", body)
        self.assertTrue(self.wait_for(lambda: self.metric(
            "kwd_proxy_upstream_tls_errors_total", group="default/wrongca",
            reason="verify") == before + 1))
        self.assertEqual(self.backend.cleartext, 0)

    def test_name_mismatch_is_502(self):
        status, body = self.get("/wrongname/x")
        self.assertEqual(status, 502)
        self.assertIn(b"EPROTERROR", body)
        self.assertGreaterEqual(self.metric("kwd_proxy_upstream_tls_errors_total",
                                            group="default/wrongname", reason="verify"), 1)
        self.assertEqual(self.backend.cleartext, 0)

    def test_failed_handshake_is_one_prompt_502_and_no_connect_failure(self):
        # The server answers the ClientHello with clear text: the handshake
        # fails at once, so the 502 goes out at once (not when the connect
        # timeout, 5 s, fires), exactly once, and the server is not marked
        # down as if its connect had timed out.
        with socket.create_connection(("127.0.0.1", self.port), timeout=15) as sock:
            start = time.monotonic()
            sock.sendall(b"GET /garbage/x HTTP/1.1\r\nHost: erp\r\n\r\n")
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            elapsed = time.monotonic() - start
        self.assertTrue(data.startswith(b"HTTP/1.1 502 "), data[:200])
        self.assertIn(b"EPROTERROR", data)
        self.assertEqual(data.count(b"HTTP/1.1 "), 1, data)
        self.assertLess(elapsed, 3.0)
        self.assertGreaterEqual(self.metric("kwd_proxy_upstream_tls_errors_total",
                                            group="default/garbage", reason="handshake"), 1)
        time.sleep(0.2)
        with open(self.log_path) as f:
            log = f.read()
        self.assertNotIn("server=garbage1 error=\"Connection timed out\"", log)
        # Still up: the next request gets the same 502, not "no server" 503.
        status, body = self.get("/garbage/y")
        self.assertEqual(status, 502, body)

    def test_client_certificate_is_presented(self):
        status, body = self.get("/mtls/x")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["client"], "client")

    def test_client_certificate_is_reloaded_when_the_secret_changes(self):
        status, body = self.get("/mtls/close1")
        self.assertEqual(status, 200, body)
        # The Secret is renewed (here: the files replaced): new connections
        # present the new certificate within seconds.
        secret = os.path.join(self.certs, "erp-client")
        for name, target in (("client2.key", "tls.key.new"), ("client2.pem", "tls.crt.new")):
            shutil.copy(os.path.join(self.pki, name), os.path.join(secret, target))
        os.replace(os.path.join(secret, "tls.key.new"), os.path.join(secret, "tls.key"))
        os.replace(os.path.join(secret, "tls.crt.new"), os.path.join(secret, "tls.crt"))
        seen = []

        def presents_new_certificate():
            status, body = self.get("/mtls/close")
            seen.append((status, json.loads(body).get("client") if status == 200 else body))
            return seen[-1] == (200, "client2")
        self.assertTrue(self.wait_for(presents_new_certificate, timeout=15), seen)
        # Every request in between was served (old pair or new, never none).
        self.assertTrue(all(s == 200 for s, _ in seen), seen)

    def test_missing_client_certificate_secret_is_502_not_clear_text(self):
        status, body = self.get("/nosecret/x")
        self.assertEqual(status, 502)
        self.assertIn(b"EPROTERROR", body)
        self.assertGreaterEqual(self.metric("kwd_proxy_upstream_tls_errors_total",
                                            group="default/nosecret", reason="config"), 1)
        self.assertEqual(self.backend.cleartext, 0)

    def test_pooled_connection_is_reused_and_sessions_resume(self):
        # Keep-alive from the client: the proxy reuses its pooled TLS
        # connection to the server for every request (one connection id).
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            ids = set()
            for i in range(5):
                status, body = self.get(f"/good/pool{i}", sock)
                self.assertEqual(status, 200, body)
                ids.add(json.loads(body)["connection"])
        self.assertEqual(len(ids), 1, ids)
        # Two requests at once need two connections: the second server
        # connection resumes the session of the first.
        a = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        b = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        try:
            a.sendall(b"GET /good/pair-a HTTP/1.1\r\nHost: erp\r\n\r\n")
            b.sendall(b"GET /good/pair-b HTTP/1.1\r\nHost: erp\r\n\r\n")
            for sock in (a, b):
                data = b""
                while b"}" not in data:
                    chunk = sock.recv(65536)
                    self.assertTrue(chunk)
                    data += chunk
                self.assertIn(b" 200 ", data.split(b"\r\n")[0] + b" ")
        finally:
            a.close()
            b.close()
        self.assertTrue(self.wait_for(lambda: self.metric(
            "kwd_proxy_upstream_tls_handshakes_total", resumed="true") >= 1),
            self.metrics())
        with self.backend.lock:
            self.assertTrue(any(h["resumed"] for h in self.backend.handshakes),
                            self.backend.handshakes)

    def test_health_checks_over_tls_mark_down_and_up(self):
        up = lambda: self.metric("kwd_proxy_server_up", group="default/health")  # noqa: E731
        self.assertTrue(self.wait_for(lambda: up() == 1), self.metrics())
        self.assertTrue(self.wait_for(lambda: len(self.health_backend.handshakes) >= 1))
        self.health_backend.healthy = False
        self.assertTrue(self.wait_for(lambda: up() == 0, timeout=15), self.metrics())
        self.health_backend.healthy = True
        self.assertTrue(self.wait_for(lambda: up() == 1, timeout=15), self.metrics())
        self.assertEqual(self.health_backend.cleartext, 0)


class UpstreamCertDirFlagTest(unittest.TestCase):
    def test_upstream_cert_dir_must_be_a_directory(self):
        if not PROXY:
            raise unittest.SkipTest("set KWD_PROXY to the built binary")
        result = subprocess.run(
            [PROXY, "serve", "--snapshot", "/nonexistent.json", "--upstream-cert-dir",
             "/nonexistent-kwd-dir"], capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn('invalid value "/nonexistent-kwd-dir" for --upstream-cert-dir: '
                      "not a directory", result.stderr)
        usage = subprocess.run([PROXY, "serve", "--help"], capture_output=True, text=True,
                               timeout=30)
        self.assertIn("--upstream-cert-dir DIR", usage.stdout + usage.stderr)


if __name__ == "__main__":
    unittest.main()
