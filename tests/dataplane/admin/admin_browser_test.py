#!/usr/bin/env python3
"""The admin pages in a real browser (headless Chromium through Selenium).

Starts two demo backends, kwd-controller (directory source) and kwd-proxy
(streaming from the controller, with --admin-token-file), then checks what a
user sees: the proxy's /admin and /admin/ pages render every view, refresh
themselves without losing the explain form's input, explain a hostile URL
without running any of it, show drain buttons only with a token, and a drain
through the page changes the page and the traffic; the controller's /admin
shows the connected proxy and the objects' conditions. No console errors.
Screenshots go to $KWD_TEST_OUTPUT_DIR.

Needs Debian's chromium, chromium-driver and python3-selenium
(scripts/install-deps.sh); fails at once, naming them, when one is missing.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
MISSING = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import StaleElementReferenceException
except ImportError:  # pragma: no cover - reported below
    MISSING.append("python3-selenium")

TOKEN = "browser-test-token-0123456789"
DEADLINE = 20.0  # seconds for any one wait


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


def wait_for(condition, what, timeout=DEADLINE):
    end = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < end:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # the page may be mid-render
            last_error = e
        time.sleep(0.1)
    raise AssertionError("timed out after %.0fs waiting for %s (last error: %r)"
                         % (timeout, what, last_error))


def http(method, port, path, headers=None, timeout=5):
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace"), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace"), dict(e.headers)
    except OSError:
        return 0, "", {}


YAML = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: public, namespace: default}
spec:
  kind: abap
  strategy: weighted_round_robin
  backend:
    staticServers:
      - {name: demo1_QS_00, address: 127.0.0.1, port: %(b1)d, capacity: 2}
      - {name: demo2_QS_01, address: 127.0.0.1, port: %(b2)d, capacity: 1}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: diag, namespace: default}
spec:
  kind: abap
  backend:
    staticServers:
      - {name: demo1_QS_00, address: 127.0.0.1, port: %(b1)d}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: j2ee, namespace: default}
spec:
  kind: java
  backend:
    staticServers:
      - {name: demo2_QS_01, address: 127.0.0.1, port: %(b2)d}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: browser, namespace: default}
spec:
  hosts: []
  defaultRootHandler: java
  rules:
    - {prefix: /sap/, kind: abap}
    - {prefix: /sap/bc/gui/, kind: abap, logonGroup: public}
  permissions:
    - {action: permit, pattern: /sap/bc/public/*}
    - {action: deny, pattern: "*.cgi"}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: https, namespace: default}
spec:
  kind: abap
  backend:
    staticServers:
      - {name: demo1_QS_00, address: 127.0.0.1, port: %(b1)d}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: tls, namespace: default}
spec:
  hosts: [erp.example.test]
  passthroughGroup: https
"""


class AdminBrowserTest(unittest.TestCase):
    processes = []

    @classmethod
    def start(cls, name, args):
        log = open(os.path.join(cls.out, name + ".log"), "wb")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        cls.processes.append((name, p, log))
        return p

    @classmethod
    def setUpClass(cls):
        cls.out = os.environ.get("KWD_TEST_OUTPUT_DIR") or tempfile.mkdtemp()
        os.makedirs(cls.out, exist_ok=True)
        cls.work = tempfile.mkdtemp(prefix="kwd-browser-")
        b1, b2 = free_port(), free_port()
        cls.grpc, cls.controller_admin = free_port(), free_port()
        cls.proxy_port, cls.admin = free_port(), free_port()
        config = os.path.join(cls.work, "config")
        os.makedirs(config)
        with open(os.path.join(config, "objects.yaml"), "w") as f:
            f.write(YAML % {"b1": b1, "b2": b2})
        token_file = os.path.join(cls.work, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        backend = os.environ["KWD_DEMO_BACKEND"]
        cls.start("demo1", [backend, "--listen", "127.0.0.1:%d" % b1, "--instance", "demo1_QS_00"])
        cls.start("demo2", [backend, "--listen", "127.0.0.1:%d" % b2, "--instance", "demo2_QS_01"])
        cls.start("controller", [os.environ["KWD_CONTROLLER"], "serve", "--source=dir:" + config,
                                 "--grpc-listen", "127.0.0.1:%d" % cls.grpc,
                                 "--admin-listen", "127.0.0.1:%d" % cls.controller_admin])
        cls.start("proxy", [os.environ["KWD_PROXY"], "serve",
                            "--controller", "127.0.0.1:%d" % cls.grpc,
                            "--listen", "127.0.0.1:%d" % cls.proxy_port,
                            "--admin-listen", "127.0.0.1:%d" % cls.admin,
                            "--admin-token-file", token_file, "--workers", "2",
                            "--node-id", "browser-proxy", "--access-log", "off"])
        wait_for(lambda: http("GET", cls.admin, "/readyz")[0] == 200, "the proxy's /readyz")

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--no-first-run", "--disable-extensions",
                     "--disable-background-networking", "--disable-sync",
                     "--user-data-dir=" + os.path.join(cls.work, "chromium")):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        cls.driver = webdriver.Chrome(
            service=Service(CHROMEDRIVER, log_path=os.path.join(cls.out, "chromedriver.log")),
            options=options)
        cls.driver.set_page_load_timeout(DEADLINE)
        cls.driver.set_script_timeout(DEADLINE)
        cls.console = []

    @classmethod
    def tearDownClass(cls):
        driver = getattr(cls, "driver", None)
        if driver is not None:
            driver.quit()
        for name, p, log in reversed(cls.processes):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()
        shutil.rmtree(cls.work, ignore_errors=True)

    # ---- helpers ----

    def shot(self, name):
        self.driver.save_screenshot(os.path.join(self.out, name + ".png"))

    def collect_console(self):
        self.console.extend(self.driver.get_log("browser"))

    def open_proxy_page(self, path="/admin"):
        self.driver.get("http://127.0.0.1:%d%s" % (self.admin, path))
        wait_for(lambda: self.server_row("default/public", "demo1_QS_00"), "the server table")

    def fresh(self, read):
        """read(), again when the page's refresh replaced an element between
        finding it and reading it."""
        for _ in range(50):
            try:
                return read()
            except StaleElementReferenceException:
                time.sleep(0.05)
        return read()

    def text(self, css):
        return self.fresh(lambda: self.driver.find_element(By.CSS_SELECTOR, css).text)

    def server_row(self, group, server):
        rows = self.driver.find_elements(
            By.CSS_SELECTOR, 'section.group[data-group="%s"] tr.server[data-server="%s"]'
            % (group, server))
        return rows[0] if rows else None

    def cell(self, group, server, css):
        return self.fresh(
            lambda: self.server_row(group, server).find_element(By.CSS_SELECTOR, css).text)

    def proxy_get(self, path, headers=None):
        status, body, _ = http("GET", self.proxy_port, path, headers)
        return status, body

    # ---- tests (run in name order) ----

    def test_1_views_at_both_urls(self):
        for path in ("/admin", "/admin/"):
            self.open_proxy_page(path)
            header = wait_for(lambda: "connected" in self.text("#header") and self.text("#header"),
                              "the header with the controller connection")
            for expected in ("snapshot:", "controller: connected", "last ACK:", "uptime:",
                             "workers: 2/2", "actions: enabled"):
                self.assertIn(expected, header)
            self.assertEqual(self.text("#status"), "")
        groups = self.text("#groups")
        for expected in ("default/public", "weighted_round_robin", "next preferred server",
                         "session table", "sticky routed", "demo2_QS_01", "127.0.0.1"):
            self.assertIn(expected, groups)
        self.assertIn("ready", self.cell("default/public", "demo1_QS_00", "td.state"))
        # TLS passthrough: the group's hosts and counters, its TLS health
        # check (SNI: the one host), and the host's passthrough group.
        passthrough = self.text('section.group[data-group="default/https"] div.passthrough')
        self.assertIn("TLS passthrough for erp.example.test", passthrough)
        self.assertIn("connections 0", passthrough)
        https = self.text('section.group[data-group="default/https"]')
        self.assertIn("health check tls /sap/public/icman/ping (SNI erp.example.test)", https)
        self.assertIn("health check http", self.text('section.group[data-group="default/public"]'))
        self.assertEqual(self.driver.find_elements(
            By.CSS_SELECTOR, 'section.group[data-group="default/public"] div.passthrough'), [])
        self.assertIn("TLS passthrough (by SNI) \u2192 default/https",
                      self.text('#url-mapping p.passthrough-group[data-group="default/https"]'))
        # Rules in evaluation order: the longest prefix first.
        # (The any host's table comes first: hosts are listed in name order.)
        # Read in one go, again if the page's refresh replaced the table
        # between finding a row and reading it (a stale element).
        def rule_prefixes():
            any_host = self.driver.find_elements(By.CSS_SELECTOR, "#url-mapping table.rules")[0]
            return [r.find_elements(By.TAG_NAME, "td")[1].text for r in
                    any_host.find_elements(By.TAG_NAME, "tr")[1:]]
        prefixes = wait_for(rule_prefixes, "the any host's rule table")
        self.assertEqual(prefixes[:2], ["/sap/bc/gui/", "/sap/"])
        self.assertIn("root URL", prefixes[2])
        permissions = self.text("#permissions")
        self.assertLess(permissions.index("/sap/bc/public/*"), permissions.index("*.cgi"))
        self.assertIn("deny", permissions)
        self.assertEqual(self.driver.find_elements(By.CSS_SELECTOR, "button.drain"), [])
        self.shot("proxy_admin")
        self.collect_console()

    def test_2_traffic_and_recent_errors(self):
        self.open_proxy_page()
        for _ in range(6):
            status, body = self.proxy_get("/sap/bc/gui/x")
            self.assertEqual(status, 200, body)
        status, body = self.proxy_get("/sap/bc/gui/secret.cgi?sap-contextid=SID%3aANON%3ax%3ay")
        self.assertEqual(status, 403, body)

        def counted():
            total = sum(int(self.cell("default/public", s, "td.requests"))
                        for s in ("demo1_QS_00", "demo2_QS_01"))
            return total >= 6
        wait_for(counted, "per-server request counts on the page")
        self.assertIn("2xx", self.server_row("default/public", "demo1_QS_00").text)
        errors = wait_for(lambda: "EPERM" in self.text("#recent-errors") and
                          self.text("#recent-errors"), "the 403 in the recent errors")
        self.assertIn("403", errors)
        self.assertIn("default/public", errors)
        # No URL and no session identifier in the error list.
        self.assertNotIn("secret.cgi", errors)
        self.assertNotIn("SID", errors)
        self.shot("proxy_admin_traffic")
        self.collect_console()

    def test_3_refreshes_without_losing_the_form(self):
        self.open_proxy_page()
        url = self.driver.find_element(By.CSS_SELECTOR, 'form#explain input[name="url"]')
        url.clear()
        url.send_keys("/keep/this/input")
        header = self.driver.find_element(By.CSS_SELECTOR, 'form#explain textarea[name="header"]')
        header.send_keys("Cookie: a=b")
        first = self.text("#header")
        wait_for(lambda: self.text("#header") != first, "the page to refresh itself", 10)
        self.assertEqual(url.get_attribute("value"), "/keep/this/input")
        self.assertEqual(header.get_attribute("value"), "Cookie: a=b")
        self.collect_console()

    def test_4_explain_renders_hostile_input_as_text(self):
        self.open_proxy_page()
        # No spaces: a request target holds none, and this one must be routed.
        hostile = ('/sap/bc/gui/"><img/src=x/onerror=document.title=\'pwned\'>'
                   '<script>document.title=\'pwned2\'</script>')
        form = self.driver.find_element(By.ID, "explain")
        url = form.find_element(By.NAME, "url")
        url.clear()
        url.send_keys(hostile)
        form.find_element(By.NAME, "host").send_keys("<b>bold</b>.example")
        form.find_element(By.NAME, "header").send_keys("Cookie: saplb_public=(demo2_QS_01)00")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        steps = wait_for(lambda: self.driver.find_elements(By.CSS_SELECTOR,
                                                           "#explain-result li.step"),
                         "the explain steps")
        names = [s.get_attribute("data-step") for s in steps]
        for expected in ("virtual host", "permission", "classification", "session identifiers",
                         "balancing", "result"):
            self.assertIn(expected, names)
        result = self.text("#explain-result")
        self.assertIn("demo2_QS_01", result)
        self.assertIn("sticky:saplb", result)
        self.assertIn("<b>bold</b>", result)  # shown as text
        self.assertIn("<script>document.title='pwned2'</script>", result)
        self.assertEqual(self.driver.title, "kwd-proxy admin")
        for tag in ("img", "script", "b.x", "iframe"):
            self.assertEqual(
                self.driver.find_elements(By.CSS_SELECTOR, "#explain-result pre " + tag), [])
        self.assertEqual(self.driver.find_elements(By.CSS_SELECTOR, "#explain-result img"), [])
        self.driver.execute_script("document.getElementById('explain-result').scrollIntoView()")
        self.shot("proxy_admin_explain_hostile")

        # A balanced request lists the candidates with their load.
        url.clear()
        url.send_keys("/sap/bc/gui/balanced")
        form.find_element(By.NAME, "header").clear()
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(lambda: "over 2 usable of 2 servers" in self.text("#explain-result"),
                 "the balancing step")
        self.assertIn("load factor", self.text("#explain-result"))
        self.driver.execute_script("document.getElementById('explain-result').scrollIntoView()")
        self.shot("proxy_admin_explain")
        self.collect_console()

    def test_5_drain_and_undrain_from_the_page(self):
        self.open_proxy_page()
        self.assertEqual(self.driver.find_elements(By.CSS_SELECTOR, "button.drain"), [])
        self.driver.find_element(By.ID, "token").send_keys(TOKEN)
        row = lambda: self.server_row("default/public", "demo2_QS_01")
        wait_for(lambda: row().find_elements(By.CSS_SELECTOR, "button.drain"), "drain buttons")
        self.fresh(lambda: row().find_element(By.CSS_SELECTOR, "button.drain").click())
        wait_for(lambda: self.cell("default/public", "demo2_QS_01", "td.state") ==
                 "draining (local)", "the local drain on the page")
        self.assertIn("now draining", self.text("#action-result"))
        self.shot("proxy_admin_drained")
        # No new balanced traffic; sticky traffic still arrives.
        for _ in range(6):
            status, body = self.proxy_get("/sap/bc/gui/after-drain")
            self.assertEqual(status, 200)
            self.assertTrue(body.startswith("demo1_QS_00"), body)
        status, body = self.proxy_get("/sap/bc/gui/sticky",
                                      {"Cookie": "saplb_public=(demo2_QS_01)00"})
        self.assertEqual(status, 200)
        self.assertTrue(body.startswith("demo2_QS_01"), body)

        wait_for(lambda: row().find_elements(By.CSS_SELECTOR, "button.undrain"), "undrain button")
        self.fresh(lambda: row().find_element(By.CSS_SELECTOR, "button.undrain").click())
        wait_for(lambda: self.cell("default/public", "demo2_QS_01", "td.state") == "ready",
                 "the server ready again")
        served = set()
        for _ in range(6):
            served.add(self.proxy_get("/sap/bc/gui/after-undrain")[1].split(" ")[0])
        self.assertIn("demo2_QS_01", served)
        self.shot("proxy_admin_undrained")
        self.collect_console()

    def test_6_controller_page(self):
        self.driver.get("http://127.0.0.1:%d/admin" % self.controller_admin)
        proxies = wait_for(lambda: "browser-proxy" in self.text("#proxies") and
                           self.text("#proxies"), "the connected proxy")
        self.assertIn("this controller", proxies)
        self.assertIn("(current)", proxies)
        objects = self.text("#objects")
        for expected in ("LogonGroup", "UrlMapping", "public", "Accepted=True", "Programmed"):
            self.assertIn(expected, objects)
        self.assertIn("snapshot", self.text("#header"))
        self.shot("controller_admin")
        self.collect_console()

    def test_7_no_console_errors(self):
        severe = [e for e in self.console if e.get("level") == "SEVERE"]
        self.assertEqual(severe, [], json.dumps(severe, indent=1))


if __name__ == "__main__":
    if MISSING:
        print("admin browser test: missing %s; install chromium, chromium-driver and "
              "python3-selenium (scripts/install-deps.sh)" % ", ".join(MISSING), file=sys.stderr)
        sys.exit(1)
    for variable in ("KWD_PROXY", "KWD_CONTROLLER", "KWD_DEMO_BACKEND"):
        if not os.environ.get(variable):
            print("admin browser test: $%s is not set (run it through ctest)" % variable,
                  file=sys.stderr)
            sys.exit(1)
    unittest.main(verbosity=2)
