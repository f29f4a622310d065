"""SAP modification rules (icm/HTTP/mod_<xx>) applied by a real kwd-proxy
(issue 24 item 2): black-box through the proxy, with the snapshot compiled by
the real kwd-controller from UrlMappings carrying rule files.

Backends: a recorder (test_forwarding_headers.Recorder: answers each request
with the request line and fields it received) for the ERP system, and the
project's kwd-demo-backend (answers "<instance> <kind> <method> <target>")
for the QAS system.

What is checked:
- a rewrite: the server sees the new path and query (qsappend), and the
  rewritten path is what the permission table and URL mapping see;
- redirects with CODE, force HTTPS on the plain listener (query kept), the
  bare root to the Fiori launchpad;
- forbidden with a negated pattern (403 EPERM), gone (410);
- request headers set and removed (the server sees it), response headers set
  and removed (the client sees it); two rule files chained in order;
- [break] against SAP's catch-all trap;
- system selection by x-sap-webdisp-target-sid / ~webdisp_target_sid between
  two UrlMappings on one host; an unknown SID is 503 EDISPATCHERR;
- HTTP/2 (h2c): rewrite, response header, redirect;
- hostile requests: a rewrite climbing above "/" (400), a rewrite to an
  absolute URL (500), a restart loop (500), a header that grows past the bound
  (500), CR/LF never reaching the wire, a Location with spaces and quotes
  escaped; the proxy keeps serving;
- explain (CLI and admin API) lists every rule that fired with its file,
  line, command and the URL and headers after it, and the decision on the
  rewritten request.

Needs KWD_PROXY, KWD_CONTROLLER and KWD_DEMO_BACKEND (set by ctest); Debian's
python3 with python3-h2, and openssl.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_forwarding_headers import Recorder, read_response, values  # noqa: E402
from test_http2 import H2Client, Proxy, run  # noqa: E402

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")
DEMO_BACKEND = os.environ.get("KWD_DEMO_BACKEND", "")

OBJECTS = r"""
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: erp}}
spec:
  kind: abap
  healthCheck: {{intervalSeconds: 3600}}
  backend:
    staticServers: [{{name: erp1, address: 127.0.0.1, port: {erp}}}]
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: qas}}
spec:
  kind: abap
  healthCheck: {{intervalSeconds: 3600}}
  backend:
    staticServers: [{{name: qas1_QAS_00, address: 127.0.0.1, port: {qas}}}]
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: erp, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  hosts: [erp.example.test]
  system: {{sid: ERP}}
  defaultRootHandler: abap
  defaultGroups: {{abap: erp}}
  rules:
    - {{prefix: /sap/, kind: abap, logonGroup: erp}}
  permissions:
    - {{action: deny, pattern: /sap/denied/*}}
    - {{action: permit, pattern: "*"}}
  modifications:
    - prefix: /
      rules: |
        # the system by a header the client sends (SAP's host-based choice, shortened)
        if %{{HTTP_X_TARGET}} stricmp "qas"
        SetHeader x-sap-webdisp-target-sid QAS [break]
        if %{{HTTP_X_TARGET}} stricmp "zzz"
        SetHeader ~webdisp_target_sid ZZZ [break]
        RegIRedirectUrl ^/$ /sap/bc/ui2/flp [CODE=permanent]
        RegIRedirectUrl ^/old/(.*) /sap/new/$1 [CODE=307]
        RegIRewriteUrl ^/short/(.*) /sap/bc/long/$1?rewritten=1 [qsappend]
        RegIRewriteUrl ^/alias-denied$ /sap/denied/x
        RegIRewriteUrl ^/dots/(.*) /sap/$1/../../../etc
        RegIRewriteUrl ^/up/(.*) /sap/$1/../public/
        RegIRewriteUrl ^/abs/(.*) http://evil.example/$1
        RegIRewriteUrl ^/loop/(.*) /loop/$1 [restart]
        if %{{PATH}} regmatch ^/grow/ begin
        AppendHeader X-Grow %{{HTTP_X_GROW}}
        AppendHeader X-Grow %{{HTTP_X_GROW}}
        AppendHeader X-Grow %{{HTTP_X_GROW}}
        AppendHeader X-Grow %{{HTTP_X_GROW}}
        end
        RegIForbiddenUrl !^/(sap|grow)/ -
        RegIGoneUrl ^/sap/retired/ -
        SetHeader X-Rule-Added from-rule
        SetHeader X-Path %{{PATH}}
        SetHeader X-Peer %{{REMOTE_ADDR}}:%{{REMOTE_PORT}}
        SetHeader X-Local %{{SERVER_ADDR}}
        RemoveHeader X-Remove-Me
        SetResponseHeader X-Frame-Options SAMEORIGIN
        RemoveResponseHeader Content-Type
    - prefix: /sap/
      actions:
        - {{op: SetHeader, header: X-Second, value: "after %{{HTTP_X_RULE_ADDED}}"}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: qas, creationTimestamp: "2026-02-01T00:00:00Z"}}
spec:
  hosts: [erp.example.test]
  system: {{sid: QAS}}
  defaultGroups: {{abap: qas}}
  rules:
    - {{prefix: /sap/, kind: abap, logonGroup: qas}}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: secure, creationTimestamp: "2026-03-01T00:00:00Z"}}
spec:
  hosts: [secure.example.test]
  defaultGroups: {{abap: erp}}
  rules:
    - {{prefix: /sap/, kind: abap, logonGroup: erp}}
  modifications:
    - rules: |
        # plain-HTTP requests go to the same host and path over HTTPS
        if %{{SERVER_PROTOCOL}} !stricmp "https"
        RegRedirectUrl ^(.*)$ https://%{{HTTP_HOST}}$1 [CODE=permanent]
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: trap, creationTimestamp: "2026-04-01T00:00:00Z"}}
spec:
  hosts: [trap.example.test]
  defaultGroups: {{abap: erp}}
  rules:
    - {{prefix: /sap/, kind: abap, logonGroup: erp}}
  modifications:
    - rules: |
        # SAP's warning: a rewrite does not stop processing, the catch-all still fires
        RegIRewriteUrl ^/dtcsld(.*) /sap/dtc$1
        RegIRewriteUrl ^/fixed(.*) /sap/fixed$1 [break]
        RegForbiddenUrl /(.*) -
"""


class DemoBackend:
    def __init__(self, instance):
        self.process = subprocess.Popen(
            [DEMO_BACKEND, "--listen", "127.0.0.1:0", "--instance", instance],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        assert line.startswith("listening "), line
        self.port = int(line.rsplit(":", 1)[1])

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process.stdout.close()


class ModificationRules(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PROXY or not CONTROLLER or not DEMO_BACKEND:
            raise unittest.SkipTest("set KWD_PROXY, KWD_CONTROLLER and KWD_DEMO_BACKEND")
        cls.dir = tempfile.mkdtemp(prefix="kwd-modification-")
        os.makedirs(os.path.join(cls.dir, "certs"))
        run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            "-keyout certs/erp.key -out certs/erp.crt -days 2 -subj /CN=erp.example.test "
            "-addext subjectAltName=DNS:erp.example.test,DNS:secure.example.test", cls.dir)
        cls.erp = Recorder()
        cls.qas = DemoBackend("qas1_QAS_00")
        objects = os.path.join(cls.dir, "objects")
        os.makedirs(objects)
        with open(os.path.join(objects, "objects.yaml"), "w") as f:
            f.write(OBJECTS.format(erp=cls.erp.port, qas=cls.qas.port))
        validated = subprocess.run([CONTROLLER, "validate", "-f", objects],
                                   capture_output=True, text=True, timeout=60)
        assert validated.returncode == 0, validated.stdout + validated.stderr
        compiled = subprocess.run([CONTROLLER, "compile", "--source=dir:" + objects],
                                  capture_output=True, text=True, timeout=60)
        assert compiled.returncode == 0, compiled.stdout + compiled.stderr
        cls.snapshot = os.path.join(cls.dir, "snapshot.json")
        with open(cls.snapshot, "w") as f:
            f.write(compiled.stdout)
        cls.proxy = Proxy(cls.dir, cls.snapshot, ["--h2c"], "main")

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.erp.close()
        cls.qas.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # ---- helpers ----

    def send(self, path, host="erp.example.test", headers=(), tls=False, method="GET"):
        """One request on a fresh connection: (status, fields, body bytes)."""
        sock = socket.create_connection(
            ("127.0.0.1", self.proxy.tls_port if tls else self.proxy.port), timeout=10)
        if tls:
            import ssl
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["http/1.1"])
            sock = ctx.wrap_socket(sock, server_hostname=host)
        self.addCleanup(sock.close)
        lines = [f"{method} {path} HTTP/1.1", "Host: " + host] + list(headers)
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        return read_response(sock)

    def forwarded(self, path, **kw):
        """What the ERP recorder received for a request answered 200."""
        status, fields, body = self.send(path, **kw)
        self.assertEqual(status, 200, body)
        return json.loads(body), fields

    # ---- rewrites, and the order against permissions and URL mapping ----

    def test_rewrite_changes_path_and_query_the_server_sees(self):
        received, _ = self.forwarded("/short/a/b?x=1")
        self.assertEqual(received["line"], "GET /sap/bc/long/a/b?rewritten=1&x=1 HTTP/1.1")

    def test_the_rewritten_path_meets_the_permission_table(self):
        # Rules run before the permission table: a rewrite into a denied
        # subtree is denied, like the same path received.
        for path in ("/alias-denied", "/sap/denied/x"):
            status, fields, _ = self.send(path)
            self.assertEqual(status, 403, path)
            self.assertEqual(values(fields, "X-Kwd-Error"), ["EPERM"])

    # ---- answers made by rules ----

    def test_redirect_with_code_and_the_root_to_the_launchpad(self):
        status, fields, _ = self.send("/old/page?q=1")
        self.assertEqual(status, 307)
        self.assertEqual(values(fields, "Location"), ["/sap/new/page?q=1"])
        status, fields, _ = self.send("/")
        self.assertEqual(status, 301)
        self.assertEqual(values(fields, "Location"), ["/sap/bc/ui2/flp"])

    def test_force_https_redirects_the_plain_listener_only(self):
        status, fields, _ = self.send("/sap/bc/gui?sap-client=100", host="secure.example.test")
        self.assertEqual(status, 301)
        self.assertEqual(values(fields, "Location"),
                         ["https://secure.example.test/sap/bc/gui?sap-client=100"])
        status, _, body = self.send("/sap/bc/gui?sap-client=100", host="secure.example.test",
                                    tls=True)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["line"], "GET /sap/bc/gui?sap-client=100 HTTP/1.1")

    def test_forbidden_by_a_negated_pattern_and_gone(self):
        status, fields, _ = self.send("/etc/passwd")
        self.assertEqual(status, 403)
        self.assertEqual(values(fields, "X-Kwd-Error"), ["EPERM"])
        status, _, _ = self.send("/sap/retired/app")
        self.assertEqual(status, 410)

    def test_break_escapes_the_catch_all_trap(self):
        status, _, _ = self.send("/dtcsld/x", host="trap.example.test")
        self.assertEqual(status, 403)  # rewritten, then the catch-all fired
        received, _ = self.forwarded("/fixed/x", host="trap.example.test")
        self.assertEqual(received["line"], "GET /sap/fixed/x HTTP/1.1")

    # ---- headers ----

    def test_request_headers_set_removed_and_chained_across_files(self):
        received, fields = self.forwarded("/sap/bc/x", headers=["X-Remove-Me: secret",
                                                                "X-Keep: kept"])
        got = received["fields"]
        self.assertEqual(values(got, "X-Rule-Added"), ["from-rule"])
        self.assertEqual(values(got, "X-Remove-Me"), [])
        self.assertEqual(values(got, "X-Keep"), ["kept"])
        # The second file (prefix /sap/) ran after the first and saw its header.
        self.assertEqual(values(got, "X-Second"), ["after from-rule"])
        # Response edits: set and removed.
        self.assertEqual(values(fields, "X-Frame-Options"), ["SAMEORIGIN"])
        self.assertEqual(values(fields, "Content-Type"), [])

    def test_connection_variables(self):
        """%{REMOTE_PORT} is the client socket's port, %{SERVER_ADDR} the
        address it reached; the same over HTTP/2."""
        sock = socket.create_connection(("127.0.0.1", self.proxy.port), timeout=10)
        self.addCleanup(sock.close)
        sock.sendall(b"GET /sap/bc/x HTTP/1.1\r\nHost: erp.example.test\r\n\r\n")
        status, _, body = read_response(sock)
        self.assertEqual(status, 200, body)
        got = json.loads(body)["fields"]
        self.assertEqual(values(got, "X-Peer"), ["127.0.0.1:%d" % sock.getsockname()[1]])
        self.assertEqual(values(got, "X-Local"), ["127.0.0.1"])
        # A second request on the connection: the same (asked again, not stale).
        sock.sendall(b"GET /sap/bc/y HTTP/1.1\r\nHost: erp.example.test\r\n\r\n")
        status, _, body = read_response(sock)
        self.assertEqual(values(json.loads(body)["fields"], "X-Peer"),
                         ["127.0.0.1:%d" % sock.getsockname()[1]])
        c = H2Client(self.proxy.port, tls=False)
        self.addCleanup(c.close)
        response = c.get("/sap/bc/h2", authority="erp.example.test")
        self.assertEqual(response["headers"][":status"], "200")
        got = json.loads(bytes(response["data"]))["fields"]
        self.assertEqual(values(got, "X-Peer"), ["127.0.0.1:%d" % c.sock.getsockname()[1]])
        self.assertEqual(values(got, "X-Local"), ["127.0.0.1"])
        # Behind a PROXY-protocol balancer: the header's client address and
        # port; SERVER_ADDR stays the proxy's own.
        proxied = Proxy(self.dir, self.snapshot, ["--proxy-protocol", "http"], "proxied")
        self.addCleanup(proxied.stop)
        sock = socket.create_connection(("127.0.0.1", proxied.port), timeout=10)
        self.addCleanup(sock.close)
        sock.sendall(b"PROXY TCP4 198.51.100.4 127.0.0.1 5555 80\r\n"
                     b"GET /sap/bc/pp HTTP/1.1\r\nHost: erp.example.test\r\n\r\n")
        status, _, body = read_response(sock)
        self.assertEqual(status, 200, body)
        got = json.loads(body)["fields"]
        self.assertEqual(values(got, "X-Peer"), ["198.51.100.4:5555"])
        self.assertEqual(values(got, "X-Local"), ["127.0.0.1"])

    # ---- system selection ----

    def test_system_selection_by_target_sid(self):
        received, _ = self.forwarded("/sap/bc/x")
        self.assertEqual(received["line"], "GET /sap/bc/x HTTP/1.1")  # ERP: the recorder
        status, _, body = self.send("/sap/bc/x", headers=["X-Target: qas"])
        self.assertEqual(status, 200, body)
        self.assertTrue(body.startswith(b"qas1_QAS_00 abap GET /sap/bc/x"), body)
        status, fields, _ = self.send("/sap/bc/x", headers=["X-Target: zzz"])
        self.assertEqual(status, 503)
        self.assertEqual(values(fields, "X-Kwd-Error"), ["EDISPATCHERR"])

    # ---- HTTP/2 ----

    def test_http2_rewrite_response_header_and_redirect(self):
        c = H2Client(self.proxy.port, tls=False)
        self.addCleanup(c.close)
        response = c.get("/short/h2?y=2", authority="erp.example.test")
        self.assertEqual(response["headers"][":status"], "200")
        self.assertEqual(json.loads(bytes(response["data"]))["line"],
                         "GET /sap/bc/long/h2?rewritten=1&y=2 HTTP/1.1")
        self.assertEqual(response["headers"].get("x-frame-options"), "SAMEORIGIN")
        self.assertNotIn("content-type", response["headers"])
        response = c.get("/old/x", authority="erp.example.test")
        self.assertEqual(response["headers"][":status"], "307")
        self.assertEqual(response["headers"]["location"], "/sap/new/x")
        response = c.get("/sap/bc/x", authority="erp.example.test",
                         headers=[("x-target", "qas")])
        self.assertTrue(bytes(response["data"]).startswith(b"qas1_QAS_00"), response)

    # ---- hostile requests ----

    def test_hostile_requests(self):
        # A rewrite that climbs above "/": 400, nothing forwarded.
        status, _, _ = self.send("/dots/x")
        self.assertEqual(status, 400)
        # Dot segments a rewrite makes are resolved before routing and forwarding.
        received, _ = self.forwarded("/up/x")
        self.assertEqual(received["line"], "GET /sap/public/ HTTP/1.1")
        # A rewrite to an absolute URL is no path: 500, never a request elsewhere.
        status, fields, _ = self.send("/abs/x")
        self.assertEqual(status, 500)
        self.assertEqual(values(fields, "X-Kwd-Error"), ["EINTERN"])
        # A restart loop ends.
        status, _, _ = self.send("/loop/x")
        self.assertEqual(status, 500)
        # A header the rules double past 64 KiB.
        status, _, _ = self.send("/grow/x", headers=["X-Grow: " + "g" * 8000])
        self.assertEqual(status, 500)
        # CR/LF: encoded in the path it is refused before any rule (400); in
        # a redirect's Location escapes are kept encoded.
        status, _, _ = self.send("/sap/a%0d%0aX-Evil:%20yes")
        self.assertEqual(status, 400)
        status, fields, _ = self.send("/old/a%20b%22c")
        self.assertEqual(status, 307)
        self.assertEqual(values(fields, "Location"), ["/sap/new/a%20b%22c"])
        # A path with spaces and quotes copied into a header by %{PATH}.
        received, _ = self.forwarded("/sap/a%20b%22c")
        self.assertEqual(values(received["fields"], "X-Path"), ['/sap/a b"c'])
        self.assertEqual([n for n, _ in received["fields"] if n.lower() == "x-evil"], [])
        # A request of 99 fields to which the rules add three: more than the
        # 100 a head may have: 500, not a field silently dropped.
        status, _, _ = self.send("/sap/bc/x", headers=[f"X-F{i}: v" for i in range(98)])
        self.assertEqual(status, 500)
        # Still serving.
        received, _ = self.forwarded("/short/ok")
        self.assertEqual(received["line"], "GET /sap/bc/long/ok?rewritten=1 HTTP/1.1")
        self.assertGreaterEqual(
            self.proxy.metric("kwd_proxy_modification_requests_total", outcome="error"), 4)

    # ---- explain ----

    def test_explain_cli_lists_each_rule_and_the_final_decision(self):
        result = subprocess.run(
            [PROXY, "explain", "--snapshot", self.snapshot,
             "--url", "http://erp.example.test/short/a?x=1", "--header", "X-Remove-Me: 1"],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        line = json.loads(result.stdout.splitlines()[0])
        self.assertEqual(line["url"], "/sap/bc/long/a?rewritten=1&x=1")
        self.assertEqual(line["group"], "default/erp")
        self.assertEqual(line["rule"], "/sap/")
        self.assertEqual(line["path"], "/sap/bc/long/a")
        steps = line["modifications"]
        commands = [s["command"].split(" ")[0] for s in steps]
        self.assertEqual(commands[:3], ["RegIRewriteUrl", "SetHeader", "SetHeader"], steps)
        self.assertEqual(steps[0]["source"], "default/erp spec.modifications[0]")
        self.assertEqual(steps[0]["url"], "/sap/bc/long/a?rewritten=1&x=1")
        self.assertGreater(steps[0]["line"], 1)
        removed = [s for s in steps if s["command"].startswith("RemoveHeader")][0]
        self.assertNotIn("x-remove-me: 1", [h.lower() for h in removed["headers"]])
        self.assertEqual(steps[-1]["source"], "default/erp spec.modifications[1]")
        self.assertIn("x-second: after from-rule", [h.lower() for h in steps[-1]["headers"]])

    def test_explain_cli_shows_a_redirect_and_a_system(self):
        result = subprocess.run(
            [PROXY, "explain", "--snapshot", self.snapshot,
             "--url", "http://secure.example.test/sap/x?a=1"],
            capture_output=True, text=True, timeout=30)
        line = json.loads(result.stdout.splitlines()[0])
        self.assertEqual(line["reason"], "rule:redirect")
        self.assertEqual(line["status"], 301)
        self.assertEqual(line["location"], "https://secure.example.test/sap/x?a=1")
        result = subprocess.run(
            [PROXY, "explain", "--snapshot", self.snapshot,
             "--url", "http://erp.example.test/sap/bc/x", "--header", "X-Target: qas"],
            capture_output=True, text=True, timeout=30)
        line = json.loads(result.stdout.splitlines()[0])
        self.assertEqual(line["system"], "QAS")
        self.assertEqual(line["group"], "default/qas")

    def test_admin_explain_shows_the_rules(self):
        query = urllib.parse.urlencode({"url": "http://erp.example.test/short/z"})
        with urllib.request.urlopen(
                f"http://127.0.0.1:{self.proxy.admin_port}/admin/api/explain?{query}",
                timeout=10) as r:
            body = json.loads(r.read())
        self.assertEqual(body["url"], "/sap/bc/long/z?rewritten=1")
        self.assertEqual(body["modifications"][0]["command"].split(" ")[0], "RegIRewriteUrl")
        self.assertEqual(body["group"], "default/erp")


class ImportWritesSystems(unittest.TestCase):
    """`kwd-controller import` writes spec.system.sid when a profile has
    several systems: the output validates, and a rule file that sets the
    target SID routes to the other system's groups (explain)."""

    def test_import_with_two_systems_validates_and_routes_by_sid(self):
        if not PROXY or not CONTROLLER:
            self.skipTest("set KWD_PROXY and KWD_CONTROLLER")
        directory = tempfile.mkdtemp(prefix="kwd-import-sid-")
        self.addCleanup(shutil.rmtree, directory, True)
        with open(os.path.join(directory, "sapwebdisp.pfl"), "w") as f:
            f.write("icm/server_port_0 = PROT=HTTP,PORT=8000\n"
                    "wdisp/system_0 = SID=ERP, MSHOST=erpms.example.com, MSPORT=8101, "
                    "SRCVHOST=erp.example.com\n"
                    "wdisp/system_1 = SID=QAS, MSHOST=qasms.example.com, MSPORT=8102, "
                    "SRCVHOST=qas.example.com\n"
                    "icm/HTTP/mod_0 = PREFIX=/, FILE=rules.txt\n")
        with open(os.path.join(directory, "rules.txt"), "w") as f:
            f.write("if %{HTTP_HOST} regimatch ^alias\\.example\\.com\n"
                    "SetHeader x-sap-webdisp-target-sid QAS [break]\n")
        out = os.path.join(directory, "out")
        imported = subprocess.run([CONTROLLER, "import", "--profile",
                                   os.path.join(directory, "sapwebdisp.pfl"), "--files",
                                   directory, "-o", out],
                                  capture_output=True, text=True, timeout=60)
        self.assertIn(imported.returncode, (0, 3), imported.stderr)
        resources = os.path.join(out, "resources")
        with open(os.path.join(resources, "urlmappings.yaml")) as f:
            mappings = f.read()
        self.assertIn("sid: ERP", mappings)
        self.assertIn("sid: QAS", mappings)
        validated = subprocess.run([CONTROLLER, "validate", "--source=dir:" + resources],
                                   capture_output=True, text=True, timeout=60)
        self.assertEqual(validated.returncode, 0, validated.stdout + validated.stderr)
        self.assertNotIn("Unsupported", validated.stdout + validated.stderr)
        # A host of no system: the rule's SID chooses QAS's mapping (on its own host).
        compiled = subprocess.run([CONTROLLER, "compile", "--source=dir:" + resources],
                                  capture_output=True, text=True, timeout=60)
        self.assertEqual(compiled.returncode, 0, compiled.stderr)
        snapshot = os.path.join(directory, "snapshot.json")
        with open(snapshot, "w") as f:
            f.write(compiled.stdout)
        explained = subprocess.run(
            [PROXY, "explain", "--snapshot", snapshot, "--url",
             "http://alias.example.com/sap/bc/gui/x"],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(explained.returncode, 0, explained.stderr)
        line = json.loads(explained.stdout.splitlines()[0])
        self.assertEqual(line["system"], "QAS", line)
        # QAS's groups (its URL map is not polled yet: the default java group).
        self.assertEqual(line["group"], "default/qas-j2ee", line)


if __name__ == "__main__":
    unittest.main(verbosity=2)
