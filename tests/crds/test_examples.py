"""Every LogonGroup and UrlMapping in examples/ passes the CRDs (OpenAPI
schema and CEL rules); every deliberately bad object in bad_objects.py is
rejected, each for exactly the expected reasons."""

import glob
import os
import unittest

import bad_objects
import cel
import crd_support as s

# Folders whose LogonGroups/UrlMappings users apply; each must hold some.
EXAMPLE_DIRS = ["examples/cluster", "examples/quickstart", "examples/seed-002", "examples/k8s",
                "examples/sapsystem", "examples/modification-rules"]


def example_objects():
    """[(file:index, object)] of every LogonGroup/UrlMapping in the examples."""
    out = []
    for folder in EXAMPLE_DIRS:
        for path in sorted(glob.glob(os.path.join(s.SOURCE_DIR, folder, "**", "*.yaml"),
                                     recursive=True)):
            for i, doc in enumerate(s.load_yaml_documents(path)):
                if doc.get("kind") in ("LogonGroup", "UrlMapping", "SapSystem"):
                    out.append((f"{os.path.relpath(path, s.SOURCE_DIR)}#{i}", doc))
    return out


class ExamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.crds = s.load_crds()
        cls.examples = example_objects()

    def test_every_example_folder_has_objects_of_both_kinds(self):
        for folder in EXAMPLE_DIRS:
            with self.subTest(folder=folder):
                kinds = {obj["kind"] for where, obj in self.examples if where.startswith(folder)}
                self.assertLessEqual({"LogonGroup", "UrlMapping"}, kinds)

    def test_cluster_examples_set_no_namespace(self):
        for where, obj in self.examples:
            if where.startswith("examples/cluster/"):
                with self.subTest(object=where):
                    self.assertEqual(obj["apiVersion"], "dispatch.kwd.io/v1alpha1")
                    self.assertNotIn("namespace", obj["metadata"])

    def test_cluster_logon_groups_name_services_and_ports_that_exist(self):
        objects = [doc for path in glob.glob(os.path.join(s.SOURCE_DIR, "examples/cluster/*.yaml"))
                   for doc in s.load_yaml_documents(path)]
        services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
        groups = [o for o in objects if o["kind"] == "LogonGroup"]
        self.assertGreaterEqual(len(groups), 4)
        for group in groups:
            with self.subTest(group=group["metadata"]["name"]):
                ref = group["spec"]["backend"]["service"]
                self.assertIn(ref["name"], services)
                ports = services[ref["name"]]["spec"]["ports"]
                self.assertTrue(any(ref["port"] in (p.get("name"), p["port"]) for p in ports))
        names = {g["metadata"]["name"] for g in groups}
        self.assertTrue({"diag", "j2ee"} <= names, "the SAP internal groups")
        mapping = next(o for o in objects if o["kind"] == "UrlMapping")
        used = {r["logonGroup"] for r in mapping["spec"]["rules"] if "logonGroup" in r}
        used |= set(mapping["spec"]["defaultGroups"].values())
        self.assertEqual(used - names, set())

    def test_cluster_demo_backends_use_the_chart_image(self):
        values_path = os.path.join(s.SOURCE_DIR, "deploy/helm/kwd/values.yaml")
        chart_path = os.path.join(s.SOURCE_DIR, "deploy/helm/kwd/Chart.yaml")
        if not (os.path.exists(values_path) and os.path.exists(chart_path)):
            self.skipTest("no Helm chart")
        repository = s.load_yaml_documents(values_path)[0]["image"]["repository"]
        app_version = s.load_yaml_documents(chart_path)[0]["appVersion"]
        path = os.path.join(s.SOURCE_DIR, "examples/cluster/demo-backends.yaml")
        deployments = [d for d in s.load_yaml_documents(path) if d["kind"] == "Deployment"]
        self.assertEqual(len(deployments), 2)
        for deployment in deployments:
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                with self.subTest(deployment=deployment["metadata"]["name"]):
                    self.assertEqual(container["image"], f"{repository}:{app_version}")
                    self.assertEqual(container["command"], ["/usr/local/bin/kwd-demo-backend"])

    def test_examples_pass_the_schema(self):
        for where, obj in self.examples:
            with self.subTest(object=where):
                self.assertEqual(s.schema_errors(self.crds[obj["kind"]], obj), [])

    def test_examples_pass_every_cel_rule(self):
        evaluated = 0
        for where, obj in self.examples:
            with self.subTest(object=where):
                self.assertEqual(s.cel_errors(self.crds[obj["kind"]], obj), [])
                evaluated += 1
        self.assertGreaterEqual(evaluated, 15)

    def test_bad_objects_are_rejected_for_the_expected_reasons(self):
        self.assertGreaterEqual(len(bad_objects.CASES), 30)
        self.assertEqual(len({c["name"] for c in bad_objects.CASES}), len(bad_objects.CASES))
        for case in bad_objects.CASES:
            with self.subTest(case=case["name"]):
                self.assertTrue(case["crd"], "a bad object must have an expected rejection")
                obj = bad_objects.bad_object(case)
                self.assertEqual(s.rejections(self.crds[case["kind"]], obj), case["crd"])

    def test_bad_object_bases_are_good(self):
        for kind, obj in bad_objects.BASES.items():
            with self.subTest(kind=kind):
                self.assertEqual(s.rejections(self.crds[kind], obj), set())

    def test_bad_objects_fail_exactly_the_named_cel_rules(self):
        # The rules themselves, without the API server's blocking: every case
        # that expects a rule violation gets exactly those from cel_errors().
        for case in bad_objects.CASES:
            if bad_objects.SKIPPED in case["crd"]:
                continue
            with self.subTest(case=case["name"]):
                want = {(path, message) for what, path, message in case["crd"] if what == "cel"}
                got = set(s.cel_errors(self.crds[case["kind"]], bad_objects.bad_object(case)))
                self.assertEqual(got, want)

    def test_every_cel_rule_rejects_some_bad_object(self):
        messages = {m for c in bad_objects.CASES for what, _, m in c["crd"] if what == "cel"}
        for kind, crd in self.crds.items():
            for path, rule, message in s.cel_rules(s.schema_of(crd)):
                with self.subTest(kind=kind, rule=rule):
                    self.assertIn(message, messages)

    def test_defaults_are_applied_before_rules(self):
        # An empty healthCheck gets its defaults; a static server without a
        # capacity passes the capacity rule.
        lg = s.apply_defaults(s.schema_of(self.crds["LogonGroup"]), bad_objects.BASE_LOGON_GROUP)
        self.assertEqual(lg["spec"]["healthCheck"], {"intervalSeconds": 25, "timeoutSeconds": 5,
                                                     "unhealthyThreshold": 2,
                                                     "healthyThreshold": 1})
        self.assertEqual(lg["spec"]["sessionAffinity"]["affinityCookie"],
                         {"enabled": True, "name": "kwd_affinity"})
        self.assertNotIn("capacity", lg["spec"]["backend"]["staticServers"][1])
        self.assertEqual(bad_objects.BASE_LOGON_GROUP["spec"].get("healthCheck"), None)

    def test_rule_errors_are_reported_not_passed(self):
        # A rule that errors at run time counts as a violation.
        schema = {"type": "object", "properties": {"a": {
            "type": "string", "x-kubernetes-validations": [
                {"rule": "self.b == 1", "message": "b"}]}}}
        crd = {"spec": {"versions": [{"name": s.VERSION,
                                      "schema": {"openAPIV3Schema": schema}}]}}
        self.assertEqual(s.cel_errors(crd, {"a": "x"}),
                         [("a", "b (evaluation error: cannot select 'b' from string)")])
        with self.assertRaises(cel.CelSyntaxError):
            schema["properties"]["a"]["x-kubernetes-validations"][0]["rule"] = "self + 1"
            s.cel_errors(crd, {"a": "x"})


if __name__ == "__main__":
    unittest.main()
