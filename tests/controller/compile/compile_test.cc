#include "controller/compile/compile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/modification/program.h"
#include "common/snapshot_io.h"
#include "controller/compile/internal.h"

namespace kwd::compile {
namespace {

using nlohmann::json;

// A self-signed CA certificate (only parsed here, never used to verify).
constexpr std::string_view kTestCaPem = R"(-----BEGIN CERTIFICATE-----
MIIBgjCCASmgAwIBAgIUUixMd63vQZA+B2n3MDiyJl2aUEMwCgYIKoZIzj0EAwIw
FjEUMBIGA1UEAwwLa3dkLXRlc3QtY2EwIBcNMjYxMjAxMTMwMjA1WhgPMjEyNjEx
MDcxMzAyMDVaMBYxFDASBgNVBAMMC2t3ZC10ZXN0LWNhMFkwEwYHKoZIzj0CAQYI
KoZIzj0DAQcDQgAEcctl0LDAI0tMrFmT3wpt0j+ZvPsvAnk2tNekAsBrJhjrtwNI
QM7cbIq6x0IgVw1avalhjamXFNiSF+kVhAk9C6NTMFEwHQYDVR0OBBYEFLYN8u29
aPW+7Fx63IKn2qs1OENRMB8GA1UdIwQYMBaAFLYN8u29aPW+7Fx63IKn2qs1OENR
MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgDl6hHK8rqy/CQlGa
BRqBdKtLYnWOpBu9yHtrGS1yY+UCIDf8Wdtkmh0BelsjAuRZOsyhWvCCKjWA8l3c
HSJ5MDUn
-----END CERTIFICATE-----
)";
constexpr std::string_view kTestCaBase64 =
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJnakNDQVNtZ0F3SUJBZ0lVVWl4TWQ2M3ZRWkErQjJuM01EaXlKbD"
    "JhVUVNd0NnWUlLb1pJemowRUF3SXcKRmpFVU1CSUdBMVVFQXd3TGEzZGtMWFJsYzNRdFkyRXdJQmNOTWpZeE1qQXhNVE13"
    "TWpBMVdoZ1BNakV5TmpFeApNRGN4TXpBeU1EVmFNQll4RkRBU0JnTlZCQU1NQzJ0M1pDMTBaWE4wTFdOaE1Ga3dFd1lIS2"
    "9aSXpqMENBUVlJCktvWkl6ajBEQVFjRFFnQUVjY3RsMExEQUkwdE1yRm1UM3dwdDBqK1p2UHN2QW5rMnROZWtBc0JySmhq"
    "cnR3TkkKUU03Y2JJcTZ4MElnVncxYXZhbGhqYW1YRk5pU0Yra1ZoQWs5QzZOVE1GRXdIUVlEVlIwT0JCWUVGTFlOOHUyOQ"
    "phUFcrN0Z4NjNJS24ycXMxT0VOUk1COEdBMVVkSXdRWU1CYUFGTFlOOHUyOWFQVys3Rng2M0lLbjJxczFPRU5SCk1BOEdB"
    "MVVkRXdFQi93UUZNQU1CQWY4d0NnWUlLb1pJemowRUF3SURSd0F3UkFJZ0RsNmhISzhycXkvQ1FsR2EKQlJxQmRLdExZbl"
    "dPcEJ1OXlIdHJHUzF5WStVQ0lEZjhXZHRrbWgwQmVsc2pBdVJaT3N5aFd2Q0NLaldBOGwzYwpIU0o1TURVbgotLS0tLUVO"
    "RCBDRVJUSUZJQ0FURS0tLS0tCg==";

// ---- Object builders (shaped as the API server returns them) ----

json Meta(const std::string& ns, const std::string& name, const std::string& created = "",
          int generation = 1) {
  json meta = {{"name", name}, {"namespace", ns}, {"generation", generation}};
  if (!created.empty()) {
    meta["creationTimestamp"] = created;
  }
  return meta;
}

json Lg(const std::string& ns, const std::string& name, json spec) {
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", Meta(ns, name)},
          {"spec", std::move(spec)}};
}

json StaticLg(const std::string& ns, const std::string& name, const std::string& kind = "abap") {
  return Lg(ns, name,
            {{"kind", kind},
             {"backend",
              {{"staticServers",
                json::array({{{"name", name + "1"}, {"address", "10.0.0.1"}, {"port", 8000}}})}}}});
}

json Um(const std::string& ns, const std::string& name, const std::string& created, json spec) {
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "UrlMapping"},
          {"metadata", Meta(ns, name, created)},
          {"spec", std::move(spec)}};
}

json Slice(const std::string& ns, const std::string& name, const std::string& service,
           json endpoints, json ports = json::array({{{"name", "http"}, {"port", 8000}}})) {
  return {
      {"apiVersion", "discovery.k8s.io/v1"},
      {"kind", "EndpointSlice"},
      {"metadata",
       {{"name", name}, {"namespace", ns}, {"labels", {{"kubernetes.io/service-name", service}}}}},
      {"addressType", "IPv4"},
      {"endpoints", std::move(endpoints)},
      {"ports", std::move(ports)}};
}

json Ep(const std::string& address, const std::string& pod, json conditions = json::object()) {
  json ep = {{"addresses", {address}}, {"conditions", std::move(conditions)}};
  if (!pod.empty()) {
    ep["targetRef"] = {{"kind", "Pod"}, {"name", pod}};
  }
  return ep;
}

json PodJ(const std::string& ns, const std::string& name, json annotations) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", ns}, {"annotations", std::move(annotations)}}}};
}

json ServiceLg(const std::string& ns, const std::string& name, json service, json extra = {}) {
  json spec = {{"backend", {{"service", std::move(service)}}}};
  if (extra.is_object()) {
    spec.update(extra);
  }
  return Lg(ns, name, spec);
}

model::ObjectSet Objects(const std::vector<json>& objects) {
  model::ObjectSet set;
  for (const auto& object : objects) {
    auto decoded = model::DecodeObject(object);
    EXPECT_TRUE(decoded.ok()) << decoded.error << "\n" << object.dump();
    if (decoded.ok()) {
      set.Upsert(std::move(*decoded.object));
    }
  }
  return set;
}

// ---- A readable rendering of the output, one fact per line ----

std::string KindText(v1::Kind kind) {
  return kind == v1::KIND_ABAP ? "abap" : "java";
}

std::vector<std::string> Summary(const CompileResult& result) {
  std::vector<std::string> lines;
  for (const auto& g : result.snapshot.groups()) {
    const auto& hc = g.health_check();
    const auto& sa = g.session_affinity();
    std::string ids;
    for (int id : sa.identifiers()) {
      ids += std::to_string(id);
    }
    lines.push_back(
        "group " + g.key() + " " + KindText(g.kind()) + " " + v1::Strategy_Name(g.strategy()) +
        " reset=" + std::to_string(g.load_reset_interval_seconds()) + " hc=" + hc.path() + "," +
        std::to_string(hc.interval_seconds()) + "," + std::to_string(hc.timeout_seconds()) + "," +
        std::to_string(hc.unhealthy_threshold()) + "," + std::to_string(hc.healthy_threshold()) +
        " ids=" + ids + " table=" + std::to_string(sa.session_table_max_entries()) + "," +
        std::to_string(sa.session_table_idle_timeout_seconds()) +
        " cookie=" + (sa.affinity_cookie_enabled() ? "on:" : "off:") + sa.affinity_cookie_name() +
        " tls=" + v1::UpstreamTlsMode_Name(g.upstream_tls().mode()));
    if (g.upstream_tls().mode() == v1::UPSTREAM_TLS_MODE_REENCRYPT) {
      const auto& tls = g.upstream_tls();
      lines.push_back("tls " + g.key() + " sni=" + tls.server_name() + " ca=" +
                      (tls.ca_bundle_pem() == kTestCaPem ? "test-ca" : tls.ca_bundle_pem()) +
                      " client=" + tls.client_cert_secret());
    }
    lines.push_back("servers " + g.key() + " " + std::to_string(g.servers_size()));
    for (const auto& s : g.servers()) {
      lines.push_back("server " + g.key() + " " + s.name() + " " + s.address() + ":" +
                      std::to_string(s.port()) + " c=" + std::to_string(s.capacity()) + " " +
                      v1::ServerState_Name(s.state()) + " pod=" + s.pod());
    }
  }
  for (const auto& vh : result.snapshot.virtual_hosts()) {
    std::string host = "\"" + vh.host() + "\"";
    lines.push_back("vhost " + host + " root=" + KindText(vh.default_root_handler()) +
                    " abap=" + vh.default_abap_group() + " java=" + vh.default_java_group() +
                    " src=" + vh.source());
    lines.push_back("rules " + host + " " + std::to_string(vh.rules_size()));
    for (const auto& r : vh.rules()) {
      lines.push_back("rule " + host + " " + r.prefix() + " " + KindText(r.kind()) +
                      " group=" + r.group() + " src=" + r.source());
    }
    std::string permissions;
    for (const auto& p : vh.permissions()) {
      permissions += " " + v1::PermissionAction_Name(p.action()) + ":" + p.pattern();
    }
    lines.push_back("perms " + host + permissions);
  }
  for (const auto& s : result.snapshot.sources()) {
    lines.push_back("source " + s.kind() + " " + s.namespace_() + "/" + s.name() +
                    " gen=" + std::to_string(s.generation()));
  }
  for (const auto& st : result.statuses) {
    std::string who = st.kind + " " + st.namespace_ + "/" + st.name;
    if (st.kind == "LogonGroup") {
      lines.push_back("ready " + who + " " + std::to_string(st.ready_servers));
    }
    for (const auto& c : st.conditions) {
      lines.push_back(who + " " + c.type + "=" + c.status + " " + c.reason);
    }
  }
  return lines;
}

std::string AllMessages(const CompileResult& result) {
  std::string out;
  for (const auto& st : result.statuses) {
    for (const auto& c : st.conditions) {
      out += st.kind + " " + st.namespace_ + "/" + st.name + " " + c.type + ": " + c.message + "\n";
    }
  }
  return out;
}

struct CompileCase {
  std::string name;
  std::vector<json> objects;
  std::vector<std::string> want;           // lines that must be in the summary
  std::vector<std::string> not_want = {};  // line prefixes that must not be
  std::vector<std::string> messages = {};  // substrings of some condition message
};

class CompileTableTest : public testing::TestWithParam<CompileCase> {};

TEST_P(CompileTableTest, Compiles) {
  const CompileCase& c = GetParam();
  CompileResult result = Compile(Objects(c.objects));
  std::vector<std::string> lines = Summary(result);
  std::string rendered;
  for (const auto& line : lines) {
    rendered += "  " + line + "\n";
  }
  for (const auto& want : c.want) {
    EXPECT_NE(std::find(lines.begin(), lines.end(), want), lines.end())
        << "missing: " << want << "\ngot:\n"
        << rendered;
  }
  for (const auto& prefix : c.not_want) {
    for (const auto& line : lines) {
      EXPECT_NE(line.rfind(prefix, 0), 0u) << "unexpected: " << line << "\ngot:\n" << rendered;
    }
  }
  std::string messages = AllMessages(result);
  for (const auto& part : c.messages) {
    EXPECT_NE(messages.find(part), std::string::npos)
        << "no message contains: " << part << "\nmessages:\n"
        << messages;
  }
  EXPECT_EQ(CheckSnapshot(result.snapshot), std::vector<std::string>{});
  // Every LogonGroup and UrlMapping gets both conditions.
  for (const auto& status : result.statuses) {
    EXPECT_NE(status.Find(kAccepted), nullptr);
    EXPECT_NE(status.Find(kResolvedRefs), nullptr);
  }
}

const json kEmpty = json::object();
const json kDraining = {{"ready", false}, {"serving", true}, {"terminating", true}};
const json kGone = {{"ready", false}, {"serving", false}, {"terminating", true}};
const json kNotReady = {{"ready", false}};

std::vector<CompileCase> Cases() {
  return {
      // ---- LogonGroup: defaults and validation ----
      {"DefaultsAbap",
       {StaticLg("erp", "a")},
       {"group erp/a abap STRATEGY_WEIGHTED_ROUND_ROBIN reset=25 "
        "hc=/sap/public/icman/ping,25,5,2,1 "
        "ids=1234 table=50000,3600 cookie=on:kwd_affinity tls=UPSTREAM_TLS_MODE_NONE",
        "server erp/a a1 10.0.0.1:8000 c=1 SERVER_STATE_READY pod=",
        "LogonGroup erp/a Accepted=True Accepted",
        "LogonGroup erp/a ResolvedRefs=True ResolvedRefs", "ready LogonGroup erp/a 1"},
       {},
       {"strategy weighted_round_robin, 1 server"}},
      {"DefaultsJavaAndNoKind",
       {StaticLg("erp", "j", "java"),
        Lg("erp", "nokind",
           {{"backend",
             {{"staticServers", json::array({{{"name", "s"}, {"address", "h"}, {"port", 1}}})}}}})},
       {"group erp/j java STRATEGY_WEIGHTED_ROUND_ROBIN reset=25 hc=/index.html,25,5,2,1 ids=1234 "
        "table=50000,3600 cookie=on:kwd_affinity tls=UPSTREAM_TLS_MODE_NONE",
        "group erp/nokind abap STRATEGY_WEIGHTED_ROUND_ROBIN reset=25 "
        "hc=/sap/public/icman/ping,25,5,2,1 ids=1234 table=50000,3600 cookie=on:kwd_affinity "
        "tls=UPSTREAM_TLS_MODE_NONE"}},
      {"ExplicitSettings",
       {Lg("erp", "a",
           {{"strategy", "simple_weighted_round_robin"},
            {"loadResetIntervalSeconds", 60},
            {"healthCheck",
             {{"path", "/ping"},
              {"intervalSeconds", 10},
              {"timeoutSeconds", 2},
              {"unhealthyThreshold", 3},
              {"healthyThreshold", 2}}},
            {"sessionAffinity",
             {{"identifiers", {"jsessionid", "sap-contextid", "jsessionid"}},
              {"sessionTable", {{"maxEntries", 10}, {"idleTimeoutSeconds", 60}}},
              {"affinityCookie", {{"enabled", false}, {"name", "lb"}}}}},
            {"upstreamTLS", {{"mode", "none"}}},
            {"backend", {{"staticServers", json::array()}}}})},
       {"group erp/a abap STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN reset=60 hc=/ping,10,2,3,2 ids=13 "
        "table=10,60 cookie=off:lb tls=UPSTREAM_TLS_MODE_NONE",
        "servers erp/a 0"}},
      {"BothBackends",
       {Lg("erp", "a",
           {{"backend",
             {{"service", {{"name", "svc"}}},
              {"staticServers", json::array({{{"name", "s"}, {"address", "h"}, {"port", 1}}})}}}})},
       {"LogonGroup erp/a Accepted=False InvalidBackend",
        "LogonGroup erp/a ResolvedRefs=False InvalidBackend", "source LogonGroup erp/a gen=1"},
       {"group erp/a"},
       {"exactly one of service, staticServers or sapSystem must be set, got both"}},
      {"NeitherBackend",
       {Lg("erp", "a", {{"kind", "abap"}}), Lg("erp", "b", {{"backend", json::object()}})},
       {"LogonGroup erp/a Accepted=False InvalidBackend",
        "LogonGroup erp/b Accepted=False InvalidBackend"},
       {"group "},
       {"got neither"}},
      {"InvalidStrategy",
       {Lg("erp", "a", {{"strategy", "fastest"}, {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=False InvalidStrategy", "ready LogonGroup erp/a 0"},
       {"group erp/a"},
       {"spec.strategy: \"fastest\" is not one of weighted_round_robin, "
        "simple_weighted_round_robin, adaptive"}},
      {"InvalidKind",
       {Lg("erp", "a", {{"kind", "cobol"}, {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=False InvalidKind"},
       {"group erp/a"},
       {"spec.kind: \"cobol\" is not one of abap, java"}},
      {"InvalidNumbers",
       {Lg("erp", "a",
           {{"defaultCapacity", 0},
            {"healthCheck", {{"timeoutSeconds", -1}}},
            {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField"},
       {"group erp/a"},
       {"spec.defaultCapacity: must be an integer from 1 to 4294967295, got 0",
        "spec.healthCheck.timeoutSeconds: must be an integer from 1 to 4294967295, got -1"}},
      {"InvalidIdentifierAndCookie",
       {Lg("erp", "a",
           {{"sessionAffinity",
             {{"identifiers", {"cookie"}}, {"affinityCookie", {{"name", "a b"}}}}},
            {"upstreamTLS", {{"mode", "mtls"}}},
            {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField"},
       {"group erp/a"},
       {"\"cookie\" is not one of sap-contextid, saplb, jsessionid, sap-ext-sid",
        "\"a b\" is not a valid cookie name", "\"mtls\" is not one of none, reencrypt"}},
      // Issue 11: re-encryption. The caBundle arrives base64-encoded and goes
      // into the snapshot as PEM; the name to send as SNI and verify is
      // lowercased.
      {"ReencryptWithEveryField",
       {Lg("erp", "a",
           {{"upstreamTLS",
             {{"mode", "reencrypt"},
              {"serverName", "ERP.Example.com"},
              {"caBundle", kTestCaBase64},
              {"clientCertSecret", "erp-client"}}},
            {"backend", {{"service", {{"name", "erp"}}}}}})},
       {"LogonGroup erp/a Accepted=True Accepted",
        "tls erp/a sni=erp.example.com ca=test-ca client=erp-client"}},
      // Host-name addresses are the names to verify: no serverName needed;
      // no caBundle: the system store.
      {"ReencryptToHostNamesNeedsNoServerName",
       {Lg("erp", "a",
           {{"upstreamTLS", {{"mode", "reencrypt"}}},
            {"backend",
             {{"staticServers",
               json::array(
                   {{{"name", "s1"}, {"address", "erp1.example.com"}, {"port", 443}}})}}}})},
       {"LogonGroup erp/a Accepted=True Accepted", "tls erp/a sni= ca= client="}},
      // The caBundle may be wrapped at 76 columns, as base64 writes it.
      {"CaBundleWithLineBreaks",
       {Lg("erp", "a",
           {{"upstreamTLS",
             {{"mode", "reencrypt"},
              {"serverName", "erp.example.com"},
              {"caBundle", std::string(kTestCaBase64.substr(0, 76)) + "\n" +
                               std::string(kTestCaBase64.substr(76)) + "\n"}}},
            {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=True Accepted",
        "tls erp/a sni=erp.example.com ca=test-ca client="}},
      {"ReencryptToAnIpAddressNeedsServerName",
       {Lg("erp", "a",
           {{"upstreamTLS", {{"mode", "reencrypt"}}},
            {"backend",
             {{"staticServers",
               json::array({{{"name", "s1"}, {"address", "erp1.example.com"}, {"port", 443}},
                            {{"name", "s2"}, {"address", "10.0.0.2"}, {"port", 443}}})}}}}),
        Lg("erp", "b",
           {{"upstreamTLS", {{"mode", "reencrypt"}}},
            {"backend", {{"service", {{"name", "erp"}}}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField",
        "LogonGroup erp/b Accepted=False InvalidField"},
       {"group erp/a", "group erp/b"},
       {"spec.upstreamTLS.serverName: required with mode reencrypt unless every server address "
        "is a host name (spec.backend.staticServers[1].address \"10.0.0.2\" is an IP address)",
        "(spec.backend.service: the servers are pod IP addresses)"}},
      {"BadCaBundle",
       {Lg("erp", "a",
           {{"upstreamTLS",
             {{"mode", "reencrypt"}, {"serverName", "erp"}, {"caBundle", "not base64!"}}},
            {"backend", {{"staticServers", json::array()}}}}),
        // "hello" in base64: decodes, but holds no certificate.
        Lg("erp", "b",
           {{"upstreamTLS",
             {{"mode", "reencrypt"}, {"serverName", "erp"}, {"caBundle", "aGVsbG8="}}},
            {"backend", {{"staticServers", json::array()}}}}),
        // A PEM block whose content is no certificate.
        Lg("erp", "c",
           {{"upstreamTLS",
             {{"mode", "reencrypt"},
              {"serverName", "erp"},
              {"caBundle",
               "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmFHVnNiRzg9Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0"
               "K"}}},
            {"backend", {{"staticServers", json::array()}}}}),
        Lg("erp", "d",
           {{"upstreamTLS", {{"mode", "reencrypt"}, {"serverName", "erp"}, {"caBundle", ""}}},
            {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField",
        "LogonGroup erp/b Accepted=False InvalidField",
        "LogonGroup erp/c Accepted=False InvalidField",
        "LogonGroup erp/d Accepted=False InvalidField"},
       {"group erp/"},
       {"LogonGroup erp/a Accepted: spec.upstreamTLS.caBundle: is not valid base64",
        "LogonGroup erp/b Accepted: spec.upstreamTLS.caBundle: holds no PEM certificate",
        "LogonGroup erp/c Accepted: spec.upstreamTLS.caBundle: certificate 1 cannot be read",
        "LogonGroup erp/d Accepted: spec.upstreamTLS.caBundle: is empty"}},
      {"BadServerNameAndSecretName",
       {Lg("erp", "a",
           {{"upstreamTLS",
             {{"mode", "reencrypt"},
              {"serverName", "erp example"},
              {"clientCertSecret", "../etc"}}},
            {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField"},
       {"group erp/a"},
       {"spec.upstreamTLS.serverName: \"erp example\" is not a DNS name",
        "spec.upstreamTLS.clientCertSecret: \"../etc\" is not a Secret name"}},
      // With mode none the settings would silently do nothing.
      {"TlsSettingsWithModeNone",
       {Lg("erp", "a",
           {{"upstreamTLS", {{"serverName", "erp.example.com"}, {"caBundle", kTestCaBase64}}},
            {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField"},
       {"group erp/a"},
       {"spec.upstreamTLS.caBundle: only with mode reencrypt",
        "spec.upstreamTLS.serverName: only with mode reencrypt"}},
      {"UnknownFieldsAreRejected",
       {Lg("erp", "a",
           {{"strategee", "adaptive"}, {"backend", {{"staticServers", json::array()}}}}),
        Um("erp", "m", "", {{"rulez", json::array()}})},
       {"LogonGroup erp/a Accepted=False InvalidField",
        "UrlMapping erp/m Accepted=False InvalidField"},
       {"group erp/a", "vhost"},
       {"spec.strategee: unknown field", "spec.rulez: unknown field"}},
      {"StaticServersSortedWithDefaultCapacity",
       {Lg("erp", "a",
           {{"defaultCapacity", 3},
            {"backend",
             {{"staticServers",
               json::array({{{"name", "b"}, {"address", "10.0.0.2"}, {"port", 8001}},
                            {{"name", "a"},
                             {"address", "10.0.0.1"},
                             {"port", 8000},
                             {"capacity", 6}}})}}}})},
       {"server erp/a a 10.0.0.1:8000 c=6 SERVER_STATE_READY pod=",
        "server erp/a b 10.0.0.2:8001 c=3 SERVER_STATE_READY pod=", "ready LogonGroup erp/a 2"},
       {},
       {"strategy weighted_round_robin, 2 servers"}},
      {"StaticServerDrain",
       {Lg("erp", "a",
           {{"backend",
             {{"staticServers",
               json::array(
                   {{{"name", "a"}, {"address", "10.0.0.1"}, {"port", 8000}, {"drain", true}},
                    {{"name", "b"}, {"address", "10.0.0.2"}, {"port", 8001}, {"drain", false}},
                    {{"name", "c"}, {"address", "10.0.0.3"}, {"port", 8002}}})}}}})},
       {"server erp/a a 10.0.0.1:8000 c=1 SERVER_STATE_DRAINING pod=",
        "server erp/a b 10.0.0.2:8001 c=1 SERVER_STATE_READY pod=",
        "server erp/a c 10.0.0.3:8002 c=1 SERVER_STATE_READY pod=", "ready LogonGroup erp/a 2",
        "LogonGroup erp/a Accepted=True Accepted"},
       {},
       {"strategy weighted_round_robin, 3 servers (1 draining)"}},
      {"StaticServerBadPortAndCapacity",
       {Lg("erp", "a",
           {{"backend",
             {{"staticServers",
               json::array({{{"name", "a"}, {"address", "h"}, {"port", 70000}},
                            {{"name", "b"}, {"address", "h"}, {"port", 1}, {"capacity", 0}},
                            {{"name", "c"}, {"address", "h"}}})}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField"},
       {"group erp/a"},
       {"spec.backend.staticServers[0].port: must be an integer from 1 to 65535, got 70000",
        "spec.backend.staticServers[1].capacity: must be an integer from 1",
        "spec.backend.staticServers[2].port: missing"}},
      {"DuplicateStaticServer",
       {Lg("erp", "a",
           {{"backend",
             {{"staticServers", json::array({{{"name", "a"}, {"address", "h"}, {"port", 1}},
                                             {{"name", "a"}, {"address", "i"}, {"port", 2}}})}}}})},
       {"LogonGroup erp/a Accepted=False DuplicateServer"},
       {"group erp/a"},
       {"server name \"a\" is used twice"}},

      // ---- LogonGroup: service backends ----
      {"SlicesMergedAndStates",
       {ServiceLg("erp", "a", {{"name", "svc"}, {"port", 8000}}),
        Slice("erp", "svc-1", "svc",
              {Ep("10.0.0.1", "p1"), Ep("10.0.0.2", "p2", kDraining), Ep("10.0.0.3", "p3", kGone),
               Ep("10.0.0.4", "p4", kNotReady)}),
        Slice("erp", "svc-2", "svc", {Ep("10.0.0.5", "p5", {{"ready", true}})}),
        Slice("erp", "other", "other-svc", {Ep("10.0.0.9", "p9")}),
        Slice("sap", "svc-x", "svc", {Ep("10.0.0.8", "p8")})},
       {"servers erp/a 3", "server erp/a p1 10.0.0.1:8000 c=1 SERVER_STATE_READY pod=erp/p1",
        "server erp/a p2 10.0.0.2:8000 c=1 SERVER_STATE_DRAINING pod=erp/p2",
        "server erp/a p5 10.0.0.5:8000 c=1 SERVER_STATE_READY pod=erp/p5",
        "ready LogonGroup erp/a 2", "LogonGroup erp/a ResolvedRefs=True ResolvedRefs"},
       {},
       {"strategy weighted_round_robin, 3 servers (1 draining)",
        "Service erp/svc: 2 EndpointSlices"}},
      {"PodAnnotations",
       {ServiceLg("erp", "a", {{"name", "svc"}}, {{"defaultCapacity", 2}}),
        Slice(
            "erp", "svc-1", "svc",
            {Ep("10.0.0.1", "p1"), Ep("10.0.0.2", "p2"), Ep("10.0.0.3", "p3"), Ep("10.0.0.4", "")}),
        PodJ("erp", "p1",
             {{"dispatch.kwd.io/instance-name", "erp1_ERP_00"}, {"dispatch.kwd.io/capacity", "6"}}),
        PodJ("erp", "p2", {{"dispatch.kwd.io/capacity", "many"}}),
        PodJ("erp", "p3", {{"dispatch.kwd.io/capacity", "0"}})},
       {"server erp/a erp1_ERP_00 10.0.0.1:8000 c=6 SERVER_STATE_READY pod=erp/p1",
        "server erp/a p2 10.0.0.2:8000 c=2 SERVER_STATE_READY pod=erp/p2",
        "server erp/a p3 10.0.0.3:8000 c=2 SERVER_STATE_READY pod=erp/p3",
        "server erp/a 10.0.0.4 10.0.0.4:8000 c=2 SERVER_STATE_READY pod=",
        "LogonGroup erp/a Accepted=True Accepted"},
       {},
       {"pod erp/p2: annotation dispatch.kwd.io/capacity=\"many\" is not a positive integer, "
        "using capacity 2",
        "pod erp/p3: annotation dispatch.kwd.io/capacity=\"0\""}},
      {"PodDrainAnnotation",
       {ServiceLg("erp", "a", {{"name", "svc"}}),
        Slice("erp", "svc-1", "svc",
              {Ep("10.0.0.1", "p1"), Ep("10.0.0.2", "p2"), Ep("10.0.0.3", "p3"),
               Ep("10.0.0.4", "p4", kDraining)}),
        PodJ("erp", "p1", {{"dispatch.kwd.io/drain", "true"}}),
        PodJ("erp", "p2", {{"dispatch.kwd.io/drain", "false"}}),
        PodJ("erp", "p3", {{"dispatch.kwd.io/drain", "TRUE "}}),
        PodJ("erp", "p4", {{"dispatch.kwd.io/drain", "false"}})},
       {"server erp/a p1 10.0.0.1:8000 c=1 SERVER_STATE_DRAINING pod=erp/p1",
        "server erp/a p2 10.0.0.2:8000 c=1 SERVER_STATE_READY pod=erp/p2",
        "server erp/a p3 10.0.0.3:8000 c=1 SERVER_STATE_READY pod=erp/p3",
        "server erp/a p4 10.0.0.4:8000 c=1 SERVER_STATE_DRAINING pod=erp/p4",
        "ready LogonGroup erp/a 2"},
       {},
       {"strategy weighted_round_robin, 4 servers (2 draining)"}},
      {"SliceHandoverPrefersReady",
       {ServiceLg("erp", "a", {{"name", "svc"}}),
        Slice("erp", "svc-a", "svc", {Ep("10.0.0.1", "p1", kDraining)}),
        Slice("erp", "svc-b", "svc", {Ep("10.0.0.1", "p1")})},
       {"servers erp/a 1", "server erp/a p1 10.0.0.1:8000 c=1 SERVER_STATE_READY pod=erp/p1"}},
      {"NoSlices",
       {ServiceLg("erp", "a", {{"name", "svc"}, {"port", "http"}})},
       {"servers erp/a 0", "LogonGroup erp/a Accepted=True Accepted",
        "LogonGroup erp/a ResolvedRefs=False NoEndpoints"},
       {},
       {"no EndpointSlice labelled kubernetes.io/service-name=svc in namespace erp"}},
      {"PortByNameNumberAndSingle",
       {ServiceLg("erp", "byname", {{"name", "svc"}, {"port", "admin"}}),
        ServiceLg("erp", "bynumber", {{"name", "svc"}, {"port", 8000}}),
        ServiceLg("erp", "single", {{"name", "one"}}),
        ServiceLg("erp", "unnamed", {{"name", "bare"}, {"port", 9000}}),
        Slice("erp", "svc-1", "svc", {Ep("10.0.0.1", "p1")},
              {{{"name", "http"}, {"port", 8000}}, {{"name", "admin"}, {"port", 8100}}}),
        Slice("erp", "one-1", "one", {Ep("10.0.0.2", "p2")}, {{{"name", ""}, {"port", 7000}}}),
        Slice("erp", "bare-1", "bare", {Ep("10.0.0.3", "p3")}, nullptr)},
       {"server erp/byname p1 10.0.0.1:8100 c=1 SERVER_STATE_READY pod=erp/p1",
        "server erp/bynumber p1 10.0.0.1:8000 c=1 SERVER_STATE_READY pod=erp/p1",
        "server erp/single p2 10.0.0.2:7000 c=1 SERVER_STATE_READY pod=erp/p2",
        "server erp/unnamed p3 10.0.0.3:9000 c=1 SERVER_STATE_READY pod=erp/p3"}},
      {"PortNotFound",
       {ServiceLg("erp", "a", {{"name", "svc"}, {"port", "https"}}),
        ServiceLg("erp", "b", {{"name", "svc"}}),
        Slice("erp", "svc-1", "svc", {Ep("10.0.0.1", "p1")},
              {{{"name", "http"}, {"port", 8000}}, {{"name", "admin"}, {"port", 8100}}})},
       {"servers erp/a 0", "LogonGroup erp/a ResolvedRefs=False PortNotFound",
        "LogonGroup erp/b ResolvedRefs=False PortNotFound"},
       {},
       {"no EndpointSlice of Service erp/svc has port \"https\""}},
      // Issue 27: a Deployment scaled to 0 leaves its slice with "endpoints":
      // null and "ports": null (the EndpointSlice controller's shape). That is
      // a Service without endpoints, not one without the port.
      {"ScaledToZeroSliceIsNoEndpointsNotPortNotFound",
       {ServiceLg("erp", "a", {{"name", "svc"}, {"port", "http"}}),
        ServiceLg("erp", "b", {{"name", "svc"}, {"port", 8000}}),
        ServiceLg("erp", "c", {{"name", "svc"}}), Slice("erp", "svc-1", "svc", nullptr, nullptr),
        Slice("erp", "svc-2", "svc", json::array(), json::array())},
       {"servers erp/a 0", "LogonGroup erp/a ResolvedRefs=False NoEndpoints",
        "LogonGroup erp/b ResolvedRefs=False NoEndpoints",
        "LogonGroup erp/c ResolvedRefs=False NoEndpoints"},
       {},
       {"Service erp/svc has no endpoints (its EndpointSlices are empty: scaled to 0?)"}},
      {"EmptySliceBesideAServingOneIsNotAPortProblem",
       {ServiceLg("erp", "a", {{"name", "svc"}, {"port", "http"}}),
        Slice("erp", "svc-1", "svc", {Ep("10.0.0.1", "p1")}),
        Slice("erp", "svc-2", "svc", nullptr, nullptr)},
       {"servers erp/a 1", "server erp/a p1 10.0.0.1:8000 c=1 SERVER_STATE_READY pod=erp/p1",
        "LogonGroup erp/a ResolvedRefs=True ResolvedRefs"}},
      {"SliceWithEndpointsButNoPortsIsStillPortNotFound",
       {ServiceLg("erp", "a", {{"name", "svc"}, {"port", "http"}}),
        Slice("erp", "svc-1", "svc", {Ep("10.0.0.1", "p1")}, nullptr)},
       {"servers erp/a 0", "LogonGroup erp/a ResolvedRefs=False PortNotFound"}},
      {"DuplicateInstanceNamesKeepOne",
       {ServiceLg("erp", "a", {{"name", "svc"}}),
        Slice("erp", "svc-1", "svc", {Ep("10.0.0.1", "p1", kDraining), Ep("10.0.0.2", "p2")}),
        PodJ("erp", "p1", {{"dispatch.kwd.io/instance-name", "same"}}),
        PodJ("erp", "p2", {{"dispatch.kwd.io/instance-name", "same"}})},
       {"servers erp/a 1", "server erp/a same 10.0.0.2:8000 c=1 SERVER_STATE_READY pod=erp/p2"},
       {},
       {"endpoint 10.0.0.1:8000 left out: server name \"same\" is used twice"}},

      // ---- Names and paths: they reach headers, log lines and metric labels ----
      {"InstanceNameWithCrLfLeavesTheEndpointOut",
       {ServiceLg("erp", "a", {{"name", "svc"}}),
        Slice("erp", "svc-1", "svc", {Ep("10.0.0.1", "p1"), Ep("10.0.0.2", "p2")}),
        PodJ("erp", "p1", {{"dispatch.kwd.io/instance-name", "A\r\nSet-Cookie: evil=1"}}),
        PodJ("erp", "p2", {{"dispatch.kwd.io/instance-name", "B"}})},
       {"servers erp/a 1", "server erp/a B 10.0.0.2:8000 c=1 SERVER_STATE_READY pod=erp/p2",
        "LogonGroup erp/a Accepted=True Accepted",
        "LogonGroup erp/a ResolvedRefs=False InvalidServerName", "ready LogonGroup erp/a 1"},
       {},
       {"endpoint 10.0.0.1:8000 (pod erp/p1) left out: annotation "
        "dispatch.kwd.io/instance-name=\"A\\r\\nSet-Cookie: evil=1\" is not a valid server name"}},
      {"InstanceNamesOutsideTheCookieCharacters",
       {ServiceLg("erp", "a", {{"name", "svc"}}),
        Slice("erp", "svc-1", "svc",
              {Ep("10.0.0.1", "p1"), Ep("10.0.0.2", "p2"), Ep("10.0.0.3", "p3"),
               Ep("10.0.0.4", "p4")}),
        PodJ("erp", "p1", {{"dispatch.kwd.io/instance-name", "erp 1"}}),
        PodJ("erp", "p2", {{"dispatch.kwd.io/instance-name", "erp1;Path=/x"}}),
        PodJ("erp", "p3", {{"dispatch.kwd.io/instance-name", "\"erp\""}}),
        PodJ("erp", "p4", {{"dispatch.kwd.io/instance-name", std::string(254, 'x')}})},
       {"servers erp/a 0", "LogonGroup erp/a ResolvedRefs=False InvalidServerName"},
       {},
       {"(pod erp/p1) left out", "(pod erp/p2) left out", "(pod erp/p3) left out",
        "(pod erp/p4) left out"}},
      {"EndpointAddressOrPodRefInvalid",
       {ServiceLg("erp", "a", {{"name", "svc"}}),
        Slice("erp", "svc-1", "svc",
              {Ep("10.0.0.1\r\nX: y", ""), Ep("10.0.0.2", "p2\n"), Ep("10.0.0.3", "p3")})},
       {"servers erp/a 1", "server erp/a p3 10.0.0.3:8000 c=1 SERVER_STATE_READY pod=erp/p3",
        "LogonGroup erp/a ResolvedRefs=False InvalidEndpoint"},
       {},
       {"endpoint \"10.0.0.1\\r\\nX: y\" left out: not a valid address",
        "endpoint 10.0.0.2:8000 left out: targetRef \"p2\\n\" is not a valid pod name"}},
      {"StaticServerNamesAndAddresses",
       {Lg("erp", "a",
           {{"backend",
             {{"staticServers",
               json::array(
                   {{{"name", "a b"}, {"address", "10.0.0.1"}, {"port", 1}},
                    {{"name", "x\r\nSet-Cookie: y=1"}, {"address", "10.0.0.2"}, {"port", 1}},
                    {{"name", "c"}, {"address", "h\r\nX-Evil: 1"}, {"port", 1}},
                    {{"name", "d"}, {"address", "[fd00::1]"}, {"port", 1}}})}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField"},
       {"group erp/a"},
       {"spec.backend.staticServers[0].name: \"a b\" is not a valid server name",
        "spec.backend.staticServers[1].name: \"x\\r\\nSet-Cookie: y=1\" is not a valid server name",
        "spec.backend.staticServers[2].address: \"h\\r\\nX-Evil: 1\" is not an IP address or host "
        "name",
        "spec.backend.staticServers[3].address: \"[fd00::1]\""}},
      {"StaticServerNamesThatAreFine",
       {Lg("erp", "a",
           {{"backend",
             {{"staticServers",
               json::array(
                   {{{"name", "erp1_ERP_00"}, {"address", "10.0.0.1"}, {"port", 1}},
                    {{"name", "sap-host.example:00"}, {"address", "fd00::1"}, {"port", 1}},
                    {{"name", "x+y@z~!"}, {"address", "sap-host.example"}, {"port", 1}}})}}}})},
       {"servers erp/a 3", "LogonGroup erp/a Accepted=True Accepted"}},
      {"HealthCheckPathMustBeOriginForm",
       {Lg("erp", "a",
           {{"healthCheck", {{"path", "/ping HTTP/1.1\r\nX-Evil: 1\r\n"}}},
            {"backend", {{"staticServers", json::array()}}}}),
        Lg("erp", "b",
           {{"healthCheck", {{"path", "http://other.example/ping"}}},
            {"backend", {{"staticServers", json::array()}}}}),
        Lg("erp", "c",
           {{"healthCheck", {{"path", "/ping#frag"}}},
            {"backend", {{"staticServers", json::array()}}}}),
        Lg("erp", "d",
           {{"healthCheck", {{"path", "/sap/public/ping?sap-client=001&x=%2F"}}},
            {"backend", {{"staticServers", json::array()}}}})},
       {"LogonGroup erp/a Accepted=False InvalidField",
        "LogonGroup erp/b Accepted=False InvalidField",
        "LogonGroup erp/c Accepted=False InvalidField", "LogonGroup erp/d Accepted=True Accepted"},
       {"group erp/a", "group erp/b", "group erp/c"},
       {"spec.healthCheck.path: must start with / and be an origin-form path "
        "(RFC 3986 path and query characters), got \"/ping HTTP/1.1\\r\\nX-Evil: 1\\r\\n\"",
        "got \"http://other.example/ping\"", "got \"/ping#frag\""}},
      {"ObjectNamesMustBeKubernetesNames",
       {StaticLg("erp", "Public"), StaticLg("erp", "a\r\nb"), StaticLg("erp\n", "c"),
        StaticLg("erp", "ok.v1"),
        Um("erp", "M_1", "", {{"rules", {{{"prefix", "/m/"}, {"kind", "abap"}}}}})},
       {"LogonGroup erp/Public Accepted=False InvalidField",
        "LogonGroup erp/ok.v1 Accepted=True Accepted", "source LogonGroup erp/ok.v1 gen=1",
        "UrlMapping erp/M_1 Accepted=False InvalidField"},
       {"group erp/Public", "group erp/a", "group erp\n", "source LogonGroup erp/Public",
        "source LogonGroup erp/a", "source LogonGroup erp\n", "source UrlMapping", "vhost "},
       {"metadata.name: \"Public\" is not a valid object name",
        "metadata.name: \"a\\r\\nb\" is not a valid object name",
        "metadata.namespace: \"erp\\n\" is not a valid namespace",
        "metadata.name: \"M_1\" is not a valid object name"}},
      {"PrefixesAndPatternsHoldOnlyPathCharacters",
       {StaticLg("erp", "diag"), Um("erp", "m", "",
                                    {{"rules",
                                      {{{"prefix", "/sap\r\nX-Evil: 1/"}, {"kind", "abap"}},
                                       {{"prefix", "/a b/"}, {"kind", "abap"}},
                                       {{"prefix", "/a\"b/"}, {"kind", "abap"}},
                                       {{"prefix", "/caf\xc3\xa9/"}, {"kind", "abap"}},
                                       {{"prefix", "/sap(bd1lbizjptawmq==)/"}, {"kind", "abap"}},
                                       {{"prefix", "/a%2fb/"}, {"kind", "abap"}},
                                       {{"prefix", "/a%zz/"}, {"kind", "abap"}}}},
                                     {"permissions",
                                      {{{"action", "deny"}, {"pattern", "/admin\r\n*"}},
                                       {{"action", "deny"}, {"pattern", "/a b/*"}},
                                       {{"action", "deny"}, {"pattern", "*.cgi"}}}}})},
       {"rules \"\" 2", "rule \"\" /sap(bd1lbizjptawmq==)/ abap group=erp/diag src=erp/m",
        "rule \"\" /a%2fb/ abap group=erp/diag src=erp/m",
        "perms \"\" PERMISSION_ACTION_DENY:*.cgi", "UrlMapping erp/m Accepted=False InvalidRule"},
       {},
       {"spec.rules[0].prefix: \"/sap\\r\\nX-Evil: 1/\" may hold only RFC 3986 path characters "
        "(no spaces, controls, quotes, ? or #); rule dropped",
        "spec.rules[1].prefix: \"/a b/\"", "spec.rules[2].prefix", "spec.rules[3].prefix",
        "spec.rules[6].prefix: \"/a%zz/\"",
        "spec.permissions[0].pattern: \"/admin\\r\\n*\" may hold only RFC 3986 path characters",
        "spec.permissions[1].pattern: \"/a b/*\""}},
      {"HostsWithControlsOrSpaces",
       {Um("erp", "m", "", {{"hosts", {"erp.example.com\r\nX: y"}}}),
        Um("erp", "n", "", {{"hosts", {"erp.example.com:443"}}})},
       {"UrlMapping erp/m Accepted=False InvalidField",
        "UrlMapping erp/n Accepted=False InvalidField"},
       {"vhost "},
       {"spec.hosts: \"erp.example.com\\r\\nX: y\" is not a host name or *.suffix"}},

      // ---- UrlMapping ----
      {"RulesAndImplicitDefaults",
       {StaticLg("erp", "diag"), StaticLg("erp", "j2ee", "java"), StaticLg("erp", "public"),
        Um("erp", "m", "",
           {{"rules",
             {{{"prefix", "/SAP/BC/GUI/"}, {"kind", "abap"}, {"logonGroup", "public"}},
              {{"prefix", "/sap/"}, {"kind", "abap"}},
              {{"prefix", "/irj/"}, {"kind", "java"}}}}})},
       {"vhost \"\" root=java abap=erp/diag java=erp/j2ee src=erp/m", "rules \"\" 3",
        "rule \"\" /irj/ java group=erp/j2ee src=erp/m",
        "rule \"\" /sap/ abap group=erp/diag src=erp/m",
        "rule \"\" /sap/bc/gui/ abap group=erp/public src=erp/m", "perms \"\"",
        "UrlMapping erp/m Accepted=True Accepted",
        "UrlMapping erp/m ResolvedRefs=True ResolvedRefs"},
       {},
       {"3 rules, 0 permissions on any host"}},
      {"ImplicitDefaultsMissingIsFine",
       {Um("erp", "m", "", {{"rules", {{{"prefix", "/sap/"}, {"kind", "abap"}}}}})},
       {"vhost \"\" root=java abap= java= src=erp/m", "rule \"\" /sap/ abap group= src=erp/m",
        "UrlMapping erp/m Accepted=True Accepted",
        "UrlMapping erp/m ResolvedRefs=True ResolvedRefs"}},
      {"InvalidRulesDroppedRestServed",
       {StaticLg("erp", "diag"), Um("erp", "m", "",
                                    {{"rules",
                                      {{{"prefix", "/"}, {"kind", "abap"}},
                                       {{"prefix", "sap/"}, {"kind", "abap"}},
                                       {{"prefix", "/x"}, {"kind", "abap"}},
                                       {{"prefix", "/y/"}, {"kind", "cobol"}},
                                       {{"prefix", "/ok/"}, {"kind", "abap"}},
                                       {{"prefix", "/OK/"}, {"kind", "abap"}}}}})},
       {"rules \"\" 1", "rule \"\" /ok/ abap group=erp/diag src=erp/m",
        "UrlMapping erp/m Accepted=False InvalidRule"},
       {},
       {"spec.rules[0].prefix: \"/\" must start and end with / and not be / alone; rule dropped",
        "spec.rules[1].prefix", "spec.rules[2].prefix",
        "spec.rules[3].kind: \"cobol\" is not one of abap, java",
        "spec.rules[5].prefix: \"/ok/\" is listed twice"}},
      {"DanglingLogonGroup",
       {StaticLg("erp", "diag"), Lg("erp", "broken", {{"strategy", "x"}}),
        Um("erp", "m", "",
           {{"rules",
             {{{"prefix", "/a/"}, {"kind", "abap"}, {"logonGroup", "missing"}},
              {{"prefix", "/b/"}, {"kind", "abap"}, {"logonGroup", "broken"}},
              {{"prefix", "/c/"}, {"kind", "abap"}}}}})},
       {"rule \"\" /a/ abap group= src=erp/m", "rule \"\" /b/ abap group= src=erp/m",
        "rule \"\" /c/ abap group=erp/diag src=erp/m", "UrlMapping erp/m Accepted=True Accepted",
        "UrlMapping erp/m ResolvedRefs=False LogonGroupNotFound"},
       {},
       {"spec.rules[0].logonGroup: LogonGroup erp/missing does not exist",
        "spec.rules[1].logonGroup: LogonGroup erp/broken is not accepted"}},
      {"ExplicitDefaultGroupsDangling",
       {StaticLg("erp", "diag"), StaticLg("erp", "portal", "java"),
        Um("erp", "m", "",
           {{"defaultGroups", {{"abap", "nope"}, {"java", "portal"}}},
            {"rules", {{{"prefix", "/sap/"}, {"kind", "abap"}}}}})},
       {"vhost \"\" root=java abap= java=erp/portal src=erp/m",
        "rule \"\" /sap/ abap group= src=erp/m",
        "UrlMapping erp/m ResolvedRefs=False LogonGroupNotFound"},
       {},
       {"spec.defaultGroups.abap: LogonGroup erp/nope does not exist"}},
      {"ConflictOlderWinsByTimestamp",
       {StaticLg("erp", "g1"), StaticLg("erp", "g2"),
        // "a" is newer than "b" by creationTimestamp although it sorts first by name.
        Um("erp", "a", "2026-11-30T11:00:00Z",
           {{"rules",
             {{{"prefix", "/sap/"}, {"kind", "abap"}, {"logonGroup", "g1"}},
              {{"prefix", "/only-a/"}, {"kind", "abap"}, {"logonGroup", "g1"}}}}}),
        Um("erp", "b", "2026-11-30T10:00:00Z",
           {{"rules", {{{"prefix", "/sap/"}, {"kind", "abap"}, {"logonGroup", "g2"}}}}})},
       {"rule \"\" /sap/ abap group=erp/g2 src=erp/b",
        "rule \"\" /only-a/ abap group=erp/g1 src=erp/a",
        "vhost \"\" root=java abap= java= src=erp/b", "UrlMapping erp/a Accepted=False Conflicted",
        "UrlMapping erp/b Accepted=True Accepted"},
       {},
       {"rule /sap/ on any host dropped: UrlMapping erp/b (older) defines it"}},
      {"ConflictOnHostDefaults",
       {StaticLg("erp", "diag"), StaticLg("erp", "other"),
        Um("erp", "old", "2026-01-01T00:00:00Z", {{"defaultRootHandler", "j2ee"}}),
        Um("erp", "new", "2026-02-01T00:00:00Z",
           {{"defaultRootHandler", "abap"},
            {"defaultGroups", {{"abap", "other"}}},
            {"rules", {{{"prefix", "/new/"}, {"kind", "abap"}}}}}),
        Um("erp", "quiet", "2026-03-01T00:00:00Z",
           {{"rules", {{{"prefix", "/quiet/"}, {"kind", "java"}}}}})},
       {"vhost \"\" root=java abap=erp/diag java= src=erp/old",
        "rule \"\" /new/ abap group=erp/other src=erp/new",
        "UrlMapping erp/new Accepted=False Conflicted", "UrlMapping erp/old Accepted=True Accepted",
        "UrlMapping erp/quiet Accepted=True Accepted"},
       {},
       {"defaultRootHandler abap, defaultGroups.abap erp/other ignored on any host: UrlMapping "
        "erp/old (older) sets the defaults there"}},
      {"HostsLowercasedAndSeparate",
       {StaticLg("erp", "g"),
        Um("erp", "m", "",
           {{"hosts", {"ERP.Example.com", "*.corp.example"}},
            {"rules", {{{"prefix", "/sap/"}, {"kind", "abap"}, {"logonGroup", "g"}}}}}),
        Um("erp", "any", "", {{"hosts", json::array()}, {"defaultRootHandler", "abap"}})},
       {"vhost \"\" root=abap abap= java= src=erp/any", "rules \"\" 0",
        "vhost \"*.corp.example\" root=java abap= java= src=erp/m",
        "rule \"*.corp.example\" /sap/ abap group=erp/g src=erp/m",
        "rule \"erp.example.com\" /sap/ abap group=erp/g src=erp/m"},
       {},
       {"1 rule, 0 permissions on hosts erp.example.com, *.corp.example"}},
      {"InvalidSpecLeavesMappingOut",
       {Um("erp", "m", "", {{"defaultRootHandler", "cobol"}, {"rules", {{{"prefix", "/sap/"}}}}}),
        Um("erp", "h", "", {{"hosts", {"bad host/"}}, {"rules", {{{"prefix", "/h/"}}}}})},
       {"UrlMapping erp/m Accepted=False InvalidField",
        "UrlMapping erp/h Accepted=False InvalidField"},
       {"vhost ", "rule "},
       {"spec.defaultRootHandler: \"cobol\" is not one of abap, java (or j2ee)",
        "spec.hosts: \"bad host/\" is not a host name or *.suffix"}},
      {"PermissionsConcatenateInAgeOrder",
       {Um("erp", "second", "2026-02-01T00:00:00Z",
           {{"permissions", {{{"action", "deny"}, {"pattern", "*"}}}}}),
        Um("erp", "first", "2026-01-01T00:00:00Z",
           {{"permissions",
             {{{"action", "permit"}, {"pattern", "/sap/bc/public/*"}},
              {{"action", "deny"}, {"pattern", "*.CGI"}},
              {{"action", "deny"}, {"pattern", "/a*b"}},
              {{"action", "allow"}, {"pattern", "/x"}},
              {{"action", "secure"}, {"pattern", "/sap/bc/gui/*"}}}}})},
       {"perms \"\" PERMISSION_ACTION_PERMIT:/sap/bc/public/* PERMISSION_ACTION_DENY:*.cgi "
        "PERMISSION_ACTION_SECURE:/sap/bc/gui/* PERMISSION_ACTION_DENY:*",
        "UrlMapping erp/first Accepted=False InvalidPermission",
        "UrlMapping erp/second Accepted=True Accepted"},
       {},
       {"spec.permissions[2].pattern: \"/a*b\" may hold * only at the start or the end; entry "
        "dropped",
        "spec.permissions[3].action: \"allow\" is not one of permit, deny, secure"}},
      {"SourcesWithGenerations",
       {StaticLg("b", "x"), StaticLg("a", "y"), Um("a", "m", "", json::object()),
        Lg("a", "bad", {{"strategy", "?"}})},
       {"source LogonGroup a/bad gen=1", "source LogonGroup a/y gen=1",
        "source LogonGroup b/x gen=1", "source UrlMapping a/m gen=1"}},
  };
}

INSTANTIATE_TEST_SUITE_P(All, CompileTableTest, testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// Issue 27: the UrlMapping printer columns read status.rules and
// status.hosts ("*" for any host), not spec lists a column cannot show.
TEST(CompileTest, UrlMappingStatusCountsRulesAndListsHosts) {
  CompileResult result = Compile(Objects(
      {StaticLg("erp", "public"),
       Um("erp", "any", "2026-01-01T00:00:00Z",
          {{"rules",
            json::array({{{"prefix", "/sap/"}, {"kind", "abap"}, {"logonGroup", "public"}},
                         {{"prefix", "/irj/"}, {"kind", "abap"}, {"logonGroup", "public"}}})}}),
       Um("erp", "named", "2026-01-01T00:00:00Z",
          {{"hosts", json::array({"b.example.com", "a.example.com"})},
           {"rules",
            json::array({{{"prefix", "/x/"}, {"kind", "abap"}, {"logonGroup", "public"}}})}})}));
  std::map<std::string, const ObjectStatus*> by_name;
  for (const ObjectStatus& status : result.statuses) {
    if (status.kind == "UrlMapping") {
      by_name[status.name] = &status;
    }
  }
  ASSERT_EQ(by_name.size(), 2u);
  EXPECT_EQ(by_name["any"]->rules, 2);
  EXPECT_EQ(by_name["any"]->hosts, "*");
  EXPECT_EQ(by_name["named"]->rules, 1);
  EXPECT_NE(by_name["named"]->hosts.find("a.example.com"), std::string::npos);
  EXPECT_NE(by_name["named"]->hosts.find("b.example.com"), std::string::npos);
}

// What the condition messages quote from objects is escaped: statuses go to
// the API server, `kwd-controller validate` output and log lines.
TEST(CompileTest, ConditionMessagesHoldNoControlCharacters) {
  CompileResult result = Compile(Objects(
      {ServiceLg("erp", "a", {{"name", "svc"}}, {{"strategy", "x\r\ny"}}),
       Slice("erp", "svc-1", "svc", {Ep("10.0.0.1", "p1")}),
       PodJ("erp", "p1", {{"dispatch.kwd.io/instance-name", "A\r\nB"}}),
       Um("erp", "m", "",
          {{"hosts", {"h\n"}},
           {"defaultGroups", {{"abap", "g\r\n"}}},
           {"rules", {{{"prefix", "/x\n/"}}, {{"prefix", "/y/"}, {"logonGroup", "\x1b[2J"}}}},
           {"permissions", {{{"action", "deny\n"}, {"pattern", "/z"}}}}})}));
  int conditions = 0;
  for (const auto& status : result.statuses) {
    for (const auto& condition : status.conditions) {
      ++conditions;
      for (char c : condition.message) {
        EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            << status.name << " " << condition.type << ": " << condition.message;
      }
    }
  }
  EXPECT_EQ(conditions, 4);
  EXPECT_EQ(CheckSnapshot(result.snapshot), std::vector<std::string>{});
}

// Names, hosts, prefixes, patterns, health-check paths and instance names
// are ASCII: a byte >= 0x80 (non-ASCII or invalid UTF-8) anywhere in one,
// even after an otherwise valid start, keeps it out of the snapshot.
TEST(CompileTest, NonAsciiAndInvalidUtf8AreRefusedInEveryField) {
  const std::string bad[] = {"\xff", "\xc3\xa9", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80"};
  for (const std::string& b : bad) {
    SCOPED_TRACE(testing::PrintToString(b));
    CompileResult result = Compile(
        Objects({StaticLg("erp", "a" + b), StaticLg("erp" + b, "c"),
                 Lg("erp", "d",
                    {{"healthCheck", {{"path", "/sap/public/ping" + b}}},
                     {"backend", {{"staticServers", json::array()}}}}),
                 Lg("erp", "e",
                    {{"sessionAffinity", {{"affinityCookie", {{"name", "kwd" + b}}}}},
                     {"backend", {{"staticServers", json::array()}}}}),
                 Lg("erp", "f",
                    {{"backend",
                      {{"staticServers",
                        json::array({{{"name", "s1" + b}, {"address", "10.0.0.1"}, {"port", 1}},
                                     {{"name", "s2"}, {"address", "host" + b}, {"port", 1}}})}}}}),
                 ServiceLg("erp", "g", {{"name", "svc"}}),
                 Slice("erp", "svc-1", "svc", {Ep("10.0.0.2", "p1"), Ep("10.0.0.3", "p2" + b)}),
                 PodJ("erp", "p1", {{"dispatch.kwd.io/instance-name", "i1" + b}}),
                 StaticLg("erp", "diag"), Um("erp", "m", "", {{"hosts", {"erp.example" + b}}}),
                 Um("erp", "n", "",
                    {{"hosts", {"n.example"}},
                     {"rules", {{{"prefix", "/sap" + b + "/"}, {"kind", "abap"}}}},
                     {"permissions", {{{"action", "deny"}, {"pattern", "/x" + b + "*"}}}}})}));
    EXPECT_EQ(CheckSnapshot(result.snapshot), std::vector<std::string>{});
    std::string strings;
    for (const auto& group : result.snapshot.groups()) {
      strings += group.key() + group.health_check().path() +
                 group.session_affinity().affinity_cookie_name();
      for (const auto& server : group.servers()) {
        strings += server.name() + server.address() + server.pod();
      }
    }
    for (const auto& vhost : result.snapshot.virtual_hosts()) {
      strings += vhost.host();
      for (const auto& rule : vhost.rules()) {
        strings += rule.prefix();
      }
      for (const auto& permission : vhost.permissions()) {
        strings += permission.pattern();
      }
    }
    for (const auto& source : result.snapshot.sources()) {
      strings += source.namespace_() + source.name();
    }
    EXPECT_EQ(strings.find(b), std::string::npos) << strings;
    EXPECT_EQ(strings.find(b.substr(0, 1)), std::string::npos) << strings;
    std::vector<std::string> lines = Summary(result);
    for (std::string_view rejected :
         {"LogonGroup erp/d Accepted=False", "LogonGroup erp/e Accepted=False",
          "UrlMapping erp/m Accepted=False", "UrlMapping erp/n Accepted=False"}) {
      EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& line) {
        return line.starts_with(rejected);
      })) << rejected;
    }
  }
}

TEST(CompileTest, SourcesAndStatusesAreSorted) {
  CompileResult result = Compile(Objects({Um("b", "m", "", json::object()), StaticLg("b", "x"),
                                          StaticLg("a", "y"), Um("a", "z", "", json::object())}));
  std::vector<std::string> order;
  for (const auto& s : result.snapshot.sources()) {
    order.push_back(s.kind() + " " + s.namespace_() + "/" + s.name());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"LogonGroup a/y", "LogonGroup b/x", "UrlMapping a/z",
                                             "UrlMapping b/m"}));
  std::vector<std::string> statuses;
  for (const auto& s : result.statuses) {
    statuses.push_back(s.kind + " " + s.namespace_ + "/" + s.name);
  }
  EXPECT_EQ(statuses, order);
}

TEST(CompileTest, GenerationIsReported) {
  json lg = StaticLg("erp", "a");
  lg["metadata"]["generation"] = 7;
  CompileResult result = Compile(Objects({lg}));
  ASSERT_EQ(result.statuses.size(), 1u);
  EXPECT_EQ(result.statuses[0].generation, 7);
  EXPECT_EQ(result.snapshot.sources(0).generation(), 7);
}

// A mixed configuration exercising every kind of object and conflict.
std::vector<json> MixedObjects() {
  std::vector<json> objects = {
      StaticLg("erp", "diag"),
      StaticLg("erp", "j2ee", "java"),
      ServiceLg("erp", "public", {{"name", "svc"}, {"port", "http"}}),
      Lg("erp", "bad", {{"strategy", "nope"}}),
      Slice("erp", "svc-1", "svc", {Ep("10.0.0.1", "p1"), Ep("10.0.0.2", "p2", kDraining)}),
      Slice("erp", "svc-2", "svc", {Ep("10.0.0.1", "p1", kDraining), Ep("10.0.0.3", "p3")}),
      PodJ("erp", "p1", {{"dispatch.kwd.io/instance-name", "erp1_ERP_00"}}),
      PodJ("erp", "p3", {{"dispatch.kwd.io/capacity", "4"}}),
      Um("erp", "a", "2026-01-01T00:00:00Z",
         {{"rules",
           {{{"prefix", "/sap/"}, {"kind", "abap"}, {"logonGroup", "public"}},
            {{"prefix", "/irj/"}, {"kind", "java"}}}},
          {"permissions", {{{"action", "deny"}, {"pattern", "*.cgi"}}}}}),
      Um("erp", "b", "2026-01-01T00:00:00Z",
         {{"rules",
           {{{"prefix", "/sap/"}, {"kind", "abap"}}, {{"prefix", "/b/"}, {"kind", "abap"}}}},
          {"permissions", {{{"action", "permit"}, {"pattern", "/b/*"}}}}}),
      Um("sap", "c", "", {{"hosts", {"Host.Example"}}, {"rules", {{{"prefix", "/c/"}}}}}),
  };
  for (int i = 0; i < 20; ++i) {
    objects.push_back(StaticLg("many", "g" + std::to_string(i)));
  }
  return objects;
}

TEST(CompileTest, InsertOrderDoesNotChangeTheOutput) {
  std::vector<json> objects = MixedObjects();
  CompileResult reference = Compile(Objects(objects));
  ASSERT_EQ(CheckSnapshot(reference.snapshot), std::vector<std::string>{});
  std::string reference_json = SnapshotToJson(reference.snapshot);
  std::mt19937 rng(42);  // fixed seed: a failure reproduces
  for (int round = 0; round < 50; ++round) {
    std::shuffle(objects.begin(), objects.end(), rng);
    CompileResult result = Compile(Objects(objects));
    EXPECT_EQ(result.snapshot.version(), reference.snapshot.version()) << "round " << round;
    EXPECT_EQ(SnapshotToJson(result.snapshot), reference_json) << "round " << round;
    EXPECT_EQ(result.statuses, reference.statuses) << "round " << round;
  }
}

TEST(CompileTest, VersionIsTheContentHashAndChangesWithContent) {
  std::vector<json> objects = MixedObjects();
  CompileResult a = Compile(Objects(objects));
  EXPECT_EQ(a.snapshot.version(), ComputeSnapshotVersion(a.snapshot));
  EXPECT_EQ(a.snapshot.version().size(), 64u);
  objects.push_back(PodJ("erp", "p2", {{"dispatch.kwd.io/capacity", "9"}}));
  CompileResult b = Compile(Objects(objects));
  EXPECT_NE(b.snapshot.version(), a.snapshot.version());
}

// "ns/name" text order is not (namespace, name) order: '-' sorts before '/'
// (the one such character a namespace may hold: an RFC 1123 label).
TEST(CompileTest, GroupsAreInKeyOrderAcrossSimilarNamespaces) {
  CompileResult result = Compile(Objects({StaticLg("erp", "public"), StaticLg("erp-dev", "public"),
                                          StaticLg("erp-a", "a"), StaticLg("erp0", "a")}));
  EXPECT_EQ(CheckSnapshot(result.snapshot), std::vector<std::string>{});
  std::vector<std::string> keys;
  for (const auto& group : result.snapshot.groups()) {
    keys.push_back(group.key());
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"erp-a/a", "erp-dev/public", "erp/public", "erp0/a"}));
  // Statuses stay sorted by namespace, then name.
  ASSERT_EQ(result.statuses.size(), 4u);
  EXPECT_EQ(result.statuses[0].namespace_, "erp");
  EXPECT_EQ(result.statuses[1].namespace_, "erp-a");
  EXPECT_EQ(result.statuses[2].namespace_, "erp-dev");
}


// ---- CompileMemo ----

model::Object Decoded(const json& object) {
  auto decoded = model::DecodeObject(object);
  EXPECT_TRUE(decoded.ok()) << decoded.error;
  return std::move(*decoded.object);
}

json RandomSlice(std::mt19937& rng, const std::string& ns, const std::string& name,
                 const std::string& service) {
  json endpoints = json::array();
  for (int e = 0; e < 4; ++e) {
    json conditions = {{"ready", rng() % 3 != 0}};
    if (!conditions["ready"].get<bool>() && rng() % 2 == 0) {
      conditions = kDraining;
    }
    endpoints.push_back(Ep("10.1." + std::to_string(rng() % 4) + "." + std::to_string(e),
                           "pod-" + std::to_string(rng() % 12), conditions));
  }
  return Slice(ns, name, service, endpoints);
}

// An ObjectSet whose every write is reported to a memo, as the pipeline's
// store does.
struct MemoSet {
  model::ObjectSet set;
  CompileMemo memo;
  void Upsert(const json& object) {
    model::Object decoded = Decoded(object);
    memo.Changed(model::KeyOf(decoded));
    set.Upsert(std::move(decoded));
  }
  void Remove(const model::ObjectKey& key) {
    memo.Changed(key);
    set.Remove(key);
  }
};

json WithGeneration(json object, int generation) {
  object["metadata"]["generation"] = generation;
  return object;
}

const ObjectStatus& StatusOf(const CompileResult& result, const std::string& kind,
                             const std::string& name) {
  for (const auto& status : result.statuses) {
    if (status.kind == kind && status.name == name) {
      return status;
    }
  }
  static const ObjectStatus kNone;
  ADD_FAILURE() << "no status for " << kind << " " << name;
  return kNone;
}

bool HasLine(const CompileResult& result, const std::string& line) {
  auto lines = Summary(result);
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

// An invalid edit keeps the object's last accepted version in the snapshot
// (against the current endpoints) and says Accepted=False; a compile
// without LastGood (validate, compile) stays as it was.
TEST(LastGoodTest, InvalidEditKeepsServingTheLastAcceptedVersion) {
  json slice = Slice("erp", "svc-a", "svc", json::array({Ep("10.0.0.1", "p1")}));
  json good = ServiceLg("erp", "g", {{"name", "svc"}}, {{"strategy", "adaptive"}});
  json mapping = Um("erp", "m", "", {{"rules", {{{"prefix", "/sap/"}, {"logonGroup", "g"}}}}});
  model::ObjectSet objects = Objects({slice, good, mapping});
  LastGood last_good;
  CompileResult first = Compile(objects, &last_good);
  EXPECT_EQ(UpdateLastGood(objects, first, &last_good).size(), 2u);
  ASSERT_EQ(first.snapshot.groups_size(), 1);

  // strategy: fastest_first, and a second endpoint meanwhile.
  json bad =
      WithGeneration(ServiceLg("erp", "g", {{"name", "svc"}}, {{"strategy", "fastest_first"}}), 2);
  json bad_mapping = WithGeneration(
      Um("erp", "m", "", {{"rules", {{{"prefix", "sap"}, {"logonGroup", "g"}}}}}), 2);
  objects.Upsert(Decoded(bad));
  objects.Upsert(Decoded(bad_mapping));
  objects.Upsert(Decoded(
      Slice("erp", "svc-a", "svc", json::array({Ep("10.0.0.1", "p1"), Ep("10.0.0.2", "p2")}))));

  CompileResult without = Compile(objects);
  EXPECT_EQ(without.snapshot.groups_size(), 0);
  EXPECT_FALSE(HasLine(without, "rule \"\" /sap/ abap group=erp/g src=erp/m"));

  CompileResult kept = Compile(objects, &last_good);
  ASSERT_EQ(kept.snapshot.groups_size(), 1);
  EXPECT_EQ(kept.snapshot.groups(0).strategy(), v1::STRATEGY_ADAPTIVE);
  EXPECT_EQ(kept.snapshot.groups(0).servers_size(), 2);  // the current endpoints
  EXPECT_TRUE(HasLine(kept, "rule \"\" /sap/ abap group=erp/g src=erp/m"));
  const ObjectStatus& group = StatusOf(kept, "LogonGroup", "g");
  EXPECT_TRUE(group.serving_last_good);
  EXPECT_EQ(group.generation, 2);
  EXPECT_EQ(group.ready_servers, 2);
  ASSERT_NE(group.Find(kAccepted), nullptr);
  EXPECT_EQ(group.Find(kAccepted)->status, "False");
  EXPECT_EQ(group.Find(kAccepted)->reason, kReasonInvalidStrategy);
  EXPECT_NE(
      group.Find(kAccepted)->message.find(
          "\"fastest_first\" is not one of weighted_round_robin, simple_weighted_round_robin, "
          "adaptive; serving the last accepted version (generation 1)"),
      std::string::npos)
      << group.Find(kAccepted)->message;
  const ObjectStatus& map = StatusOf(kept, "UrlMapping", "m");
  EXPECT_TRUE(map.serving_last_good);
  EXPECT_EQ(map.Find(kAccepted)->reason, kReasonInvalidRule);
  EXPECT_EQ(CountRejected(kept, "LogonGroup"), 1u);
  EXPECT_EQ(CountRejected(kept, "UrlMapping"), 1u);
  // A rejected version is never remembered.
  EXPECT_TRUE(UpdateLastGood(objects, kept, &last_good).empty());

  // The memo gives the same.
  CompileMemo memo;
  CompileResult memoized = Compile(objects, memo, &last_good);
  EXPECT_EQ(SnapshotToJson(memoized.snapshot), SnapshotToJson(kept.snapshot));
  EXPECT_EQ(memoized.statuses, kept.statuses);

  // Deleted, then created again invalid: never valid, so absent.
  objects.Remove({"LogonGroup", "erp", "g"});
  CompileResult gone = Compile(objects, &last_good);
  EXPECT_EQ(UpdateLastGood(objects, gone, &last_good).size(), 1u);
  objects.Upsert(Decoded(bad));
  CompileResult again = Compile(objects, &last_good);
  EXPECT_EQ(again.snapshot.groups_size(), 0);
  EXPECT_FALSE(StatusOf(again, "LogonGroup", "g").serving_last_good);
}

// Every step: one random change, then a compile with the memo must give
// exactly what a compile without it gives.
TEST(CompileMemoTest, SameOutputAsWithoutAMemoOverRandomChanges) {
  std::mt19937 rng(7);  // fixed seed: a failure reproduces
  const std::vector<std::string> namespaces = {"erp", "erp-dev"};
  MemoSet objects;
  auto group = [&](const std::string& ns, const std::string& g, const std::string& svc) {
    objects.Upsert(ServiceLg(
        ns, "g" + g, {{"name", "svc" + svc}, {"port", "http"}},
        {{"strategy", rng() % 2 ? "adaptive" : "weighted_round_robin"},
         {"defaultCapacity", 1 + rng() % 3}}));
  };
  for (const auto& ns : namespaces) {
    for (int g = 0; g < 3; ++g) {
      group(ns, std::to_string(g), std::to_string(g));
      objects.Upsert(RandomSlice(rng, ns, "svc" + std::to_string(g) + "-a",
                                 "svc" + std::to_string(g)));
    }
    for (int p = 0; p < 12; p += 2) {
      objects.Upsert(PodJ(ns, "pod-" + std::to_string(p),
                          {{"dispatch.kwd.io/capacity", std::to_string(1 + p % 3)}}));
    }
  }
  objects.Upsert(StaticLg("erp", "static"));
  objects.Upsert(Um("erp", "map", "", {{"rules", {{{"prefix", "/sap/"}, {"logonGroup", "g0"}}}}}));

  std::set<std::string> kinds_seen;
  for (int step = 0; step < 400; ++step) {
    const std::string& ns = namespaces[rng() % namespaces.size()];
    const std::string g = std::to_string(rng() % 3);
    std::string change;
    switch (rng() % 12) {
      case 0:
      case 1:
        change = "slice";
        objects.Upsert(RandomSlice(rng, ns, "svc" + g + "-a", "svc" + g));
        break;
      case 2:
        change = "second slice";
        objects.Upsert(RandomSlice(rng, ns, "svc" + g + "-b", "svc" + g));
        break;
      case 3:
        change = "slice gone";
        objects.Remove({"EndpointSlice", ns, "svc" + g + "-" + (rng() % 2 ? "a" : "b")});
        break;
      case 4:
        change = "pod capacity";
        objects.Upsert(PodJ(ns, "pod-" + std::to_string(rng() % 12),
                            {{"dispatch.kwd.io/capacity", std::to_string(1 + rng() % 5)},
                             {"dispatch.kwd.io/instance-name", "i" + std::to_string(rng() % 6)}}));
        break;
      case 5:
        change = "pod gone";
        objects.Remove({"Pod", ns, "pod-" + std::to_string(rng() % 12)});
        break;
      case 6:
        change = "slice moves to another service";
        objects.Upsert(
            RandomSlice(rng, ns, "svc" + g + "-a", "svc" + std::to_string(rng() % 4)));
        break;
      case 7: {
        change = "slice loses its service label";
        json slice = RandomSlice(rng, ns, "svc" + g + "-b", "svc" + g);
        slice["metadata"].erase("labels");
        objects.Upsert(slice);
        break;
      }
      case 8:
        change = "group gone";
        objects.Remove({"LogonGroup", ns, "g" + g});
        break;
      case 9:
        change = "group (back) on another service";
        group(ns, g, std::to_string(rng() % 4));
        break;
      case 10:
        change = "url mapping";
        objects.Upsert(Um("erp", "map", "",
                          {{"rules", {{{"prefix", "/sap/"}, {"logonGroup", "g" + g}}}}}));
        break;
      default:
        change = "group spec";
        group(ns, g, g);
        break;
    }
    kinds_seen.insert(change);
    CompileResult memoized = Compile(objects.set, objects.memo);
    CompileResult fresh = Compile(objects.set);
    ASSERT_EQ(SnapshotToJson(memoized.snapshot), SnapshotToJson(fresh.snapshot))
        << "step " << step << ": " << change;
    ASSERT_EQ(memoized.snapshot.version(), fresh.snapshot.version()) << step;
    ASSERT_EQ(memoized.statuses, fresh.statuses) << "step " << step << ": " << change;
  }
  EXPECT_EQ(kinds_seen.size(), 11u);  // every kind of change happened
  // Most groups are reused on most steps.
  EXPECT_GT(objects.memo.groups_reused(), 4 * objects.memo.groups_compiled());
}

TEST(CompileMemoTest, OnlyTheGroupsAChangeTouchesAreCompiledAgain) {
  MemoSet objects;
  for (int g = 0; g < 5; ++g) {
    std::string svc = "svc" + std::to_string(g);
    objects.Upsert(ServiceLg("erp", "g" + std::to_string(g), {{"name", svc}, {"port", "http"}}));
    objects.Upsert(Slice("erp", svc + "-a", svc,
                         {Ep("10.0.0." + std::to_string(g), "p" + std::to_string(g))}));
  }
  CompileMemo& memo = objects.memo;
  Compile(objects.set, memo);
  EXPECT_EQ(memo.groups_compiled(), 5u);
  EXPECT_EQ(memo.groups_reused(), 0u);
  Compile(objects.set, memo);  // nothing changed
  EXPECT_EQ(memo.groups_compiled(), 5u);
  EXPECT_EQ(memo.groups_reused(), 5u);

  // A pod that an endpoint of g3 names appears: only g3 is compiled again.
  objects.Upsert(PodJ("erp", "p3", {{"dispatch.kwd.io/capacity", "4"}}));
  CompileResult result = Compile(objects.set, memo);
  EXPECT_EQ(memo.groups_compiled(), 6u);
  ASSERT_EQ(result.snapshot.groups_size(), 5);
  EXPECT_EQ(result.snapshot.groups(3).servers(0).capacity(), 4u);

  // A new slice of g1's Service: only g1.
  objects.Upsert(Slice("erp", "svc1-b", "svc1", {Ep("10.0.1.1", "")}));
  CompileResult second = Compile(objects.set, memo);
  EXPECT_EQ(memo.groups_compiled(), 7u);
  EXPECT_EQ(second.snapshot.groups(1).servers_size(), 2);

  // A slice of a Service no group uses, and an unrelated pod: none.
  objects.Upsert(Slice("erp", "other-a", "other", {Ep("10.0.9.1", "p9")}));
  objects.Upsert(PodJ("erp", "p9", {}));
  Compile(objects.set, memo);
  EXPECT_EQ(memo.groups_compiled(), 7u);

  // g0's slice moves to g2's Service: both.
  objects.Upsert(Slice("erp", "svc0-a", "svc2", {Ep("10.0.0.0", "p0")}));
  CompileResult third = Compile(objects.set, memo);
  EXPECT_EQ(memo.groups_compiled(), 9u);
  EXPECT_EQ(third.snapshot.groups(0).servers_size(), 0);
  EXPECT_EQ(third.snapshot.groups(2).servers_size(), 2);

  // ChangedAll: everything again.
  memo.ChangedAll();
  Compile(objects.set, memo);
  EXPECT_EQ(memo.groups_compiled(), 14u);
}

// TLS passthrough: spec.passthroughGroup goes to every host's virtual host; a
// missing group is ResolvedRefs=False like a rule's; clientIP affinity
// compiles its mask, and a mask that is not contiguous rejects the group.
TEST(CompileTest, PassthroughGroupAndClientIpAffinity) {
  json sticky = StaticLg("erp", "tls");
  sticky["spec"]["sessionAffinity"] = {
      {"clientIP", {{"mask", "255.255.255.0"}, {"maxEntries", 10}}}};
  json holes = StaticLg("erp", "holes");
  holes["spec"]["sessionAffinity"] = {{"clientIP", {{"mask", "255.0.255.0"}}}};
  CompileResult result = Compile(Objects(
      {sticky, holes, StaticLg("erp", "plain"),
       Um("erp", "a", "", {{"hosts", {"a.example.com", "*.b.example.com"}},
                           {"passthroughGroup", "tls"}}),
       Um("erp", "m", "", {{"hosts", {"m.example.com"}}, {"passthroughGroup", "missing"}})}));
  std::map<std::string, std::string> passthrough;
  for (const auto& vhost : result.snapshot.virtual_hosts()) {
    passthrough[vhost.host()] = vhost.passthrough_group();
  }
  EXPECT_EQ(passthrough["a.example.com"], "erp/tls");
  EXPECT_EQ(passthrough["*.b.example.com"], "erp/tls");
  EXPECT_EQ(passthrough["m.example.com"], "");
  bool tls_seen = false;
  bool holes_seen = false;
  for (const auto& group : result.snapshot.groups()) {
    if (group.key() == "erp/tls") {
      tls_seen = true;
      const auto& client_ip = group.session_affinity().client_ip();
      EXPECT_TRUE(client_ip.enabled());
      EXPECT_EQ(client_ip.ipv4_mask(), 0xFFFFFF00u);
      EXPECT_EQ(client_ip.max_entries(), 10u);
      EXPECT_EQ(client_ip.idle_timeout_seconds(), 3600u);
    } else if (group.key() == "erp/plain") {
      EXPECT_FALSE(group.session_affinity().client_ip().enabled());
    } else if (group.key() == "erp/holes") {
      holes_seen = true;
    }
  }
  EXPECT_TRUE(tls_seen);
  EXPECT_FALSE(holes_seen);
  bool unresolved = false;
  bool bad_mask = false;
  for (const auto& status : result.statuses) {
    for (const auto& condition : status.conditions) {
      if (status.name == "m" && condition.type == "ResolvedRefs" && condition.status == "False" &&
          condition.message.find("spec.passthroughGroup: LogonGroup erp/missing does not exist") !=
              std::string::npos) {
        unresolved = true;
      }
      if (status.name == "holes" && condition.message.find("spec.sessionAffinity.clientIP.mask") !=
                                        std::string::npos) {
        bad_mask = true;
      }
    }
  }
  EXPECT_TRUE(unresolved);
  EXPECT_TRUE(bad_mask);
  EXPECT_EQ(CheckSnapshot(result.snapshot), std::vector<std::string>{});
}

// UrlMapping.spec.sapHeaders: each rule carries its mapping's switches, a
// host's root and default groups those of the mapping that set its
// defaults; a switch left out stays unspecified (the proxy decides by the
// group's kind). A newer mapping on the same host asking for other switches
// is told that its own rules keep them.
TEST(CompileTest, SapHeadersFollowTheirMapping) {
  CompileResult result =
      Compile(Objects({StaticLg("erp", "abap"), StaticLg("erp", "java", "java"),
                       Um("erp", "a", "2026-01-01T00:00:00Z",
                          {{"defaultGroups", {{"abap", "abap"}, {"java", "java"}}},
                           {"sapHeaders", {{"clientProtocol", false}}},
                           {"rules", json::array({{{"prefix", "/sap/"}, {"kind", "abap"}}})}}),
                       Um("erp", "b", "2026-01-02T00:00:00Z",
                          {{"sapHeaders", {{"clientProtocol", true}, {"accessPoints", false}}},
                           {"rules", json::array({{{"prefix", "/irj/"}, {"kind", "java"}}})}}),
                       Um("erp", "c", "2026-01-03T00:00:00Z",
                          {{"hosts", {"c.example.com"}},
                           {"rules", json::array({{{"prefix", "/sap/"}, {"kind", "abap"}}})}})}));
  std::map<std::string, v1::SapHeaders> by_rule;
  std::map<std::string, v1::SapHeaders> by_host;
  for (const auto& vhost : result.snapshot.virtual_hosts()) {
    by_host[vhost.host()] = vhost.sap_headers();
    for (const auto& rule : vhost.rules()) {
      by_rule[vhost.host() + rule.prefix()] = rule.sap_headers();
    }
  }
  EXPECT_EQ(by_rule["/sap/"].client_protocol(), v1::SAP_HEADER_SWITCH_OFF);
  EXPECT_EQ(by_rule["/sap/"].access_points(), v1::SAP_HEADER_SWITCH_UNSPECIFIED);
  EXPECT_EQ(by_rule["/irj/"].client_protocol(), v1::SAP_HEADER_SWITCH_ON);
  EXPECT_EQ(by_rule["/irj/"].access_points(), v1::SAP_HEADER_SWITCH_OFF);
  EXPECT_EQ(by_rule["c.example.com/sap/"].client_protocol(), v1::SAP_HEADER_SWITCH_UNSPECIFIED);
  // Any host's defaults are a's (the older); b is told.
  EXPECT_EQ(by_host[""].client_protocol(), v1::SAP_HEADER_SWITCH_OFF);
  EXPECT_EQ(by_host["c.example.com"].client_protocol(), v1::SAP_HEADER_SWITCH_UNSPECIFIED);
  std::string messages = AllMessages(result);
  EXPECT_NE(messages.find("UrlMapping erp/b Accepted: spec.sapHeaders ignored for the root rule "
                          "and default groups on any host: UrlMapping erp/a (older)"),
            std::string::npos)
      << messages;
  EXPECT_EQ(messages.find("UrlMapping erp/c Accepted: spec.sapHeaders"), std::string::npos)
      << messages;
  EXPECT_EQ(CheckSnapshot(result.snapshot), std::vector<std::string>{});
}

// UrlMapping.spec.secureAction and spec.hsts reach the snapshot: the secure
// entries of a redirect mapping carry the flag (others not), every rule of
// the mapping its HSTS, the host's defaults the owner's; a newer mapping on
// the host asking for another HSTS is told that its own rules keep it.
TEST(CompileTest, SecureActionAndHstsReachTheSnapshot) {
  CompileResult result = Compile(Objects(
      {StaticLg("erp", "abap"), StaticLg("erp", "java", "java"),
       Um("erp", "a", "2026-01-01T00:00:00Z",
          {{"defaultGroups", {{"abap", "abap"}, {"java", "java"}}},
           {"secureAction", "redirect"},
           {"hsts", {{"maxAgeSeconds", 600}, {"includeSubDomains", true}}},
           {"rules", json::array({{{"prefix", "/sap/"}, {"kind", "abap"}}})},
           {"permissions", json::array({{{"action", "secure"}, {"pattern", "/sap/bc/gui/*"}},
                                        {{"action", "permit"}, {"pattern", "/sap/*"}}})}}),
       Um("erp", "b", "2026-01-02T00:00:00Z",
          {{"hsts", {{"maxAgeSeconds", 0}}},
           {"rules", json::array({{{"prefix", "/irj/"}, {"kind", "java"}}})},
           {"permissions", json::array({{{"action", "secure"}, {"pattern", "/irj/*"}}})}}),
       Um("erp", "c", "2026-01-03T00:00:00Z",
          {{"hosts", {"c.example.com"}},
           {"secureAction", "forbid"},
           {"rules", json::array({{{"prefix", "/sap/"}, {"kind", "abap"}}})},
           {"permissions", json::array({{{"action", "secure"}, {"pattern", "/*"}}})}})}));
  std::map<std::string, const v1::Rule*> rules;
  std::map<std::string, const v1::VirtualHost*> hosts;
  for (const auto& vhost : result.snapshot.virtual_hosts()) {
    hosts[vhost.host()] = &vhost;
    for (const auto& rule : vhost.rules()) {
      rules[vhost.host() + rule.prefix()] = &rule;
    }
  }
  ASSERT_EQ(hosts.size(), 2u);
  ASSERT_TRUE(rules["/sap/"]->has_hsts());
  EXPECT_EQ(rules["/sap/"]->hsts().max_age_seconds(), 600u);
  EXPECT_TRUE(rules["/sap/"]->hsts().include_subdomains());
  EXPECT_FALSE(rules["/sap/"]->hsts().preload());
  ASSERT_TRUE(rules["/irj/"]->has_hsts());  // b's own rule keeps b's
  EXPECT_EQ(rules["/irj/"]->hsts().max_age_seconds(), 0u);
  EXPECT_FALSE(rules["c.example.com/sap/"]->has_hsts());
  ASSERT_TRUE(hosts[""]->has_hsts());  // the defaults' owner's: a
  EXPECT_EQ(hosts[""]->hsts().max_age_seconds(), 600u);
  EXPECT_FALSE(hosts["c.example.com"]->has_hsts());

  const auto& any_permissions = hosts[""]->permissions();
  ASSERT_EQ(any_permissions.size(), 3);
  EXPECT_EQ(any_permissions[0].pattern(), "/sap/bc/gui/*");
  EXPECT_TRUE(any_permissions[0].redirect_to_https());   // a: redirect
  EXPECT_FALSE(any_permissions[1].redirect_to_https());  // a permit entry
  EXPECT_EQ(any_permissions[2].pattern(), "/irj/*");
  EXPECT_FALSE(any_permissions[2].redirect_to_https());  // b: forbid by default
  ASSERT_EQ(hosts["c.example.com"]->permissions().size(), 1);
  EXPECT_FALSE(hosts["c.example.com"]->permissions(0).redirect_to_https());

  std::string messages = AllMessages(result);
  EXPECT_NE(messages.find("UrlMapping erp/b Accepted: spec.hsts ignored for the root rule and "
                          "default groups on any host: UrlMapping erp/a (older)"),
            std::string::npos)
      << messages;
  EXPECT_NE(messages.find("UrlMapping erp/a Accepted: 1 rule, 2 permissions on any host; secure "
                          "entries redirect plain http to https; HSTS max-age=600"),
            std::string::npos)
      << messages;
  EXPECT_EQ(CheckSnapshot(result.snapshot), std::vector<std::string>{});
}

// Invalid values reject the mapping (nothing of it is served) with a message
// naming the field and the allowed values; the edges pass.
TEST(CompileTest, SecureActionAndHstsAreChecked) {
  struct Case {
    json extra;
    std::string message;  // empty: accepted
  };
  const Case cases[] = {
      {{{"secureAction", "https"}},
       "spec.secureAction: \"https\" is not one of forbid, redirect"},
      {{{"secureAction", "Redirect"}},
       "spec.secureAction: \"Redirect\" is not one of forbid, redirect"},
      {{{"hsts", {{"maxAgeSeconds", -1}}}},
       "spec.hsts.maxAgeSeconds: must be an integer from 0 to 63072000 (two years; 0 tells "
       "browsers to forget the host), got -1"},
      {{{"hsts", {{"maxAgeSeconds", 63072001}}}}, "got 63072001"},
      {{{"hsts", {{"preload", true}, {"includeSubDomains", false}}}},
       "spec.hsts.preload: true requires includeSubDomains: true and maxAgeSeconds >= 31536000 "
       "(the HSTS preload list's rules), got includeSubDomains: false, maxAgeSeconds: 31536000"},
      {{{"hsts", {{"preload", true}, {"includeSubDomains", true}, {"maxAgeSeconds", 31535999}}}},
       "got includeSubDomains: true, maxAgeSeconds: 31535999"},
      {{{"hsts", {{"max-age", 5}}}}, "spec.hsts"},
      {{{"hsts", {{"preload", true}, {"includeSubDomains", true}, {"maxAgeSeconds", 31536000}}}},
       ""},
      {{{"hsts", {{"maxAgeSeconds", 63072000}}}}, ""},
      {{{"hsts", {{"maxAgeSeconds", 0}}}}, ""},
      {{{"hsts", json::object()}}, ""},  // a year by default
      {{{"secureAction", "forbid"}}, ""},
  };
  for (const Case& c : cases) {
    json spec = {{"defaultGroups", {{"abap", "abap"}}},
                 {"rules", json::array({{{"prefix", "/sap/"}, {"kind", "abap"}}})}};
    spec.update(c.extra);
    CompileResult result =
        Compile(Objects({StaticLg("erp", "abap"), Um("erp", "m", "2026-01-01T00:00:00Z", spec)}));
    std::string messages = AllMessages(result);
    const ObjectStatus* status = nullptr;
    for (const auto& st : result.statuses) {
      if (st.kind == "UrlMapping") {
        status = &st;
      }
    }
    ASSERT_NE(status, nullptr);
    if (c.message.empty()) {
      EXPECT_EQ(status->Find(kAccepted)->status, "True") << c.extra.dump() << "\n" << messages;
      ASSERT_EQ(result.snapshot.virtual_hosts_size(), 1) << c.extra.dump();
      if (c.extra.contains("hsts")) {
        const v1::Rule& rule = result.snapshot.virtual_hosts(0).rules(0);
        ASSERT_TRUE(rule.has_hsts());
        EXPECT_EQ(rule.hsts().max_age_seconds(),
                  c.extra["hsts"].value("maxAgeSeconds", 31536000)) << c.extra.dump();
      }
    } else {
      EXPECT_EQ(status->Find(kAccepted)->status, "False") << c.extra.dump();
      EXPECT_NE(messages.find(c.message), std::string::npos)
          << c.extra.dump() << "\nmessages:\n" << messages;
      EXPECT_EQ(result.snapshot.virtual_hosts_size(), 0) << c.extra.dump();
    }
  }
}

// secureAction: redirect without a secure entry does nothing: said, not rejected.
TEST(CompileTest, SecureRedirectWithoutSecureEntriesIsNoted) {
  CompileResult result = Compile(Objects(
      {StaticLg("erp", "abap"),
       Um("erp", "m", "", {{"secureAction", "redirect"},
                           {"defaultGroups", {{"abap", "abap"}}},
                           {"permissions", json::array({{{"action", "deny"}, {"pattern", "*.cgi"}}})}})}));
  std::string messages = AllMessages(result);
  EXPECT_NE(messages.find("spec.secureAction: redirect has no effect: spec.permissions has no "
                          "secure entry"),
            std::string::npos)
      << messages;
  EXPECT_EQ(result.snapshot.virtual_hosts_size(), 1);
}

}  // namespace
}  // namespace kwd::compile

namespace kwd::compile {
namespace {

// spec.modifications: SAP's rule text and the structured form compile to
// the same rule text, in order, with the mapping as their source.
TEST(ModificationsCompileTest, TextAndStructuredFormsCompileToOneForm) {
  json mapping = Um(
      "erp", "m", "",
      {{"hosts", {"erp.example.com"}},
       {"modifications",
        {{{"rules", "# force HTTPS\nif %{SERVER_PROTOCOL} !stricmp https\n"
                    "RegRedirectUrl ^(.*)$ https://%{HTTP_HOST}$1 [CODE=permanent]\n"}},
         {{"prefix", "/Legacy/"},
          {"actions",
           {{{"op", "RegIRewriteUrl"},
             {"pattern", "^/legacy/(.*)"},
             {"replacement", "/sap/bc/$1"},
             {"options", {"break"}}},
            {{"op", "SetHeader"}, {"header", "X-Note"}, {"value", "a b"}}}}}}}});
  model::Object decoded = Decoded(mapping);
  const auto& um = std::get<model::UrlMapping>(decoded);
  std::vector<v1::Modification> out;
  internal::Findings findings;
  ASSERT_TRUE(internal::CompileModifications(um, "erp/m", &out, findings));
  EXPECT_FALSE(findings.rejected());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].prefix(), "/");
  EXPECT_EQ(out[0].source(), "erp/m");
  EXPECT_EQ(out[1].prefix(), "/legacy/");
  EXPECT_EQ(out[1].index(), 1);
  EXPECT_EQ(out[1].rules(),
            "RegIRewriteUrl ^/legacy/(.*) /sap/bc/$1 [break]\nSetHeader X-Note \"a b\"\n");
}

// kwd-proxy applies modification rules: valid rules are accepted and reach
// the snapshot on every host of the mapping, oldest mapping first.
TEST(ModificationsCompileTest, ValidRulesAreAcceptedAndReachTheSnapshot) {
  json older = Um("erp", "a", "2026-01-01T00:00:00Z",
                  {{"hosts", {"erp.example.com"}},
                   {"rules", {{{"prefix", "/sap/"}}}},
                   {"modifications", {{{"rules", "RegIForbiddenUrl !^/sap/(.*) -\n"}}}}});
  json newer = Um("erp", "b", "2026-02-01T00:00:00Z",
                  {{"hosts", {"erp.example.com"}},
                   {"modifications", {{{"prefix", "/SAP/"}, {"rules", "SetHeader X-B 1\n"}}}}});
  CompileResult result = Compile(Objects({StaticLg("erp", "diag"), newer, older}));
  for (const char* name : {"a", "b"}) {
    const Condition* accepted = StatusOf(result, "UrlMapping", name).Find(kAccepted);
    ASSERT_NE(accepted, nullptr);
    EXPECT_EQ(accepted->status, "True") << name << ": " << accepted->message;
    EXPECT_EQ(accepted->reason, kReasonAccepted);
    EXPECT_NE(accepted->message.find("1 modification rule file"), std::string::npos)
        << accepted->message;
  }
  ASSERT_EQ(result.snapshot.virtual_hosts_size(), 1);
  const v1::VirtualHost& vhost = result.snapshot.virtual_hosts(0);
  ASSERT_EQ(vhost.modifications_size(), 2);
  EXPECT_EQ(vhost.modifications(0).source(), "erp/a");
  EXPECT_EQ(vhost.modifications(0).prefix(), "/");
  EXPECT_EQ(vhost.modifications(0).rules(), "RegIForbiddenUrl !^/sap/(.*) -\n");
  EXPECT_EQ(vhost.modifications(1).source(), "erp/b");
  EXPECT_EQ(vhost.modifications(1).prefix(), "/sap/");
  EXPECT_TRUE(CheckSnapshot(result.snapshot).empty());
}

// spec.system.sid: each mapping on a host naming a SID gets its own routes
// there (its defaults and rules), without conflicting with the host's owner;
// the owner (oldest) also serves the requests no rule gives a SID.
TEST(SystemSelectionCompileTest, MappingsNamingSidsGetTheirOwnRoutes) {
  json erp = Um("erp", "erp", "2026-01-01T00:00:00Z",
                {{"hosts", {"sap.example.com"}},
                 {"system", {{"sid", "ERP"}}},
                 {"defaultGroups", {{"abap", "erp"}}},
                 {"rules", {{{"prefix", "/sap/"}, {"logonGroup", "erp"}}}}});
  json qas = Um("erp", "qas", "2026-02-01T00:00:00Z",
                {{"hosts", {"sap.example.com"}},
                 {"system", {{"sid", "QAS"}}},
                 {"defaultGroups", {{"abap", "qas"}}},
                 {"rules", {{{"prefix", "/sap/"}, {"logonGroup", "qas"}},
                            {{"prefix", "/irj/"}, {"kind", "java"}, {"logonGroup", "qas"}}}}});
  CompileResult result =
      Compile(Objects({StaticLg("erp", "erp"), StaticLg("erp", "qas"), qas, erp}));
  for (const char* name : {"erp", "qas"}) {
    const Condition* accepted = StatusOf(result, "UrlMapping", name).Find(kAccepted);
    ASSERT_NE(accepted, nullptr);
    EXPECT_EQ(accepted->status, "True") << name << ": " << accepted->message;
  }
  ASSERT_EQ(result.snapshot.virtual_hosts_size(), 1);
  const v1::VirtualHost& vhost = result.snapshot.virtual_hosts(0);
  // The shared table is the owner's: QAS's /irj/ is reached by its SID only.
  EXPECT_EQ(vhost.default_abap_group(), "erp/erp");
  ASSERT_EQ(vhost.rules_size(), 1);
  EXPECT_EQ(vhost.rules(0).group(), "erp/erp");
  ASSERT_EQ(vhost.systems_size(), 2);
  EXPECT_EQ(vhost.systems(0).sid(), "ERP");
  EXPECT_EQ(vhost.systems(0).source(), "erp/erp");
  EXPECT_EQ(vhost.systems(1).sid(), "QAS");
  EXPECT_EQ(vhost.systems(1).default_abap_group(), "erp/qas");
  ASSERT_EQ(vhost.systems(1).rules_size(), 2);
  EXPECT_EQ(vhost.systems(1).rules(0).prefix(), "/irj/");
  EXPECT_EQ(vhost.systems(1).rules(1).prefix(), "/sap/");
  EXPECT_TRUE(CheckSnapshot(result.snapshot).empty());
}

// spec.hsts: a system's routes carry their mapping's, its defaults (root
// URL, default groups) as well as its rules. One mapping per SID and host
// owns the system's routes there; a newer one naming the same SID there is
// Conflicted, and its hsts does not apply to them.
TEST(SystemSelectionCompileTest, EachSystemsRoutesCarryItsMappingsHsts) {
  json erp = Um("erp", "erp", "2026-01-01T00:00:00Z",
                {{"hosts", {"sap.example.com"}},
                 {"system", {{"sid", "ERP"}}},
                 {"defaultGroups", {{"abap", "erp"}}},
                 {"hsts", {{"maxAgeSeconds", 300}}},
                 {"rules", {{{"prefix", "/sap/"}, {"logonGroup", "erp"}}}}});
  json qas = Um("erp", "qas", "2026-02-01T00:00:00Z",
                {{"hosts", {"sap.example.com"}},
                 {"system", {{"sid", "QAS"}}},
                 {"defaultGroups", {{"abap", "qas"}}},
                 {"hsts", {{"maxAgeSeconds", 900}, {"includeSubDomains", true}}},
                 {"rules", {{{"prefix", "/sap/"}, {"logonGroup", "qas"}}}}});
  json qas2 = Um("erp", "qas2", "2026-03-01T00:00:00Z",
                 {{"hosts", {"sap.example.com"}},
                  {"system", {{"sid", "QAS"}}},
                  {"hsts", {{"maxAgeSeconds", 60}}}});
  json prd = Um("erp", "prd", "2026-04-01T00:00:00Z",
                {{"hosts", {"sap.example.com"}},
                 {"system", {{"sid", "PRD"}}},
                 {"defaultGroups", {{"abap", "qas"}}}});
  CompileResult result =
      Compile(Objects({StaticLg("erp", "erp"), StaticLg("erp", "qas"), qas2, prd, qas, erp}));
  const Condition* conflicted = StatusOf(result, "UrlMapping", "qas2").Find(kAccepted);
  ASSERT_NE(conflicted, nullptr);
  EXPECT_EQ(conflicted->reason, kReasonConflicted) << conflicted->message;
  ASSERT_EQ(result.snapshot.virtual_hosts_size(), 1);
  const v1::VirtualHost& vhost = result.snapshot.virtual_hosts(0);
  EXPECT_EQ(vhost.hsts().max_age_seconds(), 300u);
  ASSERT_EQ(vhost.systems_size(), 3);
  const v1::SystemRoute& erp_route = vhost.systems(0);
  const v1::SystemRoute& prd_route = vhost.systems(1);
  const v1::SystemRoute& qas_route = vhost.systems(2);
  EXPECT_EQ(erp_route.sid(), "ERP");
  ASSERT_TRUE(erp_route.has_hsts());
  EXPECT_EQ(erp_route.hsts().max_age_seconds(), 300u);
  EXPECT_EQ(qas_route.sid(), "QAS");
  EXPECT_EQ(qas_route.source(), "erp/qas");
  ASSERT_TRUE(qas_route.has_hsts());
  EXPECT_EQ(qas_route.hsts().max_age_seconds(), 900u);
  EXPECT_TRUE(qas_route.hsts().include_subdomains());
  ASSERT_EQ(qas_route.rules_size(), 1);
  EXPECT_EQ(qas_route.rules(0).hsts().max_age_seconds(), 900u);
  EXPECT_EQ(prd_route.sid(), "PRD");
  EXPECT_FALSE(prd_route.has_hsts());
  EXPECT_TRUE(CheckSnapshot(result.snapshot).empty());
}

TEST(SystemSelectionCompileTest, BadAndDuplicateSidsAreReported) {
  json bad = Um("erp", "bad", "2026-01-01T00:00:00Z",
                {{"hosts", {"a.example.com"}}, {"system", {{"sid", "erp"}}}});
  json first = Um("erp", "first", "2026-01-01T00:00:00Z",
                  {{"hosts", {"b.example.com"}}, {"system", {{"sid", "ERP"}}}});
  json second = Um("erp", "second", "2026-02-01T00:00:00Z",
                   {{"hosts", {"b.example.com"}}, {"system", {{"sid", "ERP"}}}});
  CompileResult result = Compile(Objects({StaticLg("erp", "diag"), bad, first, second}));
  const Condition* invalid = StatusOf(result, "UrlMapping", "bad").Find(kAccepted);
  ASSERT_NE(invalid, nullptr);
  EXPECT_EQ(invalid->reason, kReasonInvalidField);
  EXPECT_NE(invalid->message.find("spec.system.sid: \"erp\" is not a SAP system ID"),
            std::string::npos)
      << invalid->message;
  const Condition* conflicted = StatusOf(result, "UrlMapping", "second").Find(kAccepted);
  ASSERT_NE(conflicted, nullptr);
  EXPECT_EQ(conflicted->reason, kReasonConflicted);
  EXPECT_NE(conflicted->message.find("spec.system.sid ERP ignored on host b.example.com: "
                                     "UrlMapping erp/first (older) is system ERP there"),
            std::string::npos)
      << conflicted->message;
}

// A rule file that does not compile: Accepted=False with InvalidRule naming
// the field, line and column.
TEST(ModificationsCompileTest, InvalidRulesNameFieldLineAndColumn) {
  json bad = Um("erp", "m", "",
                {{"modifications", {{{"rules", "SetHeader x 1\nRegIForbiddenUrl !^/sap/(.* -\n"}}}}});
  CompileResult result = Compile(Objects({StaticLg("erp", "diag"), bad}));
  EXPECT_EQ(result.snapshot.virtual_hosts_size(), 0);
  const Condition* accepted = StatusOf(result, "UrlMapping", "m").Find(kAccepted);
  ASSERT_NE(accepted, nullptr);
  EXPECT_EQ(accepted->status, "False");
  EXPECT_EQ(accepted->reason, kReasonInvalidRule);
  EXPECT_NE(accepted->message.find("spec.modifications[0].rules: line 2, column 19: pattern"),
            std::string::npos)
      << accepted->message;
}

TEST(ModificationsCompileTest, StructuredErrorsNameTheAction) {
  auto message_of = [](json modifications) {
    CompileResult result =
        Compile(Objects({Um("erp", "m", "", {{"modifications", std::move(modifications)}})}));
    return StatusOf(result, "UrlMapping", "m").Find(kAccepted)->message;
  };
  EXPECT_NE(message_of({{{"actions",
                          {{{"op", "SetHeader"}, {"header", "x"}, {"value", "1"}},
                           {{"op", "RegRewriteUrl"}, {"pattern", "^/(a"}, {"replacement", "/"}}}}}})
                .find("spec.modifications[0].actions[1]: pattern"),
            std::string::npos);
  EXPECT_NE(message_of({{{"actions", {{{"op", "SetHeader"}, {"header", "x"},
                                        {"value", "1\nRegForbiddenUrl ^/ -"}}}}}})
                .find("spec.modifications[0].actions[0].value: control characters"),
            std::string::npos);
  EXPECT_NE(message_of({{{"rules", "NOP"}, {"actions", json::array()}}})
                .find("exactly one of rules"),
            std::string::npos);
  EXPECT_NE(message_of({{{"prefix", "sap"}, {"rules", "NOP"}}}).find(".prefix:"),
            std::string::npos);
  EXPECT_NE(message_of({{{"actions", {{{"op", "RegRewriteUrl"}, {"pattern", "^/"},
                                        {"value", "/a"}, {"replacement", "/b"}}}}}})
                .find("exclusive"),
            std::string::npos);
}

}  // namespace
}  // namespace kwd::compile

namespace kwd::compile {
namespace {

// The memo keeps modification verdicts by text: the same statuses and
// snapshot as a compile without it, on the first and on later compiles.
TEST(ModificationsCompileTest, MemoGivesTheSameVerdicts) {
  std::string big;
  for (int i = 0; i < 2000; ++i) {
    big += "RegIRewriteUrl ^/r" + std::to_string(i) + "/(.*) /s/$1\n";
  }
  model::ObjectSet objects = Objects(
      {StaticLg("erp", "diag"),
       Um("erp", "good", "", {{"hosts", {"a.example.com"}}, {"modifications", {{{"rules", big}}}}}),
       Um("erp", "bad", "",
          {{"hosts", {"b.example.com"}},
           {"modifications", {{{"actions", {{{"op", "RegRewriteUrl"}, {"pattern", "^/(x"},
                                              {"replacement", "/y"}}}}}}}})});
  CompileResult plain = Compile(objects);
  CompileMemo memo;
  for (int round = 0; round < 2; ++round) {
    CompileResult memoized = Compile(objects, memo);
    EXPECT_EQ(memoized.statuses, plain.statuses) << "round " << round;
    EXPECT_EQ(SnapshotToJson(memoized.snapshot), SnapshotToJson(plain.snapshot));
  }
  EXPECT_EQ(StatusOf(plain, "UrlMapping", "good").Find(kAccepted)->reason, kReasonAccepted);
  EXPECT_NE(StatusOf(plain, "UrlMapping", "bad")
                .Find(kAccepted)
                ->message.find("spec.modifications[0].actions[0]: pattern \"^/(x\""),
            std::string::npos);
}

}  // namespace
}  // namespace kwd::compile

namespace kwd::compile {
namespace {

// What checking rule files may cost is bounded per file, per UrlMapping and
// per compile (oldest mappings first): a hostile mapping cannot hold up the
// snapshot for everyone. A file past a bound is refused (InvalidRule), the
// ones after it are not even compiled, and the outcome is the same with and
// without the memo.
TEST(ModificationsCompileTest, RegexCostIsBoundedPerMappingAndPerCompile) {
  // A rule file of about 240,000 RE2 instructions (each mapping may take
  // 250,000, a compile 1,000,000).
  auto file_of = [](int seed) {
    std::string one = "RegForbiddenUrl ^/x" + std::to_string(seed) + "[a-z]{1000} -\n";
    modification::ParseError error;
    auto program = modification::Program::CompileText(one, &error);
    EXPECT_NE(program, nullptr) << error.ToString();
    const std::int64_t each = program->regex_instructions();
    std::string text;
    std::int64_t total = 0;
    for (int i = 0; total + each <= 240000; ++i) {
      text += "RegForbiddenUrl ^/x" + std::to_string(seed) + "_" + std::to_string(i) +
              "[a-z]{1000} -\n";
      total += each;
    }
    EXPECT_GT(total, 200000);
    return text;
  };
  // Two such files in one mapping: the second goes past the mapping's bound.
  {
    CompileResult result = Compile(Objects(
        {StaticLg("erp", "diag"),
         Um("erp", "two", "", {{"modifications", {{{"rules", file_of(1)}}, {{"rules", file_of(2)}}}}})}));
    const Condition* accepted = StatusOf(result, "UrlMapping", "two").Find(kAccepted);
    ASSERT_NE(accepted, nullptr);
    EXPECT_EQ(accepted->reason, kReasonInvalidRule);
    EXPECT_NE(accepted->message.find("spec.modifications[1].rules: its patterns"),
              std::string::npos)
        << accepted->message;
    EXPECT_NE(accepted->message.find("one UrlMapping's rule files may take together (250000)"),
              std::string::npos)
        << accepted->message;
  }
  // Six mappings of one such file each: four fit the compile's bound, the
  // fifth goes past it, the sixth is not checked at all.
  std::vector<json> objects = {StaticLg("erp", "diag")};
  for (int i = 0; i < 6; ++i) {
    objects.push_back(Um("erp", "m" + std::to_string(i),
                         "2026-01-01T00:00:0" + std::to_string(i) + "Z",
                         {{"hosts", {"h" + std::to_string(i) + ".example.com"}},
                          {"modifications", {{{"rules", file_of(10 + i)}}}}}));
  }
  model::ObjectSet set = Objects(objects);
  CompileResult plain = Compile(set);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NE(StatusOf(plain, "UrlMapping", "m" + std::to_string(i)).Find(kAccepted)->reason,
              kReasonInvalidRule)
        << i;
  }
  EXPECT_NE(StatusOf(plain, "UrlMapping", "m4")
                .Find(kAccepted)
                ->message.find("all UrlMappings' rule files may take together (1000000"),
            std::string::npos)
      << StatusOf(plain, "UrlMapping", "m4").Find(kAccepted)->message;
  EXPECT_NE(StatusOf(plain, "UrlMapping", "m5")
                .Find(kAccepted)
                ->message.find("spec.modifications[0]: not checked: the UrlMappings compiled "
                               "before it (oldest first)"),
            std::string::npos)
      << StatusOf(plain, "UrlMapping", "m5").Find(kAccepted)->message;
  CompileMemo memo;
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(Compile(set, memo).statuses, plain.statuses) << "round " << round;
  }
}

}  // namespace
}  // namespace kwd::compile
