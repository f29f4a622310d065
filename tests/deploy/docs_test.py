#!/usr/bin/python3
"""The documentation: no links out of the repository, every relative link resolves,
the troubleshooting page covers every condition reason and every error code the code
has, and the LICENSE is Apache-2.0. ctest runs each TestCase class as its own test.
"""
import glob
import os
import re
import subprocess
import unittest

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def read(path):
    with open(os.path.join(SOURCE_DIR, path)) as f:
        return f.read()


DOCS = ["README.md", "CHANGELOG.md", "deploy/helm/kwd/README.md", "examples/cluster/README.md"] + [
    os.path.relpath(p, SOURCE_DIR) for p in glob.glob(os.path.join(SOURCE_DIR, "docs", "*.md"))]


class Docs(unittest.TestCase):
    def test_links_stay_inside_the_repository(self):
        for doc in DOCS:
            if not os.path.exists(os.path.join(SOURCE_DIR, doc)):
                continue
            text = read(doc)
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                with self.subTest(doc=doc, target=target):
                    self.assertNotRegex(target, r"^[a-z]+://", "a link out of the repository")
                    if target.startswith("#"):
                        continue
                    path = os.path.normpath(os.path.join(SOURCE_DIR, os.path.dirname(doc),
                                                         target.split("#")[0]))
                    self.assertTrue(path.startswith(SOURCE_DIR + os.sep), "leaves the repository")
                    self.assertTrue(os.path.exists(path), "does not exist")
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


if __name__ == "__main__":
    unittest.main()
