#!/usr/bin/env python3
"""A fake Kubernetes API server for kwd's tests (Python 3 standard library only).

Serves the resources kwd uses with the shapes of the real API (Kubernetes
API concepts: list, watch, status subresource): list with limit/continue, watch
with resourceVersion, bookmarks and 410 Gone, PUT with optimistic concurrency,
merge-patch on /status, Status bodies for every error, optional bearer token.

Started by tests on 127.0.0.1 port 0; prints "listening 127.0.0.1:PORT".

Control API for tests (never authenticated):
  POST /_fake/objects        {"op": "upsert"|"delete", "object": {...}} or a list of those;
                             bypasses admission (status is written too) but emits watch events.
  POST /_fake/compact        {"expireWatches": bool}: forget history up to the current
                             resourceVersion; optionally end every open watch with ERROR 410.
  POST /_fake/drop-watches   cut every open watch (socket closed, no terminating chunk).
  POST /_fake/stall-watches  {"stalled": bool}: open watches send no bytes while stalled.
  POST /_fake/bookmark       every open watch that asked for bookmarks gets one now.
  POST /_fake/progress-notify  what etcd's progress notification does to a 1.28 watch cache:
                             every resource type counts as having reached the current
                             resourceVersion (see bookmarkMode "progress").
  POST /_fake/scale-to-zero  {"namespace": NS, "service": NAME}: what the EndpointSlice controller
                             does when a Service's pods are gone (Deployment scaled to 0): every
                             slice of the Service is rewritten with "endpoints": null and
                             "ports": null (a MODIFIED event each).
  POST /_fake/fail           {"count": N, "code": 429, "reason": "", "retryAfter": 1,
                             "match": "substr"}: answer the next N API requests whose
                             "METHOD /path?query" contains match with that error.
                             {"clear": true} forgets every injected failure.
  POST /_fake/config         {"token": "...", "watchGoneMode": "event"|"http",
                             "bookmarkIntervalSeconds": S, "bookmarkMode": "always"|"progress"}
                             bookmarkMode "progress" is a Kubernetes 1.28 API server: a periodic
                             bookmark goes to a watch only once its resource type has moved
                             past the watch's starting resourceVersion (an event of that type,
                             or a progress notification); a quiet type's watch gets no byte
                             at all until timeoutSeconds ends it.
  GET  /_fake/requests       log of API requests (not control ones); DELETE /_fake/requests clears it.
  GET  /_fake/state          {"resourceVersion": "...", "compactedResourceVersion": "...",
                             "openWatches": N}
"""

import argparse
import base64
import copy
import datetime
import json
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Resource:
    def __init__(self, group, version, kind, plural, custom, status_subresource):
        self.group = group
        self.version = version
        self.kind = kind
        self.plural = plural
        self.custom = custom
        self.status_subresource = status_subresource

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self):
        # How error messages name a resource: "logongroups.dispatch.kwd.io", "pods".
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES = [
    Resource("dispatch.kwd.io", "v1alpha1", "LogonGroup", "logongroups", True, True),
    Resource("dispatch.kwd.io", "v1alpha1", "UrlMapping", "urlmappings", True, True),
    Resource("dispatch.kwd.io", "v1alpha1", "SapSystem", "sapsystems", True, True),
    Resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", False, False),
    Resource("", "v1", "Pod", "pods", False, True),
    Resource("coordination.k8s.io", "v1", "Lease", "leases", False, False),
    Resource("", "v1", "Secret", "secrets", False, False),
    Resource("events.k8s.io", "v1", "Event", "events", False, False),
]
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_KIND = {(r.api_version, r.kind): r for r in RESOURCES}


def validate_event(obj):
    """What the real API server requires of an events.k8s.io/v1 Event (422 otherwise)."""
    problems = []
    for field in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
        if not obj.get(field):
            problems.append(f"{field}: Required value")
    if obj.get("type") not in ("Normal", "Warning"):
        problems.append("type: Unsupported value: should be Normal or Warning")
    if len(obj.get("note") or "") > 1024:
        problems.append("note: Too long: must have at most 1024 bytes")
    if len(obj.get("action") or "") > 128 or len(obj.get("reason") or "") > 128:
        problems.append("action/reason: Too long: must have at most 128 bytes")
    regarding = obj.get("regarding") or {}
    if not regarding.get("kind") or not regarding.get("name"):
        problems.append("regarding: Required value")
    if problems:
        raise ApiError(422, "Invalid", "Event.events.k8s.io is invalid: " + "; ".join(problems))


def normalize_secret(obj):
    """What the real API server does with a v1 Secret on write: `data` values
    must be base64 (400 otherwise), `stringData` is merged into `data` as
    base64 and never returned, `type` defaults to Opaque, and a
    kubernetes.io/tls Secret needs both tls.crt and tls.key keys (422)."""
    data = obj.get("data") or {}
    for key, value in data.items():
        try:
            base64.b64decode(value, validate=True)
        except (ValueError, TypeError):
            raise ApiError(400, "BadRequest",
                           f"Secret in version \"v1\" cannot be handled as a Secret: "
                           f"illegal base64 data in data[{key}]")
    for key, value in (obj.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(value.encode()).decode()
    if data:
        obj["data"] = data
    obj.setdefault("type", "Opaque")
    if obj["type"] == "kubernetes.io/tls":
        missing = [k for k in ("tls.crt", "tls.key") if k not in data]
        if missing:
            raise ApiError(422, "Invalid", "Secret \"%s\" is invalid: %s" % (
                obj["metadata"].get("name", ""),
                "; ".join(f"data[{k}]: Required value" for k in missing)))


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.body = status_body(code, reason, message, details)
        self.headers = headers or {}


def not_found(res, name):
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.plural})


def conflict(res, name):
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has '
                    "been modified; please apply your changes to the latest version and try again",
                    {"name": name, "group": res.group, "kind": res.plural})


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def parse_selector(text):
    """Equality-based label selectors: a=b, a==b, a!=b, a, !a (comma = AND)."""
    terms = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        if "!=" in part:
            key, value = part.split("!=", 1)
            terms.append(("ne", key.strip(), value.strip()))
        elif "==" in part:
            key, value = part.split("==", 1)
            terms.append(("eq", key.strip(), value.strip()))
        elif "=" in part:
            key, value = part.split("=", 1)
            terms.append(("eq", key.strip(), value.strip()))
        elif part.startswith("!"):
            terms.append(("absent", part[1:].strip(), None))
        else:
            terms.append(("exists", part, None))
    return terms


def selector_matches(terms, obj):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for op, key, value in terms:
        if op == "eq" and labels.get(key) != value:
            return False
        if op == "ne" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "absent" and key in labels:
            return False
    return True


class Watch:
    def __init__(self, res, namespace, selector, bookmarks):
        self.res = res
        self.namespace = namespace
        self.selector = selector
        self.bookmarks = bookmarks
        self.events = []  # encoded lines waiting to be sent
        self.dropped = False
        self.expired = False
        self.gone_message = ""
        self.bookmark_now = False
        self.start_rv = 0  # the resourceVersion the watch started from (0: current state)

    def matches(self, res, obj):
        if res is not self.res:
            return False
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return False
        return selector_matches(self.selector, obj)


class State:
    def __init__(self, token, bookmark_interval):
        self.cond = threading.Condition()
        self.rv = 1000
        self.compacted_rv = 0
        self.objects = {r.plural: {} for r in RESOURCES}  # plural -> (ns, name) -> object
        self.history = []  # (rv, res, event type, object)
        self.watches = []
        self.stalled = False
        self.token = token
        self.watch_gone_mode = "event"
        self.bookmark_interval = bookmark_interval
        self.bookmark_mode = "always"
        self.type_rv = {r.plural: 0 for r in RESOURCES}  # how far each type's watch cache got
        self.failures = []  # [remaining, code, retry_after, match]
        self.requests = []
        self.continue_snapshots = {}

    # All methods below are called with self.cond held.

    def next_rv(self):
        self.rv += 1
        return str(self.rv)

    def record(self, res, event_type, obj):
        self.history.append((int(obj["metadata"]["resourceVersion"]), res, event_type, obj))
        self.type_rv[res.plural] = int(obj["metadata"]["resourceVersion"])
        line = encode_event(event_type, obj)
        for watch in self.watches:
            if watch.matches(res, obj):
                watch.events.append(line)
        self.cond.notify_all()

    def store(self, res, obj, previous):
        """Stores obj (already validated), bumping resourceVersion and generation."""
        if res.kind == "Secret":
            normalize_secret(obj)
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"] = res.api_version
        obj["kind"] = res.kind
        if previous is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            if res.custom:
                meta["generation"] = 1
        else:
            meta["uid"] = previous["metadata"]["uid"]
            meta["creationTimestamp"] = previous["metadata"]["creationTimestamp"]
            if res.custom:
                generation = previous["metadata"].get("generation", 1)
                if obj.get("spec") != previous.get("spec"):
                    generation += 1
                meta["generation"] = generation
            comparable = copy.deepcopy(obj)
            comparable["metadata"]["resourceVersion"] = previous["metadata"]["resourceVersion"]
            if comparable == previous:
                return previous  # a no-op write does not create a new version
        meta["resourceVersion"] = self.next_rv()
        self.objects[res.plural][(meta["namespace"], meta["name"])] = obj
        self.record(res, "ADDED" if previous is None else "MODIFIED", obj)
        return obj

    def delete(self, res, key):
        obj = copy.deepcopy(self.objects[res.plural].pop(key))
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.record(res, "DELETED", obj)
        return obj


def encode_event(event_type, obj):
    return (json.dumps({"type": event_type, "object": obj}, separators=(",", ":")) + "\n").encode()


def list_item(res, obj):
    item = copy.deepcopy(obj)
    if not res.custom:
        # Typed lists drop kind/apiVersion from their items; custom-resource lists keep them.
        item.pop("kind", None)
        item.pop("apiVersion", None)
    return item


STATE = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep test output quiet
        pass

    # ---- plumbing ----

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, code, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def dispatch(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        body = self.read_body()
        with STATE.cond:
            if not url.path.startswith("/_fake/"):  # the log shows what clients did
                STATE.requests.append({
                    "method": method, "path": url.path, "query": query,
                    "contentType": self.headers.get("Content-Type", ""),
                    "authorization": self.headers.get("Authorization", "")})
        try:
            if url.path.startswith("/_fake/"):
                self.control(method, url.path, body)
                return
            self.check_auth()
            self.check_injected_failure(method)
            self.api(method, url.path, query, body)
        except ApiError as error:
            self.send_json(error.code, error.body, error.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # a fake bug or a malformed control request: still a Status
            self.send_json(500, status_body(500, "InternalError", f"fake apiserver: {error!r}"))

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def check_auth(self):
        with STATE.cond:
            token = STATE.token
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def check_injected_failure(self, method):
        request_line = f"{method} {self.path}"
        with STATE.cond:
            for failure in STATE.failures:
                if failure["count"] > 0 and failure["match"] in request_line:
                    failure["count"] -= 1
                    break
            else:
                return
        reasons = {410: "Expired", 429: "TooManyRequests", 500: "InternalError",
                   503: "ServiceUnavailable", 403: "Forbidden"}
        code, retry_after = failure["code"], failure["retryAfter"]
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        raise ApiError(code, failure["reason"] or reasons.get(code, "Unknown"),
                       f"injected failure {code}", headers=headers)

    # ---- Kubernetes API ----

    def api(self, method, path, query, body):
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = BY_PATH.get((group, version, rest[0]))
        if res is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        subresource = rest[2] if len(rest) == 3 else None
        if subresource is not None and (subresource != "status" or not res.status_subresource):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")

        if name is None:
            if method == "GET":
                if query.get("watch") in ("1", "true"):
                    self.watch(res, namespace, query)
                else:
                    self.list(res, namespace, query)
                return
            if method == "POST" and namespace:
                self.create(res, namespace, self.parse_json(body))
                return
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
        if namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        key = (namespace, name)
        if method == "GET":
            with STATE.cond:
                obj = STATE.objects[res.plural].get(key)
                if obj is None:
                    raise not_found(res, name)
                self.send_json(200, obj)
            return
        if method == "PUT":
            self.update(res, key, subresource, self.parse_json(body))
            return
        if method == "PATCH":
            self.patch(res, key, subresource, body)
            return
        if method == "DELETE" and subresource is None:
            with STATE.cond:
                if key not in STATE.objects[res.plural]:
                    raise not_found(res, name)
                self.send_json(200, STATE.delete(res, key))
            return
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    @staticmethod
    def parse_json(body):
        try:
            value = json.loads(body or b"null")
        except ValueError as error:
            raise ApiError(400, "BadRequest", f"invalid JSON: {error}")
        if not isinstance(value, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        return value

    def list(self, res, namespace, query):
        terms = parse_selector(query.get("labelSelector"))
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        with STATE.cond:
            if token:
                try:
                    decoded = json.loads(base64.b64decode(token))
                    snapshot_id, start = decoded["id"], decoded["start"]
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "invalid continue token")
                snapshot = STATE.continue_snapshots.get(snapshot_id)
                if snapshot is None or int(snapshot["rv"]) < STATE.compacted_rv:
                    raise ApiError(410, "Expired",
                                   "The provided continue parameter is too old to display a "
                                   "consistent list result. You can start a new list without "
                                   "the continue parameter.")
            else:
                matching = [obj for key, obj in sorted(STATE.objects[res.plural].items())
                            if (not namespace or key[0] == namespace)
                            and selector_matches(terms, obj)]
                snapshot = {"rv": str(STATE.rv), "items": [list_item(res, o) for o in matching]}
                snapshot_id, start = str(uuid.uuid4()), 0
            end = start + limit if limit > 0 else len(snapshot["items"])
            metadata = {"resourceVersion": snapshot["rv"]}
            if end < len(snapshot["items"]):
                STATE.continue_snapshots[snapshot_id] = snapshot
                metadata["continue"] = base64.b64encode(
                    json.dumps({"id": snapshot_id, "start": end}).encode()).decode()
                metadata["remainingItemCount"] = len(snapshot["items"]) - end
            else:
                STATE.continue_snapshots.pop(snapshot_id, None)
            self.send_json(200, {"kind": res.kind + "List", "apiVersion": res.api_version,
                                 "metadata": metadata,
                                 "items": snapshot["items"][start:end]})

    def create(self, res, namespace, obj):
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(400, "BadRequest",
                           "the namespace of the provided object does not match the namespace "
                           "sent on the request")
        meta["namespace"] = namespace
        meta.pop("resourceVersion", None)
        if res.kind == "Secret":
            # The API server stores stringData base64-encoded under data.
            data = obj.setdefault("data", {})
            for key, value in (obj.pop("stringData", None) or {}).items():
                data[key] = base64.b64encode(value.encode()).decode()
        if res.kind == "Event":
            validate_event(obj)
        if res.status_subresource:
            obj.pop("status", None)
        with STATE.cond:
            if (namespace, name) in STATE.objects[res.plural]:
                raise ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                               {"name": name, "group": res.group, "kind": res.plural})
            self.send_json(201, STATE.store(res, obj, None))

    def apply_write(self, res, key, subresource, new_obj, precondition_rv):
        """Stores new_obj as the next state of key, with subresource semantics. Lock held."""
        current = STATE.objects[res.plural].get(key)
        if current is None:
            raise not_found(res, key[1])
        if precondition_rv and precondition_rv != current["metadata"]["resourceVersion"]:
            raise conflict(res, key[1])
        if subresource == "status":
            stored = copy.deepcopy(current)
            if "status" in new_obj:
                stored["status"] = new_obj["status"]
            else:
                stored.pop("status", None)
        else:
            stored = new_obj
            meta = stored.setdefault("metadata", {})
            meta["namespace"], meta["name"] = key
            if res.status_subresource:
                if "status" in current:
                    stored["status"] = copy.deepcopy(current["status"])
                else:
                    stored.pop("status", None)
        return STATE.store(res, stored, current)

    def update(self, res, key, subresource, obj):
        meta = obj.get("metadata") or {}
        if meta.get("name", key[1]) != key[1] or meta.get("namespace", key[0]) != key[0]:
            raise ApiError(400, "BadRequest", "the name or namespace of the object does not match "
                                              "the request")
        with STATE.cond:
            self.send_json(200, self.apply_write(res, key, subresource, obj,
                                                 meta.get("resourceVersion")))

    def patch(self, res, key, subresource, body):
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type == "application/strategic-merge-patch+json" and res.custom:
            raise ApiError(415, "UnsupportedMediaType",
                           "the body of the request was in an unknown format - accepted media "
                           "types include: application/json-patch+json, "
                           "application/merge-patch+json, application/apply-patch+yaml")
        if content_type not in ("application/merge-patch+json",
                                "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format: {content_type}")
        patch = self.parse_json(body)
        with STATE.cond:
            current = STATE.objects[res.plural].get(key)
            if current is None:
                raise not_found(res, key[1])
            merged = merge_patch(current, patch)
            precondition = (patch.get("metadata") or {}).get("resourceVersion")
            self.send_json(200, self.apply_write(res, key, subresource, merged, precondition))

    def watch(self, res, namespace, query):
        rv_text = query.get("resourceVersion", "")
        terms = parse_selector(query.get("labelSelector"))
        bookmarks = query.get("allowWatchBookmarks") in ("1", "true")
        timeout = float(query.get("timeoutSeconds") or 1800)
        watch = Watch(res, namespace, terms, bookmarks)
        with STATE.cond:
            watch.start_rv = STATE.rv
            if rv_text in ("", "0"):
                for key, obj in sorted(STATE.objects[res.plural].items()):
                    if watch.matches(res, obj):
                        watch.events.append(encode_event("ADDED", obj))
            else:
                try:
                    rv = int(rv_text)
                except ValueError:
                    raise ApiError(400, "BadRequest", f"invalid resourceVersion {rv_text!r}")
                watch.start_rv = rv
                if rv < STATE.compacted_rv:
                    message = f"too old resource version: {rv} ({STATE.compacted_rv})"
                    if STATE.watch_gone_mode == "http":
                        raise ApiError(410, "Expired", message)
                    watch.expired = True
                    watch.gone_message = message
                else:
                    for event_rv, event_res, event_type, obj in STATE.history:
                        if event_rv > rv and watch.matches(event_res, obj):
                            watch.events.append(encode_event(event_type, obj))
            STATE.watches.append(watch)
        try:
            self.stream_watch(watch, timeout)
        finally:
            with STATE.cond:
                STATE.watches.remove(watch)

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def stream_watch(self, watch, timeout):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        deadline = time.monotonic() + timeout
        last_bookmark = time.monotonic()
        while True:
            lines, action = [], None
            with STATE.cond:
                while True:
                    if watch.dropped:
                        action = "drop"
                        break
                    if STATE.stalled:
                        STATE.cond.wait(0.05)
                        continue
                    if watch.expired:
                        action = "expire"
                        break
                    if watch.events:
                        lines, watch.events = watch.events, []
                        break
                    interval = STATE.bookmark_interval
                    due = interval > 0 and time.monotonic() - last_bookmark >= interval
                    if due and STATE.bookmark_mode == "progress":
                        due = STATE.type_rv[watch.res.plural] > watch.start_rv
                    if watch.bookmarks and (watch.bookmark_now or due):
                        # Only with an empty queue is every event up to STATE.rv delivered.
                        watch.bookmark_now = False
                        last_bookmark = time.monotonic()
                        bookmark = {"kind": watch.res.kind, "apiVersion": watch.res.api_version,
                                    "metadata": {"resourceVersion": str(STATE.rv)}}
                        lines = [encode_event("BOOKMARK", bookmark)]
                        break
                    watch.bookmark_now = False
                    if time.monotonic() >= deadline:
                        action = "end"
                        break
                    STATE.cond.wait(0.05)
            if action == "drop":
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if action == "expire":
                error = status_body(410, "Expired", watch.gone_message or
                                    f"too old resource version ({STATE.compacted_rv})")
                self.write_chunk(encode_event("ERROR", error))
                action = "end"
            if action == "end":
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            self.write_chunk(b"".join(lines))

    # ---- control API ----

    def control(self, method, path, body):
        payload = json.loads(body) if body else {}
        with STATE.cond:
            if path == "/_fake/requests":
                if method == "DELETE":
                    STATE.requests.clear()
                self.send_json(200, STATE.requests)
                return
            if path == "/_fake/state":
                self.send_json(200, {"resourceVersion": str(STATE.rv),
                                     "compactedResourceVersion": str(STATE.compacted_rv),
                                     "openWatches": len(STATE.watches)})
                return
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "control endpoints take POST")
            if path == "/_fake/objects":
                ops = payload if isinstance(payload, list) else [payload]
                self.send_json(200, [self.control_object(op) for op in ops])
            elif path == "/_fake/compact":
                STATE.compacted_rv = STATE.rv
                STATE.history = [h for h in STATE.history if h[0] > STATE.compacted_rv]
                if payload.get("expireWatches"):
                    for watch in STATE.watches:
                        watch.expired = True
                STATE.cond.notify_all()
                self.send_json(200, {"compactedResourceVersion": str(STATE.compacted_rv)})
            elif path == "/_fake/drop-watches":
                for watch in STATE.watches:
                    watch.dropped = True
                STATE.cond.notify_all()
                self.send_json(200, {"dropped": len(STATE.watches)})
            elif path == "/_fake/stall-watches":
                STATE.stalled = bool(payload.get("stalled", True))
                STATE.cond.notify_all()
                self.send_json(200, {"stalled": STATE.stalled})
            elif path == "/_fake/bookmark":
                for watch in STATE.watches:
                    watch.bookmark_now = True
                STATE.cond.notify_all()
                self.send_json(200, {"resourceVersion": str(STATE.rv)})
            elif path == "/_fake/progress-notify":
                for plural in STATE.type_rv:
                    STATE.type_rv[plural] = STATE.rv
                STATE.cond.notify_all()
                self.send_json(200, {"resourceVersion": str(STATE.rv)})
            elif path == "/_fake/scale-to-zero":
                res = BY_PATH[("discovery.k8s.io", "v1", "endpointslices")]
                terms = [("eq", "kubernetes.io/service-name", payload["service"])]
                changed = []
                for key, current in sorted(STATE.objects[res.plural].items()):
                    if key[0] == payload["namespace"] and selector_matches(terms, current):
                        emptied = copy.deepcopy(current)
                        emptied["endpoints"] = None
                        emptied["ports"] = None
                        changed.append(STATE.store(res, emptied, current))
                self.send_json(200, changed)
            elif path == "/_fake/fail" and payload.get("clear"):
                STATE.failures.clear()
                self.send_json(200, {})
            elif path == "/_fake/fail":
                STATE.failures.append({"count": int(payload.get("count", 1)),
                                       "code": int(payload.get("code", 500)),
                                       "reason": payload.get("reason", ""),
                                       "retryAfter": payload.get("retryAfter"),
                                       "match": payload.get("match", "")})
                self.send_json(200, {})
            elif path == "/_fake/config":
                if "token" in payload:
                    STATE.token = payload["token"]
                if "watchGoneMode" in payload:
                    STATE.watch_gone_mode = payload["watchGoneMode"]
                if "bookmarkIntervalSeconds" in payload:
                    STATE.bookmark_interval = float(payload["bookmarkIntervalSeconds"])
                if "bookmarkMode" in payload:
                    if payload["bookmarkMode"] not in ("always", "progress"):
                        raise ApiError(400, "BadRequest", "bookmarkMode: always or progress")
                    STATE.bookmark_mode = payload["bookmarkMode"]
                STATE.cond.notify_all()
                self.send_json(200, {})
            else:
                raise ApiError(404, "NotFound", f"no control endpoint {path}")

    @staticmethod
    def control_object(op):
        obj = copy.deepcopy(op["object"])
        res = BY_KIND.get((obj.get("apiVersion"), obj.get("kind")))
        if res is None:
            raise ApiError(400, "BadRequest", f"unknown kind {obj.get('apiVersion')}/{obj.get('kind')}")
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        key = (meta["namespace"], meta["name"])
        current = STATE.objects[res.plural].get(key)
        if op.get("op", "upsert") == "delete":
            if current is None:
                raise not_found(res, key[1])
            return STATE.delete(res, key)
        meta.pop("resourceVersion", None)
        return STATE.store(res, obj, current)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global STATE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="", help="require 'Authorization: Bearer TOKEN'")
    parser.add_argument("--bookmark-interval", type=float, default=60.0)
    parser.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (chain)")
    parser.add_argument("--tls-key", help="PEM private key for --tls-cert")
    parser.add_argument("--client-ca", help="require client certificates signed by this CA")
    args = parser.parse_args()
    STATE = State(args.token, args.bookmark_interval)
    server = Server(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        if args.client_ca:
            context.load_verify_locations(args.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening 127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
