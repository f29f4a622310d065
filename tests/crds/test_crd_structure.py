"""The CRDs in crds/ are what the API server accepts and what kubectl users
see: structural schemas, names, versions, status subresource, printer
columns, descriptions, bounded CEL inputs, and defaults that are valid."""

import copy
import unittest

import jsonschema

import cel
import crd_support as s

EXPECTED_NAMES = {
    "LogonGroup": dict(plural="logongroups", singular="logongroup", listKind="LogonGroupList",
                       shortNames=["lg"]),
    "UrlMapping": dict(plural="urlmappings", singular="urlmapping", listKind="UrlMappingList",
                       shortNames=["um"]),
    "SapSystem": dict(plural="sapsystems", singular="sapsystem", listKind="SapSystemList",
                      shortNames=["sap"]),
}
# The columns `kubectl get` shows (priority 0), in order, and their jsonPaths.
EXPECTED_COLUMNS = {
    "LogonGroup": [
        ("Kind", "string", ".spec.kind"),
        ("Strategy", "string", ".spec.strategy"),
        ("Ready", "integer", ".status.readyServers"),
        ("Programmed", "string", '.status.conditions[?(@.type=="Programmed")].status'),
        ("Age", "date", ".metadata.creationTimestamp"),
    ],
    "UrlMapping": [
        # From status (issue 27): a JSONPath column shows only the first value
        # of a list, and an empty hosts list printed as [].
        ("Hosts", "string", ".status.hosts"),
        ("Rules", "integer", ".status.rules"),
        ("Accepted", "string", '.status.conditions[?(@.type=="Accepted")].status'),
        ("Age", "date", ".metadata.creationTimestamp"),
    ],
    "SapSystem": [
        ("SID", "string", ".spec.sid"),
        ("Message Server", "string", ".spec.messageServer.host"),
        ("Servers", "integer", ".status.servers"),
        ("Refreshed", "string", '.status.conditions[?(@.type=="Refreshed")].status'),
        ("Last Refresh", "date", ".status.lastRefreshTime"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ],
}
CONDITION_FIELDS = {"type", "status", "observedGeneration", "lastTransitionTime", "reason",
                    "message"}
# Column types and the schema types they can show.
COLUMN_TYPES = {"string": {"string", "array"}, "integer": {"integer"}, "number": {"number"},
                "boolean": {"boolean"}, "date": {"date"}}


class CrdStructureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.crds = s.load_crds()

    def test_both_kinds_are_defined(self):
        self.assertEqual(set(self.crds), {"LogonGroup", "UrlMapping", "SapSystem"})

    def test_names_group_scope(self):
        for kind, crd in self.crds.items():
            with self.subTest(kind=kind):
                names = crd["spec"]["names"]
                want = EXPECTED_NAMES[kind]
                self.assertEqual(crd["apiVersion"], "apiextensions.k8s.io/v1")
                self.assertEqual(crd["metadata"]["name"], f"{want['plural']}.{s.GROUP}")
                self.assertEqual(crd["spec"]["group"], s.GROUP)
                self.assertEqual(crd["spec"]["scope"], "Namespaced")
                self.assertEqual(names["kind"], kind)
                for key, value in want.items():
                    self.assertEqual(names[key], value, key)
                self.assertEqual(names["categories"], ["kwd", "sap"])

    def test_one_served_storage_version_with_status_subresource(self):
        for kind, crd in self.crds.items():
            with self.subTest(kind=kind):
                versions = crd["spec"]["versions"]
                self.assertEqual([v["name"] for v in versions], [s.VERSION])
                self.assertTrue(versions[0]["served"])
                self.assertTrue(versions[0]["storage"])
                self.assertEqual(versions[0]["subresources"], {"status": {}})

    def test_schemas_are_structural(self):
        for kind, crd in self.crds.items():
            with self.subTest(kind=kind):
                self.assertEqual(s.structural_problems(s.schema_of(crd)), [])

    def test_structural_check_finds_problems(self):
        # The checker itself: each of these is a schema the API server refuses.
        bad = {
            "no type": {"type": "object", "properties": {"a": {"description": "x"}}},
            "type in anyOf": {"type": "object", "properties": {
                "a": {"type": "string", "anyOf": [{"type": "string"}]}}},
            "default in anyOf": {"type": "object", "properties": {
                "a": {"type": "string", "anyOf": [{"default": "x"}]}}},
            "list map key not required": {"type": "object", "properties": {"a": {
                "type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["k"],
                "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}},
            "set of objects": {"type": "object", "properties": {"a": {
                "type": "array", "x-kubernetes-list-type": "set",
                "items": {"type": "object"}}}},
            "ref": {"type": "object", "properties": {"a": {"$ref": "#/x", "type": "string"}}},
            "metadata restricted": {"type": "object", "properties": {"metadata": {
                "type": "object", "properties": {"name": {"type": "string"}}}}},
            "rule without message": {"type": "object", "x-kubernetes-validations": [
                {"rule": "true"}]},
        }
        for name, schema in bad.items():
            with self.subTest(name=name):
                self.assertNotEqual(s.structural_problems(schema), [])

    def test_translated_schemas_are_valid_json_schemas(self):
        for kind, crd in self.crds.items():
            with self.subTest(kind=kind):
                jsonschema.Draft4Validator.check_schema(s.json_schema_of(crd))

    def test_printer_columns(self):
        for kind, crd in self.crds.items():
            with self.subTest(kind=kind):
                columns = s.version_of(crd)["additionalPrinterColumns"]
                shown = [(c["name"], c["type"], c["jsonPath"]) for c in columns
                         if c.get("priority", 0) == 0]
                self.assertEqual(shown, EXPECTED_COLUMNS[kind])
                self.assertEqual(len({c["name"] for c in columns}), len(columns))

    def test_printer_column_paths_resolve_to_fields_of_their_type(self):
        for kind, crd in self.crds.items():
            schema = s.schema_of(crd)
            for column in s.version_of(crd)["additionalPrinterColumns"]:
                with self.subTest(kind=kind, column=column["name"]):
                    node = s.resolve_json_path(schema, column["jsonPath"])
                    node_type = node["type"]
                    if node.get("format") == "date-time":
                        node_type = "date"
                    self.assertIn(node_type, COLUMN_TYPES[column["type"]])

    def test_json_path_resolver_rejects_missing_fields(self):
        schema = s.schema_of(self.crds["LogonGroup"])
        for path in (".status.readyServer", ".spec.backend[*]", ".metadata.labels",
                     '.status.conditions[?(@.kind=="Programmed")].status', ".spec.kind.x",
                     ".spec..kind"):
            with self.subTest(path=path):
                with self.assertRaises(ValueError):
                    s.resolve_json_path(schema, path)

    def test_status_has_the_fields_the_controller_writes(self):
        # controller/pipeline/status.cc: observedGeneration, readyServers
        # (LogonGroup), rules and hosts (UrlMapping), conditions with metav1.Condition's fields.
        for kind, crd in self.crds.items():
            with self.subTest(kind=kind):
                status = s.schema_of(crd)["properties"]["status"]["properties"]
                want = {"observedGeneration", "conditions"}
                if kind == "LogonGroup":
                    want.add("readyServers")
                if kind == "SapSystem":
                    want |= {"servers", "lastRefreshTime"}
                if kind == "UrlMapping":
                    want |= {"rules", "hosts"}  # the Rules and Hosts columns
                self.assertEqual(set(status), want)
                conditions = status["conditions"]
                self.assertEqual(conditions["x-kubernetes-list-type"], "map")
                self.assertEqual(conditions["x-kubernetes-list-map-keys"], ["type"])
                item = conditions["items"]
                self.assertEqual(set(item["properties"]), CONDITION_FIELDS)
                self.assertEqual(set(item["required"]), CONDITION_FIELDS - {"observedGeneration"})
                self.assertEqual(item["properties"]["status"]["enum"], ["True", "False", "Unknown"])

    def test_written_status_validates(self):
        # A status as controller/pipeline/status.cc writes it.
        conditions = [
            {"type": t, "status": "True", "reason": t, "message": "ok", "observedGeneration": 3,
             "lastTransitionTime": "2026-11-30T10:00:00Z"}
            for t in ("Accepted", "ResolvedRefs", "Programmed")]
        for kind, crd in self.crds.items():
            with self.subTest(kind=kind):
                obj = {"apiVersion": f"{s.GROUP}/{s.VERSION}", "kind": kind,
                       "metadata": {"name": "x"}, "spec": {"backend": {"service": {"name": "x"}}}
                       if kind == "LogonGroup" else
                       {"messageServer": {"host": "ms", "httpPort": 8101}}
                       if kind == "SapSystem" else {},
                       "status": {"observedGeneration": 3,
                                  "conditions": copy.deepcopy(conditions)}}
                if kind == "LogonGroup":
                    obj["status"]["readyServers"] = 2
                if kind == "SapSystem":
                    obj["status"]["servers"] = 4
                    obj["status"]["lastRefreshTime"] = "2026-11-30T10:00:25Z"
                self.assertEqual(s.rejections(crd, obj), set())
                obj["status"]["conditions"][0]["reason"] = "not camel case"
                self.assertEqual(s.rejections(crd, obj), {
                    ("schema", "status.conditions.0.reason", "pattern")})

    def test_every_spec_field_has_a_description(self):
        for kind, crd in self.crds.items():
            spec = s.schema_of(crd)["properties"]["spec"]
            for path, node in s.schema_nodes(spec, "spec"):
                if path.endswith("[*]"):
                    continue  # list items are described by their list
                with self.subTest(kind=kind, field=path):
                    self.assertTrue(node.get("description", "").strip())

    def test_cel_inputs_are_bounded(self):
        # The API server estimates each rule's cost from maxItems/maxLength
        # and refuses a CRD whose rules could exceed the budget.
        for kind, crd in self.crds.items():
            for path, node in s.schema_nodes(s.schema_of(crd)):
                if not node.get("x-kubernetes-validations"):
                    continue
                with self.subTest(kind=kind, node=path):
                    if node.get("type") == "array":
                        self.assertIn("maxItems", node)
                        for _, item in s.schema_nodes(node["items"]):
                            if item.get("type") == "string":
                                self.assertIn("maxLength", item)
                    elif node.get("type") == "string":
                        self.assertIn("maxLength", node)

    def test_every_rule_is_in_the_evaluated_subset_and_has_a_message(self):
        count = 0
        for kind, crd in self.crds.items():
            for path, rule, message in s.cel_rules(s.schema_of(crd)):
                with self.subTest(kind=kind, node=path, rule=rule):
                    cel.compile_rule(rule)
                    self.assertTrue(message)
                    count += 1
        self.assertGreaterEqual(count, 6)

    def test_defaults_are_valid_values_of_their_fields(self):
        validator_class = s._Validator
        for kind, crd in self.crds.items():
            for path, node in s.schema_nodes(s.schema_of(crd)):
                if "default" not in node:
                    continue
                with self.subTest(kind=kind, field=path):
                    translated = s._translate(node)
                    defaulted = s.apply_defaults(node, node["default"])
                    self.assertEqual(list(validator_class(translated).iter_errors(defaulted)), [])

    def test_fields_without_schema_default(self):
        # Absent and explicit differ here (an explicit value conflicts with
        # another UrlMapping for the same host), so no schema default.
        spec = s.schema_of(self.crds["UrlMapping"])["properties"]["spec"]["properties"]
        self.assertNotIn("default", spec["defaultRootHandler"])
        self.assertNotIn("default", spec["defaultGroups"])
        self.assertNotIn("default", spec["defaultGroups"]["properties"]["abap"])
        # sapHeaders: a switch left out follows the group's kind (on for abap).
        for switch in ("clientProtocol", "accessPoints"):
            self.assertNotIn("default", spec["sapHeaders"]["properties"][switch])
            self.assertEqual(spec["sapHeaders"]["properties"][switch]["type"], "boolean")
        # The health check path depends on the kind.
        lg = s.schema_of(self.crds["LogonGroup"])["properties"]["spec"]["properties"]
        self.assertNotIn("default", lg["healthCheck"]["properties"]["path"])


if __name__ == "__main__":
    unittest.main()
