"""`kwd-controller validate` agrees with the CRDs: the cluster example
validates, the bad objects the CRD rejects are rejected by the compiler where
it has the same rule, schema defaults equal the compiler's defaults, and every
enum value the schema allows is one the compiler accepts.

The controller binary comes from $KWD_CONTROLLER (CMake passes
$<TARGET_FILE:kwd-controller>)."""

import copy
import glob
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import yaml

import bad_objects
import crd_support as s

CONTROLLER = os.environ.get("KWD_CONTROLLER", "")


def run(command, directory):
    result = subprocess.run([CONTROLLER, command, f"--source=dir:{directory}"],
                            capture_output=True, text=True, timeout=60, check=False)
    return result.returncode, result.stdout, result.stderr


def write_objects(directory, objects):
    with open(os.path.join(directory, "objects.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump_all(objects, f, sort_keys=False)


class ControllerValidateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not CONTROLLER:
            raise unittest.SkipTest("set KWD_CONTROLLER to the kwd-controller binary")
        if not os.access(CONTROLLER, os.X_OK):
            raise AssertionError(f"KWD_CONTROLLER={CONTROLLER} is not an executable (build it)")
        cls.crds = s.load_crds()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kwd-crds-")
        self.addCleanup(shutil.rmtree, self.dir)

    def validate(self, objects):
        write_objects(self.dir, objects)
        return run("validate", self.dir)

    def compile(self, objects):
        write_objects(self.dir, objects)
        code, out, err = run("compile", self.dir)
        self.assertEqual(code, 0, err)
        return json.loads(out)

    def test_cluster_example_validates(self):
        code, out, err = run("validate", os.path.join(s.SOURCE_DIR, "examples/cluster"))
        self.assertEqual(code, 0, out + err)
        self.assertIn("ok: 12 objects", out)

    def test_cluster_manifests_miss_only_the_endpoints_the_cluster_provides(self):
        # What `kubectl apply -f examples/cluster/` applies (no offline/):
        # the only findings are the EndpointSlices the cluster will create,
        # live state a file cannot show: notes (exit 0) unless --live asks.
        for path in glob.glob(os.path.join(s.SOURCE_DIR, "examples/cluster/*.yaml")):
            shutil.copy(path, self.dir)
        code, out, err = run("validate", self.dir)
        self.assertEqual(code, 0, out + err)
        self.assertRegex(out, r"^ok: \d+ objects\n$")
        notes = [line for line in err.splitlines() if "[NoEndpoints]" in line]
        self.assertEqual(len(notes), 5, err)
        result = subprocess.run([CONTROLLER, "validate", f"--source=dir:{self.dir}", "--live"],
                                capture_output=True, text=True, timeout=60, check=False)
        self.assertEqual(result.returncode, 1)
        lines = result.stdout.strip().splitlines()
        self.assertEqual(len(lines), 5, result.stdout)
        for line in lines:
            self.assertRegex(line, r"^\S+\.yaml:\d+:\d+: LogonGroup default/\S+: "
                                   r".*\[NoEndpoints\]$")

    def test_other_examples_validate(self):
        # Every shipped example is clean: live state (a SapSystem not polled
        # yet) is a note, not a problem.
        for folder in ("examples/quickstart", "examples/seed-002", "examples/k8s",
                       "examples/sapsystem", "examples/cluster"):
            with self.subTest(folder=folder):
                code, out, err = run("validate", os.path.join(s.SOURCE_DIR, folder))
                self.assertEqual(code, 0, out + err)

    def test_modification_rules_example_is_checked_and_accepted(self):
        # kwd-proxy applies the rules: a mapping with valid ones is accepted.
        folder = os.path.join(s.SOURCE_DIR, "examples/modification-rules")
        code, out, err = run("validate", folder)
        self.assertEqual(code, 0, out + err)
        self.assertNotIn("Unsupported", out + err)
        self.assertNotIn("InvalidRule", out + err)
        # The same mapping with a pattern that does not compile: line and column.
        with open(os.path.join(folder, "urlmapping.yaml"), encoding="utf-8") as f:
            mapping = yaml.safe_load(f)
        with open(os.path.join(folder, "logongroups.yaml"), encoding="utf-8") as f:
            group = yaml.safe_load(f)
        mapping["spec"]["modifications"][0]["rules"] += "RegRewriteUrl ^/(a /b\n"
        code, out, err = self.validate([group, mapping])
        self.assertNotEqual(code, 0)
        self.assertIn("InvalidRule", out + err)
        self.assertIn("spec.modifications[0].rules: line 13, column 15: pattern", out + err)

    def test_bad_object_bases_validate(self):
        code, out, err = self.validate(list(bad_objects.BASES.values()))
        self.assertEqual(code, 0, out + err)

    def test_bad_objects_are_rejected_by_the_compiler_too(self):
        # One run over all of them (each has its own name, each UrlMapping its
        # own host unless the case is about hosts, so they do not conflict);
        # each must get the expected complaint on a line naming it.
        cases = [c for c in bad_objects.CASES if c["compiler"] is not None]
        self.assertGreaterEqual(len(cases), 30)
        objects = [bad_objects.BASE_LOGON_GROUP]
        for case in cases:
            bad = bad_objects.bad_object(case)
            base_hosts = bad_objects.BASE_URL_MAPPING["spec"]["hosts"]
            if case["kind"] == "UrlMapping" and bad["spec"]["hosts"] == base_hosts:
                bad["spec"]["hosts"] = [bad["metadata"]["name"] + ".example.com"]
            objects.append(bad)
        code, out, err = self.validate(objects)
        self.assertEqual(code, 1, out + err)
        lines = (out + err).splitlines()
        for case, bad in zip(cases, objects[1:]):
            with self.subTest(case=case["name"]):
                name = f"{case['kind']} default/{bad['metadata']['name']}:"
                mine = [line for line in lines if name in line]
                self.assertTrue(any(case["compiler"] in line for line in mine),
                                f"want {case['compiler']!r} for {name} in:\n" + "\n".join(mine))
        # Nothing else failed: the base LogonGroup is clean.
        self.assertFalse([line for line in lines if "LogonGroup default/grp:" in line])

    def test_schema_defaults_equal_the_compiler_defaults(self):
        # The same objects with and without the schema's defaults filled in
        # compile to the same snapshot (same content, same version hash).
        def group(name, kind, **spec):
            return {"apiVersion": bad_objects.API_VERSION, "kind": "LogonGroup",
                    "metadata": {"name": name},
                    "spec": {"kind": kind, "backend": {"staticServers": [
                        {"name": f"{name}_S_00", "address": "10.0.0.1", "port": 8000}]},
                        **spec}}
        minimal = [
            group("abap", "abap"),
            group("java", "java"),
            group("nested", "abap", healthCheck={}, upstreamTLS={},
                  sessionAffinity={"sessionTable": {}, "affinityCookie": {}}),
            {"apiVersion": bad_objects.API_VERSION, "kind": "LogonGroup",
             "metadata": {"name": "nokind"},
             "spec": {"backend": {"staticServers": [
                 {"name": "n_S_00", "address": "10.0.0.2", "port": 8000}]}}},
            {"apiVersion": bad_objects.API_VERSION, "kind": "UrlMapping",
             "metadata": {"name": "map"},
             "spec": {"rules": [{"prefix": "/sap/"}, {"prefix": "/irj/", "logonGroup": "java"}]}},
        ]
        defaulted = [s.apply_defaults(s.schema_of(self.crds[o["kind"]]), o) for o in minimal]
        self.assertNotEqual(defaulted, minimal)  # the schema did fill something in
        self.assertEqual(self.compile(defaulted), self.compile(minimal))

    def test_every_schema_field_is_a_field_the_controller_reads(self):
        # The controller refuses fields it does not know (nothing the data
        # plane ignores is accepted silently), so every field the CRD allows
        # must be one it reads: an object holding every spec field (values
        # need not be valid) gets no "unknown field" complaint.
        def every_field(schema):
            if "properties" in schema:
                return {k: every_field(v) for k, v in schema["properties"].items()}
            if schema.get("type") == "array":
                return [every_field(schema.get("items", {}))]
            return {"string": "x", "integer": 1, "boolean": True}.get(schema.get("type"), 1)
        objects = []
        for kind, crd in self.crds.items():
            spec = every_field(s.schema_of(crd)["properties"]["spec"])
            objects.append({"apiVersion": bad_objects.API_VERSION, "kind": kind,
                            "metadata": {"name": "every-field"}, "spec": spec})
        code, out, err = self.validate(objects)
        self.assertNotIn("unknown field", out + err)
        # ... and a field the CRD does not have is refused, at its line.
        extra = copy.deepcopy(bad_objects.BASE_LOGON_GROUP)
        extra["spec"]["strategee"] = "adaptive"
        code, out, err = self.validate([extra])
        self.assertEqual(code, 1, out + err)
        self.assertIn("spec.strategee: unknown field", out)

    def test_every_enum_value_is_accepted_by_the_compiler(self):
        objects = []
        enums = 0
        for kind, crd in self.crds.items():
            spec = s.schema_of(crd)["properties"]["spec"]
            for path, node in s.schema_nodes(spec, "spec"):
                if "enum" not in node:
                    continue
                enums += 1
                for value in node["enum"]:
                    obj = copy.deepcopy(bad_objects.BASES[kind])
                    index = len(objects)
                    obj["metadata"]["name"] = f"enum-{index}"
                    if kind == "UrlMapping":  # one host each: no conflicts
                        obj["spec"]["hosts"] = [f"h{index}.example.com"]
                    set_path(obj, path, value)
                    if path == "spec.upstreamTLS.mode" and value == "reencrypt":
                        # The base's servers are IP addresses: a name to verify.
                        obj["spec"]["upstreamTLS"]["serverName"] = "erp.example.com"
                    with self.subTest(field=path, value=value):
                        self.assertEqual(s.rejections(crd, obj), set())
                    objects.append(obj)
        self.assertGreaterEqual(enums, 7)
        code, out, err = self.validate([bad_objects.BASE_LOGON_GROUP] + objects)
        self.assertEqual(code, 0, out + err)


def set_path(obj, path, value):
    """Sets a schema path such as spec.rules[*].kind (every item, or the
    first list item for a list of scalars) to `value`."""
    parts = path.replace("[*]", ".[*]").split(".")
    _set(obj, parts, value)


def _set(node, parts, value):
    key, rest = parts[0], parts[1:]
    if key == "[*]":
        if not rest:
            node[:] = [value]
            return
        for item in node:
            _set(item, rest, value)
        return
    if not rest:
        node[key] = value
        return
    node.setdefault(key, [] if rest[0] == "[*]" else {})
    _set(node[key], rest, value)


if __name__ == "__main__":
    unittest.main()
