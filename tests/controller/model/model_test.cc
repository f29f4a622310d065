#include "controller/model/model.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kwd::model {
namespace {

using nlohmann::json;

TEST(DecodeObjectTest, LogonGroupFromTheInterfaceExample) {
  json in = R"({
    "apiVersion": "dispatch.kwd.io/v1alpha1", "kind": "LogonGroup",
    "metadata": {"name": "public", "namespace": "erp", "uid": "u1", "generation": 3,
                 "resourceVersion": "48214", "creationTimestamp": "2026-11-30T10:00:00Z",
                 "labels": {"app": "erp"}},
    "spec": {"kind": "abap", "strategy": "weighted_round_robin", "defaultCapacity": 1,
             "loadResetIntervalSeconds": 25,
             "backend": {"service": {"name": "erp-abap", "port": 8000},
                         "staticServers": [{"name": "erp1_ERP_00", "address": "10.0.0.5",
                                            "port": 8000, "capacity": 6}]},
             "healthCheck": {"path": "/sap/public/icman/ping", "intervalSeconds": 25,
                             "timeoutSeconds": 5, "unhealthyThreshold": 2,
                             "healthyThreshold": 1},
             "sessionAffinity": {"identifiers": ["sap-contextid", "saplb"],
                                 "sessionTable": {"maxEntries": 50000,
                                                  "idleTimeoutSeconds": 3600},
                                 "affinityCookie": {"enabled": true, "name": "kwd_affinity"}},
             "upstreamTLS": {"mode": "none"}}})"_json;
  DecodeResult result = DecodeObject(in);
  ASSERT_TRUE(result.ok()) << result.error;
  const auto& lg = std::get<LogonGroup>(*result.object);
  EXPECT_EQ(lg.metadata.name, "public");
  EXPECT_EQ(lg.metadata.namespace_, "erp");
  EXPECT_EQ(lg.metadata.generation, 3);
  EXPECT_EQ(lg.metadata.resource_version, "48214");
  EXPECT_EQ(lg.metadata.creation_timestamp, "2026-11-30T10:00:00Z");
  EXPECT_EQ(lg.metadata.labels.at("app"), "erp");
  EXPECT_EQ(lg.spec.kind, "abap");
  ASSERT_TRUE(lg.spec.backend.has_value());
  ASSERT_TRUE(lg.spec.backend->service.has_value());
  EXPECT_TRUE(lg.spec.backend->service->port->is_number);
  EXPECT_EQ(lg.spec.backend->service->port->number, 8000);
  ASSERT_EQ(lg.spec.backend->static_servers->size(), 1u);
  EXPECT_EQ((*lg.spec.backend->static_servers)[0].capacity, 6);
  EXPECT_EQ(lg.spec.health_check.timeout_seconds, 5);
  EXPECT_EQ(lg.spec.session_affinity.identifiers->size(), 2u);
  EXPECT_EQ(lg.spec.session_affinity.affinity_cookie.enabled, true);
  EXPECT_EQ(lg.spec.upstream_tls.mode, "none");
  EXPECT_EQ(KeyOf(*result.object), (ObjectKey{"LogonGroup", "erp", "public"}));
}

TEST(DecodeObjectTest, KeepsInvalidValuesForTheCompiler) {
  json in = R"({"apiVersion": "dispatch.kwd.io/v1alpha1", "kind": "LogonGroup",
    "metadata": {"name": "x"},
    "spec": {"strategy": "fastest", "kind": "cobol", "defaultCapacity": -4,
             "backend": {"service": {"name": "svc", "port": "http"}}}})"_json;
  DecodeResult result = DecodeObject(in);
  ASSERT_TRUE(result.ok()) << result.error;
  const auto& lg = std::get<LogonGroup>(*result.object);
  EXPECT_EQ(lg.metadata.namespace_, "default");
  EXPECT_EQ(lg.spec.strategy, "fastest");
  EXPECT_EQ(lg.spec.kind, "cobol");
  EXPECT_EQ(lg.spec.default_capacity, -4);
  EXPECT_FALSE(lg.spec.backend->service->port->is_number);
  EXPECT_EQ(lg.spec.backend->service->port->name, "http");
}

TEST(DecodeObjectTest, UrlMappingSapHeadersUnsetOrSwitched) {
  json in = R"({"apiVersion": "dispatch.kwd.io/v1alpha1", "kind": "UrlMapping",
    "metadata": {"name": "erp"}, "spec": {"sapHeaders": {"clientProtocol": false}}})"_json;
  DecodeResult result = DecodeObject(in);
  ASSERT_TRUE(result.ok()) << result.error;
  const auto& um = std::get<UrlMapping>(*result.object);
  EXPECT_EQ(um.spec.sap_headers.client_protocol, std::optional<bool>(false));
  EXPECT_EQ(um.spec.sap_headers.access_points, std::nullopt);  // by the group's kind
  in["spec"]["sapHeaders"] = json::object({{"accessPoints", true}});
  result = DecodeObject(in);
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_EQ(std::get<UrlMapping>(*result.object).spec.sap_headers.access_points,
            std::optional<bool>(true));
  in["spec"].erase("sapHeaders");
  result = DecodeObject(in);
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_EQ(std::get<UrlMapping>(*result.object).spec.sap_headers, SapHeadersSpec{});
}

TEST(DecodeObjectTest, UrlMappingSecureActionAndHsts) {
  json in = R"({"apiVersion": "dispatch.kwd.io/v1alpha1", "kind": "UrlMapping",
    "metadata": {"name": "erp"}, "spec": {"secureAction": "redirect",
    "hsts": {"maxAgeSeconds": 600, "includeSubDomains": true}}})"_json;
  DecodeResult result = DecodeObject(in);
  ASSERT_TRUE(result.ok()) << result.error;
  const auto& um = std::get<UrlMapping>(*result.object);
  EXPECT_EQ(um.spec.secure_action, std::optional<std::string>("redirect"));
  ASSERT_TRUE(um.spec.hsts.has_value());
  EXPECT_EQ(um.spec.hsts->max_age_seconds, std::optional<std::int64_t>(600));
  EXPECT_EQ(um.spec.hsts->include_subdomains, std::optional<bool>(true));
  EXPECT_EQ(um.spec.hsts->preload, std::nullopt);
  EXPECT_TRUE(um.field_errors.empty());
  in["spec"].erase("hsts");
  in["spec"].erase("secureAction");
  result = DecodeObject(in);
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_FALSE(std::get<UrlMapping>(*result.object).spec.hsts.has_value());
  EXPECT_FALSE(std::get<UrlMapping>(*result.object).spec.secure_action.has_value());
}

struct ShapeErrorCase {
  std::string name;
  std::string json_text;
  std::string want_error;
};

class ShapeErrorTest : public testing::TestWithParam<ShapeErrorCase> {};

TEST_P(ShapeErrorTest, NamesTheFieldPath) {
  DecodeResult result = DecodeObject(json::parse(GetParam().json_text));
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(result.unsupported_kind);
  EXPECT_EQ(result.error, GetParam().want_error);
}

INSTANTIATE_TEST_SUITE_P(
    All, ShapeErrorTest,
    testing::Values(
        ShapeErrorCase{"StaticServerPortString",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"LogonGroup",
                           "metadata":{"name":"a"},"spec":{"backend":{"staticServers":[
                           {"name":"s","address":"h","port":1},
                           {"name":"t","address":"h","port":"80"}]}}})",
                       "spec.backend.staticServers[1].port: expected an integer, got a string"},
        ShapeErrorCase{"StaticServerDrainString",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"LogonGroup",
                           "metadata":{"name":"a"},"spec":{"backend":{"staticServers":[
                           {"name":"s","address":"h","port":1,"drain":"yes"}]}}})",
                       "spec.backend.staticServers[0].drain: expected a boolean, got a string"},
        ShapeErrorCase{"FromSapSystemNumber",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"UrlMapping",
                           "metadata":{"name":"a"},"spec":{"fromSapSystem":3}})",
                       "spec.fromSapSystem: expected a string, got an integer"},
        ShapeErrorCase{"SapHeadersSwitchString",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"UrlMapping",
                           "metadata":{"name":"a"},"spec":{"sapHeaders":{"accessPoints":"no"}}})",
                       "spec.sapHeaders.accessPoints: expected a boolean, got a string"},
        ShapeErrorCase{"HstsMaxAgeString",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"UrlMapping",
                           "metadata":{"name":"a"},"spec":{"hsts":{"maxAgeSeconds":"1y"}}})",
                       "spec.hsts.maxAgeSeconds: expected an integer, got a string"},
        ShapeErrorCase{"SecureActionBoolean",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"UrlMapping",
                           "metadata":{"name":"a"},"spec":{"secureAction":true}})",
                       "spec.secureAction: expected a string, got a boolean"},
        ShapeErrorCase{"SapSystemUrlMapString",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"SapSystem",
                           "metadata":{"name":"a"},"spec":{"messageServer":{"host":"h"},
                           "urlMap":"yes"}})",
                       "spec.urlMap: expected a boolean, got a string"},
        ShapeErrorCase{"StrategyNumber",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"LogonGroup",
                           "metadata":{"name":"a"},"spec":{"strategy":3}})",
                       "spec.strategy: expected a string, got an integer"},
        ShapeErrorCase{"RulesNotAList",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"UrlMapping",
                           "metadata":{"name":"a"},"spec":{"rules":{"prefix":"/sap/"}}})",
                       "spec.rules: expected a list, got an object"},
        ShapeErrorCase{"MissingName",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"UrlMapping",
                           "metadata":{"namespace":"a"}})",
                       "metadata.name: missing"},
        ShapeErrorCase{"ReadyNotBool",
                       R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
                           "metadata":{"name":"a"},"endpoints":[{"addresses":["1.2.3.4"],
                           "conditions":{"ready":"yes"}}]})",
                       "endpoints[0].conditions.ready: expected a boolean, got a string"},
        ShapeErrorCase{"AnnotationNotString",
                       R"({"apiVersion":"v1","kind":"Pod",
                           "metadata":{"name":"a","annotations":{"dispatch.kwd.io/capacity":6}}})",
                       "metadata.annotations.dispatch.kwd.io/capacity: expected a string, got "
                       "an integer"},
        ShapeErrorCase{"FractionalCapacity",
                       R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"LogonGroup",
                           "metadata":{"name":"a"},"spec":{"defaultCapacity":1.5}})",
                       "spec.defaultCapacity: expected an integer, got a number with a "
                       "fraction"}),
    [](const auto& info) { return info.param.name; });

TEST(DecodeObjectTest, EndpointSliceDefaultsAndPortShapes) {
  json in = R"({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
    "metadata": {"name": "s", "namespace": "erp",
                 "labels": {"kubernetes.io/service-name": "svc"}},
    "addressType": "IPv4",
    "endpoints": [
      {"addresses": ["10.0.0.1"]},
      {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
      {"addresses": ["10.0.0.3"], "conditions": {"ready": false, "serving": true,
                                                 "terminating": true},
       "targetRef": {"kind": "Pod", "name": "p3"}}],
    "ports": [{"port": 8000}, {"name": "", "port": 8001}, {"name": "http", "port": 8002}]})"_json;
  DecodeResult result = DecodeObject(in);
  ASSERT_TRUE(result.ok()) << result.error;
  const auto& slice = std::get<EndpointSlice>(*result.object);
  ASSERT_EQ(slice.endpoints.size(), 3u);
  EXPECT_TRUE(slice.endpoints[0].conditions.IsReady());
  EXPECT_TRUE(slice.endpoints[0].conditions.IsServing());
  EXPECT_FALSE(slice.endpoints[0].conditions.IsTerminating());
  EXPECT_FALSE(slice.endpoints[1].conditions.IsReady());
  EXPECT_FALSE(slice.endpoints[1].conditions.IsServing());  // serving unset follows ready
  EXPECT_TRUE(slice.endpoints[2].conditions.IsServing());
  EXPECT_TRUE(slice.endpoints[2].conditions.IsTerminating());
  EXPECT_EQ(slice.endpoints[2].target_ref->name, "p3");
  ASSERT_EQ(slice.ports.size(), 3u);
  EXPECT_EQ(slice.ports[0].name, "");
  EXPECT_EQ(slice.ports[1].name, "");
  EXPECT_EQ(slice.ports[2].name, "http");
  EXPECT_EQ(slice.ports[2].port, 8002);

  for (const char* ports : {R"(null)", R"([])"}) {
    json copy = in;
    copy["ports"] = json::parse(ports);
    DecodeResult r = DecodeObject(copy);
    ASSERT_TRUE(r.ok()) << ports << ": " << r.error;
    EXPECT_TRUE(std::get<EndpointSlice>(*r.object).ports.empty()) << ports;
  }
}

TEST(DecodeObjectTest, UnsupportedKindsAreFlagged) {
  for (const char* text :
       {R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}})",
        R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}})",
        R"({"apiVersion":"other.io/v1","kind":"LogonGroup","metadata":{"name":"a"}})"}) {
    DecodeResult result = DecodeObject(json::parse(text));
    EXPECT_FALSE(result.ok()) << text;
    EXPECT_TRUE(result.unsupported_kind) << text;
  }
  DecodeResult no_kind = DecodeObject(json::parse(R"({"metadata":{"name":"a"}})"));
  EXPECT_FALSE(no_kind.ok());
  EXPECT_FALSE(no_kind.unsupported_kind);
}

// Issue 10 item 16: unknown fields of our kinds are reported with their
// paths (and kept on the object for the compiler); a misspelt kind or
// version of dispatch.kwd.io is an error, not an object to skip.
TEST(DecodeObjectTest, StrictAboutOurKinds) {
  DecodeResult group = DecodeObject(json::parse(R"({
    "apiVersion": "dispatch.kwd.io/v1alpha1", "kind": "LogonGroup",
    "metadata": {"name": "g", "managedFields": [], "finalizers": [], "lables": {}},
    "spec": {"strategee": "adaptive", "healthCheck": {"intervall": 5},
             "backend": {"staticServers": [{"name": "s", "address": "a", "port": 1, "weight": 2}]},
             "upstreamTLS": {"mode": "none", "caSecret": "x"}},
    "status": {"observedGeneration": 1}, "extra": 1})"));
  ASSERT_TRUE(group.ok()) << group.error;
  std::vector<std::string> want = {"extra",
                                   "metadata.lables",
                                   "spec.strategee",
                                   "spec.backend.staticServers[0].weight",
                                   "spec.healthCheck.intervall",
                                   "spec.upstreamTLS.caSecret"};
  std::vector<std::string> got = group.unknown_fields;
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(std::get<LogonGroup>(*group.object).field_errors.size(), want.size());

  DecodeResult mapping = DecodeObject(json::parse(R"({
    "apiVersion": "dispatch.kwd.io/v1alpha1", "kind": "UrlMapping", "metadata": {"name": "m"},
    "spec": {"rules": [{"prefix": "/a/", "group": "x"}], "permissions": [{"action": "deny",
             "pattern": "/x", "note": ""}], "defaultGroups": {"j2ee": "x"}}})"));
  ASSERT_TRUE(mapping.ok()) << mapping.error;
  EXPECT_EQ(mapping.unknown_fields,
            (std::vector<std::string>{"spec.defaultGroups.j2ee", "spec.rules[0].group",
                                      "spec.permissions[0].note"}));

  // Other kinds carry what the API server adds; they are not checked.
  DecodeResult slice = DecodeObject(json::parse(R"({"apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice", "metadata": {"name": "s"}, "addressType": "IPv4",
    "endpoints": [{"addresses": ["10.0.0.1"], "hints": {}}]})"));
  ASSERT_TRUE(slice.ok());
  EXPECT_TRUE(slice.unknown_fields.empty());

  for (const char* text :
       {R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"LogonGrup","metadata":{"name":"a"}})",
        R"({"apiVersion":"dispatch.kwd.io/v1","kind":"LogonGroup","metadata":{"name":"a"}})",
        R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"Pod","metadata":{"name":"a"}})"}) {
    DecodeResult result = DecodeObject(json::parse(text));
    EXPECT_FALSE(result.ok()) << text;
    EXPECT_FALSE(result.unsupported_kind) << text;
    EXPECT_FALSE(result.error_path.empty()) << text;
  }
}

TEST(DecodeObjectTest, TypedListItemsWithoutKind) {
  json item = R"({"metadata": {"name": "erp-abap-0", "namespace": "erp",
                  "annotations": {"dispatch.kwd.io/capacity": "6"}}})"_json;
  DecodeResult result = DecodeObjectOfKind(kPodKind, item);
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_EQ(std::get<Pod>(*result.object).metadata.annotations.at("dispatch.kwd.io/capacity"), "6");
  EXPECT_TRUE(DecodeObjectOfKind("Service", item).unsupported_kind);
}

TEST(ObjectSetTest, UpsertReportsChangesAndRemoveDeletes) {
  auto decode = [](const char* text) { return *DecodeObject(json::parse(text)).object; };
  Object v1 = decode(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n",
                         "annotations":{"a":"1"}}})");
  Object v2 = decode(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n",
                         "annotations":{"a":"2"}}})");
  ObjectSet set;
  EXPECT_TRUE(set.Upsert(v1));
  EXPECT_FALSE(set.Upsert(v1));
  EXPECT_TRUE(set.Upsert(v2));
  EXPECT_EQ(set.size(), 1u);
  ObjectKey key{"Pod", "n", "p"};
  ASSERT_TRUE(set.Find(key).has_value());
  EXPECT_EQ(std::get<Pod>(*set.Find(key)).metadata.annotations.at("a"), "2");
  EXPECT_FALSE(set.Remove(ObjectKey{"LogonGroup", "n", "p"}));
  EXPECT_TRUE(set.Remove(key));
  EXPECT_FALSE(set.Find(key).has_value());
  EXPECT_EQ(set.size(), 0u);
}

}  // namespace
}  // namespace kwd::model
