"""The known HTTP/2 attacks against kwd-proxy's HTTP/2 side (issue 15 item 3),
black-box: a real kwd-proxy with --h2c (cleartext, prior knowledge) and, for
one case, TLS with ALPN h2, in front of a small HTTP/1.1 backend in this file
that counts what reaches it. Frames are written by hand on raw sockets (the
attacks are malformed or abusive on purpose); HPACK blocks of responses are
decoded with Debian's python3-hpack (from python3-h2).

One test per attack, each bounded in time:
- rapid reset (CVE-2023-44487): 20,000 HEADERS+RST_STREAM pairs in a burst;
- CONTINUATION flood (CVE-2024-27316 family): a header block that never ends;
- SETTINGS flood and PING flood, the attacker not reading the ACKs;
- zero-window stall: initial window 0 and a 1 GiB response;
- HPACK bomb: one dynamic-table entry referenced thousands of times;
- max concurrent streams: stream 101 refused while 100 are open;
- invalid preface, frames on stream 0 that must not be there, a frame over
  SETTINGS_MAX_FRAME_SIZE;
- rapid reset over TLS with ALPN h2.
Each asserts that the proxy stays alive and serves a second client, that its
peak RSS (VmHWM, reset through /proc/PID/clear_refs) stays bounded, and what
the attacker's connection must see (GOAWAY with the right code, RST_STREAM,
or the connection closed).

H2_TARGET=haproxy runs the same attacks against HAProxy (`haproxy` on PATH)
to check that the attacks reach the server and the assertions can fail.
HAProxy 2.6.12 passes the CONTINUATION flood (GOAWAY INTERNAL_ERROR after
0.3 MiB), the HPACK bomb, the zero-window stall (`timeout client` despite the
attacker's PINGs), max concurrent streams and the protocol errors; it fails
rapid reset (it keeps the connection, forwards about 1,500 of the 20,000
reset streams and opens about 2,700 upstream connections) and the SETTINGS/PING floods (it stops reading instead of
closing: memory stays bounded, but the attacker keeps its connection), which
is what the kwd contract asks more of.

Needs KWD_PROXY and KWD_CONTROLLER (the built binaries), set by ctest. Debian's python3 with
python3-h2 (hpack); openssl for the TLS case.
"""

import os
import sys
import re
import select
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

import hpack

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")
TARGET = os.environ.get("H2_TARGET", "kwd")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, \
    WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x6, 0x7, 0x8, 0x9
ENHANCE_YOUR_CALM = 0xb
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x4, 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

MIB = 1024 * 1024
# Peak RSS growth allowed during one attack. Each attack below, absorbed
# without a limit, costs hundreds of MiB (20,000 streams, a 64 MiB header
# list, 1 GiB of response, millions of queued ACKs).
RSS_BOUND = 48 * MIB


# ---------------------------------------------------------------- frames

def frame(kind, flags, stream, payload=b"", length=None):
    size = len(payload) if length is None else length
    return struct.pack(">I", size)[1:] + struct.pack(">BBI", kind, flags, stream) + payload


def settings_frame(pairs=(), ack=False):
    return frame(SETTINGS, ACK if ack else 0, 0,
                 b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7f) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name_index, value, first=0x00, prefix=4):
    """Literal header field with an indexed name; 0x00/4 bits: without
    indexing (the same bytes are valid in every block), 0x40/6 bits: with
    incremental indexing."""
    return hpack_int(name_index, prefix, first) + hpack_int(len(value), 7) + value


def literal_new_name(name, value, first=0x00):
    return bytes([first]) + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def request_block(path=b"/", authority=b"h2.test", method=b"GET"):
    """A request header block that uses neither the dynamic table nor Huffman
    coding, so it can be sent unchanged on any stream."""
    block = b"\x82" if method == b"GET" else literal(2, method)
    block += b"\x86"  # :scheme http
    block += b"\x84" if path == b"/" else literal(4, path)
    return block + literal(1, authority)


def goaway_info(payload):
    last, code = struct.unpack(">II", payload[:8])
    return last & 0x7fffffff, code


class Closed(Exception):
    pass


class Connection:
    """A raw HTTP/2 client connection: frames in and out, nothing checked."""

    def __init__(self, port, tls_context=None, rcvbuf=None, preface=True,
                 settings=((0x2, 0),)):
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        if tls_context is not None:
            self.sock = tls_context.wrap_socket(self.sock, server_hostname="h2.test")
            assert self.sock.selected_alpn_protocol() == "h2", \
                self.sock.selected_alpn_protocol()
        self.buffer = b""
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 30
        self.decoder.max_allowed_table_size = 1 << 20
        self.goaway = None  # (last_stream_id, error_code)
        self.closed = False
        self.server_settings = {}
        self.frames_seen = {}
        self._partial = {}  # stream -> header block fragments
        if preface:
            # The server's SETTINGS come first; they are acknowledged before
            # anything else is sent (an ACK for SETTINGS not yet received is
            # a PROTOCOL_ERROR).
            self.send(PREFACE + settings_frame(settings))
            deadline = time.monotonic() + 10
            while True:
                kind, flags, _, _ = self.read_frame(deadline)
                if kind == SETTINGS and not flags & ACK:
                    break
            self.send(settings_frame(ack=True))

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def read_frame(self, deadline):
        """The next frame as (type, flags, stream, payload); raises Closed at
        EOF or reset, TimeoutError at the deadline."""
        while True:
            if len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) >= 9 + length:
                    kind, flags, stream = struct.unpack(">BBI", self.buffer[3:9])
                    payload = self.buffer[9:9 + length]
                    self.buffer = self.buffer[9 + length:]
                    stream &= 0x7fffffff
                    self.frames_seen[kind] = self.frames_seen.get(kind, 0) + 1
                    if kind == GOAWAY and self.goaway is None:
                        self.goaway = goaway_info(payload)
                    if kind == SETTINGS and not flags & ACK:
                        for i in range(0, len(payload) - 5, 6):
                            key, value = struct.unpack(">HI", payload[i:i + 6])
                            self.server_settings[key] = value
                    return kind, flags, stream, payload
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame before the deadline")
            self.sock.settimeout(min(remaining, 5))
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except (ConnectionError, ssl.SSLError, OSError):
                chunk = b""
            if not chunk:
                self.closed = True
                raise Closed()
            self.buffer += chunk

    def headers(self, kind, flags, stream, payload):
        """Decoded header list once a header block is complete, else None."""
        if kind == HEADERS:
            if flags & 0x8:  # PADDED
                pad = payload[0]
                payload = payload[1:len(payload) - pad]
            if flags & 0x20:  # PRIORITY
                payload = payload[5:]
            self._partial[stream] = payload
        elif kind == CONTINUATION:
            self._partial[stream] = self._partial.get(stream, b"") + payload
        else:
            return None
        if not flags & END_HEADERS:
            return None
        return dict(self.decoder.decode(self._partial.pop(stream), raw=False))

    def wait_closed(self, timeout, ack_pings=False):
        """Reads until the server closes (True) or the timeout (False);
        a GOAWAY is recorded on the way."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                kind, flags, stream, payload = self.read_frame(deadline)
                self.headers(kind, flags, stream, payload)
                if ack_pings and kind == PING and not flags & ACK:
                    self.send(frame(PING, ACK, 0, payload))
        except Closed:
            return True
        except TimeoutError:
            return False
        except OSError:
            return True


def wait_status(conn, stream_id, timeout=10):
    """Reads frames until the response head of `stream_id`: its :status."""
    deadline = time.monotonic() + timeout
    while True:
        kind, flags, stream, payload = conn.read_frame(deadline)
        decoded = conn.headers(kind, flags, stream, payload)
        if decoded is not None and stream == stream_id:
            return decoded[":status"]


def read_statuses(conn, streams, statuses, timeout=10):
    """Reads frames until every stream of `streams` has its response head:
    their :status values go into `statuses` (stream id -> status)."""
    deadline = time.monotonic() + timeout
    while not all(stream in statuses for stream in streams):
        kind, flags, stream, payload = conn.read_frame(deadline)
        decoded = conn.headers(kind, flags, stream, payload)
        if decoded is not None and ":status" in decoded:
            statuses[stream] = decoded[":status"]


def wait_end(conn, stream_id, timeout=10):
    """Reads frames until the response of `stream_id` ends (END_STREAM)."""
    deadline = time.monotonic() + timeout
    while True:
        kind, flags, stream, payload = conn.read_frame(deadline)
        conn.headers(kind, flags, stream, payload)
        if stream == stream_id and kind in (HEADERS, DATA) and flags & END_STREAM:
            return


def get(port, path=b"/", tls_context=None, timeout=10):
    """One GET over a fresh HTTP/2 connection: (status, body)."""
    conn = Connection(port, tls_context)
    try:
        conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(path)))
        deadline = time.monotonic() + timeout
        status, body = None, b""
        while True:
            kind, flags, stream, payload = conn.read_frame(deadline)
            if kind == SETTINGS and not flags & ACK:
                conn.send(settings_frame(ack=True))
            if kind == RST_STREAM and stream == 1:
                raise AssertionError("stream reset: %d" % struct.unpack(">I", payload)[0])
            if kind == GOAWAY and conn.goaway[1] != NO_ERROR:
                raise AssertionError("GOAWAY %r" % (conn.goaway,))
            decoded = conn.headers(kind, flags, stream, payload)
            if decoded is not None and stream == 1:
                status = int(decoded[":status"])
            if kind == DATA and stream == 1:
                body += payload
                if payload:
                    conn.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", len(payload))) +
                              frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", len(payload))))
            if stream == 1 and kind in (HEADERS, DATA) and flags & END_STREAM:
                return status, body
    finally:
        conn.close()


# ---------------------------------------------------------------- processes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


def wait_port(port, process, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError("process exited with %s" % process.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("port %d did not open" % port)


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field + " missing")


class PeakRss:
    """Peak RSS growth of a process over a block: VmHWM after resetting it
    with clear_refs (Linux >= 4.0), else sampling VmRSS every 20 ms."""

    def __init__(self, pid):
        self.pid = pid

    def __enter__(self):
        self.base = status_kib(self.pid, "VmRSS") * 1024
        self.sampling = False
        try:
            with open("/proc/%d/clear_refs" % self.pid, "w") as f:
                f.write("5")
        except OSError:
            self.sampling = True
            self.peak = self.base
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, status_kib(self.pid, "VmRSS") * 1024)
            except (OSError, AssertionError):
                return

    def __exit__(self, *exc):
        if self.sampling:
            self._stop.set()
            self._thread.join()
        else:
            self.peak = status_kib(self.pid, "VmHWM") * 1024
        self.growth = self.peak - self.base
        return False


class Backend:
    """HTTP/1.1 on loopback, keep-alive, one thread per connection.
    /big answers 1 GiB and counts the bytes it managed to write; /hold waits
    for release(); anything else answers "ok". Counts connections and requests
    per path."""

    BIG = 1 << 30

    def __init__(self):
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = {}
        self.big_sent = 0
        self.released = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def count(self, prefix):
        with self.lock:
            return sum(n for path, n in self.requests.items() if path.startswith(prefix))

    def release(self):
        self.released.set()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        data = b""
        try:
            conn.settimeout(60)
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                path = head.split(b" ")[1].decode()
                with self.lock:
                    self.requests[path] = self.requests.get(path, 0) + 1
                if path.startswith("/big"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.BIG)
                    chunk = b"x" * 65536
                    for _ in range(self.BIG // len(chunk)):
                        conn.sendall(chunk)
                        with self.lock:
                            self.big_sent += len(chunk)
                    continue
                if path.startswith("/hold"):
                    self.released.wait(30)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()


def make_cert(directory):
    subprocess.run(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout h2.key -out h2.crt -days 2 -subj /CN=h2.test "
        "-addext subjectAltName=DNS:h2.test,IP:127.0.0.1",
        cwd=directory, shell=True, check=True, capture_output=True, timeout=60)


class Proxy:
    """kwd-proxy (--h2c, and --tls-listen with ALPN h2) or HAProxy with the
    same listeners, in front of one backend."""

    def __init__(self, backend, work, tls=False, idle_timeout=None, header_timeout=None,
                 access_log=False):
        self.port = free_port()
        self.tls_port = free_port() if tls else None
        self.admin_port = free_port()
        self.log_path = os.path.join(work, TARGET + ".log")
        self.log = open(self.log_path, "w+")
        # With access_log: kwd's access log in this file, its log at info.
        self.access_log = os.path.join(work, "access.log") if access_log else None
        if TARGET == "haproxy":
            command = self._haproxy(backend, work, idle_timeout, header_timeout)
        else:
            command = self._kwd(backend, work, idle_timeout, header_timeout)
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.process.pid
        try:
            wait_port(self.port, self.process)
            if tls:
                wait_port(self.tls_port, self.process)
        except AssertionError as e:
            output = self.output()
            self.stop()
            raise AssertionError("%s\n%s" % (e, output))

    def _kwd(self, backend, work, idle_timeout, header_timeout):
        objects = os.path.join(work, "objects")
        os.makedirs(objects, exist_ok=True)
        with open(os.path.join(objects, "objects.yaml"), "w") as f:
            f.write("""apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: app, namespace: default}
spec:
  kind: java
  healthCheck: {path: /healthcheck, intervalSeconds: 3600}
  sessionAffinity: {affinityCookie: {enabled: false}}
  backend:
    staticServers:
      - {name: a, address: 127.0.0.1, port: %d}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: app, namespace: default}
spec:
  hosts: []
  defaultRootHandler: java
  defaultGroups: {java: app}
""" % backend.port)
        snapshot = os.path.join(work, "snapshot.json")
        with open(snapshot, "w") as f:
            subprocess.run([CONTROLLER, "compile", "--source=dir:" + objects], stdout=f,
                           check=True, timeout=60)
        command = [PROXY, "serve", "--snapshot", snapshot, "--h2c",
                   "--listen", "127.0.0.1:%d" % self.port,
                   "--admin-listen", "127.0.0.1:%d" % self.admin_port, "--workers", "1"]
        if self.access_log:
            command += ["--access-log", self.access_log, "--log-level", "info"]
        else:
            command += ["--access-log", "off", "--log-level", "warn"]
        if self.tls_port:
            make_cert(work)
            command += ["--tls-listen", "127.0.0.1:%d" % self.tls_port, "--tls-cert-dir", work]
        if idle_timeout:
            command += ["--idle-timeout", "%ds" % idle_timeout]
        if header_timeout:
            command += ["--header-timeout", "%ds" % header_timeout]
        return command

    def _haproxy(self, backend, work, idle_timeout, header_timeout):
        config = os.path.join(work, "haproxy.cfg")
        tls_bind = ""
        if self.tls_port:
            make_cert(work)
            with open(os.path.join(work, "h2.pem"), "w") as out:
                for name in ("h2.crt", "h2.key"):
                    with open(os.path.join(work, name)) as f:
                        out.write(f.read())
            tls_bind = "  bind 127.0.0.1:%d ssl crt %s alpn h2,http/1.1\n" % (
                self.tls_port, os.path.join(work, "h2.pem"))
        with open(config, "w") as f:
            f.write("global\n  nbthread 1\n  maxconn 4000\n"
                    "defaults\n  mode http\n  timeout connect 5s\n"
                    "  timeout client %ds\n  timeout server 60s\n"
                    "  timeout http-request %ds\n  timeout http-keep-alive %ds\n"
                    "frontend fe\n  bind 127.0.0.1:%d proto h2\n%s"
                    "  default_backend be\n"
                    "backend be\n  server a 127.0.0.1:%d\n" % (
                        idle_timeout, header_timeout, idle_timeout, self.port, tls_bind,
                        backend.port))
        return [shutil.which("haproxy") or "/usr/sbin/haproxy", "-f", config, "-db"]

    def alive(self):
        return self.process.poll() is None

    def metric(self, name, **labels):
        want = name + "{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "} "
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.admin_port,
                                    timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(want):
                    return float(line.rsplit(" ", 1)[1])
        return None

    def output(self):
        self.log.seek(0)
        return self.log.read()[-4000:]

    def stop(self):
        if self.log.closed:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class Flood:
    """Writes `data` in a single-threaded non-blocking loop, reading what the
    server sends into conn.buffer only if `read` (an attacker that reads
    nothing makes the server queue or stop). Stops when everything is
    written, when the server closes or resets (closed=True), or after `stall`
    seconds without progress (the server stopped reading: stalled=True)."""

    def __init__(self, conn, data, read=True, stall=3.0, limit=60.0, repeat=b"", times=0):
        """Sends data, then `repeat` `times` times."""
        self.sent = 0
        self.closed = False
        self.stalled = False
        self.total = len(data) + len(repeat) * times
        sock = conn.sock
        sock.setblocking(False)
        # Whole copies of `repeat` in one buffer of about 1 MiB.
        chunk = repeat * max(1, (1 << 20) // max(1, len(repeat))) if repeat else b""

        def pending():
            if self.sent < len(data):
                return memoryview(data)[self.sent:self.sent + (1 << 18)]
            offset = (self.sent - len(data)) % len(chunk)
            return memoryview(chunk)[offset:offset + min(1 << 18, self.total - self.sent)]

        last_progress = time.monotonic()
        end = last_progress + limit
        try:
            while self.sent < self.total and time.monotonic() < end and not self.closed:
                readable, writable, _ = select.select([sock] if read else [], [sock], [], 0.2)
                if readable or (read and isinstance(sock, ssl.SSLSocket) and sock.pending()):
                    try:
                        received = sock.recv(1 << 20)
                        if not received:
                            self.closed = conn.closed = True
                        conn.buffer += received
                    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        pass
                    except (ConnectionError, ssl.SSLError, OSError):
                        self.closed = conn.closed = True
                if not writable:
                    if time.monotonic() - last_progress > stall:
                        self.stalled = True
                        break
                    continue
                try:
                    n = sock.send(pending())
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    continue
                except (ConnectionError, ssl.SSLError, OSError):
                    self.closed = True
                    break
                self.sent += n
                last_progress = time.monotonic()
        finally:
            sock.settimeout(10)


class Background:
    """Runs fn in a thread; result() re-raises what it raised."""

    def __init__(self, fn):
        self.value = self.error = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.value = fn()
        except BaseException as e:  # noqa: B902 - handed to the test thread
            self.error = e

    def result(self, timeout=30):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("background call still running")
        if self.error is not None:
            raise self.error
        return self.value


# ---------------------------------------------------------------- tests

class ProxyCase(unittest.TestCase):
    tls = False
    # Longer than any wait in the tests, so that a connection the proxy
    # closes as idle does not pass for a defence.
    idle_timeout = 30
    header_timeout = 30
    access_log = False

    def setUp(self):
        # Cleanups run even when setUp fails half-way (tearDown would not).
        self.work = tempfile.mkdtemp(prefix="kwd-h2-attacks.")
        self.addCleanup(shutil.rmtree, self.work, ignore_errors=True)
        self.backend = Backend()
        self.addCleanup(self.backend.close)
        self.addCleanup(self.backend.release)
        self.proxy = Proxy(self.backend, self.work, tls=self.tls,
                           idle_timeout=self.idle_timeout, header_timeout=self.header_timeout,
                           access_log=self.access_log)
        self.addCleanup(self.proxy.stop)
        self.conns = []
        self.addCleanup(lambda: [conn.close() for conn in self.conns])
        self.assertEqual(get(self.proxy.port), (200, b"ok"))

    def tearDown(self):
        self.assertTrue(self.proxy.alive(), "proxy died:\n" + self.proxy.output())

    def connect(self, **kwargs):
        conn = Connection(self.tls_port() if kwargs.pop("tls", False) else self.proxy.port,
                          **kwargs)
        self.conns.append(conn)
        return conn

    def tls_port(self):
        return self.proxy.tls_port

    def assert_serves(self, tls_context=None):
        """A second client gets its answer while (or right after) the attack."""
        port = self.proxy.tls_port if tls_context else self.proxy.port
        started = time.monotonic()
        self.assertEqual(get(port, b"/second", tls_context=tls_context, timeout=10), (200, b"ok"))
        return time.monotonic() - started

    def assert_connection_error(self, conn, codes, timeout=10):
        """The server ends the connection: GOAWAY with one of `codes` (if it
        sends one) and then closes."""
        closed = conn.wait_closed(timeout)
        self.assertTrue(closed or conn.goaway is not None,
                        "connection neither closed nor GOAWAY within %ss" % timeout)
        if conn.goaway is not None:
            self.assertIn(conn.goaway[1], codes, "GOAWAY code")
        self.assertTrue(closed, "GOAWAY %r but the connection stayed open" % (conn.goaway,))

    def rapid_reset(self, pairs, tls_context=None):
        conn = Connection(self.proxy.tls_port if tls_context else self.proxy.port, tls_context)
        self.conns.append(conn)
        block = request_block(b"/reset")
        burst = bytearray()
        for i in range(pairs):
            stream = 1 + 2 * i
            burst += frame(HEADERS, END_STREAM | END_HEADERS, stream, block)
            burst += frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL))
        with PeakRss(self.proxy.pid) as rss:
            # A second client while the attack runs.
            second = Background(lambda: self.assert_serves(tls_context))
            flood = Flood(conn, bytes(burst))
            # Well before the idle timeout (30s).
            closed = conn.wait_closed(10)
            took = second.result()
        reached = self.backend.count("/reset")
        print("rapid reset: sent %d of %d bytes, closed=%s/%s stalled=%s goaway=%r, "
              "backend saw %d requests on %d connections, RSS +%.1f MiB, second client %.2fs"
              % (flood.sent, len(burst), flood.closed, closed, flood.stalled, conn.goaway,
                 reached, self.backend.connections, rss.growth / MIB, took))
        # The attacker is stopped: GOAWAY or the connection closed.
        self.assertTrue(closed or conn.goaway is not None,
                        "attacker's connection neither closed nor GOAWAY after %d resets" % pairs)
        if conn.goaway is not None:
            self.assertNotEqual(conn.goaway[1], NO_ERROR, "GOAWAY code")
        # Work done upstream is bounded: a proxy that forwards each HEADERS
        # before it sees the RST_STREAM sends thousands of requests, or opens
        # thousands of upstream connections it then drops.
        self.assertLess(reached, pairs // 10, "requests that reached the backend")
        with self.backend.lock:
            connections = self.backend.connections
        self.assertLess(connections, pairs // 10, "upstream connections the attack made")
        self.assertLess(rss.growth, RSS_BOUND)


class Http2Attacks(ProxyCase):
    def test_rapid_reset(self):
        self.rapid_reset(20000)

    # -- CONTINUATION flood -----------------------------------------------

    def test_continuation_flood(self):
        conn = self.connect()
        # Each CONTINUATION carries valid, distinct header fields (literal
        # without indexing), so a decoder that keeps going accumulates them.
        field = literal_new_name(b"x-flood", b"v" * 1000)
        fragment = field * (16000 // len(field))
        continuation = frame(CONTINUATION, 0, 1, fragment)
        with PeakRss(self.proxy.pid) as rss:
            flood = Flood(conn, frame(HEADERS, END_STREAM, 1, request_block(b"/continuation")),
                          repeat=continuation, times=256 * MIB // len(continuation), stall=3)
            closed = conn.wait_closed(15)
        took = self.assert_serves()
        print("continuation flood: sent %.1f MiB of %.0f MiB, closed=%s/%s stalled=%s goaway=%r, "
              "RSS +%.1f MiB, second client %.2fs"
              % (flood.sent / MIB, flood.total / MIB, flood.closed, closed, flood.stalled,
                 conn.goaway, rss.growth / MIB, took))
        # Closed once the header list is over the limit: what the kernel's
        # socket buffers take on loopback is a few MiB, nowhere near 256.
        self.assertTrue(closed, "connection still open after the flood")
        self.assertLess(flood.sent, 64 * MIB, "bytes accepted before the connection closed")
        if conn.goaway is not None:
            self.assertIn(conn.goaway[1], (PROTOCOL_ERROR, COMPRESSION_ERROR, ENHANCE_YOUR_CALM,
                                           INTERNAL_ERROR, FRAME_SIZE_ERROR))
        self.assertEqual(self.backend.count("/continuation"), 0)
        self.assertLess(rss.growth, RSS_BOUND)

    # -- SETTINGS / PING floods --------------------------------------------

    def control_flood(self, one_frame, count):
        # A small receive buffer: the server's ACKs cannot all hide in the
        # kernel, it has to queue them or stop reading.
        conn = self.connect(rcvbuf=4096)
        with PeakRss(self.proxy.pid) as rss:
            flood = Flood(conn, b"", read=False, stall=3,
                          repeat=one_frame, times=count)
            # Stop reading for a while longer: a server that queues ACKs
            # without limit keeps growing now.
            time.sleep(1)
            acks = 0
            deadline = time.monotonic() + 10
            closed = False
            try:
                while True:
                    kind, flags, _, _ = conn.read_frame(deadline)
                    if kind in (SETTINGS, PING) and flags & ACK:
                        acks += 1
            except Closed:
                closed = True
            except TimeoutError:
                pass
        took = self.assert_serves()
        frames_sent = flood.sent // len(one_frame)
        print("flood: %d of %d frames sent (%.1f MiB), %d ACKs read, send closed=%s stalled=%s, "
              "closed=%s goaway=%r, RSS +%.1f MiB, second client %.2fs"
              % (frames_sent, count, flood.sent / MIB, acks, flood.closed, flood.stalled,
                 closed, conn.goaway, rss.growth / MIB, took))
        self.assertLess(rss.growth, RSS_BOUND)
        # The flood is detected: the connection is closed (GOAWAY first, if
        # any, with an error code) before the server answered every frame.
        self.assertTrue(closed, "connection still open 10s after the flood")
        if conn.goaway is not None:
            self.assertNotEqual(conn.goaway[1], NO_ERROR)
        self.assertLess(acks, frames_sent, "every flood frame was answered")

    def test_settings_flood(self):
        self.control_flood(settings_frame(), 5000000)

    def test_ping_flood(self):
        self.control_flood(frame(PING, 0, 0, b"12345678"), 2000000)

    # -- HPACK bomb ---------------------------------------------------------

    def test_hpack_bomb(self):
        conn = self.connect()
        value = b"b" * 4000  # 4000 + 7 + 32 bytes: fits the 4096-byte table
        block = request_block(b"/bomb") + literal_new_name(b"x-bomb", value, first=0x40)
        # Index 62 is the entry just added; each reference is one byte and
        # decodes to 4 KB: 16,000 of them make a 64 MiB header list.
        block += b"\xbe" * (16384 - len(block))
        with PeakRss(self.proxy.pid) as rss:
            conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block))
            deadline = time.monotonic() + 15
            status = reset = None
            try:
                while status is None and reset is None and conn.goaway is None:
                    kind, flags, stream, payload = conn.read_frame(deadline)
                    decoded = conn.headers(kind, flags, stream, payload)
                    if decoded is not None and stream == 1:
                        status = int(decoded[":status"])
                    if kind == RST_STREAM and stream == 1:
                        reset = struct.unpack(">I", payload)[0]
            except Closed:
                pass
        took = self.assert_serves()
        print("hpack bomb: status=%s reset=%s goaway=%r closed=%s, RSS +%.1f MiB, "
              "second client %.2fs" % (status, reset, conn.goaway, conn.closed,
                                       rss.growth / MIB, took))
        self.assertTrue(status == 431 or reset is not None or conn.goaway is not None
                        or conn.closed, "bomb neither refused nor reset")
        self.assertNotEqual(status, 200)
        self.assertEqual(self.backend.count("/bomb"), 0)
        self.assertLess(rss.growth, RSS_BOUND)

    # -- max concurrent streams -------------------------------------------

    def test_max_concurrent_streams(self):
        conn = self.connect()
        block = request_block(b"/hold")
        deadline = time.monotonic() + 10
        # The server's SETTINGS come first after its preface.
        while SETTINGS_MAX_CONCURRENT_STREAMS not in conn.server_settings:
            conn.read_frame(deadline)
        self.assertEqual(conn.server_settings[SETTINGS_MAX_CONCURRENT_STREAMS], 100)
        conn.send(b"".join(
            frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * i, block) for i in range(100)))
        # All 100 reach the backend and wait there.
        while self.backend.count("/hold") < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.backend.count("/hold"), 100)
        conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 201, request_block(b"/hold101")))
        reset = None
        deadline = time.monotonic() + 10
        while reset is None and conn.goaway is None:
            kind, flags, stream, payload = conn.read_frame(deadline)
            if kind == RST_STREAM and stream == 201:
                reset = struct.unpack(">I", payload)[0]
        # The 101st stream never reaches a server. RFC 9113 5.1.2 makes it a
        # stream error (REFUSED_STREAM); libnghttp2 1.52 answers so only
        # until the client has acknowledged the SETTINGS, and after that ends
        # the connection with GOAWAY PROTOCOL_ERROR (5.4.1 allows treating a
        # stream error as a connection error). Either way the limit holds.
        if conn.goaway is not None:
            last_stream, code = conn.goaway
            self.assertEqual(code, PROTOCOL_ERROR)
            self.assertLess(last_stream, 201)
        else:
            self.assertEqual(reset, REFUSED_STREAM)
        time.sleep(0.2)
        self.assertEqual(self.backend.count("/hold101"), 0)
        self.backend.release()
        if conn.goaway is None:
            # A stream error: the 100 streams are answered once the backend
            # lets them go, and the connection takes new streams again.
            done = set()
            deadline = time.monotonic() + 15
            while len(done) < 100:
                kind, flags, stream, payload = conn.read_frame(deadline)
                decoded = conn.headers(kind, flags, stream, payload)
                if decoded is not None:
                    self.assertEqual(decoded[":status"], "200")
                if kind in (HEADERS, DATA) and flags & END_STREAM:
                    done.add(stream)
            conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 203, request_block(b"/after")))
            self.assertEqual(wait_status(conn, 203), "200")
        else:
            self.assertTrue(conn.wait_closed(10), "connection open after GOAWAY")
        self.assert_serves()

    # -- protocol errors ----------------------------------------------------

    def test_invalid_preface(self):
        conn = self.connect(preface=False)
        conn.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + settings_frame())
        closed = conn.wait_closed(10)
        self.assertTrue(closed, "connection open after a bad preface")
        if conn.goaway is not None:
            self.assertEqual(conn.goaway[1], PROTOCOL_ERROR)
        self.assertNotIn(HEADERS, conn.frames_seen)
        self.assert_serves()

    def test_frames_on_stream_zero(self):
        cases = {
            "HEADERS": frame(HEADERS, END_STREAM | END_HEADERS, 0, request_block()),
            "DATA": frame(DATA, END_STREAM, 0, b"x"),
            "RST_STREAM": frame(RST_STREAM, 0, 0, struct.pack(">I", CANCEL)),
            "PRIORITY": frame(PRIORITY, 0, 0, struct.pack(">IB", 1, 16)),
            "CONTINUATION": frame(CONTINUATION, END_HEADERS, 0, b""),
            "SETTINGS on stream 1": frame(SETTINGS, 0, 1, b""),
            "PING on stream 1": frame(PING, 0, 1, b"12345678"),
            "GOAWAY on stream 1": frame(GOAWAY, 0, 1, struct.pack(">II", 0, 0)),
        }
        for name, bad in cases.items():
            with self.subTest(name):
                conn = self.connect()
                conn.send(bad)
                self.assert_connection_error(conn, (PROTOCOL_ERROR,))
        self.assert_serves()

    def test_oversized_frame(self):
        conn = self.connect()
        deadline = time.monotonic() + 10
        while SETTINGS not in conn.frames_seen:
            conn.read_frame(deadline)
        limit = conn.server_settings.get(SETTINGS_MAX_FRAME_SIZE, 16384)
        block = request_block(b"/oversized")
        block += literal_new_name(b"x-pad", b"p" * (limit + 100 - len(block) - 10))
        self.assertGreater(len(block), limit)
        conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block))
        self.assert_connection_error(conn, (FRAME_SIZE_ERROR,))
        self.assertEqual(self.backend.count("/oversized"), 0)
        # A length field far over the limit, with no payload behind it: the
        # server must not wait for (or allocate) 16 MiB.
        conn = self.connect()
        conn.send(frame(DATA, 0, 1, b"", length=(1 << 24) - 1))
        self.assert_connection_error(conn, (FRAME_SIZE_ERROR, PROTOCOL_ERROR))
        self.assert_serves()


class ZeroWindowStall(ProxyCase):
    """Short client timeouts, so the stall has to end within the test."""
    idle_timeout = 3
    header_timeout = 3

    def test_zero_window_stall(self):
        conn = self.connect(settings=((0x2, 0), (SETTINGS_INITIAL_WINDOW_SIZE, 0)))
        conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(b"/big")))
        with PeakRss(self.proxy.pid) as rss:
            # The backend writes until the proxy stops reading it.
            deadline = time.monotonic() + 15
            previous = -1
            while time.monotonic() < deadline:
                time.sleep(1)
                with self.backend.lock:
                    sent = self.backend.big_sent
                if sent == previous and sent > 0:
                    break
                previous = sent
            upstream_stopped = self.backend.big_sent
            # A concurrent normal client is served meanwhile.
            took = self.assert_serves()
            # The attacker keeps the connection busy (a PING a second, ACKs
            # read) but never opens the window: the stall ends by a timeout,
            # the stream reset or the connection closed.
            reset = data = None
            ended = False
            deadline = time.monotonic() + 40
            next_ping = time.monotonic()
            try:
                while reset is None and not ended and time.monotonic() < deadline:
                    if time.monotonic() >= next_ping:
                        conn.send(frame(PING, 0, 0, b"busy...."))
                        next_ping = time.monotonic() + 1
                    try:
                        kind, flags, stream, payload = conn.read_frame(min(next_ping, deadline))
                    except TimeoutError:
                        continue
                    if kind == PING and not flags & ACK:
                        conn.send(frame(PING, ACK, 0, payload))
                    if kind == DATA and stream == 1:
                        data = (data or 0) + len(payload)
                    if kind == RST_STREAM and stream == 1:
                        reset = struct.unpack(">I", payload)[0]
                    if kind == GOAWAY:
                        ended = conn.wait_closed(10)
            except (Closed, OSError):
                ended = True
            stalled_for = time.monotonic() - (deadline - 40)
        print("zero window: backend wrote %.1f MiB before the proxy stopped reading, "
              "DATA %s bytes, reset=%s goaway=%r ended=%s after %.1fs, RSS +%.1f MiB, "
              "second client %.2fs" % (upstream_stopped / MIB, data, reset, conn.goaway, ended,
                                       stalled_for, rss.growth / MIB, took))
        self.assertLess(upstream_stopped, 64 * MIB, "the proxy kept reading the upstream")
        self.assertLess(self.backend.big_sent, 64 * MIB)
        self.assertFalse(data, "DATA sent into a zero window")
        self.assertTrue(reset is not None or ended, "stall not ended by a timeout")
        self.assertLess(rss.growth, RSS_BOUND)




class RapidResetLogging(ProxyCase):
    """Rapid reset must not flood the access log: a stream reset before its
    request reached a server is counted (reset_before_forward) and the
    connection summarised in one log line, while a request that reached the
    server keeps its access-log line."""
    access_log = True

    def access_lines(self):
        with open(self.proxy.access_log) as f:
            return f.read().splitlines()

    def test_streams_reset_before_forward_are_counted_not_logged(self):
        if TARGET != "kwd":
            self.skipTest("kwd's access log and metrics")
        pairs = 500
        before = self.proxy.metric("kwd_proxy_http2_errors_total",
                                   reason="reset_before_forward") or 0
        conn = self.connect()
        # Stream 1 reaches the server (which holds it), then is reset.
        conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(b"/hold")))
        deadline = time.monotonic() + 10
        while self.backend.count("/hold") == 0:
            self.assertLess(time.monotonic(), deadline, "/hold did not reach the backend")
            time.sleep(0.02)
        burst = bytearray()
        block = request_block(b"/reset")
        for i in range(pairs):
            stream = 3 + 2 * i
            burst += frame(HEADERS, END_STREAM | END_HEADERS, stream, block)
            burst += frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL))
        # A request after the burst: once it is answered, the burst was read.
        last = 3 + 2 * pairs
        burst += frame(HEADERS, END_STREAM | END_HEADERS, last, request_block(b"/after"))
        conn.send(bytes(burst))
        wait_end(conn, last)
        conn.send(frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)))
        conn.close()
        # The connection's summary line, then the access log with /hold's
        # line (written when stream 1 was reset).
        summary = None
        deadline = time.monotonic() + 10
        while summary is None:
            self.assertLess(time.monotonic(), deadline, "no summary line:\n" + self.proxy.output())
            with open(self.proxy.log_path) as f:
                summary = next((l for l in f if "never reached a server" in l), None)
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while not any(" /hold " in l for l in self.access_lines()):
            self.assertLess(time.monotonic(), deadline, "no access-log line for /hold")
            time.sleep(0.05)
        lines = self.access_lines()
        reset_lines = sum(" /reset " in l for l in lines)
        counted = self.proxy.metric("kwd_proxy_http2_errors_total",
                                    reason="reset_before_forward") - before
        print("rapid reset of %d streams: %d access-log lines in all, %d for reset streams "
              "(forwarded before their reset), reset_before_forward +%d; summary: %s"
              % (pairs, len(lines), reset_lines, counted, summary.strip()))
        # Every reset stream is either counted or (forwarded before its
        # RST_STREAM was read) logged; nearly all are only counted.
        self.assertEqual(counted + reset_lines, pairs)
        self.assertLess(reset_lines, pairs // 10)
        # setUp's GET, /after and /hold, besides the few forwarded resets.
        self.assertEqual(len(lines), reset_lines + 3, lines[:5])
        self.assertIn("streams=%d " % counted, summary)
        self.assertIn("client_resets=%d " % (pairs + 1), summary)
        hold = next(l for l in lines if " /hold " in l)
        self.assertIn("aborted-client", hold)
        after = next(l for l in lines if " /after " in l)
        self.assertIn('"GET /after HTTP/2.0" 200', after)

    def summary_lines(self):
        with open(self.proxy.log_path) as f:
            return [l for l in f if "never reached a server" in l]

    def reset_one_stream(self, path):
        """A connection whose one stream is reset before it reaches a server
        (in the same read as its HEADERS), then closed."""
        conn = self.connect()
        conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(path)) +
                  frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)) +
                  frame(PING, 0, 0, b"12345678"))
        deadline = time.monotonic() + 10
        while True:  # the PING's ACK: the reset was read
            kind, flags, _, _ = conn.read_frame(deadline)
            if kind == PING and flags & ACK:
                break
        conn.close()

    def test_connections_left_out_of_the_summary_are_reported_later(self):
        """Summary lines are at most one a second: the connections closed
        within that second are reported afterwards, even when no further
        connection closes (they were only ever added to the next line)."""
        if TARGET != "kwd":
            self.skipTest("kwd's log")
        started = time.monotonic()
        for i in range(3):
            self.reset_one_stream(b"/summary%d" % i)
        quick = time.monotonic() - started < 1.0  # the second and third fell in the first's second
        deadline = time.monotonic() + 10
        reported = 0
        while reported < 3:
            self.assertLess(time.monotonic(), deadline,
                            "%d of 3 connections reported:\n%s" % (reported,
                                                                    "".join(self.summary_lines())))
            time.sleep(0.05)
            lines = self.summary_lines()
            reported = 0
            for line in lines:
                match = re.search(r"\bconnections=(\d+)", line)
                reported += int(match.group(1)) if match else 1
                match = re.search(r"connections_not_logged=(\d+)", line)
                reported += int(match.group(1)) if match else 0
        print("3 connections with a reset stream: summary lines %r (within one second: %s)"
              % ([l.strip() for l in lines], quick))
        self.assertEqual(reported, 3)
        if quick:
            self.assertTrue(any("connections=2" in l for l in lines), lines)

    def test_stream_refused_for_bad_fields_is_counted_once(self):
        """A stream reset for a malformed header section counts as a
        protocol_error only, not also as reset_before_forward."""
        if TARGET != "kwd":
            self.skipTest("kwd's metrics")
        reasons = ("protocol_error", "reset_before_forward")
        before = {r: self.proxy.metric("kwd_proxy_http2_errors_total", reason=r) or 0
                  for r in reasons}
        conn = self.connect()
        bad = request_block(b"/bad") + literal_new_name(b"connection", b"keep-alive")
        conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, bad) +
                  frame(HEADERS, END_STREAM | END_HEADERS, 3, request_block(b"/good")))
        deadline = time.monotonic() + 10
        reset = None
        ended = False
        while reset is None or not ended:
            kind, flags, stream, payload = conn.read_frame(deadline)
            conn.headers(kind, flags, stream, payload)
            if kind == RST_STREAM and stream == 1:
                reset = struct.unpack(">I", payload)[0]
            if stream == 3 and kind in (HEADERS, DATA) and flags & END_STREAM:
                ended = True
        conn.close()
        self.assertEqual(reset, PROTOCOL_ERROR)
        deadline = time.monotonic() + 10
        while True:
            after = {r: self.proxy.metric("kwd_proxy_http2_errors_total", reason=r) or 0
                     for r in reasons}
            if after["protocol_error"] > before["protocol_error"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        # The connection's end (when the stream would be counted again).
        time.sleep(0.2)
        after = {r: self.proxy.metric("kwd_proxy_http2_errors_total", reason=r) or 0
                 for r in reasons}
        self.assertEqual(after["protocol_error"] - before["protocol_error"], 1, after)
        self.assertEqual(after["reset_before_forward"] - before["reset_before_forward"], 0, after)


class TlsAlpnH2(ProxyCase):
    """The same rapid reset over TLS, ALPN h2 on the HTTPS listener."""
    tls = True

    def test_rapid_reset_over_tls(self):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2", "http/1.1"])
        self.assertEqual(get(self.proxy.tls_port, tls_context=context), (200, b"ok"))
        self.rapid_reset(20000, tls_context=context)


if __name__ == "__main__":
    if TARGET == "kwd" and not (PROXY and CONTROLLER):
        raise SystemExit("KWD_PROXY and KWD_CONTROLLER must be set")
    unittest.main(verbosity=2)
