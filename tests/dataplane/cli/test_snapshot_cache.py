#!/usr/bin/python3
"""`kwd-proxy serve --controller ... --snapshot-cache FILE`, black box: a real
kwd-controller (directory source), real kwd-proxy processes and a Python
backend on loopback.

- Every applied snapshot is written to FILE (a valid `--snapshot` file).
- A proxy restarted while the controller is down (refusing, or accepting and
  never answering) serves the cached snapshot at once; /readyz and
  /admin/api/state say which version and "source cache".
- A controller that answers later takes over ("source controller"), with the
  same version or a new one (which is written to the cache).
- A corrupt, truncated, emptied or edited cache file is logged and ignored:
  the proxy stays up and unready until the controller answers.
- Usage errors: --snapshot-cache without --controller, an unwritable folder.

Debian's python3, standard library only. The binaries come from
$KWD_BINARY_DIR (CMake passes the build folder).
"""
import http.server
import json
import os
import sys
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
BINARY_DIR = os.environ.get("KWD_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
PROXY = os.path.join(BINARY_DIR, "kwd-proxy")
CONTROLLER = os.path.join(BINARY_DIR, "kwd-controller")

OBJECTS = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: public, namespace: erp}
spec:
  kind: java
  backend:
    staticServers:
%s
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: all, namespace: erp}
spec:
  hosts: []
  defaultRootHandler: java
  defaultGroups: {java: public}
"""


def objects_yaml(backends):
    servers = "".join(f"      - {{name: {name}, address: 127.0.0.1, port: {port}}}\n"
                      for name, port in backends)
    return OBJECTS % servers.rstrip("\n")


def wait_for(condition, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


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


class Backend:
    """Answers every request with its name."""

    def __init__(self, name):
        self.name = name
        self.hits = 0
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                backend.hits += 1
                body = backend.name.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class SnapshotCacheTest(unittest.TestCase):
    def setUp(self):
        for binary in (PROXY, CONTROLLER):
            if not os.access(binary, os.X_OK):
                self.fail(f"{binary} is not an executable (build kwd-proxy and kwd-controller)")
        self.dir = tempfile.mkdtemp(prefix="kwd-snapshot-cache-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.objects = os.path.join(self.dir, "objects")
        os.makedirs(self.objects)
        self.cache = os.path.join(self.dir, "cache", "snapshot.json")
        os.makedirs(os.path.dirname(self.cache))
        self.grpc_port = free_port()
        self.processes = []
        self.addCleanup(self.stop_all)
        self.one = Backend("one")
        self.addCleanup(self.one.close)
        self.write_objects([("one", self.one.port)])

    def write_objects(self, backends):
        path = os.path.join(self.objects, "objects.yaml")
        with open(path + ".tmp", "w") as f:
            f.write(objects_yaml(backends))
        os.rename(path + ".tmp", path)

    def log_path(self, name):
        return os.path.join(self.dir, name + ".log")

    def start(self, argv, name):
        log = open(self.log_path(name), "w")
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        self.processes.append((process, log))
        return process

    def stop(self, process):
        for candidate, log in self.processes:
            if candidate is process:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                process.stdout.close()
                log.close()
        self.processes = [(p, l) for p, l in self.processes if p is not process]

    def stop_all(self):
        for process, _ in list(reversed(self.processes)):
            self.stop(process)

    def start_controller(self):
        admin = free_port()
        process = self.start(
            [CONTROLLER, "serve", "--source=dir:" + self.objects,
             "--grpc-listen", f"127.0.0.1:{self.grpc_port}", "--admin-listen", f"127.0.0.1:{admin}",
             "--poll-interval", "50ms"], "controller")
        line = process.stdout.readline()
        self.assertTrue(line.startswith("listening "), "kwd-controller did not start: " + line)
        return process

    def start_proxy(self, name):
        admin = free_port()
        process = self.start(
            [PROXY, "serve", "--controller", f"127.0.0.1:{self.grpc_port}",
             "--snapshot-cache", self.cache, "--listen", "127.0.0.1:0",
             "--admin-listen", f"127.0.0.1:{admin}", "--workers", "1", "--access-log", "off"],
            name)
        line = process.stdout.readline()
        self.assertTrue(line.startswith("listening "), "kwd-proxy did not start: " + line)
        return process, int(line.rsplit(":", 1)[1]), admin

    def serving(self, admin):
        status, body = http_get(admin, "/admin/api/state")
        if status != 200:
            return None
        return json.loads(body)["snapshot_source"]["serving"]

    def cached_version(self):
        try:
            with open(self.cache) as f:
                return json.load(f)["version"]
        except (OSError, ValueError, KeyError):
            return None

    def log_of(self, name):
        with open(self.log_path(name)) as f:
            return f.read()

    def test_restart_during_controller_outage_serves_the_cache(self):
        controller = self.start_controller()
        first, port, admin = self.start_proxy("proxy1")
        wait_for(lambda: (self.serving(admin) or {}).get("source") == "controller",
                 what="the first proxy serving the controller's snapshot")
        version = self.serving(admin)["version"]
        self.assertEqual(http_get(port, "/x"), (200, "one"))
        # Written on apply, as the JSON `kwd-proxy serve --snapshot` reads.
        wait_for(lambda: self.cached_version() == version, what="the cache file")
        self.assertEqual([n for n in os.listdir(os.path.dirname(self.cache))
                          if n.startswith("snapshot.json.tmp")], [])

        # The controller goes away, then the proxy restarts.
        self.stop(controller)
        self.stop(first)
        started = time.monotonic()
        second, port, admin = self.start_proxy("proxy2")
        wait_for(lambda: http_get(admin, "/readyz")[0] == 200, timeout=10,
                 what="the restarted proxy ready from its cache")
        self.assertLess(time.monotonic() - started, 5.0)
        status, body = http_get(admin, "/readyz")
        self.assertEqual(body, f"ready: version {version}, source cache\n")
        self.assertEqual(self.serving(admin), {"version": version, "source": "cache"})
        hits = self.one.hits
        self.assertEqual(http_get(port, "/sap/bc/x"), (200, "one"))
        self.assertEqual(self.one.hits, hits + 1)
        self.assertIn("serving the cached snapshot", self.log_of("proxy2"))
        metrics = http_get(admin, "/metrics")[1]
        self.assertIn("kwd_proxy_snapshot_cache_loads_total 1", metrics)

        # The controller comes back with the same objects: it confirms the
        # version, and the source says so.
        controller = self.start_controller()
        wait_for(lambda: (self.serving(admin) or {}).get("source") == "controller",
                 what="the controller confirming the cached version")
        self.assertEqual(self.serving(admin)["version"], version)
        self.assertEqual(http_get(admin, "/readyz")[1],
                         f"ready: version {version}, source controller\n")

        # A change reaches the proxy and its cache.
        two = Backend("two")
        self.addCleanup(two.close)
        self.write_objects([("two", two.port)])
        wait_for(lambda: (self.serving(admin) or {}).get("version") not in (None, version),
                 what="the new version")
        new_version = self.serving(admin)["version"]
        wait_for(lambda: self.cached_version() == new_version, what="the cache rewritten")
        self.assertEqual(http_get(port, "/x"), (200, "two"))
        self.assertEqual(second.poll(), None)

    def test_a_controller_that_accepts_but_never_answers(self):
        # The first attempt is cut after a second: a hung controller (or an
        # address that drops packets) does not keep the cache from serving.
        controller = self.start_controller()
        first, _, admin = self.start_proxy("proxy-first")
        wait_for(lambda: self.serving(admin) is not None, what="a snapshot")
        version = self.serving(admin)["version"]
        wait_for(lambda: self.cached_version() == version, what="the cache file")
        self.stop(first)
        self.stop(controller)
        hung = socket.socket()
        self.addCleanup(hung.close)
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)  # the kernel completes handshakes; nothing ever answers
        self.grpc_port = hung.getsockname()[1]
        started = time.monotonic()
        proxy, port, admin = self.start_proxy("proxy-hung")
        wait_for(lambda: http_get(admin, "/readyz")[0] == 200, timeout=10,
                 what="the proxy ready from its cache")
        self.assertLess(time.monotonic() - started, 5.0)
        self.assertEqual(self.serving(admin), {"version": version, "source": "cache"})
        self.assertEqual(http_get(port, "/x"), (200, "one"))
        self.assertIsNone(proxy.poll())

    def test_a_bad_cache_file_is_logged_and_ignored(self):
        # A good file first, to cut and edit.
        controller = self.start_controller()
        first, _, admin = self.start_proxy("proxy-good")
        wait_for(lambda: self.serving(admin) is not None, what="a snapshot")
        version = self.serving(admin)["version"]
        wait_for(lambda: self.cached_version() == version, what="the cache file")
        self.stop(first)
        self.stop(controller)
        with open(self.cache, "rb") as f:
            good = f.read()
        edited = good.replace(b'"port": ' + str(self.one.port).encode(), b'"port": 1')
        self.assertNotEqual(edited, good)
        cases = {
            "truncated": good[: len(good) // 2],
            "empty": b"",
            "braces": b"{}",
            "garbage": bytes(range(256)) * 8,
            "edited": edited,  # does not hash to its version
        }
        for name, content in cases.items():
            with self.subTest(case=name):
                with open(self.cache, "wb") as f:
                    f.write(content)
                proxy, port, admin = self.start_proxy("proxy-" + name)
                wait_for(lambda: "snapshot cache ignored" in self.log_of("proxy-" + name),
                         what="the log line")
                self.assertEqual(http_get(admin, "/readyz")[0], 503)
                self.assertEqual(http_get(port, "/x")[0], 503)
                self.assertIsNone(proxy.poll())
                self.assertIn("kwd_proxy_snapshot_cache_errors_total 1",
                              http_get(admin, "/metrics")[1])
                self.stop(proxy)
        # ... and the controller, when it answers, replaces it.
        controller = self.start_controller()
        proxy, port, admin = self.start_proxy("proxy-recovers")
        wait_for(lambda: (self.serving(admin) or {}).get("source") == "controller",
                 what="the controller's snapshot")
        self.assertEqual(http_get(port, "/x"), (200, "one"))
        wait_for(lambda: self.cached_version() == version, what="the cache rewritten")

    def test_a_cache_that_cannot_be_written_does_not_stop_serving(self):
        self.start_controller()
        proxy, port, admin = self.start_proxy("proxy-unwritable")
        wait_for(lambda: self.serving(admin) is not None, what="a snapshot")
        first = self.serving(admin)["version"]
        wait_for(lambda: self.cached_version() == first, what="the cache file")
        # A directory where the file goes: the rename fails (root ignores modes).
        os.remove(self.cache)
        os.makedirs(os.path.join(self.cache, "taken"))
        two = Backend("two")
        self.addCleanup(two.close)
        self.write_objects([("two", two.port)])
        wait_for(lambda: "cannot write the snapshot cache" in self.log_of("proxy-unwritable"),
                 what="the log line")
        self.assertEqual(http_get(port, "/x"), (200, "two"))
        self.assertIn("kwd_proxy_snapshot_cache_errors_total 1", http_get(admin, "/metrics")[1])
        # Writable again: the next snapshot is written.
        shutil.rmtree(self.cache)
        self.write_objects([("one", self.one.port), ("two", two.port)])
        wait_for(lambda: self.cached_version() not in (None, first), what="the cache rewritten")
        self.assertEqual(self.cached_version(), self.serving(admin)["version"])
        self.assertIsNone(proxy.poll())

    def test_no_cache_file_yet(self):
        proxy, port, admin = self.start_proxy("proxy-none")
        wait_for(lambda: "no snapshot cache yet" in self.log_of("proxy-none"), what="the log line")
        self.assertEqual(http_get(admin, "/readyz")[0], 503)
        self.start_controller()
        wait_for(lambda: http_get(admin, "/readyz")[0] == 200, what="ready")
        wait_for(lambda: self.cached_version() is not None, what="the cache file")

    def test_usage_errors(self):
        snapshot = os.path.join(self.dir, "s.json")
        with open(snapshot, "w") as f:
            f.write("{}")
        for argv, want in (
            (["--snapshot", snapshot, "--snapshot-cache", self.cache],
             "--snapshot-cache goes with --controller"),
            (["--controller", "127.0.0.1:1", "--snapshot-cache", "/nonexistent/kwd/cache.json"],
             "--snapshot-cache /nonexistent/kwd/cache.json: cannot write to /nonexistent/kwd"),
        ):
            result = subprocess.run([PROXY, "serve", "--listen", "127.0.0.1:0"] + argv,
                                    capture_output=True, text=True, timeout=30, check=False)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(want, result.stderr)
        help_text = subprocess.run([PROXY, "serve", "--help"], capture_output=True, text=True,
                                   timeout=30, check=False).stdout
        self.assertIn("  --snapshot-cache FILE ", help_text)


if __name__ == "__main__":
    unittest.main()
