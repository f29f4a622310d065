#!/usr/bin/python3
"""Tests of the Helm chart deploy/helm/kwd: lint, schema, and the rendered manifests.

Runs with Debian's python3 and python3-yaml; helm comes from scripts/fetch-helm.sh.
ctest runs each TestCase class as its own test (argument: the class name).
"""
import copy
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import yaml

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
CHART = os.path.join(SOURCE_DIR, "deploy", "helm", "kwd")
CUSTOM_VALUES = os.path.join(SOURCE_DIR, "tests", "deploy", "values-custom.yaml")
PROXY_CONFIG_VALUES = os.path.join(SOURCE_DIR, "tests", "deploy", "values-proxy-config.yaml")
RELEASE = "wd"
NAMESPACE = "sap-lb"

_helm_path = None


def helm_path():
    global _helm_path
    if _helm_path is None:
        _helm_path = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "fetch-helm.sh")],
                                    check=True, capture_output=True, text=True).stdout.strip()
    return _helm_path


def helm(*args):
    return subprocess.run([helm_path(), *args], capture_output=True, text=True)


def render(*args, chart=CHART):
    result = helm("template", RELEASE, chart, "--namespace", NAMESPACE, *args)
    if result.returncode != 0:
        raise AssertionError("helm template failed:\n" + result.stderr)
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def chart_values(custom):
    values = load_yaml(os.path.join(CHART, "values.yaml"))
    if custom:
        merge(values, load_yaml(CUSTOM_VALUES))
    return values


def merge(base, override):
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def arg_after(args, flag):
    index = args.index(flag)
    return args[index + 1]


def listen_port(args, flag):
    return int(arg_after(args, flag).rsplit(":", 1)[1])


def pod_specs(docs):
    """(owner name, pod spec) for every workload."""
    specs = [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in docs
             if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]
    specs += [(d["metadata"]["name"], d["spec"]["jobTemplate"]["spec"]["template"]["spec"])
              for d in docs if d["kind"] == "CronJob"]
    return specs


# Containers that run a command and exit (hook Jobs, CronJobs): no probes, no TLS flags.
RUN_ONCE_COMMANDS = ("ensure-affinity-key", "ensure-grpc-certs")


def container_port(container, port):
    """A probe's or Service's port (number or name) as a number."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p["name"] == port:
            return p["containerPort"]
    raise AssertionError(f"container {container['name']} has no port named {port}")


# What the controller does with the API (README "Run the controller", RBAC
# table): anything wider fails the test, anything missing too.
ALLOWED_VERBS = {
    ("dispatch.kwd.io", "logongroups"): {"get", "list", "watch"},
    ("dispatch.kwd.io", "urlmappings"): {"get", "list", "watch"},
    ("dispatch.kwd.io", "logongroups/status"): {"patch"},
    ("dispatch.kwd.io", "urlmappings/status"): {"patch"},
    ("dispatch.kwd.io", "sapsystems"): {"get", "list", "watch"},
    ("dispatch.kwd.io", "sapsystems/status"): {"patch"},
    ("discovery.k8s.io", "endpointslices"): {"list", "watch"},
    ("", "pods"): {"list", "watch"},
    # UrlMapping.spec.tls certificates (controller.rbac.readSecrets).
    ("", "secrets"): {"get", "list", "watch"},
    ("coordination.k8s.io", "leases"): {"get", "list", "create", "update", "delete"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
LEASE = ("coordination.k8s.io", "leases")
EVENTS = ("events.k8s.io", "events")
# The affinity-key hook Job: get on its one Secret, create (not limitable by name).
AFFINITY_KEY_JOB_VERBS = {("", "secrets"): {"get", "create"}}
# The grpc-certs Jobs: get and update on their three Secrets, create.
GRPC_CERTS_JOB_VERBS = {("", "secrets"): {"get", "update", "create"}}


def component_of(doc):
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def granted(rules):
    result = {}
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                result.setdefault((group, resource), set()).update(rule["verbs"])
    return result


class RenderedChecks:
    """Checks that hold for every rendering; subclasses set the values."""
    custom = False
    expected_kinds = {}

    @classmethod
    def setUpClass(cls):
        args = ["-f", CUSTOM_VALUES] if cls.custom else []
        cls.docs = render(*args)
        cls.values = chart_values(cls.custom)

    def of_kind(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    def named(self, kind, name):
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        self.assertEqual(len(found), 1, f"{kind}/{name}")
        return found[0]

    def component(self, kind, component):
        found = [d for d in self.of_kind(kind)
                 if d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
        self.assertEqual(len(found), 1, f"one {kind} for {component}")
        return found[0]

    def container(self, deployment, name):
        found = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                 if c["name"] == name]
        self.assertEqual(len(found), 1, name)
        return found[0]

    def kwd_containers(self):
        image = self.values["image"]["repository"]
        for owner, spec in pod_specs(self.docs):
            for c in spec["containers"]:
                if c["image"].startswith(image + ":") or c["image"].startswith(image + "@"):
                    yield owner, c

    def test_kinds_and_counts(self):
        counts = {}
        for d in self.docs:
            counts[d["kind"]] = counts.get(d["kind"], 0) + 1
        self.assertEqual(counts, self.expected_kinds)

    def test_every_object_in_release_namespace_unless_cluster_scoped(self):
        watched = set(self.values["controller"]["watchNamespaces"])
        for d in self.docs:
            ns = d["metadata"].get("namespace")
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                self.assertIsNone(ns)
            elif d["kind"] in ("Role", "RoleBinding") and ns != NAMESPACE:
                self.assertIn(ns, watched, d["metadata"]["name"])
            else:
                self.assertEqual(ns, NAMESPACE, f"{d['kind']}/{d['metadata']['name']}")

    def test_restricted_pod_security(self):
        specs = pod_specs(self.docs)
        self.assertTrue(specs)
        for owner, spec in specs:
            pod = spec["securityContext"]
            self.assertIs(pod["runAsNonRoot"], True, owner)
            self.assertEqual(pod["runAsUser"], 65532, owner)
            self.assertEqual(pod["runAsGroup"], 65532, owner)
            self.assertEqual(pod["seccompProfile"], {"type": "RuntimeDefault"}, owner)
            for host in ("hostNetwork", "hostPID", "hostIPC"):
                self.assertFalse(spec.get(host, False), owner)
            for c in spec["containers"] + spec.get("initContainers", []):
                where = f"{owner}/{c['name']}"
                sc = c["securityContext"]
                self.assertIs(sc["runAsNonRoot"], True, where)
                self.assertEqual(sc["runAsUser"], 65532, where)
                self.assertIs(sc["readOnlyRootFilesystem"], True, where)
                self.assertIs(sc["allowPrivilegeEscalation"], False, where)
                self.assertFalse(sc.get("privileged", False), where)
                self.assertEqual(sc["capabilities"], {"drop": ["ALL"]}, where)
                self.assertEqual(sc["seccompProfile"], {"type": "RuntimeDefault"}, where)
                self.assertIn("resources", c, where)

    def test_kwd_containers_probe_their_admin_port(self):
        seen = 0
        for owner, c in self.kwd_containers():
            if c["args"][0] in RUN_ONCE_COMMANDS:  # a Job: runs and exits
                continue
            seen += 1
            where = f"{owner}/{c['name']}"
            admin = listen_port(c["args"], "--admin-listen")
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                get = c[probe]["httpGet"]
                self.assertEqual(get["path"], path, where)
                self.assertEqual(container_port(c, get["port"]), admin, where)
        self.assertGreaterEqual(seen, 2)

    def test_kwd_image(self):
        image = self.values["image"]
        if image["digest"]:
            want = f"{image['repository']}@{image['digest']}"
        else:
            want = f"{image['repository']}:{image['tag'] or load_yaml(os.path.join(CHART, 'Chart.yaml'))['appVersion']}"
        images = {c["image"] for _, c in self.kwd_containers()}
        self.assertEqual(images, {want})
        for _, c in self.kwd_containers():
            self.assertEqual(c["imagePullPolicy"], image["pullPolicy"])

    def test_controller_deployment(self):
        c_values = self.values["controller"]
        deployment = self.component("Deployment", "controller")
        self.assertEqual(deployment["spec"]["replicas"], c_values["replicas"])
        spec = deployment["spec"]["template"]["spec"]
        self.assertIs(spec["automountServiceAccountToken"], True)
        self.named("ServiceAccount", spec["serviceAccountName"])
        c = self.container(deployment, "controller")
        self.assertEqual(c["command"], ["/usr/local/bin/kwd-controller"])
        args = c["args"]
        self.assertEqual(args[:2], ["serve", "--source=kube"])
        self.assertIn("--leader-elect", args)
        self.assertEqual(arg_after(args, "--leader-election-namespace"), "$(POD_NAMESPACE)")
        self.assertEqual(arg_after(args, "--leader-election-identity"), "$(POD_NAME)")
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
        self.assertEqual(env, {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"})
        namespaces = [args[i + 1] for i, a in enumerate(args) if a == "--namespace"]
        self.assertEqual(namespaces, c_values["watchNamespaces"])
        self.assertEqual(listen_port(args, "--grpc-listen"), c_values["grpcPort"])
        self.assertEqual(listen_port(args, "--admin-listen"), c_values["adminPort"])
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {"grpc": c_values["grpcPort"], "admin": c_values["adminPort"]})
        self.assertAdminServiceNamesAllowed(args, "controller", c_values["adminAllowedHosts"])

    def assertAdminServiceNamesAllowed(self, args, component, extra):
        # The admin port answers its pod address (probes and Prometheus use
        # it) by itself; the Service fronting the admin port is named here.
        hosts = arg_after(args, "--admin-allowed-hosts").split(",")
        services = [d["metadata"]["name"] for d in self.of_kind("Service")
                    if component_of(d) == component and
                    any(p["name"] == "admin" for p in d["spec"]["ports"])]
        self.assertTrue(services, component)
        for name in services:
            for host in (name, f"{name}.{NAMESPACE}", f"{name}.{NAMESPACE}.svc",
                         f"{name}.{NAMESPACE}.svc.cluster.local"):
                self.assertIn(host, hosts)
        for host in extra:
            self.assertIn(host, hosts)

    def test_proxy_deployment(self):
        p = self.values["proxy"]
        deployment = self.component("Deployment", "proxy")
        spec = deployment["spec"]["template"]["spec"]
        self.assertIs(spec["automountServiceAccountToken"], False)
        if p["autoscaling"]["enabled"]:
            self.assertNotIn("replicas", deployment["spec"])
        else:
            self.assertEqual(deployment["spec"]["replicas"], p["replicas"])
        c = self.container(deployment, "proxy")
        self.assertEqual(c["command"], ["/usr/local/bin/kwd-proxy"])
        args = c["args"]
        self.assertEqual(args[0], "serve")
        self.assertEqual(arg_after(args, "--node-id"), "$(POD_NAME)")
        self.assertEqual(c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name")
        self.assertEqual(arg_after(args, "--workers"), str(p["workers"]))
        self.assertEqual(listen_port(args, "--listen"), p["httpPort"])
        self.assertEqual(container_port(c, "http"), p["httpPort"])
        self.assertEqual(container_port(c, "admin"), p["adminPort"])
        self.assertAdminServiceNamesAllowed(args, "proxy", p["adminAllowedHosts"])
        # x-sap-webdisp-ap names the traffic Service's ports, not the pod's.
        service = p["service"]
        want = f"http={service['httpPort']}"
        if service["https"]["enabled"]:
            want += f",https={service['https']['port']}"
        self.assertEqual(arg_after(args, "--public-ports"), want)
        # The affinity key file comes from the mounted Secret.
        key_file = arg_after(args, "--affinity-key-file")
        secret_name = p["affinityKey"]["existingSecret"] or f"{self.fullname()}-affinity-key"
        volume = [v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == secret_name]
        self.assertEqual(len(volume), 1)
        mount = [m for m in c["volumeMounts"] if m["name"] == volume[0]["name"]][0]
        self.assertEqual(key_file, f"{mount['mountPath']}/{p['affinityKey']['secretKey']}")
        # Never rendered (no key generated at render time): a hook Job creates it once.
        self.assertEqual([s for s in self.of_kind("Secret")
                          if s["metadata"]["name"] == secret_name], [])
        jobs = [j for j in self.of_kind("Job") if component_of(j) == "affinity-key"]
        self.assertEqual(len(jobs), 0 if p["affinityKey"]["existingSecret"] else 1)
        for job in jobs:
            self.assertEqual(job["metadata"]["annotations"]["helm.sh/hook"],
                             "pre-install,pre-upgrade")
            (jc,) = job["spec"]["template"]["spec"]["containers"]
            self.assertEqual(jc["command"], ["/usr/local/bin/kwd-controller"])
            self.assertEqual(jc["args"][0], "ensure-affinity-key")
            self.assertEqual(arg_after(jc["args"], "--secret"), secret_name)
            self.assertEqual(arg_after(jc["args"], "--key"), p["affinityKey"]["secretKey"])
            self.assertEqual(arg_after(jc["args"], "--namespace"), NAMESPACE)
        self.assertEqual(arg_after(args, "--affinity-key-grace"), p["affinityKey"]["gracePeriod"])
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        self.assertRegex(annotations["checksum/affinity-key"], r"^[0-9a-f]{64}$")

    def test_proxy_drains_before_it_is_killed(self):
        p = self.values["proxy"]
        deployment = self.component("Deployment", "proxy")
        spec = deployment["spec"]["template"]["spec"]
        c = self.container(deployment, "proxy")
        self.assertEqual(arg_after(c["args"], "--drain-timeout"), f"{p['drainTimeoutSeconds']}s")
        self.assertEqual(c["lifecycle"]["preStop"]["exec"]["command"],
                         ["/bin/sleep", str(p["preStopSleepSeconds"])])
        self.assertGreater(spec["terminationGracePeriodSeconds"],
                           p["preStopSleepSeconds"] + p["drainTimeoutSeconds"])
        # No replica may go down before a new one is ready.
        self.assertEqual(deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0)

    def test_proxy_controller_target_is_the_controller_service_grpc_port(self):
        grpc_service = self.component("Service", "controller")
        controller = self.container(self.component("Deployment", "controller"), "controller")
        grpc_listen = listen_port(controller["args"], "--grpc-listen")
        clients = [(o, c) for o, c in self.kwd_containers() if "--controller" in c["args"]]
        self.assertGreaterEqual(len(clients), 1)
        for owner, c in clients:
            host, port = arg_after(c["args"], "--controller").rsplit(":", 1)
            self.assertEqual(host, f"{grpc_service['metadata']['name']}.{NAMESPACE}.svc", owner)
            service_port = [sp for sp in grpc_service["spec"]["ports"] if sp["port"] == int(port)]
            self.assertEqual(len(service_port), 1, owner)
            self.assertEqual(service_port[0]["name"], "grpc")
            self.assertEqual(container_port(controller, service_port[0]["targetPort"]), grpc_listen)

    def test_traffic_service_ports(self):
        s = self.values["proxy"]["service"]
        service = self.named("Service", self.fullname() + "-proxy")
        self.assertEqual(service["spec"]["type"], s["type"])
        ports = {p["name"]: p for p in service["spec"]["ports"]}
        self.assertNotIn("admin", ports, "the admin port must not be on the traffic Service")
        self.assertEqual(ports["http"]["port"], s["httpPort"])
        self.assertEqual(ports["http"]["targetPort"], "http")
        proxy = self.container(self.component("Deployment", "proxy"), "proxy")
        want = {"http"}
        if s["https"]["enabled"]:
            want.add("https")
            self.assertEqual(ports["https"]["port"], s["https"]["port"])
            self.assertEqual(container_port(proxy, ports["https"]["targetPort"]),
                             s["https"]["containerPort"])
            self.assertEqual(listen_port(proxy["args"], "--tls-listen"), s["https"]["containerPort"])
            self.assertEqual(arg_after(proxy["args"], "--tls-cert-dir"), "/etc/kwd/tls")
        else:
            self.assertNotIn("--tls-listen", proxy["args"])
            self.assertNotIn("--tls-cert-dir", proxy["args"])
            self.assertNotIn("https", {p["name"] for p in proxy["ports"]})
        if s["passthrough"]["enabled"]:
            want.add("passthrough")
            self.assertEqual(ports["passthrough"]["port"], s["passthrough"]["port"])
            self.assertEqual(container_port(proxy, ports["passthrough"]["targetPort"]),
                             s["passthrough"]["containerPort"])
            self.assertEqual(listen_port(proxy["args"], "--passthrough-listen"),
                             s["passthrough"]["containerPort"])
        else:
            self.assertNotIn("--passthrough-listen", proxy["args"])
            self.assertNotIn("passthrough", {p["name"] for p in proxy["ports"]})
        self.assertEqual(set(ports), want)

    def test_service_selectors_match_exactly_one_workload(self):
        templates = {name: d["spec"]["template"]["metadata"]["labels"]
                     for d in self.of_kind("Deployment")
                     for name in [d["metadata"]["name"]]}
        for d in self.of_kind("Deployment"):
            self.assertTrue(matches(d["spec"]["selector"]["matchLabels"],
                                    d["spec"]["template"]["metadata"]["labels"]))
        for kind, path in (("Service", ("spec", "selector")),
                           ("PodDisruptionBudget", ("spec", "selector", "matchLabels")),
                           ("NetworkPolicy", ("spec", "podSelector", "matchLabels"))):
            for obj in self.of_kind(kind):
                selector = obj
                for key in path:
                    selector = selector[key]
                self.assertTrue(selector, obj["metadata"]["name"])
                owners = [n for n, labels in templates.items() if matches(selector, labels)]
                self.assertEqual(len(owners), 1, f"{kind}/{obj['metadata']['name']}: {owners}")
                # Service ports resolve to container ports of that workload.
                if kind == "Service":
                    deployment = self.named("Deployment", owners[0])
                    containers = deployment["spec"]["template"]["spec"]["containers"]
                    names = {p["name"] for c in containers for p in c.get("ports", [])}
                    for port in obj["spec"]["ports"]:
                        self.assertIn(port["targetPort"], names, obj["metadata"]["name"])

    def test_rbac_is_least_privilege(self):
        roles = self.of_kind("ClusterRole") + self.of_kind("Role")
        self.assertTrue(roles)
        for role in roles:
            if component_of(role) == "affinity-key":
                self.assertEqual(granted(role["rules"]), AFFINITY_KEY_JOB_VERBS)
                (get,) = [r for r in role["rules"] if "get" in r["verbs"]]
                self.assertEqual(get["resourceNames"], [f"{self.fullname()}-affinity-key"])
                continue
            if component_of(role) == "grpc-certs":
                # get/update by name (GrpcTls.test_job_makes_and_renews_... checks the names).
                self.assertEqual(granted(role["rules"]), GRPC_CERTS_JOB_VERBS)
                for rule in role["rules"]:
                    self.assertEqual(bool(rule.get("resourceNames")), rule["verbs"] != ["create"])
                continue
            name = f"{role['kind']}/{role['metadata'].get('namespace')}/{role['metadata']['name']}"
            for rule in role["rules"]:
                self.assertNotIn("nonResourceURLs", rule, name)
                for field in ("apiGroups", "resources", "verbs"):
                    self.assertNotIn("*", rule[field], name)
            for key, verbs in granted(role["rules"]).items():
                self.assertIn(key, ALLOWED_VERBS, name)
                self.assertLessEqual(verbs, ALLOWED_VERBS[key], f"{name} {key}")
                if key == LEASE:
                    self.assertEqual(role["kind"], "Role", "Leases only in a namespaced Role")
                    self.assertEqual(role["metadata"]["namespace"], NAMESPACE)

    def test_rbac_grants_what_the_controller_needs_where_it_watches(self):
        watched = self.values["controller"]["watchNamespaces"]
        needed = {k: v for k, v in ALLOWED_VERBS.items() if k != LEASE}
        bindings = self.of_kind("ClusterRoleBinding") + self.of_kind("RoleBinding")
        account = self.component("Deployment", "controller")["spec"]["template"]["spec"][
            "serviceAccountName"]

        def bound(kind, name, namespace):
            for b in bindings:
                ref = b["roleRef"]
                if ref["kind"] == kind and ref["name"] == name and \
                        b["metadata"].get("namespace") == namespace:
                    return any(s["kind"] == "ServiceAccount" and s["name"] == account and
                               s["namespace"] == NAMESPACE for s in b["subjects"])
            return False

        if watched:
            self.assertEqual(self.of_kind("ClusterRole"), [])
            for ns in watched:
                roles = [r for r in self.of_kind("Role") if r["metadata"]["namespace"] == ns]
                self.assertEqual(len(roles), 1, ns)
                self.assertEqual(granted(roles[0]["rules"]), needed)
                self.assertTrue(bound("Role", roles[0]["metadata"]["name"], ns), ns)
        else:
            (cluster_role,) = self.of_kind("ClusterRole")
            self.assertEqual(granted(cluster_role["rules"]), needed)
            self.assertTrue(bound("ClusterRole", cluster_role["metadata"]["name"], None))
        lease_roles = [r for r in self.of_kind("Role") if LEASE in granted(r["rules"])]
        roles = [r for r in self.of_kind("Role")
                 if component_of(r) not in ("affinity-key", "grpc-certs")]
        self.assertTrue(all(component_of(r) == "controller" for r in roles))
        self.assertEqual(len(lease_roles), 1)
        self.assertEqual(granted(lease_roles[0]["rules"]),
                         {LEASE: ALLOWED_VERBS[LEASE], EVENTS: ALLOWED_VERBS[EVENTS]})
        self.assertTrue(bound("Role", lease_roles[0]["metadata"]["name"], NAMESPACE))

    def test_grpc_tls_files_come_from_mounted_secrets(self):
        """Every TLS file flag of every kwd container names a key of a mounted Secret
        that the chart renders (helm), that a Certificate fills (cert-manager), or
        that the values name (existing)."""
        tls = self.values["grpcTLS"]
        secrets = {d["metadata"]["name"]: set(d["data"]) for d in self.of_kind("Secret")}
        for cert in self.of_kind("Certificate"):
            secrets[cert["spec"]["secretName"]] = {"tls.crt", "tls.key", "ca.crt"}
        for name in tls["existingSecrets"].values():
            if tls["provider"] == "existing" and name:
                secrets[name] = {"tls.crt", "tls.key", "ca.crt"}
        if tls["provider"] == "job":
            # Made by the ensure-grpc-certs Job: the Secrets its args name.
            for _, spec in pod_specs(self.docs):
                for c in spec["containers"]:
                    if c.get("args", [""])[0] == "ensure-grpc-certs":
                        for flag in ("--controller-secret", "--proxy-secret"):
                            secrets[arg_after(c["args"], flag)] = {"tls.crt", "tls.key", "ca.crt"}
        checked = 0
        for owner, spec in pod_specs(self.docs):
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for c in spec["containers"]:
                args = c.get("args", [])
                flags = [f for f in GRPC_TLS_FLAGS if f in args]
                if not tls["enabled"]:
                    self.assertEqual(flags, [], f"{owner}/{c['name']}")
                    continue
                if c.get("command", [""])[0] not in ("/usr/local/bin/kwd-controller",
                                                     "/usr/local/bin/kwd-proxy"):
                    continue
                if c["args"][0] in RUN_ONCE_COMMANDS:
                    continue
                want = CONTROLLER_TLS_FLAGS if "--grpc-listen" in args else PROXY_TLS_FLAGS
                self.assertEqual(sorted(flags), sorted(want), f"{owner}/{c['name']}")
                for flag in flags:
                    path = arg_after(args, flag)
                    mounts = [m for m in c["volumeMounts"]
                              if path.startswith(m["mountPath"].rstrip("/") + "/")]
                    self.assertEqual(len(mounts), 1, f"{owner} {flag} {path}")
                    self.assertIs(mounts[0].get("readOnly"), True)
                    volume = volumes[mounts[0]["name"]]
                    secret = volume["secret"]["secretName"]
                    self.assertIn(secret, secrets, f"{owner} {flag}")
                    key = path[len(mounts[0]["mountPath"].rstrip("/")) + 1:]
                    self.assertIn(key, secrets[secret], f"{owner} {flag}")
                    checked += 1
        if tls["enabled"]:
            self.assertGreaterEqual(checked, 6)

    def test_network_policy_admits_only_proxies_to_grpc(self):
        np_values = self.values["networkPolicy"]
        policies = self.of_kind("NetworkPolicy")
        if not np_values["enabled"]:
            self.assertEqual(policies, [])
            return
        controller_deployment = self.component("Deployment", "controller")
        controller_labels = controller_deployment["spec"]["template"]["metadata"]["labels"]
        policy = self.component("NetworkPolicy", "controller")
        self.assertTrue(matches(policy["spec"]["podSelector"]["matchLabels"], controller_labels))
        self.assertEqual(policy["spec"]["policyTypes"], ["Ingress"])
        controller = self.container(controller_deployment, "controller")
        grpc_rules = [r for r in policy["spec"]["ingress"]
                      if any(container_port(controller, p["port"]) ==
                             listen_port(controller["args"], "--grpc-listen") for p in r["ports"])]
        self.assertEqual(len(grpc_rules), 1)
        sources = grpc_rules[0]["from"]
        self.assertTrue(sources, "the gRPC port must not be open to all")
        pod_sources = [f for f in sources if "podSelector" in f]
        self.assertEqual(len(pod_sources), 1)
        self.assertNotIn("namespaceSelector", pod_sources[0], "this namespace only")
        selector = pod_sources[0]["podSelector"]["matchLabels"]
        workloads = {d["metadata"]["labels"]["app.kubernetes.io/component"]:
                     d["spec"]["template"]["metadata"]["labels"] for d in self.of_kind("Deployment")}
        selected = sorted(c for c, labels in workloads.items() if matches(selector, labels))
        self.assertEqual(selected, ["proxy"] if self.values["proxy"]["enabled"] else [])
        namespace_sources = [f["namespaceSelector"] for f in sources if "namespaceSelector" in f]
        extra = np_values["grpcClientNamespaceSelector"]
        self.assertEqual(namespace_sources, [extra] if extra else [])
        # Every other port of the controller: only from the admin namespaces.
        for rule in policy["spec"]["ingress"]:
            if rule is not grpc_rules[0]:
                self.assertEqual(rule["from"],
                                 [{"namespaceSelector": np_values["adminNamespaceSelector"]}])

    def test_pod_disruption_budgets(self):
        for component in ("controller", "proxy"):
            pdb = self.component("PodDisruptionBudget", component)
            self.assertEqual(pdb["spec"]["maxUnavailable"], 1)

    def fullname(self):
        return self.values["fullnameOverride"] or f"{RELEASE}-kwd"


class DefaultValues(RenderedChecks, unittest.TestCase):
    custom = False
    expected_kinds = {
        "Deployment": 2, "Service": 3, "ServiceAccount": 4,
        "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 4, "RoleBinding": 4,
        "PodDisruptionBudget": 2, "NetworkPolicy": 2, "Job": 2, "CronJob": 1,
    }

    def test_defaults_from_interface(self):
        controller = self.container(self.component("Deployment", "controller"), "controller")
        self.assertEqual(arg_after(controller["args"], "--grpc-listen"), "0.0.0.0:18000")
        self.assertEqual(arg_after(controller["args"], "--admin-listen"), "0.0.0.0:9902")
        proxy = self.container(self.component("Deployment", "proxy"), "proxy")
        self.assertEqual(arg_after(proxy["args"], "--listen"), "0.0.0.0:8080")
        self.assertEqual(arg_after(proxy["args"], "--admin-listen"), "0.0.0.0:9901")
        # The snapshot cache lives in an emptyDir: it outlives a container restart.
        self.assertEqual(arg_after(proxy["args"], "--snapshot-cache"), "/var/cache/kwd/snapshot.json")
        mounts = {m["name"]: m["mountPath"] for m in proxy["volumeMounts"]}
        self.assertEqual(mounts.get("snapshot-cache"), "/var/cache/kwd")
        volumes = {v["name"]: v for v in
                   self.component("Deployment", "proxy")["spec"]["template"]["spec"]["volumes"]}
        self.assertIn("emptyDir", volumes["snapshot-cache"])
        self.assertEqual(self.component("Deployment", "controller")["spec"]["replicas"], 2)
        self.assertEqual(self.named("Service", "wd-kwd-proxy")["spec"]["type"], "ClusterIP")


class CustomValues(RenderedChecks, unittest.TestCase):
    custom = True
    expected_kinds = {
        "Deployment": 3, "Service": 3, "ServiceAccount": 1,
        "Role": 3, "RoleBinding": 3, "PodDisruptionBudget": 2,
        "HorizontalPodAutoscaler": 1, "ServiceMonitor": 1, "NetworkPolicy": 2,
        "Certificate": 2,
    }

    def test_hpa_targets_the_proxy(self):
        (hpa,) = self.of_kind("HorizontalPodAutoscaler")
        self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
        target = hpa["spec"]["scaleTargetRef"]
        self.assertEqual((target["kind"], target["name"]),
                         ("Deployment", self.component("Deployment", "proxy")["metadata"]["name"]))
        self.assertEqual((hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]), (3, 12))

    def test_service_monitor_scrapes_both_admin_ports(self):
        (monitor,) = self.of_kind("ServiceMonitor")
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(monitor["metadata"]["labels"]["release"], "prometheus")
        selector = monitor["spec"]["selector"]["matchLabels"]
        scraped = [s for s in self.of_kind("Service") if matches(selector, s["metadata"]["labels"])]
        components = sorted(s["metadata"]["labels"]["app.kubernetes.io/component"] for s in scraped)
        self.assertEqual(components, ["controller", "proxy"])
        (endpoint,) = monitor["spec"]["endpoints"]
        self.assertEqual(endpoint["path"], "/metrics")
        admin_ports = {s["metadata"]["labels"]["app.kubernetes.io/component"]:
                       [p["port"] for p in s["spec"]["ports"] if p["name"] == endpoint["port"]]
                       for s in scraped}
        self.assertEqual(admin_ports, {"controller": [9912], "proxy": [9911]})

    def test_network_policies(self):
        controller = self.component("NetworkPolicy", "controller")
        proxy_labels = self.component("Deployment", "proxy")["spec"]["template"]["metadata"]["labels"]
        ingress = {tuple(p["port"] for p in rule["ports"]): rule for rule in controller["spec"]["ingress"]}
        self.assertEqual(set(ingress), {("grpc",), ("admin",)})
        grpc_from = ingress[("grpc",)]["from"]
        self.assertTrue(matches(grpc_from[0]["podSelector"]["matchLabels"], proxy_labels))
        self.assertEqual(grpc_from[1]["namespaceSelector"],
                         {"matchLabels": {"kwd.io/sidecars": "true"}})
        monitoring = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
        self.assertEqual(ingress[("admin",)]["from"], [{"namespaceSelector": monitoring}])
        proxy = self.component("NetworkPolicy", "proxy")
        rules = {tuple(p["port"] for p in rule["ports"]): rule for rule in proxy["spec"]["ingress"]}
        self.assertEqual(set(rules), {("http", "https", "passthrough"), ("admin",)})
        self.assertNotIn("from", rules[("http", "https", "passthrough")], "traffic ports open to all")
        self.assertEqual(rules[("admin",)]["from"], [{"namespaceSelector": monitoring}])

    def test_sidecar_example(self):
        example = self.component("Deployment", "sidecar-example")
        spec = example["spec"]["template"]["spec"]
        self.assertIs(spec["automountServiceAccountToken"], False)
        names = [c["name"] for c in spec["containers"]]
        self.assertEqual(names, ["client", "kwd-proxy"])
        sidecar = spec["containers"][1]
        self.assertEqual(arg_after(sidecar["args"], "--listen"), "127.0.0.1:15080")
        self.assertIn("127.0.0.1:15080", spec["containers"][0]["args"][0])
        volumes = {v["name"] for v in spec["volumes"]}
        for mount in sidecar["volumeMounts"]:
            self.assertIn(mount["name"], volumes)
        self.assertIn("preStop", sidecar["lifecycle"])
        self.assertGreater(spec["terminationGracePeriodSeconds"], 7 + 20)

    def test_custom_labels_and_pull_secrets(self):
        for d in self.docs:
            self.assertEqual(d["metadata"]["labels"]["team"], "basis", d["metadata"]["name"])
        for _, spec in pod_specs(self.docs):
            if spec["containers"][0]["name"] != "client":
                self.assertEqual(spec["imagePullSecrets"], [{"name": "regcred"}])

    def test_load_balancer_settings(self):
        service = self.named("Service", "sapwd-proxy")
        self.assertEqual(service["spec"]["externalTrafficPolicy"], "Local")
        self.assertEqual(service["spec"]["loadBalancerSourceRanges"], ["10.0.0.0/8"])
        http = [p for p in service["spec"]["ports"] if p["name"] == "http"][0]
        self.assertEqual(http["nodePort"], 30080)

    def test_tls_secrets_mounted_under_cert_dir(self):
        proxy = self.container(self.component("Deployment", "proxy"), "proxy")
        self.assertEqual(arg_after(proxy["args"], "--tls-cert-dir"), "/etc/kwd/tls")
        mounts = {m["mountPath"]: m["name"] for m in proxy["volumeMounts"]}
        self.assertIn("/etc/kwd/tls/erp-tls", mounts)
        volumes = {v["name"]: v for v in
                   self.component("Deployment", "proxy")["spec"]["template"]["spec"]["volumes"]}
        self.assertEqual(volumes[mounts["/etc/kwd/tls/erp-tls"]]["secret"]["secretName"], "erp-tls")

    def test_upstream_client_cert_secrets_mounted_under_upstream_cert_dir(self):
        # LogonGroup upstreamTLS.clientCertSecret: erp-client is read from
        # --upstream-cert-dir DIR/erp-client/tls.crt + tls.key.
        proxy = self.container(self.component("Deployment", "proxy"), "proxy")
        self.assertEqual(arg_after(proxy["args"], "--upstream-cert-dir"), "/etc/kwd/upstream-tls")
        mounts = {m["mountPath"]: m["name"] for m in proxy["volumeMounts"]}
        volumes = {v["name"]: v for v in
                   self.component("Deployment", "proxy")["spec"]["template"]["spec"]["volumes"]}
        name = mounts["/etc/kwd/upstream-tls/erp-client"]
        self.assertEqual(volumes[name]["secret"]["secretName"], "erp-client")

    def test_passthrough_node_port(self):
        service = self.named("Service", "sapwd-proxy")
        port = [p for p in service["spec"]["ports"] if p["name"] == "passthrough"][0]
        self.assertEqual(port["nodePort"], 30943)


GRPC_TLS_FLAGS = ("--grpc-tls-cert", "--grpc-tls-key", "--grpc-client-ca",
                  "--controller-ca", "--controller-cert", "--controller-key")
CONTROLLER_TLS_FLAGS = GRPC_TLS_FLAGS[:3]
PROXY_TLS_FLAGS = GRPC_TLS_FLAGS[3:]


def job_made_secrets(docs, directory):
    """What the ensure-grpc-certs Job of `docs` puts into its Secrets: the built
    kwd-controller runs with the Job's arguments against the fake API server
    (tests/fake_apiserver), as the hook Job would in the cluster.
    Returns {secret name: {key: base64 data}}."""
    import json
    import urllib.request
    made = {}
    binary = os.path.join(os.environ.get("KWD_BINARY_DIR", os.path.join(SOURCE_DIR, "build")),
                          "kwd-controller")
    for _, spec in pod_specs(docs):
        for c in spec["containers"]:
            args = c.get("args", [""])
            if args[0] != "ensure-grpc-certs" or made:
                continue
            fake = subprocess.Popen(
                [sys.executable, os.path.join(SOURCE_DIR, "tests", "fake_apiserver",
                                              "fake_apiserver.py")],
                stdout=subprocess.PIPE, text=True)
            try:
                address = fake.stdout.readline().split()[1]
                kubeconfig = os.path.join(directory, "kubeconfig")
                with open(kubeconfig, "w") as f:
                    f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n"
                            f"  cluster: {{server: 'http://{address}'}}\nusers:\n- name: u\n"
                            "  user: {}\ncontexts:\n- name: c\n  context: {cluster: fake, "
                            "user: u}\ncurrent-context: c\n")
                run = subprocess.run([binary, *args, "--kubeconfig", kubeconfig],
                                     capture_output=True, text=True, timeout=60)
                if run.returncode != 0:
                    raise AssertionError(f"ensure-grpc-certs failed: {run.stdout}{run.stderr}")
                namespace = arg_after(args, "--namespace")
                for flag in ("--controller-secret", "--proxy-secret"):
                    name = arg_after(args, flag)
                    url = f"http://{address}/api/v1/namespaces/{namespace}/secrets/{name}"
                    with urllib.request.urlopen(url, timeout=10) as reply:
                        made[name] = json.load(reply)["data"]
            finally:
                fake.kill()
                fake.wait()
                fake.stdout.close()
    return made


def mounted_secret_files(docs, directory):
    """Writes every key of every rendered Secret (or Secret the ensure-grpc-certs
    Job makes) that a kwd container mounts into `directory`; returns {path in the
    container: path on disk}."""
    import base64
    secrets = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "Secret"}
    secrets.update(job_made_secrets(docs, directory))
    files = {}
    for owner, spec in pod_specs(docs):
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            for mount in c.get("volumeMounts", []):
                secret = volumes.get(mount["name"], {}).get("secret", {}).get("secretName")
                for key, value in secrets.get(secret, {}).items():
                    path = os.path.join(directory, secret, key)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "wb") as f:
                        f.write(base64.b64decode(value))
                    files[f"{mount['mountPath'].rstrip('/')}/{key}"] = path
    return files


def openssl(*args, stdin=None):
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, text=True)


class GrpcTls(unittest.TestCase):
    """Mutual TLS on the controller's gRPC port: on by default, three providers, off switch."""

    def secret_files(self, docs, name):
        import base64
        (secret,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == name]
        self.assertEqual(secret["type"], "kubernetes.io/tls")
        return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}

    def test_job_makes_and_renews_the_certificates_by_default(self):
        """provider job (the default): no key or certificate is rendered; a hook Job
        and a CronJob run ensure-grpc-certs for the Secrets the pods mount, with
        RBAC on exactly those Secrets."""
        docs = render()
        self.assertEqual([d["metadata"]["name"] for d in docs if d["kind"] == "Secret"], [])
        jobs = [d for d in docs if component_of(d) == "grpc-certs" and d["kind"] in ("Job", "CronJob")]
        self.assertEqual(sorted(d["kind"] for d in jobs), ["CronJob", "Job"])
        (hook,) = [d for d in jobs if d["kind"] == "Job"]
        (cron,) = [d for d in jobs if d["kind"] == "CronJob"]
        self.assertEqual(hook["metadata"]["annotations"]["helm.sh/hook"], "pre-install,pre-upgrade")
        self.assertNotIn("annotations", cron["metadata"], "the CronJob lives with the release")
        self.assertEqual(cron["spec"]["schedule"], "23 3 * * *")
        self.assertEqual(cron["spec"]["concurrencyPolicy"], "Forbid")
        hook_args = hook["spec"]["template"]["spec"]["containers"][0]["args"]
        cron_args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertEqual(hook_args, cron_args)
        self.assertEqual(hook_args[0], "ensure-grpc-certs")
        self.assertEqual(arg_after(hook_args, "--namespace"), NAMESPACE)
        self.assertEqual(arg_after(hook_args, "--renew-before"), "720h")
        self.assertEqual(arg_after(hook_args, "--validity"), "8760h")
        controller_secret = arg_after(hook_args, "--controller-secret")
        proxy_secret = arg_after(hook_args, "--proxy-secret")
        ca_secret = arg_after(hook_args, "--ca-secret")
        dns = [hook_args[i + 1] for i, a in enumerate(hook_args) if a == "--dns-name"]
        self.assertIn(f"{RELEASE}-kwd-controller.{NAMESPACE}.svc", dns)
        # The pods mount the Secrets the Job writes; nobody mounts the CA's key.
        mounted = {v["secret"]["secretName"] for _, spec in pod_specs(docs)
                   for v in spec.get("volumes", []) if "secret" in v}
        self.assertIn(controller_secret, mounted)
        self.assertIn(proxy_secret, mounted)
        self.assertNotIn(ca_secret, mounted)
        # Each Job's ServiceAccount may get and update only these Secrets (create
        # cannot be limited by name).
        for job, spec in ((hook, hook["spec"]["template"]["spec"]),
                          (cron, cron["spec"]["jobTemplate"]["spec"]["template"]["spec"])):
            account = spec["serviceAccountName"]
            (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and
                          d["subjects"][0]["name"] == account]
            (role,) = [d for d in docs if d["kind"] == "Role" and
                       d["metadata"]["name"] == binding["roleRef"]["name"]]
            named = [r for r in role["rules"] if r.get("resourceNames")]
            self.assertEqual(len(named), 1)
            self.assertEqual(sorted(named[0]["resourceNames"]),
                             sorted([ca_secret, controller_secret, proxy_secret]))
            self.assertEqual(sorted(named[0]["verbs"]), ["get", "update"])
            self.assertEqual(granted(role["rules"]), {("", "secrets"): {"get", "update", "create"}})
        # Nothing generated while rendering.
        for name in ("genCA", "genSignedCert", "lookup"):
            with open(os.path.join(CHART, "templates", "grpc-tls-job.yaml")) as f:
                code = re.sub(r"\{\{-? ?/\*.*?\*/ ?-?\}\}", "", f.read(), flags=re.S)
            self.assertNotIn(name, code)

    def test_generated_certificates_chain_and_name_the_controller_service(self):
        docs = render("--set", "grpcTLS.provider=helm")
        controller = self.secret_files(docs, f"{RELEASE}-kwd-grpc-controller-tls")
        proxy = self.secret_files(docs, f"{RELEASE}-kwd-grpc-proxy-tls")
        self.assertEqual(set(controller), {"tls.crt", "tls.key", "ca.crt"})
        self.assertEqual(set(proxy), {"tls.crt", "tls.key", "ca.crt"})
        self.assertEqual(controller["ca.crt"], proxy["ca.crt"], "one CA for both ends")
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in (("ca.crt", controller["ca.crt"]), ("server.crt", controller["tls.crt"]),
                               ("client.crt", proxy["tls.crt"])):
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(text)
            ca = os.path.join(tmp, "ca.crt")
            for purpose, cert in (("sslserver", "server.crt"), ("sslclient", "client.crt")):
                result = openssl("verify", "-purpose", purpose, "-CAfile", ca, os.path.join(tmp, cert))
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            text = openssl("x509", "-noout", "-text", "-in", os.path.join(tmp, "server.crt")).stdout
        (proxy_deployment,) = [d for d in docs if d["kind"] == "Deployment" and
                               d["metadata"]["name"] == f"{RELEASE}-kwd-proxy"]
        target = arg_after(proxy_deployment["spec"]["template"]["spec"]["containers"][0]["args"],
                           "--controller")
        self.assertIn(f"DNS:{target.rsplit(':', 1)[0]}", text)
        # Each key belongs to its certificate.
        for files in (controller, proxy):
            key_pub = openssl("pkey", "-pubout", stdin=files["tls.key"]).stdout
            cert_pub = openssl("x509", "-noout", "-pubkey", stdin=files["tls.crt"]).stdout
            self.assertEqual(key_pub, cert_pub)
            self.assertTrue(key_pub)

    def test_cert_manager_with_the_release_ca(self):
        docs = render("--set", "grpcTLS.provider=cert-manager")
        self.assertEqual([d for d in docs if d["kind"] == "Secret" and "grpc" in d["metadata"]["name"]], [])
        issuers = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Issuer"}
        certificates = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
        self.assertEqual(issuers[f"{RELEASE}-kwd-grpc-selfsigned"], {"selfSigned": {}})
        ca = certificates[f"{RELEASE}-kwd-grpc-ca"]
        self.assertIs(ca["isCA"], True)
        self.assertEqual(ca["issuerRef"]["name"], f"{RELEASE}-kwd-grpc-selfsigned")
        self.assertEqual(issuers[f"{RELEASE}-kwd-grpc-ca"], {"ca": {"secretName": ca["secretName"]}})
        server = certificates[f"{RELEASE}-kwd-grpc-controller-tls"]
        client = certificates[f"{RELEASE}-kwd-grpc-proxy-tls"]
        for cert in (server, client):
            self.assertEqual(cert["issuerRef"], {"name": f"{RELEASE}-kwd-grpc-ca", "kind": "Issuer",
                                                 "group": "cert-manager.io"})
            self.assertEqual(cert["secretName"], cert is server and
                             f"{RELEASE}-kwd-grpc-controller-tls" or f"{RELEASE}-kwd-grpc-proxy-tls")
        self.assertIn("server auth", server["usages"])
        self.assertIn("client auth", client["usages"])
        self.assertIn(f"{RELEASE}-kwd-controller.{NAMESPACE}.svc", server["dnsNames"])

    def test_cert_manager_with_an_issuer_of_yours(self):
        docs = render("--set", "grpcTLS.provider=cert-manager",
                      "--set", "grpcTLS.certManager.issuerRef.name=corp-ca",
                      "--set", "grpcTLS.certManager.issuerRef.kind=ClusterIssuer")
        self.assertEqual([d for d in docs if d["kind"] == "Issuer"], [])
        certificates = [d for d in docs if d["kind"] == "Certificate"]
        self.assertEqual(len(certificates), 2)
        for cert in certificates:
            self.assertEqual(cert["spec"]["issuerRef"], {"name": "corp-ca", "kind": "ClusterIssuer"})

    def test_existing_secrets(self):
        docs = render("--set", "grpcTLS.provider=existing",
                      "--set", "grpcTLS.existingSecrets.controller=my-controller-tls",
                      "--set", "grpcTLS.existingSecrets.proxy=my-proxy-tls")
        self.assertEqual([d for d in docs if d["kind"] in ("Certificate", "Issuer")], [])
        self.assertEqual([d for d in docs if d["kind"] == "Secret" and "grpc" in d["metadata"]["name"]], [])
        used = {v["secret"]["secretName"] for _, spec in pod_specs(docs)
                for v in spec.get("volumes", []) if "secret" in v}
        self.assertLessEqual({"my-controller-tls", "my-proxy-tls"}, used)
        result = helm("template", RELEASE, CHART, "--set", "grpcTLS.provider=existing")
        self.assertNotEqual(result.returncode, 0)
        self.assertRegex(result.stderr, r"grpcTLS\.existingSecrets\.(controller|proxy) is required")

    def test_turned_off(self):
        docs = render("--set", "grpcTLS.enabled=false", "--set", "networkPolicy.enabled=false")
        self.assertEqual([d for d in docs if d["kind"] in ("Certificate", "Issuer", "NetworkPolicy")], [])
        self.assertEqual([d["metadata"]["name"] for d in docs if d["kind"] == "Secret"], [])
        for _, spec in pod_specs(docs):
            for c in spec["containers"]:
                for flag in GRPC_TLS_FLAGS:
                    self.assertNotIn(flag, c.get("args", []))
                for mount in c.get("volumeMounts", []):
                    self.assertNotIn("tls", mount["mountPath"])

    def test_sidecar_gets_the_proxy_certificate(self):
        docs = render("--set", "sidecar.example.enabled=true")
        (example,) = [d for d in docs if d["kind"] == "Deployment" and
                      d["metadata"]["labels"]["app.kubernetes.io/component"] == "sidecar-example"]
        spec = example["spec"]["template"]["spec"]
        sidecar = [c for c in spec["containers"] if c["name"] == "kwd-proxy"][0]
        for flag in PROXY_TLS_FLAGS:
            self.assertIn(flag, sidecar["args"])
        volumes = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(volumes["kwd-controller-tls"]["secret"]["secretName"],
                         f"{RELEASE}-kwd-grpc-proxy-cert")


class SidecarOnly(unittest.TestCase):
    def test_without_the_shared_proxy(self):
        docs = render("--set", "proxy.enabled=false", "--set", "sidecar.example.enabled=true",
                      "--set", "networkPolicy.enabled=true", "--set", "serviceMonitor.enabled=true")
        components = sorted((d["kind"], d["metadata"]["labels"].get("app.kubernetes.io/component"))
                            for d in docs if d["kind"] in ("Deployment", "Service", "NetworkPolicy"))
        self.assertEqual(components, [("Deployment", "controller"), ("Deployment", "sidecar-example"),
                                      ("NetworkPolicy", "controller"), ("Service", "controller")])


class Lint(unittest.TestCase):
    def test_lint(self):
        for args in ([], ["--strict"], ["--strict", "-f", CUSTOM_VALUES]):
            result = helm("lint", CHART, *args)
            self.assertEqual(result.returncode, 0, f"helm lint {args}:\n{result.stdout}{result.stderr}")
            self.assertIn("0 chart(s) failed", result.stdout)

    def test_package(self):
        with tempfile.TemporaryDirectory() as out:
            result = helm("package", CHART, "--destination", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            # The chart folder is self-contained: helm warns about nothing.
            self.assertNotIn("symbolic link", result.stdout + result.stderr)
            self.assertNotIn("walk.go", result.stdout + result.stderr)
            (tgz,) = os.listdir(out)
            with tarfile.open(os.path.join(out, tgz)) as tar:
                for name in os.listdir(os.path.join(SOURCE_DIR, "crds")):
                    member = tar.extractfile(f"kwd/crds/{name}")
                    with open(os.path.join(SOURCE_DIR, "crds", name), "rb") as source:
                        self.assertEqual(member.read(), source.read(), name)

    def test_values_are_all_documented(self):
        # Every key in values.yaml has a comment line right above it.
        with open(os.path.join(CHART, "values.yaml")) as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            stripped = line.strip()
            if not stripped or stripped.startswith("#") or stripped.startswith("-"):
                continue
            if ":" not in stripped or not stripped.split(":")[0].replace("_", "").isalnum():
                continue
            indent = len(line) - len(line.lstrip())
            value = stripped.split(":", 1)[1].strip()
            if value == "" and i + 1 < len(lines):
                # A map heading: documented by a comment above it or by its children.
                continue
            prev = lines[i - 1].strip() if i > 0 else ""
            parent_is_resources = any(
                lines[j].strip() in ("resources:", "requests:", "limits:", "matchLabels:",
                                     "labels:", "commonLabels:")
                and len(lines[j]) - len(lines[j].lstrip()) < indent
                for j in range(max(0, i - 3), i))
            if parent_is_resources:
                continue
            self.assertTrue(prev.startswith("#"), f"values.yaml:{i + 1} {stripped} has no comment")


class Crds(unittest.TestCase):
    def test_chart_copies_are_the_top_level_files(self):
        """crds/ and deploy/grafana/ are the one source; the chart holds byte-equal
        copies (no symbolic links: helm would warn on every command)."""
        for top, chart_dir, suffix in (("crds", "crds", ".yaml"),
                                       (os.path.join("deploy", "grafana"), "dashboards", ".json")):
            copy_dir = os.path.join(CHART, chart_dir)
            self.assertFalse(os.path.islink(copy_dir), copy_dir)
            sources = sorted(f for f in os.listdir(os.path.join(SOURCE_DIR, top))
                             if f.endswith(suffix))
            copies = sorted(f for f in os.listdir(copy_dir) if f.endswith(suffix))
            self.assertEqual(copies, sources, "run scripts/sync-chart-files.sh")
            for name in sources:
                with open(os.path.join(SOURCE_DIR, top, name), "rb") as a, \
                        open(os.path.join(copy_dir, name), "rb") as b:
                    self.assertEqual(a.read(), b.read(),
                                     f"{chart_dir}/{name} differs from {top}/{name}: "
                                     "run scripts/sync-chart-files.sh")
        check = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "sync-chart-files.sh"),
                                "--check"], capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stderr)

    def test_chart_crds_are_the_top_level_crds(self):
        files = [f for f in os.listdir(os.path.join(SOURCE_DIR, "crds")) if f.endswith(".yaml")]
        self.assertGreaterEqual(len(files), 2)
        want = sorted(load_yaml(os.path.join(SOURCE_DIR, "crds", f))["metadata"]["name"]
                      for f in files)
        rendered = sorted(d["metadata"]["name"] for d in render("--include-crds")
                          if d["kind"] == "CustomResourceDefinition")
        self.assertEqual(rendered, want)
        self.assertIn("logongroups.dispatch.kwd.io", rendered)
        self.assertIn("urlmappings.dispatch.kwd.io", rendered)
        self.assertIn("sapsystems.dispatch.kwd.io", rendered)


class Notes(unittest.TestCase):
    def render_notes(self, *args):
        # helm template does not print NOTES.txt; a throwaway copy of the chart
        # wraps it in a ConfigMap so it renders with the same engine and values.
        with tempfile.TemporaryDirectory() as tmp:
            chart = os.path.join(tmp, "kwd")
            shutil.copytree(CHART, chart, symlinks=False)
            with open(os.path.join(chart, "templates", "zz-notes-test.yaml"), "w") as f:
                f.write("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
                        "data:\n  notes: {{ include \"kwd/templates/NOTES.txt\" . | toJson }}\n")
            docs = render(*args, chart=chart)
        return [d for d in docs if d["kind"] == "ConfigMap"][0]["data"]["notes"]

    def test_default_notes(self):
        notes = self.render_notes()
        for text in ("kubectl get lg",
                     "helm show crds <chart reference> --version 0.1.0 | "
                     "kubectl apply --server-side -f -",
                     f"port-forward svc/{RELEASE}-kwd-proxy 8080:80",
                     f"port-forward svc/{RELEASE}-kwd-proxy-admin 9901",
                     f"port-forward svc/{RELEASE}-kwd-controller 9902",
                     f"{RELEASE}-kwd-controller.{NAMESPACE}.svc:18000",
                     "watching all namespaces"):
            self.assertIn(text, notes)
        self.assertNotIn("<no value>", notes)
        # Every README section the notes name exists in the chart's README
        # (which `helm show readme` prints from the packaged chart).
        sections = re.findall(r'section "([^"]+)"', notes)
        self.assertTrue(sections)
        with open(os.path.join(CHART, "README.md")) as f:
            headings = {line.lstrip("#").strip() for line in f if line.startswith("#")}
        for section in sections:
            self.assertIn(section, headings)
        self.assertNotIn('README "', notes, "a section of a README the chart does not carry")
        # The notes work from the packaged chart: no repository paths.
        self.assertNotIn("examples/", notes)
        self.assertNotIn("-f crds/", notes)

    def test_custom_notes(self):
        notes = self.render_notes("-f", CUSTOM_VALUES)
        for text in ("watching namespaces erp, portal", "jsonpath='{.status.loadBalancer",
                     "443 (https", "port-forward svc/sapwd-proxy-admin 9911"):
            self.assertIn(text, notes)
        self.assertNotIn("<no value>", notes)
        sidecar_only = self.render_notes("--set", "proxy.enabled=false")
        self.assertIn("kwd.proxySidecar", sidecar_only)


class FlagsAcceptedByBinaries(unittest.TestCase):
    """The flags the chart renders are flags the built binaries take (exit 2 is a usage error).

    Listen addresses become 127.0.0.1:0 and the controller has no cluster, so
    the controller stops with a runtime error (exit 1) and the proxy keeps
    retrying its controller until it is stopped. The TLS directories
    (--tls-cert-dir, --upstream-cert-dir) become temporary ones holding a
    certificate pair made with openssl, as the mounted Secrets would.
    --passthrough-listen is checked once the binary lists it in its usage (it
    comes with the passthrough work, issue 11 item 5); until then it is left
    out and reported.
    """
    BINARY_DIR = os.environ.get("KWD_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
    USAGE_ERROR = 2
    LISTEN_FLAGS = ("--listen", "--admin-listen", "--grpc-listen", "--tls-listen",
                    "--passthrough-listen")

    def binary_flags(self, binary):
        process = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                                 timeout=10)
        return set(re.findall(r"--[a-z][-a-z]*", process.stdout + process.stderr))

    def cert_dir(self, tmp, name):
        """A directory as a mounted kubernetes.io/tls Secret makes it: <name>/tls.crt + tls.key."""
        directory = os.path.join(tmp, "certs-" + name)
        os.makedirs(os.path.join(directory, name))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                        "/CN=" + name, "-keyout", os.path.join(directory, name, "tls.key"),
                        "-out", os.path.join(directory, name, "tls.crt")],
                       check=True, capture_output=True, timeout=60)
        return directory

    def runnable_args(self, args, key_file, tls_files=None, known=None, tmp=None):
        result = []
        i = 0
        while i < len(args):
            flag = args[i]
            if flag == "--passthrough-listen" and known is not None and flag not in known:
                print(f"note: {flag} left out: this kwd-proxy does not have it yet",
                      file=sys.stderr)
                i += 2
                continue
            result.append(flag)
            if flag in ("--tls-cert-dir", "--upstream-cert-dir") and tmp is not None:
                result.append(self.cert_dir(tmp, flag.strip("-")))
                i += 2
                continue
            if flag in self.LISTEN_FLAGS:
                result.append("127.0.0.1:0")
                i += 2
                continue
            if flag == "--controller":
                result.append("127.0.0.1:1")
                i += 2
                continue
            if flag in ("--affinity-key-file", "--admin-token-file"):
                result.append(key_file)  # a secret of some length either way
                i += 2
                continue
            if flag == "--snapshot-cache":
                # The emptyDir's file, in a folder that exists here.
                result.append(os.path.join(os.path.dirname(key_file), "snapshot.json"))
                i += 2
                continue
            if flag in GRPC_TLS_FLAGS and tls_files is not None:
                # The mounted Secret's key, written out from the rendered Secret.
                result.append(tls_files.get(args[i + 1], args[i + 1]))
                i += 2
                continue
            i += 1
        env = {"POD_NAME": "pod-1", "POD_NAMESPACE": NAMESPACE}
        return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in result]

    def check(self, *render_args):
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
        env["HOME"] = tempfile.gettempdir()
        checked = 0
        with tempfile.TemporaryDirectory() as tmp:
            key_file = os.path.join(tmp, "affinity.key")
            with open(key_file, "w") as f:
                f.write("a-test-key-of-some-length-0123456789\n")
            docs = render(*render_args)
            tls_files = mounted_secret_files(docs, tmp)
            for name, spec in pod_specs(docs):
                d = {"metadata": {"name": name}}
                for c in spec["containers"]:
                    if not c.get("command", [""])[0].startswith("/usr/local/bin/kwd-"):
                        continue
                    binary = os.path.join(self.BINARY_DIR, os.path.basename(c["command"][0]))
                    self.assertTrue(os.access(binary, os.X_OK), f"build {binary} first")
                    known = self.binary_flags(binary)
                    argv = [binary, *self.runnable_args(c["args"], key_file, tls_files, known, tmp)]
                    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True)
                    try:
                        _, stderr = process.communicate(timeout=2)
                    except subprocess.TimeoutExpired:
                        process.terminate()  # still running: every flag was taken
                        _, stderr = process.communicate()
                    self.assertNotEqual(process.returncode, self.USAGE_ERROR,
                                        f"{d['metadata']['name']}/{c['name']}: {argv}\n{stderr}")
                    checked += 1
        return checked

    def test_default_values(self):
        # controller, proxy, the affinity-key hook Job, the grpc-certs hook Job and CronJob
        self.assertEqual(self.check(), 5)

    def test_chart_certificates_connect_a_proxy_to_the_controller(self):
        """The generated Secrets, mounted where the rendered flags say, make a working
        mutual TLS pair: a proxy run with the proxy Deployment's TLS flags gets the
        snapshot from a controller run with the controller Deployment's TLS flags."""
        import socket
        import time
        import urllib.request

        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "support"))
        from ports import free_port  # below the ephemeral range: no port races

        def tls_args(container, tls_files):
            args = container["args"]
            result = []
            for flag in GRPC_TLS_FLAGS:
                if flag in args:
                    result += [flag, tls_files[arg_after(args, flag)]]
            return result

        docs = render()
        deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
                       for d in docs if d["kind"] == "Deployment"}
        controller = deployments["controller"]["spec"]["template"]["spec"]["containers"][0]
        proxy = deployments["proxy"]["spec"]["template"]["spec"]["containers"][0]
        server_name = arg_after(proxy["args"], "--controller").rsplit(":", 1)[0]
        grpc_port, proxy_admin = free_port(), free_port()
        processes = []
        with tempfile.TemporaryDirectory() as tmp:
            tls_files = mounted_secret_files(docs, tmp)
            try:
                processes.append(subprocess.Popen(
                    [os.path.join(self.BINARY_DIR, "kwd-controller"), "serve",
                     "--source=dir:" + os.path.join(SOURCE_DIR, "examples", "quickstart"),
                     "--grpc-listen", f"127.0.0.1:{grpc_port}", "--admin-listen", "127.0.0.1:0",
                     *tls_args(controller, tls_files)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                processes.append(subprocess.Popen(
                    [os.path.join(self.BINARY_DIR, "kwd-proxy"), "serve",
                     "--controller", f"127.0.0.1:{grpc_port}", "--controller-server-name", server_name,
                     "--listen", "127.0.0.1:0", "--admin-listen", f"127.0.0.1:{proxy_admin}",
                     "--access-log", "off", *tls_args(proxy, tls_files)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                ready = False
                deadline = time.monotonic() + 20
                while not ready and time.monotonic() < deadline:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{proxy_admin}/readyz",
                                                    timeout=1) as reply:
                            ready = reply.status == 200
                    except OSError:
                        time.sleep(0.1)
            finally:
                logs = ""
                for p in processes:
                    p.terminate()
                    logs += p.communicate(timeout=10)[1]
            self.assertTrue(ready, logs)
            self.assertIn("tls=mutual", logs)

    def test_custom_values(self):
        self.assertEqual(self.check("-f", CUSTOM_VALUES), 3)

    def test_proxy_config_values(self):
        # controller, the proxy DaemonSet, the affinity-key Job, the grpc-certs Job and CronJob
        self.assertEqual(self.check("-f", PROXY_CONFIG_VALUES), 5)


class SecretsRbac(unittest.TestCase):
    """controller.rbac.readSecrets: Secrets only where the controller watches."""

    @staticmethod
    def secret_grants(docs):
        out = {}
        for doc in docs:
            if doc["kind"] not in ("Role", "ClusterRole") or component_of(doc) != "controller":
                continue
            verbs = granted(doc["rules"]).get(("", "secrets"))
            if verbs:
                out[(doc["kind"], doc["metadata"].get("namespace"))] = verbs
        return out

    def test_namespaced_roles_when_namespaces_are_listed(self):
        docs = render("--set", "controller.watchNamespaces={erp,crm}")
        self.assertEqual(self.secret_grants(docs), {
            ("Role", "erp"): {"get", "list", "watch"},
            ("Role", "crm"): {"get", "list", "watch"}})

    def test_cluster_role_when_all_namespaces_are_watched(self):
        self.assertEqual(self.secret_grants(render()),
                         {("ClusterRole", None): {"get", "list", "watch"}})

    def test_turned_off(self):
        self.assertEqual(self.secret_grants(render("--set", "controller.rbac.readSecrets=false")),
                         {})
        self.assertEqual(self.secret_grants(render(
            "--set", "controller.rbac.readSecrets=false",
            "--set", "controller.watchNamespaces={erp}")), {})


class ProxyConfig(unittest.TestCase):
    """ingress-nginx-style settings (issue 27 item 2): proxy.config as flags, the
    admin token from a Secret, load-balancer and IP-family Service fields, a
    DaemonSet with hostNetwork. FlagsAcceptedByBinaries runs the same values."""

    @classmethod
    def setUpClass(cls):
        cls.docs = render("-f", PROXY_CONFIG_VALUES)
        cls.values = load_yaml(PROXY_CONFIG_VALUES)["proxy"]

    def proxy(self):
        (workload,) = [d for d in self.docs if component_of(d) == "proxy" and
                       d["kind"] in ("Deployment", "DaemonSet")]
        return workload

    def test_config_becomes_flags(self):
        (c,) = self.proxy()["spec"]["template"]["spec"]["containers"]
        args = c["args"]
        config = self.values["config"]
        for flag, key in (("--header-timeout", "headerTimeout"), ("--idle-timeout", "idleTimeout"),
                          ("--connect-timeout", "connectTimeout"),
                          ("--response-timeout", "responseTimeout"),
                          ("--tls-handshake-timeout", "tlsHandshakeTimeout"),
                          ("--max-body-size", "maxBodySize"),
                          ("--max-header-size", "maxHeaderSize"), ("--log-format", "logFormat")):
            self.assertEqual(arg_after(args, flag), str(config[key]), flag)
        self.assertEqual(arg_after(args, "--trusted-proxies"), "10.0.0.0/8,fd00::/8")
        self.assertEqual(arg_after(args, "--proxy-protocol"), "http,tls")
        # Empty settings render no flag: the binary's defaults hold.
        (default,) = [d for d in render() if component_of(d) == "proxy" and d["kind"] == "Deployment"]
        default_args = default["spec"]["template"]["spec"]["containers"][0]["args"]
        for flag in ("--header-timeout", "--max-body-size", "--trusted-proxies", "--proxy-protocol",
                     "--log-format", "--admin-token-file"):
            self.assertNotIn(flag, default_args)

    def test_admin_token_from_a_secret(self):
        spec = self.proxy()["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        path = arg_after(c["args"], "--admin-token-file")
        (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        self.assertIs(mount["readOnly"], True)
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        self.assertEqual(volume["secret"]["secretName"], "kwd-admin-token")
        self.assertEqual(path, mount["mountPath"] + "/bearer")
        self.assertEqual(volume["secret"]["items"], [{"key": "bearer", "path": "bearer"}])

    def test_service_fields(self):
        (service,) = [d for d in self.docs if d["kind"] == "Service" and component_of(d) == "proxy"
                      and d["metadata"]["name"].endswith("-proxy")]
        spec = service["spec"]
        self.assertEqual(spec["type"], "LoadBalancer")
        self.assertEqual(spec["loadBalancerClass"], "service.k8s.aws/nlb")
        self.assertEqual(spec["loadBalancerIP"], "203.0.113.10")
        self.assertEqual(spec["ipFamilyPolicy"], "PreferDualStack")
        self.assertEqual(spec["ipFamilies"], ["IPv4", "IPv6"])
        self.assertEqual(spec["externalIPs"], ["198.51.100.7"])
        # Not rendered unless asked for (and the load-balancer ones only for LoadBalancer).
        for args in ([], ["--set", "proxy.service.loadBalancerClass=x"]):
            (plain,) = [d for d in render(*args) if d["kind"] == "Service" and
                        d["metadata"]["name"] == f"{RELEASE}-kwd-proxy"]
            for field in ("loadBalancerClass", "loadBalancerIP", "ipFamilyPolicy", "ipFamilies",
                          "externalIPs"):
                self.assertNotIn(field, plain["spec"], (args, field))

    def test_daemonset_with_host_network(self):
        workload = self.proxy()
        self.assertEqual(workload["kind"], "DaemonSet")
        self.assertNotIn("replicas", workload["spec"])
        self.assertNotIn("strategy", workload["spec"])
        self.assertEqual(workload["spec"]["updateStrategy"]["rollingUpdate"], {"maxUnavailable": 1})
        spec = workload["spec"]["template"]["spec"]
        self.assertIs(spec["hostNetwork"], True)
        self.assertEqual(spec["dnsPolicy"], "ClusterFirstWithHostNet")
        # The Services and the PDB select the DaemonSet's pods.
        labels = workload["spec"]["template"]["metadata"]["labels"]
        for d in self.docs:
            if d["kind"] in ("Service", "PodDisruptionBudget") and component_of(d) == "proxy":
                selector = d["spec"]["selector"]
                selector = selector.get("matchLabels", selector)
                self.assertTrue(matches(selector, labels), d["metadata"]["name"])
        # Host-network proxies reach the controller from the nodes' addresses.
        (policy,) = [d for d in self.docs if d["kind"] == "NetworkPolicy" and
                     component_of(d) == "controller"]
        grpc_from = [rule["from"] for rule in policy["spec"]["ingress"]
                     if rule["ports"][0]["port"] == "grpc"][0]
        self.assertIn({"ipBlock": {"cidr": "10.0.0.0/16"}}, grpc_from)
        # A DaemonSet without hostNetwork is a plain pod network DaemonSet.
        (plain,) = [d for d in render("--set", "proxy.kind=DaemonSet") if d["kind"] == "DaemonSet"]
        self.assertNotIn("hostNetwork", plain["spec"]["template"]["spec"])

    def test_inconsistent_settings_are_refused(self):
        for args, message in (
                (["--set", "proxy.hostNetwork=true"], "proxy.hostNetwork needs proxy.kind=DaemonSet"),
                (["--set", "proxy.kind=DaemonSet", "--set", "proxy.hostNetwork=true"],
                 "needs networkPolicy.grpcClientCIDRs"),
                (["--set", "proxy.kind=DaemonSet", "--set", "proxy.autoscaling.enabled=true"],
                 "proxy.autoscaling needs proxy.kind=Deployment"),
                (["--set", "proxy.config.proxyProtocol={smtp}"], "proxyProtocol"),
                (["--set", "proxy.config.headerTimeout=10"], "headerTimeout"),
                (["--set", "proxy.config.logFormat=xml"], "logFormat"),
                (["--set", "proxy.service.ipFamilies={IPv5}"], "ipFamilies"),
                (["--set", "proxy.kind=StatefulSet"], "kind")):
            result = helm("template", RELEASE, CHART, *args)
            self.assertNotEqual(result.returncode, 0, args)
            self.assertIn(message, result.stderr, args)


class ControllerClass(unittest.TestCase):
    """Two releases in one cluster (issue 27 item 4): controller.className becomes
    --class; without it no flag (the objects without a className)."""

    def controller_args(self, *args):
        (deployment,) = [d for d in render(*args) if d["kind"] == "Deployment" and
                         component_of(d) == "controller"]
        return deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    def test_class_flag(self):
        self.assertNotIn("--class", self.controller_args())
        self.assertEqual(arg_after(self.controller_args("--set", "controller.className=erp-prod"),
                                   "--class"), "erp-prod")
        result = helm("template", RELEASE, CHART, "--set", "controller.className=Not_A_Label")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("className", result.stderr)


class ChartHooks(unittest.TestCase):
    """The platform hooks (issue 14): every new value renders where it belongs."""
    VALUES = os.path.join(SOURCE_DIR, "tests", "deploy", "values-hooks.yaml")

    @classmethod
    def setUpClass(cls):
        cls.docs = render("-f", cls.VALUES)
        cls.values = load_yaml(cls.VALUES)

    def workload(self, kind, component):
        (doc,) = [d for d in self.docs if d["kind"] == kind and component_of(d) == component]
        return doc

    def test_pod_and_container_hooks(self):
        for component in ("controller", "proxy"):
            with self.subTest(component):
                v = self.values[component]
                deployment = self.workload("Deployment", component)
                pod = deployment["spec"]["template"]["spec"]
                (c,) = [c for c in pod["containers"] if c["name"] == component]
                self.assertEqual(deployment["spec"]["minReadySeconds"], v["minReadySeconds"])
                self.assertEqual(deployment["spec"]["strategy"], v["updateStrategy"])
                for env in v["extraEnv"]:
                    self.assertIn(env, c["env"])
                self.assertEqual(c["env"][0]["name"], "POD_NAME")  # the chart's own stay
                for volume in v["extraVolumes"]:
                    self.assertIn(volume, pod["volumes"])
                for mount in v["extraVolumeMounts"]:
                    self.assertIn(mount, c["volumeMounts"])
                self.assertEqual(c["livenessProbe"], v["livenessProbe"])
                self.assertEqual(c["readinessProbe"], v["readinessProbe"])
                annotations = deployment["spec"]["template"]["metadata"]["annotations"]
                for key, value in v["podAnnotations"].items():
                    self.assertEqual(annotations[key], value)
                # OpenShift restricted SCC: no fixed UIDs anywhere.
                self.assertEqual(pod["securityContext"], self.values["podSecurityContext"])
                self.assertEqual(c["securityContext"], self.values["containerSecurityContext"])
                self.assertNotIn("runAsUser", c["securityContext"])
        controller = self.workload("Deployment", "controller")["spec"]["template"]["spec"]
        self.assertEqual(controller["topologySpreadConstraints"],
                         self.values["controller"]["topologySpreadConstraints"])
        (c,) = controller["containers"]
        self.assertEqual(c["startupProbe"], self.values["controller"]["startupProbe"])
        # The hook Job uses the same security contexts.
        job = self.workload("Job", "affinity-key")["spec"]["template"]["spec"]
        self.assertEqual(job["securityContext"], self.values["podSecurityContext"])

    def test_services_hpa_and_grace(self):
        for component, name in (("controller", f"{RELEASE}-kwd-controller"),
                                ("proxy", f"{RELEASE}-kwd-proxy")):
            (service,) = [d for d in self.docs if d["kind"] == "Service" and
                          d["metadata"]["name"] == name]
            for key, value in self.values[component]["service"]["labels"].items():
                self.assertEqual(service["metadata"]["labels"][key], value)
        (hpa,) = [d for d in self.docs if d["kind"] == "HorizontalPodAutoscaler"]
        a = self.values["proxy"]["autoscaling"]
        resources = {m["resource"]["name"]: m["resource"]["target"]["averageUtilization"]
                     for m in hpa["spec"]["metrics"]}
        self.assertEqual(resources["memory"], a["targetMemoryUtilizationPercentage"])
        self.assertIn("cpu", resources)
        self.assertEqual(hpa["spec"]["behavior"], a["behavior"])
        proxy = self.workload("Deployment", "proxy")["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(arg_after(proxy["args"], "--affinity-key-grace"),
                         self.values["proxy"]["affinityKey"]["gracePeriod"])

    def test_rendering_is_stable_for_gitops(self):
        """Two renders with the default values are identical: no random key, no
        generated certificate, no lookup-dependent output (issue 27). Only
        grpcTLS.provider=helm generates at render time."""
        for args in ([], ["--set", "grpcTLS.provider=cert-manager"], ["-f", CUSTOM_VALUES]):
            args = ["--namespace", NAMESPACE, *args]
            first = helm("template", RELEASE, CHART, *args)
            second = helm("template", RELEASE, CHART, *args)
            self.assertEqual(first.returncode, 0, first.stderr)
            self.assertEqual(first.stdout, second.stdout, args)
        helm_provider = ["--namespace", NAMESPACE, "--set", "grpcTLS.provider=helm"]
        self.assertNotEqual(helm("template", RELEASE, CHART, *helm_provider).stdout,
                            helm("template", RELEASE, CHART, *helm_provider).stdout,
                            "provider helm generates keys (the test would prove nothing)")
        with open(os.path.join(CHART, "templates", "affinity-key-secret.yaml")) as f:
            code = re.sub(r"\{\{-? ?/\*.*?\*/ ?-?\}\}", "", f.read(), flags=re.S)  # comments
            self.assertNotRegex(code, r"\{\{[^}]*(randAlphaNum|lookup)")

    def test_checksum_rolls_proxies_when_the_key_source_changes(self):
        def checksum(*args):
            (proxy,) = [d for d in render(*args) if d["kind"] == "Deployment" and
                        component_of(d) == "proxy"]
            return proxy["spec"]["template"]["metadata"]["annotations"]["checksum/affinity-key"]

        default = checksum()
        self.assertEqual(default, checksum("--set", "proxy.affinityKey.gracePeriod=2h"))
        self.assertNotEqual(default, checksum("--set", "proxy.affinityKey.existingSecret=mine"))
        self.assertNotEqual(default, checksum("--set", "proxy.affinityKey.secretKey=other"))

    def test_existing_secret_or_create_false_renders_no_job(self):
        for args in (["--set", "proxy.affinityKey.existingSecret=mine"],
                     ["--set", "proxy.affinityKey.create=false"]):
            docs = render(*args)
            self.assertEqual([d for d in docs if component_of(d) == "affinity-key"], [], args)


class Schema(unittest.TestCase):
    """Bad values make helm fail instead of rendering something wrong."""
    REJECTED_BY_SCHEMA = [
        ("unknown top-level key", ["--set", "replicas=3"]),
        ("unknown nested key", ["--set", "proxy.port=80"]),
        ("zero workers", ["--set", "proxy.workers=0"]),
        ("zero controller replicas", ["--set", "controller.replicas=0"]),
        ("port out of range", ["--set", "controller.grpcPort=70000"]),
        ("port as text", ["--set-string", "proxy.httpPort=http"]),
        ("service type", ["--set", "proxy.service.type=Ingress"]),
        ("pull policy", ["--set", "image.pullPolicy=Sometimes"]),
        ("log level", ["--set", "controller.logLevel=trace"]),
        ("namespace name", ["--set", "controller.watchNamespaces[0]=Bad_NS"]),
        ("negative drain", ["--set", "proxy.drainTimeoutSeconds=-1"]),
        ("digest format", ["--set", "image.digest=latest"]),
        ("node port range", ["--set", "proxy.service.httpNodePort=80"]),
        ("cpu target", ["--set", "proxy.autoscaling.targetCPUUtilizationPercentage=0"]),
        ("boolean as text", ["--set-string", "serviceMonitor.enabled=yes"]),
        ("scrape interval", ["--set", "serviceMonitor.interval=often"]),
        ("traffic policy", ["--set", "proxy.service.externalTrafficPolicy=Nearest"]),
        ("resources quantity", ["--set", "proxy.resources.requests.cpu=lots"]),
        ("grpc tls provider", ["--set", "grpcTLS.provider=vault"]),
        ("grpc tls as text", ["--set-string", "grpcTLS.enabled=no"]),
        ("issuer kind", ["--set", "grpcTLS.certManager.issuerRef.kind=Vault"]),
        ("upstream client cert Secret name",
         ["--set", "proxy.upstreamTLS.clientCertSecrets[0]=../etc"]),
        ("passthrough port", ["--set", "proxy.service.passthrough.containerPort=0"]),
        ("replicas without leader election", ["--set", "controller.leaderElect=false"]),
        ("grace period without a unit", ["--set", "proxy.affinityKey.gracePeriod=3600"]),
        ("memory target", ["--set", "proxy.autoscaling.targetMemoryUtilizationPercentage=0"]),
        ("update strategy type", ["--set", "proxy.updateStrategy.type=BlueGreen"]),
        ("extra env without a name", ["--set", "controller.extraEnv[0].value=x"]),
        ("security context as text", ["--set", "podSecurityContext=restricted"]),
        ("unknown hpa behavior key", ["--set", "proxy.autoscaling.behavior.scaleSideways.x=1"]),
    ]
    REJECTED_BY_TEMPLATE = [
        ("grace period too short", ["--set", "proxy.terminationGracePeriodSeconds=15"],
         "must exceed"),
        ("autoscaling bounds", ["--set", "proxy.autoscaling.enabled=true",
                                "--set", "proxy.autoscaling.minReplicas=5",
                                "--set", "proxy.autoscaling.maxReplicas=2"], "must not exceed"),
    ]

    def test_schema_rejects_bad_values(self):
        for name, args in self.REJECTED_BY_SCHEMA:
            with self.subTest(name):
                result = helm("template", RELEASE, CHART, *args)
                self.assertNotEqual(result.returncode, 0, name)
                self.assertIn("don't meet the specifications of the schema", result.stderr, name)

    def test_templates_reject_inconsistent_values(self):
        for name, args, message in self.REJECTED_BY_TEMPLATE:
            with self.subTest(name):
                result = helm("template", RELEASE, CHART, *args)
                self.assertNotEqual(result.returncode, 0, name)
                self.assertIn(message, result.stderr, name)

    def test_single_controller_without_leader_election_renders(self):
        docs = render("--set", "controller.leaderElect=false", "--set", "controller.replicas=1")
        (controller,) = [d for d in docs if d["kind"] == "Deployment" and
                         component_of(d) == "controller"]
        self.assertNotIn("--leader-elect", controller["spec"]["template"]["spec"]
                         ["containers"][0]["args"])

    def test_explicit_grace_period_is_used(self):
        docs = render("--set", "proxy.terminationGracePeriodSeconds=45")
        (proxy,) = [d for d in docs if d["kind"] == "Deployment" and
                    d["metadata"]["labels"]["app.kubernetes.io/component"] == "proxy"]
        self.assertEqual(proxy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 45)

    def test_schema_is_draft7_and_closed(self):
        import json
        with open(os.path.join(CHART, "values.schema.json")) as f:
            schema = json.load(f)
        self.assertEqual(schema["$schema"], "http://json-schema.org/draft-07/schema#")

        def check(node, path):
            if node.get("type") == "object" and "properties" in node:
                self.assertIs(node.get("additionalProperties"), False, path)
                for key, child in node["properties"].items():
                    check(child, f"{path}.{key}")

        check(schema, "values")
        values = load_yaml(os.path.join(CHART, "values.yaml"))

        def covered(values_node, schema_node, path):
            for key, value in values_node.items():
                self.assertIn(key, schema_node.get("properties", {}), f"{path}.{key}")
                child = schema_node["properties"][key]
                if isinstance(value, dict) and "properties" in child:
                    covered(value, child, f"{path}.{key}")

        covered(values, schema, "values")


if __name__ == "__main__":
    unittest.main()
