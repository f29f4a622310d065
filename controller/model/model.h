#pragma once

// The controller's input objects, shaped exactly as the Kubernetes API server
// returns them, and one decoder from JSON used by both the file loader and the
// Kubernetes watch client.
//
// Decoding is strict about shapes (a wrong JSON type is an error naming the
// field path) and lenient about values: strings such as a strategy or numbers
// such as a capacity are kept raw so the compiler can turn a bad value into a
// status condition instead of losing the whole object.

#include <compare>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kwd::model {

inline constexpr std::string_view kDispatchApiVersion = "dispatch.kwd.io/v1alpha1";
inline constexpr std::string_view kDiscoveryApiVersion = "discovery.k8s.io/v1";
inline constexpr std::string_view kCoreApiVersion = "v1";

inline constexpr std::string_view kLogonGroupKind = "LogonGroup";
inline constexpr std::string_view kUrlMappingKind = "UrlMapping";
inline constexpr std::string_view kEndpointSliceKind = "EndpointSlice";
inline constexpr std::string_view kPodKind = "Pod";
inline constexpr std::string_view kSapSystemKind = "SapSystem";
// Not an API kind: what the controller's SAP system poller learnt from a
// SapSystem's message server (one per SapSystem, same namespace/name), fed
// to the compile like an EndpointSlice.
inline constexpr std::string_view kSapServerListKind = "SapServerList";
// A core v1 Secret of type kubernetes.io/tls, named by UrlMapping.spec.tls[].
inline constexpr std::string_view kSecretKind = "Secret";
inline constexpr std::string_view kTlsSecretType = "kubernetes.io/tls";

inline constexpr std::string_view kServiceNameLabel = "kubernetes.io/service-name";
inline constexpr std::string_view kCapacityAnnotation = "dispatch.kwd.io/capacity";
inline constexpr std::string_view kInstanceNameAnnotation = "dispatch.kwd.io/instance-name";
// "true" on a pod: its server is draining (sticky traffic only), on every proxy.
inline constexpr std::string_view kDrainAnnotation = "dispatch.kwd.io/drain";

// "an object", "a list", "a string", "a boolean", "an integer", "a number
// with a fraction" or "null": what a field holds, in messages.
std::string_view JsonTypeName(const nlohmann::json& value);

struct ObjectMeta {
  std::string name;
  std::string namespace_ = "default";
  std::string uid;
  std::int64_t generation = 0;
  std::string resource_version;
  std::string creation_timestamp;  // RFC 3339, as the API server writes it
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;

  bool operator==(const ObjectMeta&) const = default;
};

// ---- LogonGroup (dispatch.kwd.io/v1alpha1) ----

// Kubernetes IntOrString: a port number or a port name.
struct IntOrString {
  bool is_number = false;
  std::int64_t number = 0;
  std::string name;

  bool operator==(const IntOrString&) const = default;
};

struct ServiceBackend {
  std::string name;
  std::optional<IntOrString> port;

  bool operator==(const ServiceBackend&) const = default;
};

struct StaticServer {
  std::string name;
  std::string address;
  std::optional<std::int64_t> port;
  std::optional<std::int64_t> capacity;
  // true: the server takes sticky traffic only (SERVER_STATE_DRAINING).
  std::optional<bool> drain;

  bool operator==(const StaticServer&) const = default;
};

// LogonGroup.spec.backend.sapSystem: the servers of a SapSystem (every
// instance with an HTTP port of the group's kind, or the members of one of
// its SMLG logon groups).
struct SapSystemBackend {
  std::string name;
  std::optional<std::string> logon_group;

  bool operator==(const SapSystemBackend&) const = default;
};

struct Backend {
  std::optional<ServiceBackend> service;
  std::optional<std::vector<StaticServer>> static_servers;
  std::optional<SapSystemBackend> sap_system;

  bool operator==(const Backend&) const = default;
};

struct HealthCheckSpec {
  std::optional<std::string> path;
  std::optional<std::int64_t> interval_seconds;
  std::optional<std::int64_t> timeout_seconds;
  std::optional<std::int64_t> unhealthy_threshold;
  std::optional<std::int64_t> healthy_threshold;

  bool operator==(const HealthCheckSpec&) const = default;
};

struct SessionTableSpec {
  std::optional<std::int64_t> max_entries;
  std::optional<std::int64_t> idle_timeout_seconds;

  bool operator==(const SessionTableSpec&) const = default;
};

struct AffinityCookieSpec {
  std::optional<bool> enabled;
  std::optional<std::string> name;

  bool operator==(const AffinityCookieSpec&) const = default;
};

// TLS passthrough client-IP affinity (SAP: wdisp/ssl_cli_affinity); on when
// the object is present.
struct ClientIpAffinitySpec {
  std::optional<std::string> mask;  // dotted IPv4 mask, default 255.255.240.0
  std::optional<std::int64_t> max_entries;
  std::optional<std::int64_t> idle_timeout_seconds;

  bool operator==(const ClientIpAffinitySpec&) const = default;
};

struct SessionAffinitySpec {
  std::optional<std::vector<std::string>> identifiers;
  SessionTableSpec session_table;
  AffinityCookieSpec affinity_cookie;
  std::optional<ClientIpAffinitySpec> client_ip;

  bool operator==(const SessionAffinitySpec&) const = default;
};

// TLS from the proxy to the group's servers (mode none | reencrypt).
struct UpstreamTlsSpec {
  std::optional<std::string> mode;
  std::optional<std::string> ca_bundle;  // base64 of PEM certificates, as written
  std::optional<std::string> server_name;
  std::optional<std::string> client_cert_secret;

  bool operator==(const UpstreamTlsSpec&) const = default;
};

struct LogonGroupSpec {
  std::optional<std::string> kind;
  std::optional<std::string> strategy;
  std::optional<std::int64_t> default_capacity;
  std::optional<std::int64_t> load_reset_interval_seconds;
  std::optional<Backend> backend;
  HealthCheckSpec health_check;
  SessionAffinitySpec session_affinity;
  UpstreamTlsSpec upstream_tls;

  // spec.className: the controller (`serve --class NAME`) that programs the
  // object; empty: the controller without --class.
  std::string class_name;

  bool operator==(const LogonGroupSpec&) const = default;
};

struct LogonGroup {
  ObjectMeta metadata;
  LogonGroupSpec spec;
  // What the decoder could not take ("spec.strategee: unknown field"): the
  // compiler rejects the object (Accepted=False, InvalidField) and serves
  // its last accepted version.
  std::vector<std::string> field_errors;

  bool operator==(const LogonGroup&) const = default;
};

// ---- UrlMapping (dispatch.kwd.io/v1alpha1) ----

struct UrlRule {
  std::string prefix;
  std::optional<std::string> kind;
  std::optional<std::string> logon_group;

  bool operator==(const UrlRule&) const = default;
};

struct PermissionEntry {
  std::string action;
  std::string pattern;

  bool operator==(const PermissionEntry&) const = default;
};

struct DefaultGroups {
  std::optional<std::string> abap;
  std::optional<std::string> java;

  bool operator==(const DefaultGroups&) const = default;
};

// spec.modifications[]: SAP Web Dispatcher modification rules (icm/HTTP/
// mod_<xx>) for requests under `prefix`, written as SAP's own text (`rules`)
// or as structured `actions`; exactly one of the two.
struct ModificationAction {
  std::string op;
  std::optional<std::string> header;
  std::optional<std::string> pattern;
  std::optional<std::string> value;        // header commands
  std::optional<std::string> replacement;  // URL commands (the destination)
  std::vector<std::string> options;

  bool operator==(const ModificationAction&) const = default;
};

struct Modification {
  std::optional<std::string> prefix;  // default "/"
  std::optional<std::string> rules;
  std::optional<std::vector<ModificationAction>> actions;

  bool operator==(const Modification&) const = default;
};

// spec.sapHeaders: SAP's forwarding fields for the mapping's requests; an
// unset switch is on for ABAP groups, off for Java ones.
struct SapHeadersSpec {
  std::optional<bool> client_protocol;  // ClientProtocol: http|https
  std::optional<bool> access_points;    // x-sap-webdisp-ap: HTTP=<port>,HTTPS=<port>

  bool operator==(const SapHeadersSpec&) const = default;
};

// spec.hsts: the Strict-Transport-Security field of the mapping's https
// responses (RFC 6797).
struct HstsSpec {
  std::optional<std::int64_t> max_age_seconds;  // default 31536000 (a year)
  std::optional<bool> include_subdomains;       // default false
  std::optional<bool> preload;                  // default false

  bool operator==(const HstsSpec&) const = default;
};

// spec.tls[]: like Ingress TLS, the certificate of `secret_name` (a
// kubernetes.io/tls Secret in the mapping's namespace) serves SNI `hosts`.
struct UrlMappingTls {
  std::vector<std::string> hosts;
  std::string secret_name;

  bool operator==(const UrlMappingTls&) const = default;
};

struct UrlMappingSpec {
  std::vector<std::string> hosts;  // empty: any host
  std::optional<std::string> default_root_handler;
  DefaultGroups default_groups;
  std::optional<std::string> passthrough_group;  // TLS passthrough: a LogonGroup name
  std::vector<UrlRule> rules;
  std::vector<PermissionEntry> permissions;
  // A SapSystem in the same namespace whose ICF URL prefixes (icr_urlprefix)
  // become rules of this mapping; the mapping's own rules win on a prefix.
  std::optional<std::string> from_sap_system;
  // Modification rules, in order (SAP: icm/HTTP/mod_<xx>).
  std::vector<Modification> modifications;
  SapHeadersSpec sap_headers;
  // spec.system.sid: the SAP system this mapping is, for the requests a
  // modification rule sends to a SID (x-sap-webdisp-target-sid).
  std::optional<std::string> system_sid;
  // spec.secureAction: what a `secure` permission entry does with a plain
  // http request: "forbid" (403, SAP's behaviour; the default) or "redirect"
  // (to https). spec.hsts: absent, no Strict-Transport-Security field.
  std::optional<std::string> secure_action;
  std::optional<HstsSpec> hsts;
  // Whether a discovered prefix may take a subtree of one of this mapping's
  // own rules (a longer prefix under it); default false. Never when the
  // traffic it takes would lose its upstream TLS.
  std::optional<bool> from_sap_system_refines;
  std::vector<UrlMappingTls> tls;

  // spec.className: the controller (`serve --class NAME`) that programs the
  // object; empty: the controller without --class.
  std::string class_name;

  bool operator==(const UrlMappingSpec&) const = default;
};

struct UrlMapping {
  ObjectMeta metadata;
  UrlMappingSpec spec;
  std::vector<std::string> field_errors;  // as LogonGroup::field_errors

  bool operator==(const UrlMapping&) const = default;
};

// ---- SapSystem (dispatch.kwd.io/v1alpha1) ----

struct MessageServerSpec {
  std::string host;
  std::optional<std::int64_t> http_port;
  std::optional<std::int64_t> https_port;
  std::optional<std::string> ca_bundle;  // PEM, with httpsPort

  bool operator==(const MessageServerSpec&) const = default;
};

struct SapSystemSpec {
  std::optional<std::string> sid;
  MessageServerSpec message_server;
  std::optional<std::string> server_list_path;
  std::optional<std::int64_t> refresh_interval_seconds;
  std::optional<bool> logon_groups;
  std::optional<std::string> group_info_path;
  std::optional<bool> url_map;  // fetch the ICF URL map (icr_urlprefix)
  std::optional<std::string> url_map_path;
  // CIDRs the instances' addresses must be in (empty: any ordinary address);
  // loopback, link-local, unspecified and multicast only when listed.
  std::vector<std::string> allowed_networks;

  // spec.className: the controller (`serve --class NAME`) that programs the
  // object; empty: the controller without --class.
  std::string class_name;

  bool operator==(const SapSystemSpec&) const = default;
};

struct SapSystem {
  ObjectMeta metadata;
  SapSystemSpec spec;
  std::vector<std::string> field_errors;  // as LogonGroup::field_errors

  bool operator==(const SapSystem&) const = default;
};

// One application server instance of a SapServerList. Every text field was
// checked by the poller (IsServerName / IsServerAddress) before it got here.
struct SapInstance {
  std::string name;     // sap-server-name (rdisp/myname)
  std::string host;     // as the message server lists it
  std::string address;  // resolved IP address
  std::uint32_t http_port = 0;   // 0: none
  std::uint32_t https_port = 0;  // 0: none
  std::uint32_t capacity = 0;    // LB= of the DIAG row; 0: not given
  bool abap = false;             // has a DIAG row
  bool java = false;             // has a Java row (P4, P4S, IIOP, J2EE, TELNET)

  bool operator==(const SapInstance&) const = default;
};

// One entry of the ICF URL map (icr_urlprefix), checked by the poller.
struct SapUrlPrefix {
  std::string prefix;       // lowercased, "/.../", RFC 3986 path characters
  std::string logon_group;  // SMLG group name; empty: none
  bool java = false;        // STACK=J2EE

  bool operator==(const SapUrlPrefix&) const = default;
};

struct SapServerList {
  ObjectMeta metadata;              // the SapSystem's namespace and name
  bool has_list = false;            // a good list was received at least once
  std::vector<SapInstance> instances;  // the last good list, by name
  bool has_groups = false;          // group information was received at least once
  std::map<std::string, std::vector<std::string>> logon_groups;  // SMLG group -> instances
  bool has_url_map = false;                // the ICF URL map was received at least once
  std::vector<SapUrlPrefix> url_prefixes;  // the last good URL map, by prefix
  // The Refreshed condition: whether the last poll succeeded and why not.
  bool refreshed = false;
  std::string reason;
  std::string message;

  bool operator==(const SapServerList&) const = default;
};

// ---- EndpointSlice (discovery.k8s.io/v1) ----

struct EndpointConditions {
  std::optional<bool> ready;
  std::optional<bool> serving;
  std::optional<bool> terminating;

  // The API's defaulting rules: unset ready means ready, unset serving means
  // "same as ready", unset terminating means not terminating.
  bool IsReady() const { return ready.value_or(true); }
  bool IsServing() const { return serving.value_or(IsReady()); }
  bool IsTerminating() const { return terminating.value_or(false); }

  bool operator==(const EndpointConditions&) const = default;
};

struct ObjectReference {
  std::string kind;
  std::string namespace_;  // empty: the referring object's namespace
  std::string name;
  std::string uid;

  bool operator==(const ObjectReference&) const = default;
};

struct Endpoint {
  std::vector<std::string> addresses;
  EndpointConditions conditions;
  std::optional<ObjectReference> target_ref;
  std::string node_name;
  std::string zone;

  bool operator==(const Endpoint&) const = default;
};

struct EndpointPort {
  std::string name;  // absent and "" both mean an unnamed port
  std::optional<std::int64_t> port;
  std::string protocol;

  bool operator==(const EndpointPort&) const = default;
};

struct EndpointSlice {
  ObjectMeta metadata;
  std::string address_type;
  std::vector<Endpoint> endpoints;
  std::vector<EndpointPort> ports;  // empty or null in the API: no ports listed

  bool operator==(const EndpointSlice&) const = default;
};

// ---- Pod (v1): only what the compiler reads ----

struct Pod {
  ObjectMeta metadata;

  bool operator==(const Pod&) const = default;
};

// ---- Secret (v1): only a TLS Secret's certificate and key ----

// The values of data["tls.crt"] and data["tls.key"] (base64 in the API,
// decoded here; stringData too, as files may carry it). Other keys are
// dropped on decode. A value that is not base64 is kept as `data_error`
// for the compile to report, so the Secret's UrlMappings say why.
struct Secret {
  ObjectMeta metadata;
  std::string type;
  std::string tls_crt;
  std::string tls_key;
  std::string data_error;

  bool operator==(const Secret&) const = default;
};

// ---- Objects, keys, sets ----

using Object =
    std::variant<LogonGroup, UrlMapping, EndpointSlice, Pod, SapSystem, SapServerList, Secret>;

struct ObjectKey {
  std::string kind;  // LogonGroup | UrlMapping | EndpointSlice | Pod | SapSystem | SapServerList | Secret
  std::string namespace_;
  std::string name;

  auto operator<=>(const ObjectKey&) const = default;
  bool operator==(const ObjectKey&) const = default;
  // "Kind namespace/name", for messages.
  std::string ToString() const;
};

const ObjectMeta& MetadataOf(const Object& object);
std::string_view KindOf(const Object& object);
ObjectKey KeyOf(const Object& object);

struct DecodeResult {
  std::optional<Object> object;  // set on success
  std::string error;             // set on failure: "spec.backend.service.port: ..."
  std::string error_path;        // the field `error` is about ("" for the object)
  // Fields of a LogonGroup/UrlMapping that kwd does not know, as paths
  // ("spec.strategee"); also in the object's field_errors. Not an error
  // for the decoder: files report them as errors, the API server's objects
  // get Accepted=False from the compiler.
  std::vector<std::string> unknown_fields;
  // The kind (or apiVersion) is not one of ours; `error` says which. Callers
  // that read mixed files skip such objects instead of failing.
  bool unsupported_kind = false;

  bool ok() const { return object.has_value(); }
};

// Decodes one object that carries its own `kind` and `apiVersion` (files,
// watch events, custom-resource list items). An apiVersion of the
// dispatch.kwd.io group with a kind (or version) kwd does not serve is an
// error, not an unsupported kind: it is a misspelt LogonGroup/UrlMapping.
DecodeResult DecodeObject(const nlohmann::json& json);
// Decodes an item of a typed list (which carries no kind/apiVersion), e.g.
// an EndpointSliceList item: `kind` is one of the kind constants above.
// spec.className of a LogonGroup, UrlMapping or SapSystem; nullopt for
// other kinds (EndpointSlices and Pods have no class: every controller reads them).
std::optional<std::string_view> ClassNameOf(const Object& object);

DecodeResult DecodeObjectOfKind(std::string_view kind, const nlohmann::json& json);

// The compiler's input: every object by kind, keyed by (namespace, name), so
// iteration order never depends on insertion order.
class ObjectSet {
 public:
  using NamespacedName = std::pair<std::string, std::string>;

  // Inserts or replaces. Returns false when an equal object was already there.
  bool Upsert(Object object);
  // Returns whether an object was removed.
  bool Remove(const ObjectKey& key);
  // A copy of the stored object, if any.
  std::optional<Object> Find(const ObjectKey& key) const;
  std::size_t size() const;

  const std::map<NamespacedName, LogonGroup>& logon_groups() const { return logon_groups_; }
  const std::map<NamespacedName, UrlMapping>& url_mappings() const { return url_mappings_; }
  const std::map<NamespacedName, EndpointSlice>& endpoint_slices() const {
    return endpoint_slices_;
  }
  const std::map<NamespacedName, Pod>& pods() const { return pods_; }
  const std::map<NamespacedName, SapSystem>& sap_systems() const { return sap_systems_; }
  const std::map<NamespacedName, SapServerList>& sap_server_lists() const {
    return sap_server_lists_;
  }
  const std::map<NamespacedName, Secret>& secrets() const { return secrets_; }

  // The wall-clock time (Unix seconds) the compile judges certificates
  // against: an input like the objects, so the compile stays pure. 0: no
  // validity-period check (tests and `compile` pass it explicitly).
  std::int64_t now_unix_seconds() const { return now_unix_seconds_; }
  void set_now_unix_seconds(std::int64_t now) { now_unix_seconds_ = now; }

 private:
  std::map<NamespacedName, LogonGroup> logon_groups_;
  std::map<NamespacedName, UrlMapping> url_mappings_;
  std::map<NamespacedName, EndpointSlice> endpoint_slices_;
  std::map<NamespacedName, Pod> pods_;
  std::map<NamespacedName, SapSystem> sap_systems_;
  std::map<NamespacedName, SapServerList> sap_server_lists_;
  std::map<NamespacedName, Secret> secrets_;
  std::int64_t now_unix_seconds_ = 0;
};

}  // namespace kwd::model
