#!/usr/bin/python3
"""The documentation: no links out of the repository, every relative link and anchor
resolves, no tracked file points outside the repository, the troubleshooting page
covers every condition reason and every error code the code has, the resource
reference matches the CRDs, every flag and metric the pages name exists, every
command block runs (Commands) or is marked illustrative, and the LICENSE is
Apache-2.0. ctest runs each TestCase class as its own test.

Command blocks: a fenced block whose info string starts with sh, bash, shell or
console holds commands. "```sh" blocks run with bash -e -o pipefail in a scratch
directory that looks like a checkout (build/ is the build directory, the built
binaries are on PATH, /tmp/ is the scratch directory's own). "```sh quickstart"
blocks run while scripts/run-quickstart.sh runs, with its ports. "```sh
illustrative" blocks are not run (clusters, placeholders, long builds); nothing
else is allowed.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BINARY_DIR = os.environ.get("KWD_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
COMMAND_LANGUAGES = ("sh", "bash", "shell", "console")
COMMAND_KINDS = ("", "illustrative", "quickstart")
# Flags of other tools the pages use (helm, kubectl, curl, cmake, ctest, gtest).
OTHER_TOOLS_FLAGS = {"--build", "--create-namespace", "--field-selector", "--gtest_filter",
                     "--http2", "--output-on-failure", "--print-labels", "--reuse-values",
                     "--server-side", "--set", "--show-only", "--target", "--version", "--help",
                     "--cookie", "--from", "--cert", "--key"}


def read(path):
    with open(os.path.join(SOURCE_DIR, path)) as f:
        return f.read()


DOCS = ["README.md", "CHANGELOG.md", "CONTRIBUTING.md", "deploy/helm/kwd/README.md",
        "examples/cluster/README.md"] + sorted(
    os.path.relpath(p, SOURCE_DIR) for p in glob.glob(os.path.join(SOURCE_DIR, "docs", "*.md")))
# The pages whose commands, flags and metrics are checked.
PAGES = [d for d in DOCS if d not in ("CHANGELOG.md",)]


def blocks(doc):
    """(line, language, kind, text) of every fenced block of a page."""
    text = read(doc)
    for match in re.finditer(r"(?ms)^( *)```([^\n]*)\n(.*?)^\1```[ \t]*$", text):
        info = match.group(2).split()
        line = text.count("\n", 0, match.start()) + 1
        yield line, (info[0] if info else ""), " ".join(info[1:]), match.group(3)


def instantiate_arguments(text):
    """(line, number of arguments) of every INSTANTIATE_TEST_SUITE_P call in C++ text."""
    result = []
    for match in re.finditer(r"\bINSTANTIATE_TEST_SUITE_P\s*\(", text):
        depth, count, i = 1, 1, match.end()
        while depth and i < len(text):
            c = text[i]
            if c == '"' and text[i - 1] == "R":  # R"(...)"
                i = text.index(')"', i) + 1
            elif c in "\"'":  # a string or character literal
                i += 1
                while text[i] != c:
                    i += 2 if text[i] == "\\" else 1
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == "," and depth == 1:
                count += 1
            i += 1
        result.append((text.count("\n", 0, match.start()) + 1, count))
    return result


def slug(heading):
    """GitHub's anchor for a heading."""
    heading = re.sub(r"[`*_]", "", heading.strip().lower())
    heading = re.sub(r"[^\w\- ]", "", heading)
    return heading.replace(" ", "-")


def anchors(doc):
    text = re.sub(r"(?ms)^```.*?^```", "", read(doc))
    return {slug(h) for h in re.findall(r"(?m)^#+ (.+)$", text)}


class Docs(unittest.TestCase):
    def test_links_stay_inside_the_repository(self):
        for doc in DOCS:
            if not os.path.exists(os.path.join(SOURCE_DIR, doc)):
                continue
            text = read(doc)
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                with self.subTest(doc=doc, target=target):
                    self.assertNotRegex(target, r"^[a-z]+://", "a link out of the repository")
                    file, _, anchor = target.partition("#")
                    path = os.path.normpath(os.path.join(SOURCE_DIR, os.path.dirname(doc), file))
                    self.assertTrue(path.startswith(SOURCE_DIR + os.sep), "leaves the repository")
                    self.assertTrue(os.path.exists(path), "does not exist")
                    if anchor and path.endswith(".md"):
                        self.assertIn(anchor, anchors(os.path.relpath(path, SOURCE_DIR)),
                                      "no such heading")
            for url in re.findall(r"<(https?://[^>]+)>", text):
                self.fail(f"{doc}: autolink out of the repository: {url}")

    def test_no_file_points_outside_the_repository(self):
        """Every fact lives in the repository: no tracked file names a document or a
        path of the machine it was written on. (The patterns are split so this file
        does not match itself.)"""
        outside = re.compile("|".join([
            r"INTERFACE" r"\.md", r"shared/" r"reference", r"\.\./" r"shared\b",
            r"/work/" r"(?:shared|main|wt)\b", r"DESIGN" r"\.md", r"CONVENTIONS" r"\.md"]))
        files = subprocess.run(["git", "-C", SOURCE_DIR, "ls-files", "-z"], check=True,
                               capture_output=True).stdout.decode().split("\0")
        self.assertGreater(len(files), 100)
        checked = 0
        found = []
        for name in files:
            path = os.path.join(SOURCE_DIR, name)
            if not name or not os.path.isfile(path) or os.path.islink(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            if b"\0" in data[:8192]:
                continue  # binary (fuzz seeds, images)
            checked += 1
            for number, line in enumerate(data.decode(errors="replace").split("\n"), 1):
                match = outside.search(line)
                if match:
                    found.append(f"{name}:{number}: {line.strip()}")
        self.assertGreater(checked, 100)
        self.assertEqual(found, [], "these lines point outside the repository")

    def test_docs_pages_are_linked_from_the_readme(self):
        readme = read("README.md")
        for page in sorted(glob.glob(os.path.join(SOURCE_DIR, "docs", "*.md"))):
            name = os.path.relpath(page, SOURCE_DIR)
            self.assertIn(f"]({name})", readme, f"README's table of contents misses {name}")
        for section in ("## Quickstart", "## Install", "## Documentation",
                        "## What kwd does not do"):
            self.assertIn(section, readme)
        self.assertLess(len(readme.splitlines()), 150, "the README is a front page")

    def test_command_blocks_are_run_or_illustrative(self):
        count = 0
        for doc in PAGES:
            for line, language, kind, text in blocks(doc):
                with self.subTest(doc=doc, line=line):
                    if language in COMMAND_LANGUAGES:
                        count += 1
                        self.assertIn(kind, COMMAND_KINDS, "unknown mark")
                        if language == "console":
                            self.assertEqual(kind, "illustrative", "console blocks show output")
                    elif not language:
                        # A block without a language must not hold commands.
                        first = text.lstrip().split("\n", 1)[0]
                        self.assertNotRegex(first, r"^(\$ |build/|kubectl |helm |curl |make )",
                                            "commands in a block not marked sh")
        self.assertGreater(count, 15)

    def test_flags_exist(self):
        """Every --flag the pages name is one of kwd's (the sources' usage texts)
        or another tool's from a short list."""
        usage = ""
        for path in glob.glob(os.path.join(SOURCE_DIR, "*", "cli", "*.cc")) + glob.glob(
                os.path.join(SOURCE_DIR, "demo", "*.cc")):
            with open(path) as f:
                usage += f.read()
        known = set(re.findall(r"--[a-z0-9][a-z0-9_-]*", usage)) | OTHER_TOOLS_FLAGS
        self.assertGreater(len(known), 60)
        for doc in PAGES:
            text = re.sub(r"\]\([^)]*\)", "]", read(doc))  # not link targets
            for flag in sorted(set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9_-]*", text))):
                with self.subTest(doc=doc, flag=flag):
                    self.assertIn(flag, known, "no such flag")

    def test_metrics_exist(self):
        """Every kwd_* metric the pages name is registered by the code."""
        code = ""
        for pattern in ("common/**/*.cc", "controller/**/*.cc", "dataplane/**/*.cc"):
            for path in glob.glob(os.path.join(SOURCE_DIR, pattern), recursive=True):
                with open(path) as f:
                    code += f.read()
        registered = set(re.findall(r'"(kwd_\w+)"', code))
        self.assertGreater(len(registered), 50)
        for doc in PAGES + ["CHANGELOG.md"]:
            for metric in sorted(set(re.findall(r"\bkwd_(?:proxy|controller)_\w+", read(doc)))):
                with self.subTest(doc=doc, metric=metric):
                    base = metric
                    if base.endswith("_"):
                        continue  # a family named by prefix (kwd_controller_sapsystem_*)
                    self.assertTrue(base in registered or any(
                        base == r + suffix for r in registered for suffix in ("_total", "_seconds")),
                        "not registered by the code")

    def test_paths_exist(self):
        """Every repository path the pages name in backticks exists (globs match)."""
        top = "|".join(sorted(e for e in os.listdir(SOURCE_DIR)
                              if os.path.isdir(os.path.join(SOURCE_DIR, e)) and
                              not e.startswith(".") and not e.startswith("build")))
        count = 0
        for doc in PAGES + ["CHANGELOG.md"]:
            for path in sorted(set(re.findall(rf"`((?:{top})/[^`\s]*)`", read(doc)))):
                path = path.split("#")[0].rstrip(".,:;")
                if re.search(r"(?<![a-z])[A-Z]{3,}(?![a-z])", path):
                    continue  # a placeholder such as tests/fuzz/NAME_fuzz.cc
                count += 1
                with self.subTest(doc=doc, path=path):
                    full = os.path.join(SOURCE_DIR, path)
                    # `common/admin_http` names common/admin_http.h and .cc
                    self.assertTrue(glob.glob(full) or glob.glob(full + ".*"), "no such path")
        self.assertGreater(count, 50)

    def test_parameterised_tests_have_readable_names(self):
        """CONTRIBUTING.md's rule: every INSTANTIATE_TEST_SUITE_P passes a name
        generator (its fourth argument), so a failure names the case, not its index."""
        self.assertEqual(instantiate_arguments('INSTANTIATE_TEST_SUITE_P(A, B, V(")", \'(\'));'),
                         [(1, 3)])
        calls = 0
        for path in sorted(glob.glob(os.path.join(SOURCE_DIR, "tests", "**", "*.cc"),
                                     recursive=True)):
            with open(path) as f:
                text = f.read()
            for line, count in instantiate_arguments(text):
                calls += 1
                with self.subTest(file=os.path.relpath(path, SOURCE_DIR), line=line):
                    self.assertGreaterEqual(count, 4, "no name generator")
        self.assertGreaterEqual(calls, 5)

    def test_every_alert_is_documented(self):
        rules = read("deploy/helm/kwd/templates/prometheusrule.yaml")
        alerts = re.findall(r"- alert: (\w+)", rules)
        self.assertGreaterEqual(len(alerts), 8)
        page = read("docs/operations.md")
        for alert in alerts:
            self.assertIn(f"| `{alert}` |", page, f"alert {alert} has no row in operations.md")

    def test_metrics_reference_matches_the_code(self):
        result = subprocess.run([sys.executable,
                                 os.path.join(SOURCE_DIR, "scripts", "gen-metrics-reference.py"),
                                 "--check"], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0,
                         "docs/operations.md's metrics reference is not what the code registers: "
                         "run /usr/bin/python3 scripts/gen-metrics-reference.py " + result.stderr)
        page = read("docs/operations.md")
        self.assertGreater(page.count("| `kwd_"), 70)

    def test_resource_reference_matches_the_crds(self):
        result = subprocess.run([sys.executable,
                                 os.path.join(SOURCE_DIR, "scripts", "gen-resource-reference.py"),
                                 "--check"], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0,
                         "docs/resource-reference.md is not what the CRDs say: run "
                         "/usr/bin/python3 scripts/gen-resource-reference.py " + result.stderr)

    def test_troubleshooting_covers_every_reason_and_error_code(self):
        page = read("docs/troubleshooting.md")
        reasons = set()
        for path in glob.glob(os.path.join(SOURCE_DIR, "controller", "**", "*.h"), recursive=True):
            with open(path) as f:
                reasons.update(re.findall(r'kReason\w+ = "(\w+)"', f.read()))
        self.assertGreaterEqual(len(reasons), 18)
        for reason in sorted(reasons):
            self.assertIn(f"| `{reason}` |", page, f"condition reason {reason}")
        codes = set(re.findall(r'"(E[A-Z]{4,})"', read("dataplane/proxy/error_page.cc")))
        codes.discard("EINTERN")  # the unreachable default of a switch over every code
        self.assertGreaterEqual(len(codes), 5)
        for code in sorted(codes):
            self.assertIn(f"`{code}`", page, f"error code {code}")
        statuses = set(re.findall(r"return \{(\d{3}), ", read("dataplane/proxy/error_page.cc")))
        statuses.discard("500")
        for status in sorted(statuses):
            self.assertRegex(page, rf"\n\| {status} \| `E", f"status {status}")
        for reason in ("LeaderElected", "LeadershipLost"):
            self.assertIn(reason, page)

    def test_pages_have_architecture_and_sap_mapping(self):
        self.assertIn("## Architecture", read("docs/internals.md"))
        mapping = read("docs/migrating-from-sap-web-dispatcher.md")
        for parameter in ("wdisp/load_balancing_strategy", "wdisp/system_<xx>",
                          "icm/server_port_<xx>", "wdisp/permission_table",
                          "is/HTTP/default_root_hdl", "icm/HTTP/max_request_size_KB",
                          "wdisp/auto_refresh"):
            self.assertIn(f"| `{parameter}`", mapping, parameter)
        self.assertIn("helm show crds", read("docs/operations.md"))

    def test_license_is_apache_2(self):
        text = read("LICENSE")
        self.assertIn("Apache License", text)
        self.assertIn("Version 2.0, January 2004", text)
        self.assertIn("END OF TERMS AND CONDITIONS", text)
        for section in range(1, 10):
            self.assertIn(f"\n   {section}. ", text)


def command_blocks(kind):
    return [(doc, line, text) for doc in PAGES for line, language, k, text in blocks(doc)
            if language in COMMAND_LANGUAGES and k == kind]


class Commands(unittest.TestCase):
    """Every command block not marked illustrative runs and exits 0: the plain ones
    against the built binaries in a scratch copy of the checkout's layout, the
    quickstart ones while scripts/run-quickstart.sh runs (its ports substituted)."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix="kwd-docs-")
        for entry in os.listdir(SOURCE_DIR):
            if entry not in ("build", ".git"):
                os.symlink(os.path.join(SOURCE_DIR, entry), os.path.join(cls.scratch, entry))
        os.symlink(BINARY_DIR, os.path.join(cls.scratch, "build"))
        cls.tmp = os.path.join(cls.scratch, "tmp")
        os.mkdir(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def run_block(self, text, replacements=()):
        for old, new in replacements:
            text = text.replace(old, new)
        text = text.replace("/tmp/", self.tmp + "/")
        env = dict(os.environ, PATH=BINARY_DIR + os.pathsep + os.environ.get("PATH", ""),
                   KWD_SOURCE_DIR=SOURCE_DIR, KWD_BINARY_DIR=BINARY_DIR)
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=self.scratch,
                                env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=120)
        return result.returncode, (result.stdout + result.stderr).decode(errors="replace")

    def test_plain_blocks(self):
        found = command_blocks("")
        self.assertGreaterEqual(len(found), 3, found)
        for doc, line, text in found:
            with self.subTest(doc=doc, line=line):
                status, output = self.run_block(text)
                self.assertEqual(status, 0, f"{doc}:{line}\n{text}\n{output}")
                self.assertTrue(output.strip(), "prints nothing")

    def test_quickstart_blocks(self):
        found = command_blocks("quickstart")
        self.assertGreaterEqual(len(found), 2, found)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import run_quickstart_test as quickstart
        env = quickstart.quickstart_env()
        replacements = [("127.0.0.1:8080", env["KWD_LISTEN"]), ("127.0.0.1:9901", env["KWD_ADMIN"]),
                        ("127.0.0.1:9902", env["KWD_CONTROLLER_ADMIN"]),
                        ("127.0.0.1:18000", env["KWD_GRPC_LISTEN"])]
        process = quickstart.start_quickstart(env)
        output = quickstart.read_until(process.stdout.fileno(), quickstart.RUNNING,
                                       time.monotonic() + 60, b"")
        started = quickstart.children_of(process.pid)
        try:
            self.assertIn(quickstart.RUNNING, output, output.decode(errors="replace"))
            for doc, line, text in found:
                with self.subTest(doc=doc, line=line):
                    status, printed = self.run_block(text, replacements)
                    self.assertEqual(status, 0, f"{doc}:{line}\n{text}\n{printed}")
                    self.assertTrue(printed.strip(), "prints nothing")
            # Every metric family a real scrape shows is in the metrics reference.
            page = read("docs/operations.md")
            for admin in (env["KWD_ADMIN"], env["KWD_CONTROLLER_ADMIN"]):
                scrape = subprocess.run(["curl", "-sf", f"http://{admin}/metrics"],
                                        capture_output=True, text=True, timeout=30).stdout
                families = re.findall(r"(?m)^# HELP (\w+) ", scrape)
                self.assertGreater(len(families), 10, scrape[:500])
                for family in families:
                    with self.subTest(admin=admin, metric=family):
                        self.assertIn(f"| `{family}` |", page, "not in the metrics reference")
        finally:
            quickstart.stop_and_check(self, process, output, started)


if __name__ == "__main__":
    unittest.main()
