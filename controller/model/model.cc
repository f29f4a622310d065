#include "controller/model/model.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <utility>

#include "common/crypto.h"

namespace kwd::model {

std::string_view JsonTypeName(const nlohmann::json& value) {
  using nlohmann::json;
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "a list";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number with a fraction";
    default:
      return "an unsupported value";
  }
}

namespace {

using nlohmann::json;

std::string Join(std::string_view path, std::string_view key) {
  if (path.empty()) {
    return std::string(key);
  }
  return std::string(path) + "." + std::string(key);
}

std::string Index(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

// Reads typed fields and keeps the first shape error with its field path.
// A JSON null counts as "absent", as the API server writes nulls for unset
// lists and objects.
class Reader {
 public:
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& error_path() const { return error_path_; }
  std::vector<std::string>& unknown_fields() { return unknown_fields_; }

  void Fail(std::string_view path, std::string_view message) {
    if (error_.empty()) {
      error_ = std::string(path) + ": " + std::string(message);
      error_path_ = std::string(path);
    }
  }

  // Records every key of `object` (at `path`) that is not in `known`.
  void Known(const json* object, std::string_view path,
             std::initializer_list<std::string_view> known) {
    if (object == nullptr || !object->is_object()) {
      return;
    }
    for (const auto& [key, value] : object->items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        unknown_fields_.push_back(Join(path, key));
      }
    }
  }

  void FailType(std::string_view path, std::string_view expected, const json& got) {
    Fail(path, "expected " + std::string(expected) + ", got " + std::string(JsonTypeName(got)));
  }

  // The field's value, or nullptr when it is absent or null. Fails when
  // `parent` is not an object.
  const json* Field(const json& parent, std::string_view key) {
    if (!parent.is_object()) {
      return nullptr;
    }
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) {
      return nullptr;
    }
    return &*it;
  }

  // An object-valued field; nullptr when absent or on a type error.
  const json* ObjectField(const json& parent, std::string_view key, std::string_view path) {
    const json* value = Field(parent, key);
    if (value != nullptr && !value->is_object()) {
      FailType(path, "an object", *value);
      return nullptr;
    }
    return value;
  }

  const json* ListField(const json& parent, std::string_view key, std::string_view path) {
    const json* value = Field(parent, key);
    if (value != nullptr && !value->is_array()) {
      FailType(path, "a list", *value);
      return nullptr;
    }
    return value;
  }

  void String(const json& parent, std::string_view key, std::string_view path, std::string* out) {
    std::optional<std::string> value;
    OptString(parent, key, path, &value);
    if (value) {
      *out = std::move(*value);
    }
  }

  void OptString(const json& parent, std::string_view key, std::string_view path,
                 std::optional<std::string>* out) {
    const json* value = Field(parent, key);
    if (value == nullptr) {
      return;
    }
    if (!value->is_string()) {
      FailType(path, "a string", *value);
      return;
    }
    *out = value->get<std::string>();
  }

  void OptInt(const json& parent, std::string_view key, std::string_view path,
              std::optional<std::int64_t>* out) {
    const json* value = Field(parent, key);
    if (value == nullptr) {
      return;
    }
    if (value->is_number_unsigned()) {
      auto number = value->get<std::uint64_t>();
      if (number > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        Fail(path, "integer out of range");
        return;
      }
      *out = static_cast<std::int64_t>(number);
      return;
    }
    if (value->is_number_integer()) {
      *out = value->get<std::int64_t>();
      return;
    }
    FailType(path, "an integer", *value);
  }

  void Int(const json& parent, std::string_view key, std::string_view path, std::int64_t* out) {
    std::optional<std::int64_t> value;
    OptInt(parent, key, path, &value);
    if (value) {
      *out = *value;
    }
  }

  void OptBool(const json& parent, std::string_view key, std::string_view path,
               std::optional<bool>* out) {
    const json* value = Field(parent, key);
    if (value == nullptr) {
      return;
    }
    if (!value->is_boolean()) {
      FailType(path, "a boolean", *value);
      return;
    }
    *out = value->get<bool>();
  }

  void StringMap(const json& parent, std::string_view key, std::string_view path,
                 std::map<std::string, std::string>* out) {
    const json* value = ObjectField(parent, key, path);
    if (value == nullptr) {
      return;
    }
    for (const auto& [name, entry] : value->items()) {
      if (!entry.is_string()) {
        FailType(Join(path, name), "a string", entry);
        return;
      }
      (*out)[name] = entry.get<std::string>();
    }
  }

  void StringList(const json& parent, std::string_view key, std::string_view path,
                  std::vector<std::string>* out) {
    const json* value = ListField(parent, key, path);
    if (value == nullptr) {
      return;
    }
    for (std::size_t i = 0; i < value->size(); ++i) {
      const json& entry = (*value)[i];
      if (!entry.is_string()) {
        FailType(Index(path, i), "a string", entry);
        return;
      }
      out->push_back(entry.get<std::string>());
    }
  }

  // Each list element must be an object; `read` decodes one.
  template <typename T, typename ReadOne>
  void ObjectList(const json& parent, std::string_view key, std::string_view path,
                  std::vector<T>* out, ReadOne read) {
    const json* value = ListField(parent, key, path);
    if (value == nullptr) {
      return;
    }
    for (std::size_t i = 0; i < value->size() && ok(); ++i) {
      const json& entry = (*value)[i];
      std::string entry_path = Index(path, i);
      if (!entry.is_object()) {
        FailType(entry_path, "an object", entry);
        return;
      }
      T item;
      read(entry, entry_path, &item);
      out->push_back(std::move(item));
    }
  }

 private:
  std::string error_;
  std::string error_path_;
  std::vector<std::string> unknown_fields_;
};

// The fields of ObjectMeta as the API server may send them.
const std::initializer_list<std::string_view> kMetadataFields = {"name",
                                                                 "generateName",
                                                                 "namespace",
                                                                 "selfLink",
                                                                 "uid",
                                                                 "resourceVersion",
                                                                 "generation",
                                                                 "creationTimestamp",
                                                                 "deletionTimestamp",
                                                                 "deletionGracePeriodSeconds",
                                                                 "labels",
                                                                 "annotations",
                                                                 "ownerReferences",
                                                                 "finalizers",
                                                                 "managedFields"};

void ReadMetadata(Reader& r, const json& object, ObjectMeta* meta, bool strict = false) {
  const json* metadata = r.ObjectField(object, "metadata", "metadata");
  if (strict) {
    r.Known(metadata, "metadata", kMetadataFields);
  }
  if (metadata == nullptr) {
    if (r.ok()) {
      r.Fail("metadata", "missing");
    }
    return;
  }
  r.String(*metadata, "name", "metadata.name", &meta->name);
  if (r.ok() && meta->name.empty()) {
    r.Fail("metadata.name", "missing");
  }
  r.String(*metadata, "namespace", "metadata.namespace", &meta->namespace_);
  if (meta->namespace_.empty()) {
    meta->namespace_ = "default";
  }
  r.String(*metadata, "uid", "metadata.uid", &meta->uid);
  r.Int(*metadata, "generation", "metadata.generation", &meta->generation);
  r.String(*metadata, "resourceVersion", "metadata.resourceVersion", &meta->resource_version);
  r.String(*metadata, "creationTimestamp", "metadata.creationTimestamp", &meta->creation_timestamp);
  r.StringMap(*metadata, "labels", "metadata.labels", &meta->labels);
  r.StringMap(*metadata, "annotations", "metadata.annotations", &meta->annotations);
}

void ReadIntOrString(Reader& r, const json& parent, std::string_view key, std::string_view path,
                     std::optional<IntOrString>* out) {
  const json* value = r.Field(parent, key);
  if (value == nullptr) {
    return;
  }
  IntOrString port;
  if (value->is_string()) {
    port.name = value->get<std::string>();
  } else if (value->is_number_integer() || value->is_number_unsigned()) {
    std::optional<std::int64_t> number;
    r.OptInt(parent, key, path, &number);
    port.is_number = true;
    port.number = number.value_or(0);
  } else {
    r.FailType(path, "a port number or name", *value);
    return;
  }
  *out = std::move(port);
}

void ReadLogonGroupSpec(Reader& r, const json& spec, LogonGroupSpec* out) {
  r.Known(&spec, "spec",
          {"kind", "strategy", "defaultCapacity", "loadResetIntervalSeconds", "backend",
           "healthCheck", "sessionAffinity", "upstreamTLS", "className"});
  r.String(spec, "className", "spec.className", &out->class_name);
  r.OptString(spec, "kind", "spec.kind", &out->kind);
  r.OptString(spec, "strategy", "spec.strategy", &out->strategy);
  r.OptInt(spec, "defaultCapacity", "spec.defaultCapacity", &out->default_capacity);
  r.OptInt(spec, "loadResetIntervalSeconds", "spec.loadResetIntervalSeconds",
           &out->load_reset_interval_seconds);

  if (const json* backend = r.ObjectField(spec, "backend", "spec.backend")) {
    Backend b;
    r.Known(backend, "spec.backend", {"service", "staticServers", "sapSystem"});
    if (const json* service = r.ObjectField(*backend, "service", "spec.backend.service")) {
      r.Known(service, "spec.backend.service", {"name", "port"});
      ServiceBackend s;
      r.String(*service, "name", "spec.backend.service.name", &s.name);
      ReadIntOrString(r, *service, "port", "spec.backend.service.port", &s.port);
      b.service = std::move(s);
    }
    if (r.Field(*backend, "staticServers") != nullptr) {
      std::vector<StaticServer> servers;
      r.ObjectList(*backend, "staticServers", "spec.backend.staticServers", &servers,
                   [&r](const json& entry, const std::string& path, StaticServer* server) {
                     r.Known(&entry, path, {"name", "address", "port", "capacity", "drain"});
                     r.String(entry, "name", Join(path, "name"), &server->name);
                     r.String(entry, "address", Join(path, "address"), &server->address);
                     r.OptInt(entry, "port", Join(path, "port"), &server->port);
                     r.OptInt(entry, "capacity", Join(path, "capacity"), &server->capacity);
                     r.OptBool(entry, "drain", Join(path, "drain"), &server->drain);
                   });
      b.static_servers = std::move(servers);
    }
    if (const json* sap = r.ObjectField(*backend, "sapSystem", "spec.backend.sapSystem")) {
      r.Known(sap, "spec.backend.sapSystem", {"name", "logonGroup"});
      SapSystemBackend s;
      r.String(*sap, "name", "spec.backend.sapSystem.name", &s.name);
      r.OptString(*sap, "logonGroup", "spec.backend.sapSystem.logonGroup", &s.logon_group);
      b.sap_system = std::move(s);
    }
    out->backend = std::move(b);
  }

  if (const json* hc = r.ObjectField(spec, "healthCheck", "spec.healthCheck")) {
    auto& h = out->health_check;
    r.Known(
        hc, "spec.healthCheck",
        {"path", "intervalSeconds", "timeoutSeconds", "unhealthyThreshold", "healthyThreshold"});
    r.OptString(*hc, "path", "spec.healthCheck.path", &h.path);
    r.OptInt(*hc, "intervalSeconds", "spec.healthCheck.intervalSeconds", &h.interval_seconds);
    r.OptInt(*hc, "timeoutSeconds", "spec.healthCheck.timeoutSeconds", &h.timeout_seconds);
    r.OptInt(*hc, "unhealthyThreshold", "spec.healthCheck.unhealthyThreshold",
             &h.unhealthy_threshold);
    r.OptInt(*hc, "healthyThreshold", "spec.healthCheck.healthyThreshold", &h.healthy_threshold);
  }

  if (const json* sa = r.ObjectField(spec, "sessionAffinity", "spec.sessionAffinity")) {
    auto& a = out->session_affinity;
    r.Known(sa, "spec.sessionAffinity",
            {"identifiers", "sessionTable", "affinityCookie", "clientIP"});
    if (r.Field(*sa, "identifiers") != nullptr) {
      std::vector<std::string> identifiers;
      r.StringList(*sa, "identifiers", "spec.sessionAffinity.identifiers", &identifiers);
      a.identifiers = std::move(identifiers);
    }
    if (const json* table =
            r.ObjectField(*sa, "sessionTable", "spec.sessionAffinity.sessionTable")) {
      r.Known(table, "spec.sessionAffinity.sessionTable", {"maxEntries", "idleTimeoutSeconds"});
      r.OptInt(*table, "maxEntries", "spec.sessionAffinity.sessionTable.maxEntries",
               &a.session_table.max_entries);
      r.OptInt(*table, "idleTimeoutSeconds", "spec.sessionAffinity.sessionTable.idleTimeoutSeconds",
               &a.session_table.idle_timeout_seconds);
    }
    if (const json* cookie =
            r.ObjectField(*sa, "affinityCookie", "spec.sessionAffinity.affinityCookie")) {
      r.Known(cookie, "spec.sessionAffinity.affinityCookie", {"enabled", "name"});
      r.OptBool(*cookie, "enabled", "spec.sessionAffinity.affinityCookie.enabled",
                &a.affinity_cookie.enabled);
      r.OptString(*cookie, "name", "spec.sessionAffinity.affinityCookie.name",
                  &a.affinity_cookie.name);
    }
    if (const json* client_ip = r.ObjectField(*sa, "clientIP", "spec.sessionAffinity.clientIP")) {
      r.Known(client_ip, "spec.sessionAffinity.clientIP",
              {"mask", "maxEntries", "idleTimeoutSeconds"});
      auto& c = a.client_ip.emplace();
      r.OptString(*client_ip, "mask", "spec.sessionAffinity.clientIP.mask", &c.mask);
      r.OptInt(*client_ip, "maxEntries", "spec.sessionAffinity.clientIP.maxEntries",
               &c.max_entries);
      r.OptInt(*client_ip, "idleTimeoutSeconds", "spec.sessionAffinity.clientIP.idleTimeoutSeconds",
               &c.idle_timeout_seconds);
    }
  }

  if (const json* tls = r.ObjectField(spec, "upstreamTLS", "spec.upstreamTLS")) {
    auto& t = out->upstream_tls;
    r.Known(tls, "spec.upstreamTLS", {"mode", "caBundle", "serverName", "clientCertSecret"});
    r.OptString(*tls, "mode", "spec.upstreamTLS.mode", &t.mode);
    r.OptString(*tls, "caBundle", "spec.upstreamTLS.caBundle", &t.ca_bundle);
    r.OptString(*tls, "serverName", "spec.upstreamTLS.serverName", &t.server_name);
    r.OptString(*tls, "clientCertSecret", "spec.upstreamTLS.clientCertSecret",
                &t.client_cert_secret);
  }
}

void ReadUrlMappingSpec(Reader& r, const json& spec, UrlMappingSpec* out) {
  r.Known(&spec, "spec",
          {"hosts", "defaultRootHandler", "defaultGroups", "passthroughGroup", "rules",
           "permissions", "fromSapSystem", "fromSapSystemRefines", "modifications",
           "sapHeaders", "system", "className",
           // Redirect to https and HSTS (issue 24 item 3).
           "secureAction", "hsts",
           // Certificates per host from Secrets (issue 27 item 3).
           "tls"});
  r.String(spec, "className", "spec.className", &out->class_name);
  r.StringList(spec, "hosts", "spec.hosts", &out->hosts);
  r.OptString(spec, "defaultRootHandler", "spec.defaultRootHandler", &out->default_root_handler);
  if (const json* groups = r.ObjectField(spec, "defaultGroups", "spec.defaultGroups")) {
    r.Known(groups, "spec.defaultGroups", {"abap", "java"});
    r.OptString(*groups, "abap", "spec.defaultGroups.abap", &out->default_groups.abap);
    r.OptString(*groups, "java", "spec.defaultGroups.java", &out->default_groups.java);
  }
  r.OptString(spec, "passthroughGroup", "spec.passthroughGroup", &out->passthrough_group);
  r.OptString(spec, "fromSapSystem", "spec.fromSapSystem", &out->from_sap_system);
  if (const json* sap = r.ObjectField(spec, "sapHeaders", "spec.sapHeaders")) {
    r.Known(sap, "spec.sapHeaders", {"clientProtocol", "accessPoints"});
    r.OptBool(*sap, "clientProtocol", "spec.sapHeaders.clientProtocol",
              &out->sap_headers.client_protocol);
    r.OptBool(*sap, "accessPoints", "spec.sapHeaders.accessPoints",
              &out->sap_headers.access_points);
  }
  r.OptBool(spec, "fromSapSystemRefines", "spec.fromSapSystemRefines",
            &out->from_sap_system_refines);
  r.OptString(spec, "secureAction", "spec.secureAction", &out->secure_action);
  if (const json* hsts = r.ObjectField(spec, "hsts", "spec.hsts")) {
    r.Known(hsts, "spec.hsts", {"maxAgeSeconds", "includeSubDomains", "preload"});
    auto& h = out->hsts.emplace();
    r.OptInt(*hsts, "maxAgeSeconds", "spec.hsts.maxAgeSeconds", &h.max_age_seconds);
    r.OptBool(*hsts, "includeSubDomains", "spec.hsts.includeSubDomains", &h.include_subdomains);
    r.OptBool(*hsts, "preload", "spec.hsts.preload", &h.preload);
  }
  if (const json* system = r.ObjectField(spec, "system", "spec.system")) {
    r.Known(system, "spec.system", {"sid"});
    r.OptString(*system, "sid", "spec.system.sid", &out->system_sid);
  }
  r.ObjectList(spec, "rules", "spec.rules", &out->rules,
               [&r](const json& entry, const std::string& path, UrlRule* rule) {
                 r.Known(&entry, path, {"prefix", "kind", "logonGroup"});
                 r.String(entry, "prefix", Join(path, "prefix"), &rule->prefix);
                 r.OptString(entry, "kind", Join(path, "kind"), &rule->kind);
                 r.OptString(entry, "logonGroup", Join(path, "logonGroup"), &rule->logon_group);
               });
  r.ObjectList(spec, "tls", "spec.tls", &out->tls,
               [&r](const json& entry, const std::string& path, UrlMappingTls* tls) {
                 r.Known(&entry, path, {"hosts", "secretName"});
                 r.StringList(entry, "hosts", Join(path, "hosts"), &tls->hosts);
                 r.String(entry, "secretName", Join(path, "secretName"), &tls->secret_name);
               });
  r.ObjectList(spec, "permissions", "spec.permissions", &out->permissions,
               [&r](const json& entry, const std::string& path, PermissionEntry* permission) {
                 r.Known(&entry, path, {"action", "pattern"});
                 r.String(entry, "action", Join(path, "action"), &permission->action);
                 r.String(entry, "pattern", Join(path, "pattern"), &permission->pattern);
               });
  r.ObjectList(
      spec, "modifications", "spec.modifications", &out->modifications,
      [&r](const json& entry, const std::string& path, Modification* modification) {
        r.Known(&entry, path, {"prefix", "rules", "actions"});
        r.OptString(entry, "prefix", Join(path, "prefix"), &modification->prefix);
        r.OptString(entry, "rules", Join(path, "rules"), &modification->rules);
        if (r.Field(entry, "actions") != nullptr) {
          auto& actions = modification->actions.emplace();
          r.ObjectList(
              entry, "actions", Join(path, "actions"), &actions,
              [&r](const json& item, const std::string& item_path, ModificationAction* action) {
                r.Known(&item, item_path,
                        {"op", "header", "pattern", "value", "replacement", "options"});
                r.String(item, "op", Join(item_path, "op"), &action->op);
                r.OptString(item, "header", Join(item_path, "header"), &action->header);
                r.OptString(item, "pattern", Join(item_path, "pattern"), &action->pattern);
                r.OptString(item, "value", Join(item_path, "value"), &action->value);
                r.OptString(item, "replacement", Join(item_path, "replacement"),
                            &action->replacement);
                r.StringList(item, "options", Join(item_path, "options"), &action->options);
              });
        }
      });
}

void ReadSapSystemSpec(Reader& r, const json& spec, SapSystemSpec* out) {
  r.Known(&spec, "spec",
          {"sid", "messageServer", "serverListPath", "refreshIntervalSeconds", "logonGroups",
           "groupInfoPath", "urlMap", "urlMapPath", "allowedNetworks", "className"});
  r.String(spec, "className", "spec.className", &out->class_name);
  r.OptString(spec, "sid", "spec.sid", &out->sid);
  if (const json* ms = r.ObjectField(spec, "messageServer", "spec.messageServer")) {
    r.Known(ms, "spec.messageServer", {"host", "httpPort", "httpsPort", "caBundle"});
    auto& m = out->message_server;
    r.String(*ms, "host", "spec.messageServer.host", &m.host);
    r.OptInt(*ms, "httpPort", "spec.messageServer.httpPort", &m.http_port);
    r.OptInt(*ms, "httpsPort", "spec.messageServer.httpsPort", &m.https_port);
    r.OptString(*ms, "caBundle", "spec.messageServer.caBundle", &m.ca_bundle);
  }
  r.OptString(spec, "serverListPath", "spec.serverListPath", &out->server_list_path);
  r.OptInt(spec, "refreshIntervalSeconds", "spec.refreshIntervalSeconds",
           &out->refresh_interval_seconds);
  r.OptBool(spec, "logonGroups", "spec.logonGroups", &out->logon_groups);
  r.OptBool(spec, "urlMap", "spec.urlMap", &out->url_map);
  r.OptString(spec, "groupInfoPath", "spec.groupInfoPath", &out->group_info_path);
  r.OptString(spec, "urlMapPath", "spec.urlMapPath", &out->url_map_path);
  r.StringList(spec, "allowedNetworks", "spec.allowedNetworks", &out->allowed_networks);
}

void ReadEndpointSlice(Reader& r, const json& object, EndpointSlice* out) {
  r.String(object, "addressType", "addressType", &out->address_type);
  r.ObjectList(
      object, "endpoints", "endpoints", &out->endpoints,
      [&r](const json& entry, const std::string& path, Endpoint* endpoint) {
        r.StringList(entry, "addresses", Join(path, "addresses"), &endpoint->addresses);
        std::string conditions_path = Join(path, "conditions");
        if (const json* c = r.ObjectField(entry, "conditions", conditions_path)) {
          r.OptBool(*c, "ready", Join(conditions_path, "ready"), &endpoint->conditions.ready);
          r.OptBool(*c, "serving", Join(conditions_path, "serving"), &endpoint->conditions.serving);
          r.OptBool(*c, "terminating", Join(conditions_path, "terminating"),
                    &endpoint->conditions.terminating);
        }
        std::string ref_path = Join(path, "targetRef");
        if (const json* ref = r.ObjectField(entry, "targetRef", ref_path)) {
          ObjectReference target;
          r.String(*ref, "kind", Join(ref_path, "kind"), &target.kind);
          r.String(*ref, "namespace", Join(ref_path, "namespace"), &target.namespace_);
          r.String(*ref, "name", Join(ref_path, "name"), &target.name);
          r.String(*ref, "uid", Join(ref_path, "uid"), &target.uid);
          endpoint->target_ref = std::move(target);
        }
        r.String(entry, "nodeName", Join(path, "nodeName"), &endpoint->node_name);
        r.String(entry, "zone", Join(path, "zone"), &endpoint->zone);
      });
  r.ObjectList(object, "ports", "ports", &out->ports,
               [&r](const json& entry, const std::string& path, EndpointPort* port) {
                 r.String(entry, "name", Join(path, "name"), &port->name);
                 r.OptInt(entry, "port", Join(path, "port"), &port->port);
                 r.String(entry, "protocol", Join(path, "protocol"), &port->protocol);
               });
}

// Secret data values are base64; stringData (what files may carry; the API
// never returns it) is plain text and wins, as the API server merges it.
void ReadSecret(Reader& r, const json& value, Secret* out) {
  r.String(value, "type", "type", &out->type);
  auto take = [&](std::string_view key, std::string* field) {
    if (const json* data = r.ObjectField(value, "data", "data")) {
      std::optional<std::string> encoded;
      r.OptString(*data, key, Join("data", key), &encoded);
      if (encoded) {
        field->assign(encoded->size(), '\0');
        const int n = Base64Decode(*encoded, field->data(), field->size());
        if (n < 0) {
          field->clear();
          if (out->data_error.empty()) {
            out->data_error = "data." + std::string(key) + " is not base64";
          }
        } else {
          field->resize(static_cast<std::size_t>(n));
        }
      }
    }
    if (const json* data = r.ObjectField(value, "stringData", "stringData")) {
      std::optional<std::string> plain;
      r.OptString(*data, key, Join("stringData", key), &plain);
      if (plain) {
        *field = std::move(*plain);
      }
    }
  };
  take("tls.crt", &out->tls_crt);
  take("tls.key", &out->tls_key);
}

DecodeResult Finish(Reader& r, Object object) {
  DecodeResult result;
  if (r.ok()) {
    result.object = std::move(object);
  } else {
    result.error = r.error();
    result.error_path = r.error_path();
  }
  return result;
}

// A LogonGroup/UrlMapping also keeps its unknown fields (see DecodeResult).
template <typename T>
DecodeResult FinishCustom(Reader& r, T object) {
  for (const std::string& path : r.unknown_fields()) {
    object.field_errors.push_back(path + ": unknown field");
  }
  DecodeResult result = Finish(r, std::move(object));
  result.unknown_fields = std::move(r.unknown_fields());
  return result;
}

const std::initializer_list<std::string_view> kCustomResourceFields = {
    "apiVersion", "kind", "metadata", "spec", "status"};

DecodeResult DecodeKnownKind(std::string_view kind, const json& value) {
  Reader r;
  if (!value.is_object()) {
    r.FailType("(object)", "an object", value);
    DecodeResult result;
    result.error = r.error();
    return result;
  }
  if (kind == kLogonGroupKind) {
    LogonGroup group;
    r.Known(&value, "", kCustomResourceFields);
    ReadMetadata(r, value, &group.metadata, /*strict=*/true);
    if (const json* spec = r.ObjectField(value, "spec", "spec")) {
      ReadLogonGroupSpec(r, *spec, &group.spec);
    }
    return FinishCustom(r, std::move(group));
  }
  if (kind == kUrlMappingKind) {
    UrlMapping mapping;
    r.Known(&value, "", kCustomResourceFields);
    ReadMetadata(r, value, &mapping.metadata, /*strict=*/true);
    if (const json* spec = r.ObjectField(value, "spec", "spec")) {
      ReadUrlMappingSpec(r, *spec, &mapping.spec);
    }
    return FinishCustom(r, std::move(mapping));
  }
  if (kind == kSapSystemKind) {
    SapSystem system;
    r.Known(&value, "", kCustomResourceFields);
    ReadMetadata(r, value, &system.metadata, /*strict=*/true);
    if (const json* spec = r.ObjectField(value, "spec", "spec")) {
      ReadSapSystemSpec(r, *spec, &system.spec);
    }
    return FinishCustom(r, std::move(system));
  }
  if (kind == kEndpointSliceKind) {
    EndpointSlice slice;
    ReadMetadata(r, value, &slice.metadata);
    ReadEndpointSlice(r, value, &slice);
    return Finish(r, std::move(slice));
  }
  if (kind == kPodKind) {
    Pod pod;
    ReadMetadata(r, value, &pod.metadata);
    return Finish(r, std::move(pod));
  }
  if (kind == kSecretKind) {
    Secret secret;
    ReadMetadata(r, value, &secret.metadata);
    ReadSecret(r, value, &secret);
    return Finish(r, std::move(secret));
  }
  DecodeResult result;
  result.unsupported_kind = true;
  result.error = "unsupported kind " + std::string(kind);
  return result;
}

std::string_view ApiVersionOf(std::string_view kind) {
  if (kind == kLogonGroupKind || kind == kUrlMappingKind || kind == kSapSystemKind) {
    return kDispatchApiVersion;
  }
  if (kind == kEndpointSliceKind) {
    return kDiscoveryApiVersion;
  }
  if (kind == kPodKind || kind == kSecretKind) {
    return kCoreApiVersion;
  }
  return {};
}

}  // namespace

std::string ObjectKey::ToString() const {
  return kind + " " + namespace_ + "/" + name;
}

const ObjectMeta& MetadataOf(const Object& object) {
  return std::visit([](const auto& o) -> const ObjectMeta& { return o.metadata; }, object);
}

std::string_view KindOf(const Object& object) {
  switch (object.index()) {
    case 0:
      return kLogonGroupKind;
    case 1:
      return kUrlMappingKind;
    case 2:
      return kEndpointSliceKind;
    case 3:
      return kPodKind;
    case 4:
      return kSapSystemKind;
    case 5:
      return kSapServerListKind;
    default:
      return kSecretKind;
  }
}

ObjectKey KeyOf(const Object& object) {
  const ObjectMeta& meta = MetadataOf(object);
  return ObjectKey{std::string(KindOf(object)), meta.namespace_, meta.name};
}

DecodeResult DecodeObject(const nlohmann::json& json) {
  DecodeResult result;
  if (!json.is_object()) {
    result.error = "expected an object, got " + std::string(JsonTypeName(json));
    return result;
  }
  auto kind_it = json.find("kind");
  auto api_it = json.find("apiVersion");
  if (kind_it == json.end() || !kind_it->is_string()) {
    result.error = "kind: missing or not a string";
    result.error_path = "kind";
    return result;
  }
  if (api_it == json.end() || !api_it->is_string()) {
    result.error = "apiVersion: missing or not a string";
    result.error_path = "apiVersion";
    return result;
  }
  std::string kind = kind_it->get<std::string>();
  std::string api_version = api_it->get<std::string>();
  std::string_view expected = ApiVersionOf(kind);
  constexpr std::string_view kDispatchGroup = "dispatch.kwd.io/";
  if (api_version.starts_with(kDispatchGroup) && expected != api_version) {
    // Ours, misspelt: never skipped silently.
    if (expected.empty() || expected != kDispatchApiVersion) {
      result.error =
          "kind: \"" + kind + "\" is not a kind of " + api_version + " (LogonGroup, UrlMapping, SapSystem)";
      result.error_path = "kind";
    } else {
      result.error = "apiVersion: \"" + api_version + "\" is not served; use " +
                     std::string(kDispatchApiVersion);
      result.error_path = "apiVersion";
    }
    return result;
  }
  if (expected.empty() || expected != api_version) {
    result.unsupported_kind = true;
    result.error = "unsupported kind " + api_version + "/" + kind;
    return result;
  }
  return DecodeKnownKind(kind, json);
}

DecodeResult DecodeObjectOfKind(std::string_view kind, const nlohmann::json& json) {
  return DecodeKnownKind(kind, json);
}

bool ObjectSet::Upsert(Object object) {
  const ObjectMeta& meta = MetadataOf(object);
  NamespacedName key{meta.namespace_, meta.name};
  return std::visit(
      [this, &key](auto&& typed) -> bool {
        using T = std::decay_t<decltype(typed)>;
        std::map<NamespacedName, T>* map = nullptr;
        if constexpr (std::is_same_v<T, LogonGroup>) {
          map = &logon_groups_;
        } else if constexpr (std::is_same_v<T, UrlMapping>) {
          map = &url_mappings_;
        } else if constexpr (std::is_same_v<T, EndpointSlice>) {
          map = &endpoint_slices_;
        } else if constexpr (std::is_same_v<T, Pod>) {
          map = &pods_;
        } else if constexpr (std::is_same_v<T, SapSystem>) {
          map = &sap_systems_;
        } else if constexpr (std::is_same_v<T, Secret>) {
          map = &secrets_;
        } else {
          map = &sap_server_lists_;
        }
        auto it = map->find(key);
        if (it != map->end() && it->second == typed) {
          return false;
        }
        (*map)[key] = std::move(typed);
        return true;
      },
      std::move(object));
}

bool ObjectSet::Remove(const ObjectKey& key) {
  NamespacedName name{key.namespace_, key.name};
  if (key.kind == kLogonGroupKind) {
    return logon_groups_.erase(name) > 0;
  }
  if (key.kind == kUrlMappingKind) {
    return url_mappings_.erase(name) > 0;
  }
  if (key.kind == kEndpointSliceKind) {
    return endpoint_slices_.erase(name) > 0;
  }
  if (key.kind == kPodKind) {
    return pods_.erase(name) > 0;
  }
  if (key.kind == kSapSystemKind) {
    return sap_systems_.erase(name) > 0;
  }
  if (key.kind == kSapServerListKind) {
    return sap_server_lists_.erase(name) > 0;
  }
  if (key.kind == kSecretKind) {
    return secrets_.erase(name) > 0;
  }
  return false;
}

std::optional<Object> ObjectSet::Find(const ObjectKey& key) const {
  NamespacedName name{key.namespace_, key.name};
  auto lookup = [&](const auto& map) -> std::optional<Object> {
    auto it = map.find(name);
    if (it == map.end()) {
      return std::nullopt;
    }
    return Object(it->second);
  };
  if (key.kind == kLogonGroupKind) {
    return lookup(logon_groups_);
  }
  if (key.kind == kUrlMappingKind) {
    return lookup(url_mappings_);
  }
  if (key.kind == kEndpointSliceKind) {
    return lookup(endpoint_slices_);
  }
  if (key.kind == kPodKind) {
    return lookup(pods_);
  }
  if (key.kind == kSapSystemKind) {
    return lookup(sap_systems_);
  }
  if (key.kind == kSapServerListKind) {
    return lookup(sap_server_lists_);
  }
  if (key.kind == kSecretKind) {
    return lookup(secrets_);
  }
  return std::nullopt;
}

std::size_t ObjectSet::size() const {
  return logon_groups_.size() + url_mappings_.size() + endpoint_slices_.size() + pods_.size() +
         sap_systems_.size() + sap_server_lists_.size() + secrets_.size();
}

std::optional<std::string_view> ClassNameOf(const Object& object) {
  if (const auto* lg = std::get_if<LogonGroup>(&object)) {
    return lg->spec.class_name;
  }
  if (const auto* um = std::get_if<UrlMapping>(&object)) {
    return um->spec.class_name;
  }
  if (const auto* sap = std::get_if<SapSystem>(&object)) {
    return sap->spec.class_name;
  }
  return std::nullopt;
}

}  // namespace kwd::model
