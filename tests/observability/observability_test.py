#!/usr/bin/python3
"""Observability of the built binaries: the Grafana dashboard and the alert rules
resolve against what a real kwd-proxy and kwd-controller export, the rules pass
`promtool check rules` / `promtool test rules`, the metrics pass `promtool check
metrics`, and --log-format json writes JSON log and access-log lines with the
request id and trace id.

Starts kwd-controller (directory source) and kwd-proxy --controller on loopback
with a Python backend. Debian's python3 with python3-yaml; helm from
scripts/fetch-helm.sh; promtool from Debian's prometheus package.
ctest runs each TestCase class as its own test (argument: the class name).
"""
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import yaml

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BINARY_DIR = os.environ.get("KWD_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
PROXY = os.path.join(BINARY_DIR, "kwd-proxy")
CONTROLLER = os.path.join(BINARY_DIR, "kwd-controller")
DASHBOARD = os.path.join(SOURCE_DIR, "deploy", "grafana", "kwd.json")
CHART = os.path.join(SOURCE_DIR, "deploy", "helm", "kwd")
RULES_TEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rules_test.yaml")
# Labels Prometheus adds to every scraped series (target labels).
# Labels Prometheus adds to every series of a target; "release" comes from the
# chart's ServiceMonitor/PodMonitor relabeling.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint",
                 "release"}

OBJECTS = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: public, namespace: erp}
spec:
  kind: java
  healthCheck: {path: /health, intervalSeconds: 1}
  backend:
    staticServers:
      - {name: recorder, address: 127.0.0.1, port: %d}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: all, namespace: erp}
spec:
  hosts: []
  defaultRootHandler: java
  defaultGroups: {java: public}
---
# Polls a message server that is not there: the refresh-error series the
# SapSystem alert reads is exported.
apiVersion: dispatch.kwd.io/v1alpha1
kind: SapSystem
metadata: {name: gone, namespace: erp}
spec:
  sid: GON
  messageServer: {host: 127.0.0.1, httpPort: %d}
  refreshIntervalSeconds: 1
"""


def wait_for(condition, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


def http_get(port, path, headers=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)
    except OSError:
        return 0, "", {}


class Backend:
    """Answers every request; /status/NNN answers NNN. Records request headers."""

    def __init__(self):
        self.requests = []
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                backend.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                status = 200
                match = re.match(r"/status/(\d{3})$", self.path)
                if match:
                    status = int(match.group(1))
                body = b"ok\n"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Cluster:
    """kwd-controller (dir source) + kwd-proxy --controller, JSON logs, a backend."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kwd-observability-")
        self.backend = Backend()
        objects = os.path.join(self.dir, "objects")
        os.makedirs(objects)
        with open(os.path.join(objects, "objects.yaml"), "w") as f:
            f.write(OBJECTS % (self.backend.port, free_port()))
        # A serving certificate, so that the certificate-expiry series exists.
        self.cert_dir = os.path.join(self.dir, "certs")
        os.makedirs(self.cert_dir)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                        "/CN=erp.example.com", "-keyout", os.path.join(self.cert_dir, "erp.key"),
                        "-out", os.path.join(self.cert_dir, "erp.crt")],
                       check=True, capture_output=True, timeout=60)
        self.grpc_port = free_port()
        self.controller_admin = free_port()
        self.proxy_admin = free_port()
        self.controller_log = os.path.join(self.dir, "controller.log")
        self.proxy_log = os.path.join(self.dir, "proxy.log")
        self.access_log = os.path.join(self.dir, "access.log")
        self.processes = []
        self.controller = self.start(
            [CONTROLLER, "serve", "--source=dir:" + objects,
             "--grpc-listen", f"127.0.0.1:{self.grpc_port}",
             "--admin-listen", f"127.0.0.1:{self.controller_admin}",
             "--poll-interval", "50ms", "--log-format", "json"], self.controller_log)
        self.proxy = self.start(
            [PROXY, "serve", "--controller", f"127.0.0.1:{self.grpc_port}",
             "--listen", "127.0.0.1:0", "--admin-listen", f"127.0.0.1:{self.proxy_admin}",
             "--tls-listen", "127.0.0.1:0", "--tls-cert-dir", self.cert_dir,
             "--workers", "1", "--access-log", self.access_log, "--log-format", "json"],
            self.proxy_log)
        line = self.proxy.stdout.readline()
        assert line.startswith("listening "), "kwd-proxy did not start: " + line
        self.port = int(line.rsplit(":", 1)[1])
        wait_for(lambda: http_get(self.proxy_admin, "/readyz")[0] == 200, what="proxy ready")
        wait_for(lambda: 'kwd_proxy_server_up{group="erp/public",server="recorder"} 1' in
                 self.metrics(self.proxy_admin), what="server up")
        wait_for(lambda: "kwd_controller_sapsystem_refresh_errors_total{" in
                 self.metrics(self.controller_admin), what="a failed SapSystem poll")

    def start(self, argv, log_path):
        log = open(log_path, "w")
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        self.processes.append((process, log))
        return process

    def metrics(self, port):
        status, body, _ = http_get(port, "/metrics")
        return body if status == 200 else ""

    def close(self):
        for process, log in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()
            log.close()
        self.backend.close()
        shutil.rmtree(self.dir, ignore_errors=True)


_cluster = None


def cluster():
    """One cluster per test process (each ctest test is one process)."""
    global _cluster
    if _cluster is None:
        for binary in (PROXY, CONTROLLER):
            if not os.access(binary, os.X_OK):
                raise unittest.SkipTest(binary + " is not built")
        _cluster = Cluster()
    return _cluster


def tearDownModule():
    if _cluster is not None:
        _cluster.close()


# ---- metric names and labels ----

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? \S+$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def exported(expositions):
    """{sample name: set of label names} of the scraped texts."""
    names = {}
    for text in expositions:
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = SAMPLE.match(line)
            assert m, "unparsable sample line: " + line
            labels = set(LABEL.findall(m.group(3) or ""))
            names.setdefault(m.group(1), set()).update(labels)
    return names


PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "unless", "and",
                   "or", "bool", "offset", "inf", "nan"}


def referenced(expr):
    """(metric name, selector label names) pairs and the grouping label names of a query."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # string literals
    text = re.sub(r"\$\{?[a-zA-Z_]+\}?", "", text)             # Grafana variables
    text = re.sub(r"\[[^\]]*\]", "", text)                     # range and subquery windows
    grouping = set()
    for m in re.finditer(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", text):
        grouping.update(label.strip() for label in m.group(1).split(",") if label.strip())
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    metrics = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", text):
        name, selector = m.group(1), m.group(2) or ""
        after = text[m.end():].lstrip()
        if name.lower() in PROMQL_KEYWORDS or (not selector and after.startswith("(")):
            continue
        if re.match(r"^[0-9]", name):
            continue
        labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", selector))
        metrics.append((name, labels))
    return metrics, grouping


def unresolved(expr, names):
    """What in `expr` the scraped metrics do not have (empty: all resolves)."""
    problems = []
    metrics, grouping = referenced(expr)
    if not metrics:
        problems.append("no metric in " + expr)
    available = set(TARGET_LABELS)
    for name, labels in metrics:
        if name not in names:
            problems.append(f"{name} is not exported")
            continue
        available |= names[name]
        missing = labels - names[name] - TARGET_LABELS
        if missing:
            problems.append(f"{name} has no label {sorted(missing)}")
    missing = grouping - available
    if missing:
        problems.append(f"grouping by {sorted(missing)}, which none of its metrics has")
    return problems


def scrape_after_traffic():
    c = cluster()
    # Traffic of every kind the panels show: success, exact 5xx, the proxy's own reply.
    assert http_get(c.port, "/sap/bc/ping")[0] == 200
    assert http_get(c.port, "/status/502")[0] == 502
    return exported([c.metrics(c.proxy_admin), c.metrics(c.controller_admin)])


def dashboard_queries(dashboard):
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries.append((panel["title"], target["expr"]))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            m = re.match(r"label_values\((\w+),\s*(\w+)\)", variable["definition"])
            assert m, variable["definition"]
            queries.append(("variable " + variable["name"], f"{m.group(1)}{{{m.group(2)}!=\"\"}}"))
    return queries


def helm_render(*args):
    helm = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "fetch-helm.sh")], check=True,
                          capture_output=True, text=True).stdout.strip()
    result = subprocess.run([helm, "template", "wd", CHART, "--namespace", "sap-lb", *args],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def rendered_rules():
    docs = helm_render("--set", "prometheusRule.enabled=true")
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return rule["spec"]


def promtool(*args, cwd=None):
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd)


class Dashboard(unittest.TestCase):
    def test_every_query_resolves_against_the_binaries(self):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        names = scrape_after_traffic()
        queries = dashboard_queries(dashboard)
        self.assertGreater(len(queries), 20)
        problems = [f"{title}: {p}" for title, expr in queries for p in unresolved(expr, names)]
        self.assertEqual(problems, [])

    def test_panels_cover_the_issue(self):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        exprs = " ".join(expr for _, expr in dashboard_queries(dashboard))
        for metric in ("kwd_proxy_requests_total", "kwd_proxy_request_duration_seconds_bucket",
                       "kwd_proxy_server_requests_total", "kwd_proxy_sticky_routed_total",
                       "kwd_proxy_sticky_lost_total", "kwd_proxy_server_up",
                       "kwd_proxy_server_load_factor", "kwd_proxy_snapshot_info",
                       "kwd_controller_snapshot_info", "kwd_controller_snapshot_nacks_total",
                       "kwd_controller_snapshot_push_to_ack_seconds_bucket",
                       "kwd_controller_compile_seconds_bucket", "kwd_proxy_local_responses_total"):
            self.assertIn(metric, exprs)
        self.assertIn("histogram_quantile(0.5,", exprs)
        self.assertIn("histogram_quantile(0.99,", exprs)
        ids = [p["id"] for p in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)))

    def test_checker_catches_a_wrong_name(self):
        names = {"kwd_proxy_requests_total": {"group", "code"}}
        self.assertEqual(unresolved('sum by (group) (rate(kwd_proxy_requests_total[5m]))', names), [])
        self.assertTrue(unresolved('rate(kwd_proxy_request_total[5m])', names))
        self.assertTrue(unresolved('rate(kwd_proxy_requests_total{server="x"}[5m])', names))
        self.assertTrue(unresolved('sum by (server) (rate(kwd_proxy_requests_total[5m]))', names))

    def test_chart_config_map_holds_the_dashboard(self):
        self.assertEqual([d for d in helm_render() if d["kind"] == "ConfigMap"], [])
        docs = helm_render("--set", "grafanaDashboard.enabled=true",
                           "--set", "grafanaDashboard.namespace=monitoring",
                           "--set", "grafanaDashboard.annotations.grafana_folder=SAP")
        (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
        self.assertEqual(config_map["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(config_map["metadata"]["namespace"], "monitoring")
        self.assertEqual(config_map["metadata"]["annotations"], {"grafana_folder": "SAP"})
        with open(DASHBOARD) as f:
            self.assertEqual(json.loads(config_map["data"]["kwd.json"]), json.load(f))


class Rules(unittest.TestCase):
    def test_promtool_check_and_test_rules(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "kwd-rules.yaml"), "w") as f:
                yaml.safe_dump(rendered_rules(), f)
            result = promtool("check", "rules", "kwd-rules.yaml", cwd=tmp)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            shutil.copy(RULES_TEST, os.path.join(tmp, "rules_test.yaml"))
            result = promtool("test", "rules", "rules_test.yaml", cwd=tmp)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_every_alert_is_tested(self):
        alerts = {r["alert"] for g in rendered_rules()["groups"] for r in g["rules"]}
        with open(RULES_TEST) as f:
            tests = yaml.safe_load(f)
        tested = {a["alertname"] for t in tests["tests"] for a in t.get("alert_rule_test", [])
                  if a.get("exp_alerts")}
        self.assertEqual(alerts - tested, set())

    def test_rule_queries_resolve_against_the_binaries(self):
        names = scrape_after_traffic()
        problems = [f"{r['alert']}: {p}" for g in rendered_rules()["groups"] for r in g["rules"]
                    for p in unresolved(r["expr"], names)]
        self.assertEqual(problems, [])

    def test_every_alert_has_a_runbook_section(self):
        # runbook_url is docs/troubleshooting.md#<alert in lower case>: a
        # "### <alert>" heading there (GitHub's anchor for it).
        with open(os.path.join(SOURCE_DIR, "docs", "troubleshooting.md")) as f:
            headings = set(re.findall(r"^### (\w+)$", f.read(), re.MULTILINE))
        for rule in rendered_rules()["groups"][0]["rules"]:
            with self.subTest(alert=rule["alert"]):
                self.assertEqual(rule["annotations"]["runbook_url"],
                                 "docs/troubleshooting.md#" + rule["alert"].lower())
                self.assertIn(rule["alert"], headings)
        docs = helm_render("--set", "prometheusRule.enabled=true",
                           "--set", "prometheusRule.runbookBaseUrl=https://git.example/kwd/t.md")
        (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
        urls = {r["annotations"]["runbook_url"] for r in rule["spec"]["groups"][0]["rules"]}
        self.assertIn("https://git.example/kwd/t.md#kwdobjectsrejected", urls)

    def test_extra_rules_from_values(self):
        docs = helm_render("--set", "prometheusRule.enabled=true", "--set-json",
                           'prometheusRule.extraRules=[{"alert": "SapLogonSlow", '
                           '"expr": "vector(1)", "labels": {"severity": "info"}}]')
        (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
        rules = rule["spec"]["groups"][0]["rules"]
        self.assertEqual(rules[-1], {"alert": "SapLogonSlow", "expr": "vector(1)",
                                     "labels": {"severity": "info"}})
        self.assertIn("KwdGroupNoUsableServer", [r.get("alert") for r in rules])

    def test_monitors_label_series_with_the_release(self):
        docs = helm_render("--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true")
        for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
            (monitor,) = [d for d in docs if d["kind"] == kind]
            for endpoint in monitor["spec"][key]:
                self.assertIn({"targetLabel": "release", "replacement": "wd"},
                              endpoint["relabelings"], kind)

    def test_alerts_are_per_namespace_and_release(self):
        """Every aggregation and match keeps namespace and release (an alert
        without one, like increase(...) > 0, keeps every label anyway)."""
        clauses = 0
        for r in rendered_rules()["groups"][0]["rules"]:
            for clause in re.findall(r"\b(?:by|on) \(([^)]*)\)", r["expr"]):
                labels = [l.strip() for l in clause.split(",")]
                self.assertLessEqual({"namespace", "release"}, set(labels), r["alert"])
                clauses += 1
            if re.search(r"\b(sum|max|min|count)\(", r["expr"].replace(" (", "(")):
                self.assertRegex(r["expr"], r"\b(sum|max|min|count) by|or \(count\(", r["alert"])
        self.assertGreaterEqual(clauses, 7)

    def test_dashboard_filters_by_namespace_and_release(self):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        names = [v["name"] for v in dashboard["templating"]["list"]]
        self.assertLess(names.index("namespace"), names.index("release"))
        for title, expr in dashboard_queries(dashboard):
            if title.startswith("variable "):
                continue
            for metric in re.findall(r"\b(?:kwd|process)_\w+(\{[^}]*\})?", expr):
                self.assertIn('namespace=~"$namespace",release=~"$release"', metric, title)

    def test_thresholds_and_labels_from_values(self):
        docs = helm_render("--set", "prometheusRule.enabled=true",
                           "--set-json", "prometheusRule.errorRatio=0.2",
                           "--set", "prometheusRule.labels.release=prometheus",
                           "--set", "prometheusRule.alertLabels.team=basis")
        (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
        self.assertEqual(rule["metadata"]["labels"]["release"], "prometheus")
        rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
        self.assertTrue(rules["KwdGroup5xxRatioHigh"]["expr"].rstrip().endswith("> 0.2"))
        for r in rules.values():
            self.assertEqual(r["labels"]["team"], "basis")


class PodMonitor(unittest.TestCase):
    def test_sidecar_pods_scraped_on_their_admin_port(self):
        self.assertEqual([d for d in helm_render() if d["kind"] == "PodMonitor"], [])
        docs = helm_render("--set", "podMonitor.enabled=true", "--set", "sidecar.example.enabled=true")
        (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        self.assertEqual((endpoint["port"], endpoint["path"]), ("kwd-admin", "/metrics"))
        (example,) = [d for d in docs if d["kind"] == "Deployment" and
                      d["metadata"]["name"].endswith("sidecar-example")]
        pod = example["spec"]["template"]
        selector = monitor["spec"]["selector"]["matchLabels"]
        self.assertTrue(all(pod["metadata"]["labels"].get(k) == v for k, v in selector.items()))
        ports = [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
        self.assertIn("kwd-admin", ports)


class Metrics(unittest.TestCase):
    def test_promtool_check_metrics_on_both_binaries(self):
        c = cluster()
        scrape_after_traffic()
        for port in (c.proxy_admin, c.controller_admin):
            result = subprocess.run(["promtool", "check", "metrics"], input=c.metrics(port),
                                    capture_output=True, text=True)
            self.assertEqual((result.returncode, result.stdout + result.stderr), (0, ""))

    def test_request_durations_are_bucketed_up_to_the_response_timeout(self):
        c = cluster()
        scrape_after_traffic()
        bounds = re.findall(r'kwd_proxy_request_duration_seconds_bucket\{group="erp/public",'
                            r'le="([^"]+)"\}', c.metrics(c.proxy_admin))
        self.assertEqual(bounds[-4:], ["20", "30", "60", "+Inf"])

    def test_group_servers_series_per_group(self):
        c = cluster()
        self.assertIn('kwd_controller_group_servers{group="erp/public"} 1',
                      c.metrics(c.controller_admin))

    def test_build_info_and_process_metrics_on_both_binaries(self):
        c = cluster()
        for port in (c.proxy_admin, c.controller_admin):
            text = c.metrics(port)
            self.assertRegex(text, r'\nkwd_build_info\{version="[0-9]+\.[0-9]+\.[0-9]+",'
                                   r'revision="[0-9a-f]+|unknown"\} 1\n')
            for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                         "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                         "process_start_time_seconds"):
                m = re.search(r"\n" + name + r" (\S+)\n", text)
                self.assertIsNotNone(m, name)
                self.assertGreater(float(m.group(1)), 0, name)
            start = float(re.search(r"\nprocess_start_time_seconds (\S+)\n", text).group(1))
            self.assertLess(abs(start - time.time()), 600)
            self.assertIn("# TYPE process_cpu_seconds_total counter\n", text)

    def test_exact_5xx_codes_and_local_responses(self):
        c = cluster()
        before = c.metrics(c.proxy_admin)

        def value(text, series):
            m = re.search("\n" + re.escape(series) + r" (\S+)\n", text)
            return float(m.group(1)) if m else 0.0

        self.assertEqual(http_get(c.port, "/status/504")[0], 504)
        self.assertEqual(http_get(c.port, "/status/503")[0], 503)
        # No group serves this host's URL? All URLs map to the default group here, so a
        # local reply comes from a malformed request instead.
        with socket.create_connection(("127.0.0.1", c.port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
            self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 400"))
        after = wait_for(lambda: (t := c.metrics(c.proxy_admin)) and
                         value(t, 'kwd_proxy_requests_total{group="erp/public",code="503"}') >
                         value(before, 'kwd_proxy_requests_total{group="erp/public",code="503"}')
                         and t, what="503 counted")
        for code in ("504", "503"):
            series = f'kwd_proxy_requests_total{{group="erp/public",code="{code}"}}'
            self.assertEqual(value(after, series) - value(before, series), 1, series)
        series = 'kwd_proxy_local_responses_total{error="EPROTERROR",status="400"}'
        self.assertEqual(value(after, series) - value(before, series), 1)
        self.assertIn('kwd_proxy_local_responses_total{error="EDISPATCHERR",status="503"}', after)

    def test_durations_below_a_millisecond_are_not_zero(self):
        c = cluster()
        for _ in range(5):
            self.assertEqual(http_get(c.port, "/fast")[0], 200)
        text = c.metrics(c.proxy_admin)
        total = float(re.search(r'\nkwd_proxy_request_duration_seconds_sum\{group="erp/public"\} (\S+)\n',
                                text).group(1))
        self.assertGreater(total, 0)
        # Bucket bounds print as written, not as the nearest double's 17 digits.
        self.assertIn('kwd_proxy_request_duration_seconds_bucket{group="erp/public",le="0.00025"}', text)
        self.assertNotRegex(text, r'le="[0-9.]{12,}"')
        # Microseconds, not the event loop's milliseconds (where a fast request took 0 or
        # a whole number of ms).
        fast = wait_for(lambda: [r["duration_ms"] for r in json_lines(c.access_log)
                                 if r["target"] == "/fast"][:5], what="access log of /fast")
        self.assertTrue(any(0 < d and d != round(d) for d in fast), fast)

    def test_one_snapshot_version_format_on_both_sides(self):
        c = cluster()
        proxy = re.findall(r'\nkwd_proxy_snapshot_info\{version="([^"]*)"\} (\S+)', c.metrics(c.proxy_admin))
        controller = re.findall(r'\nkwd_controller_snapshot_info\{version="([^"]*)"\} (\S+)',
                                c.metrics(c.controller_admin))
        self.assertEqual(len(proxy), 1)
        self.assertEqual(proxy, controller)
        self.assertRegex(proxy[0][0], r"^[0-9a-f]{64}$")


def json_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class JsonLogs(unittest.TestCase):
    def test_process_logs_are_json_lines(self):
        c = cluster()
        for path in (c.controller_log, c.proxy_log):
            with open(path) as f:
                lines = [line for line in f if line.strip()]
            self.assertTrue(lines, path)
            for line in lines:
                record = json.loads(line)
                for key in ("ts", "level", "component", "msg"):
                    self.assertIn(key, record, line)
                self.assertRegex(record["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

    def test_access_log_is_json_with_request_and_trace_ids(self):
        c = cluster()
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
        traceparent = f"00-{trace_id}-00f067aa0ba902b7-01"
        status, _, _ = http_get(c.port, "/sap/bc/traced?sap-contextid=SECRET",
                                {"traceparent": traceparent, "X-Request-Id": "client-chosen"})
        self.assertEqual(status, 200)
        status, _, _ = http_get(c.port, "/sap/bc/untraced", {"traceparent": "00-zz-bad"})
        self.assertEqual(status, 200)

        def records():
            found = {r["target"]: r for r in json_lines(c.access_log)}
            wanted = ("/sap/bc/traced?sap-contextid=***", "/sap/bc/untraced")
            return all(t in found for t in wanted) and [found[t] for t in wanted]

        traced, untraced = wait_for(records, what="access log")
        for key in ("ts", "client_ip", "method", "target", "protocol", "status", "bytes_sent",
                    "bytes_received", "group", "server", "duration_ms", "upstream_ms", "reason",
                    "request_id", "trace_id", "tls_version"):
            self.assertIn(key, traced)
        self.assertEqual(traced["target"], "/sap/bc/traced?sap-contextid=***")
        self.assertEqual((traced["method"], traced["protocol"], traced["status"]), ("GET", "HTTP/1.1", 200))
        self.assertEqual((traced["group"], traced["server"]), ("erp/public", "recorder"))
        self.assertEqual(traced["bytes_sent"], 3)
        self.assertEqual(traced["trace_id"], trace_id)
        self.assertIsNone(untraced["trace_id"])
        self.assertIsNone(traced["tls_version"])
        self.assertGreater(traced["duration_ms"], 0)
        self.assertGreater(traced["upstream_ms"], 0)
        self.assertLessEqual(traced["upstream_ms"], traced["duration_ms"])
        # No peer is trusted yet: the client's id is replaced by a generated one.
        self.assertRegex(traced["request_id"], r"^[0-9a-f]{32}$")
        self.assertNotEqual(traced["request_id"], untraced["request_id"])
        # The upstream got the logged id (once) and the traceparent unchanged.
        seen = {path: headers for path, headers in c.backend.requests}
        headers = seen["/sap/bc/traced?sap-contextid=SECRET"]
        self.assertEqual(headers["x-request-id"], traced["request_id"])
        self.assertEqual(headers["traceparent"], traceparent)
        self.assertEqual(seen["/sap/bc/untraced"]["x-request-id"], untraced["request_id"])

    def test_local_reply_logged_with_null_upstream(self):
        c = cluster()
        with socket.create_connection(("127.0.0.1", c.port), timeout=5) as s:
            s.sendall(b"GET /sap/bc/too-long HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n")
            s.recv(4096)

        def record():
            found = [r for r in json_lines(c.access_log) if r["target"] == "/sap/bc/too-long"]
            return found[0] if found else None

        entry = wait_for(record, what="access log line of the local reply")
        self.assertEqual(entry["status"], 400)
        self.assertIsNone(entry["upstream_ms"])
        self.assertIsNone(entry["server"])


class Flags(unittest.TestCase):
    def test_log_format_flag_on_both_binaries(self):
        for binary in (PROXY, CONTROLLER):
            if not os.access(binary, os.X_OK):
                self.skipTest(binary + " is not built")
        cases = [
            ([PROXY, "serve", "--snapshot", "/nonexistent", "--log-format", "xml"],
             "--log-format takes text or json"),
            ([CONTROLLER, "serve", "--source=dir:/nonexistent", "--log-format=yaml"],
             "--log-format must be text or json"),
        ]
        for argv, message in cases:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(message, result.stderr)
        for binary in (PROXY, CONTROLLER):
            result = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                                    timeout=30)
            self.assertEqual(result.returncode, 0)
            self.assertIn("--log-format text|json", result.stdout)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        unittest.main(argv=[sys.argv[0], sys.argv[1]], verbosity=2)
    else:
        unittest.main(verbosity=2)
