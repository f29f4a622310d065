// From the YAML a user would `kubectl apply` to the decision the proxy makes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/snapshot_io.h"
#include "controller/compile/compile.h"
#include "controller/source/dir_source.h"
#include "dataplane/routing/clock.h"
#include "dataplane/routing/router.h"

namespace kwd {
namespace {

class Pipeline {
 public:
  explicit Pipeline(const std::string& yaml) { Load({yaml}); }

  void Load(const std::vector<std::string>& documents) {
    source::LoadResult loaded;
    for (size_t i = 0; i < documents.size(); ++i) {
      source::LoadYamlText(documents[i], "doc" + std::to_string(i) + ".yaml", &loaded);
    }
    for (const auto& p : loaded.problems) {
      ADD_FAILURE() << p.ToString();
    }
    result_ = std::make_unique<compile::CompileResult>(compile::Compile(loaded.objects));
    std::string error;
    table_ = routing::RoutingTable::Build(result_->snapshot, {&sessions_, &health_}, &error);
    ASSERT_NE(table_, nullptr) << error;
    router_.Apply(table_);
  }

  // One request, completed before the next (like `kwd-proxy explain`).
  routing::Decision Route(std::string_view target, std::vector<std::string> cookies = {},
                          std::string_view host = "erp.example.com", bool https = false) {
    cookies_ = std::move(cookies);
    views_.assign(cookies_.begin(), cookies_.end());
    routing::Request request;
    request.method = "GET";
    request.target = target;
    request.host = host;
    request.https = https;
    request.cookie_headers = views_;
    routing::Decision d = router_.Route(request);
    router_.Complete(d);
    return d;
  }

  std::string ServerOf(std::string_view target, std::vector<std::string> cookies = {}) {
    routing::Decision d = Route(target, std::move(cookies));
    return d.server != nullptr ? d.server->name : "-";
  }

  const compile::CompileResult& result() const { return *result_; }
  routing::ServerHealthRegistry& health() { return health_; }
  routing::Router& router() { return router_; }
  routing::ManualClock& clock() { return *clock_; }

 private:
  session::SessionRegistry sessions_;
  routing::ServerHealthRegistry health_;
  std::shared_ptr<routing::ManualClock> clock_ = std::make_shared<routing::ManualClock>(1000);
  routing::Router router_{std::make_shared<session::AffinityCookieCodec>("feature-test-key"),
                          clock_};
  std::unique_ptr<compile::CompileResult> result_;
  std::shared_ptr<const routing::RoutingTable> table_;
  std::vector<std::string> cookies_;
  std::vector<std::string_view> views_;
};

std::string Group(const std::string& name, const std::string& strategy, const std::string& servers,
                  const std::string& kind = "abap") {
  return "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: " + name +
         ", namespace: erp}\nspec:\n  kind: " + kind + "\n  strategy: " + strategy +
         "\n  backend:\n    staticServers:\n" + servers;
}

const char kMapping[] = R"(
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: erp, namespace: erp}
spec:
  defaultRootHandler: java
  defaultGroups: {abap: public, java: public}
  rules:
    - {prefix: /sap/, kind: abap, logonGroup: public}
)";

std::string Sequence(Pipeline& p, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += p.ServerOf("/sap/bc/x");
  }
  return out;
}

TEST(RoutingFeatureTest, SeedWeightedRoundRobinGivesAABAAB) {
  Pipeline p(Group("public", "weighted_round_robin",
                   "      - {name: A, address: 10.0.0.1, port: 8000, capacity: 6}\n"
                   "      - {name: B, address: 10.0.0.2, port: 8000, capacity: 3}\n") +
             "\n---\n" + kMapping);
  EXPECT_EQ(Sequence(p, 12), "AABAABAABAAB");
}

TEST(RoutingFeatureTest, SeedSimpleWeightedRoundRobinGivesSixAThenThreeB) {
  Pipeline p(Group("public", "simple_weighted_round_robin",
                   "      - {name: A, address: 10.0.0.1, port: 8000, capacity: 6}\n"
                   "      - {name: B, address: 10.0.0.2, port: 8000, capacity: 3}\n") +
             "\n---\n" + kMapping);
  EXPECT_EQ(Sequence(p, 18), "AAAAAABBBAAAAAABBB");
}

TEST(RoutingFeatureTest, Seed002UrlMappingTable) {
  // examples/seed-002: SAP's "Determining the Server Group" example.
  source::LoadResult loaded =
      source::LoadDirectory(std::string(KWD_SOURCE_DIR) + "/examples/seed-002");
  ASSERT_FALSE(loaded.has_errors());
  compile::CompileResult result = compile::Compile(loaded.objects);
  session::SessionRegistry sessions;
  routing::ServerHealthRegistry health;
  std::string error;
  auto table = routing::RoutingTable::Build(result.snapshot, {&sessions, &health}, &error);
  ASSERT_NE(table, nullptr) << error;
  routing::Router router(std::make_shared<session::AffinityCookieCodec>("k"),
                         std::make_shared<routing::ManualClock>(0));
  router.Apply(table);
  struct Case {
    const char* target;
    const char* kind;
    const char* group;
    const char* rule;
  };
  const Case cases[] = {
      {"/index.html", "java", "default/j2ee", "root"},
      {"/", "java", "default/j2ee", "root"},
      {"/sap/bc/contentserver/doc", "abap", "default/diag", "/sap/bc/contentserver/"},
      {"/sap/public/formgraphics/x.gif", "abap", "default/diag", "/sap/public/formgraphics/"},
      {"/sap/public/other/x", "abap", "default/diag", "/sap/"},
      {"/logon/page.htm", "abap", "default/diag", "/logon/"},
      {"/echo/x", "abap", "default/diag", "/echo/"},
      {"/its/webgui", "abap", "default/diag", "/its/"},
      {"/sap/bc/bsp/sap/it00/default.htm", "abap", "default/diag", "/sap/"},
      {"/A/B/page.htm", "java", "default/j2ee", "default"},
      {"/sapx/y", "java", "default/j2ee", "default"},
      {"/irj/portal", "java", "default/j2ee", "default"},
      {"/sap(bD1lbiZjPTAwMQ==)/bc/bsp/x", "abap", "default/diag", "/sap/"},
  };
  for (const auto& c : cases) {
    routing::Request request;
    request.method = "GET";
    request.target = c.target;
    request.host = "saphost:8080";
    routing::Decision d = router.Route(request);
    router.Complete(d);
    ASSERT_NE(d.group, nullptr) << c.target;
    EXPECT_EQ(d.group->key, c.group) << c.target;
    EXPECT_EQ(d.kind == v1::KIND_ABAP ? "abap" : "java", std::string(c.kind)) << c.target;
    EXPECT_EQ(d.rule, c.rule) << c.target;
    EXPECT_NE(d.server, nullptr) << c.target;
  }
}

TEST(RoutingFeatureTest, EndpointSlicesAndPodAnnotationsBecomeStickyTargets) {
  Pipeline p(R"(
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: public, namespace: erp}
spec:
  kind: abap
  backend:
    service: {name: erp-abap, port: http}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: erp-abap-1
  namespace: erp
  labels: {kubernetes.io/service-name: erp-abap}
addressType: IPv4
endpoints:
  - addresses: [10.244.1.7]
    conditions: {ready: true}
    targetRef: {kind: Pod, namespace: erp, name: erp-abap-0}
  - addresses: [10.244.2.9]
    conditions: {ready: false, serving: true, terminating: true}
    targetRef: {kind: Pod, namespace: erp, name: erp-abap-1}
ports: [{name: http, port: 8000, protocol: TCP}]
---
apiVersion: v1
kind: Pod
metadata:
  name: erp-abap-0
  namespace: erp
  annotations: {dispatch.kwd.io/instance-name: erp1_ERP_00, dispatch.kwd.io/capacity: "4"}
---
apiVersion: v1
kind: Pod
metadata:
  name: erp-abap-1
  namespace: erp
  annotations: {dispatch.kwd.io/instance-name: erp2_ERP_01}
)" + std::string("\n---\n") +
             kMapping);
  // New sessions go only to the ready server; the terminating one drains.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(p.ServerOf("/sap/bc/x"), "erp1_ERP_00");
  }
  // A session on the draining instance keeps it (sap-contextid names it).
  routing::Decision d = p.Route("/sap/bc/x", {"sap-contextid=SID%3aANON%3aerp2_ERP_01%3aabc-NEW"});
  ASSERT_NE(d.server, nullptr);
  EXPECT_EQ(d.server->name, "erp2_ERP_01");
  EXPECT_EQ(d.reason, routing::Reason::kStickyContextId);
  EXPECT_EQ(d.server->address, "10.244.2.9");
  EXPECT_EQ(d.server->port, 8000u);
}

TEST(RoutingFeatureTest, StickyServerThatGoesDownIsLostAndRebalanced) {
  Pipeline p(Group("public", "weighted_round_robin",
                   "      - {name: A, address: 10.0.0.1, port: 8000}\n"
                   "      - {name: B, address: 10.0.0.2, port: 8000}\n") +
             "\n---\n" + kMapping);
  std::vector<std::string> cookie{"saplb_*=(B)1234; sap-contextid=SID%3aANON%3aB%3ax"};
  EXPECT_EQ(p.ServerOf("/sap/bc/x", cookie), "B");
  p.health().Find("erp/public", "B")->healthy = false;
  routing::Decision d = p.Route("/sap/bc/x", cookie);
  ASSERT_NE(d.server, nullptr);
  EXPECT_EQ(d.server->name, "A");
  EXPECT_EQ(d.reason, routing::Reason::kBalance);
  EXPECT_EQ(d.lost, routing::Identifier::kSapContextId);
}

TEST(RoutingFeatureTest, SapExtSidAndAffinityCookieAcrossAConfigChange) {
  std::string servers =
      "      - {name: A, address: 10.0.0.1, port: 8000}\n"
      "      - {name: B, address: 10.0.0.2, port: 8000}\n";
  Pipeline p(Group("public", "weighted_round_robin", servers) + "\n---\n" + kMapping);
  routing::Decision first = p.Route("/sap/;sap-ext-sid=PORTAL-1/bc/x");
  ASSERT_NE(first.server, nullptr);
  EXPECT_TRUE(first.set_affinity_cookie);
  std::string server = first.server->name;
  std::string cookie = p.router().AffinityCookieHeader(first, false);
  cookie = cookie.substr(0, cookie.find(';'));
  // A new snapshot (a third server) keeps the session table and the cookie valid.
  p.Load({Group("public", "weighted_round_robin",
                servers + "      - {name: C, address: 10.0.0.3, port: 8000}\n"),
          kMapping});
  for (int i = 0; i < 6; ++i) {
    routing::Decision d = p.Route("/sap/;sap-ext-sid=PORTAL-1/bc/y");
    ASSERT_NE(d.server, nullptr);
    EXPECT_EQ(d.server->name, server);
    EXPECT_EQ(d.reason, routing::Reason::kStickySapExtSid);
    routing::Decision by_cookie = p.Route("/sap/bc/z", {cookie});
    ASSERT_NE(by_cookie.server, nullptr);
    EXPECT_EQ(by_cookie.server->name, server);
    EXPECT_EQ(by_cookie.reason, routing::Reason::kStickyAffinityCookie);
  }
}

TEST(RoutingFeatureTest, PermissionsConflictsAndDanglingGroupsStillServeTheRest) {
  Pipeline p(Group("public", "weighted_round_robin",
                   "      - {name: A, address: 10.0.0.1, port: 8000}\n") +
             R"(
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: erp, namespace: erp, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  defaultGroups: {abap: public, java: public}
  rules:
    - {prefix: /sap/, kind: abap, logonGroup: public}
    - {prefix: /ghost/, kind: abap, logonGroup: nosuchgroup}
  permissions:
    - {action: permit, pattern: /sap/bc/public/*}
    - {action: deny, pattern: "*.cgi"}
    - {action: secure, pattern: /sap/bc/gui/*}
    - {action: deny, pattern: /sap/bc/admin/*}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: newer, namespace: erp, creationTimestamp: "2026-06-01T00:00:00Z"}
spec:
  rules:
    - {prefix: /sap/, kind: java, logonGroup: public}
    - {prefix: /other/, kind: abap, logonGroup: public}
)");
  EXPECT_EQ(p.Route("/sap/bc/public/run.cgi").status, 0);  // first match: permit
  EXPECT_EQ(p.Route("/sap/bc/run.cgi").status, 403);
  EXPECT_EQ(p.Route("/sap/bc/gui/x").status, 403);
  EXPECT_EQ(p.Route("/sap/bc/gui/x", {}, "erp.example.com", /*https=*/true).status, 0);
  // Case and dot segments do not get around a deny.
  EXPECT_EQ(p.Route("/SAP/BC/ADMIN/x").status, 403);
  EXPECT_EQ(p.Route("/sap/bc/public/../admin/x").status, 403);
  // The dangling rule answers 503; the conflicting newer rule lost to the older.
  EXPECT_EQ(p.Route("/ghost/x").status, 503);
  EXPECT_EQ(p.Route("/sap/x").kind, v1::KIND_ABAP);
  EXPECT_EQ(p.Route("/other/x").rule, "/other/");
  bool conflicted = false;
  bool unresolved = false;
  for (const auto& status : p.result().statuses) {
    const auto* accepted = status.Find(compile::kAccepted);
    const auto* refs = status.Find(compile::kResolvedRefs);
    if (status.name == "newer" && accepted != nullptr) {
      conflicted = accepted->status == "False" && accepted->reason == "Conflicted";
    }
    if (status.name == "erp" && refs != nullptr) {
      unresolved = refs->status == "False" && refs->reason == "LogonGroupNotFound";
    }
  }
  EXPECT_TRUE(conflicted);
  EXPECT_TRUE(unresolved);
}

// Issue 24 item 3 from the YAML a user writes: the secure entry that matched
// decides with its own mapping's secureAction (two mappings share a host's
// permission table); HSTS follows the rule's mapping, the root URL and the
// default group the mapping that set the host's defaults.
TEST(RoutingFeatureTest, SecureActionOfTheMatchedEntryAndHstsOfTheRoutingMapping) {
  Pipeline p(Group("public", "weighted_round_robin",
                   "      - {name: A, address: 10.0.0.1, port: 8000}\n") +
             R"(
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: erp, namespace: erp, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  hosts: [erp.example.com]
  defaultRootHandler: abap
  defaultGroups: {abap: public, java: public}
  secureAction: redirect
  hsts: {maxAgeSeconds: 600}
  rules:
    - {prefix: /sap/, kind: abap, logonGroup: public}
  permissions:
    - {action: secure, pattern: /sap/bc/gui/*}
    - {action: secure, pattern: /irj/portal/*}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: portal, namespace: erp, creationTimestamp: "2026-06-01T00:00:00Z"}
spec:
  hosts: [erp.example.com]
  hsts: {maxAgeSeconds: 31536000, includeSubDomains: true}
  rules:
    - {prefix: /irj/, kind: java, logonGroup: public}
  permissions:
    - {action: secure, pattern: /irj/*}
    - {action: secure, pattern: /sap/bc/webdynpro/*}
)");
  p.router().set_https_port(443);
  routing::Decision d = p.Route("/sap/bc/gui/x?a=%41");
  EXPECT_EQ(d.status, 301);
  EXPECT_EQ(d.location, "https://erp.example.com/sap/bc/gui/x?a=%41");
  // erp's entry matches first (its table comes first): redirect, though the
  // rule that routes /irj/ is portal's.
  EXPECT_EQ(p.Route("/irj/portal/x").status, 301);
  // portal's entries: forbid (its default), also for a path erp routes.
  EXPECT_EQ(p.Route("/irj/other").status, 403);
  EXPECT_EQ(p.Route("/sap/bc/webdynpro/x").status, 403);
  // HSTS: the routing rule's mapping; root and default group: erp's.
  EXPECT_EQ(p.Route("/sap/x", {}, "erp.example.com", true).hsts, "max-age=600");
  EXPECT_EQ(p.Route("/irj/x", {}, "erp.example.com", true).hsts,
            "max-age=31536000; includeSubDomains");
  EXPECT_EQ(p.Route("/", {}, "erp.example.com", true).hsts, "max-age=600");
  EXPECT_EQ(p.Route("/nothing/x", {}, "erp.example.com", true).hsts, "max-age=600");
  bool conflicted = false;
  for (const auto& status : p.result().statuses) {
    const auto* accepted = status.Find(compile::kAccepted);
    if (status.name == "portal" && accepted != nullptr) {
      conflicted = accepted->reason == "Conflicted" &&
                   accepted->message.find("spec.hsts ignored for the root rule") !=
                       std::string::npos;
    }
  }
  EXPECT_TRUE(conflicted);
}

// Issue 10 item 1 from the YAML a user writes: the permissions hold against
// every spelling that some backend reads as a denied path.
TEST(RoutingFeatureTest, PermissionsHoldAgainstPathTricks) {
  Pipeline p(Group("public", "weighted_round_robin",
                   "      - {name: A, address: 10.0.0.1, port: 8000}\n") +
             R"(
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: erp, namespace: erp}
spec:
  defaultGroups: {abap: public, java: public}
  rules:
    - {prefix: /sap/, kind: abap, logonGroup: public}
  permissions:
    - {action: permit, pattern: /sap/bc/public/*}
    - {action: deny, pattern: /sap/admin/*}
    - {action: secure, pattern: /sap/bc/gui/*}
)");
  for (const char* target : {
           "/sap/admin/q(/a)/../../x",
           "/sap/admin/q(%2Fa)/../x",
           "/sap/admin//../x",
           "/sap/admin/.%2E/admin/x",
           "/sap/admin/..;/admin/x",
           "/sap/bc/public/x/..%2F..%2F..%2Fadmin/x",  // permit to us, /sap/admin/x decoded
           "/sap/bc/public/..%5C..%5Cadmin/x",
           "/sap/bc/gui/q(/a)/../../x",
           "/sap/bc/gui//../x",
       }) {
    SCOPED_TRACE(target);
    routing::Decision d = p.Route(target);
    EXPECT_TRUE(d.status == 403 || d.status == 400) << d.status;
    EXPECT_EQ(d.server, nullptr);
  }
  EXPECT_EQ(p.Route("/sap/bc/public/q(/a)/../../x").status, 0);  // /sap/bc/public/x
  EXPECT_EQ(p.Route("/sap/admin/../bc/x").status, 0);            // /sap/bc/x
}

}  // namespace
}  // namespace kwd
