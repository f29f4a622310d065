"""Deliberately bad LogonGroups and UrlMappings, each a small change to a good
base object, with why the CRD must reject it and what `kwd-controller
validate` says about it where the compiler has the same rule.

Each case: name, kind, change (a function editing a deep copy of the base
object), crd (the exact set of rejections: ("schema", path, keyword) from
the OpenAPI schema, ("cel", path, message) from an x-kubernetes-validations
rule), compiler (a text `kwd-controller validate` prints for it, or None
where the compiler has no such rule).
"""

import copy

import crd_support

API_VERSION = "dispatch.kwd.io/v1alpha1"

# Good objects the compiler accepts on their own (static servers need no
# EndpointSlices), so a failure of a bad variant is the variant's.
BASE_LOGON_GROUP = {
    "apiVersion": API_VERSION,
    "kind": "LogonGroup",
    "metadata": {"name": "grp"},
    "spec": {
        "kind": "abap",
        "backend": {"staticServers": [
            {"name": "sap1_ERP_00", "address": "10.0.0.1", "port": 8000, "capacity": 2},
            {"name": "sap2_ERP_01", "address": "10.0.0.2", "port": 8000},
        ]},
    },
}

BASE_URL_MAPPING = {
    "apiVersion": API_VERSION,
    "kind": "UrlMapping",
    "metadata": {"name": "map"},
    "spec": {
        "hosts": ["erp.example.com"],
        "defaultRootHandler": "abap",
        "defaultGroups": {"abap": "grp", "java": "grp"},
        "rules": [
            {"prefix": "/sap/bc/gui/", "kind": "abap", "logonGroup": "grp"},
            {"prefix": "/sap/", "kind": "abap"},
        ],
        "permissions": [
            {"action": "permit", "pattern": "/sap/public/*"},
            {"action": "deny", "pattern": "*.cgi"},
        ],
    },
}

BASE_SAP_SYSTEM = {
    "apiVersion": API_VERSION,
    "kind": "SapSystem",
    "metadata": {"name": "sys"},
    "spec": {
        "sid": "ERP",
        "messageServer": {"host": "erp-ms.erp.svc", "httpPort": 8101},
        "refreshIntervalSeconds": 25,
    },
}

BASES = {"LogonGroup": BASE_LOGON_GROUP, "UrlMapping": BASE_URL_MAPPING,
         "SapSystem": BASE_SAP_SYSTEM}

EXACTLY_ONE = "exactly one of service, staticServers or sapSystem must be set"
MS_PORT = "exactly one of httpPort or httpsPort must be set"
CA_BUNDLE = "caBundle applies to httpsPort only"
UNIQUE_NAMES = "server names must be unique"
CAPACITY = "capacity must be at least 1"
DEFAULT_CAPACITY = "defaultCapacity must be at least 1"
PREFIX = "prefix must start and end with / and not be / alone"
STAR = "* may appear only at the start or the end of a pattern"
HSTS_PRELOAD = ("preload requires includeSubDomains true and maxAgeSeconds of at least "
                "31536000")
REENCRYPT_NAME = ("upstreamTLS mode reencrypt needs serverName unless every server address is a "
                  "host name")
NEEDS_REENCRYPT = "caBundle, serverName and clientCertSecret need mode reencrypt"
# The API server runs no CEL rule on an object with type or enum errors.
SKIPPED = ("cel", "", crd_support.CEL_SKIPPED)

SERVERS = "spec.backend.staticServers"


def _set(path, value):
    """A change that sets spec.<path> (dotted, list indexes as numbers)."""
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]

    def change(obj):
        node = obj["spec"]
        for key in keys[:-1]:
            if isinstance(key, str) and key not in node:
                node[key] = {}
            node = node[key]
        node[keys[-1]] = value
    return change


def _delete(path):
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]

    def change(obj):
        node = obj["spec"]
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]
    return change


def _service(port="http", name="erp-abap"):
    service = {"name": name}
    if port is not None:
        service["port"] = port
    return _set("backend", {"service": service})


CASES = [
    # ---- LogonGroup ----
    dict(name="service_and_static_servers", kind="LogonGroup",
         change=_set("backend.service", {"name": "erp-abap", "port": 8000}),
         crd={("cel", "spec.backend", EXACTLY_ONE)},
         compiler="exactly one of service, staticServers or sapSystem must be set, got both"),
    dict(name="empty_backend", kind="LogonGroup", change=_set("backend", {}),
         crd={("cel", "spec.backend", EXACTLY_ONE)},
         compiler="exactly one of service, staticServers or sapSystem must be set, got neither"),
    dict(name="no_backend", kind="LogonGroup", change=_delete("backend"),
         crd={("schema", "spec", "required")},
         compiler="exactly one of service, staticServers or sapSystem must be set, got neither"),
    dict(name="static_servers_and_sap_system", kind="LogonGroup",
         change=_set("backend.sapSystem", {"name": "erp"}),
         crd={("cel", "spec.backend", EXACTLY_ONE)},
         compiler="exactly one of service, staticServers or sapSystem must be set, got both"),
    dict(name="sap_system_without_name", kind="LogonGroup",
         change=_set("backend", {"sapSystem": {"logonGroup": "PUBLIC"}}),
         crd={("schema", "spec.backend.sapSystem", "required")},
         compiler="spec.backend.sapSystem.name: must not be empty"),
    dict(name="sap_logon_group_with_space", kind="LogonGroup",
         change=_set("backend", {"sapSystem": {"name": "erp", "logonGroup": "MY GROUP"}}),
         crd={("schema", "spec.backend.sapSystem.logonGroup", "pattern")},
         compiler="is not a valid logon group name"),
    # ---- SapSystem ----
    dict(name="ms_both_ports", kind="SapSystem", change=_set("messageServer.httpsPort", 8443),
         crd={("cel", "spec.messageServer", MS_PORT)},
         compiler="exactly one of httpPort or httpsPort must be set, got both"),
    dict(name="ms_no_port", kind="SapSystem", change=_delete("messageServer.httpPort"),
         crd={("cel", "spec.messageServer", MS_PORT)},
         compiler="exactly one of httpPort or httpsPort must be set, got neither"),
    dict(name="ca_bundle_with_http", kind="SapSystem",
         change=_set("messageServer.caBundle",
                     "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
         crd={("cel", "spec.messageServer", CA_BUNDLE)},
         compiler="spec.messageServer.caBundle: only with httpsPort"),
    dict(name="ms_port_out_of_range", kind="SapSystem", change=_set("messageServer.httpPort", 70000),
         crd={("schema", "spec.messageServer.httpPort", "maximum")},
         compiler="spec.messageServer.httpPort: 70000 is not 1 to 65535"),
    dict(name="ms_host_with_space", kind="SapSystem", change=_set("messageServer.host", "erp ms"),
         crd={("schema", "spec.messageServer.host", "pattern")},
         compiler="is not a host name or IP address"),
    dict(name="sid_lowercase", kind="SapSystem", change=_set("sid", "erp"),
         crd={("schema", "spec.sid", "pattern")},
         compiler="is not a SAP system ID"),
    dict(name="refresh_zero", kind="SapSystem", change=_set("refreshIntervalSeconds", 0),
         crd={("schema", "spec.refreshIntervalSeconds", "minimum")},
         compiler="spec.refreshIntervalSeconds: 0 is not 1 to 86400"),
    dict(name="server_list_path_relative", kind="SapSystem",
         change=_set("serverListPath", "msgserver/text/logon"),
         crd={("schema", "spec.serverListPath", "pattern")},
         compiler="spec.serverListPath: \"msgserver/text/logon\" is not an origin-form path"),
    dict(name="url_map_path_relative", kind="SapSystem",
         change=_set("urlMapPath", "sap/public/icf_info/icr_urlprefix"),
         crd={("schema", "spec.urlMapPath", "pattern")},
         compiler="spec.urlMapPath: \"sap/public/icf_info/icr_urlprefix\" is not an origin-form path"),
    dict(name="allowed_network_not_a_cidr", kind="SapSystem",
         change=_set("allowedNetworks", ["10.0.0.0/8", "erp.example.com/8"]),
         crd={("schema", "spec.allowedNetworks.1", "pattern")},
         compiler="spec.allowedNetworks[1]: \"erp.example.com/8\" not an IPv4 or IPv6 network"),
    dict(name="url_map_not_a_bool", kind="SapSystem", change=_set("urlMap", "yes"),
         crd={("schema", "spec.urlMap", "type"), SKIPPED},
         compiler="spec.urlMap: expected a boolean, got a string"),
    dict(name="static_server_drain_not_a_bool", kind="LogonGroup",
         change=_set("backend.staticServers.0.drain", "yes"),
         crd={("schema", SERVERS + ".0.drain", "type"), SKIPPED},
         compiler="spec.backend.staticServers[0].drain: expected a boolean, got a string"),
    dict(name="duplicate_server_name", kind="LogonGroup",
         change=_set("backend.staticServers.1.name", "sap1_ERP_00"),
         crd={("schema", SERVERS, "x-kubernetes-list-type"),
              ("cel", SERVERS, UNIQUE_NAMES)},
         compiler="DuplicateServer"),
    dict(name="empty_static_server_list", kind="LogonGroup",
         change=_set("backend.staticServers", []),
         crd={("schema", SERVERS, "minItems")},
         compiler=None),  # the compiler accepts a group without servers (503s)
    dict(name="capacity_zero", kind="LogonGroup",
         change=_set("backend.staticServers.0.capacity", 0),
         crd={("schema", SERVERS + ".0.capacity", "minimum"),
              ("cel", SERVERS + ".0", CAPACITY)},
         compiler="capacity: must be an integer from 1"),
    dict(name="default_capacity_zero", kind="LogonGroup", change=_set("defaultCapacity", 0),
         crd={("schema", "spec.defaultCapacity", "minimum"),
              ("cel", "spec.defaultCapacity", DEFAULT_CAPACITY)},
         compiler="spec.defaultCapacity: must be an integer from 1"),
    dict(name="default_capacity_text", kind="LogonGroup", change=_set("defaultCapacity", "4"),
         crd={("schema", "spec.defaultCapacity", "type"), SKIPPED},
         compiler="spec.defaultCapacity: expected an integer, got a string"),
    dict(name="unknown_strategy", kind="LogonGroup", change=_set("strategy", "round_robin"),
         crd={("schema", "spec.strategy", "enum"), SKIPPED}, compiler="InvalidStrategy"),
    dict(name="j2ee_is_no_group_kind", kind="LogonGroup", change=_set("kind", "j2ee"),
         crd={("schema", "spec.kind", "enum"), SKIPPED}, compiler="InvalidKind"),
    dict(name="load_reset_zero", kind="LogonGroup", change=_set("loadResetIntervalSeconds", 0),
         crd={("schema", "spec.loadResetIntervalSeconds", "minimum")},
         compiler="spec.loadResetIntervalSeconds: must be an integer from 1"),
    dict(name="health_path_relative", kind="LogonGroup",
         change=_set("healthCheck.path", "sap/public/icman/ping"),
         crd={("schema", "spec.healthCheck.path", "pattern")},
         compiler="spec.healthCheck.path: must start with /"),
    dict(name="health_interval_zero", kind="LogonGroup", change=_set("healthCheck.intervalSeconds", 0),
         crd={("schema", "spec.healthCheck.intervalSeconds", "minimum")},
         compiler="spec.healthCheck.intervalSeconds: must be an integer from 1"),
    dict(name="unknown_identifier", kind="LogonGroup",
         change=_set("sessionAffinity.identifiers", ["sap-contextid", "mysapsso2"]),
         crd={("schema", "spec.sessionAffinity.identifiers.1", "enum"), SKIPPED},
         compiler="\"mysapsso2\" is not one of sap-contextid"),
    dict(name="session_table_zero", kind="LogonGroup",
         change=_set("sessionAffinity.sessionTable.maxEntries", 0),
         crd={("schema", "spec.sessionAffinity.sessionTable.maxEntries", "minimum")},
         compiler="spec.sessionAffinity.sessionTable.maxEntries: must be an integer from 1"),
    dict(name="cookie_name_with_space", kind="LogonGroup",
         change=_set("sessionAffinity.affinityCookie.name", "kwd affinity"),
         crd={("schema", "spec.sessionAffinity.affinityCookie.name", "pattern")},
         compiler="is not a valid cookie name"),
    dict(name="client_ip_mask_with_holes", kind="LogonGroup",
         change=_set("sessionAffinity.clientIP", {"mask": "255.0.255.0"}),
         crd={("schema", "spec.sessionAffinity.clientIP.mask", "enum"), SKIPPED},
         compiler="spec.sessionAffinity.clientIP.mask: \"255.0.255.0\" is not a contiguous"),
    dict(name="unknown_tls_mode", kind="LogonGroup", change=_set("upstreamTLS.mode", "passthrough"),
         crd={("schema", "spec.upstreamTLS.mode", "enum"), SKIPPED},
         compiler="spec.upstreamTLS.mode: \"passthrough\" is not one of none"),
    # Issue 11: re-encryption needs a name to send and verify; the base's
    # servers are IP addresses.
    dict(name="reencrypt_without_server_name", kind="LogonGroup",
         change=_set("upstreamTLS", {"mode": "reencrypt"}),
         crd={("cel", "spec", REENCRYPT_NAME)},
         compiler="spec.upstreamTLS.serverName: required with mode reencrypt unless every server "
                  "address is a host name (spec.backend.staticServers[0].address \"10.0.0.1\" is "
                  "an IP address)"),
    dict(name="server_name_with_mode_none", kind="LogonGroup",
         change=_set("upstreamTLS", {"serverName": "erp.example.com"}),
         crd={("cel", "spec.upstreamTLS", NEEDS_REENCRYPT)},
         compiler="spec.upstreamTLS.serverName: only with mode reencrypt"),
    dict(name="ca_bundle_not_base64", kind="LogonGroup",
         change=_set("upstreamTLS", {"mode": "reencrypt", "serverName": "erp.example.com",
                                     "caBundle": "-----BEGIN CERTIFICATE-----"}),
         crd={("schema", "spec.upstreamTLS.caBundle", "pattern")},
         compiler="spec.upstreamTLS.caBundle: is not valid base64"),
    dict(name="server_name_with_space", kind="LogonGroup",
         change=_set("upstreamTLS", {"mode": "reencrypt", "serverName": "erp example.com"}),
         crd={("schema", "spec.upstreamTLS.serverName", "pattern")},
         compiler="spec.upstreamTLS.serverName: \"erp example.com\" is not a DNS name"),
    dict(name="client_cert_secret_path", kind="LogonGroup",
         change=_set("upstreamTLS", {"mode": "reencrypt", "serverName": "erp.example.com",
                                     "clientCertSecret": "../../etc"}),
         crd={("schema", "spec.upstreamTLS.clientCertSecret", "pattern")},
         compiler="spec.upstreamTLS.clientCertSecret: \"../../etc\" is not a Secret name"),
    dict(name="port_too_large", kind="LogonGroup",
         change=_set("backend.staticServers.0.port", 70000),
         crd={("schema", SERVERS + ".0.port", "maximum")},
         compiler="port: must be an integer from 1 to 65535"),
    dict(name="static_server_without_port", kind="LogonGroup",
         change=_delete("backend.staticServers.1.port"),
         crd={("schema", SERVERS + ".1", "required")}, compiler="port: missing"),
    dict(name="static_server_empty_address", kind="LogonGroup",
         change=_set("backend.staticServers.0.address", ""),
         crd={("schema", SERVERS + ".0.address", "minLength")},
         compiler="address: must not be empty"),
    dict(name="service_port_zero", kind="LogonGroup", change=_service(port=0),
         crd={("schema", "spec.backend.service.port", "minimum")},
         compiler="spec.backend.service.port: must be a port number from 1 to 65535"),
    dict(name="service_port_name_invalid", kind="LogonGroup", change=_service(port="HTTP_8000"),
         crd={("schema", "spec.backend.service.port", "pattern")},
         compiler=None),  # the compiler looks the name up (PortNotFound/NoEndpoints)
    dict(name="service_without_name", kind="LogonGroup", change=_service(name=""),
         crd={("schema", "spec.backend.service.name", "minLength"),
              ("schema", "spec.backend.service.name", "pattern")},
         compiler="spec.backend.service.name: must not be empty"),
    dict(name="unknown_field", kind="LogonGroup", change=_set("capacity", 4),
         crd={("schema", "spec", "additionalProperties")},
         compiler=None),  # the compiler ignores unknown fields, as pruning would
    # Names and paths reach headers (Set-Cookie, the probe's request line), log
    # lines and metric labels: the CRD and the compiler both refuse them.
    dict(name="server_name_with_crlf", kind="LogonGroup",
         change=_set("backend.staticServers.0.name", "sap1\r\nSet-Cookie: x=1"),
         crd={("schema", SERVERS + ".0.name", "pattern")},
         compiler="is not a valid server name"),
    dict(name="server_name_with_semicolon", kind="LogonGroup",
         change=_set("backend.staticServers.0.name", "sap1;Path=/"),
         crd={("schema", SERVERS + ".0.name", "pattern")},
         compiler="is not a valid server name"),
    dict(name="server_address_with_space", kind="LogonGroup",
         change=_set("backend.staticServers.0.address", "10.0.0.1 x"),
         crd={("schema", SERVERS + ".0.address", "pattern")},
         compiler="is not an IP address or host name"),
    dict(name="health_path_with_crlf", kind="LogonGroup",
         change=_set("healthCheck.path", "/ping HTTP/1.1\r\nX: y"),
         crd={("schema", "spec.healthCheck.path", "pattern")},
         compiler="spec.healthCheck.path: must start with / and be an origin-form path"),
    dict(name="health_path_with_fragment", kind="LogonGroup",
         change=_set("healthCheck.path", "/ping#x"),
         crd={("schema", "spec.healthCheck.path", "pattern")},
         compiler="spec.healthCheck.path: must start with / and be an origin-form path"),
    # ---- UrlMapping ----
    dict(name="modification_with_rules_and_actions", kind="UrlMapping",
         change=_set("modifications", [{"rules": "NOP", "actions": [{"op": "NOP"}]}]),
         crd={("cel", "spec.modifications.0", "exactly one of rules or actions must be set")},
         compiler="exactly one of rules (SAP's rule text) or actions must be set"),
    dict(name="modification_prefix_without_slash", kind="UrlMapping",
         change=_set("modifications", [{"prefix": "sap", "rules": "NOP"}]),
         crd={("schema", "spec.modifications.0.prefix", "pattern")},
         compiler="must start with / and hold only RFC 3986 path characters"),
    dict(name="from_sap_system_upper_case", kind="UrlMapping", change=_set("fromSapSystem", "ERP"),
         crd={("schema", "spec.fromSapSystem", "pattern")},
         compiler="spec.fromSapSystem: \"ERP\" is not a valid SapSystem name"),
    dict(name="prefix_with_quote", kind="UrlMapping", change=_set("rules.1.prefix", "/sap\"x/"),
         crd={("schema", "spec.rules.1.prefix", "pattern")},
         compiler="may hold only RFC 3986 path characters"),
    dict(name="prefix_with_bad_percent", kind="UrlMapping", change=_set("rules.1.prefix", "/sap%zz/"),
         crd={("schema", "spec.rules.1.prefix", "pattern")},
         compiler="may hold only RFC 3986 path characters"),
    dict(name="pattern_with_crlf", kind="UrlMapping",
         change=_set("permissions.0.pattern", "/sap/\r\n*"),
         crd={("schema", "spec.permissions.0.pattern", "pattern")},
         compiler="may hold only RFC 3986 path characters"),
    dict(name="prefix_without_leading_slash", kind="UrlMapping", change=_set("rules.1.prefix", "sap/"),
         crd={("cel", "spec.rules.1.prefix", PREFIX)}, compiler="InvalidRule"),
    dict(name="prefix_without_trailing_slash", kind="UrlMapping", change=_set("rules.1.prefix", "/sap"),
         crd={("cel", "spec.rules.1.prefix", PREFIX)},
         compiler="must start and end with /"),
    dict(name="prefix_root", kind="UrlMapping", change=_set("rules.1.prefix", "/"),
         crd={("schema", "spec.rules.1.prefix", "minLength"),
              ("cel", "spec.rules.1.prefix", PREFIX)},
         compiler="not be / alone"),
    dict(name="prefix_with_space", kind="UrlMapping", change=_set("rules.1.prefix", "/sap bc/"),
         crd={("schema", "spec.rules.1.prefix", "pattern")}, compiler="InvalidRule"),
    dict(name="prefix_with_query", kind="UrlMapping", change=_set("rules.1.prefix", "/sap?x=1/"),
         crd={("schema", "spec.rules.1.prefix", "pattern")}, compiler="InvalidRule"),
    dict(name="duplicate_prefix", kind="UrlMapping", change=_set("rules.1.prefix", "/sap/bc/gui/"),
         crd={("schema", "spec.rules", "x-kubernetes-list-type")}, compiler="is listed twice"),
    dict(name="rule_without_prefix", kind="UrlMapping", change=_delete("rules.1.prefix"),
         crd={("schema", "spec.rules.1", "required")}, compiler="InvalidRule"),
    dict(name="unknown_rule_kind", kind="UrlMapping", change=_set("rules.1.kind", "cobol"),
         crd={("schema", "spec.rules.1.kind", "enum"), SKIPPED},
         compiler="kind: \"cobol\" is not one of abap, java"),
    dict(name="star_in_the_middle", kind="UrlMapping",
         change=_set("permissions.0.pattern", "/sap/*/public"),
         crd={("cel", "spec.permissions.0.pattern", STAR)}, compiler="InvalidPermission"),
    dict(name="two_stars_at_the_end", kind="UrlMapping",
         change=_set("permissions.1.pattern", "/sap/**"),
         crd={("cel", "spec.permissions.1.pattern", STAR)},
         compiler="may hold * only at the start or the end"),
    dict(name="empty_pattern", kind="UrlMapping", change=_set("permissions.1.pattern", ""),
         crd={("schema", "spec.permissions.1.pattern", "minLength")},
         compiler="InvalidPermission"),
    dict(name="unknown_secure_action", kind="UrlMapping", change=_set("secureAction", "allow"),
         crd={("schema", "spec.secureAction", "enum"), SKIPPED},
         compiler="spec.secureAction: \"allow\" is not one of forbid, redirect"),
    dict(name="hsts_preload_without_subdomains", kind="UrlMapping",
         change=_set("hsts", {"preload": True}),
         crd={("cel", "spec.hsts", HSTS_PRELOAD)},
         compiler="spec.hsts.preload: true requires includeSubDomains: true"),
    dict(name="hsts_preload_with_a_short_max_age", kind="UrlMapping",
         change=_set("hsts", {"preload": True, "includeSubDomains": True, "maxAgeSeconds": 600}),
         crd={("cel", "spec.hsts", HSTS_PRELOAD)},
         compiler="got includeSubDomains: true, maxAgeSeconds: 600"),
    dict(name="hsts_max_age_over_two_years", kind="UrlMapping",
         change=_set("hsts.maxAgeSeconds", 63072001),
         crd={("schema", "spec.hsts.maxAgeSeconds", "maximum")},
         compiler="spec.hsts.maxAgeSeconds: must be an integer from 0 to 63072000"),
    dict(name="hsts_negative_max_age", kind="UrlMapping", change=_set("hsts.maxAgeSeconds", -1),
         crd={("schema", "spec.hsts.maxAgeSeconds", "minimum")},
         compiler="spec.hsts.maxAgeSeconds: must be an integer from 0 to 63072000"),
    dict(name="unknown_action", kind="UrlMapping", change=_set("permissions.0.action", "allow"),
         crd={("schema", "spec.permissions.0.action", "enum"), SKIPPED},
         compiler="action: \"allow\" is not one of permit, deny, secure"),
    dict(name="unknown_root_handler", kind="UrlMapping", change=_set("defaultRootHandler", "icf"),
         crd={("schema", "spec.defaultRootHandler", "enum"), SKIPPED},
         compiler="spec.defaultRootHandler: \"icf\" is not one of abap, java"),
    dict(name="host_with_space", kind="UrlMapping", change=_set("hosts", ["erp example.com"]),
         crd={("schema", "spec.hosts.0", "pattern")}, compiler="is not a host name or *.suffix"),
    dict(name="bare_wildcard_host", kind="UrlMapping", change=_set("hosts", ["*."]),
         crd={("schema", "spec.hosts.0", "pattern")}, compiler="is not a host name or *.suffix"),
    dict(name="sap_headers_switch_not_a_bool", kind="UrlMapping",
         change=_set("sapHeaders", {"clientProtocol": "yes"}),
         crd={("schema", "spec.sapHeaders.clientProtocol", "type"), SKIPPED},
         compiler="spec.sapHeaders.clientProtocol: expected a boolean, got a string"),
    dict(name="sap_headers_not_an_object", kind="UrlMapping",
         change=_set("sapHeaders", True),
         crd={("schema", "spec.sapHeaders", "type"), SKIPPED},
         compiler="spec.sapHeaders: expected an object, got a boolean"),
    dict(name="group_name_uppercase", kind="UrlMapping", change=_set("rules.0.logonGroup", "Public"),
         crd={("schema", "spec.rules.0.logonGroup", "pattern")},
         compiler="LogonGroupNotFound"),  # not a rule of its own: such a group cannot exist
]


def bad_object(case):
    obj = copy.deepcopy(BASES[case["kind"]])
    obj["metadata"]["name"] = case["name"].replace("_", "-")
    case["change"](obj)
    return obj
