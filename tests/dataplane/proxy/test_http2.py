"""HTTP/2 to clients (issue 15), black-box: a real kwd-proxy with a snapshot
the real kwd-controller compiled, in front of HTTP/1.1 backends on loopback
(Python threads), spoken to with Debian's python3-h2 over TLS (ALPN h2) and
cleartext (--h2c prior knowledge), and with curl --http2.

- ALPN: h2 and http/1.1 on the same --tls-listen;
- h2c prior knowledge with --h2c; without it the preface gets HTTP/1.1's 400;
- every stream is routed like an HTTP/1.1 request: URL rules, the permission
  table's 403 page, stickiness by sap-contextid in a split cookie field
  (joined into one Cookie header upstream), :authority as Host, X-Forwarded-*;
- balancing over 300 streams on one connection follows capacity 2:1;
- 8 MiB up and 8 MiB down with flow control, byte-exact (content-length and
  chunked, the latter de-chunked into DATA);
- chunked trailers both ways: the server's become a trailing HEADERS frame,
  the client's go into the last chunk; forbidden fields are left out;
- connection-specific request fields are a stream PROTOCOL_ERROR;
- more header list than --max-header-size gets 431;
- GOAWAY on SIGTERM: streams in flight complete, none fails;
- the access log says HTTP/2.0; the metrics exist.

Needs KWD_PROXY and KWD_CONTROLLER (the built binaries), set by ctest.
Debian's python3 with python3-h2; curl for the curl case.
"""

import hashlib
import http.server
import json
import os
import sys
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")
MIB = 1024 * 1024


def pattern(n):
    """n deterministic bytes."""
    block = bytes(range(256)) * 64
    return (block * (n // len(block) + 1))[:n]


class Backend:
    """An HTTP/1.1 keep-alive server on loopback. Answers JSON describing the
    request (backend name, path, the fields that matter, body length and
    sha256), or /download/N?chunked: N pattern bytes, or /slow/MS: after MS
    milliseconds."""

    def __init__(self, name):
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self):
                self.trailers = []
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            while True:
                                line = self.rfile.readline()
                                if line in (b"\r\n", b"\n", b""):
                                    break
                                self.trailers.append(line.decode().strip())
                            return data, True
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length", "0"))), False

            def _answer(self):
                body, chunked = self._body()
                with backend.lock:
                    backend.requests += 1
                path = self.path
                if path.startswith("/download/"):
                    n = int(path.split("/")[2].split("?")[0])
                    data = pattern(n)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    if path.endswith("?chunked"):
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        for i in range(0, n, 100_000):
                            part = data[i:i + 100_000]
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.write(b"0\r\n\r\n")
                    else:
                        self.send_header("Content-Length", str(n))
                        self.end_headers()
                        self.wfile.write(data)
                    return
                if path.startswith("/trailers"):
                    # Chunked with trailers: two passable, the rest forbidden.
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Trailer", "X-Checksum, Grpc-Status")
                    self.end_headers()
                    self.wfile.write(b"5\r\nhello\r\n0\r\nX-Checksum: abc\r\n"
                                     b"Content-Length: 99\r\nSet-Cookie: a=b\r\n"
                                     b"Connection: close\r\nHost: evil\r\n"
                                     b"Authorization: Basic eA==\r\nGrpc-Status: 0\r\n\r\n")
                    return
                if path.startswith("/te-trailers"):
                    # Trailers only for a client that said it takes them
                    # (as gRPC servers do).
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    trailers = b"Grpc-Status: 0\r\n" if "trailers" in self.headers.get(
                        "TE", "") else b""
                    self.wfile.write(b"2\r\nok\r\n0\r\n" + trailers + b"\r\n")
                    return
                if path.startswith("/slow/"):
                    time.sleep(int(path.split("/")[2]) / 1000)
                answer = json.dumps({
                    "backend": backend.name,
                    "method": self.command,
                    "path": path,
                    "host": self.headers.get("Host"),
                    "cookie": self.headers.get_all("Cookie"),
                    "xff": self.headers.get("X-Forwarded-For"),
                    "proto": self.headers.get("X-Forwarded-Proto"),
                    "request_id": self.headers.get("X-Request-Id"),
                    "cipher": self.headers.get("SSL_CIPHER_SUITE"),
                    "te": self.headers.get_all("TE"),
                    "connection": self.headers.get_all("Connection"),
                    "key_size": self.headers.get("SSL_CIPHER_USEKEYSIZE"),
                    "chunked": chunked,
                    "trailers": self.trailers,
                    "length": len(body),
                    "sha256": hashlib.sha256(body).hexdigest(),
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.send_header("Connection", "keep-alive")
                self.send_header("Keep-Alive", "timeout=30")
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_PUT = _answer

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            request_queue_size = 256

            def handle_error(self, request, client_address):
                pass  # the proxy closed a cancelled stream's connection

        self.name = name
        self.lock = threading.Lock()
        self.requests = 0
        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class CannedBackend:
    """A keep-alive HTTP/1.1 server on loopback answering /canned/NAME with
    the raw response CANNED[NAME]: heads an HTTP/1.1 recipient accepts but
    that are no valid HTTP/2 fields as they stand."""

    CANNED = {
        "duplicate-length": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
        "length-list": b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
        "no-content-with-length": b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
        "three-interim": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n"
                         b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
                         b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        # Hop-by-hop: the fixed list, and X-Hop because Connection names it.
        "hop-by-hop": b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
                      b"Keep-Alive: timeout=5\r\nX-Kept: 2\r\nX-Hop-Not: 3\r\n"
                      b"Content-Length: 2\r\n\r\nok",
        # The bound's edges: 16 interim responses pass, a 17th does not; nor
        # do interim heads that together exceed --max-header-size (8192 here)
        # though each is within it.
        "sixteen-interim": b"HTTP/1.1 103 Early Hints\r\n\r\n" * 16 +
                           b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        "seventeen-interim": b"HTTP/1.1 103 Early Hints\r\n\r\n" * 17 +
                             b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        "large-interim": (b"HTTP/1.1 103 Early Hints\r\nLink: " + b"a" * 3000 +
                          b"\r\n\r\n") * 3 + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        # Framing fields on a 1xx (which has none): not passed on.
        "framed-interim": b"HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\n"
                          b"HTTP/1.1 103 Early Hints\r\nTransfer-Encoding: chunked\r\n"
                          b"Link: </s.css>\r\n\r\n"
                          b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        # 101 to a request that asked for no upgrade (every HTTP/2 stream).
        "switching": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\n\r\nxx",
    }
    # /canned/endless-interim: 103 Early Hints without end (2,000 of them,
    # then a 200, so that a proxy without a bound fails the test rather than
    # hanging it).
    ENDLESS_INTERIM = 2000

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.lock = threading.Lock()
        self.served = 0  # /canned/varying answers
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            conn.settimeout(30)
            reader = conn.makefile("rb")
            try:
                while True:
                    line = reader.readline()
                    if not line:
                        return
                    while reader.readline() not in (b"\r\n", b"\n", b""):
                        pass  # requests here have no body
                    name = line.split(b" ")[1].decode().rsplit("/", 1)[1]
                    if name == "split-interim":
                        # Interim heads and the final one a few bytes a send.
                        data = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n"
                                b"Link: </s.css>\r\n\r\n"
                                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        for i in range(0, len(data), 7):
                            conn.sendall(data[i:i + 7])
                            time.sleep(0.001)
                        continue
                    if name == "varying":
                        # Fields a server repeats on every response, and
                        # fields whose values change with each one.
                        with self.lock:
                            self.served += 1
                            n = self.served
                        conn.sendall(b"HTTP/1.1 200 OK\r\nServer: canned/1.0\r\n"
                                     b"Content-Type: text/plain; charset=utf-8\r\n"
                                     b"Cache-Control: no-store\r\n"
                                     b"Date: Thu, 03 Dec 2026 18:%02d:%02d GMT\r\n"
                                     % (n // 60 % 60, n % 60) +
                                     b"ETag: \"%d\"\r\nX-Unique: %d\r\nX-Same: same\r\n"
                                     % (n, n) + b"Content-Length: 2\r\n\r\nok")
                        continue
                    if name == "endless-interim":
                        hint = b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
                        for _ in range(self.ENDLESS_INTERIM // 100):
                            conn.sendall(hint * 100)
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        continue
                    # Anything else (the health check): 200.
                    conn.sendall(self.CANNED.get(name, b"HTTP/1.1 200 OK\r\n"
                                                       b"Content-Length: 0\r\n\r\n"))
            except OSError:
                return

    def close(self):
        self.server.close()


def run(command, cwd):
    result = subprocess.run(command, cwd=cwd, shell=True, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, command + "\n" + result.stdout + result.stderr


class Proxy:
    """kwd-proxy serve with the snapshot, HTTP (--listen) and HTTPS."""

    def __init__(self, directory, snapshot, extra, name):
        self.admin_port = free_port()
        self.access_log = os.path.join(directory, name + "-access.log")
        self.log = open(os.path.join(directory, name + ".log"), "w")
        self.process = subprocess.Popen(
            [PROXY, "serve", "--snapshot", snapshot, "--listen", "127.0.0.1:0",
             "--tls-listen", "127.0.0.1:0", "--tls-cert-dir", os.path.join(directory, "certs"),
             "--admin-listen", f"127.0.0.1:{self.admin_port}", "--access-log", self.access_log,
             "--workers", "1"] + extra,
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.port = self.tls_port = None
        for _ in range(100):
            line = self.process.stdout.readline()
            if line.startswith("listening-tls "):
                self.tls_port = int(line.rsplit(":", 1)[1])
                break
            if line.startswith("listening "):
                self.port = int(line.rsplit(":", 1)[1])
            if not line:
                break
        assert self.port and self.tls_port, "kwd-proxy did not start"

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics",
                                    timeout=5) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for line in self.metrics().splitlines():
            if line.startswith(name + ("{" + want + "}" if want else " ")):
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.log.close()


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


class H2Client:
    """A blocking HTTP/2 client over one connection (h2 state machine)."""

    def __init__(self, port, tls=True, window=None):
        sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        if tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.set_alpn_protocols(["h2", "http/1.1"])
            sock = context.wrap_socket(sock, server_hostname="erp.example.test")
            assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
        self.sock = sock
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if window:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
            self.conn.increment_flow_control_window(window)
        self.flush()
        self.responses = {}  # stream id -> dict(headers, data, ended, reset)
        self.goaway = None
        self.settings = {}
        self.pending = {}  # stream id -> bytes still to send
        self.trailers = {}  # stream id -> trailer fields sent after the body

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, method="GET", headers=(), body=None, authority="erp.example.test",
                end=True, trailers=None):
        sid = self.conn.get_next_available_stream_id()
        fields = [(":method", method), (":path", path), (":scheme", "https"),
                  (":authority", authority)] + list(headers)
        self.conn.send_headers(sid, fields, end_stream=body is None and end)
        self.responses[sid] = {"headers": None, "data": bytearray(), "ended": False,
                               "reset": None}
        if trailers is not None:
            self.trailers[sid] = trailers
        if body is not None:
            self.pending[sid] = body
            self._send_pending()
        self.flush()
        return sid

    def _send_pending(self):
        for sid, body in list(self.pending.items()):
            while body:
                window = min(self.conn.local_flow_control_window(sid),
                             self.conn.max_outbound_frame_size)
                if window <= 0:
                    break
                chunk, body = body[:window], body[window:]
                self.conn.send_data(sid, chunk)
            if body:
                self.pending[sid] = body
            else:
                del self.pending[sid]
                if sid in self.trailers:
                    self.conn.send_headers(sid, self.trailers.pop(sid), end_stream=True)
                else:
                    self.conn.end_stream(sid)

    def pump(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the proxy")
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.InformationalResponseReceived):
                self.responses[event.stream_id].setdefault("interim", []).append(
                    dict(event.headers)[":status"])
                self.responses[event.stream_id].setdefault("interim_headers", []).append(
                    list(event.headers))
            elif isinstance(event, h2.events.ResponseReceived):
                self.responses[event.stream_id]["headers"] = dict(event.headers)
            elif isinstance(event, h2.events.TrailersReceived):
                self.responses[event.stream_id]["trailers"] = list(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                self.responses[event.stream_id]["data"] += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                    event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.responses[event.stream_id]["ended"] = True
            elif isinstance(event, h2.events.StreamReset):
                if event.stream_id in self.responses:
                    self.responses[event.stream_id]["reset"] = event.error_code
                    self.pending.pop(event.stream_id, None)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = event
                # python-h2 closes its side on any GOAWAY, but streams up to
                # last_stream_id go on (RFC 9113 6.8): keep reading them.
                if event.error_code == 0:
                    self.conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                for code, change in event.changed_settings.items():
                    self.settings[code] = change.new_value
        self._send_pending()
        self.flush()

    def wait(self, sids, timeout=30):
        deadline = time.monotonic() + timeout
        while any(not (self.responses[s]["ended"] or self.responses[s]["reset"] is not None)
                  for s in sids):
            if time.monotonic() > deadline:
                raise TimeoutError("streams did not end")
            self.pump()
        return [self.responses[s] for s in sids]

    def get(self, path, **kw):
        return self.wait([self.request(path, **kw)])[0]

    def close(self):
        try:
            self.conn.close_connection()
            self.flush()
        except Exception:
            pass
        self.sock.close()


def body_json(response):
    return json.loads(bytes(response["data"]))


class Http2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PROXY or not CONTROLLER:
            raise unittest.SkipTest("set KWD_PROXY and KWD_CONTROLLER to the built binaries")
        cls.dir = tempfile.mkdtemp(prefix="kwd-http2-")
        certs = os.path.join(cls.dir, "certs")
        os.makedirs(certs)
        run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            "-keyout certs/erp.key -out certs/erp.crt -days 2 -subj /CN=erp.example.test "
            "-addext subjectAltName=DNS:erp.example.test", cls.dir)
        cls.big1 = Backend("big1")
        cls.small1 = Backend("small1")
        cls.other = Backend("other1")
        cls.canned = CannedBackend()
        objects = f"""apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: public}}
spec:
  kind: abap
  strategy: weighted_round_robin
  backend:
    staticServers:
      - {{name: big1, address: 127.0.0.1, port: {cls.big1.port}, capacity: 2}}
      - {{name: small1, address: 127.0.0.1, port: {cls.small1.port}, capacity: 1}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: other}}
spec:
  kind: abap
  backend:
    staticServers: [{{name: other1, address: 127.0.0.1, port: {cls.other.port}}}]
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: canned}}
spec:
  kind: abap
  backend:
    staticServers: [{{name: canned1, address: 127.0.0.1, port: {cls.canned.port}}}]
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: map}}
spec:
  defaultGroups: {{abap: public, java: public}}
  rules:
    - {{prefix: /other/, kind: abap, logonGroup: other}}
    - {{prefix: /canned/, kind: abap, logonGroup: canned}}
  permissions:
    - {{action: deny, pattern: /forbidden/*}}
"""
        os.makedirs(os.path.join(cls.dir, "objects"))
        with open(os.path.join(cls.dir, "objects", "objects.yaml"), "w") as f:
            f.write(objects)
        compiled = subprocess.run(
            [CONTROLLER, "compile", "--source=dir:" + os.path.join(cls.dir, "objects")],
            capture_output=True, text=True, timeout=60)
        assert compiled.returncode == 0, compiled.stdout + compiled.stderr
        cls.snapshot = os.path.join(cls.dir, "snapshot.json")
        with open(cls.snapshot, "w") as f:
            f.write(compiled.stdout)
        cls.proxy = Proxy(cls.dir, cls.snapshot, ["--h2c", "--max-header-size", "8192"], "main")

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        for b in (cls.big1, cls.small1, cls.other, cls.canned):
            b.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def client(self, **kw):
        c = H2Client(self.proxy.tls_port, **kw)
        self.addCleanup(c.close)
        return c

    # ---- negotiation ----

    def test_alpn_offers_h2_and_http11_on_the_same_listener(self):
        for offer, want in ((["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1"),
                            (["http/1.1", "h2"], "h2")):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.set_alpn_protocols(offer)
            with socket.create_connection(("127.0.0.1", self.proxy.tls_port), timeout=10) as s:
                with context.wrap_socket(s, server_hostname="erp.example.test") as t:
                    self.assertEqual(t.selected_alpn_protocol(), want)
                    if want == "http/1.1":
                        t.sendall(b"GET /x HTTP/1.1\r\nHost: erp.example.test\r\n"
                                  b"Connection: close\r\n\r\n")
                        answer = b""
                        while True:
                            data = t.recv(65536)
                            if not data:
                                break
                            answer += data
                        self.assertTrue(answer.startswith(b"HTTP/1.1 200"), answer[:100])
        c = self.client()
        r = c.get("/sap/bc/ping")
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(body_json(r)["proto"], "https")
        self.assertTrue(body_json(r)["cipher"])
        self.assertIn(body_json(r)["key_size"], ("128", "256"))

    def test_h2c_prior_knowledge_with_flag(self):
        c = H2Client(self.proxy.port, tls=False)
        self.addCleanup(c.close)
        r = c.get("/sap/bc/ping")
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(body_json(r)["proto"], "http")
        # HTTP/1.1 on the same listener still works.
        with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=10) as s:
            s.sendall(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 200"))

    def test_h2c_refused_without_flag(self):
        proxy = Proxy(self.dir, self.snapshot, [], "noh2c")
        self.addCleanup(proxy.stop)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            answer = b""
            while True:
                data = s.recv(65536)
                if not data:
                    break
                answer += data
        self.assertRegex(answer[:20], rb"^HTTP/1\.1 (400|505)")

    def test_curl_http2(self):
        if not shutil.which("curl"):
            self.skipTest("no curl")
        out = subprocess.run(
            ["curl", "-sk", "--http2", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
             "--resolve", f"erp.example.test:{self.proxy.tls_port}:127.0.0.1",
             f"https://erp.example.test:{self.proxy.tls_port}/sap/bc/ping"],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(out.stdout, "2 200", out.stderr)
        out = subprocess.run(
            ["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null", "-w",
             "%{http_version} %{http_code}", f"http://127.0.0.1:{self.proxy.port}/x"],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(out.stdout, "2 200", out.stderr)

    # ---- routing per stream ----

    def test_routing_permissions_and_forwarded_fields(self):
        c = self.client()
        sids = [c.request("/other/a"), c.request("/forbidden/x"), c.request("/sap/b?x=1")]
        other, forbidden, public = c.wait(sids)
        self.assertEqual(body_json(other)["backend"], "other1")
        self.assertEqual(body_json(other)["host"], "erp.example.test")
        self.assertEqual(body_json(other)["xff"], "127.0.0.1")
        self.assertTrue(body_json(other)["request_id"])
        self.assertEqual(forbidden["headers"][":status"], "403")
        self.assertIn(body_json(public)["backend"], ("big1", "small1"))
        self.assertEqual(body_json(public)["path"], "/sap/b?x=1")

    def test_stickiness_by_context_id_in_a_split_cookie_field(self):
        c = self.client()
        # The context id names small1, which balancing alone would pick for
        # a third of the streams: every stream goes there.
        cookie_value = "SID:ANON:small1:abc"
        sids = [c.request("/sap/bc/gui/x", headers=[("cookie", "a=1"),
                                                    ("cookie", "sap-contextid=" + cookie_value),
                                                    ("cookie", "b=2")]) for _ in range(12)]
        for r in c.wait(sids):
            answer = body_json(r)
            self.assertEqual(answer["backend"], "small1")
            # One Cookie header upstream, the fields joined with "; ".
            self.assertEqual(answer["cookie"], ["a=1; sap-contextid=" + cookie_value + "; b=2"])
        self.assertGreaterEqual(self.proxy.metric("kwd_proxy_sticky_routed_total",
                                                  identifier="sap-contextid") or 0, 12)

    def test_later_streams_on_a_connection_carry_nothing_of_earlier_ones(self):
        # A connection reuses its ended streams' memory: a stream's cookie,
        # fields and path must not leak into the next one.
        c = self.client()
        for i in range(6):
            if i % 2 == 0:
                r = c.get(f"/sap/bc/gui/with/{i}",
                          headers=[("cookie", f"a={i}"), ("cookie", f"b={i}")])
                self.assertEqual(body_json(r)["cookie"], [f"a={i}; b={i}"])
            else:
                r = c.get(f"/sap/bc/gui/without/{i}")
                self.assertIsNone(body_json(r)["cookie"])
            self.assertEqual(r["headers"][":status"], "200")
            kind = "with" if i % 2 == 0 else "without"
            self.assertEqual(body_json(r)["path"], f"/sap/bc/gui/{kind}/{i}")
        c.close()

    def test_balancing_ratio_over_many_streams_on_one_connection(self):
        c = self.client()
        counts = {"big1": 0, "small1": 0}
        sids = []
        for i in range(300):
            sids.append(c.request(f"/sap/balance/{i}"))
            if len(sids) == 50:
                for r in c.wait(sids):
                    counts[body_json(r)["backend"]] += 1
                sids = []
        self.assertEqual(sum(counts.values()), 300)
        ratio = counts["big1"] / max(counts["small1"], 1)
        self.assertGreater(ratio, 1.6, counts)
        self.assertLess(ratio, 2.5, counts)

    # ---- bodies and flow control ----

    def test_large_upload_with_flow_control(self):
        c = self.client()
        data = pattern(8 * MIB + 7)
        for headers in ([("content-length", str(len(data)))], []):
            r = c.wait([c.request("/sap/upload", method="POST", headers=headers, body=data)],
                       timeout=60)[0]
            self.assertEqual(r["headers"][":status"], "200")
            answer = body_json(r)
            self.assertEqual(answer["length"], len(data))
            self.assertEqual(answer["sha256"], hashlib.sha256(data).hexdigest())
            self.assertEqual(answer["chunked"], not headers)

    def test_body_without_length_over_max_body_size_gets_413(self):
        # A stream without content-length is sent upstream chunked: the
        # --max-body-size limit applies as to an HTTP/1.1 chunked body.
        proxy = Proxy(self.dir, self.snapshot, ["--h2c", "--max-body-size", "100000"], "smallbody")
        self.addCleanup(proxy.stop)
        c = H2Client(proxy.port, tls=False)
        self.addCleanup(c.close)
        small = c.request("/sap/upload", method="POST", body=pattern(50_000))
        big = c.request("/sap/upload", method="POST", body=pattern(300_000))
        small, big = c.wait([small, big])
        self.assertEqual(small["headers"][":status"], "200")
        self.assertEqual(body_json(small)["length"], 50_000)
        self.assertEqual(big["headers"][":status"], "413")
        self.assertEqual(big["headers"].get("x-kwd-error"), "EPROTERROR")

    def test_large_download_with_flow_control(self):
        c = self.client()
        n = 8 * MIB + 13
        want = hashlib.sha256(pattern(n)).hexdigest()
        for suffix in ("", "?chunked"):
            r = c.wait([c.request(f"/download/{n}{suffix}")], timeout=60)[0]
            self.assertEqual(r["headers"][":status"], "200")
            self.assertNotIn("transfer-encoding", r["headers"])
            self.assertEqual(len(r["data"]), n)
            self.assertEqual(hashlib.sha256(r["data"]).hexdigest(), want)

    def test_response_trailers_end_the_stream_without_forbidden_fields(self):
        c = self.client()
        for _ in range(2):  # the second on a reused upstream connection
            r = c.get("/trailers")
            self.assertEqual(r["headers"][":status"], "200")
            self.assertNotIn("trailer", r["headers"])
            self.assertEqual(bytes(r["data"]), b"hello")
            self.assertTrue(r["ended"])
            self.assertEqual(r.get("trailers"), [("x-checksum", "abc"), ("grpc-status", "0")])
        # Without trailers the DATA frame ends the stream as before.
        r = c.get("/download/10?chunked")
        self.assertEqual(bytes(r["data"]), pattern(10))
        self.assertNotIn("trailers", r)

    def test_http11_client_gets_trailers_only_with_te_trailers(self):
        def fetch(te):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.set_alpn_protocols(["http/1.1"])
            with socket.create_connection(("127.0.0.1", self.proxy.tls_port), timeout=10) as s:
                with context.wrap_socket(s, server_hostname="erp.example.test") as t:
                    t.sendall(b"GET /trailers HTTP/1.1\r\nHost: erp.example.test\r\n" + te +
                              b"Connection: close\r\n\r\n")
                    answer = b""
                    while True:
                        data = t.recv(65536)
                        if not data:
                            return answer
                        answer += data
        answer = fetch(b"TE: trailers\r\n")
        self.assertTrue(answer.startswith(b"HTTP/1.1 200"), answer[:100])
        self.assertTrue(answer.endswith(b"\r\n0\r\nX-Checksum: abc\r\nGrpc-Status: 0\r\n\r\n"),
                        answer[-200:])
        answer = fetch(b"")
        self.assertTrue(answer.endswith(b"5\r\nhello\r\n0\r\n\r\n"), answer[-200:])

    def test_request_trailers_go_into_the_last_chunk(self):
        c = self.client()
        trailers = [("x-sum", "42"), ("authorization", "Basic eA==")]
        r = c.wait([c.request("/sap/upload", method="POST", body=b"abc", trailers=trailers)])[0]
        answer = body_json(r)
        self.assertTrue(answer["chunked"])
        self.assertEqual(answer["length"], 3)
        self.assertEqual(answer["trailers"], ["x-sum: 42"])
        # Forwarded with a Content-Length: nowhere to put them, dropped.
        r = c.wait([c.request("/sap/upload", method="POST", body=b"abc", trailers=trailers,
                              headers=[("content-length", "3")])])[0]
        answer = body_json(r)
        self.assertFalse(answer["chunked"])
        self.assertEqual(answer["length"], 3)
        self.assertEqual(answer["trailers"], [])

    def test_te_trailers_is_forwarded(self):
        # gRPC-style clients send `te: trailers`, the only TE value HTTP/2
        # allows; some servers send trailers only then. TE is hop-by-hop:
        # named in Connection towards the HTTP/1.1 server.
        c = self.client()
        r = c.get("/sap/te", headers=[("te", "trailers")])
        self.assertEqual(body_json(r)["te"], ["trailers"])
        self.assertEqual(body_json(r)["connection"], ["TE"])
        r = c.get("/sap/te")
        self.assertIsNone(body_json(r)["te"])
        self.assertIsNone(body_json(r)["connection"])
        # So a server that sends trailers only on request does so.
        r = c.get("/te-trailers", headers=[("te", "trailers")])
        self.assertEqual(bytes(r["data"]), b"ok")
        self.assertEqual(r.get("trailers"), [("grpc-status", "0")])
        r = c.get("/te-trailers")
        self.assertEqual(bytes(r["data"]), b"ok")
        self.assertNotIn("trailers", r)
        # An HTTP/1.1 client's TE goes the same way (one request core): only
        # the trailers token, named in Connection.
        answer = self.http11_get("/sap/te", b"TE: trailers, deflate\r\n")
        seen = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        self.assertEqual(seen["te"], ["trailers"])
        self.assertEqual(seen["connection"], ["TE"])
        answer = self.http11_get("/te-trailers", b"TE: trailers\r\n")
        self.assertIn(b"Grpc-Status: 0", answer.replace(b"grpc-status", b"Grpc-Status"))

    def test_parallel_downloads_on_one_connection(self):
        c = self.client()
        n = MIB
        sids = [c.request(f"/download/{n}" + ("?chunked" if i % 2 else "")) for i in range(8)]
        for r in c.wait(sids, timeout=60):
            self.assertEqual(bytes(r["data"]), pattern(n))

    def test_100_continue_is_passed_on(self):
        c = self.client()
        sid = c.request("/sap/expect", method="POST", end=False,
                        headers=[("expect", "100-continue"), ("content-length", "5")])
        deadline = time.monotonic() + 10
        while "interim" not in c.responses[sid]:
            self.assertLess(time.monotonic(), deadline, "no 100 Continue")
            c.pump()
        self.assertEqual(c.responses[sid]["interim"], ["100"])
        c.conn.send_data(sid, b"hello", end_stream=True)
        c.flush()
        r = c.wait([sid])[0]
        self.assertEqual(body_json(r)["length"], 5)

    def test_interim_responses_are_passed_on_within_a_bound(self):
        # HTTP/2: each 1xx is a HEADERS frame; HTTP/1.1: the head itself.
        c = self.client()
        r = c.get("/canned/three-interim")
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(r["interim"], ["100", "102", "103"])
        self.assertEqual(bytes(r["data"]), b"ok")
        answer = self.http11_get("/canned/three-interim")
        self.assertEqual(answer.count(b"HTTP/1.1 1"), 3, answer[:300])
        self.assertIn(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
                      b"HTTP/1.1 200 OK\r\n", answer)
        self.assertTrue(answer.endswith(b"\r\n\r\nok"), answer[-200:])

    def test_interim_responses_carry_their_header_fields(self):
        # A 103 Early Hints is sent for its Link fields: they reach the
        # HTTP/2 client with the :status, as on HTTP/1.1; framing fields on
        # a 1xx do not.
        c = self.client()
        r = c.get("/canned/three-interim")
        self.assertEqual(r["headers"][":status"], "200")
        heads = r["interim_headers"]
        self.assertEqual(heads[0], [(":status", "100")])
        self.assertEqual(heads[1], [(":status", "102")])
        self.assertEqual(heads[2], [(":status", "103"), ("link", "</s.css>; rel=preload")])
        r = c.get("/canned/framed-interim")
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(r["interim_headers"],
                         [[(":status", "100")], [(":status", "103"), ("link", "</s.css>")]])
        self.assertEqual(bytes(r["data"]), b"ok")

    def test_endless_interim_responses_end_in_502_for_both_protocols(self):
        # A server that sends 1xx without end: at most 16 are passed on, then
        # the client gets the usual 502 page and the server's connection is
        # dropped.
        before = self.proxy.metric("kwd_proxy_local_responses_total", error="EPROTERROR",
                                   status="502") or 0
        c = self.client()
        r = c.get("/canned/endless-interim")
        self.assertEqual(r["headers"][":status"], "502")
        self.assertEqual(r["headers"].get("x-kwd-error"), "EPROTERROR")
        self.assertIn(b"interim", bytes(r["data"]))
        self.assertLessEqual(len(r.get("interim", [])), 16)
        self.assertGreater(len(r.get("interim", [])), 0)
        answer = self.http11_get("/canned/endless-interim")
        self.assertLessEqual(answer.count(b"HTTP/1.1 103 "), 16, answer[-300:])
        self.assertIn(b"HTTP/1.1 502 ", answer)
        self.assertIn(b"X-Kwd-Error: EPROTERROR", answer)
        self.assertEqual(self.proxy.metric("kwd_proxy_local_responses_total", error="EPROTERROR",
                                           status="502"), before + 2)

    def test_interim_bound_edges_for_both_protocols(self):
        # Exactly 16 interim responses pass; the 17th, or interim heads over
        # --max-header-size together, end in 502. Heads split across reads
        # are counted once each; 101 is no interim response.
        c = self.client()
        r = c.get("/canned/sixteen-interim")
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(len(r["interim"]), 16)
        self.assertEqual(bytes(r["data"]), b"ok")
        answer = self.http11_get("/canned/sixteen-interim")
        self.assertEqual(answer.count(b"HTTP/1.1 103 "), 16, answer[-300:])
        self.assertTrue(answer.endswith(b"\r\n\r\nok"), answer[-200:])
        for name, passed in (("seventeen-interim", 16), ("large-interim", 2)):
            r = c.get("/canned/" + name)
            self.assertEqual(r["headers"][":status"], "502", name)
            self.assertEqual(r["headers"].get("x-kwd-error"), "EPROTERROR", name)
            self.assertEqual(len(r.get("interim", [])), passed, name)
            answer = self.http11_get("/canned/" + name)
            self.assertEqual(answer.count(b"HTTP/1.1 103 "), passed, name)
            self.assertIn(b"HTTP/1.1 502 ", answer, name)
        r = c.get("/canned/split-interim")
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(r["interim"], ["100", "103"])
        self.assertEqual(bytes(r["data"]), b"ok")
        answer = self.http11_get("/canned/split-interim")
        self.assertIn(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n"
                      b"Link: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\n", answer)
        self.assertTrue(answer.endswith(b"\r\n\r\nok"), answer[-200:])
        answer = self.http11_get("/canned/framed-interim")
        self.assertTrue(answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"
                                          b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
                                          b"HTTP/1.1 200 OK\r\n"), answer[:300])
        r = c.get("/canned/switching")
        self.assertEqual(r["headers"][":status"], "502")
        self.assertNotIn("interim", r)

    def http11_get(self, path, extra=b""):
        with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=10) as s:
            s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: erp.example.test\r\n"
                      + extra + b"Connection: close\r\n\r\n")
            answer = b""
            while True:
                data = s.recv(65536)
                if not data:
                    return answer
                answer += data

    # ---- malformed requests ----

    def test_connection_specific_field_is_a_stream_protocol_error(self):
        c = self.client()
        c.conn.config.validate_outbound_headers = False
        c.conn.config.normalize_outbound_headers = False
        sid = c.request("/sap/x", headers=[("connection", "keep-alive")])
        ok = c.request("/sap/y")
        bad, good = c.wait([sid, ok])
        self.assertEqual(bad["reset"], 1)  # PROTOCOL_ERROR
        self.assertEqual(good["headers"][":status"], "200")

    def test_path_over_8_kib_gets_414_as_over_http11(self):
        # Over HTTP/1.1 a target beyond 8 KiB is 414; a :path is bounded by
        # --max-header-size only (64 KiB by default).
        proxy = Proxy(self.dir, self.snapshot, ["--h2c"], "longpath")
        self.addCleanup(proxy.stop)
        c = H2Client(proxy.port, tls=False)
        self.addCleanup(c.close)
        ok = c.request("/sap/" + "a" * 8000)
        long = c.request("/sap/" + "a" * 20_000)
        ok, long = c.wait([ok, long])
        self.assertEqual(ok["headers"][":status"], "200")
        self.assertEqual(long["headers"][":status"], "414")

    def test_header_list_over_the_limit_gets_431(self):
        c = self.client()
        r = c.get("/sap/x", headers=[("x-big", "a" * 4000), ("x-big2", "b" * 4000),
                                     ("x-big3", "c" * 4000)])
        self.assertEqual(r["headers"][":status"], "431")
        self.assertEqual(c.settings.get(h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE), 8192)

    def test_response_content_length_becomes_one_valid_http2_field(self):
        # HTTP/1.1 lets a server repeat the same Content-Length (fields or a
        # list) and a 204 carry one; HTTP/2 clients (nghttp2: curl) reset a
        # stream with two content-length fields, a list, or one on a 204.
        if not shutil.which("curl"):
            self.skipTest("no curl")
        for name, status, lengths in (("duplicate-length", "200", ["2"]),
                                      ("length-list", "200", ["2"]),
                                      ("no-content-with-length", "204", [])):
            out = subprocess.run(
                ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", "/dev/null",
                 f"http://127.0.0.1:{self.proxy.port}/canned/{name}"],
                capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, name + ": " + out.stderr)
            head = out.stdout.splitlines()
            self.assertEqual(head[0].split()[:2], ["HTTP/2", status], name)
            found = [line.split(":", 1)[1].strip() for line in head
                     if line.lower().startswith("content-length:")]
            self.assertEqual(found, lengths, name)

    def test_response_fields_that_repeat_are_indexed_and_no_others(self):
        # The client's HPACK decoder mirrors the proxy's encoder table: after
        # many responses it holds the repeated fields once each, and none of
        # the fields whose values change (or that are not on the list).
        c = self.client()
        for i in range(1, 41):
            response = c.get("/canned/varying")
            self.assertTrue(response["ended"], response)
            headers = response["headers"]
            self.assertEqual(headers[":status"], "200")
            self.assertEqual(headers["server"], "canned/1.0")
            self.assertEqual(headers["content-type"], "text/plain; charset=utf-8")
            self.assertEqual(headers["x-same"], "same")
            self.assertEqual(headers["x-unique"], headers["etag"].strip('"'))
            self.assertEqual(bytes(response["data"]), b"ok")
        table = c.conn.decoder.header_table
        entries = sorted((n.decode(), v.decode()) for n, v in table.dynamic_entries)
        self.assertEqual(entries, [("cache-control", "no-store"), ("content-type",
                                   "text/plain; charset=utf-8"), ("server", "canned/1.0")])
        self.assertLessEqual(table.maxsize, 1024)  # the size update the proxy sent

    def test_hop_by_hop_response_fields_are_dropped(self):
        # Connection, Keep-Alive and what a Connection field names stay on the
        # HTTP/1.1 hop; a name that merely starts like a nominated one goes on.
        c = self.client()
        r = c.get("/canned/hop-by-hop")
        c.close()
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(bytes(r["data"]), b"ok")
        names = set(r["headers"])
        self.assertEqual(names & {"connection", "keep-alive", "x-hop"}, set())
        self.assertEqual(r["headers"].get("x-kept"), "2")
        self.assertEqual(r["headers"].get("x-hop-not"), "3")

    # ---- logging and metrics ----

    def test_idle_connections_hold_no_buffer_storage(self):
        # Memory per idle connection (issue 25): once its streams ended, an
        # HTTP/2 connection gives its output block back (kwd_proxy_buffer_bytes
        # counts what connections hold). Other tests' connections may still be
        # closing: the figure is waited for.
        clients = [self.client() for _ in range(3)]
        for i, c in enumerate(clients):
            self.assertEqual(c.get(f"/sap/idle/{i}")["headers"][":status"], "200")
        deadline = time.monotonic() + 10
        held = None
        while time.monotonic() < deadline:
            held = self.proxy.metric("kwd_proxy_buffer_bytes")
            if held == 0:
                break
            time.sleep(0.1)
        self.assertEqual(held, 0, "bytes of buffer storage held by idle connections")
        # They still serve.
        for i, c in enumerate(clients):
            self.assertEqual(c.get(f"/sap/idle/again/{i}")["headers"][":status"], "200")

    def test_access_log_and_metrics(self):
        c = self.client()
        c.get("/sap/logged/h2")
        deadline = time.monotonic() + 10
        line = None
        while time.monotonic() < deadline and line is None:
            with open(self.proxy.access_log) as f:
                for l in f:
                    if "/sap/logged/h2" in l:
                        line = l
            time.sleep(0.1)
        self.assertIsNotNone(line, "no access log line")
        self.assertIn('"GET /sap/logged/h2 HTTP/2.0" 200', line)
        self.assertGreaterEqual(self.proxy.metric("kwd_proxy_http_connections", protocol="HTTP/2"),
                                1)
        self.assertGreaterEqual(self.proxy.metric("kwd_proxy_http2_streams_total"), 1)
        self.assertIsNotNone(self.proxy.metric("kwd_proxy_http2_streams"))
        self.assertIsNotNone(self.proxy.metric("kwd_proxy_http2_errors_total",
                                               reason="refused_stream"))
        # The admin API (and page) show the connections by protocol and the
        # open streams.
        def state():
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.proxy.admin_port}/admin/api/state", timeout=5) as r:
                return json.loads(r.read())["connections"]
        # Other tests' connections may still be closing: wait for this one alone.
        deadline = time.monotonic() + 10
        while state() != {"http1": 0, "http2": 1, "http2_streams": 0}:
            self.assertLess(time.monotonic(), deadline, state())
            time.sleep(0.05)

    # ---- drain ----

    def test_goaway_drain_on_sigterm_completes_streams_in_flight(self):
        proxy = Proxy(self.dir, self.snapshot, ["--drain-timeout", "10s"], "drain")
        self.addCleanup(proxy.stop)
        c = H2Client(proxy.tls_port)
        self.addCleanup(c.close)
        self.assertEqual(c.get("/sap/warm")["headers"][":status"], "200")
        sids = [c.request("/slow/800") for _ in range(10)]
        time.sleep(0.3)
        proxy.process.send_signal(signal.SIGTERM)
        results = c.wait(sids, timeout=30)
        for r in results:
            self.assertIsNone(r["reset"])
            self.assertEqual(r["headers"][":status"], "200")
        deadline = time.monotonic() + 10
        while c.goaway is None and time.monotonic() < deadline:
            try:
                c.pump()
            except (ConnectionError, OSError):
                break
        self.assertIsNotNone(c.goaway)
        self.assertEqual(c.goaway.error_code, 0)
        self.assertEqual(proxy.process.wait(timeout=15), 0)

    # ---- timeouts ----

    def test_idle_connection_gets_goaway_then_close(self):
        proxy = Proxy(self.dir, self.snapshot,
                      ["--idle-timeout", "1s", "--h2-max-concurrent-streams", "5"], "idle")
        self.addCleanup(proxy.stop)
        c = H2Client(proxy.tls_port)
        self.addCleanup(c.close)
        self.assertEqual(c.get("/sap/x")["headers"][":status"], "200")
        self.assertEqual(c.settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS), 5)
        self.assertEqual(c.settings.get(h2.settings.SettingCodes.HEADER_TABLE_SIZE, 4096), 4096)
        started = time.monotonic()
        with self.assertRaises((ConnectionError, OSError)):
            for _ in range(1000):
                c.pump()
        self.assertIsNotNone(c.goaway)
        self.assertEqual(c.goaway.error_code, 0)
        self.assertLess(time.monotonic() - started, 10)

    def test_ping_keeps_a_live_client_and_closes_a_silent_one(self):
        proxy = Proxy(self.dir, self.snapshot, ["--h2-ping-timeout", "300ms"], "ping")
        self.addCleanup(proxy.stop)
        # A client that answers PINGs keeps its slow stream.
        c = H2Client(proxy.tls_port)
        self.addCleanup(c.close)
        r = c.wait([c.request("/slow/1500")])[0]
        self.assertEqual(r["headers"][":status"], "200")
        # One that reads nothing (no PING ACK) is closed: the socket ends.
        silent = H2Client(proxy.tls_port)
        self.addCleanup(silent.close)
        silent.request("/slow/5000")
        started = time.monotonic()
        silent.sock.settimeout(10)
        while silent.sock.recv(65536):
            pass
        self.assertLess(time.monotonic() - started, 4.5)
        deadline = time.monotonic() + 5
        while not proxy.metric("kwd_proxy_http2_errors_total", reason="ping_timeout"):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)


if __name__ == "__main__":
    unittest.main(verbosity=2)
