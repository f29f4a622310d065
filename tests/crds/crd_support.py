"""What the API server does with kwd's CRDs, as far as the tests need it.

- load_crds(): the CRDs in crds/, by kind.
- apply_defaults(): structural defaulting (a missing property with a default
  gets it, then defaults apply inside, also inside what was just defaulted).
- schema_errors(): OpenAPI validation with python3-jsonschema, after this
  translation of OpenAPI-only keywords (documented, as the tests rely on it):
    * Draft 4 semantics (OpenAPI v3.0 keywords are Draft 4's plus extras);
    * `x-kubernetes-int-or-string` nodes keep their `anyOf: [integer,
      string]`; value checks beside it (minimum, pattern, ...) apply only to
      the matching JSON type, exactly as in the API server;
    * objects with `properties` get `additionalProperties: false` unless
      `x-kubernetes-preserve-unknown-fields`, because kubectl's strict field
      validation (the default) rejects unknown fields;
    * `x-kubernetes-list-type: map|set` becomes a keyword that rejects
      duplicate keys / items (the API server's "Duplicate value");
    * `format` is informational here (no format checker), other x-kubernetes-*
      keywords are ignored by jsonschema.
- rejections(): both, as the API server combines them.
- cel_errors(): every x-kubernetes-validations rule evaluated with cel.py at
  the node that declares it, on the defaulted object, for every present value.
- structural_problems(): the API server's structural-schema rules that a CRD
  must pass to be created.
- resolve_json_path(): where a printer column's jsonPath lands in the schema.
"""

import copy
import glob
import os
import re

import jsonschema
import yaml

import cel

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
CRD_DIR = os.path.join(SOURCE_DIR, "crds")
GROUP = "dispatch.kwd.io"
VERSION = "v1alpha1"


def load_yaml_documents(path):
    with open(path, encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def load_crds():
    """{kind: CRD} for every CustomResourceDefinition in crds/."""
    crds = {}
    for path in sorted(glob.glob(os.path.join(CRD_DIR, "*.yaml"))):
        for doc in load_yaml_documents(path):
            if doc.get("kind") == "CustomResourceDefinition":
                crds[doc["spec"]["names"]["kind"]] = doc
    return crds


def version_of(crd, name=VERSION):
    for version in crd["spec"]["versions"]:
        if version["name"] == name:
            return version
    raise KeyError(f"{crd['metadata']['name']} has no version {name}")


def schema_of(crd):
    return version_of(crd)["schema"]["openAPIV3Schema"]


# ---- defaulting ----

def apply_defaults(schema, value):
    """A defaulted deep copy of `value`."""
    value = copy.deepcopy(value)
    _default(schema, value)
    return value


def _default(schema, value):
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, prop in properties.items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
        for name, child in value.items():
            if name in properties:
                _default(properties[name], child)
            elif isinstance(schema.get("additionalProperties"), dict):
                _default(schema["additionalProperties"], child)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for child in value:
            _default(schema["items"], child)


# ---- OpenAPI validation (jsonschema) ----

def _translate(schema):
    if isinstance(schema, list):
        return [_translate(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, child in schema.items():
        if key in ("properties",):
            out[key] = {name: _translate(prop) for name, prop in child.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _translate(child)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_translate(s) for s in child]
        elif key == "x-kubernetes-validations":
            continue  # cel_errors() evaluates these
        else:
            out[key] = copy.deepcopy(child)
    if "properties" in out and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


def _list_type(validator, list_type, instance, schema):
    if not isinstance(instance, list):
        return
    seen = {}
    for i, item in enumerate(instance):
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys", [])
            key = repr([item.get(k) if isinstance(item, dict) else None for k in keys])
        elif list_type == "set":
            key = repr(item)
        else:
            continue
        if key in seen:
            yield jsonschema.ValidationError(
                f"Duplicate value: item {i} repeats item {seen[key]} ({key})")
        seen.setdefault(key, i)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft4Validator, {"x-kubernetes-list-type": _list_type})


def json_schema_of(crd):
    return _translate(schema_of(crd))


def schema_errors(crd, obj):
    """[(path, keyword, message)] of the defaulted object, sorted."""
    defaulted = apply_defaults(schema_of(crd), obj)
    validator = _Validator(json_schema_of(crd))
    errors = []
    for error in validator.iter_errors(defaulted):
        path = ".".join(str(p) for p in error.absolute_path)
        errors.append((path, error.validator, error.message))
    return sorted(errors)


# ---- CEL ----

def cel_rules(schema, path="", out=None):
    """[(schema path, rule, message)] of every x-kubernetes-validations rule."""
    if out is None:
        out = []
    for rule in schema.get("x-kubernetes-validations", []):
        out.append((path, rule["rule"], rule.get("message", "")))
    for name, prop in schema.get("properties", {}).items():
        cel_rules(prop, f"{path}.{name}" if path else name, out)
    if isinstance(schema.get("items"), dict):
        cel_rules(schema["items"], path + "[*]", out)
    if isinstance(schema.get("additionalProperties"), dict):
        cel_rules(schema["additionalProperties"], path + "{*}", out)
    return out


def _cel(schema, value, path, out):
    for rule in schema.get("x-kubernetes-validations", []):
        try:
            ok = cel.evaluate(rule["rule"], value)
            if ok is not True:
                out.append((path, rule["message"]))
        except cel.CelError as error:
            out.append((path, f"{rule['message']} (evaluation error: {error})"))
    if isinstance(value, dict):
        for name, child in value.items():
            prop = schema.get("properties", {}).get(name)
            if prop is None and isinstance(schema.get("additionalProperties"), dict):
                prop = schema["additionalProperties"]
            if prop is not None:
                _cel(prop, child, f"{path}.{name}" if path else name, out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, child in enumerate(value):
            _cel(schema["items"], child, f"{path}.{i}" if path else str(i), out)


def cel_errors(crd, obj):
    """[(path, message)] of every rule that does not hold on the defaulted object."""
    schema = schema_of(crd)
    out = []
    _cel(schema, apply_defaults(schema, obj), "", out)
    return out


# What the API server says instead of running the rules on an object with
# type or enum errors (apiextensions-apiserver: hasBlockingErr).
CEL_SKIPPED = ("some validation rules were not checked because the object was invalid; "
               "correct the existing errors to complete validation")
_BLOCKING_KEYWORDS = {"type", "enum"}


def rejections(crd, obj):
    """Everything the API server would reject `obj` for, as a set of
    ("schema", path, keyword) and ("cel", path, message); CEL rules run only
    when no type or enum error blocks them."""
    schema = {("schema", path, keyword) for path, keyword, _ in schema_errors(crd, obj)}
    if any(keyword in _BLOCKING_KEYWORDS for _, _, keyword in schema):
        return schema | {("cel", "", CEL_SKIPPED)}
    return schema | {("cel", path, message) for path, message in cel_errors(crd, obj)}


# ---- structural schema ----

_FORBIDDEN = {"$ref", "definitions", "dependencies", "additionalItems", "patternProperties",
              "id", "$schema", "$id", "uniqueItems"}
# Not allowed inside allOf/anyOf/oneOf/not (value validations).
_NOT_IN_VALUE_VALIDATION = {"type", "additionalProperties", "default", "description", "title",
                            "nullable", "x-kubernetes-preserve-unknown-fields",
                            "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string",
                            "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
                            "x-kubernetes-map-type", "x-kubernetes-validations"}
_SCALARS = {"string", "integer", "number", "boolean"}
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_problems(schema, path="<root>", root=True):
    """The ways `schema` is not a structural schema (empty: it is one)."""
    problems = []
    for key in sorted(_FORBIDDEN & schema.keys()):
        if key != "uniqueItems" or schema[key]:
            problems.append(f"{path}: {key} is not allowed")
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if not schema.get("type") and not int_or_string and not preserve:
        problems.append(f"{path}: no type")
    if int_or_string and schema.get("type"):
        problems.append(f"{path}: x-kubernetes-int-or-string with a type")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: properties and additionalProperties together")
    if "items" in schema and not isinstance(schema["items"], dict):
        problems.append(f"{path}: items must be one schema")
    if schema.get("type") == "array" and "items" not in schema:
        problems.append(f"{path}: an array without items")
    for key in ("allOf", "anyOf", "oneOf", "not"):
        if key not in schema:
            continue
        branches = schema[key] if key != "not" else [schema[key]]
        if int_or_string and key == "anyOf" and branches == _INT_OR_STRING:
            continue
        for i, branch in enumerate(branches):
            problems += _value_validation_problems(branch, f"{path}.{key}[{i}]")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type is not None:
        items = schema.get("items", {})
        if schema.get("type") != "array":
            problems.append(f"{path}: x-kubernetes-list-type on a {schema.get('type')}")
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            if items.get("type") != "object" or not keys:
                problems.append(f"{path}: list-type map needs object items and map keys")
            for key in keys:
                prop = items.get("properties", {}).get(key)
                if prop is None or prop.get("type") not in _SCALARS:
                    problems.append(f"{path}: map key {key} must be a scalar property")
                elif key not in items.get("required", []) and "default" not in prop:
                    problems.append(f"{path}: map key {key} must be required or defaulted")
        elif list_type == "set":
            if items.get("type") not in _SCALARS:
                problems.append(f"{path}: list-type set needs scalar items")
        elif list_type != "atomic":
            problems.append(f"{path}: unknown list type {list_type}")
    for rule in schema.get("x-kubernetes-validations", []):
        if not rule.get("rule") or not rule.get("message"):
            problems.append(f"{path}: a validation rule without rule or message")
    if root:
        if schema.get("type") != "object":
            problems.append(f"{path}: the root must be an object")
        metadata = schema.get("properties", {}).get("metadata", {})
        if set(metadata.keys()) - {"type", "description"}:
            problems.append(f"{path}.metadata: only type (and description) may be set")
    for name, prop in schema.get("properties", {}).items():
        problems += structural_problems(prop, f"{path}.{name}", root=False)
    if isinstance(schema.get("items"), dict):
        problems += structural_problems(schema["items"], f"{path}[*]", root=False)
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(schema["additionalProperties"], f"{path}{{*}}", root=False)
    return problems


def _value_validation_problems(schema, path):
    problems = [f"{path}: {key} is not allowed in a value validation"
                for key in sorted(_NOT_IN_VALUE_VALIDATION & schema.keys())]
    for key in ("allOf", "anyOf", "oneOf"):
        for i, branch in enumerate(schema.get(key, [])):
            problems += _value_validation_problems(branch, f"{path}.{key}[{i}]")
    for name, prop in schema.get("properties", {}).items():
        problems += _value_validation_problems(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        problems += _value_validation_problems(schema["items"], f"{path}[*]")
    return problems


def schema_nodes(schema, path="<root>"):
    """(path, node) for every schema node, depth first."""
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from schema_nodes(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from schema_nodes(schema["items"], f"{path}[*]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_nodes(schema["additionalProperties"], f"{path}{{*}}")


# ---- printer columns ----

# ObjectMeta fields a printer column may use (metadata has no schema in a CRD).
_OBJECT_META = {"name": "string", "namespace": "string", "creationTimestamp": "date",
                "generation": "integer", "uid": "string", "resourceVersion": "string"}
_JSON_PATH_STEP = re.compile(
    r"""\.(?P<field>[A-Za-z_][A-Za-z0-9_]*)
      | \[\*\]
      | \[\?\(@\.(?P<filter_field>[A-Za-z_][A-Za-z0-9_]*)==(?P<filter_value>"[^"]*")\)\]""",
    re.VERBOSE)


def resolve_json_path(schema, json_path):
    """The schema node a printer column's jsonPath selects (a dict with
    'type'), or raises ValueError naming the step that does not resolve."""
    pos = 0
    node = schema
    in_metadata = False
    while pos < len(json_path):
        m = _JSON_PATH_STEP.match(json_path, pos)
        if m is None:
            raise ValueError(f"{json_path}: unsupported syntax at {json_path[pos:]!r}")
        if in_metadata:
            field = m.group("field")
            if field not in _OBJECT_META or m.end() != len(json_path):
                raise ValueError(f"{json_path}: metadata.{field} is not a printable field")
            return {"type": _OBJECT_META[field]}
        if m.group("field"):
            field = m.group("field")
            if node is schema and field == "metadata":
                in_metadata = True
            elif field not in node.get("properties", {}):
                raise ValueError(f"{json_path}: no field {field!r} at {json_path[:pos] or '.'}")
            else:
                node = node["properties"][field]
        else:
            if node.get("type") != "array":
                raise ValueError(f"{json_path}: {json_path[:pos]} is not a list")
            node = node["items"]
            if m.group("filter_field") and m.group("filter_field") not in node.get("properties", {}):
                raise ValueError(f"{json_path}: list items have no {m.group('filter_field')!r}")
        pos = m.end()
    if in_metadata:
        raise ValueError(f"{json_path}: selects all of metadata")
    return node
