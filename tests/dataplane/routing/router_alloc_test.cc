// Counts global operator new calls across Router::Route: steady-state
// decisions, sticky and balanced, must not allocate.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "dataplane/routing/router.h"
#include "dataplane/routing/routing_table.h"
#include "tests/dataplane/routing/test_snapshot.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocations{0};
}  // namespace

void* operator new(size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) {
    throw std::bad_alloc();
  }
  return p;
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace kwd::routing {
namespace {

TEST(RouterAllocationTest, SteadyStateDecisionsDoNotAllocate) {
  session::SessionRegistry sessions;
  ServerHealthRegistry health;
  std::string error;
  auto table = RoutingTable::Build(testing::StandardSnapshot(), {&sessions, &health}, &error);
  ASSERT_NE(table, nullptr) << error;
  auto codec = std::make_shared<session::AffinityCookieCodec>("alloc-key");
  Router router(codec, std::make_shared<ManualClock>(5000));
  router.Apply(table);

  const std::string affinity = "kwd_affinity=" + codec->Encode("erp/diag", "app2");
  struct Case {
    const char* name;
    std::string target;
    std::string cookie;
    Reason reason;
  };
  const std::vector<Case> cases = {
      {"balanced", "/sap/bc/bsp/x?a=1", "", Reason::kBalance},
      {"contextid cookie", "/sap/bc/x", "sap-contextid=SID%3aANON%3aapp2%3aX-NEW",
       Reason::kStickyContextId},
      {"saplb", "/sap/bc/x", "saplb_diag=(app2)n", Reason::kStickySaplb},
      {"jsessionid table", "/irj/portal", "JSESSIONID=learned-1", Reason::kStickyJSessionId},
      {"sap-ext-sid table", "/sap/;sap-ext-sid=ext-1/x", "", Reason::kStickySapExtSid},
      {"affinity cookie", "/sap/bc/x", affinity, Reason::kStickyAffinityCookie},
      {"denied", "/sap/bc/x.cgi", "", Reason::kDenied},
      {"bracket", "/sap(bD1lbiZjPTAwMQ==)/bc/x", "", Reason::kBalance},
  };
  // Warm up: records the table sessions (allocates once per new session).
  Decision learn = router.Route(Request{"GET", "/irj/portal", "h", false, {}});
  router.LearnJSessionId(learn, "learned-1");
  router.Complete(learn);
  for (const Case& c : cases) {
    std::string_view cookie = c.cookie;
    std::span<const std::string_view> cookies(&cookie, c.cookie.empty() ? 0 : 1);
    router.Complete(router.Route(Request{"GET", c.target, "erp.example.org", false, cookies}));
  }

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string_view cookie = c.cookie;
    std::span<const std::string_view> cookies(&cookie, c.cookie.empty() ? 0 : 1);
    Request request{"GET", c.target, "erp.example.org", false, cookies};
    g_allocations = 0;
    g_counting = true;
    Reason reason = Reason::kNoServer;
    for (int i = 0; i < 100; ++i) {
      Decision d = router.Route(request);
      reason = d.reason;
      router.Complete(d);
    }
    g_counting = false;
    EXPECT_EQ(reason, c.reason);
    EXPECT_EQ(g_allocations.load(), 0u);
  }
}

// Modification rules on the host: a request outside their prefix pays
// nothing (no allocation); one the rules rewrite, after the first, neither
// (the router's states keep their storage).
TEST(RouterAllocationTest, ModificationRulesAllocateNothingInSteadyState) {
  v1::Snapshot snapshot = testing::StandardSnapshot();
  v1::Modification* modification = snapshot.mutable_virtual_hosts(0)->add_modifications();
  modification->set_prefix("/legacy/");
  modification->set_rules("RegIRewriteUrl ^/legacy/(.*) /sap/bc/$1 [break]\n");
  modification->set_source("erp/m");
  StampSnapshotVersion(&snapshot);
  session::SessionRegistry sessions;
  ServerHealthRegistry health;
  std::string error;
  auto table = RoutingTable::Build(snapshot, {&sessions, &health}, &error);
  ASSERT_NE(table, nullptr) << error;
  Router router(std::make_shared<session::AffinityCookieCodec>("alloc-key"),
                std::make_shared<ManualClock>(5000));
  router.Apply(table);
  for (const char* target : {"/sap/bc/x?a=1", "/legacy/x?a=1"}) {
    SCOPED_TRACE(target);
    Request request{"GET", target, "erp.example.org", false, {}};
    router.Complete(router.Route(request));  // warm up
    g_allocations = 0;
    g_counting = true;
    Decision d;
    for (int i = 0; i < 100; ++i) {
      d = router.Route(request);
      router.Complete(d);
    }
    g_counting = false;
    EXPECT_EQ(d.reason, Reason::kBalance);
    EXPECT_EQ(d.path, "/sap/bc/x");
    EXPECT_EQ(d.modified, std::string_view(target).starts_with("/legacy/"));
    EXPECT_EQ(g_allocations.load(), 0u);
  }
}

}  // namespace
}  // namespace kwd::routing
