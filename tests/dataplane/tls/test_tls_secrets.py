#!/usr/bin/env python3
"""Black-box: per-host TLS certificates from Secrets (UrlMapping.spec.tls).

A real kwd-controller (directory source, where `kind: Secret` YAML stands in
for the cluster's Secrets) streams its snapshot to a real kwd-proxy with
--tls-listen and a --tls-cert-dir default certificate; a backend written here.
Certificates are made at test time by the openssl command line.

- SNI a.example gets the Secret's certificate; b.example (which that
  certificate also names, but spec.tls does not list) gets the file's.
- The Secret changes: the new certificate is served within seconds, with no
  restart; the Secret deleted: ResolvedRefs=False SecretNotFound on
  /debug/objects and the file certificate again.
- The private key's bytes are in no output but the proxy's --snapshot-cache
  file (mode 0600): not /debug/snapshot, `kwd-controller compile`, the
  controller's and the proxy's logs, /admin/api/state or /debug/objects.

Needs KWD_PROXY and KWD_CONTROLLER (set by ctest); Debian's python3 and openssl.
"""

import base64
import json
import os
import sys
import re
import shutil
import socket
import ssl
import stat
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")


def make_pair(cwd, name, *hosts):
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", name + ".key", "-out", name + ".crt", "-days", "2",
         "-subj", "/CN=" + name,
         "-addext", "subjectAltName=" + ",".join("DNS:" + h for h in hosts)],
        cwd=cwd, check=True, capture_output=True, timeout=60)
    with open(os.path.join(cwd, name + ".crt")) as f:
        cert = f.read()
    with open(os.path.join(cwd, name + ".key")) as f:
        key = f.read()
    return cert, key


def key_body(key_pem):
    """A line from the middle of a PEM key: what must appear nowhere."""
    lines = [line for line in key_pem.splitlines() if line and not line.startswith("-----")]
    return lines[0][:40]


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


def http_get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def wait_for(condition, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"hello from the backend"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


OBJECTS = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: web, namespace: erp}
spec:
  kind: java
  backend:
    staticServers:
      - {name: web1, address: 127.0.0.1, port: %d}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: erp, namespace: erp}
spec:
  hosts: [a.example, b.example]
  defaultRootHandler: java
  defaultGroups: {java: web}
  tls:
    - {hosts: [a.example], secretName: erp-tls}
"""


def secret_yaml(cert, key):
    b64 = lambda text: base64.b64encode(text.encode()).decode()
    return ("apiVersion: v1\nkind: Secret\nmetadata: {name: erp-tls, namespace: erp}\n"
            "type: kubernetes.io/tls\ndata:\n"
            f"  tls.crt: {b64(cert)}\n  tls.key: {b64(key)}\n")


class TlsSecrets(unittest.TestCase):
    def setUp(self):
        if not PROXY or not CONTROLLER:
            self.skipTest("set KWD_PROXY and KWD_CONTROLLER to the built binaries")
        self.dir = tempfile.mkdtemp(prefix="kwd-tls-secrets-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        pki = os.path.join(self.dir, "pki")
        self.certs = os.path.join(self.dir, "certs")
        self.objects = os.path.join(self.dir, "objects")
        for d in (pki, self.certs, self.objects, os.path.join(self.dir, "cache")):
            os.makedirs(d)
        self.default_cert, _ = make_pair(self.certs, "default", "default.kwd.test")
        # The Secret's certificate names b.example too: only listed hosts count.
        self.first = make_pair(pki, "first", "a.example", "b.example")
        self.second = make_pair(pki, "second", "a.example")
        self.backend = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
        self.backend.daemon_threads = True
        threading.Thread(target=self.backend.serve_forever, daemon=True).start()
        self.addCleanup(self.backend.server_close)
        self.addCleanup(self.backend.shutdown)
        self.write("mapping.yaml", OBJECTS % self.backend.server_address[1])
        self.write("secret.yaml", secret_yaml(*self.first))
        self.processes = []
        self.addCleanup(self.stop_all)

    def write(self, name, text):
        path = os.path.join(self.objects, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.rename(path + ".tmp", path)

    def start(self, argv, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        self.processes.append((process, log))
        return process

    def stop_all(self):
        for process, log in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()
            log.close()

    def log_of(self, name):
        with open(os.path.join(self.dir, name + ".log")) as f:
            return f.read()

    def start_both(self):
        grpc = free_port()
        self.controller_admin = free_port()
        controller = self.start(
            [CONTROLLER, "serve", "--source=dir:" + self.objects,
             "--grpc-listen", f"127.0.0.1:{grpc}",
             "--admin-listen", f"127.0.0.1:{self.controller_admin}",
             "--poll-interval", "50ms", "--log-level", "debug"], "controller")
        line = controller.stdout.readline()
        self.assertTrue(line.startswith("listening "), "kwd-controller did not start: " + line)
        self.proxy_admin = free_port()
        self.cache = os.path.join(self.dir, "cache", "snapshot.json")
        proxy = self.start(
            [PROXY, "serve", "--controller", f"127.0.0.1:{grpc}", "--listen", "127.0.0.1:0",
             "--tls-listen", "127.0.0.1:0", "--tls-cert-dir", self.certs,
             "--snapshot-cache", self.cache,
             "--admin-listen", f"127.0.0.1:{self.proxy_admin}", "--workers", "1",
             "--access-log", "off", "--log-level", "debug"], "proxy")
        ports = {}
        for _ in range(10):
            line = proxy.stdout.readline()
            if not line:
                break
            m = re.match(r"(listening|listening-tls) .*:(\d+)$", line.strip())
            if m:
                ports[m.group(1)] = int(m.group(2))
            if len(ports) == 2:
                break
        self.assertEqual(len(ports), 2, "kwd-proxy did not start: " + self.log_of("proxy"))
        self.tls_port = ports["listening-tls"]

    def served_certificate(self, server_name):
        """The PEM certificate the proxy presents for `server_name`."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", self.tls_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=server_name or None) as tls:
                return ssl.DER_cert_to_PEM_cert(tls.getpeercert(binary_form=True))

    def serves(self, server_name, cert_pem):
        want = ssl.PEM_cert_to_DER_cert(cert_pem)
        return ssl.PEM_cert_to_DER_cert(self.served_certificate(server_name)) == want

    def https_get(self, server_name, cert_pem):
        ctx = ssl.create_default_context(cadata=cert_pem)
        with socket.create_connection(("127.0.0.1", self.tls_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=server_name) as tls:
                tls.sendall(f"GET / HTTP/1.1\r\nHost: {server_name}\r\n"
                            "Connection: close\r\n\r\n".encode())
                data = b""
                while True:
                    chunk = tls.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        return data.decode("latin-1")

    def objects_status(self):
        status, body = http_get(self.controller_admin, "/debug/objects")
        if status != 200:
            return None
        for obj in json.loads(body)["objects"]:
            if obj["kind"] == "UrlMapping" and obj["name"] == "erp":
                return {c["type"]: c for c in obj["conditions"]}
        return None

    def test_sni_rotation_deletion_and_no_key_in_any_output(self):
        self.start_both()
        # The Secret's certificate for a.example, verified by a real client.
        wait_for(lambda: self.serves("a.example", self.first[0]), timeout=15,
                 what="the Secret's certificate on SNI a.example")
        response = self.https_get("a.example", self.first[0])
        self.assertTrue(response.startswith("HTTP/1.1 200"), response)
        self.assertIn("hello from the backend", response)
        # Only the listed hosts: b.example and no SNI get the file's certificate.
        self.assertTrue(self.serves("b.example", self.default_cert))
        self.assertTrue(self.serves("", self.default_cert))
        self.assertEqual(self.objects_status()["ResolvedRefs"]["status"], "True")

        # Rotation: the Secret changes, the proxy serves the new one within
        # seconds, without a restart.
        started = time.monotonic()
        self.write("secret.yaml", secret_yaml(*self.second))
        wait_for(lambda: self.serves("a.example", self.second[0]), timeout=10,
                 what="the rotated certificate")
        self.assertLess(time.monotonic() - started, 5.0)
        self.assertIsNone(self.processes[1][0].poll())

        # No private key anywhere it could be read, but the cache file.
        secrets = [key_body(self.first[1]), key_body(self.second[1])]
        outputs = {
            "/debug/snapshot": http_get(self.controller_admin, "/debug/snapshot")[1],
            "/debug/objects": http_get(self.controller_admin, "/debug/objects")[1],
            "controller /admin/api/state": http_get(self.controller_admin, "/admin/api/state")[1],
            "proxy /admin/api/state": http_get(self.proxy_admin, "/admin/api/state")[1],
            "proxy /metrics": http_get(self.proxy_admin, "/metrics")[1],
        }
        self.assertIn("erp/erp-tls", outputs["/debug/snapshot"])
        self.assertIn("(private key not shown)", outputs["/debug/snapshot"])
        compiled = subprocess.run([CONTROLLER, "compile", "--source=dir:" + self.objects],
                                  capture_output=True, text=True, timeout=60)
        self.assertEqual(compiled.returncode, 0, compiled.stderr)
        self.assertIn("erp/erp-tls", compiled.stdout)
        outputs["compile stdout"] = compiled.stdout
        outputs["compile stderr"] = compiled.stderr
        outputs["controller log"] = self.log_of("controller")
        outputs["proxy log"] = self.log_of("proxy")
        for where, text in outputs.items():
            for body in secrets:
                self.assertNotIn(body, text, "a private key in " + where)
            self.assertNotIn("PRIVATE KEY", text, "a private key in " + where)
        wait_for(lambda: os.path.exists(self.cache) and
                 key_body(self.second[1]) in open(self.cache).read(),
                 what="the cache file with the current key")
        self.assertEqual(stat.S_IMODE(os.stat(self.cache).st_mode), 0o600)

        # The Secret deleted: the condition says so, and the file's
        # certificate serves a.example again.
        os.remove(os.path.join(self.objects, "secret.yaml"))
        wait_for(lambda: (self.objects_status() or {}).get("ResolvedRefs", {}).get("reason")
                 == "SecretNotFound", what="ResolvedRefs=False SecretNotFound")
        self.assertIn("Secret erp/erp-tls not found",
                      self.objects_status()["ResolvedRefs"]["message"])
        wait_for(lambda: self.serves("a.example", self.default_cert), timeout=10,
                 what="the file certificate again")
        self.assertIn("certificate from the snapshot removed", self.log_of("proxy"))


if __name__ == "__main__":
    unittest.main()
